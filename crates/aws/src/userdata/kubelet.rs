//! kubelet settings as command-line flags, shared by the families that pass flags (AL2's
//! `--kubelet-extra-args`, AL2023's `kubelet.flags`).
//!
//! Maps are written sorted by key (they are `BTreeMap`s), so equal settings give equal user
//! data and so equal launch-template names.

use std::collections::BTreeMap;

use joiner_apis::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::NodeBootstrap;

/// `key=value:Effect`, or `key:Effect` without a value: the kubelet's `--register-with-taints`
/// spelling.
pub fn taint_string(t: &Taint) -> String {
    match t.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

/// `--node-labels=k=v,...`, or nothing without labels. Label keys and values cannot hold
/// spaces, quotes or commas, so no quoting is needed.
pub fn node_labels_flag(labels: &BTreeMap<String, String>) -> Option<String> {
    (!labels.is_empty()).then(|| {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("--node-labels={}", pairs.join(","))
    })
}

/// `--register-with-taints=...`, or nothing without taints.
pub fn taints_flag(taints: &[Taint]) -> Option<String> {
    (!taints.is_empty()).then(|| {
        let list: Vec<String> = taints.iter().map(taint_string).collect();
        format!("--register-with-taints={}", list.join(","))
    })
}

/// The kubelet flags of `b` in a fixed order: labels, taints, max-pods, then the
/// Provisioner's kubelet settings.
pub fn flags(b: &NodeBootstrap) -> Vec<String> {
    let k = &b.kubelet;
    let mut out: Vec<String> = Vec::new();
    out.extend(node_labels_flag(&b.labels));
    out.extend(taints_flag(&b.taints));
    out.push(format!("--max-pods={}", b.max_pods));
    if let Some(n) = k.pods_per_core {
        out.push(format!("--pods-per-core={n}"));
    }
    for (flag, map) in [
        ("--system-reserved", &k.system_reserved),
        ("--kube-reserved", &k.kube_reserved),
    ] {
        if !map.is_empty() {
            out.push(format!("{flag}={}", joined(&quantities(map), "=")));
        }
    }
    for (flag, map, sep) in [
        ("--eviction-hard", &k.eviction_hard, "<"),
        ("--eviction-soft", &k.eviction_soft, "<"),
        (
            "--eviction-soft-grace-period",
            &k.eviction_soft_grace_period,
            "=",
        ),
    ] {
        if !map.is_empty() {
            out.push(format!("{flag}={}", joined(map, sep)));
        }
    }
    if let Some(n) = k.eviction_max_pod_grace_period {
        out.push(format!("--eviction-max-pod-grace-period={n}"));
    }
    if let Some(n) = k.image_gc_high_threshold_percent {
        out.push(format!("--image-gc-high-threshold={n}"));
    }
    if let Some(n) = k.image_gc_low_threshold_percent {
        out.push(format!("--image-gc-low-threshold={n}"));
    }
    if let Some(q) = k.cpu_cfs_quota {
        out.push(format!("--cpu-cfs-quota={q}"));
    }
    out
}

/// Quantities as their strings.
pub fn quantities(map: &BTreeMap<String, Quantity>) -> BTreeMap<String, String> {
    map.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect()
}

fn joined(map: &BTreeMap<String, String>, sep: &str) -> String {
    let items: Vec<String> = map.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
    items.join(",")
}
