//! A provisioner's view of the catalog: the instance types it may launch, what each holds after
//! DaemonSet overhead, and which of them a pod class may use (or why none).

use std::collections::HashMap;

use crate::instance_type::InstanceType;
use crate::labels;
use crate::pod::{DaemonSet, HostPort, Pod};
use crate::provisioner::{Provisioner, NODES_LIMIT};
use crate::requirements::{Requirement, Requirements};
use crate::resources::{human_amount, Resources};

use super::daemons::daemon_overhead;
use super::ports::first_clash;
use super::reasons::Reason;
use super::reqtable::{ReqId, ReqTable};
use super::typeset::TypeSet;

/// What a Provisioner's view holds of the catalog whatever its nodes hold: the same for every
/// simulation of a plan, so a plan keeps it ([`super::memo::Memo`]).
#[derive(Debug)]
pub struct ViewBase {
    /// Requirements every node it launches satisfies.
    pub node_reqs: Requirements,
    /// Catalog indices of the allowed types (local index → catalog index).
    pub types: Vec<usize>,
    /// Allocatable minus DaemonSet overhead, per local index.
    pub effective: Vec<Resources>,
    /// Capacity with the Provisioner's kubelet and volume settings, per local index: what a
    /// node counts against the limits.
    pub capacity: Vec<Resources>,
    /// DaemonSet overhead, per local index.
    pub overhead: Vec<Resources>,
    /// Host ports the DaemonSets bind, per local index.
    pub daemon_ports: Vec<Vec<HostPort>>,
    /// Catalog types excluded by each provisioner requirement key (for explanations).
    pub excluded_by_key: Vec<(String, usize)>,
    /// The instance label keys the catalog's provider defines (see
    /// [`InstanceType::provider_keys`]).
    pub provider_keys: Vec<&'static str>,
}

/// A provisioner with its allowed instance types.
pub struct ProvisionerView<'a> {
    /// The provisioner.
    pub prov: &'a Provisioner,
    /// Its types and what they hold ([`ViewBase`]).
    pub base: std::sync::Arc<ViewBase>,
    /// Interned `base.node_reqs`.
    pub node_req_id: ReqId,
    /// Every capped resource: (name, limit, what is left of it).
    pub limits_left: Vec<(String, i64, i64)>,
    /// Where frontiers are kept between the simulations of a plan ([`super::Options::memo`]).
    memo: Option<std::sync::Arc<super::memo::Memo>>,
    /// Types label-compatible with a requirement set, Pareto-pruned, cheapest first.
    frontier: HashMap<ReqId, Vec<usize>>,
    /// Label compatibility of (requirement set, local type).
    /// Indexed by requirement id, then local type: 0 unknown, 1 no, 2 yes. Dense vectors, not a
    /// hash map: this is the innermost question of the packer.
    label_ok: Vec<Vec<u8>>,
    /// Cheapest offering price under a requirement set, per local type.
    /// Indexed like `label_ok`; `None` while unknown.
    price: Vec<Vec<Option<Option<f64>>>>,
    /// With a memo, both of the above per requirement id, as the plan keeps them.
    offers: Vec<Option<super::memo::Offers>>,
}

/// How a pod class may use a provisioner.
pub enum ClassFit {
    /// The class may go on these types under these requirements.
    Fits {
        /// Node requirements once the class is on the node.
        req: ReqId,
        /// Allowed local type indices.
        types: TypeSet,
    },
    /// Why not.
    Refused(Reason),
}

/// The provider keys of the catalog's types, each once (types of one provider share one list,
/// so lists are compared by address first).
fn provider_keys(catalog: &[InstanceType]) -> Vec<&'static str> {
    let mut lists: Vec<&'static [&'static str]> = Vec::new();
    for t in catalog {
        if !lists.iter().any(|l| std::ptr::eq(*l, t.provider_keys)) {
            lists.push(t.provider_keys);
        }
    }
    let mut keys: Vec<&'static str> = lists.into_iter().flatten().copied().collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

impl ViewBase {
    /// Filters the catalog by the provisioner's requirements and computes the DaemonSet
    /// overhead on each type.
    pub(crate) fn new(
        prov: &Provisioner,
        catalog: &[InstanceType],
        daemonsets: &[DaemonSet],
    ) -> Self {
        let node_reqs = prov.node_requirements();
        let mut excluded: HashMap<String, usize> = HashMap::new();
        let mut types = Vec::new();
        for (i, t) in catalog.iter().enumerate() {
            match t.first_label_conflict(&node_reqs) {
                None if t.cheapest_offering(&node_reqs).is_some() => types.push(i),
                None => *excluded.entry("offerings".to_string()).or_default() += 1,
                Some(k) => *excluded.entry(k.to_string()).or_default() += 1,
            }
        }
        // Every node counts one against a `nodes` limit.
        let counts_nodes = prov.limits.other.contains_key(NODES_LIMIT);
        let mut effective = Vec::with_capacity(types.len());
        let mut capacity = Vec::with_capacity(types.len());
        let mut overhead = Vec::with_capacity(types.len());
        let mut daemon_ports = Vec::with_capacity(types.len());
        for &ci in &types {
            let t = &catalog[ci];
            let alloc = prov.kubelet.allocatable(t);
            let mut cap = prov.kubelet.capacity(t);
            if counts_nodes {
                cap.set(NODES_LIMIT, 1);
            }
            capacity.push(cap);
            let daemons = daemon_overhead(daemonsets, &prov.taints, |pod| {
                daemon_selects(pod, &node_reqs, t)
            });
            daemon_ports.push(daemons.host_ports);
            let mut eff = alloc;
            eff.sub(&daemons.requests);
            effective.push(eff);
            overhead.push(daemons.requests);
        }
        let mut excluded_by_key: Vec<(String, usize)> = excluded.into_iter().collect();
        excluded_by_key.sort();
        ViewBase {
            node_reqs,
            types,
            effective,
            capacity,
            overhead,
            daemon_ports,
            excluded_by_key,
            provider_keys: provider_keys(catalog),
        }
    }
}

impl<'a> ProvisionerView<'a> {
    /// True when `key` is an instance label (well-known or a provider key of the catalog), which
    /// the chosen type decides, rather than a custom label the Provisioner must define.
    pub fn defines(&self, key: &str) -> bool {
        labels::is_well_known(key) || self.base.provider_keys.binary_search(&key).is_ok()
    }

    /// Builds the view: filters the catalog by the provisioner's requirements and computes the
    /// DaemonSet overhead on each type.
    pub fn new(
        prov: &'a Provisioner,
        catalog: &[InstanceType],
        daemonsets: &[DaemonSet],
        used: &Resources,
        table: &mut ReqTable,
        memo: Option<std::sync::Arc<super::memo::Memo>>,
    ) -> Self {
        let build = || ViewBase::new(prov, catalog, daemonsets);
        let base = match &memo {
            Some(memo) => memo.view(&prov.name, build),
            None => std::sync::Arc::new(build()),
        };
        let node_req_id = table.intern(base.node_reqs.clone());
        ProvisionerView {
            prov,
            base,
            node_req_id,
            limits_left: prov
                .limits
                .all()
                .into_iter()
                .map(|(name, limit)| (name.to_string(), limit, limit - used.get(name)))
                .collect(),
            memo,
            frontier: HashMap::new(),
            label_ok: Vec::new(),
            price: Vec::new(),
            offers: Vec::new(),
        }
    }

    /// Number of allowed types.
    pub fn len(&self) -> usize {
        self.base.types.len()
    }

    /// True when the provisioner allows no type at all.
    pub fn is_empty(&self) -> bool {
        self.base.types.is_empty()
    }

    /// What requirement set `req` allows of every type, as the memo keeps it for the plan;
    /// `None` without a memo, or for a set naming a node (a pin to one host is a trial's
    /// own, so working out every type for it once would be wasted).
    fn kept_offers(
        &mut self,
        catalog: &[InstanceType],
        table: &ReqTable,
        req: ReqId,
    ) -> Option<&super::memo::Offers> {
        let memo = self.memo.clone()?;
        if table.get(req).get(labels::HOSTNAME).is_some() {
            return None;
        }
        let r = req as usize;
        if self.offers.len() <= r {
            self.offers.resize(r + 1, None);
        }
        if self.offers[r].is_none() {
            let reqs = table.get(req);
            let types = &self.base.types;
            let offers = memo.offers(&self.prov.name, reqs, || {
                types
                    .iter()
                    .map(|&ci| {
                        let t = &catalog[ci];
                        let cheapest = t.cheapest_offering(reqs).map(|o| o.price);
                        let ok = cheapest.is_some() && t.first_label_conflict(reqs).is_none();
                        (ok, cheapest)
                    })
                    .collect()
            });
            self.offers[r] = Some(offers);
        }
        self.offers[r].as_ref()
    }

    /// True when local type `i` satisfies requirement set `req` (labels and an offering).
    pub fn type_allows(
        &mut self,
        catalog: &[InstanceType],
        table: &ReqTable,
        req: ReqId,
        i: usize,
    ) -> bool {
        if let Some(offers) = self.kept_offers(catalog, table, req) {
            return offers.get(i).is_some_and(|o| o.0);
        }
        let r = req as usize;
        if self.label_ok.len() <= r {
            self.label_ok.resize(r + 1, Vec::new());
        }
        if self.label_ok[r].is_empty() {
            self.label_ok[r] = vec![0; self.base.types.len()];
        }
        match self.label_ok[r][i] {
            1 => return false,
            2 => return true,
            _ => {}
        }
        let reqs = table.get(req);
        let t = &catalog[self.base.types[i]];
        let ok = t.first_label_conflict(reqs).is_none() && t.cheapest_offering(reqs).is_some();
        self.label_ok[r][i] = if ok { 2 } else { 1 };
        ok
    }

    /// Cheapest offering price of local type `i` under `req`.
    pub fn price(
        &mut self,
        catalog: &[InstanceType],
        table: &ReqTable,
        req: ReqId,
        i: usize,
    ) -> Option<f64> {
        if let Some(offers) = self.kept_offers(catalog, table, req) {
            return offers.get(i).and_then(|o| o.1);
        }
        let r = req as usize;
        if self.price.len() <= r {
            self.price.resize(r + 1, Vec::new());
        }
        if self.price[r].is_empty() {
            self.price[r] = vec![None; self.base.types.len()];
        }
        if let Some(p) = self.price[r][i] {
            return p;
        }
        let t = &catalog[self.base.types[i]];
        let p = t.cheapest_offering(table.get(req)).map(|o| o.price);
        self.price[r][i] = Some(p);
        p
    }

    /// True when a node of local type `i` fits in what the limits leave.
    pub fn within_limits(&self, i: usize) -> bool {
        self.blocking_limit(i).is_none()
    }

    /// The limit that blocks local type `i`, if any.
    pub fn blocking_limit(&self, i: usize) -> Option<Reason> {
        let cap = &self.base.capacity[i];
        self.limits_left
            .iter()
            .find(|(name, _, left)| cap.get(name) > *left)
            .map(|(name, limit, _)| Reason::Limit {
                name: name.clone(),
                limit: *limit,
            })
    }

    /// The most of every capped resource any of the local types `options` has: what a node
    /// that may be launched as any of them counts against the limits (the cloud picks one).
    pub fn largest(&self, options: &[usize]) -> Resources {
        let mut most = Resources::default();
        for &i in options {
            let cap = &self.base.capacity[i];
            for (name, _, _) in &self.limits_left {
                if cap.get(name) > most.get(name) {
                    most.set(name, cap.get(name));
                }
            }
        }
        most
    }

    /// Records `copies` launched nodes of capacity `each` against the limits.
    pub fn consume(&mut self, each: &Resources, copies: i64) {
        for (name, _, left) in &mut self.limits_left {
            *left -= each.get(name).saturating_mul(copies);
        }
    }

    /// How many nodes of capacity `each` the limits still allow.
    pub fn copies_within_limits(&self, each: &Resources) -> i64 {
        let mut n = i64::MAX;
        for (name, _, left) in &self.limits_left {
            let per = each.get(name);
            if per > 0 {
                n = n.min(left / per);
            }
        }
        n.max(0)
    }

    /// Label-compatible types under `req`, with dominated ones removed (another type with at
    /// least as much of every resource for at most the price), cheapest first.
    pub fn frontier(
        &mut self,
        catalog: &[InstanceType],
        table: &ReqTable,
        req: ReqId,
    ) -> Vec<usize> {
        if let Some(f) = self.frontier.get(&req) {
            return f.clone();
        }
        let kept = match self.memo.clone() {
            Some(memo) => {
                let name = self.prov.name.clone();
                memo.frontier(&name, table.get(req), || {
                    self.compute_frontier(catalog, table, req)
                })
                .to_vec()
            }
            None => self.compute_frontier(catalog, table, req),
        };
        self.frontier.insert(req, kept.clone());
        kept
    }

    /// [`ProvisionerView::frontier`], worked out.
    fn compute_frontier(
        &mut self,
        catalog: &[InstanceType],
        table: &ReqTable,
        req: ReqId,
    ) -> Vec<usize> {
        let mut priced: Vec<(f64, usize)> = Vec::new();
        for i in 0..self.base.types.len() {
            if self.type_allows(catalog, table, req, i) {
                if let Some(p) = self.price(catalog, table, req, i) {
                    priced.push((p, i));
                }
            }
        }
        priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut kept: Vec<usize> = Vec::new();
        for &(_, i) in &priced {
            let e = &self.base.effective[i];
            let accel = catalog[self.base.types[i]].is_accelerated();
            let dominated = kept.iter().any(|&j| {
                catalog[self.base.types[j]].is_accelerated() == accel
                    && e.fits(&self.base.effective[j])
            });
            if !dominated {
                kept.push(i);
            }
        }
        kept
    }

    /// Decides whether a pod class can use this provisioner, and on which types.
    pub fn fit_class(
        &mut self,
        catalog: &[InstanceType],
        table: &mut ReqTable,
        pod: &Pod,
    ) -> ClassFit {
        if let Some(t) = pod.blocking_provisioner_taint(&self.prov.taints) {
            return ClassFit::Refused(Reason::Taint(t.to_string()));
        }
        let terms: Vec<Requirements> = if pod.node_terms.is_empty() {
            vec![Requirements::new()]
        } else {
            pod.node_terms.clone()
        };
        let wants_accel = pod.requests.has_extended();
        let mut first_refusal = None;
        // A pod that asks for no accelerator takes the first term that allows a plain type; a
        // term that only fits accelerated types is the fallback.
        let mut accelerated_only = None;
        for term in &terms {
            match self.fit_term(catalog, table, pod, term) {
                ClassFit::Fits { req, types } => {
                    let plain = types
                        .iter()
                        .any(|i| !catalog[self.base.types[i]].is_accelerated());
                    if wants_accel || plain {
                        return ClassFit::Fits { req, types };
                    }
                    if accelerated_only.is_none() {
                        accelerated_only = Some(ClassFit::Fits { req, types });
                    }
                }
                ClassFit::Refused(r) => {
                    if first_refusal.is_none() {
                        first_refusal = Some(r);
                    }
                }
            }
        }
        if let Some(fit) = accelerated_only {
            return fit;
        }
        ClassFit::Refused(first_refusal.unwrap_or(Reason::Requirement("(none)".into())))
    }

    fn fit_term(
        &mut self,
        catalog: &[InstanceType],
        table: &mut ReqTable,
        pod: &Pod,
        term: &Requirements,
    ) -> ClassFit {
        // A term that contradicts itself is named before anything a Provisioner could be
        // blamed for.
        if let Some((k, _)) = term.iter().find(|(_, r)| r.is_unsatisfiable()) {
            return ClassFit::Refused(Reason::Contradiction(k.clone()));
        }
        // A value no node can carry (the API server does not check node-affinity values):
        // requiring only such values can never be met, and a claim written for it would have a
        // label its Node could never take.
        if let Some(refusal) = invalid_label_values(term) {
            return ClassFit::Refused(refusal);
        }
        // Every node joiner launches runs Linux: a Windows pod is told so, not that no type
        // happens to match.
        if let Some(r) = term.get(labels::OS).filter(|r| !r.allows("linux")) {
            return ClassFit::Refused(Reason::LinuxOnly(format!("{} {r}", labels::OS)));
        }
        // On a refusal for the zone, a zone the catalog has never heard of is the real cause.
        let zone_reason = |reason: Reason| {
            term.get(labels::ZONE)
                .and_then(|r| zone_not_offered(catalog, r))
                .unwrap_or(reason)
        };
        // Provisioner requirements and custom labels first.
        for (k, r) in term.iter() {
            match self.base.node_reqs.get(k) {
                Some(mine) => {
                    if !mine.compatible(r) {
                        let conflict = Reason::ProvisionerRequirement {
                            requirement: format!("{k} {r}"),
                            provisioner: format!("{k} {mine}"),
                        };
                        return ClassFit::Refused(if k == labels::ZONE {
                            zone_reason(conflict)
                        } else {
                            conflict
                        });
                    }
                }
                None => {
                    if !self.defines(k) && !r.allows_absent() {
                        let text = format!("{k} {r}");
                        return ClassFit::Refused(if labels::is_karpenter_only(k) {
                            Reason::KarpenterLabel(text)
                        } else {
                            Reason::Requirement(text)
                        });
                    }
                }
            }
        }
        let mut merged = self.base.node_reqs.intersect(term);
        drop_invalid_values(&mut merged);
        let req = table.intern(merged);
        let n = self.base.types.len();
        let mut by_labels = Vec::new();
        let mut label_conflicts: HashMap<String, usize> = HashMap::new();
        for i in 0..n {
            if self.type_allows(catalog, table, req, i) {
                by_labels.push(i);
            } else if let Some(k) = catalog[self.base.types[i]].first_label_conflict(table.get(req))
            {
                *label_conflicts.entry(k.to_string()).or_default() += 1;
            }
        }
        if by_labels.is_empty() {
            // Name the pod requirement that excluded the most types.
            let mut worst: Vec<(usize, String)> =
                label_conflicts.into_iter().map(|(k, c)| (c, k)).collect();
            worst.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let zone_worst = worst.first().is_some_and(|(_, k)| k == labels::ZONE);
            let text = worst
                .iter()
                .find_map(|(_, k)| term.get(k).map(|r| format!("{k} {r}")))
                .or_else(|| {
                    worst.first().map(|(_, k)| {
                        format!(
                            "{k} {}",
                            table
                                .get(req)
                                .get(k)
                                .map(|r| r.to_string())
                                .unwrap_or_default()
                        )
                    })
                })
                .unwrap_or_else(|| "of the provisioner".to_string());
            let reason = Reason::Requirement(text);
            return ClassFit::Refused(if zone_worst {
                zone_reason(reason)
            } else {
                reason
            });
        }
        if !pod.host_ports.is_empty() {
            let mut clash = None;
            by_labels.retain(
                |&i| match first_clash(&pod.host_ports, &self.base.daemon_ports[i]) {
                    Some(k) => {
                        clash.get_or_insert(k);
                        false
                    }
                    None => true,
                },
            );
            if by_labels.is_empty() {
                let text = clash.map(|k| k.describe()).unwrap_or_default();
                return ClassFit::Refused(Reason::HostPort(text));
            }
        }
        let wants_accel = pod.requests.has_extended();
        let mut fitting = TypeSet::empty(n);
        let mut fitting_plain = TypeSet::empty(n);
        let mut any = false;
        let mut any_plain = false;
        for &i in &by_labels {
            if pod.requests.fits(&self.base.effective[i]) {
                fitting.insert(i);
                any = true;
                if !catalog[self.base.types[i]].is_accelerated() {
                    fitting_plain.insert(i);
                    any_plain = true;
                }
            }
        }
        if !any {
            return ClassFit::Refused(self.resource_reason(&by_labels, &pod.requests));
        }
        if !wants_accel && any_plain {
            return ClassFit::Fits {
                req,
                types: fitting_plain,
            };
        }
        ClassFit::Fits {
            req,
            types: fitting,
        }
    }

    fn resource_reason(&self, types: &[usize], req: &Resources) -> Reason {
        let mut names: Vec<String> = vec![
            "cpu".into(),
            "memory".into(),
            "ephemeral-storage".into(),
            "pods".into(),
        ];
        names.extend(req.extended().iter().map(|(k, _)| k.clone()));
        for name in names {
            let want = req.get(&name);
            // The type leaving the most after its DaemonSets.
            let best = types
                .iter()
                .copied()
                .max_by_key(|&i| self.base.effective[i].get(&name));
            let largest = best.map_or(0, |i| self.base.effective[i].get(&name));
            if want > largest {
                let daemons = best.map_or(0, |i| self.base.overhead[i].get(&name));
                return Reason::Resource {
                    largest: largest.saturating_add(daemons).max(0),
                    daemons,
                    name,
                    requested: want,
                };
            }
        }
        // Each fits on some type, not all on one: name every resource asked for (a GPU and
        // a Neuron device no type has both of, not only cpu and memory).
        let mut parts: Vec<String> = [
            ("cpu", req.cpu),
            ("memory", req.memory),
            ("ephemeral-storage", req.ephemeral_storage),
        ]
        .into_iter()
        .filter(|&(_, v)| v > 0)
        .map(|(name, v)| human_amount(name, v))
        .collect();
        parts.extend(
            req.extended()
                .iter()
                .filter(|(_, v)| *v > 0)
                .map(|(k, v)| human_amount(k, *v)),
        );
        let last = parts.pop().unwrap_or_else(|| "the pod".into());
        let all = if parts.is_empty() {
            last
        } else {
            format!("{} and {last}", parts.join(", "))
        };
        Reason::ResourcesTogether(all)
    }
}

/// The refusal of a zone requirement no offering of the whole catalog meets (a zone of another
/// region, a misspelt zone), naming the region and its zones; `None` when some zone is offered.
fn zone_not_offered(catalog: &[InstanceType], zone: &Requirement) -> Option<Reason> {
    let mut zones: Vec<&str> = catalog
        .iter()
        .flat_map(|t| t.offerings.iter().map(|o| o.zone.as_str()))
        .collect();
    zones.sort_unstable();
    zones.dedup();
    if zones.iter().any(|z| zone.allows(z)) {
        return None;
    }
    Some(Reason::ZoneNotOffered {
        requirement: zone.to_string(),
        region: catalog
            .iter()
            .find_map(|t| t.labels.get(labels::REGION).cloned()),
        zones: zones.into_iter().map(str::to_string).collect(),
    })
}

/// True when the DaemonSet's pod's node selector terms admit a node of this provisioner and
/// type (tolerations are [`daemon_overhead`]'s business).
fn daemon_selects(pod: &Pod, node_reqs: &Requirements, t: &InstanceType) -> bool {
    if pod.node_terms.is_empty() {
        return true;
    }
    pod.node_terms.iter().any(|term| {
        let custom_ok = term.iter().all(|(k, r)| match node_reqs.get(k) {
            Some(mine) => mine.compatible(r),
            None => t.defines(k) || r.allows_absent(),
        });
        custom_ok && t.first_label_conflict(&node_reqs.intersect(term)).is_none()
    })
}

/// The refusal for the first key of `term` whose `In` values are all not label values.
fn invalid_label_values(term: &Requirements) -> Option<Reason> {
    term.iter().find_map(|(k, r)| {
        let values = r.in_values()?;
        if values.iter().any(|v| labels::is_valid_value(v)) {
            return None;
        }
        let value = values.first()?.clone();
        Some(Reason::InvalidLabelValue {
            requirement: format!("{k} {r}"),
            value,
        })
    })
}

/// Narrows every `In` set of `reqs` to its label values: a value no node can carry is never
/// chosen for a new node (nor written on its claim).
fn drop_invalid_values(reqs: &mut Requirements) {
    let narrowed: Vec<(String, Requirement)> = reqs
        .iter()
        .filter_map(|(k, r)| {
            let values = r.in_values()?;
            if values.iter().all(|v| labels::is_valid_value(v)) {
                return None;
            }
            let valid: Vec<&String> = values
                .iter()
                .filter(|v| labels::is_valid_value(v))
                .collect();
            Some((k.clone(), Requirement::one_of(valid)))
        })
        .collect();
    for (k, r) in narrowed {
        reqs.add(&k, r);
    }
}
