//! Liveness: a NodeClaim that never got its instance, or whose node never joined, is deleted.
//!
//! A launch stuck for `settings.launch_timeout` (5 min) or a node that has not registered
//! `settings.registration_timeout` (15 min) after the claim was created will most likely never
//! serve its pods: the AMI does not boot, user data fails, the node cannot reach the API server.
//! Deleting the claim hands it to termination (which terminates any instance it has) and its pods
//! become pending again, so the provisioner plans them anew, possibly on other capacity.

use joiner_apis::NodeClaim;
use joiner_core::CloudProvider;
use k8s_openapi::jiff::Timestamp;

use crate::context::Context;
use crate::reconcile::{age, delete_claim, first_error, LifecycleError};

/// Why a claim is not alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Not Launched within `launch_timeout`.
    LaunchTimeout,
    /// Launched but not Registered within `registration_timeout`.
    RegistrationTimeout,
}

impl Expiry {
    /// The `reason` label of `claims_terminated`.
    pub fn reason(self) -> &'static str {
        match self {
            Expiry::LaunchTimeout => "launch_timeout",
            Expiry::RegistrationTimeout => "registration_timeout",
        }
    }
}

/// Whether `claim` has outlived its launch or registration deadline at `now`. Claims already
/// being deleted and registered claims never expire here.
pub fn expiry<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    now: Timestamp,
) -> Option<Expiry> {
    // A warm-pool member never registers as itself (the claim that takes it does); its
    // launch is bounded like any other's.
    if claim.metadata.deletion_timestamp.is_some()
        || claim.is_registered()
        || (claim.warm_pool().is_some() && claim.is_launched())
    {
        return None;
    }
    let age = age(claim.metadata.creation_timestamp.as_ref(), now);
    if !claim.is_launched() && age > ctx.settings.launch_timeout {
        Some(Expiry::LaunchTimeout)
    } else if claim.is_launched() && age > ctx.settings.registration_timeout {
        Some(Expiry::RegistrationTimeout)
    } else {
        None
    }
}

/// One liveness pass: deletes every expired claim (a 404 means someone deleted it first) and
/// counts it in `claims_terminated{reason}`.
pub async fn reconcile<P: CloudProvider>(ctx: &Context<P>) -> Result<(), LifecycleError> {
    let now = Timestamp::now();
    let mut errors = Vec::new();
    for claim in ctx.state.node_claims.state() {
        let Some(expired) = expiry(ctx, &claim, now) else {
            continue;
        };
        tracing::warn!(
            claim = claim.name(),
            reason = expired.reason(),
            "deleting a NodeClaim that did not become a node in time"
        );
        if let Err(e) =
            delete_claim(ctx, &claim, expired.reason(), "deleting after a timeout").await
        {
            errors.push(e);
        }
    }
    first_error(errors)
}
