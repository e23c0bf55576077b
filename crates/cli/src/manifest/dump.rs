//! Dumps that hold both a workload and its pods (`kubectl get deploy,rs,pods -o yaml`): the
//! workload's replicas already exist as the dumped pods, so expanding its template as well
//! would plan for twice the pods.
//!
//! After every document is read, each real pod is attributed to the workload in the input that
//! controls it (a ReplicaSet in the input, or named `<deployment>-<hash>`, counts for its
//! Deployment), and that workload is expanded only into the replicas not dumped. A ReplicaSet
//! controlled by a Deployment in the input is covered by the Deployment and expands into
//! nothing.

use std::collections::{HashMap, HashSet};

use joiner_core::Owner;

use super::Loaded;

/// One workload's template pods in `Loaded::snapshot.pods`.
#[derive(Clone, Debug)]
pub(crate) struct Expansion {
    /// Deployment, ReplicaSet, StatefulSet or Job.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The workload's own controller (a ReplicaSet's Deployment).
    pub owner: Option<Owner>,
    /// Index of its first pod in `snapshot.pods`.
    pub first: usize,
    /// How many pods it expanded into.
    pub count: usize,
}

type Key = (String, String, String);

fn key(kind: &str, namespace: &str, name: &str) -> Key {
    (kind.to_string(), namespace.to_string(), name.to_string())
}

/// The Deployment of a ReplicaSet named `<deployment>-<pod-template-hash>`.
fn deployment_by_name<'a>(rs: &str, deployments: &HashSet<&'a str>) -> Option<&'a str> {
    let (prefix, hash) = rs.rsplit_once('-')?;
    let is_hash = !hash.is_empty() && hash.chars().all(|c| c.is_ascii_alphanumeric());
    if is_hash {
        deployments.get(prefix).copied()
    } else {
        None
    }
}

/// Drops template pods standing for replicas the input already holds as pods, with a warning
/// per workload affected.
pub(crate) fn settle(loaded: &mut Loaded) {
    let expansions = std::mem::take(&mut loaded.expansions);
    if expansions.is_empty() {
        return;
    }
    let by_key: HashMap<Key, usize> = expansions
        .iter()
        .enumerate()
        .map(|(i, e)| (key(&e.kind, &e.namespace, &e.name), i))
        .collect();
    let mut deployments: HashMap<&str, HashSet<&str>> = HashMap::new();
    for e in expansions.iter().filter(|e| e.kind == "Deployment") {
        deployments
            .entry(e.namespace.as_str())
            .or_default()
            .insert(e.name.as_str());
    }
    // The expansion a real pod's controller stands for.
    let attribute = |namespace: &str, owner: &Owner| -> Option<usize> {
        if owner.kind == "ReplicaSet" {
            let via_object = by_key
                .get(&key("ReplicaSet", namespace, &owner.name))
                .and_then(|&i| expansions[i].owner.as_ref())
                .filter(|o| o.kind == "Deployment")
                .and_then(|o| by_key.get(&key("Deployment", namespace, &o.name)));
            let via_name = deployments
                .get(namespace)
                .and_then(|d| deployment_by_name(&owner.name, d))
                .and_then(|d| by_key.get(&key("Deployment", namespace, d)));
            if let Some(&i) = via_object.or(via_name) {
                return Some(i);
            }
        }
        by_key
            .get(&key(&owner.kind, namespace, &owner.name))
            .copied()
    };

    let synthetic: HashSet<usize> = expansions
        .iter()
        .flat_map(|e| e.first..e.first + e.count)
        .collect();
    let mut real_names: Vec<HashSet<String>> = vec![HashSet::new(); expansions.len()];
    for (i, pod) in loaded.snapshot.pods.iter().enumerate() {
        if synthetic.contains(&i) {
            continue;
        }
        if let Some(e) = pod
            .owner
            .as_ref()
            .and_then(|o| attribute(&pod.namespace, o))
        {
            real_names[e].insert(pod.name.clone());
        }
    }

    let mut drop: HashSet<usize> = HashSet::new();
    for (i, e) in expansions.iter().enumerate() {
        let covered_by_deployment = e.kind == "ReplicaSet"
            && e.owner.as_ref().is_some_and(|o| {
                o.kind == "Deployment"
                    && by_key.contains_key(&key("Deployment", &e.namespace, &o.name))
            });
        if covered_by_deployment {
            drop.extend(e.first..e.first + e.count);
            continue;
        }
        let real = &real_names[i];
        if real.is_empty() {
            continue;
        }
        let range = e.first..e.first + e.count;
        // Template pods named like a dumped pod (a StatefulSet's `db-0`) go first, then the
        // last ones, until the dumped pods are accounted for.
        let mut to_drop = real.len().min(e.count);
        let mut gone = Vec::new();
        for p in range.clone() {
            if to_drop > 0 && real.contains(&loaded.snapshot.pods[p].name) {
                gone.push(p);
                to_drop -= 1;
            }
        }
        for p in range.rev() {
            if to_drop == 0 {
                break;
            }
            if !gone.contains(&p) {
                gone.push(p);
                to_drop -= 1;
            }
        }
        let kept = e.count - gone.len();
        drop.extend(gone);
        loaded.warnings.push(format!(
            "{} {}/{}: {} of its pods are in the input; {kept} more replica(s) planned from its template",
            e.kind,
            e.namespace,
            e.name,
            real.len()
        ));
    }
    if drop.is_empty() {
        return;
    }
    let mut index = 0;
    loaded.snapshot.pods.retain(|_| {
        let keep = !drop.contains(&index);
        index += 1;
        keep
    });
}
