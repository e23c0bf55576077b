//! Disruption in the controller, on `FakeCloud` and the scripted API: a decision waits for its
//! validation delay and is dropped when a pod arrives meanwhile; a delete removes the old
//! claim only after the delay; a replacement is launched and Initialized before the old
//! node's claim is deleted (and so before its drain starts).

mod cluster_fixture;
mod lifecycle_fixture;
mod support;

use std::time::{Duration, Instant};

use cluster_fixture::{
    harness, harness_with, joiner_claim, joiner_node, merge_node, running, Harness, CLAIMS,
};
use http::Method;
use joiner_apis::drift::{HASH_VERSION, NODE_TEMPLATE_HASH, PROVISIONER_HASH};
use joiner_apis::NodeTemplate;
use joiner_controller::disruption::validation::VALIDATION_DELAY;
use joiner_controller::disruption::{pass, Memory, Outcome};
use joiner_controller::metrics::DecisionLabels;
use joiner_controller::pod_record::PodRecord;
use joiner_core::testing::FakeCall;
use kube::runtime::watcher::Event;
use serde_json::json;
use support::obj;

/// Two m5.xlarge nodes with a 1-CPU pod each: one of them can go.
fn two_quiet_nodes() -> Harness {
    harness(
        vec![
            joiner_node("a", "m5.xlarge", "fake:///z-a/i-a"),
            joiner_node("b", "m5.xlarge", "fake:///z-a/i-b"),
        ],
        vec![
            joiner_claim("a", "m5.xlarge", "fake:///z-a/i-a"),
            joiner_claim("b", "m5.xlarge", "fake:///z-a/i-b"),
        ],
        vec![running("web-a", "a", "1"), running("web-b", "b", "1")],
    )
}

#[tokio::test]
async fn a_delete_waits_for_the_validation_delay() {
    let h = two_quiet_nodes();
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let first = pass(&h.ctx, &mut memory, t0).await.expect("pass");
    let Outcome::Validating(key) = first else {
        panic!("expected a decision to validate, got {first:?}");
    };
    assert_eq!(key.nodes, ["a"]);
    // What Karpenter users look for: the nodes each method could take, what the budgets
    // allow (10 % of two nodes, rounded up), how long the plan took.
    let m = &h.ctx.metrics;
    let eligible = |reason: &str| {
        m.disruption_eligible
            .get_or_create(&joiner_controller::metrics::ReasonOnlyLabels {
                reason: reason.into(),
            })
            .get()
    };
    assert_eq!((eligible("Underutilized"), eligible("Empty")), (2, 0));
    let allowed = m
        .disruption_allowed
        .get_or_create(&joiner_controller::metrics::BudgetLabels {
            provisioner: "web".into(),
            reason: "Underutilized".into(),
        })
        .get();
    assert_eq!(allowed, 1);
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("evaluation", "plans", m.disruption_evaluation.clone());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(text.contains("evaluation_count 1"), "{text}");
    let early = pass(&h.ctx, &mut memory, t0 + Duration::from_secs(5))
        .await
        .expect("pass");
    assert!(matches!(early, Outcome::Validating(_)), "{early:?}");
    assert!(h.deleted().is_empty(), "nothing deleted before the delay");

    let done = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    assert!(matches!(done, Outcome::Deleted(_)), "{done:?}");
    assert_eq!(h.deleted(), ["web-a"]);
    let count = |outcome: &str| {
        h.ctx
            .metrics
            .disruption_decisions
            .get_or_create(&DecisionLabels {
                reason: "Underutilized".into(),
                outcome: outcome.into(),
            })
            .get()
    };
    assert_eq!((count("validating"), count("deleted")), (1, 1));
    assert!((h.ctx.metrics.disruption_savings.get() - 0.192).abs() < 1e-9);
}

#[tokio::test]
async fn a_pod_arriving_during_the_delay_drops_the_decision() {
    let mut h = two_quiet_nodes();
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let first = pass(&h.ctx, &mut memory, t0).await.expect("pass");
    assert!(matches!(first, Outcome::Validating(_)), "{first:?}");

    // A 3-CPU pod arrives on b: a's pod no longer fits there; deleting a is no longer the
    // decision (replacing it would be a new one, with its own delay).
    h.pods
        .apply_watcher_event(&Event::Apply(PodRecord::from(&running("batch", "b", "3"))));
    let after = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    let Outcome::Dropped(key, why) = after else {
        panic!("expected the decision dropped, got {after:?}");
    };
    assert_eq!(key.nodes, ["a"]);
    assert_eq!(why, "the cluster changed");
    assert!(key.replacements.is_empty(), "the delete was dropped");
    assert!(h.deleted().is_empty(), "{:?}", h.api.calls());
    assert!(
        h.cloud
            .calls()
            .iter()
            .all(|c| !matches!(c, FakeCall::Create(_))),
        "nothing launched"
    );
}

#[tokio::test]
async fn a_replacement_is_initialized_before_the_old_node_is_deleted() {
    // One m5.4xlarge holding a 500m pod: a c5.large replaces it.
    let mut h = harness(
        vec![joiner_node("big", "m5.4xlarge", "fake:///z-a/i-big")],
        vec![joiner_claim("big", "m5.4xlarge", "fake:///z-a/i-big")],
        vec![running("web", "big", "500m")],
    );
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let first = pass(&h.ctx, &mut memory, t0).await.expect("pass");
    assert!(matches!(first, Outcome::Validating(_)), "{first:?}");

    let started = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    let Outcome::Replacing(key, replacements) = started else {
        panic!("expected a replacement, got {started:?}");
    };
    assert_eq!(key.nodes, ["big"]);
    assert_eq!(replacements.len(), 1);
    let launched: Vec<String> = h
        .cloud
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            FakeCall::Create(r) => Some(r.candidates[0].0.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(launched, ["c5.large"]);
    assert!(
        h.deleted().is_empty(),
        "the old node stays while its replacement joins"
    );

    // The replacement registers but is not Ready yet: still waiting.
    let name = replacements[0].clone();
    let provider_id = "fake:///z-a/i-fake00001";
    let mut joining = joiner_node("new", "c5.large", provider_id);
    merge_node(
        &mut joining,
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    );
    h.nodes.apply_watcher_event(&Event::Apply(joining));
    let mut replacement = joiner_claim("new", "c5.large", provider_id);
    replacement.metadata.name = Some(name.clone());
    h.claims
        .apply_watcher_event(&Event::Apply(replacement.clone()));
    let waiting = pass(
        &h.ctx,
        &mut memory,
        t0 + VALIDATION_DELAY + Duration::from_secs(10),
    )
    .await
    .expect("pass");
    assert!(matches!(waiting, Outcome::Waiting(_)), "{waiting:?}");
    assert!(h.deleted().is_empty());

    // Ready: the old claim is deleted, and the termination flow drains it from here.
    h.nodes
        .apply_watcher_event(&Event::Apply(joiner_node("new", "c5.large", provider_id)));
    let done = pass(
        &h.ctx,
        &mut memory,
        t0 + VALIDATION_DELAY + Duration::from_secs(20),
    )
    .await
    .expect("pass");
    assert!(matches!(done, Outcome::Deleted(_)), "{done:?}");
    assert_eq!(h.deleted(), ["web-big"]);
    assert!(memory.command().is_none());
}

#[tokio::test]
async fn a_node_that_stays_says_why_on_the_node_and_its_claim_once() {
    let mut guarded = running("db-0", "a", "1");
    guarded.metadata.annotations = Some(
        [(
            "karpenter.sh/do-not-disrupt".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    let h = harness(
        vec![joiner_node("a", "m5.xlarge", "fake:///z-a/i-a")],
        vec![joiner_claim("a", "m5.xlarge", "fake:///z-a/i-a")],
        vec![guarded],
    );
    let mut memory = Memory::default();
    let events = || h.events();
    let t0 = Instant::now();
    assert_eq!(
        pass(&h.ctx, &mut memory, t0).await.expect("pass"),
        Outcome::Idle
    );
    let why = "pod shop/db-0 is annotated karpenter.sh/do-not-disrupt".to_string();
    assert_eq!(
        events(),
        [
            (
                "Node".to_string(),
                "DisruptionBlocked".to_string(),
                why.clone()
            ),
            (
                "NodeClaim".to_string(),
                "DisruptionBlocked".to_string(),
                why
            ),
        ]
    );
    // Told once: the next passes, with the same reason, add nothing for an hour.
    for later in [10, 600, 3500] {
        pass(&h.ctx, &mut memory, t0 + Duration::from_secs(later))
            .await
            .expect("pass");
        assert_eq!(events().len(), 2, "at {later}s");
    }
    // An hour on, once more, at the next plan (a quiet cluster is planned again every few
    // minutes: `quiet::RECHECK`).
    pass(
        &h.ctx,
        &mut memory,
        t0 + Duration::from_secs(3500) + joiner_controller::disruption::quiet::RECHECK,
    )
    .await
    .expect("pass");
    assert_eq!(events().len(), 4);
}

/// NodeTemplate default, resolved to AMI `ami` (and the fake cloud's subnet and group).
fn node_template(ami: &str) -> NodeTemplate {
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default"},
        "spec": {"subnetSelector": {"k": "v"}, "securityGroupSelector": {"k": "v"}},
        "status": {
            "subnets": [{"id": "subnet-z-a", "zone": "z-a"}],
            "securityGroups": [{"id": "sg-fake"}],
            "amis": [{"id": ami}],
        },
    }))
}

#[tokio::test]
async fn a_node_on_an_older_ami_is_replaced_and_the_replacement_records_its_launch() {
    // A c5.large with a 1.5-CPU pod: nothing cheaper holds it, so only drift can move it.
    // Its claim says it booted ami-old; the NodeTemplate now resolves to ami-fake (what the
    // fake cloud boots).
    let mut old = joiner_claim("a", "c5.large", "fake:///z-a/i-a");
    old.status.as_mut().expect("status").image_id = Some("ami-old".into());
    let mut h = harness_with(
        vec![joiner_node("a", "c5.large", "fake:///z-a/i-a")],
        vec![old],
        vec![running("web-a", "a", "1500m")],
        vec![node_template("ami-fake")],
    );
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let first = pass(&h.ctx, &mut memory, t0).await.expect("pass");
    let Outcome::Validating(key) = first else {
        panic!("expected a drift decision, got {first:?}");
    };
    assert_eq!(
        (key.reason.as_str(), key.nodes.as_slice()),
        ("Drifted", &["a".to_string()][..])
    );
    let started = pass(&h.ctx, &mut memory, t0 + VALIDATION_DELAY)
        .await
        .expect("pass");
    let Outcome::Replacing(_, replacements) = started else {
        panic!("expected a replacement, got {started:?}");
    };
    // The replacement's claim was written with the hashes of the settings it launches with,
    // and its status records what it booted.
    let posted = h
        .api
        .requests()
        .into_iter()
        .find(|r| r.is(Method::POST, CLAIMS))
        .expect("claim created");
    let annotations = &posted.body["metadata"]["annotations"];
    assert_eq!(annotations[HASH_VERSION], "v1");
    assert_eq!(
        annotations[PROVISIONER_HASH].as_str().map(str::len),
        Some(16)
    );
    assert_eq!(
        annotations[NODE_TEMPLATE_HASH].as_str().map(str::len),
        Some(16)
    );
    let status = h
        .api
        .requests()
        .into_iter()
        .find(|r| {
            r.method == Method::PATCH && r.path.ends_with(&format!("{}/status", replacements[0]))
        })
        .expect("launch recorded");
    assert_eq!(status.body["status"]["imageID"], "ami-fake");
    assert_eq!(status.body["status"]["subnetID"], "subnet-z-a");
    assert_eq!(
        status.body["status"]["securityGroupIDs"],
        json!(["sg-fake"])
    );

    // Once the replacement is Ready the old claim goes.
    let provider_id = "fake:///z-a/i-fake00001";
    h.nodes
        .apply_watcher_event(&Event::Apply(joiner_node("new", "c5.large", provider_id)));
    let mut replacement = joiner_claim("new", "c5.large", provider_id);
    replacement.metadata.name = Some(replacements[0].clone());
    h.claims.apply_watcher_event(&Event::Apply(replacement));
    let done = pass(
        &h.ctx,
        &mut memory,
        t0 + VALIDATION_DELAY + Duration::from_secs(10),
    )
    .await
    .expect("pass");
    assert!(matches!(done, Outcome::Deleted(_)), "{done:?}");
    assert_eq!(h.deleted(), ["web-a"]);
}

#[tokio::test]
async fn a_node_on_the_current_ami_stays() {
    let mut claim = joiner_claim("a", "c5.large", "fake:///z-a/i-a");
    claim.status.as_mut().expect("status").image_id = Some("ami-fake".into());
    let h = harness_with(
        vec![joiner_node("a", "c5.large", "fake:///z-a/i-a")],
        vec![claim],
        vec![running("web-a", "a", "1500m")],
        vec![node_template("ami-fake")],
    );
    let mut memory = Memory::default();
    let outcome = pass(&h.ctx, &mut memory, Instant::now())
        .await
        .expect("pass");
    assert_eq!(outcome, Outcome::Idle);
}

#[tokio::test]
async fn claims_hashed_by_another_release_are_restamped_not_called_drifted() {
    // A claim written by an older release (another hash version) is not drifted by hash; the
    // loop writes the current hashes on it, so a later change of its Provisioner is drift.
    let mut old = joiner_claim("a", "c5.large", "fake:///z-a/i-a");
    old.metadata.annotations = Some(
        [
            (HASH_VERSION.to_string(), "v0".to_string()),
            (PROVISIONER_HASH.to_string(), "0000000000000000".to_string()),
        ]
        .into(),
    );
    let h = harness_with(
        vec![joiner_node("a", "c5.large", "fake:///z-a/i-a")],
        vec![old],
        vec![running("web-a", "a", "1500m")],
        vec![],
    );
    let mut memory = Memory::default();
    let outcome = pass(&h.ctx, &mut memory, Instant::now())
        .await
        .expect("pass");
    assert_eq!(
        outcome,
        Outcome::Idle,
        "not drifted by a hash of another version"
    );
    let patch = h
        .api
        .requests()
        .into_iter()
        .find(|r| r.is(Method::PATCH, &format!("{CLAIMS}/web-a")))
        .expect("the claim is re-stamped");
    let annotations = &patch.body["metadata"]["annotations"];
    assert_eq!(annotations[HASH_VERSION], "v1");
    let prov = h.ctx.state.provisioners.state()[0].clone();
    assert_eq!(
        annotations[PROVISIONER_HASH].as_str(),
        Some(joiner_apis::drift::provisioner_hash(&prov.spec).as_str())
    );
}

#[tokio::test]
async fn a_pod_whose_local_volume_only_its_node_mounts_keeps_that_node() {
    // As two_quiet_nodes, but web-a's claim is bound to a local volume on node a: evicted,
    // it could run nowhere else (kube-scheduler's VolumeBinding), so b is the node that goes.
    let mut local = running("web-a", "a", "1");
    local.spec.as_mut().expect("spec").volumes = Some(vec![obj(json!({
        "name": "data", "persistentVolumeClaim": {"claimName": "data-web-a"}}))]);
    let mut h = harness(
        vec![
            joiner_node("a", "m5.xlarge", "fake:///z-a/i-a"),
            joiner_node("b", "m5.xlarge", "fake:///z-a/i-b"),
        ],
        vec![
            joiner_claim("a", "m5.xlarge", "fake:///z-a/i-a"),
            joiner_claim("b", "m5.xlarge", "fake:///z-a/i-b"),
        ],
        vec![local, running("web-b", "b", "1")],
    );
    let claims = support::store(vec![obj(json!({
        "metadata": {"name": "data-web-a", "namespace": "shop"},
        "spec": {"volumeName": "local-a", "accessModes": ["ReadWriteOnce"]},
        "status": {"phase": "Bound"}}))]);
    let volumes = support::store(vec![obj(json!({
        "metadata": {"name": "local-a"},
        "spec": {"capacity": {"storage": "100Gi"}, "local": {"path": "/mnt/disks/1"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}]}]}}}}))]);
    let classes = support::store(Vec::new());
    h.ctx.state.volumes = joiner_controller::state::VolumeStores {
        claims: claims.as_reader(),
        volumes: volumes.as_reader(),
        classes: classes.as_reader(),
        csi_nodes: joiner_controller::state::VolumeStores::empty().csi_nodes,
        attachments: joiner_controller::state::VolumeStores::empty().attachments,
    };
    let mut memory = Memory::default();
    let t0 = Instant::now();
    let first = pass(&h.ctx, &mut memory, t0).await.expect("pass");
    let Outcome::Validating(key) = first else {
        panic!("expected a decision to validate, got {first:?}");
    };
    assert_eq!(
        key.nodes,
        ["b"],
        "a holds the only node web-a's volume mounts on"
    );
}

/// A Node labelled with joiner's Provisioner but without a NodeClaim (joined outside joiner,
/// or its claim is gone) is never a candidate: an empty one would otherwise be the first
/// decision of every pass, one no command can carry out, holding every other one back.
#[tokio::test]
async fn a_node_without_a_claim_never_blocks_disruption() {
    let h = harness(
        vec![
            joiner_node("x", "m5.xlarge", "fake:///z-a/i-x"),
            joiner_node("a", "m5.xlarge", "fake:///z-a/i-a"),
            joiner_node("b", "m5.xlarge", "fake:///z-a/i-b"),
        ],
        vec![
            joiner_claim("a", "m5.xlarge", "fake:///z-a/i-a"),
            joiner_claim("b", "m5.xlarge", "fake:///z-a/i-b"),
        ],
        vec![running("web-a", "a", "1"), running("web-b", "b", "1")],
    );
    let mut memory = Memory::default();
    let first = pass(&h.ctx, &mut memory, Instant::now())
        .await
        .expect("pass");
    let Outcome::Validating(key) = first else {
        panic!("expected a decision on a claimed node, got {first:?}");
    };
    assert_eq!(
        key.nodes,
        ["a"],
        "the empty node without a claim is left alone"
    );
}

#[tokio::test]
async fn a_pass_with_nothing_changed_since_a_quiet_plan_does_nothing() {
    // One c5.large whose 1.5-CPU pod fits nowhere else and on no cheaper type: it stays.
    let mut h = harness(
        vec![joiner_node("a", "c5.large", "fake:///z-a/i-a")],
        vec![joiner_claim("a", "c5.large", "fake:///z-a/i-a")],
        vec![running("web", "a", "1500m")],
    );
    let plans = |h: &Harness| {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register(
            "evaluation",
            "plans",
            h.ctx.metrics.disruption_evaluation.clone(),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text.lines()
            .find_map(|l| l.strip_prefix("evaluation_count "))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut memory = Memory::default();
    let t0 = Instant::now();
    assert_eq!(
        pass(&h.ctx, &mut memory, t0).await.expect("pass"),
        Outcome::Idle
    );
    assert_eq!(plans(&h), 1);
    let again = pass(&h.ctx, &mut memory, t0 + Duration::from_secs(10))
        .await
        .expect("pass");
    assert_eq!(again, Outcome::Idle);
    assert_eq!(plans(&h), 1, "nothing changed: no plan");
    // A pod arrives: planned again.
    h.pods
        .apply_watcher_event(&Event::Apply(PodRecord::from(&running("api", "a", "100m"))));
    pass(&h.ctx, &mut memory, t0 + Duration::from_secs(20))
        .await
        .expect("pass");
    assert_eq!(plans(&h), 2);
    // Five minutes on, planned again even so (time alone makes things due).
    pass(
        &h.ctx,
        &mut memory,
        t0 + Duration::from_secs(20) + joiner_controller::disruption::quiet::RECHECK,
    )
    .await
    .expect("pass");
    assert_eq!(plans(&h), 3);
}
