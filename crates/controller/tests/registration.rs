//! Registration through the scripted API: the one Node patch (labels, taints, finalizer, guarded
//! by resourceVersion), the claim's status patch, the startup taint removed once Ready, and a 409
//! left for the next pass.

mod lifecycle_fixture;
mod support;

use http::Method;
use joiner_controller::lifecycle::registration;
use joiner_controller::metrics::ProvisionerLabels;
use lifecycle_fixture::{claim, cloud, context, node, settings, Stores};
use serde_json::{json, Value};
use support::{mock_api, Reply};

const NODES: &str = "/api/v1/nodes/n1";
const STATUS: &str = "/apis/joiner.sh/v1alpha1/nodeclaims/web-1/status";

fn launched_claim(conditions: Value) -> joiner_apis::NodeClaim {
    claim(
        "web-1",
        json!({
            "spec": {"provisionerName": "web",
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "c5.large"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]},
                    {"key": "team", "operator": "In", "values": ["web"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]}],
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]},
            "status": {"providerID": "aws:///us-east-1a/i-0abc", "instanceID": "i-0abc",
                "instanceType": "m5.large", "zone": "us-east-1a", "capacityType": "on-demand",
                "conditions": conditions},
        }),
    )
}

fn cond(type_: &str) -> Value {
    json!({"type": type_, "status": "True", "reason": "R", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn condition_types(body: &Value) -> Vec<(String, String)> {
    body["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_string(),
                c["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_new_node_gets_the_claims_labels_taints_and_finalizer_and_the_claim_is_registered() {
    let cloud = cloud().await;
    let registered_node = node(
        "n1",
        json!({"spec": {"providerID": "aws:///us-east-1a/i-0abc",
            "taints": [{"key": "joiner.sh/unregistered", "effect": "NoSchedule"},
                       {"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]},
            "metadata": {"labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    );
    let stores = Stores::new(
        vec![],
        vec![registered_node.clone()],
        vec![launched_claim(json!([cond("Launched")]))],
    );
    let reply_node = registered_node.clone();
    let (client, api) = mock_api(move |req| {
        if req.is(Method::PATCH, NODES) {
            let mut n = serde_json::to_value(&reply_node).expect("node");
            n["metadata"]["resourceVersion"] = json!("6");
            n["metadata"]["finalizers"] = json!(["joiner.sh/termination"]);
            n["metadata"]["labels"]["joiner.sh/nodeclaim"] = json!("web-1");
            Reply::ok(n)
        } else if req.is(Method::PATCH, STATUS) {
            let mut c = serde_json::to_value(launched_claim(json!([]))).expect("claim");
            c["status"] = req.body["status"].clone();
            Reply::ok(c)
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    registration::reconcile(&ctx).await.expect("pass");

    let writes = api.writes();
    assert_eq!(writes.len(), 2, "{writes:#?}");
    assert!(writes[0].is(Method::PATCH, NODES));
    assert_eq!(
        writes[0].body,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
            {"op": "add", "path": "/metadata/labels", "value": {
                "joiner.sh/nodeclaim": "web-1",
                "joiner.sh/provisioner-name": "web",
                "karpenter.sh/capacity-type": "on-demand",
                "kubernetes.io/hostname": "n1",
                "node.kubernetes.io/instance-type": "m5.large",
                "team": "web",
                "topology.kubernetes.io/zone": "us-east-1a"}},
            {"op": "add", "path": "/spec/taints", "value": [
                {"key": "joiner.sh/unregistered", "effect": "NoSchedule"},
                {"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"},
                {"key": "dedicated", "value": "web", "effect": "NoSchedule"}]},
            {"op": "add", "path": "/metadata/finalizers", "value": ["joiner.sh/termination"]},
        ])
    );
    assert!(writes[1].is(Method::PATCH, STATUS));
    assert_eq!(writes[1].body["metadata"]["resourceVersion"], "10");
    assert_eq!(writes[1].body["status"]["nodeName"], "n1");
    assert_eq!(
        condition_types(&writes[1].body),
        [
            ("Launched".to_string(), "True".to_string()),
            ("Registered".to_string(), "True".to_string())
        ]
    );
    // The node is not Ready: the startup taint stays, the claim is not Initialized.
    assert!(writes
        .iter()
        .all(|w| !w.body.to_string().contains("Initialized")));
    let registered = ctx
        .metrics
        .claims_registered
        .get_or_create(&ProvisionerLabels {
            provisioner: "web".into(),
        })
        .get();
    assert_eq!(registered, 1);
}

#[tokio::test]
async fn a_ready_node_loses_the_unregistered_taint_only_and_the_claim_is_initialized() {
    let cloud = cloud().await;
    let ready_node = node(
        "n1",
        json!({"metadata": {"labels": {"joiner.sh/nodeclaim": "web-1"},
                "finalizers": ["joiner.sh/termination"]},
            "spec": {"providerID": "aws:///us-east-1a/i-0abc",
                "taints": [{"key": "joiner.sh/unregistered", "effect": "NoSchedule"},
                           {"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let stores = Stores::new(
        vec![],
        vec![ready_node.clone()],
        vec![launched_claim(json!([
            cond("Launched"),
            cond("Registered")
        ]))],
    );
    let (client, api) = mock_api(move |req| {
        if req.is(Method::PATCH, NODES) {
            let mut n = serde_json::to_value(&ready_node).expect("node");
            n["spec"]["taints"] =
                json!([{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]);
            Reply::ok(n)
        } else if req.is(Method::PATCH, STATUS) {
            Reply::ok(serde_json::to_value(launched_claim(json!([]))).expect("claim"))
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    registration::reconcile(&ctx).await.expect("pass");

    let writes = api.writes();
    assert_eq!(writes.len(), 2, "{writes:#?}");
    assert_eq!(
        writes[0].body,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
            {"op": "add", "path": "/spec/taints", "value": [
                {"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]},
        ])
    );
    assert!(writes[1].is(Method::PATCH, STATUS));
    assert_eq!(
        condition_types(&writes[1].body),
        [
            ("Launched".to_string(), "True".to_string()),
            ("Registered".to_string(), "True".to_string()),
            ("Initialized".to_string(), "True".to_string())
        ]
    );
    // Already registered: not counted again.
    let registered = ctx
        .metrics
        .claims_registered
        .get_or_create(&ProvisionerLabels {
            provisioner: "web".into(),
        })
        .get();
    assert_eq!(registered, 0);
}

#[tokio::test]
async fn a_conflicting_node_patch_is_left_for_the_next_pass() {
    let cloud = cloud().await;
    let fresh = node(
        "n1",
        json!({"spec": {"providerID": "aws:///us-east-1a/i-0abc"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let stores = Stores::new(
        vec![],
        vec![fresh],
        vec![launched_claim(json!([cond("Launched")]))],
    );
    let (client, api) = mock_api(|req| {
        if req.is(Method::PATCH, NODES) {
            Reply::error(409, "Conflict", "the object has been modified")
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    registration::reconcile(&ctx)
        .await
        .expect("a conflict is not a failure");
    let calls = api.calls();
    assert_eq!(calls, [("PATCH".to_string(), NODES.to_string())]);
    let registered = ctx
        .metrics
        .claims_registered
        .get_or_create(&ProvisionerLabels {
            provisioner: "web".into(),
        })
        .get();
    assert_eq!(registered, 0);
}

#[tokio::test]
async fn claims_without_a_node_and_nodes_of_other_claims_are_not_touched() {
    let cloud = cloud().await;
    let other = node(
        "n2",
        json!({"spec": {"providerID": "aws:///us-east-1a/i-0other"}}),
    );
    let stores = Stores::new(
        vec![],
        vec![other],
        vec![launched_claim(json!([cond("Launched")]))],
    );
    let (client, api) = mock_api(|_| Reply::not_found("unexpected"));
    let ctx = context(client, &stores, &cloud, settings());
    registration::reconcile(&ctx).await.expect("pass");
    assert!(api.requests().is_empty(), "{:?}", api.calls());
}
