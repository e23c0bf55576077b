//! Registration: a NodeClaim's node has joined; make it the claim's node.
//!
//! The launch template is shared by many claims and instance types, so per-claim facts (the
//! claim's name, its single-valued requirements, the type and zone actually launched, the
//! claim's own taints) cannot be in the user data: they are put on the Node object here, once,
//! together with the termination finalizer. The node registered with the startup taint
//! `joiner.sh/unregistered:NoSchedule`, so no pod landed before these labels and taints were
//! there; once the Node is Ready that taint is removed and the claim is Initialized. The claim's
//! own startupTaints stay: their owners (a CNI agent, ...) remove them, as with Karpenter.
//!
//! Node patches are JSON patches that first `test` the resourceVersion read from the store, so a
//! concurrent writer (the kubelet, another controller) makes the patch fail with 409 instead of
//! being overwritten; the next pass reads the Node again and retries. Claim status patches carry
//! the resourceVersion too (optimistic concurrency on the status subresource).

use std::collections::BTreeMap;

use joiner_apis::condition::{self, Condition};
use joiner_apis::NodeClaim;
use joiner_core::labels;
use joiner_core::CloudProvider;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

use crate::context::Context;
use crate::lifecycle::{
    claim_ref, first_error, has_finalizer, is_conflict, node_claim_label, node_name, node_of,
    node_ref, LifecycleError,
};
use crate::metrics::ProvisionerLabels;

/// One registration pass over every claim that is not being deleted and whose Node exists.
/// Returns the first failure after every claim had its turn; conflicts are not failures (the
/// next pass retries them).
pub async fn reconcile<P: CloudProvider>(ctx: &Context<P>) -> Result<(), LifecycleError> {
    let nodes = ctx.state.nodes.state();
    let mut errors = Vec::new();
    for claim in ctx.state.node_claims.state() {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(node) = node_of(&claim, &nodes) else {
            continue;
        };
        if node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Err(e) = register(ctx, &claim, node).await {
            errors.push(e);
        }
    }
    first_error(errors)
}

/// Takes `claim` and its `node` one pass further: labels/taints/finalizer on the Node, then
/// Registered, then (once Ready) the startup taint off and Initialized.
async fn register<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    node: &Node,
) -> Result<(), LifecycleError> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let name = node_name(node).to_string();
    let mut node = node.clone();
    let mut claim = claim.clone();

    if needs_registration_patch(&claim, &node) {
        let patch = registration_patch(&claim, &node)?;
        match nodes
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(n) => node = n,
            Err(e) if is_conflict(&e) => {
                tracing::debug!(node = %name, claim = claim.name(), "node changed while registering; retrying next pass");
                return Ok(());
            }
            Err(e) => {
                return Err(LifecycleError::api(
                    &node_ref(&node),
                    "applying the NodeClaim's labels, taints and finalizer",
                )(e))
            }
        }
    }

    if !claim.is_registered() {
        let status = json!({
            "nodeName": name,
            "conditions": with_condition(&claim, condition::REGISTERED, "NodeRegistered",
                &format!("Node {name} joined the cluster")),
        });
        match patch_status(&claims, &claim, status).await {
            Ok(c) => claim = c,
            Err(e) if is_conflict(&e) => return Ok(()),
            Err(e) => {
                return Err(LifecycleError::api(
                    &claim_ref(&claim),
                    "setting status.nodeName and Registered",
                )(e))
            }
        }
        ctx.metrics
            .claims_registered
            .get_or_create(&ProvisionerLabels {
                provisioner: claim.spec.provisioner_name.clone(),
            })
            .inc();
        tracing::info!(claim = claim.name(), node = %name, "node registered");
    }

    if !is_ready(&node) {
        return Ok(());
    }
    if has_taint(&node, labels::UNREGISTERED_TAINT) {
        let patch = untaint_patch(&node, labels::UNREGISTERED_TAINT)?;
        match nodes
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(n) => node = n,
            Err(e) if is_conflict(&e) => return Ok(()),
            Err(e) => {
                return Err(LifecycleError::api(
                    &node_ref(&node),
                    "removing the joiner.sh/unregistered taint",
                )(e))
            }
        }
    }
    if !claim.is_initialized() && !has_taint(&node, labels::UNREGISTERED_TAINT) {
        let status = json!({
            "conditions": with_condition(&claim, condition::INITIALIZED, "NodeReady",
                &format!("Node {name} is Ready")),
        });
        match patch_status(&claims, &claim, status).await {
            Ok(_) => tracing::info!(claim = claim.name(), node = %name, "node initialized"),
            Err(e) if is_conflict(&e) => {}
            Err(e) => {
                return Err(LifecycleError::api(
                    &claim_ref(&claim),
                    "setting Initialized",
                )(e))
            }
        }
    }
    Ok(())
}

/// The Node still lacks what registration puts on it: the finalizer or the nodeclaim label.
/// After the one registration patch it has both, so labels and taints are applied once and
/// later edits by people are not undone.
fn needs_registration_patch(claim: &NodeClaim, node: &Node) -> bool {
    !has_finalizer(&node.metadata) || node_claim_label(node) != Some(claim.name())
}

/// The labels registration puts on the claim's Node: provisioner-name, nodeclaim, every
/// requirement with operator In and a single value, and the instance type, zone and capacity
/// type the claim's status reports (what was actually launched).
pub fn claim_labels(claim: &NodeClaim) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for r in &claim.spec.requirements {
        if r.operator == "In" && r.values.len() == 1 {
            out.insert(labels::normalize(&r.key).to_string(), r.values[0].clone());
        }
    }
    if let Some(status) = &claim.status {
        for (key, value) in [
            (labels::INSTANCE_TYPE, &status.instance_type),
            (labels::ZONE, &status.zone),
            (labels::CAPACITY_TYPE, &status.capacity_type),
        ] {
            if let Some(v) = value.as_ref().filter(|v| !v.is_empty()) {
                out.insert(key.to_string(), v.clone());
            }
        }
    }
    out.insert(
        labels::PROVISIONER_NAME.to_string(),
        claim.spec.provisioner_name.clone(),
    );
    out.insert(labels::NODECLAIM.to_string(), claim.name().to_string());
    out
}

/// The claim's taints and startup taints as Node taints.
fn claim_taints(claim: &NodeClaim) -> Vec<Taint> {
    claim
        .spec
        .taints
        .iter()
        .chain(&claim.spec.startup_taints)
        .map(|t| Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            time_added: None,
        })
        .collect()
}

fn node_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// True when `node` carries a taint with `key`.
pub(crate) fn has_taint(node: &Node, key: &str) -> bool {
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
fn rv_test(node: &Node) -> Result<Value, LifecycleError> {
    let rv = node
        .metadata
        .resource_version
        .as_deref()
        .ok_or_else(|| LifecycleError::Invalid {
            object: node_ref(node),
            field: "metadata.resourceVersion",
            reason: "missing; the Node cannot be patched safely".into(),
        })?;
    Ok(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}))
}

fn to_patch(node: &Node, ops: Vec<Value>) -> Result<json_patch::Patch, LifecycleError> {
    serde_json::from_value(Value::Array(ops)).map_err(|e| LifecycleError::Invalid {
        object: node_ref(node),
        field: "metadata",
        reason: format!("building the JSON patch: {e}"),
    })
}

/// `add` of the whole taint list (replacing it), or of `spec` when the Node has none.
pub(crate) fn taints_op(node: &Node, taints: &[Taint]) -> Value {
    if node.spec.is_some() {
        json!({"op": "add", "path": "/spec/taints", "value": taints})
    } else {
        json!({"op": "add", "path": "/spec", "value": {"taints": taints}})
    }
}

/// The one registration patch: resourceVersion test, then the merged labels, taints (the
/// claim's added to what the kubelet registered, none twice) and finalizers.
fn registration_patch(claim: &NodeClaim, node: &Node) -> Result<json_patch::Patch, LifecycleError> {
    let mut labels = node.metadata.labels.clone().unwrap_or_default();
    labels.extend(claim_labels(claim));
    let mut taints = node_taints(node);
    for t in claim_taints(claim) {
        if !taints
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            taints.push(t);
        }
    }
    let mut finalizers = node.metadata.finalizers.clone().unwrap_or_default();
    if !has_finalizer(&node.metadata) {
        finalizers.push(labels::TERMINATION_FINALIZER.to_string());
    }
    let ops = vec![
        rv_test(node)?,
        json!({"op": "add", "path": "/metadata/labels", "value": labels}),
        taints_op(node, &taints),
        json!({"op": "add", "path": "/metadata/finalizers", "value": finalizers}),
    ];
    to_patch(node, ops)
}

/// The Node's taints without those with `key`, guarded by the resourceVersion.
pub(crate) fn untaint_patch(node: &Node, key: &str) -> Result<json_patch::Patch, LifecycleError> {
    let taints: Vec<Taint> = node_taints(node)
        .into_iter()
        .filter(|t| t.key != key)
        .collect();
    to_patch(node, vec![rv_test(node)?, taints_op(node, &taints)])
}

/// The Node's taints plus `taint` (if no taint with its key and effect is there yet), guarded
/// by the resourceVersion; `None` when it is already there.
pub(crate) fn taint_patch(
    node: &Node,
    taint: Taint,
) -> Result<Option<json_patch::Patch>, LifecycleError> {
    let mut taints = node_taints(node);
    if taints
        .iter()
        .any(|t| t.key == taint.key && t.effect == taint.effect)
    {
        return Ok(None);
    }
    taints.push(taint);
    Ok(Some(to_patch(
        node,
        vec![rv_test(node)?, taints_op(node, &taints)],
    )?))
}

/// The claim's conditions with `type_` set True (others kept; a merge patch replaces the list).
fn with_condition(claim: &NodeClaim, type_: &str, reason: &str, message: &str) -> Vec<Condition> {
    let mut conditions: Vec<Condition> = claim
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        type_: type_.to_string(),
        status: "True".to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: Time(Timestamp::now()),
        observed_generation: claim.metadata.generation,
    });
    conditions
}

/// Merge patch of the claim's status subresource, guarded by its resourceVersion.
async fn patch_status(
    claims: &Api<NodeClaim>,
    claim: &NodeClaim,
    status: Value,
) -> Result<NodeClaim, kube::Error> {
    let body = json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": status,
    });
    claims
        .patch_status(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
}
