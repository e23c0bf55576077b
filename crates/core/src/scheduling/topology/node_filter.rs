//! Which nodes' pods a spread counts ([`NodeFilter`]: its `nodeAffinityPolicy` and
//! `nodeTaintsPolicy`), and the groups the pinning counts pods in.

use super::*;

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Group {
    /// Index into the keys.
    pub(super) key: usize,
    pub(super) scope: Scope,
    /// The nodes whose pods a spread counts, when not all of them (its policies).
    pub(super) nodes: Option<NodeFilter>,
}

/// Which nodes' pods a spread counts, as the kube-scheduler reads `nodeAffinityPolicy: Honor`
/// (the default: nodes the constrained pod's own node terms select) and `nodeTaintsPolicy:
/// Honor` (nodes whose taints it tolerates).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct NodeFilter {
    /// Node terms, any of which selects a node; empty: every node.
    pub(super) terms: Vec<Requirements>,
    /// Tolerations a node's taints must be tolerated by; `None`: taints do not matter.
    pub(super) tolerations: Option<Vec<Toleration>>,
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
