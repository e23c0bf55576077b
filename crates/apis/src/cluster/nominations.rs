//! Nominations: the pods a NodeClaim's room was bought or set aside for.
//!
//! A plan that buys a node for some pods, or places pods on a node still coming up, decides
//! where those pods go; until they bind, the room is theirs. Without a record, the next
//! snapshot sees that room free: a second interruption plans its pods onto the first one's
//! replacement, a batch gives it to other pods, and the pods it was bought for wait for
//! another node. So the pods are written on the claim (annotation
//! [`labels::NOMINATED_PODS`], with the claim and whenever a plan adds pods to it) — a
//! restart keeps them — each as `namespace/name`, or `namespace/name@node` for a pod that was
//! bound to `node` (one it leaves: an interrupted or disrupted node) when nominated. Every
//! snapshot made with a catalog ([`apply`]) holds the room:
//!
//! - a nominated pod still pending is placed on the claim's node;
//! - a nominated pod still on the node it was nominated from gets a reservation on the
//!   claim's node, a copy named `<pod>@<claim>`; a pending pod of the same owner and requests
//!   (the replica that replaces an evicted one) takes the reservation's place;
//! - a pod that is gone, or bound anywhere else (the kube-scheduler chose another node),
//!   needs nothing.
//!
//! Each takes room only while it fits next to what is already there, each pod on one claim
//! only, and the nominated pods mark the node (`PodDisruption::nominated`) so disruption
//! leaves it alone. Nominations hold until the claim has been Initialized for [`GRACE`] (the
//! kube-scheduler binds within seconds of the node becoming schedulable), the claim is
//! deleted, or it has not been Initialized within [`LAPSE`] of its creation (a node that never
//! became usable must not hold pods for ever; liveness replaces it). Past the grace, the
//! reservations of pods still on a node on its way out (tainted disrupted, cordoned, being
//! deleted) hold on: a drain a PodDisruptionBudget slows must find their room still theirs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::{condition, NodeClaim};
use joiner_core::scheduling::ExistingNodeUse;
use joiner_core::{labels, Pod, Resources, Snapshot};
use k8s_openapi::jiff::Timestamp;

/// Most pods recorded on one claim (more than any node runs); the oldest go first beyond it.
pub const MOST: usize = 1000;

/// How long nominations outlive the claim's Initialized condition.
pub const GRACE: Duration = Duration::from_secs(60);

/// How long after its creation a claim never Initialized keeps its nominations.
pub const LAPSE: Duration = Duration::from_secs(20 * 60);

/// The nomination entries of the pods at `indices` of `snap`: `namespace/name`, with
/// `@node` for a pod bound to a node (it moves from there).
pub fn entries(snap: &Snapshot, indices: &[usize]) -> Vec<String> {
    indices
        .iter()
        .filter_map(|&i| snap.pods.get(i))
        .map(entry)
        .collect()
}

/// The nomination entries of the pods `keys` (`namespace/name`) of `snap`.
pub fn entries_of_keys(snap: &Snapshot, keys: &[String]) -> Vec<String> {
    keys.iter()
        .map(|k| {
            snap.pods
                .iter()
                .find(|p| p.key() == *k)
                .map_or_else(|| k.clone(), entry)
        })
        .collect()
}

fn entry(pod: &Pod) -> String {
    match pod.node_name.as_deref() {
        Some(node) => format!("{}@{node}", pod.key()),
        None => pod.key(),
    }
}

/// An entry's pod key and the node it was nominated from, if any.
fn split(entry: &str) -> (&str, Option<&str>) {
    match entry.split_once('@') {
        Some((key, node)) => (key, Some(node)),
        None => (entry, None),
    }
}

/// The nomination entries recorded on `claim`. A value that is not a JSON list of strings
/// counts as none: the room is then planned as free, as before nominations existed.
pub fn of(claim: &NodeClaim) -> Vec<String> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::NOMINATED_PODS))
        .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
        .unwrap_or_default()
}

/// The annotation value for `existing` nominations with `added` ones: each pod once, in the
/// order nominated, at most [`MOST`] (the latest).
pub fn value(existing: &[String], added: &[String]) -> String {
    let mut all: Vec<&String> = Vec::with_capacity(existing.len() + added.len());
    for key in existing.iter().chain(added) {
        if !all.contains(&key) {
            all.push(key);
        }
    }
    let skip = all.len().saturating_sub(MOST);
    let kept: Vec<&String> = all.into_iter().skip(skip).collect();
    serde_json::to_string(&kept).unwrap_or_else(|_| "[]".into())
}

/// True while `claim`'s nominations hold at `now`: not being deleted, not a warm-pool member,
/// and not Initialized for longer than [`GRACE`].
/// Which of a claim's nominations still hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// All of them.
    All,
    /// Only the reservations of pods still on a node on its way out (tainted disrupted,
    /// cordoned or being deleted): a drain that PodDisruptionBudgets slow down must find the
    /// room still theirs when they come (Karpenter nominates while the taint is there).
    Leaving,
}

fn holds(claim: &NodeClaim, now: Timestamp) -> Option<Holding> {
    if claim.metadata.deletion_timestamp.is_some() || claim.warm_pool().is_some() {
        return None;
    }
    let initialized = claim
        .status
        .as_ref()
        .and_then(|s| condition::find(&s.conditions, condition::INITIALIZED))
        .filter(|c| c.status == "True");
    match initialized {
        None => claim
            .metadata
            .creation_timestamp
            .as_ref()
            .is_none_or(|t| now.as_second() - t.0.as_second() < LAPSE.as_secs() as i64)
            .then_some(Holding::All),
        Some(c) => {
            let since = now.as_second() - c.last_transition_time.0.as_second();
            Some(if since < GRACE.as_secs() as i64 {
                Holding::All
            } else {
                Holding::Leaving
            })
        }
    }
}

/// True when node `name` of `snap` is on its way out: tainted disrupted, cordoned or being
/// deleted.
fn leaving(snap: &Snapshot, name: &str) -> bool {
    snap.nodes.iter().any(|n| {
        n.name == name
            && (n.unschedulable
                || n.life.deleting
                || n.taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT))
    })
}

/// The free room on node `name`: its allocatable less the requests of the pods on it.
fn free_on(snap: &Snapshot, name: &str, allocatable: &Resources) -> Resources {
    let mut free = allocatable.clone();
    for p in snap
        .pods
        .iter()
        .filter(|p| p.node_name.as_deref() == Some(name))
    {
        free.sub(&p.requests);
    }
    free
}

/// Holds the room of every claim's nominated pods in `snap` at `now` (see the module
/// documentation). `snap` must already hold the claims' nodes (in-flight and registered).
pub fn apply(snap: &mut Snapshot, claims: &[Arc<NodeClaim>], now: Timestamp) {
    let mut nominated: Vec<(&NodeClaim, Holding, Vec<String>)> = claims
        .iter()
        .filter_map(|c| Some((c.as_ref(), holds(c, now)?, of(c))))
        .filter(|(_, _, keys)| !keys.is_empty())
        .collect();
    if nominated.is_empty() {
        return;
    }
    nominated.sort_by(|a, b| a.0.name().cmp(b.0.name()));
    let by_key: HashMap<String, usize> = snap
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| (p.key(), i))
        .collect();
    let mut reservations: Vec<Pod> = Vec::new();
    let mut reserved: std::collections::HashSet<usize> = std::collections::HashSet::new();
    for (claim, holding, entries) in nominated {
        let claim_name = claim.name();
        let Some(node) = snap
            .nodes
            .iter()
            .find(|n| n.labels.get(labels::NODECLAIM).map(String::as_str) == Some(claim_name))
        else {
            continue;
        };
        let target = node.name.clone();
        let mut free = free_on(snap, &target, &node.allocatable);
        for r in reservations
            .iter()
            .filter(|r| r.node_name.as_deref() == Some(target.as_str()))
        {
            free.sub(&r.requests);
        }
        for e in &entries {
            let (key, from) = split(e);
            if holding == Holding::Leaving && !from.is_some_and(|n| leaving(snap, n)) {
                continue;
            }
            let Some(&i) = by_key.get(key) else {
                continue; // gone: bound and deleted, or evicted
            };
            let pod = &snap.pods[i];
            if pod.disruption.nominated.is_some()
                || reserved.contains(&i)
                || !pod.requests.fits(&free)
            {
                continue;
            }
            match pod.node_name.as_deref() {
                None => {
                    free.sub(&pod.requests);
                    let pod = &mut snap.pods[i];
                    pod.node_name = Some(target.clone());
                    pod.disruption.nominated = Some(claim_name.to_string());
                }
                // Still on the node it leaves: its room here is held until it comes.
                Some(n) if Some(n) == from && n != target => {
                    free.sub(&pod.requests);
                    reserved.insert(i);
                    let mut held = pod.clone();
                    held.name = format!("{}@{claim_name}", pod.name);
                    held.node_name = Some(target.clone());
                    held.disruption.nominated = Some(claim_name.to_string());
                    reservations.push(held);
                }
                // Bound here, or where the kube-scheduler put it instead.
                Some(_) => {}
            }
        }
    }
    // The replica that replaces an evicted pod has a new name: it takes the room its
    // predecessor's reservation holds.
    for held in reservations {
        let successor = held.owner.as_ref().and_then(|owner| {
            snap.pods.iter().position(|p| {
                p.node_name.is_none()
                    && p.disruption.nominated.is_none()
                    && p.namespace == held.namespace
                    && p.owner.as_ref() == Some(owner)
                    && p.requests == held.requests
            })
        });
        match successor {
            Some(i) => {
                let pod = &mut snap.pods[i];
                pod.node_name = held.node_name;
                pod.disruption.nominated = held.disruption.nominated;
            }
            None => snap.pods.push(held),
        }
    }
}

/// Drops the reservations held for pods on the nodes named `leaving`, and those held on them:
/// a plan that moves those pods itself (an interruption's replacement tried again) must find
/// their room free, not held twice, and must not move a reservation as if it were a pod.
pub fn release(snap: &mut Snapshot, leaving: &[&str]) {
    let on_leaving: std::collections::HashSet<String> = snap
        .pods
        .iter()
        .filter(|p| p.node_name.as_deref().is_some_and(|n| leaving.contains(&n)))
        .map(Pod::key)
        .collect();
    snap.pods.retain(|p| {
        let origin = p
            .disruption
            .nominated
            .as_ref()
            .and_then(|claim| p.name.strip_suffix(&format!("@{claim}")));
        let held_on_leaving =
            origin.is_some() && p.node_name.as_deref().is_some_and(|n| leaving.contains(&n));
        !held_on_leaving
            && !origin.is_some_and(|name| on_leaving.contains(&format!("{}/{name}", p.namespace)))
    });
}

/// The pods `uses` places on nodes still coming up (in flight, or registered and not
/// initialized), by the NodeClaim they run on, as nomination entries: the nominations a plan
/// adds to existing claims.
pub fn added_by(snap: &Snapshot, uses: &[ExistingNodeUse]) -> Vec<(String, Vec<String>)> {
    uses.iter()
        .filter(|u| !u.pods.is_empty())
        .filter_map(|u| {
            let node = snap.nodes.iter().find(|n| n.name == u.name)?;
            if node.life.initialized {
                return None;
            }
            let claim = node.labels.get(labels::NODECLAIM)?;
            Some((claim.clone(), entries_of_keys(snap, &u.pods)))
        })
        .collect()
}

#[cfg(test)]
mod tests;
