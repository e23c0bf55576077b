//! Required pod affinity on `kubernetes.io/hostname`: pods that must share a node with the pods
//! their term selects.
//!
//! Decided per class before placement: with matching pods already running, the class may only
//! join the nodes they run on; a group that selects itself (and has no running partner) must go
//! onto one node together — the first pod bootstraps a node, the rest must join it, as the
//! kube-scheduler would see them; a term that selects only pods not running yet (other pending
//! pods) is not simulated, and the pod is reported rather than placed on a guess.

use std::collections::BTreeSet;

use crate::labels;
use crate::pod::Pod;

use super::affinity::Scope;
use super::node_rules::describe_selector;

/// Where a class may go because of its hostname pod affinity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Together {
    /// No hostname pod affinity.
    Free,
    /// Only onto these existing nodes (they run matching pods).
    OnNodes(BTreeSet<String>),
    /// All pods of the class onto one node (self-affinity, no running partner).
    OneNode,
    /// Nowhere, and why.
    Refused(String),
}

/// The hostname-affinity decision for each class's effective pod.
///
/// Only the first class of a self-affine group bootstraps a node; a later class selected by the
/// same terms (another pod shape of the group, or a zone-pinned part of it) would have to join
/// that node, which is not simulated, so it is reported.
pub fn analyze(pods: &[Pod], templates: &[Pod]) -> Vec<Together> {
    let mut claimed: Vec<Vec<Scope>> = Vec::new();
    templates
        .iter()
        .map(|t| {
            let terms: Vec<Scope> = t
                .affinity
                .iter()
                .filter(|a| !a.anti && a.topology_key == labels::HOSTNAME)
                .map(|a| Scope::of_term(t, a))
                .collect();
            if terms.is_empty() {
                return Together::Free;
            }
            let mut nodes: Option<BTreeSet<String>> = None;
            let mut self_only = true;
            for s in &terms {
                let running: BTreeSet<String> = pods
                    .iter()
                    .filter(|p| s.matches(p))
                    .filter_map(|p| p.node_name.clone())
                    .collect();
                if running.is_empty() {
                    if !s.matches(t) {
                        return Together::Refused(format!(
                            "pod affinity on {}: no running pod matches {} (affinity to pods that are not running yet is not simulated)",
                            labels::HOSTNAME,
                            describe_selector(s)
                        ));
                    }
                } else {
                    self_only = false;
                    nodes = Some(match nodes {
                        None => running,
                        Some(n) => n.intersection(&running).cloned().collect(),
                    });
                }
            }
            match nodes {
                Some(n) if n.is_empty() => Together::Refused(format!(
                    "pod affinity on {}: no node runs pods matching every term",
                    labels::HOSTNAME
                )),
                Some(n) => Together::OnNodes(n),
                None if self_only && claimed.contains(&terms) => Together::Refused(format!(
                    "pod affinity on {}: must join the node of other pending pods it selects (not simulated)",
                    labels::HOSTNAME
                )),
                None if self_only => {
                    claimed.push(terms);
                    Together::OneNode
                }
                None => Together::Free,
            }
        })
        .collect()
}
