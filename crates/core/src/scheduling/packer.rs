//! Opening new nodes for the pods existing capacity could not take, choosing node shapes for
//! cost.
//!
//! Resources are priced by the dual of the fluid covering LP over the pending demand; each step
//! tries every non-dominated instance type the largest remaining pod allows, fills it with the
//! remaining pods (largest first), and keeps the type whose fill is worth the most per dollar.
//! Identical fills are repeated as a batch, and every node is finally right-sized to the cheapest
//! type that holds what was put on it.

use crate::instance_type::InstanceType;
use crate::resources::Resources;

use super::candidates::ProvisionerView;
use super::classes::PodClass;
use super::lp::solve_covering;
use super::reasons::Reason;
use super::reqtable::{ReqId, ReqTable};
use super::typeset::TypeSet;

/// A class as one provisioner may place it.
pub struct Member {
    /// Index into the class list.
    pub class: usize,
    /// Node requirements with the class on the node.
    pub req: ReqId,
    /// Allowed local type indices.
    pub types: TypeSet,
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

/// Resource dimensions the LP prices: cpu (cores), memory (GiB), pods, then extended names.
struct Dims {
    extended: Vec<String>,
}

impl Dims {
    fn vector(&self, r: &Resources) -> Vec<f64> {
        let mut v = vec![
            r.cpu as f64 / 1000.0,
            r.memory as f64 / (1u64 << 30) as f64,
            r.pods as f64,
        ];
        v.extend(self.extended.iter().map(|k| r.get(k) as f64));
        v
    }
}

/// Packs the members' remaining pods onto new nodes of one provisioner.
///
/// `remaining[c]` is the number of pods of class `c` still to place; it is decreased as pods are
/// placed. Classes that cannot be placed at all (limits) get a reason in `refused`.
pub fn pack(
    view: &mut ProvisionerView<'_>,
    catalog: &[InstanceType],
    table: &mut ReqTable,
    classes: &[PodClass],
    members: &[Member],
    remaining: &mut [i64],
    refused: &mut Vec<(usize, Reason)>,
) -> Vec<Draft> {
    let mut drafts = Vec::new();
    let duals = resource_duals(view, catalog, table, classes, members, remaining);
    let value_of: Vec<f64> = members
        .iter()
        .map(|m| {
            let v = duals.0.vector(&classes[m.class].requests);
            v.iter().zip(&duals.1).map(|(a, p)| a * p).sum::<f64>()
        })
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
        let frontier = view.frontier(catalog, table, seed_req);
        let mut best: Option<(f64, f64, usize, Fill)> = None;
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
            let fill = fill_type(
                view, catalog, table, classes, members, remaining, &blocked, &value_of, seed, t,
                min_cpu, min_mem,
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
        for (c, k) in &fill.counts {
            remaining[*c] -= k * copies;
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
        let k = free.copies_fitting(req, remaining[c]);
        if k == 0 {
            continue;
        }
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

/// Dual resource prices of the fluid LP over the members' remaining demand.
fn resource_duals(
    view: &mut ProvisionerView<'_>,
    catalog: &[InstanceType],
    table: &mut ReqTable,
    classes: &[PodClass],
    members: &[Member],
    remaining: &[i64],
) -> (Dims, Vec<f64>) {
    let mut extended: Vec<String> = Vec::new();
    let mut demand_r = Resources::default();
    let mut union = TypeSet::empty(view.len());
    let mut first = true;
    for m in members {
        let r = &classes[m.class].requests;
        demand_r.add_times(r, remaining[m.class]);
        for (k, _) in r.extended() {
            if !extended.contains(k) {
                extended.push(k.clone());
            }
        }
        if first {
            union = m.types.clone();
            first = false;
        } else {
            for t in m.types.iter() {
                union.insert(t);
            }
        }
    }
    extended.sort();
    let dims = Dims { extended };
    let demand = dims.vector(&demand_r);
    let node_req = view.node_req_id;
    let mut cols = Vec::new();
    let mut costs = Vec::new();
    for t in union.iter() {
        if let Some(p) = view.price(catalog, table, node_req, t) {
            cols.push(dims.vector(&view.effective[t]));
            costs.push(p);
        }
    }
    let sol = solve_covering(&cols, &costs, &demand);
    let mut duals = sol.duals;
    if duals.iter().all(|d| *d <= 0.0) {
        // Degenerate demand: fall back to a flat cpu/memory price so larger pods still weigh more.
        duals = vec![0.0; demand.len()];
        duals[0] = 0.04;
        if duals.len() > 1 {
            duals[1] = 0.005;
        }
    }
    (dims, duals)
}
