//! Draining: which of a node's pods must go before its instance is terminated, and in what
//! order.
//!
//! - DaemonSet pods are skipped: their controller tolerates the taint and recreates them on any
//!   node, so evicting them only churns; they die with the node.
//! - Mirror pods (annotation `kubernetes.io/config.mirror`) are the API's view of static pods:
//!   evicting them does nothing.
//! - Finished pods (Succeeded, Failed) hold nothing.
//! - Pods annotated `joiner.sh/do-not-disrupt` or `karpenter.sh/do-not-evict` = "true" are not
//!   evicted: the drain waits for them to finish on their own, however long (as Karpenter v1
//!   does without a terminationGracePeriod). The node gets an Event saying which pod it waits
//!   for.
//! - Pods of priority class `system-cluster-critical` / `system-node-critical` (DNS, CNI-adjacent
//!   agents) are evicted last, only once every other pod is gone, so the node keeps working
//!   while the rest drains.
//! - Pods that tolerate `joiner.sh/disrupted:NoSchedule` are neither evicted (the scheduler
//!   would put them straight back) nor waited for, as Karpenter does for its own taint.
//! - Pods still Terminating more than [`STUCK_AFTER`] past their deletionTimestamp (their grace
//!   period is over: the kubelet is dead or gone) are not waited for: they will never report
//!   finished, and they hold nothing once the instance is gone.

use std::sync::Arc;
use std::time::Duration;

use joiner_core::labels;
use k8s_openapi::jiff::Timestamp;

use crate::pod_record::PodRecord;
pub use crate::pod_record::MIRROR_ANNOTATION;

/// How long past its deletionTimestamp a Terminating pod still holds a drain.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

/// The priority classes evicted last.
pub const CRITICAL_PRIORITY_CLASSES: &[&str] = &["system-cluster-critical", "system-node-critical"];

/// The drain of one node at one moment.
#[derive(Debug, Default)]
pub struct DrainPlan<'a> {
    /// Pods to evict now.
    pub evict: Vec<&'a PodRecord>,
    /// Pods that must not be evicted and are waited for.
    pub blocked: Vec<&'a PodRecord>,
    /// Pods that must be gone before the node is (evicted, being deleted, blocked, critical
    /// waiting for their turn). Empty means drained.
    pub remaining: usize,
}

/// True for pods a drain leaves alone: DaemonSet pods, mirror pods, finished pods.
pub fn is_skipped(pod: &PodRecord) -> bool {
    pod.daemon || pod.annotation(MIRROR_ANNOTATION).is_some() || pod.finished
}

/// True for pods annotated not to be disrupted at `now` (unix seconds): "true", or a duration
/// (`karpenter.sh/do-not-disrupt: "30m"`) not yet over since the pod started.
pub fn is_do_not_disrupt(pod: &PodRecord, now: i64) -> bool {
    match &pod.core {
        Ok(core) => core.disruption.protects(now),
        // A pod joiner cannot read: its "true" opt-outs still hold.
        Err(_) => [
            labels::DO_NOT_DISRUPT,
            labels::KARPENTER_DO_NOT_EVICT,
            "karpenter.sh/do-not-disrupt",
        ]
        .iter()
        .any(|k| pod.annotation(k) == Some("true")),
    }
}

/// True for a pod Terminating more than [`STUCK_AFTER`] past its deletionTimestamp at `now`.
pub fn is_stuck_terminating(pod: &PodRecord, now: Timestamp) -> bool {
    pod.metadata.deletion_timestamp.as_ref().is_some_and(|t| {
        now.duration_since(t.0)
            .try_into()
            .is_ok_and(|past: Duration| past > STUCK_AFTER)
    })
}

/// True for pods of a critical system priority class.
pub fn is_critical(pod: &PodRecord) -> bool {
    pod.priority_class_name
        .as_deref()
        .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c))
}

/// Plans the next step of draining node `node` given every pod in the store, at `now`.
pub fn plan<'a>(node: &str, pods: &'a [Arc<PodRecord>], now: Timestamp) -> DrainPlan<'a> {
    let on_node: Vec<&PodRecord> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p.node_name.as_deref() == Some(node))
        .filter(|p| !is_skipped(p))
        .filter(|p| !p.tolerates_disruption && !is_stuck_terminating(p, now))
        .collect();
    let mut out = DrainPlan {
        remaining: on_node.len(),
        ..DrainPlan::default()
    };
    let (critical, ordinary): (Vec<&PodRecord>, Vec<&PodRecord>) =
        on_node.into_iter().partition(|p| is_critical(p));
    let wave = if ordinary.is_empty() {
        critical
    } else {
        ordinary
    };
    for pod in wave {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if is_do_not_disrupt(pod, now.as_second()) {
            out.blocked.push(pod);
        } else {
            out.evict.push(pod);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str, extra: serde_json::Value) -> Arc<PodRecord> {
        let mut v = json!({"metadata": {"name": name, "namespace": "shop"},
            "spec": {"nodeName": node, "containers": []}});
        if let (Some(base), Some(more)) = (v.as_object_mut(), extra.as_object()) {
            for (k, val) in more {
                match (base.get_mut(k), val) {
                    (Some(serde_json::Value::Object(b)), serde_json::Value::Object(m)) => {
                        b.extend(m.clone())
                    }
                    _ => {
                        base.insert(k.clone(), val.clone());
                    }
                }
            }
        }
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(v).expect("pod");
        Arc::new(PodRecord::from(pod))
    }

    fn at(t: &str) -> Timestamp {
        t.parse().expect("timestamp")
    }

    fn names(pods: &[&PodRecord]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn critical_pods_wait_for_every_other_pod() {
        let pods = vec![
            pod("web", "n1", json!({})),
            pod(
                "dns",
                "n1",
                json!({"spec": {"priorityClassName": "system-cluster-critical"}}),
            ),
            pod("other-node", "n2", json!({})),
            pod(
                "ds",
                "n1",
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "DaemonSet", "name": "agent", "uid": "u1"}]}}),
            ),
            pod(
                "static",
                "n1",
                json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "x"}}}),
            ),
            pod("done", "n1", json!({"status": {"phase": "Succeeded"}})),
        ];
        let now = at("2026-01-01T00:00:00Z");
        let p = plan("n1", &pods, now);
        assert_eq!(names(&p.evict), ["web"]);
        assert_eq!(p.remaining, 2);
        let only_critical: Vec<Arc<PodRecord>> = pods[1..].to_vec();
        let p = plan("n1", &only_critical, now);
        assert_eq!(names(&p.evict), ["dns"]);
        assert_eq!(p.remaining, 1);
    }

    #[test]
    fn do_not_disrupt_pods_block_and_terminating_pods_are_waited_for() {
        let pods = vec![
            pod(
                "keep",
                "n1",
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-evict": "true"}}}),
            ),
            pod(
                "going",
                "n1",
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            ),
            pod(
                "not-really",
                "n1",
                json!({"metadata": {"annotations": {"joiner.sh/do-not-disrupt": "false"}}}),
            ),
        ];
        let now = at("2026-01-01T00:00:30Z");
        let p = plan("n1", &pods, now);
        assert_eq!(names(&p.blocked), ["keep"]);
        assert_eq!(names(&p.evict), ["not-really"]);
        assert_eq!(p.remaining, 3);
        assert_eq!(plan("n3", &pods, now).remaining, 0);
    }

    #[test]
    fn a_do_not_disrupt_duration_holds_the_drain_until_it_is_over_since_the_pod_started() {
        let pods = vec![pod(
            "warming",
            "n1",
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "2m"}},
                   "spec": {"containers": [{"name": "app", "image": "app:1"}]},
                   "status": {"startTime": "2026-01-01T00:00:00Z"}}),
        )];
        let during = plan("n1", &pods, at("2026-01-01T00:01:59Z"));
        assert_eq!(names(&during.blocked), ["warming"]);
        assert!(during.evict.is_empty());
        let after = plan("n1", &pods, at("2026-01-01T00:02:00Z"));
        assert!(after.blocked.is_empty());
        assert_eq!(names(&after.evict), ["warming"]);
    }

    #[test]
    fn pods_stuck_terminating_past_a_minute_no_longer_hold_the_drain() {
        let pods = vec![pod(
            "stuck",
            "n1",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        )];
        assert_eq!(plan("n1", &pods, at("2026-01-01T00:01:00Z")).remaining, 1);
        assert_eq!(plan("n1", &pods, at("2026-01-01T00:01:01Z")).remaining, 0);
    }

    #[test]
    fn pods_tolerating_the_disrupted_taint_are_neither_evicted_nor_waited_for() {
        let pods = vec![
            pod(
                "by-key",
                "n1",
                json!({"spec": {"tolerations": [{"key": "joiner.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}]}}),
            ),
            pod(
                "everything",
                "n1",
                json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
            ),
            pod(
                "other-taint",
                "n1",
                json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}),
            ),
        ];
        let p = plan("n1", &pods, at("2026-01-01T00:00:00Z"));
        assert_eq!(names(&p.evict), ["other-taint"]);
        assert_eq!(p.remaining, 1);
    }
}
