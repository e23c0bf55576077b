//! Existing nodes: capacity the simulation can fill before it launches anything.

use joiner_core::{Effect, Node, Resources, Taint};
use k8s_openapi::api::core::v1 as k8s;

use super::requests;
use super::FieldError;

/// Converts a Node. Allocatable defaults to capacity when the status has none (hand-written
/// fixtures often give only one of them).
pub fn node(n: &k8s::Node, name: &str) -> Result<Node, FieldError> {
    let status = n.status.as_ref();
    let capacity = match status.and_then(|s| s.capacity.as_ref()) {
        Some(c) => requests::parse_map(c, "status.capacity")?,
        None => Resources::default(),
    };
    let allocatable = match status.and_then(|s| s.allocatable.as_ref()) {
        Some(a) => requests::parse_map(a, "status.allocatable")?,
        None => capacity.clone(),
    };
    let spec = n.spec.as_ref();
    let mut taints = Vec::new();
    for (i, t) in spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        taints.push(taint(
            &t.key,
            t.value.as_deref(),
            &t.effect,
            &format!("spec.taints[{i}]"),
        )?);
    }
    Ok(Node {
        name: name.to_string(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints,
        capacity,
        allocatable,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
    })
}

/// One taint from its parts, as Nodes and NodeClaims spell them; `at` is its field path
/// (`spec.taints[0]`).
pub fn taint(key: &str, value: Option<&str>, effect: &str, at: &str) -> Result<Taint, FieldError> {
    let effect = Effect::parse(effect).ok_or_else(|| {
        FieldError::new(
            format!("{at}.effect"),
            format!(
                "unknown effect {effect:?} (expected NoSchedule, PreferNoSchedule or NoExecute)"
            ),
        )
    })?;
    if key.is_empty() {
        return Err(FieldError::new(format!("{at}.key"), "taint key is empty"));
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.unwrap_or_default().to_string(),
        effect,
    })
}
