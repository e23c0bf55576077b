//! DaemonSets, kept as the template of the pod they run on every eligible node, and the pod
//! template conversion that workloads share.

use joiner_core::{DaemonSet, Owner, Pod};
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::pods::{self, PodIdentity};
use super::FieldError;

/// A DaemonSet as the template of the pod it runs on every eligible node. `namespace` and
/// `name` are passed in because a manifest may leave the namespace to its default.
pub fn daemon_set(
    d: &apps::DaemonSet,
    namespace: &str,
    name: &str,
) -> Result<DaemonSet, FieldError> {
    let spec = &d.spec;
    let pod = template_pod("DaemonSet", namespace, name, &spec.template)?;
    Ok(DaemonSet {
        namespace: namespace.to_string(),
        name: name.to_string(),
        pod,
    })
}

/// The pod a workload of `kind` named `namespace/name` runs from `template`: the template's
/// labels, the workload as owner (so its replicas form one equivalence class), and the spec
/// converted at field path `spec.template.spec`.
pub fn template_pod(
    kind: &str,
    namespace: &str,
    name: &str,
    template: &PodTemplateSpec,
) -> Result<Pod, FieldError> {
    let spec = template
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::new("spec.template.spec", "a pod spec is required"))?;
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let id = PodIdentity {
        namespace: namespace.to_string(),
        name: name.to_string(),
        labels,
        owner: Some(Owner {
            kind: kind.to_string(),
            name: name.to_string(),
        }),
    };
    pods::convert(id, spec, "spec.template.spec")
}
