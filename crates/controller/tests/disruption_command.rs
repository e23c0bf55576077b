//! A disruption command on `FakeCloud` and the scripted API, step by step: the old node is
//! tainted and the command recorded on its claim before the replacement launches; a launch
//! that fails, or a replacement that never initializes, rolls it back; the decision is
//! checked again before the drain; a new leader carries the commands on from their records;
//! independent commands run side by side within the budget.

mod cluster_fixture;
mod lifecycle_fixture;
mod support;

use std::time::{Duration, Instant};

use cluster_fixture::{harness, joiner_claim, joiner_node, merge_node, running, Harness, CLAIMS};
use http::Method;
use joiner_controller::disruption::command::REPLACEMENT_TIMEOUT;
use joiner_controller::disruption::record::Record;
use joiner_controller::disruption::validation::VALIDATION_DELAY;
use joiner_controller::disruption::{pass, Memory, Outcome};
use joiner_controller::pod_record::PodRecord;
use joiner_core::testing::{FakeCall, FakeError, FakeMethod};
use joiner_core::{labels, CloudErrorKind};
use kube::runtime::watcher::Event;
use serde_json::{json, Value};

const REPLACEMENT_ID: &str = "fake:///z-a/i-fake00001";

/// One m5.4xlarge holding a 500m pod: a c5.large replaces it.
fn one_big_node() -> Harness {
    harness(
        vec![joiner_node("big", "m5.4xlarge", "fake:///z-a/i-big")],
        vec![joiner_claim("big", "m5.4xlarge", "fake:///z-a/i-big")],
        vec![running("web", "big", "500m")],
    )
}

/// Runs the passes up to the start of the replacement: its claim's name.
async fn replacing(h: &Harness, memory: &mut Memory, t0: Instant) -> String {
    let first = pass(&h.ctx, memory, t0).await.expect("pass");
    assert!(matches!(first, Outcome::Validating(_)), "{first:?}");
    let started = pass(&h.ctx, memory, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    let Outcome::Replacing(key, replacements) = started else {
        panic!("expected a replacement, got {started:?}");
    };
    assert_eq!(key.nodes, ["big"]);
    assert_eq!(replacements.len(), 1);
    replacements[0].clone()
}

/// The replacement `name` in the stores: its claim, and its node Ready or not.
fn replacement_joins(h: &mut Harness, name: &str, ready: bool) {
    let mut node = joiner_node("new", "c5.large", REPLACEMENT_ID);
    if !ready {
        merge_node(
            &mut node,
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        );
    }
    h.nodes.apply_watcher_event(&Event::Apply(node));
    let mut claim = joiner_claim("new", "c5.large", REPLACEMENT_ID);
    claim.metadata.name = Some(name.to_string());
    h.claims.apply_watcher_event(&Event::Apply(claim));
}

/// Position of the first request `matches` picks, or a panic naming `what`.
fn first(h: &Harness, what: &str, matches: impl Fn(&support::Recorded) -> bool) -> usize {
    h.api
        .requests()
        .iter()
        .position(matches)
        .unwrap_or_else(|| panic!("no {what} among {:?}", h.api.calls()))
}

fn taints_node(r: &support::Recorded, node: &str) -> bool {
    r.method == Method::PATCH
        && r.path == format!("/api/v1/nodes/{node}")
        && r.body.to_string().contains(labels::DISRUPTED_TAINT)
}

fn untaints_node(r: &support::Recorded, node: &str) -> bool {
    r.method == Method::PATCH
        && r.path == format!("/api/v1/nodes/{node}")
        && !r.body.to_string().contains(labels::DISRUPTED_TAINT)
}

/// The record a claim PATCH wrote, if it wrote one.
fn record_in(r: &support::Recorded) -> Option<Record> {
    let raw = r.body["metadata"]["annotations"][labels::DISRUPTION_COMMAND].as_str()?;
    serde_json::from_str(raw).ok()
}

/// The claim of `node` (`itype`, `provider_id`) in the stores as the API holds it after the
/// command's record was written on it (the record taken from that PATCH).
fn recorded_in_store(h: &mut Harness, node: &str, itype: &str, provider_id: &str) {
    let recorded = first(h, "the command's record", |r| {
        r.method == Method::PATCH
            && r.path == format!("{CLAIMS}/web-{node}")
            && record_in(r).is_some()
    });
    let annotation = h.api.requests()[recorded].body["metadata"]["annotations"]
        [labels::DISRUPTION_COMMAND]
        .clone();
    let mut old = joiner_claim(node, itype, provider_id);
    old.metadata.annotations = Some(std::collections::BTreeMap::from([(
        labels::DISRUPTION_COMMAND.to_string(),
        annotation.as_str().expect("text").to_string(),
    )]));
    h.claims.apply_watcher_event(&Event::Apply(old));
}

fn unmarks(r: &support::Recorded, claim: &str) -> bool {
    r.method == Method::PATCH
        && r.path == format!("{CLAIMS}/{claim}")
        && r.body["metadata"]["annotations"]
            .get(labels::DISRUPTION_COMMAND)
            .is_some_and(Value::is_null)
}

fn launches(h: &Harness) -> usize {
    h.cloud
        .calls()
        .iter()
        .filter(|c| matches!(c, FakeCall::Create(_)))
        .count()
}

#[tokio::test]
async fn the_old_node_is_tainted_and_the_command_recorded_before_the_replacement_launches() {
    let h = one_big_node();
    let mut memory = Memory::default();
    let name = replacing(&h, &mut memory, Instant::now()).await;
    let tainted = first(&h, "taint of big", |r| taints_node(r, "big"));
    let written = first(&h, "replacement claim", |r| r.is(Method::POST, CLAIMS));
    let recorded = first(&h, "record on web-big", |r| {
        r.method == Method::PATCH && r.path == format!("{CLAIMS}/web-big") && record_in(r).is_some()
    });
    assert!(
        tainted < written && written < recorded,
        "{:?}",
        h.api.calls()
    );
    let record = record_in(&h.api.requests()[recorded]).expect("record");
    assert_eq!(record.reason, "Underutilized");
    assert_eq!(record.nodes, ["big"]);
    assert_eq!(record.replacements, [name]);
    assert_eq!(record.replacement_types, ["c5.large"]);
    // Launched once the command was recorded (the pass returns after the launch).
    assert_eq!(launches(&h), 1);
    assert!(h.deleted().is_empty(), "{:?}", h.api.calls());
}

#[tokio::test]
async fn a_failed_launch_fails_the_command_at_once_and_frees_the_old_node() {
    let h = one_big_node();
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let first_pass = pass(&h.ctx, &mut memory, t0).await.expect("pass");
    assert!(
        matches!(first_pass, Outcome::Validating(_)),
        "{first_pass:?}"
    );
    h.cloud.fail_next(
        FakeMethod::Create,
        FakeError::new(CloudErrorKind::Other, "Unsupported"),
    );
    let out = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    let Outcome::Dropped(key, why) = out else {
        panic!("expected the command given up, got {out:?}");
    };
    assert_eq!(key.nodes, ["big"]);
    assert!(why.contains("Unsupported"), "{why}");
    assert!(
        memory.command().is_none(),
        "nothing waits for a failed launch"
    );
    let failed = h
        .ctx
        .metrics
        .disruption_failed
        .get_or_create(&joiner_controller::metrics::ReasonOnlyLabels {
            reason: "Underutilized".into(),
        })
        .get();
    assert_eq!(failed, 1);
    // The replacement's claim is deleted, the old node untainted and its claim unmarked.
    let deleted = h.deleted();
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(deleted[0].starts_with("web-"), "{deleted:?}");
    assert_ne!(deleted[0], "web-big", "the old claim stays");
    let tainted = first(&h, "taint of big", |r| taints_node(r, "big"));
    let freed = first(&h, "untaint of big", |r| untaints_node(r, "big"));
    assert!(tainted < freed);
    first(&h, "record removed", |r| unmarks(r, "web-big"));
    assert!(
        h.events()
            .iter()
            .any(|(kind, reason, msg)| kind == "NodeClaim"
                && reason == "DisruptionFailed"
                && msg.contains("Unsupported")),
        "{:?}",
        h.events()
    );
}

#[tokio::test]
async fn a_replacement_that_never_initializes_is_removed_and_the_old_node_freed() {
    let mut h = one_big_node();
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let name = replacing(&h, &mut memory, t0).await;
    replacement_joins(&mut h, &name, false);
    let waiting = pass(
        &h.ctx,
        &mut memory,
        t0 + VALIDATION_DELAY + Duration::from_secs(60),
    )
    .await
    .expect("pass");
    assert!(matches!(waiting, Outcome::Waiting(_)), "{waiting:?}");
    let late = pass(
        &h.ctx,
        &mut memory,
        t0 + VALIDATION_DELAY + REPLACEMENT_TIMEOUT,
    )
    .await
    .expect("pass");
    let Outcome::Dropped(_, why) = late else {
        panic!("expected the command given up, got {late:?}");
    };
    assert!(why.contains("not initialized after 15 minutes"), "{why}");
    assert_eq!(
        h.deleted(),
        [name],
        "the replacement goes, the old node stays"
    );
    first(&h, "untaint of big", |r| untaints_node(r, "big"));
    first(&h, "record removed", |r| unmarks(r, "web-big"));
}

#[tokio::test]
async fn a_pod_that_landed_and_no_longer_fits_stops_the_drain() {
    let mut h = one_big_node();
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let name = replacing(&h, &mut memory, t0).await;
    // A 3-CPU pod lands on the old node meanwhile (it tolerates the taint): with it, the
    // c5.large replacement no longer holds the old node's pods.
    h.pods
        .apply_watcher_event(&Event::Apply(PodRecord::from(&running(
            "batch", "big", "3",
        ))));
    replacement_joins(&mut h, &name, true);
    let out = pass(
        &h.ctx,
        &mut memory,
        t0 + VALIDATION_DELAY + Duration::from_secs(30),
    )
    .await
    .expect("pass");
    let Outcome::Dropped(_, why) = out else {
        panic!("expected the command given up, got {out:?}");
    };
    assert!(why.starts_with("the decision no longer holds"), "{why}");
    assert!(
        !h.deleted().contains(&"web-big".to_string()),
        "the old node is not drained: {:?}",
        h.deleted()
    );
    assert!(
        !h.deleted().contains(&name),
        "an initialized replacement stays (consolidated in turn)"
    );
    first(&h, "untaint of big", |r| untaints_node(r, "big"));
}

#[tokio::test]
async fn a_new_leader_carries_the_command_on_from_its_record() {
    let mut h = one_big_node();
    let t0 = Instant::now();
    let name = {
        let mut old_leader = Memory::default();
        replacing(&h, &mut old_leader, t0).await
    };
    // What the old leader left: the record on the old claim, the replacement's claim.
    recorded_in_store(&mut h, "big", "m5.4xlarge", "fake:///z-a/i-big");
    replacement_joins(&mut h, &name, false);

    let mut new_leader = Memory::default();
    let waiting = pass(
        &h.ctx,
        &mut new_leader,
        t0 + VALIDATION_DELAY + Duration::from_secs(20),
    )
    .await
    .expect("pass");
    assert!(matches!(waiting, Outcome::Waiting(_)), "{waiting:?}");
    assert_eq!(
        new_leader.command().map(|c| c.replacements.clone()),
        Some(vec![name.clone()])
    );
    assert_eq!(launches(&h), 1, "nothing launched again");
    replacement_joins(&mut h, &name, true);
    let done = pass(
        &h.ctx,
        &mut new_leader,
        t0 + VALIDATION_DELAY + Duration::from_secs(30),
    )
    .await
    .expect("pass");
    assert!(matches!(done, Outcome::Deleted(_)), "{done:?}");
    assert_eq!(h.deleted(), ["web-big"]);
}

#[tokio::test]
async fn a_new_leader_rolls_back_a_command_whose_replacement_is_gone() {
    let mut h = one_big_node();
    let t0 = Instant::now();
    let record = Record {
        id: "web-big-1".into(),
        reason: "Underutilized".into(),
        nodes: vec!["big".into()],
        replacement_types: vec!["c5.large".into()],
        replacements: vec!["web-gone".into()],
        started_at: "2026-12-07T09:00:00Z".into(),
        detail: "underutilized".into(),
        savings: 0.68,
    };
    let mut old = joiner_claim("big", "m5.4xlarge", "fake:///z-a/i-big");
    old.metadata.annotations = Some(std::collections::BTreeMap::from([(
        labels::DISRUPTION_COMMAND.to_string(),
        serde_json::to_string(&record).expect("json"),
    )]));
    h.claims.apply_watcher_event(&Event::Apply(old));
    let mut tainted = joiner_node("big", "m5.4xlarge", "fake:///z-a/i-big");
    merge_node(
        &mut tainted,
        json!({"spec": {"taints": [{"key": labels::DISRUPTED_TAINT, "effect": "NoSchedule",
            "timeAdded": "2026-12-07T09:00:00Z"}]}}),
    );
    h.nodes.apply_watcher_event(&Event::Apply(tainted.clone()));
    // The API server holds the taint too (the old leader put it).
    let taints = tainted.spec.as_ref().and_then(|s| s.taints.clone());
    let put: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/spec/taints", "value": taints}]))
            .expect("patch");
    kube::Api::<k8s_openapi::api::core::v1::Node>::all(h.ctx.client.clone())
        .patch(
            "big",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(put),
        )
        .await
        .expect("taint");
    let mut memory = Memory::default();
    let out = pass(&h.ctx, &mut memory, t0).await.expect("pass");
    assert!(memory.command().is_none(), "{out:?}");
    first(&h, "untaint of big", |r| untaints_node(r, "big"));
    first(&h, "record removed", |r| unmarks(r, "web-big"));
    assert!(
        h.events()
            .iter()
            .any(|(_, reason, msg)| reason == "DisruptionFailed"
                && msg.contains("replacement is gone")),
        "{:?}",
        h.events()
    );
}

/// Pod `name` of app `db` on node `on`, kept off nodes with another `db` pod.
fn apart(name: &str, on: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut v = serde_json::to_value(running(name, on, "500m")).expect("pod");
    v["metadata"]["labels"] = json!({"app": "db"});
    v["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    ]}});
    serde_json::from_value(v).expect("pod")
}

/// Two m5.4xlarge, each holding a `db` pod that must stay apart from the other (so no one
/// node replaces both): two independent replacements, under Provisioner `web` with
/// `budget` as its only disruption budget.
fn two_big_nodes(budget: &str) -> Harness {
    let mut prov = serde_json::to_value(cluster_fixture::provisioner()).expect("provisioner");
    prov["spec"]["disruption"] = json!({"budgets": [{"nodes": budget}]});
    cluster_fixture::harness_full(
        vec![
            joiner_node("big-a", "m5.4xlarge", "fake:///z-a/i-biga"),
            joiner_node("big-b", "m5.4xlarge", "fake:///z-a/i-bigb"),
        ],
        vec![
            joiner_claim("big-a", "m5.4xlarge", "fake:///z-a/i-biga"),
            joiner_claim("big-b", "m5.4xlarge", "fake:///z-a/i-bigb"),
        ],
        vec![apart("db-a", "big-a"), apart("db-b", "big-b")],
        vec![],
        vec![serde_json::from_value(prov).expect("provisioner")],
    )
}

#[tokio::test]
async fn independent_commands_run_side_by_side_within_the_budget() {
    let h = two_big_nodes("100%");
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let first_pass = pass(&h.ctx, &mut memory, t0).await.expect("pass");
    assert!(
        matches!(first_pass, Outcome::Validating(_)),
        "{first_pass:?}"
    );
    let started = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    assert!(matches!(started, Outcome::Replacing(..)), "{started:?}");
    let under_way: Vec<Vec<String>> = memory
        .commands()
        .iter()
        .map(|c| c.key.nodes.clone())
        .collect();
    assert_eq!(
        under_way,
        [vec!["big-a".to_string()], vec!["big-b".to_string()]],
        "both commands start in one pass, neither waiting for the other"
    );
    assert_eq!(launches(&h), 2);
    first(&h, "taint of big-a", |r| taints_node(r, "big-a"));
    first(&h, "taint of big-b", |r| taints_node(r, "big-b"));
    // While both wait for their replacements, the passes go on and start nothing more.
    let waiting = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY * 2)
        .await
        .expect("pass");
    assert!(matches!(waiting, Outcome::Waiting(_)), "{waiting:?}");
    assert_eq!(launches(&h), 2);
}

#[tokio::test]
async fn a_second_command_waits_for_the_budget_the_first_holds() {
    let h = two_big_nodes("1");
    let mut memory = Memory::default();
    let t0 = Instant::now();
    pass(&h.ctx, &mut memory, t0).await.expect("pass");
    let started = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    let Outcome::Replacing(key, _) = started else {
        panic!("expected a replacement, got {started:?}");
    };
    assert_eq!(key.nodes, ["big-a"]);
    // The command under way holds the budget's one node: the other node is planned on but
    // not decided, pass after pass.
    for k in 2..5 {
        let out = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY * k)
            .await
            .expect("pass");
        assert!(matches!(out, Outcome::Waiting(_)), "{out:?}");
    }
    assert_eq!(memory.commands().len(), 1);
    assert_eq!(launches(&h), 1);
}

#[tokio::test]
async fn a_new_leader_carries_every_command_under_way_on() {
    let mut h = two_big_nodes("100%");
    let t0 = Instant::now();
    let mut old_leader = Memory::default();
    pass(&h.ctx, &mut old_leader, t0).await.expect("pass");
    pass(&h.ctx, &mut old_leader, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    assert_eq!(old_leader.commands().len(), 2);
    // What the old leader left: a record on each old claim, each replacement's claim.
    for (node, id) in [
        ("big-a", "fake:///z-a/i-biga"),
        ("big-b", "fake:///z-a/i-bigb"),
    ] {
        recorded_in_store(&mut h, node, "m5.4xlarge", id);
    }
    for (i, cmd) in old_leader.commands().iter().enumerate() {
        let mut claim = joiner_claim(&format!("new-{i}"), "c5.large", "");
        claim.metadata.name = Some(cmd.replacements[0].clone());
        claim.status = None;
        h.claims.apply_watcher_event(&Event::Apply(claim));
    }

    let mut new_leader = Memory::default();
    let waiting = pass(
        &h.ctx,
        &mut new_leader,
        t0 + VALIDATION_DELAY + Duration::from_secs(20),
    )
    .await
    .expect("pass");
    assert!(matches!(waiting, Outcome::Waiting(_)), "{waiting:?}");
    let mut carried: Vec<Vec<String>> = new_leader
        .commands()
        .iter()
        .map(|c| c.key.nodes.clone())
        .collect();
    carried.sort();
    assert_eq!(
        carried,
        [vec!["big-a".to_string()], vec!["big-b".to_string()]],
        "both commands carried on, neither rolled back"
    );
    assert_eq!(launches(&h), 2, "nothing launched again");
    assert!(h.deleted().is_empty(), "{:?}", h.deleted());
}

/// The final check before a drain treats the old nodes of the other commands under way as
/// leaving: a pod whose only room is on such a node has no place, so two commands never count
/// on the same room. Without the other command, the same check holds.
#[tokio::test]
async fn the_final_check_counts_other_commands_old_nodes_as_leaving() {
    use joiner_controller::disruption::decide::still_holds;
    use joiner_core::disruption::Reason;
    let h = harness(
        vec![
            joiner_node("room", "c5.large", "fake:///z-a/i-room"),
            joiner_node("busy", "c5.large", "fake:///z-a/i-busy"),
            joiner_node("small", "c5.large", "fake:///z-a/i-small"),
        ],
        vec![
            joiner_claim("room", "c5.large", "fake:///z-a/i-room"),
            joiner_claim("busy", "c5.large", "fake:///z-a/i-busy"),
            joiner_claim("small", "c5.large", "fake:///z-a/i-small"),
        ],
        vec![
            // 1,930m allocatable each: `room` has 930m free, `busy` 130m.
            running("steady", "room", "1000m"),
            running("full", "busy", "1800m"),
            running("moving", "small", "500m"),
        ],
    );
    let small = vec!["small".to_string()];
    still_holds(&h.ctx, &small, &[], Reason::Underutilized)
        .await
        .expect("alone, the pod of `small` fits on `room`");
    let refused = still_holds(&h.ctx, &small, &["room".to_string()], Reason::Underutilized)
        .await
        .expect_err("`room` is another command's old node: it takes no pod");
    assert!(!refused.is_empty());
}
