//! The domains of a topology key: which values existing nodes and Provisioners offer, which a
//! pod could reach there, and the room free on each node.

use super::*;

use std::sync::Arc;

use crate::scheduling::memo::Values;

/// What new nodes can offer the pinning: the Provisioners in the pass's order, the catalog,
/// and what the plan's simulations keep between them (see [`Memo`]).
pub(crate) struct Offer<'a> {
    pub(super) provs: &'a [&'a Provisioner],
    pub(super) catalog: &'a [InstanceType],
    pub(super) memo: Option<&'a Memo>,
}

/// The most ways out of a filter [`NodeFilter::outside`] offers.
pub(super) const MAX_WAYS_OUT: usize = 16;

#[derive(Clone)]
pub(super) struct Spread {
    pub(super) group: usize,
    pub(super) max_skew: i64,
    pub(super) min_domains: i64,
}

/// A class's terms on one topology key.
#[derive(Default, Clone)]
pub(super) struct Terms {
    pub(super) spreads: Vec<Spread>,
    pub(super) affinity: Vec<usize>,
    pub(super) anti: Vec<usize>,
    /// The required ones among `anti`: they repel other pods.
    pub(super) anti_required: Vec<usize>,
    /// The required ones among `affinity`: only they end one another's first-pod exception
    /// (`choose`), as the kube-scheduler counts partners for required terms only.
    pub(super) affinity_required: Vec<usize>,
    /// Groups whose scope matches the class (its pods count there).
    pub(super) matches: Vec<usize>,
    /// Anti groups whose repellers reject the class.
    pub(super) repelled_by: Vec<usize>,
}

impl Terms {
    pub(super) fn is_constrained(&self) -> bool {
        !self.spreads.is_empty() || !self.affinity.is_empty() || !self.anti.is_empty()
    }
}

/// Where the values of one topology key can come from: existing nodes carrying the label, and
/// per Provisioner the values its nodes can take, each with the most any of its instance types
/// offering that value holds (a pod larger than that cannot land there).
pub(super) struct KeyDomains {
    /// Per Provisioner (in the order given): value → component-wise largest allocatable.
    pub(super) by_provisioner: Vec<Values>,
    /// (node index, value) of the existing nodes carrying the key.
    pub(super) nodes: Vec<(usize, String)>,
}

impl KeyDomains {
    pub(super) fn new(
        key: &str,
        offer: &Offer<'_>,
        prov_reqs: &[Requirements],
        nodes: &[Node],
    ) -> Self {
        let by_provisioner = offer
            .provs
            .iter()
            .zip(prov_reqs)
            .map(|(p, reqs)| {
                let compute = || provisioner_values(key, p, reqs, offer.catalog);
                match offer.memo {
                    Some(memo) => memo.values(key, &p.name, compute),
                    None => Arc::new(compute()),
                }
            })
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
pub(super) fn provisioner_values(
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
pub(super) fn cheapest_per_value(
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
pub(super) fn reachable(
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
        for (v, most) in values.iter() {
            if !out.contains(v) && pod.requests.fits(most) && agree(v) {
                out.insert(v.clone());
            }
        }
    }
    out
}

/// True when `pod` (with node terms `terms`) could run on the existing `node` with `free`
/// room: schedulable, tolerated, selected and roomy enough.
pub(super) fn could_run(pod: &Pod, terms: &[Requirements], node: &Node, free: &Resources) -> bool {
    let selects = terms.is_empty() || terms.iter().any(|t| t.matches_labels(&node.labels));
    !node.unschedulable
        && selects
        && first_untolerated(&node.taints, &pod.tolerations).is_none()
        && pod.requests.fits(free)
}

/// True when a Provisioner could launch a node for `pod` with `extra` added to its node
/// terms: one it tolerates, agreeing with a term, with an offered instance type that holds
/// the pod.
pub(super) fn launchable(
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
pub(super) fn with_terms(pod: &Pod, extra: &Requirements) -> Pod {
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
pub(super) fn counted_node_values(
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
pub(super) fn free_room(nodes: &[Node], pods: &[Pod]) -> Vec<Resources> {
    let index: foldhash::HashMap<&str, usize> = nodes
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
pub(super) fn is_domain_key(key: &str) -> bool {
    key != labels::HOSTNAME
}

/// A key's domains for one class: those it could be placed in by its own node affinity,
/// those it may be placed in (its volumes allow them too), and per spread those the spread
/// counts in its minimum.
#[derive(Clone, Default)]
pub(super) struct Domains {
    pub(super) all: Vec<String>,
    pub(super) allowed: Vec<String>,
    /// Per spread of the class on the key (in order): the domains it counts, those the pod
    /// could be placed in and those of the existing nodes its node filter counts.
    pub(super) counted: Vec<Vec<String>>,
    /// Those it could be placed in that an earlier pass closed to it.
    pub(super) shut: Vec<String>,
    /// The cheapest node for the pod per value (keys `cheapest_per_value` prices).
    pub(super) prices: BTreeMap<String, f64>,
}

impl Domains {
    /// The same domains with only `values` left to place in (the others still count).
    pub(super) fn only(&self, values: &[&str]) -> Domains {
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
