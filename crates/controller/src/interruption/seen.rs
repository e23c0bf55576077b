//! The events handled lately, so a second delivery of one (EventBridge delivers at least
//! once; a message whose delete failed comes back) is deleted without acting twice.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long a handled event's ID is remembered: longer than any redelivery (the queue keeps
/// messages 300 s) and than the two-minute warning.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(15 * 60);

/// Most IDs remembered; the oldest are forgotten first beyond it, so a flood of distinct
/// events cannot grow memory without bound.
pub const MOST: usize = 100_000;

/// Event IDs handled, with when.
#[derive(Debug, Default)]
pub struct Seen {
    at: HashMap<String, Instant>,
    order: VecDeque<(Instant, String)>,
}

impl Seen {
    /// True when `id` was handled within [`REMEMBERED_FOR`] of `now`.
    pub fn contains(&self, id: &str, now: Instant) -> bool {
        self.at
            .get(id)
            .is_some_and(|t| now.saturating_duration_since(*t) < REMEMBERED_FOR)
    }

    /// Records `id` as handled at `now`, forgetting what is too old or too many.
    pub fn insert(&mut self, id: &str, now: Instant) {
        if self.at.insert(id.to_string(), now).is_none() {
            self.order.push_back((now, id.to_string()));
        }
        while let Some((t, oldest)) = self.order.front() {
            let expired = now.saturating_duration_since(*t) >= REMEMBERED_FOR;
            if !expired && self.order.len() <= MOST {
                break;
            }
            if self.at.get(oldest) == Some(t) {
                self.at.remove(oldest);
            }
            self.order.pop_front();
        }
    }

    /// Forgets `id`: its handling failed, and the message that comes back must be handled.
    pub fn remove(&mut self, id: &str) {
        self.at.remove(id);
    }

    /// How many IDs are remembered.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_remembered_for_a_while_then_forgotten() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        seen.insert("a", t0);
        assert!(seen.contains("a", t0 + Duration::from_secs(60)));
        assert!(!seen.contains("b", t0));
        seen.insert("b", t0 + REMEMBERED_FOR);
        assert!(!seen.contains("a", t0 + REMEMBERED_FOR));
        assert_eq!(seen.len(), 1, "the expired ID is dropped");
    }

    #[test]
    fn memory_is_bounded() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        for i in 0..MOST + 10 {
            seen.insert(&i.to_string(), t0);
        }
        assert_eq!(seen.len(), MOST);
        assert!(!seen.contains("0", t0), "the oldest went first");
        assert!(seen.contains(&(MOST + 9).to_string(), t0));
    }
}
