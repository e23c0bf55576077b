//! `import-karpenter` drops nothing silently. For every Karpenter example, each field of the
//! input is either named by a note, or changes what joiner makes of the input when the field's
//! value changes (a field that is read and then lost changes nothing). Each leaf is changed in
//! turn — a boolean flipped, a number or a leading count raised by one, any other string
//! extended — and the conversion (objects, notes, left-out names, or its error) is compared
//! with the original's.
//!
//! The corpus: joiner's examples (examples/karpenter), the fixtures beside this test (one per
//! API version, every field Karpenter's own examples use), and, when
//! `JOINER_KARPENTER_EXAMPLES` names a folder, every YAML file below it (Karpenter's example
//! folders, for a run by hand: their manifests are not copied here).

use std::path::{Path, PathBuf};

use joiner_apis::karpenter::{convert, is_karpenter, Converted, Note};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        panic!("{}: not a readable folder", dir.display())
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

fn corpus() -> Vec<PathBuf> {
    let mut files = Vec::new();
    yaml_files(&root().join("examples/karpenter"), &mut files);
    yaml_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/karpenter"),
        &mut files,
    );
    if let Some(extra) = std::env::var_os("JOINER_KARPENTER_EXAMPLES") {
        yaml_files(Path::new(&extra), &mut files);
    }
    files.sort();
    files
}

/// The Karpenter objects of `path`.
fn objects(path: &Path) -> Vec<Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).expect("read");
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| Value::deserialize(d).ok())
        .filter(|v| {
            is_karpenter(
                v["apiVersion"].as_str().unwrap_or_default(),
                v["kind"].as_str().unwrap_or_default(),
            )
        })
        .collect()
}

/// What joiner makes of `objects`, as text to compare.
fn outcome(objects: &[Value]) -> String {
    match convert(objects) {
        Ok(Converted {
            provisioners,
            node_templates,
            notes,
            skipped,
        }) => format!("{provisioners:?}\n{node_templates:?}\n{notes:?}\n{skipped:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Every scalar leaf below `v` as (path in the notes' form, JSON pointer).
fn leaves(v: &Value, path: &str, pointer: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let escaped = k.replace('~', "~0").replace('/', "~1");
                leaves(x, &p, &format!("{pointer}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                leaves(x, &format!("{path}[{i}]"), &format!("{pointer}/{i}"), out);
            }
        }
        Value::Null => {}
        _ => out.push((path.to_string(), pointer.to_string())),
    }
}

/// `v` changed: a boolean flipped, a number raised, a string with a leading count raised
/// (`720h`, `5%`, `200`), any other string extended.
fn changed(v: &Value) -> Value {
    match v {
        Value::Bool(b) => Value::Bool(!b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i + 1),
            None => Value::from(n.as_f64().unwrap_or_default() * 2.0 + 1.0),
        },
        Value::String(s) => {
            let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
            match digits.parse::<u64>() {
                Ok(n) => Value::from(format!("{}{}", n + 1, &s[digits.len()..])),
                Err(_) => Value::from(format!("{s}x")),
            }
        }
        other => other.clone(),
    }
}

/// True when a note on `object` names `path` or a field above it.
fn noted(notes: &[Note], object: &str, path: &str) -> bool {
    notes.iter().any(|n| {
        n.object == object
            && (n.field == path
                || path.starts_with(&format!("{}.", n.field))
                || path.starts_with(&format!("{}[", n.field)))
    })
}

/// The leaves of `objects` that are neither noted nor change the conversion.
fn silently_dropped(objects: &[Value]) -> Vec<String> {
    silently_dropped_by(objects, outcome)
}

/// [`silently_dropped`] for any conversion `convert_by` (its outcome as text, notes included).
fn silently_dropped_by(objects: &[Value], convert_by: impl Fn(&[Value]) -> String) -> Vec<String> {
    let original = convert_by(objects);
    let converted = convert(objects).unwrap_or_default();
    let notes = &converted.notes;
    let mut dropped = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        let kind = object["kind"].as_str().unwrap_or_default();
        let short = object["metadata"]["name"].as_str().unwrap_or_default();
        let name = format!("{kind} {short}");
        // An object left out whole (a Windows node class, one naming no AMI, the NodePools
        // using them) is accounted for by its note: none of its fields is converted.
        let made = if matches!(kind, "EC2NodeClass" | "AWSNodeTemplate") {
            converted.node_templates.iter().any(|t| t.name() == short)
        } else {
            converted.provisioners.iter().any(|p| p.name() == short)
        };
        if !made && notes.iter().any(|n| n.object == name) {
            continue;
        }
        let mut found = Vec::new();
        leaves(object, "", "", &mut found);
        for (path, pointer) in found {
            if path == "apiVersion" || path == "kind" || noted(notes, &name, &path) {
                continue;
            }
            let mut mutated = objects.to_vec();
            let leaf = mutated[i].pointer_mut(&pointer).expect("the leaf");
            *leaf = changed(leaf);
            if convert_by(&mutated) == original {
                dropped.push(format!("{name}: {path}"));
            }
        }
    }
    dropped
}

#[test]
fn every_field_of_every_example_is_converted_or_noted() {
    let files = corpus();
    assert!(files.len() >= 6, "{files:?}");
    let mut failures = Vec::new();
    let mut fields = 0;
    for file in &files {
        let objects = objects(file);
        assert!(
            !objects.is_empty(),
            "{}: no Karpenter object",
            file.display()
        );
        let mut count = Vec::new();
        for o in &objects {
            leaves(o, "", "", &mut count);
        }
        fields += count.len();
        for d in silently_dropped(&objects) {
            failures.push(format!("{}: {d}", file.display()));
        }
    }
    assert!(fields > 100, "only {fields} fields read");
    assert!(
        failures.is_empty(),
        "fields neither converted nor noted:\n{}",
        failures.join("\n")
    );
}

/// The checker finds a field that is read and lost: a converter that, like v1alpha5's before
/// its fix, drops `ttlSecondsAfterEmpty` when consolidation is off.
#[test]
fn the_checker_finds_a_field_read_and_lost() {
    let manifest: Value = serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha5",
        "kind": "Provisioner",
        "metadata": {"name": "default"},
        "spec": {"ttlSecondsAfterEmpty": 30, "providerRef": {"name": "default"}}
    });
    let objects = std::slice::from_ref(&manifest);
    assert_eq!(silently_dropped(objects), Vec::<String>::new());
    let losing = |objects: &[Value]| {
        let mut without = objects.to_vec();
        if let Some(spec) = without[0]["spec"].as_object_mut() {
            spec.remove("ttlSecondsAfterEmpty");
        }
        outcome(&without)
    };
    assert_eq!(
        silently_dropped_by(objects, losing),
        ["Provisioner default: spec.ttlSecondsAfterEmpty"]
    );
}

#[test]
fn a_leaf_changes_to_another_value_of_its_kind() {
    use serde_json::json;
    for (before, after) in [
        (json!(true), json!(false)),
        (json!(110), json!(111)),
        (json!("720h"), json!("721h")),
        (json!("5%"), json!("6%")),
        (json!("NoSchedule"), json!("NoSchedulex")),
    ] {
        assert_eq!(changed(&before), after);
    }
}
