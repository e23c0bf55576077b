//! The Provisioner as the simulation sees it: which nodes it may launch and how many.

use crate::resources::Resources;
use std::collections::BTreeMap;

use crate::kubelet::KubeletSettings;
use crate::labels;
use crate::requirements::{Requirement, Requirements};
use crate::taints::Taint;

/// The limit name that caps how many nodes a Provisioner may own (Karpenter's
/// `limits.nodes`): every node counts one, whatever its size.
pub const NODES_LIMIT: &str = "nodes";

/// Caps on what a Provisioner may own (existing and new nodes), in capacity units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Millicores.
    pub cpu: Option<i64>,
    /// Bytes.
    pub memory: Option<i64>,
    /// Every other capped resource (`pods`, `ephemeral-storage`, `nvidia.com/gpu`, ...), in
    /// the model's unit for it, and [`NODES_LIMIT`], a count of nodes.
    pub other: std::collections::BTreeMap<String, i64>,
}

impl Limits {
    /// Every capped resource with its limit: cpu, memory, then the others by name.
    pub fn all(&self) -> Vec<(&str, i64)> {
        let mut out = Vec::new();
        if let Some(c) = self.cpu {
            out.push(("cpu", c));
        }
        if let Some(m) = self.memory {
            out.push(("memory", m));
        }
        out.extend(self.other.iter().map(|(k, v)| (k.as_str(), *v)));
        out
    }
}

/// A Provisioner: requirements and shape of the nodes it launches.
#[derive(Clone, Debug, PartialEq)]
pub struct Provisioner {
    /// Name.
    pub name: String,
    /// Higher weights are tried first (0–100).
    pub weight: i32,
    /// Constraints on the nodes it launches (instance types, zones, capacity types, custom labels).
    pub requirements: Requirements,
    /// Labels put on every node it launches.
    pub labels: BTreeMap<String, String>,
    /// Taints put on every node it launches.
    pub taints: Vec<Taint>,
    /// Taints present only while the node starts; pods need not tolerate them.
    pub startup_taints: Vec<Taint>,
    /// Resource caps.
    pub limits: Limits,
    /// The kubelet and volume settings that change its nodes' allocatable (maxPods,
    /// podsPerCore, reservations, eviction thresholds, the ephemeral volume's size).
    pub kubelet: KubeletSettings,
    /// NodeTemplate name (providerRef).
    pub node_template: Option<String>,
    /// Capacity its NodeClaims hold outside the snapshot's nodes — its warm-pool members, each
    /// also one against a `nodes` limit — counted against its limits as Karpenter counts every
    /// NodeClaim of a NodePool.
    pub held: Resources,
}

impl Provisioner {
    /// The provisioner used when the input has none: every instance type, linux, on-demand.
    pub fn default_provisioner() -> Provisioner {
        let mut requirements = Requirements::new();
        requirements.add(labels::OS, Requirement::single("linux"));
        Provisioner {
            name: "default".into(),
            weight: 0,
            requirements,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Limits::default(),
            kubelet: KubeletSettings::default(),
            node_template: None,
            held: Resources::default(),
        }
    }

    /// Requirements of a node this provisioner launches: its own requirements, its labels as
    /// single-value requirements, its name, and on-demand when no capacity type is required.
    pub fn node_requirements(&self) -> Requirements {
        let mut r = self.requirements.clone();
        if r.get(labels::CAPACITY_TYPE).is_none() {
            r.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
        }
        for (k, v) in &self.labels {
            r.add(k, Requirement::single(v));
        }
        r.add(labels::PROVISIONER_NAME, Requirement::single(&self.name));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_to_on_demand() {
        let p = Provisioner::default_provisioner();
        let r = p.node_requirements();
        assert_eq!(
            r.get(labels::CAPACITY_TYPE).unwrap().to_string(),
            "In [on-demand]"
        );
        assert!(r.get(labels::PROVISIONER_NAME).unwrap().allows("default"));
    }
}
