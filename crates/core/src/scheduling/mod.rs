//! The scheduling simulation: where pending pods would go, and which nodes to buy for them.
//!
//! Order of placement, as the kube-scheduler will see it once nodes exist: existing (and
//! in-flight) nodes first at no new cost, then new nodes from the highest-weight Provisioner that
//! accepts the pod. New node shapes are chosen for cost (see [`packer`]).

pub mod affinity;
pub mod candidates;
pub mod classes;
pub mod colocation;
pub mod config_lp;
pub mod existing;
pub mod explain;
pub mod lp;
pub mod node_rules;
pub mod packer;
pub mod plan;
pub mod ports;
pub mod preferences;
pub mod reasons;
pub mod reqtable;
pub mod topology;
pub mod typeset;

use std::collections::BTreeMap;

use crate::instance_type::{offering_allowed, CapacityType, InstanceType};
use crate::pod::Pod;
use crate::provisioner::Provisioner;
use crate::resources::Resources;
use crate::snapshot::Snapshot;

use candidates::{ClassFit, ProvisionerView};
use colocation::Together;
use node_rules::NodeRules;
use packer::Member;
pub use plan::{ExistingNodeUse, NewNode, Plan, Relaxed, Unschedulable};
use reasons::Reason;
use reqtable::ReqTable;

/// Knobs of a scheduling pass.
#[derive(Clone, Debug)]
pub struct Options {
    /// How many instance types a new node lists as options (CreateFleet takes at most 60).
    pub max_instance_type_options: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_instance_type_options: 60,
        }
    }
}

/// Runs a scheduling pass over a snapshot against a catalog of instance types: preferences are
/// honored as hard rules first and relaxed pod by pod where they keep a pod from being placed.
pub fn simulate(snapshot: &Snapshot, catalog: &[InstanceType], opts: &Options) -> Plan {
    preferences::solve(snapshot, |s| place(s, catalog, opts))
}

/// One pass with every constraint of the snapshot's pods taken as hard.
fn place(snapshot: &Snapshot, catalog: &[InstanceType], opts: &Options) -> Plan {
    let pods = &snapshot.pods;
    let pending: Vec<usize> = pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.node_name.is_none() && !p.is_daemon())
        .map(|(i, _)| i)
        .collect();
    let default_prov;
    let mut provs: Vec<&Provisioner> = if snapshot.provisioners.is_empty() {
        default_prov = Provisioner::default_provisioner();
        vec![&default_prov]
    } else {
        snapshot.provisioners.iter().collect()
    };
    provs.sort_by(|a, b| b.weight.cmp(&a.weight).then(a.name.cmp(&b.name)));

    // Zone and capacity-type terms pin groups of pods to a domain before anything is placed.
    let pinned = topology::pin(
        pods,
        &snapshot.nodes,
        classes::build(pods, &pending),
        &provs,
        catalog,
    );
    let classes = pinned.classes;
    let templates: Vec<Pod> = classes.iter().map(|c| c.effective_pod(pods)).collect();
    let rules = NodeRules::build(pods, &templates, &classes);
    let together = colocation::analyze(pods, &templates);
    // A one-node group that has been given its node takes no other.
    let mut sealed = vec![false; classes.len()];
    let mut remaining: Vec<i64> = classes.iter().map(|c| c.pods.len() as i64).collect();
    // Pods are handed out from the front of each class in input order.
    let mut cursor: Vec<usize> = vec![0; classes.len()];

    // 1. Existing nodes.
    let mut existing = existing::ExistingNodes::new(&snapshot.nodes, pods, &rules);
    let mut refusals: Vec<Vec<(String, Reason)>> = vec![Vec::new(); classes.len()];
    for (ci, class) in classes.iter().enumerate() {
        let only = match &together[ci] {
            Together::Free => None,
            Together::OnNodes(n) => Some(n),
            // Followers go after their targets; a cycle's leader only onto new nodes, with
            // its partners.
            Together::OneNode | Together::Refused(_) | Together::Follows(_) => continue,
        };
        let placed = existing.place_class(ci, &templates[ci], &class.pods, &rules, only);
        remaining[ci] -= placed as i64;
        cursor[ci] += placed;
    }
    // Followers onto the existing nodes that run, or were just given, a pod of each term.
    if together.iter().any(|t| t.follower().is_some()) {
        let mut class_of = vec![usize::MAX; pods.len()];
        for (ci, class) in classes.iter().enumerate() {
            for &i in &class.pods {
                class_of[i] = ci;
            }
        }
        for ci in 0..classes.len() {
            let Some(f) = together[ci].follower() else {
                continue;
            };
            let only: std::collections::BTreeSet<String> = existing
                .nodes
                .iter()
                .zip(&existing.placed)
                .filter(|(n, placed)| {
                    f.terms.iter().all(|ft| {
                        ft.running.contains(&n.name)
                            || placed.iter().any(|&i| ft.targets.contains(&class_of[i]))
                    })
                })
                .map(|(n, _)| n.name.clone())
                .collect();
            if only.is_empty() {
                continue;
            }
            let placed =
                existing.place_class(ci, &templates[ci], &classes[ci].pods, &rules, Some(&only));
            remaining[ci] -= placed as i64;
            cursor[ci] += placed;
        }
    }
    let followers = colocation::followers_of(&together);
    for (ci, t) in together.iter().enumerate() {
        let why = match t {
            Together::Refused(why) => why.clone(),
            Together::OnNodes(_) => format!(
                "pod affinity on {}: no room on the nodes running the pods it selects",
                crate::labels::HOSTNAME
            ),
            _ => continue,
        };
        if remaining[ci] > 0 {
            refusals[ci].push((String::new(), Reason::Topology(why)));
            sealed[ci] = true;
        }
    }

    // 2. New nodes, provisioner by provisioner in weight order.

    let mut table = ReqTable::default();
    let mut new_nodes: Vec<NewNode> = Vec::new();
    for prov in provs {
        if remaining.iter().all(|r| *r == 0) {
            break;
        }
        let used = owned_capacity(snapshot, &prov.name);
        let mut view = ProvisionerView::new(prov, catalog, &snapshot.daemonsets, &used, &mut table);
        let mut members = Vec::new();
        for ci in 0..classes.len() {
            if remaining[ci] == 0 || sealed[ci] {
                continue;
            }
            match view.fit_class(catalog, &mut table, &templates[ci]) {
                ClassFit::Fits { req, types } => members.push(Member {
                    class: ci,
                    req,
                    types,
                    one_node: together[ci] == Together::OneNode,
                    follow: match &together[ci] {
                        Together::Follows(f) => Some(f.clone()),
                        _ => None,
                    },
                    followers: followers[ci].clone(),
                }),
                ClassFit::Refused(r) => refusals[ci].push((prov.name.clone(), r)),
            }
        }
        if members.is_empty() {
            continue;
        }
        let mut refused = Vec::new();
        let drafts = packer::pack(
            &mut view,
            catalog,
            &mut table,
            &classes,
            &members,
            &rules,
            &mut remaining,
            &mut refused,
        );
        for (ci, r) in refused {
            refusals[ci].push((prov.name.clone(), r));
        }
        for m in &members {
            if let (Some(f), true) = (together[m.class].follower(), remaining[m.class] > 0) {
                refusals[m.class].push((prov.name.clone(), Reason::Topology(f.no_room())));
            }
        }
        for m in &members {
            if m.one_node && (remaining[m.class] as usize) < classes[m.class].pods.len() {
                sealed[m.class] = true;
            }
        }
        let mut zone_turn: BTreeMap<String, usize> = BTreeMap::new();
        for d in drafts {
            let t = &catalog[view.types[d.chosen]];
            let reqs = table.get(d.req);
            for _ in 0..d.copies {
                // Among equally cheap offerings, rotate zones so unconstrained capacity spreads.
                let cheapest: Vec<_> = {
                    let min = t
                        .cheapest_offering(reqs)
                        .map(|o| o.price)
                        .unwrap_or(f64::INFINITY);
                    let tied: Vec<_> = t
                        .offerings
                        .iter()
                        .filter(|o| o.available && offering_allowed(o, reqs) && o.price <= min)
                        .collect();
                    // Spot wins a tie: when a provisioner allows it, that is what CreateFleet
                    // will be asked for first.
                    let spot = tied.iter().any(|o| o.capacity_type == CapacityType::Spot);
                    tied.into_iter()
                        .filter(|o| !spot || o.capacity_type == CapacityType::Spot)
                        .collect()
                };
                let turn = zone_turn.entry(t.name.clone()).or_default();
                let Some(offering) = cheapest.get(*turn % cheapest.len().max(1)).copied() else {
                    // Cannot happen (the packer priced this type under these requirements), but
                    // if it did the pods must stay pending rather than vanish.
                    for (c, k) in &d.counts {
                        remaining[*c] += k;
                        refusals[*c].push((
                            prov.name.clone(),
                            Reason::ResourcesTogether("an available offering".into()),
                        ));
                    }
                    continue;
                };
                *turn += 1;
                let mut node_pods = Vec::new();
                let mut pod_indices = Vec::new();
                for (c, k) in &d.counts {
                    let start = cursor[*c];
                    let end = start + *k as usize;
                    node_pods.extend(classes[*c].pods[start..end].iter().map(|&i| pods[i].key()));
                    pod_indices.extend_from_slice(&classes[*c].pods[start..end]);
                    cursor[*c] = end;
                }
                let mut requests = d.pod_requests.clone();
                requests.add(&view.overhead[d.chosen]);
                let options: Vec<&InstanceType> = d
                    .options
                    .iter()
                    .take(opts.max_instance_type_options)
                    .map(|&o| &catalog[view.types[o]])
                    .collect();
                new_nodes.push(NewNode {
                    name: format!("{}-{}", prov.name, new_nodes.len() + 1),
                    provisioner: prov.name.clone(),
                    instance_type: t.name.clone(),
                    zone: offering.zone.clone(),
                    capacity_type: offering.capacity_type,
                    price_per_hour: offering.price,
                    price_estimated: offering.price_estimated,
                    instance_type_options: options.iter().map(|t| t.name.clone()).collect(),
                    option_prices: options
                        .iter()
                        .map(|t| {
                            t.offerings
                                .iter()
                                .filter(|o| {
                                    o.available
                                        && o.capacity_type == offering.capacity_type
                                        && offering_allowed(o, reqs)
                                })
                                .map(|o| o.price)
                                .min_by(f64::total_cmp)
                        })
                        .collect(),
                    requirements: reqs.clone(),
                    pods: node_pods,
                    pod_indices,
                    requests,
                });
            }
        }
    }

    let existing_nodes = existing
        .nodes
        .iter()
        .zip(&existing.placed)
        .filter(|(_, placed)| !placed.is_empty())
        .map(|(n, placed)| ExistingNodeUse {
            name: n.name.clone(),
            pods: placed.iter().map(|&i| pods[i].key()).collect(),
        })
        .collect();
    let mut unschedulable: Vec<Unschedulable> = pinned
        .refused
        .iter()
        .map(|(i, why)| Unschedulable {
            pod: pods[*i].key(),
            reason: why.clone(),
        })
        .collect();
    for (ci, class) in classes.iter().enumerate() {
        if remaining[ci] <= 0 {
            continue;
        }
        let reason = reasons::combine(&refusals[ci]);
        for &i in &class.pods[cursor[ci]..] {
            unschedulable.push(Unschedulable {
                pod: pods[i].key(),
                reason: reason.clone(),
            });
        }
    }
    unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
    Plan {
        new_nodes,
        existing_nodes,
        unschedulable,
        relaxed: Vec::new(),
    }
}

/// Capacity of the existing nodes a provisioner owns (counts against its limits).
fn owned_capacity(snapshot: &Snapshot, prov: &str) -> Resources {
    let mut used = Resources::default();
    for n in &snapshot.nodes {
        if n.provisioner() == Some(prov) {
            used.add(&n.capacity);
        }
    }
    used
}

#[cfg(test)]
mod constraint_properties;
#[cfg(test)]
mod constraint_tests;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
