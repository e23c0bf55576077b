//! The scheduling simulation: where pending pods would go, and which nodes to buy for them.
//!
//! Order of placement, as the kube-scheduler will see it once nodes exist: existing (and
//! in-flight) nodes first at no new cost, then new nodes from the highest-weight Provisioner that
//! accepts the pod. New node shapes are chosen for cost (see [`packer`]). The stages of one
//! pass live in [`pass`]; [`simulate`] runs passes until every preference is honored or
//! relaxed.

pub mod affinity;
pub mod candidates;
pub mod classes;
pub mod colocation;
pub mod daemons;
pub mod existing;
pub mod explain;
pub mod node_rules;
pub mod packer;
pub mod pass;
pub mod plan;
pub mod ports;
pub mod preferences;
pub mod reasons;
pub mod reqtable;
pub mod topology;
pub mod typeset;

use crate::instance_type::InstanceType;
use crate::snapshot::Snapshot;

use pass::Pass;
pub use plan::{ExistingNodeUse, NewNode, Plan, Relaxed, Unschedulable};

/// Knobs of a scheduling pass.
#[derive(Clone, Debug)]
pub struct Options {
    /// How many instance types a new node lists as options (CreateFleet takes at most 60).
    pub max_instance_type_options: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_instance_type_options: 60,
        }
    }
}

/// Runs a scheduling pass over a snapshot against a catalog of instance types: preferences are
/// honored as hard rules first and relaxed pod by pod where they keep a pod from being placed.
pub fn simulate(snapshot: &Snapshot, catalog: &[InstanceType], opts: &Options) -> Plan {
    preferences::solve(snapshot, |s| place(s, catalog, opts))
}

/// One pass with every constraint of the snapshot's pods taken as hard; run again while pods
/// pinned to a topology domain were placed nowhere there but their workload was placed
/// elsewhere, or were placed in a domain for their pod affinity where none of the pods it
/// selects was placed after all (see [`topology::Closed`]).
fn place(snapshot: &Snapshot, catalog: &[InstanceType], opts: &Options) -> Plan {
    let mut closed = topology::Closed::default();
    loop {
        let pass = Pass::with_closed(snapshot, catalog, opts, &closed);
        let pinned: Vec<classes::PodClass> = pass
            .classes()
            .iter()
            .filter(|c| !c.pinned.is_empty())
            .cloned()
            .collect();
        let plan = pass.run();
        if plan.unschedulable.is_empty() || pinned.is_empty() {
            return plan;
        }
        let emptied = close_empty_domains(snapshot, &plan, &pinned, &mut closed);
        let unmet = close_unmet_affinity(snapshot, &plan, &pinned, &mut closed);
        if !emptied && !unmet {
            return plan;
        }
    }
}

/// Closes, to the pods pinned there, each domain where a workload had pods pinned and none
/// placed while some of its pods were placed elsewhere. True when something new was closed.
fn close_empty_domains(
    snapshot: &Snapshot,
    plan: &Plan,
    pinned: &[classes::PodClass],
    closed: &mut topology::Closed,
) -> bool {
    use std::collections::HashSet;
    let refused: HashSet<&str> = plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    let placed = |c: &classes::PodClass| {
        c.pods
            .iter()
            .filter(|&&i| !refused.contains(snapshot.pods[i].key().as_str()))
            .count()
    };
    let counts: Vec<usize> = pinned.iter().map(placed).collect();
    // The workloads (origins) with pods placed somewhere.
    let placed_somewhere: HashSet<usize> = pinned
        .iter()
        .zip(&counts)
        .filter(|(_, &n)| n > 0)
        .map(|(c, _)| c.origin)
        .collect();
    let mut grew = false;
    for (c, &n) in pinned.iter().zip(&counts) {
        if n > 0 || !placed_somewhere.contains(&c.origin) {
            continue;
        }
        for (key, r) in c.pinned.iter() {
            let Some(value) = r.single_value() else {
                continue;
            };
            for &pod in &c.pods {
                grew |= closed.close(pod, key, value);
            }
        }
    }
    grew
}

/// Closes, to a pinned class's pods, each domain its required pod affinity chose because pods
/// it selects were pinned there, when the pass then placed none of them there (refused for
/// another rule) and no running pod it selects is there: the kube-scheduler would keep such a
/// pod pending, so no node is bought for it. Its own workload's placed pods count where it
/// may bootstrap (it selects itself and no pod the term selects runs anywhere), in one domain
/// only: the first pod starts a domain, the next ones see it and must join. True when
/// something new was closed.
fn close_unmet_affinity(
    snapshot: &Snapshot,
    plan: &Plan,
    pinned: &[classes::PodClass],
    closed: &mut topology::Closed,
) -> bool {
    use std::collections::{BTreeMap, HashSet};

    use affinity::Scope;
    let refused: HashSet<&str> = plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    let placed = |c: &classes::PodClass| {
        c.pods
            .iter()
            .any(|&i| !refused.contains(snapshot.pods[i].key().as_str()))
    };
    let node_value = |node: &str, key: &str| {
        snapshot
            .nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.labels.get(key).cloned())
    };
    let value_of = |c: &classes::PodClass, key: &str| {
        c.pinned
            .get(key)
            .and_then(|r| r.single_value())
            .map(str::to_string)
    };
    // The scopes of a class's required pod-affinity terms, by key.
    let terms_of = |c: &classes::PodClass| -> Vec<(String, Scope)> {
        let pod = &snapshot.pods[c.template];
        pod.affinity
            .iter()
            .filter(|a| !a.anti && a.weight.is_none())
            .map(|a| (a.topology_key.clone(), Scope::of_term(pod, a)))
            .collect()
    };
    let mut unmet: Vec<(&classes::PodClass, String, String)> = Vec::new();
    // (key, scope) → domains that pods carrying that term started alone, with the classes.
    let mut bootstraps: BTreeMap<(String, Scope), BTreeMap<String, Vec<&classes::PodClass>>> =
        BTreeMap::new();
    for c in pinned.iter().filter(|c| placed(c)) {
        for (key, scope) in terms_of(c) {
            let Some(value) = value_of(c, &key) else {
                continue;
            };
            let runs_here = snapshot.pods.iter().any(|p| {
                p.node_name.as_deref().is_some_and(|n| {
                    scope.matches(p) && node_value(n, &key).as_deref() == Some(value.as_str())
                })
            });
            if runs_here {
                continue;
            }
            let selected: Vec<&classes::PodClass> = pinned
                .iter()
                .filter(|d| {
                    value_of(d, &key).as_deref() == Some(value.as_str())
                        && scope.matches(&snapshot.pods[d.template])
                        && placed(d)
                })
                .collect();
            // A selected pod that does not carry the term itself: the pod has a partner.
            let partner = selected
                .iter()
                .any(|d| !terms_of(d).iter().any(|(k, s)| *k == key && *s == scope));
            if partner {
                continue;
            }
            let runs_anywhere = snapshot
                .pods
                .iter()
                .any(|p| p.node_name.is_some() && scope.matches(p));
            if !selected.is_empty() && !runs_anywhere {
                bootstraps
                    .entry((key, scope))
                    .or_default()
                    .entry(value)
                    .or_default()
                    .push(c);
            } else {
                unmet.push((c, key, value));
            }
        }
    }
    // One domain per term may be started by the pods carrying it (the first pod starts it,
    // the next ones see it): the one holding most of them stays.
    for ((key, _), domains) in &bootstraps {
        let keep = domains
            .iter()
            .max_by_key(|(v, cs)| {
                (
                    cs.iter().map(|c| c.pods.len()).sum::<usize>(),
                    std::cmp::Reverse(*v),
                )
            })
            .map(|(v, _)| v.clone());
        for (v, cs) in domains {
            if Some(v) != keep.as_ref() {
                unmet.extend(cs.iter().map(|c| (*c, key.clone(), v.clone())));
            }
        }
    }
    let mut grew = false;
    for (c, key, value) in unmet {
        for &i in &c.pods {
            grew |= closed.close(i, &key, &value);
        }
    }
    grew
}

#[cfg(test)]
mod tests;
