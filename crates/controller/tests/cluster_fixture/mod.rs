//! Shared by the disruption and interruption tests: joiner's nodes and claims on `FakeCloud`,
//! a scripted API server that stores NodeClaims, and a `Context` over both.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::Method;
use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use joiner_controller::pod_record::PodRecord;
use joiner_controller::{ClusterState, Context, Settings};
use joiner_core::testing::catalog::catalog;
use joiner_core::testing::FakeCloud;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::store::Writer;
use serde_json::{json, Value};

use crate::lifecycle_fixture::{claim, merge, node, pod};
use crate::support::{mock_api, obj, store, stored, MockApi, Recorded, Reply};

pub const CLAIMS: &str = "/apis/joiner.sh/v1alpha1/nodeclaims";

/// Consolidation on, Aggressive, at once; on-demand nodes of the test catalog.
pub fn provisioner() -> Provisioner {
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
        "metadata": {"name": "web"},
        "spec": {
            "providerRef": {"name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            "consolidation": {"enabled": true, "policy": "Aggressive", "consolidateAfter": "0s"},
        },
    }))
}

/// Cores and GiB of each test-catalog type used here.
pub fn size(itype: &str) -> (i64, i64) {
    match itype {
        "m5.xlarge" => (4, 16),
        "m5.4xlarge" => (16, 64),
        "c5.large" => (2, 4),
        other => panic!("no size for {other}"),
    }
}

/// A Ready node `name` of `itype` launched by Provisioner web for claim `web-<name>`, on
/// instance `i-<name>`.
pub fn joiner_node(name: &str, itype: &str, provider_id: &str) -> Node {
    let (cpu, gib) = size(itype);
    node(
        name,
        json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z", "labels": {
                "node.kubernetes.io/instance-type": itype,
                "topology.kubernetes.io/zone": "z-a",
                "karpenter.sh/capacity-type": "on-demand",
                "joiner.sh/provisioner-name": "web",
                "joiner.sh/nodeclaim": format!("web-{name}"),
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            }},
            "spec": {"providerID": provider_id},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "capacity": {"cpu": cpu.to_string(), "memory": format!("{gib}Gi"), "pods": "58"},
                "allocatable": {"cpu": format!("{}m", cpu * 1000 - 70), "memory": format!("{}Mi", gib * 1024 - 512), "pods": "58"},
            },
        }),
    )
}

/// The claim `web-<name>` of a registered, initialized node.
pub fn joiner_claim(name: &str, itype: &str, provider_id: &str) -> NodeClaim {
    claim(
        &format!("web-{name}"),
        json!({"status": {"providerID": provider_id, "instanceType": itype, "zone": "z-a",
        "capacityType": "on-demand", "nodeName": name,
        "conditions": [
            {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]}}),
    )
}

pub fn running(name: &str, on: &str, cpu: &str) -> Pod {
    pod(
        "shop",
        name,
        on,
        json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}),
    )
}

/// An API server holding NodeClaims: creates, status and metadata writes, deletes and Events; Node
/// patches are answered with the node unchanged. While `fail_deletes` is above zero a claim
/// DELETE fails with 500 (and counts it down).
pub fn api_server(
    seed: &[NodeClaim],
    fail_deletes: Arc<AtomicUsize>,
) -> impl FnMut(&Recorded) -> Reply {
    let mut claims: HashMap<String, Value> = seed
        .iter()
        .map(|c| {
            (
                c.name().to_string(),
                serde_json::to_value(c).expect("claim"),
            )
        })
        .collect();
    let mut created = 0;
    let mut node_taints: HashMap<String, Value> = HashMap::new();
    move |req: &Recorded| {
        let item = req
            .path
            .strip_prefix(CLAIMS)
            .and_then(|p| p.strip_prefix('/'));
        if req.is(Method::POST, CLAIMS) {
            created += 1;
            let body = stored(req, &format!("uid-new-{created}"));
            let name = body["metadata"]["name"].as_str().unwrap_or_default();
            claims.insert(name.to_string(), body.clone());
            return Reply::created(body);
        }
        match (&req.method, item) {
            (&Method::PATCH, Some(p)) if p.ends_with("/status") => {
                let name = p.trim_end_matches("/status");
                let Some(claim) = claims.get_mut(name) else {
                    return Reply::not_found(name);
                };
                merge(claim, json!({"status": req.body["status"].clone()}));
                Reply::ok(claim.clone())
            }
            (&Method::PATCH, Some(name)) => {
                let Some(claim) = claims.get_mut(name) else {
                    return Reply::not_found(name);
                };
                merge(claim, json!({"metadata": req.body["metadata"].clone()}));
                Reply::ok(claim.clone())
            }
            (&Method::DELETE, Some(_))
                if fail_deletes
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok() =>
            {
                Reply::error(500, "InternalError", "the API server failed")
            }
            (&Method::DELETE, Some(name)) => match claims.remove(name) {
                Some(_) => Reply::success(),
                None => Reply::not_found(name),
            },
            (&Method::POST, _) if req.path.ends_with("/events") => {
                Reply::created(stored(req, "event-uid"))
            }
            (&Method::PATCH, _) if req.path.starts_with("/api/v1/nodes/") => {
                let name = req.path.trim_start_matches("/api/v1/nodes/");
                // A JSON patch that sets the taint list: remembered, and read back by a GET.
                if let Some(taints) = req.body.as_array().and_then(|ops| {
                    ops.iter()
                        .find(|op| op["path"] == "/spec/taints")
                        .map(|op| op["value"].clone())
                }) {
                    node_taints.insert(name.to_string(), taints);
                }
                Reply::ok(node_answer(name, &node_taints))
            }
            (&Method::GET, _) if req.path.starts_with("/api/v1/nodes/") => {
                let name = req.path.trim_start_matches("/api/v1/nodes/");
                Reply::ok(node_answer(name, &node_taints))
            }
            _ => Reply::not_found(&req.path),
        }
    }
}

/// Node `name` as the API server answers it: a Ready c5.large with the taints the patches so
/// far set, and a resourceVersion.
fn node_answer(name: &str, taints: &HashMap<String, Value>) -> Value {
    let mut v =
        serde_json::to_value(joiner_node(name, "c5.large", "fake:///z-a/i-x")).expect("node");
    v["metadata"]["resourceVersion"] = json!("2");
    if let Some(t) = taints.get(name) {
        v["spec"]["taints"] = t.clone();
    }
    v
}

pub struct Harness {
    pub ctx: Context<FakeCloud>,
    pub api: MockApi,
    pub cloud: Arc<FakeCloud>,
    pub pods: Writer<PodRecord>,
    pub nodes: Writer<Node>,
    pub claims: Writer<NodeClaim>,
    pub provisioners: Writer<Provisioner>,
    pub node_templates: Writer<NodeTemplate>,
    /// Claim DELETEs still to fail.
    pub fail_deletes: Arc<AtomicUsize>,
}

pub fn harness(nodes: Vec<Node>, claims: Vec<NodeClaim>, pods: Vec<Pod>) -> Harness {
    harness_with(nodes, claims, pods, vec![])
}

pub fn harness_with(
    nodes: Vec<Node>,
    claims: Vec<NodeClaim>,
    pods: Vec<Pod>,
    node_templates: Vec<NodeTemplate>,
) -> Harness {
    harness_full(nodes, claims, pods, node_templates, vec![provisioner()])
}

pub fn harness_full(
    nodes: Vec<Node>,
    claims: Vec<NodeClaim>,
    pods: Vec<Pod>,
    node_templates: Vec<NodeTemplate>,
    provisioners: Vec<Provisioner>,
) -> Harness {
    let fail_deletes = Arc::new(AtomicUsize::new(0));
    let (client, api) = mock_api(api_server(&claims, fail_deletes.clone()));
    let node_templates = store(node_templates);
    let pods = store(pods.into_iter().map(PodRecord::from).collect());
    let nodes = store(nodes);
    let claims = store(claims);
    let provisioners = store(provisioners);
    let mut state = ClusterState::empty();
    state.pods = pods.as_reader();
    state.nodes = nodes.as_reader();
    state.node_claims = claims.as_reader();
    state.provisioners = provisioners.as_reader();
    state.node_templates = node_templates.as_reader();
    let cloud = Arc::new(FakeCloud::new(catalog()));
    let ctx = Context::new(client, state, cloud.clone(), Settings::new("c1"));
    Harness {
        ctx,
        api,
        cloud,
        pods,
        nodes,
        claims,
        provisioners,
        node_templates,
        fail_deletes,
    }
}

impl Harness {
    /// The Events posted so far: (involved kind, reason, message).
    pub fn events(&self) -> Vec<(String, String, String)> {
        self.api
            .requests()
            .into_iter()
            .filter(|r| r.method == Method::POST && r.path.ends_with("/events"))
            .map(|r| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    text(&r.body["involvedObject"]["kind"]),
                    text(&r.body["reason"]),
                    text(&r.body["message"]),
                )
            })
            .collect()
    }

    /// The claims deleted so far.
    pub fn deleted(&self) -> Vec<String> {
        self.api
            .requests()
            .into_iter()
            .filter(|r| r.method == Method::DELETE)
            .filter_map(|r| {
                r.path
                    .strip_prefix(&format!("{CLAIMS}/"))
                    .map(str::to_string)
            })
            .collect()
    }
}

pub fn merge_node(n: &mut Node, extra: Value) {
    let mut v = serde_json::to_value(&*n).expect("node");
    merge(&mut v, extra);
    *n = obj(v);
}
