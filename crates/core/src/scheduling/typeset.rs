//! A fixed-size bit set over a provisioner's instance types: cheap intersection of the types
//! every pod on a node claim still allows.

/// Bit set of type indices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypeSet {
    words: Vec<u64>,
}

impl TypeSet {
    /// An empty set able to hold `n` indices.
    pub fn empty(n: usize) -> Self {
        TypeSet {
            words: vec![0; n.div_ceil(64)],
        }
    }

    /// Adds an index.
    pub fn insert(&mut self, i: usize) {
        if let Some(w) = self.words.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }

    /// Membership.
    pub fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// In-place intersection.
    pub fn intersect_with(&mut self, other: &TypeSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= *b;
        }
    }

    /// True when no index is set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// Number of indices set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Indices in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + b)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let mut a = TypeSet::empty(130);
        for i in [0, 63, 64, 129] {
            a.insert(i);
        }
        let mut b = TypeSet::empty(130);
        b.insert(64);
        b.insert(129);
        b.insert(5);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![0, 63, 64, 129]);
        a.intersect_with(&b);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![64, 129]);
        assert_eq!(a.len(), 2);
        assert!(!a.contains(5));
        assert!(TypeSet::empty(3).is_empty());
    }
}
