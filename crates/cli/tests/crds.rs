//! The CRDs checked in under charts/joiner/crds must be exactly what `joiner crds` generates.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn chart_crds_match_the_generated_ones() {
    let dir = tempdir();
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["crds", "-o"])
        .arg(&dir)
        .output()
        .expect("run joiner crds");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chart = repo().join("charts/joiner/crds");
    let mut generated: Vec<_> = std::fs::read_dir(&dir)
        .expect("generated dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    generated.sort();
    let mut checked_in: Vec<_> = std::fs::read_dir(&chart)
        .expect("charts/joiner/crds")
        .map(|e| e.expect("entry").file_name())
        .collect();
    checked_in.sort();
    assert_eq!(generated, checked_in, "CRD files differ in name");
    for name in &generated {
        let new = std::fs::read_to_string(dir.join(name)).expect("generated");
        let old = std::fs::read_to_string(chart.join(name)).expect("checked in");
        assert!(
            new == old,
            "charts/joiner/crds/{} is stale; regenerate with `cargo run -p joiner -- crds -o charts/joiner/crds`",
            name.to_string_lossy()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn printed_crds_are_a_yaml_stream_of_three_definitions() {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .arg("crds")
        .output()
        .expect("run joiner crds");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf8");
    let kinds: Vec<String> = text
        .split("\n---\n")
        .chain(std::iter::empty())
        .flat_map(|doc| {
            doc.lines()
                .filter(|l| l.starts_with("    kind: "))
                .map(|l| l.trim_start_matches("    kind: ").to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(kinds, ["NodeClaim", "NodeTemplate", "Provisioner"]);
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("joiner-crds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
