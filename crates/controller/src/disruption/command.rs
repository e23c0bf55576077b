//! Carrying out one decision: replacements first, then the old nodes.
//!
//! A decision with replacements writes and launches their NodeClaims (as provisioning does)
//! and waits until every one is Initialized before it deletes the old nodes' claims, so the
//! moved pods have somewhere to go the moment the drain starts. A decision without
//! replacements deletes the old claims at once. Deleting a claim hands the node to the
//! termination flow (cordon, drain through the Eviction API — PodDisruptionBudgets hold there
//! too — terminate). Each step publishes an Event on the old nodes and their claims.

use std::sync::Arc;
use std::time::{Duration, Instant};

use joiner_apis::NodeClaim;
use joiner_core::disruption::Decision;
use joiner_core::{CloudProvider, InstanceType};
use k8s_openapi::api::core::v1::Node;

use super::validation::DecisionKey;
use super::DisruptionError;
use crate::context::Context;
use crate::k8s::events::{publish_on_claim, publish_on_node, EventType};
use crate::k8s::matching::{claim_of, node_of};
use crate::lifecycle::delete_claim;
use crate::lifecycle::registration::is_initialized;
use crate::provisioning::claims::create_recorded;
use crate::provisioning::launch_claim;
use crate::state::PlanningGuard;

/// How long replacements may take to be Initialized before the decision is given up (the
/// old nodes stay; the replacements, empty, are disrupted in turn).
pub const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A decision under way.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    /// The decision.
    pub key: DecisionKey,
    /// Its words.
    pub detail: String,
    /// The old nodes' claims.
    pub old_claims: Vec<String>,
    /// The replacements' claims.
    pub replacements: Vec<String>,
    /// $/h the decision saves (removed less added).
    pub savings: f64,
    /// When the replacements were written.
    pub started: Instant,
}

/// Where a command stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    /// Replacements not initialized yet.
    Waiting,
    /// The old claims are deleted.
    Done,
    /// Given up, and why.
    Failed(String),
}

/// The claim of each of `nodes` (by Node name), or an error naming the node without one.
fn old_claims<P: CloudProvider>(
    ctx: &Context<P>,
    nodes: &[String],
) -> Result<Vec<Arc<NodeClaim>>, DisruptionError> {
    let all_nodes = ctx.state.nodes.state();
    let claims = ctx.state.claims();
    nodes
        .iter()
        .map(|name| {
            all_nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
                .and_then(|n| claim_of(n, &claims))
                .cloned()
                .ok_or_else(|| DisruptionError::NoClaim { node: name.clone() })
        })
        .collect()
}

/// Events with `reason`/`message` on `claims` and their nodes; failures are logged, never
/// fatal (an Event is a courtesy).
async fn tell<P: CloudProvider>(
    ctx: &Context<P>,
    claims: &[Arc<NodeClaim>],
    reason: &str,
    message: &str,
) {
    let nodes: Vec<Arc<Node>> = ctx.state.nodes.state();
    for claim in claims {
        if let Err(e) =
            publish_on_claim(&ctx.client, claim, EventType::Normal, reason, message).await
        {
            tracing::debug!(error = %e, "disruption event not published");
        }
        if let Some(node) = node_of(claim, &nodes) {
            if let Err(e) =
                publish_on_node(&ctx.client, node, EventType::Normal, reason, message).await
            {
                tracing::debug!(error = %e, "disruption event not published");
            }
        }
    }
}

/// Starts `decision`: launches its replacements and returns the command waiting for them, or
/// deletes the old claims at once when there are none (`Ok(None)`).
pub async fn start<P: CloudProvider>(
    ctx: &Context<P>,
    decision: &Decision,
    catalog: &[InstanceType],
    now: Instant,
    planning: PlanningGuard,
) -> Result<Option<Command>, DisruptionError> {
    let old = old_claims(ctx, &decision.nodes)?;
    let savings = decision.price_before - decision.price_after;
    if decision.replacements.is_empty() {
        drop(planning);
        finish(ctx, &old, decision.reason.as_str(), &decision.detail).await?;
        return Ok(None);
    }
    let provisioners = ctx.state.provisioners.state();
    let pods = ctx.state.pods.state();
    let mut stored_claims = Vec::new();
    for node in &decision.replacements {
        let prov = provisioners
            .iter()
            .find(|p| p.name() == node.provisioner)
            .ok_or_else(|| DisruptionError::UnknownProvisioner {
                provisioner: node.provisioner.clone(),
            })?;
        // The moved pods are nominated from the nodes they leave.
        let nominated: Vec<String> = node
            .pods
            .iter()
            .map(|key| {
                let on = pods
                    .iter()
                    .filter(|p| p.node_name.is_some())
                    .find(|p| p.key() == *key)
                    .and_then(|p| p.node_name.as_deref());
                match on {
                    Some(n) => format!("{key}@{n}"),
                    None => key.clone(),
                }
            })
            .collect();
        stored_claims.push((create_recorded(ctx, prov, node, &nominated).await?, node));
    }
    // Written and remembered: the next plan sees them; the launches run without the lock,
    // side by side.
    drop(planning);
    let launches = stored_claims.iter().map(|(stored, node)| async move {
        // A failed launch leaves the claim to the provisioning loop's retries; the command
        // waits for it like for any other.
        if let Err(e) = launch_claim(ctx, stored, Some(node), catalog).await {
            tracing::warn!(claim = %stored.name(), error = %e, "replacement launch failed; retried by provisioning");
        }
    });
    futures::future::join_all(launches).await;
    let written: Vec<String> = stored_claims
        .iter()
        .map(|(c, _)| c.name().to_string())
        .collect();
    let message = format!(
        "{}; waiting for replacement {} to be initialized",
        decision.detail,
        written.join(", ")
    );
    tell(ctx, &old, "DisruptionLaunching", &message).await;
    tracing::info!(nodes = ?decision.nodes, replacements = ?written, detail = %decision.detail, "disruption: replacements launched");
    Ok(Some(Command {
        key: DecisionKey::of(decision),
        detail: decision.detail.clone(),
        old_claims: old.iter().map(|c| c.name().to_string()).collect(),
        replacements: written,
        savings,
        started: now,
    }))
}

/// One step of `cmd`: when every replacement is Initialized, the old claims are deleted.
pub async fn advance<P: CloudProvider>(
    ctx: &Context<P>,
    cmd: &Command,
    now: Instant,
) -> Result<Progress, DisruptionError> {
    let claims = ctx.state.claims();
    let nodes = ctx.state.nodes.state();
    let mut ready = true;
    for name in &cmd.replacements {
        let Some(claim) = claims.iter().find(|c| c.name() == name) else {
            return Ok(Progress::Failed(format!(
                "replacement NodeClaim {name} is gone"
            )));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(Progress::Failed(format!(
                "replacement NodeClaim {name} is being deleted"
            )));
        }
        ready &= node_of(claim, &nodes).is_some_and(|n| is_initialized(claim, n));
    }
    if !ready {
        if now.duration_since(cmd.started) >= REPLACEMENT_TIMEOUT {
            return Ok(Progress::Failed(format!(
                "replacements {} not initialized after {} minutes",
                cmd.replacements.join(", "),
                REPLACEMENT_TIMEOUT.as_secs() / 60
            )));
        }
        return Ok(Progress::Waiting);
    }
    let old: Vec<Arc<NodeClaim>> = claims
        .iter()
        .filter(|c| cmd.old_claims.iter().any(|o| o == c.name()))
        .cloned()
        .collect();
    finish(ctx, &old, cmd.key.reason.as_str(), &cmd.detail).await?;
    Ok(Progress::Done)
}

/// Deletes the old claims (the termination flow drains and terminates their nodes).
async fn finish<P: CloudProvider>(
    ctx: &Context<P>,
    old: &[Arc<NodeClaim>],
    reason: &str,
    detail: &str,
) -> Result<(), DisruptionError> {
    tell(ctx, old, "DisruptionTerminating", detail).await;
    let label = format!("disruption_{}", reason.to_ascii_lowercase());
    for claim in old {
        if claim.metadata.deletion_timestamp.is_none() {
            delete_claim(ctx, claim, &label, "deleting for disruption").await?;
        }
    }
    tracing::info!(claims = ?old.iter().map(|c| c.name()).collect::<Vec<_>>(), detail, "disruption: old nodes deleted");
    Ok(())
}
