//! `ClusterState::snapshot` over reflector stores fed by hand, as a watcher would feed them.

use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use joiner_controller::ClusterState;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test object parses")
}

/// A store holding `items`, filled through the watcher's initial-list flow.
fn writer<K>(items: Vec<K>) -> Writer<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut w = Writer::default();
    w.apply_watcher_event(&Event::Init);
    for item in items {
        w.apply_watcher_event(&Event::InitApply(item));
    }
    w.apply_watcher_event(&Event::InitDone);
    w
}

fn pod(name: &str, spec: Value, status: Value) -> Pod {
    obj(json!({
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}},
        "spec": spec,
        "status": status,
    }))
}

fn containers(cpu: &str) -> Value {
    json!([{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}])
}

fn unschedulable() -> Value {
    json!({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]})
}

struct Fixture {
    state: ClusterState,
    // The writers own the stores' contents; they are kept so tests can apply further events.
    pods: Writer<Pod>,
    _nodes: Writer<Node>,
    _daemonsets: Writer<DaemonSet>,
    _provisioners: Writer<Provisioner>,
    _templates: Writer<NodeTemplate>,
    _claims: Writer<NodeClaim>,
    _pdbs: Writer<PodDisruptionBudget>,
}

fn fixture(pods: Vec<Pod>) -> Fixture {
    let node: Node = obj(json!({
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "us-east-1a"}},
        "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }));
    let bad_node: Node = obj(json!({
        "metadata": {"name": "n2"},
        "spec": {"taints": [{"key": "k", "effect": "Sometimes"}]},
    }));
    let ds: DaemonSet = obj(json!({
        "metadata": {"name": "logs", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "logs"}},
            "template": {"metadata": {"labels": {"app": "logs"}}, "spec": {"containers": containers("100m")}},
        },
    }));
    let prov: Provisioner = obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
        "metadata": {"name": "default"},
        "spec": {"providerRef": {"name": "default"}},
    }));
    let template: NodeTemplate = obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default"},
        "spec": {},
        "status": {"subnets": [{"id": "subnet-1", "zone": "us-east-1b"}]},
    }));
    let pods = writer(pods);
    let nodes = writer(vec![node, bad_node]);
    let daemonsets = writer(vec![ds]);
    let provisioners = writer(vec![prov]);
    let templates = writer(vec![template]);
    let claims = writer::<NodeClaim>(vec![]);
    let pdbs = writer::<PodDisruptionBudget>(vec![]);
    Fixture {
        state: ClusterState {
            pods: pods.as_reader(),
            nodes: nodes.as_reader(),
            daemonsets: daemonsets.as_reader(),
            provisioners: provisioners.as_reader(),
            node_templates: templates.as_reader(),
            node_claims: claims.as_reader(),
            pdbs: pdbs.as_reader(),
        },
        pods,
        _nodes: nodes,
        _daemonsets: daemonsets,
        _provisioners: provisioners,
        _templates: templates,
        _claims: claims,
        _pdbs: pdbs,
    }
}

#[test]
fn snapshot_keeps_unschedulable_and_bound_pods_and_reports_bad_objects() {
    let f = fixture(vec![
        pod(
            "waiting",
            json!({"containers": containers("500m")}),
            unschedulable(),
        ),
        pod(
            "running",
            json!({"nodeName": "n1", "containers": containers("1")}),
            json!({"phase": "Running"}),
        ),
        // Not yet tried by the kube-scheduler: not pending for joiner.
        pod(
            "fresh",
            json!({"containers": containers("1")}),
            json!({"phase": "Pending"}),
        ),
        pod(
            "done",
            json!({"nodeName": "n1", "containers": containers("1")}),
            json!({"phase": "Succeeded"}),
        ),
        pod(
            "bad",
            json!({"containers": containers("lots")}),
            unschedulable(),
        ),
    ]);
    let (snap, warnings) = f.state.snapshot();

    let names: Vec<&str> = snap.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["running", "waiting"]);
    let waiting = &snap.pods[1];
    assert_eq!(waiting.namespace, "shop");
    assert_eq!(waiting.requests.cpu, 500);
    assert_eq!(waiting.node_name, None);
    assert_eq!(snap.pods[0].node_name.as_deref(), Some("n1"));

    assert_eq!(snap.nodes.len(), 1);
    assert_eq!(snap.nodes[0].name, "n1");
    assert_eq!(snap.nodes[0].taints.len(), 1);
    assert_eq!(snap.daemonsets.len(), 1);
    assert_eq!(snap.daemonsets[0].pod.requests.cpu, 100);
    assert_eq!(snap.provisioners.len(), 1);
    assert_eq!(snap.provisioners[0].name, "default");

    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("Node n2: spec.taints[0].effect: unknown effect \"Sometimes\""),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[1].starts_with("Pod shop/bad: spec.containers[0].resources.requests.cpu:"),
        "{}",
        warnings[1]
    );
}

#[test]
fn snapshot_follows_watch_events() {
    let mut f = fixture(vec![]);
    assert!(f.state.snapshot().0.pods.is_empty());

    let waiting = pod(
        "waiting",
        json!({"containers": containers("2")}),
        unschedulable(),
    );
    f.pods.apply_watcher_event(&Event::Apply(waiting.clone()));
    assert_eq!(f.state.snapshot().0.pods.len(), 1);

    // Once bound it counts on its node; once deleted it is gone.
    let mut bound = waiting;
    if let Some(spec) = bound.spec.as_mut() {
        spec.node_name = Some("n1".into());
    }
    f.pods.apply_watcher_event(&Event::Apply(bound.clone()));
    let (snap, _) = f.state.snapshot();
    assert_eq!(snap.pods[0].node_name.as_deref(), Some("n1"));
    f.pods.apply_watcher_event(&Event::Delete(bound));
    assert!(f.state.snapshot().0.pods.is_empty());
}

#[test]
fn provisioners_are_narrowed_to_their_template_subnet_zones() {
    let f = fixture(vec![]);
    let (snap, _) = f.state.snapshot();
    let zones = format!("{:?}", snap.provisioners[0].requirements);
    assert!(zones.contains("us-east-1b"), "{zones}");
}
