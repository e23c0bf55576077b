//! A per-key exponential backoff, for calls that a pass must not repeat every second: an
//! eviction a PodDisruptionBudget refuses, a registration patch the API server refuses.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The delays between attempts of one key: `initial`, doubling up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// Delay after the first refusal.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl Default for BackoffPolicy {
    /// 1 s doubling to 1 min (evictions): quick when a budget frees up soon, light on the API
    /// server when a budget blocks for long.
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

/// Per-key backoff (a pod's evictions, a claim's refused registration), kept across passes.
#[derive(Debug, Default)]
pub struct Backoff {
    policy: BackoffPolicy,
    /// key -> (refusals so far, not before).
    pods: Mutex<HashMap<String, (u32, Instant)>>,
}

impl Backoff {
    /// Backoff with `policy`.
    pub fn new(policy: BackoffPolicy) -> Self {
        Backoff {
            policy,
            pods: Mutex::default(),
        }
    }

    /// True when `key` may be tried now.
    pub fn ready(&self, key: &str, now: Instant) -> bool {
        self.lock()
            .get(key)
            .is_none_or(|(_, not_before)| now >= *not_before)
    }

    /// Records a refusal of `key` at `now` and returns the delay until its next attempt.
    pub fn refused(&self, key: &str, now: Instant) -> Duration {
        let mut pods = self.lock();
        let attempts = pods.get(key).map_or(0, |(n, _)| *n);
        let factor = 2u32.saturating_pow(attempts.min(16));
        let delay = self
            .policy
            .initial
            .saturating_mul(factor)
            .min(self.policy.max);
        pods.insert(key.to_string(), (attempts.saturating_add(1), now + delay));
        delay
    }

    /// Forgets `key` (done, or gone).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Forgets every key not in `live` (deleted by someone else while backing off), so the map
    /// only holds keys that still exist.
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        self.lock().retain(|k, _| live.contains(k));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, Instant)>> {
        // A poisoned lock only means a panic elsewhere mid-update; the map is still usable.
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_max_and_is_per_pod() {
        let b = Backoff::new(BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(5),
        });
        let t0 = Instant::now();
        assert!(b.ready("a/x", t0));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(1));
        assert!(!b.ready("a/x", t0));
        assert!(b.ready("a/y", t0));
        assert!(b.ready("a/x", t0 + Duration::from_secs(1)));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(2));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(4));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(5));
        b.forget("a/x");
        assert!(b.ready("a/x", t0));
        b.refused("a/x", t0);
        b.refused("a/y", t0);
        b.retain(&std::collections::HashSet::from(["a/y".to_string()]));
        assert!(b.ready("a/x", t0));
        assert!(!b.ready("a/y", t0));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(1));
    }
}
