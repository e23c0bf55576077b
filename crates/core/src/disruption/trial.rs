//! A trial removal: the cluster without some nodes, simulated, and what it says about the
//! pods those nodes held.
//!
//! The pending pods are simulated with the moved ones, as Karpenter's consolidation does:
//! they take the room they would take, so a move never counts on room a pending pod is about
//! to take; one that finds no place is no reason to refuse a move, and a new node only pending
//! pods need is provisioning's to buy, not a replacement. A removal is refused when a moved
//! pod has no place, or when it would land on a node that is not initialized or not Ready
//! (it may never become Ready, and the pod would be stranded: Karpenter's rule) while no
//! initialized node holds it.

use std::collections::HashSet;

use crate::instance_type::InstanceType;
use crate::scheduling::{simulate, NewNode, Options, Plan};
use crate::snapshot::Snapshot;

use super::candidates::leaves_with_node;

/// A removal the simulation accepts: where the moved pods go.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The trial's plan (pods keyed `namespace/name`): moved pods on existing nodes and on
    /// the new nodes.
    pub plan: Plan,
    /// The new nodes the moved pods need, `pod_indices` into the snapshot given to [`run`].
    pub replacements: Vec<NewNode>,
    /// $/h of the replacements.
    pub price_after: f64,
    /// Pods (`namespace/name`) that leave with the removed nodes though no DaemonSet owns
    /// them ([`run_forced`]): their volume only those nodes mount, or they must share a node
    /// with such a pod. They stay pending; the decision names them.
    pub stranded: Vec<String>,
}

/// Simulates the cluster without the nodes at `removed` (indices into `snapshot.nodes`).
///
/// The trial is made in place and undone before returning, so a planner weighing hundreds of
/// moves on a large cluster neither copies it nor moves its pods about: the removed nodes are
/// taken out; the pods that leave with them (DaemonSet and mirror pods) stay bound to them,
/// and a node the simulation does not know holds nothing; the other pods of those nodes are
/// made pending; the pending pods are set aside at the end of the list (by swapping, so only
/// as many pods move as are pending, usually none).
pub fn run(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
) -> Result<Outcome, String> {
    outcome(snapshot, catalog, opts, removed, VolumeHosts::Keep)
}

/// [`run`] for a removal the user asked for (expiration, drift) rather than a saving: a pod
/// whose volume only the removed node can mount (a local volume) does not keep the node, so
/// such a node still expires and rolls, as under Karpenter. The pod can run nowhere else (its
/// volume's node is gone), so it leaves with the node, as a DaemonSet pod does, and no node is
/// bought for it; its data on that node is given up, which is what expiring the node means.
pub fn run_forced(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
) -> Result<Outcome, String> {
    outcome(snapshot, catalog, opts, removed, VolumeHosts::Release)
}

/// The label, and value, [`run_together`] gives the pods it keeps on one node for its trial.
const TOGETHER_LABEL: &str = "joiner.sh/consolidation-trial";

/// [`run`] again after `first` put the moved pods on several new nodes: the pods it put on
/// new nodes must now share one (a required hostname pod affinity among them, for this trial
/// only), those it put on existing nodes stay there. Karpenter's consolidation replaces with
/// one node; AWS prices are linear within a family, so the packer may have split pods that
/// one node of twice the size holds for the same price. `Err` when one node cannot hold them.
pub fn run_together(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
    first: &Outcome,
) -> Result<Outcome, String> {
    // Pods by namespace and name, as `namespace/name` keys split: a large cluster's pods are
    // matched against them without a key made for each.
    fn id(key: &str) -> (&str, &str) {
        key.split_once('/').unwrap_or(("", key))
    }
    fn of(p: &crate::pod::Pod) -> (&str, &str) {
        (p.namespace.as_str(), p.name.as_str())
    }
    let on_new: foldhash::HashSet<(&str, &str)> = first
        .replacements
        .iter()
        .flat_map(|r| r.pods.iter().map(|k| id(k)))
        .collect();
    let on_existing: foldhash::HashMap<(&str, &str), &str> = first
        .plan
        .existing_nodes
        .iter()
        .flat_map(|u| u.pods.iter().map(move |k| (id(k), u.name.as_str())))
        .collect();
    let hostname_of = |name: &str| {
        snapshot.nodes.iter().find(|n| n.name == name).map(|n| {
            n.labels
                .get(crate::labels::HOSTNAME)
                .cloned()
                .unwrap_or_else(|| n.name.clone())
        })
    };
    // The pods this trial changes, in one pass over the cluster's pods: those on the new
    // node (no host) and those pinned to the host they went to.
    //
    // The pods are held together by a hostname affinity this trial adds, and the simulation
    // places a hostname-affine group without weighing its pods' zone (or other non-host)
    // spreads against each other: it gathered a zone spread's pods from three zones on one
    // node. Such pods keep the first trial's placement, which weighed the spreads.
    let spread_apart = |p: &crate::pod::Pod| {
        p.topology_spread
            .iter()
            .any(|s| s.hard && s.topology_key != crate::labels::HOSTNAME)
    };
    let mut changed: Vec<(usize, Option<String>)> = Vec::new();
    for (i, p) in snapshot.pods.iter().enumerate() {
        let new = on_new.contains(&of(p));
        let went_to = if new { None } else { on_existing.get(&of(p)) };
        if !new && went_to.is_none() {
            continue;
        }
        if spread_apart(p) {
            return Err(format!(
                "pod {} has a topology spread that one new node for all the pods could break",
                p.key()
            ));
        }
        if new {
            changed.push((i, None));
        } else if let Some(host) = went_to.and_then(|n| hostname_of(n)) {
            changed.push((i, Some(host)));
        }
    }
    let mut namespaces: Vec<String> = on_new.iter().map(|(ns, _)| ns.to_string()).collect();
    namespaces.sort();
    namespaces.dedup();
    let mut selector = crate::requirements::Requirements::new();
    selector.add(
        TOGETHER_LABEL,
        crate::requirements::Requirement::single("true"),
    );
    let together = crate::pod::PodAffinityTerm {
        topology_key: crate::labels::HOSTNAME.to_string(),
        selector,
        namespaces,
        namespace_selector: None,
        anti: false,
        weight: None,
    };
    // Changed for the trial, and put back as they were.
    let mut saved = Vec::with_capacity(changed.len());
    for (i, host) in changed {
        let p = &mut snapshot.pods[i];
        saved.push((
            i,
            p.labels.clone(),
            p.affinity.clone(),
            p.node_terms.clone(),
        ));
        match host {
            None => {
                p.labels
                    .insert(TOGETHER_LABEL.to_string(), "true".to_string());
                p.affinity.push(together.clone());
            }
            Some(host) => {
                if p.node_terms.is_empty() {
                    p.node_terms.push(crate::requirements::Requirements::new());
                }
                for term in &mut p.node_terms {
                    term.add(
                        crate::labels::HOSTNAME,
                        crate::requirements::Requirement::single(&host),
                    );
                }
            }
        }
    }
    let result = outcome(snapshot, catalog, opts, removed, VolumeHosts::Keep);
    for (i, labels, affinity, node_terms) in saved {
        let p = &mut snapshot.pods[i];
        p.labels = labels;
        p.affinity = affinity;
        p.node_terms = node_terms;
    }
    let one = result?;
    if one.replacements.len() != 1 {
        return Err(format!(
            "one new node cannot hold them ({} needed)",
            one.replacements.len()
        ));
    }
    Ok(one)
}

/// True for a node whose pods are on their way elsewhere: cordoned, being deleted or already
/// being disrupted (initialized: a replacement a plan added is closed to pods, not leaving).
pub fn is_leaving(node: &crate::pod::Node) -> bool {
    node.life.initialized && (node.unschedulable || node.life.deleting)
}

/// The check a command makes before it drains the nodes at `removed` (its replacements up):
/// [`run`], or [`run_forced`] when `forced` (expiration, drift), with the pending pods left
/// aside: the pods leaving have first claim on the room bought for them.
pub fn check(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
    forced: bool,
) -> Result<Outcome, String> {
    let hosts = if forced {
        VolumeHosts::Release
    } else {
        VolumeHosts::Keep
    };
    outcome_with(snapshot, catalog, opts, removed, hosts, Pending::SetAside)
}

/// What a trial does with the hostname pins of moved pods' volumes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum VolumeHosts {
    /// They hold: a pod whose volume only a removed node mounts has no place.
    Keep,
    /// A pod they keep from every node that stays leaves with its node (see [`run_forced`]).
    Release,
}

fn outcome(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
    hosts: VolumeHosts,
) -> Result<Outcome, String> {
    outcome_with(snapshot, catalog, opts, removed, hosts, Pending::Simulated)
}

fn outcome_with(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
    hosts: VolumeHosts,
    pending: Pending,
) -> Result<Outcome, String> {
    // Nodes on their way out (cordoned, being deleted, already being disrupted): their pods
    // are leaving too, so they take the room they will take; they are no part of the move
    // itself (see `without`).
    let leaving: Vec<usize> = (0..snapshot.nodes.len())
        .filter(|i| is_leaving(&snapshot.nodes[*i]) && !removed.contains(i))
        .collect();
    // Moved pods go to initialized, Ready nodes first: a node still joining may never become
    // Ready, and one that is not Ready now may be gone. So the trial first holds such nodes
    // back; when the moved pods then all fit on the other existing nodes, that is the move.
    // Otherwise the trial runs again with them, as Karpenter's simulation does (existing
    // nodes before new ones): a move that needs one of them is refused.
    let joining: Vec<usize> = (0..snapshot.nodes.len())
        .filter(|i| {
            let n = &snapshot.nodes[*i];
            !n.unschedulable && (!n.life.initialized || n.life.not_ready)
        })
        .collect();
    let mut result = None;
    if !joining.is_empty() {
        for &i in &joining {
            snapshot.nodes[i].unschedulable = true;
        }
        let held = without(snapshot, catalog, opts, removed, &leaving, hosts, pending);
        for &i in &joining {
            snapshot.nodes[i].unschedulable = false;
        }
        if held.unplaced().is_none() && held.replacements().is_empty() {
            result = Some(held);
        }
    }
    let trial = match result {
        Some(held) => held,
        None => without(snapshot, catalog, opts, removed, &leaving, hosts, pending),
    };
    if let Some(u) = trial.unplaced() {
        return Err(format!(
            "pod {} would not fit elsewhere: {}",
            u.pod, u.reason
        ));
    }
    for used in &trial.plan.existing_nodes {
        let Some(p) = used.pods.iter().find(|k| trial.moved.contains(*k)) else {
            continue;
        };
        let Some(n) = snapshot.nodes.iter().find(|n| n.name == used.name) else {
            continue;
        };
        if !n.life.initialized || n.life.not_ready {
            return Err(format!(
                "pod {p} would move to node {}, which is {}",
                used.name,
                if n.life.initialized {
                    "not Ready"
                } else {
                    "not initialized yet"
                }
            ));
        }
    }
    let replacements = trial.replacements();
    let price_after = replacements.iter().map(|n| n.price_per_hour).sum::<f64>() + 0.0;
    Ok(Outcome {
        plan: trial.plan,
        replacements,
        price_after,
        stranded: trial.stranded,
    })
}

/// Where the pods of the nodes at `removed` would go if those nodes ended now, whether or not
/// every one has a place: the interruption path, which cannot refuse (the cloud takes the
/// nodes anyway). Returns the plan (its `unschedulable` lists the moved pods with no place)
/// and the new nodes the moved pods need, `pod_indices` into `snapshot`. In-flight and
/// not-yet-initialized nodes are fair places here: the pods wait for them either way. The
/// pending pods are left out: provisioning plans for them.
pub fn evacuate(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
) -> (Plan, Vec<NewNode>) {
    let trial = without(
        snapshot,
        catalog,
        opts,
        removed,
        &[],
        VolumeHosts::Keep,
        Pending::SetAside,
    );
    (trial.plan, trial.new_nodes)
}

/// What a trial does with the pods still pending.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// Left out: provisioning plans for them (the interruption path).
    SetAside,
    /// Simulated with the moved pods, as Karpenter's consolidation does: they take the room
    /// they would take, and those without a place are no reason to refuse a move.
    Simulated,
}

/// One simulation of a removal: the plan, its new nodes (`pod_indices` into the caller's
/// pods), the pods stranded with the removed nodes, and the keys of the pods it moved.
struct Trial {
    plan: Plan,
    new_nodes: Vec<NewNode>,
    stranded: Vec<String>,
    moved: HashSet<String>,
}

impl Trial {
    /// The first moved pod the plan found no place for.
    fn unplaced(&self) -> Option<&crate::scheduling::Unschedulable> {
        self.plan
            .unschedulable
            .iter()
            .find(|u| self.moved.contains(&u.pod))
    }

    /// The new nodes that hold a moved pod (a node only pending pods need is provisioning's
    /// to buy, no replacement; one holding both counts in full).
    fn replacements(&self) -> Vec<NewNode> {
        self.new_nodes
            .iter()
            .filter(|n| n.pods.iter().any(|k| self.moved.contains(k)))
            .cloned()
            .collect()
    }
}

/// The simulation of `snapshot` without the nodes at `removed` (see [`run`]), undone before
/// returning; the new nodes' `pod_indices` are mapped back to the caller's pod order. The
/// pods of the nodes at `leaving` (which stay, taking no pods) are placed too, those whose
/// volumes can follow them and whose room no reservation holds already, but they are not
/// the move's: where they land neither refuses the move nor makes its replacements (the
/// planner checks they keep the room they have: `Planner::evaluate`). The pending pods are
/// placed as `pending` says.
fn without(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    removed: &[usize],
    leaving: &[usize],
    hosts: VolumeHosts,
    pending: Pending,
) -> Trial {
    // Looked up for every pod of the cluster in every trial: a fast hash of node names.
    let elsewhere: foldhash::HashSet<String> = leaving
        .iter()
        .filter_map(|&i| snapshot.nodes.get(i))
        .map(|n| n.name.clone())
        .collect();
    let mut removed: Vec<usize> = removed.to_vec();
    removed.sort_unstable();
    removed.dedup();
    removed.retain(|&i| i < snapshot.nodes.len());
    // Taken from the back, so the indices still in the list stay valid.
    let mut nodes_out = Vec::with_capacity(removed.len());
    for &i in removed.iter().rev() {
        nodes_out.push((i, snapshot.nodes.remove(i)));
    }
    let gone: foldhash::HashSet<String> = nodes_out.iter().map(|(_, n)| n.name.clone()).collect();

    let (swaps, mut aside) = match pending {
        Pending::SetAside => set_aside_pending(&mut snapshot.pods),
        Pending::Simulated => (Vec::new(), Vec::new()),
    };
    let mut moved: Vec<(usize, String)> = Vec::new();
    let mut leaving_pods = Vec::new();
    let mut elsewhere_pods = Vec::new();
    let mut stranded = Vec::new();
    // Pods whose room is held already (a reservation `<pod>@<claim>` on the node bought for
    // them): they need none in the trial.
    let reserved: HashSet<String> = snapshot
        .pods
        .iter()
        .filter_map(|p| {
            let claim = p.disruption.nominated.as_ref()?;
            let origin = p.name.strip_suffix(&format!("@{claim}"))?;
            Some(format!("{}/{origin}", p.namespace))
        })
        .collect();
    for (i, p) in snapshot.pods.iter().enumerate() {
        if leaves_with_node(p) {
            continue;
        }
        if p.node_name
            .as_ref()
            .is_some_and(|on| !elsewhere.is_empty() && elsewhere.contains(on))
        {
            let others = snapshot
                .nodes
                .iter()
                .filter(|n| !elsewhere.contains(&n.name));
            if !reserved.contains(&p.key()) && volume_can_follow(p, others) {
                elsewhere_pods.push(i);
            }
            continue;
        }
        let leaving = p.node_name.as_ref().is_some_and(|on| gone.contains(on));
        if !leaving {
            continue;
        }
        if hosts == VolumeHosts::Release && !volume_can_follow(p, &snapshot.nodes) {
            stranded.push(i);
        } else {
            leaving_pods.push(i);
        }
    }
    if !stranded.is_empty() {
        // A pod that must share a node with a stranded pod, and with no pod its term selects
        // on a node that stays, can run nowhere either: it goes with the node too.
        let pods = &snapshot.pods;
        let (partners, rest): (Vec<usize>, Vec<usize>) = leaving_pods
            .into_iter()
            .partition(|&i| needs_stranded_partner(&pods[i], &stranded, pods, &gone));
        leaving_pods = rest;
        stranded.extend(partners);
    }
    let mut stranded_keys: Vec<String> = stranded.iter().map(|&i| snapshot.pods[i].key()).collect();
    stranded_keys.sort();
    let mut moved_keys = HashSet::with_capacity(leaving_pods.len());
    for i in leaving_pods {
        if let Some(on) = snapshot.pods[i].node_name.take() {
            moved_keys.insert(snapshot.pods[i].key());
            moved.push((i, on));
        }
    }
    for i in elsewhere_pods {
        if let Some(on) = snapshot.pods[i].node_name.take() {
            moved.push((i, on));
        }
    }
    let evicted = Options {
        evicted: true,
        ..opts.clone()
    };
    let plan = simulate(snapshot, catalog, &evicted);

    // Undo, in reverse.
    for (i, on) in moved {
        snapshot.pods[i].node_name = Some(on);
    }
    snapshot.pods.append(&mut aside);
    for &(a, b) in &swaps {
        snapshot.pods.swap(a, b);
    }
    for (i, node) in nodes_out.into_iter().rev() {
        snapshot.nodes.insert(i, node);
    }
    // A trial position that a swap filled holds the pod of its partner.
    let partner: std::collections::HashMap<usize, usize> = swaps.iter().copied().collect();
    let origin = |i: usize| partner.get(&i).copied().unwrap_or(i);
    let new_nodes: Vec<NewNode> = plan
        .new_nodes
        .iter()
        .map(|n| NewNode {
            pod_indices: n.pod_indices.iter().map(|&i| origin(i)).collect(),
            ..n.clone()
        })
        .collect();
    Trial {
        plan,
        new_nodes,
        stranded: stranded_keys,
        moved: moved_keys,
    }
}

/// True when one of `p`'s required hostname pod-affinity terms selects a pod at `stranded`
/// (see [`volume_can_follow`]) and no pod bound to a node outside `gone`.
fn needs_stranded_partner(
    p: &crate::pod::Pod,
    stranded: &[usize],
    pods: &[crate::pod::Pod],
    gone: &foldhash::HashSet<String>,
) -> bool {
    p.affinity
        .iter()
        .filter(|a| !a.anti && a.weight.is_none() && a.topology_key == crate::labels::HOSTNAME)
        .any(|a| {
            let scope = crate::scheduling::affinity::Scope::of_term(p, a);
            stranded.iter().any(|&s| scope.matches(&pods[s]))
                && !pods.iter().any(|q| {
                    q.node_name.as_ref().is_some_and(|on| !gone.contains(on)) && scope.matches(q)
                })
        })
}

/// True unless the pod's volumes pin it to hosts none of `nodes` (those that stay) is: a pod
/// whose local volume is on a removed node can run nowhere else, so a trial that must remove
/// the node ([`run_forced`]) lets it go with the node rather than buy it a node it could
/// never use.
fn volume_can_follow<'n>(
    p: &crate::pod::Pod,
    nodes: impl IntoIterator<Item = &'n crate::pod::Node>,
) -> bool {
    let Some(pins) = p.volume_hosts.as_deref() else {
        return true;
    };
    nodes.into_iter().any(|n| {
        let host = n
            .labels
            .get(crate::labels::HOSTNAME)
            .map_or(n.name.as_str(), String::as_str);
        pins.iter().all(|vh| vh.hosts.allows(host))
    })
}

/// Moves the pending pods of `pods` to its end and splits them off: each pending pod before
/// the cut is swapped with a bound pod after it. Returns the swaps (to be made again, after
/// the pods are appended back, to restore the order) and the pods set aside.
fn set_aside_pending(
    pods: &mut Vec<crate::pod::Pod>,
) -> (Vec<(usize, usize)>, Vec<crate::pod::Pod>) {
    let pending: Vec<usize> = pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.node_name.is_none())
        .map(|(i, _)| i)
        .collect();
    if pending.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let cut = pods.len() - pending.len();
    let low = pending.iter().copied().filter(|&i| i < cut);
    let high = (cut..pods.len()).filter(|&i| pods[i].node_name.is_some());
    let swaps: Vec<(usize, usize)> = low.zip(high).collect();
    for &(a, b) in &swaps {
        pods.swap(a, b);
    }
    let aside = pods.split_off(cut);
    (swaps, aside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::fixtures::*;
    use crate::pod::Owner;
    use crate::testing::catalog::catalog;

    #[test]
    fn a_trial_is_undone_whatever_it_set_aside() {
        let mut daemon = pod("logs-a", "a", 100);
        daemon.owner = Some(Owner {
            kind: "DaemonSet".into(),
            name: "logs".into(),
        });
        let mut pending = pod("huge", "a", 500_000);
        pending.node_name = None;
        let mut s = cluster(
            vec![
                node("a", "m5.xlarge", "on-demand"),
                node("b", "m5.xlarge", "on-demand"),
                node("c", "m5.xlarge", "on-demand"),
            ],
            vec![
                pod("web-b", "b", 1000),
                daemon,
                pod("web-a", "a", 1000),
                pending,
                pod("web-c", "c", 1000),
            ],
        );
        let before = format!("{s:?}");
        let out = run(&mut s, &catalog(), &Options::default(), &[2, 0]).expect("fits on b");
        assert_eq!(format!("{s:?}"), before);
        // Both moved pods go to b; the DaemonSet pod leaves with a; the pending pod is
        // simulated with them, finds no place, and that refuses nothing.
        assert!(out.replacements.is_empty());
        assert_eq!(out.plan.existing_nodes.len(), 1);
        assert_eq!(out.plan.existing_nodes[0].name, "b");
        let mut moved = out.plan.existing_nodes[0].pods.clone();
        moved.sort();
        assert_eq!(moved, ["default/web-a", "default/web-c"]);
        let unplaced: Vec<&str> = out
            .plan
            .unschedulable
            .iter()
            .map(|u| u.pod.as_str())
            .collect();
        assert_eq!(unplaced, ["default/huge"]);

        // b is not initialized: a's pod goes to c, initialized, rather than refusing the move.
        s.nodes[1].life.initialized = false;
        let before = format!("{s:?}");
        let out = run(&mut s, &catalog(), &Options::default(), &[0]).expect("fits on c");
        assert_eq!(format!("{s:?}"), before);
        let places: Vec<&str> = out
            .plan
            .existing_nodes
            .iter()
            .map(|u| u.name.as_str())
            .collect();
        assert_eq!(places, ["c"]);
        // With c gone too only b could take the pods (new nodes come after existing ones, as
        // in Karpenter's simulation): refused, the trial undone as well.
        let e = run(&mut s, &catalog(), &Options::default(), &[0, 2]).expect_err("joining");
        assert!(
            e.ends_with("would move to node b, which is not initialized yet"),
            "{e}"
        );
        assert_eq!(format!("{s:?}"), before);
        // Not Ready now, though initialized: the same.
        s.nodes[1].life.initialized = true;
        s.nodes[1].life.not_ready = true;
        let e = run(&mut s, &catalog(), &Options::default(), &[0, 2]).expect_err("not Ready");
        assert!(
            e.ends_with("would move to node b, which is not Ready"),
            "{e}"
        );
    }

    #[test]
    fn replacement_pods_are_named_by_their_place_in_the_callers_list() {
        // The pending pod at 0 is swapped with the last pod for the trial; the replacement
        // for a's pod still names index 2.
        let mut pending = pod("huge", "a", 500_000);
        pending.node_name = None;
        let mut s = cluster(
            vec![
                node("a", "m5.xlarge", "on-demand"),
                node("b", "m5.large", "on-demand"),
            ],
            vec![pending, pod("web-b", "b", 1500), pod("web-a", "a", 3000)],
        );
        let before = format!("{s:?}");
        let out = run(&mut s, &catalog(), &Options::default(), &[0]).expect("a replacement");
        assert_eq!(format!("{s:?}"), before);
        assert_eq!(out.replacements.len(), 1);
        assert_eq!(out.replacements[0].pod_indices, [2]);
        assert_eq!(s.pods[2].name, "web-a");
    }

    #[test]
    fn a_forced_trial_lets_a_pod_go_with_the_only_node_its_volume_mounts_on() {
        let pinned = |name: &str, hosts: &[&str]| {
            let mut p = pod(name, "a", 1000);
            p.require_volume_hosts(vec![crate::pod::VolumeHost {
                claim: format!("default/{name}"),
                volume: format!("pv-{name}"),
                hosts: crate::requirements::Requirement::one_of(hosts.iter().copied()),
            }]);
            p
        };
        let nodes = || {
            vec![
                node("a", "m5.xlarge", "on-demand"),
                node("b", "m5.xlarge", "on-demand"),
            ]
        };
        let mut s = cluster(nodes(), vec![pinned("db", &["a"])]);
        let before = s.pods.clone();
        let kept = run(&mut s, &catalog(), &Options::default(), &[0]).expect_err("pinned");
        assert!(
            kept.starts_with("pod default/db would not fit elsewhere"),
            "{kept}"
        );
        // Its volume's node is going: it can run nowhere else, so nothing is bought for it.
        let out = run_forced(&mut s, &catalog(), &Options::default(), &[0]).expect("goes");
        assert!(out.replacements.is_empty(), "{:?}", out.replacements);
        assert_eq!(out.stranded, ["default/db"]);
        assert!(out.plan.unschedulable.is_empty());
        assert!(out.plan.existing_nodes.iter().all(|n| n.pods.is_empty()));
        assert_eq!(s.pods, before, "the trial is undone");

        // A sidecar that must share a node with it (required hostname affinity) and has no
        // other partner goes with it; one with a partner on b moves there.
        let sidecar = |name: &str| {
            let mut p = pod(name, "a", 100);
            p.affinity.push(hostname_affinity_to("db"));
            p
        };
        let mut db = pinned("db", &["a"]);
        db.labels.insert("app".into(), "db".into());
        let mut s = cluster(nodes(), vec![db.clone(), sidecar("sidecar")]);
        let out = run_forced(&mut s, &catalog(), &Options::default(), &[0]).expect("goes");
        assert!(out.replacements.is_empty(), "{:?}", out.replacements);
        assert_eq!(out.stranded, ["default/db", "default/sidecar"]);
        assert!(out.plan.existing_nodes.iter().all(|n| n.pods.is_empty()));
        let mut other_db = pod("db-b", "b", 100);
        other_db.labels.insert("app".into(), "db".into());
        let mut s = cluster(nodes(), vec![db, sidecar("sidecar"), other_db]);
        let out = run_forced(&mut s, &catalog(), &Options::default(), &[0]).expect("moves");
        assert_eq!(out.plan.existing_nodes[0].pods, ["default/sidecar"]);
        assert_eq!(out.stranded, ["default/db"]);

        // A volume b can mount too: the pod moves there, pin and all.
        let mut s = cluster(nodes(), vec![pinned("shared", &["a", "b"])]);
        let out = run_forced(&mut s, &catalog(), &Options::default(), &[0]).expect("moves");
        assert_eq!(out.plan.existing_nodes[0].name, "b");
        assert_eq!(out.plan.existing_nodes[0].pods, ["default/shared"]);
    }
}
