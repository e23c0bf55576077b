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
    // The plan and the controller count the NodeClaims' capacity with the one function of the
    // shared layer.
    let plan = std::fs::read_to_string(src().join("plan.rs")).expect("plan.rs");
    let state = std::fs::read_to_string(src().join("../../controller/src/state.rs"))
        .expect("controller state.rs");
    for (file, text) in [("plan.rs", &plan), ("controller state.rs", &state)] {
        assert!(
            text.contains("joiner_apis::cluster::claimed_capacity("),
            "{file} does not count claimed capacity through joiner_apis::cluster"
        );
    }
}
