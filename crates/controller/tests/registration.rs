//! Registration through the scripted API: the one Node patch (labels, taints, finalizer, guarded
//! by resourceVersion; joiner's startup taint removed by it), the claim's status patch,
//! Initialized only once the scheduler could use the node (Ready, startup taints gone, extended
//! resources reported), a 409 or a failed `test` (422) left for the next pass, and any other
//! refusal reported and backed off.

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
                    // A Provisioner label the kubelet may not set itself (NodeRestriction):
                    // only registration puts it on the Node.
                    {"key": "node-role.kubernetes.io/web", "operator": "In", "values": [""]},
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

/// The launched claim web-1 beside its Node n1, Ready and not registered yet.
fn launched_beside_its_ready_node() -> Stores {
    let fresh = node(
        "n1",
        json!({"spec": {"providerID": "aws:///us-east-1a/i-0abc"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    Stores::new(
        vec![],
        vec![fresh],
        vec![launched_claim(json!([cond("Launched")]))],
    )
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
            // The API server applies the patch's taint list.
            if let Some(op) = req
                .body
                .as_array()
                .and_then(|ops| ops.iter().find(|op| op["path"] == "/spec/taints"))
            {
                n["spec"]["taints"] = op["value"].clone();
            }
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
                "node-role.kubernetes.io/web": "",
                "node.kubernetes.io/instance-type": "m5.large",
                "team": "web",
                "topology.kubernetes.io/zone": "us-east-1a"}},
            {"op": "add", "path": "/spec/taints", "value": [
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
    // joiner's startup taint went with the registration patch (CNI agents need not tolerate
    // it); the node is not Ready and keeps the claim's own startup taint: not Initialized.
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

/// A registered node in `n1` with `taints` and `allocatable`, Ready.
fn registered_node(taints: Value, allocatable: Value) -> k8s_openapi::api::core::v1::Node {
    node(
        "n1",
        json!({"metadata": {"labels": {"joiner.sh/nodeclaim": "web-1"},
                "finalizers": ["joiner.sh/termination"]},
            "spec": {"providerID": "aws:///us-east-1a/i-0abc", "taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": allocatable}}),
    )
}

/// Runs one registration pass over `node` and a registered claim requesting a GPU; returns the
/// writes.
async fn pass_over(node: k8s_openapi::api::core::v1::Node) -> Vec<support::Recorded> {
    let cloud = cloud().await;
    let mut claim = launched_claim(json!([cond("Launched"), cond("Registered")]));
    claim.spec.resources.requests.insert(
        "nvidia.com/gpu".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
    );
    let stores = Stores::new(vec![], vec![node.clone()], vec![claim]);
    let (client, api) = mock_api(move |req| {
        if req.is(Method::PATCH, NODES) {
            let mut n = serde_json::to_value(&node).expect("node");
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
    api.writes()
}

#[tokio::test]
async fn a_node_is_initialized_only_once_the_scheduler_could_use_it_for_the_claims_pods() {
    // A node registered by an older joiner still has joiner's startup taint: it goes, but the
    // claim's own startup taint (the CNI's) is there: not Initialized.
    let writes = pass_over(registered_node(
        json!([{"key": "joiner.sh/unregistered", "effect": "NoSchedule"},
               {"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]),
        json!({"cpu": "2", "nvidia.com/gpu": "1"}),
    ))
    .await;
    assert_eq!(writes.len(), 1, "{writes:#?}");
    assert_eq!(
        writes[0].body,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
            {"op": "add", "path": "/spec/taints", "value": [
                {"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]},
        ])
    );
    // Startup taint gone, but the GPU the claim's pods requested is not reported yet (the
    // device plugin is still starting): not Initialized.
    let writes = pass_over(registered_node(json!([]), json!({"cpu": "2"}))).await;
    assert!(writes.is_empty(), "{writes:#?}");
    let writes = pass_over(registered_node(
        json!([]),
        json!({"cpu": "2", "nvidia.com/gpu": "0"}),
    ))
    .await;
    assert!(writes.is_empty(), "{writes:#?}");
    // Ready, but Kubernetes' own starting taints are still on (the node lifecycle controller
    // lags Ready by seconds, or a busy control plane marked the node unreachable): the
    // scheduler would not place the claim's pods yet, so not Initialized.
    for lagging in [
        json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}),
        json!({"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}),
    ] {
        let writes = pass_over(registered_node(
            json!([lagging]),
            json!({"cpu": "2", "nvidia.com/gpu": "1"}),
        ))
        .await;
        assert!(writes.is_empty(), "{lagging}: {writes:#?}");
    }
    // Everything the scheduler needs is there: Initialized.
    let writes = pass_over(registered_node(
        json!([]),
        json!({"cpu": "2", "nvidia.com/gpu": "1"}),
    ))
    .await;
    assert_eq!(writes.len(), 1, "{writes:#?}");
    assert!(writes[0].is(Method::PATCH, STATUS));
    assert_eq!(
        condition_types(&writes[0].body),
        [
            ("Launched".to_string(), "True".to_string()),
            ("Registered".to_string(), "True".to_string()),
            ("Initialized".to_string(), "True".to_string())
        ]
    );
}

#[tokio::test]
async fn a_node_that_is_not_ready_is_not_initialized() {
    let mut n = registered_node(json!([]), json!({"cpu": "2", "nvidia.com/gpu": "1"}));
    if let Some(status) = n.status.as_mut() {
        status.conditions = Some(vec![k8s_openapi::api::core::v1::NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..Default::default()
        }]);
    }
    let writes = pass_over(n).await;
    assert!(writes.is_empty(), "{writes:#?}");
}

#[tokio::test]
async fn a_conflicting_node_patch_is_left_for_the_next_pass() {
    let cloud = cloud().await;
    let stores = launched_beside_its_ready_node();
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
async fn a_failed_resource_version_test_answered_422_is_a_conflict_too() {
    // A real API server answers a JSON patch whose `test` fails with 422, not 409.
    let cloud = cloud().await;
    let stores = launched_beside_its_ready_node();
    let (client, api) = mock_api(|req| {
        if req.is(Method::PATCH, NODES) {
            Reply::patch_test_failed()
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    registration::reconcile(&ctx)
        .await
        .expect("a failed test is not a failure");
    assert_eq!(api.calls(), [("PATCH".to_string(), NODES.to_string())]);
}

/// The Node patch refused for its content (a 422 that is no failed `test`): an error with a
/// Warning Event, `Registered=False`, a count, and a backoff, never a retry every pass; the
/// same refusal is reported once.
#[tokio::test]
async fn a_registration_patch_refused_as_invalid_is_reported_once_and_backed_off() {
    use joiner_controller::lifecycle::registration::Registrar;
    use joiner_controller::lifecycle::termination::eviction::BackoffPolicy;

    let cloud = cloud().await;
    let stores = launched_beside_its_ready_node();
    let (client, api) = mock_api(|req| {
        if req.is(Method::PATCH, NODES) {
            Reply::invalid(
                "Node",
                "n1",
                "metadata.labels",
                "web",
                "refused by an admission policy",
            )
        } else if req.is(Method::PATCH, STATUS) || req.method == Method::POST {
            Reply::ok(req.body.clone())
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    let registrar = Registrar::new(BackoffPolicy {
        initial: std::time::Duration::ZERO,
        max: std::time::Duration::ZERO,
    });
    let err = registrar
        .reconcile(&ctx)
        .await
        .expect_err("a refusal is an error of the pass");
    assert!(
        err.to_string().contains("refused by an admission policy"),
        "{err}"
    );
    let writes = api.writes();
    let event = writes
        .iter()
        .find(|w| w.method == Method::POST && w.path.ends_with("/events"))
        .expect("a Warning Event");
    assert_eq!(event.body["type"], "Warning");
    assert_eq!(event.body["reason"], "RegistrationRefused");
    let status = writes
        .iter()
        .find(|w| w.is(Method::PATCH, STATUS))
        .expect("the claim's condition");
    let registered = status.body["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Registered")
        .expect("Registered");
    assert_eq!(registered["status"], "False");
    assert_eq!(registered["reason"], "RegistrationRefused");
    let refused = |ctx: &joiner_controller::Context<_>| {
        ctx.metrics
            .registrations_refused
            .get_or_create(&ProvisionerLabels {
                provisioner: "web".into(),
            })
            .get()
    };
    assert_eq!(refused(&ctx), 1);

    // Retried (no backoff here), but the same refusal is not reported again.
    let before = api.writes().len();
    registrar.reconcile(&ctx).await.expect_err("still refused");
    let again: Vec<_> = api.writes()[before..].to_vec();
    assert_eq!(again.len(), 1, "only the Node patch again: {again:?}");
    assert!(again[0].is(Method::PATCH, NODES));
    assert_eq!(refused(&ctx), 2);

    // With a backoff, the next pass sends nothing at all.
    let (client, api) = mock_api(|req| {
        if req.is(Method::PATCH, NODES) {
            Reply::invalid("Node", "n1", "metadata.labels", "web", "refused")
        } else {
            Reply::ok(req.body.clone())
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    let registrar = Registrar::default();
    registrar.reconcile(&ctx).await.expect_err("refused");
    let sent = api.calls().len();
    registrar.reconcile(&ctx).await.expect("backing off");
    assert_eq!(api.calls().len(), sent, "nothing sent while backing off");
}

/// A claim carrying a label value no Node can take (written before its Provisioner's
/// validation refused it) is refused without sending the patch.
#[tokio::test]
async fn a_label_value_no_node_can_carry_is_refused_without_a_patch() {
    use joiner_controller::lifecycle::registration::Registrar;

    let cloud = cloud().await;
    let fresh = node(
        "n1",
        json!({"spec": {"providerID": "aws:///us-east-1a/i-0abc"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let mut claim = launched_claim(json!([cond("Launched")]));
    for r in claim
        .spec
        .requirements
        .iter_mut()
        .filter(|r| r.key == "team")
    {
        r.values = vec!["a/b".into()];
    }
    let stores = Stores::new(vec![], vec![fresh], vec![claim]);
    let (client, api) = mock_api(|req| Reply::ok(req.body.clone()));
    let ctx = context(client, &stores, &cloud, settings());
    let err = Registrar::default()
        .reconcile(&ctx)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("team=\"a/b\""), "{err}");
    assert!(
        !api.calls().iter().any(|(m, p)| m == "PATCH" && p == NODES),
        "the Node is not patched: {:?}",
        api.calls()
    );
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
