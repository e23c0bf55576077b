//! NodeClaim writes shared by every reconciler: its status subresource (and the conditions in
//! it) and its deletion.
//!
//! A merge patch replaces the whole condition list, so every write carries all conditions,
//! set through [`joiner_apis::condition::set`] (the transition time is kept unless the status
//! flips).

use joiner_apis::condition::{self, Condition};
use joiner_apis::NodeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use super::codes::is_not_found;
use serde_json::{json, Value};

/// A condition of `type_` with `status` (`"True"`/`"False"`), stamped `now` (kept by
/// [`with_condition`] when the status does not flip).
pub fn claim_condition(
    claim: &NodeClaim,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: Time(now),
        observed_generation: claim.metadata.generation,
    }
}

/// The claim's conditions with `new` in place of the one of its type.
pub fn with_condition(claim: &NodeClaim, new: Condition) -> Vec<Condition> {
    let current = claim
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    condition::set(current, new)
}

/// Whether a status write must not overwrite a change made since the claim was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Carry the claim's resourceVersion: a concurrent write makes this one fail with 409.
    ResourceVersion,
    /// Write whatever the stored version is (the fields written are this writer's alone).
    None,
}

/// Merge patch of `claim`'s status subresource with `status` (a JSON object of status fields).
pub async fn patch_claim_status(
    client: &kube::Client,
    claim: &NodeClaim,
    status: Value,
    guard: Guard,
) -> Result<NodeClaim, kube::Error> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let body = match guard {
        Guard::ResourceVersion => json!({
            "metadata": {"resourceVersion": claim.metadata.resource_version},
            "status": status,
        }),
        Guard::None => json!({ "status": status }),
    };
    api.patch_status(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
}

/// Merge patch of `name`'s annotations with `annotations` (others are kept).
pub async fn patch_claim_annotations(
    client: &kube::Client,
    name: &str,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<NodeClaim, kube::Error> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let body = json!({"metadata": {"annotations": annotations}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
}

/// Deletes the NodeClaim `name` (termination then drains and releases it). `Ok(false)` when it
/// was already gone (404): someone deleted it first.
pub async fn delete_claim(client: &kube::Client, name: &str) -> Result<bool, kube::Error> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}
