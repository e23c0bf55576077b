//! The Helm chart rendered with default and non-default values (by `helm/`, a renderer of the
//! template subset the chart uses: Helm is not served by a registry this project reaches) and
//! every rendered manifest, and the CRDs, validated against the Kubernetes OpenAPI schemas in
//! strict mode (no unknown fields) by `kubernetes-validate`, which `scripts/test` installs.

mod helm;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

/// The Kubernetes version the manifests are validated against: the oldest EKS standard
/// support covers as of this chart.
const KUBERNETES_VERSION: &str = "1.31.0";

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/joiner")
}

fn yaml_to_json(text: &str) -> Value {
    let v: serde_yaml::Value = serde_yaml::from_str(text).expect("YAML");
    serde_json::to_value(v).expect("JSON")
}

/// Renders the chart with `overrides` merged over values.yaml, release `joiner` in
/// `kube-system`; the manifests, or the renderer's error.
fn render(overrides: &Value) -> Result<Vec<Value>, String> {
    let dir = chart_dir();
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir.join("templates"))
        .expect("templates")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            (
                p.file_name().expect("name").to_string_lossy().to_string(),
                std::fs::read_to_string(&p).expect("template"),
            )
        })
        .collect();
    // Helpers first, then the rest in name order (as Helm sorts).
    files.sort_by_key(|(n, _)| (!n.starts_with('_'), n.clone()));
    let chart = helm::Chart::parse(&files)?;
    let mut values =
        yaml_to_json(&std::fs::read_to_string(dir.join("values.yaml")).expect("values"));
    helm::merge(&mut values, overrides);
    // As Helm does before rendering: the values must satisfy values.schema.json.
    check_values(&values)?;
    let meta = yaml_to_json(&std::fs::read_to_string(dir.join("Chart.yaml")).expect("Chart.yaml"));
    let root = json!({
        "Values": values,
        "Release": {"Name": "joiner", "Namespace": "kube-system", "Service": "Helm"},
        "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"]},
    });
    let mut docs = Vec::new();
    for (name, text) in chart.render(&root)? {
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = <serde_yaml::Value as serde::Deserialize>::deserialize(doc)
                .map_err(|e| format!("{name}: rendered YAML does not parse: {e}\n{text}"))?;
            if !v.is_null() {
                docs.push(serde_json::to_value(v).expect("JSON"));
            }
        }
    }
    Ok(docs)
}

/// The settings the chart requires.
fn required() -> Value {
    json!({"settings": {"clusterName": "dev", "clusterEndpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com"}})
}

fn with(mut base: Value, over: Value) -> Value {
    helm::merge(&mut base, &over);
    base
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

/// Validates `docs` against the Kubernetes schemas (strict); ServiceMonitor (a CRD of the
/// Prometheus Operator, not in them) is left to the caller.
fn validate(docs: &[Value], label: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut text = String::new();
    for d in docs.iter().filter(|d| d["kind"] != "ServiceMonitor") {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(d).expect("YAML"));
    }
    let file = dir.path().join(format!("{label}.yaml"));
    std::fs::write(&file, text).expect("write");
    validate_files(&[file], label);
}

fn validate_files(files: &[PathBuf], label: &str) {
    if let Err(e) = check_files(files) {
        panic!(
            "{label}: the manifests do not validate against Kubernetes {KUBERNETES_VERSION}:\n{e}"
        );
    }
}

/// Validates `values` against the chart's values.schema.json (JSON Schema, with the
/// `jsonschema` package kubernetes-validate brings); the violations when they do not.
fn check_values(values: &Value) -> Result<(), String> {
    use std::io::Write;
    const CHECK: &str = "import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(json.load(sys.stdin)), key=str)
for e in errors:
    print('/'.join(map(str, e.absolute_path)) + ': ' + e.message)
sys.exit(1 if errors else 0)";
    let schema = chart_dir().join("values.schema.json");
    let mut child = Command::new("python3")
        .args(["-c", CHECK])
        .arg(&schema)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(values.to_string().as_bytes())
        .expect("values written");
    let out = child.wait_with_output().expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named"),
        "jsonschema is not installed (scripts/test installs kubernetes-validate, which brings it): {stderr}"
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "values.schema.json: {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

#[test]
fn values_the_chart_does_not_read_or_of_the_wrong_kind_are_refused() {
    if let Err(e) = render(&required()) {
        panic!("the defaults satisfy the schema: {e}");
    }
    for (over, field) in [
        (json!({"replica": 3}), "'replica' was unexpected"),
        (
            json!({"settings": {"clustername": "prod"}}),
            "settings: Additional properties",
        ),
        (
            json!({"logFormat": "xml"}),
            "logFormat: 'xml' is not one of",
        ),
        (
            json!({"replicas": "two"}),
            "replicas: 'two' is not of type 'integer'",
        ),
        (
            json!({"image": {"pullPolicy": "Sometimes"}}),
            "image/pullPolicy",
        ),
        (
            json!({"settings": {"batchIdleDuration": "soon"}}),
            "settings/batchIdleDuration",
        ),
        (
            json!({"podDisruptionBudget": {"minAvailable": 1}}),
            "podDisruptionBudget: Additional properties",
        ),
    ] {
        let err = render(&with(required(), over.clone())).expect_err(&format!("{over} is refused"));
        assert!(err.contains(field), "{over}: {err}");
    }
}

/// Runs kubernetes-validate (strict) on `files`; its report when something does not validate.
fn check_files(files: &[PathBuf]) -> Result<(), String> {
    let out = Command::new("python3")
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "--quiet",
            "-k",
            KUBERNETES_VERSION,
        ])
        .args(files)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named"),
        "kubernetes-validate is not installed (scripts/test installs it: python3 -m pip install kubernetes-validate): {stderr}"
    );
    if out.status.success() && !stdout.contains("ERROR") {
        Ok(())
    } else {
        Err(format!("{stdout}{stderr}"))
    }
}

#[test]
fn the_validator_refuses_what_kubernetes_refuses() {
    // The check can fail: an unknown field, and a field of the wrong type, in a rendering.
    let mut docs = render(&required()).expect("renders");
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, (pointer, bad)) in [
        ("/spec/template/spec/nodeSelectr", json!({"a": "b"})),
        ("/spec/replicas", json!("two")),
    ]
    .into_iter()
    .enumerate()
    {
        let d = docs
            .iter_mut()
            .find(|d| d["kind"] == "Deployment")
            .expect("Deployment");
        let mut broken = d.clone();
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        broken.pointer_mut(parent).expect("parent")[key] = bad;
        let file = dir.path().join(format!("broken-{i}.yaml"));
        std::fs::write(&file, serde_yaml::to_string(&broken).expect("YAML")).expect("write");
        let report = check_files(&[file]).expect_err(pointer);
        assert!(report.contains("ERROR"), "{report}");
    }
}

#[test]
fn default_values_render_valid_manifests_with_the_promised_placement() {
    let docs = render(&required()).expect("renders");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    assert!(!kinds.contains(&"ServiceMonitor"), "off by default");
    validate(&docs, "defaults");

    let d = find(&docs, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "CriticalAddonsOnly", "operator": "Exists"}])
    );
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"],
        json!([{"key": "joiner.sh/provisioner-name", "operator": "DoesNotExist"}])
    );
    let c = &pod["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(
        c["image"], "ghcr.io/joiner-sh/joiner:0.1.0",
        "the tag defaults to appVersion"
    );
    assert_eq!(
        find(&docs, "PodDisruptionBudget")["spec"]["maxUnavailable"],
        1
    );
    // The anti-affinity and the PDB select the Deployment's own pods.
    let labels = &d["spec"]["template"]["metadata"]["labels"];
    for (k, v) in d["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(&labels[k], v);
    }
    assert_eq!(
        find(&docs, "PodDisruptionBudget")["spec"]["selector"],
        d["spec"]["selector"]
    );
}

#[test]
fn the_cluster_settings_are_required() {
    let err = render(&json!({})).expect_err("clusterName is required");
    assert!(err.contains("settings.clusterName is required"), "{err}");
}

#[test]
fn non_default_values_render_valid_manifests_that_carry_them() {
    let values = with(
        required(),
        json!({
            "replicas": 3,
            "image": {"repository": "123456789012.dkr.ecr.us-east-1.amazonaws.com/joiner", "tag": "v9"},
            "serviceAccount": {"create": false, "name": "joiner-irsa",
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/joiner"}},
            "settings": {"interruptionQueue": "dev-joiner", "region": "eu-west-1",
                "clusterCABundle": "Q0E=", "serviceCIDR": "10.100.0.0/16", "clusterDNSIP": "10.100.0.10",
                "kubernetesVersion": "1.31", "defaultInstanceProfile": "joiner-node"},
            "leaderElection": {"namespace": "joiner-system"},
            "podLabels": {"team": "platform"},
            "podAnnotations": {"example.com/scrape": "false"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "additionalNodeAffinity": [{"key": "eks.amazonaws.com/nodegroup", "operator": "In", "values": ["system"]}],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
            "podDisruptionBudget": {"maxUnavailable": 2},
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            "serviceMonitor": {"enabled": true, "additionalLabels": {"release": "kube-prometheus-stack"}},
        }),
    );
    let docs = render(&values).expect("renders");
    validate(&docs, "custom");
    assert!(
        !docs.iter().any(|d| d["kind"] == "ServiceAccount"),
        "create: false"
    );
    let d = find(&docs, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(pod["serviceAccountName"], "joiner-irsa");
    assert_eq!(
        pod["containers"][0]["image"],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/joiner:v9"
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["team"],
        "platform"
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["example.com/scrape"],
        "false"
    );
    let exprs = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"];
    assert_eq!(exprs.as_array().map(Vec::len), Some(2), "{exprs}");
    assert_eq!(
        exprs[0]["operator"], "DoesNotExist",
        "joiner's own nodes stay excluded"
    );
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert_eq!(
        find(&docs, "PodDisruptionBudget")["spec"]["maxUnavailable"],
        2
    );
    let env: Vec<(&str, &str)> = pod["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
        .collect();
    for want in [
        ("INTERRUPTION_QUEUE", "dev-joiner"),
        ("AWS_REGION", "eu-west-1"),
        ("LEADER_ELECTION_NAMESPACE", "joiner-system"),
        ("DEFAULT_INSTANCE_PROFILE", "joiner-node"),
    ] {
        assert!(env.contains(&want), "{want:?} not in {env:?}");
    }
    // The Lease's Role and binding live where the Lease is; the binding names the pods'
    // service account in the release's namespace.
    for kind in ["Role", "RoleBinding"] {
        assert_eq!(
            find(&docs, kind)["metadata"]["namespace"],
            "joiner-system",
            "{kind}"
        );
    }
    assert_eq!(
        find(&docs, "RoleBinding")["subjects"][0]["namespace"],
        "kube-system"
    );
    // The bindings name the service account the pods run as.
    for kind in ["ClusterRoleBinding", "RoleBinding"] {
        assert_eq!(
            find(&docs, kind)["subjects"][0]["name"],
            "joiner-irsa",
            "{kind}"
        );
    }
    // The ServiceMonitor scrapes the Service's metrics port, selecting the Service's labels.
    let sm = find(&docs, "ServiceMonitor");
    let svc = find(&docs, "Service");
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
    assert_eq!(
        sm["spec"]["endpoints"][0]["port"],
        svc["spec"]["ports"][0]["name"]
    );
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(&svc["metadata"]["labels"][k], v, "{k}");
    }
    assert_eq!(
        sm["spec"]["namespaceSelector"]["matchNames"][0],
        "kube-system"
    );
}

#[test]
fn every_controller_flag_can_be_set_from_values() {
    // With every optional setting given, each environment variable `joiner controller`
    // reads is set by the Deployment.
    let values = with(
        required(),
        json!({"settings": {"interruptionQueue": "q", "region": "us-east-1", "clusterCABundle": "Q0E=",
            "serviceCIDR": "10.100.0.0/16", "clusterDNSIP": "10.100.0.10", "kubernetesVersion": "1.31",
            "defaultInstanceProfile": "p"}, "leaderElection": {"namespace": "n"}}),
    );
    let docs = render(&values).expect("renders");
    let names: Vec<String> = find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        ["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect();
    let help = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["controller", "--help"])
        .output()
        .expect("joiner runs");
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: Vec<&str> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split('=').next())
        .collect();
    assert!(flags.len() >= 20, "{help}");
    for flag in flags {
        assert!(
            names.iter().any(|n| n == flag),
            "{flag} cannot be set from values: {names:?}"
        );
    }
}

#[test]
fn the_crds_validate_against_the_kubernetes_schemas() {
    let files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("crds"))
        .expect("crds")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    assert!(files.len() >= 3, "{files:?}");
    validate_files(&files, "crds");
}
