//! Node lifecycle: the loops that take a NodeClaim from launched to registered and initialized
//! ([`registration`]), delete claims that never got there ([`liveness`]), drain and release
//! what is being deleted ([`termination`]) and collect what nobody claims ([`gc`]). They share
//! the Kubernetes toolbox in [`crate::k8s`]; disruption and interruption will sit beside this
//! folder and end nodes through [`termination`].
//!
//! Every pass is level-triggered over the reflector stores: it compares what the stores say with
//! what should be and makes one step towards it, so a missed watch event, a crash or a 409 only
//! delays the next step to the next pass. Passes are cheap (no request unless something must
//! change), so the fast loop runs about every second and the garbage collector, which lists the
//! cloud, every `settings.sweep_interval`.

pub mod gc;
pub mod liveness;
pub mod registration;
pub mod termination;

use std::sync::Arc;
use std::time::Duration;

use joiner_apis::NodeClaim;
use joiner_core::CloudProvider;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;
use crate::http::PASS_STALL;
use crate::k8s::claims::delete_claim as delete_claim_object;
use crate::k8s::node_patch::NodePatchError;
use crate::k8s::refs::claim_ref;
use crate::metrics::ReasonLabels;
use gc::Collector;
use termination::Terminator;

/// How often the registration, liveness and termination passes run.
pub const FAST_INTERVAL: Duration = Duration::from_secs(1);

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

/// Drives every lifecycle loop until `stop` is cancelled: registration, liveness and termination
/// about every [`FAST_INTERVAL`], garbage collection every `settings.sweep_interval`, the warm
/// pools ([`crate::warm_pool`]) every `settings.warm_pool_interval`. Each loop
/// runs on its own (they are polled concurrently), so a slow pass of one — a drain waiting on
/// the API server, a cloud listing — never delays registration or liveness of other claims. A
/// failed pass is logged and counted in `reconcile_errors{controller}`; the loop goes on, since
/// the next pass retries from the stores.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>, stop: CancellationToken) {
    let registrar = registration::Registrar::default();
    let terminator = Terminator::default();
    let collector = Collector::default();
    // One loop per reconciler: `$pass` runs every `$period` until `stop`. A pass under way is
    // finished (each of its steps is bounded), so nothing is left half-written when the
    // leadership ends. (A macro rather than a generic helper: the passes borrow the context,
    // which a closure returning a future cannot express for the `Send` the runtime needs.)
    macro_rules! every {
        ($period:expr, $controller:literal, $pass:expr) => {
            async {
                let mut tick = tokio::time::interval($period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ctx.metrics.passes.tick($controller, $period, PASS_STALL);
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tick.tick() => {}
                    }
                    ctx.metrics
                        .passes
                        .tick($controller, Duration::ZERO, PASS_STALL);
                    let result = $pass
                        .instrument(tracing::debug_span!("reconcile", controller = $controller))
                        .await;
                    report(&ctx, $controller, result);
                }
            }
        };
    }
    tokio::join!(
        every!(FAST_INTERVAL, "registration", registrar.reconcile(&ctx)),
        every!(FAST_INTERVAL, "liveness", liveness::reconcile(&ctx)),
        every!(FAST_INTERVAL, "termination", terminator.reconcile(&ctx)),
        every!(ctx.settings.sweep_interval, "gc", collector.sweep(&ctx)),
        every!(
            ctx.settings.warm_pool_interval,
            "warm_pool",
            crate::warm_pool::reconcile(&ctx)
        ),
    );
    tracing::info!("lifecycle loops stopped");
}

fn report<P: CloudProvider>(
    ctx: &Context<P>,
    controller: &'static str,
    result: Result<(), LifecycleError>,
) {
    if let Err(err) = result {
        tracing::warn!(controller, error = %err, "lifecycle pass failed; retrying next pass");
        ctx.metrics.reconcile_failed(controller);
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
