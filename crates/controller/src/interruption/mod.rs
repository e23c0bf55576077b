//! Interruption handling: the leader reads the interruption queue and acts on what the cloud
//! says will happen to joiner's instances.
//!
//! Each receive takes up to ten messages ([`batch`]); [`handle`] reads them together: a body
//! that is not an event, an instance that is not joiner's ([`targets`]), an event handled
//! already ([`seen`]) or older than the instance's claim is deleted and counted by reason. A
//! spot interruption, scheduled maintenance or stop/termination ends the node: the batch's
//! nodes are replaced in one simulation ([`replace`](mod@replace)) — replacements written before the old
//! claims are deleted and drained. A rebalance recommendation is an Event, or the same
//! replacement when the node's Provisioner sets `spec.interruption.rebalance: Replace`.
//! Messages whose handling failed are not deleted: they come back after the queue's
//! visibility timeout and are tried again; the others are deleted in one DeleteMessageBatch per
//! receive. [`run`] keeps [`WORKERS`] receives in flight, each handled on its own: no lock is
//! held while a batch is handled (the workers share only the events seen, [`Memory`]), and
//! while a batch is in work its messages' visibility is extended ([`InterruptionQueue::extend`])
//! so a slow replacement launch never hands them to a second worker. [`run`]
//! backs off when the queue fails; [`connect`] retries a queue that cannot be reached at
//! start, while every other loop of the controller goes on.

mod error;
pub mod replace;
pub mod seen;
pub mod targets;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::future::join_all;
use joiner_core::interruption::{Action, EventKind, InterruptionQueue, Message, Rejected};
use joiner_core::{CloudError, CloudErrorKind, CloudProvider};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;
use crate::k8s::events::{publish_on_claim, publish_on_node, EventType};
pub use error::InterruptionError;
use replace::{replace, Victim};
use seen::Seen;
use targets::{strongest, Owned, Target};

/// Receives kept in flight at once: while one batch is handled and deleted, the next is read.
pub const WORKERS: usize = 8;

/// Each worker's name on the liveness watchdog (`Metrics::passes`): a worker wedged on a call
/// that never returns fails `/healthz`, as a stalled control loop does.
pub const WORKER_NAMES: [&str; WORKERS] = [
    "interruption/0",
    "interruption/1",
    "interruption/2",
    "interruption/3",
    "interruption/4",
    "interruption/5",
    "interruption/6",
    "interruption/7",
];

/// The longest a receive waits for messages (SQS long polling's most).
pub const LONG_POLL: Duration = Duration::from_secs(20);

/// First wait after a failed receive; doubled per failure up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between attempts to reach the queue.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5 * 60);

/// What the consumer remembers between batches: the events handled lately, and the claims
/// replaced lately. The workers share it; each takes the lock only to claim or release one,
/// never while handling it.
#[derive(Debug, Default)]
pub struct Memory {
    seen: std::sync::Mutex<Seen>,
}

impl Memory {
    /// Claims event `id` at `now` for handling: false when it was handled, or is in work,
    /// already (a second delivery of it).
    fn claim(&self, id: &str, now: Instant) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(id, now) {
            return false;
        }
        seen.insert(id, now);
        true
    }

    /// Gives event `id` back: its handling failed, and its message comes back to be handled.
    fn release(&self, id: &str) {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// What became of one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Acted on: the event's kind, what was done, and the claims it was done to.
    Acted {
        /// The event's kind.
        kind: EventKind,
        /// Replaced or only told.
        action: &'static str,
        /// The claims acted on.
        claims: Vec<String>,
    },
    /// Deleted without action, and why.
    Rejected(Rejected),
}

/// The key under which [`Memory`] remembers a claim being replaced (apart from event IDs).
fn claim_key(claim: &str) -> String {
    format!("nodeclaim/{claim}")
}

/// The action's metric and log word.
fn action_word(action: Action) -> &'static str {
    match action {
        Action::Notify => "notify",
        Action::Replace { .. } => "replace",
    }
}

/// Words for an Event about `kind`.
fn describe(kind: EventKind) -> &'static str {
    match kind {
        EventKind::SpotInterruption => {
            "spot interruption warning: the instance is reclaimed in about two minutes"
        }
        EventKind::RebalanceRecommendation => {
            "spot rebalance recommendation: the instance is at elevated risk of interruption"
        }
        EventKind::ScheduledChange => {
            "scheduled maintenance (AWS Health): the instance will be stopped or retired"
        }
        EventKind::Stopping => "the instance is stopping",
        EventKind::Terminating => "the instance is shutting down",
    }
}

/// Publishes an Event with `reason`/`message` on `target`'s claim and node; failures are
/// logged (an Event is a courtesy).
async fn tell<P: CloudProvider>(
    ctx: &Context<P>,
    target: &Target,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    if let Err(e) = publish_on_claim(&ctx.client, &target.claim, kind, reason, message).await {
        tracing::debug!(error = %e, "interruption event not published");
    }
    if let Some(node) = &target.node {
        if let Err(e) = publish_on_node(&ctx.client, node, kind, reason, message).await {
            tracing::debug!(error = %e, "interruption event not published");
        }
    }
}

/// Handles `messages` (one receive) at `now`: one outcome per message, in order. Only
/// messages with an `Ok` outcome are to be deleted.
pub async fn handle<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &Memory,
    messages: &[Message],
    now: Instant,
) -> Vec<Result<Outcome, InterruptionError>> {
    let claims = ctx.state.claims();
    let nodes = ctx.state.nodes.state();
    let provisioners = ctx.state.provisioners.state();
    let owned = Owned::new(&claims, &nodes);

    let mut outcomes: Vec<Option<Result<Outcome, InterruptionError>>> =
        messages.iter().map(|_| None).collect();
    // Per message: the claims it acts on, and how.
    let mut acting: Vec<(usize, EventKind, Action, Vec<String>)> = Vec::new();
    let mut notices: Vec<(String, Target, EventKind, String)> = Vec::new();
    let mut victims: Vec<Victim> = Vec::new();
    let mut victim_of: Vec<usize> = Vec::new();

    for (i, m) in messages.iter().enumerate() {
        let event = match &m.body {
            Err(bad) => {
                ctx.metrics.interruption_message(bad.reason.as_str());
                tracing::warn!(message_id = %m.message_id, reason = bad.reason.as_str(), detail = %bad.detail,
                    "interruption message is not an event joiner acts on; deleting it");
                outcomes[i] = Some(Ok(Outcome::Rejected(bad.reason)));
                continue;
            }
            Ok(e) => e,
        };
        ctx.metrics.interruption_message(event.kind.as_str());
        // Claimed before anything is done: a second delivery of the event, received by
        // another worker meanwhile, is a duplicate.
        if !memory.claim(&event.id, now) {
            outcomes[i] = Some(Ok(Outcome::Rejected(Rejected::Duplicate)));
            continue;
        }
        let mut reasons = Vec::new();
        let mut mine: Vec<String> = Vec::new();
        let mut action = Action::Notify;
        for id in &event.instance_ids {
            let target = match owned.target(id, event.time) {
                Ok(t) => t,
                Err(r) => {
                    reasons.push(r);
                    continue;
                }
            };
            let name = target.claim.name().to_string();
            let taken = victims.iter().any(|v| v.target.claim.name() == name)
                || notices.iter().any(|(_, t, _, _)| t.claim.name() == name);
            if taken {
                reasons.push(Rejected::Duplicate);
                continue;
            }
            let replaces = provisioners
                .iter()
                .find(|p| p.name() == target.claim.spec.provisioner_name)
                .is_some_and(|p| p.rebalance_replaces());
            action = event.kind.action(replaces);
            // A node another worker is replacing (a rebalance recommendation and a spot
            // warning for one instance, received apart) is replaced once.
            if matches!(action, Action::Replace { .. }) && !memory.claim(&claim_key(&name), now) {
                reasons.push(Rejected::Duplicate);
                continue;
            }
            match action {
                Action::Notify => {
                    let why = format!(
                        "{} (event {}); Provisioner {} only notifies (spec.interruption.rebalance: Notify)",
                        describe(event.kind),
                        event.id,
                        target.claim.spec.provisioner_name
                    );
                    notices.push((m.message_id.clone(), target, event.kind, why));
                }
                Action::Replace { .. } => {
                    victims.push(Victim {
                        target,
                        kind: event.kind,
                    });
                    victim_of.push(i);
                }
            }
            mine.push(name);
        }
        if mine.is_empty() {
            let reason = strongest(&reasons);
            tracing::debug!(message_id = %m.message_id, event = %event.id, kind = event.kind.as_str(),
                reason = reason.as_str(), "interruption event needs no action; deleting it");
            outcomes[i] = Some(Ok(Outcome::Rejected(reason)));
        } else {
            acting.push((i, event.kind, action, mine));
        }
    }

    let told = notices.iter().map(|(message_id, target, kind, why)| async move {
        tracing::info!(message_id = %message_id, claim = %target.claim.name(), kind = kind.as_str(), "{why}");
        tell(ctx, target, EventType::Normal, kind.event_reason(), why).await;
        ctx.metrics.interruption_action(kind.as_str(), "notify");
    });
    join_all(told).await;

    if !victims.is_empty() {
        let names = replace::claim_names(&victims);
        match replace(ctx, &victims).await {
            Ok(done) => {
                let with = if done.replacements.is_empty() {
                    "its pods fit on the other nodes".to_string()
                } else {
                    format!("replacement {} launched", done.replacements.join(", "))
                };
                tracing::info!(claims = ?names, replacements = ?done.replacements,
                    unplaced = done.unplaced.len(), "interrupted nodes replaced; draining them");
                let notes = victims.iter().map(|v| {
                    let message = format!("{}; {with}; draining the node", describe(v.kind));
                    async move {
                        tell(
                            ctx,
                            &v.target,
                            EventType::Warning,
                            v.kind.event_reason(),
                            &message,
                        )
                        .await;
                        ctx.metrics.interruption_action(v.kind.as_str(), "replace");
                    }
                });
                join_all(notes).await;
            }
            Err(e) => {
                tracing::warn!(claims = ?names, error = %e,
                    "interrupted nodes not replaced; their messages come back and are tried again");
                for &slot in &victim_of {
                    outcomes[slot] = Some(Err(InterruptionError::Replacement {
                        claims: names.join(", "),
                        reason: e.to_string(),
                    }));
                }
            }
        }
    }

    for (i, kind, action, claims) in acting {
        if outcomes[i].is_some() {
            // Failed above: the message comes back and is handled then.
            if let Ok(event) = &messages[i].body {
                memory.release(&event.id);
            }
            if matches!(action, Action::Replace { .. }) {
                for claim in &claims {
                    memory.release(&claim_key(claim));
                }
            }
            continue;
        }
        outcomes[i] = Some(Ok(Outcome::Acted {
            kind,
            action: action_word(action),
            claims,
        }));
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Ok(Outcome::Rejected(Rejected::Ignored))))
        .collect()
}

/// What one receive came to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchReport {
    /// Messages received.
    pub received: usize,
    /// Messages deleted.
    pub deleted: usize,
    /// Messages left in the queue (handling or delete failed): they come back.
    pub kept: usize,
    /// Each message's outcome, by message ID (`Err` holds why it was kept).
    pub outcomes: Vec<(String, Result<Outcome, String>)>,
}

/// One receive from `queue`, handled, and the handled messages deleted.
pub async fn batch<P: CloudProvider, Q: InterruptionQueue>(
    ctx: &Context<P>,
    queue: &Q,
    memory: &Memory,
) -> Result<BatchReport, Q::Error> {
    let messages = queue.receive().await?;
    if messages.is_empty() {
        return Ok(BatchReport::default());
    }
    let receipts: Vec<String> = messages.iter().map(|m| m.receipt.clone()).collect();
    let outcomes = {
        let work = handle(ctx, memory, &messages, Instant::now());
        tokio::pin!(work);
        tokio::select! {
            outcomes = &mut work => outcomes,
            never = keep_invisible(queue, &receipts) => match never {},
        }
    };
    let handled: Vec<String> = messages
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| o.is_ok())
        .map(|(m, _)| m.receipt.clone())
        .collect();
    let answers = if handled.is_empty() {
        Vec::new()
    } else {
        match queue.delete(&handled).await {
            Ok(a) => a,
            // The call failed as a whole: every handled message comes back and is then
            // answered as a duplicate.
            Err(e) => vec![Some(e.to_string()); handled.len()],
        }
    };
    let mut answers = answers.into_iter();
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    let outcomes: Vec<(String, Result<Outcome, String>)> = messages
        .iter()
        .zip(outcomes)
        .map(|(m, outcome)| match outcome {
            Err(e) => {
                tracing::warn!(message_id = %m.message_id, error = %e, "interruption message kept; it comes back after the visibility timeout");
                (m.message_id.clone(), Err(e.to_string()))
            }
            Ok(o) => match answers.next().flatten() {
                None => {
                    if let Outcome::Rejected(r) = &o {
                        ctx.metrics.interruption_rejected(r.as_str());
                    }
                    ctx.metrics.interruption_deleted.inc();
                    if let Some(sent) = m.sent_at_ms {
                        ctx.metrics
                            .interruption_latency
                            .observe((now_ms - sent).max(0) as f64 / 1000.0);
                    }
                    (m.message_id.clone(), Ok(o))
                }
                Some(why) => {
                    tracing::warn!(message_id = %m.message_id, error = %why, "interruption message not deleted; it comes back and is answered as a duplicate");
                    (m.message_id.clone(), Err(format!("delete failed: {why}")))
                }
            },
        })
        .collect();
    let deleted = outcomes.iter().filter(|(_, o)| o.is_ok()).count();
    Ok(BatchReport {
        received: messages.len(),
        deleted,
        kept: messages.len() - deleted,
        outcomes,
    })
}

/// Extends the visibility of the messages with `receipts` every half visibility timeout, for
/// as long as it is polled (their handling runs): a message in work never comes back to
/// another worker. A failed extension is logged; the message may then come back, and is
/// answered as a duplicate.
async fn keep_invisible<Q: InterruptionQueue>(queue: &Q, receipts: &[String]) -> Infallible {
    let period = (queue.visibility() / 2).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(period).await;
        if let Err(e) = queue.extend(receipts).await {
            tracing::warn!(error = %e, messages = receipts.len(),
                "interruption messages in work not kept invisible; they may be received again");
        }
    }
}

/// The wait after `failures` failed attempts in a row.
pub fn backoff(failures: u32) -> Duration {
    MIN_BACKOFF
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
        .min(MAX_BACKOFF)
}

/// Sleeps `wait` unless `stop` comes first (then false).
async fn pause(wait: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}

/// Calls `connect` until it gives a queue, waiting [`backoff`] between attempts; `None` when
/// `stop` came first. Every failure is logged with the queue's error (which names the queue and
/// what to fix) — at error level the first time, then as a warning.
pub async fn connect<Q, E, F, Fut>(mut connect: F, stop: &CancellationToken) -> Option<Q>
where
    E: CloudError,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Q, E>>,
{
    let mut failures = 0u32;
    loop {
        let attempt = tokio::select! {
            _ = stop.cancelled() => return None,
            a = connect() => a,
        };
        match attempt {
            Ok(q) => {
                if failures > 0 {
                    tracing::info!(attempts = failures + 1, "interruption queue reached");
                }
                return Some(q);
            }
            Err(e) => {
                failures += 1;
                let wait = backoff(failures);
                if failures == 1 {
                    tracing::error!(error = %e, kind = ?e.kind(), retry_in = ?wait, "interruption queue unusable; interruptions are not handled until it is (provisioning goes on)");
                } else {
                    tracing::warn!(error = %e, retry_in = ?wait, attempts = failures, "interruption queue still unusable");
                }
                if !pause(wait, stop).await {
                    return None;
                }
            }
        }
    }
}

/// One worker: receives and handles batches until `stop`, backing off while the queue fails.
/// Each receive, and each wait after a failure, is announced to the liveness watchdog under
/// `name`.
async fn worker<P: CloudProvider, Q: InterruptionQueue>(
    ctx: &Context<P>,
    queue: &Q,
    memory: &Memory,
    stop: &CancellationToken,
    name: &'static str,
) {
    let mut failures = 0u32;
    loop {
        ctx.metrics
            .passes
            .tick(name, LONG_POLL, crate::metrics::PASS_STALL);
        let result = tokio::select! {
            _ = stop.cancelled() => return,
            r = batch(ctx, queue, memory)
                .instrument(tracing::debug_span!("reconcile", controller = "interruption")) => r,
        };
        match result {
            Ok(_) => failures = 0,
            Err(e) => {
                failures += 1;
                ctx.metrics.reconcile_failed("interruption");
                let wait = if e.kind() == CloudErrorKind::Throttled {
                    backoff(failures + 2)
                } else {
                    backoff(failures)
                };
                tracing::warn!(error = %e, retry_in = ?wait, "interruption queue receive failed");
                ctx.metrics
                    .passes
                    .tick(name, wait, crate::metrics::PASS_STALL);
                if !pause(wait, stop).await {
                    return;
                }
            }
        }
    }
}

/// Runs [`WORKERS`] receive loops on `queue` until `stop` is cancelled.
pub async fn run<P: CloudProvider, Q: InterruptionQueue>(
    ctx: Arc<Context<P>>,
    queue: Arc<Q>,
    stop: CancellationToken,
) {
    let memory = Memory::default();
    let workers = WORKER_NAMES
        .iter()
        .map(|name| worker(&ctx, queue.as_ref(), &memory, &stop, name));
    join_all(workers).await;
    tracing::info!("interruption consumer stopped");
}

/// Reaches the queue with `connect` (retrying, see [`connect`]), then [`run`]s on it.
pub async fn run_connecting<P, Q, E, F, Fut>(
    ctx: Arc<Context<P>>,
    connector: F,
    stop: CancellationToken,
) where
    P: CloudProvider,
    Q: InterruptionQueue,
    E: CloudError,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Q, E>>,
{
    if let Some(queue) = connect(connector, &stop).await {
        tracing::info!("interruption consumer started");
        run(ctx, Arc::new(queue), stop).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(30), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
