//! NodeClaims as in-flight capacity.
//!
//! Between the moment a NodeClaim is written and the moment its Node registers, the capacity it
//! bought exists only as the claim. The pods it was bought for are still pending, so a second
//! batch would plan (and buy) for them again unless the simulation sees that capacity. Each such
//! claim therefore enters the snapshot as a core [`Node`] named after the claim, with the labels
//! and taints the node will register with and the allocatable of the type launched, minus the
//! DaemonSet pods that will land on it. The simulation places the pending pods there first, at
//! no new cost.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::convert::node_claim::{claim_requirements, claim_taints, resources};
use crate::convert::FieldError;
use crate::NodeClaim;
use joiner_core::instance_type::offering_allowed;
use joiner_core::kubelet::KubeletSettings;
use joiner_core::scheduling::daemons::daemon_overhead;
use joiner_core::{labels, DaemonSet, InstanceType, Node, Provisioner, Requirements};
use k8s_openapi::api::core::v1 as k8s;

/// The in-flight nodes of `claims`: one per claim that is not being deleted, not a warm-pool
/// member, and whose node has
/// not registered (no Node carries its `status.providerID` in `spec.providerID`, none is named
/// `status.nodeName`). A claim that cannot be sized is skipped with a warning
/// (`NodeClaim name: field: reason`) rather than failing the snapshot.
pub fn in_flight_nodes(
    claims: &[Arc<NodeClaim>],
    nodes: &[Arc<k8s::Node>],
    catalog: &[InstanceType],
    daemonsets: &[DaemonSet],
    provisioners: &[Provisioner],
) -> (Vec<Node>, Vec<String>) {
    let provider_ids: HashSet<&str> = nodes
        .iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
        .collect();
    let node_names: HashSet<&str> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for claim in claims {
        if !is_in_flight(claim, &provider_ids, &node_names) {
            continue;
        }
        match in_flight_node(claim, catalog, daemonsets, provisioners) {
            Ok(node) => out.push(node),
            Err(e) => warnings.push(format!("NodeClaim {}: {e}", claim.name())),
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    (out, warnings)
}

/// True while the claim stands for capacity that has no Node yet.
fn is_in_flight(claim: &NodeClaim, provider_ids: &HashSet<&str>, names: &HashSet<&str>) -> bool {
    // A warm-pool member is capacity for no pod: a pod waiting for it would wait for a
    // start that only a claim of its own triggers.
    if claim.metadata.deletion_timestamp.is_some()
        || claim.name().is_empty()
        || claim.warm_pool().is_some()
    {
        return false;
    }
    let status = claim.status.as_ref();
    let registered_by_id = status
        .and_then(|s| s.provider_id.as_deref())
        .is_some_and(|id| provider_ids.contains(id));
    let registered_by_name = status
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| names.contains(n));
    !registered_by_id && !registered_by_name
}

/// The lowest price among the type's offerings that `reqs` allow (available or not: a claim
/// may have been launched into an offering that has since run out).
fn lowest_price(t: &InstanceType, reqs: &Requirements) -> Option<f64> {
    t.offerings
        .iter()
        .filter(|o| offering_allowed(o, reqs))
        .map(|o| o.price)
        .min_by(f64::total_cmp)
}

/// The catalog types the claim may be launched as: those its instance-type requirement names
/// (or every type, without one) whose labels and offerings its requirements allow.
fn candidate_types<'a>(catalog: &'a [InstanceType], reqs: &Requirements) -> Vec<&'a InstanceType> {
    let named = reqs.get(labels::INSTANCE_TYPE);
    // The type's name is checked against the requirement directly: catalogs need not repeat it
    // among the type's labels.
    let mut others = Requirements::new();
    for (k, r) in reqs
        .iter()
        .filter(|(k, _)| k.as_str() != labels::INSTANCE_TYPE)
    {
        others.add(k, r.clone());
    }
    catalog
        .iter()
        .filter(|t| named.is_none_or(|r| r.allows(&t.name)))
        .filter(|t| t.first_label_conflict(&others).is_none())
        .collect()
}

/// Labels on which every candidate type agrees: true of the node whichever one is launched.
fn shared_labels(types: &[&InstanceType]) -> BTreeMap<String, String> {
    let Some((first, rest)) = types.split_first() else {
        return BTreeMap::new();
    };
    let mut shared = first.labels.clone();
    for t in rest {
        shared.retain(|k, v| t.labels.get(k) == Some(v));
    }
    shared
}

/// One claim as a node of the snapshot.
fn in_flight_node(
    claim: &NodeClaim,
    catalog: &[InstanceType],
    daemonsets: &[DaemonSet],
    provisioners: &[Provisioner],
) -> Result<Node, FieldError> {
    let name = claim.name().to_string();
    // The node is sized as its Provisioner's kubelet and volume settings make it.
    let default_kubelet = KubeletSettings::default();
    let kubelet = provisioners
        .iter()
        .find(|p| p.name == claim.spec.provisioner_name)
        .map_or(&default_kubelet, |p| &p.kubelet);
    let reqs = claim_requirements(claim)?;
    let status = claim.status.clone().unwrap_or_default();

    let mut node_labels: BTreeMap<String, String> = reqs
        .iter()
        .filter_map(|(k, r)| r.single_value().map(|v| (k.clone(), v.to_string())))
        .collect();

    let launched = status.instance_type.as_deref();
    // Until the cloud says which type it launched, the claim counts against its
    // Provisioner's limits as the largest of its options (the cloud may pick any of them);
    // it is planned with the cheapest's room, the one it most likely gets.
    let mut largest: Option<joiner_core::Resources> = None;
    let chosen: Option<&InstanceType> = match launched {
        Some(t) => catalog.iter().find(|c| c.name == t),
        None => {
            let candidates = candidate_types(catalog, &reqs);
            node_labels.extend(shared_labels(&candidates));
            let mut most = joiner_core::Resources::default();
            for t in &candidates {
                most.max_with(&kubelet.capacity(t));
            }
            largest = (!candidates.is_empty()).then_some(most);
            candidates
                .into_iter()
                .filter_map(|t| lowest_price(t, &reqs).map(|p| (p, t)))
                .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)))
                .map(|(_, t)| t)
        }
    };
    if let (Some(t), Some(_)) = (chosen, launched) {
        node_labels.extend(t.labels.clone());
    }
    if let Some(t) = launched {
        node_labels.insert(labels::INSTANCE_TYPE.to_string(), t.to_string());
    }
    if let Some(z) = &status.zone {
        node_labels.insert(labels::ZONE.to_string(), z.clone());
    }
    if let Some(ct) = &status.capacity_type {
        node_labels.insert(labels::CAPACITY_TYPE.to_string(), ct.clone());
    }
    node_labels.insert(
        labels::PROVISIONER_NAME.to_string(),
        claim.spec.provisioner_name.clone(),
    );
    node_labels.insert(labels::NODECLAIM.to_string(), name.clone());
    node_labels.insert(labels::HOSTNAME.to_string(), name.clone());

    let mut allocatable = if !status.allocatable.is_empty() {
        resources(&status.allocatable, "status.allocatable")?
    } else {
        match chosen {
            Some(t) => kubelet.allocatable(t),
            None => {
                return Err(match launched {
                    Some(t) => FieldError::new(
                        "status.instanceType",
                        format!("instance type {t:?} is not in the catalog"),
                    ),
                    None => FieldError::new(
                        "spec.requirements",
                        "no instance type of the catalog satisfies them",
                    ),
                })
            }
        }
    };
    let capacity = if !status.capacity.is_empty() {
        resources(&status.capacity, "status.capacity")?
    } else if let Some(most) = largest {
        most
    } else {
        chosen
            .map(|t| kubelet.capacity(t))
            .unwrap_or_else(|| allocatable.clone())
    };

    // Not its startup taints: pods need not tolerate those, and planning around them would
    // buy a second node for pods the first one takes once it is initialized.
    let taints = claim_taints(claim, false)?;
    let daemons = daemon_overhead(daemonsets, &taints, |pod| {
        pod.node_terms.is_empty()
            || pod
                .node_terms
                .iter()
                .any(|t| t.matches_labels(&node_labels))
    });
    allocatable.sub(&daemons.requests);

    Ok(Node {
        name,
        labels: node_labels,
        taints,
        capacity,
        allocatable,
        unschedulable: false,
        // No CSINode until the node's drivers register: no attach cap, as Karpenter reads it.
        volume_limits: Default::default(),
        // In flight: not initialized, so never a disruption candidate.
        life: Default::default(),
    })
}

/// Adds each live warm-pool member's capacity (and one node) to its Provisioner's
/// [`Provisioner::held`]: members hold capacity the Provisioner's limits must count, though no
/// pod can use it until a claim takes one. A member is sized by its recorded capacity, else
/// its type in `catalog` under its Provisioner's kubelet settings; one that cannot be sized is
/// skipped with a warning.
pub fn hold_warm_members(
    claims: &[Arc<NodeClaim>],
    catalog: &[InstanceType],
    provisioners: &mut [Provisioner],
) -> Vec<String> {
    let mut warnings = Vec::new();
    for claim in claims {
        if claim.warm_pool().is_none() || claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(prov) = provisioners
            .iter_mut()
            .find(|p| p.name == claim.spec.provisioner_name)
        else {
            continue;
        };
        let status = claim.status.clone().unwrap_or_default();
        let mut capacity = if !status.capacity.is_empty() {
            match resources(&status.capacity, "status.capacity") {
                Ok(c) => c,
                Err(e) => {
                    warnings.push(format!("NodeClaim {}: {e}", claim.name()));
                    continue;
                }
            }
        } else {
            let itype = status.instance_type.clone().or_else(|| {
                claim_requirements(claim)
                    .ok()?
                    .get(labels::INSTANCE_TYPE)?
                    .single_value()
                    .map(str::to_string)
            });
            match itype.and_then(|t| catalog.iter().find(|c| c.name == t)) {
                Some(t) => prov.kubelet.capacity(t),
                None => {
                    warnings.push(format!(
                        "NodeClaim {}: warm-pool member of no instance type in the catalog; not counted against its Provisioner's limits",
                        claim.name()
                    ));
                    continue;
                }
            }
        };
        capacity.set(joiner_core::NODES_LIMIT, 1);
        prov.held.add(&capacity);
    }
    warnings
}

/// Taints a new node carries until it is initialized: Kubernetes' known ephemeral ones (the
/// node lifecycle's `not-ready` and `unreachable`, the cloud controller's `uninitialized`:
/// [`joiner_core::labels::EPHEMERAL_TAINTS`]) and joiner's own startup taint (removed by
/// registration once Ready).
pub const STARTING_TAINTS: &[&str] = &[
    joiner_core::labels::UNREGISTERED_TAINT,
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
];

/// Nodes that registered for a claim not yet Initialized are still starting: they carry the
/// claim's startup taints and the not-ready taints, may lack the labels registration adds, and
/// may not report allocatable yet (or not yet the extended resources a device plugin adds, such
/// as `nvidia.com/gpu`). Taken at face value they would refuse the very pods they were bought
/// for, and the next batch would buy again. So those taints are dropped from the snapshot's
/// node (the pods will be able to run there once it is initialized), the claim's labels it
/// lacks are added, a node without allocatable gets the claim's, and one without an extended
/// resource its claim requests gets that resource of the claim's type. `snap_nodes` are the
/// converted `kube_nodes`, matched by name. A node whose claim is Initialized stays
/// initialized though it is not Ready now ([`joiner_core::NodeLife::initialized`]), and every
/// node with a claim gets the labels the claim records, which drift reads
/// ([`joiner_core::NodeLife::recorded_labels`]). Returns a warning per claim that could not be
/// sized.
pub fn settle_initializing(
    snap_nodes: &mut [Node],
    kube_nodes: &[Arc<k8s::Node>],
    claims: &[Arc<NodeClaim>],
    catalog: &[InstanceType],
    daemonsets: &[DaemonSet],
    provisioners: &[Provisioner],
) -> Vec<String> {
    let mut warnings = Vec::new();
    let live: Vec<&NodeClaim> = claims
        .iter()
        .map(Arc::as_ref)
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .collect();
    for kube_node in kube_nodes {
        let Some(name) = kube_node.metadata.name.as_deref() else {
            continue;
        };
        // The controller's rule (`matching`): a claim whose recorded name is this Node's but
        // whose instance is another (a replacement took the name), or a warm member sharing
        // its instance with the claim it was handed to, is not this Node's claim.
        let Some(claim) = live
            .iter()
            .find(|c| super::matching::is_claims_node(c, kube_node))
        else {
            continue;
        };
        let Some(node) = snap_nodes.iter_mut().find(|n| n.name == name) else {
            continue;
        };
        // What the claim records is what drift reads (see `NodeLife::recorded_labels`).
        let mut recorded = crate::convert::node_claim::claim_labels(claim);
        if let Some(t) = claim
            .status
            .as_ref()
            .and_then(|s| s.instance_type.as_deref())
            .and_then(|name| catalog.iter().find(|t| t.name == name))
        {
            for (k, v) in &t.labels {
                recorded.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        node.life.recorded_labels = Some(Box::new(recorded));
        if claim.is_initialized() {
            // Initialized is for good, as Karpenter's: a node that went NotReady since is still
            // one of its Provisioner's initialized nodes (budgets count it, as disrupting).
            if !node
                .taints
                .iter()
                .any(|t| t.key == joiner_core::labels::UNREGISTERED_TAINT)
            {
                node.life.initialized = true;
            }
            continue;
        }
        let startup: HashSet<&str> = claim
            .spec
            .startup_taints
            .iter()
            .map(|t| t.key.as_str())
            .chain(STARTING_TAINTS.iter().copied())
            .collect();
        node.taints.retain(|t| !startup.contains(t.key.as_str()));
        // Its claim is not initialized: never a disruption candidate yet (empty because its
        // pods have not arrived, not because nobody needs it). A claim that records neither
        // launch nor registration (written by hand for `joiner plan`) leaves the node as it is.
        if claim.is_launched() || claim.is_registered() {
            node.life.initialized = false;
        }
        // Labels the kubelet may not set itself (node-role.kubernetes.io/…) arrive with
        // registration's patch, a moment after the Node: until then the node is planned
        // with the labels its claim promises, or a pod selecting one would buy another.
        for (key, value) in crate::convert::node_claim::claim_labels(claim) {
            node.labels.entry(key).or_insert(value);
        }
        let unreported = node.allocatable == joiner_core::Resources::default();
        // A device plugin reports its resources some time after the node is Ready: until
        // then the node is planned with what its type will have.
        let plugin_pending = claim
            .spec
            .resources
            .requests
            .keys()
            .any(|k| joiner_core::resources::is_extended(k) && node.allocatable.get(k) == 0);
        if unreported || plugin_pending {
            match in_flight_node(claim, catalog, daemonsets, provisioners) {
                Ok(sized) if unreported => {
                    node.allocatable = sized.allocatable;
                    node.capacity = sized.capacity;
                }
                Ok(sized) => {
                    for (name, amount) in sized.allocatable.extended() {
                        if node.allocatable.get(name) == 0 {
                            node.allocatable.set(name, *amount);
                            node.capacity
                                .set(name, sized.capacity.get(name).max(*amount));
                        }
                    }
                }
                Err(e) => warnings.push(format!("NodeClaim {}: {e}", claim.name())),
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(v: serde_json::Value) -> Arc<NodeClaim> {
        Arc::new(serde_json::from_value(v).expect("claim"))
    }

    #[test]
    fn a_node_is_settled_with_its_own_claim_as_the_controller_matches_it() {
        let kube_node: Arc<k8s::Node> = Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "a"},
                "spec": {"providerID": "aws:///us-east-1a/i-1"}}))
            .expect("node"),
        );
        let labelled = |name: &str, team: &str, status: serde_json::Value| {
            claim(
                json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
                "metadata": {"name": name},
                "spec": {"provisionerName": "web", "requirements": [
                    {"key": "team", "operator": "In", "values": [team]}]},
                "status": status}),
            )
        };
        // Listed first: a claim that once registered as `a` on another instance.
        let stale = labelled(
            "web-old",
            "old",
            json!({"providerID": "aws:///us-east-1a/i-5", "nodeName": "a"}),
        );
        // A warm member handed to the real claim shares its instance, not its Node.
        let member = claim(
            json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "web-warm", "labels": {"joiner.sh/warm-pool": "web"}},
            "spec": {"provisionerName": "web", "requirements": [
                {"key": "team", "operator": "In", "values": ["warm"]}]},
            "status": {"providerID": "aws:///us-east-1a/i-1", "warmPool": {"phase": "Claimed"}}}),
        );
        let real = labelled(
            "web-new",
            "new",
            json!({"providerID": "aws:///us-east-1a/i-1"}),
        );
        let mut nodes = vec![joiner_core::Node {
            name: "a".into(),
            ..Default::default()
        }];
        settle_initializing(
            &mut nodes,
            &[kube_node],
            &[stale, member, real],
            &[],
            &[],
            &[],
        );
        let recorded = nodes[0].life.recorded_labels.as_deref().expect("recorded");
        assert_eq!(recorded.get("team").map(String::as_str), Some("new"));
    }
}
