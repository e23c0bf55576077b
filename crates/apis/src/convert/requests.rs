//! A pod's effective resource requests, computed the way the kube-scheduler does.
//!
//! The simulation packs pods by these numbers, so they must match what the scheduler will
//! charge on the real node, or joiner launches nodes that are too small (or too big):
//! - a container's request for a resource defaults to its limit when only the limit is given
//!   (the API server applies that default);
//! - init containers run one at a time before the app containers, so the pod needs the larger of
//!   the biggest init container and the sum of the app containers;
//! - sidecars (init containers with `restartPolicy: Always`) keep running, so they add to every
//!   later init container and to the app containers;
//! - pod-level `spec.resources` replaces the container sums for the resources it names;
//! - `spec.overhead` (the RuntimeClass's cost) is added on top, and the pod takes one pod slot.

use std::collections::BTreeMap;

use joiner_core::Resources;
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::FieldError;
use crate::map_field;

/// The effective requests of a pod spec found at field path `prefix`.
pub fn effective_requests(spec: &PodSpec, prefix: &str) -> Result<Resources, FieldError> {
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(c, &format!("{prefix}.initContainers[{i}]"))?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            init_peak.max_with(&sidecars);
        } else {
            let mut during = sidecars.clone();
            during.add(&r);
            init_peak.max_with(&during);
        }
    }

    let mut total = Resources::default();
    for (i, c) in spec.containers.iter().enumerate() {
        total.add(&container_requests(
            c,
            &format!("{prefix}.containers[{i}]"),
        )?);
    }
    total.add(&sidecars);
    total.max_with(&init_peak);

    if let Some(pod_level) = &spec.resources {
        let explicit = requirements_requests(pod_level, &format!("{prefix}.resources"))?;
        for (name, amount) in explicit {
            total.set(&name, amount);
        }
    }

    if let Some(overhead) = &spec.overhead {
        total.add(&parse_map(overhead, &format!("{prefix}.overhead"))?);
    }
    total.pods = total.pods.saturating_add(1);
    Ok(total)
}

/// One container's requests, limits standing in for missing requests.
fn container_requests(c: &Container, prefix: &str) -> Result<Resources, FieldError> {
    let mut out = Resources::default();
    if let Some(res) = &c.resources {
        for (name, amount) in requirements_requests(res, &format!("{prefix}.resources"))? {
            out.set(&name, amount);
        }
    }
    Ok(out)
}

/// Requests of a `resources` block by name, each limit standing in for a missing request.
/// Limits are parsed even when a request exists, so a typo there is still reported.
fn requirements_requests(
    res: &ResourceRequirements,
    prefix: &str,
) -> Result<Vec<(String, i64)>, FieldError> {
    let empty = BTreeMap::new();
    let requests = res.requests.as_ref().unwrap_or(&empty);
    let limits = res.limits.as_ref().unwrap_or(&empty);
    let mut out = Vec::new();
    for (name, q) in requests {
        whole_if_extended(name, q, &format!("{prefix}.requests"))?;
        if !overcommit_allowed(name) && !limits.contains_key(name) {
            return Err(FieldError::new(
                map_field(&format!("{prefix}.limits"), name),
                format!("a limit is required for {name} (it cannot be overcommitted)"),
            ));
        }
        out.push((
            name.clone(),
            parse_one(name, q, &format!("{prefix}.requests"))?,
        ));
    }
    for (name, q) in limits {
        whole_if_extended(name, q, &format!("{prefix}.limits"))?;
        let amount = parse_one(name, q, &format!("{prefix}.limits"))?;
        match out.iter().find(|(n, _)| n == name) {
            None => out.push((name.clone(), amount)),
            // The API server's rules: no request above its limit, and an extended resource
            // cannot be overcommitted, so its request equals its limit.
            Some((_, request)) if *request > amount => {
                return Err(FieldError::new(
                    map_field(&format!("{prefix}.requests"), name),
                    format!("request {} is above the limit {}", requests[name].0, q.0),
                ))
            }
            Some((_, request)) if !overcommit_allowed(name) && *request != amount => {
                return Err(FieldError::new(
                    map_field(&format!("{prefix}.requests"), name),
                    format!(
                        "request {} must equal the limit {} ({name} cannot be overcommitted)",
                        requests[name].0, q.0
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(out)
}

/// True for the resources Kubernetes defines (no domain, or a `kubernetes.io` one); the
/// others are extended resources (devices, `example.com/widget`).
fn is_native(name: &str) -> bool {
    match name.split_once('/') {
        None => true,
        Some((domain, _)) => domain == "kubernetes.io" || domain.ends_with(".kubernetes.io"),
    }
}

/// The API server's rule: native resources other than huge pages may be requested below
/// their limit; extended resources and huge pages are requested exactly at it.
fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !name.starts_with("hugepages-")
}

/// Refuses a fractional amount of an extended resource (`nvidia.com/gpu: 500m`), as the API
/// server does: devices are counted whole.
fn whole_if_extended(name: &str, q: &Quantity, prefix: &str) -> Result<(), FieldError> {
    if is_native(name) {
        return Ok(());
    }
    match joiner_core::quantity::parse_milli(&q.0) {
        Ok(m) if m % 1000 != 0 => Err(FieldError::new(
            map_field(prefix, name),
            format!(
                "{:?} is not a whole number (extended resources are counted whole)",
                q.0
            ),
        )),
        _ => Ok(()),
    }
}

/// A whole resource map (`overhead`, node capacity) as a vector.
pub fn parse_map(map: &BTreeMap<String, Quantity>, prefix: &str) -> Result<Resources, FieldError> {
    let mut out = Resources::default();
    for (name, q) in map {
        let amount = parse_one(name, q, prefix)?;
        out.set(name, out.get(name).saturating_add(amount));
    }
    Ok(out)
}

/// One quantity in the model's unit for that resource.
fn parse_one(name: &str, q: &Quantity, prefix: &str) -> Result<i64, FieldError> {
    let mut r = Resources::default();
    r.add_quantity(name, &q.0)
        .map_err(|e| FieldError::new(map_field(prefix, name), e.to_string()))?;
    Ok(r.get(name))
}
