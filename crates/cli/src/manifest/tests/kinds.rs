//! Each kind the loader reads, Lists, empty documents, folders and warnings.

use std::path::PathBuf;

use joiner_core::Owner;

use super::{load_ok, one_pod};
use crate::manifest::{load, ManifestError};

const WORKLOADS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: app
          resources: {requests: {cpu: 250m, memory: 256Mi}}
---
# an empty document
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs}
spec:
  replicas: 2
  selector: {matchLabels: {app: rs}}
  template:
    metadata: {labels: {app: rs}}
    spec:
      containers: [{name: app}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  selector: {matchLabels: {app: db}}
  serviceName: db
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, resources: {requests: {cpu: "1"}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: batch}
spec:
  parallelism: 5
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: single}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: paused}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: agent, resources: {requests: {cpu: 100m, memory: 128Mi}}}]
"#;

#[test]
fn workloads_expand_into_named_pods() {
    let l = load_ok(WORKLOADS);
    let names: Vec<String> = l.snapshot.pods.iter().map(|p| p.key()).collect();
    assert_eq!(
        names,
        [
            "shop/web-0",
            "shop/web-1",
            "shop/web-2",
            "default/rs-0",
            "default/rs-1",
            "default/db-0",
            "default/batch-0",
            "default/batch-1",
            "default/single-0",
        ]
    );
    let web = &l.snapshot.pods[0];
    assert_eq!(web.labels["app"], "web");
    assert_eq!(
        web.owner,
        Some(Owner {
            kind: "Deployment".into(),
            name: "web".into()
        })
    );
    assert_eq!(
        (web.requests.cpu, web.requests.memory, web.requests.pods),
        (250, 256 << 20, 1)
    );
    assert_eq!(
        l.snapshot.pods[5].owner.as_ref().unwrap().kind,
        "StatefulSet"
    );
    assert_eq!(l.snapshot.pods[6].owner.as_ref().unwrap().kind, "Job");
    assert!(l.snapshot.pods.iter().all(|p| p.node_name.is_none()));
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
}

#[test]
fn daemonsets_are_templates_not_pending_pods() {
    let l = load_ok(WORKLOADS);
    assert_eq!(l.snapshot.daemonsets.len(), 1);
    let ds = &l.snapshot.daemonsets[0];
    assert_eq!(
        (ds.namespace.as_str(), ds.name.as_str()),
        ("kube-system", "agent")
    );
    assert!(ds.pod.is_daemon());
    assert_eq!(ds.pod.requests.cpu, 100);
    assert!(ds.pod.tolerations[0].exists);
    assert!(!l.snapshot.pods.iter().any(|p| p.is_daemon()));
}

#[test]
fn pod_basics() {
    let p =
        one_pod("  priority: 1000\n  containers: [{name: a, resources: {requests: {cpu: 1}}}]\n");
    assert_eq!(p.key(), "default/p");
    assert_eq!(p.priority, 1000);
    assert_eq!(p.labels["rev"], "r1");
    assert_eq!(p.owner, None);
    assert_eq!(p.node_name, None);
    assert!(p.node_terms.is_empty());
    let running = one_pod("  nodeName: ip-10-0-0-1\n  containers: [{name: a}]\n");
    assert_eq!(running.node_name.as_deref(), Some("ip-10-0-0-1"));
    assert_eq!(running.priority, 0);
}

#[test]
fn pods_from_a_dump_keep_their_controller() {
    let l = load_ok(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: agent-x7k2p
  namespace: kube-system
  ownerReferences:
    - {apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: "1", controller: true}
spec:
  nodeName: ip-10-0-0-1
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchFields: [{key: metadata.name, operator: In, values: [ip-10-0-0-1]}]
  containers: [{name: agent}]
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: done}
spec: {containers: [{name: a}]}
status: {phase: Succeeded}
"#,
    );
    assert_eq!(l.snapshot.pods.len(), 1);
    let p = &l.snapshot.pods[0];
    assert!(p.is_daemon());
    assert!(
        p.node_terms.is_empty(),
        "matchFields of a bound pod is ignored"
    );
    assert_eq!(
        l.warnings,
        [
            "test.yaml: document 2: skipped Pod default/done: it has finished (phase Succeeded)",
            "1 pod is bound to nodes the input does not describe, so what they use counts on no \
             node: ip-10-0-0-1 (1 pod)"
        ]
    );
}

#[test]
fn nodes() {
    let l = load_ok(
        r#"
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-0-1
  labels: {node.kubernetes.io/instance-type: m5.large, joiner.sh/provisioner-name: default}
spec:
  unschedulable: true
  taints: [{key: dedicated, value: gpu, effect: NoSchedule}, {key: spot, effect: PreferNoSchedule}]
status:
  capacity: {cpu: "2", memory: 8Gi, pods: "29", ephemeral-storage: 20Gi}
  allocatable: {cpu: 1930m, memory: 7Gi, pods: "29"}
---
apiVersion: v1
kind: Node
metadata: {name: bare}
status:
  capacity: {cpu: 4, memory: 16Gi, pods: 110}
---
apiVersion: v1
kind: Node
metadata: {name: going, deletionTimestamp: "2026-12-05T09:00:00Z"}
status:
  capacity: {cpu: 4, memory: 16Gi, pods: 110}
"#,
    );
    assert!(
        l.snapshot.nodes[2].unschedulable,
        "a node being deleted takes no new pods"
    );
    assert!(!l.snapshot.nodes[1].unschedulable);
    let n = &l.snapshot.nodes[0];
    assert_eq!(n.name, "ip-10-0-0-1");
    assert_eq!(n.provisioner(), Some("default"));
    assert!(n.unschedulable);
    assert_eq!(n.taints.len(), 2);
    assert_eq!(n.taints[0].to_string(), "dedicated=gpu:NoSchedule");
    assert_eq!((n.capacity.cpu, n.capacity.pods), (2000, 29));
    assert_eq!((n.allocatable.cpu, n.allocatable.memory), (1930, 7 << 30));
    let bare = &l.snapshot.nodes[1];
    assert_eq!(
        bare.allocatable, bare.capacity,
        "allocatable defaults to capacity"
    );
    assert_eq!(bare.capacity.cpu, 4000);
    assert!(!bare.unschedulable);
}

#[test]
fn provisioners_and_node_templates() {
    let l = load_ok(
        r#"
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: gpu}
spec:
  weight: 50
  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
  limits: {resources: {cpu: 100}}
  providerRef: {name: default}
  kubeletConfiguration: {maxPods: 58}
---
apiVersion: joiner.sh/v1alpha1
kind: NodeTemplate
metadata: {name: default}
spec:
  subnetSelector: {karpenter.sh/discovery: demo}
  securityGroupSelector: {karpenter.sh/discovery: demo}
  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 100Gi}}]
"#,
    );
    let p = &l.snapshot.provisioners[0];
    assert_eq!((p.name.as_str(), p.weight), ("gpu", 50));
    // The template's root volume sizes the Provisioner's nodes' ephemeral storage.
    assert_eq!(p.kubelet.ephemeral_volume, Some(100 << 30));
    assert_eq!(p.limits.cpu, Some(100_000));
    assert_eq!(p.kubelet.max_pods, Some(58));
    assert_eq!(p.node_template.as_deref(), Some("default"));
    assert_eq!(l.node_templates.len(), 1);
    assert_eq!(
        l.node_templates[0].spec.metadata_options.http_tokens,
        "required"
    );
}

#[test]
fn lists_are_expanded() {
    let l = load_ok(
        r#"
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c}]}}
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: cfg, namespace: x}}
  - {apiVersion: v1, kind: Pod, metadata: {name: b}, spec: {containers: [{name: c}]}}
"#,
    );
    let names: Vec<&str> = l.snapshot.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(
        l.warnings,
        ["test.yaml: document 1, item 2: skipped ConfigMap x/cfg (v1): kind not used for planning"]
    );
}

#[test]
fn unknown_kinds_warn_with_file_document_and_kind() {
    let l = load_ok(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n---\napiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: default}\n---\napiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: old}\n",
    );
    assert_eq!(l.snapshot.pods.len(), 1);
    assert_eq!(l.provisioners.len(), 1);
    assert_eq!(
        l.warnings,
        [
            "test.yaml: document 2: skipped Service shop/web (v1): kind not used for planning",
            "test.yaml: document 4: skipped Deployment old (apps/v1beta1): unsupported apiVersion for this kind",
            // A Karpenter object is not skipped: it is converted as import-karpenter does.
            "read 1 Karpenter object(s) as joiner's Provisioners and NodeTemplates (`joiner import-karpenter` writes them out)",
            // Its notes carry where it was read.
            "test.yaml: document 3: Provisioner default: spec.requirements: Karpenter's v1alpha5 defaults made explicit: kubernetes.io/os In [\"linux\"], kubernetes.io/arch In [\"amd64\"], karpenter.sh/capacity-type In [\"on-demand\"], karpenter.k8s.aws/instance-category In [\"c\", \"m\", \"r\"], karpenter.k8s.aws/instance-generation Gt [\"2\"]",
        ]
    );
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

#[test]
fn folders_are_read_recursively_in_path_order() {
    let dir = fixtures().join("cluster");
    let l = load(std::slice::from_ref(&dir)).unwrap();
    let nodes: Vec<&str> = l.snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(nodes, ["node-a"]);
    let pods: Vec<&str> = l.snapshot.pods.iter().map(|p| p.name.as_str()).collect();
    // 10-nodes.yaml, then 20-pods.yml, then workloads/web.yaml; notes.txt is ignored.
    assert_eq!(pods, ["lonely", "web-0", "web-1"]);
    assert_eq!(l.snapshot.provisioners.len(), 1);
    assert_eq!(l.node_templates.len(), 1);
    // Naming a file again through its folder reads it once.
    let again = load(&[dir.clone(), dir.join("20-pods.yml")]).unwrap();
    assert_eq!(again.snapshot.pods.len(), 3);
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let path = fixtures().join("does-not-exist.yaml");
    let e = load(std::slice::from_ref(&path)).unwrap_err();
    assert!(matches!(e, ManifestError::Read { .. }));
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{}: cannot read: ", path.display())),
        "{msg}"
    );
}

#[test]
fn fixture_with_a_bad_quantity() {
    let path = fixtures().join("bad.yaml");
    let e = load(std::slice::from_ref(&path)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: document 2 (Deployment default/web): spec.template.spec.containers[0].resources.requests.cpu: invalid quantity \"abc\" (expected e.g. 500m, 2, 1.5Gi, 100M)",
            path.display()
        )
    );
}

#[test]
fn a_provisioner_whose_node_template_is_missing_is_skipped_as_the_controller_does() {
    let lost = "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {name: lost}\n\
                spec:\n  providerRef: {name: nowhere}\n";
    let yaml = format!(
        "{lost}---\n{}",
        PROVISIONER_AND_TMPL.replace("name: default", "name: kept")
    );
    let loaded = super::load_text("t.yaml", &yaml).expect("loads");
    let names: Vec<&str> = loaded
        .snapshot
        .provisioners
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["kept"]);
    assert_eq!(loaded.skipped_provisioners, 1);
    assert!(
        loaded.warnings.iter().any(|w| w
            == "skipped Provisioner lost: its providerRef names NodeTemplate nowhere, which the \
                input does not hold (the controller marks it not Ready: NodeTemplateNotFound)"),
        "{:?}",
        loaded.warnings
    );

    // Without any NodeTemplate in the input, the Provisioners are planned as they are.
    let loaded = super::load_text("t.yaml", lost).expect("loads");
    assert_eq!(loaded.snapshot.provisioners.len(), 1);
    assert_eq!(loaded.skipped_provisioners, 0);
}

/// Provisioner `default` and the NodeTemplate `tmpl` it names.
const PROVISIONER_AND_TMPL: &str = r#"apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: default}
spec:
  providerRef: {name: tmpl}
---
apiVersion: joiner.sh/v1alpha1
kind: NodeTemplate
metadata: {name: tmpl}
spec:
  amiFamily: AL2023
  subnetSelector: {karpenter.sh/discovery: demo}
  securityGroupSelector: {karpenter.sh/discovery: demo}
"#;

#[test]
fn node_template_subnet_zones_narrow_the_provisioner() {
    let yaml = format!(
        "{PROVISIONER_AND_TMPL}status:\n  subnets:\n    - {{id: subnet-1, zone: us-east-1a}}\n    \
         - {{id: subnet-2, zone: us-east-1c}}\n"
    );
    let loaded = super::load_text("t.yaml", &yaml).expect("loads");
    let zone = loaded.snapshot.provisioners[0]
        .requirements
        .get(joiner_core::labels::ZONE)
        .expect("zone requirement")
        .to_string();
    assert_eq!(zone, "In [us-east-1a us-east-1c]");
}

#[test]
fn pods_the_controller_would_not_plan_for_are_skipped_and_named() {
    let l = load_ok(
        r#"apiVersion: v1
kind: Pod
metadata: {name: gated, namespace: shop}
spec:
  schedulingGates: [{name: example.com/quota}]
  containers: [{name: c, image: i}]
---
apiVersion: v1
kind: Pod
metadata: {name: leaving, namespace: shop, deletionTimestamp: "2026-01-01T00:00:00Z", finalizers: [x]}
spec: {containers: [{name: c, image: i}]}
---
apiVersion: v1
kind: Pod
metadata: {name: preempting, namespace: shop}
spec: {containers: [{name: c, image: i}]}
status: {nominatedNodeName: ip-10-0-0-1}
---
apiVersion: v1
kind: Pod
metadata:
  name: agent-x
  namespace: kube-system
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u, controller: true}]
spec: {containers: [{name: c, image: i}]}
---
apiVersion: v1
kind: Pod
metadata: {name: draining, namespace: shop, deletionTimestamp: "2026-01-01T00:00:00Z", finalizers: [x]}
spec: {nodeName: ip-10-0-0-9, containers: [{name: c, image: i}]}
---
apiVersion: v1
kind: Pod
metadata: {name: waiting, namespace: shop}
spec: {containers: [{name: c, image: i}]}
"#,
    );
    let names: Vec<String> = l.snapshot.pods.iter().map(|p| p.key()).collect();
    assert_eq!(
        names,
        ["shop/draining", "shop/waiting"],
        "a bound pod still holds its node even while it is deleted"
    );
    let expect = [
        ("shop/gated", "scheduling gates (example.com/quota)"),
        ("shop/leaving", "being deleted"),
        ("shop/preempting", "nominated node ip-10-0-0-1"),
        ("kube-system/agent-x", "a DaemonSet owns it"),
    ];
    for (pod, why) in expect {
        assert!(
            l.warnings
                .iter()
                .any(|w| w.contains(&format!("skipped Pod {pod}")) && w.contains(why)),
            "{pod}: {:?}",
            l.warnings
        );
    }
    assert!(
        l.warnings.iter().any(|w| w
            .starts_with("1 pod is bound to nodes the input does not describe")
            && w.contains("ip-10-0-0-9 (1 pod)")),
        "{:?}",
        l.warnings
    );
    assert_eq!(l.warnings.len(), 5, "{:?}", l.warnings);
}

#[test]
fn provisioners_being_deleted_or_not_ready_are_skipped_with_a_warning() {
    let l = load_ok(
        r#"apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: leaving, deletionTimestamp: "2026-01-01T00:00:00Z", finalizers: [x]}
spec: {}
---
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: broken}
spec: {}
status:
  conditions:
    - {type: Ready, status: "False", reason: NoOfferings, message: no type is allowed, lastTransitionTime: "2026-01-01T00:00:00Z"}
---
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: good}
spec: {}
"#,
    );
    let names: Vec<&str> = l
        .snapshot
        .provisioners
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["good"]);
    assert_eq!(
        l.warnings,
        [
            "test.yaml: document 1: skipped Provisioner leaving: it is being deleted",
            "test.yaml: document 2: skipped Provisioner broken: it is not Ready (NoOfferings: no type is allowed)"
        ]
    );
}

#[test]
fn yaml_merge_keys_are_applied_as_kubectl_applies_them() {
    let l = load_ok(
        r#"apiVersion: v1
kind: Pod
metadata: {name: p, namespace: shop}
spec:
  containers:
    - &base {name: a, image: i, resources: {requests: {cpu: 250m}}}
    - <<: *base
      name: b
"#,
    );
    assert_eq!(l.snapshot.pods[0].requests.cpu, 500, "{:?}", l.warnings);
}

#[test]
fn workloads_whose_template_has_scheduling_gates_are_not_planned() {
    let l = load_ok(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: queued, namespace: batch}
spec:
  replicas: 3
  selector: {matchLabels: {app: q}}
  template:
    metadata: {labels: {app: q}}
    spec:
      schedulingGates: [{name: kueue.x-k8s.io/admission}]
      containers: [{name: c, image: i}]
"#,
    );
    assert!(l.snapshot.pods.is_empty());
    assert_eq!(
        l.warnings,
        ["test.yaml: document 1: skipped the 3 pod(s) of Deployment batch/queued: its pod template has scheduling gates (kueue.x-k8s.io/admission); the kube-scheduler considers them once they are removed"]
    );
}

#[test]
fn a_daemonset_is_charged_what_its_running_pods_request() {
    // A LimitRange default gave the running pod 250m and 256Mi; the template asks for 100m.
    let l = load_ok(
        r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: agent-x1
  namespace: kube-system
  ownerReferences:
    - {apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: "1", controller: true}
spec:
  nodeName: ip-10-0-0-1
  containers: [{name: agent, resources: {requests: {cpu: 250m, memory: 256Mi}}}]
status: {phase: Running}
"#,
    );
    let ds = &l.snapshot.daemonsets[0];
    assert_eq!(ds.pod.requests.cpu, 250);
    assert_eq!(ds.pod.requests.memory, 256 << 20);
}

#[test]
fn disruption_reads_budgets_opt_outs_deletion_costs_and_node_age() {
    let l = load_ok(
        r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db, namespace: data}
spec: {maxUnavailable: 0, selector: {matchLabels: {app: db}}}
status: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}
---
apiVersion: v1
kind: Node
metadata:
  name: n1
  creationTimestamp: "2026-12-01T00:00:00Z"
  annotations: {karpenter.sh/do-not-consolidate: "true"}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata:
  name: db-0
  namespace: data
  labels: {app: db}
  annotations:
    karpenter.sh/do-not-disrupt: "true"
    controller.kubernetes.io/pod-deletion-cost: "100"
spec:
  nodeName: n1
  containers: [{name: db, image: postgres}]
status: {phase: Running}
"#,
    );
    let s = &l.snapshot;
    assert_eq!(s.pdbs.len(), 1);
    assert!(s.pdbs[0].blocks(&s.pods[0]));
    assert_eq!(
        s.pods[0].disruption.do_not_disrupt.as_deref(),
        Some("karpenter.sh/do-not-disrupt")
    );
    assert_eq!(s.pods[0].disruption.deletion_cost, 100);
    let life = &s.nodes[0].life;
    assert!(life.initialized, "Ready");
    assert!(life.do_not_consolidate);
    assert_eq!(life.do_not_disrupt, None);
    assert_eq!(life.created_at, Some(1_796_083_200));
    let l = load_ok(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {controller.kubernetes.io/pod-deletion-cost: high}\nspec: {containers: [{name: a}]}\n",
    );
    assert_eq!(l.snapshot.pods[0].disruption.deletion_cost, 0);
    assert!(
        l.warnings.iter().any(|w| w.contains(r#"metadata.annotations["controller.kubernetes.io/pod-deletion-cost"]: "high" is not a 32-bit integer; counted as 0"#)),
        "{:?}",
        l.warnings
    );
}
