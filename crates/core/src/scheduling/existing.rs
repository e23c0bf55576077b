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
    /// Per-node rule counts (anti-affinity, hostname spread, host ports), running pods included.
    pub state: Vec<NodeState>,
    /// Per-node volume attach caps and what is attached, running pods included.
    pub volumes: Vec<NodeVolumes<'a>>,
    /// The snapshot's pods, which the pod indices given to the placing methods index: on a
    /// node capping their volumes, pods of one class are told apart by their claims.
    pods: &'a [Pod],
    /// Per class, whether its pods share claims among themselves (worked out when a cap
    /// first stops one): only then may a later pod fit where an earlier one did not.
    shares_claims: HashMap<usize, bool>,
}

impl<'a> ExistingNodes<'a> {
    /// Subtracts the requests of running pods from each node's allocatable and counts them
    /// against the per-node rules.
    pub fn new(nodes: &'a [Node], pods: &'a [Pod], rules: &NodeRules) -> Self {
        let mut sorted: Vec<&Node> = nodes.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let by_name: HashMap<&str, usize> = sorted
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let mut free: Vec<Resources> = sorted.iter().map(|n| n.allocatable.clone()).collect();
        let mut running: Vec<Vec<&Pod>> = vec![Vec::new(); sorted.len()];
        for p in pods {
            if let Some(i) = p.node_name.as_deref().and_then(|n| by_name.get(n)) {
                free[*i].sub(&p.requests);
                running[*i].push(p);
            }
        }
        let state = running
            .iter()
            .map(|r| rules.running_state(r.iter().copied()))
            .collect();
        let volumes = sorted
            .iter()
            .zip(&running)
            .map(|(n, r)| NodeVolumes::of(n, r.iter().copied()))
            .collect();
        let placed = vec![Vec::new(); sorted.len()];
        ExistingNodes {
            nodes: sorted,
            free,
            placed,
            state,
            volumes,
            pods,
            shares_claims: HashMap::new(),
        }
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
            let want = ((pods.len() - done) as i64).min(rules.cap(class, &self.state[i]));
            let k = self.free[i].copies_fitting(&template.requests, want);
            let k = self.take_volume_fits(i, class, template, &mut pods[done..], k);
            if k == 0 {
                continue;
            }
            rules.add(class, k, &mut self.state[i]);
            self.attach(i, &pods[done..done + k as usize]);
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
            let want = n.min(rules.cap(class, &self.state[i]));
            let k = self.free[i].copies_fitting(&template.requests, want);
            let k = self
                .volume_fits(i, class, template, pods, k)
                .map_or(k, |f| f.len() as i64);
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
        let k = self.take_volume_fits(i, class, template, pods, k);
        rules.add(class, k, &mut self.state[i]);
        self.attach(i, &pods[..k as usize]);
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
        self.state[i] = fit.state;
        self.volumes[i] = fit.volumes;
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
        let mut fit = GroupFit {
            node: i,
            free: self.free[i].clone(),
            state: self.state[i].clone(),
            volumes: self.volumes[i].clone(),
            counts: Vec::with_capacity(group.len()),
        };
        for (&(class, template, pods), &off) in group.iter().zip(off) {
            if off {
                fit.counts.push(0);
                continue;
            }
            let n = pods.len() as i64;
            let want = n.min(rules.cap(class, &fit.state));
            let mut k = fit.free.copies_fitting(&template.requests, want);
            if k > 0 && fit.volumes.limits(template) {
                let members = pods.iter().map(|&p| &pods_of[p]);
                k = fit.volumes.fitting(members, k, false).len() as i64;
            }
            rules.add(class, k, &mut fit.state);
            fit.free.add_times(&template.requests, -k);
            fit.volumes
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
    ) -> Option<Vec<usize>> {
        if max == 0 || !self.volumes[i].limits(template) {
            return None;
        }
        let pods = self.pods;
        let fits = self.volumes[i].fitting(members.iter().map(|&p| &pods[p]), max, false);
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
        Some(self.volumes[i].fitting(members.iter().map(|&p| &pods[p]), max, true))
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
    ) -> i64 {
        let Some(fits) = self.volume_fits(i, class, template, members, max) else {
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
    fn attach(&mut self, i: usize, members: &[usize]) {
        let pods = self.pods;
        self.volumes[i].add(members.iter().map(|&p| &pods[p]));
    }
}

/// What one node would hold of a group ([`ExistingNodes::place_group`]), with its counters
/// after taking it.
struct GroupFit<'a> {
    node: usize,
    free: Resources,
    state: NodeState,
    volumes: NodeVolumes<'a>,
    /// Pods taken per class of the group.
    counts: Vec<i64>,
}

impl GroupFit<'_> {
    fn total(&self) -> i64 {
        self.counts.iter().sum()
    }
}
