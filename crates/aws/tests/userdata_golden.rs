//! Golden user data per AMI family, and the AL2 script run against a stub bootstrap.sh.
//! Regenerate the golden files with `JOINER_UPDATE_GOLDEN=1 cargo nextest run -p joiner-aws
//! userdata_golden`.

use std::path::Path;
use std::process::Command;

use joiner_apis::{NodeTemplate, Provisioner};
use joiner_aws::allocatable::Arch;
use joiner_aws::ami::AmiVariant;
use joiner_aws::launch_template::{build, InstanceFacts, LaunchContext, ResolvedLaunchTemplate};
use joiner_aws::userdata::{mime, ClusterInfo};
use joiner_core::WarmState;

const PROVISIONER: &str = r#"
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: web}
spec:
  providerRef: {name: default}
  labels: {team: web, tier: frontend}
  taints: [{key: dedicated, value: web, effect: NoSchedule}]
  startupTaints: [{key: node.cilium.io/agent-not-ready, effect: NoExecute}]
  kubeletConfiguration:
    clusterDNS: [10.100.0.10]
    systemReserved: {cpu: 100m, memory: 200Mi}
    kubeReserved: {cpu: 80m}
    evictionHard: {memory.available: 5%}
    evictionSoft: {memory.available: 10%}
    evictionSoftGracePeriod: {memory.available: 1m0s}
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80
    cpuCFSQuota: true
"#;

fn node_template(family: &str, user_data: Option<&str>) -> NodeTemplate {
    let mut yaml = format!(
        "apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {{name: default}}\nspec:\n  amiFamily: {family}\n  subnetSelector: {{team: web}}\n  securityGroupSelector: {{team: web}}\n  amiSelector: {{aws-ids: ami-123}}\n"
    );
    if let Some(ud) = user_data {
        yaml.push_str("  userData: |\n");
        for line in ud.lines() {
            yaml.push_str(&format!("    {line}\n"));
        }
    }
    serde_yaml::from_str(&yaml).expect("node template")
}

fn cluster() -> ClusterInfo {
    ClusterInfo {
        name: "prod".into(),
        endpoint: "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com".into(),
        ca_bundle: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t".into(),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: None,
    }
}

fn m5_large() -> InstanceFacts {
    InstanceFacts::from_eni_limits("m5.large", 2, Arch::Amd64, AmiVariant::Standard, 3, 10)
}

fn resolve(
    nt: &NodeTemplate,
    instance: &InstanceFacts,
    warm_pool: Option<WarmState>,
) -> ResolvedLaunchTemplate {
    let prov: Provisioner = serde_yaml::from_str(PROVISIONER).expect("provisioner");
    build(&LaunchContext {
        cluster: &cluster(),
        node_template: nt,
        provisioner: &prov,
        instance,
        image_id: "ami-123",
        security_group_ids: &["sg-1".to_string()],
        default_instance_profile: None,
        warm_pool,
    })
    .expect("launch template")
}

fn check(golden: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/userdata")
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
        "user data differs from {golden}; rerun with JOINER_UPDATE_GOLDEN=1 if intended\n--- actual ---\n{actual}"
    );
}

const USER_SCRIPT: &str = "#!/bin/bash\necho 'installing the agent'\n";

const USER_MIME: &str = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"USER\"\n\n--USER\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho pre-join\n--USER\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n--USER--\n";

#[test]
fn al2() {
    let lt = resolve(&node_template("AL2", None), &m5_large(), None);
    check("al2.txt", &lt.user_data.decoded);
}

#[test]
fn al2_merged_with_a_user_script() {
    let lt = resolve(&node_template("AL2", Some(USER_SCRIPT)), &m5_large(), None);
    check("al2-user-script.txt", &lt.user_data.decoded);
}

#[test]
fn al2023_merged_with_user_mime() {
    let lt = resolve(&node_template("AL2023", Some(USER_MIME)), &m5_large(), None);
    check("al2023-user-mime.txt", &lt.user_data.decoded);
}

#[test]
fn bottlerocket_merged_with_user_toml() {
    let user = "[settings.kubernetes]\ncluster-name = \"not-this-one\"\n\n[settings.kubernetes.node-labels]\nteam = \"platform\"\n\n[settings.host-containers.admin]\nenabled = true\n";
    let lt = resolve(
        &node_template("Bottlerocket", Some(user)),
        &m5_large(),
        None,
    );
    check("bottlerocket.toml", &lt.user_data.decoded);
}

#[test]
fn custom_is_passed_through() {
    let lt = resolve(
        &node_template("Custom", Some(USER_SCRIPT)),
        &m5_large(),
        None,
    );
    assert_eq!(lt.user_data.decoded, USER_SCRIPT);
    check("custom.txt", &lt.user_data.decoded);
}

#[test]
fn warm_pool_al2_and_al2023() {
    let lt = resolve(
        &node_template("AL2", None),
        &m5_large(),
        Some(WarmState::Stopped),
    );
    check("al2-warm-pool.txt", &lt.user_data.decoded);
    let lt = resolve(
        &node_template("AL2023", None),
        &m5_large(),
        Some(WarmState::Stopped),
    );
    check("al2023-warm-pool.txt", &lt.user_data.decoded);
    assert!(!lt.spec.hibernation);
}

#[test]
fn warm_pool_hibernated_al2023() {
    // m5.large: 8 GiB of memory, written to a root volume grown from 20 to 28 GiB, encrypted.
    let mut facts = m5_large();
    facts.memory_mib = Some(8192);
    let lt = resolve(
        &node_template("AL2023", None),
        &facts,
        Some(WarmState::Hibernated),
    );
    check("al2023-warm-pool-hibernated.txt", &lt.user_data.decoded);
    assert!(lt.spec.hibernation);
    let root = &lt.spec.block_device_mappings[0];
    assert_eq!(root.device_name, "/dev/xvda");
    assert_eq!(root.volume_size_gib, Some(28));
    assert_eq!(root.encrypted, Some(true));
    // Without the type's memory the root cannot be sized: refused, naming the field.
    let err = build(&LaunchContext {
        cluster: &cluster(),
        node_template: &node_template("AL2023", None),
        provisioner: &serde_yaml::from_str(PROVISIONER).expect("provisioner"),
        instance: &m5_large(),
        image_id: "ami-123",
        security_group_ids: &[],
        default_instance_profile: None,
        warm_pool: Some(WarmState::Hibernated),
    })
    .expect_err("memory unknown");
    assert!(
        err.to_string().contains("spec.blockDeviceMappings")
            && err.to_string().contains("m5.large"),
        "{err}"
    );
}

#[test]
fn type_absent_from_eni_max_pods_txt_gets_its_computed_max_pods() {
    // c8ib.large is not in the AMI's eni-max-pods.txt; the embedded catalog's ENI-derived
    // value (2 ENIs... 78 pods in Karpenter's table) is passed explicitly.
    let catalog = joiner_aws::embedded::cached("us-east-1").expect("catalog");
    let it = catalog
        .instance_types
        .iter()
        .find(|t| t.name == "c8ib.large")
        .expect("c8ib.large in the embedded catalog");
    let facts = InstanceFacts::from_catalog(it).expect("facts");
    assert_eq!(facts.eni_max_pods, 78);
    let lt = resolve(&node_template("AL2", None), &facts, None);
    assert!(lt.user_data.decoded.contains("--max-pods=78"));
    check("al2-c8ib-large.txt", &lt.user_data.decoded);
}

/// The AL2 script, run by bash with a stub bootstrap.sh that records its arguments, passes
/// exactly the arguments bootstrap.sh needs.
#[test]
fn al2_script_calls_bootstrap_with_the_expected_arguments() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stub = dir.path().join("bootstrap.sh");
    let record = dir.path().join("argv");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/bash\nprintf '%s\\n' \"$@\" > '{}'\n",
            record.display()
        ),
    )
    .expect("write stub");
    make_executable(&stub);

    let prov: Provisioner = serde_yaml::from_str(PROVISIONER).expect("provisioner");
    let nt = node_template("AL2", Some(USER_SCRIPT));
    let mut bootstrap = joiner_aws::userdata::NodeBootstrap::for_provisioner(cluster(), &prov, 29);
    bootstrap.al2_bootstrap_script = stub.display().to_string();
    let ud = joiner_aws::userdata::render(
        nt.ami_family(),
        nt.name(),
        nt.spec.user_data.as_deref(),
        &bootstrap,
    )
    .expect("user data");
    let parts = mime::user_parts(nt.name(), &ud.decoded).expect("mime");
    assert_eq!(parts.len(), 2, "user part, then joiner's");
    let script = dir.path().join("joiner.sh");
    std::fs::write(&script, &parts[1].body).expect("write script");

    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let argv = std::fs::read_to_string(&record).expect("stub was called");
    let argv: Vec<&str> = argv.lines().collect();
    let kubelet_args = "--node-labels=joiner.sh/provisioner-name=web,team=web,tier=frontend \
         --register-with-taints=dedicated=web:NoSchedule,node.cilium.io/agent-not-ready:NoExecute,joiner.sh/unregistered:NoSchedule \
         --max-pods=29 \
         --system-reserved=cpu=100m,memory=200Mi \
         --kube-reserved=cpu=80m \
         --eviction-hard=memory.available<5% \
         --eviction-soft=memory.available<10% \
         --eviction-soft-grace-period=memory.available=1m0s \
         --image-gc-high-threshold=85 \
         --image-gc-low-threshold=80 \
         --cpu-cfs-quota=true";
    assert_eq!(
        argv,
        [
            "prod",
            "--apiserver-endpoint",
            "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com",
            "--b64-cluster-ca",
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t",
            "--dns-cluster-ip",
            "10.100.0.10",
            "--use-max-pods",
            "false",
            "--kubelet-extra-args",
            kubelet_args,
        ]
    );
}

#[cfg(unix)]
fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The warm-pool AL2 script, run by bash under a scratch root (its absolute paths rewritten
/// into a temp dir, `systemctl` a stub): the first boot installs and enables the join unit but
/// never calls bootstrap.sh; the installed join script then calls it with the normal arguments.
#[test]
fn warm_pool_al2_first_boot_installs_the_unit_and_does_not_join() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let bin = root.join("bin");
    std::fs::create_dir_all(root.join("etc/systemd/system")).expect("mkdir");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let argv = root.join("bootstrap-argv");
    let calls = root.join("systemctl-calls");
    let stub = bin.join("bootstrap.sh");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/bash\nprintf '%s\\n' \"$@\" > '{}'\n",
            argv.display()
        ),
    )
    .expect("write stub");
    make_executable(&stub);
    let systemctl = bin.join("systemctl");
    std::fs::write(
        &systemctl,
        format!("#!/bin/bash\necho \"$*\" >> '{}'\n", calls.display()),
    )
    .expect("write systemctl stub");
    make_executable(&systemctl);

    let prov: Provisioner = serde_yaml::from_str(PROVISIONER).expect("provisioner");
    let mut bootstrap = joiner_aws::userdata::NodeBootstrap::for_provisioner(cluster(), &prov, 29);
    bootstrap.al2_bootstrap_script = stub.display().to_string();
    bootstrap.warm_pool = Some(WarmState::Stopped);
    let ud = joiner_aws::userdata::render(joiner_apis::AmiFamily::Al2, "default", None, &bootstrap)
        .expect("user data");
    let parts = mime::user_parts("default", &ud.decoded).expect("mime");
    let rooted = |s: &str| {
        s.replace(" /etc/", &format!(" {}/etc/", root.display()))
            .replace("=/etc/", &format!("={}/etc/", root.display()))
            .replace("!/var/", &format!("!{}/var/", root.display()))
            .replace(" /var/", &format!(" {}/var/", root.display()))
            .replace("\n/etc/", &format!("\n{}/etc/", root.display()))
    };
    let script = root.join("first-boot.sh");
    let rooted_script = rooted(&parts[0].body);
    // Nothing may escape the scratch root (the tests may run as root).
    assert!(
        !rooted_script.contains(" /etc/")
            && !rooted_script.contains("=/etc/")
            && !rooted_script.contains(" /var/"),
        "{rooted_script}"
    );
    std::fs::write(&script, rooted_script).expect("write script");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let out = Command::new("bash")
        .arg(&script)
        .env("PATH", &path)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "first boot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!argv.exists(), "the first (warm) boot must not bootstrap");
    let calls_text = std::fs::read_to_string(&calls).expect("systemctl was called");
    assert_eq!(
        calls_text.lines().collect::<Vec<_>>(),
        [
            "daemon-reload",
            "enable joiner-join.service",
            "--no-block poweroff"
        ]
    );
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/joiner-join.service"))
        .expect("unit installed");
    assert!(unit.contains(&format!(
        "ExecStart={}/etc/joiner/on-boot.sh",
        root.display()
    )));
    assert!(unit.contains("ConditionPathExists=!"));

    // The next start: the unit runs the boot script, which joins (no hold boot for a
    // Stopped member) and marks the node joined.
    let out = Command::new(root.join("etc/joiner/on-boot.sh"))
        .env("PATH", &path)
        .output()
        .expect("run join.sh");
    assert!(
        out.status.success(),
        "join failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let argv = std::fs::read_to_string(&argv).expect("bootstrap was called");
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!(argv[0], "prod");
    assert_eq!(argv[argv.len() - 2], "--kubelet-extra-args");
    assert!(argv[argv.len() - 1].contains("--max-pods=29"));
    assert!(root.join("var/lib/joiner/joined").exists());
}
