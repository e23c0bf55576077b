//! Where a moving pod's required pod affinity lets it go, for the room check before a
//! simulation ([`super::room`]): a pod that must share a zone (or any other domain) with the
//! pods a term selects can only land on a node of a domain where such a pod runs. On a packed
//! cluster a zonal self-affinity group's pod often fits by CPU and memory only in the other
//! zones, which the simulation then refuses after tens of milliseconds.
//!
//! Like every room check it must stay a relaxation of the simulation: a node is kept off only
//! when no placement of the trial could make its domain hold a selected pod. So a term is left
//! out (keeps the pod off nothing) whenever its selected pods could land somewhere new in the
//! trial: one is pending, or on a node on its way out, or on the candidate without the same
//! term; or when no pod it selects runs elsewhere (the first pod of a group goes anywhere); or
//! when the candidate alone gives one of the domains. Nodes without the key, and the domains
//! of pods being deleted, are kept open.

use std::collections::{HashMap, HashSet};

use crate::pod::{Node, Pod};
use crate::scheduling::affinity::Scope;
use crate::snapshot::Snapshot;

/// One required affinity term: its scope and topology key.
type Term = (Scope, String);

/// What a term's selected pods say about where it lets a pod go (see the module).
#[derive(Debug)]
struct Domains {
    /// The keyed nodes of every other domain, which a pod with the term cannot move to;
    /// `None`: the term keeps the pod off nothing.
    off: Option<HashSet<String>>,
    /// Nodes that alone give a domain its selected pods: without one of them as the
    /// candidate, that domain is open no more.
    sole: HashSet<String>,
    /// Nodes running a selected pod: a candidate's selected pods must all carry the term.
    hosts: HashSet<String>,
}

/// Per required pod-affinity term, the working nodes a pod with it cannot move to. Worked
/// out when a candidate's pod first needs a term, and forgotten whenever a decision moves
/// pods (as [`super::room::Apart`]).
#[derive(Debug, Default)]
pub struct Together {
    terms: HashMap<Term, Domains>,
}

impl Together {
    /// Forgets every term: pods moved.
    pub fn clear(&mut self) {
        self.terms.clear();
    }

    /// The required affinity terms of `pod` ([`super::room::required_terms`]).
    fn terms(pod: &Pod) -> impl Iterator<Item = Term> + '_ {
        super::room::required_terms(pod, false)
    }

    /// Works out, on `snapshot`, each term of `pods` not known yet.
    pub fn learn<'p>(&mut self, snapshot: &Snapshot, pods: impl IntoIterator<Item = &'p Pod>) {
        let missing: HashSet<Term> = pods
            .into_iter()
            .flat_map(Self::terms)
            .filter(|t| !self.terms.contains_key(t))
            .collect();
        if missing.is_empty() {
            return;
        }
        let nodes: HashMap<&str, &Node> = snapshot
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n))
            .collect();
        for term in missing {
            let domains = Self::domains(snapshot, &nodes, &term);
            self.terms.insert(term, domains);
        }
    }

    fn domains(snapshot: &Snapshot, nodes: &HashMap<&str, &Node>, term: &Term) -> Domains {
        let (scope, key) = term;
        let mut hosts: HashMap<&str, HashSet<&str>> = HashMap::new();
        let mut open_anyway: HashSet<&str> = HashSet::new();
        let mut unsettled = false;
        for p in snapshot.pods.iter().filter(|p| scope.matches(p)) {
            let node = p.node_name.as_deref().and_then(|n| nodes.get(n));
            let Some(node) = node else {
                // Pending, or bound to a node the cluster does not show: it may go anywhere.
                unsettled = true;
                break;
            };
            if node.unschedulable || node.life.deleting {
                unsettled = true;
                break;
            }
            let Some(value) = node.labels.get(key) else {
                continue;
            };
            if p.disruption.terminating {
                open_anyway.insert(value);
            } else {
                hosts.entry(value).or_default().insert(node.name.as_str());
            }
        }
        let all_hosts: HashSet<String> = hosts
            .values()
            .flat_map(|h| h.iter().map(|n| n.to_string()))
            .collect();
        if unsettled || hosts.is_empty() {
            return Domains {
                off: None,
                sole: HashSet::new(),
                hosts: all_hosts,
            };
        }
        let sole = hosts
            .values()
            .filter(|h| h.len() == 1)
            .flat_map(|h| h.iter().map(|n| n.to_string()))
            .collect();
        let off = snapshot
            .nodes
            .iter()
            .filter(|n| {
                n.labels.get(key).is_some_and(|v| {
                    !hosts.contains_key(v.as_str()) && !open_anyway.contains(v.as_str())
                })
            })
            .map(|n| n.name.clone())
            .collect();
        Domains {
            off: Some(off),
            sole,
            hosts: all_hosts,
        }
    }

    /// The nodes `pod`'s required affinity keeps it off when it leaves node `candidate`
    /// with `moving` (the candidate's pods that move), one set per term [`learn`]ed that
    /// keeps it off any.
    ///
    /// [`learn`]: Together::learn
    pub fn not_on<'a>(
        &'a self,
        pod: &Pod,
        candidate: &str,
        moving: &[&Pod],
    ) -> Vec<&'a HashSet<String>> {
        Self::terms(pod)
            .filter_map(|t| {
                let d = self.terms.get(&t)?;
                let off = d.off.as_ref()?;
                if d.sole.contains(candidate) {
                    return None;
                }
                // A selected pod of the candidate without the term may land anywhere and
                // open a new domain.
                let loose = d.hosts.contains(candidate)
                    && moving
                        .iter()
                        .any(|m| t.0.matches(m) && !Self::terms(m).any(|mt| mt == t));
                (!loose).then_some(off)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::PodAffinityTerm;
    use crate::requirements::{Requirement, Requirements};
    use crate::resources::Resources;

    fn node(name: &str, zone: Option<&str>) -> Node {
        let mut n = Node {
            name: name.into(),
            allocatable: Resources::new(4000, 4000, 0, 110),
            ..Node::default()
        };
        if let Some(z) = zone {
            n.labels.insert(crate::labels::ZONE.into(), z.into());
        }
        n.life.initialized = true;
        n
    }

    /// A pod of app `app` on `on`, with a required zone affinity to app `to` when given.
    fn pod(name: &str, app: &str, on: Option<&str>, to: Option<&str>) -> Pod {
        let mut p = Pod {
            namespace: "ns".into(),
            name: name.into(),
            node_name: on.map(str::to_string),
            requests: Resources::new(100, 100, 0, 1),
            ..Pod::default()
        };
        p.labels.insert("app".into(), app.into());
        if let Some(to) = to {
            let mut selector = Requirements::new();
            selector.add("app", Requirement::single(to));
            p.affinity.push(PodAffinityTerm {
                topology_key: crate::labels::ZONE.into(),
                selector,
                namespaces: Vec::new(),
                namespace_selector: None,
                anti: false,
                weight: None,
            });
        }
        p
    }

    /// Zones a (nodes a1, a2), b (b1), c (c1); d1 lacks the zone. The group "db" runs on
    /// a1, a2 and the candidate (zone a); "cache" on c1.
    fn cluster() -> Snapshot {
        Snapshot {
            nodes: vec![
                node("candidate", Some("a")),
                node("a1", Some("a")),
                node("a2", Some("a")),
                node("b1", Some("b")),
                node("c1", Some("c")),
                node("d1", None),
            ],
            pods: vec![
                pod("db-0", "db", Some("candidate"), Some("db")),
                pod("db-1", "db", Some("a1"), Some("db")),
                pod("db-2", "db", Some("a2"), Some("db")),
                pod("cache-0", "cache", Some("c1"), None),
            ],
            ..Snapshot::default()
        }
    }

    fn off_names(t: &Together, s: &Snapshot, pod: usize, moving: &[usize]) -> Vec<Vec<String>> {
        let moving: Vec<&Pod> = moving.iter().map(|&i| &s.pods[i]).collect();
        t.not_on(&s.pods[pod], "candidate", &moving)
            .into_iter()
            .map(|set| {
                let mut v: Vec<String> = set.iter().cloned().collect();
                v.sort();
                v
            })
            .collect()
    }

    #[test]
    fn a_pod_bound_to_its_group_s_zone_is_kept_off_the_other_zones_nodes() {
        let s = cluster();
        let mut t = Together::default();
        t.learn(&s, [&s.pods[0]]);
        // Off b1 and c1; the candidate's own zone stays open, and d1 has no zone.
        assert_eq!(off_names(&t, &s, 0, &[0]), [["b1", "c1"]]);
    }

    #[test]
    fn a_term_whose_pods_may_land_anywhere_keeps_the_pod_off_nothing() {
        // A selected pod pending: it may open any zone.
        let mut s = cluster();
        s.pods.push(pod("db-3", "db", None, None));
        let mut t = Together::default();
        t.learn(&s, [&s.pods[0]]);
        assert!(off_names(&t, &s, 0, &[0]).is_empty());
        // One on a cordoned node: it moves in the trial too.
        let mut s = cluster();
        s.nodes[1].unschedulable = true;
        let mut t = Together::default();
        t.learn(&s, [&s.pods[0]]);
        assert!(off_names(&t, &s, 0, &[0]).is_empty());
        // One moving with the candidate without the term.
        let mut s = cluster();
        s.pods.push(pod("db-free", "db", Some("candidate"), None));
        let mut t = Together::default();
        t.learn(&s, [&s.pods[0]]);
        assert!(off_names(&t, &s, 0, &[0, 4]).is_empty());
        assert_eq!(off_names(&t, &s, 0, &[0]).len(), 1, "it was the free pod");
    }

    #[test]
    fn the_first_pod_of_a_group_or_one_whose_zone_only_the_candidate_gives_goes_anywhere() {
        // Only the candidate runs "db": nothing elsewhere to join.
        let mut s = cluster();
        s.pods.truncate(1);
        let mut t = Together::default();
        t.learn(&s, [&s.pods[0]]);
        assert!(off_names(&t, &s, 0, &[0]).is_empty());
        // A pod joining "cache", which only the candidate runs in zone a besides c1: zone a
        // is the candidate's alone, so leaving it changes the domains; the term is skipped.
        let mut s = cluster();
        s.pods[3].node_name = Some("candidate".into());
        s.pods.push(pod("cache-1", "cache", Some("c1"), None));
        s.pods
            .push(pod("web", "web", Some("candidate"), Some("cache")));
        let mut t = Together::default();
        t.learn(&s, [&s.pods[5]]);
        assert!(off_names(&t, &s, 5, &[5]).is_empty());
        // With cache-0 on a1 instead, zones a and c both have hosts besides the candidate:
        // the pod is kept off b1.
        s.pods[3].node_name = Some("a1".into());
        let mut t = Together::default();
        t.learn(&s, [&s.pods[5]]);
        assert_eq!(off_names(&t, &s, 5, &[5]), [["b1"]]);
    }

    #[test]
    fn a_deleted_pod_s_zone_stays_open_and_forgotten_terms_are_learnt_again() {
        let mut s = cluster();
        s.pods.push(pod("db-gone", "db", Some("b1"), None));
        s.pods[4].disruption.terminating = true;
        let mut t = Together::default();
        t.learn(&s, [&s.pods[0]]);
        assert_eq!(off_names(&t, &s, 0, &[0]), [["c1"]]);
        // The pod moved to c1: until forgotten, the old answer stands.
        s.pods[1].node_name = Some("c1".into());
        s.pods[2].node_name = Some("c1".into());
        t.learn(&s, [&s.pods[0]]);
        assert_eq!(off_names(&t, &s, 0, &[0]), [["c1"]]);
        // Learnt again: zone a is the candidate's alone now, so leaving it changes the
        // domains, and the term keeps the pod off nothing.
        t.clear();
        t.learn(&s, [&s.pods[0]]);
        assert!(off_names(&t, &s, 0, &[0]).is_empty());
    }
}
