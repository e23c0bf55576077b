//! Topology domains: topology spread, pod affinity and anti-affinity on every node label but
//! the hostname — the zone and capacity type most often, but also `kubernetes.io/arch`, the
//! instance type or a Provisioner's own label, as the kube-scheduler allows.
//!
//! These domains are few, so they are decided up front, pod by pod, with counts per (term,
//! domain): each pod of a constrained class goes to the allowed domain with the fewest matching
//! pods (water-filling against what already runs there, which is what the kube-scheduler's skew
//! rule accepts), to a domain holding its affinity partners, and away from domains holding pods
//! its anti-affinity (or theirs) rejects. A pod is placed in a domain it could use: an
//! existing node it tolerates, selects and fits on, or a Provisioner it tolerates that can
//! launch a node holding it there. A spread's minimum is taken, as the kube-scheduler takes
//! it, over those and over every domain of an existing node the spread counts (its
//! `nodeAffinityPolicy` and `nodeTaintsPolicy`), full or not: a full node in a zone no
//! Provisioner covers caps the other zones at its count plus maxSkew.
//! Pods with the same choice form a sub-class pinned to that domain by a requirement
//! (`zone In [z]`), which the packer and the existing-node pass honor like any node selector.
//! Spot or on-demand among several allowed capacity types is still the offering's choice,
//! unless a spread pins it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::instance_type::{offering_allowed, InstanceType};
use crate::labels;
use crate::pod::{Node, Pod, TopologySpread};
use crate::provisioner::Provisioner;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::{first_untolerated, Toleration};

use super::affinity::Scope;
use super::classes::PodClass;
use super::memo::Memo;
use super::node_rules::describe_selector;

mod affinity_order;
mod choose;
mod closed;
mod domains;
mod node_filter;
mod pinning;
#[cfg(test)]
mod tests;
mod turns;
mod unusable;

use affinity_order::*;
use choose::*;
pub(crate) use closed::FilteredSpread;
use closed::*;
pub use closed::{Closed, Hold};
pub(crate) use domains::terms_allow;
use domains::*;
pub(crate) use node_filter::NodeFilter;
use node_filter::*;
use pinning::*;
use turns::*;
use unusable::*;

/// The classes after pinning, and the pods no domain admits.
pub struct Pinned {
    /// Classes, constrained ones split by domain and pinned.
    pub classes: Vec<PodClass>,
    /// Pods (snapshot indices) that no domain admits, with the reason.
    pub refused: Vec<(usize, String)>,
    /// The spreads counting only some nodes whose nodes some class could be held off or on
    /// ([`Hold`]).
    pub(crate) holdable: BTreeSet<FilteredSpread>,
    /// The classes (by [`PodClass::origin`]) that own one of the `holdable` spreads (the
    /// on-demand-only pods): their nodes are the ones it counts.
    pub(crate) leading: BTreeSet<usize>,
    /// The classes (by origin) that could be held off a `holdable` spread's nodes (the
    /// flexible pods): left `Free`, they should fill the room the leading classes' nodes
    /// leave, so the packer opens nodes for the leading classes first.
    pub(crate) deferring: BTreeSet<usize>,
    /// The pods (snapshot indices) of the leading and deferring classes, pinned or refused.
    pub(crate) holdable_pods: Vec<usize>,
}

/// Splits the classes that take part in topology terms on any node label but the hostname
/// (zone, capacity type, architecture, instance type, a Provisioner's own label, ...) into
/// pinned sub-classes.
///
/// When that refuses pods, it is done again with their classes that have a spread last, and
/// the one refusing fewer is kept: a class whose spread's minimum sits in a domain it may not use (its
/// anti-affinity keeps it out) can place more once the free classes have filled that domain,
/// although the order puts the narrower class first. When pods are still refused, free
/// classes the spreads count pile into the most populated domain no spread pod went to
/// (`Order::Piling`), then the classes with a spread take their pods in turns (`in_turns`);
/// each run is kept if it refuses fewer still.
pub fn pin(
    pods: &[Pod],
    nodes: &[Node],
    classes: Vec<PodClass>,
    provs: &[&Provisioner],
    catalog: &[InstanceType],
    closed: &Closed,
    memo: Option<&Memo>,
) -> Pinned {
    let offer = Offer {
        provs,
        catalog,
        memo,
    };
    let again = classes.clone();
    let (first, order) = pin_in_order(
        pods,
        nodes,
        classes,
        &offer,
        closed,
        &Order::Affinity(BTreeSet::new()),
    );
    if first.refused.is_empty() {
        return first;
    }
    let class_of: HashMap<usize, usize> = again
        .iter()
        .enumerate()
        .flat_map(|(ci, c)| c.pods.iter().map(move |&p| (p, ci)))
        .collect();
    // Only classes with a spread of their own move: a free class stays before the spreads
    // that count it (`affinity_order`), which rely on that.
    let last: BTreeSet<usize> = first
        .refused
        .iter()
        .filter_map(|(p, _)| class_of.get(p).copied())
        .filter(|&ci| has_domain_spread(&pods[again[ci].template]))
        .collect();
    if last.is_empty() {
        return first;
    }
    let turns = in_turns(pods, &again, &order);
    let again_for_pile = again.clone();
    let (second, _) = pin_in_order(
        pods,
        nodes,
        again,
        &offer,
        closed,
        &Order::Affinity(last.clone()),
    );
    let mut best = if second.refused.len() < first.refused.len() {
        second
    } else {
        first
    };
    // Free classes that spreads count pile into the most populated domain no spread pod went
    // to, rather than even out: where a spread's minimum can rise only by their pods (a
    // domain its own pods are kept out of), every domain holds only so many of its pods, and
    // free pods spread over them take the places the spread's pods need.
    if !best.refused.is_empty() {
        let (piled, _) = pin_in_order(
            pods,
            nodes,
            again_for_pile,
            &offer,
            closed,
            &Order::Piling(last),
        );
        if piled.refused.len() < best.refused.len() {
            best = piled;
        }
    }
    let Some(turns) = turns else {
        return best;
    };
    for order in turns.orders {
        if best.refused.is_empty() {
            break;
        }
        let given = Order::Given {
            order,
            family: &turns.family,
        };
        let (run, _) = pin_in_order(pods, nodes, turns.singles.clone(), &offer, closed, &given);
        if run.refused.len() < best.refused.len() {
            best = Pinned {
                classes: rejoin(run.classes, &class_of),
                ..run
            };
        }
    }
    best
}
