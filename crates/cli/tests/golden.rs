//! Golden tests of `joiner plan -o json` on every example: the plan users see must only change
//! on purpose. Regenerate with `JOINER_UPDATE_GOLDEN=1 cargo nextest run -p joiner golden`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The standard output of `joiner ARGS`, which must succeed.
fn joiner(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("run joiner");
    assert!(
        out.status.success(),
        "joiner {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn plan_json(example: &str) -> String {
    joiner(&["plan", "-o", "json", "-f", example])
}

fn check(example: &str, golden: &str) {
    compare(&plan_json(example), example, golden);
}

/// Compares `actual` (the output for `example`) with the stored `golden`, or stores it.
fn compare(actual: &str, example: &str, golden: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(golden);
    if std::env::var_os("JOINER_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (set JOINER_UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert!(
        actual == expected,
        "output for {example} differs from {golden}; rerun with JOINER_UPDATE_GOLDEN=1 if intended\n--- actual ---\n{actual}"
    );
}

#[test]
fn web_fleet() {
    check("examples/web-fleet.yaml", "web-fleet.json");
}

#[test]
fn mixed_cluster() {
    check("examples/mixed-cluster", "mixed-cluster.json");
}

#[test]
fn constraints_zone_spread() {
    check(
        "examples/constraints/zone-spread.yaml",
        "constraints-zone-spread.json",
    );
}

#[test]
fn constraints_hostname_spread() {
    check(
        "examples/constraints/hostname-spread.yaml",
        "constraints-hostname-spread.json",
    );
}

#[test]
fn constraints_capacity_type_spread() {
    check(
        "examples/constraints/capacity-type-spread.yaml",
        "constraints-capacity-type-spread.json",
    );
}

#[test]
fn constraints_pod_affinity() {
    check(
        "examples/constraints/pod-affinity.yaml",
        "constraints-pod-affinity.json",
    );
}

#[test]
fn constraints_pod_affinity_pending() {
    check(
        "examples/constraints/pod-affinity-pending.yaml",
        "constraints-pod-affinity-pending.json",
    );
}

#[test]
fn constraints_pod_anti_affinity() {
    check(
        "examples/constraints/pod-anti-affinity.yaml",
        "constraints-pod-anti-affinity.json",
    );
}

#[test]
fn constraints_host_ports() {
    check(
        "examples/constraints/host-ports.yaml",
        "constraints-host-ports.json",
    );
}

#[test]
fn constraints_preferences() {
    check(
        "examples/constraints/preferences.yaml",
        "constraints-preferences.json",
    );
}

#[test]
fn constraints_provisioner_choice() {
    check(
        "examples/constraints/provisioner-choice.yaml",
        "constraints-provisioner-choice.json",
    );
}

#[test]
fn constraints_volume_topology() {
    check(
        "examples/constraints/volume-topology.yaml",
        "constraints-volume-topology.json",
    );
}

#[test]
fn constraints_volume_limits() {
    check(
        "examples/constraints/volume-limits.yaml",
        "constraints-volume-limits.json",
    );
}

/// `joiner plan --consolidate` on the example cluster dump, as of a fixed time; the time the
/// planning took (the one thing that changes run to run) is written as 0.
fn consolidate(format: &str) -> String {
    let out = joiner(&[
        "plan",
        "--consolidate",
        "--at",
        "2026-12-03T10:00:00Z",
        "-o",
        format,
        "-f",
        "examples/consolidation",
    ]);
    out.lines()
        .map(|l| match l.find("\"planned_in_ms\": ") {
            Some(i) => format!("{}\"planned_in_ms\": 0.0,", &l[..i]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn consolidation_dry_run() {
    compare(
        &consolidate("json"),
        "examples/consolidation",
        "consolidation.json",
    );
}

#[test]
fn the_consolidation_dry_run_accounts_for_every_node() {
    // Worked out by hand: six of the seven nodes are joiner's; the budget lets two go: the
    // empty m5.large, then the m5.2xlarge whose two 500m pods fit elsewhere.
    let v: serde_json::Value = serde_json::from_str(&consolidate("json")).expect("json");
    let gone: Vec<&str> = v["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .flat_map(|d| d["nodes"].as_array().expect("nodes"))
        .map(|n| n.as_str().expect("name"))
        .collect();
    assert_eq!(
        gone,
        ["ip-10-0-2-22.ec2.internal", "ip-10-0-1-11.ec2.internal"]
    );
    let kept = v["kept"].as_array().expect("kept");
    assert_eq!(gone.len() + kept.len(), 7, "every node is listed once");
    assert!(kept
        .iter()
        .all(|k| !k["why"].as_array().expect("why").is_empty()));
    assert_eq!(v["price_per_hour_before"], 1.152);
    assert_eq!(v["price_per_hour_after"], 0.672);

    let table = consolidate("table");
    for line in [
        "PodDisruptionBudget shop/db allows no eviction of pod shop/db-0",
        "pod batch/report-28fz1 is annotated karpenter.sh/do-not-disrupt",
        "the Underutilized budget of Provisioner general allows no more disruptions now",
        "not launched by joiner",
        "joiner's nodes $1.1520/h -> $0.6720/h",
    ] {
        assert!(table.contains(line), "{line}\n{table}");
    }
}

#[test]
fn the_dry_run_reads_drift_from_node_claims() {
    // The example's NodeTemplate now resolves to ami-new; the claim of ip-10-0-3-31 says it
    // booted ami-old. Worked out by hand: drift goes first and takes one of the budget's two
    // disruptions; its three 1-CPU pods fit on ip-10-0-1-11 (m5.2xlarge, 1 CPU used), so no
    // replacement; the empty m5.large takes the other; ip-10-0-1-11 now takes pods and stays.
    // $1.152 - $0.192 - $0.096 = $0.864/h.
    let dir = tempfile::tempdir().expect("tempdir");
    let example = root().join("examples/consolidation");
    std::fs::copy(
        example.join("cluster.yaml"),
        dir.path().join("cluster.yaml"),
    )
    .expect("copy");
    let provisioners =
        std::fs::read_to_string(example.join("provisioners.yaml")).expect("provisioners");
    let resolved = provisioners
        + "status:\n  amis: [{id: ami-new}]\n---\n\
           apiVersion: joiner.sh/v1alpha1\nkind: NodeClaim\nmetadata: {name: general-x4k2p}\n\
           spec: {provisionerName: general}\n\
           status: {nodeName: ip-10-0-3-31.ec2.internal, imageID: ami-old, conditions: [\n\
             {type: Initialized, status: \"True\", reason: NodeInitialized, message: \"\", lastTransitionTime: \"2026-12-01T00:00:00Z\"}]}\n";
    std::fs::write(dir.path().join("provisioners.yaml"), resolved).expect("write");
    let out = joiner(&[
        "plan",
        "--consolidate",
        "--at",
        "2026-12-03T10:00:00Z",
        "-o",
        "json",
        "-f",
        dir.path().to_str().expect("utf-8 path"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let decisions: Vec<(String, String, String)> = v["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .map(|d| {
            (
                d["reason"].as_str().expect("reason").to_string(),
                d["nodes"][0].as_str().expect("node").to_string(),
                d["detail"].as_str().expect("detail").to_string(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        [
            (
                "Drifted".to_string(),
                "ip-10-0-3-31.ec2.internal".to_string(),
                "drifted: its AMI ami-old is no longer one NodeTemplate default resolves to (ami-new)".to_string()
            ),
            (
                "Empty".to_string(),
                "ip-10-0-2-22.ec2.internal".to_string(),
                "empty: consolidation deletes it".to_string()
            ),
        ]
    );
    assert_eq!(v["price_per_hour_after"], 0.864);
    assert!(!out.contains("no NodeClaims in the input"), "{out}");
}

#[test]
fn consolidate_flags_are_checked() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_joiner"))
            .current_dir(root())
            .args(args)
            .output()
            .expect("run joiner")
    };
    let bad_time = run(&[
        "plan",
        "--consolidate",
        "--at",
        "yesterday",
        "-f",
        "examples/consolidation",
    ]);
    assert_eq!(bad_time.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_time.stderr)
        .contains("--at \"yesterday\": not an RFC 3339 time"));
    let explain = run(&[
        "plan",
        "--consolidate",
        "--explain",
        "shop/web",
        "-f",
        "examples/consolidation",
    ]);
    assert_eq!(explain.status.code(), Some(2));
    let at_alone = run(&[
        "plan",
        "--at",
        "2026-12-03T10:00:00Z",
        "-f",
        "examples/web-fleet.yaml",
    ]);
    assert_eq!(at_alone.status.code(), Some(2), "--at needs --consolidate");
}

#[test]
fn golden_plans_are_consistent() {
    // Independent of the stored files: every pending pod is placed once or explained.
    let v: serde_json::Value =
        serde_json::from_str(&plan_json("examples/mixed-cluster")).expect("json");
    let mut pods: Vec<String> = Vec::new();
    for n in v["new_nodes"].as_array().expect("new_nodes") {
        assert!(!n["instance_type_options"]
            .as_array()
            .expect("options")
            .is_empty());
        assert_eq!(n["instance_type_options"][0], n["instance_type"]);
        pods.extend(
            n["pods"]
                .as_array()
                .expect("pods")
                .iter()
                .map(|p| p.to_string()),
        );
    }
    for n in v["existing_nodes"].as_array().expect("existing") {
        pods.extend(
            n["pods"]
                .as_array()
                .expect("pods")
                .iter()
                .map(|p| p.to_string()),
        );
    }
    for u in v["unschedulable"].as_array().expect("unschedulable") {
        assert!(!u["reason"].as_str().expect("reason").is_empty());
        pods.push(u["pod"].to_string());
    }
    let total = pods.len();
    pods.sort();
    pods.dedup();
    assert_eq!(pods.len(), total, "a pod appears twice");
    // 30 checkout + 12 search + 4 ledger + 2 train + huge + racked + gpu-untolerated.
    assert_eq!(total, 51);
}

#[test]
fn bad_input_exits_2_naming_file_document_and_field() {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .current_dir(root())
        .args(["plan", "-f", "crates/cli/tests/fixtures/bad.yaml"])
        .output()
        .expect("run joiner");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml: document 2 (Deployment default/web): spec.template.spec.containers[0].resources.requests.cpu: invalid quantity \"abc\""), "{err}");
}

#[test]
fn unknown_region_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .current_dir(root())
        .args([
            "plan",
            "--region",
            "mars-1",
            "-f",
            "examples/web-fleet.yaml",
        ])
        .output()
        .expect("run joiner");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("us-east-1"));
}

fn warnings_of(name: &str, manifest: &str) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("joiner-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(name);
    std::fs::write(&file, manifest).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["plan", "-o", "json", "-f"])
        .arg(&file)
        .output()
        .expect("run joiner");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect()
}

#[test]
fn every_topology_key_is_simulated_and_raises_no_warning() {
    let pod = |kind: &str, key: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: a, labels: {{app: a}}}}\nspec:\n  affinity:\n    {kind}:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        - topologyKey: {key}\n          labelSelector: {{matchLabels: {{app: a}}}}\n  containers: [{{name: c, image: i}}]\n"
        )
    };
    // Without a Provisioner the plan says it used Karpenter's default NodePool; that note
    // aside, no constraint raises anything: every topology key is simulated.
    let beside_default = |mut w: Vec<String>| {
        let before = w.len();
        w.retain(|w| !w.starts_with("no Provisioner in the input: planned with Provisioner \"default\" as Karpenter's documented default NodePool"));
        assert_eq!(before - w.len(), 1, "the default is announced once: {w:?}");
        w
    };
    for (name, kind, key) in [
        ("anti.yaml", "podAntiAffinity", "kubernetes.io/hostname"),
        ("rack.yaml", "podAntiAffinity", "example.com/rack"),
        ("arch.yaml", "podAffinity", "kubernetes.io/arch"),
        ("together.yaml", "podAffinity", "kubernetes.io/hostname"),
    ] {
        let w = beside_default(warnings_of(name, &pod(kind, key)));
        assert!(w.is_empty(), "{name}: {w:?}");
    }
}

/// `joiner plan -f examples/web-fleet.yaml --explain key`.
fn explain_web_fleet(key: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .current_dir(root())
        .args(["plan", "-f", "examples/web-fleet.yaml", "--explain", key])
        .output()
        .expect("run joiner")
}

#[test]
fn explain_prints_the_filters_and_the_placement() {
    let out = explain_web_fleet("shop/web-0");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Pod shop/web-0"), "{text}");
    assert!(text.contains("Provisioner default (weight 0): "), "{text}");
    assert!(text.contains("Placement: new node default-"), "{text}");

    let missing = explain_web_fleet("shop/nope");
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no pod and no workload shop/nope"));

    // A workload's name stands for its first pending pod.
    let by_workload = explain_web_fleet("shop/web");
    assert!(by_workload.status.success());
    let text = String::from_utf8_lossy(&by_workload.stdout);
    assert!(text.contains("Pod shop/web-0"), "{text}");
}

/// What `joiner plan -f FILE` says about a bad input: the exit code and standard error.
fn refusal(file: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/errors"))
        .args(["plan", "-f"])
        .arg(file.file_name().expect("file name"))
        .output()
        .expect("run joiner");
    format!(
        "exit {}\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Golden tests of the error messages: every `tests/golden/errors/*.yaml` is refused with exit
/// 2 and the words in the `.txt` beside it.
#[test]
fn bad_inputs_are_refused_with_the_words_on_record() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/errors");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("errors folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 10, "{inputs:?}");
    let mut differ = Vec::new();
    for input in &inputs {
        let actual = refusal(input);
        assert!(
            actual.starts_with("exit 2\n"),
            "{}: {actual}",
            input.display()
        );
        let golden = input.with_extension("txt");
        if std::env::var_os("JOINER_UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, &actual).expect("write golden");
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (set JOINER_UPDATE_GOLDEN=1 to create it)",
                golden.display()
            )
        });
        if actual != expected {
            differ.push(format!("{}:\n{actual}", input.display()));
        }
    }
    assert!(
        differ.is_empty(),
        "refusals differ from their golden files (JOINER_UPDATE_GOLDEN=1 if intended):\n{}",
        differ.join("\n")
    );
}

#[test]
fn a_pod_its_spread_leaves_only_a_full_zone_is_refused_naming_the_spread() {
    // kube-scheduler semantics: with one node in us-east-1c holding one pod, a and b may hold
    // two each (maxSkew 1 against c's one); the sixth pod has no zone that keeps the skew.
    let out = plan_json("crates/cli/tests/fixtures/plan/spread-pinned-to-a-full-zone.yaml");
    let plan: serde_json::Value = serde_json::from_str(&out).expect("json");
    let refused = plan["unschedulable"].as_array().expect("unschedulable");
    assert_eq!(refused.len(), 1, "{plan}");
    assert_eq!(
        plan["new_nodes"].as_array().map(Vec::len),
        Some(4),
        "{plan}"
    );
    let reason = refused[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(
            "topology spread on topology.kubernetes.io/zone (maxSkew 1) of pods app In [web]: \
             no allowed topology.kubernetes.io/zone keeps the skew; us-east-1c holds the fewest \
             matching pods (1)"
        ),
        "{reason}"
    );
}

/// A warm pool of two members of two types serves two of three new nodes (the m5.large one
/// within the 25 % premium over c5.large), and its idle cost is its stopped root volumes.
#[test]
fn warm_pool() {
    check("examples/warm-pool", "warm-pool.json");
}

/// A hibernated pool mixes only the listed types that can hibernate (m5zn is not a family the
/// EC2 user guide lists; the note says so), and idles at its root volumes grown by the
/// members' memory: two c5.large (4 GiB) on 20 GiB roots are 2 × 24 GiB of gp3 at
/// $0.08/GiB-month over 730 h. A running pool idles at its members' instance prices.
#[test]
fn warm_pool_states_in_the_plan() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        root().join("examples/warm-pool/workload.yaml"),
        dir.path().join("workload.yaml"),
    )
    .expect("copy");
    let provisioner = std::fs::read_to_string(root().join("examples/warm-pool/provisioner.yaml"))
        .expect("provisioner");
    let path = dir.path().display().to_string();
    let plan = |state: &str, types: &str| -> serde_json::Value {
        let yaml = provisioner
            .replace(
                "instanceTypes: [c5.large, m5.large]",
                &format!("instanceTypes: [{types}]"),
            )
            .replace(
                "maxPricePremium: \"25%\"",
                &format!("maxPricePremium: \"25%\"\n    state: {state}"),
            );
        std::fs::write(dir.path().join("provisioner.yaml"), yaml).expect("write");
        serde_json::from_str(&joiner(&["plan", "-o", "json", "-f", &path])).expect("json")
    };
    let out = plan("Hibernated", "c5.large, m5zn.large");
    let pool = &out["warm_pools"][0];
    let types: Vec<&str> = pool["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["instance_type"].as_str())
        .collect();
    assert_eq!(types, ["c5.large", "c5.large"], "{pool:#}");
    let idle = pool["idle_cost_per_hour"].as_f64().expect("idle");
    // Printed to 5 decimals.
    assert!((idle - 2.0 * 24.0 * 0.08 / 730.0).abs() < 1e-5, "{idle}");
    assert!(
        (idle - 2.0 * 20.0 * 0.08 / 730.0).abs() > 1e-4,
        "the memory counts: {idle}"
    );
    let note = pool["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("m5zn.large: the m5zn family does not support hibernation"),
        "{note}"
    );

    let out = plan("Running", "c5.large, m5.large");
    let pool = &out["warm_pools"][0];
    let prices: f64 = pool["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["price_per_hour"].as_f64())
        .sum();
    let idle = pool["idle_cost_per_hour"].as_f64().expect("idle");
    assert!(
        prices > 0.1 && (idle - prices).abs() < 1e-9,
        "{idle} vs {prices}: {pool:#}"
    );
}

/// With the pool's NodeClaims in the input, the plan uses the members that exist (one ready
/// m5.large in us-east-1c; a Warming one does not count) instead of a full pool from the spec.
/// Each new node may land in any zone (its claim allows every zone), so the member in
/// us-east-1c serves the first node, as the launch path would.
#[test]
fn warm_pool_members_from_the_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    for f in ["provisioner.yaml", "workload.yaml"] {
        std::fs::copy(
            root().join("examples/warm-pool").join(f),
            dir.path().join(f),
        )
        .expect("copy");
    }
    let member = |name: &str, phase: &str| {
        format!(
            "apiVersion: joiner.sh/v1alpha1\nkind: NodeClaim\nmetadata:\n  name: {name}\n  labels: {{joiner.sh/warm-pool: web}}\nspec:\n  provisionerName: web\nstatus:\n  instanceID: i-0123456789abcdef{}\n  instanceType: m5.large\n  zone: us-east-1c\n  capacityType: on-demand\n  warmPool: {{phase: {phase}}}\n",
            name.len() % 10
        )
    };
    std::fs::write(
        dir.path().join("members.yaml"),
        format!(
            "{}---\n{}",
            member("web-warm-a", "Warm"),
            member("web-warm-bb", "Warming")
        ),
    )
    .expect("write");
    let path = dir.path().display().to_string();
    let out: serde_json::Value =
        serde_json::from_str(&joiner(&["plan", "-o", "json", "-f", &path])).expect("json");
    // The planned nodes may land in any zone, as their claims allow: the first is served.
    let served: Vec<(&str, &str)> = out["new_nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|n| Some((n["name"].as_str()?, n["warm_pool_member"].as_str()?)))
        .collect();
    assert_eq!(served, [("web-1", "m5.large in us-east-1c")], "{out:#}");
    let pool = &out["warm_pools"][0];
    assert_eq!(pool["from_spec"], false);
    assert_eq!(pool["members"].as_array().map(Vec::len), Some(1));
    assert_eq!(pool["serves"], 1);
    // The members are capacity for no pod: not in-flight nodes of the plan.
    let existing = out["existing_nodes"].to_string();
    assert!(!existing.contains("web-warm"), "{existing}");
}

/// A dump taken during a scale-up: one claim launched and not registered, one whose Node
/// registered and is still starting (not Ready, startup and not-ready taints). Both are the
/// capacity the controller counts (`joiner_controller::inflight`): the pending pods go there
/// and nothing is bought again.
#[test]
fn node_claims_in_the_input_are_capacity_on_the_way() {
    let dir = tempfile::tempdir().expect("temp dir");
    let claim = |name: &str, instance: &str, node: Option<&str>| {
        let node_name = node
            .map(|n| format!("  nodeName: {n}\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: joiner.sh/v1alpha1\nkind: NodeClaim\nmetadata: {{name: {name}}}\nspec:\n  provisionerName: default\n  requirements:\n  - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}}\n  startupTaints: [{{key: example.com/agent-not-ready, effect: NoSchedule}}]\nstatus:\n  providerID: aws:///us-east-1a/{instance}\n  instanceID: {instance}\n  instanceType: m5.xlarge\n  zone: us-east-1a\n  capacityType: on-demand\n{node_name}  conditions: [{{type: Launched, status: \"True\", reason: Launched, message: \"\", lastTransitionTime: \"2026-12-01T00:00:00Z\"}}]\n"
        )
    };
    let text = format!(
        r#"apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {{name: default}}
spec:
  startupTaints: [{{key: example.com/agent-not-ready, effect: NoSchedule}}]
---
{}---
{}---
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-0-2
  labels: {{kubernetes.io/hostname: ip-10-0-0-2, joiner.sh/provisioner-name: default, joiner.sh/nodeclaim: starting, node.kubernetes.io/instance-type: m5.xlarge, topology.kubernetes.io/zone: us-east-1a, kubernetes.io/os: linux, kubernetes.io/arch: amd64, karpenter.sh/capacity-type: on-demand}}
spec:
  providerID: aws:///us-east-1a/i-0000000000000002
  taints:
  - {{key: node.kubernetes.io/not-ready, effect: NoSchedule}}
  - {{key: example.com/agent-not-ready, effect: NoSchedule}}
status:
  capacity: {{cpu: "4", memory: 16Gi, pods: "58"}}
  allocatable: {{cpu: 3920m, memory: 15Gi, pods: "58"}}
  conditions: [{{type: Ready, status: "False"}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: 4
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: c, image: i, resources: {{requests: {{cpu: 1500m, memory: 1Gi}}}}}}]
"#,
        claim("launching", "i-0000000000000001", None),
        claim("starting", "i-0000000000000002", Some("ip-10-0-0-2")),
    );
    std::fs::write(dir.path().join("dump.yaml"), text).expect("write");
    let path = dir.path().join("dump.yaml").display().to_string();
    let out: serde_json::Value =
        serde_json::from_str(&joiner(&["plan", "-o", "json", "-f", &path])).expect("json");
    assert_eq!(
        out["new_nodes"].as_array().map(Vec::len),
        Some(0),
        "{out:#}"
    );
    let mut used: Vec<(String, usize)> = out["existing_nodes"]
        .as_array()
        .expect("existing")
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or_default().to_string(),
                n["pods"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    used.sort();
    assert_eq!(
        used,
        [("ip-10-0-0-2".to_string(), 2), ("launching".to_string(), 2)],
        "{out:#}"
    );
}

#[test]
fn the_consolidation_dry_run_stops_after_its_steps_and_reports_its_time() {
    let all: serde_json::Value = serde_json::from_str(&consolidate("json")).expect("json");
    let one = joiner(&[
        "plan",
        "--consolidate",
        "--at",
        "2026-12-03T10:00:00Z",
        "--steps",
        "1",
        "-o",
        "json",
        "-f",
        "examples/consolidation",
    ]);
    let v: serde_json::Value = serde_json::from_str(&one).expect("json");
    let decisions = v["decisions"].as_array().expect("decisions");
    assert_eq!(decisions.len(), 1);
    assert_eq!(
        decisions[0], all["decisions"][0],
        "the first step of the whole plan"
    );
    assert!(
        v["planned_in_ms"].as_f64().is_some_and(|ms| ms >= 0.0),
        "{}",
        v["planned_in_ms"]
    );
    assert!(v["refused_moves"].is_array());
    // Each replacement is named as the moves name it.
    for d in all["decisions"].as_array().expect("decisions") {
        let names: Vec<&str> = d["replacements"]
            .as_array()
            .expect("replacements")
            .iter()
            .map(|r| r["name"].as_str().expect("name"))
            .collect();
        for m in d["moves"].as_array().expect("moves") {
            let to = m["to"].as_str().expect("to");
            assert!(
                !to.starts_with("replacement-") || names.contains(&to),
                "{to} not among {names:?}"
            );
        }
    }
    let table = joiner(&[
        "plan",
        "--consolidate",
        "--at",
        "2026-12-03T10:00:00Z",
        "-f",
        "examples/consolidation",
    ]);
    assert!(table.contains(" ms\n"), "{table}");
}

/// `-o wide` shows, per new node, what `-o json` gives as `node_claim`: the same labels,
/// requirements, taints, startup taints and allocatable, in columns.
#[test]
fn wide_columns_are_the_json_node_claim() {
    for example in [
        "examples/constraints/provisioner-choice.yaml",
        "examples/constraints/zone-spread.yaml",
        "examples/mixed-cluster",
    ] {
        let json: serde_json::Value = serde_json::from_str(&plan_json(example)).expect("plan JSON");
        let wide = joiner(&["plan", "-o", "wide", "-f", example]);
        let mut lines = wide.lines();
        let header = lines.next().expect("a header");
        let names = [
            "NEW NODE",
            "PROVISIONER",
            "INSTANCE TYPE",
            "ZONE",
            "CAPACITY",
            "$/HOUR",
            "PODS",
            "LABELS",
            "REQUIREMENTS",
            "TAINTS",
            "STARTUP TAINTS",
            "ALLOCATABLE",
        ];
        // Columns start where their header does (cells are left-aligned under it).
        let starts: Vec<usize> = names
            .iter()
            .map(|n| header.find(n).unwrap_or_else(|| panic!("{n} in {header}")))
            .collect();
        let nodes = json["new_nodes"].as_array().expect("new nodes");
        assert!(!nodes.is_empty(), "{example}: no new node to compare");
        for node in nodes {
            let line = lines.next().expect("a row per new node");
            let cell = |i: usize| -> &str {
                let end = starts.get(i + 1).copied().unwrap_or(line.len());
                line[starts[i]..end.min(line.len())].trim()
            };
            assert_eq!(cell(0), node["name"].as_str().expect("name"), "{line}");
            let claim = &node["node_claim"];
            let pairs = |v: &serde_json::Value| {
                let m = v.as_object().expect("a map");
                if m.is_empty() {
                    return "<none>".to_string();
                }
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().expect("a string")))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let list = |v: &serde_json::Value| {
                let items: Vec<&str> = v
                    .as_array()
                    .expect("a list")
                    .iter()
                    .map(|t| t.as_str().expect("a string"))
                    .collect();
                if items.is_empty() {
                    "<none>".to_string()
                } else {
                    items.join(",")
                }
            };
            let requirements: Vec<String> = claim["requirements"]
                .as_array()
                .expect("requirements")
                .iter()
                .map(|r| {
                    let values: Vec<&str> = r["values"]
                        .as_array()
                        .expect("values")
                        .iter()
                        .map(|v| v.as_str().expect("a string"))
                        .collect();
                    let mut s = format!(
                        "{} {}",
                        r["key"].as_str().expect("key"),
                        r["operator"].as_str().expect("operator")
                    );
                    if !values.is_empty() {
                        s.push_str(&format!(" [{}]", values.join(",")));
                    }
                    s
                })
                .collect();
            assert_eq!(cell(7), pairs(&claim["labels"]), "{example}: labels");
            assert_eq!(cell(8), requirements.join("; "), "{example}: requirements");
            assert_eq!(cell(9), list(&claim["taints"]), "{example}: taints");
            assert_eq!(cell(10), list(&claim["startup_taints"]), "{example}");
            assert_eq!(cell(11), pairs(&claim["allocatable"]), "{example}");
        }
    }
}
