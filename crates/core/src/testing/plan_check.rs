//! A checker of hard scheduling constraints for tests: where a plan puts every pod, and
//! whether that breaks a constraint the kube-scheduler enforces. Property tests of the core
//! simulation and tests of the benchmark workloads (joiner-bench) use the same checker, on the
//! zones of [`super::catalog`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::instance_type::CapacityType;
use crate::labels;
use crate::pod::Pod;
use crate::scheduling::affinity::Scope;
use crate::scheduling::ports::PortKey;
use crate::scheduling::Plan;
use crate::snapshot::Snapshot;

/// The zones of the test catalog.
const ZONES: [&str; 3] = ["z-a", "z-b", "z-c"];

/// Fails the check with a message when `cond` is false.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

/// Fails the check when the two values differ, saying what they were.
macro_rules! ensure_eq {
    ($a:expr, $b:expr $(,)?) => {{
        let (a, b) = (&$a, &$b);
        if a != b {
            return Err(format!("{} != {}: {:?} vs {:?}", stringify!($a), stringify!($b), a, b));
        }
    }};
    ($a:expr, $b:expr, $($arg:tt)+) => {{
        let (a, b) = (&$a, &$b);
        if a != b {
            return Err(format!("{}: {:?} vs {:?}", format!($($arg)+), a, b));
        }
    }};
}

/// Where every pod ends up: node name, zone, capacity type (running pods included).
struct Placement<'a> {
    on_node: Vec<(&'a Pod, String, String, Option<CapacityType>)>,
}

fn placement<'a>(s: &'a Snapshot, plan: &Plan) -> Placement<'a> {
    let by_key: HashMap<String, &Pod> = s.pods.iter().map(|p| (p.key(), p)).collect();
    let zone_of: HashMap<&str, &str> = s
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.labels[labels::ZONE].as_str()))
        .collect();
    let mut on_node = Vec::new();
    for p in &s.pods {
        if let Some(n) = &p.node_name {
            on_node.push((p, n.clone(), zone_of[n.as_str()].to_string(), None));
        }
    }
    for e in &plan.existing_nodes {
        for k in &e.pods {
            on_node.push((
                by_key[k],
                e.name.clone(),
                zone_of[e.name.as_str()].to_string(),
                None,
            ));
        }
    }
    for n in &plan.new_nodes {
        for k in &n.pods {
            on_node.push((
                by_key[k],
                n.name.clone(),
                n.zone.clone(),
                Some(n.capacity_type),
            ));
        }
    }
    Placement { on_node }
}

/// Checks every hard constraint of `s`'s pods against where `plan` puts them: each pending
/// pod placed or reported once, node capacity, required (anti-)affinity on hostname and zone,
/// hostname groups on one node, host ports, hard spreads within maxSkew, on-demand
/// requirements. The error says which pod broke what.
pub fn check(s: &Snapshot, plan: &Plan) -> Result<(), String> {
    let pl = placement(s, plan);
    // Conservation.
    let pending: BTreeSet<String> = s
        .pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .map(Pod::key)
        .collect();
    let mut seen: Vec<String> = pl
        .on_node
        .iter()
        .filter(|(p, ..)| p.node_name.is_none())
        .map(|(p, ..)| p.key())
        .chain(plan.unschedulable.iter().map(|u| u.pod.clone()))
        .collect();
    seen.sort();
    ensure_eq!(seen.clone(), pending.iter().cloned().collect::<Vec<_>>());

    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    let mut by_zone: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for (p, n, z, _) in &pl.on_node {
        by_node.entry(n.as_str()).or_default().push(p);
        by_zone.entry(z.as_str()).or_default().push(p);
    }
    let placed_new: Vec<&(&Pod, String, String, Option<CapacityType>)> = pl
        .on_node
        .iter()
        .filter(|(p, ..)| p.node_name.is_none())
        .collect();

    for (node, ps) in &by_node {
        // Host ports.
        let mut bound: Vec<(PortKey, String)> = Vec::new();
        for p in ps {
            for hp in &p.host_ports {
                let k = PortKey::of(hp);
                if let Some((_, other)) = bound.iter().find(|(b, _)| b.clashes(&k)) {
                    ensure!(
                        false,
                        "{node}: {} and {other} both bind {}",
                        p.key(),
                        k.describe()
                    );
                }
                bound.push((k, p.key()));
            }
        }
        // Hostname anti-affinity, both directions (any pod's term against every other pod).
        for p in ps {
            for a in p
                .affinity
                .iter()
                .filter(|a| a.anti && a.topology_key == labels::HOSTNAME)
            {
                let scope = Scope::of_term(p, a);
                for q in ps {
                    if q.key() != p.key()
                        && scope.matches(q)
                        && (p.node_name.is_none() || q.node_name.is_none())
                    {
                        ensure!(false, "{node}: {} repels {}", p.key(), q.key());
                    }
                }
            }
        }
        // Hostname spread: the node holds at most maxSkew matching pods once a constrained
        // pending pod is there (the minimum over nodes is zero: a new node can always be made).
        for p in ps.iter().filter(|p| p.node_name.is_none()) {
            for t in p
                .topology_spread
                .iter()
                .filter(|t| t.hard && t.topology_key == labels::HOSTNAME)
            {
                let scope = Scope::of_spread(p, t);
                let n = ps.iter().filter(|q| scope.matches(q)).count() as i64;
                let before = ps
                    .iter()
                    .filter(|q| q.node_name.is_some() && scope.matches(q))
                    .count() as i64;
                ensure!(
                    n <= i64::from(t.max_skew).max(before),
                    "{node}: {n} pods of {} over maxSkew {}",
                    p.key(),
                    t.max_skew
                );
            }
        }
    }
    // Hostname pod affinity: a pod is next to a pod it selects, or its self-affine group shares
    // one node.
    let mut group_node: HashMap<String, &str> = HashMap::new();
    for (p, node, _, _) in &placed_new {
        for a in p
            .affinity
            .iter()
            .filter(|a| !a.anti && a.topology_key == labels::HOSTNAME)
        {
            let scope = Scope::of_term(p, a);
            let near = by_node[node.as_str()]
                .iter()
                .any(|q| q.key() != p.key() && scope.matches(q));
            let owner = p.owner.as_ref().map(|o| o.name.clone()).unwrap_or_default();
            // Pods of another Deployment that run or are placed by the plan match: the pod
            // follows them and must share a node with one. (A matching pod left unschedulable
            // is on no node; as for the kube-scheduler, it does not count.)
            if pl
                .on_node
                .iter()
                .any(|(q, ..)| scope.matches(q) && q.owner != p.owner)
            {
                ensure!(
                    near,
                    "{} on {} shares no node with a pod its hostname affinity selects",
                    p.key(),
                    node
                );
                continue;
            }
            let first = *group_node.entry(owner.clone()).or_insert(node.as_str());
            ensure!(
                near || (scope.matches(p) && first == node.as_str()),
                "{} on {} is away from the pods its hostname affinity selects",
                p.key(),
                node
            );
            // With no running partner the group bootstrapped one node and must all be on it.
            if !s
                .pods
                .iter()
                .any(|q| q.node_name.is_some() && scope.matches(q))
            {
                ensure_eq!(first, node.as_str(), "group {} split across nodes", owner);
            }
        }
    }
    for (p, node, zone, ct) in &placed_new {
        // Zone anti-affinity.
        for a in p
            .affinity
            .iter()
            .filter(|a| a.weight.is_none() && a.topology_key == labels::ZONE)
        {
            let scope = Scope::of_term(p, a);
            let others = by_zone[zone.as_str()]
                .iter()
                .filter(|q| q.key() != p.key() && scope.matches(q))
                .count();
            if a.anti {
                ensure_eq!(
                    others,
                    0,
                    "{} in {} with {} pods it repels",
                    p.key(),
                    zone,
                    others
                );
            } else {
                // A self-affine group may bootstrap a zone with its own pods.
                ensure!(
                    others > 0 || scope.matches(p),
                    "{} in {} away from its affinity",
                    p.key(),
                    zone
                );
            }
        }
        // Zone spread: a zone that received a constrained pod is within maxSkew of the least
        // populated zone.
        for t in p
            .topology_spread
            .iter()
            .filter(|t| t.hard && t.topology_key == labels::ZONE)
        {
            let scope = Scope::of_spread(p, t);
            let count = |z: &str| {
                by_zone
                    .get(z)
                    .map_or(0, |ps| ps.iter().filter(|q| scope.matches(q)).count())
                    as i64
            };
            let min = ZONES.iter().map(|z| count(z)).min().unwrap_or(0);
            ensure!(
                count(zone) - min <= i64::from(t.max_skew),
                "{} makes {} skewed: {} vs min {}",
                p.key(),
                zone,
                count(zone),
                min
            );
        }
        // Capacity type.
        let wants_od = p.node_terms.iter().all(|t| {
            t.get(labels::CAPACITY_TYPE)
                .is_some_and(|r| !r.allows("spot"))
        }) && !p.node_terms.is_empty();
        if wants_od {
            ensure!(
                *ct != Some(CapacityType::Spot),
                "{} requires on-demand but is on spot node {}",
                p.key(),
                node
            );
        }
    }
    Ok(())
}
