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

/// Packs the members' remaining pods onto new nodes of one provisioner.
///
/// `remaining[c]` is the number of pods of class `c` still to place; it is decreased as pods are
/// placed. Classes that cannot be placed at all (limits) get a reason in `refused`.
#[allow(clippy::too_many_arguments)]
pub fn pack(
    view: &mut ProvisionerView<'_>,
    catalog: &[InstanceType],
    table: &mut ReqTable,
    classes: &[PodClass],
    members: &[Member],
    rules: &NodeRules,
    remaining: &mut [i64],
    refused: &mut Vec<(usize, Reason)>,
) -> Vec<Draft> {
    let mut drafts = Vec::new();
    let empty = NodeState::default();
    // Most pods a new node may hold of each member by the per-node rules alone.
    let alone: Vec<i64> = members.iter().map(|m| rules.cap(m.class, &empty)).collect();
    let value_of: Vec<f64> = members
        .iter()
        .zip(&alone)
        .map(|(m, &cap)| homogeneous_pod_cost(view, catalog, table, classes, m, cap))
        .collect();
    let mut blocked = vec![false; members.len()];
    let mut member_of: Vec<Option<usize>> = vec![None; classes.len()];
    for (i, m) in members.iter().enumerate() {
        member_of[m.class] = Some(i);
    }
    // A follower never opens a node: it rides in the fills of its targets.
    let opens = |m: &Member| m.follow.as_ref().is_none_or(|f| f.leader);
    while let Some(seed) = (0..members.len())
        .find(|&m| !blocked[m] && remaining[members[m].class] > 0 && opens(&members[m]))
    {
        let (min_cpu, min_mem) = members
            .iter()
            .enumerate()
            .filter(|(i, m)| !blocked[*i] && remaining[m.class] > 0)
            .fold((i64::MAX, i64::MAX), |(c, mm), (_, m)| {
                let r = &classes[m.class].requests;
                (c.min(r.cpu), mm.min(r.memory))
            });
        let seed_req = members[seed].req;
        let seed_requests = &classes[members[seed].class].requests;
        let frontier = view.frontier(catalog, table, seed_req);
        // The node types worth trying are those that are cheap per pod for the seed itself.
        let mut ranked: Vec<(f64, usize)> = Vec::new();
        let mut limit_reason = None;
        for &t in &frontier {
            if !members[seed].types.contains(t) {
                continue;
            }
            if !view.within_limits(catalog, t) {
                if limit_reason.is_none() {
                    limit_reason = view.blocking_limit(catalog, t);
                }
                continue;
            }
            let k = view.effective[t].copies_fitting(seed_requests, alone[seed]);
            if let (true, Some(p)) = (k > 0, view.price(catalog, table, seed_req, t)) {
                ranked.push((p / k as f64, t));
            }
        }
        if members[seed].one_node {
            // A one-node group wants a type that holds all of it, when one exists.
            let want = remaining[members[seed].class].min(alone[seed]);
            let whole: Vec<(f64, usize)> = ranked
                .iter()
                .copied()
                .filter(|&(_, t)| view.effective[t].copies_fitting(seed_requests, want) >= want)
                .collect();
            if !whole.is_empty() {
                ranked = whole;
            }
        }
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        ranked.truncate(TYPES_TRIED_PER_NODE);
        let mut best: Option<(f64, f64, usize, Fill)> = None;
        for &(_, t) in &ranked {
            if !view.within_limits(catalog, t) {
                if limit_reason.is_none() {
                    limit_reason = view.blocking_limit(catalog, t);
                }
                continue;
            }
            let fill = fill_type(
                view, catalog, table, classes, members, &member_of, rules, remaining, &blocked,
                &value_of, seed, t, min_cpu, min_mem,
            );
            if fill.counts.is_empty() {
                continue;
            }
            let Some(price) = view.price(catalog, table, fill.req, t) else {
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
        let Some((_, _, _, fill)) = best else {
            let reason = limit_reason
                .or_else(|| {
                    members[seed]
                        .follow
                        .as_ref()
                        .map(|f| Reason::Topology(f.no_room()))
                })
                .unwrap_or(Reason::ResourcesTogether(
                    "the pod and the provisioner's DaemonSets".into(),
                ));
            refused.push((members[seed].class, reason));
            blocked[seed] = true;
            continue;
        };
        // Right-size: every type all classes on the node allow, that holds the fill.
        let mut allowed = members[seed].types.clone();
        for (c, _) in &fill.counts {
            if let Some(m) = members.iter().find(|m| m.class == *c) {
                allowed.intersect_with(&m.types);
            }
        }
        let mut options: Vec<(f64, usize)> = Vec::new();
        for t in allowed.iter() {
            if fill.used.fits(&view.effective[t])
                && view.type_allows(catalog, table, fill.req, t)
                && view.within_limits(catalog, t)
            {
                if let Some(p) = view.price(catalog, table, fill.req, t) {
                    options.push((p, t));
                }
            }
        }
        options.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let Some(&(_, chosen)) = options.first() else {
            // The filled type itself always qualifies; reaching here means a bookkeeping error,
            // so refuse the seed rather than loop.
            refused.push((
                members[seed].class,
                Reason::ResourcesTogether("the pods on one node".into()),
            ));
            blocked[seed] = true;
            continue;
        };
        let mut copies = fill
            .counts
            .iter()
            .map(|(c, k)| remaining[*c] / k)
            .min()
            .unwrap_or(1)
            .max(1);
        copies = copies.min(view.copies_within_limits(catalog, chosen).max(1));
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
            blocked[m] = true;
            if remaining[members[m].class] > 0 {
                refused.push((
                    members[m].class,
                    Reason::Topology(format!(
                        "pod affinity on {}: its pods must share one node and no instance type holds them all",
                        crate::labels::HOSTNAME
                    )),
                ));
            }
        }
        view.consume(catalog, chosen, copies);
        drafts.push(Draft {
            chosen,
            req: fill.req,
            counts: fill.counts,
            copies,
            options: options.into_iter().map(|(_, t)| t).collect(),
            pod_requests: fill.used,
        });
    }
    drafts
}

/// Fills type `t`, starting with the seed.
///
/// A class that others follow (hostname pod affinity to pending pods) is added with room reserved
/// for its followers' share, `ceil(k × followers left / targets left)`, and its followers are
/// tried right after it: a node that must take affine pods is sized for both, and the followers'
/// share per target never grows, so when the targets run out every follower has a node. A
/// follower joins only a fill holding a class of each term's targets; whatever ends up without
/// its partners is taken out again.
#[allow(clippy::too_many_arguments)]
fn fill_type(
    view: &mut ProvisionerView<'_>,
    catalog: &[InstanceType],
    table: &mut ReqTable,
    classes: &[PodClass],
    members: &[Member],
    member_of: &[Option<usize>],
    rules: &NodeRules,
    remaining: &[i64],
    blocked: &[bool],
    value_of: &[f64],
    seed: usize,
    t: usize,
    min_cpu: i64,
    min_mem: i64,
) -> Fill {
    let mut free = view.effective[t].clone();
    let mut cur = members[seed].req;
    let mut counts: Vec<(usize, i64)> = Vec::new();
    let mut state = NodeState::default();
    let mut in_fill = vec![false; classes.len()];
    // Most pods a follower may take in this fill (set by a cycle's leader).
    let mut caps: Vec<(usize, i64)> = Vec::new();
    let mut queue: VecDeque<usize> = std::iter::once(seed)
        .chain((0..members.len()).filter(|&m| m != seed))
        .collect();
    while let Some(m) = queue.pop_front() {
        let member = &members[m];
        let c = member.class;
        if in_fill[c] || blocked[m] || remaining[c] == 0 || !member.types.contains(t) {
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
        let Some(merged) = table.merge(cur, member.req) else {
            continue;
        };
        if merged != cur && merged != member.req && !view.type_allows(catalog, table, merged, t) {
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
        // Room for the followers' share: (class, followers left, targets left).
        let mut share: Vec<(usize, i64, i64)> = Vec::new();
        for &f in &member.followers {
            let Some(fm) = member_of[f] else {
                continue;
            };
            let fmem = &members[fm];
            if blocked[fm] || remaining[f] <= 0 || in_fill[f] || !fmem.types.contains(t) {
                continue;
            }
            if table.merge(merged, fmem.req).is_none() {
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
                // Followers of a cycle's leader keep one partner for each leader pod still to
                // place (never less than their share here), so later leader nodes get one too.
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
            if let Some(fm) = member_of[f] {
                queue.push_front(fm);
            }
        }
        if free.pods <= 0 || free.cpu < min_cpu || free.memory < min_mem {
            break;
        }
    }
    // Take out classes left without a partner of some term (followers whose targets were taken
    // out, a leader whose followers did not fit), until what remains is consistent.
    loop {
        let drop: Vec<usize> = counts
            .iter()
            .map(|&(c, _)| c)
            .filter(|&c| {
                member_of[c]
                    .and_then(|m| members[m].follow.as_ref())
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
    let mut used = Resources::default();
    let mut value = 0.0;
    for &(c, k) in &counts {
        used.add_times(&classes[c].requests, k);
        if let Some(m) = member_of[c] {
            value += value_of[m] * k as f64;
        }
    }
    Fill {
        counts,
        req: cur,
        used,
        value,
    }
}

/// What one pod of the member costs when its nodes hold nothing else: the price per pod of the
/// cheapest full node of one type. A mixed node is worth building when its pods would cost more
/// on such homogeneous nodes than the mixed node costs.
fn homogeneous_pod_cost(
    view: &mut ProvisionerView<'_>,
    catalog: &[InstanceType],
    table: &mut ReqTable,
    classes: &[PodClass],
    m: &Member,
    cap: i64,
) -> f64 {
    let requests = &classes[m.class].requests;
    let mut best = f64::INFINITY;
    for t in view.frontier(catalog, table, m.req) {
        if !m.types.contains(t) {
            continue;
        }
        let k = view.effective[t].copies_fitting(requests, cap);
        if k == 0 {
            continue;
        }
        if let Some(p) = view.price(catalog, table, m.req, t) {
            best = best.min(p / k as f64);
        }
    }
    if best.is_finite() {
        best
    } else {
        0.0
    }
}
