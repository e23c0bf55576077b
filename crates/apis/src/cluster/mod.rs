//! What the controller and `joiner plan` both derive from cluster objects, written once so that
//! a plan is the controller's: the capacity NodeClaims hold before their Nodes are usable
//! ([`inflight`]), the room recently launched nodes keep for the pods they were bought for
//! ([`nominations`]), and the warm pools' sizing and the rule a take follows ([`warm_pool`]).
//! Pure functions of the objects; the controller's reflector stores and the CLI's manifest
//! loader are two sources of the same objects.

pub mod disruption;
pub mod inflight;
pub mod matching;
pub mod nominations;
pub mod warm_pool;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use joiner_core::{InstanceType, Snapshot};
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::jiff::Timestamp;

use crate::NodeClaim;

/// The steps that make a snapshot of converted objects (each read through
/// [`crate::convert`]) one the simulation can plan on, taken in this order by the controller
/// and `joiner plan` alike: each DaemonSet charged what its pods request
/// (`daemons::observe_pod_requests`), each Provisioner given its NodeTemplate's subnet zones
/// and volume ([`crate::convert::apply_node_templates`]), each node its CSINode's volume
/// attach caps (`volume_limits`, by node name), and the pods' namespace selectors resolved
/// against `snap.namespace_labels`. Before [`claimed_capacity`], which sizes claims with the
/// DaemonSets and Provisioners settled here.
pub fn settle(
    snap: &mut Snapshot,
    node_templates: &[crate::NodeTemplate],
    volume_limits: &HashMap<String, BTreeMap<String, i64>>,
) {
    joiner_core::scheduling::daemons::observe_pod_requests(&mut snap.daemonsets, &snap.pods);
    crate::convert::apply_node_templates(&mut snap.provisioners, node_templates);
    crate::convert::csi_nodes::apply_volume_limits(&mut snap.nodes, volume_limits);
    snap.resolve_namespace_selectors();
}

/// The capacity the NodeClaims stand for, added to `snap` (its nodes, DaemonSets and
/// Provisioners already read) as the controller and `joiner plan` both count it: a claim
/// whose Node has not registered becomes an in-flight node sized from `catalog`; a registered
/// Node whose claim is not initialized is planned without its startup and not-ready taints;
/// warm-pool members count against their Provisioner's limits; and the room a claim was
/// bought for stays nominated to its pods (as of `now`). Pods of an earlier batch still
/// pending will run there, so a plan does not buy their capacity again. Returns a warning
/// per claim that could not be sized.
pub fn claimed_capacity(
    snap: &mut Snapshot,
    kube_nodes: &[Arc<k8s::Node>],
    claims: &[Arc<NodeClaim>],
    catalog: &[InstanceType],
    now: Timestamp,
) -> Vec<String> {
    let mut warnings = inflight::settle_initializing(
        &mut snap.nodes,
        kube_nodes,
        claims,
        catalog,
        &snap.daemonsets,
        &snap.provisioners,
    );
    let (in_flight, more) = inflight::in_flight_nodes(
        claims,
        kube_nodes,
        catalog,
        &snap.daemonsets,
        &snap.provisioners,
    );
    snap.nodes.extend(in_flight);
    warnings.extend(more);
    warnings.extend(inflight::hold_warm_members(
        claims,
        catalog,
        &mut snap.provisioners,
    ));
    nominations::apply(snap, claims, now);
    warnings
}
