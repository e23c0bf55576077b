//! Node lifecycle: the loops that take a NodeClaim from launched to registered and initialized
//! ([`crate::registration`]), delete claims that never got there ([`crate::liveness`]), drain and
//! release what is being deleted ([`crate::termination`]) and collect what nobody claims
//! ([`crate::gc`]).
//!
//! Every pass is level-triggered over the reflector stores: it compares what the stores say with
//! what should be and makes one step towards it, so a missed watch event, a crash or a 409 only
//! delays the next step to the next pass. Passes are cheap (no request unless something must
//! change), so the fast loop runs about every second and the garbage collector, which lists the
//! cloud, every `settings.sweep_interval`.

use std::sync::Arc;
use std::time::Duration;

use joiner_apis::NodeClaim;
use joiner_core::CloudProvider;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams};
use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;
use crate::gc::Collector;
use crate::metrics::ReasonLabels;
use crate::termination::Terminator;

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
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api.delete(claim.name(), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(LifecycleError::api(&claim_ref(claim), action)(e)),
    }
    ctx.metrics
        .claims_terminated
        .get_or_create(&ReasonLabels {
            provisioner: claim.spec.provisioner_name.clone(),
            reason: reason.to_string(),
        })
        .inc();
    Ok(())
}

/// The HTTP status of an API error, if `err` is one.
pub(crate) fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// True for 409 Conflict: another writer changed the object since it was read; the next pass
/// reads it again from the store and retries.
pub(crate) fn is_conflict(err: &kube::Error) -> bool {
    api_code(err) == Some(409)
}

/// True for 404 Not Found.
pub(crate) fn is_not_found(err: &kube::Error) -> bool {
    api_code(err) == Some(404)
}

/// `NodeClaim "name"`, for messages.
pub(crate) fn claim_ref(claim: &NodeClaim) -> String {
    format!("NodeClaim {:?}", claim.name())
}

/// `Node "name"`, for messages.
pub(crate) fn node_ref(node: &Node) -> String {
    format!("Node {:?}", node_name(node))
}

/// metadata.name of a Node, empty when missing.
pub(crate) fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

/// The Node of `claim`: the one whose `spec.providerID` is the claim's `status.providerID`, or
/// whose `joiner.sh/nodeclaim` label names the claim.
pub fn node_of<'a>(claim: &NodeClaim, nodes: &'a [Arc<Node>]) -> Option<&'a Arc<Node>> {
    let provider_id = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty());
    nodes.iter().find(|n| {
        let by_id = provider_id.is_some()
            && n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == provider_id;
        by_id || node_claim_label(n) == Some(claim.name())
    })
}

/// The NodeClaim of `node`, by the same matching as [`node_of`].
pub fn claim_of<'a>(node: &Node, claims: &'a [Arc<NodeClaim>]) -> Option<&'a Arc<NodeClaim>> {
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty());
    let label = node_claim_label(node);
    claims.iter().find(|c| {
        let by_id = provider_id.is_some()
            && c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == provider_id;
        by_id || label == Some(c.name())
    })
}

/// The `joiner.sh/nodeclaim` label of `node`.
pub(crate) fn node_claim_label(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(joiner_core::labels::NODECLAIM))
        .map(String::as_str)
}

/// True when `finalizers` holds joiner's termination finalizer.
pub(crate) fn has_finalizer(meta: &kube::api::ObjectMeta) -> bool {
    meta.finalizers
        .iter()
        .flatten()
        .any(|f| f == joiner_core::labels::TERMINATION_FINALIZER)
}

/// `finalizers` without joiner's termination finalizer, other owners' entries kept in order.
pub(crate) fn finalizers_without_ours(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.finalizers
        .iter()
        .flatten()
        .filter(|f| *f != joiner_core::labels::TERMINATION_FINALIZER)
        .cloned()
        .collect()
}

/// How long ago `created` was, zero when it lies in the future (clock skew) or is missing.
pub(crate) fn age(created: Option<&Time>, now: Timestamp) -> Duration {
    created
        .and_then(|t| Duration::try_from(now.duration_since(t.0)).ok())
        .unwrap_or_default()
}

/// Drives every lifecycle loop until `stop` is cancelled: registration, liveness and termination
/// about every [`FAST_INTERVAL`], garbage collection every `settings.sweep_interval`. A failed
/// pass is logged and counted in `reconcile_errors{controller}`; the loop goes on, since the
/// next pass retries from the stores.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>, stop: CancellationToken) {
    let terminator = Terminator::default();
    let collector = Collector::default();
    let mut fast = tokio::time::interval(FAST_INTERVAL);
    fast.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweep = tokio::time::interval(ctx.settings.sweep_interval);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = fast.tick() => {
                let result = crate::registration::reconcile(&ctx)
                    .instrument(tracing::debug_span!("reconcile", controller = "registration"))
                    .await;
                report(&ctx, "registration", result);
                let result = crate::liveness::reconcile(&ctx)
                    .instrument(tracing::debug_span!("reconcile", controller = "liveness"))
                    .await;
                report(&ctx, "liveness", result);
                let result = terminator
                    .reconcile(&ctx)
                    .instrument(tracing::debug_span!("reconcile", controller = "termination"))
                    .await;
                report(&ctx, "termination", result);
            }
            _ = sweep.tick() => {
                let result = collector
                    .sweep(&ctx)
                    .instrument(tracing::debug_span!("reconcile", controller = "gc"))
                    .await;
                report(&ctx, "gc", result);
            }
        }
    }
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
    use serde_json::json;

    fn node(v: serde_json::Value) -> Arc<Node> {
        Arc::new(serde_json::from_value(v).expect("node"))
    }

    fn claim(v: serde_json::Value) -> Arc<NodeClaim> {
        Arc::new(serde_json::from_value(v).expect("claim"))
    }

    #[test]
    fn nodes_and_claims_match_by_provider_id_or_label() {
        let nodes = vec![
            node(json!({"metadata": {"name": "a"}, "spec": {"providerID": "aws:///z/i-1"}})),
            node(json!({"metadata": {"name": "b", "labels": {"joiner.sh/nodeclaim": "web-2"}}})),
            node(json!({"metadata": {"name": "c"}, "spec": {}})),
        ];
        let c1 = claim(
            json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "web-1"}, "spec": {"provisionerName": "web"},
            "status": {"providerID": "aws:///z/i-1"}}),
        );
        let c2 = claim(
            json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "web-2"}, "spec": {"provisionerName": "web"}}),
        );
        let c3 = claim(
            json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "web-3"}, "spec": {"provisionerName": "web"}}),
        );
        assert_eq!(node_of(&c1, &nodes).map(|n| node_name(n)), Some("a"));
        assert_eq!(node_of(&c2, &nodes).map(|n| node_name(n)), Some("b"));
        assert!(node_of(&c3, &nodes).is_none());
        let claims = vec![c1, c2, c3];
        assert_eq!(
            claim_of(&nodes[0], &claims).map(|c| c.name()),
            Some("web-1")
        );
        assert_eq!(
            claim_of(&nodes[1], &claims).map(|c| c.name()),
            Some("web-2")
        );
        assert!(claim_of(&nodes[2], &claims).is_none());
    }

    #[test]
    fn finalizers_of_other_owners_are_kept() {
        let meta = kube::api::ObjectMeta {
            finalizers: Some(vec![
                "a.example/x".into(),
                joiner_core::labels::TERMINATION_FINALIZER.into(),
                "b.example/y".into(),
            ]),
            ..Default::default()
        };
        assert!(has_finalizer(&meta));
        assert_eq!(
            finalizers_without_ours(&meta),
            ["a.example/x", "b.example/y"]
        );
    }

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
