//! Domains closed between passes: a pass pins pods to topology domains before it knows
//! which pods Provisioner limits, capacity or other rules will refuse. When the result puts
//! pods where the kube-scheduler would not run them, the domains involved are closed to those
//! pods ([`topology::Closed`]) and the pass runs again; closings only grow, so it ends.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::affinity::Scope;
use super::classes::PodClass;
use super::plan::Plan;
use super::topology;
use crate::labels;
use crate::snapshot::Snapshot;

/// Applies every rule below; true when something new was closed (run the pass again).
pub fn close_between_passes(
    snapshot: &Snapshot,
    plan: &Plan,
    pinned: &[PodClass],
    closed: &mut topology::Closed,
) -> bool {
    let pass = Outcome::new(snapshot, plan);
    let emptied = close_empty_domains(&pass, pinned, closed);
    let unmet = close_unmet_affinity(&pass, pinned, closed);
    let skewed = close_skewed(&pass, pinned, closed);
    emptied || unmet || skewed
}

/// What a pass did, as the rules read it.
struct Outcome<'a> {
    snapshot: &'a Snapshot,
    refused: HashSet<&'a str>,
    node_labels: BTreeMap<&'a str, &'a BTreeMap<String, String>>,
}

impl<'a> Outcome<'a> {
    fn new(snapshot: &'a Snapshot, plan: &'a Plan) -> Self {
        Outcome {
            snapshot,
            refused: plan.unschedulable.iter().map(|u| u.pod.as_str()).collect(),
            node_labels: snapshot
                .nodes
                .iter()
                .map(|n| (n.name.as_str(), &n.labels))
                .collect(),
        }
    }

    /// The class's pods the pass placed.
    fn placed(&self, c: &PodClass) -> Vec<usize> {
        c.pods
            .iter()
            .copied()
            .filter(|&i| !self.refused.contains(self.snapshot.pods[i].key().as_str()))
            .collect()
    }

    fn any_placed(&self, c: &PodClass) -> bool {
        c.pods
            .iter()
            .any(|&i| !self.refused.contains(self.snapshot.pods[i].key().as_str()))
    }

    /// The domain of `key` the class was pinned to.
    fn value_of(c: &PodClass, key: &str) -> Option<String> {
        c.pinned
            .get(key)
            .and_then(|r| r.single_value())
            .map(str::to_string)
    }

    /// The value of `key` on a running pod's node.
    fn node_value(&self, node: Option<&str>, key: &str) -> Option<&'a str> {
        node.and_then(|n| self.node_labels.get(n))
            .and_then(|l| l.get(key))
            .map(String::as_str)
    }

    fn template(&self, c: &PodClass) -> &'a crate::pod::Pod {
        &self.snapshot.pods[c.template]
    }
}

/// Closes, to the pods pinned there, each domain where a workload had pods pinned and none
/// placed while some of its pods were placed elsewhere. True when something new was closed.
fn close_empty_domains(pass: &Outcome, pinned: &[PodClass], closed: &mut topology::Closed) -> bool {
    let counts: Vec<usize> = pinned.iter().map(|c| pass.placed(c).len()).collect();
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
    pass: &Outcome,
    pinned: &[PodClass],
    closed: &mut topology::Closed,
) -> bool {
    let snapshot = pass.snapshot;
    let placed = |c: &PodClass| pass.any_placed(c);
    let value_of = Outcome::value_of;
    // The scopes of a class's required pod-affinity terms, by key.
    let terms_of = |c: &PodClass| -> Vec<(String, Scope)> {
        let pod = pass.template(c);
        pod.affinity
            .iter()
            .filter(|a| !a.anti && a.weight.is_none())
            .map(|a| (a.topology_key.clone(), Scope::of_term(pod, a)))
            .collect()
    };
    let mut unmet: Vec<(&PodClass, String, String)> = Vec::new();
    // (key, scope) → domains that pods carrying that term started alone, with the classes.
    let mut bootstraps: BTreeMap<(String, Scope), BTreeMap<String, Vec<&PodClass>>> =
        BTreeMap::new();
    for c in pinned.iter().filter(|c| placed(c)) {
        for (key, scope) in terms_of(c) {
            let Some(value) = value_of(c, &key) else {
                continue;
            };
            let runs_here = snapshot.pods.iter().any(|p| {
                scope.matches(p)
                    && pass.node_value(p.node_name.as_deref(), &key) == Some(value.as_str())
            });
            if runs_here {
                continue;
            }
            let selected: Vec<&PodClass> = pinned
                .iter()
                .filter(|d| {
                    value_of(d, &key).as_deref() == Some(value.as_str())
                        && scope.matches(pass.template(d))
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
                    cs.iter().map(|c| pass.placed(c).len()).sum::<usize>(),
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

/// Closes, to some pods of a hard spread pinned to an over-full domain, that domain when the
/// pods actually placed (running ones included) leave it more than maxSkew above the least
/// populated domain: refusals elsewhere (a Provisioner limit took only part of a domain's
/// share) would otherwise leave pods the kube-scheduler keeps pending on nodes joiner bought.
/// The closed pods go to another domain in the next pass, or are refused.
fn close_skewed(pass: &Outcome, pinned: &[PodClass], closed: &mut topology::Closed) -> bool {
    let snapshot = pass.snapshot;
    let placed_pods = |c: &PodClass| pass.placed(c);
    let value_of = Outcome::value_of;
    // (key, scope, counted nodes) → the constrained classes with their own maxSkew.
    type SpreadKey = (String, Scope, Option<topology::NodeFilter>);
    let mut spreads: BTreeMap<SpreadKey, Vec<(&PodClass, i64)>> = BTreeMap::new();
    for c in pinned {
        let pod = pass.template(c);
        for t in pod.topology_spread.iter().filter(|t| t.hard) {
            if t.topology_key == labels::HOSTNAME || value_of(c, &t.topology_key).is_none() {
                continue;
            }
            spreads
                .entry((
                    t.topology_key.clone(),
                    Scope::of_spread(pod, t),
                    topology::NodeFilter::of(pod, t),
                ))
                .or_default()
                .push((c, i64::from(t.max_skew)));
        }
    }
    let mut grew = false;
    let nodes: HashMap<&str, &crate::pod::Node> = snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    for ((key, scope, filter), constrained) in &spreads {
        // Pods where they run (on the nodes the spread counts) or were placed; a domain whose
        // pinned pods were all refused holds none and is closed by `close_empty_domains`, so
        // it sets no minimum here.
        let mut count: BTreeMap<String, i64> = BTreeMap::new();
        for p in snapshot.pods.iter().filter(|p| scope.matches(p)) {
            let counted = filter.as_ref().is_none_or(|f| {
                p.node_name
                    .as_deref()
                    .and_then(|n| nodes.get(n))
                    .is_some_and(|n| f.counts_on(n))
            });
            if !counted {
                continue;
            }
            if let Some(v) = pass.node_value(p.node_name.as_deref(), key) {
                *count.entry(v.to_string()).or_default() += 1;
            }
        }
        for d in pinned.iter().filter(|d| {
            scope.matches(pass.template(d))
                && filter
                    .as_ref()
                    .is_none_or(|f| f.may_count(&pass.template(d).node_terms))
        }) {
            let placed = placed_pods(d).len() as i64;
            if let (Some(v), true) = (value_of(d, key), placed > 0) {
                *count.entry(v).or_default() += placed;
            }
        }
        // The domains the pinning chose from for these pods (reachable ones), as it did.
        let domains: HashSet<String> = constrained
            .iter()
            .filter_map(|(c, _)| value_of(c, key))
            .collect();
        count.retain(|v, _| domains.contains(v));
        let Some(min) = count.values().min().copied() else {
            continue;
        };
        for (value, n) in &count {
            let mut n = *n;
            // Each class's pods there that the spread counts, last first, leave while the
            // domain stays above its own maxSkew.
            for (c, max_skew) in constrained.iter().rev() {
                if value_of(c, key).as_deref() != Some(value.as_str())
                    || !scope.matches(pass.template(c))
                {
                    continue;
                }
                for &i in placed_pods(c).iter().rev() {
                    if n - min <= *max_skew {
                        break;
                    }
                    grew |= closed.close(i, key, value);
                    n -= 1;
                }
            }
        }
    }
    grew
}
