//! Node changes as JSON patches that first `test` the resourceVersion read from the store: a
//! concurrent writer (the kubelet, another controller, a person) makes the patch fail instead
//! of being overwritten, and the next pass recomputes it from fresh state. Store objects are
//! stripped, so Nodes are only ever patched, never PUT back.

use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::{json, Value};
use thiserror::Error;

use super::finalizers::{finalizers_with_ours, finalizers_without_ours};
use super::refs::node_ref;

/// A Node patch could not be built from the stored object.
#[derive(Debug, Error)]
#[error("{object}: {field}: {reason}")]
pub struct NodePatchError {
    /// `Node "name"`.
    pub object: String,
    /// The field at fault.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// The Node's taints (empty when it has none).
pub fn node_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// True when `node` carries a taint with `key`.
pub fn has_taint(node: &Node, key: &str) -> bool {
    node_taints(node).iter().any(|t| t.key == key)
}

/// True when the Node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The `test` of the Node's resourceVersion that guards every Node patch.
pub fn rv_test(node: &Node) -> Result<Value, NodePatchError> {
    let rv = node
        .metadata
        .resource_version
        .as_deref()
        .ok_or_else(|| NodePatchError {
            object: node_ref(node),
            field: "metadata.resourceVersion",
            reason: "missing; the Node cannot be patched safely".into(),
        })?;
    Ok(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}))
}

/// `ops` after the resourceVersion test, as a JSON patch.
pub fn guarded(node: &Node, ops: Vec<Value>) -> Result<json_patch::Patch, NodePatchError> {
    let mut all = vec![rv_test(node)?];
    all.extend(ops);
    serde_json::from_value(Value::Array(all)).map_err(|e| NodePatchError {
        object: node_ref(node),
        field: "metadata",
        reason: format!("building the JSON patch: {e}"),
    })
}

/// `add` of the whole taint list (replacing it), or of `spec` when the Node has none.
pub fn taints_op(node: &Node, taints: &[Taint]) -> Value {
    if node.spec.is_some() {
        json!({"op": "add", "path": "/spec/taints", "value": taints})
    } else {
        json!({"op": "add", "path": "/spec", "value": {"taints": taints}})
    }
}

/// `add` of the whole label map (replacing it).
pub fn labels_op(labels: &std::collections::BTreeMap<String, String>) -> Value {
    json!({"op": "add", "path": "/metadata/labels", "value": labels})
}

/// `add` of the finalizer list with joiner's finalizer in it.
pub fn add_finalizer_op(node: &Node) -> Value {
    json!({"op": "add", "path": "/metadata/finalizers", "value": finalizers_with_ours(&node.metadata)})
}

/// The Node's taints plus `taint` (if no taint with its key and effect is there yet), guarded
/// by the resourceVersion; `None` when it is already there.
pub fn taint_patch(node: &Node, taint: Taint) -> Result<Option<json_patch::Patch>, NodePatchError> {
    let mut taints = node_taints(node);
    if taints
        .iter()
        .any(|t| t.key == taint.key && t.effect == taint.effect)
    {
        return Ok(None);
    }
    taints.push(taint);
    guarded(node, vec![taints_op(node, &taints)]).map(Some)
}

/// The Node's taints without those with `key`, guarded by the resourceVersion.
pub fn untaint_patch(node: &Node, key: &str) -> Result<json_patch::Patch, NodePatchError> {
    let taints: Vec<Taint> = node_taints(node)
        .into_iter()
        .filter(|t| t.key != key)
        .collect();
    guarded(node, vec![taints_op(node, &taints)])
}

/// The Node's finalizers without joiner's, guarded by the resourceVersion.
pub fn release_finalizer_patch(node: &Node) -> Result<json_patch::Patch, NodePatchError> {
    guarded(
        node,
        vec![json!({"op": "add", "path": "/metadata/finalizers",
            "value": finalizers_without_ours(&node.metadata)})],
    )
}
