//! Termination: what happens between "delete this NodeClaim (or joiner's Node)" and the object
//! being gone, held open by the finalizer `joiner.sh/termination`.
//!
//! For a claim or Node with a deletionTimestamp and the finalizer:
//! 1. find its instance in the listing a pass reads ([`listing`]: `CloudProvider::list_some`
//!    for the objects being terminated only, reused for up to 10 s while nothing was
//!    terminated) (by the claim tag, else by the Node's providerID); none, or one already shutting down, means there is nothing to
//!    drain, and a NotReady Node whose instance is stopped has nothing to drain either: those
//!    skip to step 4;
//! 2. taint the Node `joiner.sh/disrupted:NoSchedule` so nothing new lands on it (a taint rather
//!    than `spec.unschedulable`, which people and `kubectl uncordon` also toggle: joiner's own
//!    key cannot be mistaken for a manual cordon, and is what Karpenter v1 does too);
//! 3. evict its pods through the Eviction API ([`drain`] says which and in what order,
//!    [`eviction`] how answers are handled) and wait until the pods store has none left;
//! 4. terminate the instance (`CloudProvider::delete`; not-found means already gone);
//! 5. once a later pass sees the instance shutting down or gone, delete the pods still bound to
//!    the Node (grace period 0: nothing runs them any more, and their controllers recreate them
//!    at once), then remove the finalizer from the Node (deleting the Node when its claim is
//!    being deleted) and from the claim (deleting the claim when only its Node was deleted).
//!
//! Every patch is guarded by the resourceVersion it was computed from, so a concurrent writer
//! turns it into a 409 (or 422, a failed JSON-patch `test`) and the next pass recomputes it
//! from fresh state. Claims are terminated concurrently ([`CONCURRENCY`], each step bounded by
//! [`STEP_TIMEOUT`]), so one slow drain never delays another claim.

pub mod drain;
pub mod eviction;
pub mod listing;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use joiner_apis::NodeClaim;
use joiner_core::labels;
use joiner_core::{CloudError, CloudErrorKind, CloudProvider, LaunchedNode};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::context::Context;
use crate::k8s::claims::delete_claim;
use crate::k8s::codes::{is_conflict, is_guarded_patch_conflict, is_not_found};
use crate::k8s::events::{self, EventType};
use crate::k8s::finalizers::{finalizers_without_ours, has_finalizer};
use crate::k8s::node_patch::{is_ready, release_finalizer_patch, taint_patch};
use crate::k8s::refs::{claim_ref, node_name, node_ref};
use crate::metrics::ReasonLabels;
use crate::pod_record::PodRecord;
use crate::reconcile::{disrupted_taint, first_error, LifecycleError};
use eviction::{evict, pod_key, Backoff, BackoffPolicy, Evicted};
use joiner_apis::cluster::matching::{claim_of, node_of, node_provider_id};

/// The reason of Events saying a drain waits for a pod that must not be disrupted.
pub const BLOCKED_EVENT_REASON: &str = "DrainBlocked";

/// Longest one object's termination step may take before the pass moves on (it is retried on
/// the next pass).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// Objects terminated at once in a pass.
pub const CONCURRENCY: usize = 16;

pub use crate::reconcile::{ENDING_STATES, STOPPED_STATES};

/// The termination reconciler. It keeps, across passes, the per-pod eviction backoff and which
/// blocked pods it already reported, so a long wait is not an Event per second.
#[derive(Debug, Default)]
pub struct Terminator {
    backoff: Backoff,
    reported: Mutex<HashSet<String>>,
    listings: listing::Listings,
    /// When each node's drain was first found finished while volumes were still attached.
    drained_at: Mutex<HashMap<String, tokio::time::Instant>>,
}

/// Longest termination waits, after a node's drain, for its volumes to detach before it
/// terminates the instance anyway (a CSI driver that never detaches must not keep a node).
pub const VOLUME_DETACH_TIMEOUT: Duration = Duration::from_secs(5 * 60);

impl Terminator {
    /// A terminator whose eviction retries follow `policy`.
    pub fn new(policy: BackoffPolicy) -> Self {
        Terminator {
            backoff: Backoff::new(policy),
            reported: Mutex::default(),
            listings: listing::Listings::default(),
            drained_at: Mutex::default(),
        }
    }

    /// One termination pass over every claim and Node being deleted that still holds joiner's
    /// finalizer. The cloud is asked once for the whole pass (not per object), about those
    /// objects only, at most every [`listing::LIST_EVERY`] while nothing changes; the objects
    /// are driven concurrently, each step bounded by [`STEP_TIMEOUT`], so one slow or refused
    /// drain never holds up another. Returns the first failure after every object had its turn.
    pub async fn reconcile<P: CloudProvider>(
        &self,
        ctx: &Context<P>,
    ) -> Result<(), LifecycleError> {
        let nodes = ctx.state.nodes.state();
        let claims = ctx.state.node_claims.state();
        let pods = ctx.state.pods.state();
        let mut seen_nodes = HashSet::new();
        let mut work: Vec<(Option<&NodeClaim>, Option<&Node>)> = Vec::new();
        for claim in &claims {
            if claim.metadata.deletion_timestamp.is_none() || !has_finalizer(&claim.metadata) {
                continue;
            }
            let node = node_of(claim, &nodes);
            if let Some(n) = node {
                seen_nodes.insert(node_name(n).to_string());
            }
            work.push((Some(claim.as_ref()), node.map(Arc::as_ref)));
        }
        for node in &nodes {
            if node.metadata.deletion_timestamp.is_none()
                || !has_finalizer(&node.metadata)
                || seen_nodes.contains(node_name(node))
            {
                continue;
            }
            work.push((
                claim_of(node, &claims).map(Arc::as_ref),
                Some(node.as_ref()),
            ));
        }
        let mut errors = Vec::new();
        if !work.is_empty() {
            let wanted = listing::Wanted::of(&work);
            let instances = self
                .listings
                .instances(ctx.cloud.as_ref(), &wanted)
                .await
                .map_err(|e| {
                    LifecycleError::cloud(
                        &format!("cluster {:?}", ctx.settings.cluster_name),
                        "listing instances for termination".into(),
                        e,
                    )
                })?;
            let now = Timestamp::now();
            let pods = pods.as_slice();
            let instances = instances.as_ref().as_slice();
            let all_claims = claims.as_slice();
            // The futures are built first and then streamed: a stream over a closure that makes
            // them would keep the closure in this future, which then cannot be proven `Send`.
            let steps: Vec<_> = work
                .into_iter()
                .map(|(claim, node)| async move {
                    let instance = instance_of(instances, claim, node);
                    let step = async {
                        if instance.is_some_and(|i| recorded_by_another(all_claims, claim, i)) {
                            // Another claim's node: nothing here is drained, terminated or
                            // deleted; the claim going away is only released.
                            return match (
                                claim.filter(|c| c.metadata.deletion_timestamp.is_some()),
                                node,
                            ) {
                                (Some(c), _) => release_claim(ctx, c).await,
                                // A Node being deleted whose instance another claim records:
                                // its finalizer goes, nothing else (the kubelet registers
                                // the Node again).
                                (None, Some(n)) => release_node(ctx, n, false).await.map(|_| ()),
                                (None, None) => Ok(()),
                            };
                        }
                        self.terminate(ctx, claim, node, instance, pods, now).await
                    };
                    match tokio::time::timeout(STEP_TIMEOUT, step).await {
                        Ok(result) => result,
                        Err(_) => Err(LifecycleError::Invalid {
                            object: claim
                                .map_or_else(|| node.map(node_ref).unwrap_or_default(), claim_ref),
                            field: "metadata.deletionTimestamp",
                            reason: format!(
                            "termination step took longer than {STEP_TIMEOUT:?}; retrying next pass"
                        ),
                        }),
                    }
                })
                .collect();
            let results: Vec<Result<(), LifecycleError>> = futures::stream::iter(steps)
                .buffer_unordered(CONCURRENCY)
                .inspect(|_| ctx.metrics.passes.progress("termination"))
                .collect()
                .await;
            errors.extend(results.into_iter().filter_map(Result::err));
        }
        let live: HashSet<String> = pods.iter().map(|p| pod_key(p)).collect();
        self.backoff.retain(&live);
        let nodes_left: HashSet<&str> = nodes.iter().map(|n| node_name(n)).collect();
        self.drained_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n, _| nodes_left.contains(n.as_str()));
        self.reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k| {
                k.split_once('|')
                    .is_some_and(|(node, pod)| nodes_left.contains(node) && live.contains(pod))
            });
        first_error(errors)
    }

    /// One step of terminating `claim` and/or `node` (at least one is given), whose instance
    /// the cloud lists as `instance` (`None`: the cloud no longer has it).
    ///
    /// A live instance is drained (node tainted, pods evicted) and then terminated; the
    /// objects are released only once the cloud reports the instance shutting down or gone,
    /// so a Node never disappears while its instance still runs. An instance already shutting
    /// down or gone, or a NotReady Node whose instance is stopped, has nothing left to drain:
    /// it is terminated (when needed) and released without a drain.
    async fn terminate<P: CloudProvider>(
        &self,
        ctx: &Context<P>,
        claim: Option<&NodeClaim>,
        node: Option<&Node>,
        instance: Option<&LaunchedNode>,
        pods: &[Arc<PodRecord>],
        now: Timestamp,
    ) -> Result<(), LifecycleError> {
        let ending = instance.is_none_or(|i| ENDING_STATES.contains(&i.state.as_str()));
        let dead = instance.is_some_and(|i| STOPPED_STATES.contains(&i.state.as_str()))
            && node.is_some_and(|n| !is_ready(n));
        let mut node: Option<Node> = node.cloned();
        if let (false, false, Some(n)) = (ending, dead, node.as_mut()) {
            if let Some(patch) = taint_patch(n, disrupted_taint())? {
                let api: Api<Node> = Api::all(ctx.client.clone());
                match api
                    .patch(
                        node_name(n),
                        &PatchParams::default(),
                        &Patch::Json::<()>(patch),
                    )
                    .await
                {
                    Ok(updated) => *n = updated,
                    Err(e) if is_guarded_patch_conflict(&e) => return Ok(()),
                    Err(e) => {
                        return Err(LifecycleError::api(
                            &node_ref(n),
                            "tainting joiner.sh/disrupted",
                        )(e))
                    }
                }
            }
            if !self.drain(ctx, n, pods, now).await? {
                return Ok(());
            }
            if self.waits_for_volumes(ctx, n, pods) {
                return Ok(());
            }
        }

        if let (false, Some(i)) = (ending, instance) {
            let object = claim.map_or_else(
                || node.as_ref().map(node_ref).unwrap_or_default(),
                claim_ref,
            );
            let id = &i.instance_id;
            match ctx.cloud.delete(id).await {
                Ok(()) => {
                    // Released once a later pass sees it shutting down or gone: that pass
                    // lists afresh.
                    self.listings.invalidate();
                    tracing::info!(instance_id = %id, %object, "instance terminating");
                    return Ok(());
                }
                Err(e) if e.kind() == CloudErrorKind::NotFound => {}
                Err(e) => {
                    return Err(LifecycleError::cloud(
                        &object,
                        format!("terminating instance {id}"),
                        e,
                    ))
                }
            }
        }

        let claim_deleting = claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        // Pods are force-deleted only when nothing can be running them: the cloud reports the
        // instance ending, or does not list it and its Node is not Ready (a listing is
        // eventually consistent; a Ready Node proves the instance runs).
        let gone = instance.is_some_and(|i| ENDING_STATES.contains(&i.state.as_str()))
            || (instance.is_none() && node.as_ref().is_some_and(|n| !is_ready(n)));
        if let (true, Some(n)) = (gone, &node) {
            delete_stranded_pods(ctx, n, pods).await?;
        }
        if let Some(n) = &node {
            if !release_node(ctx, n, claim_deleting).await? {
                return Ok(());
            }
        }
        if let Some(c) = claim {
            if claim_deleting {
                release_claim(ctx, c).await?;
            } else {
                // Only the Node was deleted: its instance is gone, so is the claim.
                delete_claim(&ctx.client, c.name())
                    .await
                    .map_err(LifecycleError::api(
                        &claim_ref(c),
                        "deleting the claim of a deleted Node",
                    ))?;
            }
        }
        Ok(())
    }

    /// True while a VolumeAttachment still ties a volume to the drained `node`, for at most
    /// [`VOLUME_DETACH_TIMEOUT`] from the first pass that found it so: the CSI driver detaches
    /// a volume once its pod is gone, and terminating first leaves it attached to a dying
    /// instance, so the pod's replacement waits minutes for EC2 to force the detach (Karpenter
    /// waits too). Volumes of pods the drain leaves on the node (DaemonSet pods, pods
    /// tolerating the disruption taint) are not waited for.
    fn waits_for_volumes<P: CloudProvider>(
        &self,
        ctx: &Context<P>,
        node: &Node,
        pods: &[Arc<PodRecord>],
    ) -> bool {
        let name = node_name(node);
        let staying: HashSet<(String, String)> = pods
            .iter()
            .filter(|p| p.node_name.as_deref() == Some(name) && !p.finished)
            .flat_map(|p| {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                p.claims.iter().map(move |c| (ns.clone(), c.name.clone()))
            })
            .collect();
        let kept_volumes: HashSet<String> = if staying.is_empty() {
            HashSet::new()
        } else {
            ctx.state
                .volumes
                .claims
                .state()
                .iter()
                .filter(|c| {
                    staying.contains(&(
                        c.metadata.namespace.clone().unwrap_or_default(),
                        c.metadata.name.clone().unwrap_or_default(),
                    ))
                })
                .filter_map(|c| c.spec.as_ref()?.volume_name.clone())
                .collect()
        };
        let attached: Vec<String> = ctx
            .state
            .volumes
            .attachments
            .state()
            .iter()
            .filter(|va| va.spec.node_name == name)
            .filter(|va| {
                va.spec
                    .source
                    .persistent_volume_name
                    .as_ref()
                    .is_none_or(|pv| !kept_volumes.contains(pv))
            })
            .map(|va| va.metadata.name.clone().unwrap_or_default())
            .collect();
        let mut drained_at = self.drained_at.lock().unwrap_or_else(|p| p.into_inner());
        if attached.is_empty() {
            drained_at.remove(name);
            return false;
        }
        let since = *drained_at
            .entry(name.to_string())
            .or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= VOLUME_DETACH_TIMEOUT {
            tracing::warn!(node = %name, attachments = ?attached, waited = ?VOLUME_DETACH_TIMEOUT,
                "volumes still attached to a drained node; terminating it anyway");
            return false;
        }
        tracing::debug!(node = %name, attachments = ?attached, "drained; waiting for its volumes to detach");
        true
    }

    /// One drain step on `node`: evicts what may go now. True once no pod that must leave is
    /// left in the pods store.
    async fn drain<P: CloudProvider>(
        &self,
        ctx: &Context<P>,
        node: &Node,
        pods: &[Arc<PodRecord>],
        now: Timestamp,
    ) -> Result<bool, LifecycleError> {
        let name = node_name(node);
        let plan = drain::plan(name, pods, now);
        if plan.remaining == 0 {
            return Ok(true);
        }
        for pod in &plan.blocked {
            self.report_blocked(ctx, node, pod).await;
        }
        let clock = Instant::now();
        let mut errors = Vec::new();
        for pod in plan.evict {
            let key = pod_key(pod);
            if !self.backoff.ready(&key, clock) {
                continue;
            }
            match evict(&ctx.client, pod).await {
                Ok(Evicted::Accepted) => {
                    tracing::info!(pod = %key, node = name, "pod evicted");
                    self.backoff.forget(&key);
                }
                Ok(Evicted::Gone) => self.backoff.forget(&key),
                Ok(Evicted::Refused) => {
                    let delay = self.backoff.refused(&key, clock);
                    tracing::info!(pod = %key, node = name, ?delay, "eviction refused by a PodDisruptionBudget; retrying later");
                }
                Ok(Evicted::ServerError(code)) => {
                    let delay = self.backoff.refused(&key, clock);
                    tracing::warn!(pod = %key, node = name, code, ?delay, "eviction failed on the API server; retrying later");
                }
                Ok(Evicted::Forbidden(message)) => {
                    let delay = self.backoff.refused(&key, clock);
                    tracing::warn!(pod = %key, node = name, refusal = %message, ?delay, "eviction forbidden; retrying later");
                }
                Err(e) => errors.push(e),
            }
        }
        first_error(errors).map(|()| false)
    }

    /// Logs and reports, once per pod and node, that the drain waits for a pod annotated not to
    /// be disrupted.
    async fn report_blocked<P: CloudProvider>(
        &self,
        ctx: &Context<P>,
        node: &Node,
        pod: &PodRecord,
    ) {
        let key = format!("{}|{}", node_name(node), pod_key(pod));
        let first = self
            .reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key);
        if !first {
            return;
        }
        let message = format!(
            "waiting for pod {} to finish: it is annotated {}/{}",
            pod_key(pod),
            labels::DO_NOT_DISRUPT,
            labels::KARPENTER_DO_NOT_EVICT
        );
        tracing::info!(node = node_name(node), pod = %pod_key(pod), "drain blocked by a do-not-disrupt pod");
        if let Err(e) = events::publish_on_node(
            &ctx.client,
            node,
            EventType::Warning,
            BLOCKED_EVENT_REASON,
            &message,
        )
        .await
        {
            tracing::warn!(node = node_name(node), error = %e, "could not publish the drain-blocked event");
        }
    }
}

/// The instance of `claim` (the one its status records, else by the claim tag) or else of
/// `node` (by its providerID) among the cloud's live `instances`.
fn instance_of<'a>(
    instances: &'a [LaunchedNode],
    claim: Option<&NodeClaim>,
    node: Option<&Node>,
) -> Option<&'a LaunchedNode> {
    if let Some(claim) = claim {
        let recorded = claim.status.as_ref().and_then(|s| s.instance_id.as_deref());
        if let Some(found) = recorded
            .and_then(|id| instances.iter().find(|i| i.instance_id == id))
            .or_else(|| {
                instances
                    .iter()
                    .find(|i| i.claim_name.as_deref() == Some(claim.name()))
            })
        {
            return Some(found);
        }
    }
    let provider_id = node.and_then(node_provider_id)?;
    instances.iter().find(|i| i.provider_id == provider_id)
}

/// Deletes, at once (grace period 0: no kubelet is left to honour one), every pod a drain would
/// move that is still bound to `node`, whose instance is already gone: their controllers
/// recreate them now instead of after pod garbage collection notices the Node is gone (40–50 s
/// later). DaemonSet, mirror and finished pods (nothing recreates them elsewhere), pods
/// already being deleted, and pods gone (404) are left to pod garbage collection.
async fn delete_stranded_pods<P: CloudProvider>(
    ctx: &Context<P>,
    node: &Node,
    pods: &[Arc<PodRecord>],
) -> Result<(), LifecycleError> {
    let name = node_name(node);
    for pod in pods.iter().filter(|p| {
        p.node_name.as_deref() == Some(name)
            && p.metadata.deletion_timestamp.is_none()
            && !drain::is_skipped(p)
    }) {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let Some(pod_name) = pod.metadata.name.as_deref() else {
            continue;
        };
        let api: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(ctx.client.clone(), namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        match api.delete(pod_name, &params).await {
            Ok(_) => {
                tracing::info!(pod = %pod.key(), node = name, "pod of a node whose instance is gone deleted");
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Err(LifecycleError::api(
                    &format!("Pod {}", pod.key()),
                    "deleting a pod of a node whose instance is gone",
                )(e))
            }
        }
    }
    Ok(())
}

/// True when a live claim other than `claim`, not a warm-pool member, records `instance` as
/// its own (`status.instanceID`): a member handed to that claim, or any instance a stale list
/// still shows under an old tag. It is that claim's node: never drained, terminated or
/// deleted for `claim`, which is only released.
fn recorded_by_another(
    claims: &[Arc<NodeClaim>],
    claim: Option<&NodeClaim>,
    instance: &LaunchedNode,
) -> bool {
    let other = claims.iter().find(|c| {
        claim.is_none_or(|own| own.name() != c.name())
            && c.warm_pool().is_none()
            && c.metadata.deletion_timestamp.is_none()
            && c.status.as_ref().and_then(|s| s.instance_id.as_deref())
                == Some(instance.instance_id.as_str())
    });
    if let Some(other) = other {
        tracing::info!(instance = %instance.instance_id, recorded_by = other.name(),
            being_terminated = ?claim.map(|c| c.name()),
            "the instance is another live NodeClaim's: not draining or terminating it");
    }
    other.is_some()
}

/// Removes joiner's finalizer from `node` (resourceVersion-guarded JSON patch) and, when `delete`
/// and the Node is not being deleted yet, deletes it. False on a conflict (retry next pass).
async fn release_node<P: CloudProvider>(
    ctx: &Context<P>,
    node: &Node,
    delete: bool,
) -> Result<bool, LifecycleError> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let name = node_name(node);
    if has_finalizer(&node.metadata) {
        let patch = release_finalizer_patch(node)?;
        match api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_guarded_patch_conflict(&e) => return Ok(false),
            Err(e) if is_not_found(&e) => return Ok(true),
            Err(e) => {
                return Err(LifecycleError::api(
                    &node_ref(node),
                    "removing the termination finalizer",
                )(e))
            }
        }
    }
    if delete && node.metadata.deletion_timestamp.is_none() {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(LifecycleError::api(&node_ref(node), "deleting")(e)),
        }
    }
    Ok(true)
}

/// Removes joiner's finalizer from `claim` (merge patch of metadata.finalizers keeping other
/// owners' entries, guarded by resourceVersion) and counts it terminated.
async fn release_claim<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
) -> Result<(), LifecycleError> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let body = json!({"metadata": {
        "finalizers": finalizers_without_ours(&claim.metadata),
        "resourceVersion": claim.metadata.resource_version,
    }});
    match api
        .patch(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(_) => {}
        Err(e) if is_conflict(&e) || is_not_found(&e) => return Ok(()),
        Err(e) => {
            return Err(LifecycleError::api(
                &claim_ref(claim),
                "removing the termination finalizer",
            )(e))
        }
    }
    tracing::info!(claim = claim.name(), "NodeClaim terminated");
    ctx.metrics
        .claims_terminated
        .get_or_create(&ReasonLabels {
            provisioner: claim.spec.provisioner_name.clone(),
            reason: "deleted".to_string(),
        })
        .inc();
    Ok(())
}
