//! Provisioning: capacity for the pods the kube-scheduler could not place.
//!
//! The run loop watches the pending pods ([`crate::state::is_provisionable`]) and batches them
//! ([`batcher`]). When a window closes, [`provision_batch`] simulates the snapshot (existing
//! nodes and in-flight NodeClaims first, so a second batch never buys what the first already
//! bought), writes a NodeClaim per new node ([`claims`]) and launches it ([`launch`]); pods are
//! told where they will go ([`notices`]). [`launch_pending_claims`] finishes launches a crash or
//! an error interrupted, without leaking or duplicating an instance.

pub mod batcher;
pub mod notices;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use joiner_apis::{NodeClaim, Provisioner};
use joiner_core::scheduling::{simulate_in_place, Options, Plan};
use joiner_core::{labels, CloudProvider, InstanceType};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;
pub use crate::launcher::ProvisioningError;
use crate::launcher::{claims, launch};
use crate::state::{is_provisionable, ClusterState};

use crate::launcher::{launch_claim, Launch};
pub use batcher::Batcher;

/// Claims of one batch written and launched at once.
pub const LAUNCH_CONCURRENCY: usize = 16;

/// How often the run loop looks at the pending pods.
const POLL: Duration = Duration::from_millis(100);
/// How often claims that are not launched are looked at.
const LAUNCH_INTERVAL: Duration = Duration::from_secs(1);
/// A claim launched this recently is not launched again while the store catches up with its
/// status.
const RECENTLY_LAUNCHED: Duration = Duration::from_secs(30);
/// First retry delay of a failed launch; doubled per failure up to [`BACKOFF_MAX`].
const BACKOFF_BASE: Duration = Duration::from_secs(5);
/// Longest retry delay of a failed launch.
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What the provisioning loop remembers between passes: the Events already published, launch
/// backoffs, and the claims just launched.
#[derive(Debug, Default)]
pub struct Memory {
    published: notices::Published,
    backoff: HashMap<String, (u32, Instant)>,
    recent: HashMap<String, Instant>,
}

impl Memory {
    fn launched(&mut self, claim: &str, now: Instant) {
        self.backoff.remove(claim);
        self.recent.insert(claim.to_string(), now);
    }

    fn failed(&mut self, claim: &str, now: Instant) {
        let attempts = self.backoff.get(claim).map(|(n, _)| n + 1).unwrap_or(1);
        let delay = BACKOFF_BASE
            .saturating_mul(2u32.saturating_pow(attempts.saturating_sub(1)))
            .min(BACKOFF_MAX);
        self.backoff
            .insert(claim.to_string(), (attempts, now + delay));
    }

    fn may_launch(&self, claim: &str, now: Instant) -> bool {
        let recent = self
            .recent
            .get(claim)
            .is_some_and(|t| now.duration_since(*t) < RECENTLY_LAUNCHED);
        let waiting = self.backoff.get(claim).is_some_and(|(_, next)| now < *next);
        !recent && !waiting
    }

    /// The retry time of a claim whose launch failed, if it is backing off.
    pub fn next_attempt(&self, claim: &str) -> Option<Instant> {
        self.backoff.get(claim).map(|(_, t)| *t)
    }
}

/// What one batch did.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Pods pending when the batch was planned.
    pub pending: usize,
    /// The simulation's plan.
    pub plan: Plan,
    /// The NodeClaims written, as the API server stored them.
    pub claims: Vec<NodeClaim>,
    /// The launch of each claim written.
    pub launches: Vec<Launch>,
    /// Claims that could not be written or launched; the batch went on with the others.
    pub errors: Vec<ProvisioningError>,
    /// Events published.
    pub events: usize,
    /// Objects the snapshot or catalog had to leave out.
    pub warnings: Vec<String>,
}

/// `namespace/name` of every provisionable pod in the store.
pub fn pending_keys(state: &ClusterState) -> HashSet<String> {
    state
        .pods
        .state()
        .iter()
        .filter(|p| is_provisionable(p))
        .map(|p| p.key())
        .collect()
}

/// Plans the pending pods and carries the plan out: a NodeClaim per new node, written first,
/// then launched; Events on the pods. Fails as a whole only when nothing can be planned (no
/// Provisioner with a catalog); a claim that fails is reported in
/// [`BatchOutcome::errors`] and the batch goes on.
pub async fn provision_batch<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &mut Memory,
) -> Result<BatchOutcome, ProvisioningError> {
    let mut outcome = BatchOutcome::default();
    let pending = pending_keys(&ctx.state);
    outcome.pending = pending.len();
    ctx.metrics.pods_pending.set(pending.len() as i64);
    memory.published.retain_pending(&pending);
    if pending.is_empty() {
        return Ok(outcome);
    }

    let mut provisioners: Vec<Arc<Provisioner>> = ctx.state.provisioners.state();
    provisioners.sort_by(|a, b| a.name().cmp(b.name()));
    let mut catalogs = launch::Catalogs::default();
    let mut catalog: Vec<InstanceType> = Vec::new();
    let mut type_names: HashSet<String> = HashSet::new();
    let mut unusable: BTreeMap<String, String> = BTreeMap::new();
    for prov in &provisioners {
        // Deleted or not Ready: the snapshot leaves it out; its catalog is not needed.
        if let Some(why) = prov.not_planned() {
            unusable.insert(
                prov.name().to_string(),
                format!("Provisioner {}: {why}", prov.name()),
            );
            continue;
        }
        match catalogs.get(ctx, prov.name()).await {
            Ok(types) => {
                for t in types {
                    if type_names.insert(t.name.clone()) {
                        catalog.push(t.clone());
                    }
                }
            }
            Err(e) => {
                tracing::warn!(provisioner = %prov.name(), error = %e, "Provisioner left out of the batch");
                outcome.warnings.push(e.to_string());
                unusable.insert(prov.name().to_string(), e.to_string());
            }
        }
    }

    // Held until this batch's claims are written and remembered, not across the launches.
    let planning = ctx.state.created.planning().await;
    let (mut snap, warnings) = ctx.state.snapshot_with_catalog(&catalog);
    outcome.warnings.extend(warnings);
    snap.provisioners
        .retain(|p| !unusable.contains_key(&p.name));
    if snap.provisioners.is_empty() {
        let reasons = if unusable.is_empty() {
            "no Provisioner exists (or none is valid)".to_string()
        } else {
            unusable.values().cloned().collect::<Vec<_>>().join("; ")
        };
        return Err(ProvisioningError::NoUsableProvisioner {
            pending: pending.len(),
            reasons,
        });
    }

    let start = Instant::now();
    let plan = simulate_in_place(&mut snap, &catalog, &Options::default());
    ctx.metrics
        .scheduling_duration
        .observe(start.elapsed().as_secs_f64());
    let placed: usize = plan.new_nodes.iter().map(|n| n.pods.len()).sum::<usize>()
        + plan
            .existing_nodes
            .iter()
            .map(|n| n.pods.len())
            .sum::<usize>();
    ctx.metrics.pods_scheduled.inc_by(placed as u64);
    tracing::info!(
        pending = pending.len(),
        new_nodes = plan.new_nodes.len(),
        unschedulable = plan.unschedulable.len(),
        "batch planned"
    );

    let in_flight: HashSet<String> = snap
        .nodes
        .iter()
        .filter(|n| n.labels.get(labels::NODECLAIM) == Some(&n.name))
        .map(|n| n.name.clone())
        .collect();
    // Every new node's claim is written, then launched, concurrently (bounded): a 100-node
    // batch is not 100 CreateFleet round trips in a row. Each claim enters the cluster state
    // as soon as it is written, so a batch planned before the watch delivers it sees its
    // capacity; the next plan waits only for the writes, not for the launches.
    let mut claim_of_node: BTreeMap<String, String> = BTreeMap::new();
    let catalog = catalog.as_slice();
    let writes: Vec<_> = plan
        .new_nodes
        .iter()
        .map(|node| {
            let prov = provisioners
                .iter()
                .find(|p| p.name() == node.provisioner)
                .cloned();
            let nominated = crate::nominations::entries(&snap, &node.pod_indices);
            async move {
                let Some(prov) = prov else {
                    return (node, Err(ProvisioningError::UnknownProvisioner {
                        provisioner: node.provisioner.clone(),
                    }));
                };
                let stored = claims::create_recorded(ctx, &prov, node, &nominated).await;
                if let Ok(stored) = &stored {
                    tracing::info!(claim = %stored.name(), provisioner = %prov.name(),
                        instance_type = %node.instance_type, pods = node.pods.len(), "NodeClaim created");
                }
                (node, stored)
            }
        })
        .collect();
    let written: Vec<_> = futures::stream::iter(writes)
        .buffered(LAUNCH_CONCURRENCY)
        .inspect(|_| ctx.metrics.passes.progress("provisioning"))
        .collect()
        .await;
    // Pods placed on claims still coming up keep that room in the next snapshots too.
    claims::nominate(
        ctx,
        &crate::nominations::added_by(&snap, &plan.existing_nodes),
    )
    .await;
    drop(planning);
    let launches: Vec<_> = written
        .into_iter()
        .map(|(node, stored)| async move {
            match stored {
                Ok(stored) => {
                    let launched = launch_claim(ctx, &stored, Some(node), catalog).await;
                    (node, Ok((stored, launched)))
                }
                Err(e) => (node, Err(e)),
            }
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(launches)
        .buffered(LAUNCH_CONCURRENCY)
        .inspect(|_| ctx.metrics.passes.progress("provisioning"))
        .collect()
        .await;
    let now = Instant::now();
    for (node, result) in results {
        match result {
            Err(e) => {
                tracing::warn!(provisioner = %node.provisioner, error = %e, "NodeClaim not written");
                outcome.errors.push(e);
            }
            Ok((stored, launched)) => {
                let name = stored.name().to_string();
                claim_of_node.insert(node.name.clone(), name.clone());
                record(memory, &name, &launched, now);
                match launched {
                    Ok(l) => outcome.launches.push(l),
                    Err(e) => {
                        tracing::warn!(claim = %name, error = %e, "launch failed");
                        outcome.errors.push(e);
                    }
                }
                outcome.claims.push(stored);
            }
        }
    }

    let notes = notices::notices(&plan, &claim_of_node, &in_flight);
    outcome.events = notices::publish_all(
        &ctx.client,
        &ctx.state.pods,
        &mut memory.published,
        &notes,
        &in_flight,
    )
    .await;
    outcome.plan = plan;
    Ok(outcome)
}

fn record(
    memory: &mut Memory,
    claim: &str,
    result: &Result<Launch, ProvisioningError>,
    now: Instant,
) {
    match result {
        Ok(Launch::Launched(_)) => memory.launched(claim, now),
        Ok(Launch::Requeued { .. }) => {
            memory.backoff.remove(claim);
        }
        Ok(Launch::Failed { .. }) | Err(_) => memory.failed(claim, now),
    }
}

/// Launches every claim in the store that is not launched, not being deleted, not launched a
/// moment ago by this loop and not backing off: the claims a crash or an error left behind.
/// Each goes through [`launch_claim`], which adopts an instance the cloud already has for it.
pub async fn launch_pending_claims<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &mut Memory,
) -> Vec<Result<Launch, ProvisioningError>> {
    let now = Instant::now();
    memory
        .recent
        .retain(|_, t| now.duration_since(*t) < RECENTLY_LAUNCHED);
    let mut claims: Vec<Arc<NodeClaim>> = ctx
        .state
        .claims()
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none() && !c.is_launched())
        .filter(|c| memory.may_launch(c.name(), now))
        .filter(|c| !ctx.state.created.is_launching(c.name()))
        .collect();
    claims.sort_by(|a, b| a.name().cmp(b.name()));
    // The catalogs first (once per Provisioner), then the launches concurrently, as a batch's:
    // after a failover a hundred claims left unlaunched must not wait on each other's
    // CreateFleet.
    let mut catalogs = launch::Catalogs::default();
    // Provisioner -> why its catalog could not be read.
    let mut unreadable: BTreeMap<String, String> = BTreeMap::new();
    for claim in &claims {
        let provisioner = &claim.spec.provisioner_name;
        if unreadable.contains_key(provisioner) {
            continue;
        }
        if let Err(e) = catalogs.get(ctx, provisioner).await {
            let message = match e {
                ProvisioningError::Catalog { message, .. } => message,
                other => other.to_string(),
            };
            unreadable.insert(provisioner.clone(), message);
        }
    }
    let (catalogs, unreadable) = (&catalogs, &unreadable);
    let steps: Vec<_> = claims
        .iter()
        .map(|claim| async move {
            let provisioner = &claim.spec.provisioner_name;
            let result = match unreadable.get(provisioner) {
                Some(message) => Err(ProvisioningError::Catalog {
                    provisioner: provisioner.clone(),
                    message: message.clone(),
                }),
                None => launch_claim(ctx, claim, None, catalogs.cached(provisioner)).await,
            };
            (claim.name().to_string(), result)
        })
        .collect();
    let launched: Vec<(String, Result<Launch, ProvisioningError>)> = futures::stream::iter(steps)
        .buffered(LAUNCH_CONCURRENCY)
        .inspect(|_| ctx.metrics.passes.progress("provisioning"))
        .collect()
        .await;
    let now = Instant::now();
    launched
        .into_iter()
        .map(|(name, result)| {
            if let Err(e) = &result {
                tracing::warn!(claim = %name, error = %e, "launch failed");
            }
            record(memory, &name, &result, now);
            result
        })
        .collect()
}

/// Waits until every store a batch reads has had its initial list. Planning earlier would miss
/// in-flight NodeClaims (or nodes) not listed yet and buy their capacity a second time.
/// False when a store's writer was dropped before it was filled.
async fn stores_ready(state: &ClusterState) -> bool {
    state.pods.wait_until_ready().await.is_ok()
        && state.nodes.wait_until_ready().await.is_ok()
        && state.node_claims.wait_until_ready().await.is_ok()
        && state.provisioners.wait_until_ready().await.is_ok()
        && state.node_templates.wait_until_ready().await.is_ok()
        && state.daemonsets.wait_until_ready().await.is_ok()
}

/// The provisioning loop: waits for the stores' initial lists, then polls the pending pods
/// every 100 ms, plans a batch when its window closes (and, while pods wait, every
/// `settings.sweep_interval` or right after a claim was given up for capacity), and finishes
/// interrupted launches every second. Returns when `stop`
/// is cancelled; a pass under way is finished first, so no claim is left half-written.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>, stop: CancellationToken) {
    let mut batcher = Batcher::new(ctx.settings.batch_idle, ctx.settings.batch_max);
    let mut memory = Memory::default();
    let mut last_batch = Instant::now();
    let mut last_launch: Option<Instant> = None;
    let mut batch_number: u64 = 0;
    tokio::select! {
        _ = stop.cancelled() => return,
        ready = stores_ready(&ctx.state) => {
            if !ready {
                tracing::warn!("a reflector store was dropped before it was filled; provisioning does not start");
                return;
            }
        }
    }
    tracing::info!("provisioning started");
    loop {
        // Ticked at each poll: a batch stuck on a call that never returns stops the clock.
        ctx.metrics
            .passes
            .tick("provisioning", POLL, crate::metrics::PASS_STALL);
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(POLL) => {}
        }
        let now = Instant::now();
        let pending = pending_keys(&ctx.state);
        let waiting = !pending.is_empty();
        if !waiting {
            // Nothing pending: no batch runs to say so, and the gauge must not keep the last
            // batch's count (alerts on pods pending too long read it).
            ctx.metrics.pods_pending.set(0);
        }
        batcher.observe(pending, now);
        if waiting
            && !batcher.is_open()
            && now.duration_since(last_batch) >= ctx.settings.sweep_interval
        {
            batcher.trigger(now);
        }
        if batcher.close_if_due(now) {
            batch_number += 1;
            last_batch = now;
            let span = tracing::info_span!("provisioning_batch", batch = batch_number);
            match provision_batch(&ctx, &mut memory).instrument(span).await {
                Ok(outcome) => {
                    if outcome
                        .launches
                        .iter()
                        .any(|l| matches!(l, Launch::Requeued { .. }))
                    {
                        batcher.trigger(Instant::now());
                    }
                    if !outcome.errors.is_empty() {
                        ctx.metrics.reconcile_failed("provisioning");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "provisioning batch failed");
                    ctx.metrics.reconcile_failed("provisioning");
                }
            }
        }
        if last_launch.is_none_or(|t| now.duration_since(t) >= LAUNCH_INTERVAL) {
            last_launch = Some(now);
            let span = tracing::info_span!("launch_pending_claims");
            let results = launch_pending_claims(&ctx, &mut memory)
                .instrument(span)
                .await;
            if results
                .iter()
                .any(|r| matches!(r, Ok(Launch::Requeued { .. })))
            {
                batcher.trigger(Instant::now());
            }
            if results.iter().any(Result::is_err) {
                ctx.metrics.reconcile_failed("provisioning");
            }
        }
    }
    tracing::info!("provisioning stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_backoff_doubles_up_to_the_cap_and_success_clears_it() {
        let mut m = Memory::default();
        let t0 = Instant::now();
        assert!(m.may_launch("c", t0));
        m.failed("c", t0);
        assert_eq!(m.next_attempt("c"), Some(t0 + BACKOFF_BASE));
        assert!(!m.may_launch("c", t0 + BACKOFF_BASE - Duration::from_millis(1)));
        assert!(m.may_launch("c", t0 + BACKOFF_BASE));
        m.failed("c", t0);
        assert_eq!(m.next_attempt("c"), Some(t0 + BACKOFF_BASE * 2));
        for _ in 0..20 {
            m.failed("c", t0);
        }
        assert_eq!(m.next_attempt("c"), Some(t0 + BACKOFF_MAX));
        m.launched("c", t0);
        assert_eq!(m.next_attempt("c"), None);
        assert!(
            !m.may_launch("c", t0 + Duration::from_secs(1)),
            "just launched"
        );
        assert!(m.may_launch("c", t0 + RECENTLY_LAUNCHED));
    }
}
