//! Room on the working cluster and in the catalog, counted by CPU and memory only: what a
//! consolidation of one node can be refused for without a simulation.
//!
//! A simulation of a large cluster costs tens of milliseconds, and on a packed cluster nearly
//! every one fails. Each check here is a relaxation of the simulation — fewer constraints (no
//! affinity, spread, port, volume, pod-count or requirement), more room (a node's allocatable
//! less only what its pods request, a type's raw capacity, any zone and capacity type) — so a
//! move it refuses is one the simulation refuses too, and the plan's decisions are the same
//! with or without it (a property test holds the planner to that).

use std::collections::HashMap;

use crate::instance_type::InstanceType;
use crate::snapshot::Snapshot;

use super::PriceBound;

/// CPU (millicores) and memory (bytes).
pub type Room = [i64; 2];

/// The CPU and memory free on each working node that can take pods, kept up to date as
/// decisions move pods, with the maximal points of it for "does any other node hold this pod".
#[derive(Debug, Default)]
pub struct FreeRoom {
    per_node: HashMap<String, Room>,
    total: Room,
    /// The nodes no other node beats on both CPU and memory, CPU descending (so memory
    /// ascending); `None` once a change made it stale.
    front: Option<Vec<(Room, String)>>,
}

impl FreeRoom {
    /// Counts the room on `snapshot`'s schedulable, initialized, Ready nodes: allocatable less
    /// the requests of the pods bound there. Terminating pods are not counted (the
    /// simulation may not count them either; counting more room keeps the checks sound).
    pub fn count(snapshot: &Snapshot) -> Self {
        let mut used: HashMap<&str, Room> = HashMap::new();
        for p in &snapshot.pods {
            if p.disruption.terminating {
                continue;
            }
            if let Some(n) = p.node_name.as_deref() {
                let u = used.entry(n).or_default();
                u[0] += p.requests.cpu;
                u[1] += p.requests.memory;
            }
        }
        let mut room = FreeRoom::default();
        for n in &snapshot.nodes {
            if n.unschedulable || !n.life.initialized || n.life.not_ready {
                continue;
            }
            let u = used.get(n.name.as_str()).copied().unwrap_or_default();
            let f = [
                (n.allocatable.cpu - u[0]).max(0),
                (n.allocatable.memory - u[1]).max(0),
            ];
            room.total[0] += f[0];
            room.total[1] += f[1];
            room.per_node.insert(n.name.clone(), f);
        }
        room
    }

    /// A node leaves (a decision removes it): its room is gone.
    pub fn remove(&mut self, node: &str) {
        let f = self.per_node.remove(node).unwrap_or_default();
        self.total[0] -= f[0];
        self.total[1] -= f[1];
        self.front = None;
    }

    /// A moved pod takes `request` on `node`.
    pub fn take(&mut self, node: &str, request: Room) {
        if let Some(f) = self.per_node.get_mut(node) {
            for d in 0..2 {
                let took = request[d].min(f[d]);
                f[d] -= took;
                self.total[d] -= took;
            }
            self.front = None;
        }
    }

    /// The room on every node but `except`.
    pub fn except(&self, except: &str) -> Room {
        let own = self.per_node.get(except).copied().unwrap_or_default();
        [self.total[0] - own[0], self.total[1] - own[1]]
    }

    /// Whether a node other than `except` has `request` free.
    pub fn holds_elsewhere(&mut self, request: Room, except: &str) -> bool {
        let front = self.front.get_or_insert_with(|| front_of(&self.per_node));
        // The nodes with enough CPU are a prefix; the last of it has the most memory.
        let k = front.partition_point(|(f, _)| f[0] >= request[0]);
        let Some((best, name)) = k.checked_sub(1).map(|i| &front[i]) else {
            return false;
        };
        if best[1] < request[1] {
            return false;
        }
        name != except
            || self
                .per_node
                .iter()
                .any(|(n, f)| n != except && f[0] >= request[0] && f[1] >= request[1])
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

/// What the catalog offers a replacement, by CPU and memory: each type's raw capacity and its
/// cheapest available offering, and the least $/h any offering asks per millicore and per byte.
#[derive(Debug)]
pub struct NewRoom {
    types: Vec<(Room, f64)>,
    per_unit: [f64; 2],
}

impl NewRoom {
    /// Reads `catalog`; types with no available offering are left out.
    pub fn of(catalog: &[InstanceType]) -> Self {
        let mut types = Vec::new();
        let mut per_unit = [f64::INFINITY; 2];
        for t in catalog {
            let Some(price) = t
                .offerings
                .iter()
                .filter(|o| o.available)
                .map(|o| o.price)
                .min_by(f64::total_cmp)
            else {
                continue;
            };
            let cap = [t.capacity.cpu, t.capacity.memory];
            for d in 0..2 {
                if cap[d] > 0 {
                    per_unit[d] = per_unit[d].min(price / cap[d] as f64);
                }
            }
            types.push((cap, price));
        }
        NewRoom { types, per_unit }
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
}

/// Why removing a node whose movable pods request `pods` cannot save under `bound`, when
/// that shows without a simulation; `node` is the node's name, `free` the working cluster's
/// room. Each pod no other node has room for needs a new node: refused when one of them fits
/// no type `bound` allows, or when together they cost at least what `bound` allows.
pub fn refusal(
    node: &str,
    pods: &[(String, Room)],
    free: &mut FreeRoom,
    new: &NewRoom,
    bound: PriceBound,
    improvement: &str,
) -> Option<String> {
    let mut need = [0i64; 2];
    for (_, r) in pods {
        need[0] += r[0];
        need[1] += r[1];
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
    for (key, r) in pods {
        if free.holds_elsewhere(*r, node) {
            continue;
        }
        if !new.holds(*r, bound) {
            return Some(format!(
                "pod {key} fits on no other node, and no type {improvement} holds it"
            ));
        }
        homeless[0] += r[0];
        homeless[1] += r[1];
    }
    let least = new.least_price(homeless);
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
                labels: Default::default(),
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
        assert!(free.holds_elsewhere([2000, 2000], "x"));
        assert!(free.holds_elsewhere([4000, 500], "x"));
        assert!(free.holds_elsewhere([500, 8000], "x"));
        assert!(!free.holds_elsewhere([3000, 3000], "x"));
        assert!(!free.holds_elsewhere([5000, 1], "x"));
    }

    #[test]
    fn the_node_itself_does_not_count_but_a_node_it_hides_does() {
        // b is beaten by a on both, so a alone is on the front; without a, b still holds.
        let mut free = room(&[("a", 4000, 4000), ("b", 2000, 2000)]);
        assert!(free.holds_elsewhere([2000, 2000], "a"));
        assert!(!free.holds_elsewhere([3000, 3000], "a"));
        assert!(free.holds_elsewhere([3000, 3000], "b"));
    }

    #[test]
    fn taken_and_removed_room_is_gone() {
        let mut free = room(&[("a", 4000, 4000), ("b", 2000, 2000)]);
        free.take("a", [3000, 0]);
        assert!(!free.holds_elsewhere([2500, 1000], "x"));
        assert!(free.holds_elsewhere([2000, 1000], "x"));
        free.remove("b");
        assert!(!free.holds_elsewhere([2000, 1000], "x"));
        assert_eq!(free.except("x"), [1000, 4000]);
    }

    #[test]
    fn a_pod_no_node_and_no_cheaper_type_holds_refuses_the_move() {
        let new = NewRoom::of(&catalog(&[
            (2000, 4000, 0.5, true),
            (8000, 16000, 2.0, true),
        ]));
        let mut free = room(&[
            ("candidate", 8000, 16000),
            ("o1", 2000, 16000),
            ("o2", 2000, 16000),
        ]);
        // Room for the small pod elsewhere, and in all for both; the large one needs the
        // 2.0 $/h type.
        let pods = vec![
            ("ns/small".to_string(), [1000, 1000]),
            ("ns/large".to_string(), [4000, 8000]),
        ];
        let why = refusal("candidate", &pods, &mut free, &new, UNDER_ONE, "cheaper");
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
    fn pods_that_need_new_nodes_together_costing_too_much_refuse_the_move() {
        // 0.25 $/h per 1000 millicores at best (the cheaper type is unavailable); three
        // 1500-millicore pods no node holds need at least 4500 millicores of new nodes:
        // 1.125 $/h, not under 1. The nodes have room for them in all.
        let new = NewRoom::of(&catalog(&[
            (2000, 64_000, 0.5, true),
            (16_000, 64_000, 0.1, false),
        ]));
        let mut free = room(&[
            ("candidate", 8000, 64_000),
            ("o1", 1000, 64_000),
            ("o2", 1000, 64_000),
            ("o3", 1000, 64_000),
        ]);
        let pods: Vec<(String, Room)> =
            (0..3).map(|i| (format!("ns/p{i}"), [1500, 1000])).collect();
        let why =
            refusal("candidate", &pods, &mut free, &new, UNDER_ONE, "cheaper").expect("refused");
        assert!(why.contains("at least $1.1250/h"), "{why}");
        // Two such pods cost at least 0.75 $/h: a simulation decides.
        assert_eq!(
            refusal(
                "candidate",
                &pods[..2],
                &mut free,
                &new,
                UNDER_ONE,
                "cheaper"
            ),
            None
        );
    }

    #[test]
    fn more_than_the_other_nodes_and_the_largest_cheaper_type_hold_is_refused() {
        let new = NewRoom::of(&catalog(&[
            (2000, 4000, 0.5, true),
            (8000, 16000, 2.0, true),
        ]));
        let mut free = room(&[("candidate", 8000, 16000), ("o1", 1000, 16000)]);
        let pods = vec![
            ("ns/a".to_string(), [1000, 1000]),
            ("ns/b".to_string(), [2500, 1000]),
        ];
        let why = refusal("candidate", &pods, &mut free, &new, UNDER_ONE, "cheaper");
        assert_eq!(
            why.as_deref(),
            Some("its pods need more room than the other nodes have free plus the largest type cheaper")
        );
    }

    #[test]
    fn pods_that_fit_elsewhere_are_never_refused_here() {
        let new = NewRoom::of(&catalog(&[(2000, 4000, 5.0, true)]));
        let mut free = room(&[("candidate", 8000, 16000), ("other", 8000, 16000)]);
        let pods = vec![
            ("ns/a".to_string(), [3000, 3000]),
            ("ns/b".to_string(), [3000, 3000]),
        ];
        assert_eq!(
            refusal("candidate", &pods, &mut free, &new, UNDER_ONE, "cheaper"),
            None
        );
    }
}
