//! Opening new nodes for the pods existing capacity could not take, choosing node shapes for
//! cost.
//!
//! Each pod is valued at what it would cost on homogeneous nodes of its cheapest type; each step
//! tries every non-dominated instance type the largest remaining pod allows, fills it with the
//! remaining pods (largest first), and keeps the type whose fill is worth the most per dollar.
//! Identical fills are repeated as a batch, and every node is finally right-sized to the cheapest
//! type that holds what was put on it.

use std::collections::VecDeque;

use crate::instance_type::InstanceType;
use crate::resources::Resources;

use super::candidates::ProvisionerView;
use super::classes::PodClass;
use super::colocation::Follow;
use super::node_rules::{NodeRules, NodeState};
use super::reasons::Reason;
use super::reqtable::{ReqId, ReqTable};
use super::typeset::TypeSet;

/// How many node types (the cheapest per pod for the largest remaining pod) each new node tries.
const TYPES_TRIED_PER_NODE: usize = 16;

/// A class as one provisioner may place it.
pub struct Member {
    /// Index into the class list.
    pub class: usize,
    /// Node requirements with the class on the node.
    pub req: ReqId,
    /// Allowed local type indices.
    pub types: TypeSet,
    /// All remaining pods of the class must share one node (hostname self-affinity).
    pub one_node: bool,
    /// Hostname affinity to other pending classes: the class only joins fills holding a class
    /// of each term's targets (a leader opens fills, but only with one of its followers).
    pub follow: Option<Follow>,
    /// Classes that follow this one (first term): folded into its fills, with room reserved.
    pub followers: Vec<usize>,
    /// The class owns a spread that counts only some nodes (on-demand-only pods under their
    /// own zone spread) while flexible pods the spread counts are left free to land anywhere
    /// ([`super::topology::Hold::Free`]).
    pub leads: bool,
    /// The class is such a flexible one: it opens no node while a leading member of this
    /// packing may still open one (any leading member, not only those of the spreads that
    /// count it), so that it first fills the room the leading members' nodes leave. The
    /// pinning counted it as if on those nodes; on nodes of its own, cheaper but not
    /// counted, it would leave the spread's counts uneven.
    pub defers: bool,
}

/// A node (or a batch of identical nodes) decided by the packer.
#[derive(Clone, Debug)]
pub struct Draft {
    /// Chosen local type index (cheapest that holds the pods).
    pub chosen: usize,
    /// Node requirements.
    pub req: ReqId,
    /// Pods per class on each node.
    pub counts: Vec<(usize, i64)>,
    /// Number of identical nodes.
    pub copies: i64,
    /// Every local type that holds the pods, cheapest first.
    pub options: Vec<usize>,
    /// Requests of the pods on one node.
    pub pod_requests: Resources,
}

struct Fill {
    counts: Vec<(usize, i64)>,
    req: ReqId,
    used: Resources,
    value: f64,
}

/// What packing one provisioner's members decided.
pub struct Packed {
    /// The nodes to open, batches of identical nodes as one draft.
    pub drafts: Vec<Draft>,
    /// Classes this provisioner cannot place (limits, no type that holds them), with why.
    pub refused: Vec<(usize, Reason)>,
}

/// One packing of the members' remaining pods onto new nodes of one provisioner.
///
/// The inputs and the bookkeeping every step reads (what a pod is worth, which members are
/// blocked) live here rather than in argument lists, so each step is a method of its own.
pub struct Packer<'p, 'v> {
    view: &'p mut ProvisionerView<'v>,
    catalog: &'p [InstanceType],
    table: &'p mut ReqTable,
    classes: &'p [PodClass],
    members: &'p [Member],
    rules: &'p NodeRules,
    /// Most pods a new node may hold of each member by the per-node rules alone.
    alone: Vec<i64>,
    /// What one pod of each member costs on homogeneous nodes.
    value_of: Vec<f64>,
    /// Members that may no longer open a node (refused, or a one-node group that got its node).
    blocked: Vec<bool>,
    /// Member index of each class, for the classes that are members.
    member_of: Vec<Option<usize>>,
    refused: Vec<(usize, Reason)>,
    /// The members a fill may take (pods left, not blocked), in member order; pruned before
    /// every node opened ([`Packer::next_seed`]), so no step walks the members already placed.
    live: Vec<usize>,
    /// True when the members come in non-increasing cpu request (the class order): a fill
    /// then skips at once the members whose cpu no longer fits.
    cpu_sorted: bool,
}

impl<'p, 'v> Packer<'p, 'v> {
    /// Prepares a packing: the per-node caps and the value of one pod of every member are
    /// worked out once, before any node is opened.
    pub fn new(
        view: &'p mut ProvisionerView<'v>,
        catalog: &'p [InstanceType],
        table: &'p mut ReqTable,
        classes: &'p [PodClass],
        members: &'p [Member],
        rules: &'p NodeRules,
    ) -> Self {
        let empty = NodeState::default();
        let alone: Vec<i64> = members.iter().map(|m| rules.cap(m.class, &empty)).collect();
        let mut member_of: Vec<Option<usize>> = vec![None; classes.len()];
        for (i, m) in members.iter().enumerate() {
            member_of[m.class] = Some(i);
        }
        let mut packer = Packer {
            view,
            catalog,
            table,
            classes,
            members,
            rules,
            alone,
            value_of: Vec::new(),
            blocked: vec![false; members.len()],
            member_of,
            refused: Vec::new(),
            live: (0..members.len()).collect(),
            cpu_sorted: members
                .windows(2)
                .all(|w| classes[w[0].class].requests.cpu >= classes[w[1].class].requests.cpu),
        };
        packer.value_of = (0..members.len())
            .map(|m| packer.homogeneous_pod_cost(m))
            .collect();
        packer
    }

    /// Packs the members' remaining pods onto new nodes.
    ///
    /// `remaining[c]` is the number of pods of class `c` still to place; it is decreased as pods
    /// are placed. Classes that cannot be placed at all (limits) come back in
    /// [`Packed::refused`].
    pub fn pack(mut self, remaining: &mut [i64]) -> Packed {
        let mut drafts = Vec::new();
        while let Some(seed) = self.next_seed(remaining) {
            if let Some(draft) = self.open_for(remaining, seed) {
                drafts.push(draft);
            }
        }
        Packed {
            drafts,
            refused: self.refused,
        }
    }

    /// The first member that still has pods and may open a node, a leading one before one that
    /// defers ([`Member::defers`]). A follower never opens a node: it rides in the fills of its
    /// targets.
    /// Drops from `live` the members placed or blocked since (it only shrinks).
    fn next_seed(&mut self, remaining: &[i64]) -> Option<usize> {
        let members = self.members;
        let blocked = &self.blocked;
        self.live
            .retain(|&m| !blocked[m] && remaining[members[m].class] > 0);
        let opens = |m: &Member| m.follow.as_ref().is_none_or(|f| f.leader);
        let first = self.live.iter().copied().find(|&m| opens(&members[m]))?;
        if !members[first].defers {
            return Some(first);
        }
        let leader = self
            .live
            .iter()
            .copied()
            .find(|&m| members[m].leads && opens(&members[m]));
        Some(leader.unwrap_or(first))
    }

    /// Opens the best node (or batch of identical nodes) for `seed`, or refuses the seed.
    fn open_for(&mut self, remaining: &mut [i64], seed: usize) -> Option<Draft> {
        let smallest = self.smallest_request();
        let mut limit_reason = None;
        let ranked = self.ranked_types(remaining, seed, &mut limit_reason);
        let Some(fill) = self.best_fill(remaining, seed, &ranked, smallest, &mut limit_reason)
        else {
            self.refuse_seed(seed, limit_reason);
            return None;
        };
        let options = self.right_size(seed, &fill);
        let Some(&chosen) = options.first() else {
            // The filled type itself always qualifies; reaching here means a bookkeeping error,
            // so refuse the seed rather than loop.
            self.refused.push((
                self.members[seed].class,
                Reason::ResourcesTogether("the pods on one node".into()),
            ));
            self.blocked[seed] = true;
            return None;
        };
        Some(self.commit(remaining, fill, chosen, options))
    }

    /// The smallest cpu and memory request among the members still to place: a fill stops
    /// once its node has less left than that.
    fn smallest_request(&self) -> (i64, i64) {
        self.live.iter().fold((i64::MAX, i64::MAX), |(c, mm), &m| {
            let r = &self.classes[self.members[m].class].requests;
            (c.min(r.cpu), mm.min(r.memory))
        })
    }

    /// The node types worth trying for `seed`: those that are cheap per pod for the seed
    /// itself, cheapest first. The first limit that excludes a type goes to `limit_reason`.
    fn ranked_types(
        &mut self,
        remaining: &[i64],
        seed: usize,
        limit_reason: &mut Option<Reason>,
    ) -> Vec<(f64, usize)> {
        let (catalog, members) = (self.catalog, self.members);
        let seed_req = members[seed].req;
        let seed_requests = &self.classes[members[seed].class].requests;
        let frontier = self.view.frontier(catalog, self.table, seed_req);
        let mut ranked: Vec<(f64, usize)> = Vec::new();
        for &t in &frontier {
            if !members[seed].types.contains(t) {
                continue;
            }
            if !self.view.within_limits(t) {
                if limit_reason.is_none() {
                    *limit_reason = self.view.blocking_limit(t);
                }
                continue;
            }
            let k = self.view.base.effective[t].copies_fitting(seed_requests, self.alone[seed]);
            if let (true, Some(p)) = (k > 0, self.view.price(catalog, self.table, seed_req, t)) {
                ranked.push((p / k as f64, t));
            }
        }
        if members[seed].one_node {
            // A one-node group wants a type that holds all of it, when one exists; a cycle's
            // leader, all of it and of its followers.
            let want = remaining[members[seed].class].min(self.alone[seed]);
            let mut need = Resources::default();
            need.add_times(seed_requests, want);
            // Its followers, and theirs in turn: all of them join its node.
            let mut seen = vec![members[seed].class];
            let mut next: Vec<usize> = members[seed].followers.clone();
            while let Some(f) = next.pop() {
                if seen.contains(&f) {
                    continue;
                }
                seen.push(f);
                need.add_times(&self.classes[f].requests, remaining[f].max(0));
                if let Some(fm) = self.member_of[f] {
                    next.extend(members[fm].followers.iter().copied());
                }
            }
            let whole: Vec<(f64, usize)> = ranked
                .iter()
                .copied()
                .filter(|&(_, t)| {
                    self.view.base.effective[t].copies_fitting(seed_requests, want) >= want
                        && need.fits(&self.view.base.effective[t])
                })
                .collect();
            if !whole.is_empty() {
                ranked = whole;
            } else {
                // None holds it all: the types that hold the most of it, since what does not
                // fit can go nowhere else.
                let most =
                    |t: usize| self.view.base.effective[t].copies_fitting(seed_requests, want);
                if let Some(best) = ranked.iter().map(|&(_, t)| most(t)).max() {
                    ranked.retain(|&(_, t)| most(t) == best);
                }
            }
        }
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        ranked.truncate(TYPES_TRIED_PER_NODE);
        ranked
    }

    /// Fills every ranked type and keeps the fill worth the most per dollar (ties: the cheaper,
    /// then the lower type index).
    fn best_fill(
        &mut self,
        remaining: &[i64],
        seed: usize,
        ranked: &[(f64, usize)],
        smallest: (i64, i64),
        limit_reason: &mut Option<Reason>,
    ) -> Option<Fill> {
        let catalog = self.catalog;
        let mut best: Option<(f64, f64, usize, Fill)> = None;
        for &(_, t) in ranked {
            if !self.view.within_limits(t) {
                if limit_reason.is_none() {
                    *limit_reason = self.view.blocking_limit(t);
                }
                continue;
            }
            let fill = self.fill_type(remaining, seed, t, smallest);
            if fill.counts.is_empty() {
                continue;
            }
            let Some(price) = self.view.price(catalog, self.table, fill.req, t) else {
                continue;
            };
            let eff = if price > 0.0 {
                fill.value / price
            } else {
                f64::MAX
            };
            let better = match &best {
                None => true,
                Some((be, bp, bt, _)) => {
                    eff > *be * (1.0 + 1e-9)
                        || ((eff - *be).abs() <= be.abs() * 1e-9
                            && (price < *bp || (price == *bp && t < *bt)))
                }
            };
            if better {
                best = Some((eff, price, t, fill));
            }
        }
        best.map(|(_, _, _, fill)| fill)
    }

    /// Gives up on `seed` for this provisioner: the limit that blocked it, its partners'
    /// missing room, or the DaemonSets leaving no type that holds it.
    fn refuse_seed(&mut self, seed: usize, limit_reason: Option<Reason>) {
        let member = &self.members[seed];
        let reason = limit_reason
            .or_else(|| {
                member
                    .follow
                    .as_ref()
                    .map(|f| Reason::Topology(f.no_room()))
            })
            .unwrap_or(Reason::ResourcesTogether(
                "the pod and the provisioner's DaemonSets".into(),
            ));
        self.refused.push((member.class, reason));
        self.blocked[seed] = true;
    }

    /// Right-sizes a fill: every type all classes on the node allow that holds the fill,
    /// cheapest first (ties by type index).
    fn right_size(&mut self, seed: usize, fill: &Fill) -> Vec<usize> {
        let (catalog, members) = (self.catalog, self.members);
        let mut allowed = members[seed].types.clone();
        for (c, _) in &fill.counts {
            if let Some(m) = members.iter().find(|m| m.class == *c) {
                allowed.intersect_with(&m.types);
            }
        }
        let mut options: Vec<(f64, usize)> = Vec::new();
        for t in allowed.iter() {
            if fill.used.fits(&self.view.base.effective[t])
                && self.view.type_allows(catalog, self.table, fill.req, t)
                && self.view.within_limits(t)
            {
                if let Some(p) = self.view.price(catalog, self.table, fill.req, t) {
                    options.push((p, t));
                }
            }
        }
        options.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        options.into_iter().map(|(_, t)| t).collect()
    }

    /// Repeats the fill on as many nodes of type `chosen` as its pods and the limits allow (one
    /// for a one-node group), takes its pods off `remaining` and charges the limits.
    fn commit(
        &mut self,
        remaining: &mut [i64],
        fill: Fill,
        chosen: usize,
        options: Vec<usize>,
    ) -> Draft {
        let members = self.members;
        let mut copies = fill
            .counts
            .iter()
            .map(|(c, k)| remaining[*c] / k)
            .min()
            .unwrap_or(1)
            .max(1);
        // A node listing several types counts against the limits as the largest of them.
        let counted = self.view.largest(&options);
        copies = copies.min(self.view.copies_within_limits(&counted).max(1));
        let one_node: Vec<usize> = members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.one_node && fill.counts.iter().any(|(c, _)| *c == m.class))
            .map(|(i, _)| i)
            .collect();
        if !one_node.is_empty() {
            copies = 1;
        }
        for (c, k) in &fill.counts {
            remaining[*c] -= k * copies;
        }
        for &m in &one_node {
            // The group got its node; whatever did not fit cannot go anywhere else.
            self.blocked[m] = true;
            if remaining[members[m].class] > 0 {
                self.refused.push((
                    members[m].class,
                    Reason::Topology(format!(
                        "pod affinity on {}: its pods must share one node and no instance type holds them all",
                        crate::labels::HOSTNAME
                    )),
                ));
            }
        }
        self.view.consume(&counted, copies);
        Draft {
            chosen,
            req: fill.req,
            counts: fill.counts,
            copies,
            options,
            pod_requests: fill.used,
        }
    }

    /// Fills type `t`, starting with the seed.
    ///
    /// A class that others follow (hostname pod affinity to pending pods) is added with room
    /// reserved for its followers' share, `ceil(k × followers left / targets left)`, and its
    /// followers are tried right after it: a node that must take affine pods is sized for both,
    /// and the followers' share per target never grows, so when the targets run out every
    /// follower has a node. A follower joins only a fill holding a class of each term's targets;
    /// whatever ends up without its partners is taken out again.
    fn fill_type(
        &mut self,
        remaining: &[i64],
        seed: usize,
        t: usize,
        smallest: (i64, i64),
    ) -> Fill {
        let (catalog, classes, members, rules) =
            (self.catalog, self.classes, self.members, self.rules);
        let (min_cpu, min_mem) = smallest;
        let mut free = self.view.base.effective[t].clone();
        let mut cur = members[seed].req;
        let mut counts: Vec<(usize, i64)> = Vec::new();
        let mut state = NodeState::default();
        let mut in_fill = vec![false; classes.len()];
        // Most pods a follower may take in this fill (set by a cycle's leader).
        let mut caps: Vec<(usize, i64)> = Vec::new();
        // The seed, then the live members in order; followers of a class that joins are tried
        // right after it (pushed to the front).
        let live = std::mem::take(&mut self.live);
        let mut queue: VecDeque<usize> = VecDeque::from([seed]);
        let mut pos = 0;
        loop {
            let m = match queue.pop_front() {
                Some(m) => m,
                None if pos < live.len() => {
                    let cpu = |x: usize| classes[members[x].class].requests.cpu;
                    if self.cpu_sorted && cpu(live[pos]) > free.cpu {
                        // Those that follow until the cpu fits cannot fit either.
                        pos += live[pos..].partition_point(|&x| cpu(x) > free.cpu);
                        continue;
                    }
                    pos += 1;
                    if live[pos - 1] == seed {
                        continue;
                    }
                    live[pos - 1]
                }
                None => break,
            };
            let member = &members[m];
            let c = member.class;
            if in_fill[c] || self.blocked[m] || remaining[c] == 0 || !member.types.contains(t) {
                continue;
            }
            // Not one pod fits what is left (checked before the costlier requirement merge).
            let one = &classes[c].requests;
            if one.cpu > free.cpu || one.memory > free.memory {
                continue;
            }
            let leader = member.follow.as_ref().is_some_and(|f| f.leader);
            if let Some(f) = member.follow.as_ref().filter(|f| !f.leader) {
                if !f
                    .terms
                    .iter()
                    .all(|ft| ft.targets.iter().any(|&x| in_fill[x]))
                {
                    continue;
                }
            }
            let Some(merged) = self.table.merge(cur, member.req) else {
                continue;
            };
            if merged != cur
                && merged != member.req
                && !self.view.type_allows(catalog, self.table, merged, t)
            {
                continue;
            }
            let req = &classes[c].requests;
            let mut want = remaining[c].min(rules.cap(c, &state));
            if let Some(&(_, cap)) = caps.iter().find(|(x, _)| *x == c) {
                want = want.min(cap);
            }
            let mut k = free.copies_fitting(req, want);
            // A one-node group joins another seed's node only whole.
            if k == 0 || (member.one_node && m != seed && k < remaining[c]) {
                continue;
            }
            let share = self.followers_share(remaining, member, merged, t, &in_fill);
            if leader && share.is_empty() {
                // A cycle's leader goes only where one of its partners goes too.
                continue;
            }
            if !share.is_empty() {
                let fits = |k: i64| {
                    let mut need = Resources::default();
                    need.add_times(req, k);
                    for &(f, left, of) in &share {
                        need.add_times(&classes[f].requests, ((k * left + of - 1) / of).min(left));
                    }
                    need.fits(&free)
                };
                // The largest k that leaves the followers' share room (0 always does).
                let (mut lo, mut hi) = (0, k);
                while lo < hi {
                    let mid = (lo + hi + 1) / 2;
                    if fits(mid) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                k = lo;
                if k == 0 {
                    continue;
                }
                if leader {
                    // Followers of a cycle's leader keep one partner for each leader pod still
                    // to place (never less than their share here), so later leader nodes get
                    // one too.
                    let later = remaining[c] - k;
                    for &(f, left, of) in &share {
                        let quota = ((k * left + of - 1) / of).min(left);
                        caps.push((f, quota.max(left - later)));
                    }
                }
            }
            rules.add(c, k, &mut state);
            free.add_times(req, -k);
            counts.push((c, k));
            in_fill[c] = true;
            cur = merged;
            for &f in member.followers.iter().rev() {
                if let Some(fm) = self.member_of[f] {
                    queue.push_front(fm);
                }
            }
            if free.pods <= 0 || free.cpu < min_cpu || free.memory < min_mem {
                break;
            }
        }
        self.live = live;
        self.drop_unpartnered(&mut counts, &mut in_fill);
        self.valued(counts, cur)
    }

    /// Room to reserve for the followers of `member` that may join a fill of type `t` under
    /// `merged`: (class, followers left, targets left) for each.
    fn followers_share(
        &mut self,
        remaining: &[i64],
        member: &Member,
        merged: ReqId,
        t: usize,
        in_fill: &[bool],
    ) -> Vec<(usize, i64, i64)> {
        let members = self.members;
        let mut share: Vec<(usize, i64, i64)> = Vec::new();
        for &f in &member.followers {
            let Some(fm) = self.member_of[f] else {
                continue;
            };
            let fmem = &members[fm];
            if self.blocked[fm] || remaining[f] <= 0 || in_fill[f] || !fmem.types.contains(t) {
                continue;
            }
            if self.table.merge(merged, fmem.req).is_none() {
                continue;
            }
            let targets: i64 = fmem
                .follow
                .as_ref()
                .and_then(|fl| fl.terms.first())
                .map(|ft| ft.targets.iter().map(|&x| remaining[x].max(0)).sum())
                .unwrap_or(0);
            share.push((f, remaining[f], targets.max(1)));
        }
        share
    }

    /// Takes out classes left without a partner of some term (followers whose targets were
    /// taken out, a leader whose followers did not fit), until what remains is consistent.
    fn drop_unpartnered(&self, counts: &mut Vec<(usize, i64)>, in_fill: &mut [bool]) {
        loop {
            let drop: Vec<usize> = counts
                .iter()
                .map(|&(c, _)| c)
                .filter(|&c| {
                    self.member_of[c]
                        .and_then(|m| self.members[m].follow.as_ref())
                        .is_some_and(|f| {
                            !f.terms
                                .iter()
                                .all(|ft| ft.targets.iter().any(|&x| in_fill[x]))
                        })
                })
                .collect();
            if drop.is_empty() {
                break;
            }
            for c in drop {
                in_fill[c] = false;
            }
            counts.retain(|&(c, _)| in_fill[c]);
        }
    }

    /// The fill of `counts` under `req`, with its requests and its worth at homogeneous
    /// prices.
    fn valued(&self, counts: Vec<(usize, i64)>, req: ReqId) -> Fill {
        let mut used = Resources::default();
        let mut value = 0.0;
        for &(c, k) in &counts {
            used.add_times(&self.classes[c].requests, k);
            if let Some(m) = self.member_of[c] {
                value += self.value_of[m] * k as f64;
            }
        }
        Fill {
            counts,
            req,
            used,
            value,
        }
    }

    /// What one pod of member `m` costs when its nodes hold nothing else: the price per pod of
    /// the cheapest full node of one type. A mixed node is worth building when its pods would
    /// cost more on such homogeneous nodes than the mixed node costs.
    fn homogeneous_pod_cost(&mut self, m: usize) -> f64 {
        let (catalog, member) = (self.catalog, &self.members[m]);
        let requests = &self.classes[member.class].requests;
        let cap = self.alone[m];
        let mut best = f64::INFINITY;
        for t in self.view.frontier(catalog, self.table, member.req) {
            if !member.types.contains(t) {
                continue;
            }
            let k = self.view.base.effective[t].copies_fitting(requests, cap);
            if k == 0 {
                continue;
            }
            if let Some(p) = self.view.price(catalog, self.table, member.req, t) {
                best = best.min(p / k as f64);
            }
        }
        if best.is_finite() {
            best
        } else {
            0.0
        }
    }
}
