//! Strict field validation, as `kubectl apply --validate=strict` (the default since 1.27) does
//! it: a field the kind does not have is an error naming its path, not silently ignored — a
//! misspelled `resource:` or `nodeSelectr:` would otherwise plan as if it were not there.
//!
//! The check compares the document with the typed object it was read into, written back: a key
//! of the document that the typed object does not write back is a field the kind does not
//! have. Keys whose value is empty (null, "", 0, false, [] or {}) are let through, since a type
//! may leave such values out when it writes itself.

use serde_json::Value;

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
        let pod: Pod = serde_json::from_value(doc.clone()).expect("parses");
        unknown_field(&doc, &serde_json::to_value(&pod).expect("writes"))
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
