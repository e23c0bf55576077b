//! Which way the controller is built: its modules import one another in layers, never in a
//! circle. From the bottom:
//!
//! 0. the toolbox: `k8s/` (API codes, claims, patches, stores…), `metrics`, `http`,
//!    `settings`, `pod_record`, `leader`, `cluster_facts`, `instrumented`, `crypto`, `logging`;
//! 1. the state cache: `watch`, `state`;
//! 2. `context` (the state, the clients and the cloud handed to every reconciler);
//! 3. `reconcile`: what every reconciler shares (its error, a pass's first error, deleting a
//!    claim, when a claim is initialized, the disrupted taint, the loop a pass runs in);
//! 4. `launcher`: NodeClaims written and launched, for every reconciler that buys a node;
//! 5. the reconcilers: `provisioning`, `lifecycle`, `warm_pool`, `disruption`, `interruption`,
//!    `status`;
//! 6. `runtime` and the crate root.
//!
//! A module imports only from its own layer or below, the module graph has no cycle, and no
//! reconciler imports another: they talk through the objects they write (a replacement is a
//! NodeClaim the launcher launches, an old node a claim termination ends). The graph is read
//! from the sources: `crate::`, `super::` and child-module paths outside comments and
//! `#[cfg(test)]` code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The reconcilers' layer.
const RECONCILERS: usize = 5;

fn layer(module: &str) -> usize {
    let top = module.split('/').next().unwrap_or_default();
    match top {
        "k8s" | "metrics" | "http" | "settings" | "pod_record" | "leader" | "cluster_facts"
        | "instrumented" | "crypto" | "logging" => 0,
        "watch" | "state" => 1,
        "context" => 2,
        "reconcile" => 3,
        "launcher" => 4,
        "provisioning" | "lifecycle" | "warm_pool" | "disruption" | "interruption" | "status" => {
            RECONCILERS
        }
        "runtime" | "" => 6,
        other => panic!("module {other} has no layer: add it to this test's map"),
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every module of the crate (`lifecycle/gc`, `""` for lib.rs) and its file.
fn modules() -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut BTreeMap<String, PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(src())
                    .expect("under src")
                    .with_extension("")
                    .to_string_lossy()
                    .replace('\\', "/");
                let name = match rel.as_str() {
                    "lib" => String::new(),
                    r => r.strip_suffix("/mod").unwrap_or(r).to_string(),
                };
                if name == "tests" || name.ends_with("/tests") || name.contains("/tests/") {
                    continue;
                }
                out.insert(name, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&src(), &mut out);
    out
}

/// The code of `path` the graph reads: before `#[cfg(test)]`, comment lines dropped.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("source");
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or_default();
    before_tests
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifier path starting at `rest` (`a::b::C`), as segments.
fn path_at(rest: &str) -> Vec<String> {
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(rest.len());
    rest[..end]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The paths of a `{…}` use group starting at `rest` (after the `{`), with `prefix`.
fn group_paths(prefix: &[String], rest: &str, out: &mut Vec<Vec<String>>) {
    let mut depth = 0;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in rest.chars() {
        match c {
            '{' => {
                depth += 1;
                item.push(c);
            }
            '}' if depth == 0 => break,
            '}' => {
                depth -= 1;
                item.push(c);
            }
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ => item.push(c),
        }
    }
    items.push(item);
    for item in items {
        let item = item.trim();
        if let Some((head, inner)) = item.split_once('{') {
            let mut p = prefix.to_vec();
            p.extend(path_at(head));
            group_paths(&p, inner, out);
        } else if !item.is_empty() {
            let mut p = prefix.to_vec();
            p.extend(path_at(item).into_iter().filter(|s| s != "self"));
            out.push(p);
        }
    }
}

/// The modules `module` (at `path`) refers to.
fn references(module: &str, path: &Path, all: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let text = code(path);
    let here: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split('/').map(str::to_string).collect()
    };
    let parent: Vec<String> = here[..here.len().saturating_sub(1)].to_vec();
    let mut paths: Vec<Vec<String>> = Vec::new();
    for (marker, base) in [("crate::", Vec::new()), ("super::", parent)] {
        for (at, _) in text.match_indices(marker) {
            let before = text[..at].chars().last();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = &text[at + marker.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                group_paths(&base, group, &mut paths);
            } else {
                let mut p = base.clone();
                p.extend(path_at(rest));
                paths.push(p);
            }
        }
    }
    // A child module this file declares and uses.
    for line in text.lines() {
        let l = line.trim();
        let decl = l
            .strip_prefix("pub mod ")
            .or_else(|| l.strip_prefix("pub(crate) mod "))
            .or_else(|| l.strip_prefix("mod "));
        if let Some(child) = decl.and_then(|d| d.strip_suffix(';')) {
            let used =
                text.contains(&format!("{child}::")) || text.contains(&format!("use {child}"));
            if used {
                let mut p = here.clone();
                p.push(child.to_string());
                paths.push(p);
            }
        }
    }
    let mut out = BTreeSet::new();
    for p in paths {
        for k in (1..=p.len()).rev() {
            let candidate = p[..k].join("/");
            if all.contains_key(&candidate) {
                if candidate != module {
                    out.insert(candidate);
                }
                break;
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let all = modules();
    all.iter()
        .map(|(m, p)| (m.clone(), references(m, p, &all)))
        .collect()
}

/// A cycle of `graph`, if any.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for n in graph.get(m).into_iter().flatten() {
            match state.get(n).copied().unwrap_or(0) {
                0 => {
                    if let Some(c) = visit(n, graph, state, stack) {
                        return Some(c);
                    }
                }
                1 => {
                    let from = stack.iter().position(|s| s == n).unwrap_or(0);
                    let mut c = stack[from..].to_vec();
                    c.push(n.clone());
                    return Some(c);
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in graph.keys() {
        if state.get(m).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(m, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_controller_has_no_import_cycle() {
    let g = graph();
    assert!(g.len() > 40, "too few modules read: {:?}", g.keys());
    assert!(
        g["runtime"].contains("state") && g["lifecycle/gc"].contains("reconcile"),
        "the reader misses imports: {g:?}"
    );
    if let Some(c) = cycle(&g) {
        panic!("import cycle: {}", c.join(" -> "));
    }
}

#[test]
fn no_module_imports_a_higher_layer() {
    let mut wrong = Vec::new();
    let mut cross = BTreeSet::new();
    for (m, refs) in graph() {
        for r in refs {
            let (from, to) = (layer(&m), layer(&r));
            if to > from {
                wrong.push(format!("{m} (layer {from}) imports {r} (layer {to})"));
            }
            let (a, b) = (
                m.split('/').next().unwrap_or_default().to_string(),
                r.split('/').next().unwrap_or_default().to_string(),
            );
            if from == RECONCILERS && to == RECONCILERS && a != b {
                cross.insert((a, b));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        cross.is_empty(),
        "reconcilers import one another (talk through the objects they write): {cross:?}"
    );
}

/// The checks find what they are for.
#[test]
fn the_checks_find_a_cycle_and_a_layer_inversion() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("state".into(), ["watch".to_string()].into());
    g.insert("watch".into(), ["state".to_string()].into());
    assert!(cycle(&g).is_some());
    g.insert("watch".into(), BTreeSet::new());
    assert!(cycle(&g).is_none());
    assert!(layer("provisioning/batcher") > layer("launcher/launch"));
    assert!(layer("launcher/launch") > layer("reconcile"));
    assert!(layer("state") < layer("reconcile"));
}
