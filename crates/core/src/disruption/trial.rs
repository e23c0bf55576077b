//! A trial removal: the cluster without some nodes, simulated, and what it says about the
//! pods those nodes held.
//!
//! Disruption waits while pending pods can be placed (provisioning acts on them first:
//! [`placeable_pending`]), so a trial leaves the pending pods out: they are the ones the
//! cluster cannot place, and a moved pod must never count on one of them arriving beside it.
//! A removal is refused when a moved pod has no place, or when it would land on a node that is
//! not initialized yet (it may never become Ready, and the pod would be stranded: Karpenter's
//! rule).

use std::collections::HashSet;

use crate::instance_type::InstanceType;
use crate::scheduling::{simulate, NewNode, Options, Plan};
use crate::snapshot::Snapshot;

use super::candidates::leaves_with_node;

/// The pending pods of `snapshot` the simulation places now (their keys, in snapshot order).
pub fn placeable_pending(
    snapshot: &Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
) -> Vec<String> {
    if snapshot.pods.iter().all(|p| p.node_name.is_some()) {
        return Vec::new();
    }
    let plan = simulate(snapshot, catalog, opts);
    let refused: HashSet<&str> = plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    snapshot
        .pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .map(|p| p.key())
        .filter(|k| !refused.contains(k.as_str()))
        .collect()
}

/// A removal the simulation accepts: where the moved pods go.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The trial's plan (pods keyed `namespace/name`): moved pods on existing nodes and on
    /// the new nodes.
    pub plan: Plan,
    /// The new nodes the moved pods need, `pod_indices` into the snapshot given to [`run`].
    pub replacements: Vec<NewNode>,
    /// $/h of the replacements.
    pub price_after: f64,
}

/// Simulates the cluster without the nodes at `removed` (indices into `snapshot.nodes`).
pub fn run(
    snapshot: &Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
) -> Result<Outcome, String> {
    let gone: HashSet<&str> = removed
        .iter()
        .map(|&i| snapshot.nodes[i].name.as_str())
        .collect();
    // `origin[i]` is the index in `snapshot.pods` of the trial's pod i.
    let mut origin: Vec<usize> = Vec::new();
    let pods = snapshot
        .pods
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let on = p.node_name.as_deref()?;
            let kept = if gone.contains(on) {
                if leaves_with_node(p) {
                    return None;
                }
                let mut m = p.clone();
                m.node_name = None;
                m
            } else {
                p.clone()
            };
            origin.push(i);
            Some(kept)
        })
        .collect();
    let mut trial = snapshot.with_pods(pods);
    trial.nodes.retain(|n| !gone.contains(n.name.as_str()));
    let plan = simulate(&trial, catalog, opts);
    if let Some(u) = plan.unschedulable.first() {
        return Err(format!(
            "pod {} would not fit elsewhere: {}",
            u.pod, u.reason
        ));
    }
    for used in &plan.existing_nodes {
        let joining = trial
            .nodes
            .iter()
            .any(|n| n.name == used.name && !n.life.initialized);
        if let (true, Some(p)) = (joining, used.pods.first()) {
            return Err(format!(
                "pod {p} would move to node {}, which is not initialized yet",
                used.name
            ));
        }
    }
    let replacements: Vec<NewNode> = plan
        .new_nodes
        .iter()
        .map(|n| NewNode {
            pod_indices: n.pod_indices.iter().map(|&i| origin[i]).collect(),
            ..n.clone()
        })
        .collect();
    let price_after = plan.new_price_per_hour();
    Ok(Outcome {
        plan,
        replacements,
        price_after,
    })
}
