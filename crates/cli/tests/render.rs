//! `joiner launch-template render` on fixture files: the decoded bootstrap line is printed, and
//! bad input fails with exit code 2 and a message naming file, object and field.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/render")
        .join(name)
}

fn render(node_template: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["launch-template", "render", "--nodetemplate"])
        .arg(fixture(node_template))
        .arg("--provisioner")
        .arg(fixture("provisioner.yaml"))
        .args([
            "--cluster-name",
            "prod",
            "--cluster-endpoint",
            "https://ABC.gr7.us-east-1.eks.amazonaws.com",
            "--cluster-ca-bundle",
            "Q0FCVU5ETEU=",
        ])
        .args(extra)
        .output()
        .expect("run joiner")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "render failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}

#[test]
fn al2_prints_settings_and_the_decoded_bootstrap_line() {
    // c8ib.large is missing from the AMI's eni-max-pods.txt: max-pods comes from ENI data.
    let text = stdout(&render(
        "nodetemplate-al2.yaml",
        &[
            "--instance-type",
            "c8ib.large",
            "--kubernetes-version",
            "1.31",
        ],
    ));
    assert!(text.contains(
        "  ami: <resolved at launch from SSM parameter /aws/service/eks/optimized-ami/1.31/amazon-linux-2/recommended/image_id>\n"
    ), "{text}");
    assert!(text.contains("  max-pods: 78 (ENI limit 78)\n"), "{text}");
    assert!(
        text.contains("httpPutResponseHopLimit=1 httpTokens=required"),
        "{text}"
    );
    assert!(
        text.contains("    /dev/xvda: 20 GiB gp3 encrypted delete-on-termination\n"),
        "{text}"
    );
    assert!(
        text.contains("    kubernetes.io/cluster/prod: owned\n"),
        "{text}"
    );
    let decoded = text
        .split_once("--- user data (decoded) ---\n")
        .expect("decoded user data section")
        .1;
    assert!(
        decoded.contains("echo \"installing the agent\""),
        "{decoded}"
    );
    assert!(decoded.contains(
        "'/etc/eks/bootstrap.sh' \\\n  'prod' \\\n  --apiserver-endpoint 'https://ABC.gr7.us-east-1.eks.amazonaws.com' \\\n  --b64-cluster-ca 'Q0FCVU5ETEU=' \\\n  --use-max-pods false \\\n  --kubelet-extra-args '--node-labels=joiner.sh/provisioner-name=web,team=web --register-with-taints=dedicated=web:NoSchedule,joiner.sh/unregistered:NoSchedule --max-pods=78'\n"
    ), "{decoded}");
}

#[test]
fn with_an_ami_the_name_is_printed_and_stable() {
    let args = [
        "--instance-type",
        "m5.large",
        "--ami-id",
        "ami-0123",
        "--service-cidr",
        "10.100.0.0/16",
    ];
    let a = stdout(&render("nodetemplate-al2023.yaml", &args));
    let b = stdout(&render("nodetemplate-al2023.yaml", &args));
    assert_eq!(a, b);
    let name = a
        .lines()
        .find_map(|l| l.strip_prefix("  name: "))
        .expect("name line");
    assert!(name.starts_with("joiner/prod/"), "{name}");
    assert!(a.contains("Content-Type: application/node.eks.aws"), "{a}");
    assert!(a.contains("maxPods: 29"), "{a}");
}

#[test]
fn bad_field_names_file_object_and_field() {
    let out = render("nodetemplate-bad.yaml", &["--instance-type", "m5.large"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nodetemplate-bad.yaml: document 1 (NodeTemplate broken): spec.metadataOptions.httpPutResponseHopLimit: invalid type"), "{err}");
}

#[test]
fn missing_service_cidr_and_unknown_type_are_usage_errors() {
    let out = render("nodetemplate-al2023.yaml", &["--instance-type", "m5.large"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs the cluster's service CIDR") && err.contains("--service-cidr"),
        "{err}"
    );

    let out = render("nodetemplate-al2.yaml", &["--instance-type", "z99.huge"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("z99.huge is not in the embedded catalog"),
        "{err}"
    );

    // ...which the ENI flags cure.
    let text = stdout(&render(
        "nodetemplate-al2.yaml",
        &[
            "--instance-type",
            "z99.huge",
            "--enis",
            "4",
            "--ipv4-per-eni",
            "15",
            "--vcpus",
            "4",
        ],
    ));
    assert!(text.contains("--max-pods=58"), "{text}");
}
