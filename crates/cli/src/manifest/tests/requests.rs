//! Effective request arithmetic.

use joiner_core::resources::NVIDIA_GPU;

use super::{load_ok, one_pod};

const MI: i64 = 1 << 20;

#[test]
fn app_containers_are_summed_plus_one_pod_slot() {
    let p = one_pod(
        "  containers:\n    - {name: a, resources: {requests: {cpu: 250m, memory: 100Mi}}}\n    - {name: b, resources: {requests: {cpu: \"1\", memory: 50Mi, ephemeral-storage: 1Gi}}}\n",
    );
    assert_eq!(p.requests.cpu, 1250);
    assert_eq!(p.requests.memory, 150 * MI);
    assert_eq!(p.requests.ephemeral_storage, 1 << 30);
    assert_eq!(p.requests.pods, 1);
}

#[test]
fn init_containers_take_the_max_per_resource() {
    // cpu: init 2 > sum 0.5; memory: sum 300Mi > init 100Mi.
    let p = one_pod(
        "  initContainers:\n    - {name: migrate, resources: {requests: {cpu: \"2\", memory: 100Mi}}}\n    - {name: warm, resources: {requests: {cpu: 1500m}}}\n  containers:\n    - {name: a, resources: {requests: {cpu: 250m, memory: 200Mi}}}\n    - {name: b, resources: {requests: {cpu: 250m, memory: 100Mi}}}\n",
    );
    assert_eq!(p.requests.cpu, 2000);
    assert_eq!(p.requests.memory, 300 * MI);
}

#[test]
fn sidecars_add_to_later_init_containers_and_to_the_app() {
    // Sidecar 500m runs throughout: init peak = 500m + 1 = 1500m; app = 200m + 500m = 700m.
    let p = one_pod(
        "  initContainers:\n    - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 500m, memory: 64Mi}}}\n    - {name: migrate, resources: {requests: {cpu: \"1\"}}}\n  containers:\n    - {name: a, resources: {requests: {cpu: 200m, memory: 100Mi}}}\n",
    );
    assert_eq!(p.requests.cpu, 1500);
    assert_eq!(p.requests.memory, 164 * MI);
}

#[test]
fn overhead_is_added() {
    let p = one_pod(
        "  overhead: {cpu: 250m, memory: 120Mi}\n  initContainers:\n    - {name: i, resources: {requests: {cpu: \"1\"}}}\n  containers:\n    - {name: a, resources: {requests: {cpu: 500m, memory: 100Mi}}}\n",
    );
    assert_eq!(p.requests.cpu, 1250, "max(1, 0.5) + 0.25");
    assert_eq!(p.requests.memory, 220 * MI);
}

#[test]
fn limits_stand_in_for_missing_requests() {
    let p = one_pod(
        "  containers:\n    - name: a\n      resources:\n        requests: {cpu: 100m}\n        limits: {cpu: \"2\", memory: 1Gi, nvidia.com/gpu: 1}\n",
    );
    assert_eq!(
        p.requests.cpu, 100,
        "an explicit request wins over the limit"
    );
    assert_eq!(p.requests.memory, 1 << 30, "limit used as request");
    assert_eq!(p.requests.get(NVIDIA_GPU), 1);
}

#[test]
fn numbers_and_no_resources() {
    let p = one_pod("  containers:\n    - {name: a, resources: {requests: {cpu: 0.5, memory: 1048576}}}\n    - {name: b}\n");
    assert_eq!(p.requests.cpu, 500);
    assert_eq!(p.requests.memory, MI);
    let empty = one_pod("  containers: [{name: a}]\n");
    assert_eq!(empty.requests, joiner_core::Resources::new(0, 0, 0, 1));
}

#[test]
fn pod_level_resources_replace_container_sums() {
    let p = one_pod(
        "  resources: {requests: {cpu: \"3\"}}\n  containers:\n    - {name: a, resources: {requests: {cpu: \"1\", memory: 64Mi}}}\n",
    );
    assert_eq!(p.requests.cpu, 3000);
    assert_eq!(
        p.requests.memory,
        64 * MI,
        "resources the pod level does not name stay"
    );
}

#[test]
fn pods_naming_a_runtime_class_are_admitted_with_its_overhead_and_scheduling() {
    // RuntimeClass admission sets spec.overhead and merges the class's scheduling into the
    // pod; workload templates have not been through it. The class comes after its users.
    let text = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: sandboxed, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: s}}
  template:
    metadata: {labels: {app: s}}
    spec:
      runtimeClassName: kata
      containers: [{name: c, image: i, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      runtimeClassName: kata
      containers: [{name: c, image: i, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: admitted, namespace: default}
spec:
  runtimeClassName: kata
  overhead: {cpu: 250m}
  containers: [{name: c, image: i, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: unknown-class, namespace: default}
spec:
  runtimeClassName: gvisor
  containers: [{name: c, image: i, resources: {requests: {cpu: "1"}}}]
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: "2", memory: 160Mi}}
scheduling:
  nodeSelector: {example.com/runtime: kata}
  tolerations: [{key: kata, operator: Exists, effect: NoSchedule}]
"#;
    let l = load_ok(text);
    let pod = |name: &str| {
        l.snapshot
            .pods
            .iter()
            .find(|p| p.name.starts_with(name))
            .unwrap_or_else(|| panic!("no pod {name}"))
    };
    let s = pod("sandboxed");
    assert_eq!(s.requests.cpu, 3000, "1 cpu + the class's 2");
    assert_eq!(s.requests.memory, (1 << 30) + (160 << 20));
    assert!(s.node_terms[0]
        .get("example.com/runtime")
        .is_some_and(|r| r.allows("kata")));
    assert_eq!(s.tolerations.len(), 1);
    assert_eq!(l.snapshot.daemonsets[0].pod.requests.cpu, 2100);
    // Admitted already: its own overhead stands.
    assert_eq!(pod("admitted").requests.cpu, 1250);
    assert_eq!(pod("unknown-class").requests.cpu, 1000);
    assert!(
        l.warnings.iter().any(|w| w
            == "pods name RuntimeClasses the input does not describe, so their overhead is not known: gvisor"),
        "{:?}",
        l.warnings
    );
}

#[test]
fn pods_whose_node_selector_conflicts_with_their_runtime_class_are_not_planned() {
    // The API server's RuntimeClass admission refuses a pod whose nodeSelector sets a key of
    // the class's nodeSelector to another value: its workload never gets pods, and a
    // DaemonSet never runs one. The same key with the same value is admitted.
    let text = r#"apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
scheduling:
  nodeSelector: {runtime: kata}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: clash, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: clash}}
  template:
    metadata: {labels: {app: clash}}
    spec:
      runtimeClassName: kata
      nodeSelector: {runtime: runc}
      containers: [{name: c, image: i}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: agrees, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: agrees}}
  template:
    metadata: {labels: {app: agrees}}
    spec:
      runtimeClassName: kata
      nodeSelector: {runtime: kata, team: a}
      containers: [{name: c, image: i}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      runtimeClassName: kata
      nodeSelector: {runtime: runc}
      containers: [{name: c, image: i}]
"#;
    let l = load_ok(text);
    let names: Vec<&str> = l.snapshot.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("agrees"), "{names:?}");
    assert!(l.snapshot.daemonsets.is_empty());
    let why = "RuntimeClass kata sets nodeSelector runtime=kata and the pod's nodeSelector has \
               runtime=runc; the API server's RuntimeClass admission refuses such a pod";
    assert_eq!(
        l.warnings,
        [
            format!("DaemonSet kube-system/agent is not planned: {why}"),
            format!("Deployment default/clash (2 pods) is not planned: {why}"),
        ]
    );
}
