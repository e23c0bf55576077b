//! Termination through the scripted API with the real provider on moto: the disrupted taint,
//! Eviction POSTs (429 and 5xx retried after a backoff, 404 taken as gone, DaemonSet and mirror
//! pods skipped, critical pods last, do-not-disrupt pods waited for with an Event), then the
//! instance terminated in moto and — once EC2 reports it shutting down or gone — the
//! finalizers removed. A NotReady node whose instance is stopped is released without a drain.

mod lifecycle_fixture;
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use http::Method;
use joiner_controller::lifecycle::termination::eviction::BackoffPolicy;
use joiner_controller::lifecycle::termination::Terminator;
use joiner_controller::metrics::ReasonLabels;
use lifecycle_fixture::{
    claim, cloud, context, instance_state, launch, node, pod, settings, Stores,
};
use serde_json::json;
use support::{mock_api, stored, Reply};

const NODE: &str = "/api/v1/nodes/n1";
const CLAIM: &str = "/apis/joiner.sh/v1alpha1/nodeclaims/web-1";

fn eviction_path(name: &str) -> String {
    format!("/api/v1/namespaces/shop/pods/{name}/eviction")
}

fn as_json<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).expect("serializes")
}

fn no_backoff() -> Terminator {
    Terminator::new(BackoffPolicy {
        initial: Duration::ZERO,
        max: Duration::ZERO,
    })
}

fn deleting_claim(name: &str, instance_id: &str, provider_id: &str) -> joiner_apis::NodeClaim {
    claim(
        name,
        json!({"metadata": {"deletionTimestamp": "2026-01-01T01:00:00Z",
                "finalizers": ["other.example/keep", "joiner.sh/termination"]},
            "status": {"instanceID": instance_id, "providerID": provider_id}}),
    )
}

fn evicted_pods(writes: &[support::Recorded]) -> BTreeSet<String> {
    writes
        .iter()
        .filter(|w| w.method == Method::POST && w.path.ends_with("/eviction"))
        .map(|w| w.path.clone())
        .collect()
}

fn deleted_count(ctx: &joiner_controller::Context<joiner_aws::AwsCloudProvider>) -> u64 {
    ctx.metrics
        .claims_terminated
        .get_or_create(&ReasonLabels {
            provisioner: "web".into(),
            reason: "deleted".into(),
        })
        .get()
}

#[tokio::test]
async fn a_deleted_claim_is_drained_in_order_then_its_instance_terminated_and_released() {
    let cloud = cloud().await;
    let launched = launch(&cloud, "web-1").await;
    let the_node = node(
        "n1",
        json!({"metadata": {"finalizers": ["joiner.sh/termination"],
                "labels": {"joiner.sh/nodeclaim": "web-1"}},
            "spec": {"providerID": launched.provider_id}}),
    );
    let ordinary = pod("shop", "web", "n1", json!({}));
    let guarded = pod("shop", "guarded", "n1", json!({}));
    let vanished = pod("shop", "vanished", "n1", json!({}));
    let critical = pod(
        "shop",
        "dns",
        "n1",
        json!({"spec": {"priorityClassName": "system-cluster-critical"}}),
    );
    let daemon = pod(
        "shop",
        "agent",
        "n1",
        json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
            "name": "agent", "uid": "ds-1"}]}}),
    );
    let mirror = pod(
        "shop",
        "static",
        "n1",
        json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "abc"}}}),
    );
    let elsewhere = pod("shop", "elsewhere", "n2", json!({}));
    let mut stores = Stores::new(
        vec![
            ordinary.clone(),
            guarded.clone(),
            vanished.clone(),
            critical.clone(),
            daemon.clone(),
            mirror.clone(),
            elsewhere,
        ],
        vec![the_node.clone()],
        vec![deleting_claim(
            "web-1",
            &launched.instance_id,
            &launched.provider_id,
        )],
    );
    let mut tainted = serde_json::to_value(&the_node).expect("node");
    tainted["metadata"]["resourceVersion"] = json!("6");
    tainted["spec"]["taints"] = json!([{"key": "joiner.sh/disrupted", "effect": "NoSchedule"}]);
    let tainted_reply = tainted.clone();
    let mut guarded_attempts = 0;
    let (client, api) = mock_api(move |req| {
        let path = req.path.as_str();
        match req.method {
            Method::PATCH if path == NODE => Reply::ok(tainted_reply.clone()),
            Method::POST if path == eviction_path("guarded") => {
                guarded_attempts += 1;
                if guarded_attempts == 1 {
                    Reply::error(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    )
                } else {
                    Reply::created(
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                    )
                }
            }
            Method::POST if path == eviction_path("vanished") => {
                Reply::not_found("pods \"vanished\"")
            }
            Method::POST if path.ends_with("/eviction") => {
                Reply::created(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}))
            }
            Method::DELETE if path == NODE => Reply::success(),
            Method::PATCH if path == CLAIM => Reply::ok(as_json(&claim("web-1", json!({})))),
            _ => Reply::not_found("unexpected"),
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    let terminator = no_backoff();

    // Pass 1: taint, evict the ordinary pods (one refused by its budget, one already gone).
    terminator.reconcile(&ctx).await.expect("pass 1");
    let writes = api.writes();
    assert!(writes[0].is(Method::PATCH, NODE));
    assert_eq!(
        writes[0].body,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
            {"op": "add", "path": "/spec/taints", "value": [
                {"key": "joiner.sh/disrupted", "effect": "NoSchedule"}]},
        ])
    );
    assert_eq!(
        evicted_pods(&writes),
        BTreeSet::from([
            eviction_path("web"),
            eviction_path("guarded"),
            eviction_path("vanished")
        ])
    );
    let web_eviction = writes
        .iter()
        .find(|w| w.path == eviction_path("web"))
        .expect("web evicted");
    assert_eq!(
        web_eviction.body,
        json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "web", "namespace": "shop"}})
    );
    assert_eq!(writes.len(), 4, "{:?}", api.calls());
    assert_eq!(
        instance_state(&cloud, &launched.instance_id).await,
        "running"
    );

    // The evicted and vanished pods leave the store; the node now carries the taint.
    stores.delete_pod(&ordinary);
    stores.delete_pod(&vanished);
    stores
        .nodes
        .apply_watcher_event(&kube::runtime::watcher::Event::Apply(
            serde_json::from_value(tainted).expect("node"),
        ));

    // Pass 2: the refused pod is retried (and accepted); the critical pod still waits.
    terminator.reconcile(&ctx).await.expect("pass 2");
    let writes = api.writes();
    assert_eq!(writes.len(), 5, "{:?}", api.calls());
    assert_eq!(writes[4].path, eviction_path("guarded"));
    stores.delete_pod(&guarded);

    // Pass 3: only the critical pod is left: now it goes.
    terminator.reconcile(&ctx).await.expect("pass 3");
    let writes = api.writes();
    assert_eq!(writes.len(), 6, "{:?}", api.calls());
    assert_eq!(writes[5].path, eviction_path("dns"));
    assert_eq!(
        instance_state(&cloud, &launched.instance_id).await,
        "running"
    );
    stores.delete_pod(&critical);

    // Pass 4: drained (DaemonSet and mirror pods never counted): terminate. Nothing is
    // released before EC2 reports the instance shutting down.
    terminator.reconcile(&ctx).await.expect("pass 4");
    assert_eq!(api.writes().len(), 6, "{:?}", api.calls());
    assert_eq!(
        instance_state(&cloud, &launched.instance_id).await,
        "terminated"
    );

    // Pass 5: the instance is gone: release the Node and the claim.
    terminator.reconcile(&ctx).await.expect("pass 5");
    let writes = api.writes();
    let tail: Vec<(String, String)> = writes[6..]
        .iter()
        .map(|w| (w.method.to_string(), w.path.clone()))
        .collect();
    assert_eq!(
        tail,
        [
            ("PATCH".to_string(), NODE.to_string()),
            ("DELETE".to_string(), NODE.to_string()),
            ("PATCH".to_string(), CLAIM.to_string()),
        ]
    );
    assert_eq!(
        writes[6].body,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "6"},
            {"op": "add", "path": "/metadata/finalizers", "value": []},
        ])
    );
    assert_eq!(
        writes[8].body,
        json!({"metadata": {"finalizers": ["other.example/keep"], "resourceVersion": "10"}})
    );
    assert!(writes
        .iter()
        .all(|w| !w.path.contains("/agent/") && !w.path.contains("/static/")));
    assert_eq!(
        instance_state(&cloud, &launched.instance_id).await,
        "terminated"
    );
    assert_eq!(deleted_count(&ctx), 1);
}

#[tokio::test]
async fn a_do_not_disrupt_pod_holds_the_drain_and_is_reported_once() {
    let cloud = cloud().await;
    let launched = launch(&cloud, "web-1").await;
    let tainted = node(
        "n1",
        json!({"metadata": {"finalizers": ["joiner.sh/termination"]},
            "spec": {"providerID": launched.provider_id,
                "taints": [{"key": "joiner.sh/disrupted", "effect": "NoSchedule"}]}}),
    );
    let batch = pod(
        "shop",
        "batch",
        "n1",
        json!({"metadata": {"annotations": {"joiner.sh/do-not-disrupt": "true"}}}),
    );
    let stores = Stores::new(
        vec![batch],
        vec![tainted],
        vec![deleting_claim(
            "web-1",
            &launched.instance_id,
            &launched.provider_id,
        )],
    );
    let (client, api) = mock_api(|req| {
        if req.is(Method::POST, "/api/v1/namespaces/default/events") {
            Reply::created(stored(req, "ev-1"))
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    let terminator = no_backoff();
    terminator.reconcile(&ctx).await.expect("pass 1");
    terminator.reconcile(&ctx).await.expect("pass 2");
    let writes = api.writes();
    assert_eq!(writes.len(), 1, "{:?}", api.calls());
    assert_eq!(writes[0].body["involvedObject"]["kind"], "Node");
    assert_eq!(writes[0].body["involvedObject"]["name"], "n1");
    assert_eq!(writes[0].body["reason"], "DrainBlocked");
    assert!(writes[0].body["message"]
        .as_str()
        .is_some_and(|m| m.contains("shop/batch")));
    assert_eq!(
        instance_state(&cloud, &launched.instance_id).await,
        "running"
    );
    assert_eq!(deleted_count(&ctx), 0);
}

#[tokio::test]
async fn a_node_whose_instance_is_gone_is_released_at_once_without_a_drain() {
    let cloud = cloud().await;
    let the_node = node(
        "n1",
        json!({"metadata": {"finalizers": ["joiner.sh/termination"]},
            "spec": {"providerID": "aws:///us-east-1a/i-0gone"}}),
    );
    let stores = Stores::new(
        vec![pod("shop", "web", "n1", json!({}))],
        vec![the_node],
        vec![deleting_claim(
            "web-1",
            "i-0gone",
            "aws:///us-east-1a/i-0gone",
        )],
    );
    const POD: &str = "/api/v1/namespaces/shop/pods/web";
    let (client, api) = mock_api(|req| match req.method {
        Method::PATCH if req.path == NODE => Reply::ok(as_json(&node("n1", json!({})))),
        Method::DELETE if req.path == NODE => Reply::not_found("nodes \"n1\""),
        Method::DELETE if req.path == POD => Reply::success(),
        Method::PATCH if req.path == CLAIM => Reply::ok(as_json(&claim("web-1", json!({})))),
        _ => Reply::not_found("unexpected"),
    });
    let ctx = context(client, &stores, &cloud, settings());
    no_backoff().reconcile(&ctx).await.expect("pass");
    let writes = api.writes();
    let calls: Vec<(String, String)> = writes
        .iter()
        .map(|w| (w.method.to_string(), w.path.clone()))
        .collect();
    // The pod still bound to the dead node is deleted at once (no eviction: nothing runs it),
    // so its controller recreates it now, not after pod garbage collection.
    assert_eq!(
        calls,
        [
            ("DELETE".to_string(), POD.to_string()),
            ("PATCH".to_string(), NODE.to_string()),
            ("DELETE".to_string(), NODE.to_string()),
            ("PATCH".to_string(), CLAIM.to_string()),
        ]
    );
    assert_eq!(
        writes[0].body["gracePeriodSeconds"], 0,
        "{:?}",
        writes[0].body
    );
    assert_eq!(deleted_count(&ctx), 1);
}

#[tokio::test]
async fn deleted_claims_without_nodes_have_their_instances_terminated_in_moto() {
    let cloud = cloud().await;
    let a = launch(&cloud, "web-1").await;
    let b = launch(&cloud, "web-2").await;
    let stores = Stores::new(
        vec![],
        vec![],
        vec![
            deleting_claim("web-1", &a.instance_id, &a.provider_id),
            deleting_claim("web-2", &b.instance_id, &b.provider_id),
        ],
    );
    let (client, api) = mock_api(|req| {
        if req.method == Method::PATCH {
            Reply::ok(as_json(&claim("web-x", json!({}))))
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    let terminator = no_backoff();
    terminator.reconcile(&ctx).await.expect("pass 1");
    assert_eq!(instance_state(&cloud, &a.instance_id).await, "terminated");
    assert_eq!(instance_state(&cloud, &b.instance_id).await, "terminated");
    assert!(api.writes().is_empty(), "released before EC2 said so");
    terminator.reconcile(&ctx).await.expect("pass 2");
    let patched: BTreeSet<String> = api.writes().iter().map(|w| w.path.clone()).collect();
    assert_eq!(
        patched,
        BTreeSet::from([
            CLAIM.to_string(),
            "/apis/joiner.sh/v1alpha1/nodeclaims/web-2".to_string()
        ])
    );
    for w in api.writes() {
        assert_eq!(
            w.body["metadata"]["finalizers"],
            json!(["other.example/keep"])
        );
    }
    assert_eq!(deleted_count(&ctx), 2);
}

#[tokio::test]
async fn a_conflict_on_the_finalizer_patch_is_retried_next_pass() {
    let cloud = cloud().await;
    let the_node = node(
        "n1",
        json!({"metadata": {"finalizers": ["joiner.sh/termination"]},
            "spec": {"providerID": "aws:///us-east-1a/i-0gone"}}),
    );
    let stores = Stores::new(
        vec![],
        vec![the_node],
        vec![deleting_claim(
            "web-1",
            "i-0gone",
            "aws:///us-east-1a/i-0gone",
        )],
    );
    let (client, api) = mock_api(|_| Reply::error(409, "Conflict", "the object has been modified"));
    let ctx = context(client, &stores, &cloud, settings());
    no_backoff()
        .reconcile(&ctx)
        .await
        .expect("a conflict is not a failure");
    // The node patch conflicted: nothing else is done this pass.
    assert_eq!(api.calls(), [("PATCH".to_string(), NODE.to_string())]);
    assert_eq!(deleted_count(&ctx), 0);
}

#[tokio::test]
async fn a_deleted_node_terminates_its_instance_and_takes_its_claim_along() {
    let cloud = cloud().await;
    let launched = launch(&cloud, "web-1").await;
    let the_node = node(
        "n1",
        json!({"metadata": {"finalizers": ["joiner.sh/termination"],
                "deletionTimestamp": "2026-01-01T01:00:00Z"},
            "spec": {"providerID": launched.provider_id}}),
    );
    let live_claim = claim(
        "web-1",
        json!({"status": {"instanceID": launched.instance_id, "providerID": launched.provider_id}}),
    );
    let stores = Stores::new(
        vec![pod(
            "shop",
            "done",
            "n1",
            json!({"status": {"phase": "Succeeded"}}),
        )],
        vec![the_node.clone()],
        vec![live_claim],
    );
    let mut tainted = as_json(&the_node);
    tainted["metadata"]["resourceVersion"] = json!("6");
    let reply = tainted.clone();
    let (client, api) = mock_api(move |req| match req.method {
        Method::PATCH if req.path == NODE => Reply::ok(reply.clone()),
        Method::DELETE if req.path == CLAIM => Reply::success(),
        _ => Reply::not_found("unexpected"),
    });
    let mut stores = stores;
    let ctx = context(client, &stores, &cloud, settings());
    let terminator = no_backoff();
    terminator.reconcile(&ctx).await.expect("pass 1");
    assert_eq!(api.writes().len(), 1, "only the taint: {:?}", api.calls());
    // The watch delivers the tainted Node; EC2 now reports the instance gone.
    stores
        .nodes
        .apply_watcher_event(&kube::runtime::watcher::Event::Apply(
            serde_json::from_value(tainted).expect("node"),
        ));
    terminator.reconcile(&ctx).await.expect("pass 2");
    let writes = api.writes();
    let calls: Vec<(String, String)> = writes
        .iter()
        .map(|w| (w.method.to_string(), w.path.clone()))
        .collect();
    // Taint, (nothing to evict: the only pod finished), finalizer off the already-deleted
    // Node, then the claim deleted.
    assert_eq!(
        calls,
        [
            ("PATCH".to_string(), NODE.to_string()),
            ("PATCH".to_string(), NODE.to_string()),
            ("DELETE".to_string(), CLAIM.to_string()),
        ]
    );
    assert_eq!(
        writes[1].body,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "6"},
            {"op": "add", "path": "/metadata/finalizers", "value": []},
        ])
    );
    assert_eq!(
        instance_state(&cloud, &launched.instance_id).await,
        "terminated"
    );
}

#[tokio::test]
async fn a_not_ready_node_whose_instance_is_stopped_is_released_without_a_drain() {
    let cloud = cloud().await;
    let launched = launch(&cloud, "web-1").await;
    cloud
        .clients
        .ec2
        .stop_instances()
        .instance_ids(&launched.instance_id)
        .send()
        .await
        .expect("stop");
    let dead = node(
        "n1",
        json!({"metadata": {"finalizers": ["joiner.sh/termination"]},
            "spec": {"providerID": launched.provider_id},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
    );
    let stores = Stores::new(
        vec![pod("shop", "web", "n1", json!({}))],
        vec![dead],
        vec![deleting_claim(
            "web-1",
            &launched.instance_id,
            &launched.provider_id,
        )],
    );
    let (client, api) = mock_api(|req| match req.method {
        Method::PATCH if req.path == NODE => Reply::ok(as_json(&node("n1", json!({})))),
        Method::DELETE if req.path == NODE => Reply::success(),
        Method::PATCH if req.path == CLAIM => Reply::ok(as_json(&claim("web-1", json!({})))),
        _ => Reply::not_found("unexpected"),
    });
    let ctx = context(client, &stores, &cloud, settings());
    let terminator = no_backoff();
    // Pass 1: no taint, no eviction (its kubelet is gone): the instance is terminated.
    terminator.reconcile(&ctx).await.expect("pass 1");
    assert!(api.writes().is_empty(), "{:?}", api.calls());
    assert_eq!(
        instance_state(&cloud, &launched.instance_id).await,
        "terminated"
    );
    // Pass 2: released.
    terminator.reconcile(&ctx).await.expect("pass 2");
    let calls: Vec<(String, String)> = api
        .writes()
        .iter()
        .map(|w| (w.method.to_string(), w.path.clone()))
        .collect();
    // Its pod, bound to a node nothing runs any more, is deleted first (already gone here:
    // the 404 is fine), so its controller recreates it at once.
    assert_eq!(
        calls,
        [
            (
                "DELETE".to_string(),
                "/api/v1/namespaces/shop/pods/web".to_string()
            ),
            ("PATCH".to_string(), NODE.to_string()),
            ("DELETE".to_string(), NODE.to_string()),
            ("PATCH".to_string(), CLAIM.to_string()),
        ]
    );
    assert!(calls.iter().all(|(_, p)| !p.ends_with("/eviction")));
}

#[tokio::test]
async fn an_eviction_failing_on_the_api_server_backs_off_like_a_refusal() {
    // A 500 (a webhook failing), and a 403 (the pod's namespace is being deleted: evictions are
    // forbidden until it is gone).
    for (code, reason, message) in [
        (500, "InternalError", "admission webhook failed"),
        (
            403,
            "Forbidden",
            "pods \"web\" is forbidden: unable to create new content in namespace shop because it is being terminated",
        ),
    ] {
        let cloud = cloud().await;
        let launched = launch(&cloud, "web-1").await;
        let tainted = node(
            "n1",
            json!({"metadata": {"finalizers": ["joiner.sh/termination"]},
                "spec": {"providerID": launched.provider_id,
                    "taints": [{"key": "joiner.sh/disrupted", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        let stores = Stores::new(
            vec![pod("shop", "web", "n1", json!({}))],
            vec![tainted],
            vec![deleting_claim(
                "web-1",
                &launched.instance_id,
                &launched.provider_id,
            )],
        );
        let (client, api) = mock_api(move |req| {
            if req.method == Method::POST && req.path == eviction_path("web") {
                Reply::error(code, reason, message)
            } else {
                Reply::not_found("unexpected")
            }
        });
        let ctx = context(client, &stores, &cloud, settings());
        let terminator = Terminator::new(BackoffPolicy {
            initial: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
        });
        terminator
            .reconcile(&ctx)
            .await
            .unwrap_or_else(|e| panic!("a {code} is retried later, not a failed pass: {e}"));
        terminator.reconcile(&ctx).await.expect("pass 2");
        // One attempt: the second pass waits for the backoff.
        assert_eq!(
            api.calls(),
            [("POST".to_string(), eviction_path("web"))],
            "{code}: {:?}",
            api.calls()
        );
        assert_eq!(
            instance_state(&cloud, &launched.instance_id).await,
            "running"
        );
    }
}
