//! Reuse on scale-in (`spec.warmPool.reuseOnScaleIn`): a drained node goes back to its
//! Provisioner's warm pool, stopped, instead of being terminated, while the pool is short.
//!
//! Termination asks [`eligible`] once a claim's node is drained, just before it would
//! terminate the instance. A node is kept when its Provisioner reuses, the pool (members
//! `Warming` or `Warm`) is below its size, the node is on-demand, running and Ready, of a
//! type the pool takes, not drifted and not expired, and its AMI family can be held back.
//! [`return_to_pool`] then:
//! 1. tags the instance as a member recorded for the member claim `<claim>-reused`
//!    ([`CloudProvider::return_to_pool`]);
//! 2. writes that member claim (requirements: the node's type, zone, on-demand); the
//!    provisioning loop's launch finds the instance under the member's name and adopts it, so
//!    it is `Warming` until the pool's reconciler sees it stopped;
//! 3. stops it ([`CloudProvider::stop_warm`]).
//!
//! Termination releases the old claim and deletes its Node once the instance is stopped (the
//! kubelet is down, so the Node cannot come back), without terminating it. When the instance
//! is started for a claim, its kubelet (enabled by the first join) registers the Node again,
//! and registration applies the new claim's labels and taints as for any node. A crash between
//! the steps is resumed by the next termination pass (the instance, tagged for the member, is
//! found by the Node's provider ID); a tagged instance whose member claim was never written is
//! an orphan that garbage collection terminates, so nothing is lost either way.

use std::collections::BTreeMap;

use joiner_apis::drift::{self, annotate, claim_drift};
use joiner_apis::node_claim::CLAIMED;
use joiner_apis::{NodeClaim, ObjectLookup};
use joiner_core::{CapacityType, CloudProvider, LaunchedNode};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use super::{sizing, unsupported};
use crate::context::Context;
use crate::k8s::codes::is_conflict;
use crate::k8s::node_patch::is_ready;
use crate::lifecycle::{age, LifecycleError};

/// The member claim a reused node of `claim` is recorded under.
pub fn member_name(claim: &NodeClaim) -> String {
    format!("{}-reused", claim.name())
}

/// The annotation on a reused node's member claim naming the claim it came from: the member
/// stays `Warming` (not takeable) until that claim is released, so its instance is never
/// started for a new claim while the old claim's termination still acts on it.
pub const REUSED_FROM: &str = "joiner.sh/reused-from";

/// True when `instance` is tagged for `claim`'s reuse member.
pub fn is_reuse_of(claim: &NodeClaim, instance: &LaunchedNode) -> bool {
    instance.claim_name.as_deref() == Some(member_name(claim).as_str())
}

/// True when the instance was handed to a warm pool (or to another claim) rather than being
/// this claim's: it carries the warm-pool tag and another claim's name. Termination then only
/// waits for it to stop and releases, never terminates it.
pub fn handed_over(claim: Option<&NodeClaim>, instance: &LaunchedNode) -> bool {
    instance.warm_pool
        && claim.is_some_and(|c| {
            c.warm_pool().is_none()
                && instance
                    .claim_name
                    .as_deref()
                    .is_some_and(|n| n != c.name())
        })
}

/// Whether `claim`'s drained node on `instance` goes back to the pool (see the module doc).
pub fn eligible<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    node: Option<&Node>,
    instance: &LaunchedNode,
    now: Timestamp,
) -> bool {
    if claim.warm_pool().is_some() || instance.warm_pool || instance.state != "running" {
        return false;
    }
    let Some(node) = node.filter(|n| is_ready(n)) else {
        return false;
    };
    if instance.capacity_type != CapacityType::OnDemand {
        return false;
    }
    let Some(prov) = ctx.state.provisioner(&claim.spec.provisioner_name) else {
        return false;
    };
    let Some(pool) = prov.spec.warm_pool.as_ref().filter(|p| p.reuse_on_scale_in) else {
        return false;
    };
    if prov.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if !pool.instance_types.is_empty() && !pool.instance_types.contains(&instance.instance_type) {
        return false;
    }
    if !pool.zones.is_empty() && !pool.zones.contains(&instance.zone) {
        return false;
    }
    let node_template = prov
        .spec
        .provider_ref
        .as_ref()
        .and_then(|r| ctx.state.node_template(&r.name));
    if unsupported(&prov, node_template.as_deref()).is_some() {
        return false;
    }
    let no_labels = BTreeMap::new();
    let node_labels = node.metadata.labels.as_ref().unwrap_or(&no_labels);
    if claim_drift(claim, &prov, node_template.as_deref(), node_labels).is_some() {
        return false;
    }
    if let Some(ttl) = prov.spec.ttl_seconds_until_expired {
        let lived = age(claim.metadata.creation_timestamp.as_ref(), now);
        if lived.as_secs() >= u64::try_from(ttl).unwrap_or_default() {
            return false;
        }
    }
    let claims = ctx.state.claims();
    let in_pool = claims
        .iter()
        .filter(|c| {
            c.warm_pool() == Some(prov.name())
                && c.metadata.deletion_timestamp.is_none()
                && c.warm_phase() != Some(CLAIMED)
        })
        .count();
    ctx.state.claim_history.observe(&claims, now);
    let created = ctx.state.claim_history.created(prov.name());
    let desired = usize::try_from(sizing::desired(pool, &created, now)).unwrap_or_default();
    in_pool < desired
}

/// Steps 1–3 of the module doc for `claim`'s instance. Each is safe to repeat.
pub async fn return_to_pool<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    instance: &LaunchedNode,
) -> Result<(), LifecycleError> {
    let provisioner = claim.spec.provisioner_name.clone();
    let member = member_name(claim);
    let object = format!("NodeClaim {}", claim.name());
    ctx.cloud
        .return_to_pool(&instance.instance_id, &provisioner, &member)
        .await
        .map_err(|e| {
            LifecycleError::cloud(
                &object,
                format!(
                    "returning instance {} to the warm pool",
                    instance.instance_id
                ),
                e,
            )
        })?;
    write_member(ctx, claim, instance, &member).await?;
    stop(ctx, claim, instance).await?;
    tracing::info!(claim = claim.name(), %member, instance = %instance.instance_id,
        "drained node returned to the warm pool instead of terminated");
    ctx.metrics.warm_take(&provisioner, "reused");
    Ok(())
}

/// Step 3 alone (a resumed reuse whose instance still runs).
pub async fn stop<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    instance: &LaunchedNode,
) -> Result<(), LifecycleError> {
    ctx.cloud
        .stop_warm(&instance.instance_id)
        .await
        .map_err(|e| {
            LifecycleError::cloud(
                &format!("NodeClaim {}", claim.name()),
                format!(
                    "stopping instance {} for the warm pool",
                    instance.instance_id
                ),
                e,
            )
        })
}

/// The drift hash annotations `claim` carries, if any.
fn drift_hashes(claim: &NodeClaim) -> Option<BTreeMap<String, String>> {
    let kept: BTreeMap<String, String> = claim
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| {
            [
                drift::HASH_VERSION,
                drift::PROVISIONER_HASH,
                drift::NODE_TEMPLATE_HASH,
            ]
            .contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// Writes the member claim `member` for `claim`'s instance (409: written before).
async fn write_member<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    instance: &LaunchedNode,
    member: &str,
) -> Result<(), LifecycleError> {
    let provisioner = claim.spec.provisioner_name.as_str();
    // The launch-time hashes of the node (a reused node drifts as it would have) and where it
    // came from.
    let mut annotations = drift_hashes(claim).unwrap_or_default();
    annotations.insert(REUSED_FROM.to_string(), claim.name().to_string());
    let mut object = super::member_claim(
        member,
        provisioner,
        &instance.instance_type,
        &instance.zone,
        claim.spec.node_template_ref.clone(),
        Some(annotations),
    );
    if drift_hashes(claim).is_none() {
        if let Some(prov) = ctx.state.provisioner(provisioner) {
            let nt = prov
                .spec
                .provider_ref
                .as_ref()
                .and_then(|r| ctx.state.node_template(&r.name));
            annotate(&mut object, &prov, nt.as_deref());
        }
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api.create(&PostParams::default(), &object).await {
        Ok(stored) => {
            ctx.state.created.remember(stored);
            Ok(())
        }
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => Err(LifecycleError::api(
            &format!("NodeClaim {member}"),
            "writing the warm-pool member of a reused node",
        )(e)),
    }
}
