//! What the DaemonSets take from a node before any pending pod gets there.
//!
//! Every node a DaemonSet selects and whose taints it tolerates runs one of its pods, so that
//! pod's requests and host ports are gone before scheduling starts. New nodes of a Provisioner
//! and the controller's in-flight nodes are charged the same way, from this one function.

use std::collections::HashMap;

use crate::pod::{DaemonSet, HostPort, Pod};
use crate::resources::Resources;
use crate::taints::{first_untolerated, Taint};

/// The share of a node its DaemonSets hold, so a node is never planned as fuller than it will
/// be once the DaemonSets run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DaemonOverhead {
    /// Sum of the requests of the DaemonSet pods that run on the node.
    pub requests: Resources,
    /// Host ports those pods bind, in DaemonSet order; no pending pod may bind them there.
    pub host_ports: Vec<HostPort>,
}

/// The overhead of the DaemonSets that would run on a node with `taints`.
///
/// `selects` answers whether the DaemonSet's pod would be scheduled on the node by its node
/// selector terms: against a Provisioner's requirements and an instance type for a node still
/// to be launched, against the node's labels for one that exists or is in flight. Tolerations
/// are checked here against `taints`, so callers cannot forget them.
pub fn daemon_overhead(
    daemonsets: &[DaemonSet],
    taints: &[Taint],
    selects: impl Fn(&Pod) -> bool,
) -> DaemonOverhead {
    let mut overhead = DaemonOverhead::default();
    for ds in daemonsets {
        if first_untolerated(taints, &ds.pod.tolerations).is_some() || !selects(&ds.pod) {
            continue;
        }
        overhead.requests.add(&ds.pod.requests);
        overhead
            .host_ports
            .extend(ds.pod.host_ports.iter().cloned());
    }
    overhead
}

/// Charges each DaemonSet what its pods really request where they exist: the largest request of
/// each resource among the pods it owns (bound or not), in place of its template's.
///
/// A LimitRange default, a mutating webhook or a vertical autoscaler changes a DaemonSet pod's
/// requests after the template is written; the template would then under- or over-reserve every
/// new node. A DaemonSet without pods yet keeps its template's requests. Both the manifest
/// loader and the controller call this when they build a snapshot, before any overhead is
/// computed from it.
pub fn observe_pod_requests(daemonsets: &mut [DaemonSet], pods: &[Pod]) {
    let mut observed: HashMap<(&str, &str), Resources> = HashMap::new();
    for p in pods.iter().filter(|p| p.is_daemon()) {
        let Some(owner) = &p.owner else { continue };
        observed
            .entry((p.namespace.as_str(), owner.name.as_str()))
            .and_modify(|r| r.max_with(&p.requests))
            .or_insert_with(|| p.requests.clone());
    }
    for ds in daemonsets {
        if let Some(r) = observed.get(&(ds.namespace.as_str(), ds.name.as_str())) {
            ds.pod.requests = r.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Owner;

    fn daemon_pod(namespace: &str, owner: &str, cpu: i64, memory: i64) -> Pod {
        Pod {
            namespace: namespace.into(),
            name: format!("{owner}-x"),
            requests: Resources::new(cpu, memory, 0, 1),
            owner: Some(Owner {
                kind: "DaemonSet".into(),
                name: owner.into(),
            }),
            node_name: Some("n1".into()),
            ..Pod::default()
        }
    }

    fn daemon_set(namespace: &str, name: &str, cpu: i64) -> DaemonSet {
        DaemonSet {
            namespace: namespace.into(),
            name: name.into(),
            pod: Pod {
                requests: Resources::new(cpu, 0, 0, 1),
                ..Pod::default()
            },
        }
    }

    #[test]
    fn the_pods_requests_replace_the_template_resource_by_resource() {
        let mut sets = vec![
            daemon_set("kube-system", "agent", 100),
            daemon_set("monitoring", "agent", 100),
            daemon_set("kube-system", "new", 100),
        ];
        let pods = vec![
            // A LimitRange gave one pod memory; a vertical autoscaler raised the other's cpu.
            daemon_pod("kube-system", "agent", 100, 256 << 20),
            daemon_pod("kube-system", "agent", 300, 0),
            // Same name, another namespace: another DaemonSet's pod.
            daemon_pod("other", "new", 900, 0),
        ];
        observe_pod_requests(&mut sets, &pods);
        assert_eq!(sets[0].pod.requests, Resources::new(300, 256 << 20, 0, 1));
        assert_eq!(sets[1].pod.requests, Resources::new(100, 0, 0, 1));
        assert_eq!(sets[2].pod.requests, Resources::new(100, 0, 0, 1));
    }
}
