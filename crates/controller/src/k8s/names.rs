//! Generated object names: the random suffix Kubernetes-style generated names end with.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Consonants and digits as Kubernetes uses for generated names: no vowels, so no words.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A random five-character suffix. The hasher's per-instance random keys give the randomness;
/// the clock and a counter make two calls in one process differ even if the keys repeated.
pub fn random_suffix() -> String {
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    h.write_u128(nanos);
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let mut v = h.finish();
    let n = ALPHABET.len() as u64;
    (0..5)
        .map(|_| {
            let c = ALPHABET[(v % n) as usize] as char;
            v /= n;
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_use_the_alphabet_and_differ() {
        let a = random_suffix();
        let b = random_suffix();
        assert_eq!(a.len(), 5);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)), "{a}");
        assert_ne!(a, b);
    }
}
