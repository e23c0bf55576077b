//! The Eviction API call and what its answers mean.
//!
//! Pods are evicted (POST `.../pods/<name>/eviction` with a policy/v1 Eviction), never deleted,
//! so the API server checks PodDisruptionBudgets: a 429 means "a budget forbids this now" and
//! the pod is tried again after a per-pod exponential backoff; a 5xx (an admission webhook or
//! the API server failing) and a 403 (the namespace is being deleted) back off the same way; a
//! 404 means the pod is already gone. The
//! client joiner builds does not retry by itself (`runtime::kube_client`), so one refused pod
//! costs one request per attempt and never holds up the pass.

use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use crate::k8s::backoff::{Backoff, BackoffPolicy};
use crate::k8s::codes::{api_code, api_message};
use crate::pod_record::PodRecord;
use crate::reconcile::LifecycleError;

/// What an eviction request came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evicted {
    /// Accepted: the pod is being deleted.
    Accepted,
    /// The pod no longer exists.
    Gone,
    /// A PodDisruptionBudget refused it (429); try again after the backoff.
    Refused,
    /// The API server failed (5xx, the code given); try again after the backoff.
    ServerError(u16),
    /// Forbidden (403: the pod's namespace is being deleted, or an admission policy refuses);
    /// the message given. Try again after the backoff: it passes when the namespace is gone.
    Forbidden(String),
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &PodRecord) -> String {
    pod.key()
}

/// Asks the API server to evict `pod`.
pub async fn evict(client: &kube::Client, pod: &PodRecord) -> Result<Evicted, LifecycleError> {
    let object = format!("Pod {}", pod_key(pod));
    let name = pod
        .metadata
        .name
        .clone()
        .ok_or_else(|| LifecycleError::Invalid {
            object: object.clone(),
            field: "metadata.name",
            reason: "required to evict the pod".into(),
        })?;
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let body = Eviction {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: None,
    };
    let bytes = serde_json::to_vec(&body).map_err(|e| LifecycleError::Invalid {
        object: object.clone(),
        field: "metadata",
        reason: format!("serializing the Eviction: {e}"),
    })?;
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(bytes)
    .map_err(|e| LifecycleError::Invalid {
        object: object.clone(),
        field: "metadata.name",
        reason: format!("building the eviction request: {e}"),
    })?;
    match client.request_text(request).await {
        Ok(_) => Ok(Evicted::Accepted),
        Err(e) => match api_code(&e) {
            Some(404) => Ok(Evicted::Gone),
            Some(429) => Ok(Evicted::Refused),
            Some(403) => Ok(Evicted::Forbidden(api_message(&e))),
            Some(code @ 500..=599) => Ok(Evicted::ServerError(code)),
            _ => Err(LifecycleError::Api {
                object,
                action: "evicting",
                source: e,
            }),
        },
    }
}
