//! Property tests of the disruption planner over generated clusters: the constrained workload
//! of [`constraint_properties`](super::constraint_properties) is planned and launched, some of
//! its pods finish, and the planner consolidates what is left with every method allowed at
//! once (Aggressive, no budget), and in half the cases the older nodes have expired as well.
//! Every consolidation must save money, and every moved pod must land where all its hard
//! constraints hold (checked by `plan_check`, not by the simulation) and its node has room.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use proptest::prelude::*;

use super::constraint_properties::{build, class_spec, config, node_spec};
use super::simulation::catalog;
use crate::disruption::candidates::leaves_with_node;
use crate::disruption::planner::{
    plan, plan_keeping_nothing, plan_simulating_all, DisruptionPlan, Input,
};
use crate::disruption::settings::{Budget, BudgetNodes};
use crate::disruption::working::node_of;
use crate::disruption::{ConsolidationPolicy, DisruptionSettings, Reason};
use crate::scheduling::{simulate, ExistingNodeUse, Options, Plan, Unschedulable};
use crate::snapshot::Snapshot;
use crate::testing::plan_check::check;

/// The snapshot once `plan` is carried out: its new nodes exist (initialized, the n-th
/// launched at 10·n) with their pods; pods it could not place stay pending.
fn launched(s: &Snapshot, plan: &Plan) -> Snapshot {
    let mut out = s.clone();
    let mut on: HashMap<&str, &str> = HashMap::new();
    for (i, n) in plan.new_nodes.iter().enumerate() {
        let mut node = node_of(n, &catalog(), &s.provisioners).expect("catalog type");
        node.life.initialized = true;
        node.life.created_at = Some(10 * i as i64);
        out.nodes.push(node);
        for k in &n.pods {
            on.insert(k, &n.name);
        }
    }
    for e in &plan.existing_nodes {
        for k in &e.pods {
            on.insert(k, &e.name);
        }
    }
    for p in &mut out.pods {
        if p.node_name.is_none() {
            p.node_name = on.get(p.key().as_str()).map(|n| n.to_string());
        }
    }
    out
}

/// Plans at time 100; with `expire`, nodes launched at 50 or before have expired.
fn consolidate(s: &Snapshot, expire: bool) -> DisruptionPlan {
    consolidate_with(s, expire, plan)
}

/// [`consolidate`] with the planner `planner`.
fn consolidate_with(
    s: &Snapshot,
    expire: bool,
    planner: fn(&Input) -> DisruptionPlan,
) -> DisruptionPlan {
    let settings = DisruptionSettings {
        expire_after: expire.then_some(50),
        consolidation: true,
        policy: ConsolidationPolicy::Aggressive,
        consolidate_after: 0,
        budgets: vec![Budget {
            nodes: BudgetNodes::Percent(100),
            reasons: Vec::new(),
            window: None,
        }],
        ..DisruptionSettings::default()
    };
    let settings_of = |name: &str| {
        s.provisioners
            .iter()
            .any(|p| p.name == name)
            .then(|| settings.clone())
    };
    planner(&Input {
        snapshot: s,
        catalog: &catalog(),
        opts: &Options::default(),
        settings: &settings_of,
        cloud_drift: &|_| None,
        disrupting: &BTreeSet::new(),
        now: 100,
        max_decisions: None,
        max_evaluations: None,
        start_at: 0,
    })
}

/// Checks each decision in turn, as the kube-scheduler sees it (a spread or an affinity is
/// checked when a pod is placed, against the pods there then): the cluster the earlier
/// decisions left, without the decision's nodes, with its replacements, its moved pods
/// pending and placed by a plan of its moves. Then every node must hold its pods' requests.
fn check_decisions(s: &Snapshot, out: &DisruptionPlan) -> Result<(), String> {
    let mut state = s.clone();
    for d in &out.decisions {
        let removed: HashSet<&str> = d.nodes.iter().map(String::as_str).collect();
        let moves: HashMap<&str, &str> = d
            .moves
            .iter()
            .map(|(p, n)| (p.as_str(), n.as_str()))
            .collect();
        state.nodes.retain(|n| !removed.contains(n.name.as_str()));
        for r in &d.replacements {
            state
                .nodes
                .push(node_of(r, &catalog(), &s.provisioners).ok_or("replacement type")?);
        }
        state.pods.retain(|p| {
            !(leaves_with_node(p) && p.node_name.as_deref().is_some_and(|n| removed.contains(n)))
        });
        let mut unschedulable = Vec::new();
        let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for p in &mut state.pods {
            let key = p.key();
            match p.node_name.as_deref() {
                None => unschedulable.push(Unschedulable {
                    pod: key,
                    reason: "pending before".into(),
                }),
                Some(n) if removed.contains(n) => {
                    let to = moves
                        .get(key.as_str())
                        .ok_or_else(|| format!("{key} on removed node {n} was not moved"))?;
                    by_node.entry(to.to_string()).or_default().push(key);
                    p.node_name = None;
                }
                Some(_) => {}
            }
        }
        let plan = Plan {
            existing_nodes: by_node
                .into_iter()
                .map(|(name, pods)| ExistingNodeUse { name, pods })
                .collect(),
            unschedulable,
            ..Plan::default()
        };
        check(&state, &catalog(), &plan).map_err(|e| format!("{:?}: {e}", d.nodes))?;
        for p in &mut state.pods {
            if p.node_name.is_none() {
                p.node_name = moves.get(p.key().as_str()).map(|n| n.to_string());
            }
        }
    }
    let mut used: HashMap<&str, [i64; 3]> = HashMap::new();
    for p in &state.pods {
        if let Some(n) = p.node_name.as_deref() {
            let u = used.entry(n).or_default();
            u[0] += p.requests.cpu;
            u[1] += p.requests.memory;
            u[2] += p.requests.pods;
        }
    }
    for n in &state.nodes {
        let u = used.get(n.name.as_str()).copied().unwrap_or_default();
        let a = &n.allocatable;
        if u[0] > a.cpu || u[1] > a.memory || u[2] > a.pods {
            return Err(format!("{} is over its allocatable: {u:?}", n.name));
        }
    }
    Ok(())
}

/// The generated workload planned, launched, and the pods `finished` picks gone.
fn running(
    classes: &[super::constraint_properties::ClassSpec],
    nodes: &[super::constraint_properties::NodeSpec],
    finished: &[bool],
) -> Snapshot {
    let mut s = build(classes, nodes);
    s.resolve_namespace_selectors();
    let first = simulate(&s, &catalog(), &Options::default());
    let mut running = launched(&s, &first);
    let mut i = 0;
    running.pods.retain(|p| {
        i += 1;
        p.node_name.is_none() || !finished[i % finished.len()]
    });
    running
}

/// A running cluster from the generated workload, and whether its older nodes expire.
fn cases() -> impl Strategy<Value = (Snapshot, bool)> {
    (
        prop::collection::vec(class_spec(), 1..8),
        prop::collection::vec(node_spec(), 0..4),
        prop::collection::vec(any::<bool>(), 64),
        any::<bool>(),
    )
        .prop_map(|(classes, nodes, finished, expire)| {
            (running(&classes, &nodes, &finished), expire)
        })
}

proptest! {
    #![proptest_config(config())]

    /// The planner refuses some candidates by CPU and memory alone, without a simulation
    /// (`disruption::room`): a relaxation of the simulation, so it may only skip moves the
    /// simulation refuses too. The decisions are the same as when every candidate is
    /// simulated.
    #[test]
    fn refusing_by_room_alone_changes_no_decision(
        (running, expire) in cases(),
    ) {
        let fast = consolidate(&running, expire);
        let all = consolidate_with(&running, expire, plan_simulating_all);
        prop_assert_eq!(fast.decisions, all.decisions);
    }

    /// What a plan keeps between its simulations (`scheduling::memo`) changes nothing it
    /// decides or says.
    #[test]
    fn keeping_catalog_work_between_trials_changes_nothing(
        (running, expire) in cases(),
    ) {
        let kept = consolidate(&running, expire);
        let fresh = consolidate_with(&running, expire, plan_keeping_nothing);
        prop_assert_eq!(kept.decisions, fresh.decisions);
        prop_assert_eq!(kept.kept, fresh.kept);
    }

    #[test]
    fn consolidation_saves_and_keeps_every_pod_placed(
        (mut running, expire) in cases(),
    ) {
        // Without pending pods: the planner simulates them with the moved pods, as
        // Karpenter does, and may count on where they will go (a spread's minimum they
        // raise, a partner they bring); the check, as the kube-scheduler at eviction, sees
        // them pending and cannot tell. The planner's other properties keep them.
        running.pods.retain(|p| p.node_name.is_some());
        let out = consolidate(&running, expire);
        for d in out.decisions.iter().filter(|d| d.reason != Reason::Expired) {
            prop_assert!(
                d.price_after < d.price_before,
                "{:?} does not save: {} -> {}", d.nodes, d.price_before, d.price_after
            );
        }
        if !expire {
            prop_assert!(out.price_after <= out.price_before + 1e-9);
        }
        check_decisions(&running, &out).map_err(|e| {
            let decisions: Vec<String> = out
                .decisions
                .iter()
                .map(|d| format!("{:?} {:?} moves {:?}", d.reason, d.nodes, d.moves))
                .collect();
            let nodes: Vec<String> = running.nodes.iter().map(|n| format!("{} {:?}", n.name, n.labels.get(crate::labels::ZONE))).collect();
            TestCaseError::fail(format!("{e}\ndecisions: {decisions:#?}\nnodes: {nodes:?}"))
        })?;
    }
}
