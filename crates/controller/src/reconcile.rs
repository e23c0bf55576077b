//! What every reconciler shares, below them all: the error a step reports
//! ([`LifecycleError`]), a pass that gives every object its turn ([`first_error`]), the age of
//! an object, the one way a claim is deleted and counted ([`delete_claim`]), when a claim's
//! Node is initialized ([`is_initialized`]), the taint on a node being disrupted
//! ([`disrupted_taint`]) and the loop that runs a pass every period ([`every!`]). The
//! reconcilers (lifecycle, warm pool, disruption, interruption) import these from here, never
//! from each other.

use std::time::Duration;

use joiner_apis::{condition, NodeClaim};
use joiner_core::{labels, CloudProvider};
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use thiserror::Error;

use crate::context::Context;
use crate::k8s::claims::delete_claim as delete_claim_object;
use crate::k8s::node_patch::{has_taint, is_ready, node_taints, NodePatchError};
use crate::k8s::refs::claim_ref;
use crate::metrics::ReasonLabels;

/// Why a lifecycle step failed. Each names the object (`NodeClaim "web-abc"`, `Node "ip-..."`,
/// `Pod shop/cart-1`) and what was being done, so the log line says what to look at.
#[derive(Debug, Error)]
pub enum LifecycleError {
    /// The API server refused a request or could not be reached.
    #[error("{object}: {action}: {source}")]
    Api {
        /// The object the request was about.
        object: String,
        /// What was being done (`patching labels, taints and finalizer`, ...).
        action: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The cloud provider failed.
    #[error("{object}: {action}: {source}")]
    Cloud {
        /// The object the call was for.
        object: String,
        /// What was being done (`terminating instance i-...`, ...).
        action: String,
        /// The provider's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An object lacks a field the step needs.
    #[error("{object}: {field}: {reason}")]
    Invalid {
        /// The object.
        object: String,
        /// The field (`metadata.name`, ...).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl From<NodePatchError> for LifecycleError {
    fn from(e: NodePatchError) -> Self {
        LifecycleError::Invalid {
            object: e.object,
            field: e.field,
            reason: e.reason,
        }
    }
}

impl LifecycleError {
    /// An API error about `object` while doing `action`.
    pub(crate) fn api(object: &str, action: &'static str) -> impl FnOnce(kube::Error) -> Self {
        let object = object.to_string();
        move |source| LifecycleError::Api {
            object,
            action,
            source,
        }
    }

    /// A cloud error about `object` while doing `action`.
    pub(crate) fn cloud<E: std::error::Error + Send + Sync + 'static>(
        object: &str,
        action: String,
        source: E,
    ) -> Self {
        LifecycleError::Cloud {
            object: object.to_string(),
            action,
            source: Box::new(source),
        }
    }
}

/// Deletes `claim` because of `reason` (the `claims_terminated` label), counting it once the
/// API accepted the delete. A 404 means someone deleted it first: nothing to count, no error.
/// `action` says what was being done, for the error.
pub(crate) async fn delete_claim<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    reason: &str,
    action: &'static str,
) -> Result<(), LifecycleError> {
    match delete_claim_object(&ctx.client, claim.name()).await {
        Ok(true) => {}
        Ok(false) => return Ok(()),
        Err(e) => return Err(LifecycleError::api(&claim_ref(claim), action)(e)),
    }
    ctx.state.created.forget(claim.name());
    ctx.metrics
        .claims_terminated
        .get_or_create(&ReasonLabels {
            provisioner: claim.spec.provisioner_name.clone(),
            reason: reason.to_string(),
        })
        .inc();
    Ok(())
}

/// How long ago `created` was, zero when it lies in the future (clock skew) or is missing.
pub(crate) fn age(created: Option<&Time>, now: Timestamp) -> Duration {
    created
        .and_then(|t| Duration::try_from(now.duration_since(t.0)).ok())
        .unwrap_or_default()
}

/// How long a claim took from creation to initialized, for `joiner_nodeclaim_ready_seconds`.
pub fn ready_after(claim: &NodeClaim, now: Timestamp) -> Duration {
    age(claim.metadata.creation_timestamp.as_ref(), now)
}

/// How long after its launch a claim's instance must be missing from the cloud's listing (and
/// its Node not Ready) before the claim is taken as gone.
pub const VANISHED_AFTER: Duration = Duration::from_secs(120);

/// When `claim` was launched (its Launched condition's transition), else created: the age
/// [`VANISHED_AFTER`] is measured from.
pub fn launched_at(claim: &NodeClaim) -> Option<&Time> {
    claim
        .status
        .as_ref()
        .and_then(|s| condition::find(&s.conditions, condition::LAUNCHED))
        .map(|c| &c.last_transition_time)
        .or(claim.metadata.creation_timestamp.as_ref())
}

/// Instance states in which there is nothing left to drain or terminate.
pub const ENDING_STATES: &[&str] = &["shutting-down", "terminated"];

/// Instance states of a machine that runs nothing (a Node on it is dead).
pub const STOPPED_STATES: &[&str] = &["stopping", "stopped"];

/// True when `node` is ready for the pods `claim` was bought for: Ready, without the claim's
/// startup taints, joiner's own or Kubernetes' known ephemeral ones, and reporting every
/// extended resource the claim requests.
pub fn is_initialized(claim: &NodeClaim, node: &Node) -> bool {
    if !is_ready(node) || has_taint(node, labels::UNREGISTERED_TAINT) {
        return false;
    }
    let taints = node_taints(node);
    // Kubernetes' own starting taints still on (the lifecycle controller lags Ready by
    // seconds): the scheduler would not place the claim's pods yet, so neither is the claim
    // initialized (its node is planned without them until then).
    if taints
        .iter()
        .any(|t| labels::is_ephemeral_taint(&t.key, &t.effect))
    {
        return false;
    }
    let starting = claim.spec.startup_taints.iter().any(|s| {
        taints
            .iter()
            .any(|t| t.key == s.key && t.effect == s.effect)
    });
    if starting {
        return false;
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    claim
        .spec
        .resources
        .requests
        .iter()
        .filter(|(name, _)| joiner_core::resources::is_extended(name))
        .all(|(name, _)| {
            allocatable
                .and_then(|a| a.get(name))
                .is_some_and(|q| q.0.trim() != "0" && !q.0.trim().is_empty())
        })
}

/// `joiner.sh/disrupted:NoSchedule`.
pub fn disrupted_taint() -> Taint {
    Taint {
        key: labels::DISRUPTED_TAINT.to_string(),
        value: None,
        effect: "NoSchedule".to_string(),
        time_added: None,
    }
}

/// Logs every failure of a pass and returns the first: each pass gives every object its turn
/// before reporting, so one broken object never stalls the others.
pub(crate) fn first_error(
    errors: impl IntoIterator<Item = LifecycleError>,
) -> Result<(), LifecycleError> {
    let mut first = None;
    for err in errors {
        tracing::warn!(error = %err, "lifecycle step failed");
        first.get_or_insert(err);
    }
    first.map_or(Ok(()), Err)
}

/// Logs and counts a failed pass of `controller` (`reconcile_errors{controller}`); the loop
/// goes on, since the next pass retries from the stores.
pub(crate) fn report<P: CloudProvider>(
    ctx: &Context<P>,
    controller: &'static str,
    result: Result<(), LifecycleError>,
) {
    if let Err(err) = result {
        tracing::warn!(controller, error = %err, "lifecycle pass failed; retrying next pass");
        ctx.metrics.reconcile_failed(controller);
    }
}

/// One reconciler's loop: `$pass` runs every `$period` until `$stop` is cancelled, its
/// failures [`report`]ed. A pass under way is finished (each of its steps is bounded), so
/// nothing is left half-written when the leadership ends. (A macro rather than a generic
/// helper: the passes borrow the context, which a closure returning a future cannot express
/// for the `Send` the runtime needs.)
macro_rules! every {
    ($ctx:ident, $stop:ident, $period:expr, $controller:literal, $pass:expr) => {
        async {
            use tracing::Instrument as _;
            let mut tick = tokio::time::interval($period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                $ctx.metrics
                    .passes
                    .tick($controller, $period, $crate::metrics::PASS_STALL);
                tokio::select! {
                    _ = $stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
                $ctx.metrics.passes.tick(
                    $controller,
                    std::time::Duration::ZERO,
                    $crate::metrics::PASS_STALL,
                );
                let result = $pass
                    .instrument(tracing::debug_span!("reconcile", controller = $controller))
                    .await;
                $crate::reconcile::report(&$ctx, $controller, result);
            }
        }
    };
}
pub(crate) use every;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_is_zero_for_future_or_missing_timestamps() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().expect("ts");
        let past = Time("2026-01-01T00:00:00Z".parse().expect("ts"));
        let future = Time("2026-01-01T00:20:00Z".parse().expect("ts"));
        assert_eq!(age(Some(&past), now), Duration::from_secs(600));
        assert_eq!(age(Some(&future), now), Duration::ZERO);
        assert_eq!(age(None, now), Duration::ZERO);
    }
}
