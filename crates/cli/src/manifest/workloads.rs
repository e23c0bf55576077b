//! Workloads (Deployment, ReplicaSet, StatefulSet, Job) expanded into the pods they will run
//! (DaemonSets are converted in `joiner_apis::convert`).
//!
//! Planning capacity for a workload means planning for its replicas, so each becomes `replicas`
//! pods named `<owner>-<ordinal>` (the StatefulSet naming, and stable for the others) that carry
//! the template's labels and the owner, which groups them into one equivalence class.

use joiner_apis::convert::template_pod;
use joiner_core::Pod;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::error::FieldError;

/// Most pods one workload is expanded into; beyond this a typo (replicas: 1000000) would use
/// memory for nothing.
pub(crate) const MAX_REPLICAS: i32 = 100_000;

/// A Deployment's pods.
pub(crate) fn deployment(
    d: &apps::Deployment,
    namespace: &str,
    name: &str,
) -> Result<Vec<Pod>, FieldError> {
    let spec = &d.spec;
    let replicas = replica_count(spec.replicas, "spec.replicas")?;
    expand("Deployment", namespace, name, &spec.template, replicas)
}

/// A ReplicaSet's pods.
pub(crate) fn replica_set(
    r: &apps::ReplicaSet,
    namespace: &str,
    name: &str,
) -> Result<Vec<Pod>, FieldError> {
    let spec = &r.spec;
    let replicas = replica_count(spec.replicas, "spec.replicas")?;
    let template = spec
        .template
        .as_ref()
        .ok_or_else(|| FieldError::new("spec.template", "a pod template is required"))?;
    expand("ReplicaSet", namespace, name, template, replicas)
}

/// A StatefulSet's pods.
pub(crate) fn stateful_set(
    s: &apps::StatefulSet,
    namespace: &str,
    name: &str,
) -> Result<Vec<Pod>, FieldError> {
    let spec = &s.spec;
    let replicas = replica_count(spec.replicas, "spec.replicas")?;
    expand("StatefulSet", namespace, name, &spec.template, replicas)
}

/// A Job's pods: `parallelism` of them (default 1) at once, never more than `completions`,
/// none while suspended.
pub(crate) fn job(j: &batch::Job, namespace: &str, name: &str) -> Result<Vec<Pod>, FieldError> {
    let spec = j
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::new("spec", "a spec is required"))?;
    let mut count = replica_count(spec.parallelism, "spec.parallelism")?;
    if let Some(c) = spec.completions {
        count = count.min(replica_count(Some(c), "spec.completions")?);
    }
    if spec.suspend == Some(true) {
        count = 0;
    }
    expand("Job", namespace, name, &spec.template, count)
}

/// `replicas` (or parallelism) with the API default of 1, checked for range.
fn replica_count(v: Option<i32>, field: &str) -> Result<i32, FieldError> {
    let n = v.unwrap_or(1);
    if n < 0 {
        return Err(FieldError::new(
            field,
            format!("must not be negative, got {n}"),
        ));
    }
    if n > MAX_REPLICAS {
        return Err(FieldError::new(
            field,
            format!(
                "{n} is more than the {MAX_REPLICAS} pods the loader expands one workload into"
            ),
        ));
    }
    Ok(n)
}

/// The template converted once, then copied under each ordinal name.
fn expand(
    kind: &str,
    namespace: &str,
    name: &str,
    template: &PodTemplateSpec,
    replicas: i32,
) -> Result<Vec<Pod>, FieldError> {
    let pod = template_pod(kind, namespace, name, template)?;
    Ok((0..replicas)
        .map(|i| Pod {
            name: format!("{name}-{i}"),
            ..pod.clone()
        })
        .collect())
}
