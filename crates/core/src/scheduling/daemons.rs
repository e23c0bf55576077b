//! What the DaemonSets take from a node before any pending pod gets there.
//!
//! Every node a DaemonSet selects and whose taints it tolerates runs one of its pods, so that
//! pod's requests and host ports are gone before scheduling starts. New nodes of a Provisioner
//! and the controller's in-flight nodes are charged the same way, from this one function.

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
