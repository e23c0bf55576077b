//! Existing nodes: capacity the simulation can fill before it launches anything.

use joiner_core::{Effect, Node, NodeLife, Resources, Taint};
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
    for (k, v) in n.metadata.labels.iter().flatten() {
        super::check_label("metadata.labels", k, v)?;
    }
    let spec = n.spec.as_ref();
    let ready = is_ready(n);
    let mut taints = Vec::new();
    for (i, t) in spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        // Ready, yet still `not-ready`/`unreachable` NoSchedule: the node lifecycle controller
        // removes them within seconds; planned as the node it is, or its room is bought twice.
        if ready
            && t.effect == "NoSchedule"
            && joiner_core::labels::LIFECYCLE_LAG_TAINTS.contains(&t.key.as_str())
        {
            continue;
        }
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
        // A node being deleted takes no new pods either: the kube-scheduler may still bind to
        // it until its taints land, but buying on its room would leave the pods homeless.
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false)
            || n.metadata.deletion_timestamp.is_some(),
        // From the node's CSINode, a separate object (`super::csi_nodes`).
        volume_limits: Default::default(),
        life: life(n),
    })
}

/// Node annotations that opt it out of voluntary disruption ("true").
pub const NODE_DO_NOT_DISRUPT_ANNOTATIONS: &[&str] =
    &["joiner.sh/do-not-disrupt", "karpenter.sh/do-not-disrupt"];
/// Karpenter v1alpha5's node opt-out of consolidation only.
pub const DO_NOT_CONSOLIDATE_ANNOTATION: &str = "karpenter.sh/do-not-consolidate";

/// True when the node's Ready condition is True.
fn is_ready(n: &k8s::Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A node's age, readiness and opt-outs. Initialized: its Ready condition is True and
/// neither joiner's unregistered taint nor a Provisioner's startup taint holds it back (the
/// latter is not known here; the controller's claims refine it).
fn life(n: &k8s::Node) -> NodeLife {
    let annotations = n.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let ready = is_ready(n);
    let unregistered = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == joiner_core::labels::UNREGISTERED_TAINT)
        });
    NodeLife {
        created_at: n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
        // Without its claim (which the controller and `joiner plan` read when there is one),
        // a node that is not Ready cannot be told from one still joining.
        initialized: ready && !unregistered,
        not_ready: !ready,
        deleting: n.metadata.deletion_timestamp.is_some(),
        do_not_disrupt: NODE_DO_NOT_DISRUPT_ANNOTATIONS
            .iter()
            .find(|k| get(k) == Some("true"))
            .map(|k| k.to_string()),
        do_not_consolidate: get(DO_NOT_CONSOLIDATE_ANNOTATION) == Some("true"),
        pods_changed_at: None,
        not_disruptable: None,
        // From the node's NodeClaim, when there is one (the controller and `joiner plan`).
        recorded_labels: None,
    }
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
    // The API server's rules: the key a qualified name, the value a label value.
    if let Some(why) = crate::syntax::qualified_name(key) {
        return Err(FieldError::new(format!("{at}.key"), why));
    }
    if let Some(why) = value.and_then(crate::syntax::label_value) {
        return Err(FieldError::new(format!("{at}.value"), why));
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.unwrap_or_default().to_string(),
        effect,
    })
}
