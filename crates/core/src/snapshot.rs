//! The state a scheduling pass starts from.

use std::collections::{BTreeMap, BTreeSet};

use crate::pod::{DaemonSet, Node, Pod};
use crate::provisioner::Provisioner;

/// Everything the simulation reads about the cluster: pods (pending ones have no node name,
/// running ones name their node), nodes, DaemonSets and Provisioners.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// All pods, pending and running.
    pub pods: Vec<Pod>,
    /// Existing and in-flight nodes.
    pub nodes: Vec<Node>,
    /// DaemonSets whose pods land on every eligible new node.
    pub daemonsets: Vec<DaemonSet>,
    /// Provisioners; when empty the simulation uses [`Provisioner::default_provisioner`].
    pub provisioners: Vec<Provisioner>,
    /// Labels of the namespaces known (from Namespace objects), for `namespaceSelector`s;
    /// every namespace also carries `kubernetes.io/metadata.name` with its name.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// PodDisruptionBudgets (disruption reads them; scheduling does not).
    pub pdbs: Vec<crate::disruption::Pdb>,
}

/// The label Kubernetes puts on every namespace, holding its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

impl Snapshot {
    /// The same cluster with other pods (a pass over hardened or moved pods): everything but
    /// the pods is copied, the pods are not copied twice.
    pub fn with_pods(&self, pods: Vec<Pod>) -> Snapshot {
        Snapshot {
            pods,
            nodes: self.nodes.clone(),
            daemonsets: self.daemonsets.clone(),
            provisioners: self.provisioners.clone(),
            namespace_labels: self.namespace_labels.clone(),
            pdbs: self.pdbs.clone(),
        }
    }

    /// Turns each pod (anti-)affinity term's `namespaceSelector` into namespace names: the
    /// namespaces of the snapshot's pods (the only ones a term can find pods in) whose labels
    /// it selects, added to the term's `namespaces`. A selector that selects none leaves a
    /// term that finds no pod, as in the kube-scheduler, not one about the pod's own namespace.
    ///
    /// Then joins each pod's required pod-affinity terms ([`join_required_affinity`]), which
    /// needs the namespaces named.
    pub fn resolve_namespace_selectors(&mut self) {
        self.select_namespaces();
        for pod in &mut self.pods {
            join_required_affinity(pod);
        }
    }

    fn select_namespaces(&mut self) {
        if !self
            .pods
            .iter()
            .any(|p| p.affinity.iter().any(|a| a.namespace_selector.is_some()))
        {
            return;
        }
        let known: BTreeSet<String> = self.pods.iter().map(|p| p.namespace.clone()).collect();
        let labels_of = |ns: &str| {
            let mut l = self.namespace_labels.get(ns).cloned().unwrap_or_default();
            l.insert(NAMESPACE_NAME_LABEL.to_string(), ns.to_string());
            l
        };
        let labels: Vec<(String, BTreeMap<String, String>)> =
            known.iter().map(|ns| (ns.clone(), labels_of(ns))).collect();
        for pod in &mut self.pods {
            for term in &mut pod.affinity {
                let Some(selector) = term.namespace_selector.take() else {
                    continue;
                };
                for (ns, l) in &labels {
                    if selector.matches_labels(l) && !term.namespaces.contains(ns) {
                        term.namespaces.push(ns.clone());
                    }
                }
                if term.namespaces.is_empty() {
                    // No namespace is selected: a name no namespace can have (namespace names
                    // are never empty) keeps the term from meaning "the pod's own namespace".
                    term.namespaces.push(String::new());
                }
                term.namespaces.sort();
            }
        }
    }
}

/// The kube-scheduler's reading of several required pod-affinity terms: a pod satisfies them
/// only through pods that match *every* term (InterPodAffinity counts a running pod toward
/// the terms' domains only when it matches all of them, and the first pod of a group may
/// start it only when it matches all of them itself). Each required term's selector becomes
/// the conjunction of all of them, and its namespaces their intersection, so everything that
/// reads one term at a time asks the scheduler's question. Terms keep their topology keys;
/// anti-affinity and preferred terms are per term in the scheduler and are left alone. Terms
/// whose namespaces share none find no pod (`""`, a name no namespace has).
pub fn join_required_affinity(pod: &mut Pod) {
    let required = |a: &&crate::pod::PodAffinityTerm| !a.anti && a.weight.is_none();
    if pod.affinity.iter().filter(required).count() < 2 {
        return;
    }
    let own = pod.namespace.clone();
    let mut selector: Option<crate::requirements::Requirements> = None;
    let mut namespaces: Option<BTreeSet<String>> = None;
    for term in pod.affinity.iter().filter(required) {
        selector = Some(match selector {
            None => term.selector.clone(),
            Some(s) => s.intersect(&term.selector),
        });
        let mine: BTreeSet<String> = if term.namespaces.is_empty() {
            BTreeSet::from([own.clone()])
        } else {
            term.namespaces.iter().cloned().collect()
        };
        namespaces = Some(match namespaces {
            None => mine,
            Some(n) => n.intersection(&mine).cloned().collect(),
        });
    }
    let selector = selector.unwrap_or_default();
    let mut namespaces: Vec<String> = namespaces.unwrap_or_default().into_iter().collect();
    if namespaces.is_empty() {
        namespaces.push(String::new());
    }
    for term in pod
        .affinity
        .iter_mut()
        .filter(|a| !a.anti && a.weight.is_none())
    {
        term.selector = selector.clone();
        term.namespaces = namespaces.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::PodAffinityTerm;
    use crate::requirements::{Requirement, Requirements};

    fn pod_in(ns: &str, selector: Option<Requirements>) -> Pod {
        Pod {
            namespace: ns.into(),
            name: "p".into(),
            affinity: vec![PodAffinityTerm {
                topology_key: crate::labels::ZONE.into(),
                selector: Requirements::new(),
                namespaces: Vec::new(),
                namespace_selector: selector,
                anti: true,
                weight: None,
            }],
            ..Pod::default()
        }
    }

    #[test]
    fn namespace_selectors_become_the_namespaces_they_select() {
        let mut team = Requirements::new();
        team.add("team", Requirement::single("shop"));
        let mut s = Snapshot {
            pods: vec![
                pod_in("a", Some(team)),
                pod_in("b", Some(Requirements::new())),
                pod_in("c", None),
                pod_in("d", {
                    let mut none = Requirements::new();
                    none.add("team", Requirement::single("nobody"));
                    Some(none)
                }),
            ],
            ..Snapshot::default()
        };
        for ns in ["a", "b"] {
            s.namespace_labels
                .insert(ns.into(), BTreeMap::from([("team".into(), "shop".into())]));
        }
        s.resolve_namespace_selectors();
        let names = |i: usize| s.pods[i].affinity[0].namespaces.clone();
        assert_eq!(names(0), ["a", "b"]);
        assert_eq!(names(1), ["a", "b", "c", "d"], "{{}} is every namespace");
        assert!(names(2).is_empty(), "no selector: the pod's own namespace");
        assert_eq!(names(3), [""], "selects none: finds no pod");
        assert!(s
            .pods
            .iter()
            .all(|p| p.affinity[0].namespace_selector.is_none()));
    }

    #[test]
    fn required_affinity_terms_are_joined_and_others_left_alone() {
        let term = |key: &str, (k, v): (&str, &str), namespaces: &[&str], anti: bool, weight| {
            let mut selector = Requirements::new();
            selector.add(k, Requirement::single(v));
            PodAffinityTerm {
                topology_key: key.into(),
                selector,
                namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
                namespace_selector: None,
                anti,
                weight,
            }
        };
        // A pod in namespace web with required terms on app=cache (in `cache_in`) and
        // tier=db, and `more`.
        let web = |cache_in: &[&str], more: Vec<PodAffinityTerm>| {
            let mut affinity = vec![
                term(
                    crate::labels::HOSTNAME,
                    ("app", "cache"),
                    cache_in,
                    false,
                    None,
                ),
                term(crate::labels::ZONE, ("tier", "db"), &[], false, None),
            ];
            affinity.extend(more);
            Pod {
                namespace: "web".into(),
                affinity,
                ..Pod::default()
            }
        };
        let mut p = web(
            &["infra", "web"],
            vec![
                term(crate::labels::ZONE, ("app", "web"), &[], true, None),
                term(crate::labels::ZONE, ("app", "api"), &[], false, Some(10)),
            ],
        );
        join_required_affinity(&mut p);
        let mut both = Requirements::new();
        both.add("app", Requirement::single("cache"));
        both.add("tier", Requirement::single("db"));
        for t in &p.affinity[..2] {
            assert_eq!(t.selector, both);
            assert_eq!(t.namespaces, ["web"], "the namespaces both terms look in");
        }
        assert_eq!(
            p.affinity[2].selector.get("tier"),
            None,
            "anti-affinity stays"
        );
        assert_eq!(p.affinity[3].selector.get("tier"), None, "preferences stay");
        let once = p.clone();
        join_required_affinity(&mut p);
        assert_eq!(p, once, "joining twice changes nothing");

        // No namespace in common: the terms find no pod.
        let mut q = web(&["infra"], Vec::new());
        join_required_affinity(&mut q);
        assert_eq!(q.affinity[0].namespaces, [""]);
    }
}
