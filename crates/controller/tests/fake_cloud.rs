//! Reconcilers on `joiner_core::testing::FakeCloud` (no moto): garbage collection waits for
//! EC2's eventual consistency, termination releases a node only once the cloud reports its
//! instance gone, and a launch's capacity error requeues its claim.

mod lifecycle_fixture;
mod support;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use joiner_controller::lifecycle::gc::Collector;
use joiner_controller::{Context, Settings};
use joiner_core::testing::{FakeCall, FakeCloud};
use joiner_core::{CapacityType, CloudProvider, LaunchedNode};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use lifecycle_fixture::{claim, launch_request, node, Stores};
use serde_json::json;
use support::slow_cloud::SlowLaunches;
use support::{mock_api, Reply};

fn ago(seconds: i64) -> String {
    (Timestamp::now() - SignedDuration::from_secs(seconds)).to_string()
}

/// A claim launched `seconds` ago onto instance `id`.
fn launched(name: &str, id: &str, seconds: i64) -> joiner_apis::NodeClaim {
    claim(
        name,
        json!({"status": {"instanceID": id, "providerID": format!("fake:///z/{id}"),
            "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                "message": "", "lastTransitionTime": ago(seconds)}]}}),
    )
}

fn ready_node(name: &str, id: &str, ready: &str) -> k8s_openapi::api::core::v1::Node {
    node(
        name,
        json!({"spec": {"providerID": format!("fake:///z/{id}")},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}),
    )
}

/// A terminator that retries refused evictions at once.
fn terminator() -> joiner_controller::lifecycle::termination::Terminator {
    use joiner_controller::lifecycle::termination::eviction::BackoffPolicy;
    joiner_controller::lifecycle::termination::Terminator::new(BackoffPolicy {
        initial: Duration::ZERO,
        max: Duration::ZERO,
    })
}

fn settings() -> Settings {
    let mut s = Settings::new("c1");
    s.orphan_grace = Duration::ZERO;
    s
}

#[tokio::test]
async fn a_claim_is_taken_as_gone_only_when_its_launch_is_old_and_its_node_not_ready() {
    let cloud = Arc::new(FakeCloud::new(Vec::new()));
    let stores = Stores::new(
        vec![],
        vec![
            ready_node("n-ready", "i-2", "True"),
            ready_node("n-dead", "i-3", "Unknown"),
        ],
        vec![
            // Launched a moment ago: DescribeInstances may not list it yet.
            launched("fresh", "i-1", 30),
            // Old, but its Node is Ready: the instance runs whatever the listing says.
            launched("serving", "i-2", 600),
            // Old, Node not Ready: gone.
            launched("dead", "i-3", 600),
            // Old, no Node at all: gone.
            launched("lost", "i-4", 600),
        ],
    );
    let (client, api) = mock_api(|req| {
        if req.method == Method::DELETE {
            Reply::success()
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = Context::new(client, stores.state(), cloud.clone(), settings());
    Collector::default().sweep(&ctx).await.expect("sweep");
    let mut deleted: Vec<String> = api
        .calls()
        .into_iter()
        .filter(|(m, _)| m == "DELETE")
        .map(|(_, p)| p)
        .collect();
    deleted.sort();
    assert_eq!(
        deleted,
        [
            "/apis/joiner.sh/v1alpha1/nodeclaims/dead",
            "/apis/joiner.sh/v1alpha1/nodeclaims/lost"
        ]
    );
    assert_eq!(cloud.calls(), [FakeCall::List]);
}

#[tokio::test]
async fn an_orphan_is_collected_and_a_claimed_instance_is_not() {
    let cloud = Arc::new(FakeCloud::new(Vec::new()));
    let kept = cloud
        .create(&launch_request("web-1"))
        .await
        .expect("launch");
    let orphan = cloud
        .create(&launch_request("ghost"))
        .await
        .expect("launch");
    // Warm-pool members are claims too: one whose member claim exists is kept, one whose
    // member claim is gone is an orphan like any other (no blanket exemption by tag).
    let member = |id: &str, claim: &str| LaunchedNode {
        claim_name: Some(claim.into()),
        instance_id: id.into(),
        provider_id: format!("fake:///z/{id}"),
        instance_type: "m5.large".into(),
        zone: "z".into(),
        capacity_type: CapacityType::OnDemand,
        state: "stopped".into(),
        launch_time: None,
        image_id: None,
        subnet_id: None,
        security_group_ids: vec![],
        warm_pool: true,
    };
    cloud.add_instance(member("i-warm", "web-warm-1"));
    cloud.add_instance(member("i-warm-lost", "web-warm-gone"));
    let mut member_claim = launched("web-warm-1", "i-warm", 30);
    member_claim
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("joiner.sh/warm-pool".into(), "web".into());
    let stores = Stores::new(
        vec![],
        vec![],
        vec![launched("web-1", &kept.instance_id, 30), member_claim],
    );
    let (client, api) = mock_api(|_| Reply::not_found("unexpected"));
    let ctx = Context::new(client, stores.state(), cloud.clone(), settings());
    Collector::default().sweep(&ctx).await.expect("sweep");
    assert!(api.requests().is_empty(), "{:?}", api.calls());
    let states: Vec<(String, String)> = cloud
        .instances()
        .into_iter()
        .map(|i| (i.instance_id, i.state))
        .collect();
    assert!(states.contains(&(orphan.instance_id.clone(), "terminated".into())));
    assert!(states.contains(&(kept.instance_id.clone(), "running".into())));
    assert!(states.contains(&("i-warm".into(), "stopped".into())));
    assert!(states.contains(&("i-warm-lost".into(), "terminated".into())));
}

/// A pending pod `name` asking for 1.5 cpu (one per 2-cpu node).
fn pending(name: &str) -> k8s_openapi::api::core::v1::Pod {
    support::obj(json!({
        "metadata": {"name": name, "namespace": "shop", "uid": format!("pod-{name}")},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }))
}

/// An API server that stores created NodeClaims and accepts status writes and Events.
fn claim_server() -> impl FnMut(&support::Recorded) -> Reply {
    let mut created = 0;
    move |req| {
        if req.is(Method::POST, "/apis/joiner.sh/v1alpha1/nodeclaims") {
            created += 1;
            Reply::created(support::stored(req, &format!("uid-{created}")))
        } else if req.method == Method::PATCH && req.path.ends_with("/status") {
            Reply::ok(
                json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
                "metadata": {"name": "x"}, "spec": {"provisionerName": "web"}}),
            )
        } else if req.method == Method::POST && req.path.ends_with("/events") {
            Reply::created(support::stored(req, "event-uid"))
        } else {
            Reply::not_found(&req.path)
        }
    }
}

/// A context on `stores` with Provisioner web, launching on [`SlowLaunches`] and writing
/// claims to [`claim_server`].
fn slow_launches(stores: &Stores) -> (Context<SlowLaunches>, Arc<SlowLaunches>, support::MockApi) {
    let mut state = stores.state();
    state.provisioners = support::store(vec![web_provisioner()]).as_reader();
    let cloud = Arc::new(SlowLaunches::new(
        FakeCloud::new(joiner_core::testing::catalog::catalog()),
        Duration::from_secs(1),
    ));
    let (client, api) = mock_api(claim_server());
    let ctx = Context::new(client, state, cloud.clone(), settings());
    (ctx, cloud, api)
}

fn web_provisioner() -> joiner_apis::Provisioner {
    support::obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
        "metadata": {"name": "web"},
        "spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}]},
    }))
}

#[tokio::test(start_paused = true)]
async fn a_batch_writes_and_launches_its_claims_concurrently_and_sees_them_at_once() {
    use joiner_controller::provisioning::{provision_batch, Memory, LAUNCH_CONCURRENCY};
    use std::sync::atomic::Ordering;
    let pods: Vec<_> = (0..40).map(|i| pending(&format!("web-{i}"))).collect();
    let (ctx, cloud, api) = slow_launches(&Stores::new(pods, vec![], vec![]));
    let mut memory = Memory::default();

    let outcome = provision_batch(&ctx, &mut memory).await.expect("batch");
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(outcome.claims.len(), 40, "one c5.large per pod");
    assert_eq!(cloud.cloud.instances().len(), 40);
    // Launches overlapped, but never more than the bound.
    let most = cloud.most.load(Ordering::SeqCst);
    assert!(
        most > 1 && most <= LAUNCH_CONCURRENCY,
        "{most} launches at once"
    );

    // The watch has not delivered the claims yet (the store is empty), but the next batch
    // sees their capacity and buys nothing more.
    let posts_before = api
        .calls()
        .iter()
        .filter(|(m, p)| m == "POST" && p.ends_with("/nodeclaims"))
        .count();
    let again = provision_batch(&ctx, &mut memory).await.expect("batch");
    assert!(again.claims.is_empty(), "{:?}", again.plan.new_nodes);
    let posts_after = api
        .calls()
        .iter()
        .filter(|(m, p)| m == "POST" && p.ends_with("/nodeclaims"))
        .count();
    assert_eq!(posts_before, posts_after);
}

/// After a failover, the claims a crash left unlaunched are launched concurrently (bounded),
/// as a batch's are, not one CreateFleet after another.
#[tokio::test(start_paused = true)]
async fn claims_left_unlaunched_are_launched_concurrently() {
    use joiner_controller::launcher::Launch;
    use joiner_controller::provisioning::{launch_pending_claims, Memory, LAUNCH_CONCURRENCY};
    use std::sync::atomic::Ordering;
    let claims: Vec<_> = (0..40)
        .map(|i| {
            claim(
                &format!("web-{i}"),
                json!({"spec": {"requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}]}}),
            )
        })
        .collect();
    let (ctx, cloud, _api) = slow_launches(&Stores::new(vec![], vec![], claims));
    let results = launch_pending_claims(&ctx, &mut Memory::default()).await;
    assert_eq!(results.len(), 40);
    assert!(
        results.iter().all(|r| matches!(r, Ok(Launch::Launched(_)))),
        "{results:?}"
    );
    assert_eq!(cloud.cloud.instances().len(), 40);
    let most = cloud.most.load(Ordering::SeqCst);
    assert!(
        most > 1 && most <= LAUNCH_CONCURRENCY,
        "{most} launches at once"
    );
}

/// An API server that accepts every claim patch (a finalizer released) and nothing else.
fn claim_patches_answered(req: &support::Recorded) -> Reply {
    if req.method == Method::PATCH {
        Reply::ok(
            json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "x"}, "spec": {"provisionerName": "web"}}),
        )
    } else {
        Reply::not_found("unexpected")
    }
}

/// A claim being deleted, its instance `id` launched by `cloud`.
fn deleting(name: &str, node: &LaunchedNode) -> joiner_apis::NodeClaim {
    claim(
        name,
        json!({"metadata": {"deletionTimestamp": "2026-01-01T01:00:00Z",
                "finalizers": ["joiner.sh/termination"]},
            "status": {"instanceID": node.instance_id, "providerID": node.provider_id}}),
    )
}

#[tokio::test]
async fn a_termination_pass_lists_the_cloud_once_and_releases_only_what_it_reports_gone() {
    use joiner_core::testing::{FakeError, FakeMethod};

    let cloud = Arc::new(FakeCloud::new(Vec::new()));
    let mut launched = Vec::new();
    for name in ["web-1", "web-2", "web-3"] {
        launched.push(cloud.create(&launch_request(name)).await.expect("launch"));
    }
    let stores = Stores::new(
        vec![],
        vec![],
        vec![
            deleting("web-1", &launched[0]),
            deleting("web-2", &launched[1]),
            deleting("web-3", &launched[2]),
        ],
    );
    let (client, api) = mock_api(claim_patches_answered);
    let ctx = Context::new(client, stores.state(), cloud.clone(), settings());
    let terminator = terminator();
    // EC2 refuses to terminate one of the instances this time: it keeps running.
    cloud.fail_next(
        FakeMethod::Delete,
        FakeError::new(
            joiner_core::CloudErrorKind::Throttled,
            "RequestLimitExceeded",
        ),
    );
    let refused = terminator
        .reconcile(&ctx)
        .await
        .expect_err("pass 1 reports the refusal");
    assert!(refused.to_string().contains("NodeClaim"), "{refused}");
    let lists = |calls: &[FakeCall]| calls.iter().filter(|c| **c == FakeCall::List).count();
    let first = cloud.calls();
    assert_eq!(
        lists(&first),
        1,
        "one listing for the whole pass: {first:?}"
    );
    assert!(
        !first.iter().any(|c| matches!(c, FakeCall::Get(_))),
        "no per-claim look-up: {first:?}"
    );
    assert!(
        api.writes().is_empty(),
        "nothing released before the cloud says so"
    );

    let still_running: Vec<String> = cloud
        .instances()
        .into_iter()
        .filter(|n| n.state == "running")
        .filter_map(|n| n.claim_name)
        .collect();
    assert_eq!(
        still_running.len(),
        1,
        "the refused terminate left one instance running"
    );

    terminator.reconcile(&ctx).await.expect("pass 2");
    let second = &cloud.calls()[first.len()..];
    assert_eq!(lists(second), 1, "{second:?}");
    let released = |api: &support::MockApi| {
        let mut paths: Vec<String> = api.writes().iter().map(|w| w.path.clone()).collect();
        paths.sort();
        paths.dedup();
        paths
    };
    let expected: Vec<String> = ["web-1", "web-2", "web-3"]
        .into_iter()
        .filter(|c| !still_running.iter().any(|r| r == c))
        .map(|c| format!("/apis/joiner.sh/v1alpha1/nodeclaims/{c}"))
        .collect();
    assert_eq!(
        released(&api),
        expected,
        "a claim whose instance the pass's listing still showed running is kept"
    );
    // That pass terminated it; the next one sees it gone and releases it too.
    terminator.reconcile(&ctx).await.expect("pass 3");
    assert_eq!(released(&api).len(), 3);
}

/// A drain a do-not-disrupt pod holds: the passes (one a second) ask the cloud about the
/// claim at most every 10 s, not every pass; once the instance is terminated the next pass
/// asks again at once.
#[tokio::test(start_paused = true)]
async fn a_held_drain_lists_its_instance_at_most_every_ten_seconds() {
    let cloud = Arc::new(FakeCloud::new(Vec::new()));
    let held = cloud.create(&launch_request("held")).await.expect("launch");
    let node = node(
        "n-held",
        json!({"metadata": {"finalizers": ["joiner.sh/termination"]},
            "spec": {"providerID": held.provider_id,
                "taints": [{"key": "joiner.sh/disrupted", "effect": "NoSchedule"}]}}),
    );
    let guarded = lifecycle_fixture::pod(
        "shop",
        "web",
        "n-held",
        json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
    );
    let mut stores = Stores::new(
        vec![guarded.clone()],
        vec![node],
        vec![deleting("held", &held)],
    );
    let (client, _api) = mock_api(|req| match req.method {
        Method::POST if req.path.ends_with("/events") => {
            Reply::created(support::stored(req, "event-uid"))
        }
        _ => Reply::not_found("unexpected"),
    });
    let ctx = Context::new(client, stores.state(), cloud.clone(), settings());
    let terminator = terminator();
    let lists = || {
        cloud
            .calls()
            .iter()
            .filter(|c| **c == FakeCall::List)
            .count()
    };
    for _ in 0..25 {
        terminator.reconcile(&ctx).await.expect("pass");
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert_eq!(lists(), 3, "at 0, 10 and 20 s: {:?}", cloud.calls());
    assert!(!cloud
        .calls()
        .iter()
        .any(|c| matches!(c, FakeCall::Delete(_))));

    // The pod leaves: the instance is terminated, and the very next pass looks again.
    stores.delete_pod(&guarded);
    terminator.reconcile(&ctx).await.expect("pass");
    assert!(cloud
        .calls()
        .contains(&FakeCall::Delete(held.instance_id.clone())));
    let before = lists();
    terminator.reconcile(&ctx).await.ok();
    assert_eq!(lists(), before + 1);
}

/// A drained node whose volume is still attached keeps its instance until the attachment is
/// gone; one whose attachment never goes is terminated after the detach timeout.
#[tokio::test(start_paused = true)]
async fn a_drained_node_is_terminated_once_its_volumes_detach_or_the_wait_runs_out() {
    use joiner_controller::lifecycle::termination::VOLUME_DETACH_TIMEOUT;
    use k8s_openapi::api::storage::v1::VolumeAttachment;

    let cloud = Arc::new(FakeCloud::new(Vec::new()));
    let detaching = cloud
        .create(&launch_request("detaching"))
        .await
        .expect("launch");
    let stuck = cloud
        .create(&launch_request("stuck"))
        .await
        .expect("launch");
    let on_node = |name: &str, launched: &LaunchedNode| {
        node(
            name,
            json!({"metadata": {"finalizers": ["joiner.sh/termination"]},
                "spec": {"providerID": launched.provider_id,
                    "taints": [{"key": "joiner.sh/disrupted", "effect": "NoSchedule"}]}}),
        )
    };
    let attachment = |name: &str, node: &str| -> VolumeAttachment {
        support::obj(json!({
            "metadata": {"name": name},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node,
                "source": {"persistentVolumeName": format!("pv-{name}")}},
        }))
    };
    let stores = Stores::new(
        vec![],
        vec![
            on_node("n-detaching", &detaching),
            on_node("n-stuck", &stuck),
        ],
        vec![deleting("detaching", &detaching), deleting("stuck", &stuck)],
    );
    let mut attachments = support::store(vec![
        attachment("va-1", "n-detaching"),
        attachment("va-2", "n-stuck"),
    ]);
    let mut state = stores.state();
    state.volumes.attachments = attachments.as_reader();
    let (client, _api) = mock_api(|_| Reply::not_found("unexpected"));
    let ctx = Context::new(client, state, cloud.clone(), settings());
    let terminator = terminator();
    let deleted = || {
        cloud
            .calls()
            .iter()
            .filter_map(|c| match c {
                FakeCall::Delete(id) => Some(id.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };

    terminator.reconcile(&ctx).await.ok();
    assert!(deleted().is_empty(), "both still have a volume attached");

    // The CSI driver detaches the first volume: its node goes on the next pass.
    attachments.apply_watcher_event(&kube::runtime::watcher::Event::Delete(attachment(
        "va-1",
        "n-detaching",
    )));
    tokio::time::advance(Duration::from_secs(10)).await;
    terminator.reconcile(&ctx).await.ok();
    assert_eq!(deleted(), vec![detaching.instance_id.clone()]);

    // The other never detaches: its instance goes once the wait runs out.
    tokio::time::advance(VOLUME_DETACH_TIMEOUT - Duration::from_secs(20)).await;
    terminator.reconcile(&ctx).await.ok();
    assert_eq!(
        deleted(),
        vec![detaching.instance_id.clone()],
        "still waiting"
    );
    tokio::time::advance(Duration::from_secs(15)).await;
    terminator.reconcile(&ctx).await.ok();
    assert_eq!(
        deleted(),
        [detaching.instance_id.clone(), stuck.instance_id.clone()]
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_the_api_server_never_answers_does_not_hold_back_another_claims_termination() {
    let cloud = Arc::new(FakeCloud::new(Vec::new()));
    let stuck = cloud
        .create(&launch_request("stuck"))
        .await
        .expect("launch");
    let free = cloud.create(&launch_request("free")).await.expect("launch");
    let on_node = |name: &str, launched: &LaunchedNode| {
        node(
            name,
            json!({"metadata": {"finalizers": ["joiner.sh/termination"]},
                "spec": {"providerID": launched.provider_id}}),
        )
    };
    let nodes = vec![on_node("n-stuck", &stuck), on_node("n-free", &free)];
    let pod = lifecycle_fixture::pod("shop", "web", "n-stuck", json!({}));
    let stores = Stores::new(
        vec![pod],
        nodes.clone(),
        vec![deleting("stuck", &stuck), deleting("free", &free)],
    );
    let tainted: Vec<serde_json::Value> = nodes
        .iter()
        .map(|n| {
            let mut v = serde_json::to_value(n).expect("node");
            v["spec"]["taints"] = json!([{"key": "joiner.sh/disrupted", "effect": "NoSchedule"}]);
            v
        })
        .collect();
    let (client, api) = mock_api(move |req| match req.method {
        Method::POST if req.path.ends_with("/eviction") => Reply::never(),
        Method::PATCH if req.path == "/api/v1/nodes/n-stuck" => Reply::ok(tainted[0].clone()),
        Method::PATCH if req.path == "/api/v1/nodes/n-free" => Reply::ok(tainted[1].clone()),
        _ => Reply::not_found("unexpected"),
    });
    let ctx = Context::new(client, stores.state(), cloud.clone(), settings());
    let terminator = terminator();
    let err = terminator
        .reconcile(&ctx)
        .await
        .expect_err("the hung drain is reported");
    assert!(err.to_string().contains("stuck"), "{err}");
    let deleted: Vec<FakeCall> = cloud
        .calls()
        .into_iter()
        .filter(|c| matches!(c, FakeCall::Delete(_)))
        .collect();
    assert_eq!(
        deleted,
        [FakeCall::Delete(free.instance_id.clone())],
        "the free node's instance is terminated in the same pass"
    );
    assert!(
        api.calls()
            .iter()
            .any(|(m, p)| m == "POST" && p.ends_with("/pods/web/eviction")),
        "the eviction was sent and never answered: {:?}",
        api.calls()
    );
}

/// A warm-pool member claim removed after its instance was handed to a claim: its status still
/// records the instance, and a listing may still show the instance under the member's tag.
/// Termination releases the member and never terminates the node another live claim records.
#[tokio::test]
async fn termination_never_terminates_an_instance_another_live_claim_records() {
    let cloud = Arc::new(FakeCloud::new(Vec::new()));
    let taken = cloud
        .create(&launch_request("web-warm-a"))
        .await
        .expect("launch");
    let member = claim(
        "web-warm-a",
        json!({"metadata": {"deletionTimestamp": "2026-01-01T01:00:00Z",
                "labels": {"joiner.sh/warm-pool": "web"}},
            "status": {"instanceID": taken.instance_id, "providerID": taken.provider_id}}),
    );
    let taker = claim(
        "web-1",
        json!({"status": {"instanceID": taken.instance_id, "providerID": taken.provider_id}}),
    );
    let stores = Stores::new(vec![], vec![], vec![member, taker]);
    let (client, api) = mock_api(claim_patches_answered);
    let ctx = Context::new(client, stores.state(), cloud.clone(), settings());
    // The listing still shows the instance tagged for the member (the re-tag is not seen yet).
    terminator().reconcile(&ctx).await.expect("pass");
    assert!(
        !cloud
            .calls()
            .iter()
            .any(|c| matches!(c, FakeCall::Delete(_))),
        "the taker's node must not be terminated: {:?}",
        cloud.calls()
    );
    assert_eq!(cloud.instances()[0].state, "running");
    let writes = api.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(
        writes[0].is(
            Method::PATCH,
            "/apis/joiner.sh/v1alpha1/nodeclaims/web-warm-a"
        ),
        "the member is released: {:?}",
        writes[0]
    );
}
