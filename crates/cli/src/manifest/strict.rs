//! Strict field validation, as `kubectl apply --validate=strict` (the default since 1.27) does
//! it: a field the kind does not have is an error naming its path, not silently ignored — a
//! misspelled `resource:` or `nodeSelectr:` would otherwise plan as if it were not there.
//!
//! The check compares the document with the typed object it was read into, written back: a key
//! of the document that the typed object does not write back is a field the kind does not
//! have. A key whose value is empty (null, "", 0, false, [] or {}) may be missing from the
//! written-back object only because its type leaves empty values out, so for those the typed
//! read itself tells: the keys it skipped ([`Skipped`], recorded by `serde_ignored`) are the
//! fields the kind does not have (`requirments: []` is refused, `nodeSelector: {}` is not).

use serde_json::Value;

/// One step of a path into a document: a map key or a list index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A key of a map.
    Key(String),
    /// An index into a list.
    Index(usize),
}

/// The keys a typed read skipped, as paths from the document's root.
#[derive(Debug, Default)]
pub struct Skipped(pub Vec<Vec<Step>>);

impl Skipped {
    /// Records `path`, as `serde_ignored` reports a skipped key.
    pub fn record(&mut self, path: &serde_ignored::Path<'_>) {
        let mut steps = Vec::new();
        collect(path, &mut steps);
        self.0.push(steps);
    }

    /// The first skipped key whose value in `document` is empty, as `spec.requirments`.
    pub fn empty_field(&self, document: &Value) -> Option<String> {
        self.0.iter().find_map(|steps| {
            let mut at = document;
            for step in steps {
                at = match step {
                    Step::Key(k) => at.get(k)?,
                    Step::Index(i) => at.get(*i)?,
                };
            }
            is_empty(at).then(|| display(steps))
        })
    }
}

fn collect(path: &serde_ignored::Path<'_>, out: &mut Vec<Step>) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            collect(parent, out);
            out.push(Step::Index(*index));
        }
        Path::Map { parent, key } => {
            collect(parent, out);
            out.push(Step::Key(key.clone()));
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => collect(parent, out),
    }
}

/// `spec.containers[1].resource`, as [`unknown_field`] names paths.
fn display(steps: &[Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The path of the first field of `document` that `typed` (the same document read into its
/// kind's type and written back) does not have, as `spec.containers[0].resource`.
pub fn unknown_field(document: &Value, typed: &Value) -> Option<String> {
    walk(document, typed, "")
}

fn walk(document: &Value, typed: &Value, path: &str) -> Option<String> {
    match (document, typed) {
        (Value::Object(doc), Value::Object(back)) => doc.iter().find_map(|(key, value)| {
            let at = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match back.get(key) {
                Some(kept) => walk(value, kept, &at),
                None if is_empty(value) => None,
                None => Some(at),
            }
        }),
        (Value::Array(doc), Value::Array(back)) => doc
            .iter()
            .zip(back)
            .enumerate()
            .find_map(|(i, (value, kept))| walk(value, kept, &format!("{path}[{i}]"))),
        _ => None,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn check(doc: Value) -> Option<String> {
        let mut skipped = Skipped::default();
        let mut record = |p: serde_ignored::Path<'_>| skipped.record(&p);
        let pod: Pod = serde::Deserialize::deserialize(serde_ignored::Deserializer::new(
            doc.clone(),
            &mut record,
        ))
        .expect("parses");
        unknown_field(&doc, &serde_json::to_value(&pod).expect("writes"))
            .or_else(|| skipped.empty_field(&doc))
    }

    #[test]
    fn a_misspelled_field_with_an_empty_value_is_named_too() {
        let doc = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"nodeSelectr": {}, "containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(check(doc).as_deref(), Some("spec.nodeSelectr"));
        let doc = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d", "image": "i", "resource": []}]}});
        assert_eq!(check(doc).as_deref(), Some("spec.containers[1].resource"));
    }

    #[test]
    fn a_misspelled_field_is_named_by_its_path() {
        let doc = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"},
                {"name": "d", "image": "i", "resource": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(check(doc).as_deref(), Some("spec.containers[1].resource"));
        let doc = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"nodeSelectr": {"a": "b"}, "containers": []}});
        assert_eq!(check(doc).as_deref(), Some("spec.nodeSelectr"));
    }

    #[test]
    fn known_fields_maps_and_empty_values_pass() {
        let doc = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"any/key": "v"}, "creationTimestamp": null},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "250m", "example.com/dongle": "1"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "tolerations": [], "nodeSelector": {}},
            "status": {}});
        assert_eq!(check(doc), None);
    }
}
