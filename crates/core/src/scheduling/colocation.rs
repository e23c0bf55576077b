//! Required pod affinity on `kubernetes.io/hostname`: pods that must share a node with the pods
//! their term selects.
//!
//! Decided per class before placement. With matching pods only running, the class may only join
//! the nodes they run on. A group that selects only itself (and has no running partner) must go
//! onto one node together — the first pod bootstraps a node, the rest must join it, as the
//! kube-scheduler would see them. A class whose every term selects other *pending* classes
//! follows them: it may only go onto nodes (existing or new) that run a matching pod, running or
//! placed by the same plan, and the packer folds it into the fills of its targets
//! ([`Follow`]). Cycles (A selects B, B selects A) are broken at one class, the leader, which is
//! placed with its partners on the same node; the leader must match its own terms, as the
//! kube-scheduler requires of a pod placed before its partners, or the cycle is refused.

use std::collections::BTreeSet;

use crate::labels;
use crate::pod::Pod;

use super::affinity::Scope;
use super::node_rules::describe_selector;

/// One hostname affinity term of a following class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowTerm {
    /// Existing nodes that run a pod the term selects.
    pub running: BTreeSet<String>,
    /// Other pending classes the term selects (a node holding one of them satisfies the term).
    pub targets: Vec<usize>,
    /// The selector, for reasons.
    pub describe: String,
}

/// A class whose hostname affinity selects pods pending in the same plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Follow {
    /// Every term must be satisfied on the node.
    pub terms: Vec<FollowTerm>,
    /// The class chosen to break a cycle of followers: it is placed like a target (it may open a
    /// node) but only together with at least one of the classes following it.
    pub leader: bool,
}

impl Follow {
    /// The reason given to the pods of this class left without a node.
    pub fn no_room(&self) -> String {
        let d = self
            .terms
            .first()
            .map(|t| t.describe.as_str())
            .unwrap_or("");
        format!(
            "pod affinity on {}: no node hosting a pod matching {} has room",
            labels::HOSTNAME,
            d
        )
    }
}

/// Where a class may go because of its hostname pod affinity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Together {
    /// No hostname pod affinity.
    Free,
    /// Only onto these existing nodes (they run matching pods).
    OnNodes(BTreeSet<String>),
    /// All pods of the class onto one node (self-affinity, no running partner).
    OneNode,
    /// Only onto nodes hosting pods of other pending classes (or running matching pods).
    Follows(Follow),
    /// Nowhere, and why.
    Refused(String),
}

impl Together {
    /// The follow relation, when the class follows other pending classes and is not a leader.
    pub fn follower(&self) -> Option<&Follow> {
        match self {
            Together::Follows(f) if !f.leader => Some(f),
            _ => None,
        }
    }
}

/// For each class, the non-leader follower classes whose first term selects it: the classes
/// that must be folded into the nodes this class opens. Class-level, so linear in the number of
/// (term, class) matches.
pub fn followers_of(together: &[Together]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); together.len()];
    for (f, t) in together.iter().enumerate() {
        if let Some(first) = t.follower().and_then(|fl| fl.terms.first()) {
            for &c in &first.targets {
                out[c].push(f);
            }
        }
    }
    out
}

/// The hostname-affinity decision for each class's effective pod.
///
/// Only the first class of a self-affine group bootstraps a node; a later class selected by the
/// same terms (another pod shape of the group, or a zone-pinned part of it) would have to join
/// that node, which is not simulated, so it is reported.
///
/// A class refused here never runs, so the classes whose terms select it are decided again
/// without it, until no more are refused: the class selecting only itself beside a cycle
/// that never starts is then a self-affine group, and a class selecting it follows it.
pub fn analyze(pods: &[Pod], templates: &[Pod]) -> Vec<Together> {
    let terms = hostname_terms(pods, templates);
    let mut never_runs = vec![false; templates.len()];
    // The reason a class was first refused for (decided again, a cycle's class would
    // only say that the class it selects never runs).
    let mut first: Vec<Option<Together>> = vec![None; templates.len()];
    loop {
        let mut out = decide(templates, &terms, &never_runs);
        let mut more = false;
        for (c, t) in out.iter_mut().enumerate() {
            if let Some(why) = &first[c] {
                *t = why.clone();
            } else if matches!(t, Together::Refused(_)) {
                first[c] = Some(t.clone());
                never_runs[c] = true;
                more = true;
            }
        }
        if !more {
            return out;
        }
    }
}

/// One hostname pod-affinity term of a class (required, or a preference taken as one), with
/// what it selects: worked out once, as [`analyze`] may decide several times.
struct HostnameTerm {
    scope: Scope,
    /// Existing nodes running a pod it selects.
    running: BTreeSet<String>,
    /// The other pending classes it selects.
    targets: Vec<usize>,
}

/// Per class, its hostname pod-affinity terms.
fn hostname_terms(pods: &[Pod], templates: &[Pod]) -> Vec<Vec<HostnameTerm>> {
    templates
        .iter()
        .enumerate()
        .map(|(ci, t)| {
            t.affinity
                .iter()
                .filter(|a| !a.anti && a.topology_key == labels::HOSTNAME)
                .map(|a| {
                    let scope = Scope::of_term(t, a);
                    let running = pods
                        .iter()
                        .filter(|p| scope.matches(p))
                        .filter_map(|p| p.node_name.clone())
                        .collect();
                    let targets = templates
                        .iter()
                        .enumerate()
                        .filter(|&(j, o)| j != ci && scope.matches(o))
                        .map(|(j, _)| j)
                        .collect();
                    HostnameTerm {
                        scope,
                        running,
                        targets,
                    }
                })
                .collect()
        })
        .collect()
}

/// One round of [`analyze`], with the classes `never_runs` marks selected by no term.
fn decide(templates: &[Pod], terms: &[Vec<HostnameTerm>], never_runs: &[bool]) -> Vec<Together> {
    let mut claimed: Vec<Vec<&Scope>> = Vec::new();
    let mut out: Vec<Together> = templates
        .iter()
        .zip(terms)
        .map(|(t, terms)| {
            if terms.is_empty() {
                return Together::Free;
            }
            // Every term selects other pending classes: follow them.
            let follow: Vec<FollowTerm> = terms
                .iter()
                .map(|h| FollowTerm {
                    running: h.running.clone(),
                    targets: h
                        .targets
                        .iter()
                        .copied()
                        .filter(|&j| !never_runs[j])
                        .collect(),
                    describe: describe_selector(&h.scope),
                })
                .collect();
            if follow.iter().all(|f| !f.targets.is_empty()) {
                return Together::Follows(Follow {
                    terms: follow,
                    leader: false,
                });
            }
            let mut nodes: Option<BTreeSet<String>> = None;
            let mut self_only = true;
            for (h, f) in terms.iter().zip(&follow) {
                if f.running.is_empty() {
                    if !h.scope.matches(t) {
                        let why = if f.targets.is_empty() {
                            "no pod matches"
                        } else {
                            "with another term on running pods only, no running pod matches"
                        };
                        return Together::Refused(format!(
                            "pod affinity on {}: {} {}",
                            labels::HOSTNAME,
                            why,
                            f.describe
                        ));
                    }
                } else {
                    self_only = false;
                    nodes = Some(match nodes {
                        None => f.running.clone(),
                        Some(n) => n.intersection(&f.running).cloned().collect(),
                    });
                }
            }
            let scopes: Vec<&Scope> = terms.iter().map(|h| &h.scope).collect();
            match nodes {
                Some(n) if n.is_empty() => Together::Refused(format!(
                    "pod affinity on {}: no node runs pods matching every term",
                    labels::HOSTNAME
                )),
                Some(n) => Together::OnNodes(n),
                None if self_only && claimed.contains(&scopes) => Together::Refused(format!(
                    "pod affinity on {}: must join the node of other pending pods it selects (not simulated)",
                    labels::HOSTNAME
                )),
                None if self_only => {
                    claimed.push(scopes);
                    Together::OneNode
                }
                None => Together::Free,
            }
        })
        .collect();
    break_cycles(&mut out, templates);
    out
}

/// Marks one class of every cycle of followers (through first terms) as a leader, so some class
/// of the cycle may open a node. A follower is *resolved* when a chain of first-term targets
/// reaches a class that may open nodes; an unresolved one lies on, or behind, a cycle.
///
/// The leader, any unresolved class reachable from the cycle, must be a class whose pods match
/// every one of their own required pod-affinity terms while no pod those terms select runs:
/// the kube-scheduler lets a pod break its affinity only then (the first pod of a series
/// affine to itself). A cycle with no such class never starts in the cluster (each side waits
/// for the other): its classes are refused rather than bought a node the scheduler will not
/// use, or, when some run partners, stay followers that may only join their nodes.
fn break_cycles(together: &mut [Together], templates: &[Pod]) {
    let first_targets = |t: &Together| -> Option<Vec<usize>> {
        t.follower()
            .and_then(|f| f.terms.first())
            .map(|ft| ft.targets.clone())
    };
    // Cycles no class may start but whose classes have running partners: they stay followers
    // (joining nodes that run a partner), counted as resolved here.
    let mut joined = vec![false; together.len()];
    loop {
        // Fixpoint over the follow graph; the number of passes is bounded by its depth.
        let mut resolved: Vec<bool> = together
            .iter()
            .zip(&joined)
            .map(|(t, &j)| j || t.follower().is_none())
            .collect();
        let mut changed = true;
        while changed {
            changed = false;
            for c in 0..together.len() {
                if resolved[c] {
                    continue;
                }
                if first_targets(&together[c]).is_some_and(|ts| ts.iter().any(|&x| resolved[x])) {
                    resolved[c] = true;
                    changed = true;
                }
            }
        }
        let Some(start) = resolved.iter().position(|r| !r) else {
            return;
        };
        // Every unresolved class reachable from `start`: a cycle, and what hangs off it.
        let mut reach = vec![start];
        let mut seen = vec![false; together.len()];
        seen[start] = true;
        let mut i = 0;
        while i < reach.len() {
            for x in first_targets(&together[reach[i]]).unwrap_or_default() {
                if !resolved[x] && !seen[x] {
                    seen[x] = true;
                    reach.push(x);
                }
            }
            i += 1;
        }
        // The kube-scheduler places a pod whose partners run nowhere only when it matches all
        // its own terms, and only while no pod they select runs at all.
        let may_lead = |c: usize| {
            matches_own_terms(&templates[c])
                && together[c]
                    .follower()
                    .is_some_and(|f| f.terms.iter().all(|t| t.running.is_empty()))
        };
        let partnered = reach.iter().any(|&c| {
            together[c]
                .follower()
                .is_some_and(|f| f.terms.iter().any(|t| !t.running.is_empty()))
        });
        // A leader goes first, and the classes following it join it. Only a class on a cycle
        // is followed by one its own first term selects (the class before it on the cycle);
        // a class upstream of the cycle would stand apart from the pods it selects, which
        // holds only in a scheduling order that places it before them.
        let unresolved_targets = |c: usize| -> Vec<usize> {
            first_targets(&together[c])
                .unwrap_or_default()
                .into_iter()
                .filter(|&x| !resolved[x])
                .collect()
        };
        let cycle_of = on_cycles(together.len(), &reach, unresolved_targets);
        let cyclic = |c: usize| cycle_of[c].is_some();
        if let Some(leader) = reach.iter().copied().find(|&c| cyclic(c) && may_lead(c)) {
            if let Together::Follows(f) = &mut together[leader] {
                f.leader = true;
            }
            continue;
        }
        // No class of a cycle may start it: with running partners its classes stay followers
        // and join their nodes; else a cycle that selects no pending class outside itself
        // never runs and is refused (one that does waits: what it selects may run once the
        // classes are decided again). A class upstream of it is decided again without it
        // (`analyze`).
        let mut leaves: BTreeSet<usize> = BTreeSet::new();
        for &c in &reach {
            if let Some(id) = cycle_of[c] {
                if unresolved_targets(c)
                    .iter()
                    .any(|&x| cycle_of[x] != Some(id))
                {
                    leaves.insert(id);
                }
            }
        }
        for &c in &reach {
            if partnered {
                joined[c] = true;
                continue;
            }
            if cycle_of[c].is_none_or(|id| leaves.contains(&id)) {
                continue;
            }
            let describe = together[c]
                .follower()
                .and_then(|f| f.terms.first())
                .map(|t| t.describe.clone())
                .unwrap_or_default();
            together[c] = Together::Refused(format!(
                "pod affinity on {}: the pods matching {describe} are pending and wait, through \
                 a cycle of required affinities, for pods like this one; the kube-scheduler \
                 starts such a cycle only with a pod that matches all its own terms, and none \
                 does",
                labels::HOSTNAME
            ));
        }
    }
}

/// Which of `nodes` (classes below `n`) lie on a cycle of `edges`, which never leave
/// `nodes`, and which: the members of each strongly connected component of two or more get
/// one number (Tarjan's algorithm, iterative, linear in the edges).
fn on_cycles(n: usize, nodes: &[usize], edges: impl Fn(usize) -> Vec<usize>) -> Vec<Option<usize>> {
    let mut t = Tarjan {
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: vec![None; n],
        cycles: 0,
    };
    for &root in nodes {
        if t.index[root].is_some() {
            continue;
        }
        // Frames: (class, its successors, the next successor to visit).
        let mut calls = vec![(root, edges(root), 0usize)];
        t.enter(root);
        while let Some((v, succ, i)) = calls.last_mut() {
            let v = *v;
            if let Some(&w) = succ.get(*i) {
                *i += 1;
                match t.index[w] {
                    None => {
                        t.enter(w);
                        calls.push((w, edges(w), 0));
                    }
                    Some(iw) if t.on_stack[w] => t.low[v] = t.low[v].min(iw),
                    Some(_) => {}
                }
                continue;
            }
            calls.pop();
            if let Some((parent, _, _)) = calls.last() {
                t.low[*parent] = t.low[*parent].min(t.low[v]);
            }
            t.close(v);
        }
    }
    t.out
}

/// The state of [`on_cycles`].
struct Tarjan {
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    out: Vec<Option<usize>>,
    cycles: usize,
}

impl Tarjan {
    fn enter(&mut self, v: usize) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
    }

    /// After `v`'s successors: when `v` roots a component, pops it and marks it when it is a
    /// cycle.
    fn close(&mut self, v: usize) {
        if Some(self.low[v]) != self.index[v] {
            return;
        }
        let mut component = Vec::new();
        while let Some(w) = self.stack.pop() {
            self.on_stack[w] = false;
            component.push(w);
            if w == v {
                break;
            }
        }
        if component.len() > 1 {
            for w in component {
                self.out[w] = Some(self.cycles);
            }
            self.cycles += 1;
        }
    }
}

/// True when the pod matches each of its own required pod-affinity terms (the kube-scheduler's
/// condition for placing a first pod whose partners do not run yet).
fn matches_own_terms(pod: &Pod) -> bool {
    pod.affinity
        .iter()
        .filter(|a| !a.anti)
        .all(|a| Scope::of_term(pod, a).matches(pod))
}
