//! Taking a warm member for a claim: the launcher's first try, before CreateFleet.
//!
//! A member is taken when its Provisioner is the claim's, it is `Warm` (stopped, ready), the
//! claim's requirements allow its type, zone and on-demand capacity, and its price is at most
//! `maxPricePremium` above the cheapest candidate of the claim. Among those the cheapest is
//! taken (ties: the oldest).
//!
//! The steps, each safe to repeat after a crash:
//! 1. **bind**: the member's status becomes `Claimed` by the claim, written with the member's
//!    resourceVersion, so two launches never take one member (the loser tries the next one);
//! 2. **start**: the cloud tags the instance with the claim, then starts it
//!    ([`CloudProvider::start_warm`]). From the tag on, the launcher's look-up by claim finds the
//!    instance: a crash before the start is resumed by starting it for the same claim, a crash
//!    after it by recording it, so nothing is started twice or lost;
//! 3. the launcher records the instance on the claim, and the pool's reconciler removes the
//!    member claim once the claim shows its instance (the member's instance is the claim's).
//!
//! A failed start (capacity on StartInstances happens) puts the member back to `Warm` with the
//! error in its status and the launch falls back to CreateFleet.

use std::sync::Arc;

use joiner_apis::convert::node_claim::claim_requirements;
use joiner_apis::node_claim::{CLAIMED, WARM};
use joiner_apis::{NodeClaim, ObjectLookup};
use joiner_core::{
    CloudError, CloudErrorKind, CloudProvider, InstanceType, LaunchRequest, LaunchedNode,
};
use serde_json::json;

use crate::context::Context;
use crate::k8s::claims::{delete_claim, patch_claim_status, Guard};
use crate::k8s::codes::is_conflict;
use joiner_apis::cluster::warm_pool::sizing;

pub use joiner_apis::cluster::warm_pool::{serves, Candidate, TAKEN_REASON};

/// How many members a take tries when others win the bind race.
const BIND_ATTEMPTS: usize = 3;

/// A member started for a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Taken {
    /// The instance, now the claim's.
    pub node: LaunchedNode,
    /// Its on-demand price, USD/h, when the catalog knows it.
    pub price: Option<f64>,
    /// The member claim it came from.
    pub member: String,
}

/// The outcome label of `joiner_warm_pool_takes`.
fn count<P: CloudProvider>(ctx: &Context<P>, provisioner: &str, outcome: &str) {
    ctx.metrics.warm_take(provisioner, outcome);
}

/// The price of `member` from `catalog` (its type's on-demand offering in its zone), else the
/// price it recorded at launch.
fn member_price(member: &NodeClaim, catalog: &[InstanceType]) -> Option<f64> {
    let status = member.status.as_ref()?;
    let zone = status.zone.clone().unwrap_or_default();
    status
        .instance_type
        .as_deref()
        .and_then(|t| catalog.iter().find(|c| c.name == t))
        .and_then(|t| sizing::on_demand_price(t, std::slice::from_ref(&zone)))
        .or(status.price_per_hour)
}

/// Starts a warm member for `claim` when one fits (see the module doc), or resumes a take a
/// crash interrupted; `Ok(None)` sends the launch to CreateFleet. A bind or start that fails
/// is logged, counted as a fallback, and answered with `Ok(None)`. `Err` is a take whose
/// member was started for the claim but not released from the pool
/// ([`CloudErrorKind::TakeUnfinished`]): the instance is the claim's, so the launch must not
/// fall back to a second one; the claim's next launch finishes the take.
pub async fn take<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    request: &LaunchRequest,
    catalog: &[InstanceType],
) -> Result<Option<Taken>, String> {
    if claim.warm_pool().is_some() {
        return Ok(None);
    }
    let provisioner = claim.spec.provisioner_name.as_str();
    let Some(prov) = ctx.state.provisioner(provisioner) else {
        return Ok(None);
    };
    let Some(pool) = prov.spec.warm_pool.as_ref() else {
        return Ok(None);
    };
    let members: Vec<Arc<NodeClaim>> = ctx
        .state
        .claims()
        .into_iter()
        .filter(|m| m.warm_pool() == Some(provisioner) && m.metadata.deletion_timestamp.is_none())
        .collect();

    // A take of this claim a crash interrupted: the member is bound to it already.
    if let Some(bound) = members.iter().find(|m| {
        m.warm_phase() == Some(CLAIMED)
            && m.status
                .as_ref()
                .and_then(|s| s.warm_pool.as_ref())
                .and_then(|w| w.claimed_by.as_deref())
                == Some(claim.name())
    }) {
        tracing::info!(
            claim = claim.name(),
            member = bound.name(),
            "resuming an interrupted warm-pool take"
        );
        return start(ctx, claim, bound, catalog).await;
    }

    let reqs = match claim_requirements(claim) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(claim = claim.name(), error = %e.reason, "claim requirements unreadable; not taking a warm member");
            return Ok(None);
        }
    };
    let cheapest_new = request.candidates.first().map(|(_, p)| *p);
    let premium = sizing::premium(pool);
    let mut eligible: Vec<(f64, &Arc<NodeClaim>)> = members
        .iter()
        .filter(|m| m.warm_phase() == Some(WARM))
        .filter_map(|m| {
            let status = m.status.as_ref()?;
            status.instance_id.as_ref()?;
            let candidate = Candidate {
                instance_type: status.instance_type.as_deref()?,
                zone: status.zone.as_deref()?,
                price: member_price(m, catalog)?,
            };
            serves(&reqs, &request.zones, cheapest_new, premium, &candidate)
                .then_some((candidate.price, m))
        })
        .collect();
    eligible.sort_by(|a, b| {
        a.0.total_cmp(&b.0).then_with(|| {
            a.1.metadata
                .creation_timestamp
                .cmp(&b.1.metadata.creation_timestamp)
        })
    });
    if eligible.is_empty() {
        count(ctx, provisioner, "miss");
        return Ok(None);
    }
    for (_, member) in eligible.into_iter().take(BIND_ATTEMPTS) {
        let bind =
            json!({"warmPool": {"phase": CLAIMED, "claimedBy": claim.name(), "message": null}});
        match patch_claim_status(&ctx.client, member, bind, Guard::ResourceVersion).await {
            Ok(bound) => return start(ctx, claim, &bound, catalog).await,
            Err(e) if is_conflict(&e) => {
                tracing::info!(
                    claim = claim.name(),
                    member = member.name(),
                    "warm member changed or taken meanwhile; trying the next"
                );
            }
            Err(e) => {
                tracing::warn!(claim = claim.name(), member = member.name(), error = %e, "binding a warm member failed; launching instead");
                count(ctx, provisioner, "fallback");
                return Ok(None);
            }
        }
    }
    count(ctx, provisioner, "miss");
    Ok(None)
}

/// Step 2 for `member`, bound to `claim`: start it; on failure put it back (or remove it when
/// its instance is gone) and answer `Ok(None)`, unless the member was started and only its
/// release failed: then it stays bound, and the error is the answer.
async fn start<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    member: &NodeClaim,
    catalog: &[InstanceType],
) -> Result<Option<Taken>, String> {
    let provisioner = claim.spec.provisioner_name.as_str();
    let Some(id) = member.status.as_ref().and_then(|s| s.instance_id.clone()) else {
        return Ok(None);
    };
    match ctx.cloud.start_warm(&id, claim.name()).await {
        Ok(node) => {
            count(ctx, provisioner, "hit");
            tracing::info!(claim = claim.name(), member = member.name(), instance = %id,
                instance_type = %node.instance_type, zone = %node.zone, "warm-pool member started for the claim");
            Ok(Some(Taken {
                price: member_price(member, catalog),
                node,
                member: member.name().to_string(),
            }))
        }
        Err(e) if e.kind() == CloudErrorKind::TakeUnfinished => {
            tracing::warn!(claim = claim.name(), member = member.name(), instance = %id, error = %e,
                "warm member started for the claim but not released from the pool; the claim's next launch finishes the take");
            Err(format!(
                "warm-pool member {} (instance {id}) started but its take did not finish: {e}",
                member.name()
            ))
        }
        Err(e) => {
            count(ctx, provisioner, "fallback");
            let message = format!("start for NodeClaim {} failed: {e}", claim.name());
            tracing::warn!(claim = claim.name(), member = member.name(), instance = %id, error = %e,
                code = %e.code(), "starting a warm member failed; launching instead");
            if e.kind() == CloudErrorKind::NotFound {
                ctx.state.created.forget(member.name());
                if let Err(err) = delete_claim(&ctx.client, member.name()).await {
                    tracing::warn!(member = member.name(), error = %err, "removing a warm member whose instance is gone failed");
                }
                return Ok(None);
            }
            let unbind =
                json!({"warmPool": {"phase": WARM, "claimedBy": null, "message": message}});
            if let Err(err) = patch_claim_status(&ctx.client, member, unbind, Guard::None).await {
                // The pool's reconciler unbinds a member whose claim did not get it.
                tracing::warn!(member = member.name(), error = %err, "putting a warm member back failed");
            }
            Ok(None)
        }
    }
}
