//! Input is reported and survived, never a panic: every example's manifests, with random
//! fields deleted or replaced by values of other types (null, negative or huge numbers,
//! strings, booleans, empty maps and lists), go through `joiner plan`, `--explain` and
//! `--consolidate`. Each run must end in a plan or in an error that names something.

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::sample::Index;
use serde::Deserialize;
use serde_yaml::Value;

use crate::{CatalogKind, Format, PlanArgs};

/// The example inputs, each as the documents of all its files.
fn examples() -> Vec<Vec<Value>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let sets: &[&[&str]] = &[
        &["web-fleet.yaml"],
        &["constraints/volume-limits.yaml"],
        &["constraints/volume-topology.yaml"],
        &["constraints/pod-affinity-pending.yaml"],
        &["constraints/zone-spread.yaml"],
        &["constraints/preferences.yaml"],
        &[
            "mixed-cluster/nodes.yaml",
            "mixed-cluster/provisioners.yaml",
            "mixed-cluster/workloads.yaml",
        ],
        &[
            "consolidation/cluster.yaml",
            "consolidation/provisioners.yaml",
        ],
        &["warm-pool/provisioner.yaml", "warm-pool/workload.yaml"],
        &["karpenter/v1.yaml"],
    ];
    sets.iter()
        .map(|files| {
            files
                .iter()
                .flat_map(|f| {
                    let text = std::fs::read_to_string(root.join(f)).expect("example exists");
                    serde_yaml::Deserializer::from_str(&text)
                        .map(|d| Value::deserialize(d).expect("example parses"))
                        .filter(|v| !v.is_null())
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .collect()
}

/// One step from a value to a part of it.
#[derive(Clone, Debug)]
enum Step {
    Key(Value),
    At(usize),
}

/// Every path to a part of `v` (not `v` itself).
fn paths(v: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Mapping(m) => {
            for (k, child) in m {
                prefix.push(Step::Key(k.clone()));
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Sequence(s) => {
            for (i, child) in s.iter().enumerate() {
                prefix.push(Step::At(i));
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

/// What replaces the part a path leads to (`None`: it is removed).
fn replacement(op: usize) -> Option<Value> {
    let yaml = |s: &str| serde_yaml::from_str::<Value>(s).expect("literal parses");
    match op % 9 {
        0 => None,
        1 => Some(Value::Null),
        2 => Some(yaml("-1")),
        3 => Some(yaml("1e30")),
        4 => Some(yaml("'x'")),
        5 => Some(yaml("true")),
        6 => Some(yaml("{}")),
        7 => Some(yaml("[]")),
        _ => Some(yaml("'99999999999999999999Gi'")),
    }
}

/// Applies `with` at `path` in `v`.
fn mutate(v: &mut Value, path: &[Step], with: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = v;
    for step in parents {
        let next = match (step, at) {
            (Step::Key(k), Value::Mapping(m)) => m.get_mut(k),
            (Step::At(i), Value::Sequence(s)) => s.get_mut(*i),
            _ => None,
        };
        match next {
            Some(n) => at = n,
            None => return,
        }
    }
    match (last, at, with) {
        (Step::Key(k), Value::Mapping(m), None) => {
            m.remove(k);
        }
        (Step::Key(k), Value::Mapping(m), Some(w)) => {
            m.insert(k.clone(), w);
        }
        (Step::At(i), Value::Sequence(s), None) if *i < s.len() => {
            s.remove(*i);
        }
        (Step::At(i), Value::Sequence(s), Some(w)) if *i < s.len() => s[*i] = w,
        _ => {}
    }
}

fn args(file: PathBuf, explain: Vec<String>, consolidate: bool) -> PlanArgs {
    PlanArgs {
        files: vec![file],
        output: Format::Json,
        region: "us-east-1".into(),
        explain,
        catalog: CatalogKind::Embedded,
        consolidate,
        at: consolidate.then(|| "2026-12-07T09:00:00Z".to_string()),
        steps: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutated_manifests_are_planned_or_refused_never_a_panic(
        example in any::<Index>(),
        edits in prop::collection::vec((any::<Index>(), any::<Index>(), 0usize..9), 1..4),
    ) {
        let sets = examples();
        let mut docs = sets[example.index(sets.len())].clone();
        for (doc, part, op) in edits {
            let d = doc.index(docs.len());
            let mut all = Vec::new();
            paths(&docs[d], &mut Vec::new(), &mut all);
            if all.is_empty() {
                continue;
            }
            let path = all[part.index(all.len())].clone();
            mutate(&mut docs[d], &path, replacement(op));
        }
        let text = docs
            .iter()
            .map(|d| serde_yaml::to_string(d).expect("yaml"))
            .collect::<Vec<_>>()
            .join("---\n");
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("input.yaml");
        std::fs::write(&file, &text).expect("write");
        for (explain, consolidate) in [
            (Vec::new(), false),
            (vec!["default/web".to_string()], false),
            (Vec::new(), true),
        ] {
            match crate::plan::run(&args(file.clone(), explain, consolidate)) {
                Ok(out) => prop_assert!(!out.is_empty()),
                Err(e) => prop_assert!(!e.to_string().trim().is_empty(), "an empty error for\n{text}"),
            }
        }
    }
}
