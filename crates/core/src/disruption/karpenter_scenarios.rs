//! Scenarios written from Karpenter's documentation and its disruption suite's behaviour
//! (kubernetes-sigs/karpenter, pkg/controllers/disruption): what its defaults and rules do,
//! joiner must do at least. Prices as in [`super::scenarios`].

use super::fixtures::*;
use super::scenarios::{decisions, kept, run, MON_9AM};
use super::{ConsolidationPolicy, DisruptionSettings};
use crate::pod::Pod;
use crate::snapshot::Snapshot;

/// Consolidation on, nothing else said: Karpenter's `WhenEmptyOrUnderutilized`.
fn defaults() -> DisruptionSettings {
    DisruptionSettings {
        consolidation: true,
        ..DisruptionSettings::default()
    }
}

fn with_policy(policy: ConsolidationPolicy) -> DisruptionSettings {
    DisruptionSettings {
        policy,
        ..defaults()
    }
}

/// Two m5.xlarge: `a` with three 300m pods, `b` (opted out) with one 2,500m pod. Deleting
/// `a` saves half the Provisioner's $/h for 4/6 of its disruption cost: score 0.75.
fn a_busy_node_whose_pods_fit_beside_another() -> Snapshot {
    let mut b = node("b", "m5.xlarge", "on-demand");
    b.life.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
    let pods: Vec<Pod> = vec![
        pod("web-1", "a", 300),
        pod("web-2", "a", 300),
        pod("web-3", "a", 300),
        pod("db", "b", 2500),
    ];
    cluster(vec![node("a", "m5.xlarge", "on-demand"), b], pods)
}

#[test]
fn by_default_a_node_whose_pods_fit_elsewhere_is_deleted_whatever_its_score() {
    let s = a_busy_node_whose_pods_fit_beside_another();
    let p = run(&s, &defaults(), MON_9AM);
    assert_eq!(decisions(&p), ["Underutilized [\"a\"] -> []"]);
    assert_eq!(
        p.decisions[0].score.map(|x| (x * 100.0).round()),
        Some(75.0)
    );
}

#[test]
fn balanced_passes_at_half_its_share_of_disruption_and_conservative_at_its_whole_share() {
    let s = a_busy_node_whose_pods_fit_beside_another();
    let balanced = run(&s, &with_policy(ConsolidationPolicy::Balanced), MON_9AM);
    assert_eq!(decisions(&balanced), ["Underutilized [\"a\"] -> []"]);
    let conservative = run(&s, &with_policy(ConsolidationPolicy::Conservative), MON_9AM);
    assert!(
        conservative.decisions.is_empty(),
        "{:?}",
        decisions(&conservative)
    );
    assert_eq!(
        kept(&conservative, "a"),
        "even deleting it would score 0.75, below the Conservative threshold 1.00"
    );
    // minScore is an opt-in knob over any policy.
    let scored = DisruptionSettings {
        min_score: Some(0.8),
        ..defaults()
    };
    assert_eq!(
        kept(&run(&s, &scored, MON_9AM), "a"),
        "even deleting it would score 0.75, below the minScore threshold 0.80"
    );
}

#[test]
fn by_default_a_replacement_need_only_be_strictly_cheaper() {
    // One m5.large ($0.096/h) with a 1,500m pod: a c5.large ($0.085/h) holds it, 11.5 %
    // cheaper. Taken by default; a 20 % minPriceImprovement refuses it.
    let s = cluster(
        vec![node("a", "m5.large", "on-demand")],
        vec![pod("web", "a", 1500)],
    );
    let p = run(&s, &defaults(), MON_9AM);
    assert_eq!(decisions(&p), ["Underutilized [\"a\"] -> [\"c5.large\"]"]);
    let strict = DisruptionSettings {
        min_price_improvement: Some(0.20),
        ..defaults()
    };
    let p = run(&s, &strict, MON_9AM);
    assert!(p.decisions.is_empty());
    // No type 20 % cheaper than $0.096/h holds the pod: the room alone says so, before
    // a simulation would name the c5.large.
    assert_eq!(
        kept(&p, "a"),
        "its pods need more room than the other nodes have free plus the largest type 20% cheaper"
    );
}

/// Two m5.xlarge, `a` with one 500m pod (the subject of each test), `b` with one 500m pod and
/// opted out: `a`'s pod fits on `b`.
fn a_and_a_kept_b(subject: Pod) -> Snapshot {
    let mut b = node("b", "m5.xlarge", "on-demand");
    b.life.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
    cluster(
        vec![node("a", "m5.xlarge", "on-demand"), b],
        vec![subject, pod("other", "b", 500)],
    )
}

fn owned_by(mut p: Pod, kind: &str) -> Pod {
    p.owner = Some(crate::pod::Owner {
        kind: kind.into(),
        name: "owner".into(),
    });
    p
}

#[test]
fn a_do_not_disrupt_duration_keeps_the_node_until_it_is_over() {
    let mut web = pod("web", "a", 500);
    web.disruption.do_not_disrupt = Some("karpenter.sh/do-not-disrupt=2m".into());
    web.disruption.do_not_disrupt_until = Some(MON_9AM + 60);
    let s = a_and_a_kept_b(web);
    let during = run(&s, &defaults(), MON_9AM);
    assert!(during.decisions.is_empty());
    assert_eq!(
        kept(&during, "a"),
        "pod default/web is annotated karpenter.sh/do-not-disrupt=2m"
    );
    let after = run(&s, &defaults(), MON_9AM + 60);
    assert_eq!(decisions(&after), ["Underutilized [\"a\"] -> []"]);
}

#[test]
fn do_not_disrupt_on_a_daemonset_or_mirror_pod_keeps_the_node() {
    for kind in ["DaemonSet", "Node"] {
        let mut agent = owned_by(pod("agent", "a", 100), kind);
        let s = a_and_a_kept_b(agent.clone());
        assert_eq!(
            decisions(&run(&s, &defaults(), MON_9AM)),
            ["Empty [\"a\"] -> []"],
            "{kind}: only pods that leave with the node"
        );
        agent.disruption.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
        let s = a_and_a_kept_b(agent);
        let p = run(&s, &defaults(), MON_9AM);
        assert!(p.decisions.is_empty(), "{kind}: {:?}", decisions(&p));
        assert_eq!(
            kept(&p, "a"),
            "pod default/agent is annotated karpenter.sh/do-not-disrupt"
        );
    }
}

#[test]
fn terminating_pods_neither_keep_the_node_nor_need_room_unless_a_statefulset_owns_them() {
    let mut going = pod("going", "a", 3800);
    going.disruption.terminating = true;
    going.disruption.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
    let s = a_and_a_kept_b(going.clone());
    assert_eq!(
        decisions(&run(&s, &defaults(), MON_9AM)),
        ["Empty [\"a\"] -> []"]
    );
    // A StatefulSet's pod is recreated under its name only once it is gone: its room counts.
    going.disruption.do_not_disrupt = None;
    let s = a_and_a_kept_b(owned_by(going, "StatefulSet"));
    let p = run(&s, &defaults(), MON_9AM);
    assert_eq!(
        decisions(&p),
        ["Underutilized [\"a\"] -> [\"c5.xlarge\"]"],
        "3,800m fits on no other node: a cheaper one holds it"
    );
}

#[test]
fn a_budget_that_always_allows_unhealthy_pods_lets_a_pod_that_is_not_ready_go() {
    let mut selector = crate::requirements::Requirements::new();
    selector.add("app", crate::requirements::Requirement::single("web"));
    let pdb = |always: bool| super::Pdb {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(selector.clone()),
        disruptions_allowed: 0,
        always_allow_unhealthy: always,
    };
    let mut web = pod("web", "a", 500);
    web.labels.insert("app".into(), "web".into());
    web.disruption.not_ready = true;
    for (always, moved) in [(false, false), (true, true)] {
        let mut s = a_and_a_kept_b(web.clone());
        s.pdbs = vec![pdb(always)];
        let p = run(&s, &defaults(), MON_9AM);
        assert_eq!(!p.decisions.is_empty(), moved, "AlwaysAllow {always}");
        if !moved {
            assert_eq!(
                kept(&p, "a"),
                "PodDisruptionBudget default/web allows no eviction of pod default/web"
            );
        }
    }
    // A Ready pod is held whatever the policy.
    web.disruption.not_ready = false;
    let mut s = a_and_a_kept_b(web);
    s.pdbs = vec![pdb(true)];
    assert!(run(&s, &defaults(), MON_9AM).decisions.is_empty());
}

#[test]
fn budgets_count_initialized_nodes_that_are_not_ready_as_disrupting() {
    // Four quiet m5.xlarge, each pod fits beside another: a budget of one node lets one go.
    let one = DisruptionSettings {
        budgets: vec![super::scenarios::budget("1")],
        ..defaults()
    };
    let s = super::scenarios::four_quiet_nodes();
    assert_eq!(run(&s, &one, MON_9AM).decisions.len(), 1);
    // One of them went NotReady (still initialized): it uses the budget up.
    let mut s = s;
    s.nodes[3].life.not_ready = true;
    let p = run(&s, &one, MON_9AM);
    assert!(p.decisions.is_empty(), "{:?}", decisions(&p));
    assert!(
        kept(&p, "a").contains(
            "the Underutilized budget of Provisioner default allows no more disruptions now"
        ),
        "{}",
        kept(&p, "a")
    );
    assert_eq!(
        kept(&p, "d"),
        "not Ready: only expiration acts on a node that is not Ready"
    );
}

#[test]
fn an_expired_node_expires_though_it_is_not_ready() {
    let mut s = cluster(
        vec![
            node("old", "m5.xlarge", "on-demand"),
            node("b", "m5.xlarge", "on-demand"),
        ],
        vec![pod("web", "old", 1000), pod("api", "b", 1000)],
    );
    s.nodes[0].life.not_ready = true;
    s.nodes[1].life.created_at = Some(1_500);
    let expiring = DisruptionSettings {
        expire_after: Some(1_000),
        ..DisruptionSettings::default()
    };
    let p = run(&s, &expiring, 2_000);
    assert_eq!(decisions(&p), ["Expired [\"old\"] -> []"]);
}

#[test]
fn a_node_without_a_price_still_expires_but_is_not_consolidated() {
    // Karpenter's suite: a node whose instance type cannot be resolved (or lacks a label) is
    // still a candidate; only consolidation, which weighs prices, passes it by.
    let mut s = cluster(
        vec![
            node("old", "m5.xlarge", "on-demand"),
            node("b", "m5.xlarge", "on-demand"),
        ],
        vec![pod("web", "old", 1000), pod("api", "b", 1000)],
    );
    // A type the catalog does not list (newer than the catalog, say).
    s.nodes[0]
        .labels
        .insert(crate::labels::INSTANCE_TYPE.into(), "z9.huge".into());
    s.nodes[1].life.created_at = Some(1_500);
    let expiring = DisruptionSettings {
        expire_after: Some(1_000),
        ..defaults()
    };
    let p = run(&s, &expiring, 2_000);
    assert_eq!(decisions(&p), ["Expired [\"old\"] -> []"]);
    // Not expired: consolidation would move web beside api, but the node has no price (b,
    // opted out, stays; its pod could have moved onto old).
    s.nodes[1].life.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
    let p = run(&s, &defaults(), 2_000);
    assert!(decisions(&p).is_empty(), "{:?}", decisions(&p));
    assert_eq!(
        kept(&p, "old"),
        "z9.huge (on-demand in z-a) has no price in the catalog"
    );
}

#[test]
fn a_cordoned_node_is_no_candidate_and_its_pods_need_room() {
    // a's 1,000m pod fits beside b's (3,430m free) unless c, cordoned, sends its 3,000m pod
    // there too.
    let nodes = || {
        vec![
            node("a", "m5.xlarge", "on-demand"),
            node("b", "m5.xlarge", "on-demand"),
            node("c", "m5.xlarge", "on-demand"),
        ]
    };
    let pods = vec![
        pod("web", "a", 1000),
        pod("api", "b", 500),
        pod("batch", "c", 3000),
    ];
    let mut s = cluster(nodes(), pods.clone());
    s.nodes[1].life.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
    s.nodes[2].life.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
    assert_eq!(
        decisions(&run(&s, &defaults(), MON_9AM)),
        ["Underutilized [\"a\"] -> []"]
    );
    s.nodes[2].unschedulable = true;
    s.nodes[2].life.do_not_disrupt = None;
    let p = run(&s, &defaults(), MON_9AM);
    assert!(
        !decisions(&p).contains(&"Underutilized [\"a\"] -> []".to_string()),
        "a's pod cannot count on room c's pod needs: {:?}",
        decisions(&p)
    );
    assert_eq!(kept(&p, "c"), "cordoned or being deleted");
}

#[test]
fn empty_drifted_nodes_go_first() {
    // Two drifted nodes, one allowed at a time: the younger, empty one goes before the older
    // one with a pod.
    let mut young = node("young", "m5.xlarge", "on-demand");
    young.life.created_at = Some(500);
    let s = cluster(
        vec![node("old", "m5.xlarge", "on-demand"), young],
        vec![pod("web", "old", 1000)],
    );
    let one = DisruptionSettings {
        budgets: vec![super::scenarios::budget("1")],
        ..DisruptionSettings::default()
    };
    let drifted = |_: &crate::pod::Node| Some("its AMI is no longer selected".to_string());
    let p = super::scenarios::run_with(&s, &one, MON_9AM, &drifted);
    assert_eq!(decisions(&p), ["Drifted [\"young\"] -> []"]);
}

#[test]
fn the_most_saved_per_disruption_goes_first() {
    // Karpenter's suite: "should sort candidates by savings ratio descending" and "with
    // different disruption costs" (price over 1 + the pods' eviction costs). a ($0.192/h) and
    // b ($0.384/h) each hold one pod that fits on c (opted out), and the budget lets one go:
    // b saves twice as much for the same disruption (0.384 / 2 against 0.192 / 2). With four
    // pods on b, its ratio falls to 0.384 / 5 = 0.077, under a's 0.096: a goes first.
    let nodes = || {
        let mut c = node("c", "m5.2xlarge", "on-demand");
        c.life.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
        vec![
            node("a", "m5.xlarge", "on-demand"),
            node("b", "m5.2xlarge", "on-demand"),
            c,
        ]
    };
    let one = DisruptionSettings {
        budgets: vec![super::scenarios::budget("1")],
        ..defaults()
    };
    let s = cluster(nodes(), vec![pod("web", "a", 200), pod("api", "b", 200)]);
    assert_eq!(
        decisions(&run(&s, &one, MON_9AM)),
        ["Underutilized [\"b\"] -> []"]
    );
    let crowded: Vec<_> = (0..4).map(|i| pod(&format!("api{i}"), "b", 200)).collect();
    let mut pods = vec![pod("web", "a", 200)];
    pods.extend(crowded);
    let s = cluster(nodes(), pods);
    assert_eq!(
        decisions(&run(&s, &one, MON_9AM)),
        ["Underutilized [\"a\"] -> []"]
    );
}

#[test]
fn a_replacement_is_one_node_when_one_node_holds_the_pods_for_no_more() {
    // Two m5.xlarge ($0.384/h together) with a 1,000m pod each. The packer alone would split
    // the pods over two c5.large ($0.085/h each); one c5.xlarge holds both for the same
    // $0.17/h: one node, as Karpenter replaces.
    let s = cluster(
        vec![
            node("a", "m5.xlarge", "on-demand"),
            node("b", "m5.xlarge", "on-demand"),
        ],
        vec![pod("web-a", "a", 1000), pod("web-b", "b", 1000)],
    );
    let all = DisruptionSettings {
        budgets: vec![super::scenarios::budget("100%")],
        ..defaults()
    };
    let p = run(&s, &all, MON_9AM);
    assert_eq!(
        decisions(&p),
        ["Underutilized [\"a\", \"b\"] -> [\"c5.xlarge\"]"]
    );
    assert!((p.decisions[0].price_after - 0.17).abs() < 1e-9);
    assert_eq!(p.decisions[0].replacements[0].pods.len(), 2);
}

/// A pod of app `db` on node `on` that keeps away from the other `db` pods (hostname
/// anti-affinity).
fn apart(name: &str, on: &str) -> Pod {
    let mut p = pod(name, on, 1000);
    p.labels.insert("app".into(), "db".into());
    let mut term = hostname_affinity_to("db");
    term.anti = true;
    p.affinity = vec![term];
    p
}

#[test]
fn one_node_is_replaced_by_several_when_no_one_node_holds_its_pods_and_they_are_cheaper() {
    // One m5.4xlarge ($0.768/h) with two pods that must be apart: no one node holds them, two
    // c5.large ($0.17/h together) do.
    let s = cluster(
        vec![node("a", "m5.4xlarge", "on-demand")],
        vec![apart("db-0", "a"), apart("db-1", "a")],
    );
    let mut s = s;
    // The pods already share the node (they were placed before the rule): only the new
    // nodes must keep them apart.
    s.pods[1].affinity.clear();
    let all = DisruptionSettings {
        budgets: vec![super::scenarios::budget("100%")],
        ..defaults()
    };
    let p = run(&s, &all, MON_9AM);
    assert_eq!(
        decisions(&p),
        ["Underutilized [\"a\"] -> [\"c5.large\", \"c5.large\"]"]
    );
}

#[test]
fn several_nodes_are_replaced_by_one_node_at_most() {
    // Two m5.4xlarge ($0.768/h each) whose pods must be apart: no one node holds them both,
    // so no multi-node move (Karpenter's rule: re-packing many nodes onto many new ones
    // spends the budget on churn); each node is replaced on its own by a c5.large.
    let s = cluster(
        vec![
            node("a", "m5.4xlarge", "on-demand"),
            node("b", "m5.4xlarge", "on-demand"),
        ],
        vec![apart("db-0", "a"), apart("db-1", "b")],
    );
    let all = DisruptionSettings {
        budgets: vec![super::scenarios::budget("100%")],
        ..defaults()
    };
    let p = run(&s, &all, MON_9AM);
    assert_eq!(
        decisions(&p),
        [
            "Underutilized [\"a\"] -> [\"c5.large\"]",
            "Underutilized [\"b\"] -> [\"c5.large\"]"
        ]
    );
    assert!(
        p.refused_moves
            .iter()
            .any(|m| m.nodes.len() == 2 && m.why.contains("one node at most")),
        "{:?}",
        p.refused_moves
    );
}

#[test]
fn every_empty_node_a_budget_allows_goes_in_one_decision() {
    // Two hundred empty m5.large beside one busy node.
    let mut nodes: Vec<crate::pod::Node> = (0..200)
        .map(|i| node(&format!("e{i:03}"), "m5.large", "on-demand"))
        .collect();
    let mut busy = node("busy", "m5.xlarge", "on-demand");
    busy.life.do_not_disrupt = Some("karpenter.sh/do-not-disrupt".into());
    nodes.push(busy);
    let s = cluster(nodes, vec![pod("web", "busy", 3000)]);
    let all = DisruptionSettings {
        budgets: vec![super::scenarios::budget("100%")],
        ..defaults()
    };
    let p = run(&s, &all, MON_9AM);
    assert_eq!(p.decisions.len(), 1, "{:?}", decisions(&p));
    let d = &p.decisions[0];
    assert_eq!(d.reason, super::Reason::Empty);
    assert_eq!(d.nodes.len(), 200);
    assert_eq!(d.detail, "empty: consolidation deletes them: 200 nodes");
    assert!((d.price_before - 200.0 * 0.096).abs() < 1e-6);
    // The default budget (10 % of 201, rounded up: 21) takes 21 of them at once.
    let p = run(&s, &defaults(), MON_9AM);
    assert_eq!(p.decisions[0].nodes.len(), 21);
    assert!(kept(&p, "e199")
        .contains("the Empty budget of Provisioner default allows no more disruptions now"));
    // Nodes empty past ttlSecondsAfterEmpty go together too.
    let ttl = DisruptionSettings {
        empty_after: Some(30),
        budgets: vec![super::scenarios::budget("100%")],
        ..DisruptionSettings::default()
    };
    let p = run(&s, &ttl, MON_9AM);
    assert_eq!(decisions(&p).len(), 1);
    assert_eq!(p.decisions[0].nodes.len(), 200);
}

#[test]
fn empty_drifted_and_expired_nodes_go_together() {
    let mut nodes: Vec<crate::pod::Node> = (0..5)
        .map(|i| node(&format!("e{i}"), "m5.large", "on-demand"))
        .collect();
    nodes.push(node("busy", "m5.xlarge", "on-demand"));
    let s = cluster(nodes, vec![pod("web", "busy", 1000)]);
    let all = DisruptionSettings {
        budgets: vec![super::scenarios::budget("100%")],
        ..DisruptionSettings::default()
    };
    let drifted = |_: &crate::pod::Node| Some("its AMI is no longer selected".to_string());
    let p = super::scenarios::run_with(&s, &all, MON_9AM, &drifted);
    assert_eq!(
        decisions(&p),
        [
            "Drifted [\"e0\", \"e1\", \"e2\", \"e3\", \"e4\"] -> []",
            "Drifted [\"busy\"] -> [\"c5.large\"]"
        ]
    );
    let expiring = DisruptionSettings {
        expire_after: Some(1_000),
        ..all
    };
    let p = run(&s, &expiring, 2_000);
    assert_eq!(
        decisions(&p),
        [
            "Expired [\"e0\", \"e1\", \"e2\", \"e3\", \"e4\"] -> []",
            "Expired [\"busy\"] -> [\"c5.large\"]"
        ]
    );
}
