//! Which of the cluster's nodes disruption may act on, and for every other node why not.
//!
//! A candidate is a node joiner launched (its Provisioner exists), initialized, not opted out
//! (node annotation), whose pods neither opt out (`do-not-disrupt` annotations) nor are held
//! by a PodDisruptionBudget that allows no eviction, and whose offering has a price. The words
//! of each refusal are what `joiner plan --consolidate` prints and the controller's Events say.

use std::collections::HashMap;

use crate::instance_type::{CapacityType, InstanceType};
use crate::labels;
use crate::pod::{Node, Pod};
use crate::pod_labels::PodLabels;
use crate::snapshot::Snapshot;

use super::cost::{node_cost, reschedule_cost};
use super::DisruptionSettings;

/// A node disruption may act on.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Index into the snapshot's nodes.
    pub node: usize,
    /// Its Provisioner.
    pub provisioner: String,
    /// Its instance type, zone and capacity type (from its labels).
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// $/h of its offering.
    pub price: f64,
    /// The pods a disruption would move (indices into the snapshot's pods): not DaemonSet
    /// or mirror pods, which go with the node.
    pub pods: Vec<usize>,
    /// What moving them costs, weighed by the lifetime left ([`node_cost`]). Consolidation
    /// tries candidates by savings ratio instead (`price / disruption`, Karpenter's order).
    pub cost: f64,
    /// What moving them costs ([`reschedule_cost`]): what a move's score divides by, as
    /// Karpenter's Balanced does.
    pub disruption: f64,
    /// False for an initialized node that is not Ready now: only expiration acts on it (it
    /// takes no moved pods, and its pods may be lost already; Karpenter expires it too).
    pub ready: bool,
    /// Why the node has no price (a label missing, a type or offering the catalog lacks):
    /// consolidation, which weighs prices, leaves it alone, while drift and expiration,
    /// which do not, still replace it, as Karpenter's do (`price` is then 0).
    pub unpriced: Option<String>,
}

/// Every node, in the snapshot's order, as a candidate or with the reason it stays.
pub fn candidates(
    snapshot: &Snapshot,
    catalog: &[InstanceType],
    settings: &dyn Fn(&str) -> Option<DisruptionSettings>,
    now: i64,
) -> Vec<Result<Candidate, String>> {
    let mut on_node: HashMap<&str, Vec<usize>> = Default::default();
    for (i, p) in snapshot.pods.iter().enumerate() {
        if let Some(n) = &p.node_name {
            on_node.entry(n.as_str()).or_default().push(i);
        }
    }
    let mut look = Lookups {
        prices: Prices::new(catalog),
        covering: HashMap::new(),
    };
    snapshot
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let pods = on_node.get(node.name.as_str()).cloned().unwrap_or_default();
            candidate(snapshot, &mut look, settings, now, i, node, pods)
        })
        .collect()
}

/// What `candidates` looks up for every node, built once: prices by type, and which
/// PodDisruptionBudgets cover pods of a namespace and label set (the pods of a workload share
/// both, so the budgets are matched once per workload, not once per pod).
struct Lookups<'a> {
    prices: Prices<'a>,
    covering: HashMap<(&'a str, &'a PodLabels), Vec<usize>>,
}

/// The catalog by instance type name, to price nodes without a scan of the catalog each.
pub struct Prices<'a> {
    by_name: HashMap<&'a str, &'a InstanceType>,
}

impl<'a> Prices<'a> {
    /// Indexes `catalog`.
    pub fn new(catalog: &'a [InstanceType]) -> Self {
        Prices {
            by_name: catalog.iter().map(|t| (t.name.as_str(), t)).collect(),
        }
    }

    /// The offering `node` runs on, or why it cannot be priced.
    pub fn offered(&self, node: &Node) -> Result<Offered, String> {
        let label = |k: &str| node.labels.get(k).cloned();
        let (Some(instance_type), Some(zone), Some(capacity_type)) = (
            label(labels::INSTANCE_TYPE),
            label(labels::ZONE),
            label(labels::CAPACITY_TYPE).and_then(|c| CapacityType::parse(&c)),
        ) else {
            return Err("its instance type, zone or capacity type label is missing".into());
        };
        let price = self
            .by_name
            .get(instance_type.as_str())
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| o.zone == zone && o.capacity_type == capacity_type)
            })
            .map(|o| o.price)
            .ok_or_else(|| {
                format!("{instance_type} ({capacity_type} in {zone}) has no price in the catalog")
            })?;
        Ok(Offered {
            instance_type,
            zone,
            capacity_type,
            price,
        })
    }
}

/// What a node runs as: its type, zone and capacity type (from its labels) and their price.
#[derive(Clone, Debug, PartialEq)]
pub struct Offered {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// $/h of the offering in the catalog.
    pub price: f64,
}

/// What a node without a price runs as, as far as its labels say (the type, zone and
/// capacity type it has; empty, or on-demand, where a label is missing), at no price.
fn unpriced_offer(node: &Node) -> Offered {
    let label = |k: &str| node.labels.get(k).cloned().unwrap_or_default();
    Offered {
        instance_type: label(labels::INSTANCE_TYPE),
        zone: label(labels::ZONE),
        capacity_type: CapacityType::parse(&label(labels::CAPACITY_TYPE))
            .unwrap_or(CapacityType::OnDemand),
        price: 0.0,
    }
}

/// True for pods that leave with their node: DaemonSet pods, mirror (static) pods, and pods
/// already being deleted that nothing recreates in their place ([`Pod::is_going`]). They need
/// no room elsewhere and cost nothing to move.
pub fn leaves_with_node(pod: &Pod) -> bool {
    pod.is_daemon() || pod.owner.as_ref().is_some_and(|o| o.kind == "Node") || pod.is_going()
}

/// Why `pod`'s PodDisruptionBudgets keep its node: several cover it (the Eviction API
/// refuses such a pod), or the one covering it allows no eviction now.
fn pdb_refusal<'a>(snapshot: &'a Snapshot, look: &mut Lookups<'a>, pod: &'a Pod) -> Option<String> {
    let covering = look
        .covering
        .entry((pod.namespace.as_str(), &pod.labels))
        .or_insert_with(|| {
            snapshot
                .pdbs
                .iter()
                .enumerate()
                .filter(|(_, b)| b.covers(pod))
                .map(|(j, _)| j)
                .collect()
        });
    if covering.len() > 1 {
        let names: Vec<String> = covering
            .iter()
            .map(|&j| format!("{}/{}", snapshot.pdbs[j].namespace, snapshot.pdbs[j].name))
            .collect();
        return Some(format!(
            "pod {} is covered by several PodDisruptionBudgets ({}), which the Eviction API refuses",
            pod.key(),
            names.join(", ")
        ));
    }
    if let Some(pdb) = covering
        .first()
        .map(|&j| &snapshot.pdbs[j])
        .filter(|b| b.blocks(pod))
    {
        return Some(format!(
            "PodDisruptionBudget {}/{} allows no eviction of pod {}",
            pdb.namespace,
            pdb.name,
            pod.key()
        ));
    }
    None
}

fn candidate<'a>(
    snapshot: &'a Snapshot,
    look: &mut Lookups<'a>,
    settings: &dyn Fn(&str) -> Option<DisruptionSettings>,
    now: i64,
    index: usize,
    node: &'a Node,
    pods: Vec<usize>,
) -> Result<Candidate, String> {
    let provisioner = node
        .provisioner()
        .ok_or_else(|| "not launched by joiner".to_string())?;
    let settings = settings(provisioner)
        .ok_or_else(|| format!("its Provisioner {provisioner} does not exist"))?;
    if let Some(why) = &node.life.not_disruptable {
        return Err(why.clone());
    }
    if !node.life.initialized {
        return Err("not initialized yet".into());
    }
    // Someone else is taking it out (a cordon, a drain, a deletion): its pods are leaving,
    // and no decision of joiner's should count on it or race them.
    if node.unschedulable {
        return Err("cordoned or being deleted".into());
    }
    if let Some(a) = &node.life.do_not_disrupt {
        return Err(format!("the node is annotated {a}"));
    }
    // An opt-out holds on any pod that stays until the node goes, DaemonSet and mirror pods
    // included (Karpenter's rule); a pod already being deleted no longer has a say.
    if let Some(pod) = pods
        .iter()
        .map(|&i| &snapshot.pods[i])
        .find(|p| !p.disruption.terminating && p.disruption.protects(now))
    {
        let a = pod.disruption.do_not_disrupt.as_deref().unwrap_or_default();
        return Err(format!("pod {} is annotated {a}", pod.key()));
    }
    // A PodDisruptionBudget that allows no eviction of a DaemonSet pod keeps the node, as
    // Karpenter keeps it (its drain would evict that pod last; joiner's leaves it, but the
    // budget's owner said the pod must not go).
    for pod in pods
        .iter()
        .map(|&i| &snapshot.pods[i])
        .filter(|p| p.is_daemon() && !p.disruption.terminating)
    {
        if let Some(why) = pdb_refusal(snapshot, look, pod) {
            return Err(why);
        }
    }
    let movable: Vec<usize> = pods
        .into_iter()
        .filter(|&i| !leaves_with_node(&snapshot.pods[i]))
        .collect();
    for &i in &movable {
        let pod = &snapshot.pods[i];
        if let Some(claim) = &pod.disruption.nominated {
            // A reservation is named `<pod>@<claim>`: the message names the pod.
            let name = pod.name.split('@').next().unwrap_or(&pod.name);
            return Err(format!(
                "pod {}/{name} is on its way to it (nominated to NodeClaim {claim})",
                pod.namespace
            ));
        }
        if let Some(why) = pdb_refusal(snapshot, look, pod) {
            return Err(why);
        }
    }
    let (
        Offered {
            instance_type,
            zone,
            capacity_type,
            price,
        },
        unpriced,
    ) = match look.prices.offered(node) {
        Ok(offered) => (offered, None),
        Err(why) => (unpriced_offer(node), Some(why)),
    };
    let cost = node_cost(
        movable.iter().map(|&i| &snapshot.pods[i]),
        node.life.created_at,
        settings.expire_after,
        now,
    );
    let disruption = reschedule_cost(movable.iter().map(|&i| &snapshot.pods[i]));
    Ok(Candidate {
        node: index,
        provisioner: provisioner.to_string(),
        instance_type,
        zone,
        capacity_type,
        price,
        pods: movable,
        cost,
        disruption,
        ready: !node.life.not_ready,
        unpriced,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::disruption::Pdb;
    use crate::pod::Owner;
    use crate::requirements::{Requirement, Requirements};
    use crate::testing::catalog::catalog;

    fn node(name: &str, provisioner: Option<&str>, itype: &str) -> Node {
        let mut labels = BTreeMap::from([
            (labels::INSTANCE_TYPE.to_string(), itype.to_string()),
            (labels::ZONE.to_string(), "z-a".to_string()),
            (labels::CAPACITY_TYPE.to_string(), "on-demand".to_string()),
        ]);
        if let Some(p) = provisioner {
            labels.insert(labels::PROVISIONER_NAME.to_string(), p.to_string());
        }
        let mut n = Node {
            name: name.into(),
            labels,
            ..Node::default()
        };
        n.life.initialized = true;
        n.life.created_at = Some(0);
        n
    }

    fn pod(name: &str, on: &str) -> Pod {
        let mut p = Pod {
            namespace: "default".into(),
            name: name.into(),
            node_name: Some(on.into()),
            ..Pod::default()
        };
        p.labels.insert("app".into(), name.into());
        p
    }

    fn settings(name: &str) -> Option<DisruptionSettings> {
        (name == "default").then(DisruptionSettings::default)
    }

    #[test]
    fn every_node_is_a_candidate_or_says_why_not() {
        let mut new = node("new", Some("default"), "m5.large");
        new.life.initialized = false;
        let mut opted_out = node("opted-out", Some("default"), "m5.large");
        opted_out.life.do_not_disrupt = Some("joiner.sh/do-not-disrupt".into());
        let mut keep = pod("batch", "dnd");
        keep.disruption.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
        let mut daemon = pod("logs", "ok");
        daemon.owner = Some(Owner {
            kind: "DaemonSet".into(),
            name: "logs".into(),
        });
        let mut db_sel = Requirements::new();
        db_sel.add("app", Requirement::single("db"));
        let s = Snapshot {
            nodes: vec![
                node("foreign", None, "m5.large"),
                node("orphan", Some("gone"), "m5.large"),
                new,
                opted_out,
                node("dnd", Some("default"), "m5.large"),
                node("guarded", Some("default"), "m5.large"),
                node("unpriced", Some("default"), "z9.huge"),
                node("ok", Some("default"), "m5.large"),
            ],
            pods: vec![keep, pod("db", "guarded"), daemon, pod("web", "ok")],
            pdbs: vec![Pdb {
                namespace: "default".into(),
                name: "db".into(),
                selector: Some(db_sel),
                disruptions_allowed: 0,
                always_allow_unhealthy: false,
            }],
            ..Snapshot::default()
        };
        let out = candidates(&s, &catalog(), &settings, 3_600);
        let why: Vec<String> = out
            .iter()
            .map(|r| match r {
                Ok(c) => format!("candidate {} moving {}", c.instance_type, c.pods.len()),
                Err(e) => e.clone(),
            })
            .collect();
        assert_eq!(
            why,
            [
                "not launched by joiner",
                "its Provisioner gone does not exist",
                "not initialized yet",
                "the node is annotated joiner.sh/do-not-disrupt",
                "pod default/batch is annotated karpenter.sh/do-not-disrupt",
                "PodDisruptionBudget default/db allows no eviction of pod default/db",
                "candidate z9.huge moving 0",
                "candidate m5.large moving 1",
            ]
        );
        let unpriced = out[6].as_ref().expect("candidate");
        assert_eq!(
            unpriced.unpriced.as_deref(),
            Some("z9.huge (on-demand in z-a) has no price in the catalog")
        );
        let ok = out[7].as_ref().expect("candidate");
        assert_eq!(ok.price, 0.096, "m5.large on-demand");
        assert_eq!(
            ok.cost, 2.0,
            "one pod plus the node; the DaemonSet pod goes with it"
        );
    }

    #[test]
    fn a_pdb_allowing_no_eviction_of_a_daemonset_pod_keeps_its_node() {
        // Karpenter's suite: "should not consider candidates that have fully blocking PDBs on
        // daemonset pods".
        let mut daemon = pod("logs", "n");
        daemon.owner = Some(Owner {
            kind: "DaemonSet".into(),
            name: "logs".into(),
        });
        let mut sel = Requirements::new();
        sel.add("app", Requirement::single("logs"));
        let pdb = |allowed| Pdb {
            namespace: "default".into(),
            name: "logs".into(),
            selector: Some(sel.clone()),
            disruptions_allowed: allowed,
            always_allow_unhealthy: false,
        };
        let mut s = Snapshot {
            nodes: vec![node("n", Some("default"), "m5.large")],
            pods: vec![daemon, pod("web", "n")],
            pdbs: vec![pdb(0)],
            ..Snapshot::default()
        };
        let out = candidates(&s, &catalog(), &settings, 3_600);
        assert_eq!(
            out[0].as_ref().err().map(String::as_str),
            Some("PodDisruptionBudget default/logs allows no eviction of pod default/logs")
        );
        s.pdbs = vec![pdb(1)];
        let out = candidates(&s, &catalog(), &settings, 3_600);
        let c = out[0]
            .as_ref()
            .expect("candidate once the budget allows one");
        assert_eq!(
            c.pods.len(),
            1,
            "the DaemonSet pod still goes with the node"
        );
    }

    #[test]
    fn a_node_a_pod_is_on_its_way_to_is_no_candidate() {
        // A pending pod held on a node just initialized, and a reservation for a pod leaving
        // an interrupted node: both name the pod.
        let mut coming = pod("web", "fresh");
        coming.disruption.nominated = Some("default-abcde".into());
        let mut held = pod("db@default-fghij", "held");
        held.disruption.nominated = Some("default-fghij".into());
        let s = Snapshot {
            nodes: vec![
                node("fresh", Some("default"), "m5.large"),
                node("held", Some("default"), "m5.large"),
            ],
            pods: vec![coming, held],
            ..Snapshot::default()
        };
        let why: Vec<String> = candidates(&s, &catalog(), &settings, 3_600)
            .into_iter()
            .map(|r| r.err().unwrap_or_default())
            .collect();
        assert_eq!(
            why,
            [
                "pod default/web is on its way to it (nominated to NodeClaim default-abcde)",
                "pod default/db is on its way to it (nominated to NodeClaim default-fghij)",
            ]
        );
    }

    #[test]
    fn a_pod_two_budgets_cover_keeps_its_node() {
        let pdb = |name: &str| Pdb {
            namespace: "default".into(),
            name: name.into(),
            selector: Some(Requirements::new()),
            disruptions_allowed: 5,
            always_allow_unhealthy: false,
        };
        let s = Snapshot {
            nodes: vec![node("n", Some("default"), "m5.large")],
            pods: vec![pod("web", "n")],
            pdbs: vec![pdb("a"), pdb("b")],
            ..Snapshot::default()
        };
        let out = candidates(&s, &catalog(), &settings, 0);
        assert_eq!(
            out[0].as_ref().expect_err("kept"),
            "pod default/web is covered by several PodDisruptionBudgets (default/a, default/b), which the Eviction API refuses"
        );
    }
}
