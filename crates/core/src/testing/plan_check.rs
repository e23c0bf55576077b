//! A checker of hard scheduling constraints for tests: where a plan puts every pod, and
//! whether that breaks a constraint the kube-scheduler enforces. Property tests of the core
//! simulation and tests of the benchmark workloads (joiner-bench) use the same checker.
//!
//! It rebuilds every node's labels (an existing node's own; a new node's from its instance
//! type, its Provisioner, its zone, capacity type and name) and every pod's place, and tests
//! each rule on any topology key with its own reading of the terms (namespaces and
//! namespaceSelector included), not with the simulation's counters.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::instance_type::{CapacityType, InstanceType};
use crate::labels;
use crate::pod::{Pod, PodAffinityTerm, TopologySpread};
use crate::provisioner::Provisioner;
use crate::scheduling::ports::PortKey;
use crate::scheduling::Plan;
use crate::snapshot::Snapshot;

/// The label every namespace carries with its own name.
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

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

type Labels = BTreeMap<String, String>;

/// Every node of the final cluster with its labels, and every pod with its node.
struct Cluster<'a> {
    snapshot: &'a Snapshot,
    node_labels: HashMap<String, Labels>,
    /// Taints of each node (a new node's are its Provisioner's).
    node_taints: HashMap<String, Vec<crate::taints::Taint>>,
    /// (pod, node name, capacity type of a new node).
    placed: Vec<(&'a Pod, String, Option<CapacityType>)>,
    provisioners: Vec<Provisioner>,
    types: &'a [InstanceType],
    domains: SpreadDomains,
}

/// Which domains a hard spread's minimum is taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpreadDomains {
    /// The values of the final cluster's nodes the spread counts, and every value a
    /// Provisioner could launch a node with for the pod, empty or not (Karpenter's reading,
    /// stricter than the kube-scheduler's: a domain no node ends up in still holds the
    /// minimum at zero).
    Launchable,
    /// Only the values of the final cluster's nodes the spread counts: what the
    /// kube-scheduler sees once the plan's nodes exist.
    FinalCluster,
}

impl<'a> Cluster<'a> {
    fn new(
        s: &'a Snapshot,
        types: &'a [InstanceType],
        plan: &Plan,
        domains: SpreadDomains,
    ) -> Result<Self, String> {
        let by_key: HashMap<String, &Pod> = s.pods.iter().map(|p| (p.key(), p)).collect();
        let provisioners = if s.provisioners.is_empty() {
            vec![Provisioner::default_provisioner()]
        } else {
            s.provisioners.clone()
        };
        let mut node_labels = HashMap::new();
        let mut node_taints = HashMap::new();
        for n in &s.nodes {
            node_taints.insert(n.name.clone(), n.taints.clone());
            let mut l = n.labels.clone();
            l.entry(labels::HOSTNAME.to_string())
                .or_insert_with(|| n.name.clone());
            node_labels.insert(n.name.clone(), l);
        }
        for n in &plan.new_nodes {
            let t = types
                .iter()
                .find(|t| t.name == n.instance_type)
                .ok_or_else(|| format!("{}: unknown instance type {}", n.name, n.instance_type))?;
            let mut l = t.labels.clone();
            if let Some(p) = provisioners.iter().find(|p| p.name == n.provisioner) {
                l.extend(p.labels.clone());
                node_taints.insert(n.name.clone(), p.taints.clone());
            }
            // Single-value requirements become labels (the claim sets them on its node).
            for (k, r) in n.requirements.iter() {
                if let Some(v) = r.single_value() {
                    l.insert(k.clone(), v.to_string());
                }
            }
            l.insert(labels::ZONE.into(), n.zone.clone());
            l.insert(
                labels::CAPACITY_TYPE.into(),
                n.capacity_type.as_str().into(),
            );
            l.insert(labels::HOSTNAME.into(), n.name.clone());
            l.insert(labels::PROVISIONER_NAME.into(), n.provisioner.clone());
            node_labels.insert(n.name.clone(), l);
        }
        let mut placed = Vec::new();
        for p in &s.pods {
            if let Some(n) = &p.node_name {
                ensure!(
                    node_labels.contains_key(n),
                    "{} runs on {n}, not in the snapshot",
                    p.key()
                );
                placed.push((p, n.clone(), None));
            }
        }
        for e in &plan.existing_nodes {
            for k in &e.pods {
                placed.push((by_key[k], e.name.clone(), None));
            }
        }
        for n in &plan.new_nodes {
            for k in &n.pods {
                placed.push((by_key[k], n.name.clone(), Some(n.capacity_type)));
            }
        }
        Ok(Cluster {
            snapshot: s,
            node_labels,
            node_taints,
            placed,
            provisioners,
            types,
            domains,
        })
    }

    fn value(&self, node: &str, key: &str) -> Option<&str> {
        self.node_labels[node].get(key).map(String::as_str)
    }

    /// The pods on nodes whose `key` is `value`.
    fn in_domain<'s>(&'s self, key: &'s str, value: &str) -> impl Iterator<Item = &'a Pod> + 's {
        let value = value.to_string();
        self.placed
            .iter()
            .filter(move |(_, n, _)| self.value(n, key) == Some(value.as_str()))
            .map(|(p, ..)| *p)
    }

    /// True when `owner`'s term selects `q`: its labels, within the namespaces the term
    /// names or selects (the owner's own when it names and selects none).
    fn term_selects(&self, owner: &Pod, term: &PodAffinityTerm, q: &Pod) -> bool {
        if !term.selector.matches_labels(&q.labels) {
            return false;
        }
        if let Some(sel) = &term.namespace_selector {
            let mut l = self
                .snapshot
                .namespace_labels
                .get(&q.namespace)
                .cloned()
                .unwrap_or_default();
            l.insert(NAMESPACE_NAME.into(), q.namespace.clone());
            if sel.matches_labels(&l) {
                return true;
            }
        } else if term.namespaces.is_empty() {
            return q.namespace == owner.namespace;
        }
        term.namespaces.contains(&q.namespace)
    }

    /// True when spread `t` of `p` counts the pods on `node`, as the kube-scheduler's node
    /// inclusion policies say: with `nodeAffinityPolicy: Honor` (the default) only nodes the
    /// pod's own node terms select, with `nodeTaintsPolicy: Honor` only nodes whose taints it
    /// tolerates (the default, Ignore, counts tainted nodes).
    fn spread_counts_on(&self, p: &Pod, t: &TopologySpread, node: &str) -> bool {
        let terms = p.own_node_terms.as_ref().unwrap_or(&p.node_terms);
        let Some(l) = self.node_labels.get(node) else {
            return false;
        };
        let selected =
            !t.honor_node_affinity || terms.is_empty() || terms.iter().any(|t| t.matches_labels(l));
        let tolerated = !t.honor_node_taints
            || self.node_taints.get(node).is_none_or(|taints| {
                crate::taints::first_untolerated(taints, &p.tolerations).is_none()
            });
        selected && tolerated
    }

    /// The domains a spread `t` of `p` counts: values on the nodes of the final cluster it
    /// counts (full or not, see [`Cluster::spread_counts_on`]), and, read as
    /// [`SpreadDomains::Launchable`], values a Provisioner can give a node for it (for a key
    /// the instance types carry, one of an allowed type that holds the pod).
    fn spread_domains(&self, p: &Pod, t: &TopologySpread) -> BTreeSet<String> {
        let key = t.topology_key.as_str();
        let terms = p.own_node_terms.as_ref().unwrap_or(&p.node_terms);
        let mut out: BTreeSet<String> = self
            .node_labels
            .iter()
            .filter(|(n, _)| self.spread_counts_on(p, t, n))
            .filter_map(|(_, l)| l.get(key).cloned())
            .collect();
        if self.domains == SpreadDomains::FinalCluster {
            return out;
        }
        let admits = |v: &str| {
            terms.is_empty() || terms.iter().any(|t| t.get(key).is_none_or(|r| r.allows(v)))
        };
        let mut launchable: BTreeSet<String> = BTreeSet::new();
        for prov in &self.provisioners {
            let req = prov.node_requirements();
            let offered: Vec<String> = match key {
                labels::ZONE => self
                    .types
                    .iter()
                    .flat_map(|t| t.offerings.iter().map(|o| o.zone.clone()))
                    .collect(),
                labels::CAPACITY_TYPE => ["spot", "on-demand"].map(String::from).to_vec(),
                _ => req
                    .get(key)
                    .and_then(|r| r.in_values())
                    .map(<[String]>::to_vec)
                    .unwrap_or_default(),
            };
            launchable.extend(
                offered
                    .into_iter()
                    .filter(|v| req.get(key).is_none_or(|r| r.allows(v)) && admits(v)),
            );
        }
        // A value the instance types carry (instance type, architecture) that no node has yet
        // is a domain only when a type carrying it can hold the pod: only then could a node be
        // launched there for it. A node of a type too small for the pod counts all the same.
        launchable.retain(|v| {
            let carriers: Vec<&InstanceType> = self
                .types
                .iter()
                .filter(|t| t.labels.get(key).map(String::as_str) == Some(v.as_str()))
                .collect();
            carriers.is_empty() || carriers.iter().any(|t| p.requests.fits(&t.allocatable))
        });
        out.extend(launchable);
        out
    }
}

/// Checks every hard constraint of `s`'s pods against where `plan` puts them, on the
/// instance types `types` the plan was made from: each pending pod placed or reported once,
/// node terms, host ports, volume attach caps, required (anti-)affinity (both directions) and hard spreads on
/// every topology key, hostname groups on one node, on-demand requirements. The error says
/// which pod broke what.
pub fn check(s: &Snapshot, types: &[InstanceType], plan: &Plan) -> Result<(), String> {
    check_with(s, types, plan, SpreadDomains::Launchable)
}

/// [`check`], with the spreads' domains read as `domains` says.
pub fn check_with(
    s: &Snapshot,
    types: &[InstanceType],
    plan: &Plan,
    domains: SpreadDomains,
) -> Result<(), String> {
    let c = Cluster::new(s, types, plan, domains)?;
    // Conservation.
    let pending: BTreeSet<String> = s
        .pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .map(Pod::key)
        .collect();
    let mut seen: Vec<String> = c
        .placed
        .iter()
        .filter(|(p, ..)| p.node_name.is_none())
        .map(|(p, ..)| p.key())
        .chain(plan.unschedulable.iter().map(|u| u.pod.clone()))
        .collect();
    seen.sort();
    ensure_eq!(seen.clone(), pending.iter().cloned().collect::<Vec<_>>());

    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for (p, n, _) in &c.placed {
        by_node.entry(n.as_str()).or_default().push(p);
    }
    for (node, ps) in &by_node {
        check_ports(node, ps)?;
        if let Some(n) = s.nodes.iter().find(|n| n.name == *node) {
            check_volume_limits(n, ps)?;
        }
    }
    check_hostname_groups(&c, &by_node)?;
    check_bootstraps(&c)?;
    for (p, node, ct) in c.placed.iter().filter(|(p, ..)| p.node_name.is_none()) {
        let l = &c.node_labels[node.as_str()];
        ensure!(
            p.node_terms.is_empty() || p.node_terms.iter().any(|t| t.matches_labels(l)),
            "{} on {node} whose labels its node terms refuse",
            p.key()
        );
        check_terms(&c, p, node)?;
        for t in p.topology_spread.iter().filter(|t| t.hard) {
            check_spread(&c, p, node, t)?;
        }
        let wants_od = !p.node_terms.is_empty()
            && p.node_terms.iter().all(|t| {
                t.get(labels::CAPACITY_TYPE)
                    .is_some_and(|r| !r.allows("spot"))
            });
        ensure!(
            !(wants_od && *ct == Some(CapacityType::Spot)),
            "{} requires on-demand but is on spot node {node}",
            p.key()
        );
    }
    Ok(())
}

fn check_ports(node: &str, ps: &[&Pod]) -> Result<(), String> {
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
    Ok(())
}

/// An existing node's CSI attach caps: the distinct claims of each capped driver stay within
/// the cap once a new pod adds one (running pods alone may be over it).
fn check_volume_limits(node: &crate::pod::Node, ps: &[&Pod]) -> Result<(), String> {
    for (driver, cap) in &node.volume_limits {
        let claims = |running: bool| -> BTreeSet<&str> {
            ps.iter()
                .filter(|p| p.node_name.is_some() == running)
                .flat_map(|p| p.attachments())
                .filter(|a| a.driver == *driver)
                .map(|a| a.claim.as_str())
                .collect()
        };
        let base = claims(true);
        let added = claims(false).difference(&base).count() as i64;
        ensure!(
            added == 0 || base.len() as i64 + added <= *cap,
            "{}: {} {driver} volumes attached, over its cap of {cap}",
            node.name,
            base.len() as i64 + added
        );
    }
    Ok(())
}

/// Required pod (anti-)affinity of a newly placed pod, on any key, and the required
/// anti-affinity of every other placed pod against it.
fn check_terms(c: &Cluster, p: &Pod, node: &str) -> Result<(), String> {
    for a in p.affinity.iter().filter(|a| a.weight.is_none()) {
        let Some(d) = c.value(node, &a.topology_key) else {
            // No domain: anti-affinity holds, affinity cannot.
            ensure!(
                a.anti,
                "{} on {node}, which has no {} for its pod affinity",
                p.key(),
                a.topology_key
            );
            continue;
        };
        let others = c
            .in_domain(&a.topology_key, d)
            .filter(|q| q.key() != p.key() && c.term_selects(p, a, q))
            .count();
        if a.anti {
            ensure_eq!(
                others,
                0,
                "{} in {}={} with pods it repels",
                p.key(),
                a.topology_key,
                d
            );
        } else if a.topology_key != labels::HOSTNAME {
            // A self-affine group may bootstrap a domain with its own pods while no running
            // pod the term selects is on a node carrying the key of any of the pod's required
            // affinity terms (the kube-scheduler's exception; hostname groups are checked
            // whole in check_hostname_groups).
            let carries_a_key = |n: &str| {
                c.node_labels.get(n).is_some_and(|l| {
                    p.affinity
                        .iter()
                        .filter(|b| !b.anti && b.weight.is_none())
                        .any(|b| l.contains_key(&b.topology_key))
                })
            };
            let runs_anywhere = c.snapshot.pods.iter().any(|q| {
                q.node_name.as_deref().is_some_and(carries_a_key)
                    && q.key() != p.key()
                    && c.term_selects(p, a, q)
            });
            ensure!(
                others > 0 || (c.term_selects(p, a, p) && !runs_anywhere),
                "{} in {}={} away from its affinity",
                p.key(),
                a.topology_key,
                d
            );
        }
    }
    // Others' anti-affinity against this pod (kube-scheduler checks existing pods' terms).
    for (q, qn, _) in &c.placed {
        if q.key() == p.key() {
            continue;
        }
        for a in q.affinity.iter().filter(|a| a.anti && a.weight.is_none()) {
            let (Some(dq), Some(dp)) =
                (c.value(qn, &a.topology_key), c.value(node, &a.topology_key))
            else {
                continue;
            };
            ensure!(
                dq != dp || !c.term_selects(q, a, p),
                "{} on {node} is in {}={dp} with {}, which repels it",
                p.key(),
                a.topology_key,
                q.key()
            );
        }
    }
    Ok(())
}

/// A hard spread of a newly placed pod: its domain within maxSkew of the least populated
/// domain (zero below minDomains) once everything is placed; on hostname, the node holds at
/// most maxSkew matching pods (a new node can always be made, so the minimum is zero).
fn check_spread(c: &Cluster, p: &Pod, node: &str, t: &TopologySpread) -> Result<(), String> {
    let counts = |q: &Pod| q.namespace == p.namespace && t.selector.matches_labels(&q.labels);
    // Only pods on the nodes the spread counts (its node inclusion policies).
    let eligible = |n: &str| c.spread_counts_on(p, t, n);
    let Some(d) = c.value(node, &t.topology_key) else {
        ensure!(
            false,
            "{} on {node}, which has no {} for its spread",
            p.key(),
            t.topology_key
        );
        return Ok(());
    };
    let count = |v: &str| {
        c.placed
            .iter()
            .filter(|(q, n, _)| c.value(n, &t.topology_key) == Some(v) && eligible(n) && counts(q))
            .count() as i64
    };
    if t.topology_key == labels::HOSTNAME {
        let before = c
            .in_domain(&t.topology_key, d)
            .filter(|q| q.node_name.is_some() && counts(q))
            .count() as i64;
        let n = count(d);
        ensure!(
            n <= i64::from(t.max_skew).max(before),
            "{node}: {n} pods of {} over maxSkew {}",
            p.key(),
            t.max_skew
        );
        return Ok(());
    }
    let domains = c.spread_domains(p, t);
    let below_min_domains = t
        .min_domains
        .is_some_and(|m| (domains.len() as i64) < i64::from(m));
    let min = if below_min_domains {
        0
    } else {
        domains.iter().map(|v| count(v)).min().unwrap_or(0)
    };
    ensure!(
        count(d) - min <= i64::from(t.max_skew),
        "{} makes {}={} skewed: {} vs min {} over {:?}",
        p.key(),
        t.topology_key,
        d,
        count(d),
        min,
        domains
    );
    Ok(())
}

/// Required pod affinity on a key other than the hostname, pods that select themselves: a
/// domain where every pod the term selects is a newly placed pod carrying the same term was
/// bootstrapped by the kube-scheduler's exception, which applies only while no pod the term
/// selects exists. So no such domain while a selected pod runs, and at most one per term (the
/// pods after the first see it and must join a domain holding a selected pod).
fn check_bootstraps(c: &Cluster) -> Result<(), String> {
    let same_term = |a: &PodAffinityTerm, b: &PodAffinityTerm| {
        a.topology_key == b.topology_key
            && a.selector == b.selector
            && a.namespaces == b.namespaces
            && a.namespace_selector == b.namespace_selector
    };
    let carries = |q: &Pod, a: &PodAffinityTerm, owner: &Pod| {
        q.node_name.is_none()
            && q.namespace == owner.namespace
            && q.affinity
                .iter()
                .any(|b| !b.anti && b.weight.is_none() && same_term(a, b))
    };
    let mut seen: Vec<(&Pod, &PodAffinityTerm, BTreeSet<&str>)> = Vec::new();
    for (p, node, _) in c.placed.iter().filter(|(p, ..)| p.node_name.is_none()) {
        for a in p
            .affinity
            .iter()
            .filter(|a| !a.anti && a.weight.is_none() && a.topology_key != labels::HOSTNAME)
        {
            if !c.term_selects(p, a, p) {
                continue;
            }
            let Some(d) = c.value(node, &a.topology_key) else {
                continue;
            };
            let bootstrapped = c
                .in_domain(&a.topology_key, d)
                .filter(|q| c.term_selects(p, a, q))
                .all(|q| carries(q, a, p));
            if !bootstrapped {
                continue;
            }
            if let Some((q, _)) = c
                .placed
                .iter()
                .map(|(q, ..)| (*q, ()))
                .find(|(q, _)| q.node_name.is_some() && c.term_selects(p, a, q))
            {
                ensure!(
                    false,
                    "{} starts {}={} alone though {} runs and its affinity selects it",
                    p.key(),
                    a.topology_key,
                    d,
                    q.key()
                );
            }
            match seen
                .iter_mut()
                .find(|(o, b, _)| o.namespace == p.namespace && same_term(a, b))
            {
                Some((_, _, domains)) => {
                    domains.insert(d);
                    ensure!(
                        domains.len() <= 1,
                        "{}: pods of one affinity term on {} started {:?} each alone",
                        p.key(),
                        a.topology_key,
                        domains
                    );
                }
                None => seen.push((p, a, BTreeSet::from([d]))),
            }
        }
    }
    Ok(())
}

/// Hostname pod affinity: a pod is next to a pod it selects, or its self-affine group shares
/// one node.
fn check_hostname_groups(c: &Cluster, by_node: &BTreeMap<&str, Vec<&Pod>>) -> Result<(), String> {
    let mut group_node: HashMap<String, &str> = HashMap::new();
    for (p, node, _) in c.placed.iter().filter(|(p, ..)| p.node_name.is_none()) {
        for a in p
            .affinity
            .iter()
            .filter(|a| !a.anti && a.weight.is_none() && a.topology_key == labels::HOSTNAME)
        {
            let near = by_node[node.as_str()]
                .iter()
                .any(|q| q.key() != p.key() && c.term_selects(p, a, q));
            let owner = p.owner.as_ref().map(|o| o.name.clone()).unwrap_or_default();
            // Pods of another workload that run or are placed by the plan match: the pod
            // follows them and must share a node with one. (A matching pod left unschedulable
            // is on no node; as for the kube-scheduler, it does not count.)
            if c.placed
                .iter()
                .any(|(q, ..)| c.term_selects(p, a, q) && q.owner != p.owner)
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
                near || (c.term_selects(p, a, p) && first == node.as_str()),
                "{} on {} is away from the pods its hostname affinity selects",
                p.key(),
                node
            );
            // With no running partner the group bootstrapped one node and must all be on it.
            if !c
                .snapshot
                .pods
                .iter()
                .any(|q| q.node_name.is_some() && c.term_selects(p, a, q))
            {
                ensure_eq!(first, node.as_str(), "group {} split across nodes", owner);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The checker itself can fail: hand-made plans that break a rule on a custom key, across
    //! namespaces and from a running pod's side are caught, and their rule-abiding twins pass.

    use super::*;
    use crate::pod::Node;
    use crate::requirements::{Requirement, Requirements};
    use crate::resources::Resources;
    use crate::scheduling::ExistingNodeUse;

    const POOL: &str = "example.com/pool";

    fn node(name: &str, zone: &str, pool: &str) -> Node {
        Node {
            name: name.into(),
            labels: BTreeMap::from([
                (labels::ZONE.to_string(), zone.to_string()),
                (POOL.to_string(), pool.to_string()),
                (labels::HOSTNAME.to_string(), name.to_string()),
            ]),
            allocatable: Resources::new(4000, 8 << 30, 0, 30),
            ..Node::default()
        }
    }

    fn pod(ns: &str, name: &str, app: &str, on: Option<&str>) -> Pod {
        let mut p = Pod {
            namespace: ns.into(),
            name: name.into(),
            node_name: on.map(String::from),
            requests: Resources::new(100, 1 << 20, 0, 1),
            ..Pod::default()
        };
        p.labels.insert("app".into(), app.into());
        p
    }

    fn app(a: &str) -> Requirements {
        let mut r = Requirements::new();
        r.add("app", Requirement::single(a));
        r
    }

    fn anti(key: &str, a: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            topology_key: key.into(),
            selector: app(a),
            namespaces: Vec::new(),
            namespace_selector: None,
            anti: true,
            weight: None,
        }
    }

    fn on(placements: &[(&str, &str)]) -> Plan {
        Plan {
            existing_nodes: placements
                .iter()
                .map(|(n, p)| ExistingNodeUse {
                    name: n.to_string(),
                    pods: vec![p.to_string()],
                })
                .collect(),
            ..Plan::default()
        }
    }

    fn snapshot(pods: Vec<Pod>) -> Snapshot {
        Snapshot {
            pods,
            nodes: vec![
                node("n1", "z-a", "x"),
                node("n2", "z-b", "x"),
                node("n3", "z-a", "y"),
            ],
            ..Snapshot::default()
        }
    }

    #[test]
    fn anti_affinity_on_a_custom_key_across_namespaces() {
        let mut a = pod("default", "a", "a", None);
        let mut term = anti(POOL, "b");
        term.namespace_selector = Some(Requirements::new());
        a.affinity.push(term);
        let s = snapshot(vec![a.clone(), pod("team", "b", "b", Some("n1"))]);
        let err = check(&s, &[], &on(&[("n2", "default/a")])).unwrap_err();
        assert!(
            err.contains("example.com/pool=x with pods it repels"),
            "{err}"
        );
        check(&s, &[], &on(&[("n3", "default/a")])).unwrap();
        // Without the selector the term looks in its own namespace only.
        a.affinity[0].namespace_selector = None;
        let s = snapshot(vec![a, pod("team", "b", "b", Some("n1"))]);
        check(&s, &[], &on(&[("n2", "default/a")])).unwrap();
    }

    #[test]
    fn a_running_pods_anti_affinity_repels_a_placed_pod() {
        let mut b = pod("default", "b", "b", Some("n1"));
        b.affinity.push(anti(labels::ZONE, "a"));
        let s = snapshot(vec![pod("default", "a", "a", None), b]);
        let err = check(&s, &[], &on(&[("n3", "default/a")])).unwrap_err();
        assert!(err.contains("which repels it"), "{err}");
        check(&s, &[], &on(&[("n2", "default/a")])).unwrap();
    }

    #[test]
    fn a_hard_spread_on_a_custom_key_is_held_to_max_skew() {
        let spread = |mut p: Pod| {
            p.topology_spread.push(TopologySpread {
                topology_key: POOL.into(),
                max_skew: 1,
                min_domains: None,
                hard: true,
                selector: app("w"),
                honor_node_affinity: true,
                honor_node_taints: false,
            });
            p
        };
        let s = snapshot(vec![
            spread(pod("default", "w1", "w", None)),
            spread(pod("default", "w2", "w", None)),
        ]);
        let err = check(&s, &[], &on(&[("n1", "default/w1"), ("n2", "default/w2")])).unwrap_err();
        assert!(
            err.contains("example.com/pool=x skewed: 2 vs min 0"),
            "{err}"
        );
        check(&s, &[], &on(&[("n1", "default/w1"), ("n3", "default/w2")])).unwrap();
    }

    #[test]
    fn a_volume_attach_cap_is_held_once_a_placed_pod_adds_a_volume() {
        let ebs = |p: &mut Pod, claim: &str| {
            p.volume_attachments = Some(Box::new(vec![crate::pod::VolumeAttachment {
                driver: "ebs.csi.aws.com".into(),
                claim: claim.into(),
            }]));
        };
        let mut running = pod("default", "r", "r", Some("n1"));
        ebs(&mut running, "default/r");
        let mut new = pod("default", "a", "a", None);
        ebs(&mut new, "default/a");
        let mut reuse = pod("default", "b", "b", None);
        ebs(&mut reuse, "default/r");
        let mut s = snapshot(vec![running, new, reuse]);
        s.nodes[0].volume_limits = [("ebs.csi.aws.com".to_string(), 1)].into();
        let err = check(&s, &[], &on(&[("n1", "default/a"), ("n2", "default/b")])).unwrap_err();
        assert!(
            err.contains("n1: 2 ebs.csi.aws.com volumes attached, over its cap of 1"),
            "{err}"
        );
        // The claim the node holds adds nothing.
        check(&s, &[], &on(&[("n2", "default/a"), ("n1", "default/b")])).unwrap();
    }

    #[test]
    fn a_pod_missing_from_the_plan_is_caught() {
        let s = snapshot(vec![pod("default", "a", "a", None)]);
        assert!(check(&s, &[], &Plan::default()).is_err());
    }
}
