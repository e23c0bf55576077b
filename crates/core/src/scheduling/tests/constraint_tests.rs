//! Scenario tests of topology spread, pod (anti-)affinity and host ports, on the hand-made
//! catalog of `simulation.rs` (three zones, spot at 40 % of on-demand).

use std::collections::BTreeMap;

use crate::instance_type::CapacityType;
use crate::labels;
use crate::pod::{DaemonSet, HostPort, Node, Pod, PodAffinityTerm, TopologySpread};
use crate::provisioner::Provisioner;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::scheduling::{simulate, Options, Plan};
use crate::snapshot::Snapshot;
use crate::testing::plan_check::{check_with, SpreadDomains};

use super::simulation::{catalog, deployment, pod};

const GI: i64 = 1 << 30;

fn run(s: &Snapshot) -> Plan {
    simulate(s, &catalog(), &Options::default())
}

fn app(name: &str) -> Requirements {
    let mut r = Requirements::new();
    r.add("app", Requirement::single(name));
    r
}

fn spread(key: &str, max_skew: i32, selector: Requirements) -> TopologySpread {
    TopologySpread {
        topology_key: key.into(),
        max_skew,
        min_domains: None,
        hard: true,
        selector,
        honor_node_affinity: true,
        honor_node_taints: false,
    }
}

fn term(key: &str, anti: bool, selector: Requirements) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: key.into(),
        selector,
        namespaces: Vec::new(),
        namespace_selector: None,
        anti,
        weight: None,
    }
}

fn zone_counts(p: &Plan) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for n in &p.new_nodes {
        *m.entry(n.zone.clone()).or_default() += n.pods.len();
    }
    m
}

/// `n` web pods (1 cpu each) already running on node `node`.
fn running_web(n: usize, node: &str) -> Vec<Pod> {
    let mut running = deployment("web", n, 1000, 512);
    for (i, p) in running.iter_mut().enumerate() {
        p.name = format!("running-{i}");
        p.node_name = Some(node.into());
    }
    running
}

fn node_in(zone: &str, name: &str, cpus: i64) -> Node {
    let mut labels = BTreeMap::new();
    labels.insert(labels::ZONE.to_string(), zone.to_string());
    labels.insert(labels::HOSTNAME.to_string(), name.to_string());
    Node {
        name: name.into(),
        labels,
        allocatable: Resources::new(cpus * 1000, 8 * GI, 17 * GI, 30),
        capacity: Resources::new(cpus * 1000, 8 * GI, 20 * GI, 30),
        ..Node::default()
    }
}

#[test]
fn zone_spread_puts_two_pods_in_each_zone() {
    let mut pods = deployment("web", 6, 500, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty());
    let counts: Vec<usize> = zone_counts(&p).values().copied().collect();
    assert_eq!(counts, vec![2, 2, 2]);
}

#[test]
fn zone_spread_counts_running_pods() {
    // Two web pods already run in z-a on a full node: the four new ones go to z-b and z-c.
    let running = running_web(2, "full");
    let mut pods = deployment("web", 4, 500, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
    }
    pods.extend(running);
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-a", "full", 2)],
        ..Snapshot::default()
    });
    let counts = zone_counts(&p);
    assert_eq!(counts.get("z-a"), None, "{counts:?}");
    assert_eq!(counts.get("z-b"), Some(&2));
    assert_eq!(counts.get("z-c"), Some(&2));
}

/// The default Provisioner, launching only in `zones`.
fn zones_provisioner(zones: &[&str]) -> Provisioner {
    let mut prov = Provisioner::default_provisioner();
    prov.requirements
        .add(labels::ZONE, Requirement::one_of(zones.iter().copied()));
    prov
}

#[test]
fn zone_spread_domains_are_the_provisioners_zones() {
    let prov = zones_provisioner(&["z-a", "z-b"]);
    let mut pods = deployment("web", 4, 500, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
    }
    let p = run(&Snapshot {
        pods,
        provisioners: vec![prov],
        ..Snapshot::default()
    });
    let counts = zone_counts(&p);
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert_eq!(counts.get("z-a"), Some(&2));
    assert_eq!(counts.get("z-b"), Some(&2));
}

#[test]
fn hostname_anti_affinity_gives_each_pod_its_own_node_but_shares_it_with_others() {
    let mut pods = deployment("db", 5, 500, 512);
    for p in &mut pods {
        p.affinity.push(term(labels::HOSTNAME, true, app("db")));
    }
    pods.extend(deployment("web", 5, 500, 512));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty());
    for n in &p.new_nodes {
        let dbs = n.pods.iter().filter(|k| k.contains("/db-")).count();
        assert!(dbs <= 1, "{n:?}");
    }
    let total: usize = p.new_nodes.iter().map(|n| n.pods.len()).sum();
    assert_eq!(total, 10);
    assert!(
        p.new_nodes.len() <= 5,
        "web pods ride along on the db nodes: {:?}",
        p.new_nodes
    );
}

#[test]
fn hostname_spread_caps_pods_per_node_at_max_skew() {
    let mut pods = deployment("web", 6, 100, 128);
    for p in &mut pods {
        p.topology_spread
            .push(spread(labels::HOSTNAME, 2, app("web")));
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert_eq!(p.new_nodes.len(), 3);
    assert!(p.new_nodes.iter().all(|n| n.pods.len() == 2));
}

fn with_port(mut p: Pod, port: i32) -> Pod {
    p.host_ports.push(HostPort {
        port,
        protocol: "TCP".into(),
        ip: String::new(),
    });
    p
}

#[test]
fn host_ports_never_share_a_node() {
    let pods: Vec<Pod> = deployment("ingress", 3, 100, 128)
        .into_iter()
        .map(|p| with_port(p, 80))
        .chain(std::iter::once(with_port(pod("other", 100, 128), 443)))
        .collect();
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert_eq!(p.new_nodes.len(), 3);
    for n in &p.new_nodes {
        assert_eq!(
            n.pods.iter().filter(|k| k.contains("ingress")).count(),
            1,
            "{n:?}"
        );
    }
}

#[test]
fn daemonset_host_port_excludes_the_provisioner() {
    let ds = DaemonSet {
        namespace: "kube-system".into(),
        name: "proxy".into(),
        pod: with_port(pod("proxy", 50, 64), 8080),
    };
    let p = run(&Snapshot {
        pods: vec![with_port(pod("a", 100, 128), 8080)],
        daemonsets: vec![ds],
        ..Snapshot::default()
    });
    assert!(p.new_nodes.is_empty());
    assert_eq!(
        p.unschedulable[0].reason,
        "host port 8080/TCP is already bound by a DaemonSet on every allowed instance type"
    );
}

#[test]
fn running_pod_anti_affinity_repels_a_new_pod() {
    let mut guard = pod("guard", 100, 128);
    guard.node_name = Some("n1".into());
    guard
        .affinity
        .push(term(labels::HOSTNAME, true, app("web")));
    let mut web = pod("web-0", 100, 128);
    web.labels.insert("app".into(), "web".into());
    let p = run(&Snapshot {
        pods: vec![guard, web, pod("plain", 100, 128)],
        nodes: vec![node_in("z-a", "n1", 4)],
        ..Snapshot::default()
    });
    assert_eq!(p.existing_nodes.len(), 1);
    assert_eq!(p.existing_nodes[0].pods, vec!["default/plain"]);
    assert_eq!(p.new_nodes.len(), 1);
    assert_eq!(p.new_nodes[0].pods, vec!["default/web-0"]);
}

#[test]
fn zone_anti_affinity_allows_one_pod_per_zone() {
    let mut pods = deployment("quorum", 4, 100, 128);
    for p in &mut pods {
        p.affinity.push(term(labels::ZONE, true, app("quorum")));
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert_eq!(
        zone_counts(&p).values().copied().collect::<Vec<_>>(),
        vec![1, 1, 1]
    );
    assert_eq!(p.unschedulable.len(), 1);
    assert!(
        p.unschedulable[0]
            .reason
            .starts_with("pod anti-affinity on topology.kubernetes.io/zone"),
        "{}",
        p.unschedulable[0].reason
    );
}

/// A db pod pending with required pod affinity to `app: db` on the zone and on `rack` (a
/// label only the Provisioner's nodes carry), and, when `running`, a db pod on `n-a` in z-a,
/// a node without a rack label.
fn db_affine_on_zone_and_rack(running: bool) -> Snapshot {
    let mut pending = pod("db-1", 500, 512);
    pending.labels.insert("app".into(), "db".into());
    pending.affinity.push(term(labels::ZONE, false, app("db")));
    pending.affinity.push(term("rack", false, app("db")));
    let mut pods = vec![pending];
    if running {
        let mut db = pod("db-0", 100, 128);
        db.labels.insert("app".into(), "db".into());
        db.node_name = Some("n-a".into());
        pods.push(db);
    }
    let mut prov = Provisioner::default_provisioner();
    prov.labels.insert("rack".into(), "r1".into());
    Snapshot {
        pods,
        nodes: vec![node_in("z-a", "n-a", 1)],
        provisioners: vec![prov],
        ..Snapshot::default()
    }
}

#[test]
fn the_first_pod_exception_ends_once_a_partner_runs_on_a_node_with_any_term_key() {
    // The kube-scheduler (InterPodAffinity) lets a pod break its required affinity only while
    // no pod matching its terms runs on a node carrying any of the terms' topology keys, and
    // the pod matches them itself. With no db pod running, db-1 starts the series: a new node
    // (rack r1) is bought for it. With db-0 on n-a (zone z-a, no rack label), the zone term
    // counts db-0, so the exception is off; no node has a rack value where a db pod runs, so
    // db-1 stays pending and nothing is bought for it.
    let alone = run(&db_affine_on_zone_and_rack(false));
    assert!(alone.unschedulable.is_empty(), "{:?}", alone.unschedulable);
    assert_eq!(alone.new_nodes.len(), 1);
    let p = run(&db_affine_on_zone_and_rack(true));
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    assert_eq!(p.unschedulable.len(), 1, "{:?}", p.unschedulable);
    assert!(
        p.unschedulable[0].reason.contains("rack"),
        "{}",
        p.unschedulable[0].reason
    );
}

#[test]
fn a_preferred_partner_does_not_end_the_first_pod_exception_of_a_required_term() {
    // db-1 requires zone affinity to app=db, which it matches itself, and no db pod runs; it
    // prefers (weight 100) a zone running app=cache, and a cache pod runs on n-a in z-a. The
    // kube-scheduler counts partners for required terms only, so db-1 may start its series,
    // and its preference takes it to z-a: nothing is relaxed.
    let mut db = pod("db-1", 500, 512);
    db.labels.insert("app".into(), "db".into());
    db.affinity.push(term(labels::ZONE, false, app("db")));
    let mut near_cache = term(labels::ZONE, false, app("cache"));
    near_cache.weight = Some(100);
    db.affinity.push(near_cache);
    let mut cache = pod("cache", 100, 128);
    cache.labels.insert("app".into(), "cache".into());
    cache.node_name = Some("n-a".into());
    let s = Snapshot {
        pods: vec![db, cache],
        nodes: vec![node_in("z-a", "n-a", 1), node_in("z-b", "n-b", 1)],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert!(p.relaxed.is_empty(), "{:?}", p.relaxed);
    assert_eq!(p.existing_nodes.len(), 1, "{:?}", p.existing_nodes);
    assert_eq!(p.existing_nodes[0].name, "n-a");
}

#[test]
fn zone_affinity_follows_the_running_partner() {
    let mut cache = pod("cache", 100, 128);
    cache.labels.insert("app".into(), "cache".into());
    cache.node_name = Some("n-b".into());
    let mut pods = deployment("web", 3, 1500, 512);
    for p in &mut pods {
        p.affinity.push(term(labels::ZONE, false, app("cache")));
    }
    pods.push(cache);
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-b", "n-b", 1)],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty());
    assert!(!p.new_nodes.is_empty());
    assert!(
        p.new_nodes.iter().all(|n| n.zone == "z-b"),
        "{:?}",
        p.new_nodes
    );
}

#[test]
fn self_zone_affinity_keeps_a_group_in_one_zone() {
    let mut pods = deployment("batch", 8, 1500, 512);
    for p in &mut pods {
        p.affinity.push(term(labels::ZONE, false, app("batch")));
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty());
    assert_eq!(zone_counts(&p).len(), 1);
}

fn spot_provisioner() -> Provisioner {
    let mut prov = Provisioner::default_provisioner();
    prov.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::one_of(["spot", "on-demand"]),
    );
    prov
}

#[test]
fn spot_is_used_unless_the_pod_requires_on_demand() {
    let mut od = pod("od", 1500, 512);
    let mut r = Requirements::new();
    r.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
    od.node_terms = vec![r];
    let p = run(&Snapshot {
        pods: vec![od, pod("any", 1500, 512)],
        provisioners: vec![spot_provisioner()],
        ..Snapshot::default()
    });
    let by_pod = |k: &str| p.new_nodes.iter().find(|n| n.pods.iter().any(|x| x == k));
    assert_eq!(
        by_pod("default/od").map(|n| n.capacity_type),
        Some(CapacityType::OnDemand)
    );
    assert_eq!(
        by_pod("default/any").map(|n| n.capacity_type),
        Some(CapacityType::Spot)
    );
}

#[test]
fn capacity_type_spread_splits_spot_and_on_demand() {
    let mut pods = deployment("web", 4, 1500, 512);
    for p in &mut pods {
        p.topology_spread
            .push(spread(labels::CAPACITY_TYPE, 1, app("web")));
    }
    let p = run(&Snapshot {
        pods,
        provisioners: vec![spot_provisioner()],
        ..Snapshot::default()
    });
    let spot: usize = p
        .new_nodes
        .iter()
        .filter(|n| n.capacity_type == CapacityType::Spot)
        .map(|n| n.pods.len())
        .sum();
    let od: usize = p
        .new_nodes
        .iter()
        .filter(|n| n.capacity_type == CapacityType::OnDemand)
        .map(|n| n.pods.len())
        .sum();
    assert_eq!((spot, od), (2, 2));
}

fn prefer_zone(p: &mut Pod, zone: &str, weight: i32) {
    let mut r = Requirements::new();
    r.add(labels::ZONE, Requirement::single(zone));
    p.preferred_node_terms.push((weight, r));
}

#[test]
fn a_preferred_zone_is_honored_when_possible() {
    let mut pods = deployment("web", 4, 1500, 512);
    for p in &mut pods {
        prefer_zone(p, "z-b", 10);
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.relaxed.is_empty());
    assert!(
        p.new_nodes.iter().all(|n| n.zone == "z-b"),
        "{:?}",
        p.new_nodes
    );
}

#[test]
fn of_two_preferred_zones_the_heavier_is_used() {
    // Preferred node-affinity terms are alternatives: the heaviest is tried first, and a
    // lighter one is never ANDed with it (which here would allow no zone at all).
    let mut a = pod("a", 500, 512);
    prefer_zone(&mut a, "z-c", 10);
    prefer_zone(&mut a, "z-a", 50);
    let p = run(&Snapshot {
        pods: vec![a],
        ..Snapshot::default()
    });
    assert_eq!(p.new_nodes[0].zone, "z-a");
    assert!(p.relaxed.is_empty(), "{:?}", p.relaxed);
}

#[test]
fn preferred_node_terms_are_tried_heaviest_first_and_dropped_one_by_one() {
    // Weights 100 (a zone that does not exist), 50 (z-b), 1 (z-a): the pod cannot be placed
    // with the heaviest, so it is dropped and the next heaviest, z-b, is used.
    let mut a = pod("a", 500, 512);
    prefer_zone(&mut a, "z-nowhere", 100);
    prefer_zone(&mut a, "z-b", 50);
    prefer_zone(&mut a, "z-a", 1);
    let p = run(&Snapshot {
        pods: vec![a],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.new_nodes[0].zone, "z-b");
    assert_eq!(
        p.relaxed[0].preferences,
        vec!["preferred node affinity topology.kubernetes.io/zone In [z-nowhere] (weight 100)"]
    );
}

#[test]
fn a_preferred_zone_never_narrows_the_domains_a_hard_spread_counts() {
    // Three pods with a hard zone spread (maxSkew 1) prefer z-a. The kube-scheduler counts all
    // three zones for the spread, so only one pod can go to z-a; the others give up the
    // preference and take the other zones.
    let mut pods = deployment("web", 3, 500, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
        prefer_zone(p, "z-a", 50);
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let counts: Vec<usize> = zone_counts(&p).values().copied().collect();
    assert_eq!(counts, vec![1, 1, 1], "{:?}", p.new_nodes);
    assert_eq!(p.relaxed.len(), 2, "{:?}", p.relaxed);
}

#[test]
fn preferred_zone_anti_affinity_is_relaxed_only_for_the_pod_that_needs_it() {
    let mut pods = deployment("quorum", 4, 100, 128);
    for p in &mut pods {
        let mut t = term(labels::ZONE, true, app("quorum"));
        t.weight = Some(10);
        p.affinity.push(t);
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty());
    assert_eq!(p.relaxed.len(), 1, "{:?}", p.relaxed);
    assert_eq!(
        p.relaxed[0].preferences,
        vec![
            "preferred pod anti-affinity on topology.kubernetes.io/zone to pods app In [quorum] (weight 10)"
        ]
    );
    assert_eq!(zone_counts(&p).len(), 3);
}

#[test]
fn schedule_anyway_spread_is_followed_when_free() {
    let mut pods = deployment("web", 6, 1500, 512);
    for p in &mut pods {
        let mut s = spread(labels::ZONE, 1, app("web"));
        s.hard = false;
        p.topology_spread.push(s);
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.relaxed.is_empty());
    assert_eq!(
        zone_counts(&p).values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2]
    );
}

#[test]
fn explanation_counts_what_excluded_each_type() {
    use crate::scheduling::explain::{explain, Placement};
    let mut big = pod("big", 40_000, 1024);
    let mut fam = Requirements::new();
    fam.add(
        crate::testing::catalog::INSTANCE_FAMILY,
        Requirement::single("c5"),
    );
    big.node_terms = vec![fam];
    let s = Snapshot {
        pods: vec![big],
        ..Snapshot::default()
    };
    let plan = run(&s);
    let e = explain(&s, &catalog(), &plan, "default/big").expect("pod exists");
    let f = &e.provisioners[0];
    assert_eq!(f.catalog, 21);
    assert_eq!(
        f.excluded,
        vec![
            (
                "requirement karpenter.k8s.aws/instance-family In [c5]".to_string(),
                15
            ),
            ("resource cpu".to_string(), 4),
        ]
    );
    assert_eq!(f.left, 2);
    assert!(
        matches!(&e.placement, Placement::New { instance_type, .. } if instance_type == "c5.12xlarge")
    );
    assert!(e
        .event_message()
        .starts_with("would be scheduled on new node default-1 (c5.12xlarge"));
    assert!(explain(&s, &catalog(), &plan, "default/none").is_none());
}

#[test]
fn explanation_names_the_topology_pin_and_node_rules() {
    use crate::scheduling::explain::explain;
    let mut pods = deployment("web", 2, 500, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
        p.affinity.push(term(labels::HOSTNAME, true, app("web")));
    }
    let s = Snapshot {
        pods,
        ..Snapshot::default()
    };
    let plan = run(&s);
    let e = explain(&s, &catalog(), &plan, "default/web-1").expect("pod exists");
    assert_eq!(
        e.pinned.as_deref(),
        Some("topology.kubernetes.io/zone In [z-b]")
    );
    assert_eq!(
        e.node_rules,
        vec!["carries and is counted by pod anti-affinity on kubernetes.io/hostname to pods app In [web]"]
    );
    assert!(e.to_string().contains("Placement: new node"), "{e}");
}

#[test]
fn hostname_self_affinity_puts_the_group_on_one_node() {
    let mut pods = deployment("shard", 6, 1000, 1024);
    for p in &mut pods {
        p.affinity.push(term(labels::HOSTNAME, false, app("shard")));
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.new_nodes.len(), 1);
    assert_eq!(p.new_nodes[0].pods.len(), 6);
}

#[test]
fn a_hostname_self_affine_group_goes_whole_onto_an_existing_node_that_holds_it() {
    // The node bought for the group in an earlier batch is still in flight (or an existing
    // node has room): the group goes there, and nothing is bought again.
    let group = |n: usize, cpu: i64| {
        let mut pods = deployment("shard", n, cpu, 1024);
        for p in &mut pods {
            p.affinity.push(term(labels::HOSTNAME, false, app("shard")));
        }
        pods
    };
    let nodes = || vec![node_in("z-a", "n-small", 2), node_in("z-a", "n-big", 8)];
    let fits = run(&Snapshot {
        pods: group(6, 1000),
        nodes: nodes(),
        ..Snapshot::default()
    });
    assert!(fits.new_nodes.is_empty(), "{:?}", fits.new_nodes);
    assert_eq!(fits.existing_nodes.len(), 1);
    assert_eq!(fits.existing_nodes[0].name, "n-big");
    assert_eq!(fits.existing_nodes[0].pods.len(), 6);

    // No node holds all 12: the kube-scheduler puts the first pod on a node with room, and
    // the others can only join it. The roomiest node takes 8; the other 4 would wait for
    // ever, so nothing is bought for them.
    let too_many = run(&Snapshot {
        pods: group(12, 1000),
        nodes: nodes(),
        ..Snapshot::default()
    });
    assert!(too_many.new_nodes.is_empty(), "{:?}", too_many.new_nodes);
    assert_eq!(too_many.existing_nodes.len(), 1);
    assert_eq!(too_many.existing_nodes[0].name, "n-big");
    assert_eq!(too_many.existing_nodes[0].pods.len(), 8);
    assert_eq!(too_many.unschedulable.len(), 4);
    assert_eq!(
        too_many.unschedulable[0].reason,
        "pod affinity on kubernetes.io/hostname: its pods must share one node, and the node \
         its first pod goes to (n-big) has room for 8 of them"
    );

    // No existing node has room for one: a new node takes the whole group.
    let none_fit = run(&Snapshot {
        pods: group(3, 9000),
        nodes: nodes(),
        ..Snapshot::default()
    });
    assert!(none_fit.existing_nodes.iter().all(|n| n.pods.is_empty()));
    assert_eq!(none_fit.new_nodes.len(), 1);
    assert_eq!(none_fit.new_nodes[0].pods.len(), 3);
}

#[test]
fn a_self_affine_group_no_type_holds_gets_the_type_that_holds_the_most() {
    // 10 pods of 30 cpu must share one node; the largest type (128 vCPU) holds 4 of them.
    // What does not fit can go nowhere else, so the node is the one holding the most.
    let mut pods = deployment("shard", 10, 30_000, 1024);
    for p in &mut pods {
        p.affinity.push(term(labels::HOSTNAME, false, app("shard")));
    }
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert_eq!(p.new_nodes.len(), 1, "{:?}", p.new_nodes);
    assert_eq!(p.new_nodes[0].pods.len(), 4, "{:?}", p.new_nodes[0]);
    assert_eq!(p.unschedulable.len(), 6);
}

#[test]
fn hostname_affinity_to_a_running_pod_uses_its_node_only() {
    let mut cache = pod("cache", 100, 128);
    cache.labels.insert("app".into(), "cache".into());
    cache.node_name = Some("n-b".into());
    let mut pods = deployment("web", 3, 1000, 512);
    for p in &mut pods {
        p.affinity.push(term(labels::HOSTNAME, false, app("cache")));
    }
    pods.push(cache);
    let mut orphan = pod("orphan", 100, 128);
    orphan
        .affinity
        .push(term(labels::HOSTNAME, false, app("nobody")));
    pods.push(orphan);
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-b", "n-b", 2), node_in("z-a", "n-a", 8)],
        ..Snapshot::default()
    });
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    assert_eq!(p.existing_nodes.len(), 1);
    assert_eq!(p.existing_nodes[0].name, "n-b");
    assert_eq!(
        p.existing_nodes[0].pods.len(),
        1,
        "1 cpu free after the cache"
    );
    let reasons: Vec<&str> = p.unschedulable.iter().map(|u| u.reason.as_str()).collect();
    assert_eq!(reasons.len(), 3);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("no pod matches app In [nobody]")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("no room on the nodes running the pods it selects")),
        "{reasons:?}"
    );
}

#[test]
fn min_domains_above_the_zone_count_caps_each_zone_at_max_skew() {
    // Two allowed zones, minDomains 3: the global minimum counts as 0, so each zone takes at
    // most maxSkew (1) pod and the other two pods stay pending with the spread named.
    let prov = zones_provisioner(&["z-a", "z-b"]);
    let mut pods = deployment("web", 4, 500, 512);
    for p in &mut pods {
        let mut s = spread(labels::ZONE, 1, app("web"));
        s.min_domains = Some(3);
        p.topology_spread.push(s);
    }
    let p = run(&Snapshot {
        pods,
        provisioners: vec![prov],
        ..Snapshot::default()
    });
    assert_eq!(
        zone_counts(&p).values().copied().collect::<Vec<_>>(),
        vec![1, 1]
    );
    assert_eq!(p.unschedulable.len(), 2);
    assert!(p.unschedulable[0]
        .reason
        .starts_with("topology spread on topology.kubernetes.io/zone (maxSkew 1)"));
}

/// Pods per node (new and existing) in the plan, by name prefix of the pod key.
fn layout(p: &Plan) -> Vec<(String, String, Vec<String>)> {
    let short = |k: &String| k.trim_start_matches("default/").to_string();
    let mut out: Vec<(String, String, Vec<String>)> = p
        .existing_nodes
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                String::new(),
                e.pods.iter().map(short).collect(),
            )
        })
        .collect();
    out.extend(p.new_nodes.iter().map(|n| {
        (
            n.name.clone(),
            n.instance_type.clone(),
            n.pods.iter().map(short).collect(),
        )
    }));
    out
}

fn with_affinity(mut pods: Vec<Pod>, key: &str, to: Requirements) -> Vec<Pod> {
    for p in &mut pods {
        p.affinity.push(term(key, false, to.clone()));
    }
    pods
}

#[test]
fn a_self_affine_zone_group_starts_in_the_zone_of_an_empty_node_already_there() {
    // Karpenter's "should respect self pod affinity without pod binding (zone)": an empty
    // node (in flight, or idle) in z-b, and pods that must share a zone with their own app.
    // No pod of the app runs, so the first may go to any zone; the kube-scheduler puts it on
    // the node with room, and every later pod must join z-b: a node bought in z-a (the first
    // zone by name) would stay empty.
    let one = with_affinity(deployment("db", 1, 500, 256), labels::ZONE, app("db"));
    let p = run(&Snapshot {
        pods: one,
        nodes: vec![node_in("z-b", "n-b", 4)],
        ..Snapshot::default()
    });
    assert!(p.new_nodes.is_empty(), "{:?}", layout(&p));
    assert_eq!(
        layout(&p),
        vec![("n-b".into(), String::new(), vec!["db-0".into()])]
    );

    // Three that fit there go there; five of 1 cpu (n-b holds three) put the other two on a
    // new node in z-b.
    let p = run(&Snapshot {
        pods: with_affinity(deployment("db", 5, 1000, 256), labels::ZONE, app("db")),
        nodes: vec![node_in("z-b", "n-b", 4)],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.existing_nodes.len(), 1);
    assert!(!p.new_nodes.is_empty());
    assert!(
        p.new_nodes.iter().all(|n| n.zone == "z-b"),
        "{:?}",
        layout(&p)
    );
}

#[test]
fn an_empty_node_draws_a_spread_pod_only_while_it_has_room() {
    // One zone spread (maxSkew 1) of four 600m pods; n-b in z-b has room for one. The first
    // takes n-b, the next two z-a and z-c; the fourth, all zones at one, goes to z-a by name
    // (n-b has no room left), sharing the z-a node: two nodes bought. Taking n-b's zone
    // again as if its room were still there would buy a third in z-b.
    let p = run(&Snapshot {
        pods: spread_pods_of(4, 600, labels::ZONE),
        nodes: vec![node_in("z-b", "n-b", 1)],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.existing_nodes.len(), 1, "{:?}", layout(&p));
    assert_eq!(p.new_nodes.len(), 2, "{:?}", layout(&p));
    assert_eq!(
        counts_by(&p, labels::ZONE),
        BTreeMap::from([("z-a".to_string(), 2), ("z-c".to_string(), 1)])
    );
}

#[test]
fn pods_affine_to_each_other_on_two_keys_share_both_domains() {
    // a must share an instance type with an app=x pod, b a zone; each selects the other. In
    // the final cluster each needs a partner in its own domain, whichever the kube-scheduler
    // took first: the same instance type and the same zone. b placed in a's zone on another
    // type would leave a's term unmet unless a came first.
    let mut a = pod("a", 500, 256);
    a.labels.insert("app".into(), "x".into());
    let mut b = pod("b", 300, 256);
    b.labels.insert("app".into(), "x".into());
    a.affinity
        .push(term(labels::INSTANCE_TYPE, false, app("x")));
    b.affinity.push(term(labels::ZONE, false, app("x")));
    let p = run(&Snapshot {
        pods: vec![a, b],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let at = |name: &str| {
        p.new_nodes
            .iter()
            .find(|n| n.pods.iter().any(|k| k == name))
            .map(|n| (n.instance_type.clone(), n.zone.clone()))
    };
    assert!(at("default/a").is_some());
    assert_eq!(at("default/a"), at("default/b"), "{:?}", layout(&p));
}

#[test]
fn hostname_affinity_to_pending_pods_shares_their_nodes() {
    // The issue's example: 2 cache (1 cpu) and 4 web (0.5 cpu) that must run next to a cache.
    // Hand-checked on this catalog (c5: 0.0425/vCPU, allocatable = vCPUs − 70m):
    //   all on one node: 4 cpu > c5.xlarge's 3.93 → c5.2xlarge, 0.34/h;
    //   2 × (1 cache + 2 web): 2 cpu > c5.large's 1.93 → 2 × c5.xlarge, 0.34/h;
    //   1 cache + 4 web (3 cpu) on c5.xlarge + the other cache alone on c5.large: 0.255/h,
    //   the cheapest (a lone cache is fine: only web carries the affinity).
    let mut pods = deployment("cache", 2, 1000, 1024);
    pods.extend(with_affinity(
        deployment("web", 4, 500, 512),
        labels::HOSTNAME,
        app("cache"),
    ));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let node = |n: &str, t: &str, pods: &[&str]| {
        (
            n.to_string(),
            t.to_string(),
            pods.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        layout(&p),
        vec![
            node(
                "default-1",
                "c5.xlarge",
                &["cache-0", "web-0", "web-1", "web-2", "web-3"]
            ),
            node("default-2", "c5.large", &["cache-1"]),
        ]
    );
    assert!((p.new_price_per_hour() - 0.255).abs() < 1e-9);
}

/// `pods`, each held to zone `zone` by its node terms.
fn in_zone(mut pods: Vec<Pod>, zone: &str) -> Vec<Pod> {
    for p in &mut pods {
        let mut r = Requirements::new();
        r.add(labels::ZONE, Requirement::single(zone));
        p.node_terms.push(r);
    }
    pods
}

#[test]
fn a_zone_where_a_spread_holds_pods_still_counts_for_the_classes_refused_there() {
    // One spread (zones, maxSkew 1, every node counts) over two classes of app=web: web-a
    // (1 pod) is held to z-b; web-b (3 pods) must share a node with the db pod, which is
    // held to z-a. The kube-scheduler sees nodes in z-a and z-b: z-b holds web-a, so z-a may
    // hold 2 web pods. Two web-b pods join db, the third stays pending. An earlier reading
    // dropped z-b from web-b's count once web-b got no pod there (web-a's node is there all
    // the same) and put all three next to db: 3 against 1.
    let mut pods = in_zone(deployment("db", 1, 500, 512), "z-a");
    let mut web_a = in_zone(deployment("web-a", 1, 500, 512), "z-b");
    let mut web_b = with_affinity(
        deployment("web-b", 3, 500, 512),
        labels::HOSTNAME,
        app("db"),
    );
    for p in web_a.iter_mut().chain(&mut web_b) {
        p.labels.insert("app".into(), "web".into());
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
    }
    pods.extend(web_a);
    pods.extend(web_b);
    let s = Snapshot {
        pods,
        ..Snapshot::default()
    };
    let p = run(&s);
    let zone_of = |pod: &str| {
        p.new_nodes
            .iter()
            .find(|n| n.pods.iter().any(|k| k == pod))
            .map(|n| n.zone.as_str())
    };
    assert_eq!(zone_of("default/db-0"), Some("z-a"));
    assert_eq!(zone_of("default/web-a-0"), Some("z-b"));
    let web_b: Vec<Option<&str>> = (0..3)
        .map(|i| zone_of(&format!("default/web-b-{i}")))
        .collect();
    assert_eq!(
        web_b.iter().filter(|z| **z == Some("z-a")).count(),
        2,
        "{:?}",
        layout(&p)
    );
    assert_eq!(p.unschedulable.len(), 1, "{:?}", p.unschedulable);
    assert!(p.unschedulable[0].pod.starts_with("default/web-b-"));
    check_with(&s, &catalog(), &p, SpreadDomains::FinalCluster).expect("constraints hold");
}

/// The `groups` of pods (each with whether it requires on-demand), in that order, as app=web
/// under one capacity-type spread (maxSkew 1) that counts every node
/// (`nodeAffinityPolicy: Ignore`), with a Provisioner offering spot and on-demand.
fn web_capacity_type_spread(groups: Vec<(Vec<Pod>, bool)>) -> Snapshot {
    let mut pods = Vec::new();
    for (group, on_demand) in groups {
        for mut p in group {
            if on_demand {
                let mut r = Requirements::new();
                r.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
                p.node_terms.push(r);
            }
            p.labels.insert("app".into(), "web".into());
            let mut s = spread(labels::CAPACITY_TYPE, 1, app("web"));
            s.honor_node_affinity = false;
            p.topology_spread.push(s);
            pods.push(p);
        }
    }
    Snapshot {
        pods,
        provisioners: vec![spot_provisioner()],
        ..Snapshot::default()
    }
}

/// The plan of `s`, which must place every pod and hold every constraint as the
/// kube-scheduler counts a spread's domains.
fn run_all_placed(s: &Snapshot) -> Plan {
    let p = run(s);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    check_with(s, &catalog(), &p, SpreadDomains::FinalCluster).expect("constraints hold");
    p
}

/// How many pods whose key `keep` accepts the plan puts on new nodes of capacity type `ct`.
fn pods_on(p: &Plan, ct: CapacityType, keep: impl Fn(&str) -> bool) -> usize {
    p.new_nodes
        .iter()
        .filter(|n| n.capacity_type == ct)
        .flat_map(|n| n.pods.iter())
        .filter(|k| keep(k))
        .count()
}

#[test]
fn an_on_demand_pod_and_flexible_ones_split_capacity_types_when_every_node_counts() {
    // One capacity-type spread (maxSkew 1, nodeAffinityPolicy Ignore: every node counts) over
    // a pod that requires on-demand and three that may use either. The kube-scheduler counts
    // the spot nodes for the on-demand pod too, so with spot nodes in the cluster it accepts
    // only 2 and 2 (the on-demand pod and one flexible pod on on-demand, two on spot); all
    // four on on-demand would be the other layout it accepts, dearer. 3 and 1, which counts
    // for the on-demand pod only the capacity type it may use, is refused.
    let s = web_capacity_type_spread(vec![
        (deployment("web-od", 1, 500, 512), true),
        (deployment("web-any", 3, 500, 512), false),
    ]);
    let p = run_all_placed(&s);
    let on = |ct| pods_on(&p, ct, |_| true);
    assert_eq!((on(CapacityType::OnDemand), on(CapacityType::Spot)), (2, 2));
}

#[test]
fn a_zone_only_tolerating_pods_reach_still_counts_for_the_pods_that_cannot_go_there() {
    // One zone spread (maxSkew 1; nodeTaintsPolicy Ignore, the default: tainted nodes count)
    // over web-t (3 pods of 1 cpu, tolerating the taint) and web (4 pods of 0.5 cpu, not
    // tolerating it). Zone z-c is offered only by a tainted Provisioner, so only web-t can go
    // there; its node is a domain for every web pod all the same. web-t is pinned first, one
    // pod per zone; web's pods, which reach z-a and z-b only, counted those two alone and
    // were put 2 + 2 there: 3, 3, 1, which the kube-scheduler refuses (no zone may hold
    // more than one pod above the emptiest, z-c with 1). Now the excess is closed: z-a and
    // z-b take 2 each and two web pods stay pending, as the kube-scheduler leaves them once
    // web-t runs in every zone.
    let mut plain = zones_provisioner(&["z-a", "z-b"]);
    plain.name = "plain".into();
    let mut tainted = Provisioner::default_provisioner();
    tainted.name = "tainted".into();
    tainted
        .requirements
        .add(labels::ZONE, Requirement::single("z-c"));
    tainted.taints = vec![crate::taints::Taint {
        key: "dedicated".into(),
        value: "web".into(),
        effect: crate::taints::Effect::NoSchedule,
    }];
    let mut pods = deployment("web-t", 3, 1000, 512);
    for p in &mut pods {
        p.tolerations = vec![crate::taints::Toleration {
            key: "dedicated".into(),
            exists: true,
            value: String::new(),
            effect: None,
        }];
    }
    pods.extend(deployment("web", 4, 500, 512));
    for p in &mut pods {
        p.labels.insert("app".into(), "web".into());
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
    }
    let s = Snapshot {
        pods,
        provisioners: vec![plain, tainted],
        ..Snapshot::default()
    };
    let p = run(&s);
    check_with(&s, &catalog(), &p, SpreadDomains::FinalCluster).expect("constraints hold");
    let counts: Vec<usize> = zone_counts(&p).into_values().collect();
    assert_eq!(counts, [2, 2, 1], "{:?}", layout(&p));
    let refused: Vec<&str> = p.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    assert_eq!(refused.len(), 2);
    assert!(refused
        .iter()
        .all(|r| r.starts_with("default/web-") && !r.starts_with("default/web-t")));
}

#[test]
fn a_pod_held_to_a_zone_keeps_it_when_pods_free_to_move_make_room_within_its_max_skew() {
    // One zone spread over app=web, every node counted (nodeAffinityPolicy Ignore), in a
    // Provisioner covering z-a and z-b: web (3 pods, maxSkew 2, any zone) and pinned (1 pod,
    // maxSkew 1, held to z-a by its node terms). With nodes in both zones, z-a may hold at
    // most one pod more than z-b for pinned to run there: 3 and 1 leaves pinned pending, 2
    // and 2 places all four and spreads the most. The pinning takes pinned first (its node
    // terms fix its zone); were it taken last, the closing would move a web pod out of z-a
    // rather than pinned's, which has nowhere else to go.
    let prov = zones_provisioner(&["z-a", "z-b"]);
    let mut pods = deployment("web", 3, 500, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(labels::ZONE, 2, app("web")));
    }
    let mut pinned = in_zone(deployment("pinned", 1, 500, 512), "z-a");
    pinned[0].labels.insert("app".into(), "web".into());
    pinned[0]
        .topology_spread
        .push(spread(labels::ZONE, 1, app("web")));
    pods.extend(pinned);
    for p in &mut pods {
        p.topology_spread[0].honor_node_affinity = false;
    }
    let s = Snapshot {
        pods,
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let counts: Vec<usize> = zone_counts(&p).into_values().collect();
    assert_eq!(counts, [2, 2], "{:?}", layout(&p));
    check_with(&s, &catalog(), &p, SpreadDomains::FinalCluster).expect("constraints hold");
}

#[test]
fn flexible_pods_fill_around_pods_held_to_one_capacity_type() {
    // One capacity-type spread (maxSkew 1, every node counts) over web (4 pods, spot or
    // on-demand, listed first) and web-od (4 pods that require on-demand). The only layouts
    // placing all eight with spot nodes in the cluster are 4 and 4: web-od on on-demand, web
    // on spot. Pinned in the order given, web would have split 2 and 2 before web-od came,
    // leaving on-demand 6 against spot 2; web-od goes first, held as it is, and web fills
    // around it.
    let s = web_capacity_type_spread(vec![
        (deployment("web", 4, 500, 512), false),
        (deployment("web-od", 4, 500, 512), true),
    ]);
    let p = run_all_placed(&s);
    let on = |ct, held: bool| pods_on(&p, ct, |k| k.starts_with("default/web-od-") == held);
    assert_eq!(on(CapacityType::OnDemand, true), 4, "{:?}", layout(&p));
    assert_eq!(on(CapacityType::Spot, false), 4, "{:?}", layout(&p));
}

#[test]
fn hostname_affinity_to_pending_pods_without_room_is_unschedulable() {
    // A web pod that cannot share any node with a cache: the largest type (x1e, 128 vCPU) holds
    // the web pod alone but not next to a 1-cpu cache.
    let mut pods = deployment("cache", 1, 1000, 1024);
    pods.extend(with_affinity(
        deployment("web", 1, 127_000, 1024),
        labels::HOSTNAME,
        app("cache"),
    ));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert_eq!(layout(&p).len(), 1);
    assert_eq!(p.new_nodes[0].pods, vec!["default/cache-0"]);
    assert_eq!(p.unschedulable.len(), 1);
    assert_eq!(p.unschedulable[0].pod, "default/web-0");
    assert!(
        p.unschedulable[0].reason.contains(
            "pod affinity on kubernetes.io/hostname: no node hosting a pod matching app In [cache] has room"
        ),
        "{}",
        p.unschedulable[0].reason
    );
}

#[test]
fn hostname_affinity_to_pending_pods_mixes_running_existing_and_new_targets() {
    // n-a (2 cpu) takes two pending caches and is full; n-b (2 cpu) runs a 1.5-cpu cache and has
    // room for one web; the third cache needs a new node, which is sized for it and the 3 other
    // web pods (2.5 cpu → c5.xlarge).
    let mut running = pod("cache-r", 1500, 128);
    running.labels.insert("app".into(), "cache".into());
    running.node_name = Some("n-b".into());
    let mut pods = deployment("cache", 3, 1000, 512);
    pods.extend(with_affinity(
        deployment("web", 4, 500, 256),
        labels::HOSTNAME,
        app("cache"),
    ));
    pods.push(running);
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-a", "n-a", 2), node_in("z-b", "n-b", 2)],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let node = |n: &str, t: &str, pods: &[&str]| {
        (
            n.to_string(),
            t.to_string(),
            pods.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        layout(&p),
        vec![
            node("n-a", "", &["cache-0", "cache-1"]),
            node("n-b", "", &["web-0"]),
            node(
                "default-1",
                "c5.xlarge",
                &["cache-2", "web-1", "web-2", "web-3"]
            ),
        ]
    );
}

#[test]
fn a_hostname_affinity_cycle_starts_only_from_a_pod_matching_its_own_terms() {
    // a selects b and b selects a, neither matching its own term: the kube-scheduler places
    // neither (InterPodAffinity lets a pod without partners through only when it matches
    // all its own terms), so nothing is bought for them.
    let mut pods = with_affinity(deployment("a", 3, 1000, 512), labels::HOSTNAME, app("b"));
    pods.extend(with_affinity(
        deployment("b", 3, 500, 512),
        labels::HOSTNAME,
        app("a"),
    ));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    assert_eq!(p.unschedulable.len(), 6);
    assert!(
        p.unschedulable[0].reason.contains(
            "the kube-scheduler starts such a cycle only with a pod that matches all its own terms"
        ),
        "{:?}",
        p.unschedulable[0]
    );

    // a selects app In [a, b]: its first pod may start a node, and every later pod of either
    // class needs a node already running one it selects, which is that first node: the
    // whole cycle shares one node.
    let mut both = Requirements::new();
    both.add("app", Requirement::one_of(["a", "b"]));
    let mut pods = with_affinity(deployment("a", 3, 1000, 512), labels::HOSTNAME, both);
    pods.extend(with_affinity(
        deployment("b", 3, 500, 512),
        labels::HOSTNAME,
        app("a"),
    ));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    for (name, _, on) in layout(&p) {
        let has = |x: &str| on.iter().any(|k| k.starts_with(x));
        assert!(has("a-") && has("b-"), "{name}: {on:?}");
    }
    assert_eq!(p.new_nodes.len(), 1, "{:?}", layout(&p));
    assert_eq!(p.new_nodes[0].pods.len(), 6);
}

fn any_of(apps: &[&str]) -> Requirements {
    let mut r = Requirements::new();
    r.add("app", Requirement::one_of(apps.iter().copied()));
    r
}

/// Deployments (`app`, replicas, apps its hostname affinity selects) of 500m, 256 MiB pods.
fn affine_apps(apps: &[(&str, usize, &[&str])]) -> Vec<Pod> {
    apps.iter()
        .flat_map(|&(name, n, to)| {
            with_affinity(deployment(name, n, 500, 256), labels::HOSTNAME, any_of(to))
        })
        .collect()
}

/// The plan of `pods`, asserting all placed on one new node; how many it holds.
fn one_new_node(pods: Vec<Pod>) -> usize {
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.new_nodes.len(), 1, "{:?}", layout(&p));
    p.new_nodes[0].pods.len()
}

#[test]
fn a_cycle_is_started_by_any_class_it_reaches_that_matches_its_own_terms() {
    // a selects b or c, b selects a, c selects a or c: the walk a -> b -> a finds no class
    // matching itself, but c (reached from a) does, so the scheduler starts with c and puts
    // all six beside it.
    let pods = affine_apps(&[
        ("a", 2, &["b", "c"]),
        ("b", 2, &["a"]),
        ("c", 2, &["a", "c"]),
    ]);
    assert_eq!(one_new_node(pods), 6);
}

#[test]
fn a_class_selecting_a_cycle_it_is_not_on_joins_the_cycle_instead_of_starting_alone() {
    // api selects api, cache or db; cache and db select cache or db: a cycle api is not on
    // (neither selects api). Every pod's term selects pods that will run, so in the final
    // cluster each api pod shares a node with a cache or db pod, whatever order the
    // kube-scheduler takes them in; api started alone (it matches its own term) would hold
    // only if its pods came first. Six 500m pods: one node.
    let pods = affine_apps(&[
        ("api", 2, &["api", "cache", "db"]),
        ("cache", 2, &["cache", "db"]),
        ("db", 2, &["cache", "db"]),
    ]);
    assert_eq!(one_new_node(pods), 6);

    // When the cycle never starts (cache selects db and db selects cache, neither itself),
    // api's partners never run: it is the first of its series and goes alone.
    let p = run(&Snapshot {
        pods: affine_apps(&[
            ("api", 2, &["api", "cache", "db"]),
            ("cache", 2, &["db"]),
            ("db", 2, &["cache"]),
        ]),
        ..Snapshot::default()
    });
    let refused: Vec<&str> = p.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    assert_eq!(
        refused,
        [
            "default/cache-0",
            "default/cache-1",
            "default/db-0",
            "default/db-1"
        ]
    );
    assert_eq!(layout(&p).len(), 1, "{:?}", layout(&p));

    // Two classes upstream of such a cycle, one selecting the other: u2 (selecting c1 or
    // itself) is the first of its series, and u1 (selecting c1, itself or u2) must join a
    // u2 pod once one runs; all four share one node, whichever comes first.
    let p = run(&Snapshot {
        pods: affine_apps(&[
            ("u1", 2, &["c1", "u1", "u2"]),
            ("u2", 2, &["c1", "u2"]),
            ("c1", 2, &["c2"]),
            ("c2", 2, &["c1"]),
        ]),
        ..Snapshot::default()
    });
    assert_eq!(p.unschedulable.len(), 4, "{:?}", p.unschedulable);
    assert_eq!(p.new_nodes.len(), 1, "{:?}", layout(&p));
    assert_eq!(p.new_nodes[0].pods.len(), 4);
}

#[test]
fn a_cycle_selecting_a_class_that_may_still_run_waits_for_it() {
    // a (t=x) selects tier y or u; b (tier=y) selects t=x: a cycle neither starts (neither
    // matches its own term), but a also selects c (tier=u, app=db), which selects app=db:
    // itself and d. d (app=db) and e select each other and never start. So d and e never
    // run; c's first pod starts (it matches its own term and nothing it selects runs), a
    // joins c, b joins a: all three share a node. Refusing a and b together with d and e
    // (the cycle a-b was reached first) would leave them pending.
    let mk = |name: &str, labels: &[(&str, &str)], key: &str, values: &[&str]| {
        let mut p = pod(name, 300, 256);
        for (k, v) in labels {
            p.labels.insert((*k).into(), (*v).into());
        }
        let mut sel = Requirements::new();
        sel.add(key, Requirement::one_of(values.iter().copied()));
        p.affinity.push(term(labels::HOSTNAME, false, sel));
        p
    };
    let pods = vec![
        mk("a", &[("t", "x")], "tier", &["y", "u"]),
        mk("b", &[("tier", "y")], "t", &["x"]),
        mk("c", &[("tier", "u"), ("app", "db")], "app", &["db"]),
        mk("d", &[("app", "db"), ("role", "z")], "role", &["zz"]),
        mk("e", &[("role", "zz")], "role", &["z"]),
    ];
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    let refused: Vec<&str> = p.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    assert_eq!(refused, ["default/d", "default/e"], "{:?}", p.unschedulable);
    assert_eq!(p.new_nodes.len(), 1, "{:?}", layout(&p));
    assert_eq!(p.new_nodes[0].pods.len(), 3);
}

#[test]
fn a_three_class_cycle_gets_a_type_that_holds_all_of_it() {
    // a -> b -> c -> {a, c}: c leads, and its followers' followers join its node too.
    let pods = affine_apps(&[("a", 3, &["b"]), ("b", 3, &["c"]), ("c", 3, &["a", "c"])]);
    assert_eq!(one_new_node(pods), 9);
}

#[test]
fn a_cycle_goes_whole_onto_a_node_in_flight_that_holds_it_and_is_not_bought_again() {
    // c leads a -> b -> c -> {a, c}; an earlier batch bought n-new for the cycle, which is
    // in flight while the nine pods pend. It holds them all (4.5 of 8 cpus): they go there
    // and nothing is bought again.
    let cycle = || affine_apps(&[("a", 3, &["b"]), ("b", 3, &["c"]), ("c", 3, &["a", "c"])]);
    assert_eq!(all_on_existing_node(cycle(), node_in("z-a", "n-new", 8)), 9);

    // A node with room for part of it (2 cpus: four 500m pods): the kube-scheduler puts the
    // leader's first pod there and the others can only join it, so the leader's three and
    // one b pod go there, the rest wait, and nothing is bought.
    let small = run(&Snapshot {
        pods: cycle(),
        nodes: vec![node_in("z-a", "n-small", 2)],
        ..Snapshot::default()
    });
    assert!(small.new_nodes.is_empty(), "{:?}", small.new_nodes);
    let mut on_node = small.existing_nodes[0].pods.clone();
    on_node.sort();
    assert_eq!(
        on_node,
        ["default/b-0", "default/c-0", "default/c-1", "default/c-2"]
    );
    assert_eq!(small.unschedulable.len(), 5, "{:?}", small.unschedulable);
    let why = |pod: &str| {
        small
            .unschedulable
            .iter()
            .find(|u| u.pod == pod)
            .map(|u| u.reason.clone())
            .unwrap_or_default()
    };
    let cycle_note = "pod affinity on kubernetes.io/hostname: the pods of its affinity cycle \
                      must share one node, and the node its first pod goes to (n-small) has";
    assert_eq!(
        why("default/b-2"),
        format!("{cycle_note} room for 1 of them")
    );
    assert_eq!(why("default/a-0"), format!("{cycle_note} no room for them"));
    // b's pods (2 cpus each) do not fit beside the leader's: a, which must share a node
    // with a b pod, takes no room there either, though it would fit.
    let mut big_b = affine_apps(&[("a", 3, &["b"]), ("c", 3, &["a", "c"])]);
    big_b.extend(with_affinity(
        deployment("b", 3, 2000, 256),
        labels::HOSTNAME,
        any_of(&["c"]),
    ));
    let s = Snapshot {
        pods: big_b,
        nodes: vec![node_in("z-a", "n-small", 2)],
        ..Snapshot::default()
    };
    let p = run(&s);
    crate::testing::plan_check::check(&s, &catalog(), &p).expect("constraints hold");
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    let mut on_node = p.existing_nodes[0].pods.clone();
    on_node.sort();
    assert_eq!(on_node, ["default/c-0", "default/c-1", "default/c-2"]);
    assert_eq!(p.unschedulable.len(), 6, "{:?}", p.unschedulable);

    // In a disruption trial the replacement is ready before the drain: the evicted cycle
    // goes whole onto a new node.
    let evicted = simulate(
        &Snapshot {
            pods: cycle(),
            nodes: vec![node_in("z-a", "n-small", 2)],
            ..Snapshot::default()
        },
        &catalog(),
        &Options {
            evicted: true,
            ..Options::default()
        },
    );
    assert!(
        evicted.unschedulable.is_empty(),
        "{:?}",
        evicted.unschedulable
    );
    assert_eq!(evicted.new_nodes.len(), 1);
    assert_eq!(evicted.new_nodes[0].pods.len(), 9);
}

/// The plan of `pods` with `node` existing, asserting all placed there and nothing bought;
/// how many it holds.
fn all_on_existing_node(pods: Vec<Pod>, node: Node) -> usize {
    let p = run(&Snapshot {
        pods,
        nodes: vec![node],
        ..Snapshot::default()
    });
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    p.existing_nodes[0].pods.len()
}

#[test]
fn a_cycle_with_a_running_pod_joins_its_node_and_never_starts_another() {
    // a selects b, b selects a or b; an a pod runs on n-1. No pod may start a new node (one
    // they select runs): with room on n-1 all join it, with none nothing is bought.
    let cycle = || {
        let mut pods = affine_apps(&[("a", 3, &["b"]), ("b", 3, &["a", "b"])]);
        let mut running = pod("a-running", 100, 128);
        running.labels.insert("app".into(), "a".into());
        running.node_name = Some("n-1".into());
        pods.push(running);
        pods
    };
    assert_eq!(all_on_existing_node(cycle(), node_in("z-a", "n-1", 8)), 6);

    let full = run(&Snapshot {
        pods: cycle(),
        nodes: vec![node_in("z-a", "n-1", 1)],
        ..Snapshot::default()
    });
    assert!(full.new_nodes.is_empty(), "{:?}", full.new_nodes);
    // 900m free: one b pod joins the running a pod; nothing else fits beside them.
    assert_eq!(full.existing_nodes[0].pods, ["default/b-0"]);
    assert_eq!(full.unschedulable.len(), 5, "{:?}", full.unschedulable);
}

#[test]
fn hostname_affinity_that_also_selects_itself_follows_the_other_class() {
    // web selects app In [cache, web]: it rides with the cache, not on a node of its own.
    let mut sel = Requirements::new();
    sel.add("app", Requirement::one_of(["cache", "web"]));
    let mut pods = deployment("cache", 1, 1000, 512);
    pods.extend(with_affinity(
        deployment("web", 3, 500, 512),
        labels::HOSTNAME,
        sel,
    ));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.new_nodes.len(), 1);
    assert_eq!(p.new_nodes[0].pods.len(), 4);
}

#[test]
fn zone_affinity_to_pending_pods_shares_their_zone() {
    let mut pods = with_affinity(deployment("web", 4, 500, 512), labels::ZONE, app("cache"));
    pods.extend(deployment("cache", 2, 1000, 1024));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    // Every zone holding a web pod holds a cache (the caches themselves are free to spread).
    assert_web_zones_hold_a_cache(&p);
}

/// Every zone of a new node with a web pod has a new node with a cache pod.
fn assert_web_zones_hold_a_cache(p: &Plan) {
    for n in p
        .new_nodes
        .iter()
        .filter(|n| n.pods.iter().any(|k| k.contains("/web-")))
    {
        assert!(
            p.new_nodes
                .iter()
                .any(|m| m.zone == n.zone && m.pods.iter().any(|k| k.contains("/cache-"))),
            "{} has web pods and no cache",
            n.zone
        );
    }
}

fn in_zone_volume(p: &mut Pod, zone: &str) {
    p.require_volume_zones(vec![crate::pod::VolumeZone {
        claim: format!("{}/data-{}", p.namespace, p.name),
        zones: Requirement::single(zone),
    }]);
}

/// The plan for one pending web pod (zone spread, maxSkew 1) whose volume is in z-a, beside
/// `running` web pods on `node`.
fn spread_pod_with_volume_in_z_a(running: Vec<Pod>, node: Node) -> Plan {
    let mut pods = deployment("web", 1, 500, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
        in_zone_volume(p, "z-a");
    }
    pods.extend(running);
    run(&Snapshot {
        pods,
        nodes: vec![node],
        ..Snapshot::default()
    })
}

#[test]
fn a_volume_zone_does_not_shrink_the_domains_a_spread_counts() {
    // Two web pods run in z-a; a new one whose volume lives in z-a would make z-a hold three
    // against none in z-b and z-c. The kube-scheduler counts every zone the pod's own node
    // affinity allows (not only its volume's), so it refuses the pod; so must the plan.
    let p = spread_pod_with_volume_in_z_a(running_web(2, "full"), node_in("z-a", "full", 2));
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    assert_eq!(p.unschedulable.len(), 1);
    assert!(
        p.unschedulable[0].reason.starts_with("topology spread on"),
        "{}",
        p.unschedulable[0].reason
    );
}

#[test]
fn a_volume_zone_places_a_spread_pod_in_its_zone_when_the_skew_allows() {
    // One web pod runs in z-b: a new one whose volume is in z-a goes to z-a (skew 1), never to
    // the emptier z-c its volume cannot reach.
    let p = spread_pod_with_volume_in_z_a(running_web(1, "full"), node_in("z-b", "full", 1));
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(zone_counts(&p).get("z-a"), Some(&1), "{:?}", p.new_nodes);
}

#[test]
fn a_pod_held_by_its_volume_is_reported_and_never_bought_for() {
    let mut pods = deployment("web", 2, 500, 512);
    pods[0]
        .hold_for_volume("volume claim default/data does not exist; the pod waits for it".into());
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert_eq!(p.unschedulable.len(), 1);
    assert_eq!(p.unschedulable[0].pod, "default/web-0");
    assert!(p.unschedulable[0]
        .reason
        .contains("default/data does not exist"));
    let placed: usize = p.new_nodes.iter().map(|n| n.pods.len()).sum();
    assert_eq!(placed, 1, "only the other pod gets capacity");
}

/// Every pod placed, the new nodes holding exactly `want` pods per zone.
fn assert_all_placed_with_zone_counts(p: &Plan, want: &[(&str, usize)]) {
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let counts = zone_counts(p);
    let want: BTreeMap<String, usize> = want.iter().map(|(z, n)| (z.to_string(), *n)).collect();
    assert_eq!(counts, want);
}

/// The default Provisioner limited to `zones`.
fn provisioner_in(zones: &[&str]) -> Provisioner {
    let mut prov = Provisioner::default_provisioner();
    prov.requirements
        .add(labels::ZONE, Requirement::one_of(zones.iter().copied()));
    prov
}

/// The instance types of a plan's new nodes.
fn instance_types_of(plan: &Plan) -> std::collections::BTreeSet<&str> {
    plan.new_nodes
        .iter()
        .map(|n| n.instance_type.as_str())
        .collect()
}

fn spread_pods(n: usize, key: &str) -> Vec<Pod> {
    spread_pods_of(n, 500, key)
}

/// `n` web pods of `cpu` millicores under one spread on `key` (maxSkew 1).
fn spread_pods_of(n: usize, cpu: i64, key: &str) -> Vec<Pod> {
    let mut pods = deployment("web", n, cpu, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(key, 1, app("web")));
    }
    pods
}

/// Pods (by key) per value of `label` among the new nodes' requirements.
fn counts_by(p: &Plan, label: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for n in &p.new_nodes {
        let v = n
            .requirements
            .get(label)
            .and_then(|r| r.single_value())
            .unwrap_or("?")
            .to_string();
        *m.entry(v).or_default() += n.pods.len();
    }
    m
}

#[test]
fn spread_on_the_architecture_splits_pods_between_amd64_and_arm64() {
    // As the kube-scheduler spreads on any node label: maxSkew 1 over kubernetes.io/arch.
    let mut cat = catalog();
    let mut graviton = crate::testing::catalog::family("m6g", 0.0385, 4, &[("xlarge", 4, 58)]);
    for t in &mut graviton {
        t.labels.insert(labels::ARCH.into(), "arm64".into());
    }
    cat.extend(graviton);
    let p = simulate(
        &Snapshot {
            pods: spread_pods(4, labels::ARCH),
            ..Snapshot::default()
        },
        &cat,
        &crate::scheduling::Options::default(),
    );
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let by_arch: BTreeMap<String, usize> = p.new_nodes.iter().fold(BTreeMap::new(), |mut m, n| {
        let arm = n.instance_type.starts_with("m6g");
        *m.entry(if arm { "arm64" } else { "amd64" }.to_string())
            .or_default() += n.pods.len();
        m
    });
    assert_eq!(by_arch.get("amd64"), Some(&2), "{by_arch:?}");
    assert_eq!(by_arch.get("arm64"), Some(&2), "{by_arch:?}");
}

#[test]
fn spread_on_a_provisioner_label_uses_each_provisioners_value() {
    let pool = |name: &str| {
        let mut p = Provisioner::default_provisioner();
        p.name = name.into();
        p.labels.insert("example.com/pool".into(), name.into());
        p
    };
    let p = run(&Snapshot {
        pods: spread_pods(4, "example.com/pool"),
        provisioners: vec![pool("blue"), pool("green")],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let mut by_prov: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &p.new_nodes {
        *by_prov.entry(n.provisioner.as_str()).or_default() += n.pods.len();
    }
    assert_eq!(by_prov, BTreeMap::from([("blue", 2), ("green", 2)]));
    assert_eq!(counts_by(&p, "example.com/pool").len(), 2);
}

#[test]
fn a_key_no_node_or_provisioner_carries_refuses_spreads_and_affinity_not_anti_affinity() {
    // The kube-scheduler filters out nodes without a spread's key and needs the key for
    // affinity; required anti-affinity holds on nodes without it.
    let spread_plan = run(&Snapshot {
        pods: spread_pods(2, "example.com/rack"),
        ..Snapshot::default()
    });
    assert_eq!(spread_plan.unschedulable.len(), 2);
    assert_eq!(
        spread_plan.unschedulable[0].reason,
        "topology key example.com/rack: no node the pod could use and no Provisioner that could \
         launch one for it carries this label"
    );
    let mut anti = deployment("web", 2, 500, 512);
    for p in &mut anti {
        p.affinity.push(term("example.com/rack", true, app("web")));
    }
    let anti_plan = run(&Snapshot {
        pods: anti,
        ..Snapshot::default()
    });
    assert!(
        anti_plan.unschedulable.is_empty(),
        "{:?}",
        anti_plan.unschedulable
    );
}

/// Every pod the plan refused was refused by its topology spread's skew.
fn assert_refused_for_skew(p: &Plan, n: usize) {
    assert_eq!(p.unschedulable.len(), n, "{:?}", p.unschedulable);
    for u in &p.unschedulable {
        assert!(
            u.reason
                .starts_with("topology spread on topology.kubernetes.io/zone (maxSkew 1)"),
            "{}: {}",
            u.pod,
            u.reason
        );
    }
}

#[test]
fn a_full_node_in_a_zone_no_provisioner_covers_still_counts_in_the_spread() {
    // A node group in z-c with no room, which joiner cannot add to, and no web pod there. The
    // kube-scheduler counts the zone of every node the pod's node affinity selects (the
    // Kubernetes docs: nodeAffinityPolicy Honor), full or not: z-c holds 0, so z-a and z-b
    // take one pod each and the other two stay pending. Buying nodes for them would be money
    // burnt on pods the scheduler refuses.
    let prov = provisioner_in(&["z-a", "z-b"]);
    let mut pods = spread_pods(4, labels::ZONE);
    let mut hog = pod("hog", 2000, 512);
    hog.node_name = Some("full".into());
    pods.push(hog);
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-c", "full", 2)],
        provisioners: vec![prov],
        ..Snapshot::default()
    });
    assert_eq!(
        zone_counts(&p),
        BTreeMap::from([("z-a".into(), 1), ("z-b".into(), 1)])
    );
    assert_refused_for_skew(&p, 2);
}

#[test]
fn a_full_node_with_matching_pods_raises_the_minimum_for_the_other_zones() {
    // One web pod runs on a full node in z-c: z-a and z-b may hold two each (maxSkew 1 over
    // z-c's one), the fifth and sixth pods stay pending.
    let prov = provisioner_in(&["z-a", "z-b"]);
    let mut pods = spread_pods(6, labels::ZONE);
    pods.extend(running_web(1, "full"));
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-c", "full", 1)],
        provisioners: vec![prov],
        ..Snapshot::default()
    });
    assert_eq!(
        zone_counts(&p),
        BTreeMap::from([("z-a".into(), 2), ("z-b".into(), 2)])
    );
    assert_refused_for_skew(&p, 2);
}

#[test]
fn a_node_outside_the_pods_node_affinity_is_no_domain_unless_the_policy_ignores_it() {
    // The full z-c node lacks the label the pods select: with nodeAffinityPolicy Honor (the
    // default) its zone is not counted, with Ignore it is.
    let mut prov = provisioner_in(&["z-a", "z-b"]);
    prov.labels.insert("tier".into(), "web".into());
    let plan = |honor: bool| {
        let mut pods = spread_pods(4, labels::ZONE);
        for p in &mut pods {
            let mut tier = Requirements::new();
            tier.add("tier", Requirement::single("web"));
            p.node_terms = vec![tier];
            p.topology_spread[0].honor_node_affinity = honor;
        }
        let mut hog = pod("hog", 2000, 512);
        hog.node_name = Some("full".into());
        pods.push(hog);
        run(&Snapshot {
            pods,
            nodes: vec![node_in("z-c", "full", 2)],
            provisioners: vec![prov.clone()],
            ..Snapshot::default()
        })
    };
    assert_all_placed_with_zone_counts(&plan(true), &[("z-a", 2), ("z-b", 2)]);
    let ignored = plan(false);
    assert_eq!(
        zone_counts(&ignored),
        BTreeMap::from([("z-a".into(), 1), ("z-b".into(), 1)])
    );
    assert_refused_for_skew(&ignored, 2);
}

#[test]
fn a_tainted_node_counts_unless_the_taints_policy_honors_its_taints() {
    let prov = provisioner_in(&["z-a", "z-b"]);
    let tainted = {
        let mut n = node_in("z-c", "tainted", 8);
        n.taints.push(crate::taints::Taint {
            key: "dedicated".into(),
            value: "db".into(),
            effect: crate::taints::Effect::NoSchedule,
        });
        n
    };
    // A roomy node in z-c the pods tolerate takes its share: two pods per zone.
    let p = run(&Snapshot {
        pods: spread_pods(6, labels::ZONE),
        nodes: vec![node_in("z-c", "roomy", 8)],
        provisioners: vec![prov.clone()],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(
        p.existing_nodes.iter().map(|n| n.pods.len()).sum::<usize>(),
        2
    );
    let plan = |honor_taints: bool| {
        let mut pods = spread_pods(6, labels::ZONE);
        for p in &mut pods {
            p.topology_spread[0].honor_node_taints = honor_taints;
        }
        run(&Snapshot {
            pods,
            nodes: vec![tainted.clone()],
            provisioners: vec![prov.clone()],
            ..Snapshot::default()
        })
    };
    // nodeTaintsPolicy Ignore (the default): the tainted node's zone counts with no pod, so
    // one pod per zone the Provisioner reaches.
    let ignored = plan(false);
    assert_eq!(
        zone_counts(&ignored),
        BTreeMap::from([("z-a".into(), 1), ("z-b".into(), 1)])
    );
    assert_refused_for_skew(&ignored, 4);
    // nodeTaintsPolicy Honor: a node the pods do not tolerate is no domain; three per zone.
    assert_all_placed_with_zone_counts(&plan(true), &[("z-a", 3), ("z-b", 3)]);
}

#[test]
fn pods_a_roomy_node_cannot_all_take_go_to_the_other_zones() {
    // The z-c node has room for two more web pods beside its one; ten pods spread: the pods
    // first pinned to z-c beyond its room go to z-a and z-b where the skew allows, so all are
    // placed (3 in z-c, 4 in z-a, 4 in z-b counting the running one).
    let prov = provisioner_in(&["z-a", "z-b"]);
    let mut pods = spread_pods(10, labels::ZONE);
    pods.extend(running_web(1, "roomy"));
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-c", "roomy", 2)],
        provisioners: vec![prov],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(
        p.existing_nodes.iter().map(|n| n.pods.len()).sum::<usize>(),
        2
    );
    assert_eq!(
        zone_counts(&p),
        BTreeMap::from([("z-a".into(), 4), ("z-b".into(), 4)])
    );
}

/// Six pods spreading over zones, z-c reachable only through a Provisioner (weight 10) whose
/// cpu limit is spent; z-a and z-b through another.
fn spent_zone_c() -> Snapshot {
    let mut ab = provisioner_in(&["z-a", "z-b"]);
    ab.name = "ab".into();
    let mut c = provisioner_in(&["z-c"]);
    c.name = "c".into();
    c.weight = 10;
    c.limits.cpu = Some(0);
    Snapshot {
        pods: spread_pods(6, labels::ZONE),
        provisioners: vec![ab, c],
        ..Snapshot::default()
    }
}

#[test]
fn a_zone_a_provisioner_limit_closes_gives_its_share_to_the_others() {
    // z-c is reached only through a Provisioner whose cpu limit is spent: the pods first pinned
    // there go to z-a and z-b, and the counts stay within maxSkew where the pods really run.
    let p = run(&spent_zone_c());
    assert_all_placed_with_zone_counts(&p, &[("z-a", 3), ("z-b", 3)]);
}

#[test]
fn namespace_selectors_widen_anti_affinity_to_other_namespaces() {
    // A database pod runs in namespace data, zone z-a. A web pod's required zone anti-affinity
    // to app=db looks only in its own namespace unless a namespaceSelector widens it: `{}` is
    // every namespace (as the Kubernetes docs define it).
    let mut db = pod("db-0", 500, 512);
    db.namespace = "data".into();
    db.labels.insert("app".into(), "db".into());
    db.node_name = Some("n-a".into());
    let web = |selector: Option<Requirements>| {
        let mut w = pod("web", 500, 512);
        let mut t = term(labels::ZONE, true, app("db"));
        t.namespace_selector = selector;
        w.affinity.push(t);
        w
    };
    let plan_for = |selector: Option<Requirements>| {
        let mut s = Snapshot {
            pods: vec![db.clone(), web(selector)],
            nodes: vec![node_in("z-a", "n-a", 1)],
            ..Snapshot::default()
        };
        s.resolve_namespace_selectors();
        run(&s)
    };
    // Own namespace only: z-a is allowed, the cheapest rotation starts there.
    let own = plan_for(None);
    assert!(own.unschedulable.is_empty(), "{:?}", own.unschedulable);
    // Every namespace: z-a holds the db, so never z-a.
    for _ in 0..3 {
        let all = plan_for(Some(Requirements::new()));
        assert!(all.unschedulable.is_empty(), "{:?}", all.unschedulable);
        assert_ne!(all.new_nodes[0].zone, "z-a");
    }
    let mut data = Requirements::new();
    data.add(
        crate::snapshot::NAMESPACE_NAME_LABEL,
        Requirement::single("data"),
    );
    let named = plan_for(Some(data));
    assert_ne!(named.new_nodes[0].zone, "z-a");
}

#[test]
fn zone_affinity_to_smaller_pending_pods_holds_whatever_the_class_order() {
    // The pods with the affinity are larger than their targets, so their class comes first:
    // the targets are still placed first, and every zone with a web pod has a cache.
    let mut pods = with_affinity(deployment("web", 4, 2000, 2048), labels::ZONE, app("cache"));
    pods.extend(deployment("cache", 2, 250, 256));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_web_zones_hold_a_cache(&p);
}

#[test]
fn hostname_affinity_to_smaller_pending_pods_holds_whatever_the_class_order() {
    // The followers (1.5 cpu) are larger than their targets (250m): every web pod still shares
    // a node with a cache.
    let mut pods = with_affinity(
        deployment("web", 4, 1500, 1024),
        labels::HOSTNAME,
        app("cache"),
    );
    pods.extend(deployment("cache", 2, 250, 256));
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    for n in &p.new_nodes {
        if n.pods.iter().any(|k| k.contains("/web-")) {
            assert!(
                n.pods.iter().any(|k| k.contains("/cache-")),
                "{} has web pods and no cache: {:?}",
                n.name,
                n.pods
            );
        }
    }
}

#[test]
fn spread_domains_count_what_the_provisioners_nodes_hold_with_its_volume() {
    // 30 GiB of scratch fits only nodes with the Provisioner's 100 GiB root volume (89 GiB for
    // pods), not the catalog's 20 GiB: each zone is still a domain for the pods.
    let mut prov = Provisioner::default_provisioner();
    prov.kubelet.ephemeral_volume = Some(100 * GI);
    let mut pods = spread_pods(3, labels::ZONE);
    for p in &mut pods {
        p.requests.ephemeral_storage = 30 * GI;
    }
    let p = run(&Snapshot {
        pods,
        provisioners: vec![prov],
        ..Snapshot::default()
    });
    assert_all_placed_with_zone_counts(&p, &[("z-a", 1), ("z-b", 1), ("z-c", 1)]);
}

#[test]
fn a_hard_affinity_on_a_key_nothing_carries_is_unschedulable_with_a_reason() {
    // The kube-scheduler needs a node with the key for required pod affinity.
    let mut pods = deployment("web", 2, 500, 512);
    for p in &mut pods {
        p.affinity.push(term("example.com/rack", false, app("web")));
    }
    let plan = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert_eq!(plan.unschedulable.len(), 2, "{plan:#?}");
    assert!(
        plan.unschedulable[0].reason.contains("example.com/rack"),
        "{}",
        plan.unschedulable[0].reason
    );
    assert!(plan.new_nodes.is_empty());
}

#[test]
fn spread_on_the_instance_type_uses_two_types() {
    // maxSkew 1 over node.kubernetes.io/instance-type: two pods, two different types (the
    // second cheapest type that holds one takes the second pod).
    let mut pods = spread_pods(2, labels::INSTANCE_TYPE);
    for p in &mut pods {
        p.node_terms = vec![{
            let mut r = Requirements::new();
            r.add(
                labels::INSTANCE_TYPE,
                Requirement::one_of(["m5.large", "c5.large"]),
            );
            r
        }];
    }
    let plan = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let types = instance_types_of(&plan);
    assert_eq!(
        types,
        ["c5.large", "m5.large"].into_iter().collect(),
        "{plan:#?}"
    );
}

#[test]
fn pods_with_a_soft_spread_are_not_held_by_the_hard_spread_of_others() {
    // `web` spreads hard over zones; `batch` carries the same app label with a ScheduleAnyway
    // spread and must run in z-a. The kube-scheduler places batch in z-a (a soft rule never
    // refuses), and web's pods balance against what batch put there.
    let mut web = deployment("web", 3, 500, 512);
    for p in &mut web {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
    }
    let mut batch = deployment("batch", 4, 500, 512);
    for p in &mut batch {
        p.labels.insert("app".into(), "web".into());
        let mut soft = spread(labels::ZONE, 1, app("web"));
        soft.hard = false;
        p.topology_spread.push(soft);
        let mut r = Requirements::new();
        r.add(labels::ZONE, Requirement::single("z-a"));
        p.node_terms = vec![r];
    }
    let mut pods = web;
    pods.extend(batch);
    let plan = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let mut web_zones: BTreeMap<String, usize> = BTreeMap::new();
    for n in &plan.new_nodes {
        for p in &n.pods {
            if p.starts_with("default/batch") {
                assert_eq!(n.zone, "z-a", "{p} follows its node selector");
            } else {
                *web_zones.entry(n.zone.clone()).or_default() += 1;
            }
        }
    }
    assert_eq!(
        web_zones.get("z-a"),
        None,
        "z-a already holds 4 pods: {web_zones:?}"
    );
    assert_eq!(web_zones.values().sum::<usize>(), 3);
}

#[test]
fn a_zone_a_provisioner_limit_fills_only_in_part_keeps_the_others_within_max_skew() {
    // z-c's Provisioner has room for one pod of the three first pinned there: the
    // kube-scheduler would then run at most two in each other zone (maxSkew 1 over 1), so
    // joiner buys nodes for five pods, not seven.
    let mut ab = provisioner_in(&["z-a", "z-b"]);
    ab.name = "ab".into();
    let mut c = provisioner_in(&["z-c"]);
    c.name = "c".into();
    c.weight = 10;
    c.limits.cpu = Some(2000);
    let mut pods = deployment("web", 9, 1500, 512);
    for p in &mut pods {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
    }
    let p = run(&Snapshot {
        pods,
        provisioners: vec![ab, c],
        ..Snapshot::default()
    });
    let counts = zone_counts(&p);
    assert_eq!(
        counts,
        BTreeMap::from([("z-a".into(), 2), ("z-b".into(), 2), ("z-c".into(), 1)]),
        "{:?}",
        p.unschedulable
    );
    assert_eq!(p.unschedulable.len(), 4, "nothing is lost");
}

#[test]
fn spread_on_the_instance_type_buys_the_cheapest_types_that_fit() {
    // Four pods, maxSkew 1 over instance types: four different types. Every type is an equally
    // good domain for the spread, so the kube-scheduler would accept any four; the cheapest
    // four that hold a pod are what an operator expects to pay for, not the first by name.
    let pods = spread_pods(4, labels::INSTANCE_TYPE);
    let request = pods[0].requests.clone();
    let plan = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let types = instance_types_of(&plan);
    assert_eq!(types.len(), 4, "{plan:#?}");
    // The four cheapest on-demand types of the catalog that hold one pod, by brute force.
    let mut cheapest: Vec<f64> = catalog()
        .iter()
        .filter(|t| request.fits(&t.allocatable))
        .filter_map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.available && o.capacity_type == CapacityType::OnDemand)
                .map(|o| o.price)
                .min_by(f64::total_cmp)
        })
        .collect();
    cheapest.sort_by(f64::total_cmp);
    let floor: f64 = cheapest.iter().take(4).sum();
    let paid: f64 = plan.new_nodes.iter().map(|n| n.price_per_hour).sum();
    assert!(
        paid <= floor + 1e-9,
        "paid {paid:.4}/h for {types:?}; the four cheapest types that fit cost {floor:.4}/h"
    );
}

#[test]
fn an_existing_node_of_a_type_too_small_for_the_pod_still_counts_in_a_type_spread() {
    // The Provisioner allows two types; a full node of a third, small type runs no web pod.
    // The kube-scheduler counts that node's type (it counts every node the pod's node
    // affinity selects, whether the pod fits there or not): each allowed type may hold one
    // web pod, and the other two stay pending, instead of two per allowed type.
    let mut prov = Provisioner::default_provisioner();
    prov.requirements.add(
        labels::INSTANCE_TYPE,
        Requirement::one_of(["m5.xlarge", "c5.xlarge"]),
    );
    let mut small = node_in("z-a", "small", 1);
    small
        .labels
        .insert(labels::INSTANCE_TYPE.into(), "t3.micro".into());
    let mut hog = pod("hog", 1000, 512);
    hog.node_name = Some("small".into());
    let plan_with = |nodes: Vec<Node>| {
        let mut pods = spread_pods(4, labels::INSTANCE_TYPE);
        pods.push(hog.clone());
        run(&Snapshot {
            pods,
            nodes,
            provisioners: vec![prov.clone()],
            ..Snapshot::default()
        })
    };
    let alone = plan_with(Vec::new());
    assert!(alone.unschedulable.is_empty(), "{:?}", alone.unschedulable);
    let counted = plan_with(vec![small]);
    let mut per_type: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &counted.new_nodes {
        *per_type.entry(n.instance_type.as_str()).or_default() += n.pods.len();
    }
    assert_eq!(
        per_type,
        BTreeMap::from([("c5.xlarge", 1), ("m5.xlarge", 1)]),
        "{:?}",
        counted.unschedulable
    );
    assert_eq!(counted.unschedulable.len(), 2);
    assert!(
        counted.unschedulable[0]
            .reason
            .contains("t3.micro holds the fewest matching pods (0)"),
        "{}",
        counted.unschedulable[0].reason
    );
}

#[test]
fn a_new_node_bought_for_other_pods_counts_in_a_spread_that_ignores_node_affinity() {
    // Web pods must run on demand and spread over capacity types with nodeAffinityPolicy
    // Ignore; a batch pod requires spot. The spot node bought for the batch pod holds no web
    // pod, and the kube-scheduler counts it (Ignore: every node's domain counts), so only one
    // web pod may run on demand. With Honor (the default) the spot node is not the web pods'
    // domain and all three run.
    let mut prov = Provisioner::default_provisioner();
    prov.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::one_of(["spot", "on-demand"]),
    );
    let capacity = |ct: &str| {
        let mut r = Requirements::new();
        r.add(labels::CAPACITY_TYPE, Requirement::single(ct));
        r
    };
    let plan = |honor: bool| {
        let mut pods = spread_pods(3, labels::CAPACITY_TYPE);
        for p in &mut pods {
            p.node_terms = vec![capacity("on-demand")];
            p.topology_spread[0].honor_node_affinity = honor;
        }
        let mut batch = pod("batch", 500, 512);
        batch.node_terms = vec![capacity("spot")];
        pods.push(batch);
        run(&Snapshot {
            pods,
            provisioners: vec![prov.clone()],
            ..Snapshot::default()
        })
    };
    let web_on = |p: &Plan, ct: CapacityType| -> usize {
        p.new_nodes
            .iter()
            .filter(|n| n.capacity_type == ct)
            .flat_map(|n| &n.pods)
            .filter(|k| k.starts_with("default/web"))
            .count()
    };
    let honored = plan(true);
    assert!(
        honored.unschedulable.is_empty(),
        "{:?}",
        honored.unschedulable
    );
    assert_eq!(web_on(&honored, CapacityType::OnDemand), 3);
    let ignored = plan(false);
    assert_eq!(web_on(&ignored, CapacityType::OnDemand), 1, "{ignored:#?}");
    assert_eq!(web_on(&ignored, CapacityType::Spot), 0);
    assert_eq!(
        ignored.unschedulable.len(),
        2,
        "{:?}",
        ignored.unschedulable
    );
    assert!(
        ignored
            .unschedulable
            .iter()
            .all(|u| u.pod.starts_with("default/web")),
        "{:?}",
        ignored.unschedulable
    );
}

#[test]
fn on_demand_only_pods_of_a_spread_workload_count_for_its_flexible_pods() {
    // Two web pods run on a full on-demand node. Ten more are pending, one of them on-demand
    // only; all spread over capacity types (maxSkew 1). The flexible pods' spread counts every
    // node, so the on-demand-only pod counts for them where it lands: the end state the
    // kube-scheduler accepts for every pod is six and six (on demand: the two running, the
    // on-demand-only pod and three flexible ones), not the flexible pods split as if the
    // on-demand-only one were not there.
    let mut prov = Provisioner::default_provisioner();
    prov.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::one_of(["spot", "on-demand"]),
    );
    let mut node = node_in("z-a", "od", 2);
    node.labels
        .insert(labels::CAPACITY_TYPE.into(), "on-demand".into());
    let mut pods = spread_pods(10, labels::CAPACITY_TYPE);
    let mut od = Requirements::new();
    od.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
    pods[9].node_terms = vec![od];
    pods.extend(running_web(2, "od"));
    let p = run(&Snapshot {
        pods,
        nodes: vec![node],
        provisioners: vec![prov],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let on = |ct: CapacityType| -> usize {
        p.new_nodes
            .iter()
            .filter(|n| n.capacity_type == ct)
            .map(|n| n.pods.len())
            .sum()
    };
    assert_eq!((on(CapacityType::OnDemand), on(CapacityType::Spot)), (4, 6));
}

#[test]
fn pods_a_full_zone_caps_are_refused_naming_that_zone_whatever_the_passes_tried() {
    // One web pod runs on a full node in z-c, whose only Provisioner has a spent limit; z-a
    // and z-b take two each (maxSkew 1 over z-c's one). The other six are refused, and every
    // reason names z-c as the zone holding the minimum, however many passes each pod went
    // through before it was refused.
    let mut ab = provisioner_in(&["z-a", "z-b"]);
    ab.name = "ab".into();
    let mut c = provisioner_in(&["z-c"]);
    c.name = "c".into();
    c.limits.cpu = Some(0);
    let mut pods = spread_pods(10, labels::ZONE);
    pods.extend(running_web(1, "full"));
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-c", "full", 1)],
        provisioners: vec![ab, c],
        ..Snapshot::default()
    });
    assert_eq!(
        zone_counts(&p),
        BTreeMap::from([("z-a".into(), 2), ("z-b".into(), 2)])
    );
    assert_eq!(p.unschedulable.len(), 6);
    for u in &p.unschedulable {
        assert!(
            u.reason.contains("z-c holds the fewest matching pods (1)"),
            "{}: {}",
            u.pod,
            u.reason
        );
    }
}

#[test]
fn pods_a_node_selector_pins_to_a_zone_go_before_a_pod_whose_anti_affinity_rejects_them() {
    // Karpenter's "should not violate pod anti-affinity on zone": three db pods each select
    // one zone; a web pod's required zone anti-affinity rejects them. The db pods cannot go
    // anywhere else, so they take their zones and the web pod, which could have gone
    // anywhere, is the one left pending (rather than taking z-a and leaving a db pod out).
    let mut pods = Vec::new();
    for z in ["z-a", "z-b", "z-c"] {
        let mut db = pod(&format!("db-{z}"), 2000, 512);
        db.labels.insert("app".into(), "db".into());
        let mut sel = Requirements::new();
        sel.add(labels::ZONE, Requirement::single(z));
        db.node_terms = vec![sel];
        pods.push(db);
    }
    let mut web = pod("web", 500, 512);
    web.affinity.push(term(labels::ZONE, true, app("db")));
    pods.push(web);
    let p = run(&Snapshot {
        pods,
        ..Snapshot::default()
    });
    let refused: Vec<&str> = p.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    assert_eq!(refused, ["default/web"], "{:?}", p.unschedulable);
    assert_eq!(
        zone_counts(&p),
        BTreeMap::from([("z-a".into(), 1), ("z-b".into(), 1), ("z-c".into(), 1)])
    );
}

#[test]
fn explain_shows_the_pin_the_plan_used_after_closing_a_domain() {
    // The first pass pins pods to z-c, whose only Provisioner has no cpu left; the plan closes
    // z-c and places them in z-a and z-b. `--explain` must show that final pin, not the first.
    use crate::scheduling::explain::explain;
    let s = spent_zone_c();
    let plan = run(&s);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    for n in &plan.new_nodes {
        for key in &n.pods {
            let e = explain(&s, &catalog(), &plan, key).expect("pod exists");
            let pin = e.pinned.unwrap_or_default();
            assert!(
                pin.contains(&format!("[{}]", n.zone)),
                "{key} runs in {} but --explain says it is pinned to {pin}",
                n.zone
            );
        }
    }
}

/// A full node in `zone` with capacity type `capacity_type`, running `web` pods.
fn typed_node(zone: &str, name: &str, capacity_type: &str, cpus: i64) -> Node {
    let mut n = node_in(zone, name, cpus);
    n.labels
        .insert(labels::CAPACITY_TYPE.to_string(), capacity_type.to_string());
    n
}

/// Two on-demand-only web pods spread over zones (maxSkew 1) while web pods run on a full
/// spot node in z-a (3) and a full on-demand node in z-b (1), with a Provisioner offering
/// spot and on-demand everywhere; the zones each new pod landed in.
fn on_demand_spread(adjust: impl Fn(&mut TopologySpread), taint_spot: bool) -> Vec<String> {
    let mut pods = deployment("web", 2, 1000, 512);
    let mut on_demand = Requirements::new();
    on_demand.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
    for p in &mut pods {
        let mut s = spread(labels::ZONE, 1, app("web"));
        adjust(&mut s);
        p.topology_spread.push(s);
        p.node_terms = vec![on_demand.clone()];
    }
    let mut spot = typed_node("z-a", "spot-a", "spot", 3);
    if taint_spot {
        spot.taints.push(crate::taints::Taint {
            key: "dedicated".into(),
            value: "batch".into(),
            effect: crate::taints::Effect::NoSchedule,
        });
    }
    let mut running = running_web(3, "spot-a");
    let mut more = running_web(1, "od-b");
    more[0].name = "running-b".into();
    running.extend(more);
    pods.extend(running);
    let p = run(&Snapshot {
        pods,
        nodes: vec![spot, typed_node("z-b", "od-b", "on-demand", 1)],
        provisioners: vec![spot_provisioner()],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let mut zones: Vec<String> = p
        .new_nodes
        .iter()
        .flat_map(|n| n.pods.iter().map(|_| n.zone.clone()))
        .collect();
    zones.sort();
    zones
}

#[test]
fn a_spread_counts_only_pods_on_nodes_its_node_affinity_selects_by_default() {
    // nodeAffinityPolicy Honor (the default): the kube-scheduler counts only pods on nodes the
    // pod's own node affinity selects, so the spot node's 3 pods do not count: z-a 0, z-b 1,
    // z-c 0. The first pod may go to z-a or z-c, the second must go to the other (a second
    // pod in either would be 2 over a minimum of 0).
    let zones = on_demand_spread(|_| {}, false);
    assert_eq!(zones, ["z-a", "z-c"]);
    // nodeAffinityPolicy Ignore: every node counts, z-a holds 3, so no new pod goes there.
    let zones = on_demand_spread(|s| s.honor_node_affinity = false, false);
    assert!(!zones.iter().any(|z| z == "z-a"), "{zones:?}");
}

#[test]
fn a_spread_honouring_taints_counts_no_pod_on_a_node_it_does_not_tolerate() {
    // The spot node is also tainted. nodeTaintsPolicy Ignore (the default) with nodeAffinity
    // Ignore: its 3 pods count. With nodeTaintsPolicy Honor they do not: z-a is as empty as
    // z-c, so the pods go to z-a and z-c.
    let ignore_affinity = |s: &mut TopologySpread| s.honor_node_affinity = false;
    let zones = on_demand_spread(ignore_affinity, true);
    assert!(!zones.iter().any(|z| z == "z-a"), "{zones:?}");
    let zones = on_demand_spread(
        |s| {
            s.honor_node_affinity = false;
            s.honor_node_taints = true;
        },
        true,
    );
    assert_eq!(zones, ["z-a", "z-c"]);
}

/// `n` db pods that must share a node (required hostname affinity to their own app) and
/// spread over zones with maxSkew 1.
fn affine_spread_db(n: usize) -> Vec<Pod> {
    let mut pods = deployment("db", n, 500, 512);
    for p in &mut pods {
        p.affinity.push(term(labels::HOSTNAME, false, app("db")));
        p.topology_spread.push(spread(labels::ZONE, 1, app("db")));
    }
    pods
}

#[test]
fn a_self_affine_group_that_spreads_stays_in_its_first_pods_zone_within_the_skew() {
    // The first pod opens a node in some zone; the others must join that node, where the
    // spread (the other zones a Provisioner launches in count, empty) takes one pod only.
    let p = run(&Snapshot {
        pods: affine_spread_db(4),
        ..Snapshot::default()
    });
    assert_eq!(p.new_nodes.len(), 1, "{:?}", p.new_nodes);
    assert_eq!(p.new_nodes[0].pods.len(), 1);
    assert_eq!(p.unschedulable.len(), 3);
    for u in &p.unschedulable {
        assert!(
            u.reason
                .contains("topology spread on topology.kubernetes.io/zone (maxSkew 1)")
                && u.reason.contains("keeps the skew"),
            "{}",
            u.reason
        );
    }
}

#[test]
fn a_group_affine_to_a_running_pod_spreads_only_in_that_pods_zone() {
    // A db pod runs on n1 in z-a: the pending ones must join n1 (their affinity), not the
    // zones the spread would rather have them in.
    let mut pods = affine_spread_db(2);
    let mut running = deployment("db", 1, 500, 512);
    running[0].name = "db-running".into();
    running[0].node_name = Some("n1".into());
    pods.extend(running);
    let p = run(&Snapshot {
        pods,
        nodes: vec![node_in("z-a", "n1", 8)],
        ..Snapshot::default()
    });
    // Joining n1 would make z-a 2 against empty z-b and z-c: refused, and nothing is bought
    // elsewhere (the pods could not run there).
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    assert!(p.existing_nodes.is_empty(), "{:?}", p.existing_nodes);
    assert_eq!(p.unschedulable.len(), 2);
}

#[test]
fn several_required_affinity_terms_are_met_only_by_pods_matching_all_of_them() {
    // web must share a node with app=cache and a zone with tier=db. The kube-scheduler's
    // InterPodAffinity counts a running pod toward those terms only when it matches both:
    // n-a runs a cache and its zone a db, but no pod there is both, so web goes to n-b,
    // whose pod is both (joiner read the terms one at a time before, and chose n-a).
    let running = |name: &str, node: &str, labels: &[(&str, &str)]| {
        let mut p = pod(name, 100, 128);
        p.node_name = Some(node.into());
        for (k, v) in labels {
            p.labels.insert(k.to_string(), v.to_string());
        }
        p
    };
    let mut tier = Requirements::new();
    tier.add("tier", Requirement::single("db"));
    let web = || {
        let mut pods = deployment("web", 3, 1000, 512);
        for p in &mut pods {
            p.affinity.push(term(labels::HOSTNAME, false, app("cache")));
            p.affinity.push(term(labels::ZONE, false, tier.clone()));
        }
        pods
    };
    // The plan of web beside `running` pods, on n-a (z-a) and n-b (z-b), as the loader
    // hands the pods over (terms joined).
    let plan_with = |running: Vec<Pod>| {
        let mut pods = web();
        pods.extend(running);
        let mut s = Snapshot {
            pods,
            nodes: vec![node_in("z-a", "n-a", 8), node_in("z-b", "n-b", 8)],
            ..Snapshot::default()
        };
        s.resolve_namespace_selectors();
        (run(&s), s)
    };
    let apart = || {
        vec![
            running("cache-a", "n-a", &[("app", "cache")]),
            running("db-a", "n-a", &[("tier", "db")]),
        ]
    };
    let mut pods = apart();
    pods.push(running(
        "both-b",
        "n-b",
        &[("app", "cache"), ("tier", "db")],
    ));
    let (p, s) = plan_with(pods);
    crate::testing::plan_check::check(&s, &catalog(), &p).expect("constraints hold");
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    let on_b: Vec<&str> = p
        .existing_nodes
        .iter()
        .filter(|n| n.name == "n-b")
        .flat_map(|n| n.pods.iter().map(String::as_str))
        .collect();
    assert_eq!(on_b, ["default/web-0", "default/web-1", "default/web-2"]);

    // No pod is both, and web is neither: the scheduler never places it (its first-pod rule
    // asks the pod to match all its terms itself), so nothing is bought for it.
    let (p, _) = plan_with(apart());
    assert!(p.new_nodes.is_empty(), "{:?}", p.new_nodes);
    assert!(p.existing_nodes.iter().all(|n| n.pods.is_empty()));
    assert_eq!(p.unschedulable.len(), 3);
    assert_eq!(
        p.unschedulable[0].reason,
        "pod affinity on topology.kubernetes.io/zone: no allowed topology.kubernetes.io/zone \
         runs pods app In [cache], tier In [db]"
    );
}

/// `od` on-demand-only and `any` flexible web pods (500m each, the flexible ones `any_cpu`)
/// under one zone spread (maxSkew 1, the default policies: each pod counts the nodes its own
/// node terms select), with a Provisioner offering spot and on-demand in the three zones.
fn on_demand_and_flexible_under_one_zone_spread(od: usize, any: usize, any_cpu: i64) -> Snapshot {
    let mut pods = Vec::new();
    let flexible = deployment("web-any", any, any_cpu, 512);
    for (mut p, on_demand) in deployment("web-od", od, 500, 512)
        .into_iter()
        .map(|p| (p, true))
        .chain(flexible.into_iter().map(|p| (p, false)))
    {
        if on_demand {
            let mut r = Requirements::new();
            r.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
            p.node_terms.push(r);
        }
        p.labels.insert("app".into(), "web".into());
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
        pods.push(p);
    }
    Snapshot {
        pods,
        provisioners: vec![spot_provisioner()],
        ..Snapshot::default()
    }
}

#[test]
fn flexible_pods_sharing_a_spread_with_on_demand_only_pods_are_all_placed() {
    // The on-demand-only pods' spread counts the web pods on on-demand nodes only (their own
    // node terms, nodeAffinityPolicy Honor); the flexible pods' spread counts every node. The
    // kube-scheduler places every pod of these workloads: the on-demand-only ones evenly on
    // on-demand nodes and the flexible ones evenly on spot (both spreads then hold), or all
    // of them evenly on on-demand. The packer used to choose after the pinning which flexible
    // pods share the on-demand nodes, so the on-demand count came out uneven and the closing
    // refused pods (1 to 4 of each of these).
    for (od, any, cpu) in [
        (2, 8, 500),
        (3, 7, 500),
        (4, 8, 500),
        (5, 8, 700),
        (4, 25, 700),
    ] {
        let s = on_demand_and_flexible_under_one_zone_spread(od, any, cpu);
        let p = run_all_placed(&s);
        assert_eq!(
            pods_on(&p, CapacityType::OnDemand, |k| k.contains("web-od")),
            od,
            "{od} on-demand-only and {any} flexible pods"
        );
    }
}

#[test]
fn flexible_pods_fill_the_on_demand_nodes_room_before_spot_whatever_the_names() {
    // 3 on-demand-only and 7 flexible pods of 500m under one zone spread (maxSkew 1). The
    // on-demand-only pods go one per zone (the spread's domains are the three zones the
    // Provisioner can launch in, as Karpenter takes them), so three on-demand nodes must
    // exist; a c5.large (2 vCPU, $0.085/h on demand, $0.034/h spot in the test catalog)
    // holds three such pods. The cheapest layout then fills each on-demand node with its
    // on-demand-only pod and two flexible ones (the on-demand-only pods' spread, which counts
    // on-demand nodes only, sees 3, 3, 3) and puts the last flexible pod on one spot node
    // (every node: 4, 3, 3): 3 x 0.085 + 0.034 = $0.289/h. Which workload's pods sort first
    // by name must not matter; it used to decide whether the flexible pods opened spot nodes
    // first, leaving an on-demand node with one pod (counts 1, 3, 3) and the plan held all
    // of them on on-demand ($0.340/h).
    for od_name in ["web-od", "api-od"] {
        let mut s = on_demand_and_flexible_under_one_zone_spread(3, 7, 500);
        for p in s.pods.iter_mut().filter(|p| p.name.starts_with("web-od")) {
            p.name = p.name.replace("web-od", od_name);
        }
        let p = run_all_placed(&s);
        let flexible = |k: &str| k.contains("web-any");
        assert_eq!(
            pods_on(&p, CapacityType::OnDemand, flexible),
            6,
            "{od_name}"
        );
        assert_eq!(pods_on(&p, CapacityType::Spot, flexible), 1, "{od_name}");
        assert!(
            (p.new_price_per_hour() - 0.289).abs() < 1e-9,
            "{od_name}: {}",
            p.new_price_per_hour()
        );
    }
}

#[test]
fn flexible_pods_beside_a_spot_node_running_the_app_are_all_placed() {
    // 2 on-demand-only and 8 flexible web pods of 700m under one zone spread (maxSkew 1),
    // and a spot node in z-b (2 cpus) already running two web pods of 500m. The
    // kube-scheduler places all ten, e.g. the on-demand-only pods on on-demand nodes in z-b
    // and z-c (their spread counts on-demand nodes only: 0, 1, 1) and the flexible ones 4 in
    // z-a, 1 in z-b and 3 in z-c (every node: 4, 4, 4). Left free, the flexible pods were
    // counted where the on-demand-only pod then also went, the flexible pods' own spread came
    // out skewed and its closing refused one; the skewed spread was not the on-demand-only
    // one, so the plan never tried holding them off or on.
    for (od, any, cpu) in [(2, 8, 700), (3, 12, 500)] {
        let mut s = on_demand_and_flexible_under_one_zone_spread(od, any, cpu);
        s.nodes.push(typed_node("z-b", "n-b", "spot", 2));
        for mut p in deployment("running", 2, 500, 512) {
            p.labels.insert("app".into(), "web".into());
            p.node_name = Some("n-b".into());
            s.pods.push(p);
        }
        run_all_placed(&s);
    }
}

#[test]
fn flexible_pods_are_held_off_by_the_requirement_their_own_terms_leave_open() {
    // As above, on a Provisioner labeling its nodes `dedicated: web`, which every pod
    // requires: the on-demand-only pods' spread counts nodes with `dedicated: web` and
    // on-demand. Holding the flexible pods off by `dedicated NotIn [web]` contradicts their
    // own terms; by the capacity type it does not. All are placed, as above.
    let mut s = on_demand_and_flexible_under_one_zone_spread(3, 7, 500);
    for p in &mut s.pods {
        let mut r = Requirements::new();
        r.add("dedicated", Requirement::single("web"));
        match p.node_terms.first_mut() {
            Some(t) => *t = t.intersect(&r),
            None => p.node_terms.push(r),
        }
    }
    s.provisioners[0]
        .labels
        .insert("dedicated".into(), "web".into());
    run_all_placed(&s);
}

#[test]
fn flexible_pods_are_not_held_off_an_existing_on_demand_node_with_room() {
    // As above, with an existing on-demand node in z-a that has room for four pods: it takes
    // z-a's share of the ten (4, 3, 3), flexible pods among them, which the on-demand-only
    // pods' spread counts there as the kube-scheduler does. Holding the flexible pods off
    // on-demand nodes would leave that room unused and buy nodes for them.
    let mut s = on_demand_and_flexible_under_one_zone_spread(3, 7, 500);
    s.nodes.push(typed_node("z-a", "n-a", "on-demand", 2));
    let p = run_all_placed(&s);
    let on_existing: Vec<&String> = p.existing_nodes.iter().flat_map(|n| &n.pods).collect();
    assert_eq!(on_existing.len(), 4, "{on_existing:?}");
    assert!(
        on_existing.iter().any(|k| k.contains("web-any")),
        "{on_existing:?}"
    );
}

#[test]
fn a_class_kept_out_of_the_emptiest_zone_goes_after_the_free_class_that_fills_it() {
    // Found by the brute-force completeness search with groups of one app mixing rules.
    // Three zones; a web pod runs in z-b, a db pod in z-a. Two `narrow` web pods must not
    // share a zone with db (required zone anti-affinity) and one `free` web pod has no such
    // rule; all three spread over the zones (maxSkew 1) over app=web. z-a holds no web pod,
    // so it sets the minimum, and the narrow pods cannot go there: taken first, they fit
    // only one (z-c: 1, 1, 1 would need z-a filled). The kube-scheduler places all three
    // when the free pod comes first: free in z-a, then narrow in z-c and z-b (1, 2, 1).
    let mut db = running_web(1, "n-a");
    db[0].labels.insert("app".into(), "db".into());
    let mut pods = running_web(1, "n-b");
    pods.extend(db);
    let mut narrow = deployment("narrow", 2, 500, 512);
    for p in &mut narrow {
        p.affinity.push(term(labels::ZONE, true, app("db")));
    }
    for mut p in narrow.into_iter().chain(deployment("free", 1, 500, 512)) {
        p.labels.insert("app".into(), "web".into());
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
        pods.push(p);
    }
    let s = Snapshot {
        pods,
        nodes: vec![node_in("z-a", "n-a", 1), node_in("z-b", "n-b", 1)],
        ..Snapshot::default()
    };
    run_all_placed(&s);
}

/// Web pods under one zone spread (maxSkew 1) over app=web in z-a and z-b, a db pod running
/// in z-a: `near` pods that must share a zone with db, and `other` pods with no such rule,
/// spread themselves or not.
fn near_db_and_other(near: usize, other: usize, other_spreads: bool) -> Snapshot {
    let mut db = running_web(1, "n-a");
    db[0].labels.insert("app".into(), "db".into());
    let mut pods = db;
    let near = with_affinity(deployment("near", near, 500, 512), labels::ZONE, app("db"));
    for (mut p, spreads) in near.into_iter().map(|p| (p, true)).chain(
        deployment("other", other, 500, 512)
            .into_iter()
            .map(|p| (p, other_spreads)),
    ) {
        p.labels.insert("app".into(), "web".into());
        if spreads {
            p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
        }
        pods.push(p);
    }
    Snapshot {
        pods,
        nodes: vec![node_in("z-a", "n-a", 1)],
        provisioners: vec![zones_provisioner(&["z-a", "z-b"])],
        ..Snapshot::default()
    }
}

#[test]
fn pods_free_of_a_zone_fill_the_zone_the_spread_pods_cannot_use() {
    // The near pods can only go to z-a (with db); their spread counts z-b too, so z-a may
    // hold one more than z-b. The kube-scheduler places them all when the other pods take
    // z-b: near 2 in z-a, other 2 in z-b; or, when the one other pod spreads too and comes
    // first, other in z-b, then near 2 in z-a. Spreading the other pods over both zones, or
    // putting the one spread pod in z-a on a tie, leaves a near pod pending.
    for (near, other, other_spreads) in [(2, 2, false), (2, 1, true)] {
        let s = near_db_and_other(near, other, other_spreads);
        let p = run_all_placed(&s);
        let counts = zone_counts(&p);
        assert_eq!(
            counts.get("z-b"),
            Some(&other),
            "{near} near, {other} other: {counts:?}"
        );
    }
}

#[test]
fn pods_of_two_classes_under_one_spread_take_turns_when_only_turns_place_them() {
    // As above, but the other pods spread too, as many as the near ones. Near pods can only
    // go to z-a; with maxSkew 1 a second near pod there needs a web pod in z-b first, and a
    // second other pod in z-b needs z-a ahead of it. The kube-scheduler places all of them
    // when the two kinds come in turns (near z-a, other z-b, near z-a, other z-b, ...),
    // ending with every near pod in z-a and every other pod in z-b; a class at a time
    // leaves near pods pending.
    for n in [2, 3] {
        let s = near_db_and_other(n, n, true);
        let p = run_all_placed(&s);
        let counts = zone_counts(&p);
        assert_eq!(counts.get("z-a"), Some(&n), "{n} of each: {counts:?}");
        assert_eq!(counts.get("z-b"), Some(&n), "{n} of each: {counts:?}");
    }
}

/// A db running in z-a on n-a, which has room for one more pod; `spreading` under one zone
/// spread (maxSkew 1) over app=web and a `free` pod with no rule, all app=web; a Provisioner
/// over z-a, z-b and z-c.
fn db_with_room_in_a(spreading: Vec<Pod>) -> Snapshot {
    let mut db = running_web(1, "n-a");
    db[0].labels.insert("app".into(), "db".into());
    let mut pods = db;
    for mut p in spreading {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
        pods.push(p);
    }
    pods.extend(deployment("free", 1, 500, 512));
    for p in pods.iter_mut().filter(|p| p.node_name.is_none()) {
        p.labels.insert("app".into(), "web".into());
    }
    Snapshot {
        pods,
        nodes: vec![node_in("z-a", "n-a", 2)],
        provisioners: vec![zones_provisioner(&["z-a", "z-b", "z-c"])],
        ..Snapshot::default()
    }
}

#[test]
fn a_free_pod_leaves_the_one_zone_a_spread_class_may_use_to_it() {
    // One spread over app=web (maxSkew 1) across z-a, z-b and z-c counts three web pods:
    // `near` must share a zone with db (running in z-a on n-a, which has room for one more
    // pod), `spreads` has the spread only, `free` has no rule. A web pod other than near in
    // z-a leaves near at 2 against an empty zone, so the kube-scheduler places all three
    // only with near alone in z-a and the other two in z-b and z-c. The free pod must not
    // take n-a's room, cheap as it is.
    let near = with_affinity(deployment("near", 1, 500, 512), labels::ZONE, app("db"));
    let spreads = deployment("spreads", 1, 500, 512);
    let s = db_with_room_in_a(near.into_iter().chain(spreads).collect());
    let p = run_all_placed(&s);
    let near_at_n_a = p
        .existing_nodes
        .iter()
        .any(|e| e.name == "n-a" && e.pods.iter().any(|k| k.contains("near")));
    assert!(near_at_n_a, "{:?}", p.existing_nodes);
    let counts = zone_counts(&p);
    assert_eq!(counts.get("z-b"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("z-c"), Some(&1), "{counts:?}");
}

#[test]
fn a_free_pod_goes_where_the_spread_classes_need_it_least() {
    // One spread over app=web (maxSkew 1) across z-a, z-b and z-c. `near` (2 pods) must share
    // a zone with db, running in z-a on n-a (room for one more pod); `far` (2 pods) must not;
    // `free` (1 pod) has no rule. Every zone is one some class may use, but near needs z-a
    // alone while far shares z-b and z-c: with near 2 in z-a and far 1 in each of the others,
    // the free pod in z-a puts z-a at 3 against 1; in z-b or z-c every pod keeps the skew.
    let near = with_affinity(deployment("near", 2, 500, 512), labels::ZONE, app("db"));
    let mut far = deployment("far", 2, 500, 512);
    for p in &mut far {
        p.affinity.push(term(labels::ZONE, true, app("db")));
    }
    let s = db_with_room_in_a(near.into_iter().chain(far).collect());
    let p = run_all_placed(&s);
    let in_z_a: Vec<&String> = p
        .existing_nodes
        .iter()
        .flat_map(|e| e.pods.iter())
        .chain(
            p.new_nodes
                .iter()
                .filter(|n| n.zone == "z-a")
                .flat_map(|n| n.pods.iter()),
        )
        .collect();
    assert!(
        in_z_a.iter().all(|k| k.contains("near")),
        "z-a holds {in_z_a:?}"
    );
}

#[test]
fn free_pods_are_not_all_sent_where_the_spread_classes_need_least() {
    // One spread over app=web (maxSkew 1) across z-a, z-b and z-c, a db running in each zone
    // (db-a, db-b, db-c) and a blocker in z-c. s-c, s-a and s-b (one pod each) must share a
    // zone with db-c, db-a and db-b; s-ab must not share one with the blocker; free (3 pods)
    // has no rule. z-c is needed least (only s-c must go there, s-ab may use z-a or z-b),
    // but sending every free pod there puts z-c at 4 against at most 3 pods in the other
    // two. One free pod per zone keeps every spread within its skew.
    let mut pods = Vec::new();
    let mut nodes = Vec::new();
    for (zone, node, app_label) in [
        ("z-a", "n-a", "db-a"),
        ("z-b", "n-b", "db-b"),
        ("z-c", "n-c", "db-c"),
        ("z-c", "n-c2", "blocker"),
    ] {
        let mut running = running_web(1, node);
        running[0].name = format!("running-{app_label}");
        running[0].labels.insert("app".into(), app_label.into());
        pods.extend(running);
        nodes.push(node_in(zone, node, 1));
    }
    for (name, db) in [("s-c", "db-c"), ("s-a", "db-a"), ("s-b", "db-b")] {
        pods.extend(with_affinity(
            deployment(name, 1, 500, 512),
            labels::ZONE,
            app(db),
        ));
    }
    let mut s_ab = deployment("s-ab", 1, 500, 512);
    s_ab[0]
        .affinity
        .push(term(labels::ZONE, true, app("blocker")));
    pods.extend(s_ab);
    for p in pods.iter_mut().filter(|p| p.node_name.is_none()) {
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
    }
    pods.extend(deployment("free", 3, 500, 512));
    for p in pods.iter_mut().filter(|p| p.node_name.is_none()) {
        p.labels.insert("app".into(), "web".into());
    }
    let s = Snapshot {
        pods,
        nodes,
        provisioners: vec![zones_provisioner(&["z-a", "z-b", "z-c"])],
        ..Snapshot::default()
    };
    let p = run_all_placed(&s);
    let counts = zone_counts(&p);
    assert!(
        counts.values().all(|&n| n <= 3),
        "the spread's pods by zone: {counts:?}"
    );
}

#[test]
fn a_pod_kept_from_the_spread_minimum_goes_where_the_spread_pods_may_not_go_anyway() {
    // A db runs in z-a and a web pod in z-c. `spreads` (1 pod) spreads over app=web with
    // maxSkew 1 and must not share a zone with db; `away` (1 pod, app=web) must not either
    // and has no spread. Nothing can raise z-a's count (0), so the spread pod may only go
    // where no web pod is yet: z-b. The away pod in z-b would leave it nowhere; in z-c, where
    // the spread pod may not go anyway, it hurts nothing. Water-filling sends it to z-b.
    let mut db = running_web(1, "n-a");
    db[0].name = "db".into();
    db[0].labels.insert("app".into(), "db".into());
    let mut pods = db;
    pods.extend(running_web(1, "n-c"));
    let mut spreads = deployment("spreads", 1, 500, 512);
    spreads[0]
        .topology_spread
        .push(spread(labels::ZONE, 1, app("web")));
    for mut p in spreads.into_iter().chain(deployment("away", 1, 500, 512)) {
        p.affinity.push(term(labels::ZONE, true, app("db")));
        p.labels.insert("app".into(), "web".into());
        pods.push(p);
    }
    let s = Snapshot {
        pods,
        nodes: vec![node_in("z-a", "n-a", 1), node_in("z-c", "n-c", 1)],
        provisioners: vec![zones_provisioner(&["z-a", "z-b", "z-c"])],
        ..Snapshot::default()
    };
    let p = run_all_placed(&s);
    let zone_of = |name: &str| {
        p.new_nodes
            .iter()
            .find(|n| n.pods.iter().any(|k| k.contains(name)))
            .map(|n| n.zone.clone())
    };
    assert_eq!(zone_of("spreads"), Some("z-b".to_string()));
    assert_eq!(zone_of("away"), Some("z-c".to_string()));
}

/// A db running in z-a (n-a), a blocker in z-b (n-b), a web pod in z-c (n-c) and an empty node
/// in z-d (n-d, a zone the test catalog does not offer); a Provisioner over z-a to z-d; the
/// spread pods as given (name, pods, maxSkew, kept out of the blocker's zone too), each
/// app=web, held to z-a, z-b and z-c, kept out of db's zone and spreading over app=web; two
/// `free` pods app=web with no rule but node terms `free_zones`, and `anywhere` pods app=web
/// with no rule at all.
fn db_in_a_and_web_in_c(
    spreads: &[(&str, usize, i32, bool)],
    free_zones: &[&str],
    anywhere: usize,
) -> Snapshot {
    let mut db = running_web(1, "n-a");
    db[0].name = "db".into();
    db[0].labels.insert("app".into(), "db".into());
    let mut pods = db;
    pods.extend(running_web(1, "n-c"));
    let zones = |only: &[&str]| {
        let mut r = Requirements::new();
        r.add(labels::ZONE, Requirement::one_of(only.iter().copied()));
        r
    };
    let mut blocker = running_web(1, "n-b");
    blocker[0].name = "blocker".into();
    blocker[0].labels.insert("app".into(), "blocker".into());
    pods.extend(blocker);
    for &(name, n, skew, not_b) in spreads {
        for mut p in deployment(name, n, 500, 512) {
            p.node_terms.push(zones(&["z-a", "z-b", "z-c"]));
            p.affinity.push(term(labels::ZONE, true, app("db")));
            if not_b {
                p.affinity.push(term(labels::ZONE, true, app("blocker")));
            }
            p.topology_spread
                .push(spread(labels::ZONE, skew, app("web")));
            pods.push(p);
        }
    }
    for mut p in deployment("free", 2, 500, 512) {
        p.node_terms.push(zones(free_zones));
        pods.push(p);
    }
    pods.extend(deployment("anywhere", anywhere, 500, 512));
    for p in pods.iter_mut().filter(|p| p.node_name.is_none()) {
        p.labels.insert("app".into(), "web".into());
    }
    Snapshot {
        pods,
        nodes: vec![
            node_in("z-a", "n-a", 1),
            node_in("z-b", "n-b", 1),
            node_in("z-c", "n-c", 1),
            node_in("z-d", "n-d", 4),
        ],
        provisioners: vec![zones_provisioner(&["z-a", "z-b", "z-c", "z-d"])],
        ..Snapshot::default()
    }
}

/// The pods whose key holds `name` that the plan puts in zone `zone` of `s`.
fn pods_in_zone(s: &Snapshot, p: &Plan, name: &str, zone: &str) -> Vec<String> {
    let on_existing = p.existing_nodes.iter().filter(|e| {
        s.nodes.iter().any(|n| {
            n.name == e.name && n.labels.get(labels::ZONE).map(String::as_str) == Some(zone)
        })
    });
    on_existing
        .flat_map(|e| e.pods.iter())
        .chain(
            p.new_nodes
                .iter()
                .filter(|n| n.zone == zone)
                .flat_map(|n| n.pods.iter()),
        )
        .filter(|k| k.contains(name))
        .cloned()
        .collect()
}

#[test]
fn free_pods_stay_out_of_a_zone_a_spread_with_a_larger_max_skew_may_still_use() {
    // Nothing raises z-a (0): the one-skew pod may go only where no web pod is yet, the
    // three-skew ones where at most two are. one (1 pod, maxSkew 1) takes z-b; three (2 pods,
    // maxSkew 3, kept out of z-b by the blocker) go to z-c (1 + 2 = 3). z-c is full to one
    // but not to three: the free pods (z-c or z-d) there would put it over three's skew, so
    // they belong in z-d, where no spread pod may go.
    let s = db_in_a_and_web_in_c(
        &[("one", 1, 1, false), ("three", 2, 3, true)],
        &["z-c", "z-d"],
        0,
    );
    let p = run_all_placed(&s);
    assert_eq!(pods_in_zone(&s, &p, "free", "z-d").len(), 2, "{p:?}");
}

#[test]
fn free_pods_do_not_count_a_zone_another_free_pod_may_fill_as_stuck() {
    // anywhere (1 pod) may go to z-a and raise it to 1; then the spread pods (3, maxSkew 1)
    // fit z-b twice and z-c once (z-c already holds one). The free pods (z-c or z-d) in z-c
    // would leave a spread pod over the skew: they belong in z-d.
    let s = db_in_a_and_web_in_c(&[("spreads", 3, 1, false)], &["z-c", "z-d"], 1);
    let p = run_all_placed(&s);
    assert_eq!(pods_in_zone(&s, &p, "free", "z-d").len(), 2, "{p:?}");
}

#[test]
fn a_free_class_another_class_is_affine_to_is_not_sent_where_only_it_can_go() {
    // web-a (2 pods) is held to z-a and z-b by its node terms and spreads over app=web;
    // cache (2 pods, also app=web) has no zone rule; web-g (1 pod) must share a zone with a
    // cache pod and is held to z-a and z-b too. z-c is no domain of web-a's spread (its node
    // terms keep it out, nodeAffinityPolicy Honor), so cache pods there raise nothing, and
    // web-g would find no cache pod in its zones. The kube-scheduler places all five, e.g.
    // cache and web-a 1 each in z-a and z-b, web-g beside a cache pod.
    let zones_ab = |mut pods: Vec<Pod>| {
        for p in &mut pods {
            let mut r = Requirements::new();
            r.add(labels::ZONE, Requirement::one_of(["z-a", "z-b"]));
            p.node_terms.push(r);
        }
        pods
    };
    let mut pods = Vec::new();
    for mut p in zones_ab(deployment("web-a", 2, 500, 512)) {
        p.labels.insert("app".into(), "web".into());
        p.topology_spread.push(spread(labels::ZONE, 1, app("web")));
        pods.push(p);
    }
    for mut p in deployment("cache", 2, 500, 512) {
        p.labels.insert("app".into(), "web".into());
        p.labels.insert("tier".into(), "cache".into());
        pods.push(p);
    }
    let mut cache = Requirements::new();
    cache.add("tier", Requirement::single("cache"));
    pods.extend(zones_ab(with_affinity(
        deployment("web-g", 1, 500, 512),
        labels::ZONE,
        cache,
    )));
    run_all_placed(&Snapshot {
        pods,
        ..Snapshot::default()
    });
}
