//! Carrying out one decision: the old nodes taken out of scheduling, replacements, a check,
//! then the old nodes.
//!
//! A decision with replacements ([`start`]) first taints its old Nodes (NoSchedule: nothing
//! new lands there while the replacements come, and they count as disrupting), then writes
//! the replacements' NodeClaims with the moved pods nominated (their room is held for them in
//! every plan), records the command on the old NodeClaims ([`super::record`]) and launches the
//! replacements side by side. A write, record or launch that fails rolls all of it back: the
//! replacements written are deleted and the old nodes untainted and unmarked. [`advance`]
//! waits until every replacement is Initialized, validates the decision again on the cluster
//! as it is then (the old nodes' pods, with any that arrived, fit without them; no pod that
//! arrived opts out or is held by its PodDisruptionBudget) and only then deletes the old
//! nodes' claims, which the termination flow drains. A replacement that is gone, or not
//! Initialized within [`REPLACEMENT_TIMEOUT`], fails the command: the replacements are deleted
//! and the old nodes freed. A decision without replacements deletes the old claims at once.
//! Each step publishes an Event on the old nodes and their claims.

use std::sync::Arc;
use std::time::{Duration, Instant};

use joiner_apis::NodeClaim;
use joiner_core::disruption::Decision;
use joiner_core::{CloudProvider, InstanceType};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use super::error::DisruptionError;
use super::record::{self, Record};
use super::validation::DecisionKey;
use crate::context::Context;
use crate::k8s::events::{publish_on_claim, publish_on_node, EventType};
use crate::launcher::claims::create_recorded;
use crate::launcher::{launch_claim, Launch};
use crate::reconcile::delete_claim;
use crate::reconcile::is_initialized;
use crate::state::PlanningGuard;
use joiner_apis::cluster::matching::{claim_of, node_of};

/// How long replacements may take to be Initialized before the decision is given up (the
/// old nodes stay, the replacements are deleted).
pub const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A decision under way.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    /// Which command: the id its old claims record.
    pub id: String,
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

impl Command {
    /// The command `record` describes, its old claims `old_claims`, as a leader finds it at
    /// `now` (its start moved back by the time elapsed since, on the wall clock); `None` when
    /// the record names no known reason.
    pub fn from_record(record: &Record, old_claims: Vec<String>, now: Instant) -> Option<Command> {
        let reason = joiner_core::disruption::Reason::parse(&record.reason)?;
        let elapsed = record
            .started()
            .and_then(|t| Duration::try_from(Timestamp::now().duration_since(t)).ok())
            .unwrap_or_default();
        let mut nodes = record.nodes.clone();
        nodes.sort();
        let mut types = record.replacement_types.clone();
        types.sort();
        Some(Command {
            id: record.id.clone(),
            key: DecisionKey {
                reason,
                nodes,
                replacements: types,
            },
            detail: record.detail.clone(),
            old_claims,
            replacements: record.replacements.clone(),
            savings: record.savings,
            started: now.checked_sub(elapsed).unwrap_or(now),
        })
    }

    /// The record its old claims carry, `started_at` its start on the wall clock.
    pub fn record(&self, started_at: Timestamp) -> Record {
        Record {
            id: self.id.clone(),
            reason: self.key.reason.as_str().to_string(),
            nodes: self.key.nodes.clone(),
            replacement_types: self.key.replacements.clone(),
            replacements: self.replacements.clone(),
            started_at: started_at.to_string(),
            detail: self.detail.clone(),
            savings: self.savings,
        }
    }
}

/// What [`start`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Started {
    /// Replacements launched; the command waits for them.
    Replacing(Command),
    /// No replacement needed: the old claims are deleted.
    Deleted,
    /// Given up and rolled back, and why.
    Failed(String),
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
    tell_as(ctx, claims, EventType::Normal, reason, message).await;
}

/// The claims of the nodes named `nodes` (by the node name their status records).
pub fn claims_of_nodes<P: CloudProvider>(ctx: &Context<P>, nodes: &[String]) -> Vec<String> {
    ctx.state
        .claims()
        .iter()
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| nodes.iter().any(|k| k == n))
        })
        .map(|c| c.name().to_string())
        .collect()
}

/// An Event `DisruptionDropped` on the claims named `claims` and their nodes: the decision
/// was dropped before it started, and why.
pub async fn tell_dropped<P: CloudProvider>(ctx: &Context<P>, claims: &[String], why: &str) {
    let stored: Vec<Arc<NodeClaim>> = ctx
        .state
        .claims()
        .into_iter()
        .filter(|c| claims.iter().any(|n| n == c.name()))
        .collect();
    tell_as(ctx, &stored, EventType::Normal, "DisruptionDropped", why).await;
}

/// A Warning Event `DisruptionFailed` on the old claims named `claims` and their nodes: the
/// command was given up, and why.
pub async fn tell_failed<P: CloudProvider>(ctx: &Context<P>, claims: &[String], why: &str) {
    let stored: Vec<Arc<NodeClaim>> = ctx
        .state
        .claims()
        .into_iter()
        .filter(|c| claims.iter().any(|n| n == c.name()))
        .collect();
    tell_as(ctx, &stored, EventType::Warning, "DisruptionFailed", why).await;
}

async fn tell_as<P: CloudProvider>(
    ctx: &Context<P>,
    claims: &[Arc<NodeClaim>],
    kind: EventType,
    reason: &str,
    message: &str,
) {
    let nodes: Vec<Arc<Node>> = ctx.state.nodes.state();
    for claim in claims {
        if let Err(e) = publish_on_claim(&ctx.client, claim, kind, reason, message).await {
            tracing::debug!(error = %e, "disruption event not published");
        }
        if let Some(node) = node_of(claim, &nodes) {
            if let Err(e) = publish_on_node(&ctx.client, node, kind, reason, message).await {
                tracing::debug!(error = %e, "disruption event not published");
            }
        }
    }
}

/// Starts `decision` (see the module doc): returns the command waiting for its replacements,
/// or says the old claims are deleted (no replacement needed), or why it was given up.
pub async fn start<P: CloudProvider>(
    ctx: &Context<P>,
    decision: &Decision,
    catalog: &[InstanceType],
    now: Instant,
    planning: PlanningGuard,
) -> Result<Started, DisruptionError> {
    let old = old_claims(ctx, &decision.nodes)?;
    let savings = decision.price_before - decision.price_after;
    if decision.replacements.is_empty() {
        drop(planning);
        finish(ctx, &old, decision.reason.as_str(), &decision.detail).await?;
        return Ok(Started::Deleted);
    }
    let wall = Timestamp::now();
    let stored_nodes = ctx.state.nodes.state();
    let (tainted, failed) = record::taint(&ctx.client, &stored_nodes, &decision.nodes, wall).await;
    if let Some(why) = failed {
        record::untaint(&ctx.client, &tainted).await;
        return Ok(Started::Failed(why));
    }
    let written = match write_replacements(ctx, decision).await {
        Ok(w) => w,
        Err((written, e)) => {
            // A partial write rolls back: no replacement without its command.
            drop(planning);
            delete_replacements(ctx, &written).await;
            record::untaint(&ctx.client, &decision.nodes).await;
            return Err(e);
        }
    };
    let names: Vec<String> = written.iter().map(|(c, _)| c.name().to_string()).collect();
    let key = DecisionKey::of(decision);
    let cmd = Command {
        id: format!("{}-{}", old[0].name(), wall.as_second()),
        key,
        detail: decision.detail.clone(),
        old_claims: old.iter().map(|c| c.name().to_string()).collect(),
        replacements: names.clone(),
        savings,
        started: now,
    };
    if let Err(why) = record::mark(&ctx.client, &old, &cmd.record(wall)).await {
        drop(planning);
        let stored: Vec<NodeClaim> = written.into_iter().map(|(c, _)| c).collect();
        delete_replacements(ctx, &stored).await;
        record::unmark(&ctx.client, &cmd.old_claims).await;
        record::untaint(&ctx.client, &decision.nodes).await;
        return Ok(Started::Failed(why));
    }
    // Written, recorded and remembered: the next plan sees them; the launches run without
    // the lock, side by side.
    drop(planning);
    let launches = written.iter().map(|(stored, node)| async move {
        launch_claim(ctx, stored, Some(node), catalog)
            .await
            .map_err(|e| format!("launching replacement NodeClaim {}: {e}", stored.name()))
            .and_then(|launch| match launch {
                Launch::Launched(_) => Ok(()),
                Launch::Requeued { claim, code } => Err(format!(
                    "replacement NodeClaim {claim} found no capacity ({code})"
                )),
                Launch::Failed { message, .. } => Err(message),
            })
    });
    let results = futures::future::join_all(launches).await;
    if let Some(why) = results.into_iter().find_map(Result::err) {
        // A failed launch fails the command at once and frees the old nodes.
        abandon(ctx, &cmd, true).await;
        return Ok(Started::Failed(why));
    }
    let message = format!(
        "{}; waiting for replacement {} to be initialized",
        decision.detail,
        names.join(", ")
    );
    tell(ctx, &old, "DisruptionLaunching", &message).await;
    tracing::info!(nodes = ?decision.nodes, replacements = ?names, detail = %decision.detail, "disruption: replacements launched");
    Ok(Started::Replacing(cmd))
}

/// Writes the replacements of `decision`, each with its moved pods nominated from the nodes
/// they leave; on a failure, the claims written so far and the error.
async fn write_replacements<'d, P: CloudProvider>(
    ctx: &Context<P>,
    decision: &'d Decision,
) -> Result<Vec<(NodeClaim, &'d joiner_core::scheduling::NewNode)>, (Vec<NodeClaim>, DisruptionError)>
{
    let provisioners = ctx.state.provisioners.state();
    let pods = ctx.state.pods.state();
    let mut stored_claims = Vec::new();
    for node in &decision.replacements {
        let Some(prov) = provisioners.iter().find(|p| p.name() == node.provisioner) else {
            let written = stored_claims.into_iter().map(|(c, _)| c).collect();
            return Err((
                written,
                DisruptionError::UnknownProvisioner {
                    provisioner: node.provisioner.clone(),
                },
            ));
        };
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
        match create_recorded(ctx, prov, node, &nominated).await {
            Ok(stored) => stored_claims.push((stored, node)),
            Err(e) => {
                let written = stored_claims.into_iter().map(|(c, _)| c).collect();
                return Err((written, e.into()));
            }
        }
    }
    Ok(stored_claims)
}

/// Deletes the replacement claims `claims` of a command given up; failures are logged (an
/// empty node left behind is consolidated in turn).
async fn delete_replacements<P: CloudProvider>(ctx: &Context<P>, claims: &[NodeClaim]) {
    for claim in claims {
        if let Err(e) = delete_claim(
            ctx,
            claim,
            "disruption_rollback",
            "rolling back a disruption",
        )
        .await
        {
            tracing::warn!(claim = %claim.name(), error = %e, "deleting a replacement of a disruption given up failed");
        }
    }
}

/// Gives `cmd` up: its replacements deleted when `remove_replacements` (never initialized, or
/// launched for nothing), its old nodes untainted and unmarked.
pub async fn abandon<P: CloudProvider>(ctx: &Context<P>, cmd: &Command, remove_replacements: bool) {
    if remove_replacements {
        let claims = ctx.state.claims();
        let mine: Vec<NodeClaim> = claims
            .iter()
            .filter(|c| cmd.replacements.iter().any(|r| r == c.name()))
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(|c| c.as_ref().clone())
            .collect();
        delete_replacements(ctx, &mine).await;
    }
    // Unmarked first: a record without its taint would let a later leader carry on a
    // command given up; a taint without its record is swept (`recover::sweep`).
    record::unmark(&ctx.client, &cmd.old_claims).await;
    record::untaint(&ctx.client, &cmd.key.nodes).await;
}

/// One step of `cmd`: when every replacement is Initialized and the decision still holds on
/// the cluster as it is (the old nodes of the other commands under way, `others`, on their way
/// out too), the old claims are deleted; a replacement gone or late fails it.
pub async fn advance<P: CloudProvider>(
    ctx: &Context<P>,
    cmd: &Command,
    others: &[String],
    now: Instant,
) -> Result<Progress, DisruptionError> {
    let claims = ctx.state.claims();
    let nodes = ctx.state.nodes.state();
    let mut late = Vec::new();
    for name in &cmd.replacements {
        // (The claims this replica wrote are in `claims` before the watch delivers them.)
        let Some(claim) = claims.iter().find(|c| c.name() == name) else {
            abandon(ctx, cmd, true).await;
            return Ok(Progress::Failed(format!(
                "replacement NodeClaim {name} is gone"
            )));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            abandon(ctx, cmd, true).await;
            return Ok(Progress::Failed(format!(
                "replacement NodeClaim {name} is being deleted"
            )));
        }
        if !node_of(claim, &nodes).is_some_and(|n| is_initialized(claim, n)) {
            late.push(name.as_str());
        }
    }
    if !late.is_empty() {
        if now.duration_since(cmd.started) >= REPLACEMENT_TIMEOUT {
            // A replacement that never initializes is removed, and the old nodes freed.
            abandon(ctx, cmd, true).await;
            return Ok(Progress::Failed(format!(
                "replacement {} not initialized after {} minutes",
                late.join(", "),
                REPLACEMENT_TIMEOUT.as_secs() / 60
            )));
        }
        return Ok(Progress::Waiting);
    }
    if let Err(why) = super::decide::still_holds(ctx, &cmd.key.nodes, others, cmd.key.reason).await
    {
        // The replacements stay (initialized, empty or not: disrupted in turn as any node).
        abandon(ctx, cmd, false).await;
        return Ok(Progress::Failed(why));
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
pub(super) async fn finish<P: CloudProvider>(
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
