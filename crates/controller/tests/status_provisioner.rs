//! Provisioner status through a real `kube::Client` on the scripted API server: the exact PATCH
//! for Ready=True with the resources of its nodes and for each Ready=False reason, no PATCH when
//! nothing changed, 404 and 409. The catalog is the one the AWS crate embeds (the live catalog's
//! fallback); the provider reads the stores, and `run` drives the real provider on moto.

mod support;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use joiner_aws::testing;
use joiner_aws::{AwsClients, ProviderError};
use joiner_controller::status::{self, provisioner, Outcome};
use joiner_controller::{ClusterState, Context, Settings};
use joiner_core::{CloudProvider, InstanceType};
use joiner_moto::MotoServer;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};
use support::{mock_api, obj, store, Reply};
use tokio_util::sync::CancellationToken;

const PATH: &str = "/apis/joiner.sh/v1alpha1/provisioners/web/status";
const EARLIER: &str = "2026-01-01T00:00:00Z";

fn catalog() -> &'static [InstanceType] {
    &joiner_aws::embedded::cached("us-east-1")
        .expect("embedded us-east-1")
        .instance_types
}

fn now() -> Timestamp {
    "2026-06-01T12:00:00Z".parse().expect("timestamp")
}

fn prov(spec: Value, status: Value) -> Provisioner {
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
        "metadata": {"name": "web", "generation": 4, "resourceVersion": "20"},
        "spec": spec, "status": status,
    }))
}

/// NodeTemplate `default`, Ready or not, with subnets in `zones`.
fn template(ready: bool, zones: &[&str]) -> NodeTemplate {
    let subnets: Vec<Value> = zones
        .iter()
        .enumerate()
        .map(|(i, z)| json!({"id": format!("subnet-{i}"), "zone": z}))
        .collect();
    let condition = if ready {
        json!({"type": "Ready", "status": "True", "reason": "Ready", "message": "ok",
               "lastTransitionTime": EARLIER})
    } else {
        json!({"type": "Ready", "status": "False", "reason": "SubnetsNotFound",
               "message": "NodeTemplate `default`: spec.subnetSelector {team: nobody}: no subnet matches",
               "lastTransitionTime": EARLIER})
    };
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default", "resourceVersion": "5"},
        "spec": {"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}},
        "status": {"subnets": subnets, "conditions": [condition]},
    }))
}

fn node(name: &str, provisioner: &str, cpu: &str, memory: &str, gpus: Option<&str>) -> Arc<Node> {
    let mut capacity =
        json!({"cpu": cpu, "memory": memory, "ephemeral-storage": "20Gi", "pods": "29"});
    if let Some(g) = gpus {
        capacity["nvidia.com/gpu"] = json!(g);
    }
    Arc::new(obj(json!({
        "metadata": {"name": name, "labels": {"joiner.sh/provisioner-name": provisioner}},
        "status": {"capacity": capacity},
    })))
}

fn echo(p: &Provisioner) -> impl FnMut(&support::Recorded) -> Reply {
    let base = serde_json::to_value(p).expect("serializes");
    move |req| {
        let mut stored = base.clone();
        stored["status"] = req.body["status"].clone();
        Reply::ok(stored)
    }
}

/// Reconciles `p` and returns the one PATCH body sent.
async fn patched(p: &Provisioner, templates: &[NodeTemplate], nodes: &[Arc<Node>]) -> Value {
    let (client, api) = mock_api(echo(p));
    let inputs = provisioner::Inputs {
        node_templates: templates,
        nodes,
        catalog: Some(catalog()),
    };
    let outcome = provisioner::reconcile_one(&client, p, &inputs, now())
        .await
        .expect("reconciles");
    assert!(outcome.is_patched(), "{outcome:?}");
    let writes = api.writes();
    assert_eq!(writes.len(), 1);
    assert!(writes[0].is(Method::PATCH, PATH), "{:?}", writes[0]);
    writes[0].body.clone()
}

fn ready(body: &Value) -> &Value {
    let c = body["status"]["conditions"].as_array().expect("conditions");
    assert_eq!(c.len(), 1, "{c:?}");
    &c[0]
}

#[tokio::test]
async fn ready_with_the_capacity_of_its_own_nodes() {
    let p = prov(json!({"providerRef": {"name": "default"}}), json!({}));
    let nodes = [
        node("a", "web", "2", "8Gi", None),
        node("b", "web", "4", "16Gi", Some("1")),
        node("c", "batch", "64", "256Gi", None),
    ];
    let body = patched(&p, &[template(true, &["us-east-1a"])], &nodes).await;
    assert_eq!(
        body["status"]["resources"],
        json!({"cpu": "6", "memory": "24Gi", "ephemeral-storage": "40Gi", "pods": "58",
               "nvidia.com/gpu": "1", "nodes": "2"})
    );
    let c = ready(&body);
    assert_eq!(c["type"], "Ready");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "Ready");
    assert_eq!(c["observedGeneration"], 4);
    assert_eq!(c["lastTransitionTime"], "2026-06-01T12:00:00Z");
    let message = c["message"].as_str().expect("message");
    assert!(
        message.starts_with("NodeTemplate `default` is ready; ")
            && message.ends_with(&format!(" of {} instance types match", catalog().len())),
        "{message}"
    );
}

/// status.warmPool belongs to the warm-pool reconciler: the status patch leaves it out, so a
/// status read before that reconciler's last write cannot put an older pool status back.
#[tokio::test]
async fn the_status_patch_leaves_the_warm_pool_status_alone() {
    let p = prov(
        json!({"providerRef": {"name": "default"}}),
        json!({"warmPool": {"desired": 2, "warming": 1, "ready": 0, "claimed": 0}}),
    );
    let nodes = [node("a", "web", "2", "8Gi", None)];
    let body = patched(&p, &[template(true, &["us-east-1a"])], &nodes).await;
    assert!(body["status"]["resources"].is_object(), "{body}");
    assert!(body["status"].get("warmPool").is_none(), "{body}");
}

#[tokio::test]
async fn each_unusable_provisioner_has_its_reason() {
    let ready_nt = template(true, &["us-east-1a", "us-east-1b"]);
    let cases = [
        (
            json!({"providerRef": {"name": "default"}, "weight": 200}),
            vec![ready_nt.clone()],
            "InvalidSpec",
            "spec.weight: weight 200 is outside 0–100".to_string(),
        ),
        (
            json!({}),
            vec![ready_nt.clone()],
            "NodeTemplateNotFound",
            "spec.providerRef: not set; nodes are launched with the NodeTemplate it names"
                .to_string(),
        ),
        (
            json!({"providerRef": {"name": "missing"}}),
            vec![ready_nt.clone()],
            "NodeTemplateNotFound",
            "spec.providerRef.name: NodeTemplate `missing` not found".to_string(),
        ),
        (
            json!({"providerRef": {"name": "default"}}),
            vec![template(false, &[])],
            "NodeTemplateNotReady",
            "spec.providerRef.name: NodeTemplate `default` is not ready: SubnetsNotFound: \
             NodeTemplate `default`: spec.subnetSelector {team: nobody}: no subnet matches"
                .to_string(),
        ),
        (
            json!({"providerRef": {"name": "default"}, "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["no-such.type"]}]}),
            vec![ready_nt.clone()],
            "NoInstanceTypeMatches",
            format!(
                "spec.requirements: none of the {n} instance types in the catalog satisfies the \
                 requirements (with the zones of NodeTemplate `default`): ",
                n = catalog().len()
            ),
        ),
        (
            // Only us-east-1c is allowed, and the template's subnets are in 1a and 1b.
            json!({"providerRef": {"name": "default"}, "requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1c"]}]}),
            vec![ready_nt.clone()],
            "NoInstanceTypeMatches",
            format!(
                "spec.requirements: none of the {n} instance types in the catalog satisfies the \
                 requirements (with the zones of NodeTemplate `default`): \
                 topology.kubernetes.io/zone excludes {n}",
                n = catalog().len()
            ),
        ),
    ];
    for (spec, templates, reason, message) in cases {
        let previous = json!({"conditions": [{"type": "Ready", "status": "True",
            "reason": "Ready", "message": "ok", "lastTransitionTime": EARLIER}]});
        let p = prov(spec, previous);
        let body = patched(&p, &templates, &[]).await;
        let c = ready(&body);
        assert_eq!(c["status"], "False", "{reason}");
        assert_eq!(c["reason"], reason);
        let got = c["message"].as_str().expect("message");
        if message.ends_with(": ") {
            // Types not offered in the template's zones are put on the zone key; the rest on
            // the instance-type requirement.
            assert!(got.starts_with(&message), "{got}");
            assert!(
                got.contains("node.kubernetes.io/instance-type excludes "),
                "{got}"
            );
        } else {
            assert_eq!(got, message);
        }
        assert_eq!(
            c["lastTransitionTime"], "2026-06-01T12:00:00Z",
            "{reason}: flipped"
        );
        assert_eq!(
            body["status"]["resources"],
            json!({"cpu": "0", "memory": "0", "ephemeral-storage": "0", "pods": "0", "nodes": "0"}),
            "no nodes: zero capacity"
        );
    }
}

#[tokio::test]
async fn nothing_is_sent_when_the_status_already_says_it_and_api_errors_are_handled() {
    let templates = [template(true, &["us-east-1a"])];
    let nodes = [node("a", "web", "2", "8Gi", None)];
    let p = prov(json!({"providerRef": {"name": "default"}}), json!({}));
    let body = patched(&p, &templates, &nodes).await;

    // The stored status, read back later: no request at all.
    let mut stored_json = serde_json::to_value(&p).expect("serializes");
    stored_json["status"] = body["status"].clone();
    let stored: Provisioner = obj(stored_json);
    let inputs = provisioner::Inputs {
        node_templates: &templates,
        nodes: &nodes,
        catalog: Some(catalog()),
    };
    let (client, api) = mock_api(|_| Reply::error(500, "InternalError", "must not be called"));
    let later: Timestamp = "2026-06-01T13:00:00Z".parse().expect("timestamp");
    let outcome = provisioner::reconcile_one(&client, &stored, &inputs, later)
        .await
        .expect("no request");
    assert!(matches!(outcome, Outcome::Unchanged), "{outcome:?}");
    assert!(api.requests().is_empty());

    // A second node: resources change, Ready stays True with its transition time.
    let more = [nodes[0].clone(), node("b", "web", "2", "8Gi", None)];
    let inputs = provisioner::Inputs {
        node_templates: &templates,
        nodes: &more,
        catalog: Some(catalog()),
    };
    let (client, api) = mock_api(|_| Reply::not_found("provisioners.joiner.sh \"web\""));
    let outcome = provisioner::reconcile_one(&client, &stored, &inputs, later)
        .await
        .expect("404 is not an error");
    assert!(matches!(outcome, Outcome::Gone), "{outcome:?}");
    let writes = api.writes();
    assert_eq!(writes.len(), 1);
    assert!(writes[0].is(Method::PATCH, PATH));
    assert_eq!(writes[0].body["status"]["resources"]["cpu"], "4");
    assert_eq!(
        ready(&writes[0].body)["lastTransitionTime"],
        "2026-06-01T12:00:00Z",
        "still True: the transition time is kept"
    );

    let (client, _api) =
        mock_api(|_| Reply::error(409, "Conflict", "the object has been modified"));
    let outcome = provisioner::reconcile_one(&client, &stored, &inputs, later)
        .await
        .expect("409 is retried on the next pass");
    assert!(matches!(outcome, Outcome::Conflict), "{outcome:?}");
}

fn state(provisioners: Vec<Provisioner>, templates: Vec<NodeTemplate>) -> ClusterState {
    ClusterState {
        pods: support::pod_store(Vec::new()).as_reader(),
        nodes: store::<Node>(vec![Node::clone(&node("a", "web", "2", "8Gi", None))]).as_reader(),
        daemonsets: store::<DaemonSet>(Vec::new()).as_reader(),
        provisioners: store(provisioners).as_reader(),
        node_templates: store(templates).as_reader(),
        node_claims: store::<NodeClaim>(Vec::new()).as_reader(),
        pdbs: store::<PodDisruptionBudget>(Vec::new()).as_reader(),
        namespaces: ClusterState::empty().namespaces,
        created: Default::default(),
        claim_history: Default::default(),
        volumes: joiner_controller::state::VolumeStores::empty(),
    }
}

#[tokio::test]
async fn the_provider_reads_the_stores_as_they_change() {
    let moto = MotoServer::session().expect("moto server");
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let p = prov(json!({"providerRef": {"name": "default"}}), json!({}));
    let nt = template(true, &["us-east-1a"]);
    let provisioners = store(vec![p]);
    let mut templates = store(vec![nt.clone()]);
    let mut state = state(vec![], vec![]);
    state.provisioners = provisioners.as_reader();
    state.node_templates = templates.as_reader();
    let (aws, _) = testing::provider_with_lookup(
        &clients,
        testing::provider_config("c1", "/joiner-test/service", "1.31"),
        Arc::new(state),
    );
    assert!(
        aws.instance_types("web").await.is_ok(),
        "the provider knows `web`"
    );
    // The NodeTemplate is deleted: the provider no longer launches for `web`, at once.
    templates.apply_watcher_event(&kube::runtime::watcher::Event::Delete(nt));
    let err = aws.instance_types("web").await.expect_err("no template");
    assert!(
        matches!(err, ProviderError::UnknownNodeTemplate { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_pass_resolves_the_template_then_readies_the_provisioner() {
    let moto = MotoServer::session().expect("moto server");
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    testing::environment(&clients, "c1", "/joiner-test/service", "1.31")
        .await
        .expect("environment");
    let p = prov(json!({"providerRef": {"name": "default"}}), json!({}));
    let nt: NodeTemplate = obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default", "generation": 1, "resourceVersion": "5"},
        "spec": {"subnetSelector": {"joiner.sh/discovery": "c1"},
                 "securityGroupSelector": {"joiner.sh/discovery": "c1"}},
    }));
    let nt_json = serde_json::to_value(&nt).expect("serializes");
    let p_json = serde_json::to_value(&p).expect("serializes");
    let (client, api) = mock_api(move |req| {
        let mut stored = if req.path.contains("/nodetemplates/") {
            nt_json.clone()
        } else {
            p_json.clone()
        };
        stored["status"] = req.body["status"].clone();
        if let Some(s) = stored["status"].as_object_mut() {
            s.retain(|_, v| !v.is_null());
        }
        Reply::ok(stored)
    });
    let stop = CancellationToken::new();
    let state = state(vec![p], vec![nt]);
    let (aws, _) = testing::provider_with_lookup(
        &clients,
        testing::provider_config("c1", "/joiner-test/service", "1.31"),
        Arc::new(state.clone()),
    );
    let aws = Arc::new(aws);
    let ctx = Arc::new(Context::new(
        client,
        state,
        aws.clone(),
        Settings::new("c1"),
    ));
    let task = tokio::spawn(status::run(ctx, aws.clone(), stop.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while api.writes().len() < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops when cancelled")
        .expect("run does not panic");

    let writes = api.writes();
    assert!(writes.len() >= 2, "{:?}", api.calls());
    assert!(writes[0].is(
        Method::PATCH,
        "/apis/joiner.sh/v1alpha1/nodetemplates/default/status"
    ));
    assert_eq!(ready(&writes[0].body)["status"], "True");
    assert!(writes[1].is(Method::PATCH, PATH));
    // Within the same pass the Provisioner sees the template's new status.
    let c = ready(&writes[1].body);
    assert_eq!(c["status"], "True", "{c}");
    assert_eq!(writes[1].body["status"]["resources"]["cpu"], "2");
    // And the provider reads the stores.
    assert!(aws.instance_types("web").await.is_ok());
}
