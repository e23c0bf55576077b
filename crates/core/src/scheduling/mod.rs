//! The scheduling simulation: where pending pods would go, and which nodes to buy for them.
//!
//! Order of placement, as the kube-scheduler will see it once nodes exist: existing (and
//! in-flight) nodes first at no new cost, then new nodes from the highest-weight Provisioner that
//! accepts the pod. New node shapes are chosen for cost (see [`packer`]). The stages of one
//! pass live in [`pass`]; [`simulate`] runs passes until every preference is honored or
//! relaxed.

pub mod affinity;
pub mod candidates;
pub mod classes;
pub mod closing;
pub mod colocation;
pub mod daemons;
pub mod existing;
pub mod explain;
pub mod memo;
pub mod node_rules;
pub mod packer;
pub mod pass;
pub mod plan;
pub mod ports;
pub mod preferences;
pub mod reasons;
pub mod reqtable;
pub mod topology;
pub mod typeset;
pub mod volume_limits;

use std::collections::HashSet;

use crate::instance_type::InstanceType;
use crate::snapshot::Snapshot;

use pass::Pass;
pub use plan::{ExistingNodeUse, NewNode, Plan, Relaxed, Unschedulable};

/// Knobs of a scheduling pass.
#[derive(Clone, Debug)]
pub struct Options {
    /// How many instance types a new node lists as options (CreateFleet takes at most 60).
    pub max_instance_type_options: usize,
    /// The pods without a node were evicted by a disruption trial, whose replacements are
    /// launched and ready before the drain: a group that must share one node is then placed
    /// whole (on a node that holds it, or a new one), never partly on a node with some room,
    /// since the kube-scheduler will find the empty replacement when the pods come back.
    pub evicted: bool,
    /// What the simulations of one plan keep between them ([`memo::Memo`]): the disruption
    /// planner sets a new one per plan; `None` keeps nothing.
    pub memo: Option<std::sync::Arc<memo::Memo>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_instance_type_options: 60,
            evicted: false,
            memo: None,
        }
    }
}

/// Runs a scheduling pass over a snapshot against a catalog of instance types: preferences are
/// honored as hard rules first and relaxed pod by pod where they keep a pod from being placed.
pub fn simulate(snapshot: &Snapshot, catalog: &[InstanceType], opts: &Options) -> Plan {
    preferences::solve(snapshot, |s| place(s, catalog, opts))
}

/// [`simulate`] on a snapshot the caller owns, changed while it runs and put back as given:
/// the pods with preferences are hardened in place rather than every pod copied, so a
/// controller's batch over a large cluster holds its pods once (the same plan as
/// [`simulate`]).
pub fn simulate_in_place(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
) -> Plan {
    preferences::solve_in_place(snapshot, |s| place(s, catalog, opts))
}

/// One pass with every constraint of the snapshot's pods taken as hard; run again while the
/// pass refused pinned pods another domain may take, placed pods beside pod-affinity partners
/// that were refused, or over a spread's maxSkew once refusals and the new nodes' domains are
/// counted (see [`closing`]).
fn place(snapshot: &Snapshot, catalog: &[InstanceType], opts: &Options) -> Plan {
    settle(snapshot, catalog, opts).0
}

/// [`place`]'s passes, returning with the plan the domains closed on the way: `explain`
/// builds its pass on the same ones, so the pin it shows is the one the plan used.
///
/// When flexible pods could be held off or on the nodes of a spread that counts only some
/// nodes ([`topology::Hold`]) and the passes leaving them free either found that spread
/// skewed or refused pods of the classes concerned, the passes run again both ways: held
/// off is what spot-friendly pods beside on-demand-only ones want, held on shares the
/// on-demand nodes' room. Free passes stopped to start over are finished (within
/// [`FINISH_PASSES`]), and of the plans the one placing more pods, then the cheaper, is
/// kept (ties: free, off, on).
pub(crate) fn settle(
    snapshot: &Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
) -> (Plan, topology::Closed) {
    let free = passes(
        snapshot,
        catalog,
        opts,
        topology::Closed::default(),
        Stop::ForHold,
    );
    if !free.start_over && !free.refused_holdable {
        return (free.plan, free.closed);
    }
    // Finishing the free passes is worth a few passes only: past them it is dropped.
    let free = if free.start_over {
        let finished = passes(
            snapshot,
            catalog,
            opts,
            free.closed,
            Stop::After(FINISH_PASSES),
        );
        finished.converged.then_some(finished)
    } else {
        Some(free)
    };
    let [off, on] = [topology::Hold::Off, topology::Hold::On].map(|hold| {
        passes(
            snapshot,
            catalog,
            opts,
            topology::Closed::holding(hold),
            Stop::Never,
        )
    });
    let rank = |p: &Plan| (p.unschedulable.len(), p.new_price_per_hour());
    let (mut best, held) = match free {
        Some(free) => (free, vec![off, on]),
        None => (off, vec![on]),
    };
    for other in held {
        let (a, b) = (rank(&best.plan), rank(&other.plan));
        if b.0 < a.0 || (b.0 == a.0 && b.1 < a.1) {
            best = other;
        }
    }
    (best.plan, best.closed)
}

/// How many passes finishing the free passes may take once they stopped to start over
/// ([`settle`]): each closes more domains, and a workload of many spread classes can take a
/// dozen where the held passes take one.
const FINISH_PASSES: usize = 2;

/// When [`passes`] stop before nothing new closes.
#[derive(Clone, Copy)]
enum Stop {
    /// To start over holding flexible pods, as soon as that would help ([`settle`]).
    ForHold,
    /// After this many passes.
    After(usize),
    /// Never.
    Never,
}

/// What [`passes`] ended with.
struct Passes {
    plan: Plan,
    closed: topology::Closed,
    /// They stopped early to start over holding flexible pods ([`settle`]).
    start_over: bool,
    /// The last pass refused pods of classes that own a holdable spread or could be held
    /// ([`pass::Pass::holdable_pods`]).
    refused_holdable: bool,
    /// Nothing new closed after the last pass (not stopped early).
    converged: bool,
}

/// Runs passes from `closed` until nothing new closes, or until `stop` says: with
/// `Stop::ForHold`, passes with `Hold::Free` stop as soon as a spread that counts only some
/// nodes comes out skewed while flexible pods could be held off or on its nodes ([`settle`]
/// starts over).
fn passes(
    snapshot: &Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    mut closed: topology::Closed,
    stop: Stop,
) -> Passes {
    let mut run = 0;
    loop {
        run += 1;
        let pass = Pass::with_closed(snapshot, catalog, opts, &closed);
        let holdable = pass.holdable().clone();
        let holdable_pods: HashSet<String> = pass
            .holdable_pods()
            .iter()
            .map(|&i| snapshot.pods[i].key())
            .collect();
        let pinned: Vec<classes::PodClass> = pass
            .classes()
            .iter()
            .filter(|c| !c.pinned.is_empty())
            .cloned()
            .collect();
        let plan = pass.run();
        let refused_holdable = plan
            .unschedulable
            .iter()
            .any(|u| holdable_pods.contains(&u.pod));
        let done = |plan, closed, start_over, converged| Passes {
            plan,
            closed,
            start_over,
            refused_holdable,
            converged,
        };
        if pinned.is_empty() {
            return done(plan, closed, false, true);
        }
        let found = closing::close_between_passes(snapshot, catalog, &plan, &pinned, &mut closed);
        let held_would_help = found.skewed.iter().any(|s| holdable.contains(s));
        let for_hold = matches!(stop, Stop::ForHold);
        if for_hold && held_would_help && closed.hold() == topology::Hold::Free {
            return done(plan, closed, true, false);
        }
        if !found.any {
            return done(plan, closed, false, true);
        }
        if matches!(stop, Stop::After(n) if run >= n) {
            return done(plan, closed, false, false);
        }
    }
}

#[cfg(test)]
mod tests;
