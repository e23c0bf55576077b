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

/// True for a decision that deletes a batch of empty nodes (empty, or empty and drifted or
/// expired): each node stands on its own, so the ones still empty may go without the others.
fn batch(key: &DecisionKey) -> bool {
    key.replacements.is_empty()
        && matches!(
            key.reason,
            Reason::Empty | Reason::Drifted | Reason::Expired
        )
}

/// Weighs `decision` (`None`: the plan made none) against the pending one, updating it, and
/// returns what to do with it and the pending decision the cluster's change dropped, if any.
pub fn check(
    pending: &mut Option<Pending>,
    decision: Option<&Decision>,
    now: Instant,
) -> (Option<Verdict>, Option<DecisionKey>) {
    let key = decision.map(DecisionKey::of);
    // A batch of empty nodes still deleting some of the pending one's nodes: those stay
    // pending (a consolidation's delete was simulated as a whole and must recur as it was).
    if let (Some(p), Some(k)) = (pending.as_mut(), key.as_ref()) {
        let deletes = batch(&p.key) && batch(k);
        if deletes && p.key.reason == k.reason && p.key != *k {
            let kept: Vec<String> = p
                .key
                .nodes
                .iter()
                .filter(|n| k.nodes.contains(n))
                .cloned()
                .collect();
            if !kept.is_empty() {
                p.key.nodes = kept;
            }
        }
    }
    let same = |p: &Pending, k: &DecisionKey| {
        &p.key == k
            || (batch(&p.key)
                && batch(k)
                && p.key.reason == k.reason
                && p.key.nodes.iter().all(|n| k.nodes.contains(n)))
    };
    let dropped = match (pending.as_ref(), key.as_ref()) {
        (Some(p), Some(k)) if same(p, k) => None,
        (Some(p), _) => Some(p.key.clone()),
        (None, _) => None,
    };
    if dropped.is_some() {
        *pending = None;
    }
    let Some(key) = key else {
        return (None, dropped);
    };
    match pending {
        Some(p) if now.duration_since(p.since) >= VALIDATION_DELAY => {
            let nodes = std::mem::take(&mut p.key.nodes);
            *pending = None;
            (Some(Verdict::Confirmed(nodes)), dropped)
        }
        Some(_) => (Some(Verdict::Wait), dropped),
        None => {
            *pending = Some(Pending { key, since: now });
            (Some(Verdict::Wait), dropped)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
