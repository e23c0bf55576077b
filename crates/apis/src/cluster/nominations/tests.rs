use std::collections::BTreeMap;

use joiner_core::{Node, Owner, Pod, Resources, Snapshot};
use serde_json::json;

use super::*;

const GI: i64 = 1 << 30;
const NOW: &str = "2026-12-07T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().expect("time")
}

/// A node of 2 CPU for claim `claim` (in flight: named after it), initialized or not.
fn node(name: &str, claim: &str, initialized: bool) -> Node {
    let mut n = Node {
        name: name.into(),
        labels: BTreeMap::from([(labels::NODECLAIM.to_string(), claim.to_string())]),
        allocatable: Resources::new(2000, 8 * GI, 0, 110),
        ..Node::default()
    };
    n.life.initialized = initialized;
    n
}

fn pod(name: &str, on: Option<&str>, cpu: i64) -> Pod {
    Pod {
        namespace: "shop".into(),
        name: name.into(),
        node_name: on.map(str::to_string),
        requests: Resources::new(cpu, GI, 0, 1),
        ..Pod::default()
    }
}

fn owned(mut p: Pod, replica_set: &str) -> Pod {
    p.owner = Some(Owner {
        kind: "ReplicaSet".into(),
        name: replica_set.into(),
    });
    p
}

/// Claim `name` nominating `pods` (`pod` or `pod@node`, in namespace shop), with `extra`
/// merged into its JSON.
fn claim(name: &str, pods: &[&str], extra: serde_json::Value) -> Arc<NodeClaim> {
    let keys: Vec<String> = pods.iter().map(|p| format!("shop/{p}")).collect();
    let mut v = json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
        "metadata": {"name": name, "annotations": {
            labels::NOMINATED_PODS: value(&[], &keys)}},
        "spec": {"provisionerName": "web"},
    });
    if let (Some(base), Some(more)) = (v.as_object_mut(), extra.as_object()) {
        for (k, val) in more {
            base.insert(k.clone(), val.clone());
        }
    }
    Arc::new(serde_json::from_value(v).expect("claim"))
}

fn initialized_at(at: &str) -> serde_json::Value {
    json!({"status": {"conditions": [{"type": "Initialized", "status": "True",
        "lastTransitionTime": at, "reason": "Initialized", "message": ""}]}})
}

fn snapshot(nodes: Vec<Node>, pods: Vec<Pod>) -> Snapshot {
    Snapshot {
        nodes,
        pods,
        ..Snapshot::default()
    }
}

fn on(snap: &Snapshot, pod: &str) -> Option<(String, Option<String>)> {
    snap.pods.iter().find(|p| p.name == pod).map(|p| {
        (
            p.node_name.clone().unwrap_or_default(),
            p.disruption.nominated.clone(),
        )
    })
}

#[test]
fn a_nominated_pending_pod_is_placed_on_its_claims_node_and_others_stay_pending() {
    let mut snap = snapshot(
        vec![node("web-1", "web-1", false)],
        vec![pod("a", None, 1500), pod("b", None, 300)],
    );
    apply(&mut snap, &[claim("web-1", &["a"], json!({}))], now());
    assert_eq!(on(&snap, "a"), Some(("web-1".into(), Some("web-1".into()))));
    assert_eq!(on(&snap, "b"), Some((String::new(), None)));
}

#[test]
fn nominations_take_room_only_while_it_fits() {
    // Two nominated pods of 1.5 CPU on a 2-CPU node (a claim launched smaller than planned):
    // the first keeps its room, the second is planned again.
    let mut snap = snapshot(
        vec![node("web-1", "web-1", false)],
        vec![pod("a", None, 1500), pod("b", None, 1500)],
    );
    apply(&mut snap, &[claim("web-1", &["a", "b"], json!({}))], now());
    assert_eq!(on(&snap, "a").map(|(n, _)| n), Some("web-1".into()));
    assert_eq!(on(&snap, "b"), Some((String::new(), None)));
}

#[test]
fn a_pod_still_on_the_node_it_leaves_gets_a_reservation_its_successor_takes() {
    // `a` is still bound to the interrupted node `old` it was nominated from: its room on the
    // replacement is held by a copy.
    let mut snap = snapshot(
        vec![node("old", "old", true), node("web-1", "web-1", false)],
        vec![owned(pod("a", Some("old"), 1500), "rs-1")],
    );
    apply(&mut snap, &[claim("web-1", &["a@old"], json!({}))], now());
    assert_eq!(on(&snap, "a"), Some(("old".into(), None)));
    assert_eq!(
        on(&snap, "a@web-1"),
        Some(("web-1".into(), Some("web-1".into())))
    );

    // Evicted while terminating, its replica pending: the replica takes the room, no copy.
    let mut snap = snapshot(
        vec![node("old", "old", true), node("web-1", "web-1", false)],
        vec![
            owned(pod("a", Some("old"), 1500), "rs-1"),
            owned(pod("a-2", None, 1500), "rs-1"),
            owned(pod("other", None, 1500), "rs-2"),
        ],
    );
    apply(&mut snap, &[claim("web-1", &["a@old"], json!({}))], now());
    assert_eq!(
        on(&snap, "a-2"),
        Some(("web-1".into(), Some("web-1".into())))
    );
    assert_eq!(on(&snap, "a@web-1"), None);
    assert_eq!(on(&snap, "other"), Some((String::new(), None)));
}

#[test]
fn nominations_lapse_after_the_grace_and_with_the_claim() {
    let pods = || vec![pod("a", None, 500)];
    let nodes = || vec![node("web-1", "web-1", true)];
    // Initialized 30 s ago: still held. 2 minutes ago: lapsed.
    let mut snap = snapshot(nodes(), pods());
    apply(
        &mut snap,
        &[claim(
            "web-1",
            &["a"],
            initialized_at("2026-12-07T11:59:30Z"),
        )],
        now(),
    );
    assert_eq!(on(&snap, "a").map(|(n, _)| n), Some("web-1".into()));
    let mut snap = snapshot(nodes(), pods());
    apply(
        &mut snap,
        &[claim(
            "web-1",
            &["a"],
            initialized_at("2026-12-07T11:58:00Z"),
        )],
        now(),
    );
    assert_eq!(on(&snap, "a"), Some((String::new(), None)));
    // Being deleted: the room goes with it.
    let mut snap = snapshot(nodes(), pods());
    let deleting = claim(
        "web-1",
        &["a"],
        json!({"metadata": {"name": "web-1", "deletionTimestamp": NOW,
            "annotations": {labels::NOMINATED_PODS: "[\"shop/a\"]"}}}),
    );
    apply(&mut snap, &[deleting], now());
    assert_eq!(on(&snap, "a"), Some((String::new(), None)));
}

#[test]
fn a_malformed_record_or_a_gone_pod_holds_nothing() {
    let mut snap = snapshot(
        vec![node("web-1", "web-1", false)],
        vec![pod("a", None, 500)],
    );
    let bad = claim(
        "web-1",
        &[],
        json!({"metadata": {"name": "web-1",
            "annotations": {labels::NOMINATED_PODS: "shop/a"}}}),
    );
    assert!(of(&bad).is_empty());
    apply(
        &mut snap,
        &[bad, claim("web-2", &["gone"], json!({}))],
        now(),
    );
    assert_eq!(on(&snap, "a"), Some((String::new(), None)));
    assert_eq!(snap.pods.len(), 1);
}

#[test]
fn values_keep_each_pod_once_in_order_and_the_latest_when_too_many() {
    let keys = |v: &str| serde_json::from_str::<Vec<String>>(v).expect("list");
    let a = vec!["shop/a".to_string(), "shop/b".to_string()];
    assert_eq!(
        keys(&value(&a, &["shop/b".into(), "shop/c".into()])),
        ["shop/a", "shop/b", "shop/c"]
    );
    let many: Vec<String> = (0..MOST + 5).map(|i| format!("shop/p{i}")).collect();
    let kept = keys(&value(&[], &many));
    assert_eq!(kept.len(), MOST);
    assert_eq!(kept[0], "shop/p5");
}

#[test]
fn a_plan_adds_nominations_only_to_nodes_still_coming_up() {
    let snap = snapshot(
        vec![
            node("web-1", "web-1", false),
            node("ip-10-0-0-1", "web-2", true),
            node("ip-10-0-0-2", "web-3", false),
        ],
        vec![],
    );
    let uses = |name: &str, pods: &[&str]| ExistingNodeUse {
        name: name.into(),
        pods: pods.iter().map(|p| p.to_string()).collect(),
    };
    let added = added_by(
        &snap,
        &[
            uses("web-1", &["shop/a"]),
            uses("ip-10-0-0-1", &["shop/b"]),
            uses("ip-10-0-0-2", &["shop/c"]),
            uses("web-1", &[]),
        ],
    );
    assert_eq!(
        added,
        [
            ("web-1".to_string(), vec!["shop/a".to_string()]),
            ("web-3".to_string(), vec!["shop/c".to_string()]),
        ]
    );
}

#[test]
fn a_plan_moving_the_pods_itself_releases_their_reservations() {
    let mut snap = snapshot(
        vec![node("old", "old", true), node("web-1", "web-1", false)],
        vec![
            pod("a", Some("old"), 1500),
            pod("b", Some("elsewhere"), 300),
        ],
    );
    apply(
        &mut snap,
        &[claim("web-1", &["a@old", "b@elsewhere"], json!({}))],
        now(),
    );
    assert!(on(&snap, "a@web-1").is_some() && on(&snap, "b@web-1").is_some());
    release(&mut snap, &["old"]);
    assert_eq!(on(&snap, "a@web-1"), None, "a's room is free for a itself");
    assert!(
        on(&snap, "b@web-1").is_some(),
        "b leaves no node being replaced"
    );
    assert_eq!(on(&snap, "a"), Some(("old".into(), None)));
}

#[test]
fn a_pod_the_scheduler_put_elsewhere_holds_nothing_and_a_pod_is_held_once() {
    // Nominated while pending, then bound to another node: its nomination is spent.
    let mut snap = snapshot(
        vec![node("web-1", "web-1", false), node("web-2", "web-2", true)],
        vec![pod("a", Some("web-2"), 1500)],
    );
    apply(&mut snap, &[claim("web-1", &["a"], json!({}))], now());
    assert_eq!(snap.pods.len(), 1, "no reservation");
    // Nominated from `old` to two claims: one reservation only.
    let mut snap = snapshot(
        vec![
            node("old", "old", true),
            node("web-1", "web-1", false),
            node("web-3", "web-3", false),
        ],
        vec![pod("b", Some("old"), 500)],
    );
    apply(
        &mut snap,
        &[
            claim("web-1", &["b@old"], json!({})),
            claim("web-3", &["b@old"], json!({})),
        ],
        now(),
    );
    assert_eq!(snap.pods.len(), 2, "{:?}", snap.pods);
    assert!(on(&snap, "b@web-1").is_some());
}

#[test]
fn a_claim_never_initialized_lets_its_nominations_lapse() {
    let pods = || vec![pod("a", None, 500)];
    let nodes = || vec![node("web-1", "web-1", false)];
    let created = |at: &str| {
        json!({"metadata": {"name": "web-1", "creationTimestamp": at,
        "annotations": {labels::NOMINATED_PODS: "[\"shop/a\"]"}}})
    };
    let mut snap = snapshot(nodes(), pods());
    apply(
        &mut snap,
        &[claim("web-1", &[], created("2026-12-07T11:50:00Z"))],
        now(),
    );
    assert_eq!(on(&snap, "a").map(|(n, _)| n), Some("web-1".into()));
    let mut snap = snapshot(nodes(), pods());
    apply(
        &mut snap,
        &[claim("web-1", &[], created("2026-12-07T11:30:00Z"))],
        now(),
    );
    assert_eq!(on(&snap, "a"), Some((String::new(), None)));
}

#[test]
fn entries_name_the_node_a_pod_leaves() {
    let snap = snapshot(
        vec![],
        vec![pod("a", None, 500), pod("b", Some("old"), 500)],
    );
    assert_eq!(entries(&snap, &[0, 1]), ["shop/a", "shop/b@old"]);
    assert_eq!(
        entries_of_keys(&snap, &["shop/b".into(), "shop/gone".into()]),
        ["shop/b@old", "shop/gone"]
    );
}

#[test]
fn a_reservation_outlives_the_grace_while_the_node_its_pod_leaves_is_on_its_way_out() {
    // The replacement was Initialized two minutes ago; db is still on `old`, its drain held
    // back by a PodDisruptionBudget.
    let replacement = || node("web-1", "web-1", true);
    let old = |tainted: bool| {
        let mut n = node("old", "web-0", true);
        if tainted {
            n.taints.push(joiner_core::taints::Taint {
                key: labels::DISRUPTED_TAINT.into(),
                value: String::new(),
                effect: joiner_core::taints::Effect::NoSchedule,
            });
        }
        n
    };
    let claims = [claim(
        "web-1",
        &["db@old", "web"],
        initialized_at("2026-12-07T11:58:00Z"),
    )];
    let pods = || vec![pod("db", Some("old"), 500), pod("web", None, 500)];
    let mut snap = snapshot(vec![replacement(), old(true)], pods());
    apply(&mut snap, &claims, now());
    assert_eq!(
        on(&snap, "db@web-1"),
        Some(("web-1".into(), Some("web-1".into()))),
        "held while old drains"
    );
    assert_eq!(
        on(&snap, "web"),
        Some((String::new(), None)),
        "past its grace"
    );
    // Once old is no longer on its way out, nothing is held.
    let mut snap = snapshot(vec![replacement(), old(false)], pods());
    apply(&mut snap, &claims, now());
    assert_eq!(on(&snap, "db@web-1"), None);
}
