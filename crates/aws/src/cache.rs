//! A small thread-safe TTL map: AWS answers (subnets, AMIs) are reused for a while instead of
//! being asked for on every launch, and expire so that changes in the account are picked up.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::Clock;

/// Entries expire `ttl` after they were inserted.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl: Duration,
    clock: Arc<dyn Clock>,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache whose entries live `ttl` on `clock`.
    pub fn new(ttl: Duration, clock: Arc<dyn Clock>) -> Self {
        TtlCache {
            ttl,
            clock,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The value, unless absent or expired (expired entries are dropped on the way).
    pub fn get(&self, key: &K) -> Option<V> {
        let now = self.clock.now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(key) {
            Some((expires, value)) if *expires > now => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` for a full TTL from now.
    pub fn insert(&self, key: K, value: V) {
        let expires = self.clock.now() + self.ttl;
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.insert(key, (expires, value));
    }

    /// Forgets `key`.
    pub fn remove(&self, key: &K) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.remove(key);
    }

    /// The keys and values not yet expired; expired entries are dropped.
    pub fn live(&self) -> Vec<(K, V)> {
        let now = self.clock.now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, (expires, _)| *expires > now);
        entries
            .iter()
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn entries_expire_after_the_ttl() {
        let clock = ManualClock::new();
        let cache = TtlCache::new(Duration::from_secs(60), clock.clone());
        cache.insert("a", 1);
        clock.advance(Duration::from_secs(59));
        assert_eq!(cache.get(&"a"), Some(1));
        assert_eq!(cache.live().len(), 1);
        clock.advance(Duration::from_secs(1));
        assert_eq!(cache.get(&"a"), None);
        assert!(cache.live().is_empty());
    }
}
