//! The Eviction API call and what its answers mean.
//!
//! Pods are evicted (POST `.../pods/<name>/eviction` with a policy/v1 Eviction), never deleted,
//! so the API server checks PodDisruptionBudgets: a 429 means "a budget forbids this now" and
//! the pod is tried again after a per-pod exponential backoff; a 5xx (an admission webhook or
//! the API server failing) backs off the same way; a 404 means the pod is already gone. The
//! client joiner builds does not retry by itself (`runtime::kube_client`), so one refused pod
//! costs one request per attempt and never holds up the pass.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::k8s::codes::api_code;
use crate::lifecycle::LifecycleError;
use crate::pod_record::PodRecord;

/// What an eviction request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evicted {
    /// Accepted: the pod is being deleted.
    Accepted,
    /// The pod no longer exists.
    Gone,
    /// A PodDisruptionBudget refused it (429); try again after the backoff.
    Refused,
    /// The API server failed (5xx, the code given); try again after the backoff.
    ServerError(u16),
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
            Some(code @ 500..=599) => Ok(Evicted::ServerError(code)),
            _ => Err(LifecycleError::Api {
                object,
                action: "evicting",
                source: e,
            }),
        },
    }
}

/// The delays between eviction attempts of one pod: `initial`, doubling up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// Delay after the first refusal.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl Default for BackoffPolicy {
    /// 1 s doubling to 1 min: quick when a budget frees up soon, light on the API server when
    /// a budget blocks for long.
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

/// Per-pod eviction backoff, kept across passes.
#[derive(Debug, Default)]
pub struct Backoff {
    policy: BackoffPolicy,
    /// pod key -> (refusals so far, not before).
    pods: Mutex<HashMap<String, (u32, Instant)>>,
}

impl Backoff {
    /// Backoff with `policy`.
    pub fn new(policy: BackoffPolicy) -> Self {
        Backoff {
            policy,
            pods: Mutex::default(),
        }
    }

    /// True when `key` may be tried now.
    pub fn ready(&self, key: &str, now: Instant) -> bool {
        self.lock()
            .get(key)
            .is_none_or(|(_, not_before)| now >= *not_before)
    }

    /// Records a refusal of `key` at `now` and returns the delay until its next attempt.
    pub fn refused(&self, key: &str, now: Instant) -> Duration {
        let mut pods = self.lock();
        let attempts = pods.get(key).map_or(0, |(n, _)| *n);
        let factor = 2u32.saturating_pow(attempts.min(16));
        let delay = self
            .policy
            .initial
            .saturating_mul(factor)
            .min(self.policy.max);
        pods.insert(key.to_string(), (attempts.saturating_add(1), now + delay));
        delay
    }

    /// Forgets `key` (evicted or gone).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Forgets every pod not in `live` (deleted by someone else while backing off), so the map
    /// only holds pods that still exist.
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        self.lock().retain(|k, _| live.contains(k));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, Instant)>> {
        // A poisoned lock only means a panic elsewhere mid-update; the map is still usable.
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_max_and_is_per_pod() {
        let b = Backoff::new(BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(5),
        });
        let t0 = Instant::now();
        assert!(b.ready("a/x", t0));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(1));
        assert!(!b.ready("a/x", t0));
        assert!(b.ready("a/y", t0));
        assert!(b.ready("a/x", t0 + Duration::from_secs(1)));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(2));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(4));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(5));
        b.forget("a/x");
        assert!(b.ready("a/x", t0));
        b.refused("a/x", t0);
        b.refused("a/y", t0);
        b.retain(&std::collections::HashSet::from(["a/y".to_string()]));
        assert!(b.ready("a/x", t0));
        assert!(!b.ready("a/y", t0));
        assert_eq!(b.refused("a/x", t0), Duration::from_secs(1));
    }
}
