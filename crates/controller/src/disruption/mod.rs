//! Disruption in the cluster: the planner's decisions (`joiner_core::disruption`) carried out
//! through the termination flow, independent ones side by side.
//!
//! Every [`INTERVAL`] the leader plans on the stores ([`decide`]) for up to
//! [`DECISIONS_PER_PASS`] decisions. A decision is carried out only when a plan made
//! [`validation::VALIDATION_DELAY`] later makes it again ([`validation`]); then [`command`]
//! taints its old nodes, writes, records and launches its replacements, waits until they are
//! Initialized, checks the decision again and deletes the old nodes' claims, which the
//! termination flow drains; a failure rolls it back. Each command is recorded on its old
//! claims ([`record`]), so a new leader carries them on ([`recover`]). While commands are under
//! way the leader goes on planning: their old nodes are on their way out (never candidates,
//! their pods needing room) and count against budgets, so further commands start only within
//! what the budgets leave. Nodes that stay get an Event with the planner's words when their
//! reason changes; a command given up gets a Warning Event on its nodes.

pub mod command;
pub mod decide;
mod error;
pub mod pod_changes;
pub mod quiet;
pub mod record;
pub mod recover;
pub mod validation;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use joiner_core::CloudProvider;
use k8s_openapi::jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;
use crate::k8s::events::{publish_on_claim, publish_on_node, EventType};
use command::{Command, Progress, Started};
pub use decide::DECISIONS_PER_PASS;
pub use error::DisruptionError;
use joiner_apis::cluster::matching::claim_of;
use validation::{DecisionKey, Pending, Verdict};

/// How often the disruption pass runs.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Most "why this node stays" Events one pass publishes.
const KEPT_EVENTS_PER_PASS: usize = 50;

/// How long a node's reason to stay is not told again: once an hour at most, however long a
/// backlog keeps it (a pass runs every few seconds).
pub const TELL_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// What the pass remembers: the decision waiting for its delay, the command under way, the
/// reason last told for each node that stays, where the next pass starts simulating
/// single-node consolidations, and when each node's pods last changed.
#[derive(Debug, Default)]
pub struct Memory {
    /// True once the commands a previous leader recorded were looked for ([`recover`]).
    recovered: bool,
    /// The last plan found nothing on this cluster ([`quiet`]).
    quiet: Option<quiet::Quiet>,
    /// Decisions waiting for their validation delay.
    pending: Vec<Pending>,
    /// Commands under way, side by side.
    commands: Vec<Command>,
    /// Per node, each reason told and when: told again only after [`TELL_AGAIN_AFTER`].
    told: HashMap<String, HashMap<String, Instant>>,
    start_at: usize,
    changes: pod_changes::PodChanges,
}

impl Memory {
    /// The first command under way, if any.
    pub fn command(&self) -> Option<&Command> {
        self.commands.first()
    }

    /// Every command under way.
    pub fn commands(&self) -> &[Command] {
        &self.commands
    }
}

/// What one pass did.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Nothing to disrupt.
    Idle,
    /// A decision waits for its validation delay.
    Validating(DecisionKey),
    /// A command waits for its replacements.
    Waiting(DecisionKey),
    /// Replacements launched for a decision.
    Replacing(DecisionKey, Vec<String>),
    /// The old nodes' claims deleted.
    Deleted(DecisionKey),
    /// A pending decision the cluster's change dropped (a new decision of the same pass waits
    /// for its own delay), or a command given up, and why.
    Dropped(DecisionKey, String),
}

/// One disruption pass at `now`.
///
/// Every command under way goes on first; a pass in which one of them finished or was given
/// up does nothing more (the next plans on the cluster it left). Otherwise the pass plans with
/// the commands' old nodes counted as on their way out (not candidates; in the budgets; their
/// pods needing room), and starts each decision its validation confirms, so independent
/// commands run concurrently. The outcome reported is the most telling of the pass: a
/// command that finished, failed or started, then a decision dropped, one validating, one
/// waiting for its replacements.
pub async fn pass<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &mut Memory,
    now: Instant,
) -> Result<Outcome, DisruptionError> {
    if !memory.recovered {
        memory.recovered = true;
        memory.commands = recover::recover(ctx, now).await;
    }
    let mut finished = None;
    let mut waiting = None;
    let mut refused = None;
    let all: Vec<String> = memory
        .commands
        .iter()
        .flat_map(|c| c.key.nodes.iter().cloned())
        .collect();
    for cmd in std::mem::take(&mut memory.commands) {
        let reason = cmd.key.reason.as_str();
        match command::advance(ctx, &cmd, &all, now).await {
            // A delete the API refused: the command stays and the next pass goes on
            // (deleting a claim twice is harmless).
            Err(e) => {
                refused.get_or_insert(e);
                memory.commands.push(cmd);
            }
            Ok(Progress::Waiting) => {
                waiting.get_or_insert_with(|| cmd.key.clone());
                memory.commands.push(cmd);
            }
            Ok(Progress::Done) => {
                ctx.metrics.decision(reason, "deleted");
                ctx.metrics.disruption_savings.inc_by(cmd.savings.max(0.0));
                finished.get_or_insert(Outcome::Deleted(cmd.key));
            }
            Ok(Progress::Failed(why)) => {
                tracing::warn!(nodes = ?cmd.key.nodes, why = %why, "disruption given up");
                ctx.metrics.decision(reason, "failed");
                count_failed(ctx, reason);
                command::tell_failed(ctx, &cmd.old_claims, &why).await;
                finished.get_or_insert(Outcome::Dropped(cmd.key, why));
            }
        }
    }
    if let Some(done) = finished {
        return refused.map_or(Ok(done), Err);
    }
    let under_way: BTreeSet<String> = memory
        .commands
        .iter()
        .flat_map(|c| c.key.nodes.iter().cloned())
        .collect();
    recover::sweep(ctx, &under_way).await;
    let fingerprint = quiet::fingerprint(ctx);
    let idle = memory.pending.is_empty() && memory.commands.is_empty();
    if idle && memory.quiet.is_some_and(|q| q.holds(fingerprint, now)) {
        return Ok(Outcome::Idle);
    }
    memory.quiet = None;
    let began = Instant::now();
    let planned = decide::planned(
        ctx,
        &under_way,
        Timestamp::now(),
        memory.start_at,
        &mut memory.changes,
    )
    .await;
    report(ctx, &planned.plan, began.elapsed());
    for w in &planned.warnings {
        tracing::debug!(warning = %w, "left out of the disruption plan");
    }
    for (claim, annotations) in &planned.restamps {
        match crate::k8s::claims::patch_claim_annotations(&ctx.client, claim, annotations).await {
            Ok(_) => {
                tracing::info!(claim = %claim, "drift hashes re-stamped: the claim was hashed by another release")
            }
            Err(e) => {
                tracing::warn!(claim = %claim, error = %e, "cannot re-stamp the claim's drift hashes")
            }
        }
    }
    tell_kept(ctx, memory, &planned.plan.kept, now).await;
    let checked = validation::check_all(&mut memory.pending, &planned.plan.decisions, now);
    let mut dropped = None;
    for key in checked.dropped {
        // A new decision of this pass, if any, starts its own delay (it is pending now).
        tracing::info!(nodes = ?key.nodes, reason = key.reason.as_str(), "disruption decision dropped: the cluster changed");
        ctx.metrics.decision(key.reason.as_str(), "dropped");
        let claims = command::claims_of_nodes(ctx, &key.nodes);
        command::tell_dropped(
            ctx,
            &claims,
            &format!(
                "{} decision dropped: the cluster changed during its validation delay",
                key.reason.as_str()
            ),
        )
        .await;
        dropped.get_or_insert(Outcome::Dropped(key, "the cluster changed".into()));
    }
    if planned.plan.decisions.is_empty() {
        // Nothing found among the candidates simulated: the next pass weighs the next ones.
        // (While a decision waits for validation the start stays, so the same plan recurs.)
        // Found nothing having weighed them all: nothing to do until the cluster changes.
        if planned.plan.complete && memory.commands.is_empty() {
            memory.quiet = Some(quiet::Quiet::new(fingerprint, now));
        }
        memory.start_at = memory.start_at.wrapping_add(decide::EVALUATIONS_PER_PASS);
    }
    let mut started = None;
    let mut validating = None;
    for (i, verdict) in checked.verdicts {
        let decision = &planned.plan.decisions[i];
        let nodes = match verdict {
            Verdict::Wait => {
                let key = DecisionKey::of(decision);
                if memory
                    .pending
                    .iter()
                    .any(|p| p.since == now && p.key == key)
                {
                    tracing::info!(nodes = ?key.nodes, detail = %decision.detail, "disruption decision made; validating");
                    ctx.metrics.decision(key.reason.as_str(), "validating");
                }
                validating.get_or_insert(Outcome::Validating(key));
                continue;
            }
            Verdict::Confirmed(nodes) => nodes,
        };
        // One that cannot start (its writes refused) does not hold the others back.
        match carry_out(ctx, memory, decision, &nodes, &planned.catalog, now).await {
            Ok(outcome) => {
                started.get_or_insert(outcome);
            }
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    // A command whose delete the API refused, or a decision that could not start, fails the
    // pass (logged and counted) once the rest of it is done: the pending decisions were
    // weighed all the same, so a refusal never makes the next pass come at once.
    if let Some(e) = refused {
        return Err(e);
    }
    Ok(started
        .or(dropped)
        .or(validating)
        .or(waiting.map(Outcome::Waiting))
        .unwrap_or(Outcome::Idle))
}

/// Starts the command for `decision`, confirmed on `nodes` (all of them, or for a delete the
/// ones it held since it appeared).
async fn carry_out<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &mut Memory,
    decision: &joiner_core::disruption::Decision,
    nodes: &[String],
    catalog: &[joiner_core::InstanceType],
    now: Instant,
) -> Result<Outcome, DisruptionError> {
    let trimmed;
    let decision = if nodes.len() < decision.nodes.len() {
        trimmed = trim(decision, nodes);
        &trimmed
    } else {
        decision
    };
    let key = DecisionKey::of(decision);
    // Held while the decision's replacements are written (not while planning: an
    // interruption's two-minute notice must not wait for a disruption pass), so the next
    // batch sees them and their nominations.
    let planning = ctx.state.created.planning().await;
    match command::start(ctx, decision, catalog, now, planning).await? {
        Started::Replacing(cmd) => {
            ctx.metrics.decision(key.reason.as_str(), "replacing");
            let replacements = cmd.replacements.clone();
            memory.commands.push(cmd);
            Ok(Outcome::Replacing(key, replacements))
        }
        Started::Failed(why) => {
            tracing::warn!(nodes = ?key.nodes, why = %why, "disruption given up before its replacements ran");
            ctx.metrics.decision(key.reason.as_str(), "failed");
            count_failed(ctx, key.reason.as_str());
            let old = command::claims_of_nodes(ctx, &key.nodes);
            command::tell_failed(ctx, &old, &why).await;
            Ok(Outcome::Dropped(key, why))
        }
        Started::Deleted => {
            ctx.metrics.decision(key.reason.as_str(), "deleted");
            ctx.metrics
                .disruption_savings
                .inc_by((decision.price_before - decision.price_after).max(0.0));
            Ok(Outcome::Deleted(key))
        }
    }
}

/// Sets the disruption gauges from `plan`, made in `took`.
fn report<P: CloudProvider>(
    ctx: &Context<P>,
    plan: &joiner_core::disruption::DisruptionPlan,
    took: Duration,
) {
    let m = &ctx.metrics;
    m.disruption_evaluation.observe(took.as_secs_f64());
    for reason in ["Empty", "Expired", "Drifted", "Underutilized"] {
        let n = plan
            .eligible
            .iter()
            .find(|(r, _)| r.as_str() == reason)
            .map_or(0, |(_, n)| *n);
        m.disruption_eligible
            .get_or_create(&crate::metrics::ReasonOnlyLabels {
                reason: reason.to_string(),
            })
            .set(i64::from(n));
    }
    m.disruption_allowed.clear();
    for (provisioner, reason, n) in &plan.allowed {
        m.disruption_allowed
            .get_or_create(&crate::metrics::BudgetLabels {
                provisioner: provisioner.clone(),
                reason: reason.as_str().to_string(),
            })
            .set(i64::from(*n).min(i64::from(i32::MAX)));
    }
}

/// Counts a command of `reason` given up.
fn count_failed<P: CloudProvider>(ctx: &Context<P>, reason: &str) {
    ctx.metrics
        .disruption_failed
        .get_or_create(&crate::metrics::ReasonOnlyLabels {
            reason: reason.to_string(),
        })
        .inc();
}

/// `decision`, a delete, on `nodes` only: its price before counts the nodes it keeps, in
/// proportion (a delete's nodes are not priced one by one in the decision).
fn trim(
    decision: &joiner_core::disruption::Decision,
    nodes: &[String],
) -> joiner_core::disruption::Decision {
    let share = nodes.len() as f64 / decision.nodes.len().max(1) as f64;
    joiner_core::disruption::Decision {
        nodes: nodes.to_vec(),
        price_before: decision.price_before * share,
        detail: format!(
            "{} ({} of its {} nodes still qualify)",
            decision.detail,
            nodes.len(),
            decision.nodes.len()
        ),
        ..decision.clone()
    }
}

/// An Event on each of joiner's nodes that stays and on its NodeClaim, with the planner's
/// reasons, logged too, once per reason and node per [`TELL_AGAIN_AFTER`] (at most
/// [`KEPT_EVENTS_PER_PASS`] nodes per pass).
async fn tell_kept<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &mut Memory,
    kept: &[joiner_core::disruption::Kept],
    now: Instant,
) {
    let nodes = ctx.state.nodes.state();
    let claims = ctx.state.claims();
    // Nodes that are gone have nothing more to be told.
    let by_name: HashMap<&str, &Arc<k8s_openapi::api::core::v1::Node>> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n)))
        .collect();
    memory.told.retain(|name, reasons| {
        reasons.retain(|_, at| now.saturating_duration_since(*at) < TELL_AGAIN_AFTER);
        by_name.contains_key(name.as_str()) && !reasons.is_empty()
    });
    let mut sent = 0;
    for k in kept {
        if sent == KEPT_EVENTS_PER_PASS {
            break;
        }
        let why = k.why.join("; ");
        // Nodes the one-decision plan did not get to have nothing new to say.
        let told = memory
            .told
            .get(&k.node)
            .is_some_and(|reasons| reasons.contains_key(&why));
        if why.starts_with("not evaluated") || told {
            continue;
        }
        let Some(node) = by_name.get(k.node.as_str()) else {
            continue;
        };
        let Some(claim) = claim_of(node, &claims) else {
            continue;
        };
        tracing::info!(node = %k.node, claim = %claim.name(), why = %why, "node stays");
        if let Err(e) = publish_on_node(
            &ctx.client,
            node,
            EventType::Normal,
            "DisruptionBlocked",
            &why,
        )
        .await
        {
            tracing::debug!(error = %e, "disruption event not published");
        }
        if let Err(e) = publish_on_claim(
            &ctx.client,
            claim,
            EventType::Normal,
            "DisruptionBlocked",
            &why,
        )
        .await
        {
            tracing::debug!(error = %e, "disruption event not published");
        }
        memory
            .told
            .entry(k.node.clone())
            .or_default()
            .insert(why, now);
        sent += 1;
    }
}

/// When the pass after one that started at `started` runs: after [`INTERVAL`], or, while a
/// decision waits, when its validation delay is over (the pass that carries it out is the
/// second, not the third).
pub fn next_pass(memory: &Memory, started: Instant) -> Instant {
    match memory.pending.iter().map(|p| p.since).min() {
        Some(since) => (since + validation::VALIDATION_DELAY).max(started),
        None => started + INTERVAL,
    }
}

/// Runs the pass every [`INTERVAL`] until `stop` is cancelled; a failed pass is logged and
/// counted, and the next one starts again from the stores.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>, stop: CancellationToken) {
    let mut memory = Memory::default();
    let mut next = Instant::now();
    loop {
        ctx.metrics
            .passes
            .tick("disruption", INTERVAL, crate::metrics::PASS_STALL);
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(next)) => {}
        }
        // The next pass in an interval, or as soon as the pending decision's delay is over:
        // a decision is carried out on the second pass, not the third.
        let started = Instant::now();
        ctx.metrics
            .passes
            .tick("disruption", Duration::ZERO, crate::metrics::PASS_STALL);
        let result = pass(&ctx, &mut memory, started)
            .instrument(tracing::debug_span!("reconcile", controller = "disruption"))
            .await;
        next = next_pass(&memory, started);
        if let Err(e) = result {
            tracing::warn!(error = %e, "disruption pass failed; retrying next pass");
            ctx.metrics.reconcile_failed("disruption");
        }
    }
    tracing::info!("disruption loop stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_decision_is_confirmed_on_the_pass_its_delay_ends() {
        let t0 = Instant::now();
        let mut memory = Memory::default();
        assert_eq!(next_pass(&memory, t0), t0 + INTERVAL);
        memory.pending = vec![Pending {
            key: DecisionKey {
                reason: joiner_core::disruption::Reason::Empty,
                nodes: vec!["a".into()],
                replacements: Vec::new(),
            },
            since: t0,
        }];
        // Decided at t0: the next pass at t0 + 15 s confirms it (a second pass, not a third
        // at t0 + 20 s).
        assert_eq!(next_pass(&memory, t0), t0 + validation::VALIDATION_DELAY);
        let late = t0 + Duration::from_secs(12);
        assert_eq!(next_pass(&memory, late), t0 + validation::VALIDATION_DELAY);
        let overdue = t0 + Duration::from_secs(40);
        assert_eq!(next_pass(&memory, overdue), overdue, "at once when overdue");
    }
}
