//! Status of Provisioners and NodeTemplates: the `Ready` condition that tells a person why a
//! Provisioner launches nothing (no subnets, no AMI, no instance type matches, ...) before a
//! pod waits on it, the NodeTemplate's resolved subnets, security groups and AMIs, and the
//! capacity a Provisioner's nodes hold (read against its limits).
//!
//! What a NodeTemplate resolves to is the cloud's answer ([`NodeTemplateResolver`], handed in
//! by the composition root); the conditions, their reasons and the writes are this module's,
//! so it knows no cloud.
//!
//! Writes are merge patches of the status subresource, sent only when the status changes.
//! A 404 (the object was deleted meanwhile) ends its reconcile quietly; a 409 is retried on the
//! next pass.

pub mod node_template;
pub mod provisioner;
pub mod write;

pub use write::{ready_condition, with_ready, Outcome, StatusError, READY_REASON};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use joiner_apis::{NodeTemplate, NodeTemplateResolver};
use joiner_core::CloudProvider;
use k8s_openapi::jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;

/// How often the stores are read: a new or edited Provisioner is picked up (and its status
/// written) within this.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How often a NodeTemplate is resolved again when it did not change: a subnet or AMI added
/// or removed in the account shows up within this (discovery caches answers for a minute).
pub const RESOLVE_INTERVAL: Duration = Duration::from_secs(180);
/// How soon a NodeTemplate whose resolution failed for a reason outside it (an AWS call, a
/// conflict) is tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(30);
/// The reconciler's name in metrics and logs.
pub const CONTROLLER: &str = "status";

/// When a NodeTemplate was last resolved, and whether that settled its status.
#[derive(Clone, Debug)]
struct Resolution {
    generation: Option<i64>,
    at: Instant,
    settled: bool,
}

/// What [`run`] remembers between passes.
#[derive(Default)]
struct Memory {
    /// Per NodeTemplate.
    resolved: HashMap<String, Resolution>,
}

/// Runs until `stop`: every [`POLL_INTERVAL`] resolves the NodeTemplates that changed (or
/// whose last resolution is [`RESOLVE_INTERVAL`] old) with `resolver` and writes their status,
/// then writes every Provisioner's status (readiness and resources). Failures are logged and
/// counted in `joiner_reconcile_errors{controller="status"}`; the loop goes on.
pub async fn run<P: CloudProvider, R: NodeTemplateResolver>(
    ctx: Arc<Context<P>>,
    resolver: Arc<R>,
    stop: CancellationToken,
) {
    let mut memory = Memory::default();
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ctx.metrics
            .passes
            .tick(CONTROLLER, POLL_INTERVAL, crate::metrics::PASS_STALL);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        ctx.metrics
            .passes
            .tick(CONTROLLER, Duration::ZERO, crate::metrics::PASS_STALL);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = pass(&ctx, resolver.as_ref(), &mut memory) => {}
        }
    }
}

/// One pass of [`run`].
async fn pass<P: CloudProvider, R: NodeTemplateResolver>(
    ctx: &Context<P>,
    resolver: &R,
    memory: &mut Memory,
) {
    let (client, state, metrics) = (&ctx.client, &ctx.state, &ctx.metrics);
    let provisioners = state.provisioners.state();
    let node_templates = state.node_templates.state();

    memory
        .resolved
        .retain(|name, _| node_templates.iter().any(|n| n.name() == name));
    let mut current: BTreeMap<String, NodeTemplate> = node_templates
        .iter()
        .map(|n| (n.name().to_string(), NodeTemplate::clone(n)))
        .collect();
    for nt in &node_templates {
        let name = nt.name().to_string();
        let generation = nt.metadata.generation;
        let due = memory.resolved.get(&name).is_none_or(|r| {
            let every = if r.settled {
                RESOLVE_INTERVAL
            } else {
                RETRY_INTERVAL
            };
            r.generation != generation || r.at.elapsed() >= every
        });
        if !due {
            continue;
        }
        let span = tracing::info_span!("reconcile", controller = CONTROLLER, nodetemplate = %name);
        let (settled, transient) = async {
            let resolved = node_template::resolve(resolver, nt).await;
            let transient = resolved.as_ref().is_err_and(|e| e.failure.is_none());
            if let Err(err) = &resolved {
                tracing::warn!(error = %err, "NodeTemplate not resolved");
            }
            let settled =
                match node_template::reconcile_one(client, nt, &resolved, Timestamp::now()).await {
                    Ok(Outcome::Patched(stored)) => {
                        current.insert(name.clone(), *stored);
                        true
                    }
                    Ok(Outcome::Unchanged | Outcome::Gone) => true,
                    Ok(Outcome::Conflict) => false,
                    Err(err) => {
                        metrics.reconcile_failed(CONTROLLER);
                        tracing::warn!(error = %err, "NodeTemplate status not written");
                        false
                    }
                };
            (settled, transient)
        }
        .instrument(span)
        .await;
        memory.resolved.insert(
            name,
            Resolution {
                generation,
                at: Instant::now(),
                settled: settled && !transient,
            },
        );
    }

    let templates: Vec<NodeTemplate> = current.into_values().collect();
    let nodes = state.nodes.state();
    for prov in &provisioners {
        let span =
            tracing::info_span!("reconcile", controller = CONTROLLER, provisioner = %prov.name());
        // The cloud's catalog for this Provisioner; when it cannot be read, only the question
        // it answers (does any type match?) is left open.
        let catalog = ctx.cloud.instance_types(prov.name()).await;
        if let Err(err) = &catalog {
            tracing::debug!(provisioner = %prov.name(), error = %err, "catalog unreadable for the Provisioner");
        }
        let inputs = provisioner::Inputs {
            node_templates: &templates,
            nodes: &nodes,
            catalog: catalog.as_deref().ok(),
        };
        let written = provisioner::reconcile_one(client, prov, &inputs, Timestamp::now())
            .instrument(span)
            .await;
        if let Err(err) = written {
            metrics.reconcile_failed(CONTROLLER);
            tracing::warn!(provisioner = %prov.name(), error = %err, "Provisioner status not written");
        }
    }
}
