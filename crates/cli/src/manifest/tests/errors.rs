//! Error messages: each names the file, the document, the object and the field.

use super::{load_err, load_ok, pod_yaml};
use crate::manifest::load_text;

#[test]
fn malformed_yaml_gives_line_and_column() {
    let e = load_err(
        "apiVersion: v1\nkind: Pod\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n",
    );
    assert!(
        e.starts_with("test.yaml: document 2: malformed YAML at line "),
        "{e}"
    );
    assert!(e.contains(", column "), "{e}");
    let e = load_err("a: b\n c: d\n");
    assert!(
        e.starts_with("test.yaml: document 1: malformed YAML at line 2, column "),
        "{e}"
    );
}

#[test]
fn unknown_quantity() {
    let e = load_err(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    spec:\n      containers:\n        - name: web\n          resources: {requests: {cpu: abc}}\n",
    );
    assert_eq!(
        e,
        "test.yaml: document 2 (Deployment default/web): spec.template.spec.containers[0].resources.requests.cpu: invalid quantity \"abc\" (expected e.g. 500m, 2, 1.5Gi, 100M)"
    );
    let e = load_err(&pod_yaml(
        "  initContainers: [{name: i, resources: {limits: {nvidia.com/gpu: many}}}]\n  containers: [{name: a}]\n",
    ));
    assert!(
        e.starts_with(r#"test.yaml: document 1 (Pod default/p): spec.initContainers[0].resources.limits["nvidia.com/gpu"]: invalid quantity"#),
        "{e}"
    );
    let e = load_err(&pod_yaml(
        "  overhead: {cpu: -1}\n  containers: [{name: a}]\n",
    ));
    assert!(e.contains("spec.overhead.cpu: negative quantity"), "{e}");
}

#[test]
fn invalid_operator() {
    let e = load_err(&pod_yaml(
        "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n          - matchExpressions: [{key: zone, operator: Equals, values: [a]}]\n  containers: [{name: a}]\n",
    ));
    assert_eq!(
        e,
        "test.yaml: document 1 (Pod default/p): spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: unknown operator \"Equals\" (expected In, NotIn, Exists, DoesNotExist, Gt or Lt)"
    );
    let e = load_err(&pod_yaml(
        "  topologySpreadConstraints:\n    - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchExpressions: [{key: n, operator: Gt, values: [\"1\"]}]}}\n  containers: [{name: a}]\n",
    ));
    assert!(
        e.contains("spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator: operator Gt is not valid in a label selector"),
        "{e}"
    );
    let e = load_err(&pod_yaml(
        "  tolerations: [{key: a, operator: Matches}]\n  containers: [{name: a}]\n",
    ));
    assert!(
        e.contains("spec.tolerations[0].operator: unknown toleration operator"),
        "{e}"
    );
}

#[test]
fn provisioner_requirement_in_without_values() {
    let e = load_err(
        "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {name: gpu}\nspec:\n  requirements:\n    - {key: node.kubernetes.io/instance-type, operator: In}\n",
    );
    assert_eq!(
        e,
        "test.yaml: document 1 (Provisioner gpu): spec.requirements[0].values: operator In needs at least one value"
    );
}

#[test]
fn node_template_errors_name_the_field() {
    let e = load_err(
        "apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {name: default}\nspec:\n  subnetSelector: {a: b}\n  securityGroupSelector: {a: b}\n  amiFamily: Windows\n",
    );
    assert!(e.starts_with("test.yaml: document 1 (NodeTemplate default): spec.amiFamily: unknown variant `Windows`"), "{e}");
    let e = load_err(
        "apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {name: default}\nspec: {}\n",
    );
    assert!(e.contains("spec.subnetSelector: at least one"), "{e}");
}

#[test]
fn match_fields_is_rejected_for_pending_pods() {
    let e = load_err(&pod_yaml(
        "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n          - matchFields: [{key: metadata.name, operator: In, values: [n1]}]\n  containers: [{name: a}]\n",
    ));
    assert!(
        e.contains("nodeSelectorTerms[0].matchFields: matchFields is not supported"),
        "{e}"
    );
}

#[test]
fn type_errors_name_the_path() {
    let e = load_err(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  replicas: three\n  selector: {}\n  template: {spec: {containers: [{name: a}]}}\n",
    );
    assert!(
        e.starts_with("test.yaml: document 1 (Deployment shop/web): spec.replicas: invalid type"),
        "{e}"
    );
    let e = load_err(&pod_yaml(
        "  containers: [{name: a, ports: [{containerPort: http}]}]\n",
    ));
    assert!(
        e.contains("(Pod default/p): spec.containers[0].ports[0].containerPort: invalid type"),
        "{e}"
    );
}

#[test]
fn structural_errors() {
    let e = load_err("apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a}]}\n");
    assert_eq!(
        e,
        "test.yaml: document 1 (Pod default/<unnamed>): metadata.name: a name is required"
    );
    let e = load_err("apiVersion: v1\nmetadata: {name: x}\n");
    assert_eq!(e, "test.yaml: document 1: kind: a kind is required");
    let e = load_err("- just\n- a list\n");
    assert!(
        e.starts_with("test.yaml: document 1: expected a Kubernetes object"),
        "{e}"
    );
    let e = load_err("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n");
    assert_eq!(
        e,
        "test.yaml: document 2 (Pod default/a): metadata.name: defined twice (first at test.yaml: document 1)"
    );
    let e = load_err("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: -1\n  selector: {}\n  template: {spec: {containers: [{name: a}]}}\n");
    assert!(e.contains("spec.replicas: must not be negative"), "{e}");
    let e = load_err(&pod_yaml(
        "  containers: [{name: a, ports: [{containerPort: 1, hostPort: 70000}]}]\n",
    ));
    assert!(
        e.contains("spec.containers[0].ports[0].hostPort: port 70000"),
        "{e}"
    );
}

#[test]
fn never_panics_on_odd_input() {
    let inputs = [
        "",
        "---\n---\n",
        "42",
        "~",
        "kind: 7",
        "kind: Pod\napiVersion: v1\nmetadata: 3",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: 5",
        "apiVersion: v1\nkind: List\nitems: 3",
        "apiVersion: v1\nkind: List\nitems: [1, 2]",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {capacity: {cpu: 99999999999999999999Ei}}",
        "a: &a [*a]",
        "\u{0}\u{1}\u{2}",
        "{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: w}\nspec: {replicas: 2147483647, selector: {}, template: {spec: {containers: [{name: a}]}}}",
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {parallelism: 3, completions: -2, template: {spec: {containers: [{name: a}]}}}",
    ];
    for input in inputs {
        let _ = load_text("odd.yaml", input);
    }
    assert!(load_ok("").snapshot.pods.is_empty());
}

#[test]
fn fields_a_kind_does_not_have_are_refused_by_path() {
    let e = load_err(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    spec:\n      nodeSelectr: {disk: ssd}\n      containers: [{name: web, image: i}]\n",
    );
    assert_eq!(
        e,
        "test.yaml: document 1 (Deployment default/web): spec.template.spec.nodeSelectr: unknown field (a Deployment has no such field)"
    );
    let e = load_err(
        "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {name: default}\nspec:\n  requirments:\n    - {key: kubernetes.io/arch, operator: In, values: [arm64]}\n",
    );
    assert!(e.contains("spec.requirments: unknown field"), "{e}");
    let e = load_err(&pod_yaml(
        "  containers:\n    - name: c\n      resource: {requests: {cpu: '1'}}\n",
    ));
    assert!(
        e.contains("spec.containers[0].resource: unknown field"),
        "{e}"
    );
}

/// The message for a Pod named `p` with `spec`, which must be refused.
fn pod_err(spec: &str) -> String {
    load_err(&pod_yaml(spec))
}

#[test]
fn pods_the_api_server_would_refuse_are_refused_naming_the_field() {
    let at = "test.yaml: document 1 (Pod default/p): ";
    for (spec, want) in [
        (
            "  containers: []\n",
            "spec.containers: a pod needs at least one container",
        ),
        (
            "  containers: [{name: a, resources: {limits: {nvidia.com/gpu: 500m}}}]\n",
            r#"spec.containers[0].resources.limits["nvidia.com/gpu"]: "500m" is not a whole number (extended resources are counted whole)"#,
        ),
        (
            "  containers: [{name: a, resources: {requests: {cpu: 2}, limits: {cpu: 1500m}}}]\n",
            "spec.containers[0].resources.requests.cpu: request 2 is above the limit 1500m",
        ),
        (
            "  containers: [{name: a, resources: {requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 2}}}]\n",
            r#"spec.containers[0].resources.requests["nvidia.com/gpu"]: request 1 must equal the limit 2 (nvidia.com/gpu cannot be overcommitted)"#,
        ),
        (
            "  nodeSelector: {\"example.com/rack name\": a}\n  containers: [{name: a}]\n",
            r#"spec.nodeSelector["example.com/rack name"]: "example.com/rack name": must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"#,
        ),
        (
            "  nodeSelector: {rack: \"-a\"}\n  containers: [{name: a}]\n",
            r#"spec.nodeSelector.rack: value "-a": must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"#,
        ),
        (
            "  tolerations: [{key: \"a/b/c\", operator: Exists}]\n  containers: [{name: a}]\n",
            r#"spec.tolerations[0].key: "a/b/c": at most one '/' is allowed"#,
        ),
        (
            "  topologySpreadConstraints: [{maxSkew: 1, topologyKey: \"Zone/x\", whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]\n  containers: [{name: a}]\n",
            r#"spec.topologySpreadConstraints[0].topologyKey: "Zone/x": prefix "Zone" must consist of lower case alphanumerics, '-' or '.', and start and end with an alphanumeric"#,
        ),
        // Container names: present, DNS-1123 labels, unique across the pod's containers.
        (
            "  containers: [{image: nginx}]\n",
            "spec.containers[0].name: a container needs a name",
        ),
        (
            "  containers: [{name: Web_1}]\n",
            "spec.containers[0].name: ",
        ),
        (
            "  initContainers: [{name: a}]\n  containers: [{name: b}, {name: a}]\n",
            "spec.initContainers[0].name: \"a\": duplicate container name",
        ),
    ] {
        let got = pod_err(spec);
        if want.ends_with(": ") {
            // The syntax rule's own words follow the field.
            assert!(got.starts_with(&format!("{at}{want}")), "{spec}: {got}");
            continue;
        }
        assert_eq!(got, format!("{at}{want}"), "{spec}");
    }
    let e = load_err(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: Web_1}\nspec: {containers: [{name: a}]}\n",
    );
    assert_eq!(e, "test.yaml: document 1 (Pod default/Web_1): metadata.name: \"Web_1\" must consist of lower case alphanumerics, '-' or '.', and start and end with an alphanumeric");
    let e = load_err("apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: my.team}\nspec: {containers: [{name: a}]}\n");
    assert_eq!(e, "test.yaml: document 1 (Pod my.team/web): metadata.namespace: \"my.team\" must not contain '.'");
    let e = load_err("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: \"web app\"}}\n    spec: {containers: [{name: a}]}\n");
    assert_eq!(e, "test.yaml: document 1 (Deployment default/web): spec.template.metadata.labels.app: value \"web app\": must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric");
}

#[test]
fn provisioners_may_not_use_restricted_or_malformed_labels_and_taints() {
    let prov = |spec: &str| {
        load_err(&format!(
            "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {{name: default}}\nspec:\n{spec}"
        ))
    };
    let at = "test.yaml: document 1 (Provisioner default): ";
    assert_eq!(
        prov("  labels: {joiner.sh/team: web}\n"),
        format!("{at}spec.labels[\"joiner.sh/team\"]: label joiner.sh/team is in the domain joiner.sh, reserved for Karpenter and joiner (use a label of your own domain)")
    );
    assert_eq!(
        prov("  requirements: [{key: karpenter.sh/nodepool, operator: Exists}]\n"),
        format!("{at}spec.requirements[0].key: label karpenter.sh/nodepool is in the domain karpenter.sh, reserved for Karpenter and joiner (use a label of your own domain)")
    );
    assert_eq!(
        prov("  taints: [{key: dedicated, value: \"a b\", effect: NoSchedule}]\n"),
        format!("{at}spec.taints[0].value: value \"a b\": must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric")
    );
    // Well-known keys and the Kubernetes domains are allowed (Karpenter >= 1.10 too).
    load_ok("apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {name: default}\nspec:\n  labels: {node.kubernetes.io/lifecycle: spot, example.com/team: web, node-role.kubernetes.io/worker: \"\", node-restriction.kubernetes.io/team: a}\n  requirements: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]\n");
}

#[test]
fn only_extended_resources_and_huge_pages_must_be_requested_at_their_limit() {
    let at = "test.yaml: document 1 (Pod default/p): ";
    assert_eq!(
        pod_err("  containers: [{name: a, resources: {requests: {nvidia.com/gpu: 1}}}]\n"),
        format!(
            r#"{at}spec.containers[0].resources.limits["nvidia.com/gpu"]: a limit is required for nvidia.com/gpu (it cannot be overcommitted)"#
        )
    );
    assert_eq!(
        pod_err("  containers: [{name: a, resources: {requests: {hugepages-2Mi: 2Mi}, limits: {hugepages-2Mi: 4Mi}}}]\n"),
        format!(
            r#"{at}spec.containers[0].resources.requests.hugepages-2Mi: request 2Mi must equal the limit 4Mi (hugepages-2Mi cannot be overcommitted)"#
        )
    );
    // Kubernetes' own resources may be overcommitted and fractional.
    load_ok(&pod_yaml(
        "  containers: [{name: a, resources: {requests: {example.kubernetes.io/x: 500m, memory: 1Gi}, limits: {example.kubernetes.io/x: 2, memory: 2Gi}}}]\n",
    ));
}

#[test]
fn a_workload_whose_selector_misses_its_template_is_refused() {
    // The API server refuses both: the workload could never own the pods it creates.
    let wl = |selector: &str| {
        format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  selector: {selector}\n  template:\n    metadata: {{labels: {{app: web, tier: front}}}}\n    spec: {{containers: [{{name: web}}]}}\n")
    };
    assert_eq!(
        load_err(&wl("{matchLabels: {app: api}}")),
        "test.yaml: document 1 (Deployment default/web): spec.template.metadata.labels: the selector (spec.selector) does not match the template's labels"
    );
    assert_eq!(
        load_err(&wl("{}")),
        "test.yaml: document 1 (Deployment default/web): spec.selector: an empty selector is invalid for a workload (it would select every pod)"
    );
    // A selector naming some of the template's labels, or an expression they satisfy, is fine.
    for ok in [
        "{matchLabels: {app: web}}",
        "{matchExpressions: [{key: tier, operator: In, values: [front, back]}]}",
    ] {
        let text = wl(ok);
        let loaded = super::super::load_text("test.yaml", &text).expect("loads");
        assert_eq!(loaded.snapshot.pods.len(), 1, "{ok}");
    }
}

#[test]
fn nodes_the_api_server_would_refuse_are_refused_naming_the_field() {
    let node = |extra: &str| {
        format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n{extra}status: {{allocatable: {{cpu: '2', memory: 4Gi, pods: '29'}}}}\n")
    };
    let e = load_err(&node("  labels: {\"example.com/rack name\": a}\n"));
    assert!(
        e.starts_with(
            r#"test.yaml: document 1 (Node n1): metadata.labels["example.com/rack name"]: "#
        ),
        "{e}"
    );
    let e = load_err(&node(
        "spec: {taints: [{key: \"bad key\", effect: NoSchedule}]}\n",
    ));
    assert!(
        e.starts_with("test.yaml: document 1 (Node n1): spec.taints[0].key: "),
        "{e}"
    );
    let e = load_err(&node(
        "spec: {taints: [{key: dedicated, value: \"-gpu\", effect: NoSchedule}]}\n",
    ));
    assert!(
        e.starts_with("test.yaml: document 1 (Node n1): spec.taints[0].value: "),
        "{e}"
    );
    // Well-formed labels and taints load.
    let ok = node("  labels: {topology.kubernetes.io/zone: us-east-1a}\nspec: {taints: [{key: nvidia.com/gpu, value: \"true\", effect: NoSchedule}]}\n");
    assert!(super::super::load_text("test.yaml", &ok).is_ok());
}

#[test]
fn spread_policies_are_honor_or_ignore() {
    let e = load_err(&pod_yaml(
        "  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: honor, labelSelector: {matchLabels: {app: web}}}]\n  containers: [{name: a}]\n",
    ));
    assert_eq!(
        e,
        "test.yaml: document 1 (Pod default/p): spec.topologySpreadConstraints[0].nodeTaintsPolicy: unknown value \"honor\" (expected Honor or Ignore)"
    );
}

#[test]
fn min_domains_needs_do_not_schedule() {
    let e = load_err(&pod_yaml(
        "  topologySpreadConstraints: [{maxSkew: 1, minDomains: 3, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}]\n  containers: [{name: a}]\n",
    ));
    assert_eq!(
        e,
        "test.yaml: document 1 (Pod default/p): spec.topologySpreadConstraints[0].minDomains: can only be set when whenUnsatisfiable is DoNotSchedule"
    );
}
