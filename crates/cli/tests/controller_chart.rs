//! The Helm chart without helm (not installable here): every template is YAML once its
//! `{{ ... }}` expressions are replaced, every `.Values` path it reads exists, the RBAC rules
//! cover the calls the controller makes, the Deployment has the probes, security context and
//! placement the docs promise, and every env var it sets is a flag of `joiner controller`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::Value;

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/joiner")
}

/// Replaces each `{{ ... }}` with `PLACEHOLDER`, dropping lines that hold only template
/// actions (`{{- if }}`, `{{- end }}`, `{{- include ... | nindent }}`).
fn detemplate(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("{{") && trimmed.ends_with("}}") && !trimmed[2..].contains("{{") {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            match rest[start..].find("}}") {
                Some(end) => {
                    out.push_str("PLACEHOLDER");
                    rest = &rest[start + end + 2..];
                }
                None => {
                    rest = "";
                }
            }
        }
        out.push_str(rest);
        out.push('\n');
    }
    out
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("template reads");
    let yaml = detemplate(&text);
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let value = <Value as serde::Deserialize>::deserialize(doc).unwrap_or_else(|e| {
            panic!(
                "{}: not YAML after detemplating: {e}\n{yaml}",
                path.display()
            )
        });
        if !value.is_null() {
            docs.push(value);
        }
    }
    docs
}

fn templates() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart().join("templates"))
        .expect("templates dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn all_objects() -> Vec<Value> {
    templates().iter().flat_map(|p| documents(p)).collect()
}

fn object(kind: &str) -> Value {
    all_objects()
        .into_iter()
        .find(|o| o["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in the chart"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn values() -> Value {
    let text = std::fs::read_to_string(chart().join("values.yaml")).expect("values.yaml");
    serde_yaml::from_str(&text).expect("values.yaml is YAML")
}

#[test]
fn every_template_is_yaml_and_names_its_object() {
    let files = templates();
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for expected in [
        "clusterrole.yaml",
        "deployment.yaml",
        "pdb.yaml",
        "role.yaml",
        "service.yaml",
        "serviceaccount.yaml",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing: {names:?}"
        );
    }
    let mut kinds: Vec<String> = Vec::new();
    for path in &files {
        for doc in documents(path) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            assert!(
                doc["apiVersion"].as_str().is_some(),
                "{}: no apiVersion",
                path.display()
            );
            assert!(
                doc["metadata"]["name"].as_str().is_some(),
                "{}: {kind} has no name",
                path.display()
            );
            kinds.push(kind);
        }
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "ServiceMonitor"
        ]
    );
}

#[test]
fn every_values_path_the_templates_read_exists() {
    let values = values();
    let mut dir: Vec<PathBuf> = templates();
    dir.push(chart().join("templates/_helpers.tpl"));
    for path in dir {
        let text = std::fs::read_to_string(&path).expect("reads");
        for (i, _) in text.match_indices(".Values.") {
            let key: String = text[i + ".Values.".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
                .collect();
            let mut at = &values;
            for part in key.trim_end_matches('.').split('.') {
                at = &at[part];
                assert!(
                    !at.is_null(),
                    "{}: .Values.{key} is not in values.yaml",
                    path.display()
                );
            }
        }
    }
    assert_eq!(values["replicas"].as_u64(), Some(2), "two replicas");
    assert_eq!(values["metrics"]["port"].as_u64(), Some(8080));
    assert_eq!(values["health"]["port"].as_u64(), Some(8081));
    assert_eq!(
        values["priorityClassName"].as_str(),
        Some("system-cluster-critical")
    );
}

/// True when some rule of `rules` grants `verb` on `resource` in `group`.
fn allows(rules: &Value, group: &str, resource: &str, verb: &str) -> bool {
    rules.as_sequence().into_iter().flatten().any(|r| {
        strings(&r["apiGroups"]).iter().any(|g| g == group)
            && strings(&r["resources"]).iter().any(|x| x == resource)
            && strings(&r["verbs"]).iter().any(|v| v == verb)
    })
}

#[test]
fn the_cluster_role_grants_the_controllers_calls_and_no_wildcards() {
    let role = object("ClusterRole");
    let rules = &role["rules"];
    let mut wanted: Vec<(&str, &str, &str)> = Vec::new();
    for v in ["get", "list", "watch"] {
        wanted.push(("", "pods", v));
    }
    wanted.push(("", "pods/eviction", "create"));
    for v in ["get", "list", "watch", "patch", "update", "delete"] {
        wanted.push(("", "nodes", v));
    }
    for v in ["list", "watch"] {
        wanted.push(("apps", "daemonsets", v));
        wanted.push(("policy", "poddisruptionbudgets", v));
        wanted.push(("", "namespaces", v));
        wanted.push(("", "persistentvolumeclaims", v));
        wanted.push(("", "persistentvolumes", v));
        wanted.push(("storage.k8s.io", "storageclasses", v));
        wanted.push(("storage.k8s.io", "csinodes", v));
        wanted.push(("storage.k8s.io", "volumeattachments", v));
    }
    for v in ["create", "patch"] {
        wanted.push(("", "events", v));
    }
    for r in ["provisioners", "nodetemplates", "nodeclaims"] {
        for v in [
            "get", "list", "watch", "create", "patch", "update", "delete",
        ] {
            wanted.push(("joiner.sh", r, v));
        }
    }
    for r in [
        "provisioners/status",
        "nodetemplates/status",
        "nodeclaims/status",
    ] {
        for v in ["patch", "update"] {
            wanted.push(("joiner.sh", r, v));
        }
    }
    wanted.push(("apiextensions.k8s.io", "customresourcedefinitions", "get"));
    wanted.push(("", "services", "get"));
    wanted.push(("networking.k8s.io", "servicecidrs", "get"));
    for (g, r, v) in &wanted {
        assert!(allows(rules, g, r, v), "ClusterRole lacks {v} {g}/{r}");
    }
    // Least privilege: nothing beyond the list, no wildcards, no secrets.
    for rule in rules.as_sequence().into_iter().flatten() {
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for v in strings(&rule["verbs"]) {
                    assert!(
                        wanted
                            .iter()
                            .any(|(wg, wr, wv)| *wg == g && *wr == r && *wv == v),
                        "ClusterRole grants {v} {g}/{r}, which the controller does not call"
                    );
                }
            }
        }
    }
    let crd_rule = rules
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|r| {
            strings(&r["resources"])
                .iter()
                .any(|x| x == "customresourcedefinitions")
        })
        .expect("crd rule");
    assert_eq!(
        strings(&crd_rule["resourceNames"]).len(),
        3,
        "only joiner's CRDs"
    );
    let services_rule = rules
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|r| strings(&r["resources"]).iter().any(|x| x == "services"))
        .expect("services rule");
    assert_eq!(
        strings(&services_rule["resourceNames"]),
        ["kube-dns", "kubernetes"],
        "only the two Services start-up reads"
    );

    let binding = object("ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("ClusterRole"));
    assert_eq!(
        binding["subjects"][0]["kind"].as_str(),
        Some("ServiceAccount")
    );
}

#[test]
fn the_lease_role_is_namespaced_and_grants_get_create_update() {
    let role = object("Role");
    assert!(role["metadata"]["namespace"].as_str().is_some());
    for v in ["get", "create", "update"] {
        assert!(
            allows(&role["rules"], "coordination.k8s.io", "leases", v),
            "Role lacks {v} leases"
        );
    }
    assert!(!allows(
        &role["rules"],
        "coordination.k8s.io",
        "leases",
        "delete"
    ));
    let binding = object("RoleBinding");
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("Role"));
}

#[test]
fn the_deployment_has_probes_security_and_placement() {
    let deploy = object("Deployment");
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    let ports: Vec<&str> = c["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(ports, ["http-metrics", "http-health"]);
    assert_eq!(
        c["livenessProbe"]["httpGet"]["port"].as_str(),
        Some("http-health")
    );

    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));

    let env = c["env"].as_sequence().cloned().unwrap_or_default();
    let field = |name: &str| {
        env.iter()
            .find(|e| e["name"].as_str() == Some(name))
            .and_then(|e| {
                e["valueFrom"]["fieldRef"]["fieldPath"]
                    .as_str()
                    .map(String::from)
            })
    };
    assert_eq!(field("POD_NAME").as_deref(), Some("metadata.name"));
    assert_eq!(
        field("POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );

    let term = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!(term["key"].as_str(), Some("joiner.sh/provisioner-name"));
    assert_eq!(term["operator"].as_str(), Some("DoesNotExist"));
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
            ["topologyKey"]
            .as_str(),
        Some("kubernetes.io/hostname")
    );
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"].as_str(),
        Some("topology.kubernetes.io/zone")
    );
    assert!(pod["priorityClassName"].as_str().is_some());

    // The PDB's value comes from values.yaml (rendered in chart_render.rs).
    let values: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart().join("values.yaml")).expect("values"),
    )
    .expect("values YAML");
    assert_eq!(
        values["podDisruptionBudget"]["maxUnavailable"].as_u64(),
        Some(1)
    );
    let svc = object("Service");
    assert_eq!(
        svc["spec"]["ports"][0]["targetPort"].as_str(),
        Some("http-metrics")
    );
}

#[test]
fn every_env_var_the_chart_sets_is_a_controller_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["controller", "--help"])
        .env_clear()
        .output()
        .expect("runs joiner");
    let help = String::from_utf8_lossy(&out.stdout);
    let deploy = object("Deployment");
    let env = deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    // The optional ones sit inside `{{- with }}` blocks, which detemplating keeps.
    assert!(env.len() > 10, "{env:?}");
    for e in env {
        let name = e["name"].as_str().unwrap_or_default();
        if name == "POD_NAME" || name == "POD_NAMESPACE" {
            continue;
        }
        assert!(
            help.contains(&format!("[env: {name}=")),
            "the chart sets {name}, which `joiner controller` does not read"
        );
    }
}
