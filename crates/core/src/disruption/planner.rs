//! The disruption planner: which of joiner's nodes go now, what replaces them, and for every
//! node that stays, why.
//!
//! Methods run in Karpenter's order, each against the cluster the earlier decisions leave
//! ([`working`](super::working)): expiration (forceful: no budget holds it, but the guards of
//! [`candidates`](super::candidates) do), drift (oldest first), emptiness
//! (`ttlSecondsAfterEmpty`), then consolidation — empty nodes, several nodes at once (the
//! longest prefix, by disruption cost, of up to [`MAX_MULTI_NODE`] candidates that one
//! cheaper node or none replaces, found by binary search), then one node at a time. Budgets
//! count every decision of the plan and the disruptions already under way.
//!
//! Nothing is disrupted while pending pods can be placed: provisioning acts on them first, and
//! a plan made meanwhile could count on room they are about to take (every node says so).
//! A node that takes pods from a decision is fresh (its pods just changed) and is not
//! consolidated in the same plan, as `consolidateAfter` would keep it; a single-node
//! evaluation that fails stays failed, since every decision only takes room away.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::pod::{Node, Pod};
use crate::provisioner::Provisioner;
use crate::scheduling::memo::Memo;
use crate::scheduling::{NewNode, Options};
use crate::snapshot::Snapshot;

use super::budgets;
use super::candidates::{candidates, leaves_with_node, Candidate, Prices};
use super::consolidation::{evaluate, score, Action, Totals};
use super::cost::reschedule_cost;
use super::drift::visible_drift;
use super::room::{self, Apart, FreeRoom, NewRoom};
use super::together::Together;
use super::trial;
use super::working::apply;
use super::{DisruptionSettings, Reason};

/// Most candidates a multi-node consolidation considers at once (Karpenter's bound).
pub const MAX_MULTI_NODE: usize = 100;

/// Most nodes one drift or expiration decision replaces: a command of that size launches and
/// drains a budget's worth of a large fleet at once, and its trial stays one simulation.
pub const MAX_BATCH: usize = 100;

/// What the planner reads.
pub struct Input<'a> {
    /// The cluster: nodes with their running pods, pending pods, PodDisruptionBudgets.
    pub snapshot: &'a Snapshot,
    /// Instance types with their offerings and prices.
    pub catalog: &'a [InstanceType],
    /// Simulation knobs.
    pub opts: &'a Options,
    /// Each Provisioner's disruption settings (`None`: no such Provisioner).
    pub settings: &'a dyn Fn(&str) -> Option<DisruptionSettings>,
    /// Drift only the cloud sees (NodeTemplate, AMI, subnets, ...), by node.
    pub cloud_drift: &'a dyn Fn(&Node) -> Option<String>,
    /// Nodes already being disrupted (by name): not candidates, and they count against
    /// their Provisioner's budgets, as cordoned and NotReady nodes do.
    pub disrupting: &'a BTreeSet<String>,
    /// Unix seconds, UTC.
    pub now: i64,
    /// Stop after this many decisions (`None`: plan them all). The controller carries out
    /// one decision at a time and plans again, so it asks for one; the dry run shows all.
    pub max_decisions: Option<usize>,
    /// Simulate at most this many single-node consolidations (`None`: all), starting at the
    /// candidate `start_at` places into the cheapest-to-disrupt order and going round. On a
    /// packed cluster every candidate is refused only after a simulation; the controller
    /// bounds each pass and moves `start_at` on, so every node is weighed over a few passes
    /// (Karpenter bounds its pass by time instead, which is neither repeatable nor fair).
    pub max_evaluations: Option<usize>,
    /// See `max_evaluations`.
    pub start_at: usize,
}

/// One decision: nodes that go, and what (if anything) replaces them.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Why.
    pub reason: Reason,
    /// The nodes removed.
    pub nodes: Vec<String>,
    /// New nodes for their pods (launched and initialized before the old ones drain), named
    /// `replacement-<n>` in the plan's order.
    pub replacements: Vec<NewNode>,
    /// Where each moved pod goes (`namespace/name`, node or replacement name).
    pub moves: Vec<(String, String)>,
    /// $/h of the nodes removed.
    pub price_before: f64,
    /// $/h the decision adds.
    pub price_after: f64,
    /// Consolidation's score (savings share over disruption share).
    pub score: Option<f64>,
    /// In words: "expired: 31 days old, ttlSecondsUntilExpired 30 days", ...
    pub detail: String,
}

/// A node that stays, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Node name.
    pub node: String,
    /// Every reason found, in the order the methods ran.
    pub why: Vec<String>,
}

/// The planner's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DisruptionPlan {
    /// Decisions in the order they would be carried out.
    pub decisions: Vec<Decision>,
    /// Every other node of the snapshot, in its order.
    pub kept: Vec<Kept>,
    /// $/h of the nodes joiner launched that the catalog prices, now.
    pub price_before: f64,
    /// The same after the decisions.
    pub price_after: f64,
    /// Why the multi-node consolidations tried were not larger: for each search, the
    /// smallest set of candidates refused and the reason.
    pub refused_moves: Vec<RefusedMove>,
    /// How many nodes each method could act on (expired, drifted, empty, consolidatable).
    pub eligible: BTreeMap<Reason, u32>,
    /// What each Provisioner's budgets allowed when the plan began, per budgeted reason,
    /// after the nodes already disrupting.
    pub allowed: Vec<(String, Reason, u32)>,
    /// True when every candidate was weighed: the bound on simulations left none aside.
    pub complete: bool,
}

/// A consolidation of several nodes the planner weighed and refused.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefusedMove {
    /// The nodes.
    pub nodes: Vec<String>,
    /// Why not.
    pub why: String,
}

/// The words a node gets when the pass's bound on simulations kept it from being weighed.
const NOT_SIMULATED: &str =
    "not evaluated: the pass's bound on simulations was reached (later passes go on from here)";

/// Plans disruption for `input`.
pub fn plan(input: &Input) -> DisruptionPlan {
    run(Planner::new(input))
}

/// [`plan`] with every candidate simulated, none refused by room alone ([`room::refusal`]):
/// what the property tests hold [`plan`]'s decisions to.
#[cfg(test)]
pub(crate) fn plan_simulating_all(input: &Input) -> DisruptionPlan {
    let mut p = Planner::new(input);
    p.room_shortcut = false;
    run(p)
}

/// [`plan`] with nothing kept between its simulations (no [`Memo`]): what the property tests
/// hold [`plan`] to, decisions and reasons alike.
#[cfg(test)]
pub(crate) fn plan_keeping_nothing(input: &Input) -> DisruptionPlan {
    let mut p = Planner::new(input);
    p.opts.memo = None;
    run(p)
}

fn run(mut p: Planner<'_>) -> DisruptionPlan {
    let allowed = p.budgets_now();
    // Pending pods do not halt disruption: every trial simulates them with the moved pods,
    // as Karpenter's does (they take the room they would take; see `trial`).
    p.expire();
    p.drift();
    p.empty();
    p.consolidate();
    DisruptionPlan {
        allowed,
        ..p.finish()
    }
}

struct Planner<'a> {
    input: &'a Input<'a>,
    /// The input's options, with a [`Memo`] the plan's simulations share (the catalog and
    /// the Provisioners are the same for all of them).
    opts: Options,
    work: Snapshot,
    /// Candidates by node name (their `node` indexes the input snapshot).
    candidates: BTreeMap<String, Candidate>,
    /// Initialized nodes that are not Ready now, as candidates: expiration only.
    unready: BTreeMap<String, Candidate>,
    /// The pods waiting for a place (pending, or on a node on its way out) that the cluster
    /// as it is places on nodes that exist, by key, with that node: their room is theirs,
    /// whatever a consolidation would like.
    pending_placed: HashMap<String, String>,
    /// Simulations run so far, against `max_evaluations` (every kind of trial counts).
    simulated: usize,
    /// True once a trial was left out for the bound.
    bounded: bool,
    /// See [`DisruptionPlan::refused_moves`].
    refused_moves: Vec<RefusedMove>,
    /// See [`DisruptionPlan::eligible`].
    eligible: BTreeMap<Reason, u32>,
    settings: HashMap<String, DisruptionSettings>,
    totals: HashMap<String, Totals>,
    /// Initialized nodes of each Provisioner in the snapshot (what budget percentages are
    /// of, as in Karpenter: nodes still joining do not round a budget up).
    node_count: HashMap<String, u32>,
    /// Pod keys to their index in the input snapshot.
    pod_index: HashMap<String, usize>,
    /// Nodes of each Provisioner disrupted: under way plus decided here.
    disrupting: HashMap<String, u32>,
    decided: HashSet<String>,
    /// The CPU and memory free on each working node that can take pods, kept up to date as
    /// decisions move pods.
    free: FreeRoom,
    /// What the catalog offers a replacement, by CPU and memory.
    new_room: NewRoom,
    /// The working nodes each required anti-affinity term keeps its pods off.
    apart: Apart,
    /// The working nodes each required affinity term keeps its pods off.
    together: Together,
    /// False: no candidate is refused by room alone (tests).
    room_shortcut: bool,
    /// Nodes that took pods from a decision.
    fresh: HashSet<String>,
    why: HashMap<String, Vec<String>>,
    decisions: Vec<Decision>,
    next: usize,
}

impl<'a> Planner<'a> {
    fn new(input: &'a Input<'a>) -> Self {
        let s = input.snapshot;
        let mut why: HashMap<String, Vec<String>> = HashMap::new();
        let mut found = BTreeMap::new();
        let mut unready = BTreeMap::new();
        for (node, c) in s
            .nodes
            .iter()
            .zip(candidates(s, input.catalog, input.settings, input.now))
        {
            let c = if input.disrupting.contains(&node.name) {
                Err("already being disrupted".to_string())
            } else {
                c
            };
            match c {
                Ok(c) if c.ready => {
                    found.insert(node.name.clone(), c);
                }
                Ok(c) => {
                    unready.insert(node.name.clone(), c);
                }
                Err(e) => why.entry(node.name.clone()).or_default().push(e),
            }
        }
        let mut settings = HashMap::new();
        let mut node_count: HashMap<String, u32> = HashMap::new();
        let mut disrupting: HashMap<String, u32> = HashMap::new();
        for n in &s.nodes {
            let Some(p) = n.provisioner() else { continue };
            if let Some(st) = (input.settings)(p) {
                settings.insert(p.to_string(), st);
            }
            if n.life.initialized {
                *node_count.entry(p.to_string()).or_default() += 1;
            }
            // Karpenter's count: of the initialized nodes, those being deleted, already being
            // disrupted, or not Ready now (a cordon alone is not a disruption).
            let going = n.life.deleting || n.life.not_ready || input.disrupting.contains(&n.name);
            if n.life.initialized && going {
                *disrupting.entry(p.to_string()).or_default() += 1;
            }
        }
        let totals = provisioner_totals(s, input.catalog);
        // Nodes already being disrupted take no moved pods, and their pods need room (the
        // trials place them too: `trial::run`).
        let mut work = s.clone();
        for n in &mut work.nodes {
            if input.disrupting.contains(&n.name) {
                n.unschedulable = true;
                n.life.deleting = true;
            }
        }
        let placed = pending_placed(&mut work, input.catalog, input.opts);
        let mut planner = Planner {
            opts: Options {
                memo: Some(Arc::new(Memo::default())),
                ..input.opts.clone()
            },
            pending_placed: placed,
            simulated: 0,
            bounded: false,
            refused_moves: Vec::new(),
            eligible: BTreeMap::new(),
            input,
            work,
            candidates: found,
            unready,
            settings,
            totals,
            node_count,
            pod_index: s
                .pods
                .iter()
                .enumerate()
                .map(|(i, p)| (p.key(), i))
                .collect(),
            disrupting,
            decided: HashSet::new(),
            free: FreeRoom::default(),
            new_room: NewRoom::of(input.catalog, &s.provisioners, &s.daemonsets),
            apart: Apart::default(),
            together: Together::default(),
            room_shortcut: true,
            fresh: HashSet::new(),
            why,
            decisions: Vec::new(),
            next: 0,
        };
        planner.count_free_room();
        planner
    }

    /// Counts the CPU and memory free on the working cluster's nodes.
    fn count_free_room(&mut self) {
        self.free = FreeRoom::count(&self.work);
    }

    /// True once the plan holds `max_decisions` decisions.
    fn full(&self) -> bool {
        self.input
            .max_decisions
            .is_some_and(|m| self.decisions.len() >= m)
    }

    fn count_eligible(&mut self, reason: Reason, n: usize) {
        *self.eligible.entry(reason).or_default() += u32::try_from(n).unwrap_or(u32::MAX);
    }

    /// What each Provisioner's budgets allow now, per budgeted reason.
    fn budgets_now(&self) -> Vec<(String, Reason, u32)> {
        let mut out = Vec::new();
        let mut names: Vec<&String> = self.settings.keys().collect();
        names.sort();
        for name in names {
            for reason in [Reason::Empty, Reason::Drifted, Reason::Underutilized] {
                out.push((name.clone(), reason, self.allowed(name, reason)));
            }
        }
        out
    }

    /// Takes one simulation from the pass's bound; false when none is left.
    fn simulation(&mut self) -> bool {
        if self
            .input
            .max_evaluations
            .is_some_and(|m| self.simulated >= m)
        {
            self.bounded = true;
            return false;
        }
        self.simulated += 1;
        true
    }

    fn keep(&mut self, node: &str, why: String) {
        self.why.entry(node.to_string()).or_default().push(why);
    }

    /// Candidates not yet decided, in `order`.
    fn open(&self) -> Vec<Candidate> {
        self.candidates
            .iter()
            .filter(|(n, _)| !self.decided.contains(*n))
            .map(|(_, c)| c.clone())
            .collect()
    }

    fn name(&self, c: &Candidate) -> String {
        self.input.snapshot.nodes[c.node].name.clone()
    }

    fn node(&self, c: &Candidate) -> &'a Node {
        &self.input.snapshot.nodes[c.node]
    }

    /// The candidate re-indexed into the working snapshot.
    fn at_work(&self, c: &Candidate) -> Option<Candidate> {
        let name = self.name(c);
        let i = self.work.nodes.iter().position(|n| n.name == name)?;
        Some(Candidate {
            node: i,
            ..c.clone()
        })
    }

    /// How many more nodes of `provisioner` may go for `reason`.
    fn allowed(&self, provisioner: &str, reason: Reason) -> u32 {
        let Some(settings) = self.settings.get(provisioner) else {
            return 0;
        };
        budgets::allowed(
            settings,
            reason,
            self.node_count.get(provisioner).copied().unwrap_or(0),
            self.disrupting.get(provisioner).copied().unwrap_or(0),
            self.input.now,
        )
    }

    fn budget_refusal(provisioner: &str, reason: Reason) -> String {
        format!(
            "the {} budget of Provisioner {provisioner} allows no more disruptions now",
            reason.as_str()
        )
    }

    /// Records a decision (naming its replacements and listing its moves) and applies it to
    /// the working cluster.
    fn take(&mut self, mut decision: Decision, plan: &crate::scheduling::Plan) {
        for r in &mut decision.replacements {
            self.next += 1;
            r.name = format!("replacement-{}", self.next);
            r.pod_indices = r
                .pods
                .iter()
                .filter_map(|k| self.pod_index.get(k).copied())
                .collect();
        }
        // The pods on the removed nodes, with their CPU and memory requests.
        let removed = |n: &str| decision.nodes.iter().any(|r| r == n);
        let moved_pods: HashMap<String, [i64; 2]> = self
            .work
            .pods
            .iter()
            .filter(|p| p.node_name.as_deref().is_some_and(removed))
            .map(|p| (p.key(), [p.requests.cpu, p.requests.memory]))
            .collect();
        for n in &decision.nodes {
            self.free.remove(n);
        }
        self.apart.clear();
        self.together.clear();
        for used in &plan.existing_nodes {
            for k in used.pods.iter().filter(|k| moved_pods.contains_key(*k)) {
                decision.moves.push((k.clone(), used.name.clone()));
                self.fresh.insert(used.name.clone());
                let r = moved_pods.get(k).copied().unwrap_or_default();
                self.free.take(&used.name, r);
            }
        }
        for r in &decision.replacements {
            // Pending pods it also holds are not moves.
            for k in r.pods.iter().filter(|k| moved_pods.contains_key(*k)) {
                decision.moves.push((k.clone(), r.name.clone()));
            }
        }
        decision.moves.sort();
        apply(
            &mut self.work,
            self.input.catalog,
            &decision.nodes,
            plan,
            &decision.replacements,
        );
        for n in &decision.nodes {
            self.decided.insert(n.clone());
            if let Some(c) = self.candidates.get(n) {
                *self.disrupting.entry(c.provisioner.clone()).or_default() += 1;
            }
        }
        self.decisions.push(decision);
    }

    /// Replaces one node for a forceful or drift reason: its pods must all have a place, on
    /// other nodes or on as many new nodes as they need; price is not weighed, and a pod's
    /// local volume does not keep the node ([`trial::run_forced`]).
    fn replace(&mut self, c: &Candidate, reason: Reason, detail: String) {
        let name = self.name(c);
        let Some(at) = self.at_work(c) else {
            return;
        };
        if !self.simulation() {
            self.keep(&name, format!("{detail}, but {NOT_SIMULATED}"));
            return;
        }
        match trial::run_forced(&mut self.work, self.input.catalog, &self.opts, &[at.node]) {
            Ok(outcome) => {
                let detail = if outcome.stranded.is_empty() {
                    detail
                } else {
                    format!(
                        "{detail}; left pending with nowhere else to run (only this node \
                         mounts their volumes, or a pod they must share a node with): {}",
                        outcome.stranded.join(", ")
                    )
                };
                let decision = Decision {
                    reason,
                    nodes: vec![name],
                    replacements: outcome.replacements.clone(),
                    moves: Vec::new(),
                    price_before: c.price,
                    price_after: outcome.price_after,
                    score: None,
                    detail,
                };
                self.take(decision, &outcome.plan);
            }
            Err(e) => self.keep(&name, format!("{detail}, but {e}")),
        }
    }

    fn expire(&mut self) {
        let now = self.input.now;
        // A node that is not Ready expires too (Karpenter's expiration is forceful).
        let unready: Vec<Candidate> = self.unready.values().cloned().collect();
        let mut due: Vec<(i64, i64, Candidate)> = self
            .open()
            .into_iter()
            .chain(unready)
            .filter_map(|c| {
                let ttl = self.settings.get(&c.provisioner)?.expire_after?;
                let created = self.node(&c).life.created_at?;
                (now.saturating_sub(created) >= ttl).then_some((created, ttl, c))
            })
            .collect();
        due.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.2.node.cmp(&b.2.node)));
        self.count_eligible(Reason::Expired, due.len());
        // Expiration has no budget: the empty ones go together, in one decision.
        let mut batch = Deletes::default();
        let mut rest = Vec::new();
        for (created, ttl, c) in due {
            let detail = format!(
                "expired: {} old, ttlSecondsUntilExpired {}",
                duration(now - created),
                duration(ttl)
            );
            if c.pods.is_empty() {
                batch.push(c, detail);
            } else {
                rest.push((c, detail));
            }
        }
        self.take_deletes(Reason::Expired, batch, "expired and empty");
        // Expiration has no budget, but a plan replaces one batch of expired nodes with pods
        // (the oldest [`MAX_BATCH`]): the next plans take the next ones, with this one's
        // nodes on their way out, so a fleet that expired at once does not roll at once.
        let mut rest = rest.into_iter();
        let first: Vec<(Candidate, String)> = rest.by_ref().take(MAX_BATCH).collect();
        for (c, detail) in rest {
            let name = self.name(&c);
            self.keep(
                &name,
                format!("{detail}, but the plan replaces {MAX_BATCH} expired nodes at a time"),
            );
        }
        if !self.full() {
            self.replace_batch(first, Reason::Expired, "expired");
        }
    }

    fn drift(&mut self) {
        let mut drifted: Vec<(i64, String, Candidate)> = self
            .open()
            .into_iter()
            .filter_map(|c| {
                let node = self.node(&c);
                let why = self
                    .provisioner(&c.provisioner)
                    .and_then(|prov| visible_drift(node, prov))
                    .or_else(|| (self.input.cloud_drift)(node))?;
                Some((node.life.created_at.unwrap_or(i64::MAX), why, c))
            })
            .collect();
        self.count_eligible(Reason::Drifted, drifted.len());
        // Empty drifted nodes first (they go without moving a pod), then the oldest.
        drifted.sort_by(|a, b| {
            (!a.2.pods.is_empty(), a.0, a.2.node).cmp(&(!b.2.pods.is_empty(), b.0, b.2.node))
        });
        // The empty ones go together, in one decision, as far as the budget allows.
        let mut batch = Deletes::default();
        let mut rest = Vec::new();
        for (_, why, c) in drifted {
            let detail = format!("drifted: {why}");
            if !c.pods.is_empty() {
                rest.push((detail, c));
            } else if batch.admits(self, &c, Reason::Drifted) {
                batch.push(c, detail);
            } else {
                let name = self.name(&c);
                let refusal = Self::budget_refusal(&c.provisioner, Reason::Drifted);
                self.keep(&name, format!("{detail}, but {refusal}"));
            }
        }
        if self.full() {
            return;
        }
        self.take_deletes(Reason::Drifted, batch, "drifted and empty");
        // The others with pods, oldest first, as many as the budget allows, replaced together.
        let mut batch = Deletes::default();
        for (detail, c) in rest {
            if batch.nodes.len() < MAX_BATCH && batch.admits(self, &c, Reason::Drifted) {
                batch.push(c, detail);
            } else {
                let name = self.name(&c);
                let refusal = if batch.nodes.len() < MAX_BATCH {
                    Self::budget_refusal(&c.provisioner, Reason::Drifted)
                } else {
                    format!("the plan replaces {MAX_BATCH} drifted nodes at a time")
                };
                self.keep(&name, format!("{detail}, but {refusal}"));
            }
        }
        if self.full() {
            return;
        }
        self.replace_batch(batch.nodes, Reason::Drifted, "drifted");
    }

    /// Replaces the nodes of `batch` (each with its reason in words) together, in one
    /// decision for `reason`: their pods are simulated leaving at once and the replacements
    /// hold them all, so a drifted or expired fleet rolls a budget's worth at a time, not a
    /// node a command. When the batch as a whole cannot go (a pod with no place), each node
    /// is tried on its own, oldest first. `summary` words a decision of several nodes.
    fn replace_batch(&mut self, batch: Vec<(Candidate, String)>, reason: Reason, summary: &str) {
        if batch.len() < 2 {
            for (c, detail) in batch {
                if !self.full() {
                    self.replace(&c, reason, detail);
                }
            }
            return;
        }
        let at: Vec<usize> = batch
            .iter()
            .filter_map(|(c, _)| self.at_work(c))
            .map(|c| c.node)
            .collect();
        if at.len() == batch.len() && self.simulation() {
            if let Ok(outcome) =
                trial::run_forced(&mut self.work, self.input.catalog, &self.opts, &at)
            {
                let mut detail = format!("{summary}: {} nodes", batch.len());
                if !outcome.stranded.is_empty() {
                    detail = format!(
                        "{detail}; left pending with nowhere else to run (only these nodes \
                         mount their volumes, or a pod they must share a node with): {}",
                        outcome.stranded.join(", ")
                    );
                }
                let decision = Decision {
                    reason,
                    nodes: batch.iter().map(|(c, _)| self.name(c)).collect(),
                    replacements: outcome.replacements.clone(),
                    moves: Vec::new(),
                    price_before: batch.iter().map(|(c, _)| c.price).sum(),
                    price_after: outcome.price_after,
                    score: None,
                    detail,
                };
                self.take(decision, &outcome.plan);
                return;
            }
        }
        for (c, detail) in batch {
            if self.full() {
                return;
            }
            self.replace(&c, reason, detail);
        }
    }

    fn provisioner(&self, name: &str) -> Option<&'a Provisioner> {
        self.input
            .snapshot
            .provisioners
            .iter()
            .find(|p| p.name == name)
    }

    /// When the node's pods last changed: its creation, a pod's arrival, or a departure the
    /// controller saw; `None` when nothing is known.
    fn last_change(&self, c: &Candidate) -> Option<i64> {
        let node = self.node(c);
        let arrivals = c
            .pods
            .iter()
            .filter_map(|&i| self.input.snapshot.pods[i].disruption.created_at);
        [node.life.created_at, node.life.pods_changed_at]
            .into_iter()
            .flatten()
            .chain(arrivals)
            .max()
    }

    fn empty(&mut self) {
        let now = self.input.now;
        let mut batch = Deletes::default();
        for c in self.open() {
            if self.full() {
                return;
            }
            let Some(ttl) = self
                .settings
                .get(&c.provisioner)
                .and_then(|s| s.empty_after)
            else {
                continue;
            };
            let name = self.name(&c);
            if !c.pods.is_empty() {
                continue;
            }
            if self.fresh.contains(&name) {
                self.keep(&name, "it takes pods from a node this plan removes".into());
                continue;
            }
            let since = self.last_change(&c).unwrap_or(now);
            let empty_for = now.saturating_sub(since);
            if empty_for < ttl {
                self.keep(
                    &name,
                    // No elapsed time: the reason stays the same while it holds, so it is
                    // told once, not once a minute.
                    format!(
                        "empty for less than ttlSecondsAfterEmpty ({})",
                        duration(ttl)
                    ),
                );
                continue;
            }
            self.count_eligible(Reason::Empty, 1);
            if !batch.admits(self, &c, Reason::Empty) {
                let refusal = Self::budget_refusal(&c.provisioner, Reason::Empty);
                self.keep(&name, format!("empty, but {refusal}"));
                continue;
            }
            batch.push(c, format!("empty for {}", duration(empty_for)));
        }
        self.take_deletes(Reason::Empty, batch, "empty past ttlSecondsAfterEmpty");
    }

    /// Deletes the nodes of `batch` (none of which moves a pod) in one decision for `reason`:
    /// a budget's worth of empty nodes goes at once, not one a pass. `summary` words a
    /// decision of several nodes; one node keeps its own words.
    fn take_deletes(&mut self, reason: Reason, batch: Deletes, summary: &str) {
        let Deletes { nodes, .. } = batch;
        let detail = match nodes.as_slice() {
            [] => return,
            [(_, one)] => one.clone(),
            more => format!("{summary}: {} nodes", more.len()),
        };
        let decision = Decision {
            reason,
            nodes: nodes.iter().map(|(c, _)| self.name(c)).collect(),
            replacements: Vec::new(),
            moves: Vec::new(),
            price_before: nodes.iter().map(|(c, _)| c.price).sum(),
            price_after: 0.0,
            score: None,
            detail,
        };
        self.take(decision, &crate::scheduling::Plan::default());
    }

    /// Candidates consolidation may act on now, cheapest to disrupt first; the others get
    /// their reason.
    fn consolidatable(&mut self) -> Vec<Candidate> {
        let now = self.input.now;
        let mut out = Vec::new();
        for c in self.open() {
            let name = self.name(&c);
            let Some(settings) = self.settings.get(&c.provisioner) else {
                continue;
            };
            // Consolidation weighs prices; a node without one is drift's and expiry's only.
            if let Some(why) = &c.unpriced {
                self.keep(&name, why.clone());
                continue;
            }
            if !settings.consolidation {
                if self.why.get(&name).is_none_or(Vec::is_empty) {
                    self.keep(
                        &name,
                        format!(
                            "consolidation is not enabled on Provisioner {}",
                            c.provisioner
                        ),
                    );
                }
                continue;
            }
            let after = settings.consolidate_after;
            if self.fresh.contains(&name) {
                self.keep(&name, "it takes pods from a node this plan removes".into());
                continue;
            }
            let changed = now.saturating_sub(self.last_change(&c).unwrap_or(now));
            if changed < after {
                let limit = if after == i64::MAX {
                    "Never".to_string()
                } else {
                    duration(after)
                };
                self.keep(
                    &name,
                    format!("it was created or its pods changed within consolidateAfter ({limit})"),
                );
                continue;
            }
            out.push(c);
        }
        // Karpenter's order: the most $/h saved per unit of disruption first
        // (`Candidate.SavingsRatio`, price over the reschedule cost), ties by node.
        out.sort_by(|a, b| {
            savings_ratio(b)
                .total_cmp(&savings_ratio(a))
                .then_with(|| a.node.cmp(&b.node))
        });
        out
    }

    fn consolidate(&mut self) {
        let ready = self.consolidatable();
        let (empty, busy): (Vec<Candidate>, Vec<Candidate>) =
            ready.into_iter().partition(|c| c.pods.is_empty());
        self.count_eligible(Reason::Empty, empty.len());
        self.count_eligible(Reason::Underutilized, busy.len());
        let mut batch = Deletes::default();
        for c in empty {
            if self.full() {
                return;
            }
            if self.node(&c).life.do_not_consolidate {
                let name = self.name(&c);
                self.keep(
                    &name,
                    "it is annotated karpenter.sh/do-not-consolidate".into(),
                );
                continue;
            }
            if !batch.admits(self, &c, Reason::Empty) {
                let name = self.name(&c);
                let refusal = Self::budget_refusal(&c.provisioner, Reason::Empty);
                self.keep(&name, format!("empty, but {refusal}"));
                continue;
            }
            batch.push(c, "empty: consolidation deletes it".into());
        }
        self.take_deletes(Reason::Empty, batch, "empty: consolidation deletes them");
        if self.full() {
            return;
        }
        let mut busy = busy;
        while self.multi_node(&mut busy) {}
        self.single_node(busy);
    }

    /// The settings a set of candidates is judged by: the strictest of theirs.
    fn strictest(&self, set: &[&Candidate]) -> Option<DisruptionSettings> {
        let mut out: Option<DisruptionSettings> = None;
        for c in set {
            let s = self.settings.get(&c.provisioner)?;
            out = Some(match out {
                None => s.clone(),
                Some(mut o) => {
                    o.min_price_improvement =
                        stricter(o.min_price_improvement, s.min_price_improvement);
                    if s.policy.min_score() > o.policy.min_score() {
                        o.policy = s.policy;
                    }
                    if o.min_score.is_some() || s.min_score.is_some() {
                        o.min_score = stricter(o.score_threshold(), s.score_threshold());
                    }
                    o
                }
            });
        }
        out
    }

    fn totals_of(&self, set: &[&Candidate]) -> Totals {
        let provs: HashSet<&str> = set.iter().map(|c| c.provisioner.as_str()).collect();
        let mut t = Totals {
            price: 0.0,
            cost: 0.0,
        };
        for p in provs {
            if let Some(x) = self.totals.get(p) {
                t.price += x.price;
                t.cost += x.cost;
            }
        }
        t
    }

    /// Evaluates removing `set` against the working cluster.
    fn evaluate(&mut self, set: &[Candidate]) -> Result<super::consolidation::Move, String> {
        let at: Vec<Candidate> = set.iter().filter_map(|c| self.at_work(c)).collect();
        let refs: Vec<&Candidate> = at.iter().collect();
        let settings = self
            .strictest(&refs)
            .ok_or_else(|| "its Provisioner does not exist".to_string())?;
        let totals = self.totals_of(&refs);
        let m = evaluate(
            &mut self.work,
            self.input.catalog,
            &self.opts,
            &refs,
            &settings,
            totals,
        )?;
        // A pending pod the cluster places now on a node that stays must keep that room: a
        // move that sends it to a new node (or nowhere) only trades one node for another
        // bought for that pod.
        let displaced = m
            .plan
            .new_nodes
            .iter()
            .flat_map(|n| n.pods.iter())
            .chain(m.plan.unschedulable.iter().map(|u| &u.pod))
            .find_map(|k| self.pending_placed.get(k).map(|on| (k, on)));
        if let Some((k, on)) = displaced {
            return Err(format!(
                "pod {k}, waiting for a place, would lose the room it has now on node {on}"
            ));
        }
        Ok(m)
    }

    /// Takes the longest prefix of `busy` (within budgets, at most [`MAX_MULTI_NODE`]) of two
    /// or more nodes that consolidation removes in one move; true when it took one.
    fn multi_node(&mut self, busy: &mut Vec<Candidate>) -> bool {
        if self.full() {
            return false;
        }
        let mut room: HashMap<String, u32> = HashMap::new();
        let mut set: Vec<Candidate> = Vec::new();
        for c in busy.iter() {
            if set.len() == MAX_MULTI_NODE {
                break;
            }
            if self.node(c).life.do_not_consolidate || self.fresh.contains(&self.name(c)) {
                continue;
            }
            let left = room
                .entry(c.provisioner.clone())
                .or_insert_with(|| self.allowed(&c.provisioner, Reason::Underutilized));
            if *left == 0 {
                continue;
            }
            *left -= 1;
            set.push(c.clone());
        }
        if set.len() < 2 {
            return false;
        }
        let (mut lo, mut hi) = (2usize, set.len());
        let mut best = None;
        let mut refused: Option<(usize, String)> = None;
        while lo <= hi {
            if !self.simulation() {
                break;
            }
            let mid = (lo + hi) / 2;
            match self.evaluate(&set[..mid]) {
                Ok(m) => {
                    best = Some((mid, m));
                    lo = mid + 1;
                }
                Err(why) => {
                    if refused.as_ref().is_none_or(|(n, _)| mid < *n) {
                        refused = Some((mid, why));
                    }
                    hi = mid - 1;
                }
            }
        }
        if let Some((n, why)) = refused {
            let nodes = set[..n].iter().map(|c| self.name(c)).collect();
            self.refused_moves.push(RefusedMove { nodes, why });
        }
        let Some((n, m)) = best else {
            return false;
        };
        let chosen = &set[..n];
        let names: Vec<String> = chosen.iter().map(|c| self.name(c)).collect();
        let detail = format!(
            "underutilized: {} nodes {}",
            n,
            match &m.action {
                Action::Delete => "whose pods fit on the other nodes".to_string(),
                Action::Replace(r) if r.len() == 1 => format!("replaced by one {}", kinds_of(r)),
                Action::Replace(r) => format!("replaced by {}", kinds_of(r)),
            }
        );
        self.take_move(names, m, detail);
        busy.retain(|c| !self.decided.contains(&self.name(c)));
        true
    }

    fn take_move(&mut self, names: Vec<String>, m: super::consolidation::Move, detail: String) {
        let replacements = match m.action {
            Action::Delete => Vec::new(),
            Action::Replace(r) => r,
        };
        let decision = Decision {
            reason: Reason::Underutilized,
            nodes: names,
            replacements,
            moves: Vec::new(),
            price_before: m.price_before,
            price_after: m.price_after,
            score: Some(m.score),
            detail,
        };
        self.take(decision, &m.plan);
    }

    fn single_node(&mut self, mut busy: Vec<Candidate>) {
        if !busy.is_empty() {
            let k = self.input.start_at % busy.len();
            busy.rotate_left(k);
        }
        for c in busy {
            if self.full() {
                return;
            }
            let name = self.name(&c);
            if self.fresh.contains(&name) {
                self.keep(&name, "it takes pods from a node this plan removes".into());
                continue;
            }
            if self.allowed(&c.provisioner, Reason::Underutilized) == 0 {
                let refusal = Self::budget_refusal(&c.provisioner, Reason::Underutilized);
                self.keep(&name, refusal);
                continue;
            }
            if self.node(&c).life.do_not_consolidate {
                self.keep(
                    &name,
                    "it is annotated karpenter.sh/do-not-consolidate".into(),
                );
                continue;
            }
            if let Some(why) = self.hopeless(&c) {
                self.keep(&name, why);
                continue;
            }
            if !self.simulation() {
                self.keep(&name, NOT_SIMULATED.into());
                continue;
            }
            match self.evaluate(std::slice::from_ref(&c)) {
                Ok(m) => {
                    let detail = match &m.action {
                        Action::Delete => "underutilized: its pods fit on the other nodes".into(),
                        Action::Replace(r) => {
                            format!("underutilized: replaced by a cheaper {}", kinds_of(r))
                        }
                    };
                    self.take_move(vec![name], m, detail);
                }
                Err(e) => self.keep(&name, e),
            }
        }
    }

    /// Why removing `c` cannot be taken, when that shows without a simulation: even deleting
    /// it scores below the threshold, or CPU and memory (and its pods' required
    /// anti-affinity and affinity) alone say no cheaper way holds its pods
    /// ([`room::refusal`]).
    fn hopeless(&mut self, c: &Candidate) -> Option<String> {
        let settings = self.settings.get(&c.provisioner)?;
        if let Some(threshold) = settings.score_threshold() {
            let best = score(c.price, c.disruption, self.totals_of(&[c]));
            if best < threshold {
                return Some(format!(
                    "even deleting it would score {best:.2}, below the {} threshold {threshold:.2}",
                    settings.threshold_name()
                ));
            }
        }
        if !self.room_shortcut {
            return None;
        }
        let bound = settings.price_bound(c.price);
        let improvement = settings.improvement_words();
        let name = self.name(c);
        let all = &self.input.snapshot.pods;
        // The room counted leaves out nodes with no pod slot free: sound only for pods that
        // take a slot (every pod the cluster reports does).
        if c.pods.iter().any(|&i| all[i].requests.pods < 1) {
            return None;
        }
        let moving: Vec<&Pod> = c.pods.iter().map(|&i| &all[i]).collect();
        self.apart.learn(&self.work, moving.iter().copied());
        self.together.learn(&self.work, moving.iter().copied());
        let pods: Vec<room::Moving> = moving
            .iter()
            .map(|p| {
                let mut not_on = self.apart.not_on(p);
                not_on.extend(self.together.not_on(p, &name, &moving));
                room::Moving {
                    key: p.key(),
                    room: [p.requests.cpu, p.requests.memory],
                    not_on,
                }
            })
            .collect();
        room::refusal(
            &name,
            &pods,
            &mut self.free,
            &self.new_room,
            bound,
            &improvement,
        )
    }

    fn finish(self) -> DisruptionPlan {
        let s = self.input.snapshot;
        let prices = Prices::new(self.input.catalog);
        let price_before: f64 = s
            .nodes
            .iter()
            .filter(|n| n.provisioner().is_some())
            .filter_map(|n| prices.offered(n).ok())
            .map(|o| o.price)
            .sum::<f64>()
            + 0.0;
        let removed: f64 = self.decisions.iter().map(|d| d.price_before).sum();
        let added: f64 = self.decisions.iter().map(|d| d.price_after).sum();
        let full = self.full();
        let mut why = self.why;
        for name in self.unready.keys().filter(|n| !self.decided.contains(*n)) {
            why.entry(name.clone())
                .or_default()
                .push("not Ready: only expiration acts on a node that is not Ready".into());
        }
        let kept = s
            .nodes
            .iter()
            .filter(|n| !self.decided.contains(&n.name))
            .map(|n| Kept {
                node: n.name.clone(),
                why: why.remove(&n.name).unwrap_or_else(|| {
                    vec![if full {
                        "not evaluated: the plan stops at its first decisions".into()
                    } else {
                        "nothing to do: not expired, drifted, empty or underutilized".into()
                    }]
                }),
            })
            .collect();
        DisruptionPlan {
            decisions: self.decisions,
            kept,
            refused_moves: self.refused_moves,
            eligible: self.eligible,
            allowed: Vec::new(),
            complete: !self.bounded,
            price_before,
            price_after: (price_before - removed + added).max(0.0) + 0.0,
        }
    }
}

/// Each Provisioner's $/h and disruption cost over all its priced nodes (Karpenter's
/// NodePool totals): what a move's savings and disruption are shares of.
/// $/h a candidate's removal saves per unit of its reschedule cost (at least 1).
fn savings_ratio(c: &Candidate) -> f64 {
    c.price / c.disruption.max(1.0)
}

fn provisioner_totals(s: &Snapshot, catalog: &[InstanceType]) -> HashMap<String, Totals> {
    let mut on_node: HashMap<&str, Vec<&crate::pod::Pod>> = HashMap::new();
    for p in &s.pods {
        if let Some(n) = p.node_name.as_deref() {
            if !leaves_with_node(p) {
                on_node.entry(n).or_default().push(p);
            }
        }
    }
    let mut totals: HashMap<String, Totals> = HashMap::new();
    let prices = Prices::new(catalog);
    for n in &s.nodes {
        let (Some(p), Ok(o)) = (n.provisioner(), prices.offered(n)) else {
            continue;
        };
        let pods = on_node.get(n.name.as_str()).into_iter().flatten().copied();
        let t = totals.entry(p.to_string()).or_insert(Totals {
            price: 0.0,
            cost: 0.0,
        });
        t.price += o.price;
        t.cost += reschedule_cost(pods);
    }
    totals
}

/// A duration as people read it: "45s", "12m", "3h", "31d".
pub fn duration(secs: i64) -> String {
    let secs = secs.max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 7_200 {
        format!("{}m", secs / 60)
    } else if secs < 172_800 {
        format!("{}h", secs / 3_600)
    } else {
        format!("{}d", secs / 86_400)
    }
}

/// The stricter of two optional bars (a score or a price improvement): the higher; `None`
/// (no bar) only when both are.
fn stricter(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// New nodes as a decision's detail names them: "c5.xlarge on-demand", or "2 nodes
/// (c5.large on-demand, c5.large on-demand)".
fn kinds_of(new: &[crate::scheduling::NewNode]) -> String {
    match new {
        [one] => format!("{} {}", one.instance_type, one.capacity_type),
        more => {
            let kinds: Vec<String> = more
                .iter()
                .map(|n| format!("{} {}", n.instance_type, n.capacity_type))
                .collect();
            format!("{} nodes ({})", more.len(), kinds.join(", "))
        }
    }
}

/// Nodes to delete together in one decision, each with its words, and how many of each
/// Provisioner's budget they use.
#[derive(Default)]
struct Deletes {
    nodes: Vec<(Candidate, String)>,
    used: HashMap<String, u32>,
}

impl Deletes {
    /// True when the budget of `c`'s Provisioner for `reason` allows one more node beyond
    /// those already in the batch.
    fn admits(&self, planner: &Planner<'_>, c: &Candidate, reason: Reason) -> bool {
        let used = self.used.get(&c.provisioner).copied().unwrap_or(0);
        planner.allowed(&c.provisioner, reason) > used
    }

    fn push(&mut self, c: Candidate, detail: String) {
        *self.used.entry(c.provisioner.clone()).or_default() += 1;
        self.nodes.push((c, detail));
    }
}

/// The pods waiting for a place in `snapshot` (pending, or on a node on its way out whose
/// room no reservation holds: [`trial::is_leaving`]) that a simulation places on nodes that exist now, each with
/// that node: one simulation per plan.
fn pending_placed(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
) -> HashMap<String, String> {
    let leaving: HashSet<String> = snapshot
        .nodes
        .iter()
        .filter(|n| trial::is_leaving(n))
        .map(|n| n.name.clone())
        .collect();
    let reserved: HashSet<String> = snapshot
        .pods
        .iter()
        .filter_map(|p| {
            let claim = p.disruption.nominated.as_ref()?;
            let origin = p.name.strip_suffix(&format!("@{claim}"))?;
            Some(format!("{}/{origin}", p.namespace))
        })
        .collect();
    let is_waiting = |p: &crate::pod::Pod| match p.node_name.as_deref() {
        None => true,
        Some(on) => leaving.contains(on) && !leaves_with_node(p) && !reserved.contains(&p.key()),
    };
    let waiting: Vec<usize> = (0..snapshot.pods.len())
        .filter(|&i| is_waiting(&snapshot.pods[i]))
        .collect();
    if waiting.is_empty() {
        return HashMap::new();
    }
    // Unbound for the simulation, and put back.
    let mut keys = HashSet::new();
    let mut bound = Vec::new();
    for &i in &waiting {
        keys.insert(snapshot.pods[i].key());
        if let Some(on) = snapshot.pods[i].node_name.take() {
            bound.push((i, on));
        }
    }
    let plan = crate::scheduling::simulate(snapshot, catalog, opts);
    for (i, on) in bound {
        snapshot.pods[i].node_name = Some(on);
    }
    plan.existing_nodes
        .into_iter()
        .flat_map(|u| {
            let name = u.name;
            u.pods.into_iter().map(move |k| (k, name.clone()))
        })
        .filter(|(k, _)| keys.contains(k))
        .collect()
}
