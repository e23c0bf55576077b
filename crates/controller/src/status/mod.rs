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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use joiner_apis::condition::{self, Condition};
use joiner_apis::{NodeTemplate, NodeTemplateResolver};
use joiner_core::CloudProvider;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::Value;
use thiserror::Error;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;
use crate::k8s::codes::{is_conflict, is_not_found};

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

/// The `reason` of a `Ready=True` condition.
pub const READY_REASON: &str = "Ready";

/// Why a status could not be written.
#[derive(Debug, Error)]
pub enum StatusError {
    /// The API server refused the patch (other than 404 and 409) or could not be reached.
    #[error("{kind} `{name}`: patching status: {source}")]
    Patch {
        /// `Provisioner` or `NodeTemplate`.
        kind: &'static str,
        /// The object.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The status could not be turned into JSON (never expected).
    #[error("{kind} `{name}`: encoding status: {source}")]
    Encode {
        /// `Provisioner` or `NodeTemplate`.
        kind: &'static str,
        /// The object.
        name: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
}

/// What a reconcile of one object did.
#[derive(Debug)]
pub enum Outcome<K> {
    /// The status already said this: nothing was sent.
    Unchanged,
    /// The status was patched; the object as the API server stored it.
    Patched(Box<K>),
    /// The object is gone (404): nothing to do.
    Gone,
    /// The API server answered 409: the next pass tries again.
    Conflict,
}

impl<K> Outcome<K> {
    /// True when a patch was sent and stored.
    pub fn is_patched(&self) -> bool {
        matches!(self, Outcome::Patched(_))
    }
}

/// The `Ready` condition to write: `status` with `reason` and `message` for `generation`.
/// `lastTransitionTime` is kept from the current condition when the status does not flip, so it
/// says since when the object has been (un)ready; otherwise it is `now`.
pub fn ready_condition(
    current: &[Condition],
    ready: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if ready { "True" } else { "False" };
    let since = condition::find(current, condition::READY)
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: condition::READY.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// `current` with its `Ready` condition replaced by `ready` (other types kept, in order).
pub fn with_ready(current: &[Condition], ready: Condition) -> Vec<Condition> {
    condition::set(current, ready)
}

/// The merge-patch body for `status`: the status as serialized, with each of `clearable` that
/// serialization left out (an empty list or map) set to `null`, so a value that went away is
/// removed rather than kept by the merge.
pub(crate) fn status_patch<S: serde::Serialize>(
    kind: &'static str,
    name: &str,
    status: &S,
    clearable: &[&str],
) -> Result<Value, StatusError> {
    let mut value = serde_json::to_value(status).map_err(|source| StatusError::Encode {
        kind,
        name: name.to_string(),
        source,
    })?;
    if let Value::Object(map) = &mut value {
        for key in clearable {
            map.entry(key.to_string()).or_insert(Value::Null);
        }
    }
    Ok(serde_json::json!({ "status": value }))
}

/// Sends a merge patch of the status subresource of the cluster-scoped `name`.
pub(crate) async fn patch_status<K>(
    client: &kube::Client,
    kind: &'static str,
    name: &str,
    body: Value,
) -> Result<Outcome<K>, StatusError>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(stored) => Ok(Outcome::Patched(Box::new(stored))),
        Err(e) if is_not_found(&e) => Ok(Outcome::Gone),
        Err(e) if is_conflict(&e) => Ok(Outcome::Conflict),
        Err(source) => Err(StatusError::Patch {
            kind,
            name: name.to_string(),
            source,
        }),
    }
}

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
            .tick(CONTROLLER, POLL_INTERVAL, crate::http::PASS_STALL);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        ctx.metrics
            .passes
            .tick(CONTROLLER, Duration::ZERO, crate::http::PASS_STALL);
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
