//! `joiner plan | head` must end quietly when the reader goes away, not panic.

use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_ends_the_command_without_a_panic() {
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/web-fleet.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["plan", "-f"])
        .arg(&example)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn joiner");
    // Close the read end before joiner writes: every write then fails with EPIPE.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
}
