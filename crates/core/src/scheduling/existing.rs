//! Placing pending pods on nodes that already exist (or are in flight): capacity already paid for.

use std::collections::{BTreeSet, HashMap};

use crate::pod::{Node, Pod};
use crate::resources::Resources;
use crate::taints::first_untolerated;

use super::node_rules::{NodeRules, NodeState};
use super::volume_limits::NodeVolumes;

/// Free capacity of the existing nodes after the pods already running there.
pub struct ExistingNodes<'a> {
    /// Nodes sorted by name.
    pub nodes: Vec<&'a Node>,
    /// Free capacity per node.
    pub free: Vec<Resources>,
    /// Pods placed by this pass, per node (snapshot pod indices).
    pub placed: Vec<Vec<usize>>,
    /// Per node, its rule counts and volumes, worked out the first time a pod could go
    /// there (`None` before). A disruption trial builds this view for every node of the
    /// cluster; most are full or refuse the moved pods, and counting every running pod
    /// against the pass's rules up front was a third of a trial's time on a packed cluster.
    counters: Vec<Option<Counters<'a>>>,
    /// The snapshot indices of the pods running on node `i`:
    /// `running[running_from[i]..running_from[i + 1]]`.
    running: Vec<usize>,
    running_from: Vec<usize>,
    /// The snapshot's pods, which the pod indices given to the placing methods index: on a
    /// node capping their volumes, pods of one class are told apart by their claims.
    pods: &'a [Pod],
    /// Per class, whether its pods share claims among themselves (worked out when a cap
    /// first stops one): only then may a later pod fit where an earlier one did not.
    shares_claims: HashMap<usize, bool>,
}

/// What one node holds that the per-node rules and volume caps count.
#[derive(Clone)]
struct Counters<'a> {
    /// Rule counts (anti-affinity, hostname spread, host ports), running pods included.
    state: NodeState,
    /// Volume attach caps and what is attached, running pods included.
    volumes: NodeVolumes<'a>,
}

impl<'a> Counters<'a> {
    fn count(
        node: &Node,
        running: impl Iterator<Item = &'a Pod> + Clone,
        rules: &NodeRules,
    ) -> Self {
        Counters {
            state: rules.running_state(running.clone()),
            volumes: NodeVolumes::of(node, running),
        }
    }
}

impl<'a> ExistingNodes<'a> {
    /// Subtracts the requests of running pods from each node's allocatable; their part in
    /// the per-node rules is counted when a pod first could go to the node.
    pub fn new(nodes: &'a [Node], pods: &'a [Pod]) -> Self {
        let mut sorted: Vec<&Node> = nodes.iter().collect();
        if !sorted.is_sorted_by(|a, b| a.name <= b.name) {
            sorted.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let by_name: foldhash::HashMap<&str, usize> = sorted
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut free: Vec<Resources> = sorted.iter().map(|n| n.allocatable.clone()).collect();
        // The running pods grouped by node, in snapshot order, in one list.
        let node_of: Vec<Option<usize>> = pods
            .iter()
            .map(|p| p.node_name.as_deref().and_then(|n| by_name.get(n).copied()))
            .collect();
        let mut running_from = vec![0usize; sorted.len() + 1];
        for (p, node) in pods.iter().zip(&node_of) {
            if let Some(i) = *node {
                free[i].sub(&p.requests);
                running_from[i + 1] += 1;
            }
        }
        for i in 0..sorted.len() {
            running_from[i + 1] += running_from[i];
        }
        let mut next = running_from.clone();
        let mut running = vec![0usize; running_from[sorted.len()]];
        for (at, node) in node_of.iter().enumerate() {
            if let Some(i) = *node {
                running[next[i]] = at;
                next[i] += 1;
            }
        }
        ExistingNodes {
            placed: vec![Vec::new(); sorted.len()],
            counters: vec![None; sorted.len()],
            nodes: sorted,
            free,
            running,
            running_from,
            pods,
            shares_claims: HashMap::new(),
        }
    }

    /// Node `i`'s rule counts and volumes, counted from its running pods on first use.
    fn counters(&mut self, i: usize, rules: &NodeRules) -> &mut Counters<'a> {
        let pods = self.pods;
        let running = &self.running[self.running_from[i]..self.running_from[i + 1]];
        let node = self.nodes[i];
        self.counters[i]
            .get_or_insert_with(|| Counters::count(node, running.iter().map(|&p| &pods[p]), rules))
    }

    /// True when `pod` may run on node `i` as far as taints and node requirements go.
    pub fn admits(&self, i: usize, pod: &Pod) -> bool {
        let node = self.nodes[i];
        if node.unschedulable {
            return false;
        }
        if first_untolerated(&node.taints, &pod.tolerations).is_some() {
            return false;
        }
        pod.node_terms.is_empty()
            || pod
                .node_terms
                .iter()
                .any(|t| t.matches_labels(&node.labels))
    }

    /// Places as many of `pods` (identical, represented by `template`, class `class`) as fit and
    /// as the per-node rules allow, first fit by name. Returns how many were placed; they are
    /// moved to the front of `pods` (in their order; only a volume attach cap passing over a
    /// pod reorders them). `only`, when given, names the nodes the class may use (hostname
    /// pod affinity).
    pub fn place_class(
        &mut self,
        class: usize,
        template: &Pod,
        pods: &mut [usize],
        rules: &NodeRules,
        only: Option<&BTreeSet<String>>,
    ) -> usize {
        let mut done = 0;
        for i in 0..self.nodes.len() {
            if done == pods.len() {
                break;
            }
            if !self.admits(i, template) || only.is_some_and(|o| !o.contains(&self.nodes[i].name)) {
                continue;
            }
            let k = self.free[i].copies_fitting(&template.requests, (pods.len() - done) as i64);
            if k == 0 {
                continue;
            }
            let k = k.min(rules.cap(class, &self.counters(i, rules).state));
            let k = self.take_volume_fits(i, class, template, &mut pods[done..], k, rules);
            if k == 0 {
                continue;
            }
            rules.add(class, k, &mut self.counters(i, rules).state);
            self.attach(i, &pods[done..done + k as usize], rules);
            self.free[i].add_times(&template.requests, -k);
            self.placed[i].extend_from_slice(&pods[done..done + k as usize]);
            done += k as usize;
        }
        done
    }

    /// Places the pods of a group whose required hostname affinity selects itself (all on one
    /// node; `pods` identical, as [`Self::place_class`]): all of them on the first node, by
    /// name, that holds every one; else, when some node has room for part of the group, as
    /// many as the roomiest such node holds, since the kube-scheduler puts the group's first
    /// pod on a node with room and the rest can only join it (unless `whole_only`). Returns
    /// how many were placed, and the node when that is not all of them.
    pub fn place_class_whole(
        &mut self,
        class: usize,
        template: &Pod,
        pods: &mut [usize],
        rules: &NodeRules,
        whole_only: bool,
    ) -> (usize, Option<String>) {
        let n = pods.len() as i64;
        let mut best: Option<(usize, i64)> = None;
        for i in 0..self.nodes.len() {
            if !self.admits(i, template) {
                continue;
            }
            let k = self.free[i].copies_fitting(&template.requests, n);
            let k = if k == 0 {
                0
            } else {
                let k = k.min(rules.cap(class, &self.counters(i, rules).state));
                self.volume_fits(i, class, template, pods, k, rules)
                    .map_or(k, |f| f.len() as i64)
            };
            if k == n {
                best = Some((i, k));
                break;
            }
            if k > 0 && best.is_none_or(|(_, b)| k > b) {
                best = Some((i, k));
            }
        }
        let Some((i, k)) = best.filter(|&(_, k)| k == n || !whole_only) else {
            return (0, None);
        };
        let k = self.take_volume_fits(i, class, template, pods, k, rules);
        rules.add(class, k, &mut self.counters(i, rules).state);
        self.attach(i, &pods[..k as usize], rules);
        self.free[i].add_times(&template.requests, -k);
        self.placed[i].extend_from_slice(&pods[..k as usize]);
        let partial = (k < n).then(|| self.nodes[i].name.clone());
        (k as usize, partial)
    }

    /// Places the pods of several classes (`group`: class, template, pods; the first class
    /// is the one whose first pod starts the group) together on one node, as an affinity
    /// cycle's leader must share a node with its followers; `partnered(node, counts)` says
    /// which classes have their partners there when each takes `counts` pods: the first
    /// node, by name, that holds them all. When none does and not `whole_only`, as many as
    /// the node holding the most of them (with room for a pod of the first class) takes,
    /// since the kube-scheduler puts the group's first pod on a node with room and the rest
    /// can only join it. Returns the node and how many of each class went there; `None` when
    /// nothing was placed.
    pub fn place_group(
        &mut self,
        group: &[(usize, &Pod, &[usize])],
        rules: &NodeRules,
        partnered: &dyn Fn(usize, &[i64]) -> Vec<bool>,
        whole_only: bool,
    ) -> Option<(usize, Vec<i64>)> {
        let whole: i64 = group.iter().map(|(_, _, pods)| pods.len() as i64).sum();
        let mut best: Option<GroupFit> = None;
        for i in 0..self.nodes.len() {
            if group
                .iter()
                .any(|(_, template, _)| !self.admits(i, template))
            {
                continue;
            }
            self.counters(i, rules);
            let fit = self.group_fit(i, group, rules, partnered);
            let total: i64 = fit.counts.iter().sum();
            if total == whole {
                best = Some(fit);
                break;
            }
            let starts = fit.counts.first().is_some_and(|&k| k > 0);
            if !whole_only && starts && best.as_ref().is_none_or(|b| total > b.total()) {
                best = Some(fit);
            }
        }
        let fit = best?;
        let i = fit.node;
        self.free[i] = fit.free;
        self.counters[i] = Some(fit.counters);
        for ((_, _, pods), &k) in group.iter().zip(&fit.counts) {
            self.placed[i].extend_from_slice(&pods[..k as usize]);
        }
        Some((i, fit.counts))
    }

    /// How much of `group` node `i` holds, class after class, worked out on copies of the
    /// node's counters: each class takes all its pods when they fit, else as many as fit
    /// from the front; a class `partnered` finds without partners there takes none, and the
    /// rest is worked out again without it.
    fn group_fit(
        &self,
        i: usize,
        group: &[(usize, &Pod, &[usize])],
        rules: &NodeRules,
        partnered: &dyn Fn(usize, &[i64]) -> Vec<bool>,
    ) -> GroupFit<'a> {
        let mut off = vec![false; group.len()];
        loop {
            let fit = self.group_fit_without(i, group, rules, &off);
            let ok = partnered(i, &fit.counts);
            let lonely: Vec<usize> = (0..group.len())
                .filter(|&j| fit.counts[j] > 0 && !ok.get(j).copied().unwrap_or(true))
                .collect();
            if lonely.is_empty() {
                return fit;
            }
            for j in lonely {
                off[j] = true;
            }
        }
    }

    /// [`Self::group_fit`] with the classes at `off` taking no pod.
    fn group_fit_without(
        &self,
        i: usize,
        group: &[(usize, &Pod, &[usize])],
        rules: &NodeRules,
        off: &[bool],
    ) -> GroupFit<'a> {
        let pods_of: &'a [Pod] = self.pods;
        let counters = self.counters[i]
            .clone()
            .unwrap_or_else(|| Counters::count(self.nodes[i], self.running_on(i), rules));
        let mut fit = GroupFit {
            node: i,
            free: self.free[i].clone(),
            counters,
            counts: Vec::with_capacity(group.len()),
        };
        for (&(class, template, pods), &off) in group.iter().zip(off) {
            if off {
                fit.counts.push(0);
                continue;
            }
            let n = pods.len() as i64;
            let want = n.min(rules.cap(class, &fit.counters.state));
            let mut k = fit.free.copies_fitting(&template.requests, want);
            if k > 0 && fit.counters.volumes.limits(template) {
                let members = pods.iter().map(|&p| &pods_of[p]);
                k = fit.counters.volumes.fitting(members, k, false).len() as i64;
            }
            rules.add(class, k, &mut fit.counters.state);
            fit.free.add_times(&template.requests, -k);
            fit.counters
                .volumes
                .add(pods[..k as usize].iter().map(|&p| &pods_of[p]));
            fit.counts.push(k);
        }
        fit
    }

    /// The positions in `members` (class `class`'s pods shaped like `template`, at most `max`
    /// of them) node `i`'s volume attach caps admit; `None` when the caps do not limit such
    /// pods (the first `max` fit).
    fn volume_fits(
        &mut self,
        i: usize,
        class: usize,
        template: &Pod,
        members: &[usize],
        max: i64,
        rules: &NodeRules,
    ) -> Option<Vec<usize>> {
        let pods = self.pods;
        let volumes = &self.counters(i, rules).volumes;
        if max == 0 || !volumes.limits(template) {
            return None;
        }
        let fits = volumes.fitting(members.iter().map(|&p| &pods[p]), max, false);
        if fits.len() as i64 == max || fits.len() == members.len() {
            return Some(fits);
        }
        // A cap stopped one: a later pod may still fit if it only reuses claims.
        let shares = *self.shares_claims.entry(class).or_insert_with(|| {
            let mut seen = std::collections::HashSet::new();
            members
                .iter()
                .flat_map(|&p| pods[p].attachments())
                .any(|a| !seen.insert(a.claim.as_str()))
        });
        if !shares {
            return Some(fits);
        }
        let volumes = &self.counters(i, rules).volumes;
        Some(volumes.fitting(members.iter().map(|&p| &pods[p]), max, true))
    }

    /// [`Self::volume_fits`], with the pods that fit moved to the front of `members` (in their
    /// order); how many they are.
    fn take_volume_fits(
        &mut self,
        i: usize,
        class: usize,
        template: &Pod,
        members: &mut [usize],
        max: i64,
        rules: &NodeRules,
    ) -> i64 {
        let Some(fits) = self.volume_fits(i, class, template, members, max, rules) else {
            return max;
        };
        let k = fits.len();
        if fits.iter().enumerate().any(|(at, &f)| at != f) {
            let chosen: Vec<usize> = fits.iter().map(|&f| members[f]).collect();
            let rest: Vec<usize> = members
                .iter()
                .enumerate()
                .filter(|(at, _)| fits.binary_search(at).is_err())
                .map(|(_, &p)| p)
                .collect();
            for (slot, p) in members.iter_mut().zip(chosen.into_iter().chain(rest)) {
                *slot = p;
            }
        }
        k as i64
    }

    /// Records the volumes of `members`, placed on node `i`.
    fn attach(&mut self, i: usize, members: &[usize], rules: &NodeRules) {
        let pods = self.pods;
        self.counters(i, rules)
            .volumes
            .add(members.iter().map(|&p| &pods[p]));
    }

    /// The pods running on node `i`.
    fn running_on(&self, i: usize) -> impl Iterator<Item = &'a Pod> + Clone + '_ {
        let pods = self.pods;
        self.running[self.running_from[i]..self.running_from[i + 1]]
            .iter()
            .map(move |&p| &pods[p])
    }
}

/// What one node would hold of a group ([`ExistingNodes::place_group`]), with its counters
/// after taking it.
struct GroupFit<'a> {
    node: usize,
    free: Resources,
    counters: Counters<'a>,
    /// Pods taken per class of the group.
    counts: Vec<i64>,
}

impl GroupFit<'_> {
    fn total(&self) -> i64 {
        self.counts.iter().sum()
    }
}
