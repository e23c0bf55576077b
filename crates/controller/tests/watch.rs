//! The reflectors' strip functions keep what the decisions read, and readiness waits for every
//! store's initial list.

mod support;

use std::time::Duration;

use joiner_apis::convert;
use joiner_controller::pod_record::PodRecord;
use joiner_controller::watch::{self, strip_daemon_set, strip_node, LAST_APPLIED};
use joiner_controller::ClusterState;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;
use support::{obj, store};

/// A pod with everything a real one carries: env, mounts, probes, commands, volumes,
/// managedFields, kubectl's annotation, container statuses, and every field the simulation
/// reads (requests, sidecar, host port, node selector and affinity, pod anti-affinity,
/// tolerations, spread, priority, overhead, owner).
fn full_pod() -> serde_json::Value {
    let container = |name: &str, cpu: &str, port: Option<i32>| {
        let mut c = json!({
            "name": name, "image": "nginx:1.27", "command": ["/bin/sh"], "args": ["-c", "run"],
            "env": [{"name": "A", "value": "x".repeat(200)}],
            "envFrom": [{"configMapRef": {"name": "cfg"}}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
            "readinessProbe": {"httpGet": {"path": "/", "port": 80}},
            "securityContext": {"runAsNonRoot": true},
            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        });
        if let Some(p) = port {
            c["ports"] = json!([{"containerPort": p, "hostPort": p, "protocol": "TCP"}]);
        }
        c
    };
    let mut sidecar = container("proxy", "100m", None);
    sidecar["restartPolicy"] = json!("Always");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-1", "namespace": "shop", "uid": "u-1",
            "labels": {"app": "web"},
            "annotations": {LAST_APPLIED: "{\"big\": true}", "joiner.sh/do-not-disrupt": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                                  "uid": "rs", "controller": true}],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "containers": [container("app", "500m", Some(8080)), container("log", "50m", None)],
            "initContainers": [container("migrate", "2", None), sidecar],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "nodeSelector": {"kubernetes.io/arch": "arm64"},
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}
                ]}},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
                ]},
            },
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}],
            "priority": 1000,
            "overhead": {"cpu": "10m"},
            "securityContext": {"fsGroup": 2000},
            "imagePullSecrets": [{"name": "registry"}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            "containerStatuses": [{"name": "app", "image": "nginx", "imageID": "", "ready": false,
                                    "restartCount": 0}],
        },
    })
}

#[test]
fn a_pod_record_holds_the_full_pods_conversion_and_what_a_drain_reads() {
    let original: Pod = obj(full_pod());
    let record = PodRecord::from(&original);

    let before = convert::pod(&original).expect("the full pod converts");
    let after = record
        .core
        .clone()
        .expect("the record holds the conversion");
    assert_eq!(after, before);
    assert!(!after.host_ports.is_empty(), "the host port was kept");
    assert_eq!(after.priority, 1000);

    // What a drain and the reconcilers read.
    assert_eq!(
        record.key(),
        format!(
            "{}/{}",
            original.metadata.namespace.as_deref().unwrap_or_default(),
            original.metadata.name.as_deref().unwrap_or_default()
        )
    );
    assert_eq!(record.metadata.uid, original.metadata.uid);
    assert_eq!(record.annotation("joiner.sh/do-not-disrupt"), Some("true"));
    // What was dropped: everything else of the metadata, and the spec and status themselves.
    assert!(record.metadata.managed_fields.is_none());
    assert!(
        record.metadata.labels.is_none(),
        "labels live in the core pod"
    );
    let annotations = record.metadata.annotations.clone().unwrap_or_default();
    assert!(!annotations.contains_key(LAST_APPLIED));
    assert_eq!(annotations.len(), 1, "{annotations:?}");
}

#[test]
fn a_stripped_daemon_set_and_node_convert_the_same() {
    let ds: DaemonSet = obj(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system",
                     "managedFields": [{"manager": "helm", "operation": "Update"}]},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [full_pod()["spec"]["containers"][0].clone()],
                         "volumes": [{"name": "data", "hostPath": {"path": "/var"}}],
                         "tolerations": [{"operator": "Exists"}]},
            },
        },
    }));
    let mut lean = ds.clone();
    strip_daemon_set(&mut lean);
    assert_eq!(
        convert::daemon_set(&lean, "kube-system", "agent").expect("converts"),
        convert::daemon_set(&ds, "kube-system", "agent").expect("converts")
    );
    assert!(lean.metadata.managed_fields.is_none());
    assert!(lean
        .spec
        .template
        .spec
        .as_ref()
        .is_some_and(|s| s.volumes.is_none()));

    let node: Node = obj(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/arch": "amd64"}},
        "spec": {"providerID": "aws:///us-east-1a/i-1",
                 "taints": [{"key": "joiner.sh/unregistered", "effect": "NoExecute"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
            "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["registry/a:1", "registry/a@sha256:0"], "sizeBytes": 1000}],
        },
    }));
    let mut lean = node.clone();
    strip_node(&mut lean);
    assert_eq!(
        convert::node(&lean, "n1").expect("converts"),
        convert::node(&node, "n1").expect("converts")
    );
    let status = lean.status.as_ref().expect("status kept");
    assert!(status.images.is_none());
    assert!(status.conditions.is_some());
    assert_eq!(
        lean.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some("aws:///us-east-1a/i-1")
    );
}

fn state_with_unsynced_claims() -> (
    ClusterState,
    kube::runtime::reflector::store::Writer<joiner_apis::NodeClaim>,
) {
    let claims = kube::runtime::reflector::store::Writer::default();
    let state = ClusterState {
        pods: support::pod_store(vec![]).as_reader(),
        nodes: store::<Node>(vec![]).as_reader(),
        daemonsets: store::<DaemonSet>(vec![]).as_reader(),
        provisioners: store::<joiner_apis::Provisioner>(vec![]).as_reader(),
        node_templates: store::<joiner_apis::NodeTemplate>(vec![]).as_reader(),
        node_claims: claims.as_reader(),
        pdbs: store::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(vec![]).as_reader(),
        namespaces: ClusterState::empty().namespaces,
        created: Default::default(),
        claim_history: Default::default(),
        volumes: joiner_controller::state::VolumeStores::empty(),
    };
    (state, claims)
}

#[tokio::test]
async fn readiness_waits_for_every_store_to_finish_its_initial_list() {
    let (state, mut claims) = state_with_unsynced_claims();
    let waiting =
        tokio::time::timeout(Duration::from_millis(100), watch::wait_synced(&state)).await;
    assert!(waiting.is_err(), "all stores but one synced is not synced");

    use kube::runtime::watcher::Event;
    claims.apply_watcher_event(&Event::Init);
    claims.apply_watcher_event(&Event::InitDone);
    let synced = tokio::time::timeout(Duration::from_secs(5), watch::wait_synced(&state)).await;
    assert!(matches!(synced, Ok(Ok(()))), "{synced:?}");
}
