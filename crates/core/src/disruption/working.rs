//! The cluster as the planner's earlier decisions leave it: removed nodes gone, their pods
//! where the decision's simulation put them, replacements added as nodes not yet initialized.
//! Later decisions are simulated against it, so two decisions never count on the same room.

use std::collections::HashMap;

use crate::instance_type::InstanceType;
use crate::pod::Node;
use crate::provisioner::Provisioner;
use crate::scheduling::{NewNode, Plan};
use crate::snapshot::Snapshot;

use super::candidates::leaves_with_node;

/// The node a planned new node becomes: its type's labels, its Provisioner's labels and
/// taints, the single values of its requirements, its zone, capacity type and hostname, sized
/// by the Provisioner's kubelet settings. `None` when its type is not in the catalog.
pub fn node_of(
    new: &NewNode,
    catalog: &[InstanceType],
    provisioners: &[Provisioner],
) -> Option<Node> {
    let t = catalog.iter().find(|t| t.name == new.instance_type)?;
    let default = Provisioner::default_provisioner();
    let prov = provisioners
        .iter()
        .find(|p| p.name == new.provisioner)
        .unwrap_or(&default);
    Some(Node {
        capacity: prov.kubelet.capacity(t),
        allocatable: prov.kubelet.allocatable(t),
        ..new.as_node(Some(t), Some(prov))
    })
}

/// Applies a decision to `snapshot`: the nodes named in `removed` go (with the pods that
/// leave with them), every pod the decision's `plan` placed on an existing node moves there,
/// and `replacements` join, with the pods they list, as nodes not yet initialized and closed
/// to other pods (each is sized for its own; a later decision must not count on its room).
pub fn apply(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    removed: &[String],
    plan: &Plan,
    replacements: &[NewNode],
) {
    // A decision removes few nodes: comparing names beats hashing every pod's.
    let gone = |n: &str| removed.iter().any(|r| r == n);
    let mut to: HashMap<&str, String> = HashMap::new();
    for used in &plan.existing_nodes {
        for k in &used.pods {
            to.insert(k.as_str(), used.name.clone());
        }
    }
    let mut new_nodes = Vec::new();
    for r in replacements {
        for k in &r.pods {
            to.insert(k.as_str(), r.name.clone());
        }
        if let Some(mut node) = node_of(r, catalog, &snapshot.provisioners) {
            node.unschedulable = true;
            new_nodes.push(node);
        }
    }
    snapshot
        .pods
        .retain(|p| !(leaves_with_node(p) && p.node_name.as_deref().is_some_and(gone)));
    for p in &mut snapshot.pods {
        if p.node_name.as_deref().is_some_and(gone) {
            // A moved pod goes where the decision placed it; one it did not place (there is
            // none in a taken decision) waits pending.
            p.node_name = to.get(p.key().as_str()).cloned();
        }
    }
    snapshot.nodes.retain(|n| !gone(&n.name));
    snapshot.nodes.extend(new_nodes);
}
