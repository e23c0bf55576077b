//! Registration: a NodeClaim's node has joined; make it the claim's node.
//!
//! The launch template is shared by many claims and instance types, so per-claim facts (the
//! claim's name, its single-valued requirements, the type and zone actually launched, the
//! claim's own taints) cannot be in the user data: they are put on the Node object here, once,
//! together with the termination finalizer. The node registered with the startup taint
//! `joiner.sh/unregistered:NoSchedule`, so no pod landed before these labels and taints were
//! there; the same patch removes it (not later at Ready: CNI and other node agents need not
//! tolerate it). The claim's own startupTaints stay: their owners (a CNI agent, ...) remove
//! them, as with Karpenter.
//!
//! A claim is Initialized as the scheduler will see the node: Ready, none of the claim's
//! startup taints left, and every extended resource its pods requested (`nvidia.com/gpu`,
//! `aws.amazon.com/neuron`, `vpc.amazonaws.com/pod-eni`, ...) in the Node's allocatable (the
//! device plugin has reported it). Until then the simulation plans the node with the claim's
//! expected capacity (`inflight::settle_initializing`), so it is not bought again.
//!
//! Node patches are JSON patches that first `test` the resourceVersion read from the store, so a
//! concurrent writer (the kubelet, another controller) makes the patch fail (409, or a real API
//! server's 422 for a failed `test`) instead of being overwritten; the next pass reads the Node
//! again and retries. Any other refusal is reported and backed off ([`Registrar`]). Claim status patches carry
//! the resourceVersion too (optimistic concurrency on the status subresource).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use joiner_apis::condition;
use joiner_apis::convert::node_claim::claim_labels;
use joiner_apis::NodeClaim;
use joiner_core::labels;
use joiner_core::CloudProvider;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::context::Context;
use crate::k8s::backoff::{Backoff, BackoffPolicy};
use crate::k8s::claims::{claim_condition, patch_claim_status, with_condition, Guard};
use crate::k8s::codes::{api_message, is_conflict, is_guarded_patch_conflict, is_refused};
use crate::k8s::events::{self, EventType};
use crate::k8s::finalizers::has_finalizer;
use crate::k8s::node_patch::{
    add_finalizer_op, guarded, has_taint, labels_op, node_taints, taints_op, untaint_patch,
};
use crate::k8s::refs::{claim_ref, node_name, node_ref};
use crate::metrics::{ProvisionerLabels, SourceLabels};
use crate::reconcile::{first_error, is_initialized, LifecycleError};
use joiner_apis::cluster::matching::node_of;

/// The Event reason and `Registered=False` condition reason of a claim whose Node the API
/// server refuses to label or taint as the claim says.
pub const REFUSED_REASON: &str = "RegistrationRefused";

/// Registration with memory across passes. A claim whose registration patch the API server
/// refuses (a label value, a taint, a field it never takes) is no race to retry every second:
/// it is retried after a per-claim backoff (10 s doubling to 5 min), logged, counted
/// (`joiner_nodeclaims_registration_refused`), and reported once per distinct refusal with a
/// Warning Event on the claim and `Registered=False` (reason [`REFUSED_REASON`]), so a person
/// sees why the node never takes pods. The claim's registration timeout replaces the node
/// eventually, as for any node that does not register.
#[derive(Debug)]
pub struct Registrar {
    backoff: Backoff,
    /// Per claim, the refusal last reported.
    told: Mutex<HashMap<String, String>>,
}

impl Default for Registrar {
    fn default() -> Self {
        Registrar::new(BackoffPolicy {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
        })
    }
}

impl Registrar {
    /// A registrar whose refused claims are retried after `policy`.
    pub fn new(policy: BackoffPolicy) -> Self {
        Registrar {
            backoff: Backoff::new(policy),
            told: Mutex::default(),
        }
    }

    /// One registration pass over every claim that is not being deleted and whose Node exists.
    /// Returns the first failure after every claim had its turn; conflicts are not failures
    /// (the next pass retries them), refusals are (after they were reported).
    pub async fn reconcile<P: CloudProvider>(
        &self,
        ctx: &Context<P>,
    ) -> Result<(), LifecycleError> {
        let nodes = ctx.state.nodes.state();
        let claims = ctx.state.node_claims.state();
        let now = Instant::now();
        let mut errors = Vec::new();
        for claim in &claims {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(node) = node_of(claim, &nodes) else {
                continue;
            };
            if node.metadata.deletion_timestamp.is_some() || !self.backoff.ready(claim.name(), now)
            {
                continue;
            }
            ctx.metrics.passes.progress("registration");
            match register(ctx, claim, node).await {
                Ok(Registered::Done) => {
                    self.backoff.forget(claim.name());
                    self.lock_told().remove(claim.name());
                }
                Ok(Registered::Refused(message)) => {
                    errors.push(self.refused(ctx, claim, node, message, now).await);
                }
                Err(e) => errors.push(e),
            }
        }
        let live: HashSet<String> = claims.iter().map(|c| c.name().to_string()).collect();
        self.backoff.retain(&live);
        self.lock_told().retain(|k, _| live.contains(k));
        first_error(errors)
    }

    /// Backs `claim` off, counts the refusal, and reports it on the claim (Event and
    /// condition) unless that refusal was reported already. Returns the pass's error.
    async fn refused<P: CloudProvider>(
        &self,
        ctx: &Context<P>,
        claim: &NodeClaim,
        node: &Node,
        message: String,
        now: Instant,
    ) -> LifecycleError {
        let delay = self.backoff.refused(claim.name(), now);
        ctx.metrics
            .registrations_refused
            .get_or_create(&ProvisionerLabels {
                provisioner: claim.spec.provisioner_name.clone(),
            })
            .inc();
        let text = format!(
            "Node {} cannot take this claim's labels and taints: {message}; retrying in {}s",
            node_name(node),
            delay.as_secs()
        );
        let first = self
            .lock_told()
            .insert(claim.name().to_string(), message.clone())
            .as_deref()
            != Some(message.as_str());
        if first {
            if let Err(e) = events::publish_on_claim(
                &ctx.client,
                claim,
                EventType::Warning,
                REFUSED_REASON,
                &text,
            )
            .await
            {
                tracing::warn!(claim = claim.name(), error = %e, "could not publish the registration-refused event");
            }
            let refused = claim_condition(
                claim,
                condition::REGISTERED,
                "False",
                REFUSED_REASON,
                &text,
                Timestamp::now(),
            );
            let status = json!({ "conditions": with_condition(claim, refused) });
            if let Err(e) = patch_claim_status(&ctx.client, claim, status, Guard::None).await {
                tracing::warn!(claim = claim.name(), error = %e, "could not set Registered=False on the claim");
            }
        }
        LifecycleError::Invalid {
            object: claim_ref(claim),
            field: "spec.requirements",
            reason: text,
        }
    }

    fn lock_told(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // A poisoned lock only means a panic elsewhere mid-update; the map is still usable.
        self.told.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One registration pass with no memory of earlier refusals (see [`Registrar`], which the
/// controller runs).
pub async fn reconcile<P: CloudProvider>(ctx: &Context<P>) -> Result<(), LifecycleError> {
    Registrar::default().reconcile(ctx).await
}

/// How far [`register`] got.
enum Registered {
    /// As far as the node allows this pass (or a conflict: the next pass goes on).
    Done,
    /// The API server refused the registration patch, or would: the message says why.
    Refused(String),
}

/// The first label value of `claim` no Node can carry (from a requirement written before its
/// Provisioner's validation refused such values), as a refusal message.
fn invalid_label(claim: &NodeClaim) -> Option<String> {
    claim_labels(claim).into_iter().find_map(|(k, v)| {
        (!labels::is_valid_value(&v)).then(|| {
            format!("label {k}={v:?}: not a valid label value (the API server refuses it)")
        })
    })
}

/// Takes `claim` and its `node` one pass further: labels/taints/finalizer on the Node, then
/// Registered, then (once Ready) the startup taint off and Initialized.
async fn register<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    node: &Node,
) -> Result<Registered, LifecycleError> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let name = node_name(node).to_string();
    let mut node = node.clone();
    let mut claim = claim.clone();

    if needs_registration_patch(&claim, &node) {
        if let Some(why) = invalid_label(&claim) {
            return Ok(Registered::Refused(why));
        }
        let patch = registration_patch(&claim, &node)?;
        match nodes
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(n) => node = n,
            Err(e) if is_guarded_patch_conflict(&e) => {
                tracing::debug!(node = %name, claim = claim.name(), "node changed while registering; retrying next pass");
                return Ok(Registered::Done);
            }
            Err(e) if is_refused(&e) => return Ok(Registered::Refused(api_message(&e))),
            Err(e) => {
                return Err(LifecycleError::api(
                    &node_ref(&node),
                    "applying the NodeClaim's labels, taints and finalizer",
                )(e))
            }
        }
    }

    if !claim.is_registered() {
        let registered = claim_condition(
            &claim,
            condition::REGISTERED,
            "True",
            "NodeRegistered",
            &format!("Node {name} joined the cluster"),
            Timestamp::now(),
        );
        let status = json!({
            "nodeName": name,
            "conditions": with_condition(&claim, registered),
        });
        match patch_claim_status(&ctx.client, &claim, status, Guard::ResourceVersion).await {
            Ok(c) => claim = c,
            Err(e) if is_conflict(&e) => return Ok(Registered::Done),
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

    if has_taint(&node, labels::UNREGISTERED_TAINT) {
        let patch = untaint_patch(&node, labels::UNREGISTERED_TAINT)?;
        match nodes
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(n) => node = n,
            Err(e) if is_guarded_patch_conflict(&e) => return Ok(Registered::Done),
            Err(e) => {
                return Err(LifecycleError::api(
                    &node_ref(&node),
                    "removing the joiner.sh/unregistered taint",
                )(e))
            }
        }
    }
    if !claim.is_initialized() && is_initialized(&claim, &node) {
        let initialized = claim_condition(
            &claim,
            condition::INITIALIZED,
            "True",
            "NodeInitialized",
            &format!(
                "Node {name} is Ready, its startup taints are gone and its extended resources \
                 are reported"
            ),
            Timestamp::now(),
        );
        let status = json!({ "conditions": with_condition(&claim, initialized) });
        match patch_claim_status(&ctx.client, &claim, status, Guard::ResourceVersion).await {
            Ok(_) => {
                let source = if launched_from_warm_pool(&claim) {
                    "warm"
                } else {
                    "cold"
                };
                ctx.metrics
                    .claim_ready_duration
                    .get_or_create(&SourceLabels {
                        source: source.to_string(),
                    })
                    .observe(crate::reconcile::ready_after(&claim, Timestamp::now()).as_secs_f64());
                tracing::info!(claim = claim.name(), node = %name, source, "node initialized")
            }
            Err(e) if is_conflict(&e) => {}
            Err(e) => {
                return Err(LifecycleError::api(
                    &claim_ref(&claim),
                    "setting Initialized",
                )(e))
            }
        }
    }
    Ok(Registered::Done)
}

/// True when the claim's instance was a warm-pool member started for it (its Launched reason
/// says so), for the warm/cold split of `joiner_nodeclaim_ready_seconds`.
fn launched_from_warm_pool(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| condition::find(&s.conditions, condition::LAUNCHED))
        .is_some_and(|c| c.reason == joiner_apis::cluster::warm_pool::TAKEN_REASON)
}

/// The Node still lacks what registration puts on it: the finalizer or the nodeclaim label.
/// After the one registration patch it has both, so labels and taints are applied once and
/// later edits by people are not undone.
fn needs_registration_patch(claim: &NodeClaim, node: &Node) -> bool {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODECLAIM))
        .map(String::as_str);
    !has_finalizer(&node.metadata) || labelled != Some(claim.name())
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

/// The one registration patch: resourceVersion test, then the merged labels, taints (the
/// claim's added to what the kubelet registered, none twice) and finalizers.
fn registration_patch(claim: &NodeClaim, node: &Node) -> Result<json_patch::Patch, LifecycleError> {
    let mut labels = node.metadata.labels.clone().unwrap_or_default();
    labels.extend(claim_labels(claim));
    // joiner's startup taint goes with this patch: the node now carries the claim's labels and
    // taints, which is what the taint was holding pods back for.
    let mut taints: Vec<Taint> = node_taints(node)
        .into_iter()
        .filter(|t| t.key != labels::UNREGISTERED_TAINT)
        .collect();
    for t in claim_taints(claim) {
        if !taints
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            taints.push(t);
        }
    }
    let ops = vec![
        labels_op(&labels),
        taints_op(node, &taints),
        add_finalizer_op(node),
    ];
    Ok(guarded(node, ops)?)
}
