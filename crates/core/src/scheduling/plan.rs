//! What a scheduling pass decides: the nodes to launch, the existing nodes used, and the pods
//! that cannot be placed with the reason why.

use crate::instance_type::CapacityType;
use crate::requirements::Requirements;
use std::sync::Arc;

use crate::resources::Resources;

/// A node the simulation would launch: everything its NodeClaim needs, so building the claim
/// and launching it never re-derive what the simulation decided.
#[derive(Clone, Debug, PartialEq)]
pub struct NewNode {
    /// Deterministic claim name: `<provisioner>-<n>`.
    pub name: String,
    /// Provisioner that launches it.
    pub provisioner: String,
    /// The cheapest type that holds its pods.
    pub instance_type: String,
    /// Zone of the chosen offering.
    pub zone: String,
    /// Capacity type of the chosen offering.
    pub capacity_type: CapacityType,
    /// USD per hour of the chosen offering.
    pub price_per_hour: f64,
    /// True when the price is a stand-in.
    pub price_estimated: bool,
    /// Every type that would hold the pods, cheapest first (what CreateFleet gets). Shared
    /// by the nodes of one draft: up to 60 names per node were a third of a large plan's
    /// memory.
    pub instance_type_options: Arc<[String]>,
    /// The price of each option (same order) for the chosen capacity type: its cheapest
    /// available offering the node's requirements allow; `None` when it has none for that
    /// capacity type (the launch leaves it out).
    pub option_prices: Arc<[Option<f64>]>,
    /// The node's requirements: the Provisioner's node requirements merged with the term the
    /// simulation used for each of its pods (zone and capacity-type pins, custom labels, kept
    /// preferences).
    pub requirements: Requirements,
    /// Pods placed on it, `namespace/name`.
    pub pods: Vec<String>,
    /// The same pods as indices into the snapshot's `pods`.
    pub pod_indices: Vec<usize>,
    /// Sum of the pods' requests plus DaemonSet overhead on the chosen type.
    pub requests: Resources,
}

impl NewNode {
    /// The options that have a price, with it, cheapest first (ties by name): what the cloud
    /// is asked to launch.
    pub fn priced_options(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = self
            .instance_type_options
            .iter()
            .zip(self.option_prices.iter())
            .filter_map(|(name, price)| price.map(|p| (name.clone(), p)))
            .collect();
        out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        out
    }

    /// The node as the kube-scheduler will see it once it joins, for the rules that count
    /// nodes (a spread counts its domain even when none of its pods match): the labels of its
    /// instance type `ty`, of its Provisioner `prov`, its single-valued requirements, its zone,
    /// capacity type, hostname and instance type; the Provisioner's taints (sizes are left to
    /// the caller: disruption sizes it by the Provisioner's kubelet settings).
    pub fn as_node(
        &self,
        ty: Option<&crate::instance_type::InstanceType>,
        prov: Option<&crate::provisioner::Provisioner>,
    ) -> crate::pod::Node {
        use crate::labels;
        let mut l = ty.map(|t| t.labels.clone()).unwrap_or_default();
        if let Some(p) = prov {
            l.extend(p.labels.clone());
        }
        for (k, r) in self.requirements.iter() {
            if let Some(v) = r.single_value() {
                l.insert(k.clone(), v.to_string());
            }
        }
        l.insert(labels::ZONE.into(), self.zone.clone());
        l.insert(
            labels::CAPACITY_TYPE.into(),
            self.capacity_type.as_str().into(),
        );
        l.insert(labels::HOSTNAME.into(), self.name.clone());
        l.insert(labels::PROVISIONER_NAME.into(), self.provisioner.clone());
        if let Some(t) = ty {
            l.insert(labels::INSTANCE_TYPE.into(), t.name.clone());
        }
        crate::pod::Node {
            name: self.name.clone(),
            labels: l,
            taints: prov.map(|p| p.taints.clone()).unwrap_or_default(),
            ..crate::pod::Node::default()
        }
    }

    /// The zones the node's requirements allow, when they list them (empty: any zone).
    pub fn zones(&self) -> Vec<String> {
        self.requirements
            .get(crate::labels::ZONE)
            .and_then(|r| r.in_values())
            .map(<[String]>::to_vec)
            .unwrap_or_default()
    }
}

/// Pods placed on a node that already exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingNodeUse {
    /// Node name.
    pub name: String,
    /// Pods placed there, `namespace/name`.
    pub pods: Vec<String>,
}

/// A pod the simulation could not place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    /// `namespace/name`.
    pub pod: String,
    /// Why, in words a person can act on.
    pub reason: String,
}

/// The preferences a pod had to give up to be placed (or before it was found unschedulable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relaxed {
    /// `namespace/name`.
    pub pod: String,
    /// The preferences relaxed, in the order they were given up (lightest first).
    pub preferences: Vec<String>,
}

/// The outcome of a scheduling pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Nodes to launch, in creation order.
    pub new_nodes: Vec<NewNode>,
    /// Existing nodes that receive pods, by name.
    pub existing_nodes: Vec<ExistingNodeUse>,
    /// Pods left pending.
    pub unschedulable: Vec<Unschedulable>,
    /// Pods placed only after relaxing preferences, by pod key.
    pub relaxed: Vec<Relaxed>,
}

impl Plan {
    /// Total hourly price of the new nodes.
    pub fn new_price_per_hour(&self) -> f64 {
        // `+ 0.0` turns the empty sum (-0.0) into 0.0.
        self.new_nodes.iter().map(|n| n.price_per_hour).sum::<f64>() + 0.0
    }
}
