//! Loader tests: each kind, request arithmetic, scheduling constraints and error messages.

mod dump;
mod errors;
mod kinds;
mod requests;
mod scheduling;
mod volumes;

use super::{load_text, Loaded};

/// Loads inline YAML, panicking with the loader's message on error.
fn load_ok(text: &str) -> Loaded {
    match load_text("test.yaml", text) {
        Ok(l) => l,
        Err(e) => panic!("load failed: {e}"),
    }
}

/// Loads inline YAML that must fail and returns the message.
fn load_err(text: &str) -> String {
    match load_text("test.yaml", text) {
        Ok(_) => panic!("load should have failed"),
        Err(e) => e.to_string(),
    }
}

/// A Pod manifest named `p` with `spec` (indented by two spaces under `spec:`).
fn pod_yaml(spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {{app: web, rev: r1}}\nspec:\n{spec}")
}

/// The one pod of a Pod manifest.
fn one_pod(spec: &str) -> joiner_core::Pod {
    let mut l = load_ok(&pod_yaml(spec));
    assert_eq!(l.snapshot.pods.len(), 1);
    l.snapshot.pods.remove(0)
}
