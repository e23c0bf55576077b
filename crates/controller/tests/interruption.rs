//! Interruption handling against moto's SQS through the real SDK, on `FakeCloud` and the
//! scripted API: each event kind leads to its action; a replacement's claim is written before
//! the interrupted claim is deleted (so before its drain starts); malformed, foreign,
//! duplicate and stale messages are deleted and counted; a message whose handling fails stays
//! in the queue and is handled when it comes back.

mod cluster_fixture;
mod lifecycle_fixture;
mod support;

use std::time::Duration;

use http::Method;
use joiner_apis::Provisioner;
use joiner_aws::interruption::SqsQueue;
use joiner_aws::AwsClients;
use joiner_controller::interruption::{batch, connect, Memory, Outcome};
use joiner_controller::metrics::{ActionLabels, KindLabels};
use joiner_core::interruption::{EventKind, Rejected};
use joiner_core::testing::FakeCall;
use joiner_core::CapacityType;
use joiner_moto::{MotoServer, MotoSession};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use cluster_fixture::{
    harness_full, joiner_claim, joiner_node, merge_node, running, Harness, CLAIMS,
};
use support::obj;

/// Provisioner `web`: spot or on-demand; `rebalance` sets `spec.interruption.rebalance`.
fn provisioner(rebalance: Option<&str>) -> Provisioner {
    let mut spec = json!({
        "providerRef": {"name": "default"},
        "requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
        ],
    });
    if let Some(r) = rebalance {
        spec["interruption"] = json!({"rebalance": r});
    }
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
        "metadata": {"name": "web"},
        "spec": spec,
    }))
}

/// Provisioner `web` launching only c5.large: one 1.5-CPU pod per node, so each interrupted
/// node needs a replacement of its own.
fn only_c5() -> Provisioner {
    let mut p = provisioner(None);
    p.spec.requirements.push(obj(json!(
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}
    )));
    p
}

/// How many launches `cloud` was asked for.
fn creates(cloud: &joiner_core::testing::FakeCloud) -> usize {
    cloud
        .calls()
        .iter()
        .filter(|c| matches!(c, FakeCall::Create(_)))
        .count()
}

/// The instance ID of node `name` (`i-0000000a` for `a`).
fn instance(name: &str) -> String {
    format!("i-{:0>8}", name)
}

/// A spot c5.large node `name` on instance [`instance`], with its claim.
fn spot_node(name: &str) -> (Node, joiner_apis::NodeClaim) {
    let provider_id = format!("fake:///z-a/{}", instance(name));
    let mut node = joiner_node(name, "c5.large", &provider_id);
    merge_node(
        &mut node,
        json!({"metadata": {"labels": {"karpenter.sh/capacity-type": "spot"}}}),
    );
    let mut claim = joiner_claim(name, "c5.large", &provider_id);
    claim.status.as_mut().expect("status").capacity_type = Some("spot".into());
    (node, claim)
}

/// Spot nodes `names`, each with a 1.5-CPU pod (one per c5.large), under `prov`.
fn cluster(names: &[&str], prov: Provisioner) -> Harness {
    let (nodes, claims): (Vec<_>, Vec<_>) = names.iter().map(|n| spot_node(n)).unzip();
    let pods = names
        .iter()
        .map(|n| running(&format!("app-{n}"), n, "1500m"))
        .collect();
    harness_full(nodes, claims, pods, vec![], vec![prov])
}

/// An EventBridge event body.
fn event(
    source: &str,
    detail_type: &str,
    id: &str,
    time: &str,
    detail: serde_json::Value,
) -> String {
    json!({
        "version": "0", "id": id, "detail-type": detail_type, "source": source,
        "account": "123456789012", "time": time, "region": "us-east-1",
        "resources": [], "detail": detail,
    })
    .to_string()
}

const NOW: &str = "2026-11-30T14:00:00Z";

fn spot_warning(node: &str, id: &str, time: &str) -> String {
    event(
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
        id,
        time,
        json!({"instance-id": instance(node), "instance-action": "terminate"}),
    )
}

fn rebalance(node: &str, id: &str) -> String {
    event(
        "aws.ec2",
        "EC2 Instance Rebalance Recommendation",
        id,
        NOW,
        json!({"instance-id": instance(node)}),
    )
}

fn state_change(node: &str, state: &str, id: &str) -> String {
    event(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        id,
        NOW,
        json!({"instance-id": instance(node), "state": state}),
    )
}

fn scheduled_change(nodes: &[&str], id: &str) -> String {
    let entities: Vec<_> = nodes
        .iter()
        .map(|n| json!({"entityValue": instance(n)}))
        .collect();
    event(
        "aws.health",
        "AWS Health Event",
        id,
        NOW,
        json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
               "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
               "affectedEntities": entities}),
    )
}

/// A moto queue `name` holding `bodies`, and the consumer's view of it (no long-poll wait,
/// a 1 s visibility timeout).
async fn queue(
    moto: &MotoSession,
    name: &str,
    bodies: &[String],
) -> (SqsQueue, aws_sdk_sqs::Client) {
    let sqs = AwsClients::from_config(&moto.sdk_config("us-east-1").await)
        .expect("clients")
        .sqs;
    let url = sqs
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("queue")
        .queue_url
        .expect("url");
    for body in bodies {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .expect("sent");
    }
    let q = SqsQueue::connect(sqs.clone(), name)
        .await
        .expect("connects")
        .with_timing(0, 1);
    (q, sqs)
}

/// Messages still in the queue, visible or in flight.
async fn left(sqs: &aws_sdk_sqs::Client, q: &SqsQueue) -> u32 {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = sqs
        .get_queue_attributes()
        .queue_url(q.url())
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("attributes");
    let attrs = out.attributes.unwrap_or_default();
    [
        A::ApproximateNumberOfMessages,
        A::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .map(|a| {
        attrs
            .get(a)
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    })
    .sum()
}

/// Sends `body` to `q`, as EventBridge does.
async fn send(sqs: &aws_sdk_sqs::Client, q: &SqsQueue, body: &str) {
    sqs.send_message()
        .queue_url(q.url())
        .message_body(body)
        .send()
        .await
        .expect("sent");
}

/// How many NodeClaims were written (replacements).
fn claims_written(h: &Harness) -> usize {
    h.api
        .requests()
        .iter()
        .filter(|r| r.is(Method::POST, CLAIMS))
        .count()
}

/// Receives and handles until the queue gives nothing.
async fn drain_queue(h: &Harness, q: &SqsQueue, memory: &Memory) -> Vec<Outcome> {
    let mut out = Vec::new();
    loop {
        let report = batch(&h.ctx, q, memory).await.expect("batch");
        if report.received == 0 {
            return out;
        }
        out.extend(report.outcomes.into_iter().filter_map(|(_, o)| o.ok()));
    }
}

/// Index of the first request matching `f`.
fn first(h: &Harness, f: impl Fn(&support::Recorded) -> bool) -> Option<usize> {
    h.api.requests().iter().position(f)
}

fn actions(h: &Harness, kind: EventKind, action: &str) -> u64 {
    h.ctx
        .metrics
        .interruption_actions
        .get_or_create(&ActionLabels {
            kind: kind.as_str().into(),
            action: action.into(),
        })
        .get()
}

fn rejected(h: &Harness, reason: Rejected) -> u64 {
    h.ctx
        .metrics
        .interruption_rejected
        .get_or_create(&KindLabels {
            kind: reason.as_str().into(),
        })
        .get()
}

#[tokio::test]
async fn a_spot_interruption_writes_the_replacement_before_the_old_claim_is_deleted() {
    let moto = MotoServer::session().expect("moto server");
    let h = cluster(&["a"], provisioner(None));
    let (q, sqs) = queue(&moto, "spot", &[spot_warning("a", "ev-1", NOW)]).await;
    let memory = Memory::default();

    let outcomes = drain_queue(&h, &q, &memory).await;
    assert_eq!(
        outcomes,
        [Outcome::Acted {
            kind: EventKind::SpotInterruption,
            action: "replace",
            claims: vec!["web-a".into()],
        }]
    );
    assert_eq!(left(&sqs, &q).await, 0, "the handled message is deleted");

    // The offering is marked before the replacement is planned, so the replacement avoids it.
    let calls = h.cloud.calls();
    let marked = calls
        .iter()
        .position(|c| {
            *c == FakeCall::MarkUnavailable("c5.large".into(), "z-a".into(), CapacityType::Spot)
        })
        .expect("spot offering marked unavailable");
    let launch = calls
        .iter()
        .position(|c| matches!(c, FakeCall::Create(_)))
        .expect("replacement launched");
    assert!(marked < launch);
    let FakeCall::Create(request) = &calls[launch] else {
        unreachable!()
    };
    assert!(
        !(request.capacity_type == CapacityType::Spot
            && request.candidates[0].0 == "c5.large"
            && request.zones == ["z-a"]),
        "the replacement is not the interrupted offering: {request:?}"
    );

    // Tainted, replacement claim written, then the old claim deleted (its drain starts there).
    let tainted = first(&h, |r| {
        r.method == Method::PATCH && r.path == "/api/v1/nodes/a"
    })
    .expect("node tainted");
    let written = first(&h, |r| r.is(Method::POST, CLAIMS)).expect("replacement claim written");
    let deleted = first(&h, |r| {
        r.method == Method::DELETE && r.path == format!("{CLAIMS}/web-a")
    })
    .expect("old claim deleted");
    assert!(
        tainted < written && written < deleted,
        "{:?}",
        h.api.calls()
    );
    let taint = &h.api.requests()[tainted].body;
    assert!(taint.to_string().contains("joiner.sh/disrupted"), "{taint}");

    let events = h.events();
    for kind in ["Node", "NodeClaim"] {
        assert!(
            events.iter().any(|(k, reason, message)| k == kind
                && reason == "SpotInterrupted"
                && message.contains("replacement web-")
                && message.contains("draining")),
            "{events:?}"
        );
    }
    assert_eq!(actions(&h, EventKind::SpotInterruption, "replace"), 1);
}

#[tokio::test]
async fn each_event_kind_leads_to_its_action() {
    let moto = MotoServer::session().expect("moto server");
    let h = cluster(&["a", "b", "c", "d", "e"], provisioner(None));
    let bodies = [
        rebalance("a", "ev-a"),
        state_change("b", "stopping", "ev-b"),
        state_change("c", "terminated", "ev-c"),
        scheduled_change(&["d", "e"], "ev-de"),
    ];
    let (q, sqs) = queue(&moto, "kinds", &bodies).await;
    let memory = Memory::default();
    let mut outcomes = drain_queue(&h, &q, &memory).await;
    outcomes.sort_by_key(|o| format!("{o:?}"));
    let acted: Vec<(EventKind, &str, Vec<String>)> = outcomes
        .into_iter()
        .filter_map(|o| match o {
            Outcome::Acted {
                kind,
                action,
                claims,
            } => Some((kind, action, claims)),
            Outcome::Rejected(_) => None,
        })
        .collect();
    assert_eq!(acted.len(), 4, "{acted:?}");
    assert!(acted.contains(&(
        EventKind::RebalanceRecommendation,
        "notify",
        vec!["web-a".into()]
    )));
    assert!(acted.contains(&(EventKind::Stopping, "replace", vec!["web-b".into()])));
    assert!(acted.contains(&(EventKind::Terminating, "replace", vec!["web-c".into()])));
    assert!(acted.contains(&(
        EventKind::ScheduledChange,
        "replace",
        vec!["web-d".into(), "web-e".into()]
    )));
    assert_eq!(left(&sqs, &q).await, 0);

    let mut deleted = h.deleted();
    deleted.sort();
    assert_eq!(
        deleted,
        ["web-b", "web-c", "web-d", "web-e"],
        "the rebalanced node stays"
    );
    let events = h.events();
    assert!(events.iter().any(|(k, r, m)| k == "Node"
        && r == "RebalanceRecommendation"
        && m.contains("spec.interruption.rebalance: Notify")));
    for reason in [
        "InstanceStopping",
        "InstanceTerminating",
        "ScheduledMaintenance",
    ] {
        assert!(
            events
                .iter()
                .any(|(k, r, _)| k == "NodeClaim" && r == reason),
            "{reason}: {events:?}"
        );
    }
    // No offering is marked for anything but a spot interruption.
    assert!(!h
        .cloud
        .calls()
        .iter()
        .any(|c| matches!(c, FakeCall::MarkUnavailable(..))));
    assert_eq!(actions(&h, EventKind::ScheduledChange, "replace"), 2);
    assert_eq!(actions(&h, EventKind::RebalanceRecommendation, "notify"), 1);
}

#[tokio::test]
async fn a_rebalance_recommendation_replaces_when_the_provisioner_opts_in() {
    let moto = MotoServer::session().expect("moto server");
    let h = cluster(&["a"], provisioner(Some("Replace")));
    let (q, _) = queue(&moto, "rebalance", &[rebalance("a", "ev-r")]).await;
    let memory = Memory::default();
    let outcomes = drain_queue(&h, &q, &memory).await;
    assert_eq!(
        outcomes,
        [Outcome::Acted {
            kind: EventKind::RebalanceRecommendation,
            action: "replace",
            claims: vec!["web-a".into()],
        }]
    );
    let written = first(&h, |r| r.is(Method::POST, CLAIMS)).expect("replacement written");
    let deleted = first(&h, |r| r.method == Method::DELETE).expect("old claim deleted");
    assert!(written < deleted);
}

/// A rebalance recommendation and a spot warning for one instance, received apart (by two
/// workers, or before the stores show the first claim deleted): the node is replaced once.
#[tokio::test]
async fn two_events_for_one_node_replace_it_once() {
    let moto = MotoServer::session().expect("moto server");
    let h = cluster(&["a"], provisioner(Some("Replace")));
    let (q, sqs) = queue(&moto, "twice-one", &[rebalance("a", "ev-r")]).await;
    let memory = Memory::default();
    assert_eq!(drain_queue(&h, &q, &memory).await.len(), 1);
    send(&sqs, &q, &spot_warning("a", "ev-s", NOW)).await;
    assert_eq!(
        drain_queue(&h, &q, &memory).await,
        [Outcome::Rejected(Rejected::Duplicate)]
    );
    let written = claims_written(&h);
    assert_eq!(written, 1, "one replacement");
    assert_eq!(creates(&h.cloud), 1);
    assert_eq!(h.deleted(), ["web-a"], "drained once");
}

#[tokio::test]
async fn malformed_foreign_duplicate_and_stale_messages_are_deleted_and_counted() {
    let moto = MotoServer::session().expect("moto server");
    let h = cluster(&["a"], provisioner(None));
    let bodies = [
        " ".to_string(),
        "{\"version\": \"0\", \"source\": ".to_string(),
        event("aws.s3", "Object Created", "ev-s3", NOW, json!({})),
        json!({"version": "0", "id": "x", "detail-type": "EC2 Spot Instance Interruption Warning",
               "source": "aws.ec2", "time": NOW, "detail": {}})
        .to_string(),
        // An instance no claim records (another node group's, or a warm-pool member's own stop).
        spot_warning("ffff", "ev-foreign", NOW),
        state_change("eeee", "stopped", "ev-warm"),
        // Older than the claim: about the instance's life before it.
        spot_warning("a", "ev-stale", "2025-06-01T00:00:00Z"),
        format!("{{\"pad\": \"{}\"}}", "x".repeat(300 * 1024)),
    ];
    let (q, sqs) = queue(&moto, "junk", &bodies).await;
    let memory = Memory::default();
    let outcomes = drain_queue(&h, &q, &memory).await;
    assert_eq!(
        outcomes.len(),
        bodies.len(),
        "every message handled: {outcomes:?}"
    );
    assert!(
        outcomes.iter().all(|o| matches!(o, Outcome::Rejected(_))),
        "{outcomes:?}"
    );
    assert_eq!(left(&sqs, &q).await, 0, "every message deleted");
    for (reason, n) in [
        (Rejected::Empty, 1),
        (Rejected::NotJson, 1),
        (Rejected::UnknownEvent, 1),
        (Rejected::MissingField, 1),
        (Rejected::NotOwned, 2),
        (Rejected::Stale, 1),
        (Rejected::TooLarge, 1),
    ] {
        assert_eq!(rejected(&h, reason), n, "{}", reason.as_str());
    }
    assert!(h.deleted().is_empty(), "no claim touched");
    assert!(h.cloud.calls().is_empty(), "no cloud call");

    // The same event delivered twice: acted on once.
    let url = q.url().to_string();
    for _ in 0..2 {
        sqs.send_message()
            .queue_url(&url)
            .message_body(spot_warning("a", "ev-twice", NOW))
            .send()
            .await
            .expect("sent");
    }
    let outcomes = drain_queue(&h, &q, &memory).await;
    assert_eq!(outcomes.len(), 2);
    assert_eq!(rejected(&h, Rejected::Duplicate), 1);
    assert_eq!(h.deleted(), ["web-a"]);
    assert_eq!(
        h.ctx.metrics.interruption_deleted.get(),
        (bodies.len() + 2) as u64
    );
}

#[tokio::test]
async fn a_message_whose_handling_fails_comes_back_and_is_handled_then() {
    let moto = MotoServer::session().expect("moto server");
    let h = cluster(&["a"], provisioner(None));
    h.fail_deletes.store(1, std::sync::atomic::Ordering::SeqCst);
    let (q, sqs) = queue(&moto, "retry", &[state_change("a", "stopping", "ev-1")]).await;
    let memory = Memory::default();

    let first_try = batch(&h.ctx, &q, &memory).await.expect("batch");
    assert_eq!(
        (first_try.received, first_try.deleted, first_try.kept),
        (1, 0, 1)
    );
    assert_eq!(h.deleted(), ["web-a"], "one DELETE, which failed");
    assert_eq!(left(&sqs, &q).await, 1, "kept in the queue");

    // Hidden until its visibility timeout, then back.
    assert_eq!(batch(&h.ctx, &q, &memory).await.expect("batch").received, 0);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let second = batch(&h.ctx, &q, &memory).await.expect("batch");
    assert_eq!((second.received, second.deleted), (1, 1));
    assert_eq!(h.deleted(), ["web-a", "web-a"], "tried again, and done");
    assert_eq!(left(&sqs, &q).await, 0);
    // The replacement written on the first try serves the retry: no second one is bought.
    let written = claims_written(&h);
    assert_eq!(written, 1);
}

#[tokio::test]
async fn a_queue_that_does_not_exist_yet_is_retried_until_it_does() {
    let moto = MotoServer::session().expect("moto server");
    let sqs = AwsClients::from_config(&moto.sdk_config("us-east-1").await)
        .expect("clients")
        .sqs;
    let stop = CancellationToken::new();
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let creator = {
        let sqs = sqs.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            sqs.create_queue()
                .queue_name("late")
                .send()
                .await
                .expect("queue");
        }
    };
    let connecting = connect(
        || {
            attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let sqs = sqs.clone();
            async move { SqsQueue::connect(sqs, "late").await }
        },
        &stop,
    );
    let (queue, ()) = tokio::join!(connecting, creator);
    assert!(queue.is_some(), "connected once the queue exists");
    assert!(attempts.load(std::sync::atomic::Ordering::SeqCst) >= 2);

    // A stop while the queue stays missing ends the attempts.
    stop.cancel();
    let none = connect(
        || {
            let sqs = sqs.clone();
            async move { SqsQueue::connect(sqs, "never").await }
        },
        &stop,
    )
    .await;
    assert!(none.is_none());
}

/// Sixty spot warnings at once while every CreateFleet takes 20 s (a throttled account, held in
/// the EC2 client's own HTTP layer): each node is tainted and its claim deleted (its drain
/// started) within 10 s of the warnings, far inside the two-minute notice; the replacements
/// launch side by side through the real AWS provider on moto; no message is handled twice
/// although each stays in work longer than its visibility timeout (it is extended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_warnings_at_once_are_all_draining_within_ten_seconds_while_create_fleet_crawls() {
    use joiner_apis::{NodeTemplate, StaticObjects};
    use joiner_aws::testing;
    use joiner_controller::interruption::run;
    use joiner_controller::{Context, Settings};
    use joiner_core::CloudProvider;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use support::slow_fleet::SlowFleet;

    const NODES: usize = 60;
    let moto = MotoServer::session().expect("moto server");
    let slow = SlowFleet::new(Duration::from_secs(20));
    let mut clients =
        AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    testing::environment(&clients, "c1", "/joiner-test/service", "1.31")
        .await
        .expect("environment");
    clients.ec2 = slow.wrap(&clients.ec2);
    let template: NodeTemplate = obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default"},
        "spec": {"subnetSelector": {testing::DISCOVERY_TAG: "c1"},
                 "securityGroupSelector": {testing::DISCOVERY_TAG: "c1"}},
    }));
    let (aws, _) = testing::provider_with_lookup(
        &clients,
        testing::provider_config("c1", "/joiner-test/service", "1.31"),
        Arc::new(StaticObjects::new(vec![only_c5()], vec![template])),
    );
    // The catalog is read before the warnings, as a running controller has it.
    aws.instance_types("web").await.expect("catalog");
    let aws = Arc::new(aws);

    // Hex names: the node's name is its instance ID's tail.
    let names: Vec<String> = (0..NODES).map(|i| format!("b{i:02x}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let h = cluster(&refs, only_c5());
    let bodies: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| spot_warning(n, &format!("ev-{i}"), NOW))
        .collect();
    // A 4 s visibility timeout: far shorter than a launch, so only extending it keeps a
    // message in work from coming back (and long enough for a loaded test machine).
    let (q, sqs) = queue(&moto, "flood", &bodies).await;
    let q = q.with_timing(0, 4);
    let ctx = Arc::new(Context::new(
        h.ctx.client.clone(),
        h.ctx.state.clone(),
        aws.clone(),
        Settings::new("c1"),
    ));
    let stop = CancellationToken::new();
    let warned = std::time::Instant::now();
    let consumer = tokio::spawn(run(
        ctx.clone(),
        std::sync::Arc::new(q.clone()),
        stop.clone(),
    ));

    let tainted = |h: &Harness| {
        h.api
            .requests()
            .iter()
            .filter(|r| r.method == Method::PATCH && r.path.starts_with("/api/v1/nodes/"))
            .filter(|r| r.body.to_string().contains("joiner.sh/disrupted"))
            .map(|r| r.path.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    while warned.elapsed() < Duration::from_secs(10)
        && (tainted(&h) < NODES || h.deleted().len() < NODES)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(tainted(&h), NODES, "every node tainted within 10 s");
    let mut deleted = h.deleted();
    deleted.sort();
    deleted.dedup();
    assert_eq!(
        deleted.len(),
        NODES,
        "every claim deleted (draining) within 10 s"
    );
    assert_eq!(
        slow.calls.answered.load(Ordering::SeqCst),
        0,
        "no CreateFleet had been answered when the drains began: they did not wait for it"
    );
    // The launches are under way (the launch template and the fleet request are built first),
    // and none of them had been answered when every node was already draining.
    while warned.elapsed() < Duration::from_secs(19)
        && slow.calls.running.load(Ordering::SeqCst) == 0
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        slow.calls.running.load(Ordering::SeqCst) > 0,
        "the replacements are being launched: {} claims written",
        claims_written(&h),
    );

    // Then every replacement launches, side by side, and every message is deleted once.
    while warned.elapsed() < Duration::from_secs(90)
        && (left(&sqs, &q).await > 0 || slow.calls.answered.load(Ordering::SeqCst) < NODES)
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.cancel();
    consumer.await.expect("consumer");
    let written = claims_written(&h);
    assert_eq!(written, NODES, "one replacement claim per interrupted node");
    assert_eq!(
        slow.calls.answered.load(Ordering::SeqCst),
        NODES,
        "one CreateFleet per interrupted node"
    );
    assert!(
        slow.calls.most.load(Ordering::SeqCst) >= 10,
        "replacements launch in parallel: at most {} CreateFleet calls at once",
        slow.calls.most.load(Ordering::SeqCst)
    );
    let launched = aws.list().await.expect("lists");
    assert_eq!(launched.len(), NODES, "each replacement runs in moto");
    assert_eq!(left(&sqs, &q).await, 0);
    assert_eq!(h.deleted().len(), NODES, "no claim deleted twice");
    let replaced = ctx
        .metrics
        .interruption_actions
        .get_or_create(&ActionLabels {
            kind: EventKind::SpotInterruption.as_str().into(),
            action: "replace".into(),
        })
        .get();
    assert_eq!(replaced, NODES as u64, "each event acted on once");
}

/// A queue of the given messages that records each visibility extension, with a 1 s timeout.
struct Recording {
    messages: std::sync::Mutex<Vec<joiner_core::interruption::Message>>,
    extended: std::sync::Mutex<Vec<(tokio::time::Instant, Vec<String>)>>,
    deleted_at: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl joiner_core::interruption::InterruptionQueue for Recording {
    type Error = joiner_core::testing::FakeError;

    async fn receive(&self) -> Result<Vec<joiner_core::interruption::Message>, Self::Error> {
        Ok(std::mem::take(&mut *self.messages.lock().expect("lock")))
    }

    async fn delete(&self, receipts: &[String]) -> Result<Vec<Option<String>>, Self::Error> {
        *self.deleted_at.lock().expect("lock") = Some(tokio::time::Instant::now());
        Ok(vec![None; receipts.len()])
    }

    fn visibility(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn extend(&self, receipts: &[String]) -> Result<(), Self::Error> {
        self.extended
            .lock()
            .expect("lock")
            .push((tokio::time::Instant::now(), receipts.to_vec()));
        Ok(())
    }
}

/// A message whose replacement launch takes 5 s is kept invisible the whole time, every half
/// visibility timeout, and no longer once it is deleted.
#[tokio::test(start_paused = true)]
async fn a_message_in_work_is_kept_invisible_until_it_is_deleted() {
    use joiner_controller::{Context, Settings};
    use joiner_core::testing::catalog::catalog;
    use joiner_core::testing::FakeCloud;
    use support::slow_cloud::SlowLaunches;

    let h = cluster(&["a"], provisioner(None));
    let ctx = Context::new(
        h.ctx.client.clone(),
        h.ctx.state.clone(),
        std::sync::Arc::new(SlowLaunches::new(
            FakeCloud::new(catalog()),
            Duration::from_secs(5),
        )),
        Settings::new("c1"),
    );
    let queue = Recording {
        messages: std::sync::Mutex::new(vec![joiner_core::interruption::Message {
            message_id: "m-1".into(),
            receipt: "r-1".into(),
            body: joiner_aws::interruption::parse(&spot_warning("a", "ev-1", NOW)),
            sent_at_ms: None,
        }]),
        extended: Default::default(),
        deleted_at: Default::default(),
    };
    let start = tokio::time::Instant::now();
    let report = batch(&ctx, &queue, &Memory::default())
        .await
        .expect("batch");
    assert_eq!((report.received, report.deleted), (1, 1));
    let deleted_at = queue.deleted_at.lock().expect("lock").expect("deleted");
    assert!(
        deleted_at - start >= Duration::from_secs(5),
        "deleted after the launch"
    );
    let extended = queue.extended.lock().expect("lock").clone();
    // Every 0.5 s while in work: never 1 s without an extension.
    assert!(extended.len() >= 9, "{} extensions", extended.len());
    let mut last = start;
    for (at, receipts) in &extended {
        assert_eq!(receipts, &["r-1"]);
        assert!(*at - last < Duration::from_secs(1));
        assert!(*at <= deleted_at);
        last = *at;
    }
    assert!(deleted_at - last < Duration::from_secs(1));
}

/// Two spot warnings 0.4 s apart, in two receives: the first victim's replacement is bought
/// for its pod, so the second victim's pod does not take that room — it gets a replacement of
/// its own at once, rather than waiting for a later batch after the first pod is evicted.
#[tokio::test]
async fn a_second_warning_does_not_take_the_room_bought_for_the_first() {
    let moto = MotoServer::session().expect("moto server");
    let h = cluster(&["a", "b"], only_c5());
    let (q, sqs) = queue(&moto, "twice", &[spot_warning("a", "ev-a", NOW)]).await;
    let memory = Memory::default();
    assert_eq!(drain_queue(&h, &q, &memory).await.len(), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    send(&sqs, &q, &spot_warning("b", "ev-b", NOW)).await;
    assert_eq!(drain_queue(&h, &q, &memory).await.len(), 1);

    let posts: Vec<support::Recorded> = h
        .api
        .requests()
        .into_iter()
        .filter(|r| r.is(Method::POST, CLAIMS))
        .collect();
    let nominated: Vec<String> = posts
        .iter()
        .map(|p| p.body["metadata"]["annotations"]["joiner.sh/nominated-pods"].to_string())
        .collect();
    assert_eq!(
        nominated,
        [r#""[\"shop/app-a@a\"]""#, r#""[\"shop/app-b@b\"]""#],
        "one replacement per victim, each holding its pod's room"
    );
    assert_eq!(creates(&h.cloud), 2);
}

/// A queue whose receive never returns (a call wedged past every timeout).
struct Wedged;

impl joiner_core::interruption::InterruptionQueue for Wedged {
    type Error = joiner_core::testing::FakeError;

    async fn receive(&self) -> Result<Vec<joiner_core::interruption::Message>, Self::Error> {
        futures::future::pending().await
    }

    async fn delete(&self, receipts: &[String]) -> Result<Vec<Option<String>>, Self::Error> {
        Ok(vec![None; receipts.len()])
    }

    fn visibility(&self) -> Duration {
        Duration::from_secs(20)
    }

    async fn extend(&self, _receipts: &[String]) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// The consumer's workers are watched like the control loops: wedged on a receive, they fail
/// liveness once the long poll and the stall allowance are over, not before.
#[tokio::test(start_paused = true)]
async fn a_wedged_consumer_fails_liveness() {
    use joiner_controller::interruption::{run, LONG_POLL};

    let h = cluster(&["a"], provisioner(None));
    let ctx = std::sync::Arc::new(h.ctx);
    let stop = CancellationToken::new();
    let consumer = tokio::spawn(run(ctx.clone(), std::sync::Arc::new(Wedged), stop.clone()));
    tokio::time::sleep(LONG_POLL + joiner_controller::http::PASS_STALL - Duration::from_secs(1))
        .await;
    assert_eq!(ctx.metrics.passes.stalled(), None, "not yet");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (name, _) = ctx.metrics.passes.stalled().expect("stalled");
    assert!(name.starts_with("interruption/"), "{name}");
    stop.cancel();
    consumer.await.expect("stops");
}
