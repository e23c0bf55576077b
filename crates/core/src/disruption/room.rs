//! Room on the working cluster and in the catalog, counted by CPU and memory only: what a
//! consolidation of one node can be refused for without a simulation.
//!
//! A simulation of a large cluster costs tens of milliseconds, and on a packed cluster nearly
//! every one fails. Each check here is a relaxation of the simulation — fewer constraints (of
//! a pod's constraints only its required anti-affinity to pods already running and its
//! required affinity to pods that stay ([`super::together`]); no spread, port, volume or node
//! requirement), more room (a node's allocatable less only what its pods request; a new node
//! at the cheapest offering its Provisioner allows, in any zone; pods that each fit somewhere
//! counted as fitting together as far as the least of them does) — so a move it refuses is one
//! the simulation refuses too, and the plan's decisions are the same with or without it (a
//! property test holds the planner to that).

use std::collections::{HashMap, HashSet};

use crate::instance_type::InstanceType;
use crate::pod::DaemonSet;
use crate::pod::Pod;
use crate::provisioner::Provisioner;
use crate::scheduling::affinity::Scope;
use crate::scheduling::candidates::ViewBase;
use crate::snapshot::Snapshot;

use super::PriceBound;

/// CPU (millicores) and memory (bytes).
pub type Room = [i64; 2];

/// The CPU and memory free on each working node that can take pods, kept up to date as
/// decisions move pods, with the maximal points of it for "does any other node hold this pod".
/// A node with no pod slot left holds no pod, whatever its CPU and memory: it has no room.
#[derive(Debug, Default)]
pub struct FreeRoom {
    per_node: HashMap<String, Room>,
    /// The pod slots free on each node of `per_node` (at least one).
    slots: HashMap<String, i64>,
    total: Room,
    /// The nodes no other node beats on both CPU and memory, CPU descending (so memory
    /// ascending); `None` once a change made it stale.
    front: Option<Vec<(Room, String)>>,
    /// Every node of `per_node` with its room and slots, CPU descending; `None` once stale.
    by_cpu: Option<Vec<(Room, i64, String)>>,
}

impl FreeRoom {
    /// Counts the room on `snapshot`'s schedulable, initialized, Ready nodes with a pod slot
    /// free: allocatable less the requests of the pods bound there. Terminating pods are not
    /// counted (the simulation may not count them either; counting more room keeps the
    /// checks sound).
    pub fn count(snapshot: &Snapshot) -> Self {
        let mut used: HashMap<&str, [i64; 3]> = HashMap::new();
        for p in &snapshot.pods {
            if p.disruption.terminating {
                continue;
            }
            if let Some(n) = p.node_name.as_deref() {
                let u = used.entry(n).or_default();
                u[0] += p.requests.cpu;
                u[1] += p.requests.memory;
                u[2] += p.requests.pods;
            }
        }
        let mut room = FreeRoom::default();
        for n in &snapshot.nodes {
            if n.unschedulable || !n.life.initialized || n.life.not_ready {
                continue;
            }
            let u = used.get(n.name.as_str()).copied().unwrap_or_default();
            let slots = n.allocatable.pods - u[2];
            if slots < 1 {
                continue;
            }
            let f = [
                (n.allocatable.cpu - u[0]).max(0),
                (n.allocatable.memory - u[1]).max(0),
            ];
            room.total[0] += f[0];
            room.total[1] += f[1];
            room.per_node.insert(n.name.clone(), f);
            room.slots.insert(n.name.clone(), slots);
        }
        room
    }

    /// A node leaves (a decision removes it, or its last pod slot is taken): its room is gone.
    pub fn remove(&mut self, node: &str) {
        let f = self.per_node.remove(node).unwrap_or_default();
        self.slots.remove(node);
        self.total[0] -= f[0];
        self.total[1] -= f[1];
        self.front = None;
        self.by_cpu = None;
    }

    /// A moved pod takes `request` and one pod slot on `node`.
    pub fn take(&mut self, node: &str, request: Room) {
        if let Some(f) = self.per_node.get_mut(node) {
            for d in 0..2 {
                let took = request[d].min(f[d]);
                f[d] -= took;
                self.total[d] -= took;
            }
            self.front = None;
            self.by_cpu = None;
        }
        if let Some(slots) = self.slots.get_mut(node) {
            *slots -= 1;
            if *slots < 1 {
                self.remove(node);
            }
        }
    }

    /// The room on every node but `except`.
    pub fn except(&self, except: &str) -> Room {
        let own = self.per_node.get(except).copied().unwrap_or_default();
        [self.total[0] - own[0], self.total[1] - own[1]]
    }

    /// Whether a node other than `except`, and in none of the sets `not_on`, has `request`
    /// free.
    pub fn holds_elsewhere(
        &mut self,
        request: Room,
        except: &str,
        not_on: &[&HashSet<String>],
    ) -> bool {
        let front = self.front.get_or_insert_with(|| front_of(&self.per_node));
        // The nodes with enough CPU are a prefix; the last of it has the most memory.
        let k = front.partition_point(|(f, _)| f[0] >= request[0]);
        let Some((best, name)) = k.checked_sub(1).map(|i| &front[i]) else {
            return false;
        };
        if best[1] < request[1] {
            return false;
        }
        let open = |n: &String| n != except && !not_on.iter().any(|s| s.contains(n));
        open(name)
            || self
                .per_node
                .iter()
                .any(|(n, f)| f[0] >= request[0] && f[1] >= request[1] && open(n))
    }

    /// At most how many of `pods` the nodes other than `except` hold together: each node
    /// counts as many as its room and slots hold of the least CPU and the least memory any of
    /// them requests (none for a node every one of them must avoid). An upper bound, so the
    /// rest surely need new nodes: each pod can have room on some node while one node's room
    /// is all they have between them.
    pub fn most_held(&mut self, pods: &[&Moving], except: &str) -> usize {
        let n = pods.len();
        let least = [0, 1].map(|d| pods.iter().map(|p| p.room[d]).min().unwrap_or(0));
        let slots = &self.slots;
        let by_cpu = self.by_cpu.get_or_insert_with(|| {
            let mut all: Vec<(Room, i64, String)> = self
                .per_node
                .iter()
                .map(|(name, f)| (*f, slots.get(name).copied().unwrap_or(0), name.clone()))
                .collect();
            all.sort_by(|a, b| b.0[0].cmp(&a.0[0]).then(a.2.cmp(&b.2)));
            all
        });
        let copies = |free: i64, each: i64| {
            if each <= 0 {
                n
            } else {
                usize::try_from(free / each).unwrap_or(0)
            }
        };
        let mut held = 0usize;
        for (f, slots, name) in by_cpu.iter() {
            if f[0] < least[0] {
                break;
            }
            if name == except
                || pods
                    .iter()
                    .all(|p| p.not_on.iter().any(|s| s.contains(name)))
            {
                continue;
            }
            let k = copies(f[0], least[0])
                .min(copies(f[1], least[1]))
                .min(usize::try_from(*slots).unwrap_or(0));
            held += k;
            if held >= n {
                return n;
            }
        }
        held
    }
}

/// The required pod anti-affinity (`anti`) or affinity terms of `pod`, each as its scope and
/// topology key: those a namespace selector still names by labels are left out (no set is
/// sure to be the simulation's).
pub(super) fn required_terms(pod: &Pod, anti: bool) -> impl Iterator<Item = (Scope, String)> + '_ {
    pod.affinity
        .iter()
        .filter(move |a| a.anti == anti && a.weight.is_none() && a.namespace_selector.is_none())
        .map(|a| (Scope::of_term(pod, a), a.topology_key.clone()))
}

/// Per required pod anti-affinity term (its scope and topology key), the working nodes that
/// carry the key and run a pod the scope matches: a pod with the term cannot move there, in
/// the simulation as in the kube-scheduler. Worked out when a candidate's pod first needs a
/// term, and forgotten whenever a decision moves pods.
#[derive(Debug, Default)]
pub struct Apart {
    nodes: HashMap<(Scope, String), HashSet<String>>,
}

impl Apart {
    /// Forgets every term's nodes: pods moved.
    pub fn clear(&mut self) {
        self.nodes.clear();
    }

    /// The terms a required anti-affinity of `pod` states ([`required_terms`]).
    fn terms(pod: &Pod) -> impl Iterator<Item = (Scope, String)> + '_ {
        required_terms(pod, true)
    }

    /// Works out, on `snapshot`, the nodes of each term of `pods` not known yet. A pod being
    /// deleted is not counted (the simulation may not count it; fewer nodes keep the checks
    /// sound), nor one on a node without the term's key.
    pub fn learn<'p>(&mut self, snapshot: &Snapshot, pods: impl IntoIterator<Item = &'p Pod>) {
        let missing: HashSet<(Scope, String)> = pods
            .into_iter()
            .flat_map(Self::terms)
            .filter(|t| !self.nodes.contains_key(t))
            .collect();
        for (scope, key) in missing {
            let keyed: HashSet<&str> = snapshot
                .nodes
                .iter()
                .filter(|n| n.labels.contains_key(&key))
                .map(|n| n.name.as_str())
                .collect();
            let on: HashSet<String> = snapshot
                .pods
                .iter()
                .filter(|p| !p.disruption.terminating)
                .filter_map(|p| {
                    let n = p.node_name.as_deref()?;
                    (keyed.contains(n) && scope.matches(p)).then(|| n.to_string())
                })
                .collect();
            self.nodes.insert((scope, key), on);
        }
    }

    /// The nodes `pod`'s required anti-affinity keeps it off, one set per term [`learn`]ed.
    ///
    /// [`learn`]: Apart::learn
    pub fn not_on(&self, pod: &Pod) -> Vec<&HashSet<String>> {
        Self::terms(pod)
            .filter_map(|t| self.nodes.get(&t))
            .collect()
    }
}

/// The maximal points of `per_node`, CPU descending and memory ascending.
fn front_of(per_node: &HashMap<String, Room>) -> Vec<(Room, String)> {
    let mut all: Vec<(&Room, &String)> = per_node.iter().map(|(n, f)| (f, n)).collect();
    all.sort_by(|a, b| {
        b.0[0]
            .cmp(&a.0[0])
            .then(b.0[1].cmp(&a.0[1]))
            .then(a.1.cmp(b.1))
    });
    let mut front = Vec::new();
    let mut most_memory = i64::MIN;
    for (f, n) in all {
        if f[1] > most_memory {
            most_memory = f[1];
            front.push((*f, n.clone()));
        }
    }
    front
}

/// What the catalog offers a replacement, by CPU and memory: what each type a Provisioner may
/// launch holds there (its allocatable less the DaemonSets' requests, as the simulation
/// counts it) and its cheapest offering that Provisioner allows, and the least $/h any such
/// offering asks per millicore and per byte of that room.
#[derive(Debug)]
pub struct NewRoom {
    types: Vec<(Room, f64)>,
    per_unit: [f64; 2],
    /// The types no cheaper (or equally priced) type beats on both CPU and memory, cheapest
    /// first: the first of them holding a request is the cheapest type that does.
    frontier: Vec<(Room, f64)>,
}

impl NewRoom {
    /// Reads `catalog` as `provisioners` may launch it (the default Provisioner when there
    /// is none, as in the simulation), with `daemonsets` on every node: a type counts under a
    /// Provisioner whose node requirements allow it, at the cheapest offering they allow (a
    /// spot price does not make an on-demand-only cluster's replacement cheaper). The moved
    /// pods' own requirements are not read: any of them only narrows the choice.
    pub fn of(
        catalog: &[InstanceType],
        provisioners: &[Provisioner],
        daemonsets: &[DaemonSet],
    ) -> Self {
        let default;
        let provisioners = if provisioners.is_empty() {
            default = [Provisioner::default_provisioner()];
            &default[..]
        } else {
            provisioners
        };
        let mut types = Vec::new();
        let mut per_unit = [f64::INFINITY; 2];
        for prov in provisioners {
            let view = ViewBase::new(prov, catalog, daemonsets);
            for (t, holds) in view.types.iter().zip(&view.effective) {
                let Some(price) = catalog[*t]
                    .cheapest_offering(&view.node_reqs)
                    .map(|o| o.price)
                else {
                    continue;
                };
                let cap = [holds.cpu.max(0), holds.memory.max(0)];
                for d in 0..2 {
                    if cap[d] > 0 {
                        per_unit[d] = per_unit[d].min(price / cap[d] as f64);
                    }
                }
                types.push((cap, price));
            }
        }
        let mut by_price = types.clone();
        by_price.sort_by(|a, b| {
            a.1.total_cmp(&b.1)
                .then(b.0[0].cmp(&a.0[0]))
                .then(b.0[1].cmp(&a.0[1]))
        });
        let mut frontier: Vec<(Room, f64)> = Vec::new();
        for (cap, price) in by_price {
            if !frontier
                .iter()
                .any(|(f, _)| f[0] >= cap[0] && f[1] >= cap[1])
            {
                frontier.push((cap, price));
            }
        }
        NewRoom {
            types,
            per_unit,
            frontier,
        }
    }

    /// The largest CPU and the largest memory of a type with an offering `bound` allows.
    pub fn largest(&self, bound: PriceBound) -> Room {
        let mut largest = [0i64; 2];
        for (cap, price) in &self.types {
            if bound.allows(*price) {
                largest[0] = largest[0].max(cap[0]);
                largest[1] = largest[1].max(cap[1]);
            }
        }
        largest
    }

    /// Whether a type with an offering `bound` allows holds `request`.
    pub fn holds(&self, request: Room, bound: PriceBound) -> bool {
        self.types.iter().any(|(cap, price)| {
            cap[0] >= request[0] && cap[1] >= request[1] && bound.allows(*price)
        })
    }

    /// The least $/h of any set of new nodes holding `request` together: no node asks less
    /// per millicore or per byte than the cheapest offering does.
    pub fn least_price(&self, request: Room) -> f64 {
        (0..2)
            .filter(|&d| request[d] > 0 && self.per_unit[d].is_finite())
            .map(|d| request[d] as f64 * self.per_unit[d])
            .fold(0.0, f64::max)
    }

    /// The $/h of the cheapest type holding `request` on one node; infinite when none does.
    fn cheapest_holding(&self, request: Room) -> f64 {
        self.frontier
            .iter()
            .find(|(cap, _)| cap[0] >= request[0] && cap[1] >= request[1])
            .map_or(f64::INFINITY, |(_, price)| *price)
    }

    /// The least $/h of new nodes holding each of `pods` whole, by CPU and memory: the
    /// cheapest way to split them into groups, each on the cheapest type holding it (every
    /// split is weighed, so it is exact for what it counts, and infinite when some pod fits
    /// no type). `None` for more than [`MOST_PACKED`] pods, whose splits are too many.
    pub fn least_packed_price(&self, pods: &[Room]) -> Option<f64> {
        let n = pods.len();
        if n > MOST_PACKED {
            return None;
        }
        let sets = 1usize << n;
        // The cheapest single node for each set of the pods.
        let mut one = vec![0.0f64; sets];
        for (set, price) in one.iter_mut().enumerate().skip(1) {
            let mut sum = [0i64; 2];
            for (i, r) in pods.iter().enumerate() {
                if set & (1 << i) != 0 {
                    sum[0] += r[0];
                    sum[1] += r[1];
                }
            }
            *price = self.cheapest_holding(sum);
        }
        // The cheapest split of each set: the group holding its lowest pod, and the rest.
        let mut best = vec![0.0f64; sets];
        for set in 1..sets {
            let low = set & set.wrapping_neg();
            let rest = set ^ low;
            let mut least = f64::INFINITY;
            // Every subset of `rest`, joined to `low`, as the first group.
            let mut sub = rest;
            loop {
                let group = sub | low;
                least = least.min(one[group] + best[set ^ group]);
                if sub == 0 {
                    break;
                }
                sub = (sub - 1) & rest;
            }
            best[set] = least;
        }
        Some(best[sets - 1])
    }
}

/// The most pods [`NewRoom::least_packed_price`] splits every way (3^10 steps at most); more
/// are bounded by [`NewRoom::least_price`] alone.
pub const MOST_PACKED: usize = 10;

/// A pod a consolidation would move: its key, its CPU and memory requests, and the nodes its
/// required anti-affinity keeps it off ([`Apart::not_on`]).
#[derive(Debug)]
pub struct Moving<'a> {
    /// `namespace/name`.
    pub key: String,
    /// Its requests.
    pub room: Room,
    /// Nodes it cannot go to.
    pub not_on: Vec<&'a HashSet<String>>,
}

/// Why removing a node whose movable pods are `pods` cannot save under `bound`, when that
/// shows without a simulation; `node` is the node's name, `free` the working cluster's room.
/// Each pod no other node has room for (or that its anti-affinity keeps off every node with
/// room) needs a new node, and so do as many of the others as the other nodes cannot hold
/// together ([`FreeRoom::most_held`], each counted as the least request among them): refused
/// when one of them fits no type `bound` allows, or when together they cost at least what
/// `bound` allows, on the cheapest split of them into new nodes
/// ([`NewRoom::least_packed_price`]).
pub fn refusal(
    node: &str,
    pods: &[Moving],
    free: &mut FreeRoom,
    new: &NewRoom,
    bound: PriceBound,
    improvement: &str,
) -> Option<String> {
    let mut need = [0i64; 2];
    for p in pods {
        need[0] += p.room[0];
        need[1] += p.room[1];
    }
    let mut room = free.except(node);
    let largest = new.largest(bound);
    for d in 0..2 {
        room[d] += largest[d];
    }
    if (0..2).any(|d| need[d] > room[d]) {
        return Some(format!(
            "its pods need more room than the other nodes have free plus the largest type {improvement}"
        ));
    }
    let mut homeless = [0i64; 2];
    let mut each = Vec::new();
    let mut elsewhere = Vec::new();
    for p in pods {
        let r = &p.room;
        if free.holds_elsewhere(*r, node, &p.not_on) {
            elsewhere.push(p);
            continue;
        }
        if !new.holds(*r, bound) {
            return Some(format!(
                "pod {} fits on no other node, and no type {improvement} holds it",
                p.key
            ));
        }
        homeless[0] += r[0];
        homeless[1] += r[1];
        each.push(*r);
    }
    // Of the pods with room somewhere, those the other nodes cannot hold together need new
    // nodes too; each is at least as large as the least CPU and memory any of them asks.
    let crowded = elsewhere.len() - free.most_held(&elsewhere, node);
    if crowded > 0 {
        let least = [0, 1].map(|d| elsewhere.iter().map(|p| p.room[d]).min().unwrap_or(0));
        if !new.holds(least, bound) {
            return Some(format!(
                "{crowded} of its pods fit on no other node together, and no type {improvement} holds one"
            ));
        }
        for _ in 0..crowded {
            homeless[0] += least[0];
            homeless[1] += least[1];
            each.push(least);
        }
    }
    // Whole pods on whole nodes when they are few; the cheapest $/h per unit otherwise.
    let least = new
        .least_packed_price(&each)
        .unwrap_or_else(|| new.least_price(homeless));
    (least > 0.0 && !bound.allows(least)).then(|| {
        format!(
            "the pods no other node has room for need new nodes of at least ${least:.4}/h, none of it {improvement}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::{CapacityType, Offering};
    use crate::pod::Node;
    use crate::resources::Resources;

    fn node(name: &str, cpu: i64, memory: i64) -> Node {
        let mut n = Node {
            name: name.into(),
            allocatable: Resources::new(cpu, memory, 0, 110),
            ..Node::default()
        };
        n.life.initialized = true;
        n
    }

    fn moving(key: &str, room: Room) -> Moving<'static> {
        Moving {
            key: key.into(),
            room,
            not_on: Vec::new(),
        }
    }

    /// What `types` offer, under the default Provisioner with no DaemonSet.
    fn offered(types: &[(i64, i64, f64, bool)]) -> NewRoom {
        NewRoom::of(&catalog(types), &[], &[])
    }

    /// Why removing "candidate" with `pods` cannot save under 1 $/h, if the room says so.
    fn refused_under_one(pods: &[Moving], free: &mut FreeRoom, new: &NewRoom) -> Option<String> {
        refusal("candidate", pods, free, new, UNDER_ONE, "cheaper")
    }

    fn room(free: &[(&str, i64, i64)]) -> FreeRoom {
        let snapshot = Snapshot {
            nodes: free.iter().map(|(n, c, m)| node(n, *c, *m)).collect(),
            ..Snapshot::default()
        };
        FreeRoom::count(&snapshot)
    }

    fn catalog(types: &[(i64, i64, f64, bool)]) -> Vec<InstanceType> {
        types
            .iter()
            .enumerate()
            .map(|(i, (cpu, memory, price, available))| InstanceType {
                name: format!("t{i}"),
                labels: [(crate::labels::OS.to_string(), "linux".to_string())]
                    .into_iter()
                    .collect(),
                capacity: Resources::new(*cpu, *memory, 0, 110),
                allocatable: Resources::new(*cpu, *memory, 0, 110),
                offerings: vec![Offering {
                    zone: "a".into(),
                    capacity_type: CapacityType::OnDemand,
                    price: *price,
                    price_estimated: false,
                    available: *available,
                }],
                provider_keys: &[],
            })
            .collect()
    }

    const UNDER_ONE: PriceBound = PriceBound {
        most: 1.0,
        inclusive: false,
    };

    #[test]
    fn another_node_holds_a_pod_only_when_it_has_both_cpu_and_memory_free() {
        let mut free = room(&[("a", 4000, 1000), ("b", 1000, 8000), ("c", 2000, 2000)]);
        assert!(free.holds_elsewhere([2000, 2000], "x", &[]));
        assert!(free.holds_elsewhere([4000, 500], "x", &[]));
        assert!(free.holds_elsewhere([500, 8000], "x", &[]));
        assert!(!free.holds_elsewhere([3000, 3000], "x", &[]));
        assert!(!free.holds_elsewhere([5000, 1], "x", &[]));
    }

    #[test]
    fn the_node_itself_does_not_count_but_a_node_it_hides_does() {
        // b is beaten by a on both, so a alone is on the front; without a, b still holds.
        let mut free = room(&[("a", 4000, 4000), ("b", 2000, 2000)]);
        assert!(free.holds_elsewhere([2000, 2000], "a", &[]));
        assert!(!free.holds_elsewhere([3000, 3000], "a", &[]));
        assert!(free.holds_elsewhere([3000, 3000], "b", &[]));
    }

    #[test]
    fn a_node_with_no_pod_slot_left_has_no_room() {
        let mut s = Snapshot {
            nodes: vec![node("full", 4000, 4000), node("one-left", 4000, 4000)],
            ..Snapshot::default()
        };
        s.nodes[0].allocatable.pods = 2;
        s.nodes[1].allocatable.pods = 3;
        for (i, on) in ["full", "full", "one-left", "one-left"].iter().enumerate() {
            s.pods.push(Pod {
                namespace: "ns".into(),
                name: format!("p{i}"),
                node_name: Some(on.to_string()),
                requests: Resources::new(100, 100, 0, 1),
                ..Pod::default()
            });
        }
        let mut free = FreeRoom::count(&s);
        assert_eq!(free.except("x"), [3800, 3800]);
        assert!(free.holds_elsewhere([3000, 3000], "x", &[]));
        // The last slot taken, by however small a pod, the node holds nothing more.
        free.take("one-left", [1, 1]);
        assert!(!free.holds_elsewhere([100, 100], "x", &[]));
        assert_eq!(free.except("x"), [0, 0]);
    }

    #[test]
    fn taken_and_removed_room_is_gone() {
        let mut free = room(&[("a", 4000, 4000), ("b", 2000, 2000)]);
        free.take("a", [3000, 0]);
        assert!(!free.holds_elsewhere([2500, 1000], "x", &[]));
        assert!(free.holds_elsewhere([2000, 1000], "x", &[]));
        free.remove("b");
        assert!(!free.holds_elsewhere([2000, 1000], "x", &[]));
        assert_eq!(free.except("x"), [1000, 4000]);
    }

    #[test]
    fn a_pod_no_node_and_no_cheaper_type_holds_refuses_the_move() {
        let new = offered(&[(2000, 4000, 0.5, true), (8000, 16000, 2.0, true)]);
        let mut free = room(&[
            ("candidate", 8000, 16000),
            ("o1", 2000, 16000),
            ("o2", 2000, 16000),
        ]);
        // Room for the small pod elsewhere, and in all for both; the large one needs the
        // 2.0 $/h type.
        let pods = vec![
            moving("ns/small", [1000, 1000]),
            moving("ns/large", [4000, 8000]),
        ];
        let why = refused_under_one(&pods, &mut free, &new);
        assert_eq!(
            why.as_deref(),
            Some("pod ns/large fits on no other node, and no type cheaper holds it")
        );
        // Under a 3 $/h node the 2.0 $/h type is a possible replacement: no refusal.
        let bound = PriceBound {
            most: 3.0,
            inclusive: false,
        };
        assert_eq!(
            refusal("candidate", &pods, &mut free, &new, bound, "cheaper"),
            None
        );
    }

    #[test]
    fn only_offerings_a_provisioner_may_launch_price_a_new_node() {
        // One type: 2.0 $/h on demand, 0.5 $/h as spot. The pod fits on no node.
        let mut types = catalog(&[(8000, 16000, 2.0, true)]);
        let mut spot = types[0].offerings[0].clone();
        spot.capacity_type = CapacityType::Spot;
        spot.price = 0.5;
        types[0].offerings.push(spot);
        let pods = vec![moving("ns/p", [4000, 8000])];
        let mut free = room(&[("candidate", 8000, 16000)]);
        let refused =
            |new: &NewRoom, free: &mut FreeRoom| refused_under_one(&pods, free, new).is_some();
        // The default Provisioner launches on-demand only: the spot price is no way out.
        assert!(refused(&NewRoom::of(&types, &[], &[]), &mut free));
        let mut both = Provisioner::default_provisioner();
        both.requirements.add(
            crate::labels::CAPACITY_TYPE,
            crate::requirements::Requirement::one_of(["spot", "on-demand"]),
        );
        assert!(!refused(
            &NewRoom::of(&types, &[both.clone()], &[]),
            &mut free
        ));
        // A Provisioner whose requirements exclude the type does not launch it at all.
        let mut other_os = both;
        other_os.requirements.add(
            crate::labels::OS,
            crate::requirements::Requirement::single("windows"),
        );
        assert!(refused(&NewRoom::of(&types, &[other_os], &[]), &mut free));
    }

    #[test]
    fn pods_that_need_new_nodes_together_costing_too_much_refuse_the_move() {
        // One type on offer, 2000m for 0.5 $/h (the cheaper one is unavailable): each of the
        // 1500-millicore pods no node holds needs its own node, so two cost 1.0 $/h, not
        // under 1. The nodes have room for them in all.
        let new = offered(&[(2000, 64_000, 0.5, true), (16_000, 64_000, 0.1, false)]);
        let mut free = room(&[
            ("candidate", 8000, 64_000),
            ("o1", 1000, 64_000),
            ("o2", 1000, 64_000),
            ("o3", 1000, 64_000),
        ]);
        let pods: Vec<Moving> = (0..2)
            .map(|i| moving(&format!("ns/p{i}"), [1500, 1000]))
            .collect();
        let why = refused_under_one(&pods, &mut free, &new).expect("refused");
        assert!(why.contains("at least $1.0000/h"), "{why}");
        // One such pod costs 0.5 $/h: a simulation decides.
        assert_eq!(refused_under_one(&pods[..1], &mut free, &new), None);
    }

    #[test]
    fn the_frontier_finds_the_cheapest_type_holding_a_request() {
        // Types drawn from a small grid, so ties and dominated types abound.
        let mut seed = 7u64;
        let mut draw = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let specs: Vec<(i64, i64, f64, bool)> = (0..60)
            .map(|_| {
                let cpu = 1000 * (1 + draw(8) as i64);
                let memory = 1000 * (1 + draw(8) as i64);
                let price = (1 + draw(20)) as f64 / 10.0;
                (cpu, memory, price, draw(5) > 0)
            })
            .collect();
        let new = offered(&specs);
        for cpu in (0..=9000).step_by(500) {
            for memory in (0..=9000).step_by(500) {
                let brute = specs
                    .iter()
                    .filter(|(c, m, _, available)| *available && *c >= cpu && *m >= memory)
                    .map(|s| s.2)
                    .fold(f64::INFINITY, f64::min);
                assert_eq!(new.cheapest_holding([cpu, memory]), brute, "{cpu} {memory}");
            }
        }
    }

    #[test]
    fn the_cheapest_split_of_whole_pods_over_new_nodes_is_their_least_price() {
        // 2000m for 1.0 $/h or 4000m for 1.5 $/h: three 1500m pods go two on the larger
        // and one on the smaller (2.5 $/h), not three small (3.0) nor two large (3.0).
        let new = offered(&[(2000, 8000, 1.0, true), (4000, 8000, 1.5, true)]);
        let pods = [[1500, 1000]; 3];
        assert_eq!(new.least_packed_price(&pods), Some(2.5));
        // By the cheapest $/h per millicore (0.375 per 1000m), only 1.6875 $/h.
        assert_eq!(new.least_price([4500, 3000]), 1.6875);
        // Memory counts as much: two pods of 5000 bytes cannot share a node.
        assert_eq!(new.least_packed_price(&[[100, 5000]; 2]), Some(2.0));
        // A pod no type holds makes every split impossible.
        assert_eq!(
            new.least_packed_price(&[[100, 100], [5000, 100]]),
            Some(f64::INFINITY)
        );
        assert_eq!(new.least_packed_price(&[]), Some(0.0));
        assert_eq!(new.least_packed_price(&[[1, 1]; MOST_PACKED + 1]), None);
    }

    #[test]
    fn more_than_the_other_nodes_and_the_largest_cheaper_type_hold_is_refused() {
        let new = offered(&[(2000, 4000, 0.5, true), (8000, 16000, 2.0, true)]);
        let mut free = room(&[("candidate", 8000, 16000), ("o1", 1000, 16000)]);
        let pods = vec![moving("ns/a", [1000, 1000]), moving("ns/b", [2500, 1000])];
        let why = refused_under_one(&pods, &mut free, &new);
        assert_eq!(
            why.as_deref(),
            Some("its pods need more room than the other nodes have free plus the largest type cheaper")
        );
    }

    #[test]
    fn pods_that_fit_elsewhere_are_never_refused_here() {
        let new = offered(&[(2000, 4000, 5.0, true)]);
        let mut free = room(&[("candidate", 8000, 16000), ("other", 8000, 16000)]);
        let pods = vec![moving("ns/a", [3000, 3000]), moving("ns/b", [3000, 3000])];
        assert_eq!(refused_under_one(&pods, &mut free, &new), None);
    }

    #[test]
    fn pods_that_each_have_room_elsewhere_but_not_together_need_new_nodes() {
        // A type of 600m for 0.6 $/h holds one 500m pod. Node o has room for one of the
        // three pods only (by memory): two need new nodes, 1.2 $/h, not under 1.
        let new = offered(&[(600, 4000, 0.6, true)]);
        let pods: Vec<Moving> = (0..3)
            .map(|i| moving(&format!("ns/p{i}"), [500, 1000]))
            .collect();
        let mut free = room(&[("candidate", 4000, 8000), ("o", 2000, 1500)]);
        let why = refused_under_one(&pods, &mut free, &new).expect("refused");
        assert!(why.contains("at least $1.2000/h"), "{why}");
        // With room for two on o, one needs a new node (0.6 $/h): a simulation decides.
        let mut free = room(&[("candidate", 4000, 8000), ("o", 2000, 2500)]);
        assert_eq!(refused_under_one(&pods, &mut free, &new), None);
        // With no type holding even one of them, the crowded pod alone refuses the move.
        let small = offered(&[(400, 4000, 0.1, true)]);
        let mut free = room(&[("candidate", 4000, 8000), ("o", 2000, 1500)]);
        assert_eq!(
            refused_under_one(&pods, &mut free, &small).as_deref(),
            Some("2 of its pods fit on no other node together, and no type cheaper holds one")
        );
    }

    #[test]
    fn the_pods_other_nodes_hold_together_are_counted_by_slots_and_the_least_request() {
        let mut s = Snapshot {
            nodes: vec![node("a", 2000, 2000), node("b", 1000, 4000)],
            ..Snapshot::default()
        };
        s.nodes[0].allocatable.pods = 1;
        let mut free = FreeRoom::count(&s);
        // The least request is 500m and 500 bytes: a has one slot, b room for two; the node
        // left out is the candidate's.
        let sizes = [[500, 500], [1000, 1000], [1000, 500], [500, 2000]];
        let pods: Vec<Moving> = sizes
            .iter()
            .enumerate()
            .map(|(i, r)| moving(&format!("ns/p{i}"), *r))
            .collect();
        let refs: Vec<&Moving> = pods.iter().collect();
        assert_eq!(free.most_held(&refs[..2], "candidate"), 2);
        assert_eq!(free.most_held(&refs, "candidate"), 3);
        assert_eq!(free.most_held(&refs, "b"), 1);
        // A node every pod must avoid holds none of them; one only some avoid still counts.
        let avoided: HashSet<String> = ["a".to_string()].into_iter().collect();
        let apart: Vec<Moving> = sizes
            .iter()
            .map(|r| Moving {
                key: "ns/x".into(),
                room: *r,
                not_on: vec![&avoided],
            })
            .collect();
        let mut refs: Vec<&Moving> = apart.iter().collect();
        assert_eq!(free.most_held(&refs, "candidate"), 2);
        refs.push(&pods[0]);
        assert_eq!(free.most_held(&refs, "candidate"), 3);
        // Taking room on b leaves it one.
        free.take("b", [500, 500]);
        assert_eq!(free.most_held(&refs, "candidate"), 2);
    }

    fn labelled(name: &str, cpu: i64, memory: i64) -> Node {
        let mut n = node(name, cpu, memory);
        n.labels
            .insert(crate::labels::HOSTNAME.into(), name.to_string());
        n
    }

    fn web(namespace: &str, name: &str, on: Option<&str>) -> Pod {
        let mut selector = crate::requirements::Requirements::default();
        selector.add("app", crate::requirements::Requirement::single("web"));
        let mut p = Pod {
            namespace: namespace.into(),
            name: name.into(),
            node_name: on.map(str::to_string),
            requests: Resources::new(500, 500, 0, 1),
            ..Pod::default()
        };
        p.labels.insert("app".into(), "web".into());
        p.affinity.push(crate::pod::PodAffinityTerm {
            topology_key: crate::labels::HOSTNAME.into(),
            selector,
            namespaces: Vec::new(),
            namespace_selector: None,
            anti: true,
            weight: None,
        });
        p
    }

    /// a runs a web pod; b one in another namespace; c one but lacks the hostname label;
    /// d one being deleted; e nothing. The candidate runs the web pod that moves.
    fn spread_web() -> Snapshot {
        let mut c = node("c", 4000, 4000);
        c.labels.clear();
        let mut gone = web("ns", "going", Some("d"));
        gone.disruption.terminating = true;
        Snapshot {
            nodes: vec![
                labelled("candidate", 4000, 4000),
                labelled("a", 4000, 4000),
                labelled("b", 4000, 4000),
                c,
                labelled("d", 4000, 4000),
                labelled("e", 4000, 4000),
            ],
            pods: vec![
                web("ns", "moving", Some("candidate")),
                web("ns", "on-a", Some("a")),
                web("other", "on-b", Some("b")),
                web("ns", "on-c", Some("c")),
                gone,
            ],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_required_anti_affinity_keeps_a_pod_off_the_keyed_nodes_running_what_it_avoids() {
        let s = spread_web();
        let mut apart = Apart::default();
        apart.learn(&s, [&s.pods[0]]);
        let not_on = apart.not_on(&s.pods[0]);
        assert_eq!(not_on.len(), 1);
        let mut names: Vec<&str> = not_on[0].iter().map(String::as_str).collect();
        names.sort();
        // The candidate's own pod counts too: the candidate is left out by name anyway.
        assert_eq!(names, ["a", "candidate"]);
        // A preferred term, or one still naming namespaces by labels, keeps it off nothing.
        let mut soft = s.pods[0].clone();
        soft.affinity[0].weight = Some(10);
        assert!(apart.not_on(&soft).is_empty());
        let mut by_labels = s.pods[0].clone();
        by_labels.affinity[0].namespace_selector = Some(Default::default());
        apart.learn(&s, [&by_labels]);
        assert!(apart.not_on(&by_labels).is_empty());
    }

    #[test]
    fn a_pod_its_anti_affinity_keeps_off_every_node_with_room_needs_a_new_node() {
        let mut s = spread_web();
        // Only a has room: the rest are full.
        for n in &mut s.nodes {
            if !["candidate", "a"].contains(&n.name.as_str()) {
                n.allocatable = Resources::new(0, 0, 0, 110);
            }
        }
        let mut free = FreeRoom::count(&s);
        let mut apart = Apart::default();
        apart.learn(&s, [&s.pods[0]]);
        let new = offered(&[(2000, 4000, 1.5, true)]);
        let pods = vec![Moving {
            key: "ns/moving".into(),
            room: [500, 500],
            not_on: apart.not_on(&s.pods[0]),
        }];
        let why = refused_under_one(&pods, &mut free, &new);
        assert_eq!(
            why.as_deref(),
            Some("pod ns/moving fits on no other node, and no type cheaper holds it")
        );
        // Without the term, a holds it.
        let free_to_move = vec![moving("ns/moving", [500, 500])];
        assert_eq!(refused_under_one(&free_to_move, &mut free, &new), None);
    }

    #[test]
    fn forgotten_terms_are_learnt_again_from_where_pods_run_now() {
        let mut s = spread_web();
        let mut apart = Apart::default();
        apart.learn(&s, [&s.pods[0]]);
        assert!(!apart.not_on(&s.pods[0])[0].contains("e"));
        s.pods[1].node_name = Some("e".into());
        // Until cleared, what was learnt stands.
        apart.learn(&s, [&s.pods[0]]);
        assert!(!apart.not_on(&s.pods[0])[0].contains("e"));
        apart.clear();
        apart.learn(&s, [&s.pods[0]]);
        let not_on = apart.not_on(&s.pods[0]);
        assert!(not_on[0].contains("e") && !not_on[0].contains("a"));
    }
}
