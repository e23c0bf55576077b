//! One scheduling pass with every constraint taken as hard, stage by stage.
//!
//! A [`Pass`] is built once from a snapshot (Provisioners in the order they are tried, pod
//! classes after topology pinning, per-node rules, hostname co-location) and then runs its
//! stages in order: existing nodes, followers onto existing nodes, topology refusals, new nodes
//! Provisioner by Provisioner, and finally the [`Plan`]. `explain` builds the same pass to
//! describe a pod without re-deriving any of it, and a caller can run a pass on a snapshot with
//! some nodes taken out to see where their pods would go.

use std::collections::{BTreeMap, BTreeSet};

use crate::instance_type::{offering_allowed, CapacityType, InstanceType, Offering};
use crate::labels;
use crate::pod::Pod;
use crate::provisioner::{Provisioner, NODES_LIMIT};
use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::snapshot::Snapshot;

use super::candidates::{ClassFit, ProvisionerView};
use super::classes::{self, PodClass};
use super::colocation::{self, Follow, Together};
use super::existing::ExistingNodes;
use super::node_rules::NodeRules;
use super::packer::{Draft, Member, Packer};
use super::plan::{ExistingNodeUse, NewNode, Plan, Unschedulable};
use super::reasons::{self, Reason};
use super::reqtable::ReqTable;
use super::topology;
use super::Options;

/// The state of one scheduling pass over a snapshot.
///
/// Everything the stages share is derived once in [`Pass::new`]; the stages then only move pods
/// from "remaining" to a node (or to a refusal), so each stage can be read on its own and
/// `explain` sees exactly the classes, rules and Provisioner views the simulation used.
pub struct Pass<'a> {
    snapshot: &'a Snapshot,
    catalog: &'a [InstanceType],
    opts: Options,
    /// Tried in this order: weight descending, then name (the default one when there is none).
    provisioners: Vec<Provisioner>,
    /// Snapshot indices of the pending pods (not bound, not owned by a DaemonSet).
    pending: Vec<usize>,
    /// Pending pods grouped by shape, constrained ones split and pinned to a topology domain.
    classes: Vec<PodClass>,
    /// Pods refused before anything is placed, with the reason: held by their volumes, or no
    /// topology domain admits them.
    pinned_refused: Vec<(usize, String)>,
    /// The spreads whose nodes the pinning could hold flexible pods off or on
    /// ([`topology::Pinned::holdable`]).
    holdable: BTreeSet<topology::FilteredSpread>,
    /// Per class: it owns a holdable spread, and its nodes are the ones that spread counts
    /// ([`topology::Pinned::leading`]).
    leading: Vec<bool>,
    /// Per class: it could be held off a holdable spread's nodes, and opens a node only once
    /// the leading classes have theirs ([`topology::Pinned::deferring`]).
    deferring: Vec<bool>,
    /// [`Pass::holdable_pods`].
    holdable_pods: Vec<usize>,
    /// The pod each class is scheduled as (the pin merged into its node terms).
    templates: Vec<Pod>,
    rules: NodeRules,
    together: Vec<Together>,
    /// Per class, the classes that follow it onto its new nodes.
    followers: Vec<Vec<usize>>,
    table: ReqTable,
    /// Pods of each class still without a node.
    remaining: Vec<i64>,
    /// Pods are handed out from the front of each class in input order.
    cursor: Vec<usize>,
    /// A one-node group that has been given its node takes no other.
    sealed: Vec<bool>,
    /// Why each class was refused, per Provisioner (empty name: before any Provisioner).
    refusals: Vec<Vec<(String, Reason)>>,
    existing: ExistingNodes<'a>,
    new_nodes: Vec<NewNode>,
}

/// The instance-type options every copy of a draft offers, with their prices.
struct NodeOptions {
    names: std::sync::Arc<[String]>,
    prices: std::sync::Arc<[Option<f64>]>,
}

impl<'a> Pass<'a> {
    /// Derives what every stage shares. Zone and capacity-type terms pin groups of pods to a
    /// domain here, before anything is placed.
    pub fn new(snapshot: &'a Snapshot, catalog: &'a [InstanceType], opts: &Options) -> Self {
        Self::with_closed(snapshot, catalog, opts, &topology::Closed::default())
    }

    /// [`Pass::new`] with the topology domains an earlier pass found closed to some pods.
    pub fn with_closed(
        snapshot: &'a Snapshot,
        catalog: &'a [InstanceType],
        opts: &Options,
        closed: &topology::Closed,
    ) -> Self {
        let pods = &snapshot.pods;
        // A pod its volumes hold is reported, never placed: the kube-scheduler would not run it.
        let (held, pending): (Vec<usize>, Vec<usize>) = pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.node_name.is_none() && !p.is_daemon())
            .map(|(i, _)| i)
            .partition(|&i| pods[i].volume_hold.is_some());
        let provisioners = provisioners_in_order(snapshot);
        let pinned = {
            let order: Vec<&Provisioner> = provisioners.iter().collect();
            topology::pin(
                pods,
                &snapshot.nodes,
                classes::build(pods, &pending),
                &order,
                catalog,
                closed,
                opts.memo.as_deref(),
            )
        };
        let classes = pinned.classes;
        let holdable = pinned.holdable;
        let flags = |set: &BTreeSet<usize>| -> Vec<bool> {
            classes.iter().map(|c| set.contains(&c.origin)).collect()
        };
        let (leading, deferring) = (flags(&pinned.leading), flags(&pinned.deferring));
        let templates: Vec<Pod> = classes.iter().map(|c| c.effective_pod(pods)).collect();
        let rules = NodeRules::build(pods, &templates, &classes);
        let together = colocation::analyze(pods, &templates);
        let followers = colocation::followers_of(&together);
        let existing = ExistingNodes::new(&snapshot.nodes, pods);
        let n = classes.len();
        Pass {
            snapshot,
            catalog,
            opts: opts.clone(),
            provisioners,
            pending,
            remaining: classes.iter().map(|c| c.pods.len() as i64).collect(),
            cursor: vec![0; n],
            sealed: vec![false; n],
            refusals: vec![Vec::new(); n],
            classes,
            pinned_refused: held
                .into_iter()
                .map(|i| (i, pods[i].volume_hold.clone().unwrap_or_default()))
                .chain(pinned.refused)
                .collect(),
            holdable,
            leading,
            deferring,
            holdable_pods: pinned.holdable_pods,
            templates,
            rules,
            together,
            followers,
            table: ReqTable::default(),
            existing,
            new_nodes: Vec::new(),
        }
    }

    /// Runs the stages in the order the kube-scheduler will see the result: capacity that
    /// exists first, then new nodes from the highest-weight Provisioner that accepts the pods.
    pub fn run(mut self) -> Plan {
        self.place_on_existing_nodes();
        self.place_followers_on_existing_nodes();
        self.seal_topology_refusals();
        self.place_on_new_nodes();
        self.finish()
    }

    /// The Provisioners in the order the pass tries them, for callers that report per
    /// Provisioner.
    pub fn provisioners(&self) -> &[Provisioner] {
        &self.provisioners
    }

    /// Snapshot indices of the pods the pass schedules.
    pub fn pending(&self) -> &[usize] {
        &self.pending
    }

    /// The spreads counting only some nodes whose nodes the pinning could hold flexible
    /// pods off or on ([`topology::Hold`]), so that passes may start over doing it.
    pub(crate) fn holdable(&self) -> &BTreeSet<topology::FilteredSpread> {
        &self.holdable
    }

    /// The pods (snapshot indices) of the classes that own a holdable spread or could be held
    /// ([`topology::Pinned::holdable_pods`]), the pinning's refused ones too: refused, they
    /// are worth holding the flexible pods for.
    pub(crate) fn holdable_pods(&self) -> &[usize] {
        &self.holdable_pods
    }

    /// The classes the pass schedules, so a caller can tell what a pod was pinned to.
    pub fn classes(&self) -> &[PodClass] {
        &self.classes
    }

    /// The per-node rules, so a caller can name those a class takes part in.
    pub fn rules(&self) -> &NodeRules {
        &self.rules
    }

    /// The class of snapshot pod `pod`; `None` when it is not pending or no domain admits it.
    pub fn class_of(&self, pod: usize) -> Option<usize> {
        self.classes.iter().position(|c| c.pods.contains(&pod))
    }

    /// The view the pass takes of Provisioner `i` (in [`Pass::provisioners`] order): its types
    /// after DaemonSet overhead and its limits net of the nodes it owns. Views are built in
    /// the pass's requirement table, so ask for them in Provisioner order to see the same ones.
    pub fn provisioner_view(&mut self, i: usize) -> ProvisionerView<'_> {
        view_of(
            self.snapshot,
            self.catalog,
            &self.provisioners[i],
            &mut self.table,
            &self.opts,
        )
    }

    /// Stage 1: existing (and in-flight) nodes, capacity already paid for. Followers wait for
    /// their targets; a cycle's leader goes onto a node only with all its partners. A group
    /// that must share one node goes whole onto one that holds it, when one does (a node
    /// bought for it in an earlier batch is still in flight while its pods are pending); when
    /// a node has room for only part of it, that part goes there and the rest is refused, as
    /// the kube-scheduler would leave it (see `ExistingNodes::place_class_whole`).
    fn place_on_existing_nodes(&mut self) {
        for ci in 0..self.classes.len() {
            let only = match &self.together[ci] {
                Together::Free => None,
                Together::OnNodes(n) => Some(n),
                Together::OneNode => {
                    let (placed, partial) = self.existing.place_class_whole(
                        ci,
                        &self.templates[ci],
                        &mut self.classes[ci].pods,
                        &self.rules,
                        self.opts.evicted,
                    );
                    self.record_placed(ci, placed);
                    if let Some(node) = partial {
                        // The rest can only join that node: no new node is bought for them.
                        self.refusals[ci].push((
                            String::new(),
                            Reason::Topology(format!(
                                "pod affinity on {}: its pods must share one node, and the \
                                 node its first pod goes to ({node}) has room for {placed} of \
                                 them",
                                labels::HOSTNAME
                            )),
                        ));
                        self.sealed[ci] = true;
                    }
                    continue;
                }
                Together::Follows(f) if f.leader => {
                    self.place_cycle_on_existing_node(ci);
                    continue;
                }
                Together::Refused(_) | Together::Follows(_) => continue,
            };
            let placed = self.existing.place_class(
                ci,
                &self.templates[ci],
                &mut self.classes[ci].pods,
                &self.rules,
                only,
            );
            self.record_placed(ci, placed);
        }
    }

    /// A cycle's leader (class `leader`) with every class following it, transitively, onto an
    /// existing or in-flight node on which each of their terms has a partner (in the group,
    /// placed or running there; a class with none takes no pod there): whole onto the first that holds them all (the node an earlier batch
    /// bought for the cycle is in flight while its pods pend, and must not be bought again);
    /// else, as for a self-affine group, as much as the node holding the most takes, the rest
    /// refused, since the kube-scheduler puts the leader's first pod on a node with room and
    /// the rest can only join it (not in disruption trials, whose replacement is ready
    /// first). With no node that takes a leader pod, the group goes to new nodes.
    fn place_cycle_on_existing_node(&mut self, leader: usize) {
        let mut group = vec![leader];
        let mut next = 0;
        while next < group.len() {
            for &f in &self.followers[group[next]] {
                if !group.contains(&f) {
                    group.push(f);
                }
            }
            next += 1;
        }
        // Per existing node, the classes this pass already put there (another leader's
        // group may have placed a partner).
        let class_of = self.class_of_pods();
        let placed_on: Vec<BTreeSet<usize>> = self
            .existing
            .placed
            .iter()
            .map(|ps| ps.iter().map(|&i| class_of[i]).collect())
            .collect();
        let names: Vec<String> = self.existing.nodes.iter().map(|n| n.name.clone()).collect();
        let terms_of: Vec<Vec<&colocation::FollowTerm>> = group
            .iter()
            .map(|&c| match &self.together[c] {
                Together::Follows(f) => f.terms.iter().collect(),
                _ => Vec::new(),
            })
            .collect();
        let position: BTreeMap<usize, usize> =
            group.iter().enumerate().map(|(j, &c)| (c, j)).collect();
        // Whether each class of the group, taking `counts` pods of each onto node `i`, has a
        // partner there for every term: a running pod, a pod placed earlier, or a pod of a
        // group class that gets some. The leader's first pod needs none (it matches its own
        // terms, which is why it leads).
        let partnered = |i: usize, counts: &[i64]| -> Vec<bool> {
            terms_of
                .iter()
                .enumerate()
                .map(|(j, terms)| {
                    j == 0
                        || terms.iter().all(|t| {
                            t.running.contains(&names[i])
                                || t.targets.iter().any(|c| {
                                    placed_on[i].contains(c)
                                        || position.get(c).is_some_and(|&at| counts[at] > 0)
                                })
                        })
                })
                .collect()
        };
        let members: Vec<(usize, &Pod, &[usize])> = group
            .iter()
            .map(|&c| {
                (
                    c,
                    &self.templates[c],
                    &self.classes[c].pods[self.cursor[c]..],
                )
            })
            .collect();
        let Some((node, counts)) =
            self.existing
                .place_group(&members, &self.rules, &partnered, self.opts.evicted)
        else {
            return;
        };
        let node = self.existing.nodes[node].name.clone();
        for (c, k) in group.into_iter().zip(counts) {
            let left = self.remaining[c] - k;
            self.record_placed(c, k as usize);
            if left > 0 {
                // The rest can only join that node: no new node is bought for them.
                self.refusals[c].push((
                    String::new(),
                    Reason::Topology(format!(
                        "pod affinity on {}: the pods of its affinity cycle must share one \
                         node, and the node its first pod goes to ({node}) has {}",
                        labels::HOSTNAME,
                        if k == 0 {
                            "no room for them".to_string()
                        } else {
                            format!("room for {k} of them")
                        }
                    )),
                ));
                self.sealed[c] = true;
            }
        }
    }

    /// Stage 1b: followers onto the existing nodes that run, or were just given, a pod of each
    /// of their terms.
    fn place_followers_on_existing_nodes(&mut self) {
        if !self.together.iter().any(|t| t.follower().is_some()) {
            return;
        }
        let class_of = self.class_of_pods();
        // Until a round places nothing: a follower placed late may be the partner an earlier
        // one needed (a cycle joining the node its running pod is on).
        loop {
            let mut progress = false;
            for ci in 0..self.classes.len() {
                if self.remaining[ci] == 0 {
                    continue;
                }
                let Some(f) = self.together[ci].follower() else {
                    continue;
                };
                let only = self.nodes_with_partners(f, &class_of);
                if only.is_empty() {
                    continue;
                }
                let pods = &mut self.classes[ci].pods[self.cursor[ci]..];
                let placed = self.existing.place_class(
                    ci,
                    &self.templates[ci],
                    pods,
                    &self.rules,
                    Some(&only),
                );
                self.record_placed(ci, placed);
                progress |= placed > 0;
            }
            if !progress {
                break;
            }
        }
    }

    /// The class of each snapshot pod (`usize::MAX` for pods no class holds).
    fn class_of_pods(&self) -> Vec<usize> {
        let mut class_of = vec![usize::MAX; self.snapshot.pods.len()];
        for (ci, class) in self.classes.iter().enumerate() {
            for &i in &class.pods {
                class_of[i] = ci;
            }
        }
        class_of
    }

    /// Existing nodes holding, for every term of `f`, a running pod or a pod this pass placed
    /// of one of the term's target classes.
    fn nodes_with_partners(&self, f: &Follow, class_of: &[usize]) -> BTreeSet<String> {
        self.existing
            .nodes
            .iter()
            .zip(&self.existing.placed)
            .filter(|(n, placed)| {
                f.terms.iter().all(|ft| {
                    ft.running.contains(&n.name)
                        || placed.iter().any(|&i| ft.targets.contains(&class_of[i]))
                })
            })
            .map(|(n, _)| n.name.clone())
            .collect()
    }

    /// Stage 1c: classes hostname affinity keeps off new nodes get their reason now and are
    /// sealed, so no Provisioner considers them.
    fn seal_topology_refusals(&mut self) {
        for (ci, t) in self.together.iter().enumerate() {
            let why = match t {
                Together::Refused(why) => why.clone(),
                Together::OnNodes(_) => format!(
                    "pod affinity on {}: no room on the nodes running the pods it selects",
                    labels::HOSTNAME
                ),
                _ => continue,
            };
            if self.remaining[ci] > 0 {
                self.refusals[ci].push((String::new(), Reason::Topology(why)));
                self.sealed[ci] = true;
            }
        }
    }

    /// Stage 2: new nodes, Provisioner by Provisioner in weight order, until every pod has a
    /// node.
    fn place_on_new_nodes(&mut self) {
        // Taken out while the stage runs: each Provisioner's view borrows it while the pass's
        // counters change.
        let provisioners = std::mem::take(&mut self.provisioners);
        for prov in &provisioners {
            if self.remaining.iter().all(|r| *r == 0) {
                break;
            }
            self.place_with(prov);
        }
        self.provisioners = provisioners;
    }

    /// Opens the nodes one Provisioner needs for the classes it accepts.
    fn place_with(&mut self, prov: &Provisioner) {
        let mut view = view_of(
            self.snapshot,
            self.catalog,
            prov,
            &mut self.table,
            &self.opts,
        );
        let members = self.members_of(&mut view);
        if members.is_empty() {
            return;
        }
        let packed = Packer::new(
            &mut view,
            self.catalog,
            &mut self.table,
            &self.classes,
            &members,
            &self.rules,
        )
        .pack(&mut self.remaining);
        self.settle_members(&prov.name, &members, packed.refused);
        let mut zone_turn: BTreeMap<String, usize> = BTreeMap::new();
        for d in &packed.drafts {
            self.open_draft(&view, d, &mut zone_turn);
        }
    }

    /// Records what packing left of the members: the packer's refusals, followers whose
    /// targets' nodes had no room, and one-node groups that got their node (sealed).
    fn settle_members(&mut self, prov: &str, members: &[Member], refused: Vec<(usize, Reason)>) {
        for (ci, r) in refused {
            self.refusals[ci].push((prov.to_string(), r));
        }
        for m in members {
            if let (Some(f), true) = (
                self.together[m.class].follower(),
                self.remaining[m.class] > 0,
            ) {
                self.refusals[m.class].push((prov.to_string(), Reason::Topology(f.no_room())));
            }
        }
        for m in members {
            if m.one_node && (self.remaining[m.class] as usize) < self.classes[m.class].pods.len() {
                self.sealed[m.class] = true;
            }
        }
    }

    /// The classes still to place that the Provisioner accepts, as the packer takes them; the
    /// others get the Provisioner's refusal.
    fn members_of(&mut self, view: &mut ProvisionerView<'_>) -> Vec<Member> {
        let mut members = Vec::new();
        for ci in 0..self.classes.len() {
            if self.remaining[ci] == 0 || self.sealed[ci] {
                continue;
            }
            match view.fit_class(self.catalog, &mut self.table, &self.templates[ci]) {
                ClassFit::Fits { req, types } => members.push(Member {
                    class: ci,
                    req,
                    types,
                    // A cycle's leader matches its own terms, so the kube-scheduler puts
                    // the whole cycle beside its first pod: one node, as a self-affine group.
                    one_node: match &self.together[ci] {
                        Together::OneNode => true,
                        Together::Follows(f) => f.leader,
                        _ => false,
                    },
                    follow: match &self.together[ci] {
                        Together::Follows(f) => Some(f.clone()),
                        _ => None,
                    },
                    followers: self.followers[ci].clone(),
                    leads: self.leading[ci],
                    defers: self.deferring[ci],
                }),
                ClassFit::Refused(r) => self.refusals[ci].push((view.prov.name.clone(), r)),
            }
        }
        members
    }

    /// Stage 3, per draft: chooses each copy's offering and records it as a [`NewNode`] with
    /// its pods. Among equally cheap offerings zones rotate (per instance type, in
    /// `zone_turn`), so unconstrained capacity spreads.
    fn open_draft(
        &mut self,
        view: &ProvisionerView<'_>,
        d: &Draft,
        zone_turn: &mut BTreeMap<String, usize>,
    ) {
        let catalog = self.catalog;
        let t = &catalog[view.base.types[d.chosen]];
        let reqs = self.table.get(d.req).clone();
        let cheapest = cheapest_offerings(t, &reqs);
        // The options and their prices are the same for every copy of one capacity type:
        // worked out once per draft, not per node.
        let mut options: Vec<(CapacityType, NodeOptions)> = Vec::new();
        for _ in 0..d.copies {
            let turn = zone_turn.entry(t.name.clone()).or_default();
            let Some(offering) = cheapest.get(*turn % cheapest.len().max(1)).copied() else {
                // Cannot happen (the packer priced this type under these requirements), but
                // if it did the pods must stay pending rather than vanish.
                for (c, k) in &d.counts {
                    self.remaining[*c] += k;
                    self.refusals[*c].push((
                        view.prov.name.clone(),
                        Reason::ResourcesTogether("an available offering".into()),
                    ));
                }
                continue;
            };
            *turn += 1;
            let at = match options
                .iter()
                .position(|(ct, _)| *ct == offering.capacity_type)
            {
                Some(at) => at,
                None => {
                    let o = self.node_options(view, d, &reqs, offering.capacity_type);
                    options.push((offering.capacity_type, o));
                    options.len() - 1
                }
            };
            let node = self.new_node(view, d, &reqs, offering, &options[at].1);
            self.new_nodes.push(node);
        }
    }

    /// A draft's instance-type options (at most `max_instance_type_options`, cheapest first)
    /// with each one's cheapest allowed offering price of `capacity_type`.
    fn node_options(
        &self,
        view: &ProvisionerView<'_>,
        d: &Draft,
        reqs: &Requirements,
        capacity_type: CapacityType,
    ) -> NodeOptions {
        let catalog = self.catalog;
        let options: Vec<&InstanceType> = d
            .options
            .iter()
            .take(self.opts.max_instance_type_options)
            .map(|&o| &catalog[view.base.types[o]])
            .collect();
        NodeOptions {
            names: options.iter().map(|t| t.name.clone()).collect(),
            prices: options
                .iter()
                .map(|t| {
                    t.offerings
                        .iter()
                        .filter(|o| {
                            o.available
                                && o.capacity_type == capacity_type
                                && offering_allowed(o, reqs)
                        })
                        .map(|o| o.price)
                        .min_by(f64::total_cmp)
                })
                .collect(),
        }
    }

    /// One copy of a draft on `offering`, with the next pods of each of its classes.
    fn new_node(
        &mut self,
        view: &ProvisionerView<'_>,
        d: &Draft,
        reqs: &Requirements,
        offering: &Offering,
        options: &NodeOptions,
    ) -> NewNode {
        let catalog = self.catalog;
        let t = &catalog[view.base.types[d.chosen]];
        let pods = &self.snapshot.pods;
        let mut node_pods = Vec::new();
        let mut pod_indices = Vec::new();
        for (c, k) in &d.counts {
            let start = self.cursor[*c];
            let end = start + *k as usize;
            let taken = &self.classes[*c].pods[start..end];
            node_pods.extend(taken.iter().map(|&i| pods[i].key()));
            pod_indices.extend_from_slice(taken);
            self.cursor[*c] = end;
        }
        let mut requests = d.pod_requests.clone();
        requests.add(&view.base.overhead[d.chosen]);
        NewNode {
            name: format!("{}-{}", view.prov.name, self.new_nodes.len() + 1),
            provisioner: view.prov.name.clone(),
            instance_type: t.name.clone(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type,
            price_per_hour: offering.price,
            price_estimated: offering.price_estimated,
            instance_type_options: options.names.clone(),
            option_prices: options.prices.clone(),
            requirements: reqs.clone(),
            pods: node_pods,
            pod_indices,
            requests,
        }
    }

    /// Counts `placed` pods of class `ci` as given a node, from the front of the class.
    fn record_placed(&mut self, ci: usize, placed: usize) {
        self.remaining[ci] -= placed as i64;
        self.cursor[ci] += placed;
    }

    /// Why `pod` cannot be placed when one of its volumes confines it to zones where no
    /// existing node is and no Provisioner can launch: the claim and zone named, which says
    /// more than the requirement conflict it comes down to.
    fn unreachable_volume(&self, pod: &Pod) -> Option<String> {
        let gone_host = pod
            .volume_hosts
            .iter()
            .flat_map(|v| v.iter())
            .find_map(|vh| {
                let exists = self.snapshot.nodes.iter().any(|n| {
                    let host = n.labels.get(crate::labels::HOSTNAME).unwrap_or(&n.name);
                    vh.hosts.allows(host)
                });
                (!exists).then(|| {
                    format!(
                        "volume claim {} is bound to PersistentVolume {}, which only nodes {} {} \
                     can mount; no such node exists and a new node cannot be one",
                        vh.claim,
                        vh.volume,
                        crate::labels::HOSTNAME,
                        vh.hosts
                    )
                })
            });
        if gone_host.is_some() {
            return gone_host;
        }
        pod.volume_zones.iter().find_map(|vz| {
            let on_a_node = self.snapshot.nodes.iter().any(|n| {
                n.labels
                    .get(crate::labels::ZONE)
                    .is_some_and(|z| vz.zones.allows(z))
            });
            let launchable = self.provisioners.iter().any(|prov| {
                let reqs = prov.node_requirements();
                let allowed = reqs
                    .get(crate::labels::ZONE)
                    .is_none_or(|r| r.compatible(&vz.zones));
                allowed
                    && self.catalog.iter().any(|t| {
                        t.offerings.iter().any(|o| {
                            vz.zones.allows(&o.zone)
                                && reqs
                                    .get(crate::labels::ZONE)
                                    .is_none_or(|r| r.allows(&o.zone))
                        })
                    })
            });
            (!on_a_node && !launchable).then(|| {
                format!(
                    "volume claim {} is in {} {}, where no node exists and no Provisioner launches",
                    vz.claim,
                    crate::labels::ZONE,
                    vz.zones
                )
            })
        })
    }

    /// The plan: existing nodes that got pods, new nodes, and every pod left without a node
    /// with the reasons gathered along the way.
    fn finish(self) -> Plan {
        let pods = &self.snapshot.pods;
        let existing_nodes = self
            .existing
            .nodes
            .iter()
            .zip(&self.existing.placed)
            .filter(|(_, placed)| !placed.is_empty())
            .map(|(n, placed)| ExistingNodeUse {
                name: n.name.clone(),
                pods: placed.iter().map(|&i| pods[i].key()).collect(),
            })
            .collect();
        let mut unschedulable: Vec<Unschedulable> = self
            .pinned_refused
            .iter()
            .map(|(i, why)| Unschedulable {
                pod: pods[*i].key(),
                reason: why.clone(),
            })
            .collect();
        for (ci, class) in self.classes.iter().enumerate() {
            if self.remaining[ci] <= 0 {
                continue;
            }
            let mut reason = reasons::combine(&self.refusals[ci]);
            // A refusal on a key the topology pass pinned the class to is the pin's doing:
            // name the rule, not only the requirement it became.
            let pins: Vec<String> = class
                .pinned
                .iter()
                .filter(|(k, _)| reason.contains(k.as_str()))
                .map(|(k, r)| format!("{k} {r}"))
                .collect();
            if !pins.is_empty() {
                reason = format!(
                    "its topology spread or pod (anti-)affinity leaves it only {} (other domains would exceed maxSkew, are full or are closed to it): {reason}",
                    pins.join(", ")
                );
            }
            for &i in &class.pods[self.cursor[ci]..] {
                let reason = self
                    .unreachable_volume(&pods[i])
                    .unwrap_or_else(|| reason.clone());
                unschedulable.push(Unschedulable {
                    pod: pods[i].key(),
                    reason,
                });
            }
        }
        unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        Plan {
            new_nodes: self.new_nodes,
            existing_nodes,
            unschedulable,
            relaxed: Vec::new(),
        }
    }
}

/// The snapshot's Provisioners by weight descending, then name; the default Provisioner when
/// the snapshot has none.
fn provisioners_in_order(snapshot: &Snapshot) -> Vec<Provisioner> {
    let mut provs = if snapshot.provisioners.is_empty() {
        vec![Provisioner::default_provisioner()]
    } else {
        snapshot.provisioners.clone()
    };
    provs.sort_by(|a, b| b.weight.cmp(&a.weight).then(a.name.cmp(&b.name)));
    provs
}

/// A Provisioner's view of the catalog, with its limits net of the capacity it already owns.
fn view_of<'p>(
    snapshot: &Snapshot,
    catalog: &[InstanceType],
    prov: &'p Provisioner,
    table: &mut ReqTable,
    opts: &Options,
) -> ProvisionerView<'p> {
    // Only limits read what is used: without any, counting every node would be wasted (a
    // disruption trial builds a view per Provisioner on the whole cluster).
    let used = if prov.limits.all().is_empty() {
        Resources::default()
    } else {
        limits_used(snapshot, prov)
    };
    ProvisionerView::new(
        prov,
        catalog,
        &snapshot.daemonsets,
        &used,
        table,
        opts.memo.clone(),
    )
}

/// What counts against `prov`'s limits: the capacity of the existing and in-flight nodes it
/// owns and how many there are, plus what its claims hold elsewhere ([`Provisioner::held`]:
/// warm-pool members).
pub fn limits_used(snapshot: &Snapshot, prov: &Provisioner) -> Resources {
    let mut used = prov.held.clone();
    let mut count = prov.held.get(NODES_LIMIT);
    for n in &snapshot.nodes {
        if n.provisioner() == Some(prov.name.as_str()) {
            used.add(&n.capacity);
            count += 1;
        }
    }
    used.set(NODES_LIMIT, count);
    used
}

/// The cheapest available offerings of `t` under `reqs`; spot only, when spot ties, since
/// CreateFleet is asked for spot first when a Provisioner allows it.
fn cheapest_offerings<'t>(t: &'t InstanceType, reqs: &Requirements) -> Vec<&'t Offering> {
    let min = t
        .cheapest_offering(reqs)
        .map(|o| o.price)
        .unwrap_or(f64::INFINITY);
    let tied: Vec<&Offering> = t
        .offerings
        .iter()
        .filter(|o| o.available && offering_allowed(o, reqs) && o.price <= min)
        .collect();
    let spot = tied.iter().any(|o| o.capacity_type == CapacityType::Spot);
    tied.into_iter()
        .filter(|o| !spot || o.capacity_type == CapacityType::Spot)
        .collect()
}
