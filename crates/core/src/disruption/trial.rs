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
///
/// The trial is made in place and undone before returning — the removed nodes and the pods
/// that leave with them taken out, the moved pods made pending, the pending pods set aside —
/// so a planner weighing hundreds of moves on a large cluster never copies it.
pub fn run(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
) -> Result<Outcome, String> {
    let mut removed: Vec<usize> = removed.to_vec();
    removed.sort_unstable();
    removed.dedup();
    removed.retain(|&i| i < snapshot.nodes.len());
    // Taken from the back, so the indices still in the list stay valid.
    let mut nodes_out = Vec::with_capacity(removed.len());
    for &i in removed.iter().rev() {
        nodes_out.push((i, snapshot.nodes.remove(i)));
    }
    let gone: HashSet<String> = nodes_out.iter().map(|(_, n)| n.name.clone()).collect();
    // `origin[i]` is the index in the caller's `pods` of the trial's pod i.
    let all = std::mem::take(&mut snapshot.pods);
    let mut origin: Vec<usize> = Vec::with_capacity(all.len());
    let mut set_aside = Vec::new();
    let mut moved_from: Vec<(usize, String)> = Vec::new();
    for (i, mut p) in all.into_iter().enumerate() {
        match p.node_name.take() {
            Some(on) if gone.contains(&on) => {
                if leaves_with_node(&p) {
                    p.node_name = Some(on);
                    set_aside.push((i, p));
                    continue;
                }
                moved_from.push((snapshot.pods.len(), on));
            }
            Some(on) => p.node_name = Some(on),
            // Pending pods are the ones nothing can place (the planner waits otherwise).
            None => {
                set_aside.push((i, p));
                continue;
            }
        }
        origin.push(i);
        snapshot.pods.push(p);
    }
    let plan = simulate(snapshot, catalog, opts);

    // Undo: moved pods back on their nodes, set-aside pods and removed nodes back in place.
    for (i, on) in moved_from {
        snapshot.pods[i].node_name = Some(on);
    }
    let trial_pods = std::mem::take(&mut snapshot.pods);
    let mut back = trial_pods
        .into_iter()
        .zip(origin.iter().copied())
        .peekable();
    let mut aside = set_aside.into_iter().peekable();
    loop {
        let next_aside = aside.peek().map(|(i, _)| *i);
        let next_back = back.peek().map(|(_, i)| *i);
        match (next_back, next_aside) {
            (Some(b), Some(a)) if a < b => snapshot.pods.extend(aside.next().map(|(_, p)| p)),
            (Some(_), _) => snapshot.pods.extend(back.next().map(|(p, _)| p)),
            (None, Some(_)) => snapshot.pods.extend(aside.next().map(|(_, p)| p)),
            (None, None) => break,
        }
    }
    for (i, node) in nodes_out.into_iter().rev() {
        snapshot.nodes.insert(i, node);
    }

    if let Some(u) = plan.unschedulable.first() {
        return Err(format!(
            "pod {} would not fit elsewhere: {}",
            u.pod, u.reason
        ));
    }
    for used in &plan.existing_nodes {
        let joining = snapshot
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::fixtures::*;
    use crate::pod::Owner;
    use crate::testing::catalog::catalog;

    #[test]
    fn a_trial_is_undone_whatever_it_set_aside() {
        let mut daemon = pod("logs-a", "a", 100);
        daemon.owner = Some(Owner {
            kind: "DaemonSet".into(),
            name: "logs".into(),
        });
        let mut pending = pod("huge", "a", 500_000);
        pending.node_name = None;
        let mut s = cluster(
            vec![
                node("a", "m5.xlarge", "on-demand"),
                node("b", "m5.xlarge", "on-demand"),
                node("c", "m5.xlarge", "on-demand"),
            ],
            vec![
                pod("web-b", "b", 1000),
                daemon,
                pod("web-a", "a", 1000),
                pending,
                pod("web-c", "c", 1000),
            ],
        );
        let before = format!("{s:?}");
        let out = run(&mut s, &catalog(), &Options::default(), &[2, 0]).expect("fits on b");
        assert_eq!(format!("{s:?}"), before);
        // Both moved pods go to b; the DaemonSet pod leaves with a, the pending pod is not
        // planned for.
        assert!(out.replacements.is_empty());
        assert_eq!(out.plan.existing_nodes.len(), 1);
        assert_eq!(out.plan.existing_nodes[0].name, "b");
        let mut moved = out.plan.existing_nodes[0].pods.clone();
        moved.sort();
        assert_eq!(moved, ["default/web-a", "default/web-c"]);
        assert!(out.plan.unschedulable.is_empty());

        // Refused the same way: b is not initialized.
        s.nodes[1].life.initialized = false;
        let before = format!("{s:?}");
        let e = run(&mut s, &catalog(), &Options::default(), &[0]).expect_err("joining");
        assert_eq!(
            e,
            "pod default/web-a would move to node b, which is not initialized yet"
        );
        assert_eq!(format!("{s:?}"), before);
    }
}
