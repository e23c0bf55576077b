//! Preferences: preferred node affinity, preferred pod (anti-)affinity and `ScheduleAnyway`
//! topology spread.
//!
//! The simulation first treats preferences as hard rules, so a preference is honored whenever
//! some placement allows it. A pod that cannot be placed that way has its preferences relaxed
//! one at a time and the pass is run again, until every pod is placed or has nothing left to
//! relax; the plan names what was given up for each pod. The order: `ScheduleAnyway` spreads
//! (they have no weight), then preferred pod terms lightest first, then preferred node-affinity
//! terms, and last the avoidance of Provisioners with `PreferNoSchedule` taints the pod does not
//! tolerate (Karpenter tolerates those last too, so such a Provisioner is used only when no other
//! fits; existing nodes are left to the kube-scheduler, for which the taint never blocks). (Karpenter relaxes pod terms heaviest first and spreads last; joiner keeps its order
//! for those.) Node-affinity terms are alternatives ranked by weight, as Karpenter reads them
//! (and the kube-scheduler's scoring agrees): only the heaviest term still kept is required,
//! and when the pod cannot be placed with it, it is dropped and the next heaviest is tried.
//!
//! A hardened preference narrows where the pod may go, never the domains its hard spreads
//! count: the kube-scheduler's spread honours required node affinity only.

use crate::pod::Pod;
use crate::snapshot::Snapshot;
use crate::taints::{first_untolerated_soft, Effect, Taint};

use super::affinity::Scope;
use super::node_rules::describe_selector;
use super::plan::{Plan, Relaxed};

/// One preference of a pod, in the order it is relaxed.
#[derive(Clone, Debug, PartialEq)]
enum Preference {
    /// `topology_spread[i]`, a `ScheduleAnyway` constraint.
    Spread(usize),
    /// `affinity[i]`, a preferred pod (anti-)affinity term.
    PodTerm(usize),
    /// `preferred_node_terms[i]`.
    NodeTerm(usize),
    /// Provisioners with `PreferNoSchedule` taints the pod does not tolerate, the first named.
    SoftTaints(String),
}

/// A pod's preferences in the order they are relaxed: spreads, pod terms lightest first, node
/// terms heaviest first (each is the one in force until it is dropped), then soft taints when
/// some Provisioner's `soft_taints` would repel it.
fn preferences(p: &Pod, soft_taints: &[Taint]) -> Vec<Preference> {
    let mut out: Vec<(i32, u8, usize, Preference)> = Vec::new();
    for (i, s) in p.topology_spread.iter().enumerate() {
        if !s.hard {
            out.push((0, 0, i, Preference::Spread(i)));
        }
    }
    for (i, a) in p.affinity.iter().enumerate() {
        if let Some(w) = a.weight {
            out.push((w, 1, i, Preference::PodTerm(i)));
        }
    }
    for (i, (w, _)) in p.preferred_node_terms.iter().enumerate() {
        out.push((-*w, 2, i, Preference::NodeTerm(i)));
    }
    out.sort_by_key(|a| (a.1, a.0, a.2));
    let mut prefs: Vec<Preference> = out.into_iter().map(|(.., p)| p).collect();
    if let Some(t) = first_untolerated_soft(soft_taints, &p.tolerations) {
        prefs.push(Preference::SoftTaints(t.to_string()));
    }
    prefs
}

/// The preference in words, as the plan and pod Events show it.
fn describe(p: &Pod, pref: &Preference) -> String {
    match pref {
        Preference::Spread(i) => {
            let s = &p.topology_spread[*i];
            format!(
                "topology spread on {} (maxSkew {}, ScheduleAnyway) of pods {}",
                s.topology_key,
                s.max_skew,
                describe_selector(&Scope::of_spread(p, s))
            )
        }
        Preference::PodTerm(i) => {
            let a = &p.affinity[*i];
            format!(
                "preferred pod {} on {} to pods {} (weight {})",
                if a.anti { "anti-affinity" } else { "affinity" },
                a.topology_key,
                describe_selector(&Scope::of_term(p, a)),
                a.weight.unwrap_or(0)
            )
        }
        Preference::NodeTerm(i) => {
            let (w, t) = &p.preferred_node_terms[*i];
            format!("preferred node affinity {t} (weight {w})")
        }
        Preference::SoftTaints(t) => {
            format!("avoiding Provisioners tainted {t}")
        }
    }
}

/// The pod with its first `relaxed` preferences dropped and the others made hard: every kept
/// spread and pod term, and the first kept node term (the heaviest left). Preferred pod terms
/// keep their weight: the pass holds a pending pod to every term it still carries, but only
/// required terms repel other pods (as in the kube-scheduler, where another pod's preference
/// never blocks).
fn harden(p: &Pod, prefs: &[Preference], relaxed: usize) -> Pod {
    let mut h = p.clone();
    let kept = &prefs[relaxed.min(prefs.len())..];
    h.topology_spread = p
        .topology_spread
        .iter()
        .enumerate()
        .filter(|(i, s)| s.hard || kept.contains(&Preference::Spread(*i)))
        .map(|(_, s)| {
            let mut s = s.clone();
            s.hard = true;
            s
        })
        .collect();
    h.affinity = p
        .affinity
        .iter()
        .enumerate()
        .filter(|(i, a)| a.weight.is_none() || kept.contains(&Preference::PodTerm(*i)))
        .map(|(_, a)| a.clone())
        .collect();
    h.preferred_node_terms = Vec::new();
    h.avoid_soft_taints = kept
        .iter()
        .any(|pr| matches!(pr, Preference::SoftTaints(_)));
    let in_force = kept.iter().find_map(|pr| match pr {
        Preference::NodeTerm(i) => Some(&p.preferred_node_terms[*i].1),
        _ => None,
    });
    if let Some(t) = in_force {
        // The spreads keep counting the domains the pod's own required terms allow.
        h.own_node_terms = Some(p.spread_node_terms().to_vec());
        if h.node_terms.is_empty() {
            h.node_terms.push(t.clone());
        } else {
            for term in &mut h.node_terms {
                *term = term.intersect(t);
            }
        }
    }
    h
}

/// Runs `place` with preferences as hard rules, relaxing them pod by pod until nothing changes.
pub fn solve(snapshot: &Snapshot, place: impl Fn(&Snapshot) -> Plan) -> Plan {
    if !has_preferences(snapshot) {
        return place(snapshot);
    }
    solve_in_place(&mut snapshot.clone(), place)
}

/// True when some pod the simulation places has a preference to relax.
fn has_preferences(snapshot: &Snapshot) -> bool {
    let soft = soft_taints(snapshot);
    snapshot.pods.iter().any(|p| {
        p.node_name.is_none() && p.volume_hold.is_none() && !preferences(p, &soft).is_empty()
    })
}

fn soft_taints(snapshot: &Snapshot) -> Vec<Taint> {
    snapshot
        .provisioners
        .iter()
        .flat_map(|p| p.taints.iter())
        .filter(|t| t.effect == Effect::PreferNoSchedule)
        .cloned()
        .collect()
}

/// [`solve`] on a snapshot it may change while it runs, put back as given before it returns:
/// each pass hardens the pods with preferences in place instead of copying every pod of the
/// cluster into a hardened snapshot, so a large cluster's planning pass holds its pods once.
pub fn solve_in_place(snapshot: &mut Snapshot, place: impl Fn(&Snapshot) -> Plan) -> Plan {
    let soft_taints = soft_taints(snapshot);
    let prefs: Vec<Vec<Preference>> = snapshot
        .pods
        .iter()
        .map(|p| {
            // A bound pod has nothing to relax, nor has one its volumes hold: it is never
            // placed, and relaxing would only cost passes.
            if p.node_name.is_none() && p.volume_hold.is_none() {
                preferences(p, &soft_taints)
            } else {
                Vec::new()
            }
        })
        .collect();
    if prefs.iter().all(Vec::is_empty) {
        return place(snapshot);
    }
    let index: std::collections::HashMap<String, usize> = snapshot
        .pods
        .iter()
        .enumerate()
        .filter(|(i, _)| !prefs[*i].is_empty())
        .map(|(i, p)| (p.key(), i))
        .collect();
    // The pods with preferences as given, put back after each pass.
    let originals: Vec<(usize, Pod)> = prefs
        .iter()
        .enumerate()
        .filter(|(_, pr)| !pr.is_empty())
        .map(|(i, _)| (i, snapshot.pods[i].clone()))
        .collect();
    let mut relaxed = vec![0usize; snapshot.pods.len()];
    loop {
        for (i, original) in &originals {
            snapshot.pods[*i] = harden(original, &prefs[*i], relaxed[*i]);
        }
        let mut plan = place(snapshot);
        for (i, original) in &originals {
            snapshot.pods[*i] = original.clone();
        }
        let mut changed = false;
        for u in &plan.unschedulable {
            if let Some(&i) = index.get(&u.pod) {
                if relaxed[i] < prefs[i].len() {
                    relaxed[i] += 1;
                    changed = true;
                }
            }
        }
        if !changed {
            // A pod placed nowhere gave nothing up for a placement: its reason says why.
            let unplaced: std::collections::HashSet<&str> =
                plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
            for (i, p) in snapshot.pods.iter().enumerate() {
                if relaxed[i] > 0 && !unplaced.contains(p.key().as_str()) {
                    plan.relaxed.push(Relaxed {
                        pod: p.key(),
                        preferences: prefs[i][..relaxed[i]]
                            .iter()
                            .map(|pr| describe(p, pr))
                            .collect(),
                    });
                }
            }
            plan.relaxed.sort_by(|a, b| a.pod.cmp(&b.pod));
            return plan;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::{PodAffinityTerm, TopologySpread};
    use crate::requirements::{Requirement, Requirements};

    #[test]
    fn in_place_plans_as_the_copy_does_and_puts_the_pods_back() {
        // A preference no node can meet (relaxed after a pass) and a pod without one.
        let mut nowhere = Requirements::new();
        nowhere.add(crate::labels::ZONE, Requirement::single("z-nowhere"));
        let mut web = Pod {
            namespace: "default".into(),
            name: "web".into(),
            requests: crate::Resources::new(500, 1 << 30, 0, 1),
            ..Pod::default()
        };
        web.preferred_node_terms.push((50, nowhere));
        let db = Pod {
            name: "db".into(),
            preferred_node_terms: Vec::new(),
            ..web.clone()
        };
        let snap = Snapshot {
            pods: vec![web, db],
            provisioners: vec![crate::Provisioner::default_provisioner()],
            ..Snapshot::default()
        };
        let catalog = crate::testing::catalog::catalog();
        let opts = crate::scheduling::Options::default();
        let copied = crate::scheduling::simulate(&snap, &catalog, &opts);
        let mut owned = snap.clone();
        let in_place = crate::scheduling::simulate_in_place(&mut owned, &catalog, &opts);
        assert_eq!(copied, in_place);
        assert_eq!(copied.relaxed.len(), 1, "{copied:?}");
        assert_eq!(owned.pods, snap.pods, "put back as given");
    }

    #[test]
    fn lightest_first_and_hardened() {
        let mut p = Pod::default();
        let mut zone = Requirements::new();
        zone.add(crate::labels::ZONE, Requirement::single("z-a"));
        p.preferred_node_terms.push((50, zone));
        p.affinity.push(PodAffinityTerm {
            topology_key: crate::labels::HOSTNAME.into(),
            selector: Requirements::new(),
            namespaces: Vec::new(),
            namespace_selector: None,
            anti: true,
            weight: Some(10),
        });
        p.topology_spread.push(TopologySpread {
            topology_key: crate::labels::ZONE.into(),
            max_skew: 1,
            min_domains: None,
            hard: false,
            selector: Requirements::new(),
            honor_node_affinity: true,
            honor_node_taints: false,
        });
        let prefs = preferences(&p, &[]);
        assert_eq!(
            prefs,
            vec![
                Preference::Spread(0),
                Preference::PodTerm(0),
                Preference::NodeTerm(0)
            ]
        );
        let h = harden(&p, &prefs, 0);
        assert!(h.topology_spread[0].hard);
        assert_eq!(h.affinity.len(), 1);
        assert_eq!(h.node_terms.len(), 1);
        let h2 = harden(&p, &prefs, 2);
        assert!(h2.topology_spread.is_empty());
        assert!(h2.affinity.is_empty());
        assert_eq!(h2.node_terms.len(), 1, "node terms are relaxed last");
        assert!(h2.own_node_terms.as_ref().is_some_and(Vec::is_empty));
        assert!(describe(&p, &prefs[2]).starts_with("preferred node affinity"));
    }
}
