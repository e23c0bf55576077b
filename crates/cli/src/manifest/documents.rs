//! Splitting a file into the Kubernetes objects it holds.

use std::path::Path;

use serde::Deserialize;
use serde_yaml::Value;

use super::error::{Location, ManifestError};

/// One object and where it came from.
pub(crate) struct Document {
    /// File, document and list item.
    pub location: Location,
    /// The object as parsed YAML.
    pub value: Value,
}

/// The objects of a multi-document YAML file: empty documents are skipped, a `List` (what
/// `kubectl get -o yaml` prints) is expanded into its items.
pub(crate) fn split(path: &Path, text: &str) -> Result<Vec<Document>, ManifestError> {
    let mut out = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let document = i + 1;
        let mut value = Value::deserialize(de).map_err(|e| yaml_error(path, document, &e))?;
        // YAML merge keys (`<<: *defaults`), which kubectl applies.
        value
            .apply_merge()
            .map_err(|e| yaml_error(path, document, &e))?;
        let location = Location {
            path: path.to_path_buf(),
            document,
            item: None,
        };
        if value.is_null() {
            continue;
        }
        if !value.is_mapping() {
            return Err(ManifestError::NotAnObject {
                location,
                reason: "expected a Kubernetes object (a mapping with apiVersion and kind)".into(),
            });
        }
        if is_list(&value) {
            let items = match value.get("items") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Sequence(items)) => items.clone(),
                Some(_) => {
                    return Err(ManifestError::NotAnObject {
                        location,
                        reason: "items: expected a list of objects".into(),
                    })
                }
            };
            for (j, item) in items.into_iter().enumerate() {
                let location = Location {
                    item: Some(j + 1),
                    ..location.clone()
                };
                if !item.is_mapping() {
                    return Err(ManifestError::NotAnObject {
                        location,
                        reason: "expected a Kubernetes object (a mapping with apiVersion and kind)"
                            .into(),
                    });
                }
                out.push(Document {
                    location,
                    value: item,
                });
            }
        } else {
            out.push(Document { location, value });
        }
    }
    Ok(out)
}

/// `kind: List`, or a typed list such as `PodList`, carrying `items`.
fn is_list(v: &Value) -> bool {
    v.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k == "List" || (k.ends_with("List") && v.get("items").is_some()))
}

fn yaml_error(path: &Path, document: usize, e: &serde_yaml::Error) -> ManifestError {
    let (line, column) = e
        .location()
        .map(|l| (l.line(), l.column()))
        .unwrap_or((0, 0));
    // The parser repeats the position in its message; it is already in ours.
    let message = e
        .to_string()
        .replace(&format!(" at line {line} column {column}"), "");
    ManifestError::Yaml {
        path: path.to_path_buf(),
        document,
        line,
        column,
        message,
    }
}
