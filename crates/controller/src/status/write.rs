//! How a status is written, for both kinds: the `Ready` condition with its transition time
//! kept, the merge patch that clears what went away, and what a write did ([`Outcome`]).

use joiner_apis::condition::{self, Condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::Value;
use thiserror::Error;

use crate::k8s::codes::{is_conflict, is_not_found};

/// The `reason` of a `Ready=True` condition.
pub const READY_REASON: &str = "Ready";

/// Why a status could not be written.
#[derive(Debug, Error)]
pub enum StatusError {
    /// The API server refused the patch (other than 404 and 409) or could not be reached.
    #[error("{kind} `{name}`: patching status: {source}")]
    Patch {
        /// `Provisioner` or `NodeTemplate`.
        kind: &'static str,
        /// The object.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The status could not be turned into JSON (never expected).
    #[error("{kind} `{name}`: encoding status: {source}")]
    Encode {
        /// `Provisioner` or `NodeTemplate`.
        kind: &'static str,
        /// The object.
        name: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
}

/// What a reconcile of one object did.
#[derive(Debug)]
pub enum Outcome<K> {
    /// The status already said this: nothing was sent.
    Unchanged,
    /// The status was patched; the object as the API server stored it.
    Patched(Box<K>),
    /// The object is gone (404): nothing to do.
    Gone,
    /// The API server answered 409: the next pass tries again.
    Conflict,
}

impl<K> Outcome<K> {
    /// True when a patch was sent and stored.
    pub fn is_patched(&self) -> bool {
        matches!(self, Outcome::Patched(_))
    }
}

/// The `Ready` condition to write: `status` with `reason` and `message` for `generation`.
/// `lastTransitionTime` is kept from the current condition when the status does not flip, so it
/// says since when the object has been (un)ready; otherwise it is `now`.
pub fn ready_condition(
    current: &[Condition],
    ready: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if ready { "True" } else { "False" };
    let since = condition::find(current, condition::READY)
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: condition::READY.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// `current` with its `Ready` condition replaced by `ready` (other types kept, in order).
pub fn with_ready(current: &[Condition], ready: Condition) -> Vec<Condition> {
    condition::set(current, ready)
}

/// The merge-patch body for `status`: the status as serialized, with each of `clearable` that
/// serialization left out (an empty list or map) set to `null`, so a value that went away is
/// removed rather than kept by the merge.
pub(crate) fn status_patch<S: serde::Serialize>(
    kind: &'static str,
    name: &str,
    status: &S,
    clearable: &[&str],
) -> Result<Value, StatusError> {
    let mut value = serde_json::to_value(status).map_err(|source| StatusError::Encode {
        kind,
        name: name.to_string(),
        source,
    })?;
    if let Value::Object(map) = &mut value {
        for key in clearable {
            map.entry(key.to_string()).or_insert(Value::Null);
        }
    }
    Ok(serde_json::json!({ "status": value }))
}

/// Sends a merge patch of the status subresource of the cluster-scoped `name`.
pub(crate) async fn patch_status<K>(
    client: &kube::Client,
    kind: &'static str,
    name: &str,
    body: Value,
) -> Result<Outcome<K>, StatusError>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(stored) => Ok(Outcome::Patched(Box::new(stored))),
        Err(e) if is_not_found(&e) => Ok(Outcome::Gone),
        Err(e) if is_conflict(&e) => Ok(Outcome::Conflict),
        Err(source) => Err(StatusError::Patch {
            kind,
            name: name.to_string(),
            source,
        }),
    }
}
