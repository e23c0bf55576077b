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

/// `joiner bench --stores` (the controller's memory benchmark) runs end to end on a small
/// cluster: stores, snapshot, an API client, a live catalog standing in the embedded tables,
/// and a planning pass, each step's memory in its table.
#[test]
fn the_memory_benchmark_measures_every_part_a_controller_holds() {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["bench", "--stores", "20", "--pods", "200"])
        .output()
        .expect("run joiner bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(
        stdout.contains("| with client and live catalog MiB | stores MiB |")
            && stdout.contains("| after planning MiB | peak MiB |"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| 200 | 20 |"))
        .expect("the measured row");
    let figures: Vec<f64> = row
        .split('|')
        .filter_map(|c| c.trim().parse::<f64>().ok())
        .collect();
    assert_eq!(figures.len(), 9, "{row}");
    assert!(figures[2..].iter().all(|&mib| mib > 0.0), "{row}");
    // The live catalog stood in the embedded tables: hundreds of types, and the 40 pending
    // pods (a fifth) were planned.
    let types: usize = stdout
        .split("live catalog: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the live catalog's size");
    assert!(types > 100, "{stdout}");
    assert!(stdout.contains("pods unschedulable"), "{stdout}");
}

/// `joiner bench --consolidate --node-cpus N` launches the workload on types of at least N
/// vCPUs: the same pods on far fewer nodes (the 1,000-node, 20,000-pod shape).
#[test]
fn the_disruption_benchmark_can_launch_on_larger_nodes() {
    let nodes = |extra: &[&str]| -> usize {
        let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
            .args([
                "bench",
                "--consolidate",
                "30",
                "--pods",
                "1000",
                "--repeat",
                "1",
            ])
            .args(extra)
            .output()
            .expect("run joiner bench");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{:?}: {stderr}", out.status);
        let row = stdout
            .lines()
            .find(|l| l.starts_with("| 1000 |"))
            .unwrap_or_else(|| panic!("the measured row: {stdout}"));
        row.split('|')
            .filter_map(|c| c.trim().parse::<usize>().ok())
            .nth(2)
            .unwrap_or_else(|| panic!("the node count: {row}"))
    };
    let small = nodes(&[]);
    let large = nodes(&["--node-cpus", "32"]);
    assert!(
        large > 0 && large * 2 < small,
        "{large} nodes of 32 vCPUs or more, {small} of any size"
    );
}
