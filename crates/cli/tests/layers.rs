//! Which way the code is built: `joiner plan` (and `plan --consolidate`) reads cluster objects
//! through joiner-apis's pure layer (`joiner_apis::cluster`), the one the controller uses too,
//! never through the controller crate: what a plan computes cannot drift from the controller
//! by being written twice, nor depend on the controller's runtime.

use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_plan_path_does_not_use_the_controller() {
    let mut files: Vec<PathBuf> = [
        "plan.rs",
        "consolidate.rs",
        "warm_pools.rs",
        "output.rs",
        "claim_view.rs",
        "import.rs",
        "render.rs",
    ]
    .iter()
    .map(|f| src().join(f))
    .collect();
    rust_files(&src().join("manifest"), &mut files);
    assert!(files.len() > 8, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        assert!(
            !code.contains("joiner_controller"),
            "{} uses the controller crate; pure logic belongs in joiner_apis::cluster",
            file.display()
        );
    }
    // The plan and the controller settle their snapshots, count the NodeClaims' capacity and
    // read the disruption inputs with the one function of the shared layer each.
    let read = |path: &str| std::fs::read_to_string(src().join(path)).expect(path);
    let shared = [
        (
            "joiner_apis::cluster::settle(",
            "manifest/mod.rs",
            "../../controller/src/state.rs",
        ),
        (
            "joiner_apis::cluster::claimed_capacity(",
            "plan.rs",
            "../../controller/src/state.rs",
        ),
        (
            "disruption_inputs(",
            "plan.rs",
            "../../controller/src/disruption/decide.rs",
        ),
    ];
    for (call, cli, controller) in shared {
        for file in [cli, controller] {
            let text = read(file);
            // Outside an inline test module (a `mod tests;` declaration may come first).
            let code = text
                .split("#[cfg(test)]\nmod tests {")
                .next()
                .unwrap_or_default();
            assert!(code.contains(call), "{file} does not call {call}");
        }
    }
}
