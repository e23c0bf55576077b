//! A Provisioner's status: `Ready`, and the capacity its nodes hold now (`status.resources`,
//! what its limits are compared against).
//!
//! `Ready=False` reasons, in the order they are checked: [`INVALID_SPEC`] (the spec fails the
//! validation the simulation applies), [`NODE_TEMPLATE_NOT_FOUND`], [`NODE_TEMPLATE_NOT_READY`],
//! [`NO_INSTANCE_TYPE_MATCHES`] (no catalog type satisfies the requirements, in the zones of its
//! NodeTemplate's subnets). Each message starts with the field to look at.

use std::collections::BTreeMap;
use std::sync::Arc;

use joiner_apis::condition::{self, Condition};
use joiner_apis::convert;
use joiner_apis::{NodeTemplate, Provisioner, ProvisionerStatus};
use joiner_core::instance_type::offering_allowed;
use joiner_core::{labels, resources, InstanceType, Requirements, Resources};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;

use super::write::READY_REASON;
use super::write::{patch_status, ready_condition, status_patch, with_ready, Outcome, StatusError};

/// The spec does not validate (`to_core` fails).
pub const INVALID_SPEC: &str = "InvalidSpec";
/// `spec.providerRef` is missing or names no NodeTemplate.
pub const NODE_TEMPLATE_NOT_FOUND: &str = "NodeTemplateNotFound";
/// The NodeTemplate exists but is not `Ready`.
pub const NODE_TEMPLATE_NOT_READY: &str = "NodeTemplateNotReady";
/// No instance type in the catalog satisfies the requirements.
pub const NO_INSTANCE_TYPE_MATCHES: &str = "NoInstanceTypeMatches";

const KIND: &str = "Provisioner";

/// What a Provisioner's status is computed from.
pub struct Inputs<'a> {
    /// The NodeTemplates (with their latest status).
    pub node_templates: &'a [NodeTemplate],
    /// Every Node; those labelled `joiner.sh/provisioner-name: <name>` count as its own.
    pub nodes: &'a [Arc<Node>],
    /// The cloud's instance types for the Provisioner; `None` when they could not be read (the
    /// Ready condition is then left as it is once only the type check is left).
    pub catalog: Option<&'a [InstanceType]>,
}

/// Whether the Provisioner can launch: `(ready, reason, message)`; `None` when the answer
/// depends on a catalog that could not be read.
pub fn readiness(prov: &Provisioner, inputs: &Inputs<'_>) -> Option<(bool, &'static str, String)> {
    let core = match prov.to_core() {
        Ok(core) => core,
        Err(e) => {
            return Some((
                false,
                INVALID_SPEC,
                format!("{}: {}", e.field(), e.reason()),
            ))
        }
    };
    let Some(nt_name) = prov.spec.provider_ref.as_ref().map(|r| r.name.as_str()) else {
        return Some((
            false,
            NODE_TEMPLATE_NOT_FOUND,
            "spec.providerRef: not set; nodes are launched with the NodeTemplate it names"
                .to_string(),
        ));
    };
    let Some(nt) = inputs.node_templates.iter().find(|n| n.name() == nt_name) else {
        return Some((
            false,
            NODE_TEMPLATE_NOT_FOUND,
            format!("spec.providerRef.name: NodeTemplate `{nt_name}` not found"),
        ));
    };
    let nt_conditions = nt
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    match condition::find(nt_conditions, condition::READY) {
        Some(c) if c.status == "True" => {}
        Some(c) => {
            return Some((
                false,
                NODE_TEMPLATE_NOT_READY,
                format!(
                    "spec.providerRef.name: NodeTemplate `{nt_name}` is not ready: {}: {}",
                    c.reason, c.message
                ),
            ))
        }
        None => {
            return Some((
                false,
                NODE_TEMPLATE_NOT_READY,
                format!("spec.providerRef.name: NodeTemplate `{nt_name}` is not resolved yet"),
            ))
        }
    }

    // The simulation's own filter: the node requirements (with the template's subnet zones)
    // against each type's labels and offerings. Availability is ignored: a type without
    // capacity today is still one the Provisioner allows.
    let mut narrowed = [core];
    convert::apply_node_templates(&mut narrowed, inputs.node_templates);
    let [core] = narrowed;
    let reqs = core.node_requirements();
    let catalog = inputs.catalog?;
    let mut matching = 0usize;
    let mut excluded: BTreeMap<String, usize> = BTreeMap::new();
    for t in catalog {
        match excluded_by(t, &reqs) {
            None => matching += 1,
            Some(key) => *excluded.entry(key.to_string()).or_default() += 1,
        }
    }
    if matching == 0 {
        let why: Vec<String> = excluded
            .iter()
            .map(|(k, n)| format!("{k} excludes {n}"))
            .collect();
        let detail = if why.is_empty() {
            "the catalog is empty".to_string()
        } else {
            why.join(", ")
        };
        return Some((
            false,
            NO_INSTANCE_TYPE_MATCHES,
            format!(
                "spec.requirements: none of the {} instance types in the catalog satisfies the \
                 requirements (with the zones of NodeTemplate `{nt_name}`): {detail}",
                catalog.len()
            ),
        ));
    }
    Some((
        true,
        READY_REASON,
        format!(
            "NodeTemplate `{nt_name}` is ready; {matching} of {} instance types match",
            catalog.len()
        ),
    ))
}

/// The requirement key that rules `t` out, if any. Zone and capacity type are both checked
/// against the offerings, so an offering conflict is put on the zone when no offering is in an
/// allowed zone, and on the capacity type otherwise: the message then names the key to change.
fn excluded_by<'a>(t: &InstanceType, reqs: &'a Requirements) -> Option<&'a str> {
    match t.first_label_conflict(reqs) {
        Some(key) if key == labels::ZONE || key == labels::CAPACITY_TYPE => {
            let zone = reqs.get(labels::ZONE);
            let in_zone = t
                .offerings
                .iter()
                .any(|o| zone.is_none_or(|r| r.allows(&o.zone)));
            Some(if in_zone {
                labels::CAPACITY_TYPE
            } else {
                labels::ZONE
            })
        }
        Some(key) => Some(key),
        None if t.offerings.iter().any(|o| offering_allowed(o, reqs)) => None,
        None => Some("offerings"),
    }
}

/// The summed capacity of the Nodes labelled `joiner.sh/provisioner-name: <name>`: cpu, memory,
/// ephemeral-storage and pods always (zero when it has no node), extended resources when
/// present, and `nodes`, their count (what `limits.resources.nodes` caps). A Node whose
/// capacity cannot be read is left out of the sums (and logged) but still counted.
pub fn resources(name: &str, nodes: &[Arc<Node>]) -> BTreeMap<String, Quantity> {
    let mut total = Resources::default();
    let mut count = 0;
    for node in nodes {
        let owned = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::PROVISIONER_NAME))
            .is_some_and(|p| p == name);
        if !owned {
            continue;
        }
        count += 1;
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        match convert::node(node, node_name) {
            Ok(n) => total.add(&n.capacity),
            Err(e) => tracing::warn!(node = %node_name, error = %e, "node capacity unreadable"),
        }
    }
    let mut out = BTreeMap::new();
    for key in ["cpu", "memory", "ephemeral-storage", "pods"] {
        out.insert(
            key.to_string(),
            Quantity(resources::format_amount(key, total.get(key))),
        );
    }
    for (key, value) in total.extended() {
        out.insert(key.clone(), Quantity(value.to_string()));
    }
    out.insert(
        joiner_core::NODES_LIMIT.to_string(),
        Quantity(count.to_string()),
    );
    out
}

/// The status `prov` should have, stamped `now` where the Ready condition flips.
pub fn desired(prov: &Provisioner, inputs: &Inputs<'_>, now: Timestamp) -> ProvisionerStatus {
    let current = prov.status.clone().unwrap_or_default();
    let conditions: &[Condition] = &current.conditions;
    let conditions = match readiness(prov, inputs) {
        Some((ready, reason, message)) => with_ready(
            conditions,
            ready_condition(
                conditions,
                ready,
                reason,
                message,
                prov.metadata.generation,
                now,
            ),
        ),
        None => current.conditions.clone(),
    };
    ProvisionerStatus {
        conditions,
        resources: resources(prov.name(), inputs.nodes),
        // Written by the warm-pool reconciler; carried over so this one never touches it.
        warm_pool: current.warm_pool.clone(),
    }
}

/// Writes the status `inputs` call for on `prov` (a merge patch of
/// `/apis/joiner.sh/v1alpha1/provisioners/<name>/status`), unless the status already says it.
pub async fn reconcile_one(
    client: &kube::Client,
    prov: &Provisioner,
    inputs: &Inputs<'_>,
    now: Timestamp,
) -> Result<Outcome<Provisioner>, StatusError> {
    let want = desired(prov, inputs, now);
    if prov
        .status
        .as_ref()
        .unwrap_or(&ProvisionerStatus::default())
        == &want
    {
        return Ok(Outcome::Unchanged);
    }
    let mut body = status_patch(KIND, prov.name(), &want, &["conditions", "resources"])?;
    // status.warmPool is the warm-pool reconciler's: a merge patch without it leaves it as
    // that reconciler last wrote it, even when this read of the Provisioner was older.
    if let Some(status) = body.get_mut("status").and_then(|s| s.as_object_mut()) {
        status.remove("warmPool");
    }
    let outcome = patch_status(client, KIND, prov.name(), body).await?;
    if outcome.is_patched() {
        if let Some(c) = condition::find(&want.conditions, condition::READY) {
            tracing::info!(
                provisioner = %prov.name(),
                ready = %c.status,
                reason = %c.reason,
                condition_message = %c.message,
                "Provisioner status written"
            );
        }
    }
    Ok(outcome)
}
