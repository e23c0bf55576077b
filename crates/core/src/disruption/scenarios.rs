//! Scenarios of the disruption planner, each with its expectation worked out by hand from the
//! test catalog (m5 $0.048 per vCPU per hour, c5 $0.0425, allocatable = capacity less 70m CPU
//! and 0.5 GiB; the fixtures' pods ask for 1 GiB each).

use std::collections::BTreeSet;

use super::cron::Schedule;
use super::fixtures::*;
use super::planner::{plan, plan_simulating_all, DisruptionPlan, Input};
use super::settings::{Budget, BudgetNodes, Reason};
use super::DisruptionSettings;
use crate::pod::{Node, Pod};
use crate::scheduling::Options;
use crate::snapshot::Snapshot;
use crate::testing::catalog::catalog;

/// 2026-12-07 (a Monday) 09:00:00 UTC.
pub(super) const MON_9AM: i64 = 1_796_634_000;

pub(super) fn run(s: &Snapshot, settings: &DisruptionSettings, now: i64) -> DisruptionPlan {
    run_with(s, settings, now, &|_| None)
}

pub(super) fn run_with(
    s: &Snapshot,
    settings: &DisruptionSettings,
    now: i64,
    cloud_drift: &dyn Fn(&Node) -> Option<String>,
) -> DisruptionPlan {
    run_limited(s, settings, now, cloud_drift, None)
}

pub(super) fn run_limited(
    s: &Snapshot,
    settings: &DisruptionSettings,
    now: i64,
    cloud_drift: &dyn Fn(&Node) -> Option<String>,
    max_decisions: Option<usize>,
) -> DisruptionPlan {
    let settings_of = |name: &str| (name == "default").then(|| settings.clone());
    plan(&Input {
        snapshot: s,
        catalog: &catalog(),
        opts: &Options::default(),
        settings: &settings_of,
        cloud_drift,
        disrupting: &BTreeSet::new(),
        now,
        max_decisions,
        max_evaluations: None,
        start_at: 0,
    })
}

/// Each decision as "Reason [nodes] -> replacement types".
pub(super) fn decisions(p: &DisruptionPlan) -> Vec<String> {
    p.decisions
        .iter()
        .map(|d| {
            let new: Vec<&str> = d
                .replacements
                .iter()
                .map(|r| r.instance_type.as_str())
                .collect();
            format!("{} {:?} -> {new:?}", d.reason.as_str(), d.nodes)
        })
        .collect()
}

/// Why `node` stays, its reasons joined.
pub(super) fn kept(p: &DisruptionPlan, node: &str) -> String {
    p.kept
        .iter()
        .find(|k| k.node == node)
        .unwrap_or_else(|| panic!("{node} is not kept: {:?}", decisions(p)))
        .why
        .join("; ")
}

pub(super) fn budget(nodes: &str) -> Budget {
    Budget {
        nodes: BudgetNodes::parse(nodes).expect("nodes"),
        reasons: Vec::new(),
        window: None,
    }
}

/// Four m5.xlarge nodes (3,930m free each), one 1,000m pod on each.
pub(super) fn four_quiet_nodes() -> Snapshot {
    let names = ["a", "b", "c", "d"];
    cluster(
        names
            .iter()
            .map(|n| node(n, "m5.xlarge", "on-demand"))
            .collect(),
        names
            .iter()
            .map(|n| pod(&format!("web-{n}"), n, 1000))
            .collect(),
    )
}

#[test]
fn a_budget_of_one_node_lets_one_node_go() {
    let s = four_quiet_nodes();
    let one = DisruptionSettings {
        budgets: vec![budget("1")],
        ..aggressive()
    };
    let p = run(&s, &one, 100);
    assert_eq!(decisions(&p), ["Underutilized [\"a\"] -> []"]);
    assert_eq!(kept(&p, "b"), "it takes pods from a node this plan removes");
    for n in ["c", "d"] {
        assert_eq!(
            kept(&p, n),
            "the Underutilized budget of Provisioner default allows no more disruptions now"
        );
    }
    assert!((p.price_before - 4.0 * 0.192).abs() < 1e-9);
    assert!((p.price_after - 3.0 * 0.192).abs() < 1e-9);

    // Two at once: a and b go in one multi-node move, their pods fit on c and d; c and d
    // take their pods, so they are fresh and stay.
    let two = DisruptionSettings {
        budgets: vec![budget("2")],
        ..aggressive()
    };
    let p = run(&s, &two, 100);
    assert_eq!(decisions(&p), ["Underutilized [\"a\", \"b\"] -> []"]);
    assert_eq!(
        p.decisions[0].detail,
        "underutilized: 2 nodes whose pods fit on the other nodes"
    );
    assert_eq!(kept(&p, "c"), "it takes pods from a node this plan removes");
}

#[test]
fn a_plan_can_stop_at_its_first_decision() {
    let all = DisruptionSettings {
        consolidation: true,
        expire_after: Some(50),
        budgets: vec![budget("100%")],
        ..aggressive()
    };
    // Only a is old enough to expire; the others are consolidated after it.
    let mut s = four_quiet_nodes();
    for (i, n) in s.nodes.iter_mut().enumerate() {
        n.life.created_at = Some(if i == 0 { 0 } else { 60 });
    }
    let p = run_limited(&s, &all, 100, &|_| None, Some(1));
    assert_eq!(decisions(&p), ["Expired [\"a\"] -> []"]);
    assert_eq!(
        kept(&p, "d"),
        "not evaluated: the plan stops at its first decisions"
    );
    let p = run_limited(&s, &all, 100, &|_| None, None);
    assert!(p.decisions.len() >= 2, "{:?}", decisions(&p));
}

#[test]
fn a_plan_replaces_one_batch_of_expired_nodes() {
    // 101 expired nodes with a pod each: the oldest 100 go in one decision; the last waits
    // for a later plan (expiration has no budget, but a fleet that expired at once does not
    // roll at once).
    let names: Vec<String> = (0..101).map(|i| format!("e{i:03}")).collect();
    let s = cluster(
        names
            .iter()
            .map(|n| node(n, "m5.large", "on-demand"))
            .collect(),
        names
            .iter()
            .map(|n| pod(&format!("web-{n}"), n, 500))
            .collect(),
    );
    let all = DisruptionSettings {
        expire_after: Some(50),
        ..DisruptionSettings::default()
    };
    let p = run(&s, &all, 100);
    assert_eq!(p.decisions.len(), 1, "{:?}", decisions(&p));
    assert_eq!(p.decisions[0].nodes.len(), super::planner::MAX_BATCH);
    assert!(!p.decisions[0].nodes.contains(&"e100".to_string()));
    assert!(
        kept(&p, "e100").ends_with("but the plan replaces 100 expired nodes at a time"),
        "{}",
        kept(&p, "e100")
    );
}

#[test]
fn expired_nodes_with_pods_are_replaced_together() {
    // Four expired m5.xlarge with a 1,000m pod each: one decision replaces them all (their
    // pods simulated leaving at once), not a node a command.
    let all = DisruptionSettings {
        expire_after: Some(50),
        ..DisruptionSettings::default()
    };
    let p = run(&four_quiet_nodes(), &all, 100);
    assert_eq!(p.decisions.len(), 1, "{:?}", decisions(&p));
    let d = &p.decisions[0];
    assert_eq!(d.nodes, ["a", "b", "c", "d"]);
    assert_eq!(d.detail, "expired: 4 nodes");
    let held: usize = d.replacements.iter().map(|r| r.pods.len()).sum();
    assert_eq!(
        held,
        4,
        "the replacements hold every pod: {:?}",
        decisions(&p)
    );
}

#[test]
fn a_bounded_pass_simulates_its_share_and_the_next_goes_on_from_there() {
    // Four c5.xlarge, each full with a 3,500m pod: no pod fits elsewhere and no cheaper type
    // holds one, so every simulation ends in "stays". Four simulations per pass, every kind
    // counted: the multi-node search takes two (three nodes, then two), single-node the
    // other two; the pass starting at 0 weighs a and b, the one starting at 2 c and d. (The
    // room alone would refuse each single node without a simulation: that check is off here,
    // so the bound is what is tested.)
    let names = ["a", "b", "c", "d"];
    let s = cluster(
        names
            .iter()
            .map(|n| node(n, "c5.xlarge", "on-demand"))
            .collect(),
        names
            .iter()
            .map(|n| pod(&format!("big-{n}"), n, 3500))
            .collect(),
    );
    let all = DisruptionSettings {
        budgets: vec![budget("100%")],
        ..aggressive()
    };
    let settings_of = |name: &str| (name == "default").then(|| all.clone());
    let pass = |start_at: usize| {
        plan_simulating_all(&Input {
            snapshot: &s,
            catalog: &catalog(),
            opts: &Options::default(),
            settings: &settings_of,
            cloud_drift: &|_| None,
            disrupting: &BTreeSet::new(),
            now: 100,
            max_decisions: Some(1),
            max_evaluations: Some(4),
            start_at,
        })
    };
    let bound =
        "not evaluated: the pass's bound on simulations was reached (later passes go on from here)";
    let weighed = |p: &DisruptionPlan| -> Vec<&str> {
        names
            .iter()
            .copied()
            .filter(|n| kept(p, n) != bound)
            .collect()
    };
    let first = pass(0);
    assert!(first.decisions.is_empty(), "{:?}", decisions(&first));
    assert_eq!(weighed(&first), ["a", "b"]);
    assert_eq!(
        kept(&first, "a"),
        "a replacement (c5.xlarge on-demand, $0.1700/h) is not cheaper than $0.1700/h"
    );
    let second = pass(2);
    assert_eq!(weighed(&second), ["c", "d"]);
    // Going round: starting past the end wraps to the front.
    assert_eq!(weighed(&pass(5)), ["b", "c"]);
}

#[test]
fn the_default_budget_is_ten_percent_rounded_up() {
    // 10 % of 4 nodes is one node.
    let p = run(&four_quiet_nodes(), &aggressive(), 100);
    assert_eq!(decisions(&p), ["Underutilized [\"a\"] -> []"]);
}

#[test]
fn pods_spread_over_zones_are_not_gathered_on_one_replacement() {
    // Three on-demand c5.large, one per zone, with 3, 2 and 2 pods of a zone spread (maxSkew
    // 1) that must run on demand, and a pod of a hostname spread; spot nodes besides. One
    // m5.xlarge holds all their pods for less, but 7 against 0 in one zone: the
    // kube-scheduler would leave them pending. Every decision keeps the spread. (Found by
    // `consolidation_saves_and_keeps_every_pod_placed`: the multi-node trial that holds the
    // pods on one node gathered them.)
    let zones = ["z-a", "z-b", "z-c"];
    let mut selector = crate::requirements::Requirements::new();
    selector.add("app", crate::requirements::Requirement::single("web"));
    let spread = crate::pod::TopologySpread {
        topology_key: crate::labels::ZONE.into(),
        max_skew: 1,
        min_domains: None,
        hard: true,
        selector,
        honor_node_affinity: false,
        honor_node_taints: false,
    };
    let in_zone = |name: &str, itype: &str, capacity: &str, zone: &str| {
        let mut n = node(name, itype, capacity);
        n.labels
            .insert(crate::labels::ZONE.into(), zone.to_string());
        n
    };
    let mut nodes: Vec<Node> = zones
        .iter()
        .map(|z| in_zone(&format!("od-{z}"), "c5.large", "on-demand", z))
        .collect();
    nodes.extend(
        zones
            .iter()
            .map(|z| in_zone(&format!("spot-{z}"), "c5.large", "spot", z)),
    );
    nodes.push(in_zone("busy", "m5.large", "spot", "z-a"));
    let mut pods: Vec<Pod> = zones
        .iter()
        .zip([3, 2, 2])
        .flat_map(|(z, n)| (0..n).map(move |i| (z, i)))
        .map(|(z, i)| {
            let mut p = pod(&format!("web-{z}-{i}"), &format!("od-{z}"), 500);
            p.labels.insert("app".into(), "web".into());
            p.topology_spread.push(spread.clone());
            let mut on_demand = crate::requirements::Requirements::new();
            on_demand.add(
                crate::labels::CAPACITY_TYPE,
                crate::requirements::Requirement::single("on-demand"),
            );
            p.node_terms.push(on_demand);
            p
        })
        .collect();
    let team = |name: &str, on: &str, cpu: i64| {
        let mut p = pod(name, on, cpu);
        p.namespace = "team".into();
        p.labels.insert("app".into(), "a".into());
        p
    };
    pods.extend((0..12).map(|i| team(&format!("other-{i}"), "busy", 100)));
    let mut a = crate::requirements::Requirements::new();
    a.add("app", crate::requirements::Requirement::single("a"));
    for (name, on) in [("host-0", "od-z-c"), ("host-1", "spot-z-a")] {
        let mut p = team(name, on, 250);
        p.topology_spread.push(crate::pod::TopologySpread {
            topology_key: crate::labels::HOSTNAME.into(),
            selector: a.clone(),
            honor_node_affinity: true,
            ..spread.clone()
        });
        pods.push(p);
    }
    let zone_of_node: std::collections::BTreeMap<String, String> = nodes
        .iter()
        .map(|n| (n.name.clone(), n.labels[crate::labels::ZONE].clone()))
        .collect();
    let s = spot_cluster(nodes, pods);
    let all = DisruptionSettings {
        budgets: vec![budget("100%")],
        ..aggressive()
    };
    let p = run(&s, &all, 100);
    // Each decision in turn, as the kube-scheduler sees it: the spread's pods per zone stay
    // within one of each other.
    let mut zone_of: std::collections::BTreeMap<String, String> = s
        .pods
        .iter()
        .filter(|p| p.labels.get("app").is_some_and(|a| a == "web"))
        .filter_map(|p| Some((p.key(), zone_of_node.get(p.node_name.as_deref()?)?.clone())))
        .collect();
    for d in &p.decisions {
        let web: Vec<&(String, String)> = d
            .moves
            .iter()
            .filter(|(k, _)| zone_of.contains_key(k))
            .collect();
        for (pod, to) in web {
            let zone = d
                .replacements
                .iter()
                .find(|r| &r.name == to)
                .map_or_else(|| zone_of_node[to].clone(), |r| r.zone.clone());
            zone_of.insert(pod.clone(), zone);
        }
        let counts: Vec<usize> = zones
            .iter()
            .map(|z| zone_of.values().filter(|v| v == z).count())
            .collect();
        let (most, least) = (counts.iter().max(), counts.iter().min());
        assert!(
            most.zip(least).is_some_and(|(m, l)| m - l <= 1),
            "{:?} leaves the zones at {counts:?}: {:?}",
            d.nodes,
            decisions(&p)
        );
    }
}

#[test]
fn three_nodes_are_replaced_by_one_cheaper_node() {
    // Three 1,000m pods on three m5.xlarge ($0.576/h) fit one c5.xlarge ($0.17/h, 3,930m,
    // 7.5 GiB); the longest prefix that works is all three.
    let s = cluster(
        ["a", "b", "c"]
            .iter()
            .map(|n| node(n, "m5.xlarge", "on-demand"))
            .collect(),
        ["a", "b", "c"]
            .iter()
            .map(|n| pod(&format!("web-{n}"), n, 1000))
            .collect(),
    );
    let all = DisruptionSettings {
        budgets: vec![budget("100%")],
        ..aggressive()
    };
    let p = run(&s, &all, 100);
    assert_eq!(
        decisions(&p),
        ["Underutilized [\"a\", \"b\", \"c\"] -> [\"c5.xlarge\"]"]
    );
    let d = &p.decisions[0];
    assert!((d.price_before - 0.576).abs() < 1e-9);
    assert!((d.price_after - 0.17).abs() < 1e-9);
    assert!((p.price_after - 0.17).abs() < 1e-9);
    assert_eq!(
        d.replacements[0].pods,
        ["default/web-a", "default/web-b", "default/web-c"]
    );
}

#[test]
fn empty_nodes_go_after_ttl_seconds_after_empty() {
    let mut recent = node("recent", "m5.large", "on-demand");
    recent.life.created_at = Some(90);
    let s = cluster(
        vec![
            node("idle", "m5.large", "on-demand"),
            recent,
            node("busy", "m5.large", "on-demand"),
        ],
        vec![pod("web", "busy", 500)],
    );
    let settings = DisruptionSettings {
        empty_after: Some(30),
        ..DisruptionSettings::default()
    };
    let p = run(&s, &settings, 100);
    assert_eq!(decisions(&p), ["Empty [\"idle\"] -> []"]);
    assert_eq!(p.decisions[0].detail, "empty for 100s");
    assert_eq!(
        kept(&p, "recent"),
        "empty for less than ttlSecondsAfterEmpty (30s)"
    );
    assert_eq!(
        kept(&p, "busy"),
        "consolidation is not enabled on Provisioner default"
    );
}

#[test]
fn expiration_replaces_a_node_whatever_the_budget_but_not_past_its_guards() {
    let mut guarded = pod("batch", "kept", 1000);
    guarded.disruption.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
    let s = cluster(
        vec![
            node("old", "m5.xlarge", "on-demand"),
            node("kept", "m5.xlarge", "on-demand"),
        ],
        vec![pod("web", "old", 3000), guarded],
    );
    let settings = DisruptionSettings {
        expire_after: Some(1_000),
        budgets: vec![budget("0")],
        ..DisruptionSettings::default()
    };
    let p = run(&s, &settings, 2_000);
    // 3,000m does not fit beside the guarded pod (2,930m free): a c5.xlarge takes it.
    assert_eq!(decisions(&p), ["Expired [\"old\"] -> [\"c5.xlarge\"]"]);
    assert_eq!(
        p.decisions[0].detail,
        "expired: 33m old, ttlSecondsUntilExpired 16m"
    );
    assert_eq!(
        kept(&p, "kept"),
        "pod default/batch is annotated karpenter.sh/do-not-disrupt"
    );
}

#[test]
fn a_node_that_takes_pods_is_no_longer_empty() {
    // The expired node's pod moves to the empty node (empty for 500 s, younger than the
    // TTL), which must then stay.
    let mut idle = node("idle", "m5.xlarge", "on-demand");
    idle.life.created_at = Some(1_500);
    let s = cluster(
        vec![node("old", "m5.xlarge", "on-demand"), idle],
        vec![pod("web", "old", 1000)],
    );
    let settings = DisruptionSettings {
        expire_after: Some(1_000),
        empty_after: Some(30),
        ..DisruptionSettings::default()
    };
    let p = run(&s, &settings, 2_000);
    assert_eq!(decisions(&p), ["Expired [\"old\"] -> []"]);
    assert_eq!(
        p.decisions[0].moves,
        [("default/web".to_string(), "idle".to_string())]
    );
    assert_eq!(
        kept(&p, "idle"),
        "it takes pods from a node this plan removes"
    );
}

#[test]
fn a_replacements_spare_room_is_not_counted_on_by_later_decisions() {
    // old-1 (expired)'s 2,500m pod needs a c5.xlarge (3,930m): 1,430m spare. old-2's pods
    // (1,000m and 2,800m; drifted, a later decision) must get their own replacement, not
    // lean on that spare room while the first replacement is still joining.
    let mut young = node("old-2", "m5.xlarge", "on-demand");
    young.life.created_at = Some(1_500);
    let s = cluster(
        vec![node("old-1", "m5.xlarge", "on-demand"), young],
        vec![
            pod("a", "old-1", 2500),
            pod("b", "old-2", 1000),
            pod("c", "old-2", 2800),
        ],
    );
    let settings = DisruptionSettings {
        expire_after: Some(1_000),
        budgets: vec![budget("100%")],
        ..DisruptionSettings::default()
    };
    let drifted = |n: &crate::pod::Node| {
        (n.name == "old-2").then(|| "its AMI is no longer selected".to_string())
    };
    let p = run_with(&s, &settings, 2_000, &drifted);
    assert_eq!(
        decisions(&p),
        [
            "Expired [\"old-1\"] -> [\"c5.xlarge\"]",
            "Drifted [\"old-2\"] -> [\"c5.xlarge\"]"
        ]
    );
    assert_eq!(p.decisions[1].replacements[0].name, "replacement-2");
}

#[test]
fn drifted_nodes_are_replaced_oldest_first_within_the_budget() {
    let mut newer = node("newer", "m5.large", "on-demand");
    newer.life.created_at = Some(50);
    let mut s = cluster(
        vec![newer, node("older", "m5.large", "on-demand")],
        vec![pod("web-1", "older", 500), pod("web-2", "newer", 500)],
    );
    s.provisioners[0]
        .labels
        .insert("team".into(), "search".into());
    let one = DisruptionSettings {
        budgets: vec![budget("1")],
        ..DisruptionSettings::default()
    };
    let p = run(&s, &one, 100);
    // Its pod fits on the newer node, drifted or not (only nodes on their way out are
    // left out of the simulation).
    assert_eq!(decisions(&p), ["Drifted [\"older\"] -> []"]);
    assert_eq!(
        p.decisions[0].detail,
        "drifted: it lacks label team=search of Provisioner default"
    );
    assert_eq!(
        kept(&p, "newer"),
        "drifted: it lacks label team=search of Provisioner default, but the Drifted budget of Provisioner default allows no more disruptions now"
    );
}

#[test]
fn drifted_nodes_with_pods_go_together_as_far_as_the_budget_allows() {
    // Three drifted nodes with a pod each and a budget of two: the two oldest are replaced in
    // one decision (one command launches and drains both), the youngest waits for budget.
    let mut nodes: Vec<Node> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| node(n, "m5.xlarge", "on-demand"))
        .collect();
    for (i, n) in nodes.iter_mut().enumerate() {
        n.life.created_at = Some(10 * i as i64);
    }
    let s = cluster(
        nodes,
        vec![
            pod("w1", "n1", 3000),
            pod("w2", "n2", 3000),
            pod("w3", "n3", 3000),
        ],
    );
    let two = DisruptionSettings {
        budgets: vec![budget("2")],
        ..DisruptionSettings::default()
    };
    let ami = |_: &Node| Some("its AMI is no longer selected".to_string());
    let p = run_with(&s, &two, 100, &ami);
    assert_eq!(p.decisions.len(), 1, "{:?}", decisions(&p));
    assert_eq!(p.decisions[0].nodes, ["n1", "n2"]);
    assert_eq!(p.decisions[0].detail, "drifted: 2 nodes");
    let held: usize = p.decisions[0]
        .replacements
        .iter()
        .map(|r| r.pods.len())
        .sum();
    assert_eq!(held, 2, "{:?}", decisions(&p));
    assert_eq!(
        kept(&p, "n3"),
        "drifted: its AMI is no longer selected, but the Drifted budget of Provisioner default allows no more disruptions now"
    );
}

#[test]
fn drift_the_cloud_sees_replaces_the_node() {
    let s = cluster(
        vec![node("a", "m5.large", "on-demand")],
        vec![pod("web", "a", 500)],
    );
    let ami = |n: &Node| {
        (n.name == "a").then(|| "its AMI ami-0old is not the NodeTemplate's ami-0new".to_string())
    };
    let p = run_with(&s, &DisruptionSettings::default(), 100, &ami);
    assert_eq!(decisions(&p), ["Drifted [\"a\"] -> [\"c5.large\"]"]);
    assert_eq!(
        p.decisions[0].detail,
        "drifted: its AMI ami-0old is not the NodeTemplate's ami-0new"
    );
}

#[test]
fn a_node_whose_pods_just_changed_waits_for_consolidate_after() {
    let mut fresh = pod("web-b", "b", 1000);
    fresh.disruption.created_at = Some(90);
    let s = cluster(
        vec![
            node("a", "m5.xlarge", "on-demand"),
            node("b", "m5.xlarge", "on-demand"),
        ],
        vec![pod("web-a", "a", 1000), fresh],
    );
    let p = run(&s, &aggressive(), 100);
    assert_eq!(
        kept(&p, "b"),
        "it was created or its pods changed within consolidateAfter (30s)"
    );
    assert_eq!(decisions(&p), ["Underutilized [\"a\"] -> []"]);
}

#[test]
fn a_cron_budget_window_holds_consolidation_while_open() {
    let s = cluster(
        vec![
            node("a", "m5.xlarge", "on-demand"),
            node("b", "m5.xlarge", "on-demand"),
        ],
        vec![pod("web-a", "a", 1000), pod("web-b", "b", 1000)],
    );
    let business_hours = DisruptionSettings {
        budgets: vec![Budget {
            nodes: BudgetNodes::Count(0),
            reasons: vec![Reason::Underutilized],
            window: Some((Schedule::parse("0 9 * * mon-fri").expect("cron"), 8 * 3_600)),
        }],
        ..aggressive()
    };
    let p = run(&s, &business_hours, MON_9AM + 60);
    assert!(p.decisions.is_empty(), "{:?}", decisions(&p));
    assert_eq!(
        kept(&p, "a"),
        "the Underutilized budget of Provisioner default allows no more disruptions now"
    );
    // Outside the window: both m5.xlarge ($0.384/h) become one c5.xlarge ($0.17/h), which
    // saves more than deleting one of them ($0.192/h).
    let p = run(&s, &business_hours, MON_9AM + 9 * 3_600);
    assert_eq!(
        decisions(&p),
        ["Underutilized [\"a\", \"b\"] -> [\"c5.xlarge\"]"]
    );
}

#[test]
fn pods_never_move_onto_a_node_that_is_not_initialized() {
    let mut joining = node("joining", "m5.xlarge", "on-demand");
    joining.life.initialized = false;
    let s = cluster(
        vec![node("a", "m5.xlarge", "on-demand"), joining],
        vec![pod("web", "a", 1000)],
    );
    let p = run(&s, &aggressive(), 100);
    assert!(p.decisions.is_empty(), "{:?}", decisions(&p));
    assert_eq!(
        kept(&p, "a"),
        "pod default/web would move to node joining, which is not initialized yet"
    );
    assert_eq!(kept(&p, "joining"), "not initialized yet");
}

#[test]
fn pending_pods_keep_the_room_they_have_and_do_not_halt_disruption() {
    // The pending 3,000m job fits on a (3,530m free) and nowhere else: deleting a would only
    // trade it for a node bought for the job, so a stays (for that reason, not because
    // disruption waits).
    let mut s = cluster(
        vec![
            node("a", "m5.xlarge", "on-demand"),
            node("b", "m5.xlarge", "on-demand"),
        ],
        vec![pod("web-a", "a", 400), pod("web-b", "b", 3500)],
    );
    let mut job = pod("job", "", 3000);
    job.node_name = None;
    s.pods.push(job.clone());
    let p = run(&s, &aggressive(), 100);
    assert!(p.decisions.is_empty(), "{:?}", decisions(&p));
    assert_eq!(
        kept(&p, "a"),
        "pod default/job, waiting for a place, would lose the room it has now on node a"
    );
    // A pod nothing can place takes no room: a goes, its pod beside b's.
    s.pods.last_mut().expect("job").requests.cpu = 500_000;
    let p = run(&s, &aggressive(), 100);
    assert_eq!(decisions(&p), ["Underutilized [\"a\"] -> []"]);
    // A small pending pod that fits beside the others does not hold a back either: the
    // simulation places it with a's pod.
    s.pods.last_mut().expect("job").requests.cpu = 20;
    let p = run(&s, &aggressive(), 100);
    assert_eq!(decisions(&p), ["Underutilized [\"a\"] -> []"]);
}

#[test]
fn every_node_that_stays_says_why() {
    let mut s = four_quiet_nodes();
    s.nodes.push(Node {
        name: "foreign".into(),
        ..Node::default()
    });
    let mut guarded: Pod = pod("db", "d", 1000);
    guarded.disruption.do_not_disrupt = Some("joiner.sh/do-not-disrupt".into());
    s.pods[3] = guarded;
    let p = run(&s, &DisruptionSettings::default(), 100);
    let why: Vec<(String, String)> = p
        .kept
        .iter()
        .map(|k| (k.node.clone(), k.why.join("; ")))
        .collect();
    let off = "consolidation is not enabled on Provisioner default".to_string();
    assert_eq!(
        why,
        [
            ("a".to_string(), off.clone()),
            ("b".to_string(), off.clone()),
            ("c".to_string(), off),
            (
                "d".to_string(),
                "pod default/db is annotated joiner.sh/do-not-disrupt".to_string()
            ),
            ("foreign".to_string(), "not launched by joiner".to_string()),
        ]
    );
}

#[test]
fn a_local_volume_keeps_its_node_from_consolidation_but_not_from_expiration() {
    // web-a's claim is bound to a local volume of node a (kube-scheduler: only a mounts it).
    // Consolidation weighs a saving: it never gives the data up, so b goes and web-b moves
    // to a. Expiration is asked for: a still expires, as under Karpenter; web-a can run
    // nowhere else once its volume's node is gone, so nothing is bought for it.
    let mut local = pod("web-a", "a", 1000);
    local.require_volume_hosts(vec![crate::pod::VolumeHost {
        claim: "default/data-web-a".into(),
        volume: "local-a".into(),
        hosts: crate::requirements::Requirement::single("a"),
    }]);
    let s = cluster(
        vec![
            node("a", "m5.xlarge", "on-demand"),
            node("b", "m5.xlarge", "on-demand"),
        ],
        vec![local, pod("web-b", "b", 1000)],
    );
    let consolidate = run(&s, &aggressive(), MON_9AM);
    assert_eq!(decisions(&consolidate), ["Underutilized [\"b\"] -> []"]);

    let expire = DisruptionSettings {
        expire_after: Some(1_000),
        budgets: vec![budget("1")],
        ..DisruptionSettings::default()
    };
    let p = run(&s, &expire, 2_000);
    assert_eq!(
        decisions(&p)[0],
        "Expired [\"a\", \"b\"] -> [\"c5.large\"]",
        "both expire together (expiration has no budget); only web-b needs a new node: {:?}",
        p.kept
    );
    assert!(
        p.decisions[0].detail.ends_with(
            "; left pending with nowhere else to run (only these nodes mount their volumes, \
             or a pod they must share a node with): default/web-a"
        ),
        "{}",
        p.decisions[0].detail
    );
}

#[test]
fn an_expiring_nodes_self_affine_group_gets_a_replacement_though_another_node_has_some_room() {
    // old runs four 1-cpu pods that must share a node; young has room for three of them. The
    // replacement is launched before old drains, so the evicted group finds it empty and
    // goes there whole: old expires, with a replacement, not kept for young's partial room.
    let mut group: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = pod(&format!("shard-{i}"), "old", 1000);
            p.labels.insert("app".into(), "shard".into());
            p.affinity.push(hostname_affinity_to("shard"));
            p
        })
        .collect();
    let mut young = node("young", "m5.xlarge", "on-demand");
    young.life.created_at = Some(1_900);
    group.push(pod("web", "young", 900));
    let s = cluster(vec![node("old", "m5.xlarge", "on-demand"), young], group);
    let expire = DisruptionSettings {
        expire_after: Some(1_000),
        ..DisruptionSettings::default()
    };
    let p = run(&s, &expire, 2_000);
    assert_eq!(decisions(&p).len(), 1, "{:?}", p.kept);
    assert!(
        decisions(&p)[0].starts_with("Expired [\"old\"] -> [\""),
        "{:?}",
        decisions(&p)
    );
    assert_eq!(p.decisions[0].replacements.len(), 1);
}

#[test]
fn a_node_at_its_volume_attach_cap_takes_no_evicted_pod_with_a_volume() {
    // Each node runs one 1-cpu pod with its own EBS volume. Uncapped, one node's pod moves
    // to the other and its node goes with nothing bought. When each node's CSINode caps EBS
    // at the one volume it holds, the kube-scheduler would leave an evicted pod pending: a
    // node goes only with a replacement, which has no cap yet.
    let with_volume = |name: &str, on: &str| {
        let mut p = pod(name, on, 1000);
        p.volume_attachments = Some(Box::new(vec![crate::pod::VolumeAttachment {
            driver: "ebs.csi.aws.com".into(),
            claim: format!("default/data-{name}"),
        }]));
        p
    };
    let capped = |name: &str, cap: Option<i64>| {
        let mut n = node(name, "m5.xlarge", "on-demand");
        n.volume_limits = cap
            .map(|c| ("ebs.csi.aws.com".to_string(), c))
            .into_iter()
            .collect();
        n
    };
    let pods = || vec![with_volume("web-a", "a"), with_volume("web-b", "b")];
    let free = cluster(vec![capped("a", None), capped("b", None)], pods());
    assert_eq!(
        decisions(&run(&free, &aggressive(), MON_9AM)),
        ["Underutilized [\"a\"] -> []"]
    );
    let full = cluster(vec![capped("a", Some(1)), capped("b", Some(1))], pods());
    // a is replaced by the cheapest type holding web-a (c5.large, 2 vCPU at $0.0425 each,
    // against m5.xlarge's $0.192), as a single-node replacement would be.
    assert_eq!(
        decisions(&run(&full, &aggressive(), MON_9AM)),
        ["Underutilized [\"a\"] -> [\"c5.large\"]"]
    );
}
