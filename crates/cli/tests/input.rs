//! Where `joiner plan` reads from: standard input with `-f -` (as kubectl), files with a UTF-8
//! byte-order mark, and input that holds no object at all, which is a usage error (exit 2).

use std::io::Write;
use std::process::{Command, Output, Stdio};

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\nspec:\n  containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]\n";

fn plan(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .arg("plan")
        .args(args)
        .args(["-o", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn joiner");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

fn planned_pods(out: &Output) -> Vec<String> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json plan");
    v["new_nodes"]
        .as_array()
        .expect("new nodes")
        .iter()
        .flat_map(|n| n["pods"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect()
}

#[test]
fn dash_reads_the_manifests_from_standard_input() {
    let out = plan(&["-f", "-"], POD.as_bytes());
    assert_eq!(planned_pods(&out), ["shop/p"]);
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bom.yaml");
    let mut text = "\u{feff}".as_bytes().to_vec();
    text.extend_from_slice(POD.as_bytes());
    std::fs::write(&path, text).expect("write");
    let out = plan(&["-f", path.to_str().expect("utf-8 path")], b"");
    assert_eq!(planned_pods(&out), ["shop/p"]);
}

#[test]
fn input_without_any_object_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), "not yaml").expect("write");
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "# only a comment\n---\n").expect("write");
    for args in [
        vec!["-f", "/dev/null"],
        vec!["-f", dir.path().to_str().expect("utf-8")],
        vec!["-f", empty.to_str().expect("utf-8")],
        vec!["-f", "-"],
    ] {
        let out = plan(&args, b"");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no Kubernetes objects found in"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn provisioners_all_skipped_do_not_fall_back_to_the_default() {
    let text = format!(
        "{POD}---\napiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {{name: leaving, deletionTimestamp: '2026-01-01T00:00:00Z', finalizers: [x]}}\nspec: {{}}\n"
    );
    let out = plan(&["-f", "-"], text.as_bytes());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("every Provisioner in the input is skipped")
            && stderr.contains("skipped Provisioner leaving: it is being deleted"),
        "{stderr}"
    );
}
