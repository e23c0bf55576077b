//! `joiner import-karpenter` on one example per Karpenter API version (golden output and
//! notes), and `joiner plan` reading the same Karpenter kinds directly. The expectations beside
//! the goldens are written from Karpenter's documented meaning of each field, not from joiner's
//! output. Regenerate the goldens with `JOINER_UPDATE_GOLDEN=1 cargo nextest run -p joiner import`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn joiner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("run joiner")
}

/// Standard output and error of a successful `joiner import-karpenter -f example`.
fn import(example: &str) -> (String, String) {
    let out = joiner(&["import-karpenter", "-f", example]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{example}: {stderr}");
    (String::from_utf8(out.stdout).expect("utf-8"), stderr)
}

/// Compares `actual` with the golden file `name`, or stores it.
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/import")
        .join(name);
    if std::env::var_os("JOINER_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (JOINER_UPDATE_GOLDEN=1 creates it)",
            path.display()
        )
    });
    assert!(
        actual == expected,
        "{name} differs (JOINER_UPDATE_GOLDEN=1 if intended):\n{actual}"
    );
}

/// The YAML documents of `text`.
fn documents(text: &str) -> Vec<serde_yaml::Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde_yaml::Value::deserialize(d).expect("valid YAML"))
        .collect()
}

fn doc<'a>(docs: &'a [serde_yaml::Value], kind: &str, name: &str) -> &'a serde_yaml::Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in {docs:?}"))
}

#[test]
fn the_v1alpha5_seed_converts_with_its_changes_noted() {
    let (yaml, notes) = import("examples/karpenter/v1alpha5-seed.yaml");
    golden("v1alpha5-seed.yaml", &yaml);
    golden("v1alpha5-seed.notes", &notes);
    let docs = documents(&yaml);
    assert_eq!(docs.len(), 2, "{yaml}");
    let p = doc(&docs, "Provisioner", "default");
    assert_eq!(p["apiVersion"].as_str(), Some("joiner.sh/v1alpha1"));
    assert_eq!(p["spec"]["providerRef"]["name"].as_str(), Some("default"));
    assert_eq!(
        p["spec"]["ttlSecondsUntilExpired"].as_u64(),
        Some(2_592_000)
    );
    // Karpenter refuses ttlSecondsAfterEmpty beside consolidation; the wait is kept as the
    // consolidation delay.
    assert_eq!(p["spec"]["consolidation"]["enabled"].as_bool(), Some(true));
    assert_eq!(
        p["spec"]["consolidation"]["consolidateAfter"].as_str(),
        Some("30s")
    );
    assert!(p["spec"].get("ttlSecondsAfterEmpty").is_none());
    let t = doc(&docs, "NodeTemplate", "default");
    // v1alpha1 defaulted amiFamily to AL2.
    assert_eq!(t["spec"]["amiFamily"].as_str(), Some("AL2"));
    assert_eq!(
        t["spec"]["subnetSelector"]["karpenter.sh/discovery"].as_str(),
        Some("eks-dev-1-26-cluster")
    );
    for field in [
        "spec.amiFamily",
        "spec.metadataOptions",
        "spec.ttlSecondsAfterEmpty",
    ] {
        assert!(notes.contains(field), "no note on {field}: {notes}");
    }
    assert!(notes.contains("skipped apps/v1 Deployment"), "{notes}");
}

#[test]
fn a_v1beta1_node_pool_converts_and_reports_what_joiner_lacks() {
    let (yaml, notes) = import("examples/karpenter/v1beta1.yaml");
    golden("v1beta1.yaml", &yaml);
    golden("v1beta1.notes", &notes);
    let docs = documents(&yaml);
    let p = doc(&docs, "Provisioner", "general");
    assert_eq!(p["spec"]["labels"]["team"].as_str(), Some("platform"));
    // WhenUnderutilized is consolidation; expireAfter 168h is 604800 s.
    assert_eq!(p["spec"]["consolidation"]["enabled"].as_bool(), Some(true));
    assert_eq!(p["spec"]["ttlSecondsUntilExpired"].as_u64(), Some(604_800));
    assert_eq!(
        p["spec"]["kubeletConfiguration"]["maxPods"].as_u64(),
        Some(58)
    );
    assert_eq!(
        p["spec"]["disruption"]["budgets"][1]["schedule"].as_str(),
        Some("0 9 * * mon-fri")
    );
    assert_eq!(
        p["spec"]["limits"]["resources"]["memory"].as_str(),
        Some("1000Gi")
    );
    assert_eq!(p["spec"]["weight"].as_u64(), Some(10));
    assert_eq!(
        p["spec"]["requirements"].as_sequence().map(Vec::len),
        Some(4)
    );
    let t = doc(&docs, "NodeTemplate", "general");
    assert_eq!(
        t["spec"]["blockDeviceMappings"][0]["ebs"]["volumeSize"].as_str(),
        Some("100Gi")
    );
    assert_eq!(t["spec"]["tags"]["team"].as_str(), Some("platform"));
    // No equivalent: containerRuntime (kubelet), role (joiner launches with a profile).
    for field in ["spec.template.spec.kubelet.containerRuntime", "spec.role"] {
        assert!(notes.contains(field), "no note on {field}: {notes}");
    }
    // metadataOptions was given: nothing to say about its default.
    assert!(!notes.contains("spec.metadataOptions"), "{notes}");
}

#[test]
fn a_v1_node_pool_takes_its_family_from_the_alias_and_kubelet_from_the_class() {
    let (yaml, notes) = import("examples/karpenter/v1.yaml");
    golden("v1.yaml", &yaml);
    golden("v1.notes", &notes);
    let docs = documents(&yaml);
    let p = doc(&docs, "Provisioner", "default");
    assert_eq!(
        p["spec"]["ttlSecondsUntilExpired"].as_u64(),
        Some(2_592_000)
    );
    assert_eq!(
        p["spec"]["consolidation"]["consolidateAfter"].as_str(),
        Some("1m")
    );
    assert_eq!(
        p["spec"]["kubeletConfiguration"]["maxPods"].as_u64(),
        Some(110)
    );
    assert_eq!(p["spec"]["taints"][0]["key"].as_str(), Some("dedicated"));
    let t = doc(&docs, "NodeTemplate", "default");
    assert_eq!(t["spec"]["amiFamily"].as_str(), Some("AL2023"));
    assert_eq!(
        t["spec"]["securityGroupSelector"]["aws-ids"].as_str(),
        Some("sg-0123456789abcdef0")
    );
    for field in [
        "spec.template.spec.requirements[1].minValues",
        "spec.template.spec.terminationGracePeriod",
        "spec.role",
    ] {
        assert!(notes.contains(field), "no note on {field}: {notes}");
    }
}

#[test]
fn the_imported_manifests_are_accepted_by_plan_as_joiner_kinds() {
    // What import writes is joiner's own input: plan reads it without a Karpenter note.
    for example in ["v1alpha5-seed", "v1beta1", "v1"] {
        let (yaml, _) = import(&format!("examples/karpenter/{example}.yaml"));
        let dir =
            std::env::temp_dir().join(format!("joiner-import-{}-{example}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("imported.yaml");
        std::fs::write(&file, yaml).expect("write");
        let out = joiner(&["plan", "-f", file.to_str().expect("utf-8 path")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{example}: {stderr}");
        assert!(!stderr.contains("Karpenter"), "{example}: {stderr}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn plan_reads_the_seed_directly_onto_t3_nodes_in_the_two_zones() {
    let out = joiner(&[
        "plan",
        "-o",
        "json",
        "-f",
        "examples/karpenter/v1alpha5-seed.yaml",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json plan");
    assert!(
        plan["warnings"]
            .to_string()
            .contains("joiner import-karpenter"),
        "{}",
        plan["warnings"]
    );
    let nodes = plan["new_nodes"].as_array().expect("newNodes");
    // 6 web (1 CPU, 1 GiB: a t3.small each), 2 cache (1 CPU, 3 GiB: t3.medium), 1 search
    // (1.5 CPU, 6 GiB: t3.large); web spread evenly over the two zones.
    assert_eq!(nodes.len(), 9, "{plan}");
    let mut types: Vec<&str> = nodes
        .iter()
        .filter_map(|n| n["instance_type"].as_str())
        .collect();
    types.sort_unstable();
    assert_eq!(
        types,
        [
            "t3.large",
            "t3.medium",
            "t3.medium",
            "t3.small",
            "t3.small",
            "t3.small",
            "t3.small",
            "t3.small",
            "t3.small"
        ]
    );
    for n in nodes {
        let zone = n["zone"].as_str().unwrap_or_default();
        assert!(["us-east-1a", "us-east-1b"].contains(&zone), "{n}");
    }
    assert_eq!(
        plan["unschedulable"].as_array().map(Vec::len),
        Some(0),
        "{plan}"
    );
}

#[test]
fn import_refuses_input_without_karpenter_objects() {
    let out = joiner(&["import-karpenter", "-f", "examples/web-fleet.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no Karpenter"), "{stderr}");
}
