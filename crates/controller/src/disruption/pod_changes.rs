//! When each node's pods last changed, as the disruption loop saw it.
//!
//! `consolidateAfter` keeps a node whose pods just changed from being consolidated. An arrival
//! shows in the pod's creation time, but a departure leaves nothing behind in the stores: the
//! loop compares each node's pods with those of its previous pass and remembers when the set
//! last differed. A node first seen by this replica (it just became leader, or the node is new)
//! counts as changed then, so a new leader does not consolidate a node whose pods left just
//! before it took over. DaemonSet and mirror pods do not count: they come and go with the node
//! (a DaemonSet rollout would otherwise postpone consolidation of every node), and
//! consolidation does not move them.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use joiner_core::disruption::candidates::leaves_with_node;
use joiner_core::Snapshot;

/// A pod as far as the fingerprint goes: namespace, name, creation time (a pod recreated
/// under the same name is a change).
type PodKey<'a> = (&'a str, &'a str, Option<i64>);

/// Per node: a fingerprint of its pods and when it last changed (unix seconds).
#[derive(Debug, Default)]
pub struct PodChanges {
    seen: HashMap<String, (u64, i64)>,
}

impl PodChanges {
    /// Compares `snapshot`'s pods per node with the last pass's, records `now` for each node
    /// whose pods differ (or that is new here), forgets nodes that are gone, and writes the
    /// times into the snapshot's nodes (`life.pods_changed_at`).
    pub fn observe(&mut self, snapshot: &mut Snapshot, now: i64) {
        let mut prints: HashMap<&str, Vec<PodKey<'_>>> = HashMap::new();
        // Pods on their way (nominations) are not the node's pods yet.
        for p in snapshot
            .pods
            .iter()
            .filter(|p| !leaves_with_node(p) && p.disruption.nominated.is_none())
        {
            if let Some(node) = p.node_name.as_deref() {
                prints.entry(node).or_default().push((
                    p.namespace.as_str(),
                    p.name.as_str(),
                    p.disruption.created_at,
                ));
            }
        }
        let mut seen = HashMap::with_capacity(snapshot.nodes.len());
        for node in &mut snapshot.nodes {
            let mut pods = prints.remove(node.name.as_str()).unwrap_or_default();
            pods.sort_unstable();
            let mut h = DefaultHasher::new();
            pods.hash(&mut h);
            let print = h.finish();
            let changed_at = match self.seen.get(&node.name) {
                Some(&(before, at)) if before == print => at,
                _ => now,
            };
            node.life.pods_changed_at = Some(changed_at);
            seen.insert(node.name.clone(), (print, changed_at));
        }
        self.seen = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::{Node, Pod};

    fn snapshot(pods: &[(&str, &str)]) -> Snapshot {
        Snapshot {
            nodes: ["a", "b"]
                .iter()
                .map(|n| Node {
                    name: n.to_string(),
                    ..Node::default()
                })
                .collect(),
            pods: pods
                .iter()
                .map(|(name, on)| Pod {
                    namespace: "shop".into(),
                    name: name.to_string(),
                    node_name: Some(on.to_string()),
                    ..Pod::default()
                })
                .collect(),
            ..Snapshot::default()
        }
    }

    fn changed(s: &Snapshot) -> Vec<Option<i64>> {
        s.nodes.iter().map(|n| n.life.pods_changed_at).collect()
    }

    #[test]
    fn a_departure_is_remembered_until_the_pods_change_again() {
        let mut changes = PodChanges::default();
        let mut s = snapshot(&[("web-1", "a"), ("web-2", "a"), ("db", "b")]);
        changes.observe(&mut s, 100);
        assert_eq!(changed(&s), [Some(100), Some(100)], "first seen now");

        let mut s = snapshot(&[("web-1", "a"), ("web-2", "a"), ("db", "b")]);
        changes.observe(&mut s, 110);
        assert_eq!(changed(&s), [Some(100), Some(100)], "nothing changed");

        let mut s = snapshot(&[("web-1", "a"), ("db", "b")]);
        changes.observe(&mut s, 120);
        assert_eq!(changed(&s), [Some(120), Some(100)], "web-2 left a");

        // The order pods come in does not matter.
        let mut s = snapshot(&[("db", "b"), ("web-1", "a")]);
        changes.observe(&mut s, 130);
        assert_eq!(changed(&s), [Some(120), Some(100)]);
    }

    #[test]
    fn daemon_set_and_mirror_pods_coming_and_going_are_not_changes() {
        let mut changes = PodChanges::default();
        let mut s = snapshot(&[("web-1", "a"), ("db", "b")]);
        changes.observe(&mut s, 100);
        // A DaemonSet rollout replaces its pod on every node; a static pod appears on b.
        let mut s = snapshot(&[
            ("web-1", "a"),
            ("db", "b"),
            ("fluent-bit-x", "a"),
            ("kube-proxy-b", "b"),
        ]);
        s.pods[2].owner = Some(joiner_core::Owner {
            kind: "DaemonSet".into(),
            name: "fluent-bit".into(),
        });
        s.pods[3].owner = Some(joiner_core::Owner {
            kind: "Node".into(),
            name: "b".into(),
        });
        changes.observe(&mut s, 200);
        assert_eq!(changed(&s), [Some(100), Some(100)]);
        // A workload pod arriving is a change.
        let mut s = snapshot(&[("web-1", "a"), ("db", "b"), ("web-2", "b")]);
        changes.observe(&mut s, 300);
        assert_eq!(changed(&s), [Some(100), Some(300)]);
    }
}
