//! Topology domains: topology spread, pod affinity and anti-affinity on every node label but
//! the hostname — the zone and capacity type most often, but also `kubernetes.io/arch`, the
//! instance type or a Provisioner's own label, as the kube-scheduler allows.
//!
//! These domains are few, so they are decided up front, pod by pod, with counts per (term,
//! domain): each pod of a constrained class goes to the allowed domain with the fewest matching
//! pods (water-filling against what already runs there, which is what the kube-scheduler's skew
//! rule accepts), to a domain holding its affinity partners, and away from domains holding pods
//! its anti-affinity (or theirs) rejects. A pod is placed in a domain it could use: an
//! existing node it tolerates, selects and fits on, or a Provisioner it tolerates that can
//! launch a node holding it there. A spread's minimum is taken, as the kube-scheduler takes
//! it, over those and over every domain of an existing node the spread counts (its
//! `nodeAffinityPolicy` and `nodeTaintsPolicy`), full or not: a full node in a zone no
//! Provisioner covers caps the other zones at its count plus maxSkew.
//! Pods with the same choice form a sub-class pinned to that domain by a requirement
//! (`zone In [z]`), which the packer and the existing-node pass honor like any node selector.
//! Spot or on-demand among several allowed capacity types is still the offering's choice,
//! unless a spread pins it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::instance_type::{offering_allowed, InstanceType};
use crate::labels;
use crate::pod::{Node, Pod, TopologySpread};
use crate::provisioner::Provisioner;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::{first_untolerated, Toleration};

use super::affinity::Scope;
use super::classes::PodClass;
use super::node_rules::describe_selector;

/// Domains an earlier pass pinned pods to and then placed none of them in, while it placed
/// pods of the same workload elsewhere (a Provisioner's limit, no type with room there): the
/// next pass treats them as unreachable for those pods' classes, so the counts follow where
/// pods really go and the other domains take their share.
///
/// A closed domain where pods were placed still counts in the pods' spreads (its nodes will
/// be there); one where the workload got nothing is also gone from them: no node of its will
/// exist for the kube-scheduler to count.
///
/// It also says where flexible pods go under a spread that counts only some nodes ([`Hold`]).
#[derive(Clone, Debug, Default)]
pub struct Closed {
    by_pod: HashMap<usize, BTreeSet<(String, String)>>,
    gone: HashMap<usize, BTreeSet<(String, String)>>,
    hold: Hold,
}

/// Where the pinning puts a class whose pods may land both on the nodes a spread counts and
/// on others (a flexible pod under the spread of on-demand-only pods, with the default
/// `nodeAffinityPolicy: Honor`). Passes start `Free`, and start over both ways once such a
/// spread came out skewed (`scheduling::settle` keeps the better plan).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hold {
    /// Counted as if it landed on counted nodes; the packer decides where it lands, which
    /// fills the room the counted pods' nodes leave (cheapest) but can undo the counts.
    #[default]
    Free,
    /// Held off the counted nodes (spot beside on-demand-only pods) and not counted.
    Off,
    /// Held on the counted nodes, and counted.
    On,
}

/// Domains as (topology key, value).
type DomainSet = BTreeSet<(String, String)>;

/// A spread that counts only some nodes, as the pinning and the closing both name it: its
/// topology key, the pods it counts and the nodes it counts them on.
pub(crate) type FilteredSpread = (String, Scope, NodeFilter);

impl Closed {
    /// Closes domain `value` of topology key `key` to pod `pod` (a snapshot index); false when
    /// it already was.
    pub fn close(&mut self, pod: usize, key: &str, value: &str) -> bool {
        self.by_pod
            .entry(pod)
            .or_default()
            .insert((key.to_string(), value.to_string()))
    }

    /// Closes a domain to `pod` as [`Closed::close`] does, and takes it out of the domains
    /// its spreads count: its workload got no pod there. False when it already was gone.
    pub fn close_gone(&mut self, pod: usize, key: &str, value: &str) -> bool {
        self.close(pod, key, value);
        self.gone
            .entry(pod)
            .or_default()
            .insert((key.to_string(), value.to_string()))
    }

    /// Nothing closed, and flexible pods placed as `hold` says.
    pub fn holding(hold: Hold) -> Self {
        Closed {
            hold,
            ..Closed::default()
        }
    }

    /// Where flexible pods go under a spread counting only some nodes.
    pub fn hold(&self) -> Hold {
        self.hold
    }

    /// The domains closed to `pod`, and those gone from its spreads.
    fn for_pod(&self, pod: usize) -> (DomainSet, DomainSet) {
        let get = |m: &HashMap<usize, DomainSet>| m.get(&pod).cloned().unwrap_or_default();
        (get(&self.by_pod), get(&self.gone))
    }
}

/// The classes after pinning, and the pods no domain admits.
pub struct Pinned {
    /// Classes, constrained ones split by domain and pinned.
    pub classes: Vec<PodClass>,
    /// Pods (snapshot indices) that no domain admits, with the reason.
    pub refused: Vec<(usize, String)>,
    /// The spreads counting only some nodes whose nodes some class could be held off or on
    /// ([`Hold`]).
    pub(crate) holdable: BTreeSet<FilteredSpread>,
    /// The classes (by [`PodClass::origin`]) that own one of the `holdable` spreads (the
    /// on-demand-only pods): their nodes are the ones it counts.
    pub(crate) leading: BTreeSet<usize>,
    /// The classes (by origin) that could be held off a `holdable` spread's nodes (the
    /// flexible pods): left `Free`, they should fill the room the leading classes' nodes
    /// leave, so the packer opens nodes for the leading classes first.
    pub(crate) deferring: BTreeSet<usize>,
    /// The pods (snapshot indices) of the leading and deferring classes, pinned or refused.
    pub(crate) holdable_pods: Vec<usize>,
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Group {
    /// Index into the keys.
    key: usize,
    scope: Scope,
    /// The nodes whose pods a spread counts, when not all of them (its policies).
    nodes: Option<NodeFilter>,
}

/// Which nodes' pods a spread counts, as the kube-scheduler reads `nodeAffinityPolicy: Honor`
/// (the default: nodes the constrained pod's own node terms select) and `nodeTaintsPolicy:
/// Honor` (nodes whose taints it tolerates).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct NodeFilter {
    /// Node terms, any of which selects a node; empty: every node.
    terms: Vec<Requirements>,
    /// Tolerations a node's taints must be tolerated by; `None`: taints do not matter.
    tolerations: Option<Vec<Toleration>>,
}

impl NodeFilter {
    /// The filter of `pod`'s spread `s`, `None` when it counts every node.
    pub(crate) fn of(pod: &Pod, s: &TopologySpread) -> Option<NodeFilter> {
        let terms = if s.honor_node_affinity {
            pod.spread_node_terms().to_vec()
        } else {
            Vec::new()
        };
        let tolerations = s.honor_node_taints.then(|| pod.tolerations.clone());
        (!terms.is_empty() || tolerations.is_some()).then_some(NodeFilter { terms, tolerations })
    }

    /// True when the pods on `node` count.
    pub(crate) fn counts_on(&self, node: &Node) -> bool {
        (self.terms.is_empty() || self.terms.iter().any(|t| t.matches_labels(&node.labels)))
            && self
                .tolerations
                .as_ref()
                .is_none_or(|tol| first_untolerated(&node.taints, tol).is_none())
    }

    /// The ways a node is never one this filter counts: per term, the negation of one of its
    /// requirements on a key other than the spread's own `key` (a pod held off the counted
    /// nodes must still reach every domain of the spread), every choice of one per term (at
    /// most [`MAX_WAYS_OUT`]), so the caller can take one the pod agrees with. Empty when the
    /// terms count every node or a term has nothing else to negate.
    pub(crate) fn outside(&self, key: &str) -> Vec<Requirements> {
        if self.terms.is_empty() {
            return Vec::new();
        }
        let mut ways = vec![Requirements::new()];
        for t in &self.terms {
            let negations: Vec<(&String, Requirement)> = t
                .iter()
                .filter(|(k, _)| k.as_str() != key)
                .filter_map(|(k, r)| r.negation().map(|n| (k, n)))
                .collect();
            ways = ways
                .iter()
                .flat_map(|w| {
                    negations.iter().map(move |(k, n)| {
                        let mut w = w.clone();
                        w.add(k, n.clone());
                        w
                    })
                })
                .take(MAX_WAYS_OUT)
                .collect();
        }
        ways
    }

    /// Requirements under which every node is one this filter counts, as far as keys other
    /// than the spread's own `key` go (on that key a node outside the filter is in no domain
    /// the spread counts): the one term's requirements on the other keys. `None` when the
    /// filter has several terms, nothing on other keys, or also reads taints
    /// (`nodeTaintsPolicy: Honor`: a tainted node the pod tolerates would not count).
    pub(crate) fn inside(&self, key: &str) -> Option<Requirements> {
        let [t] = self.terms.as_slice() else {
            return None;
        };
        if self.tolerations.is_some() {
            return None;
        }
        let mut out = Requirements::new();
        for (k, r) in t.iter().filter(|(k, _)| k.as_str() != key) {
            out.add(k, r.clone());
        }
        (!out.is_empty()).then_some(out)
    }

    /// True when pods of a class with node terms `terms` may land on nodes this filter
    /// counts: some of its terms agree with some of the filter's. Where they land is decided
    /// after the pass, so a class that may land on either kind of node is counted (as the
    /// counts of pods already placed are).
    pub(crate) fn may_count(&self, terms: &[Requirements]) -> bool {
        self.terms.is_empty()
            || terms.is_empty()
            || self.terms.iter().any(|f| {
                terms.iter().any(|t| {
                    f.iter()
                        .all(|(k, r)| t.get(k).is_none_or(|c| c.compatible(r)))
                })
            })
    }
}

/// The most ways out of a filter [`NodeFilter::outside`] offers.
const MAX_WAYS_OUT: usize = 16;

#[derive(Clone)]
struct Spread {
    group: usize,
    max_skew: i64,
    min_domains: i64,
}

/// A class's terms on one topology key.
#[derive(Default, Clone)]
struct Terms {
    spreads: Vec<Spread>,
    affinity: Vec<usize>,
    anti: Vec<usize>,
    /// The required ones among `anti`: they repel other pods.
    anti_required: Vec<usize>,
    /// The required ones among `affinity`: only they end one another's first-pod exception
    /// (`choose`), as the kube-scheduler counts partners for required terms only.
    affinity_required: Vec<usize>,
    /// Groups whose scope matches the class (its pods count there).
    matches: Vec<usize>,
    /// Anti groups whose repellers reject the class.
    repelled_by: Vec<usize>,
}

impl Terms {
    fn is_constrained(&self) -> bool {
        !self.spreads.is_empty() || !self.affinity.is_empty() || !self.anti.is_empty()
    }
}

/// Where the values of one topology key can come from: existing nodes carrying the label, and
/// per Provisioner the values its nodes can take, each with the most any of its instance types
/// offering that value holds (a pod larger than that cannot land there).
struct KeyDomains {
    /// Per Provisioner (in the order given): value → component-wise largest allocatable.
    by_provisioner: Vec<BTreeMap<String, Resources>>,
    /// (node index, value) of the existing nodes carrying the key.
    nodes: Vec<(usize, String)>,
}

impl KeyDomains {
    fn new(
        key: &str,
        provs: &[&Provisioner],
        prov_reqs: &[Requirements],
        catalog: &[InstanceType],
        nodes: &[Node],
    ) -> Self {
        let by_provisioner = provs
            .iter()
            .zip(prov_reqs)
            .map(|(p, reqs)| provisioner_values(key, p, reqs, catalog))
            .collect();
        let nodes = nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.labels.get(key).map(|v| (i, v.clone())))
            .collect();
        KeyDomains {
            by_provisioner,
            nodes,
        }
    }
}

/// The values of `key` a Provisioner's nodes can take, with the largest allocatable among its
/// types offering each: a zone or capacity type from the offerings, a label the Provisioner
/// sets or requires from its requirements, an instance label from its types.
fn provisioner_values(
    key: &str,
    prov: &Provisioner,
    reqs: &Requirements,
    catalog: &[InstanceType],
) -> BTreeMap<String, Resources> {
    let mut out: BTreeMap<String, Resources> = BTreeMap::new();
    let mut add = |v: &str, r: &Resources| {
        out.entry(v.to_string())
            .and_modify(|m| m.max_with(r))
            .or_insert_with(|| r.clone());
    };
    let fixed = reqs.get(key).and_then(|r| r.in_values());
    for t in catalog {
        if t.first_label_conflict(reqs).is_some() {
            continue;
        }
        // What the Provisioner's nodes of this type hold (its kubelet and volume settings).
        let room = prov.kubelet.allocatable(t);
        let offered = t
            .offerings
            .iter()
            .filter(|o| o.available && offering_allowed(o, reqs));
        match key {
            labels::ZONE => offered.for_each(|o| add(&o.zone, &room)),
            labels::CAPACITY_TYPE => offered.for_each(|o| add(o.capacity_type.as_str(), &room)),
            _ => {
                if offered.count() == 0 {
                    continue;
                }
                match (t.labels.get(key), fixed) {
                    // The type's own label (the Provisioner allows it: no conflict above).
                    (Some(v), _) => add(v, &room),
                    // A label the Provisioner sets or requires on every node.
                    (None, Some(values)) => values.iter().for_each(|v| add(v, &room)),
                    (None, None) => {}
                }
            }
        }
    }
    out
}

/// The cheapest offering per value of `key` among the instance types a Provisioner allows
/// whose nodes hold `pod`: between domains a spread counts equally, the pod goes where its node
/// costs least (spreading four pods over instance types buys the four cheapest that fit, not
/// the first four by name). Zone, capacity type and hostname are not priced here: their ties
/// are broken by name as before (offerings of one type cost the same across zones on demand).
fn cheapest_per_value(
    key: &str,
    pod: &Pod,
    provs: &[&Provisioner],
    prov_reqs: &[Requirements],
    catalog: &[InstanceType],
) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for (prov, reqs) in provs.iter().zip(prov_reqs) {
        let fixed = reqs.get(key).and_then(|r| r.in_values());
        for t in catalog {
            if t.first_label_conflict(reqs).is_some()
                || !pod.requests.fits(&prov.kubelet.allocatable(t))
            {
                continue;
            }
            let Some(price) = t
                .offerings
                .iter()
                .filter(|o| o.available && offering_allowed(o, reqs))
                .map(|o| o.price)
                .min_by(f64::total_cmp)
            else {
                continue;
            };
            let values: Vec<String> = match (t.labels.get(key), fixed) {
                (Some(v), _) => vec![v.clone()],
                (None, Some(vs)) => vs.to_vec(),
                (None, None) => Vec::new(),
            };
            for v in values {
                let e = out.entry(v).or_insert(f64::INFINITY);
                *e = e.min(price);
            }
        }
    }
    out
}

/// True when some of the node terms allow the domain value.
pub(crate) fn terms_allow(terms: &[Requirements], key: &str, value: &str) -> bool {
    terms.is_empty()
        || terms
            .iter()
            .any(|t| t.get(key).is_none_or(|r| r.allows(value)))
}

/// The domains of `key` the pod could be placed in, as its spreads count them: values of the
/// existing nodes it tolerates, selects (by its own node terms) and fits on, and values a
/// Provisioner whose taints it tolerates and whose requirements its terms agree with can
/// launch a node holding it in. A full node, or a zone only a tainted node group reaches,
/// is no domain of the pod's.
fn reachable(
    key: &str,
    pod: &Pod,
    domains: &KeyDomains,
    nodes: &[Node],
    free: &[Resources],
    provs: &[&Provisioner],
    prov_reqs: &[Requirements],
) -> BTreeSet<String> {
    let terms = pod.spread_node_terms();
    let mut out = BTreeSet::new();
    for (i, v) in &domains.nodes {
        if could_run(pod, terms, &nodes[*i], &free[*i]) {
            out.insert(v.clone());
        }
    }
    for ((p, reqs), values) in provs.iter().zip(prov_reqs).zip(&domains.by_provisioner) {
        if first_untolerated(&p.taints, &pod.tolerations).is_some() {
            continue;
        }
        let agree = |v: &str| {
            terms.is_empty()
                || terms.iter().any(|t| {
                    t.get(key).is_none_or(|r| r.allows(v))
                        && t.iter()
                            .all(|(k, r)| k == key || reqs.get(k).is_none_or(|m| m.compatible(r)))
                })
        };
        for (v, most) in values {
            if !out.contains(v) && pod.requests.fits(most) && agree(v) {
                out.insert(v.clone());
            }
        }
    }
    out
}

/// True when `pod` (with node terms `terms`) could run on the existing `node` with `free`
/// room: schedulable, tolerated, selected and roomy enough.
fn could_run(pod: &Pod, terms: &[Requirements], node: &Node, free: &Resources) -> bool {
    let selects = terms.is_empty() || terms.iter().any(|t| t.matches_labels(&node.labels));
    !node.unschedulable
        && selects
        && first_untolerated(&node.taints, &pod.tolerations).is_none()
        && pod.requests.fits(free)
}

/// True when a Provisioner could launch a node for `pod` with `extra` added to its node
/// terms: one it tolerates, agreeing with a term, with an offered instance type that holds
/// the pod.
fn launchable(
    pod: &Pod,
    extra: &Requirements,
    provs: &[&Provisioner],
    prov_reqs: &[Requirements],
    catalog: &[InstanceType],
) -> bool {
    let terms: Vec<Requirements> = if pod.node_terms.is_empty() {
        vec![extra.clone()]
    } else {
        pod.node_terms.iter().map(|t| t.intersect(extra)).collect()
    };
    provs.iter().zip(prov_reqs).any(|(prov, reqs)| {
        first_untolerated(&prov.taints, &pod.tolerations).is_none()
            && terms.iter().any(|t| {
                if reqs.conflict(t).is_some() || t.iter().any(|(_, r)| r.is_unsatisfiable()) {
                    return false;
                }
                let both = reqs.intersect(t);
                catalog.iter().any(|ty| {
                    ty.first_label_conflict(&both).is_none()
                        && pod.requests.fits(&prov.kubelet.allocatable(ty))
                        && ty
                            .offerings
                            .iter()
                            .any(|o| o.available && offering_allowed(o, &both))
                })
            })
    })
}

/// The node terms of `pod` with `extra` added to each (the terms themselves when none).
fn with_terms(pod: &Pod, extra: &Requirements) -> Pod {
    let add = |terms: &[Requirements]| -> Vec<Requirements> {
        if terms.is_empty() {
            vec![extra.clone()]
        } else {
            terms
                .iter()
                .map(|t| t.intersect(extra))
                .filter(|t| t.iter().all(|(_, r)| !r.is_unsatisfiable()))
                .collect()
        }
    };
    let mut p = pod.clone();
    p.node_terms = add(&pod.node_terms);
    p.own_node_terms = pod.own_node_terms.as_deref().map(add);
    p
}

/// The values of `key` on the existing nodes whose pods a spread counts (`filter`: the pod's
/// node terms and tolerations, as its `nodeAffinityPolicy` and `nodeTaintsPolicy` say; `None`:
/// every node). The kube-scheduler counts each such node's domain in the spread's minimum
/// whether or not the pod fits or may run there: a full node in a zone no Provisioner covers,
/// or a tainted one under the default `nodeTaintsPolicy: Ignore`, still caps the other zones.
fn counted_node_values(
    domains: &KeyDomains,
    nodes: &[Node],
    filter: Option<&NodeFilter>,
) -> BTreeSet<String> {
    domains
        .nodes
        .iter()
        .filter(|(i, _)| filter.is_none_or(|f| f.counts_on(&nodes[*i])))
        .map(|(_, v)| v.clone())
        .collect()
}

/// Free room on each node: allocatable less what the pods bound there request.
fn free_room(nodes: &[Node], pods: &[Pod]) -> Vec<Resources> {
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let mut free: Vec<Resources> = nodes.iter().map(|n| n.allocatable.clone()).collect();
    for p in pods {
        if let Some(&i) = p.node_name.as_deref().and_then(|n| index.get(n)) {
            free[i].sub(&p.requests);
        }
    }
    free
}

/// True for topology keys decided here: every key but the hostname, whose domains are the
/// nodes themselves (see `node_rules` and `colocation`).
fn is_domain_key(key: &str) -> bool {
    key != labels::HOSTNAME
}

/// Splits the classes that take part in topology terms on any node label but the hostname
/// (zone, capacity type, architecture, instance type, a Provisioner's own label, ...) into
/// pinned sub-classes.
///
/// When that refuses pods, it is done again with their classes that have a spread last, and
/// the one refusing fewer is kept: a class whose spread's minimum sits in a domain it may not use (its
/// anti-affinity keeps it out) can place more once the free classes have filled that domain,
/// although the order puts the narrower class first. When pods are still refused, free
/// classes the spreads count pile into the most populated domain no spread pod went to
/// (`Order::Piling`), then the classes with a spread take their pods in turns (`in_turns`);
/// each run is kept if it refuses fewer still.
pub fn pin(
    pods: &[Pod],
    nodes: &[Node],
    classes: Vec<PodClass>,
    provs: &[&Provisioner],
    catalog: &[InstanceType],
    closed: &Closed,
) -> Pinned {
    let again = classes.clone();
    let (first, order) = pin_in_order(
        pods,
        nodes,
        classes,
        provs,
        catalog,
        closed,
        &Order::Affinity(BTreeSet::new()),
    );
    if first.refused.is_empty() {
        return first;
    }
    let class_of: HashMap<usize, usize> = again
        .iter()
        .enumerate()
        .flat_map(|(ci, c)| c.pods.iter().map(move |&p| (p, ci)))
        .collect();
    // Only classes with a spread of their own move: a free class stays before the spreads
    // that count it (`affinity_order`), which rely on that.
    let last: BTreeSet<usize> = first
        .refused
        .iter()
        .filter_map(|(p, _)| class_of.get(p).copied())
        .filter(|&ci| has_domain_spread(&pods[again[ci].template]))
        .collect();
    if last.is_empty() {
        return first;
    }
    let turns = in_turns(pods, &again, &order);
    let again_for_pile = again.clone();
    let (second, _) = pin_in_order(
        pods,
        nodes,
        again,
        provs,
        catalog,
        closed,
        &Order::Affinity(last.clone()),
    );
    let mut best = if second.refused.len() < first.refused.len() {
        second
    } else {
        first
    };
    // Free classes that spreads count pile into the most populated domain no spread pod went
    // to, rather than even out: where a spread's minimum can rise only by their pods (a
    // domain its own pods are kept out of), every domain holds only so many of its pods, and
    // free pods spread over them take the places the spread's pods need.
    if !best.refused.is_empty() {
        let (piled, _) = pin_in_order(
            pods,
            nodes,
            again_for_pile,
            provs,
            catalog,
            closed,
            &Order::Piling(last),
        );
        if piled.refused.len() < best.refused.len() {
            best = piled;
        }
    }
    let Some(turns) = turns else {
        return best;
    };
    for order in turns.orders {
        if best.refused.is_empty() {
            break;
        }
        let given = Order::Given {
            order,
            family: &turns.family,
        };
        let (run, _) = pin_in_order(
            pods,
            nodes,
            turns.singles.clone(),
            provs,
            catalog,
            closed,
            &given,
        );
        if run.refused.len() < best.refused.len() {
            best = Pinned {
                classes: rejoin(run.classes, &class_of),
                ..run
            };
        }
    }
    best
}

/// True when `p` has a hard spread over a key the pinning decides.
fn has_domain_spread(p: &Pod) -> bool {
    p.topology_spread
        .iter()
        .any(|s| s.hard && is_domain_key(&s.topology_key))
}

/// The most pods [`in_turns`] splits into classes of one pod: pinning takes time per class.
const TURNS_MAX_PODS: usize = 256;

/// The order [`pin_in_order`] takes the classes in.
enum Order<'a> {
    /// `affinity_order`, with these classes (indices) taken after all others.
    Affinity(BTreeSet<usize>),
    /// As `Affinity`, free classes piling up (`Prefer::pile`).
    Piling(BTreeSet<usize>),
    /// This order of every class index; `family` gives each class the class it was split
    /// from ([`Turns`]), so that its siblings are not taken for other classes.
    Given {
        order: Vec<usize>,
        family: &'a [usize],
    },
}

/// Classes split for [`in_turns`].
struct Turns {
    /// The classes: those taking turns split into one pod each, the others as they were.
    singles: Vec<PodClass>,
    /// Per class of `singles`, the index of the class it came from.
    family: Vec<usize>,
    /// The orders to try, of indices into `singles`.
    orders: Vec<Vec<usize>>,
}

/// The classes with a spread over a domain key taking their pods in turns: each split into
/// classes of one pod, dealt round in `order` (the first run's order of the classes) where
/// the first of them came, or else where the last came, the other classes keeping their
/// places (a free class between them may have to come before the later ones, or after the
/// earlier ones). Pods of two classes that one spread counts may each need the other's pods
/// placed between their own: two pods that must share z-a with a db and two with only the
/// spread, over z-a and z-b with maxSkew 1, are all placed only when the others fill z-b
/// between them. None when fewer than two classes take turns or they hold more than
/// [`TURNS_MAX_PODS`] pods; a class whose pods must share a node (required hostname pod
/// affinity) is not split.
fn in_turns(pods: &[Pod], classes: &[PodClass], order: &[usize]) -> Option<Turns> {
    let takes_turns = |c: &PodClass| {
        let p = &pods[c.template];
        has_domain_spread(p)
            && !p
                .affinity
                .iter()
                .any(|a| !a.anti && a.weight.is_none() && a.topology_key == labels::HOSTNAME)
    };
    let turning: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&ci| takes_turns(&classes[ci]))
        .collect();
    let split_pods: usize = turning.iter().map(|&ci| classes[ci].pods.len()).sum();
    if turning.len() < 2 || split_pods > TURNS_MAX_PODS {
        return None;
    }
    let mut singles: Vec<PodClass> = Vec::with_capacity(classes.len() + split_pods);
    let mut family = Vec::with_capacity(classes.len() + split_pods);
    // Per class of `classes`, the indices of its classes in `singles`.
    let mut index: Vec<Vec<usize>> = Vec::with_capacity(classes.len());
    for (ci, c) in classes.iter().enumerate() {
        let start = singles.len();
        if takes_turns(c) {
            singles.extend(c.pods.iter().map(|&p| PodClass {
                pods: vec![p],
                template: p,
                ..c.clone()
            }));
        } else {
            singles.push(c.clone());
        }
        family.resize(singles.len(), ci);
        index.push((start..singles.len()).collect());
    }
    let rounds = turning.iter().map(|&ci| index[ci].len()).max().unwrap_or(0);
    let mut dealt: Vec<usize> = Vec::with_capacity(split_pods);
    for r in 0..rounds {
        dealt.extend(turning.iter().filter_map(|&cj| index[cj].get(r).copied()));
    }
    // Dealt where the turning class at `at` (its rank among them) came.
    let deal_at = |at: usize| -> Vec<usize> {
        let mut given = Vec::with_capacity(singles.len());
        let mut seen = 0;
        for &ci in order {
            if !takes_turns(&classes[ci]) {
                given.extend(index[ci].iter().copied());
                continue;
            }
            if seen == at {
                given.extend(dealt.iter().copied());
            }
            seen += 1;
        }
        given
    };
    let mut orders = vec![deal_at(0)];
    let at_last = deal_at(turning.len() - 1);
    if at_last != orders[0] {
        orders.push(at_last);
    }
    Some(Turns {
        singles,
        family,
        orders,
    })
}

/// The sub-classes pinned from [`in_turns`]'s classes, joined again per class of origin
/// (`class_of`: pod to class) and pinned requirements, in the order they came.
fn rejoin(classes: Vec<PodClass>, class_of: &HashMap<usize, usize>) -> Vec<PodClass> {
    let mut at: HashMap<(usize, Requirements), usize> = HashMap::new();
    let mut out: Vec<PodClass> = Vec::with_capacity(classes.len());
    for c in classes {
        let Some(&parent) = c.pods.first().and_then(|p| class_of.get(p)) else {
            out.push(c);
            continue;
        };
        match at.get(&(parent, c.pinned.clone())) {
            Some(&i) => out[i].pods.extend(c.pods),
            None => {
                at.insert((parent, c.pinned.clone()), out.len());
                out.push(c);
            }
        }
    }
    for c in &mut out {
        c.pods.sort_unstable();
        if let Some(&first) = c.pods.first() {
            c.template = first;
        }
    }
    out
}

/// [`pin`] with the classes taken in `order`; also gives the order it took them in.
fn pin_in_order(
    pods: &[Pod],
    nodes: &[Node],
    classes: Vec<PodClass>,
    provs: &[&Provisioner],
    catalog: &[InstanceType],
    closed: &Closed,
    order: &Order,
) -> (Pinned, Vec<usize>) {
    let pile = matches!(order, Order::Piling(_));
    let mut keys: Vec<String> = Vec::new();
    let mut key_index: HashMap<String, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut gid: HashMap<Group, usize> = HashMap::new();
    let mut intern = |key: &str, scope: Scope, nodes: Option<NodeFilter>| -> (usize, usize) {
        let k = *key_index.entry(key.to_string()).or_insert_with(|| {
            keys.push(key.to_string());
            keys.len() - 1
        });
        let g = Group {
            key: k,
            scope,
            nodes,
        };
        let id = *gid.entry(g.clone()).or_insert_with(|| {
            groups.push(g);
            groups.len() - 1
        });
        (k, id)
    };
    // Terms of each class, per key (grown as keys appear).
    let mut terms: Vec<Vec<Terms>> = Vec::with_capacity(classes.len());
    for c in &classes {
        let p = &pods[c.template];
        let mut t: Vec<Terms> = Vec::new();
        let at = |t: &mut Vec<Terms>, k: usize| -> usize {
            if t.len() <= k {
                t.resize(k + 1, Terms::default());
            }
            k
        };
        for s in p
            .topology_spread
            .iter()
            .filter(|s| s.hard && is_domain_key(&s.topology_key))
        {
            let (k, g) = intern(
                &s.topology_key,
                Scope::of_spread(p, s),
                NodeFilter::of(p, s),
            );
            let k = at(&mut t, k);
            t[k].spreads.push(Spread {
                group: g,
                max_skew: i64::from(s.max_skew.max(1)),
                min_domains: i64::from(s.min_domains.unwrap_or(1).max(1)),
            });
        }
        // Every term a pending pod still carries is in force for it; only required anti terms
        // also repel other pods.
        for a in p.affinity.iter().filter(|a| is_domain_key(&a.topology_key)) {
            let (k, g) = intern(&a.topology_key, Scope::of_term(p, a), None);
            let k = at(&mut t, k);
            if a.anti {
                t[k].anti.push(g);
                if a.weight.is_none() {
                    t[k].anti_required.push(g);
                }
            } else {
                t[k].affinity.push(g);
                if a.weight.is_none() {
                    t[k].affinity_required.push(g);
                }
            }
        }
        terms.push(t);
    }
    // Anti-affinity of running pods.
    let mut running_anti: Vec<(usize, usize)> = Vec::new(); // (pod, group)
    for (i, p) in pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.node_name.is_some())
    {
        for a in p.affinity.iter().filter(|a| a.anti && a.weight.is_none()) {
            if is_domain_key(&a.topology_key) {
                let (_, g) = intern(&a.topology_key, Scope::of_term(p, a), None);
                running_anti.push((i, g));
            }
        }
    }
    if groups.is_empty() {
        let order = (0..classes.len()).collect();
        let pinned = Pinned {
            classes,
            refused: Vec::new(),
            holdable: BTreeSet::new(),
            leading: BTreeSet::new(),
            deferring: BTreeSet::new(),
            holdable_pods: Vec::new(),
        };
        return (pinned, order);
    }
    for t in &mut terms {
        t.resize(keys.len(), Terms::default());
    }
    let anti_groups: BTreeSet<usize> = terms
        .iter()
        .flat_map(|t| t.iter().flat_map(|k| k.anti_required.iter().copied()))
        .chain(running_anti.iter().map(|(_, g)| *g))
        .collect();
    for (ci, c) in classes.iter().enumerate() {
        let p = &pods[c.template];
        for (g, group) in groups.iter().enumerate() {
            let may_count = group
                .nodes
                .as_ref()
                .is_none_or(|f| f.may_count(&p.node_terms));
            if group.scope.matches(p) && may_count {
                terms[ci][group.key].matches.push(g);
                if anti_groups.contains(&g) {
                    terms[ci][group.key].repelled_by.push(g);
                }
            }
        }
    }
    // Counts from running pods.
    let by_name: HashMap<&str, &Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut count: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); groups.len()];
    // Per spread group, the pods of the batch its spreads constrain, per domain they were
    // pinned to: a domain holding one is never full for `Fill::rising`.
    let mut constrained: Vec<BTreeSet<String>> = vec![BTreeSet::new(); groups.len()];
    // Per group of a required pod-affinity term, the domain where a pod first met it with no
    // partner (the first-pod exception): a pod the term selects goes there when it may.
    let mut started_in: Vec<Option<String>> = vec![None; groups.len()];
    let mut repel: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); groups.len()];
    for p in pods {
        let Some(node) = p.node_name.as_deref().and_then(|n| by_name.get(n)) else {
            continue;
        };
        for (g, group) in groups.iter().enumerate() {
            if let Some(d) = node.labels.get(&keys[group.key]) {
                let counted = group.nodes.as_ref().is_none_or(|f| f.counts_on(node));
                if counted && group.scope.matches(p) {
                    *count[g].entry(d.clone()).or_default() += 1;
                }
            }
        }
    }
    for &(i, g) in &running_anti {
        let node = pods[i].node_name.as_deref().and_then(|n| by_name.get(n));
        if let Some(d) = node.and_then(|n| n.labels.get(&keys[groups[g].key])) {
            *repel[g].entry(d.clone()).or_default() += 1;
        }
    }
    // Each Provisioner's node requirements, worked out once for every key and class.
    let prov_reqs: Vec<Requirements> = provs.iter().map(|p| p.node_requirements()).collect();
    let key_domains: Vec<KeyDomains> = keys
        .iter()
        .map(|k| KeyDomains::new(k, provs, &prov_reqs, catalog, nodes))
        .collect();
    let free = free_room(nodes, pods);
    // A class whose pods may land both on nodes a filtered spread counts and on others (a
    // flexible pod under the spread of on-demand-only pods, `nodeAffinityPolicy: Honor`) is
    // placed as the passes' `Hold` says; held off or on, the requirement joins its pins
    // (`held`). It may be held only when it takes part in no rule on the key held (a
    // capacity-type spread it counts in needs it on both sides) and a Provisioner can launch
    // it that way. Held on, it still takes the room existing counted nodes have.
    let hold = closed.hold();
    let mut holdable = BTreeSet::new();
    let mut deferring = BTreeSet::new();
    let mut held: Vec<Requirements> = vec![Requirements::new(); classes.len()];
    for (ci, c) in classes.iter().enumerate() {
        let p = &pods[c.template];
        for k in 0..keys.len() {
            if terms[ci][k]
                .matches
                .iter()
                .all(|&g| groups[g].nodes.is_none())
            {
                continue;
            }
            let mut kept = Vec::new();
            for g in std::mem::take(&mut terms[ci][k].matches) {
                let Some(f) = groups[g].nodes.as_ref() else {
                    kept.push(g);
                    continue;
                };
                let in_play = |reqs: &Requirements| {
                    reqs.iter().any(|(rk, _)| {
                        key_index
                            .get(rk.as_str())
                            .is_some_and(|&i| terms[ci][i].is_constrained())
                            || groups
                                .iter()
                                .any(|g| &keys[g.key] == rk && g.scope.matches(p))
                    })
                };
                let usable = |reqs: Requirements| {
                    let both = held[ci].intersect(&reqs);
                    (!in_play(&reqs) && launchable(p, &both, provs, &prov_reqs, catalog))
                        .then_some(both)
                };
                let off = f.outside(&keys[k]).into_iter().find_map(usable);
                if off.is_some() {
                    holdable.insert((keys[k].clone(), groups[g].scope.clone(), f.clone()));
                    deferring.insert(c.origin);
                }
                match (hold, off) {
                    (Hold::Off, Some(off)) => held[ci] = off,
                    (Hold::On, Some(_)) => {
                        if let Some(on) = f.inside(&keys[k]).and_then(usable) {
                            held[ci] = on;
                        }
                        kept.push(g);
                    }
                    _ => kept.push(g),
                }
            }
            terms[ci][k].matches = kept;
        }
    }
    let leading: BTreeSet<usize> = classes
        .iter()
        .zip(&terms)
        .filter(|(_, t)| {
            t.iter().enumerate().any(|(k, t)| {
                t.spreads.iter().any(|s| {
                    let g = &groups[s.group];
                    g.nodes.as_ref().is_some_and(|f| {
                        holdable.contains(&(keys[k].clone(), g.scope.clone(), f.clone()))
                    })
                })
            })
        })
        .map(|(c, _)| c.origin)
        .collect();
    let holdable_pods: Vec<usize> = classes
        .iter()
        .filter(|c| leading.contains(&c.origin) || deferring.contains(&c.origin))
        .flat_map(|c| c.pods.iter().copied())
        .collect();
    // Held pins can keep a class off other filtered spreads' nodes too (held on on-demand,
    // the spread of spot-only pods no longer counts it): it is counted where it may land.
    for (ci, c) in classes.iter().enumerate() {
        if held[ci].is_empty() {
            continue;
        }
        let held_terms = with_terms(&pods[c.template], &held[ci]).node_terms;
        for t in terms[ci].iter_mut() {
            t.matches.retain(|&g| {
                groups[g]
                    .nodes
                    .as_ref()
                    .is_none_or(|f| f.may_count(&held_terms))
            });
        }
    }
    // Per spread group, the domains of the existing nodes it counts: a group is shared by
    // every class whose spread has its key, scope and node filter, so it is worked out once.
    let spread_groups: BTreeSet<usize> = terms
        .iter()
        .flat_map(|t| t.iter().flat_map(|k| k.spreads.iter().map(|s| s.group)))
        .collect();
    let group_node_values: HashMap<usize, BTreeSet<String>> = spread_groups
        .into_iter()
        .map(|g| {
            let group = &groups[g];
            let values = counted_node_values(&key_domains[group.key], nodes, group.nodes.as_ref());
            (g, values)
        })
        .collect();

    // Classes are decided targets first: one with affinity to other pending classes waits for
    // them, whatever their sizes, so their domains are known when it chooses. The sub-classes
    // come out in the classes' own order.
    // Per class and key: its own node terms fix the key to one value (a nodeSelector on the
    // zone), so it cannot move out of another class's way.
    let fixed: Vec<Vec<bool>> = classes
        .iter()
        .map(|c| {
            let p = &pods[c.template];
            keys.iter()
                .map(|k| {
                    !p.node_terms.is_empty()
                        && p.node_terms
                            .iter()
                            .all(|t| t.get(k).and_then(|r| r.single_value()).is_some())
                })
                .collect()
        })
        .collect();
    let group_keys: Vec<usize> = groups.iter().map(|g| g.key).collect();
    // The domains of key `k` pod `p` could be placed in (`reachable`).
    let reach_of = |p: &Pod, k: usize| {
        reachable(
            &keys[k],
            p,
            &key_domains[k],
            nodes,
            &free,
            provs,
            &prov_reqs,
        )
    };
    let identity: Vec<usize>;
    let family = match order {
        Order::Given { family, .. } => *family,
        Order::Affinity(_) | Order::Piling(_) => {
            identity = (0..classes.len()).collect();
            &identity
        }
    };
    let unusable = unusable_domains(
        &terms,
        family,
        &groups,
        |ci, k| {
            let p = &pods[classes[ci].template];
            reach_of(p, k)
                .into_iter()
                .filter(|d| terms_allow(&p.node_terms, &keys[k], d))
                .collect()
        },
        &count,
        &repel,
    );
    let order = match order {
        Order::Affinity(last) | Order::Piling(last) => {
            let (mut order, later): (Vec<usize>, Vec<usize>) =
                affinity_order(&terms, &group_keys, &fixed)
                    .into_iter()
                    .partition(|c| !last.contains(c));
            order.extend(later);
            order
        }
        Order::Given { order, .. } => order.clone(),
    };
    let mut slots: Vec<Vec<PodClass>> = vec![Vec::new(); classes.len()];
    let mut taken: Vec<Option<PodClass>> = classes.into_iter().map(Some).collect();
    let mut refused = Vec::new();
    for &ci in &order {
        let Some(mut class) = taken[ci].take() else {
            continue;
        };
        let off = &held[ci];
        class.pinned = class.pinned.intersect(off);
        // A class whose pods must all share one node goes into the domains its first pod
        // chooses; each later pod is held to them (and to the spreads' skew there).
        let join = join_of(&pods[class.template], pods, || {
            pods_of_templates(&taken, &slots, pods)
        });
        let out = &mut slots[ci];
        let t = &terms[ci];
        let takes_part = |k: usize| t[k].is_constrained() || !t[k].matches.is_empty();
        let involved: Vec<usize> = (0..keys.len()).filter(|&k| takes_part(k)).collect();
        if involved.is_empty() {
            out.push(class);
            continue;
        }
        // Held off the nodes a spread counts: its domains are those it may still use.
        let held_template;
        let p = if off.is_empty() {
            &pods[class.template]
        } else {
            held_template = with_terms(&pods[class.template], off);
            &held_template
        };
        // The domains the pod could be placed in, by its own node affinity; where it may go
        // also follows its volumes.
        let reach: Vec<Vec<String>> = (0..keys.len())
            .map(|k| {
                if !takes_part(k) {
                    return Vec::new();
                }
                reach_of(p, k).into_iter().collect()
            })
            .collect();
        let prices: Vec<BTreeMap<String, f64>> = (0..keys.len())
            .map(|k| {
                let priced = !t[k].spreads.is_empty()
                    && ![labels::ZONE, labels::CAPACITY_TYPE, labels::HOSTNAME]
                        .contains(&keys[k].as_str());
                if priced {
                    cheapest_per_value(&keys[k], p, provs, &prov_reqs, catalog)
                } else {
                    BTreeMap::new()
                }
            })
            .collect();
        // Per key, how many of the class's pods the existing (and in-flight) nodes of each
        // value could run now, less those pinned there since: a pod placed there costs
        // nothing, where a value only a Provisioner reaches buys a node (a self-affine group's
        // first pod takes the empty in-flight node's zone). Other classes' pods are not taken
        // off (a preference only).
        let mut room_left: Vec<BTreeMap<String, i64>> = (0..keys.len())
            .map(|k| {
                let mut m = BTreeMap::new();
                if !takes_part(k) {
                    return m;
                }
                let limit = class.pods.len() as i64;
                for (i, v) in &key_domains[k].nodes {
                    if could_run(p, &p.node_terms, &nodes[*i], &free[*i]) {
                        *m.entry(v.clone()).or_insert(0) +=
                            free[*i].copies_fitting(&p.requests, limit);
                    }
                }
                m
            })
            .collect();
        // Per key and spread, the domains of the existing nodes the spread counts.
        let node_counted: Vec<Vec<&BTreeSet<String>>> = (0..keys.len())
            .map(|k| {
                t[k].spreads
                    .iter()
                    .filter_map(|s| group_node_values.get(&s.group))
                    .collect()
            })
            .collect();
        // The domains left to a pod once those closed to it are taken out (per pod: a domain
        // closed to one pod of a class stays open to the others). A closed domain an existing
        // node the spread counts carries is still counted: the node is there.
        let domains_for = |(shut, gone): &(DomainSet, DomainSet)| -> Vec<Domains> {
            (0..keys.len())
                .map(|k| {
                    let is_in =
                        |set: &DomainSet, v: &String| set.contains(&(keys[k].clone(), v.clone()));
                    let all: Vec<String> = reach[k]
                        .iter()
                        .filter(|v| !is_in(shut, v))
                        .cloned()
                        .collect();
                    let reached: Vec<&String> =
                        reach[k].iter().filter(|v| !is_in(gone, v)).collect();
                    let allowed = all
                        .iter()
                        .filter(|d| terms_allow(&p.node_terms, &keys[k], d))
                        .cloned()
                        .collect();
                    let counted = node_counted[k]
                        .iter()
                        .map(|on_nodes| {
                            let mut c = (*on_nodes).clone();
                            c.extend(reached.iter().map(|v| (*v).clone()));
                            c.into_iter().collect()
                        })
                        .collect();
                    Domains {
                        shut: reach[k]
                            .iter()
                            .filter(|v| is_in(shut, v))
                            .cloned()
                            .collect(),
                        all,
                        allowed,
                        counted,
                        prices: prices[k].clone(),
                    }
                })
                .collect()
        };
        let open = domains_for(&Default::default());
        let mut by_shut: HashMap<(DomainSet, DomainSet), Vec<Domains>> = HashMap::new();
        // A key no node or Provisioner of the pod's carries: required anti-affinity holds
        // anywhere (no node shares a domain with another, as the kube-scheduler reads it), and
        // being counted there means nothing; spreads and affinity cannot hold (see `choose`).
        // A key whose domains were all closed to a pod is not such a key: the pod is refused.
        let involved: Vec<usize> = involved
            .into_iter()
            .filter(|&k| {
                !reach[k].is_empty() || !t[k].spreads.is_empty() || !t[k].affinity.is_empty()
            })
            .collect();
        // A required hostname term counts a selected pod on any node (every node has a
        // hostname), which also ends the first-pod exception of the terms decided here.
        let partner_anywhere = t.iter().any(|tk| !tk.affinity_required.is_empty())
            && p.affinity
                .iter()
                .filter(|a| !a.anti && a.weight.is_none() && a.topology_key == labels::HOSTNAME)
                .any(|a| {
                    let scope = Scope::of_term(p, a);
                    pods.iter().any(|q| {
                        q.node_name
                            .as_deref()
                            .is_some_and(|n| by_name.contains_key(n))
                            && scope.matches(q)
                    })
                });
        let mut split: BTreeMap<Vec<Option<String>>, Vec<usize>> = BTreeMap::new();
        let mut first_choice: Option<Vec<Option<String>>> = None;
        // Per key, the values of the nodes a class affine to running pods must join.
        let node_values: Vec<Vec<&str>> = match &join {
            Join::Nodes(names) => keys
                .iter()
                .map(|key| {
                    names
                        .iter()
                        .filter_map(|n| by_name.get(n.as_str()))
                        .filter_map(|n| n.labels.get(key))
                        .map(String::as_str)
                        .collect()
                })
                .collect(),
            _ => Vec::new(),
        };
        for &pi in &class.pods {
            let shut = closed.for_pod(pi);
            let domains = if shut.0.is_empty() {
                &open
            } else {
                by_shut.entry(shut).or_insert_with_key(|s| domains_for(s))
            };
            let held: Vec<Domains>;
            let domains = match (&join, &first_choice) {
                (Join::FirstChoice, Some(first)) => {
                    held = domains
                        .iter()
                        .zip(first)
                        .map(|(d, v)| match v {
                            Some(v) => d.only(&[v.as_str()]),
                            None => d.clone(),
                        })
                        .collect();
                    &held
                }
                (Join::Nodes(_), _) => {
                    held = domains
                        .iter()
                        .zip(&node_values)
                        .map(|(d, values)| {
                            // Nodes without the key: the co-location decides (and refuses).
                            if values.is_empty() {
                                d.clone()
                            } else {
                                d.only(values)
                            }
                        })
                        .collect();
                    &held
                }
                _ => domains,
            };
            let mut choice: Vec<Option<String>> = vec![None; keys.len()];
            let mut why = None;
            // The kube-scheduler's first-pod exception holds only while no pod the terms
            // select runs (or was placed before this one) on a node carrying any of their
            // keys: one term's partner ends it for all of them.
            let started = partner_anywhere
                || t.iter()
                    .flat_map(|tk| &tk.affinity_required)
                    .any(|&g| count[g].values().any(|&n| n > 0));
            for &k in &involved {
                let fill = unusable.get(&(ci, k));
                match choose(
                    &t[k],
                    &keys[k],
                    &domains[k],
                    &count,
                    &repel,
                    &groups,
                    p,
                    fill.map(|f| (f, &constrained[..])),
                    started,
                    &Prefer {
                        room: &room_left[k],
                        started_in: &started_in,
                        pile,
                        constrained: &constrained,
                    },
                ) {
                    Ok(d) => choice[k] = Some(d),
                    Err(e) => {
                        why = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = why {
                refused.push((pi, e));
                continue;
            }
            for &k in &involved {
                let Some(d) = &choice[k] else { continue };
                if let Some(n) = room_left[k].get_mut(d) {
                    *n -= 1;
                }
                // A required term no pod met yet: this pod starts its group there.
                for &g in &t[k].affinity_required {
                    if started_in[g].is_none() && count[g].values().all(|&n| n == 0) {
                        started_in[g] = Some(d.clone());
                    }
                }
                for &g in &t[k].matches {
                    *count[g].entry(d.clone()).or_default() += 1;
                }
                for s in &t[k].spreads {
                    constrained[s.group].insert(d.clone());
                }
                for &g in &t[k].anti_required {
                    *repel[g].entry(d.clone()).or_default() += 1;
                }
            }
            if matches!(join, Join::FirstChoice) && first_choice.is_none() {
                first_choice = Some(choice.clone());
            }
            split.entry(choice).or_default().push(pi);
        }
        for (choice, members) in split {
            let mut pinned = class.pinned.clone();
            for (k, d) in choice.iter().enumerate() {
                if let Some(d) = d {
                    pinned.add(&keys[k], Requirement::single(d));
                }
            }
            out.push(PodClass {
                template: members[0],
                pods: members,
                requests: class.requests.clone(),
                pinned,
                origin: class.origin,
            });
        }
    }
    let pinned = Pinned {
        classes: slots.into_iter().flatten().collect(),
        refused,
        holdable,
        leading,
        deferring,
        holdable_pods,
    };
    (pinned, order)
}

/// Where the pods of a class must go because of their required hostname pod affinity, as far
/// as the pinning can tell (`colocation::analyze` decides the rest).
enum Join {
    /// Nothing the pinning can use.
    Free,
    /// Every term selects the class itself and no other pod, running or pending: all its pods
    /// share one node, so they go into the domains the first pod chose.
    FirstChoice,
    /// Every term that selects running pods is met only on these existing nodes: the class
    /// goes into their domains.
    Nodes(Vec<String>),
}

/// How the pods of `p`'s class must join others ([`Join`]); `others` gives the templates of
/// the other pending classes, worked out only for a class with such a term.
fn join_of<'a>(p: &Pod, pods: &[Pod], others: impl FnOnce() -> Vec<&'a Pod>) -> Join {
    let terms: Vec<Scope> = p
        .affinity
        .iter()
        .filter(|a| !a.anti && a.weight.is_none() && a.topology_key == labels::HOSTNAME)
        .map(|a| Scope::of_term(p, a))
        .collect();
    if terms.is_empty() {
        return Join::Free;
    }
    let others = others();
    let mut nodes: Option<BTreeSet<String>> = None;
    for s in &terms {
        if others.iter().any(|o| s.matches(o)) {
            return Join::Free;
        }
        let running: BTreeSet<String> = pods
            .iter()
            .filter(|o| s.matches(o))
            .filter_map(|o| o.node_name.clone())
            .collect();
        if running.is_empty() {
            if !s.matches(p) {
                return Join::Free;
            }
            continue;
        }
        nodes = Some(match nodes {
            None => running,
            Some(n) => n.intersection(&running).cloned().collect(),
        });
    }
    match nodes {
        Some(n) => Join::Nodes(n.into_iter().collect()),
        None => Join::FirstChoice,
    }
}

/// The template pods of the classes other than the one being pinned: those still waiting
/// (`taken`) and the sub-classes already pinned (`slots`).
fn pods_of_templates<'a>(
    taken: &[Option<PodClass>],
    slots: &[Vec<PodClass>],
    pods: &'a [Pod],
) -> Vec<&'a Pod> {
    taken
        .iter()
        .flatten()
        .chain(slots.iter().flatten())
        .map(|c| &pods[c.template])
        .collect()
}

/// Per (class, key) where the spreads of other classes count the class: the domains where
/// one of those spreads counts and none of its classes may go, kept out by its
/// (anti-)affinity to running pods (`reach(class, key)`: the domains a class's node terms
/// reach, those its spreads count under the default `nodeAffinityPolicy: Honor`). There the
/// class's pods raise that spread's minimum, which its own pods cannot, and hurt none of
/// those classes: a class free on the key (no rule of its own there) goes there first, a
/// class with a spread of its own prefers them when its domains score alike (pods free of a
/// zone must fill the zone the pods affine to a db elsewhere are kept out of, or those stay
/// pending). When the class may reach none of them either and no class the group counts may
/// go there, no pod of the batch raises the minimum there, so the domains a group already
/// counts that minimum plus its largest maxSkew in, and those none of its classes reach, are
/// ones none of its classes may use: the class goes there. Where no domain is such, the
/// domains the spreads' classes need least, as a preference among domains that score alike
/// only ([`Fill::only`] false): each class weighs 1/n on each of the n domains it may use,
/// summed over the spreads counting the class, and those weighing least are preferred when
/// others weigh more (a free pod in z-a, the one zone a class affine to a db there may use,
/// would leave it over the skew; in z-b or z-c, which a free spread class shares with z-a,
/// it would not). Not for a class that other classes' pod affinity selects on the key (where
/// it goes, they follow), nor where a class's affinity selects pending pods (it may come to
/// use any domain). Classes of one `family` (split from one class to take turns) count as
/// one.
fn unusable_domains(
    terms: &[Vec<Terms>],
    family: &[usize],
    groups: &[Group],
    reach: impl Fn(usize, usize) -> BTreeSet<String>,
    count: &[BTreeMap<String, i64>],
    repel: &[BTreeMap<String, i64>],
) -> HashMap<(usize, usize), Fill> {
    // Per spread group, the families of the classes it constrains; per family, its first
    // class, whose terms all its classes share.
    let mut spread_classes: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    // Per group, the families of the classes it counts (spread or not).
    let mut counted_families: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let mut first_of: HashMap<usize, usize> = HashMap::new();
    let mut pending_in = vec![false; groups.len()];
    let mut affinity_groups = BTreeSet::new();
    for (ci, t) in terms.iter().enumerate() {
        first_of.entry(family[ci]).or_insert(ci);
        for kt in t {
            kt.spreads.iter().for_each(|s| {
                spread_classes
                    .entry(s.group)
                    .or_default()
                    .insert(family[ci]);
            });
            kt.matches.iter().for_each(|&g| {
                pending_in[g] = true;
                counted_families.entry(g).or_default().insert(family[ci]);
            });
            affinity_groups.extend(kt.affinity.iter().copied());
        }
    }
    // The spread groups a class counts in that other classes' spreads constrain.
    let counted_by_others = |ci: usize, kt: &Terms| -> Vec<usize> {
        kt.matches
            .iter()
            .copied()
            .filter(|g| {
                spread_classes
                    .get(g)
                    .is_some_and(|c| c.iter().any(|&f| f != family[ci]))
            })
            .collect()
    };
    let wanted: BTreeSet<usize> = terms
        .iter()
        .enumerate()
        .flat_map(|(ci, t)| t.iter().flat_map(move |kt| counted_by_others(ci, kt)))
        .collect();
    if wanted.is_empty() {
        return HashMap::new();
    }
    let get = |m: &BTreeMap<String, i64>, d: &str| m.get(d).copied().unwrap_or(0);
    // Per family and key: (domains it may go to, domains its spreads count but it may not go
    // to); `None`: unknown (affinity to pending pods).
    type Sides = Option<(BTreeSet<String>, BTreeSet<String>)>;
    let mut sides: HashMap<(usize, usize), Sides> = HashMap::new();
    let side_of = |cj: usize, k: usize| -> Sides {
        let kt = &terms[cj][k];
        if kt.affinity.iter().any(|&a| pending_in[a]) {
            return None;
        }
        let (go, out): (BTreeSet<String>, BTreeSet<String>) =
            reach(cj, k).into_iter().partition(|d| {
                kt.anti.iter().all(|&a| get(&count[a], d) == 0)
                    && kt.repelled_by.iter().all(|&a| get(&repel[a], d) == 0)
                    // Its affinity selects running pods only (else unknown, above), and not
                    // the class itself: their domains, no first-pod start.
                    && kt.affinity.iter().all(|&a| get(&count[a], d) > 0)
            });
        Some((go, out))
    };
    // Per wanted group: per domain, how many of its families may go there and how many are
    // kept out, and how much they need it (1/n from each that may go to n domains); and how
    // many are unknown.
    struct Tally {
        go: BTreeMap<String, usize>,
        out: BTreeMap<String, usize>,
        need: BTreeMap<String, f64>,
        unknown: usize,
    }
    let mut tallies: HashMap<usize, Tally> = HashMap::new();
    for &g in &wanted {
        let k = groups[g].key;
        let mut tally = Tally {
            go: BTreeMap::new(),
            out: BTreeMap::new(),
            need: BTreeMap::new(),
            unknown: 0,
        };
        for &f in &spread_classes[&g] {
            let side = sides
                .entry((f, k))
                .or_insert_with(|| side_of(first_of[&f], k));
            match side {
                None => tally.unknown += 1,
                Some((go, out)) => {
                    let share = 1.0 / go.len().max(1) as f64;
                    for d in go.iter() {
                        *tally.go.entry(d.clone()).or_default() += 1;
                        *tally.need.entry(d.clone()).or_default() += share;
                    }
                    for d in out.iter() {
                        *tally.out.entry(d.clone()).or_default() += 1;
                        tally.need.entry(d.clone()).or_default();
                    }
                }
            }
        }
        tallies.insert(g, tally);
    }
    // Per group, the domains some class it counts may go to; None when one is unknown.
    let reached: std::cell::RefCell<HashMap<usize, Option<BTreeSet<String>>>> = Default::default();
    let reached_by_any = |g: usize| -> Option<BTreeSet<String>> {
        if let Some(r) = reached.borrow().get(&g) {
            return r.clone();
        }
        let mut all = Some(BTreeSet::new());
        let k = groups[g].key;
        for f in counted_families.get(&g).into_iter().flatten() {
            // The spread classes' sides are known from the tallies.
            let side = match sides.get(&(*f, k)) {
                Some(side) => side.clone(),
                None => side_of(first_of[f], k),
            };
            match (side, all.as_mut()) {
                (Some((go, _)), Some(a)) => a.extend(go),
                _ => all = None,
            }
        }
        reached.borrow_mut().insert(g, all.clone());
        all
    };
    // The domains none of the groups `gs` (which count class `ci` on key `k`) lets its other
    // families go to and some keeps out, else those they need least; None: no preference.
    let fill_for = |ci: usize, k: usize, gs: &[usize]| -> Option<Fill> {
        let f = family[ci];
        // The family's own part of each tally is taken out.
        let own = sides.get(&(f, k)).cloned().flatten();
        let own_in = |g: usize| spread_classes[&g].contains(&f);
        let own_go =
            |g: usize, d: &String| own_in(g) && own.as_ref().is_some_and(|(go, _)| go.contains(d));
        let mut strict: BTreeSet<String> = BTreeSet::new();
        for &g in gs {
            let tally = &tallies[&g];
            let own_unknown = own_in(g) && sides.get(&(f, k)).is_some_and(Option::is_none);
            if tally.unknown > usize::from(own_unknown) {
                return None;
            }
            let own_out =
                |d: &String| own_in(g) && own.as_ref().is_some_and(|(_, o)| o.contains(d));
            let others = |m: &BTreeMap<String, usize>, d: &String, mine: bool| {
                m.get(d).copied().unwrap_or(0) > usize::from(mine)
            };
            strict.extend(
                tally
                    .out
                    .keys()
                    .filter(|d| {
                        others(&tally.out, d, own_out(d)) && !others(&tally.go, d, own_go(g, d))
                    })
                    .cloned(),
            );
        }
        // ... and none of the spreads' classes may go there.
        strict.retain(|d| {
            gs.iter()
                .all(|&g| tallies[&g].go.get(d).copied().unwrap_or(0) <= usize::from(own_go(g, d)))
        });
        // Where the class itself may go (a class with no spread is in no tally).
        let mine = match &own {
            Some((go, _)) => go.clone(),
            None => side_of(ci, k).map(|(go, _)| go).unwrap_or_default(),
        };
        if strict.iter().any(|d| mine.contains(d)) {
            return Some(Fill {
                domains: strict,
                only: true,
                rising: Vec::new(),
                need: BTreeMap::new(),
            });
        }
        // None of them it may reach either. Where no class a group counts may go to one of
        // them, no pod of the batch raises the group's minimum there, so the domains where
        // the group already counts that minimum plus the largest maxSkew of its spreads are
        // ones none of its classes may use while it stays; pods there, or in domains the
        // group's classes cannot reach, hurt none of them (a pod kept out of z-a with the
        // spread's classes, z-a empty and z-c at 1, goes to z-c and leaves z-b, the one zone
        // left to them, alone).
        let mut full: Option<BTreeSet<String>> = None;
        // Per group, the count from which one of its domains is full: the batch's own pods
        // fill domains too, so `choose` asks again before each pod.
        let mut rising = Vec::new();
        for &g in gs {
            let tally = &tallies[&g];
            let Some(anyone) = reached_by_any(g) else {
                full = Some(BTreeSet::new());
                rising.clear();
                break;
            };
            let stuck = strict
                .iter()
                .filter(|d| tally.out.contains_key(*d) && !anyone.contains(*d))
                .map(|d| get(&count[g], d))
                .min();
            let skew = spread_classes[&g]
                .iter()
                .flat_map(|f| terms[first_of[f]][k].spreads.iter())
                .filter(|s| s.group == g)
                .map(|s| s.max_skew)
                .max();
            let (Some(stuck), Some(skew)) = (stuck, skew) else {
                full = Some(BTreeSet::new());
                rising.clear();
                break;
            };
            rising.push((g, stuck + skew));
            let theirs = |d: &String| tally.go.contains_key(d) || tally.out.contains_key(d);
            let here: BTreeSet<String> = mine
                .iter()
                .filter(|d| !theirs(d) || get(&count[g], d) >= stuck + skew)
                .cloned()
                .collect();
            full = Some(match full {
                None => here,
                Some(f) => f.intersection(&here).cloned().collect(),
            });
        }
        if let Some(full) = full.filter(|f| !f.is_empty()) {
            return Some(Fill {
                domains: full,
                only: true,
                rising,
                need: BTreeMap::new(),
            });
        }
        // Else what the other families need, summed over the groups: a domain the class may
        // use that a group's classes cannot reach weighs nothing there.
        const SAME: f64 = 1e-9;
        let own_share = own
            .as_ref()
            .map_or(0.0, |(go, _)| 1.0 / go.len().max(1) as f64);
        let mut need: BTreeMap<&String, f64> = mine.iter().map(|d| (d, 0.0)).collect();
        for &g in gs {
            for (d, n) in &tallies[&g].need {
                let theirs = if own_go(g, d) { n - own_share } else { *n };
                *need.entry(d).or_default() += theirs;
            }
        }
        // Among the domains the class may use.
        if !mine.is_empty() {
            need.retain(|d, _| mine.contains(*d));
        }
        let least = need.values().copied().fold(f64::INFINITY, f64::min);
        let most = need.values().copied().fold(f64::NEG_INFINITY, f64::max);
        let domains = if least + SAME < most {
            need.iter()
                .filter(|&(_, &n)| n <= least + SAME)
                .map(|(d, _)| (*d).clone())
                .collect()
        } else {
            BTreeSet::new()
        };
        // Each domain's rank by need (alike needs share one), for the best fit in `choose`.
        let mut levels: Vec<f64> = need.values().copied().collect();
        levels.sort_by(f64::total_cmp);
        levels.dedup_by(|b, a| *b <= *a + SAME);
        let need = need
            .into_iter()
            .map(|(d, n)| {
                let rank = levels.iter().take_while(|&&l| l + SAME < n).count();
                (d.clone(), rank)
            })
            .collect();
        (!domains.is_empty() || !rising.is_empty()).then_some(Fill {
            domains,
            only: false,
            rising,
            need,
        })
    };
    // Worked out once per family and key.
    let mut by_family: HashMap<(usize, usize), Option<Fill>> = HashMap::new();
    let mut result = HashMap::new();
    for (ci, t) in terms.iter().enumerate() {
        for (k, kt) in t.iter().enumerate() {
            let fill = by_family
                .entry((family[ci], k))
                .or_insert_with(|| {
                    let gs = counted_by_others(ci, kt);
                    // Nor for a class affine to pods of the batch: where they go is not known.
                    if gs.is_empty()
                        || kt.matches.iter().any(|g| affinity_groups.contains(g))
                        || kt.affinity.iter().any(|&a| pending_in[a])
                    {
                        return None;
                    }
                    fill_for(ci, k, &gs)
                })
                .clone();
            if let Some(fill) = fill {
                result.insert((ci, k), fill);
            }
        }
    }
    result
}

/// The order in which classes choose their domains: each after the other classes its pod
/// affinity terms select (their pods count in a group it needs) and after the classes whose
/// required anti-affinity selects it — unless its own node terms fix it to one domain of that
/// key (`fixed`, per class and key), when the anti-affine class waits for it instead —, each
/// class with a spread after the classes it counts that are free on the key or narrowed by
/// (anti-)affinity; among the classes ready, those a spread counts whose node terms fix them
/// to one domain of its key go first, then class order; a cycle is broken in class order.
fn affinity_order(terms: &[Vec<Terms>], group_keys: &[usize], fixed: &[Vec<bool>]) -> Vec<usize> {
    let n = terms.len();
    let groups = group_keys.len();
    let mut counted_in: Vec<Vec<usize>> = vec![Vec::new(); groups];
    for (ci, t) in terms.iter().enumerate() {
        for g in t.iter().flat_map(|k| k.matches.iter()) {
            counted_in[*g].push(ci);
        }
    }
    let mut waits_for: Vec<BTreeSet<usize>> = terms
        .iter()
        .enumerate()
        .map(|(ci, t)| {
            t.iter()
                .flat_map(|k| k.affinity.iter())
                .flat_map(|&g| counted_in[g].iter().copied())
                .filter(|&cj| cj != ci)
                .collect()
        })
        .collect();
    // A class whose pods another class's required anti-affinity rejects waits for that
    // class: the rejecting pods pick their domains first and the rejected ones then avoid
    // them (`repelled_by`), rather than spreading first into every domain the rejecting
    // pods could have used.
    // A rejected class its node terms pin to one domain cannot avoid anything: it goes first
    // and the rejecting class, which may still choose, avoids it (as the kube-scheduler ends
    // when the pinned pods arrive first; otherwise the pinned ones would stay pending).
    for (ci, t) in terms.iter().enumerate() {
        for &g in t.iter().flat_map(|k| k.anti_required.iter()) {
            for &cj in counted_in[g].iter().filter(|&&cj| cj != ci) {
                if fixed[cj][group_keys[g]] && !fixed[ci][group_keys[g]] {
                    waits_for[ci].insert(cj);
                } else {
                    waits_for[cj].insert(ci);
                }
            }
        }
    }
    let mut held_first = vec![false; n];
    // A class with a spread waits for the classes its spread counts that have no rule on
    // that key: they may go anywhere, and placed first (fewest matching pods first) they fill
    // the emptiest domains, which only widens where the spread's pods may go. It also waits
    // for those its spread counts whose (anti-)affinity narrows their domains when its own
    // does not: the narrower class takes its domain first, the free one fills around it.
    for (ci, t) in terms.iter().enumerate() {
        for (k, kt) in t.iter().enumerate() {
            for s in &kt.spreads {
                for &cj in counted_in[s.group].iter().filter(|&&cj| cj != ci) {
                    let other = &terms[cj][k];
                    // Unconstrained on the key, or narrowed by (anti-)affinity there while this
                    // class is not: the other class has fewer domains, so it goes first.
                    let narrower = other.is_constrained()
                        && (!other.affinity.is_empty() || !other.anti.is_empty())
                        && kt.affinity.is_empty()
                        && kt.anti.is_empty();
                    // Held to one domain by its own node terms (an on-demand-only class under
                    // a capacity-type spread): it cannot move, so it goes before the classes
                    // that can, which fill the other domains around it. A preference among
                    // the classes ready, not a wait: it adds no cycle, and no edge per pair.
                    if fixed[cj][k] && !fixed[ci][k] {
                        held_first[cj] = true;
                    }
                    if (!other.is_constrained() || narrower) && !waits_for[cj].contains(&ci) {
                        waits_for[ci].insert(cj);
                    }
                }
            }
        }
    }
    // Ready classes go held ones first, then by index.
    let rank = |c: usize| (!held_first[c], c);
    if waits_for.iter().all(BTreeSet::is_empty) {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&c| rank(c));
        return order;
    }
    // Kahn's order, held classes then the lowest class first among the ready ones.
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut left: Vec<usize> = waits_for.iter().map(BTreeSet::len).collect();
    for (c, w) in waits_for.iter().enumerate() {
        for &d in w {
            dependents[d].push(c);
        }
    }
    let mut ready: BTreeSet<(bool, usize)> = (0..n).filter(|&c| left[c] == 0).map(rank).collect();
    let mut done = vec![false; n];
    let mut first_left = 0;
    let mut order = Vec::with_capacity(n);
    while order.len() < n {
        let c = match ready.pop_first() {
            Some((_, c)) => c,
            None => {
                // A cycle: the first class left goes.
                while done[first_left] {
                    first_left += 1;
                }
                first_left
            }
        };
        if done[c] {
            continue;
        }
        done[c] = true;
        order.push(c);
        for &d in &dependents[c] {
            left[d] = left[d].saturating_sub(1);
            if left[d] == 0 && !done[d] {
                ready.insert(rank(d));
            }
        }
    }
    order
}

/// A key's domains for one class: those it could be placed in by its own node affinity,
/// those it may be placed in (its volumes allow them too), and per spread those the spread
/// counts in its minimum.
#[derive(Clone, Default)]
struct Domains {
    all: Vec<String>,
    allowed: Vec<String>,
    /// Per spread of the class on the key (in order): the domains it counts, those the pod
    /// could be placed in and those of the existing nodes its node filter counts.
    counted: Vec<Vec<String>>,
    /// Those it could be placed in that an earlier pass closed to it.
    shut: Vec<String>,
    /// The cheapest node for the pod per value (keys `cheapest_per_value` prices).
    prices: BTreeMap<String, f64>,
}

impl Domains {
    /// The same domains with only `values` left to place in (the others still count).
    fn only(&self, values: &[&str]) -> Domains {
        let keep = |v: &Vec<String>| {
            v.iter()
                .filter(|d| values.contains(&d.as_str()))
                .cloned()
                .collect()
        };
        Domains {
            all: keep(&self.all),
            allowed: keep(&self.allowed),
            counted: self.counted.clone(),
            shut: self.shut.clone(),
            prices: self.prices.clone(),
        }
    }
}

/// Where [`unusable_domains`] sends a class's pods on a key.
#[derive(Clone)]
struct Fill {
    /// The domains preferred.
    domains: BTreeSet<String>,
    /// A free class goes only there while it may (no spread class may use them); else they
    /// only win among domains that score alike.
    only: bool,
    /// Per spread group counting the class whose minimum no pod of the batch can raise, the
    /// count at which one of its domains is full (that minimum plus the largest maxSkew):
    /// a domain every such group counts full is one none of their classes may use while the
    /// batch lasts, and a free pod goes there first. Empty when some group has no such
    /// minimum.
    rising: Vec<(usize, i64)>,
    /// Per domain the class may use, its rank by what the spreads' classes need of it (0:
    /// least); empty when `only`.
    need: BTreeMap<String, usize>,
}

/// What `choose` prefers among the domains that keep every rule: where the class's pods fit
/// on existing nodes, and where a pod its terms' groups count started them.
struct Prefer<'a> {
    /// Per value, how many more of the class's pods existing nodes there could run.
    room: &'a BTreeMap<String, i64>,
    /// Per group, the domain a pod started it in with no partner (first-pod exception).
    started_in: &'a [Option<String>],
    /// A free class that spreads count goes to the most populated domain none of their pods
    /// went to (`pin`'s last resort before the turns).
    pile: bool,
    /// Per spread group, the domains a pod it constrains was pinned to.
    constrained: &'a [BTreeSet<String>],
}

/// The domain for the next pod of a class, or why there is none.
#[allow(clippy::too_many_arguments)]
fn choose(
    t: &Terms,
    key: &str,
    domains: &Domains,
    count: &[BTreeMap<String, i64>],
    repel: &[BTreeMap<String, i64>],
    groups: &[Group],
    pod: &Pod,
    fill: Option<(&Fill, &[BTreeSet<String>])>,
    started: bool,
    prefer: &Prefer,
) -> Result<String, String> {
    let get = |m: &BTreeMap<String, i64>, d: &str| m.get(d).copied().unwrap_or(0);
    // Skew: every hard spread must accept the domain.
    let skew_ok = |d: &str| {
        t.spreads.iter().zip(&domains.counted).all(|(s, counted)| {
            let min = if (counted.len() as i64) < s.min_domains {
                0
            } else {
                counted
                    .iter()
                    .map(|x| get(&count[s.group], x))
                    .min()
                    .unwrap_or(0)
            };
            let own = i64::from(groups[s.group].scope.matches(pod));
            get(&count[s.group], d) + own - min <= s.max_skew
        })
    };
    // The least populated domain of the first spread, to name in a refusal.
    let least = || {
        let s = t.spreads.first()?;
        let counted = domains.counted.first()?;
        counted
            .iter()
            .map(|d| (get(&count[s.group], d), d))
            .min()
            .map(|(n, d)| format!("{d} holds the fewest matching pods ({n})"))
    };
    if domains.all.is_empty() && !domains.shut.is_empty() {
        // Say which domains the skew now rules out and which simply did not take the pod.
        let (over, refused): (Vec<&String>, Vec<&String>) =
            domains.shut.iter().partition(|d| !skew_ok(d));
        let join = |v: &[&String]| v.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ");
        let mut parts = Vec::new();
        if !refused.is_empty() {
            parts.push(format!(
                "{} did not take it (no room, a Provisioner's limit or another rule)",
                join(&refused)
            ));
        }
        if let (false, Some(s)) = (over.is_empty(), t.spreads.first()) {
            parts.push(format!(
                "{} would exceed maxSkew {} of pods {}{}",
                join(&over),
                s.max_skew,
                describe_selector(&groups[s.group].scope),
                least().map(|l| format!(" ({l})")).unwrap_or_default()
            ));
        }
        return Err(format!(
            "every {key} the pod could use was tried in an earlier pass: {}",
            parts.join("; ")
        ));
    }
    if domains.all.is_empty() {
        return Err(format!(
            "topology key {key}: no node the pod could use and no Provisioner that could \
             launch one for it carries this label"
        ));
    }
    if domains.allowed.is_empty() {
        return Err(format!("no {key} is allowed for the pod"));
    }
    let mut cands: Vec<&String> = domains.allowed.iter().collect();
    for &g in &t.anti {
        cands.retain(|d| get(&count[g], d) == 0);
        if cands.is_empty() {
            return Err(format!(
                "pod anti-affinity on {key}: every {key} already runs pods {}",
                describe_selector(&groups[g].scope)
            ));
        }
    }
    for &g in &t.repelled_by {
        cands.retain(|d| get(&repel[g], d) == 0);
        if cands.is_empty() {
            return Err(format!(
                "every {key} runs pods whose anti-affinity rejects it ({})",
                describe_selector(&groups[g].scope)
            ));
        }
    }
    for &g in &t.affinity {
        let with: Vec<&String> = cands
            .iter()
            .copied()
            .filter(|d| get(&count[g], d) > 0)
            .collect();
        // The kube-scheduler's exception for the first pod of a self-affine group holds only
        // while no pod its required terms select runs on a node with any of their keys, in a
        // domain this pod can reach or not (`started`); a preferred term taken as hard here
        // is judged on its own partners.
        let anywhere = if t.affinity_required.contains(&g) {
            started
        } else {
            count[g].values().any(|&n| n > 0)
        };
        if !with.is_empty() {
            cands = with;
        } else if anywhere || !groups[g].scope.matches(pod) {
            return Err(format!(
                "pod affinity on {key}: no allowed {key} runs pods {}",
                describe_selector(&groups[g].scope)
            ));
        }
        // Else the first pod of a self-affine group bootstraps into any allowed domain.
    }
    // Skew: every hard spread must accept the domain.
    cands.retain(|d| skew_ok(d));
    if cands.is_empty() {
        let s = &t.spreads[0];
        let least = least().map(|l| format!("; {l}")).unwrap_or_default();
        let tried = if domains.shut.is_empty() {
            String::new()
        } else {
            format!("; {} tried in an earlier pass", domains.shut.join(", "))
        };
        return Err(format!(
            "topology spread on {key} (maxSkew {}) of pods {}: no allowed {key} keeps the \
             skew{least}{tried}",
            s.max_skew,
            describe_selector(&groups[s.group].scope)
        ));
    }
    // A free class goes first to the domains no other class whose spread counts it may use:
    // there its pods only raise the spreads' minimum (`unusable_domains`).
    // A class affine to running pods only is free too: its fill was worked out among the
    // domains its affinity allows (`unusable_domains` gives none to a class affine to pods
    // of the batch).
    let free = t.spreads.is_empty();
    if let (true, Some((fill, constrained))) = (free, fill) {
        // Domains the spreads' pods may no longer use, with the pods placed so far counted,
        // and where none of theirs went (a pod there would put them over their maxSkew).
        let full_now = |d: &str| {
            !fill.rising.is_empty()
                && fill
                    .rising
                    .iter()
                    .all(|&(g, at)| get(&count[g], d) >= at && !constrained[g].contains(d))
        };
        // The same holds for the domains found full before the batch: none where a pod of
        // a spread counting the class went since.
        let untouched = |d: &str| {
            fill.rising
                .iter()
                .all(|&(g, _)| !constrained[g].contains(d))
        };
        let within: Vec<&String> = cands
            .iter()
            .copied()
            .filter(|d| (fill.only && fill.domains.contains(*d) && untouched(d)) || full_now(d))
            .collect();
        if !within.is_empty() {
            cands = within;
        }
    }
    let filling = |d: &str| fill.is_some_and(|(f, _)| f.domains.contains(d));
    // While spreads counting a free class have a minimum no pod of the batch can raise, each
    // of their domains holds only so many more of their pods, and a free pod takes one of
    // those places wherever it goes, until a domain is full (then it takes none there): it
    // goes where the fewest are left, so a domain fills up and the next ones cost nothing
    // (best fit; two pods free of the spread, one zone one place short of full and another
    // with two: both go to the first, leaving the second's two to the spread's pods). Never
    // onto a full domain a pod of the spread went to (it would go over its maxSkew) while
    // another is left, then by what the spreads' classes need of the domain (`Fill::need`),
    // then best fit, before the class's own evenness.
    let rising = match fill {
        Some((f, constrained)) if free && !f.rising.is_empty() => Some((f, constrained)),
        _ => None,
    };
    // Piling (`Prefer::pile`): a domain a pod of a spread counting the class went to last,
    // then the most populated.
    let piled = |d: &str| -> (bool, i64) {
        if !(prefer.pile && free) {
            return (false, 0);
        }
        let touched = t.matches.iter().any(|&g| prefer.constrained[g].contains(d));
        if touched {
            // No piling there: the ordinary keys below keep the spread pods' skew.
            return (true, 0);
        }
        let here: i64 = t.matches.iter().map(|&g| get(&count[g], d)).sum();
        (false, -here)
    };
    let places_left = |d: &str| -> (bool, usize, i64) {
        let Some((f, constrained)) = rising else {
            return (false, 0, 0);
        };
        let over = f
            .rising
            .iter()
            .any(|&(g, at)| get(&count[g], d) >= at && constrained[g].contains(d));
        let left = f
            .rising
            .iter()
            .map(|&(g, at)| at - get(&count[g], d))
            .min()
            .unwrap_or(0)
            .max(0);
        let need = f.need.get(d).copied().unwrap_or(0);
        (over, need, left)
    };
    // Fewest matching pods of the class's first spread, then not away from a pod that
    // started a group this pod counts in with no partner (`Prefer::started_in`), then (a
    // free class) piling when asked and the best fit above, then fewest in the groups the
    // class counts in, then the fill's domains, then a value whose
    // existing nodes still have room for the class's pods (`Prefer::room`), then the
    // cheapest node for the pod (priced keys only; a value no type offers is one only
    // existing nodes carry, which cost nothing more), then name.
    let score = |d: &str| -> (i64, i64) {
        let first = t.spreads.first().map_or(0, |s| get(&count[s.group], d));
        let rest: i64 = t.matches.iter().map(|&g| get(&count[g], d)).sum();
        (first, rest)
    };
    let price = |d: &str| domains.prices.get(d).copied().unwrap_or(0.0);
    let roomy = |d: &str| prefer.room.get(d).is_some_and(|&n| n > 0);
    // The groups this pod counts in that a pod started with no partner, while the starter is
    // still alone there: away from that domain, the pod would leave it apart from a pod its
    // term selects, which holds only if the kube-scheduler takes the starter first.
    let apart = |d: &str| {
        t.matches
            .iter()
            .filter(|&&g| {
                prefer.started_in[g]
                    .as_deref()
                    .is_some_and(|s| s != d && get(&count[g], s) <= 1)
            })
            .count()
    };
    cands
        .into_iter()
        .min_by(|a, b| {
            score(a)
                .0
                .cmp(&score(b).0)
                .then(apart(a).cmp(&apart(b)))
                .then(piled(a).cmp(&piled(b)))
                .then(places_left(a).cmp(&places_left(b)))
                .then(score(a).1.cmp(&score(b).1))
                .then(filling(b).cmp(&filling(a)))
                .then(roomy(b).cmp(&roomy(a)))
                .then(price(a).total_cmp(&price(b)))
                .then(a.cmp(b))
        })
        .cloned()
        .ok_or_else(|| format!("no {key} is allowed for the pod"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(terms: &[&[(&str, &str, &[&str])]]) -> NodeFilter {
        let terms = terms
            .iter()
            .map(|t| {
                let mut r = Requirements::new();
                for (k, op, v) in t.iter() {
                    r.add_parsed(k, op, v).expect("valid requirement");
                }
                r
            })
            .collect();
        NodeFilter {
            terms,
            tolerations: None,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn outside_a_filter_no_node_is_counted_and_inside_every_one_is() {
        let on_demand = filter(&[&[
            (labels::CAPACITY_TYPE, "In", &["on-demand"]),
            ("dedicated", "In", &["web"]),
            (labels::ZONE, "In", &["z-a", "z-b"]),
        ]]);
        let counted = |f: &NodeFilter, node: &BTreeMap<String, String>| {
            f.terms.iter().any(|t| t.matches_labels(node))
        };
        let nodes: Vec<BTreeMap<String, String>> = [
            ("on-demand", "web", "z-a"),
            ("spot", "web", "z-a"),
            ("on-demand", "batch", "z-b"),
            ("spot", "batch", "z-c"),
            ("on-demand", "web", "z-c"),
        ]
        .iter()
        .map(|(ct, d, z)| {
            labels(&[
                (labels::CAPACITY_TYPE, ct),
                ("dedicated", d),
                (labels::ZONE, z),
            ])
        })
        .collect();
        // One way out per requirement on another key than the spread's (the zone).
        let ways = on_demand.outside(labels::ZONE);
        assert_eq!(ways.len(), 2);
        for out in &ways {
            assert!(out.get(labels::ZONE).is_none());
            for node in nodes.iter().filter(|n| out.matches_labels(n)) {
                assert!(!counted(&on_demand, node), "{out} admits counted {node:?}");
            }
        }
        let inside = on_demand.inside(labels::ZONE).expect("one term");
        assert!(inside.get(labels::ZONE).is_none());
        for node in nodes.iter().filter(|n| inside.matches_labels(n)) {
            // Outside the filter's zones a node is in no domain the spread counts.
            if node.get(labels::ZONE).map(String::as_str) != Some("z-c") {
                assert!(
                    counted(&on_demand, node),
                    "{inside} admits uncounted {node:?}"
                );
            }
        }
        // Two terms: held off both; never held on (no one requirement says "either").
        let two = filter(&[
            &[(labels::CAPACITY_TYPE, "In", &["on-demand"])],
            &[("team", "Exists", &[])],
        ]);
        let ways = two.outside(labels::ZONE);
        assert_eq!(ways.len(), 1);
        assert!(ways[0].matches_labels(&labels(&[(labels::CAPACITY_TYPE, "spot")])));
        assert!(!ways[0].matches_labels(&labels(&[(labels::CAPACITY_TYPE, "spot"), ("team", "x")])));
        assert!(two.inside(labels::ZONE).is_none());
        // Taints read too: a tolerated tainted node would not count, so never held on.
        let mut tainted = on_demand.clone();
        tainted.tolerations = Some(Vec::new());
        assert!(tainted.inside(labels::ZONE).is_none());
        // Only the spread's own key, or a bound: nothing to hold by.
        assert!(filter(&[&[(labels::ZONE, "In", &["z-a"])]])
            .outside(labels::ZONE)
            .is_empty());
        assert!(filter(&[&[("cpu", "Gt", &["4"])]])
            .outside(labels::ZONE)
            .is_empty());
    }
}
