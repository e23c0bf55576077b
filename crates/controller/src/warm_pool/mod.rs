//! Warm pools: per Provisioner with `spec.warmPool`, instances launched ahead of demand,
//! initialized and stopped, and started for a new claim instead of a launch.
//!
//! Every member is a NodeClaim labelled `joiner.sh/warm-pool: <provisioner>`, so the pool is
//! what `kubectl get nodeclaims -l joiner.sh/warm-pool` shows and the launcher finds members in
//! its reflector store, never through DescribeInstances. A member's `status.warmPool.phase` is
//! always one of `Warming` (launched, initializing: its user data does not join the cluster),
//! `Warm` (stopped, ready) or `Claimed` (handed to the claim in `claimedBy`, starting); a member
//! being deleted is being terminated (or, once handed over, only released: its instance is the
//! claim's). Members are no in-flight capacity, never register as themselves, and are not
//! disrupted, expired or interrupted as nodes.
//!
//! This reconciler runs every `settings.warm_pool_interval` on the leader:
//! - **members**: a `Warming` member whose instance stopped (its warm-up powers it off) is
//!   `Warm`; one still running after `settings.warm_pool_warmup` is stopped. A `Claimed`
//!   member whose claim now records its instance is removed (hand-over done); one whose claim
//!   is gone goes back to `Warm` if its instance was not started for it, else is removed (the
//!   instance is the gone claim's orphan, collected by GC). A `Warm` member found running
//!   outside a take (started by hand: it has joined, so it can never join for a claim) or whose
//!   settings drifted is replaced. Members of a Provisioner without a pool are removed.
//! - **size**: members (`Warming` + `Warm`) are added up to the desired size (`size: auto`
//!   reads the claims of the last day from [`history::ClaimHistory`]), one type and zone
//!   at a time where the pool holds fewest ([`sizing::next_member`]), and the surplus removed,
//!   `Warming` ones and the newest first. Member claims are launched by the provisioning loop,
//!   as every claim is; their launch is the warm-pool variant (tagged, non-joining user data,
//!   on-demand).
//! - **status and metrics**: `status.warmPool` of the Provisioner (desired, warming, ready,
//!   claimed, idle cost, why the pool cannot be kept) and `joiner_warm_pool_*`.
//!
//! Taking a member for a claim is [`take`], on the launch path.

pub use joiner_apis::cluster::warm_pool::history;
pub use joiner_apis::cluster::warm_pool::sizing;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use joiner_apis::convert::node_claim::claim_requirements;
use joiner_apis::drift::{annotate, claim_drift};
use joiner_apis::node_claim::{CLAIMED, WARM, WARMING};
use joiner_apis::{
    condition, AmiFamily, NodeClaim, NodeClaimSpec, NodeTemplate, NodeTemplateRef, ObjectLookup,
    Provisioner, WarmPoolStatus,
};
use joiner_core::{
    labels, CloudProvider, InstanceType, LaunchedNode, PullProgress, Resources, WarmState,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::context::Context;
use crate::k8s::claims::{patch_claim_status, Guard};
use crate::k8s::codes::is_conflict;
use crate::k8s::names::random_suffix;
use crate::launcher::Catalogs;
use crate::metrics::ProvisionerLabels;
pub use crate::reconcile::ready_after;
use crate::reconcile::{
    age, delete_claim, first_error, LifecycleError, ENDING_STATES, VANISHED_AFTER,
};
use joiner_core::labels::TERMINATION_FINALIZER;

/// How long a Bottlerocket member runs before it is stopped when it pulls no images: its
/// warm-up user data cannot power it off (Bottlerocket runs no user scripts), and it boots in
/// about a minute. A member that pulls is stopped when its pull is over.
pub const BOTTLEROCKET_WARMUP: Duration = Duration::from_secs(180);

/// The most members one pass adds to a pool: a pool grows in steps, so a wrong size cannot
/// launch hundreds of instances before anyone looks.
pub const MAX_ADDED_PER_PASS: usize = 10;

/// The `claims_terminated` reasons of members.
pub mod reasons {
    /// Handed to a claim: the member claim goes, its instance stays with the claim.
    pub const HANDED_OVER: &str = "warm_pool_handed_over";
    /// More members than the desired size.
    pub const SURPLUS: &str = "warm_pool_surplus";
    /// The member's settings drifted from its Provisioner or NodeTemplate.
    pub const DRIFTED: &str = "warm_pool_drifted";
    /// Found running outside a take.
    pub const STARTED_OUTSIDE: &str = "warm_pool_started_outside_take";
    /// Found stopped after its hold boot, outside the pool (its next boot would join).
    pub const STOPPED_OUTSIDE: &str = "warm_pool_stopped_outside_take";
    /// Launched to wait in another state than its pool's.
    pub const STATE_CHANGED: &str = "warm_pool_state_changed";
    /// Hibernated for almost EC2's 60-day limit.
    pub const HIBERNATION_LIMIT: &str = "warm_pool_hibernation_limit";
    /// Its Provisioner has no warm pool any more (or is gone).
    pub const NO_POOL: &str = "warm_pool_removed";
    /// Its instance was terminated outside joiner (or vanished).
    pub const INSTANCE_GONE: &str = "warm_pool_instance_gone";
    /// A node returned to the pool by the reuse on scale-in of an earlier version.
    pub const LEGACY_REUSED: &str = "warm_pool_legacy_reused";
}

/// The annotation an earlier version's reuse on scale-in put on the member claim of a node it
/// returned to the pool.
const LEGACY_REUSED_FROM: &str = "joiner.sh/reused-from";

/// The state `prov`'s pool keeps its members in (`Stopped` without a pool).
fn pool_state(prov: &Provisioner) -> WarmState {
    prov.spec
        .warm_pool
        .as_ref()
        .map(joiner_apis::WarmPool::warm_state)
        .unwrap_or_default()
}

/// The member's `status.warmPool.claimedBy`.
fn claimed_by(member: &NodeClaim) -> Option<&str> {
    member
        .status
        .as_ref()
        .and_then(|s| s.warm_pool.as_ref())
        .and_then(|w| w.claimed_by.as_deref())
}

fn instance_id(claim: &NodeClaim) -> Option<&str> {
    claim.status.as_ref().and_then(|s| s.instance_id.as_deref())
}

pub use joiner_apis::cluster::warm_pool::unsupported;

/// Drives the warm pools until `stop` is cancelled: a [`reconcile`] pass every
/// `settings.warm_pool_interval`, on its own loop beside the lifecycle's.
pub async fn run<P: CloudProvider + 'static>(
    ctx: std::sync::Arc<Context<P>>,
    stop: tokio_util::sync::CancellationToken,
) {
    crate::reconcile::every!(
        ctx,
        stop,
        ctx.settings.warm_pool_interval,
        "warm_pool",
        reconcile(&ctx)
    )
    .await;
    tracing::info!("warm pool loop stopped");
}

/// One pass over every pool and member (see the module doc). Returns the first failure after
/// every member and pool had its turn.
pub async fn reconcile<P: CloudProvider>(ctx: &Context<P>) -> Result<(), LifecycleError> {
    let provisioners = ctx.state.provisioners.state();
    let claims = ctx.state.claims();
    let members: Vec<&Arc<NodeClaim>> = claims.iter().filter(|c| c.warm_pool().is_some()).collect();
    let pools: Vec<&Arc<Provisioner>> = provisioners
        .iter()
        .filter(|p| p.spec.warm_pool.is_some())
        .collect();
    let names: Vec<&str> = pools.iter().map(|p| p.name()).collect();
    ctx.metrics
        .retain_warm_pools(&names, &[WARMING, WARM, CLAIMED]);
    if members.is_empty() && pools.is_empty() {
        return Ok(());
    }
    let instances = ctx.cloud.list().await.map_err(|e| {
        LifecycleError::cloud(
            &format!("cluster {:?}", ctx.settings.cluster_name),
            "listing instances for the warm pools".into(),
            e,
        )
    })?;
    let by_id: HashMap<&str, &LaunchedNode> = instances
        .iter()
        .map(|i| (i.instance_id.as_str(), i))
        .collect();
    let now = Timestamp::now();
    ctx.state.claim_history.observe(&claims, now);
    let mut catalogs = Catalogs::default();
    let mut errors = Vec::new();
    let mut gone: Vec<String> = Vec::new();
    for member in &members {
        ctx.metrics.passes.progress("warm_pool");
        match step_member(ctx, member, &claims, &by_id, &mut catalogs, now).await {
            Ok(true) => gone.push(member.name().to_string()),
            Ok(false) => {}
            Err(e) => errors.push(e),
        }
    }
    for prov in &pools {
        let mine: Vec<&Arc<NodeClaim>> = members
            .iter()
            .copied()
            .filter(|m| m.warm_pool() == Some(prov.name()) && !gone.iter().any(|g| g == m.name()))
            .collect();
        if let Err(e) = size_pool(ctx, prov, &mine, &mut catalogs, now).await {
            errors.push(e);
        }
    }
    first_error(errors)
}

/// Deletes member `member` for `reason`.
async fn remove<P: CloudProvider>(
    ctx: &Context<P>,
    member: &NodeClaim,
    reason: &str,
) -> Result<bool, LifecycleError> {
    tracing::info!(
        member = member.name(),
        provisioner = member.spec.provisioner_name,
        reason,
        "removing a warm-pool member"
    );
    delete_claim(ctx, member, reason, "removing a warm-pool member").await?;
    Ok(true)
}

/// Patches the member's `status.warmPool`.
async fn set_phase<P: CloudProvider>(
    ctx: &Context<P>,
    member: &NodeClaim,
    phase: &str,
    message: Option<&str>,
) -> Result<(), LifecycleError> {
    let body = json!({"warmPool": {"phase": phase, "claimedBy": null, "message": message}});
    match patch_claim_status(&ctx.client, member, body, Guard::ResourceVersion).await {
        Ok(_) => Ok(()),
        // Changed meanwhile (a take bound it): the next pass sees the new state.
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => Err(LifecycleError::api(
            &format!("NodeClaim {}", member.name()),
            "setting the warm-pool phase",
        )(e)),
    }
}

/// One step for one member; `true` when it was removed.
async fn step_member<P: CloudProvider>(
    ctx: &Context<P>,
    member: &NodeClaim,
    claims: &[Arc<NodeClaim>],
    by_id: &HashMap<&str, &LaunchedNode>,
    catalogs: &mut Catalogs,
    now: Timestamp,
) -> Result<bool, LifecycleError> {
    if member.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let pool_name = member.warm_pool().unwrap_or_default();
    let prov = ctx.state.provisioner(pool_name);
    let phase = member.warm_phase().unwrap_or(WARMING);
    let instance = instance_id(member).and_then(|id| by_id.get(id).copied());

    if phase == CLAIMED {
        let Some(taker_name) = claimed_by(member) else {
            return set_phase(ctx, member, WARM, None).await.map(|_| false);
        };
        let taker = claims
            .iter()
            .find(|c| c.name() == taker_name && c.metadata.deletion_timestamp.is_none());
        return match taker {
            Some(t) if instance_id(t).is_some() && instance_id(t) == instance_id(member) => {
                remove(ctx, member, reasons::HANDED_OVER).await
            }
            // The taker launched another instance: the take fell back and putting the member
            // back did not reach the API. Back to the pool (a member found running outside
            // a take is replaced by the `Warm` rules).
            Some(t) if instance_id(t).is_some() => {
                set_phase(ctx, member, WARM, None).await.map(|_| false)
            }
            // The launcher is still on it (or resumes it).
            Some(_) => Ok(false),
            None => match instance {
                // Not started for the gone claim: back to the pool.
                Some(i) if i.claim_name.as_deref() == Some(member.name()) => {
                    set_phase(ctx, member, WARM, None).await.map(|_| false)
                }
                // Started for it: the instance is the gone claim's (GC collects it).
                _ => remove(ctx, member, reasons::HANDED_OVER).await,
            },
        };
    }

    let pooled = prov
        .as_ref()
        .filter(|p| p.spec.warm_pool.is_some() && p.metadata.deletion_timestamp.is_none());
    let Some(prov) = pooled else {
        return remove(ctx, member, reasons::NO_POOL).await;
    };
    if !member.is_launched() {
        return Ok(false);
    }
    // Left by reuse on scale-in (no longer built): an instance that served pods, tagged into
    // the pool after it ran. It is never handed out again.
    if member
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(LEGACY_REUSED_FROM))
    {
        return remove(ctx, member, reasons::LEGACY_REUSED).await;
    }
    // Terminated behind joiner's back (or gone from the listing for longer than its eventual
    // consistency explains): the member can never be taken, so it leaves the pool now —
    // out of `Warm` and `ready`, and replaced by this pass's sizing — not at the next sweep.
    let vanished = match instance {
        Some(i) => ENDING_STATES.contains(&i.state.as_str()),
        None => age(crate::reconcile::launched_at(member), now) >= VANISHED_AFTER,
    };
    if vanished {
        tracing::warn!(member = member.name(), instance = ?instance_id(member),
            "warm-pool member's instance is gone; replacing it");
        return remove(ctx, member, reasons::INSTANCE_GONE).await;
    }
    let Some(instance) = instance else {
        // Not listed yet (the listing is eventually consistent).
        return Ok(false);
    };

    // Settings changed since launch: the member would start with the old ones.
    let node_template = prov
        .spec
        .provider_ref
        .as_ref()
        .and_then(|r| ctx.state.node_template(&r.name));
    let catalog = catalogs
        .get(ctx, prov.name())
        .await
        .map(<[InstanceType]>::to_vec)
        .unwrap_or_default();
    let type_labels = catalog
        .iter()
        .find(|t| t.name == instance.instance_type)
        .map(|t| t.labels.clone())
        .unwrap_or_default();
    if let Some(why) = claim_drift(member, prov, node_template.as_deref(), &type_labels) {
        tracing::info!(member = member.name(), %why, "warm-pool member drifted");
        return remove(ctx, member, reasons::DRIFTED).await;
    }

    let state = member.warm_state();
    let wanted = pool_state(prov);
    // Launched for another state (its user data and launch settings are that state's).
    if state != wanted {
        tracing::info!(
            member = member.name(),
            state = state.as_str(),
            wanted = wanted.as_str(),
            "warm-pool member launched for another state; replacing it"
        );
        return remove(ctx, member, reasons::STATE_CHANGED).await;
    }
    let status = member.status.as_ref().and_then(|s| s.warm_pool.as_ref());
    let held_at = status.and_then(|w| w.held_at.as_ref()).map(|t| t.0);
    let hibernated_at = status.and_then(|w| w.hibernated_at.as_ref()).map(|t| t.0);
    let running = matches!(instance.state.as_str(), "pending" | "running");
    let stopped = instance.state == "stopped";

    if phase == WARM {
        return match state {
            WarmState::Running if !running => {
                // Its hold boot is spent: the next boot would join outside a take.
                tracing::warn!(member = member.name(), instance = %instance.instance_id,
                    "running warm-pool member stopped outside a take; replacing it");
                remove(ctx, member, reasons::STOPPED_OUTSIDE).await
            }
            WarmState::Running => Ok(false),
            _ if running => {
                tracing::warn!(member = member.name(), instance = %instance.instance_id,
                    "warm-pool member running outside a take (started by hand?); replacing it");
                remove(ctx, member, reasons::STARTED_OUTSIDE).await
            }
            WarmState::Hibernated
                if hibernated_at.is_some_and(|t| age_of(t, now) >= HIBERNATION_LIMIT) =>
            {
                remove(ctx, member, reasons::HIBERNATION_LIMIT).await
            }
            _ => Ok(false),
        };
    }

    // Warming.
    if running && held_at.is_none() {
        if let Some(images) = pulled_by_controller(prov, node_template.as_deref()) {
            return pull_then_stop(ctx, member, instance, images, now).await;
        }
        return stop_after_warm_up(ctx, member, instance, node_template.as_deref(), now).await;
    }
    match state {
        WarmState::Stopped if stopped => set_phase(ctx, member, WARM, None).await.map(|_| false),
        WarmState::Stopped => Ok(false),
        // The warm-up is over: start the hold boot, recorded first so a crash repeats it.
        _ if stopped && held_at.is_none() => {
            if !record(ctx, member, json!({"heldAt": now.to_string()})).await? {
                return Ok(false);
            }
            act(ctx, member, instance, Step::Hold).await
        }
        WarmState::Hibernated if stopped && hibernated_at.is_some() => {
            set_phase(ctx, member, WARM, None).await.map(|_| false)
        }
        _ if stopped => {
            // Recorded but stopped: either the start never happened (a crash: start it now),
            // or the hold boot happened and something stopped the member (its next boot
            // would join: replace it). EC2 sets the launch time on every start.
            let started_since = match (instance.launch_time, held_at) {
                (Some(launched), Some(held)) => {
                    Timestamp::try_from(launched).is_ok_and(|l| l >= held)
                }
                _ => true,
            };
            if started_since {
                tracing::warn!(member = member.name(), instance = %instance.instance_id,
                    "warm-pool member stopped after its hold boot, outside the pool; replacing it");
                remove(ctx, member, reasons::STOPPED_OUTSIDE).await
            } else {
                act(ctx, member, instance, Step::Hold).await
            }
        }
        WarmState::Running if running => set_phase(ctx, member, WARM, None).await.map(|_| false),
        WarmState::Hibernated if running => {
            let settled = held_at.is_some_and(|t| age_of(t, now) >= HIBERNATE_AFTER);
            if hibernated_at.is_none() {
                if !settled {
                    return Ok(false);
                }
                if !record(ctx, member, json!({"hibernatedAt": now.to_string()})).await? {
                    return Ok(false);
                }
            }
            act(ctx, member, instance, Step::Hibernate).await
        }
        // pending, stopping: the next pass sees where it went.
        _ => Ok(false),
    }
}

/// How long after its hold boot starts a `Hibernated` member is hibernated: the hibernation
/// agent sets up its swap file at boot, and EC2 asks for a few minutes before a hibernation.
pub const HIBERNATE_AFTER: Duration = Duration::from_secs(300);

/// EC2 hibernates an instance for at most 60 days; a member is replaced a little before.
pub const HIBERNATION_LIMIT: Duration = Duration::from_secs(55 * 24 * 3600);

/// How long ago `t` was.
fn age_of(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(t)).unwrap_or_default()
}

/// Merge-patches fields of the member's `status.warmPool` guarded by its resourceVersion;
/// `false` when it changed meanwhile (the next pass sees the new state).
async fn record<P: CloudProvider>(
    ctx: &Context<P>,
    member: &NodeClaim,
    fields: serde_json::Value,
) -> Result<bool, LifecycleError> {
    match patch_claim_status(
        &ctx.client,
        member,
        json!({"warmPool": fields}),
        Guard::ResourceVersion,
    )
    .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(LifecycleError::api(
            &format!("NodeClaim {}", member.name()),
            "recording a warm-pool member's step",
        )(e)),
    }
}

/// Which call a member's step makes on its instance.
#[derive(Clone, Copy)]
enum Step {
    /// The warm-up ran past its deadline: stop it.
    Stop,
    /// The warm-up is over: start the hold boot.
    Hold,
    /// The hold boot settled: hibernate it.
    Hibernate,
}

impl Step {
    /// What the step does to instance `id`, for the log, the member's status and the error.
    fn doing(self, id: &str) -> String {
        match self {
            Step::Stop => format!("stopping warm-pool member {id}"),
            Step::Hold => format!("starting warm-pool member {id} for its hold boot"),
            Step::Hibernate => format!("hibernating warm-pool member {id}"),
        }
    }
}

/// Makes `step`'s call for `member`'s instance; a failure is written to the member's status
/// (phase `Warming`, with the error) and returned.
async fn act<P: CloudProvider>(
    ctx: &Context<P>,
    member: &NodeClaim,
    instance: &LaunchedNode,
    step: Step,
) -> Result<bool, LifecycleError> {
    let id = &instance.instance_id;
    tracing::info!(member = member.name(), "{}", step.doing(id));
    let result = match step {
        Step::Stop => ctx.cloud.stop_warm(id).await,
        Step::Hold => ctx.cloud.hold_warm(id).await,
        Step::Hibernate => ctx.cloud.hibernate_warm(id).await,
    };
    match result {
        Ok(()) => Ok(false),
        Err(e) => {
            let message = format!("{} failed: {e}", step.doing(id));
            set_phase(ctx, member, WARMING, Some(&message)).await?;
            Err(LifecycleError::cloud(
                &format!("NodeClaim {}", member.name()),
                step.doing(id),
                e,
            ))
        }
    }
}

/// A member still running its warm-up: stopped once past its deadline (its user data powers
/// it off itself when it gets there first).
async fn stop_after_warm_up<P: CloudProvider>(
    ctx: &Context<P>,
    member: &NodeClaim,
    instance: &LaunchedNode,
    node_template: Option<&NodeTemplate>,
    now: Timestamp,
) -> Result<bool, LifecycleError> {
    let launched = launched_at(member);
    let deadline = match node_template.map(NodeTemplate::ami_family) {
        Some(AmiFamily::Bottlerocket) => ctx.settings.warm_pool_warmup.min(BOTTLEROCKET_WARMUP),
        _ => ctx.settings.warm_pool_warmup,
    };
    if age(launched, now) < deadline {
        return Ok(false);
    }
    tracing::info!(member = member.name(), instance = %instance.instance_id,
        "warm-pool member still running after its warm-up deadline; stopping it");
    act(ctx, member, instance, Step::Stop).await
}

/// When the member's instance was launched (its `Launched` condition): its warm-up deadline
/// counts from there.
fn launched_at(
    member: &NodeClaim,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    member
        .status
        .as_ref()
        .and_then(|s| condition::find(&s.conditions, condition::LAUNCHED))
        .map(|c| &c.last_transition_time)
}

/// The images the controller pulls into `prov`'s warming members itself, when it does: the
/// pool's `prePullImages` on Bottlerocket, whose user data runs no scripts (AL2 and AL2023
/// members pull from their first-boot script).
fn pulled_by_controller<'a>(
    prov: &'a Provisioner,
    node_template: Option<&NodeTemplate>,
) -> Option<&'a [String]> {
    let images = &prov.spec.warm_pool.as_ref()?.pre_pull_images;
    let bottlerocket = node_template.is_some_and(|nt| nt.ami_family() == AmiFamily::Bottlerocket);
    (bottlerocket && !images.is_empty()).then_some(images.as_slice())
}

/// A warming Bottlerocket member whose pool pre-pulls images: the pull is sent once its
/// instance runs (again each pass until its agent takes it), asked after until it is over,
/// its result recorded, and the member then stopped. Past the warm-up deadline the member is
/// stopped whatever the pull's state, with the reason recorded: its pods pull what is missing.
async fn pull_then_stop<P: CloudProvider>(
    ctx: &Context<P>,
    member: &NodeClaim,
    instance: &LaunchedNode,
    images: &[String],
    now: Timestamp,
) -> Result<bool, LifecycleError> {
    let status = member.status.as_ref().and_then(|s| s.warm_pool.as_ref());
    if status.and_then(|w| w.pull_result.as_ref()).is_some() {
        // Recorded, then a crash or a failed stop: stop it now.
        return act(ctx, member, instance, Step::Stop).await;
    }
    let launched = launched_at(member);
    let deadline = ctx.settings.warm_pool_warmup;
    let left = deadline.saturating_sub(age(launched, now));
    let over = left.is_zero();
    let id = instance.instance_id.as_str();
    let result = match status.and_then(|w| w.pull.as_deref()) {
        None if instance.state != "running" && !over => return Ok(false),
        None if instance.state != "running" => {
            "not pulled: the member was not running by the warm-up deadline".to_string()
        }
        None => match ctx.cloud.pull_warm(id, images, left).await {
            Ok(pull) => {
                record(ctx, member, json!({"pull": pull})).await?;
                return Ok(false);
            }
            Err(e) if over => format!("not pulled: {e}"),
            Err(e) => {
                tracing::debug!(member = member.name(), instance = id, error = %e,
                    "the pre-pull was not taken yet (the member's agent may still be starting); retrying");
                return Ok(false);
            }
        },
        Some(pull) => match ctx.cloud.pull_progress(id, pull).await {
            Ok(PullProgress::Succeeded) => PULL_SUCCEEDED.to_string(),
            Ok(PullProgress::Failed(why)) => why,
            Ok(PullProgress::Running) if over => format!(
                "not finished within the warm-up deadline ({} s); stopped",
                deadline.as_secs()
            ),
            Ok(PullProgress::Running) => return Ok(false),
            Err(e) if over => format!("not pulled: {e}"),
            Err(e) => {
                tracing::warn!(member = member.name(), instance = id, pull, error = %e,
                    "asking after a warm-pool member's pre-pull failed; asking again next pass");
                return Ok(false);
            }
        },
    };
    if result != PULL_SUCCEEDED {
        tracing::warn!(member = member.name(), instance = id, %result,
            "a warm-pool member's images were not all pulled; its pods pull them when they start");
    }
    if !record(ctx, member, json!({"pullResult": result})).await? {
        return Ok(false);
    }
    act(ctx, member, instance, Step::Stop).await
}

/// A member's `status.warmPool.pullResult` when every image was pulled.
pub const PULL_SUCCEEDED: &str = "Succeeded";

/// The largest requests of any one pod on the Provisioner's nodes, or `None` when it runs none.
fn largest_pod<P: CloudProvider>(ctx: &Context<P>, provisioner: &str) -> Option<Resources> {
    let nodes: Vec<String> = ctx
        .state
        .nodes
        .state()
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::PROVISIONER_NAME))
                .map(String::as_str)
                == Some(provisioner)
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let mut largest: Option<Resources> = None;
    for pod in ctx.state.pods.state() {
        if pod.daemon || pod.finished {
            continue;
        }
        let on_ours = pod.node_name.as_ref().is_some_and(|n| nodes.contains(n));
        let Ok(core) = &pod.core else { continue };
        if on_ours {
            largest
                .get_or_insert_with(Resources::default)
                .max_with(&core.requests);
        }
    }
    largest
}

/// Keeps `prov`'s pool at its size and writes its status and metrics.
async fn size_pool<P: CloudProvider>(
    ctx: &Context<P>,
    prov: &Provisioner,
    members: &[&Arc<NodeClaim>],
    catalogs: &mut Catalogs,
    now: Timestamp,
) -> Result<(), LifecycleError> {
    let Some(pool) = prov.spec.warm_pool.as_ref() else {
        return Ok(());
    };
    let live: Vec<&Arc<NodeClaim>> = members
        .iter()
        .copied()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect();
    let in_pool: Vec<&Arc<NodeClaim>> = live
        .iter()
        .copied()
        .filter(|m| m.warm_phase() != Some(CLAIMED))
        .collect();
    let created = ctx.state.claim_history.created(prov.name());
    let node_template = prov
        .spec
        .provider_ref
        .as_ref()
        .and_then(|r| ctx.state.node_template(&r.name));
    let mut message = unsupported(prov, node_template.as_deref()).or_else(|| {
        prov.not_planned()
            .map(|why| format!("Provisioner {}: {why}", prov.name()))
    });
    let blocked = message.is_some();
    let deleting = prov.metadata.deletion_timestamp.is_some();
    let desired = if deleting {
        0
    } else {
        sizing::desired(pool, &created, now)
    };
    let want = usize::try_from(desired).unwrap_or_default();
    let mut errors = Vec::new();

    if in_pool.len() > want {
        let mut surplus = in_pool.clone();
        // Warming first, then the newest.
        surplus.sort_by(|a, b| {
            let rank = |m: &NodeClaim| u8::from(m.warm_phase() == Some(WARM));
            rank(a).cmp(&rank(b)).then_with(|| {
                b.metadata
                    .creation_timestamp
                    .cmp(&a.metadata.creation_timestamp)
            })
        });
        for m in surplus.into_iter().take(in_pool.len() - want) {
            if let Err(e) = remove(ctx, m, reasons::SURPLUS).await {
                errors.push(e);
            }
        }
    } else if in_pool.len() < want && !blocked {
        match catalogs.get(ctx, prov.name()).await {
            Err(e) => message = Some(e.to_string()),
            Ok(catalog) => {
                // What counts against the Provisioner's limits now: its nodes, in-flight
                // claims and members (the snapshot's Provisioner holds the members).
                let mut used = {
                    let (snap, _) = ctx.state.snapshot_with_catalog(catalog);
                    snap.provisioners
                        .iter()
                        .find(|p| p.name == prov.name())
                        .map(|p| joiner_core::scheduling::pass::limits_used(&snap, p))
                };
                // Types that cannot wait in the pool's state (hibernation) are left out; the
                // status names those the spec asked for.
                let state = pool.warm_state();
                let (catalog, refused) =
                    sizing::usable_types(pool, catalog, |t| ctx.cloud.warm_type_refusal(t, state));
                if refused.is_some() {
                    message = refused;
                }
                match prov.to_core() {
                    Err(e) => message = Some(e.to_string()),
                    Ok(core) => {
                        let kubelet = ctx.state.kubelet_settings(prov.name());
                        let largest = largest_pod(ctx, prov.name());
                        let types = sizing::pool_types(
                            pool,
                            &core.requirements,
                            &catalog,
                            &kubelet,
                            largest.as_ref(),
                        );
                        let mut held: Vec<(String, String)> =
                            in_pool.iter().filter_map(|m| member_offering(m)).collect();
                        for _ in 0..(want - in_pool.len()).min(MAX_ADDED_PER_PASS) {
                            let Some((t, zone)) =
                                sizing::next_member(&types, &pool.zones, &catalog, &held)
                            else {
                                if types.is_empty() && state == WarmState::Hibernated {
                                    let none = "spec.warmPool.state: Hibernated: no instance type the pool may use can hibernate (supported families, under 150 GiB of memory, not metal)";
                                    message = Some(match message.take() {
                                        Some(named) => format!("{named}; {none}"),
                                        None => none.to_string(),
                                    });
                                    break;
                                }
                                message = Some(format!(
                                    "spec.warmPool: no instance type of [{}] has on-demand capacity available{}",
                                    types.join(", "),
                                    if pool.zones.is_empty() { String::new() } else { format!(" in [{}]", pool.zones.join(", ")) }
                                ));
                                break;
                            };
                            let mut capacity = catalog
                                .iter()
                                .find(|c| c.name == t)
                                .map(|c| kubelet.capacity(c))
                                .unwrap_or_default();
                            capacity.set(joiner_core::NODES_LIMIT, 1);
                            if let Some(over) = used
                                .as_ref()
                                .and_then(|u| sizing::over_limits(&core.limits, u, &capacity))
                            {
                                message = Some(format!(
                                    "spec.limits: another warm-pool member ({t}) would pass the Provisioner's limit on {over}"
                                ));
                                break;
                            }
                            match add_member(ctx, prov, node_template.as_deref(), &t, &zone).await {
                                Ok(()) => {
                                    if let Some(u) = used.as_mut() {
                                        u.add(&capacity);
                                    }
                                    held.push((t, zone))
                                }
                                Err(e) => {
                                    errors.push(e);
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    let count = |phase: &str| {
        live.iter()
            .filter(|m| m.warm_phase() == Some(phase))
            .count()
    };
    let (warming, ready, claimed) = (count(WARMING), count(WARM), count(CLAIMED));
    let root_gib = node_template
        .as_deref()
        .and_then(|nt| nt.ephemeral_volume_bytes())
        .map_or(sizing::DEFAULT_ROOT_GIB, |b| {
            b as f64 / f64::from(1u32 << 30)
        });
    let warming_prices: Vec<f64> = live
        .iter()
        .filter(|m| m.warm_phase() == Some(WARMING))
        .filter_map(|m| m.status.as_ref().and_then(|s| s.price_per_hour))
        .collect();
    let catalog = catalogs
        .get(ctx, prov.name())
        .await
        .map(<[InstanceType]>::to_vec)
        .unwrap_or_default();
    let ready_costs: Vec<f64> = live
        .iter()
        .filter(|m| m.warm_phase() == Some(WARM))
        .map(|m| {
            let status = m.status.as_ref();
            let price = status.and_then(|s| s.price_per_hour).unwrap_or_default();
            let memory = status
                .and_then(|s| s.instance_type.as_deref())
                .and_then(|t| catalog.iter().find(|c| c.name == t))
                .map_or(0.0, sizing::memory_gib);
            sizing::ready_cost(m.warm_state(), price, root_gib, memory)
        })
        .collect();
    let idle = sizing::idle_cost(&ready_costs, &warming_prices);
    ctx.metrics.warm_pool(
        prov.name(),
        &[(WARMING, warming), (WARM, ready), (CLAIMED, claimed)],
        idle,
    );
    let status = WarmPoolStatus {
        desired,
        warming: i32::try_from(warming).unwrap_or(i32::MAX),
        ready: i32::try_from(ready).unwrap_or(i32::MAX),
        claimed: i32::try_from(claimed).unwrap_or(i32::MAX),
        idle_cost_per_hour: Some((idle * 1e6).round() / 1e6),
        message,
    };
    if let Err(e) = write_status(ctx, prov, status).await {
        errors.push(e);
    }
    first_error(errors)
}

/// The member's (type, zone), from its requirements before launch and its status after.
fn member_offering(member: &NodeClaim) -> Option<(String, String)> {
    if let Some(s) = member.status.as_ref() {
        if let (Some(t), Some(z)) = (&s.instance_type, &s.zone) {
            return Some((t.clone(), z.clone()));
        }
    }
    let reqs = claim_requirements(member).ok()?;
    let single = |key: &str| {
        reqs.get(key)
            .and_then(|r| r.single_value())
            .map(str::to_string)
    };
    Some((single(labels::INSTANCE_TYPE)?, single(labels::ZONE)?))
}

/// A member claim `name` of `provisioner`'s pool for one offering (`instance_type` in `zone`,
/// on-demand), with the termination finalizer: what the pool adds.
pub fn member_claim(
    name: &str,
    provisioner: &str,
    instance_type: &str,
    zone: &str,
    node_template_ref: Option<NodeTemplateRef>,
    annotations: Option<BTreeMap<String, String>>,
) -> NodeClaim {
    let requirements = sizing::member_requirements(instance_type, zone)
        .into_iter()
        .map(|(key, value)| joiner_apis::NodeSelectorRequirement {
            key: key.to_string(),
            operator: "In".to_string(),
            values: vec![value],
        })
        .collect();
    NodeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([
                (labels::WARM_POOL.to_string(), provisioner.to_string()),
                (
                    labels::PROVISIONER_NAME.to_string(),
                    provisioner.to_string(),
                ),
            ])),
            annotations,
            finalizers: Some(vec![TERMINATION_FINALIZER.to_string()]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            provisioner_name: provisioner.to_string(),
            requirements,
            node_template_ref,
            ..NodeClaimSpec::default()
        },
        status: None,
    }
}

/// Writes a member claim of type `instance_type` in `zone` for `prov`; the provisioning loop
/// launches it.
async fn add_member<P: CloudProvider>(
    ctx: &Context<P>,
    prov: &Provisioner,
    node_template: Option<&NodeTemplate>,
    instance_type: &str,
    zone: &str,
) -> Result<(), LifecycleError> {
    let name = format!("{}-warm-{}", prov.name(), random_suffix());
    let node_template_ref = prov.spec.provider_ref.as_ref().map(|r| NodeTemplateRef {
        name: r.name.clone(),
    });
    let state = pool_state(prov);
    let mut claim = member_claim(
        &name,
        prov.name(),
        instance_type,
        zone,
        node_template_ref,
        Some(BTreeMap::from([(
            labels::WARM_STATE.to_string(),
            state.as_str().to_string(),
        )])),
    );
    annotate(&mut claim, prov, node_template);
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let stored = api
        .create(&PostParams::default(), &claim)
        .await
        .map_err(LifecycleError::api(
            &format!("NodeClaim {name}"),
            "creating a warm-pool member",
        ))?;
    tracing::info!(member = %name, provisioner = prov.name(), instance_type, zone, "warm-pool member added");
    ctx.state.created.remember(stored);
    ctx.metrics
        .claims_created
        .get_or_create(&ProvisionerLabels {
            provisioner: prov.name().to_string(),
        })
        .inc();
    Ok(())
}

/// Merge-patches the Provisioner's `status.warmPool` when it differs.
async fn write_status<P: CloudProvider>(
    ctx: &Context<P>,
    prov: &Provisioner,
    want: WarmPoolStatus,
) -> Result<(), LifecycleError> {
    if prov.status.as_ref().and_then(|s| s.warm_pool.as_ref()) == Some(&want) {
        return Ok(());
    }
    let api: Api<Provisioner> = Api::all(ctx.client.clone());
    let body = json!({"status": {"warmPool": want}});
    api.patch_status(prov.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(LifecycleError::api(
            &format!("Provisioner {}", prov.name()),
            "writing status.warmPool",
        ))?;
    Ok(())
}
