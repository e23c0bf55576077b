//! `ClusterState::snapshot` over reflector stores fed by hand, as a watcher would feed them.

use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use std::collections::BTreeMap;

use joiner_controller::pod_record::PodRecord;
use joiner_controller::ClusterState;
use joiner_core::{CapacityType, InstanceType, Offering, Resources};
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
    joiner_controller::watch::filled(items)
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
    pods: Writer<joiner_controller::pod_record::PodRecord>,
    _nodes: Writer<Node>,
    _daemonsets: Writer<DaemonSet>,
    _provisioners: Writer<Provisioner>,
    _templates: Writer<NodeTemplate>,
    _claims: Writer<NodeClaim>,
    _pdbs: Writer<PodDisruptionBudget>,
}

fn fixture(pods: Vec<Pod>) -> Fixture {
    fixture_with(pods, vec![], vec![])
}

fn fixture_with(pods: Vec<Pod>, extra_nodes: Vec<Node>, claims: Vec<NodeClaim>) -> Fixture {
    fixture_with_provisioner(pods, extra_nodes, claims, json!({}))
}

/// The fixture with `kubelet` as the Provisioner's `kubeletConfiguration`.
fn fixture_with_provisioner(
    pods: Vec<Pod>,
    extra_nodes: Vec<Node>,
    claims: Vec<NodeClaim>,
    kubelet: Value,
) -> Fixture {
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
        "spec": {"providerRef": {"name": "default"}, "kubeletConfiguration": kubelet},
    }));
    let template: NodeTemplate = obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default"},
        "spec": {},
        "status": {"subnets": [{"id": "subnet-1", "zone": "us-east-1b"}]},
    }));
    let pods = writer(pods.into_iter().map(PodRecord::from).collect());
    let mut all_nodes = vec![node, bad_node];
    all_nodes.extend(extra_nodes);
    let nodes = writer(all_nodes);
    let daemonsets = writer(vec![ds]);
    let provisioners = writer(vec![prov]);
    let templates = writer(vec![template]);
    let claims = writer(claims);
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
            namespaces: ClusterState::empty().namespaces,
            created: Default::default(),
            claim_history: Default::default(),
            volumes: joiner_controller::state::VolumeStores::empty(),
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
    f.pods
        .apply_watcher_event(&Event::Apply(PodRecord::from(&waiting)));
    assert_eq!(f.state.snapshot().0.pods.len(), 1);

    // Once bound it counts on its node; once deleted it is gone.
    let mut bound = waiting;
    if let Some(spec) = bound.spec.as_mut() {
        spec.node_name = Some("n1".into());
    }
    f.pods
        .apply_watcher_event(&Event::Apply(PodRecord::from(&bound)));
    let (snap, _) = f.state.snapshot();
    assert_eq!(snap.pods[0].node_name.as_deref(), Some("n1"));
    f.pods
        .apply_watcher_event(&Event::Delete(PodRecord::from(bound)));
    assert!(f.state.snapshot().0.pods.is_empty());
}

#[test]
fn provisioners_are_narrowed_to_their_template_subnet_zones() {
    let f = fixture(vec![]);
    let (snap, _) = f.state.snapshot();
    let zones = format!("{:?}", snap.provisioners[0].requirements);
    assert!(zones.contains("us-east-1b"), "{zones}");
}

#[test]
fn nominated_and_daemonset_pods_are_not_provisionable() {
    let mut nominated = unschedulable();
    nominated["nominatedNodeName"] = json!("n1");
    let mut daemon = pod(
        "logs-x",
        json!({"containers": containers("100m")}),
        unschedulable(),
    );
    daemon.metadata.owner_references = Some(vec![obj(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "logs", "uid": "d1",
        "controller": true,
    }))]);
    let waiting = pod(
        "waiting",
        json!({"containers": containers("1")}),
        unschedulable(),
    );
    let preempting = pod(
        "preempting",
        json!({"containers": containers("1")}),
        nominated,
    );
    assert!(joiner_controller::state::is_provisionable(
        &PodRecord::from(&waiting)
    ));
    assert!(!joiner_controller::state::is_provisionable(
        &PodRecord::from(&preempting)
    ));
    assert!(!joiner_controller::state::is_provisionable(
        &PodRecord::from(&daemon)
    ));
    // The rule joiner plan follows too: a pod with scheduling gates is not the scheduler's yet.
    let gated = pod(
        "gated",
        json!({"containers": containers("1"), "schedulingGates": [{"name": "example.com/quota"}]}),
        unschedulable(),
    );
    assert!(!joiner_controller::state::is_provisionable(
        &PodRecord::from(&gated)
    ));
    let f = fixture(vec![waiting, preempting, daemon, gated]);
    let (snap, _) = f.state.snapshot();
    let names: Vec<&str> = snap.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["waiting"]);
}

#[test]
fn a_daemonset_is_charged_what_its_running_pod_requests() {
    // The template asks 100m and 1Gi; a LimitRange or webhook made the running pod 300m.
    let mut running = pod(
        "logs-x",
        json!({"nodeName": "n1", "containers": containers("300m")}),
        json!({"phase": "Running"}),
    );
    running.metadata.namespace = Some("kube-system".into());
    running.metadata.owner_references = Some(vec![obj(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "logs", "uid": "d1",
        "controller": true,
    }))]);
    let f = fixture(vec![running]);
    let (snap, _) = f.state.snapshot();
    assert_eq!(snap.daemonsets.len(), 1);
    assert_eq!(snap.daemonsets[0].pod.requests.cpu, 300);
    assert_eq!(snap.daemonsets[0].pod.requests.memory, 1 << 30);
}

#[test]
fn in_flight_nodes_are_sized_with_their_provisioners_kubelet_settings() {
    // 500m system-reserved on m5.large (2000m, of which the catalog keeps 100m for the
    // kubelet): 1400m allocatable, less the 100m logs daemon.
    let claims = vec![claim(
        "default-aaaaa",
        json!({"status": {"instanceType": "m5.large", "zone": "us-east-1a"}}),
    )];
    let f = fixture_with_provisioner(
        vec![],
        vec![],
        claims,
        json!({"systemReserved": {"cpu": "500m"}}),
    );
    let (snap, warnings) = f.state.snapshot_with_catalog(&catalog());
    assert!(
        warnings.iter().all(|w| !w.contains("aaaaa")),
        "{warnings:?}"
    );
    let a = snap
        .nodes
        .iter()
        .find(|n| n.name == "default-aaaaa")
        .expect("in flight");
    assert_eq!(a.allocatable.cpu, 2000 - 100 - 500 - 100);
    assert_eq!(
        f.state.kubelet_settings("default").system_reserved.cpu,
        Some(500)
    );
}

fn offering(zone: &str, price: f64) -> Offering {
    Offering {
        zone: zone.into(),
        capacity_type: CapacityType::OnDemand,
        price,
        price_estimated: false,
        available: true,
    }
}

fn instance_type(name: &str, cpu: i64, price: f64) -> InstanceType {
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/arch".to_string(), "amd64".to_string());
    labels.insert(
        "karpenter.k8s.aws/instance-family".to_string(),
        "m5".to_string(),
    );
    labels.insert(
        "karpenter.k8s.aws/instance-cpu".to_string(),
        (cpu / 1000).to_string(),
    );
    InstanceType {
        name: name.into(),
        labels,
        capacity: Resources::new(cpu, 8 << 30, 20 << 30, 29),
        allocatable: Resources::new(cpu - 100, 6 << 30, 17 << 30, 29),
        offerings: vec![offering("us-east-1a", price), offering("us-east-1b", price)],
        provider_keys: joiner_aws::labels::INSTANCE_LABEL_KEYS,
    }
}

fn catalog() -> Vec<InstanceType> {
    vec![
        instance_type("m5.xlarge", 4000, 0.192),
        instance_type("m5.large", 2000, 0.096),
    ]
}

fn claim(name: &str, extra: Value) -> NodeClaim {
    let mut v = json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {
            "provisionerName": "default",
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
            ],
        },
    });
    if let (Some(base), Some(more)) = (v.as_object_mut(), extra.as_object()) {
        for (k, val) in more {
            if k == "spec" {
                for (sk, sv) in val.as_object().into_iter().flatten() {
                    base["spec"][sk] = sv.clone();
                }
            } else if k == "metadata" {
                for (mk, mv) in val.as_object().into_iter().flatten() {
                    base["metadata"][mk] = mv.clone();
                }
            } else {
                base.insert(k.clone(), val.clone());
            }
        }
    }
    obj(v)
}

#[test]
fn unregistered_claims_are_in_flight_nodes_sized_from_the_catalog() {
    let claims = vec![
        // Not launched yet: the cheapest type of its requirement, labels every candidate shares.
        claim("default-aaaaa", json!({})),
        // Launched as m5.xlarge in us-east-1a.
        claim(
            "default-bbbbb",
            json!({"status": {"instanceType": "m5.xlarge", "zone": "us-east-1a",
                              "capacityType": "on-demand", "providerID": "aws:///us-east-1a/i-2"}}),
        ),
        // Its status carries the allocatable the node reported.
        claim(
            "default-ccccc",
            json!({"status": {"instanceType": "m5.large", "allocatable": {"cpu": "1500m", "memory": "4Gi", "pods": "20"}}}),
        ),
        // A taint the logs DaemonSet does not tolerate: no daemon overhead.
        claim(
            "default-ddddd",
            json!({"spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}],
                            "startupTaints": [{"key": "joiner.sh/unready", "effect": "NoSchedule"}]}}),
        ),
        // Registered (a Node named as its status says), and being deleted: not in flight.
        claim("default-eeeee", json!({"status": {"nodeName": "n1"}})),
        claim(
            "default-fffff",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["joiner.sh/termination"]}}),
        ),
        // Launched as a type the catalog does not know, with no allocatable: cannot be sized.
        claim(
            "default-ggggg",
            json!({"status": {"instanceType": "x9.huge"}}),
        ),
    ];
    let f = fixture_with(vec![], vec![], claims);

    let (plain, _) = f.state.snapshot();
    assert_eq!(plain.nodes.len(), 1, "without a catalog no claim is a node");

    let (snap, warnings) = f.state.snapshot_with_catalog(&catalog());
    let names: Vec<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "default-aaaaa",
            "default-bbbbb",
            "default-ccccc",
            "default-ddddd",
            "n1"
        ]
    );
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "NodeClaim default-ggggg: status.instanceType: instance type \"x9.huge\" is not in the catalog"
        )),
        "{warnings:?}"
    );

    let a = &snap.nodes[0];
    // Planned with m5.large's room (the cheapest, minus the 100m logs daemon), but counted
    // against its Provisioner's limits as m5.xlarge, the largest type the cloud may launch.
    assert_eq!(a.allocatable.cpu, 1900 - 100);
    assert_eq!(a.capacity.cpu, 4000);
    assert_eq!(a.labels["kubernetes.io/arch"], "amd64");
    assert_eq!(a.labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(a.labels["joiner.sh/provisioner-name"], "default");
    assert_eq!(a.labels["joiner.sh/nodeclaim"], "default-aaaaa");
    assert_eq!(a.labels["kubernetes.io/hostname"], "default-aaaaa");
    assert_eq!(a.labels["karpenter.k8s.aws/instance-family"], "m5");
    assert!(
        !a.labels.contains_key("karpenter.k8s.aws/instance-cpu"),
        "the candidates differ on it: {:?}",
        a.labels
    );
    assert!(!a.labels.contains_key("node.kubernetes.io/instance-type"));
    assert!(!a.labels.contains_key("topology.kubernetes.io/zone"));

    let b = &snap.nodes[1];
    assert_eq!(b.allocatable.cpu, 3900 - 100);
    assert_eq!(b.labels["node.kubernetes.io/instance-type"], "m5.xlarge");
    assert_eq!(b.labels["topology.kubernetes.io/zone"], "us-east-1a");
    assert_eq!(b.labels["karpenter.k8s.aws/instance-cpu"], "4");

    let c = &snap.nodes[2];
    assert_eq!(c.allocatable.cpu, 1500 - 100);
    assert_eq!(c.allocatable.pods, 20 - 1, "the daemon takes a pod slot");

    let d = &snap.nodes[3];
    assert_eq!(
        d.allocatable.cpu, 1900,
        "the daemon does not tolerate the taint"
    );
    assert_eq!(d.taints.len(), 1, "startup taints are not planned around");
    assert_eq!(d.taints[0].key, "gpu");
}

#[test]
fn a_registered_node_of_an_uninitialized_claim_is_planned_without_its_starting_taints() {
    let startup = json!({"spec": {
        "taints": [{"key": "team", "value": "web", "effect": "NoSchedule"}],
        "startupTaints": [{"key": "joiner.sh/unready", "effect": "NoSchedule"}],
    }});
    let mut starting = claim("default-hhhhh", startup.clone());
    starting.status = Some(obj(json!({
        "instanceType": "m5.large", "providerID": "aws:///us-east-1a/i-8",
        "conditions": [{"type": "Registered", "status": "True", "reason": "R", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    })));
    let mut ready = claim("default-iiiii", startup);
    ready.status = Some(obj(json!({
        "instanceType": "m5.large", "providerID": "aws:///us-east-1a/i-9",
        "conditions": [{"type": "Initialized", "status": "True", "reason": "R", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    })));
    let taints = json!([
        {"key": "team", "value": "web", "effect": "NoSchedule"},
        {"key": "joiner.sh/unready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "joiner.sh/unregistered", "effect": "NoSchedule"},
    ]);
    // Registered a moment ago: no allocatable reported yet.
    let new_node: Node = obj(json!({
        "metadata": {"name": "ip-10-0-1-8"},
        "spec": {"providerID": "aws:///us-east-1a/i-8", "taints": taints},
    }));
    let old_node: Node = obj(json!({
        "metadata": {"name": "ip-10-0-1-9"},
        "spec": {"providerID": "aws:///us-east-1a/i-9", "taints": taints},
        "status": {"allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"}},
    }));
    let f = fixture_with(vec![], vec![new_node, old_node], vec![starting, ready]);

    let (plain, _) = f.state.snapshot();
    let plain_new = plain
        .nodes
        .iter()
        .find(|n| n.name == "ip-10-0-1-8")
        .expect("node");
    assert_eq!(
        plain_new.taints.len(),
        4,
        "the plain snapshot shows the node as it is"
    );

    let (snap, warnings) = f.state.snapshot_with_catalog(&catalog());
    assert!(
        warnings.iter().all(|w| !w.contains("default-hhhhh")),
        "{warnings:?}"
    );
    let names: Vec<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        ["ip-10-0-1-8", "ip-10-0-1-9", "n1"],
        "registered claims are not in flight"
    );
    let new = &snap.nodes[0];
    let keys: Vec<&str> = new.taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, ["team"]);
    assert_eq!(
        new.allocatable.cpu, 1900,
        "the claim's type (the logs daemon does not tolerate its taint)"
    );
    let old = &snap.nodes[1];
    assert_eq!(
        old.taints.len(),
        4,
        "an initialized claim's node is taken as it is"
    );
    assert_eq!(old.allocatable.cpu, 2000);
}

/// The windows between a node turning Ready and Kubernetes taking its starting taints off:
/// a node of a claim not yet initialized carrying `unreachable` (a busy control plane), and a
/// Ready node whose claim is Initialized but whose `not-ready`/`unreachable` NoSchedule the
/// node lifecycle controller has not removed yet. Neither refuses the pods it was bought for,
/// and neither is a disruption candidate before its claim is initialized.
#[test]
fn ready_nodes_are_planned_without_the_lifecycle_controllers_lagging_taints() {
    let mut starting = claim("default-hhhhh", json!({}));
    starting.status = Some(obj(json!({
        "instanceType": "m5.large", "providerID": "aws:///us-east-1a/i-8",
        "conditions": [{"type": "Registered", "status": "True", "reason": "R", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    })));
    let mut ready = claim("default-iiiii", json!({}));
    ready.status = Some(obj(json!({
        "instanceType": "m5.large", "providerID": "aws:///us-east-1a/i-9",
        "conditions": [{"type": "Initialized", "status": "True", "reason": "R", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    })));
    let lagging = json!([
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
    ]);
    let ready_status = json!({"conditions": [{"type": "Ready", "status": "True"}],
        "allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"}});
    let new_node: Node = obj(json!({
        "metadata": {"name": "ip-10-0-1-8"},
        "spec": {"providerID": "aws:///us-east-1a/i-8", "taints": lagging},
        "status": ready_status,
    }));
    let old_node: Node = obj(json!({
        "metadata": {"name": "ip-10-0-1-9"},
        "spec": {"providerID": "aws:///us-east-1a/i-9", "taints": lagging},
        "status": ready_status,
    }));
    // A node that is not Ready keeps them: it really refuses pods.
    let down: Node = obj(json!({
        "metadata": {"name": "ip-10-0-1-7"},
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}],
            "allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"}},
    }));
    let f = fixture_with(
        vec![],
        vec![new_node, old_node, down],
        vec![starting, ready],
    );
    let (snap, _) = f.state.snapshot_with_catalog(&catalog());
    let node = |name: &str| {
        snap.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    let keys =
        |name: &str| -> Vec<String> { node(name).taints.iter().map(|t| t.key.clone()).collect() };
    assert!(keys("ip-10-0-1-8").is_empty(), "{:?}", keys("ip-10-0-1-8"));
    assert!(
        !node("ip-10-0-1-8").life.initialized,
        "its claim is not initialized"
    );
    assert_eq!(
        keys("ip-10-0-1-9"),
        ["node.cloudprovider.kubernetes.io/uninitialized"],
        "only the lifecycle controller's lag is planned around on an initialized claim's node"
    );
    assert_eq!(keys("ip-10-0-1-7"), ["node.kubernetes.io/unreachable"]);
}

#[test]
fn a_registered_node_is_planned_with_the_labels_its_claim_promises_before_registration_adds_them() {
    // The kubelet may not set node-role.kubernetes.io/worker (NodeRestriction): registration
    // adds it a moment after the Node appears. In between, a pod selecting it must see this
    // node, not buy another.
    let mut starting = claim(
        "default-hhhhh",
        json!({"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
            {"key": "node-role.kubernetes.io/worker", "operator": "In", "values": ["true"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
        ]}}),
    );
    starting.status = Some(obj(json!({
        "instanceType": "m5.large", "providerID": "aws:///us-east-1b/i-8", "zone": "us-east-1a",
    })));
    let node: Node = obj(json!({
        "metadata": {"name": "ip-10-0-1-8", "labels": {
            "node.kubernetes.io/instance-type": "m5.large",
            "topology.kubernetes.io/zone": "us-east-1b",
        }},
        "spec": {"providerID": "aws:///us-east-1b/i-8"},
        "status": {"allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"}},
    }));
    let f = fixture_with(vec![], vec![node], vec![starting]);
    let (snap, _) = f.state.snapshot_with_catalog(&catalog());
    let planned = snap
        .nodes
        .iter()
        .find(|n| n.name == "ip-10-0-1-8")
        .expect("node");
    let label = |k: &str| planned.labels.get(k).map(String::as_str);
    assert_eq!(label("node-role.kubernetes.io/worker"), Some("true"));
    assert_eq!(label("joiner.sh/provisioner-name"), Some("default"));
    assert_eq!(label("joiner.sh/nodeclaim"), Some("default-hhhhh"));
    assert_eq!(
        label("topology.kubernetes.io/zone"),
        Some("us-east-1b"),
        "what the node reports stands"
    );
    let (plain, _) = f.state.snapshot();
    let as_is = plain
        .nodes
        .iter()
        .find(|n| n.name == "ip-10-0-1-8")
        .expect("node");
    assert!(!as_is.labels.contains_key("node-role.kubernetes.io/worker"));
}

#[test]
fn a_gpu_node_whose_device_plugin_has_not_reported_is_planned_with_its_gpus() {
    // Registered and Ready, but the NVIDIA device plugin has not reported nvidia.com/gpu yet:
    // planned with the GPU of its type, so its pods are not bought a second node.
    let mut gpu_type = instance_type("g4dn.xlarge", 4000, 0.526);
    gpu_type.capacity.set("nvidia.com/gpu", 1);
    gpu_type.allocatable.set("nvidia.com/gpu", 1);
    let mut starting = claim(
        "default-ggggg",
        json!({"spec": {"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}}),
    );
    starting.status = Some(obj(json!({
        "instanceType": "g4dn.xlarge", "providerID": "aws:///us-east-1a/i-7",
        "conditions": [{"type": "Registered", "status": "True", "reason": "R", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    })));
    let node: Node = obj(json!({
        "metadata": {"name": "ip-10-0-1-7"},
        "spec": {"providerID": "aws:///us-east-1a/i-7"},
        "status": {"allocatable": {"cpu": "3900m", "memory": "14Gi", "pods": "29"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }));
    let f = fixture_with(vec![], vec![node], vec![starting]);
    let (snap, warnings) = f.state.snapshot_with_catalog(&[gpu_type]);
    assert!(
        warnings.iter().all(|w| !w.contains("default-ggggg")),
        "{warnings:?}"
    );
    let planned = snap
        .nodes
        .iter()
        .find(|n| n.name == "ip-10-0-1-7")
        .expect("node");
    assert_eq!(planned.allocatable.get("nvidia.com/gpu"), 1);
    assert_eq!(
        planned.allocatable.cpu, 3900,
        "what the node reports stands; only the missing resource is filled in"
    );
}

/// Volume stores fed as the watchers feed them: each object passed through the watch module's
/// strip function first, so the test also shows stripping keeps what topology reads.
fn volume_stores(
    claims: Vec<Value>,
    volumes: Vec<Value>,
    classes: Vec<Value>,
) -> (
    joiner_controller::state::VolumeStores,
    Writer<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    Writer<k8s_openapi::api::core::v1::PersistentVolume>,
    Writer<k8s_openapi::api::storage::v1::StorageClass>,
) {
    use joiner_controller::watch::{strip_volume, strip_volume_claim};
    let claims = writer(
        claims
            .into_iter()
            .map(|v| {
                let mut c = obj(v);
                strip_volume_claim(&mut c);
                c
            })
            .collect(),
    );
    let volumes = writer(
        volumes
            .into_iter()
            .map(|v| {
                let mut pv = obj(v);
                strip_volume(&mut pv);
                pv
            })
            .collect(),
    );
    let classes = writer(classes.into_iter().map(obj).collect());
    let stores = joiner_controller::state::VolumeStores {
        claims: claims.as_reader(),
        volumes: volumes.as_reader(),
        classes: classes.as_reader(),
        csi_nodes: joiner_controller::state::VolumeStores::empty().csi_nodes,
        attachments: joiner_controller::state::VolumeStores::empty().attachments,
    };
    (stores, claims, volumes, classes)
}

fn claim_pod(name: &str, claim: &str) -> Pod {
    pod(
        name,
        json!({
            "containers": containers("500m"),
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        }),
        unschedulable(),
    )
}

fn zones_required(pod: &joiner_core::Pod) -> Vec<Vec<String>> {
    pod.node_terms
        .iter()
        .map(|t| {
            t.get("topology.kubernetes.io/zone")
                .and_then(|r| r.in_values())
                .map(<[String]>::to_vec)
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn a_pending_pod_is_confined_to_the_zone_its_bound_volume_is_in() {
    let mut f = fixture(vec![
        claim_pod("db-0", "data-db-0"),
        claim_pod("cache", "cache-data"),
        claim_pod("scratch", "scratch-data"),
        claim_pod("orphan", "no-such-claim"),
    ]);
    let (stores, _c, _v, _s) = volume_stores(
        vec![
            json!({"metadata": {"name": "data-db-0", "namespace": "shop",
                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                   "spec": {"volumeName": "pv-1", "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "20Gi"}}},
                   "status": {"phase": "Bound"}}),
            json!({"metadata": {"name": "cache-data", "namespace": "shop"},
                   "spec": {"storageClassName": "gp3-1a"}}),
            json!({"metadata": {"name": "scratch-data", "namespace": "shop"}, "spec": {}}),
        ],
        vec![json!({"metadata": {"name": "pv-1"},
                    "spec": {"capacity": {"storage": "20Gi"},
                             "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                             "nodeAffinity": {"required": {"nodeSelectorTerms": [
                                 {"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone",
                                                        "operator": "In", "values": ["us-east-1b"]}]}]}}}})],
        vec![
            json!({"metadata": {"name": "gp3", "annotations": {
                       "storageclass.kubernetes.io/is-default-class": "true"}},
                   "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"}),
            json!({"metadata": {"name": "gp3-1a"}, "provisioner": "ebs.csi.aws.com",
                   "volumeBindingMode": "WaitForFirstConsumer",
                   "allowedTopologies": [{"matchLabelExpressions": [
                       {"key": "topology.ebs.csi.aws.com/zone", "values": ["us-east-1a"]}]}]}),
        ],
    );
    f.state.volumes = stores;
    let (snap, _) = f.state.snapshot();
    let by_name = |n: &str| {
        snap.pods
            .iter()
            .find(|p| p.name == n)
            .unwrap_or_else(|| panic!("{n} in the snapshot"))
    };

    let db = by_name("db-0");
    assert_eq!(zones_required(db), vec![vec!["us-east-1b".to_string()]]);
    assert_eq!(db.volume_zones.len(), 1);
    assert_eq!(db.volume_zones[0].claim, "shop/data-db-0");
    // Unbound, its class names the zone the volume will be made in.
    assert_eq!(
        zones_required(by_name("cache")),
        vec![vec!["us-east-1a".to_string()]]
    );
    // The default class waits for the pod and names no zone: the pod is free.
    assert!(by_name("scratch").node_terms.is_empty());
    assert!(by_name("scratch").volume_zones.is_empty());
    // A claim that does not exist (yet) holds the pod, naming the claim, as the
    // kube-scheduler holds it; nothing is bought for it.
    let orphan = by_name("orphan");
    assert!(orphan.node_terms.is_empty());
    assert_eq!(
        orphan.volume_hold.as_deref(),
        Some("volume claim shop/no-such-claim does not exist; the pod waits for it")
    );
    assert!(by_name("db-0").volume_hold.is_none());
    // The stores' pods are untouched: the next snapshot reads the claims afresh.
    let stored = f
        .pods
        .as_reader()
        .state()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("db-0"))
        .expect("stored");
    assert_eq!(
        stored.claims,
        vec![joiner_apis::convert::volumes::PodClaim::named("data-db-0")]
    );
    assert!(stored.core.as_ref().expect("core").node_terms.is_empty());
}

#[test]
fn nodes_take_their_csi_nodes_attach_caps_and_pods_name_the_volumes_they_attach() {
    // The kube-scheduler's NodeVolumeLimits reads a node's CSINode; the pods' claims name
    // the driver through their volume (CSI or in-tree EBS) or, unbound, their class.
    let mut running = claim_pod("db-0", "data-db-0");
    running.spec.as_mut().expect("spec").node_name = Some("n1".into());
    running.status = Some(obj(json!({"phase": "Running"})));
    let mut f = fixture(vec![
        running,
        claim_pod("db-1", "data-db-1"),
        claim_pod("legacy", "old-data"),
    ]);
    let (mut stores, _c, _v, _s) = volume_stores(
        vec![
            json!({"metadata": {"name": "data-db-0", "namespace": "shop"},
                   "spec": {"volumeName": "pv-0"}, "status": {"phase": "Bound"}}),
            json!({"metadata": {"name": "data-db-1", "namespace": "shop"},
                   "spec": {"storageClassName": "gp2"}}),
            json!({"metadata": {"name": "old-data", "namespace": "shop"},
                   "spec": {"volumeName": "pv-old"}, "status": {"phase": "Bound"}}),
        ],
        vec![
            json!({"metadata": {"name": "pv-0"},
                   "spec": {"capacity": {"storage": "20Gi"},
                            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0",
                                    "fsType": "ext4"}}}),
            json!({"metadata": {"name": "pv-old"},
                   "spec": {"awsElasticBlockStore": {"volumeID": "vol-9"}}}),
        ],
        vec![
            json!({"metadata": {"name": "gp2"}, "provisioner": "kubernetes.io/aws-ebs",
                    "volumeBindingMode": "WaitForFirstConsumer"}),
        ],
    );
    let csi = writer::<k8s_openapi::api::storage::v1::CSINode>(vec![
        obj(json!({"metadata": {"name": "n1"}, "spec": {"drivers": [
            {"name": "ebs.csi.aws.com", "nodeID": "i-0abc", "allocatable": {"count": 25},
             "topologyKeys": ["topology.ebs.csi.aws.com/zone"]},
            {"name": "efs.csi.aws.com", "nodeID": "i-0abc"}]}})),
        obj(
            json!({"metadata": {"name": "gone-node"}, "spec": {"drivers": [
            {"name": "ebs.csi.aws.com", "nodeID": "i-0def", "allocatable": {"count": -3}}]}}),
        ),
    ]);
    stores.csi_nodes = csi.as_reader();
    f.state.volumes = stores;
    let (snap, warnings) = f.state.snapshot();
    let n1 = snap.nodes.iter().find(|n| n.name == "n1").expect("n1");
    assert_eq!(
        n1.volume_limits.iter().collect::<Vec<_>>(),
        [(&"ebs.csi.aws.com".to_string(), &25)]
    );
    assert!(
        warnings.contains(
            &"CSINode gone-node: spec.drivers[0].allocatable.count: must be at least 0, not -3"
                .to_string()
        ),
        "{warnings:?}"
    );
    let attached = |n: &str| -> Vec<(String, String)> {
        snap.pods
            .iter()
            .find(|p| p.name == n)
            .unwrap_or_else(|| panic!("{n} in the snapshot"))
            .attachments()
            .iter()
            .map(|a| (a.driver.clone(), a.claim.clone()))
            .collect()
    };
    let ebs = |claim: &str| vec![("ebs.csi.aws.com".to_string(), claim.to_string())];
    assert_eq!(attached("db-0"), ebs("shop/data-db-0"));
    assert_eq!(attached("db-1"), ebs("shop/data-db-1"));
    assert_eq!(attached("legacy"), ebs("shop/old-data"));
}

#[test]
fn a_second_user_of_a_read_write_once_pod_claim_is_held_naming_the_first() {
    // The kube-scheduler refuses a pod whose ReadWriteOncePod claim a scheduled pod uses:
    // nothing is bought for it. The watch keeps the claim's access modes for this.
    let mut owner = claim_pod("db-0", "data");
    owner.spec.as_mut().expect("spec").node_name = Some("n1".into());
    owner.status = Some(obj(json!({"phase": "Running"})));
    let mut f = fixture(vec![owner, claim_pod("db-0-copy", "data")]);
    let (stores, _c, _v, _s) = volume_stores(
        vec![json!({"metadata": {"name": "data", "namespace": "shop"},
                    "spec": {"volumeName": "pv-1", "accessModes": ["ReadWriteOncePod"]},
                    "status": {"phase": "Bound"}})],
        vec![json!({"metadata": {"name": "pv-1"}, "spec": {}})],
        vec![],
    );
    f.state.volumes = stores;
    let (snap, _) = f.state.snapshot();
    let hold = |n: &str| {
        snap.pods
            .iter()
            .find(|p| p.name == n)
            .unwrap_or_else(|| panic!("{n} in the snapshot"))
            .volume_hold
            .clone()
    };
    assert_eq!(hold("db-0"), None);
    assert_eq!(
        hold("db-0-copy").as_deref(),
        Some(
            "volume claim shop/data is ReadWriteOncePod and pod shop/db-0 uses it; one pod at \
             a time may use it, so this one waits"
        )
    );
}

#[test]
fn a_claim_that_binds_after_the_pod_confines_the_next_snapshot() {
    let f = fixture(vec![claim_pod("db-0", "data-db-0")]);
    let mut state = f.state.clone();
    let (stores, mut claims, _v, _s) = volume_stores(
        vec![json!({"metadata": {"name": "data-db-0", "namespace": "shop"}, "spec": {}})],
        vec![json!({"metadata": {"name": "pv-1"},
                    "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "topology.kubernetes.io/zone",
                                               "operator": "In", "values": ["us-east-1c"]}]}]}}}})],
        vec![],
    );
    state.volumes = stores;
    let (before, _) = state.snapshot();
    assert!(before.pods[0].node_terms.is_empty());
    // Unbound without a class to provision it: the pod waits for the claim to bind.
    assert!(before.pods[0]
        .volume_hold
        .as_deref()
        .is_some_and(|r| r.contains("shop/data-db-0")));

    let mut bound: k8s_openapi::api::core::v1::PersistentVolumeClaim = obj(json!({
        "metadata": {"name": "data-db-0", "namespace": "shop"},
        "spec": {"volumeName": "pv-1"},
    }));
    joiner_controller::watch::strip_volume_claim(&mut bound);
    claims.apply_watcher_event(&Event::Apply(bound));
    let (after, _) = state.snapshot();
    assert_eq!(
        zones_required(&after.pods[0]),
        vec![vec!["us-east-1c".to_string()]]
    );
    assert!(after.pods[0].volume_hold.is_none());
}

#[test]
fn a_claims_phase_survives_the_watch_so_a_lost_claim_holds_its_pod() {
    let mut claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = obj(json!({
        "metadata": {"name": "data", "namespace": "shop"},
        "spec": {"volumeName": "pv-1", "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Lost", "capacity": {"storage": "1Gi"}},
    }));
    joiner_controller::watch::strip_volume_claim(&mut claim);
    let status = claim.status.expect("status kept");
    assert_eq!(status.phase.as_deref(), Some("Lost"));
    assert!(status.capacity.is_none(), "only the phase is kept");
}

#[test]
fn a_volume_keeps_its_zone_labels_and_deletion_mark_through_the_watch() {
    use joiner_controller::watch::{strip_volume, strip_volume_claim};
    let mut pv: k8s_openapi::api::core::v1::PersistentVolume = obj(json!({
        "metadata": {"name": "pv-old", "labels": {
            "topology.kubernetes.io/zone": "us-east-1a__us-east-1b", "team": "x"},
            "annotations": {"pv.kubernetes.io/provisioned-by": "kubernetes.io/aws-ebs"}},
        "spec": {"capacity": {"storage": "1Gi"}},
    }));
    strip_volume(&mut pv);
    let labels = pv.metadata.labels.clone().expect("zone labels kept");
    assert_eq!(labels.len(), 1, "{labels:?}");
    assert!(pv.metadata.annotations.is_none());
    let mut claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = obj(json!({
        "metadata": {"name": "c", "namespace": "shop", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"volumeName": "pv-old"},
    }));
    strip_volume_claim(&mut claim);
    assert!(claim.metadata.deletion_timestamp.is_some());

    let f = fixture(vec![claim_pod("old", "c")]);
    let mut state = f.state.clone();
    let (stores, mut claims, _v, _s) = volume_stores(
        vec![
            json!({"metadata": {"name": "c", "namespace": "shop"}, "spec": {"volumeName": "pv-old"}}),
        ],
        vec![json!({"metadata": {"name": "pv-old", "labels": {
            "topology.kubernetes.io/zone": "us-east-1a__us-east-1b"}}, "spec": {}})],
        vec![],
    );
    state.volumes = stores;
    let (snap, _) = state.snapshot();
    assert_eq!(
        zones_required(&snap.pods[0]),
        vec![vec!["us-east-1a".to_string(), "us-east-1b".to_string()]]
    );
    claims.apply_watcher_event(&Event::Apply(claim));
    let (snap, _) = state.snapshot();
    assert!(snap.pods[0]
        .volume_hold
        .as_deref()
        .is_some_and(|r| r.contains("being deleted")));
}

#[test]
fn provisioners_being_deleted_or_not_ready_are_not_planned_with() {
    let f = fixture(vec![]);
    let mut state = f.state.clone();
    let prov = |name: &str, extra: Value| -> Provisioner {
        let mut v = json!({
            "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
            "metadata": {"name": name},
            "spec": {"providerRef": {"name": "default"}},
        });
        for (k, val) in extra.as_object().cloned().unwrap_or_default() {
            if k == "metadata" {
                for (mk, mv) in val.as_object().cloned().unwrap_or_default() {
                    v["metadata"][mk] = mv;
                }
            } else {
                v[k] = val;
            }
        }
        obj(v)
    };
    let provisioners = writer(vec![
        prov(
            "ready",
            json!({"status": {"conditions": [{"type": "Ready", "status": "True",
            "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        ),
        prov("fresh", json!({})),
        prov(
            "leaving",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["x"]}}),
        ),
        prov(
            "broken",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False",
            "reason": "NodeTemplateNotFound", "message": "NodeTemplate missing does not exist",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        ),
    ]);
    state.provisioners = provisioners.as_reader();
    let (snap, warnings) = state.snapshot();
    let names: Vec<&str> = snap.provisioners.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["fresh", "ready"],
        "a Provisioner without status yet is used"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w == "Provisioner leaving is not planned with: it is being deleted"),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w
            == "Provisioner broken is not planned with: it is not Ready (NodeTemplateNotFound: NodeTemplate missing does not exist)"),
        "{warnings:?}"
    );
}

#[test]
fn namespace_selectors_read_the_watched_namespaces_labels() {
    // A pending pod in `shop` repels `app: cache` pods in namespaces labeled `team: data`; the
    // Namespace store says `ops` is one of them.
    let cache = pod(
        "cache",
        json!({"nodeName": "n1", "containers": containers("100m")}),
        json!({"phase": "Running"}),
    );
    let mut cache = cache;
    cache.metadata.namespace = Some("ops".into());
    let web = pod(
        "web",
        json!({"containers": containers("100m"), "affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "cache"}},
            "namespaceSelector": {"matchLabels": {"team": "data"}},
        }]}}}),
        unschedulable(),
    );
    let mut f = fixture(vec![cache, web]);
    let namespaces = writer(vec![
        obj::<k8s_openapi::api::core::v1::Namespace>(
            json!({"metadata": {"name": "ops", "labels": {"team": "data"}}}),
        ),
        obj(json!({"metadata": {"name": "shop"}})),
    ]);
    f.state.namespaces = namespaces.as_reader();
    let (snap, _) = f.state.snapshot();
    assert_eq!(snap.namespace_labels["ops"]["team"], "data");
    let web = snap.pods.iter().find(|p| p.name == "web").expect("web");
    assert_eq!(
        web.affinity[0].namespaces,
        ["ops"],
        "the selector resolved to the labeled namespace"
    );
    drop(namespaces);
}

#[test]
fn warm_pool_members_count_against_their_provisioners_limits() {
    let member = |name: &str, extra: Value| {
        let mut c = claim(name, extra);
        c.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("joiner.sh/warm-pool".into(), "default".into());
        c
    };
    let claims = vec![
        // Sized by its type in the catalog: 4 cpu.
        member(
            "default-warm1",
            json!({"status": {"instanceType": "m5.xlarge"}}),
        ),
        // Sized by the capacity it recorded: 2 cpu.
        member(
            "default-warm2",
            json!({"status": {"instanceType": "m5.large", "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"}}}),
        ),
        // Being removed: no longer counted.
        member(
            "default-warm3",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["joiner.sh/termination"]},
                   "status": {"instanceType": "m5.xlarge"}}),
        ),
        // Of a type the catalog does not know: reported, not counted.
        member(
            "default-warm4",
            json!({"status": {"instanceType": "x9.huge"}}),
        ),
    ];
    let f = fixture_with(vec![], vec![], claims);
    let (snap, warnings) = f.state.snapshot_with_catalog(&catalog());
    let prov = &snap.provisioners[0];
    assert_eq!(prov.held.get("cpu"), 6000);
    assert_eq!(prov.held.get(joiner_core::NODES_LIMIT), 2);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("default-warm4") && w.contains("limits")),
        "{warnings:?}"
    );
    // Members are no nodes: nothing is planned onto them.
    assert!(!snap
        .nodes
        .iter()
        .any(|n| n.name.starts_with("default-warm")));
    let used = joiner_core::scheduling::pass::limits_used(&snap, prov);
    assert_eq!(used.get("cpu"), 6000);
    assert_eq!(used.get(joiner_core::NODES_LIMIT), 2);
}
