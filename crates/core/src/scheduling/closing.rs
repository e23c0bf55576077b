//! Domains closed between passes: a pass pins pods to topology domains before it knows
//! which pods Provisioner limits, capacity or other rules will refuse. When the result puts
//! pods where the kube-scheduler would not run them, the domains involved are closed to those
//! pods ([`topology::Closed`]) and the pass runs again; closings only grow, so it ends.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::affinity::Scope;
use super::classes::PodClass;
use super::plan::Plan;
use super::topology;
use crate::instance_type::InstanceType;
use crate::labels;
use crate::pod::Node;
use crate::provisioner::Provisioner;
use crate::snapshot::Snapshot;

/// What the rules below closed after a pass.
pub struct Closings {
    /// Something new was closed: run the pass again.
    pub any: bool,
    /// The spreads counting only some nodes that came out over their maxSkew.
    pub(crate) skewed: Vec<topology::FilteredSpread>,
}

/// Applies every rule below.
pub fn close_between_passes(
    snapshot: &Snapshot,
    catalog: &[InstanceType],
    plan: &Plan,
    pinned: &[PodClass],
    closed: &mut topology::Closed,
) -> Closings {
    let pass = Outcome::new(snapshot, catalog, plan);
    // Without refusals only a new node in a domain the pinning did not count (bought for
    // other pods) can leave a spread skewed.
    let refusals = !pass.refused.is_empty();
    let emptied = refusals && close_empty_domains(&pass, pinned, closed);
    let unmet = refusals && close_unmet_affinity(&pass, pinned, closed);
    let skewed = close_skewed(&pass, pinned, closed);
    Closings {
        any: emptied || unmet || skewed.0,
        skewed: skewed.1,
    }
}

/// What a pass did, as the rules read it.
struct Outcome<'a> {
    snapshot: &'a Snapshot,
    refused: HashSet<&'a str>,
    node_labels: BTreeMap<&'a str, &'a BTreeMap<String, String>>,
    /// The pass's new nodes as the kube-scheduler will see them, one per shape (the first
    /// node's hostname stands for all of its shape).
    new_nodes: Vec<Node>,
    /// The node each pod the pass placed landed on: an index into `new_nodes` (its shape),
    /// or an existing node.
    landed: HashMap<usize, Landed<'a>>,
}

/// Where a placed pod landed.
#[derive(Clone, Copy)]
enum Landed<'a> {
    New(usize),
    Existing(&'a Node),
}

impl<'a> Outcome<'a> {
    fn new(snapshot: &'a Snapshot, catalog: &[InstanceType], plan: &'a Plan) -> Self {
        let default = Provisioner::default_provisioner();
        let prov = |name: &str| {
            if snapshot.provisioners.is_empty() {
                Some(&default)
            } else {
                snapshot.provisioners.iter().find(|p| p.name == name)
            }
        };
        // One node per shape (type, Provisioner, offering, requirements): the rules read
        // the domains nodes carry, not how many nodes carry them, and a large plan has
        // thousands of nodes of a few hundred shapes.
        let types: HashMap<&str, &InstanceType> =
            catalog.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut shapes = HashMap::new();
        let mut new_nodes = Vec::new();
        let mut landed = HashMap::new();
        for n in &plan.new_nodes {
            let shape = (
                n.instance_type.as_str(),
                n.provisioner.as_str(),
                n.zone.as_str(),
                n.capacity_type,
                &n.requirements,
            );
            let at = *shapes.entry(shape).or_insert_with(|| {
                let ty = types.get(n.instance_type.as_str()).copied();
                new_nodes.push(n.as_node(ty, prov(&n.provisioner)));
                new_nodes.len() - 1
            });
            landed.extend(n.pod_indices.iter().map(|&i| (i, Landed::New(at))));
        }
        if !plan.existing_nodes.is_empty() {
            let by_name: HashMap<&str, &Node> = snapshot
                .nodes
                .iter()
                .map(|n| (n.name.as_str(), n))
                .collect();
            let placed: HashMap<&str, &Node> = plan
                .existing_nodes
                .iter()
                .filter_map(|u| by_name.get(u.name.as_str()).map(|n| (u, *n)))
                .flat_map(|(u, n)| u.pods.iter().map(move |k| (k.as_str(), n)))
                .collect();
            for (i, p) in snapshot.pods.iter().enumerate() {
                if p.node_name.is_none() {
                    if let Some(n) = placed.get(p.key().as_str()) {
                        landed.insert(i, Landed::Existing(n));
                    }
                }
            }
        }
        Outcome {
            snapshot,
            refused: plan.unschedulable.iter().map(|u| u.pod.as_str()).collect(),
            node_labels: snapshot
                .nodes
                .iter()
                .map(|n| (n.name.as_str(), &n.labels))
                .collect(),
            new_nodes,
            landed,
        }
    }

    /// The node placed pod `i` landed on, as the rules read nodes.
    fn node_of(&self, i: usize) -> Option<&Node> {
        match self.landed.get(&i)? {
            Landed::New(at) => self.new_nodes.get(*at),
            Landed::Existing(n) => Some(n),
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

    /// True when a node of the final cluster (an existing node or one of the pass's new
    /// nodes) carries `value` of `key` and some hard spread of `pod` on that key counts it:
    /// the kube-scheduler sees that domain, whatever pods it holds.
    fn counted_domain(&self, pod: &crate::pod::Pod, key: &str, value: &str) -> bool {
        let filters: Vec<Option<topology::NodeFilter>> = pod
            .topology_spread
            .iter()
            .filter(|t| t.hard && t.topology_key == key)
            .map(|t| topology::NodeFilter::of(pod, t))
            .collect();
        if filters.is_empty() {
            return false;
        }
        self.snapshot
            .nodes
            .iter()
            .chain(&self.new_nodes)
            .filter(|n| n.labels.get(key).map(String::as_str) == Some(value))
            .any(|n| {
                filters
                    .iter()
                    .any(|f| f.as_ref().is_none_or(|f| f.counts_on(n)))
            })
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

/// Closes, to the pods pinned there and refused, each domain where a workload had pods
/// refused while some of its pods were placed (there or elsewhere): the domain was full for
/// them or a Provisioner's limit stopped them, and another domain may still take them within
/// maxSkew. The domain also leaves their spreads' count only when no node of the pass's
/// cluster carries it. A workload refused everywhere keeps its pins, and its reason. True
/// when something new was closed.
fn close_empty_domains(pass: &Outcome, pinned: &[PodClass], closed: &mut topology::Closed) -> bool {
    let placed: Vec<Vec<usize>> = pinned.iter().map(|c| pass.placed(c)).collect();
    // The workloads (origins) with pods placed somewhere.
    let placed_somewhere: HashSet<usize> = pinned
        .iter()
        .zip(&placed)
        .filter(|(_, p)| !p.is_empty())
        .map(|(c, _)| c.origin)
        .collect();
    // The domains (workload, key, value) where the workload got pods: they stay counted.
    let held: HashSet<(usize, &str, &str)> = pinned
        .iter()
        .zip(&placed)
        .filter(|(_, p)| !p.is_empty())
        .flat_map(|(c, _)| {
            c.pinned
                .iter()
                .filter_map(move |(k, r)| r.single_value().map(|v| (c.origin, k.as_str(), v)))
        })
        .collect();
    let mut grew = false;
    for (c, placed) in pinned.iter().zip(&placed) {
        if placed.len() == c.pods.len() || !placed_somewhere.contains(&c.origin) {
            continue;
        }
        let placed: HashSet<usize> = placed.iter().copied().collect();
        for (key, r) in c.pinned.iter() {
            let Some(value) = r.single_value() else {
                continue;
            };
            // Gone only when the kube-scheduler will not see the domain at all: the workload
            // got nothing there and no node there counts for its spreads (another workload's
            // node makes the domain count, empty of these pods).
            let kept = held.contains(&(c.origin, key.as_str(), value))
                || pass.counted_domain(pass.template(c), key, value);
            for &pod in c.pods.iter().filter(|p| !placed.contains(p)) {
                grew |= if kept {
                    closed.close(pod, key, value)
                } else {
                    closed.close_gone(pod, key, value)
                };
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
fn close_skewed(
    pass: &Outcome,
    pinned: &[PodClass],
    closed: &mut topology::Closed,
) -> (bool, Vec<topology::FilteredSpread>) {
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
    let mut skewed = Vec::new();
    let nodes: HashMap<&str, &crate::pod::Node> = snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    for ((key, scope, filter), constrained) in &spreads {
        // The domains of the nodes the spread counts, pods or not: existing ones (as the
        // pinning counted them) and the pass's new ones (bought for other pods, maybe in a
        // domain these pods may not use: they count all the same).
        let counts_on = |n: &&Node| filter.as_ref().is_none_or(|f| f.counts_on(n));
        // The domains the pinning chose for these pods.
        let pinned_to: HashSet<String> = constrained
            .iter()
            .filter_map(|(c, _)| value_of(c, key))
            .collect();
        let on_new: HashSet<&String> = pass
            .new_nodes
            .iter()
            .filter(counts_on)
            .filter_map(|n| n.labels.get(key))
            .collect();
        // Without refusals the pinning's counts hold unless a new node brought a domain it
        // did not count (none of these pods there, no existing node it counts), pods landed
        // on nodes the spread does not count (a filter), or pods of classes this spread does
        // not constrain (other node terms, so another filter) count in it.
        let foreign = pinned.iter().any(|d| {
            value_of(d, key).is_some()
                && scope.matches(pass.template(d))
                && !constrained.iter().any(|(c, _)| std::ptr::eq(*c, d))
        });
        // Classes that reach other domains each counted only the domains they reach (an
        // on-demand-only pod the capacity types it may use, a pod not tolerating a tainted
        // Provisioner the zones only that one offers, a large pod the instance types that
        // hold it), where the spread, counting every node, sees them all.
        let by_type = ![labels::ZONE, labels::CAPACITY_TYPE].contains(&key.as_str());
        let alike = constrained.windows(2).all(|w| {
            let (a, b) = (w[0].0, w[1].0);
            let (pa, pb) = (pass.template(a), pass.template(b));
            pa.node_terms == pb.node_terms
                && pa.spread_node_terms() == pb.spread_node_terms()
                && pa.tolerations == pb.tolerations
                && (!by_type || a.requests == b.requests)
        });
        let settled = pass.refused.is_empty() && filter.is_none() && !foreign && alike;
        if settled && on_new.iter().all(|v| pinned_to.contains(*v)) {
            continue;
        }
        let mut on_nodes: HashSet<&String> = snapshot
            .nodes
            .iter()
            .filter(counts_on)
            .filter_map(|n| n.labels.get(key))
            .collect();
        let unseen = on_new
            .iter()
            .any(|v| !pinned_to.contains(*v) && !on_nodes.contains(*v));
        if settled && !unseen {
            continue;
        }
        on_nodes.extend(on_new);
        // Pods where they run (on the nodes the spread counts) or were placed; a domain whose
        // pinned pods were all refused, and where no node is, holds none and is closed by
        // `close_empty_domains`, so it sets no minimum here.
        let mut count: BTreeMap<String, i64> = on_nodes.iter().map(|v| ((*v).clone(), 0)).collect();
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
        // The pass's pods count where they landed: a pod whose terms let it go to either
        // kind of node counts only if its node is one the spread counts.
        let counted_pods = |c: &PodClass| -> Vec<usize> {
            let placed = placed_pods(c);
            match filter {
                None => placed,
                Some(f) => placed
                    .into_iter()
                    .filter(|&i| pass.node_of(i).is_none_or(|n| f.counts_on(n)))
                    .collect(),
            }
        };
        for d in pinned.iter().filter(|d| scope.matches(pass.template(d))) {
            let placed = counted_pods(d).len() as i64;
            if let (Some(v), true) = (value_of(d, key), placed > 0) {
                *count.entry(v).or_default() += placed;
            }
        }
        let domains: HashSet<&String> = on_nodes.iter().copied().chain(&pinned_to).collect();
        count.retain(|v, _| domains.contains(v));
        let Some(min) = count.values().min().copied() else {
            continue;
        };
        for (value, n) in &count {
            let mut n = *n;
            // The classes with pods the spread counts here.
            let here: Vec<(&PodClass, i64)> = constrained
                .iter()
                .rev()
                .filter(|(c, _)| {
                    value_of(c, key).as_deref() == Some(value.as_str())
                        && scope.matches(pass.template(c))
                })
                .map(|&(c, s)| (c, s))
                .collect();
            // Each pod is checked against its own maxSkew; nothing to close when the domain
            // is within the tightest.
            let Some(tightest) = here.iter().map(|(_, s)| *s).min() else {
                continue;
            };
            if n - min <= tightest {
                continue;
            }
            // Pods leave, last first, while the domain is above their maxSkew: first those
            // whose node terms let them go to another of the domains, down to the maxSkew of
            // the pods held here (those must stay within theirs), then the held ones.
            let elsewhere = |c: &PodClass| {
                let terms = &pass.template(c).node_terms;
                count
                    .keys()
                    .any(|d| d != value && topology::terms_allow(terms, key, d))
            };
            let (free, held): (Vec<_>, Vec<_>) = here.into_iter().partition(|(c, _)| elsewhere(c));
            let held_bound = held.iter().map(|(_, s)| *s).min();
            let free = free
                .into_iter()
                .map(|(c, s)| (c, held_bound.map_or(s, |h| s.min(h))));
            let mut closed_here = false;
            for (c, max_skew) in free.chain(held) {
                for &i in counted_pods(c).iter().rev() {
                    if n - min <= max_skew {
                        break;
                    }
                    closed_here |= closed.close(i, key, value);
                    n -= 1;
                }
            }
            grew |= closed_here;
            if let (true, Some(f)) = (closed_here, filter) {
                skewed.push((key.clone(), scope.clone(), f.clone()));
            }
        }
    }
    (grew, skewed)
}
