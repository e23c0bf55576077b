//! Kubernetes objects (k8s-openapi `Pod`, `PodSpec`, `Node`, `DaemonSet`, and joiner's
//! `NodeClaim` both ways) into the simulation's types.
//!
//! The manifest loader of `joiner plan` and the controller's cluster state both read these
//! objects; one implementation here means a plan computed offline from a cluster dump and the
//! controller's own decision read every field the same way. Errors name the field path inside
//! the object ([`FieldError`]); the caller adds which object (and which file) it was.

mod affinity;
pub mod csi_nodes;
mod daemonsets;
pub mod node_claim;
mod nodes;
pub mod once_pod;
mod pdbs;
mod pods;
mod ports;
mod requests;
mod runtime_class;
mod selectors;
mod spread;
mod tolerations;
pub mod volumes;

use thiserror::Error;

pub use daemonsets::{daemon_set, template_pod};
pub use nodes::{node, taint};
pub use pdbs::pdb;
pub use pods::{
    controller_owner, convert as pod_spec, finished_phase, is_bound, not_planned, pod,
    pod_disruption, PodIdentity,
};
pub use runtime_class::{pending_runtime, runtime_admission, PendingRuntime, RuntimeAdmission};
pub use selectors::workload_selector;
pub use tolerations::tolerations;

/// A problem with one field of an object, before the caller names the object (and, for the
/// manifest loader, the file and document).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// Field path inside the object, e.g. `spec.containers[0].resources.requests.cpu`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl FieldError {
    /// A field error from its path and reason.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// An object's namespace, `default` when it names none (as kubectl applies it).
pub fn namespace_or_default(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> String {
    meta.namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// Refuses a label (`key: value` of metadata.labels, a nodeSelector, a matchLabels) that
/// breaks Kubernetes' syntax, naming the entry at `prefix`.
pub(crate) fn check_label(prefix: &str, key: &str, value: &str) -> Result<(), FieldError> {
    let why = crate::syntax::qualified_name(key).or_else(|| crate::syntax::label_value(value));
    match why {
        Some(why) => Err(FieldError::new(crate::map_field(prefix, key), why)),
        None => Ok(()),
    }
}

/// What a Provisioner's NodeTemplate changes in the nodes the simulation plans for it, shared by
/// the manifest loader and the controller so both plan alike:
///
/// - zones: a Provisioner launches only where its NodeTemplate has subnets. When the template's
///   status lists resolved subnets, their zones become a zone requirement of the Provisioner,
///   so the simulation (and the topology spread domains) use those zones only. Without a
///   status (the usual offline case) the zones are those of the offerings.
/// - ephemeral storage: the size of the volume pods' ephemeral storage lives on
///   (`NodeTemplate::ephemeral_volume_bytes`), from which the nodes' ephemeral-storage
///   allocatable is computed instead of the catalog's 20 GiB.
pub fn apply_node_templates(
    provisioners: &mut [joiner_core::Provisioner],
    templates: &[crate::NodeTemplate],
) {
    for prov in provisioners {
        let Some(name) = prov.node_template.as_deref() else {
            continue;
        };
        let template = templates
            .iter()
            .find(|t| t.metadata.name.as_deref() == Some(name));
        let zones: Vec<String> = template
            .and_then(|t| t.status.as_ref())
            .into_iter()
            .flat_map(|s| s.subnets.iter().map(|sn| sn.zone.clone()))
            .filter(|z| !z.is_empty())
            .collect();
        if !zones.is_empty() {
            prov.requirements.add(
                joiner_core::labels::ZONE,
                joiner_core::Requirement::one_of(zones),
            );
        }
        if let Some(bytes) = template.and_then(crate::NodeTemplate::ephemeral_volume_bytes) {
            prov.kubelet.ephemeral_volume = Some(bytes);
        }
    }
}
