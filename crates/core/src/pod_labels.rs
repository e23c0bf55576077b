//! A pod's labels, shared between the replicas of a workload.
//!
//! Replicas of one Deployment carry the same labels; a million pending pods each holding their
//! own `BTreeMap` (a node with room for eleven entries) cost more memory than the rest of the
//! snapshot. [`PodLabels`] shares one map between clones and copies it only when a clone is
//! changed, so a workload's pods built from one template hold one map.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;

/// Labels of a pod: reads as a `BTreeMap`, clones share the map, a change copies it first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodLabels(Arc<BTreeMap<String, String>>);

impl PodLabels {
    /// Sets a label, copying the map first if another pod shares it.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        Arc::make_mut(&mut self.0).insert(key, value)
    }

    /// Removes a label, copying the map first if another pod shares it.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        Arc::make_mut(&mut self.0).remove(key)
    }

    /// True when both hold the very same map (a cheap test before comparing contents).
    pub fn shares_with(&self, other: &PodLabels) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for PodLabels {
    type Target = BTreeMap<String, String>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl From<BTreeMap<String, String>> for PodLabels {
    fn from(map: BTreeMap<String, String>) -> Self {
        PodLabels(Arc::new(map))
    }
}

impl FromIterator<(String, String)> for PodLabels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        PodLabels(Arc::new(iter.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a PodLabels {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_until_one_changes() {
        let mut a = PodLabels::default();
        a.insert("app".into(), "web".into());
        let b = a.clone();
        assert!(a.shares_with(&b));
        let mut c = b.clone();
        c.insert("rev".into(), "2".into());
        assert!(!c.shares_with(&b), "a change copies the map");
        assert_eq!(b.get("rev"), None, "the original is untouched");
        assert_eq!(c.get("app").map(String::as_str), Some("web"));
        assert_eq!(c.remove("app").as_deref(), Some("web"));
        assert_eq!(a.len(), 1);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn reads_as_a_map() {
        let l: PodLabels = [("b".to_string(), "2".to_string()), ("a".into(), "1".into())]
            .into_iter()
            .collect();
        let keys: Vec<_> = (&l).into_iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(l["a"], "1");
        assert_eq!(
            PodLabels::from(BTreeMap::from([("a".into(), "1".into())])),
            {
                let mut m = PodLabels::default();
                m.insert("a".into(), "1".into());
                m
            }
        );
    }
}
