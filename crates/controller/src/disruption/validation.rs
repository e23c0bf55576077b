//! The validation delay: a decision is carried out only when a plan made at least
//! [`VALIDATION_DELAY`] after it first appeared still makes it (same reason, same nodes, same
//! kind of replacement), so a pod that arrives, a node that joins or a budget that closes in
//! between drops it. A decision that only deletes (empty nodes, together) keeps the nodes
//! later plans still delete with it (Karpenter's emptiness validation keeps the candidates
//! still valid): one that took a pod meanwhile leaves the decision, one that emptied since
//! waits for the next.

use std::time::{Duration, Instant};

use joiner_core::disruption::{Decision, Reason};

/// How long a decision waits before it is simulated again and carried out.
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);

/// What identifies a decision across plans: why, which nodes, and what replaces them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionKey {
    /// Why.
    pub reason: Reason,
    /// The nodes, sorted.
    pub nodes: Vec<String>,
    /// The replacements' instance types, sorted (empty for a delete).
    pub replacements: Vec<String>,
}

impl DecisionKey {
    /// The key of `decision`.
    pub fn of(decision: &Decision) -> DecisionKey {
        let mut nodes = decision.nodes.clone();
        nodes.sort();
        let mut replacements: Vec<String> = decision
            .replacements
            .iter()
            .map(|r| r.instance_type.clone())
            .collect();
        replacements.sort();
        DecisionKey {
            reason: decision.reason,
            nodes,
            replacements,
        }
    }
}

/// A decision seen, waiting for its delay.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    /// The decision.
    pub key: DecisionKey,
    /// When it was first made.
    pub since: Instant,
}

/// What to do with the decision of this pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Seen for the first time, or not long enough ago: wait.
    Wait,
    /// Made again after the delay: carry it out, on these nodes (all of the plan's decision,
    /// or for a delete the ones it held since it first appeared).
    Confirmed(Vec<String>),
}

/// True for a drift or expiration decision: what qualifies it is its nodes (still drifted,
/// still expired), not the shape of its replacements, which a pod arriving anywhere on a
/// hundred nodes may change; it recurs when the same nodes do (Karpenter revalidates drift by
/// its candidates), and the command launches what the latest plan says.
fn forced(key: &DecisionKey) -> bool {
    matches!(key.reason, Reason::Drifted | Reason::Expired)
}

/// True for a decision that deletes a batch of empty nodes (empty, or empty and drifted or
/// expired): each node stands on its own, so the ones still empty may go without the others.
fn batch(key: &DecisionKey) -> bool {
    key.replacements.is_empty()
        && matches!(
            key.reason,
            Reason::Empty | Reason::Drifted | Reason::Expired
        )
}

/// What [`check_all`] found: per decision of the plan (by index), what to do with it; and the
/// pending decisions no decision of the plan makes any more, dropped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checked {
    /// `(index into the plan's decisions, verdict)`, in the plan's order.
    pub verdicts: Vec<(usize, Verdict)>,
    /// Pending decisions the cluster's change dropped.
    pub dropped: Vec<DecisionKey>,
}

/// Weighs every decision of a plan against the pending ones, updating them: a decision that
/// recurs after its delay is confirmed, one seen for the first time starts its delay, and a
/// pending one that no decision makes any more is dropped. Independent decisions (the plan's
/// are disjoint: no node is in two) each wait for their own delay, so several commands may
/// start in one pass.
pub fn check_all(pending: &mut Vec<Pending>, decisions: &[Decision], now: Instant) -> Checked {
    let keys: Vec<DecisionKey> = decisions.iter().map(DecisionKey::of).collect();
    // A batch of empty nodes still deleting some of a pending one's nodes: those stay
    // pending (a consolidation's delete was simulated as a whole and must recur as it was).
    for p in pending.iter_mut() {
        if !batch(&p.key) {
            continue;
        }
        let narrowed = keys
            .iter()
            .filter(|k| batch(k) && p.key.reason == k.reason && p.key != **k)
            .map(|k| -> Vec<String> {
                p.key
                    .nodes
                    .iter()
                    .filter(|n| k.nodes.contains(n))
                    .cloned()
                    .collect()
            })
            .find(|kept| !kept.is_empty());
        if let Some(kept) = narrowed {
            p.key.nodes = kept;
        }
    }
    let same = |p: &Pending, k: &DecisionKey| {
        &p.key == k
            || (batch(&p.key)
                && batch(k)
                && p.key.reason == k.reason
                && p.key.nodes.iter().all(|n| k.nodes.contains(n)))
            || (forced(&p.key) && p.key.reason == k.reason && p.key.nodes == k.nodes)
    };
    // Each pending decision is matched to the first decision of the plan that makes it.
    let mut matched: Vec<Option<Pending>> = vec![None; keys.len()];
    let mut out = Checked::default();
    for p in std::mem::take(pending) {
        match (0..keys.len()).find(|&i| matched[i].is_none() && same(&p, &keys[i])) {
            Some(i) => matched[i] = Some(p),
            None => out.dropped.push(p.key),
        }
    }
    for (i, (key, m)) in keys.into_iter().zip(matched).enumerate() {
        let verdict = match m {
            Some(p) if now.duration_since(p.since) >= VALIDATION_DELAY => {
                Verdict::Confirmed(p.key.nodes)
            }
            Some(p) => {
                pending.push(p);
                Verdict::Wait
            }
            None => {
                pending.push(Pending { key, since: now });
                Verdict::Wait
            }
        };
        out.verdicts.push((i, verdict));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`check_all`] for a plan of at most one decision and at most one pending.
    fn check(
        pending: &mut Option<Pending>,
        decision: Option<&Decision>,
        now: Instant,
    ) -> (Option<Verdict>, Option<DecisionKey>) {
        let mut list: Vec<Pending> = pending.take().into_iter().collect();
        let decisions: Vec<Decision> = decision.cloned().into_iter().collect();
        let checked = check_all(&mut list, &decisions, now);
        assert!(list.len() <= 1);
        *pending = list.pop();
        (
            checked.verdicts.into_iter().next().map(|(_, v)| v),
            checked.dropped.into_iter().next(),
        )
    }

    #[test]
    fn a_drift_batch_recurs_with_its_nodes_whatever_its_replacements() {
        let t0 = Instant::now();
        let mut pending = Vec::new();
        let drifted = |nodes: &[&str], types: &[&str]| Decision {
            reason: Reason::Drifted,
            replacements: types
                .iter()
                .map(|t| joiner_core::scheduling::NewNode {
                    name: format!("r-{t}"),
                    provisioner: "default".into(),
                    instance_type: t.to_string(),
                    zone: "z-a".into(),
                    capacity_type: joiner_core::CapacityType::OnDemand,
                    price_per_hour: 0.1,
                    price_estimated: false,
                    instance_type_options: vec![t.to_string()].into(),
                    option_prices: vec![Some(0.1)].into(),
                    requirements: joiner_core::Requirements::new(),
                    pods: Vec::new(),
                    pod_indices: Vec::new(),
                    requests: joiner_core::Resources::default(),
                })
                .collect(),
            ..decision(nodes)
        };
        check_all(&mut pending, &[drifted(&["a", "b"], &["m5.large"])], t0);
        // A pod arrived: the same nodes now need a larger replacement. Still the decision.
        let c = check_all(
            &mut pending,
            &[drifted(&["a", "b"], &["m5.xlarge"])],
            t0 + VALIDATION_DELAY,
        );
        assert_eq!(
            c.verdicts,
            [(
                0,
                Verdict::Confirmed(vec!["a".to_string(), "b".to_string()])
            )]
        );
        // Other nodes are another decision; an Underutilized replacement must recur whole.
        check_all(&mut pending, &[drifted(&["a", "b"], &["m5.large"])], t0);
        let c = check_all(
            &mut pending,
            &[drifted(&["a"], &["m5.large"])],
            t0 + VALIDATION_DELAY,
        );
        assert_eq!(c.dropped.len(), 1);
        let mut pending = Vec::new();
        let under = |types: &[&str]| Decision {
            reason: Reason::Underutilized,
            ..drifted(&["a"], types)
        };
        check_all(&mut pending, &[under(&["c5.large"])], t0);
        let c = check_all(
            &mut pending,
            &[under(&["c5.xlarge"])],
            t0 + VALIDATION_DELAY,
        );
        assert_eq!(c.dropped.len(), 1);
    }

    #[test]
    fn independent_decisions_each_wait_for_their_own_delay() {
        let t0 = Instant::now();
        let mut pending = Vec::new();
        let (a, b) = (decision(&["a"]), decision(&["b"]));
        let first = check_all(&mut pending, std::slice::from_ref(&a), t0);
        assert_eq!(first.verdicts, [(0, Verdict::Wait)]);
        // b appears 5 s later: a is confirmed at t0 + delay, b waits until its own.
        let later = t0 + Duration::from_secs(5);
        check_all(&mut pending, &[a.clone(), b.clone()], later);
        let at = t0 + VALIDATION_DELAY;
        let c = check_all(&mut pending, &[a.clone(), b.clone()], at);
        assert_eq!(
            c.verdicts,
            [
                (0, Verdict::Confirmed(vec!["a".to_string()])),
                (1, Verdict::Wait)
            ]
        );
        assert!(c.dropped.is_empty());
        // The next plan no longer makes a (it is under way) but still makes b: confirmed.
        let c = check_all(
            &mut pending,
            std::slice::from_ref(&b),
            later + VALIDATION_DELAY,
        );
        assert_eq!(c.verdicts, [(0, Verdict::Confirmed(vec!["b".to_string()]))]);
        assert!(pending.is_empty());
        // A pending decision no plan makes any more is dropped, the others kept.
        check_all(&mut pending, &[a.clone(), b.clone()], at);
        let c = check_all(&mut pending, &[b], at + Duration::from_secs(1));
        assert_eq!(c.dropped.len(), 1);
        assert_eq!(c.dropped[0].nodes, ["a"]);
        assert_eq!(pending.len(), 1);
    }

    fn decision(nodes: &[&str]) -> Decision {
        Decision {
            reason: Reason::Underutilized,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            replacements: Vec::new(),
            moves: Vec::new(),
            price_before: 0.1,
            price_after: 0.0,
            score: Some(1.0),
            detail: String::new(),
        }
    }

    #[test]
    fn a_decision_is_confirmed_only_when_made_again_after_the_delay() {
        let t0 = Instant::now();
        let mut pending = None;
        let d = decision(&["b", "a"]);
        assert_eq!(
            check(&mut pending, Some(&d), t0),
            (Some(Verdict::Wait), None)
        );
        let later = t0 + Duration::from_secs(5);
        assert_eq!(
            check(&mut pending, Some(&d), later),
            (Some(Verdict::Wait), None)
        );
        let same = decision(&["a", "b"]);
        let after = t0 + VALIDATION_DELAY;
        assert_eq!(
            check(&mut pending, Some(&same), after),
            (
                Some(Verdict::Confirmed(vec!["a".to_string(), "b".to_string()])),
                None
            )
        );
        assert_eq!(pending, None);
    }

    #[test]
    fn a_changed_or_vanished_decision_is_dropped() {
        let t0 = Instant::now();
        let mut pending = None;
        check(&mut pending, Some(&decision(&["a"])), t0);
        let after = t0 + VALIDATION_DELAY;
        let (verdict, dropped) = check(&mut pending, Some(&decision(&["b"])), after);
        assert_eq!(
            verdict,
            Some(Verdict::Wait),
            "the new decision starts its own delay"
        );
        assert_eq!(dropped.map(|k| k.nodes), Some(vec!["a".to_string()]));
        let (verdict, dropped) = check(&mut pending, None, after);
        assert_eq!(verdict, None);
        assert_eq!(dropped.map(|k| k.nodes), Some(vec!["b".to_string()]));
        assert_eq!(pending, None);
    }

    #[test]
    fn a_delete_keeps_the_nodes_later_plans_still_delete() {
        let t0 = Instant::now();
        let mut pending = None;
        let empty = |nodes: &[&str]| Decision {
            reason: Reason::Empty,
            ..decision(nodes)
        };
        check(&mut pending, Some(&empty(&["a", "b", "c"])), t0);
        // b took a pod, d emptied: a and c still wait, since t0.
        let mid = t0 + Duration::from_secs(10);
        assert_eq!(
            check(&mut pending, Some(&empty(&["a", "c", "d"])), mid),
            (Some(Verdict::Wait), None)
        );
        let after = t0 + VALIDATION_DELAY;
        assert_eq!(
            check(&mut pending, Some(&empty(&["a", "c", "d"])), after),
            (
                Some(Verdict::Confirmed(vec!["a".to_string(), "c".to_string()])),
                None
            )
        );
        // Another reason is another decision, and a consolidation's delete must recur whole.
        let mut pending = None;
        check(&mut pending, Some(&decision(&["a", "b"])), t0);
        let (_, dropped) = check(&mut pending, Some(&empty(&["a"])), after);
        assert!(dropped.is_some(), "another decision");
        let mut pending = None;
        check(&mut pending, Some(&decision(&["a", "b"])), t0);
        let (_, dropped) = check(&mut pending, Some(&decision(&["a"])), after);
        assert!(
            dropped.is_some(),
            "an Underutilized delete is simulated as a whole"
        );
    }
}
