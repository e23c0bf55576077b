//! Interned requirement sets, so the packer compares and merges small integers instead of maps.
//!
//! Pods of one Deployment share their requirements, and most pods of a cluster share a handful
//! of distinct sets; merging two sets is cached once per pair.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::requirements::Requirements;

/// Index of an interned requirement set.
pub type ReqId = u32;

/// Interning table with a merge cache.
#[derive(Default)]
pub struct ReqTable {
    sets: Vec<Requirements>,
    ids: HashMap<Requirements, ReqId>,
    merges: HashMap<(ReqId, ReqId), Option<ReqId>, BuildHasherDefault<PairHasher>>,
}

/// A hasher for pairs of small ids: the merge cache is asked millions of times in a large
/// plan, and SipHash on eight bytes was a tenth of the time. Ids are not attacker-chosen.
#[derive(Default)]
struct PairHasher(u64);

impl Hasher for PairHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl ReqTable {
    /// Interns a set.
    pub fn intern(&mut self, r: Requirements) -> ReqId {
        if let Some(id) = self.ids.get(&r) {
            return *id;
        }
        let id = self.sets.len() as ReqId;
        self.sets.push(r.clone());
        self.ids.insert(r, id);
        id
    }

    /// The set behind an id.
    pub fn get(&self, id: ReqId) -> &Requirements {
        &self.sets[id as usize]
    }

    /// Both sets at once, or `None` when some key cannot be satisfied by both.
    pub fn merge(&mut self, a: ReqId, b: ReqId) -> Option<ReqId> {
        if a == b {
            return Some(a);
        }
        let key = if a < b { (a, b) } else { (b, a) };
        if let Some(m) = self.merges.get(&key) {
            return *m;
        }
        let (ra, rb) = (self.get(a), self.get(b));
        let result = if ra.conflict(rb).is_some() {
            None
        } else {
            let merged = ra.intersect(rb);
            Some(self.intern(merged))
        };
        self.merges.insert(key, result);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Requirement;

    #[test]
    fn merge_and_conflict() {
        let mut t = ReqTable::default();
        let mut a = Requirements::new();
        a.add("zone", Requirement::one_of(["a", "b"]));
        let mut b = Requirements::new();
        b.add("zone", Requirement::single("b"));
        let mut c = Requirements::new();
        c.add("zone", Requirement::single("c"));
        let (ia, ib, ic) = (t.intern(a), t.intern(b.clone()), t.intern(c));
        let m = t.merge(ia, ib).unwrap();
        assert_eq!(t.get(m), &b);
        assert_eq!(m, ib, "identical sets intern to one id");
        assert_eq!(t.merge(ib, ic), None);
        assert_eq!(t.merge(ic, ib), None, "cached both ways");
    }
}
