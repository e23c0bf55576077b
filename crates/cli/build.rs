//! `joiner --version` names the commit it was built from: `JOINER_COMMIT` when the build sets
//! it (the Dockerfile passes it as a build argument: an image's context has no `.git`), else
//! `git rev-parse` of the checkout, else `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=JOINER_COMMIT");
    let commit = std::env::var("JOINER_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_string());
    println!(
        "cargo:rustc-env=JOINER_VERSION={} (commit {})",
        env!("CARGO_PKG_VERSION"),
        commit.trim()
    );
}

/// The checkout's commit, and the files whose change means a new one.
fn git_commit() -> Option<String> {
    let git = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.git");
    let head = git.join("HEAD");
    if head.is_file() {
        println!("cargo:rerun-if-changed={}", head.display());
    }
    if let Ok(text) = std::fs::read_to_string(&head) {
        if let Some(branch) = text.trim().strip_prefix("ref: ") {
            let reference = git.join(branch);
            if reference.is_file() {
                println!("cargo:rerun-if-changed={}", reference.display());
            }
        }
    }
    let packed = git.join("packed-refs");
    if packed.is_file() {
        println!("cargo:rerun-if-changed={}", packed.display());
    }
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
}
