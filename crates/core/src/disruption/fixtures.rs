//! Test fixtures of the disruption tests: nodes of the test catalog launched by the default
//! Provisioner, pods with CPU requests, clusters, settings.

use std::collections::BTreeMap;

use crate::labels;
use crate::pod::{Node, Pod};
use crate::provisioner::Provisioner;
use crate::requirements::Requirement;
use crate::resources::Resources;
use crate::snapshot::Snapshot;
use crate::testing::catalog::catalog;

use super::{ConsolidationPolicy, DisruptionSettings};

pub const GI: i64 = 1 << 30;

/// A node of `itype` from the test catalog, launched by the default Provisioner.
pub fn node(name: &str, itype: &str, capacity_type: &str) -> Node {
    let t = catalog()
        .into_iter()
        .find(|t| t.name == itype)
        .expect("type");
    let mut n = Node {
        name: name.into(),
        labels: BTreeMap::from([
            (labels::INSTANCE_TYPE.to_string(), itype.to_string()),
            (labels::ZONE.to_string(), "z-a".to_string()),
            (labels::CAPACITY_TYPE.to_string(), capacity_type.to_string()),
            (labels::HOSTNAME.to_string(), name.to_string()),
            (labels::PROVISIONER_NAME.to_string(), "default".to_string()),
            (labels::OS.to_string(), "linux".to_string()),
            (labels::ARCH.to_string(), "amd64".to_string()),
        ]),
        capacity: t.capacity.clone(),
        allocatable: t.allocatable.clone(),
        ..Node::default()
    };
    n.life.initialized = true;
    n.life.created_at = Some(0);
    n
}

/// A required pod-affinity term on the hostname to pods labelled `app`.
pub fn hostname_affinity_to(app: &str) -> crate::pod::PodAffinityTerm {
    let mut selector = crate::requirements::Requirements::new();
    selector.add("app", Requirement::single(app));
    crate::pod::PodAffinityTerm {
        topology_key: labels::HOSTNAME.into(),
        selector,
        namespaces: Vec::new(),
        namespace_selector: None,
        anti: false,
        weight: None,
    }
}

pub fn pod(name: &str, on: &str, cpu: i64) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        node_name: Some(on.into()),
        requests: Resources::new(cpu, GI, 0, 1),
        ..Pod::default()
    }
}

/// The cluster, its Provisioner launching on-demand nodes only.
pub fn cluster(nodes: Vec<Node>, pods: Vec<Pod>) -> Snapshot {
    Snapshot {
        nodes,
        pods,
        provisioners: vec![Provisioner::default_provisioner()],
        ..Snapshot::default()
    }
}

/// The cluster, its Provisioner launching spot or on-demand nodes.
pub fn spot_cluster(nodes: Vec<Node>, pods: Vec<Pod>) -> Snapshot {
    let mut prov = Provisioner::default_provisioner();
    prov.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::one_of(["spot", "on-demand"]),
    );
    Snapshot {
        nodes,
        pods,
        provisioners: vec![prov],
        ..Snapshot::default()
    }
}

pub fn aggressive() -> DisruptionSettings {
    DisruptionSettings {
        consolidation: true,
        policy: ConsolidationPolicy::Aggressive,
        ..DisruptionSettings::default()
    }
}
