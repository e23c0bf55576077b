//! Opening new nodes for the pods existing capacity could not take, choosing node shapes for
//! cost.
//!
//! Each pod is valued at what it would cost on homogeneous nodes of its cheapest type; each step
//! tries every non-dominated instance type the largest remaining pod allows, fills it with the
//! remaining pods (largest first), and keeps the type whose fill is worth the most per dollar.
//! Identical fills are repeated as a batch, and every node is finally right-sized to the cheapest
//! type that holds what was put on it.

use crate::instance_type::InstanceType;
use crate::resources::Resources;

use super::candidates::ProvisionerView;
use super::classes::PodClass;
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
    while let Some(seed) =
        (0..members.len()).find(|&m| !blocked[m] && remaining[members[m].class] > 0)
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
                view, catalog, table, classes, members, rules, remaining, &blocked, &value_of,
                seed, t, min_cpu, min_mem,
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
            let reason = limit_reason.unwrap_or(Reason::ResourcesTogether(
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

#[allow(clippy::too_many_arguments)]
fn fill_type(
    view: &mut ProvisionerView<'_>,
    catalog: &[InstanceType],
    table: &mut ReqTable,
    classes: &[PodClass],
    members: &[Member],
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
    let mut used = Resources::default();
    let mut cur = members[seed].req;
    let mut counts = Vec::new();
    let mut value = 0.0;
    let mut state = NodeState::default();
    let order = std::iter::once(seed).chain((0..members.len()).filter(|&m| m != seed));
    for m in order {
        let member = &members[m];
        let c = member.class;
        if blocked[m] || remaining[c] == 0 || !member.types.contains(t) {
            continue;
        }
        let Some(merged) = table.merge(cur, member.req) else {
            continue;
        };
        if merged != cur && merged != member.req && !view.type_allows(catalog, table, merged, t) {
            continue;
        }
        let req = &classes[c].requests;
        let k = free.copies_fitting(req, remaining[c].min(rules.cap(c, &state)));
        // A one-node group joins another seed's node only whole.
        if k == 0 || (member.one_node && m != seed && k < remaining[c]) {
            continue;
        }
        rules.add(c, k, &mut state);
        free.add_times(req, -k);
        used.add_times(req, k);
        counts.push((c, k));
        value += value_of[m] * k as f64;
        cur = merged;
        if free.pods <= 0 || free.cpu < min_cpu || free.memory < min_mem {
            break;
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
