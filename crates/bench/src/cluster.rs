//! Running clusters for the disruption benchmark: a workload planned and launched, then a
//! share of its pods finished — the churn that leaves nodes underutilized — with one
//! PodDisruptionBudget per app label (every tenth allowing no eviction).

use std::collections::{BTreeSet, HashMap};

use joiner_core::disruption::working::node_of;
use joiner_core::disruption::Pdb;
use joiner_core::scheduling::{simulate, Options};
use joiner_core::{InstanceType, Pod, Provisioner, Requirement, Requirements, Snapshot};

use crate::workload::Rng;

/// The cluster `pending` makes once joiner has launched its plan on `catalog` with
/// `provisioner` (nodes initialized, launched at time 0; pods it could not place left out),
/// after `finished_percent` % of the pods, drawn with `seed`, have finished.
pub fn running(
    pending: Vec<Pod>,
    catalog: &[InstanceType],
    provisioner: Provisioner,
    seed: u64,
    finished_percent: u64,
) -> Snapshot {
    let mut s = Snapshot {
        pods: pending,
        provisioners: vec![provisioner],
        ..Snapshot::default()
    };
    let plan = simulate(&s, catalog, &Options::default());
    let mut on: HashMap<&str, &str> = HashMap::new();
    for n in &plan.new_nodes {
        for k in &n.pods {
            on.insert(k, &n.name);
        }
    }
    let mut nodes = Vec::with_capacity(plan.new_nodes.len());
    for n in &plan.new_nodes {
        if let Some(mut node) = node_of(n, catalog, &s.provisioners) {
            node.life.initialized = true;
            node.life.created_at = Some(0);
            nodes.push(node);
        }
    }
    let mut rng = Rng::new(seed);
    let pods: Vec<Pod> = s
        .pods
        .iter()
        .filter_map(|p| {
            let node = on.get(p.key().as_str())?;
            (rng.below(100) >= finished_percent).then(|| {
                let mut p = p.clone();
                p.node_name = Some(node.to_string());
                p
            })
        })
        .collect();
    let apps: BTreeSet<&str> = pods
        .iter()
        .filter_map(|p| p.labels.get("app").map(String::as_str))
        .collect();
    let pdbs = apps
        .iter()
        .enumerate()
        .map(|(i, app)| {
            let mut selector = Requirements::new();
            selector.add("app", Requirement::single(app));
            Pdb {
                namespace: "default".into(),
                name: app.to_string(),
                selector: Some(selector),
                disruptions_allowed: if i % 10 == 9 { 0 } else { 1 },
                always_allow_unhealthy: false,
            }
        })
        .collect();
    s.pods = pods;
    s.nodes = nodes;
    s.pdbs = pdbs;
    s
}
