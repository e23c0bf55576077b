//! What disrupting a node costs: the pods it moves, weighed by their priority and
//! `pod-deletion-cost`, and by how much longer the node would have lived anyway.
//!
//! Per pod: 1 + deletion cost / 2^27 + priority / 2^25, clamped to [-10, 10] (Karpenter's
//! eviction cost, so the two rank nodes alike); per node: 1 plus its pods' costs, times the
//! fraction of its lifetime left when it expires (a node about to expire costs little to move
//! early).

use crate::pod::Pod;

/// The cost of evicting one pod.
pub fn eviction_cost(pod: &Pod) -> f64 {
    let cost = 1.0
        + f64::from(pod.disruption.deletion_cost) / f64::from(1u32 << 27)
        + f64::from(pod.priority) / f64::from(1u32 << 25);
    cost.clamp(-10.0, 10.0)
}

/// What rescheduling `pods` costs, their node's share included: 1 + Σ max(0, eviction cost)
/// (Karpenter's `RescheduleDisruptionCost`, what its Balanced score divides by). A pod never
/// makes its node cheaper to disrupt than an empty one (Karpenter floors it too), so a
/// negative priority cannot give a move an infinite score.
pub fn reschedule_cost<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> f64 {
    1.0 + pods
        .into_iter()
        .map(|p| eviction_cost(p).max(0.0))
        .sum::<f64>()
}

/// The cost of disrupting a node holding `pods`, created at `created_at`, that expires
/// `expire_after` seconds after it was created (if it does), at `now`: its
/// [`reschedule_cost`] times the share of its lifetime left. It orders candidates (a node
/// about to expire goes first); scores use the cost without the lifetime.
pub fn node_cost<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    created_at: Option<i64>,
    expire_after: Option<i64>,
    now: i64,
) -> f64 {
    let cost = reschedule_cost(pods);
    let left = match (created_at, expire_after) {
        (Some(created), Some(ttl)) if ttl > 0 => {
            let age = (now - created).max(0) as f64;
            (1.0 - age / ttl as f64).clamp(0.0, 1.0)
        }
        _ => 1.0,
    };
    (cost * left).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(priority: i32, deletion_cost: i32) -> Pod {
        let mut p = Pod {
            priority,
            ..Pod::default()
        };
        p.disruption.deletion_cost = deletion_cost;
        p
    }

    #[test]
    fn priority_and_deletion_cost_weigh_a_pod() {
        assert_eq!(eviction_cost(&pod(0, 0)), 1.0);
        // system-cluster-critical (2e9) is as costly as a pod gets.
        assert_eq!(eviction_cost(&pod(2_000_000_000, 0)), 10.0);
        assert_eq!(eviction_cost(&pod(-2_000_000_000, 0)), -10.0);
        assert_eq!(eviction_cost(&pod(0, 1 << 27)), 2.0);
        assert!(eviction_cost(&pod(1 << 24, 0)) > 1.0);
    }

    #[test]
    fn a_node_close_to_expiry_costs_less_to_move() {
        let pods = [pod(0, 0), pod(0, 0)];
        assert_eq!(node_cost(&pods, Some(0), None, 1_000), 3.0);
        assert_eq!(node_cost(&pods, Some(0), Some(4_000), 1_000), 2.25);
        assert_eq!(
            node_cost(&pods, Some(0), Some(4_000), 9_000),
            0.0,
            "expired"
        );
        assert_eq!(
            node_cost(std::iter::empty(), None, None, 0),
            1.0,
            "an empty node"
        );
    }
}
