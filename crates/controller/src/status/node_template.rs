//! A NodeTemplate's status: what its selectors resolved to in the account, and `Ready`.
//!
//! `Ready=False` reasons name what to fix: [`SUBNETS_NOT_FOUND`], [`SECURITY_GROUPS_NOT_FOUND`],
//! [`AMI_NOT_FOUND`], [`INVALID_SPEC`] (the spec fails validation), or [`RESOLUTION_FAILED`] when an AWS call failed (not the template's
//! fault, so the lists resolved before are kept: the simulation narrows zones by them).

use joiner_apis::condition::Condition;
use joiner_apis::{
    NodeTemplate, NodeTemplateResolver, NodeTemplateStatus, ResolveError, ResolveFailure, Resolved,
};
use k8s_openapi::jiff::Timestamp;

use super::write::READY_REASON;
use super::write::{patch_status, ready_condition, status_patch, with_ready, Outcome, StatusError};

/// `spec.subnetSelector` selects no subnet.
pub const SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
/// `spec.securityGroupSelector` selects no security group.
pub const SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
/// No AMI: the family's SSM parameters are missing, or `spec.amiSelector` selects nothing.
pub const AMI_NOT_FOUND: &str = "AmiNotFound";
/// Resolving failed for a reason outside the template (an AWS call, the catalog).
pub const RESOLUTION_FAILED: &str = "ResolutionFailed";
/// The spec fails validation (a reserved tag, a Custom family without an amiSelector, ...):
/// written before the CRD's rules refused it, or with them off.
pub const INVALID_SPEC: &str = "InvalidSpec";

const KIND: &str = "NodeTemplate";

/// The condition reason for a resolution error.
pub fn reason(err: &ResolveError) -> &'static str {
    match err.failure {
        Some(ResolveFailure::Subnets) => SUBNETS_NOT_FOUND,
        Some(ResolveFailure::SecurityGroups) => SECURITY_GROUPS_NOT_FOUND,
        Some(ResolveFailure::Ami) => AMI_NOT_FOUND,
        Some(ResolveFailure::Invalid) => INVALID_SPEC,
        None => RESOLUTION_FAILED,
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The `Ready=True` message: what was found, and which default AMI builds are missing (their
/// instance types cannot launch with this template).
fn ready_message(r: &Resolved) -> String {
    let mut msg = format!(
        "{} in {}; {}; {}",
        plural(r.subnets.len(), "subnet", "subnets"),
        r.zones().join(", "),
        plural(r.security_groups.len(), "security group", "security groups"),
        plural(r.amis.len(), "AMI", "AMIs"),
    );
    if !r.unresolved.is_empty() {
        msg.push_str(&format!(
            "; no default AMI for {} (those instance types cannot launch)",
            r.unresolved.join(", ")
        ));
    }
    msg
}

/// What `nt` resolves to with `resolver`, or why not. A spec the CRD's rules would refuse
/// today (a reserved tag, written before the rule existed) is not resolved at all: its
/// `Ready=False` ([`INVALID_SPEC`]) keeps its Provisioners from launching.
pub async fn resolve<R: NodeTemplateResolver>(
    resolver: &R,
    nt: &NodeTemplate,
) -> Result<Resolved, ResolveError> {
    match nt.validate() {
        Err(invalid) => Err(ResolveError {
            failure: Some(ResolveFailure::Invalid),
            message: invalid.to_string(),
        }),
        Ok(()) => resolver.resolve(nt).await,
    }
}

/// The status `nt` should have after `resolved`, stamped `now` where the Ready condition flips.
pub fn desired(
    nt: &NodeTemplate,
    resolved: &Result<Resolved, ResolveError>,
    now: Timestamp,
) -> NodeTemplateStatus {
    let current = nt.status.clone().unwrap_or_default();
    let generation = nt.metadata.generation;
    let conditions: &[Condition] = &current.conditions;
    match resolved {
        Ok(r) => NodeTemplateStatus {
            subnets: r.subnets.clone(),
            security_groups: r.security_groups.clone(),
            amis: r.amis.clone(),
            conditions: with_ready(
                conditions,
                ready_condition(
                    conditions,
                    true,
                    READY_REASON,
                    ready_message(r),
                    generation,
                    now,
                ),
            ),
        },
        Err(err) => {
            let why = reason(err);
            let ready = ready_condition(conditions, false, why, err.to_string(), generation, now);
            if why == RESOLUTION_FAILED {
                // Nothing says the lists are wrong: keep them.
                NodeTemplateStatus {
                    conditions: with_ready(conditions, ready),
                    ..current
                }
            } else {
                NodeTemplateStatus {
                    conditions: with_ready(conditions, ready),
                    ..NodeTemplateStatus::default()
                }
            }
        }
    }
}

/// Writes the status `resolved` calls for on `nt` (a merge patch of
/// `/apis/joiner.sh/v1alpha1/nodetemplates/<name>/status`), unless the status already says it.
pub async fn reconcile_one(
    client: &kube::Client,
    nt: &NodeTemplate,
    resolved: &Result<Resolved, ResolveError>,
    now: Timestamp,
) -> Result<Outcome<NodeTemplate>, StatusError> {
    let want = desired(nt, resolved, now);
    if nt.status.as_ref().unwrap_or(&NodeTemplateStatus::default()) == &want {
        return Ok(Outcome::Unchanged);
    }
    let body = status_patch(
        KIND,
        nt.name(),
        &want,
        &["subnets", "securityGroups", "amis", "conditions"],
    )?;
    let outcome = patch_status(client, KIND, nt.name(), body).await?;
    if outcome.is_patched() {
        if let Some(c) =
            joiner_apis::condition::find(&want.conditions, joiner_apis::condition::READY)
        {
            tracing::info!(
                nodetemplate = %nt.name(),
                ready = %c.status,
                reason = %c.reason,
                condition_message = %c.message,
                "NodeTemplate status written"
            );
        }
    }
    Ok(outcome)
}
