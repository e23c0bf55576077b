//! Scenario tests of the simulation on a small hand-made catalog.

use crate::instance_type::CapacityType;
use crate::labels;
use crate::pod::{DaemonSet, Node, Owner, Pod};
use crate::provisioner::{Limits, Provisioner};
use crate::requirements::{Requirement, Requirements};
use crate::resources::{Resources, NVIDIA_GPU};
use crate::scheduling::{simulate, Options, Plan};
use crate::snapshot::Snapshot;
use crate::taints::{Effect, Taint, Toleration};
pub(crate) use crate::testing::catalog::catalog;

const GI: i64 = 1 << 30;

pub(crate) fn pod(name: &str, cpu: i64, mem_mi: i64) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        requests: Resources::new(cpu, mem_mi << 20, 0, 1),
        ..Pod::default()
    }
}

pub(crate) fn deployment(name: &str, n: usize, cpu: i64, mem_mi: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = pod(&format!("{name}-{i}"), cpu, mem_mi);
            p.owner = Some(Owner {
                kind: "Deployment".into(),
                name: name.into(),
            });
            p.labels.insert("app".into(), name.into());
            p
        })
        .collect()
}

/// Gives `p` one EBS volume, of claim `claim` (`namespace/name`).
pub(crate) fn attach_ebs(p: &mut Pod, claim: &str) {
    p.volume_attachments = Some(Box::new(vec![crate::pod::VolumeAttachment {
        driver: "ebs.csi.aws.com".into(),
        claim: claim.into(),
    }]));
}

/// Node `name` (16 cpus) whose CSINode caps EBS at `cap` volumes, if it has one.
fn ebs_capped_node(name: &str, cap: Option<i64>) -> Node {
    Node {
        name: name.into(),
        allocatable: Resources::new(16_000, 64 * GI, 17 * GI, 110),
        capacity: Resources::new(16_000, 64 * GI, 20 * GI, 110),
        volume_limits: cap
            .map(|c| ("ebs.csi.aws.com".to_string(), c))
            .into_iter()
            .collect(),
        ..Node::default()
    }
}

/// Two pods running on node `n`, with EBS claims default/x and default/y.
fn two_volumes_running_on_n() -> Vec<Pod> {
    ["x", "y"]
        .iter()
        .enumerate()
        .map(|(i, claim)| {
            let mut p = pod(&format!("running-{i}"), 100, 128);
            p.node_name = Some("n".into());
            attach_ebs(&mut p, &format!("default/{claim}"));
            p
        })
        .collect()
}

/// The plan of `pods` with node `n` existing, its EBS capped at 3 (two running pods of
/// [`two_volumes_running_on_n`] hold 2), checked against every hard constraint.
fn plan_beside_two_volumes(pods: Vec<Pod>) -> Plan {
    let s = Snapshot {
        pods,
        nodes: vec![ebs_capped_node("n", Some(3))],
        ..Snapshot::default()
    };
    let plan = run(&s);
    crate::testing::plan_check::check(&s, &catalog(), &plan).expect("constraints hold");
    plan
}

fn run(s: &Snapshot) -> Plan {
    simulate(s, &catalog(), &Options::default())
}

#[test]
fn one_small_pod_gets_the_cheapest_type_that_holds_it() {
    let s = Snapshot {
        pods: vec![pod("a", 500, 512)],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert_eq!(p.new_nodes.len(), 1);
    let n = &p.new_nodes[0];
    assert_eq!(n.instance_type, "c5.large");
    assert_eq!(
        n.capacity_type,
        CapacityType::OnDemand,
        "default is on-demand"
    );
    assert_eq!(n.pods, vec!["default/a"]);
    assert_eq!(n.instance_type_options[0], "c5.large");
    assert!(n.instance_type_options.contains(&"m5.large".to_string()));
    assert!(
        !n.instance_type_options
            .iter()
            .any(|t| t.starts_with("g4dn")),
        "GPU types are not offered for a plain pod"
    );
    assert!(p.unschedulable.is_empty());
}

#[test]
fn existing_nodes_are_used_first() {
    let node = Node {
        name: "ip-10-0-0-1".into(),
        allocatable: Resources::new(2000, 4 * GI, 17 * GI, 10),
        capacity: Resources::new(2000, 4 * GI, 20 * GI, 10),
        ..Node::default()
    };
    let mut running = pod("running", 1000, 1024);
    running.node_name = Some("ip-10-0-0-1".into());
    let s = Snapshot {
        pods: vec![running, pod("a", 500, 512), pod("b", 800, 512)],
        nodes: vec![node],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert_eq!(p.existing_nodes.len(), 1);
    // 1000m free: b (800m) fits first, then a (500m) does not.
    assert_eq!(p.existing_nodes[0].pods, vec!["default/b"]);
    assert_eq!(p.new_nodes.len(), 1);
    assert_eq!(p.new_nodes[0].pods, vec!["default/a"]);
}

#[test]
fn unknown_custom_label_is_explained() {
    let mut a = pod("a", 100, 100);
    let mut r = Requirements::new();
    r.add("example.com/rack", Requirement::single("r42"));
    a.node_terms = vec![r];
    let p = run(&Snapshot {
        pods: vec![a],
        ..Snapshot::default()
    });
    assert!(p.new_nodes.is_empty());
    assert_eq!(
        p.unschedulable[0].reason,
        "no instance type matches requirement example.com/rack In [r42]"
    );
}

#[test]
fn oversized_pod_is_explained() {
    let p = run(&Snapshot {
        pods: vec![pod("huge", 1_000_000, 100)],
        ..Snapshot::default()
    });
    assert_eq!(
        p.unschedulable[0].reason,
        // x1e.32xlarge: 128 vCPU less the catalog's 70m reserve.
        "no instance type has 1000 cpu cores allocatable; the largest allowed has 127.93 cpu cores"
    );
}

#[test]
fn provisioner_limits_cap_new_capacity() {
    let mut prov = Provisioner::default_provisioner();
    prov.limits = Limits {
        cpu: Some(16_000),
        ..Limits::default()
    };
    let s = Snapshot {
        pods: deployment("web", 40, 1000, 1024),
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    let cpus: i64 = p
        .new_nodes
        .iter()
        .map(|n| {
            catalog()
                .iter()
                .find(|t| t.name == n.instance_type)
                .map(|t| t.capacity.cpu)
                .unwrap_or(0)
        })
        .sum();
    assert!(cpus <= 16_000, "launched {cpus}m over a 16 cpu limit");
    assert!(!p.unschedulable.is_empty());
    assert_eq!(
        p.unschedulable[0].reason,
        "launching would exceed limit cpu=16"
    );
    let placed: usize = p.new_nodes.iter().map(|n| n.pods.len()).sum();
    assert_eq!(placed + p.unschedulable.len(), 40, "nothing is lost");
}

#[test]
fn a_node_counts_against_limits_as_its_largest_option() {
    // 16 cpu of limit; each pod fits a 2-cpu type, but its node lists options up to 96 cpu
    // (the cloud may launch any of them): it counts as the largest, so the limit is never
    // overshot whichever option the cloud picks.
    let mut prov = Provisioner::default_provisioner();
    prov.limits = Limits {
        cpu: Some(16_000),
        ..Limits::default()
    };
    let s = Snapshot {
        pods: deployment("web", 8, 1500, 1024),
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    let catalog = catalog();
    let largest: i64 = p
        .new_nodes
        .iter()
        .map(|n| {
            n.instance_type_options
                .iter()
                .filter_map(|o| catalog.iter().find(|t| &t.name == o))
                .map(|t| t.capacity.cpu)
                .max()
                .unwrap_or(0)
        })
        .sum();
    assert!(!p.new_nodes.is_empty());
    assert!(
        largest <= 16_000,
        "options add up to {largest}m over a 16 cpu limit"
    );
    let placed: usize = p.new_nodes.iter().map(|n| n.pods.len()).sum();
    assert_eq!(placed + p.unschedulable.len(), 8, "nothing is lost");
}

/// Pods of `app` that each need a node of their own (required hostname anti-affinity).
fn one_per_node(app: &str, n: usize) -> Vec<Pod> {
    let mut pods = deployment(app, n, 1500, 1024);
    for p in &mut pods {
        p.affinity.push(crate::pod::PodAffinityTerm {
            topology_key: labels::HOSTNAME.into(),
            selector: {
                let mut r = Requirements::new();
                r.add("app", Requirement::single(app));
                r
            },
            namespaces: Vec::new(),
            namespace_selector: None,
            anti: true,
            weight: None,
        });
    }
    pods
}

#[test]
fn a_nodes_limit_caps_the_count_of_nodes() {
    // Karpenter's "should not schedule if limits would be exceeded (node)": a limit of two
    // nodes, three pods that each need their own node.
    let mut prov = Provisioner::default_provisioner();
    prov.limits.other.insert("nodes".into(), 2);
    let s = Snapshot {
        pods: one_per_node("spread", 3),
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert_eq!(p.new_nodes.len(), 2, "{:?}", p.new_nodes);
    assert_eq!(p.unschedulable.len(), 1);
    assert_eq!(
        p.unschedulable[0].reason,
        "launching would exceed limit nodes=2"
    );
}

#[test]
fn a_nodes_limit_counts_the_nodes_already_owned() {
    let mut prov = Provisioner::default_provisioner();
    prov.limits.other.insert("nodes".into(), 2);
    let mut owned = Node {
        name: "owned".into(),
        allocatable: Resources::new(2000, 4 * GI, 17 * GI, 10),
        capacity: Resources::new(2000, 4 * GI, 20 * GI, 10),
        ..Node::default()
    };
    owned
        .labels
        .insert(labels::PROVISIONER_NAME.into(), "default".into());
    // Another Provisioner's node does not count.
    let mut other = owned.clone();
    other.name = "other".into();
    other
        .labels
        .insert(labels::PROVISIONER_NAME.into(), "gpu".into());
    let mut full = Vec::new();
    for (i, n) in ["owned", "other"].iter().enumerate() {
        let mut filler = pod(&format!("filler-{i}"), 2000, 1024);
        filler.node_name = Some(n.to_string());
        full.push(filler);
    }
    let mut pods = one_per_node("spread", 3);
    pods.extend(full);
    let s = Snapshot {
        pods,
        nodes: vec![owned, other],
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert_eq!(p.new_nodes.len(), 1, "{:?}", p.new_nodes);
    assert_eq!(p.unschedulable.len(), 2);
    assert!(p
        .unschedulable
        .iter()
        .all(|u| u.reason == "launching would exceed limit nodes=2"));
}

#[test]
fn karpenters_nodes_are_not_joiners_and_its_labels_select_only_them() {
    // A node Karpenter launched for its NodePool "default", beside joiner's Provisioner
    // "default" capped at one node.
    let mut prov = Provisioner::default_provisioner();
    prov.limits.other.insert("nodes".into(), 1);
    let mut karpenters = Node {
        name: "karpenter-1".into(),
        allocatable: Resources::new(2000, 4 * GI, 17 * GI, 10),
        capacity: Resources::new(2000, 4 * GI, 20 * GI, 10),
        ..Node::default()
    };
    for key in ["karpenter.sh/nodepool", "karpenter.sh/provisioner-name"] {
        karpenters.labels.insert(key.into(), "default".into());
    }
    let select = |name: &str, key: &str| {
        let mut p = pod(name, 1500, 512);
        let mut r = Requirements::new();
        r.add(key, Requirement::single("default"));
        p.node_terms = vec![r];
        p
    };
    let s = Snapshot {
        pods: vec![
            select("on-karpenter", "karpenter.sh/nodepool"),
            select("needs-karpenter", "karpenter.sh/nodepool"),
            select("old-selector", "karpenter.sh/provisioner-name"),
            // Too big for Karpenter's node.
            pod("free", 2500, 512),
        ],
        nodes: vec![karpenters],
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    // The scheduler places one selecting pod on Karpenter's node, as it would.
    assert_eq!(p.existing_nodes.len(), 1);
    assert_eq!(p.existing_nodes[0].pods.len(), 1);
    // Karpenter's node does not count against joiner's one-node limit.
    assert_eq!(p.new_nodes.len(), 1, "{:?}", p.new_nodes);
    assert_eq!(p.new_nodes[0].pods, vec!["default/free"]);
    // The other selecting pods get no joiner node: the scheduler would never put them there.
    assert_eq!(p.unschedulable.len(), 2);
    for u in &p.unschedulable {
        let key = if u.pod == "default/old-selector" {
            "karpenter.sh/provisioner-name"
        } else {
            "karpenter.sh/nodepool"
        };
        assert_eq!(
            u.reason,
            format!(
                "requirement {key} In [default] selects Karpenter's nodes; joiner's nodes \
                 carry joiner.sh/provisioner-name instead"
            )
        );
    }
}

#[test]
fn a_memory_limit_is_named_in_human_units() {
    let mut prov = Provisioner::default_provisioner();
    prov.limits.memory = Some(1600 << 30);
    let s = Snapshot {
        pods: deployment("web", 60, 1000, 64 * 1024),
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert!(!p.unschedulable.is_empty());
    assert_eq!(
        p.unschedulable[0].reason,
        "launching would exceed limit memory=1600Gi"
    );
}

#[test]
fn every_resource_in_the_limits_is_enforced() {
    // A pods limit of 3 (no cpu or memory limit) caps the new nodes' pod capacity.
    let mut prov = Provisioner::default_provisioner();
    prov.limits.other.insert("pods".into(), 100);
    let s = Snapshot {
        pods: deployment("web", 200, 100, 64),
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    let catalog = catalog();
    let pods_capacity: i64 = p
        .new_nodes
        .iter()
        .map(|n| {
            n.instance_type_options
                .iter()
                .filter_map(|o| catalog.iter().find(|t| &t.name == o))
                .map(|t| t.capacity.pods)
                .max()
                .unwrap_or(0)
        })
        .sum();
    assert!(
        pods_capacity <= 100,
        "{pods_capacity} pods of capacity over a limit of 100"
    );
    assert!(!p.unschedulable.is_empty());
    assert_eq!(
        p.unschedulable[0].reason,
        "launching would exceed limit pods=100"
    );
}

#[test]
fn a_pod_no_one_type_holds_is_told_every_resource_it_asks_for() {
    // Some type has 200 GiB of memory (x1e) and some a GPU (g4dn, 192 GiB at most), none
    // both: the reason names the GPU too, not only cpu and memory (Karpenter's "resource
    // requests that aren't on a single instance type").
    let mut g = pod("trainer", 1000, 200 << 10);
    g.requests.set(NVIDIA_GPU, 1);
    let p = run(&Snapshot {
        pods: vec![g],
        ..Snapshot::default()
    });
    assert_eq!(p.unschedulable.len(), 1, "{:?}", p.new_nodes);
    assert_eq!(
        p.unschedulable[0].reason,
        "no instance type has room for 1 cpu core, 200 GiB memory and 1 nvidia.com/gpu at once"
    );
}

#[test]
fn gpu_pods_get_gpu_types_and_others_do_not() {
    let mut g = pod("trainer", 1000, 1024);
    g.requests.set(NVIDIA_GPU, 1);
    let s = Snapshot {
        pods: vec![g, pod("web", 1000, 1024)],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert_eq!(p.new_nodes.len(), 2);
    let gpu = p
        .new_nodes
        .iter()
        .find(|n| n.pods == vec!["default/trainer"])
        .unwrap();
    assert_eq!(gpu.instance_type, "g4dn.xlarge");
    let web = p
        .new_nodes
        .iter()
        .find(|n| n.pods == vec!["default/web"])
        .unwrap();
    assert!(!web.instance_type.starts_with("g4dn"));
}

#[test]
fn taints_need_tolerations() {
    let mut gpu = Provisioner::default_provisioner();
    gpu.name = "tainted".into();
    gpu.taints = vec![Taint {
        key: "dedicated".into(),
        value: "batch".into(),
        effect: Effect::NoSchedule,
    }];
    let mut tolerant = pod("tolerant", 100, 100);
    tolerant.tolerations = vec![Toleration {
        key: "dedicated".into(),
        exists: true,
        value: String::new(),
        effect: None,
    }];
    let s = Snapshot {
        pods: vec![tolerant, pod("plain", 100, 100)],
        provisioners: vec![gpu],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert_eq!(p.new_nodes.len(), 1);
    assert_eq!(p.new_nodes[0].pods, vec!["default/tolerant"]);
    assert_eq!(p.unschedulable[0].pod, "default/plain");
    assert_eq!(
        p.unschedulable[0].reason,
        "taint dedicated=batch:NoSchedule is not tolerated"
    );
}

#[test]
fn daemonset_overhead_is_reserved_on_new_nodes() {
    // 1900m pod fits c5.large (1930m) alone but not with a 100m daemon.
    let ds = DaemonSet {
        namespace: "kube-system".into(),
        name: "agent".into(),
        pod: pod("agent", 100, 64),
    };
    let s = Snapshot {
        pods: vec![pod("a", 1900, 512)],
        daemonsets: vec![ds],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert_eq!(p.new_nodes[0].instance_type, "c5.xlarge");
    assert_eq!(p.new_nodes[0].requests.cpu, 2000);
}

#[test]
fn heavier_provisioner_wins_and_spot_is_used_when_allowed() {
    let mut spot = Provisioner::default_provisioner();
    spot.name = "spot".into();
    spot.weight = 50;
    spot.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::one_of(["spot", "on-demand"]),
    );
    let s = Snapshot {
        pods: vec![pod("a", 500, 512)],
        provisioners: vec![Provisioner::default_provisioner(), spot],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert_eq!(p.new_nodes[0].provisioner, "spot");
    assert_eq!(p.new_nodes[0].capacity_type, CapacityType::Spot);
}

#[test]
fn web_fleet_is_not_put_on_huge_memory_types() {
    let s = Snapshot {
        pods: deployment("web", 500, 250, 512),
        ..Snapshot::default()
    };
    let p = run(&s);
    assert!(p.unschedulable.is_empty());
    assert!(p
        .new_nodes
        .iter()
        .all(|n| !n.instance_type.starts_with("x1e")));
    // 500 × 250m = 125 cpu; c5 at 0.0425/cpu → about $5.3/h for the cpu alone.
    let total = p.new_price_per_hour();
    assert!(total < 6.5, "total {total}");
    let placed: usize = p.new_nodes.iter().map(|n| n.pods.len()).sum();
    assert_eq!(placed, 500);
}

#[test]
fn same_input_same_plan() {
    let mut pods = deployment("a", 37, 300, 700);
    pods.extend(deployment("b", 11, 1200, 3000));
    pods.extend(deployment("c", 90, 50, 64));
    let s = Snapshot {
        pods,
        ..Snapshot::default()
    };
    assert_eq!(run(&s), run(&s));
}

#[test]
fn zones_rotate_among_equal_offerings() {
    let s = Snapshot {
        pods: deployment("big", 3, 1500, 1024),
        ..Snapshot::default()
    };
    let p = run(&s);
    let zones: Vec<&str> = p.new_nodes.iter().map(|n| n.zone.as_str()).collect();
    assert_eq!(p.new_nodes.len(), 3, "{:?}", p.new_nodes);
    assert_eq!(zones, vec!["z-a", "z-b", "z-c"]);
}

#[test]
fn plain_pod_prefers_the_term_that_allows_a_plain_type() {
    // Found by the properties: the first term only fits GPU types, the second a plain family.
    let mut a = pod("a", 500, 512);
    let term = |fam: &str| {
        let mut r = Requirements::new();
        r.add(
            crate::testing::catalog::INSTANCE_FAMILY,
            Requirement::single(fam),
        );
        r
    };
    a.node_terms = vec![term("g4dn"), term("c5")];
    let p = run(&Snapshot {
        pods: vec![a],
        ..Snapshot::default()
    });
    assert_eq!(p.new_nodes.len(), 1);
    assert_eq!(p.new_nodes[0].instance_type, "c5.large");
}

#[test]
fn a_provisioner_with_prefer_no_schedule_taints_is_used_only_when_no_other_fits() {
    // Karpenter tolerates PreferNoSchedule taints only as its last relaxation: the heavier
    // soft-tainted Provisioner takes the pods nothing else can hold, and those that tolerate it.
    let mut soft = Provisioner::default_provisioner();
    soft.name = "soft".into();
    soft.weight = 10;
    soft.taints = vec![Taint {
        key: "spare".into(),
        value: "true".into(),
        effect: Effect::PreferNoSchedule,
    }];
    let mut plain = Provisioner::default_provisioner();
    plain.name = "plain".into();
    plain.requirements.add(
        crate::testing::catalog::INSTANCE_FAMILY,
        Requirement::single("c5"),
    );
    let mut gpu = pod("gpu", 1000, 1024);
    gpu.requests.set(NVIDIA_GPU, 1);
    let mut tolerant = pod("tolerant", 500, 512);
    tolerant.tolerations = vec![Toleration {
        key: "spare".into(),
        exists: true,
        value: String::new(),
        effect: Some(Effect::PreferNoSchedule),
    }];
    let p = run(&Snapshot {
        pods: vec![pod("web", 500, 512), gpu, tolerant],
        provisioners: vec![soft, plain],
        ..Snapshot::default()
    });
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let on = |name: &str| {
        p.new_nodes
            .iter()
            .find(|n| n.pods.iter().any(|k| k == &format!("default/{name}")))
            .map(|n| n.provisioner.clone())
    };
    assert_eq!(on("web").as_deref(), Some("plain"));
    assert_eq!(on("gpu").as_deref(), Some("soft"));
    assert_eq!(on("tolerant").as_deref(), Some("soft"));
    assert_eq!(p.relaxed.len(), 1, "{:?}", p.relaxed);
    assert_eq!(p.relaxed[0].pod, "default/gpu");
    assert_eq!(
        p.relaxed[0].preferences,
        vec!["avoiding Provisioners tainted spare=true:PreferNoSchedule"]
    );
}

#[test]
fn a_self_affine_group_gets_a_type_that_holds_it_all_rather_than_the_cheapest_per_pod() {
    // Five pods of 3 cpu that must share a node. c5 is the cheapest per pod (c5.xlarge holds
    // one for $0.17/h) but its largest size holds two; only m5.4xlarge holds all five.
    let mut cat: Vec<crate::instance_type::InstanceType> = crate::testing::catalog::family(
        "c5",
        0.0425,
        2,
        &[("large", 2, 29), ("xlarge", 4, 58), ("2xlarge", 8, 58)],
    );
    cat.extend(crate::testing::catalog::family(
        "m5",
        0.048,
        4,
        &[("2xlarge", 8, 58), ("4xlarge", 16, 234)],
    ));
    let mut pods = deployment("shard", 5, 3000, 1024);
    for p in &mut pods {
        p.affinity.push(crate::pod::PodAffinityTerm {
            topology_key: labels::HOSTNAME.into(),
            selector: {
                let mut r = Requirements::new();
                r.add("app", Requirement::single("shard"));
                r
            },
            namespaces: Vec::new(),
            namespace_selector: None,
            anti: false,
            weight: None,
        });
    }
    let p = simulate(
        &Snapshot {
            pods,
            ..Snapshot::default()
        },
        &cat,
        &Options::default(),
    );
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.new_nodes.len(), 1);
    assert_eq!(p.new_nodes[0].pods.len(), 5);
    assert_eq!(p.new_nodes[0].instance_type, "m5.4xlarge");
}

#[test]
fn a_zone_no_instance_type_is_offered_in_is_named_as_such() {
    // The test catalog's zones are z-a, z-b and z-c; its types name no region.
    let mut west = pod("west", 500, 512);
    let mut term = Requirements::new();
    term.add(labels::ZONE, Requirement::single("us-west-2a"));
    west.node_terms = vec![term];
    let p = run(&Snapshot {
        pods: vec![west],
        ..Snapshot::default()
    });
    assert_eq!(
        p.unschedulable[0].reason,
        "requirement topology.kubernetes.io/zone In [us-west-2a] names no zone any instance type \
         is offered in (its zones: z-a, z-b, z-c)"
    );
}

#[test]
fn a_pod_whose_selector_and_affinity_disagree_is_told_so() {
    // nodeSelector capacity-type spot, ANDed into a required term that asks for on-demand.
    let mut both = pod("both", 500, 512);
    let mut term = Requirements::new();
    term.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
    term.add(labels::CAPACITY_TYPE, Requirement::single("spot"));
    both.node_terms = vec![term];
    let p = run(&Snapshot {
        pods: vec![both],
        ..Snapshot::default()
    });
    assert_eq!(
        p.unschedulable[0].reason,
        "the pod's own node requirements on karpenter.sh/capacity-type admit no value (its \
         nodeSelector and required node affinity disagree)"
    );
}

#[test]
fn ephemeral_storage_follows_the_provisioners_volume() {
    // 50 GiB of scratch space: more than the catalog's 20 GiB volume leaves (17 GiB), less than
    // a 100 GiB root volume does (100 − 1 GiB kube-reserved − 10 GiB eviction = 89 GiB).
    let mut scratch = pod("scratch", 500, 512);
    scratch.requests.ephemeral_storage = 50 << 30;
    let plan_with = |volume: Option<i64>| {
        let mut prov = Provisioner::default_provisioner();
        prov.kubelet.ephemeral_volume = volume;
        run(&Snapshot {
            pods: vec![scratch.clone()],
            provisioners: vec![prov],
            ..Snapshot::default()
        })
    };
    let small = plan_with(None);
    assert_eq!(
        small.unschedulable[0].reason,
        "no instance type has 50 GiB ephemeral storage allocatable; the largest allowed has 17 \
         GiB ephemeral storage"
    );
    let big = plan_with(Some(100 << 30));
    assert!(big.unschedulable.is_empty(), "{:?}", big.unschedulable);
    assert_eq!(big.new_nodes[0].instance_type, "c5.large");
}

#[test]
fn system_reserved_leaves_less_room_on_each_node() {
    // c5.large holds 1930m; 300m system-reserved leaves 1630m, so a 1700m pod needs c5.xlarge.
    let mut prov = Provisioner::default_provisioner();
    prov.kubelet.system_reserved.cpu = Some(300);
    let p = run(&Snapshot {
        pods: vec![pod("a", 1700, 512)],
        provisioners: vec![prov],
        ..Snapshot::default()
    });
    assert_eq!(p.new_nodes[0].instance_type, "c5.xlarge");
}

#[test]
fn a_windows_pod_is_told_joiner_launches_linux_only() {
    let mut w = pod("win", 500, 512);
    let mut r = Requirements::new();
    r.add(labels::OS, Requirement::single("windows"));
    w.node_terms = vec![r];
    let p = run(&Snapshot {
        pods: vec![w],
        ..Snapshot::default()
    });
    assert!(p.new_nodes.is_empty());
    assert_eq!(
        p.unschedulable[0].reason,
        "requirement kubernetes.io/os In [windows]: joiner launches Linux nodes only"
    );
}

#[test]
fn a_daemonset_taking_every_types_room_is_named() {
    let mut prov = Provisioner::default_provisioner();
    prov.requirements.add(
        labels::INSTANCE_TYPE,
        Requirement::one_of(["m5.large", "m5.xlarge"]),
    );
    let s = Snapshot {
        pods: vec![pod("a", 100, 64)],
        daemonsets: vec![DaemonSet {
            namespace: "kube-system".into(),
            name: "hog".into(),
            pod: pod("hog", 6000, 64),
        }],
        provisioners: vec![prov],
        ..Snapshot::default()
    };
    let p = run(&s);
    assert!(p.new_nodes.is_empty());
    let reason = &p.unschedulable[0].reason;
    assert!(
        reason.starts_with(
            "no instance type has 0.1 cpu cores allocatable beside its DaemonSets; the largest allowed has "
        ) && reason.ends_with(", of which DaemonSets request 6 cpu cores"),
        "{reason}"
    );
}

#[test]
fn an_existing_node_takes_volumes_only_up_to_its_csi_attach_cap() {
    // The kube-scheduler's NodeVolumeLimits: the node's CSINode caps EBS at 4 volumes; two
    // running pods attach 2 (one claim, db/shared, is what a rolling update's new pod uses
    // too). Room for 2 more StatefulSet replicas with a volume each; the pod reusing
    // db/shared adds no volume and joins as well. The other replicas need a new node,
    // which has no cap until its CSINode exists (Karpenter counts it the same way).
    let attach = |p: &mut Pod, claim: &str| attach_ebs(p, &format!("db/{claim}"));
    let node = ebs_capped_node;
    let mut pods = Vec::new();
    for (name, claim) in [("old-app", "shared"), ("other", "other")] {
        let mut p = pod(name, 100, 128);
        p.namespace = "db".into();
        p.node_name = Some("ip-capped".into());
        attach(&mut p, claim);
        pods.push(p);
    }
    let mut reuse = pod("new-app", 100, 128);
    reuse.namespace = "db".into();
    attach(&mut reuse, "shared");
    pods.push(reuse);
    for i in 0..5 {
        let mut p = pod(&format!("web-{i}"), 100, 128);
        p.namespace = "db".into();
        attach(&mut p, &format!("data-web-{i}"));
        pods.push(p);
    }
    let capped = Snapshot {
        pods: pods.clone(),
        nodes: vec![node("ip-capped", Some(4))],
        ..Snapshot::default()
    };
    let plan = run(&capped);
    crate::testing::plan_check::check(&capped, &catalog(), &plan).expect("constraints hold");
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let mut on_node = plan.existing_nodes[0].pods.clone();
    on_node.sort();
    assert_eq!(on_node, ["db/new-app", "db/web-0", "db/web-1"]);
    assert_eq!(plan.new_nodes.len(), 1);
    assert_eq!(plan.new_nodes[0].pods, ["db/web-2", "db/web-3", "db/web-4"]);

    // A node whose CSINode is not known yet (no cap) takes them all.
    let uncapped = Snapshot {
        pods,
        nodes: vec![node("ip-capped", None)],
        ..Snapshot::default()
    };
    let plan = run(&uncapped);
    assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
    assert_eq!(plan.existing_nodes[0].pods.len(), 6);
}

#[test]
fn pending_pods_sharing_a_claim_attach_it_once_on_a_capped_node() {
    // One EBS slot left on the node; three pending pods of a group that must share a node
    // (required hostname affinity to itself) all mount one claim, not created yet: the
    // kube-scheduler attaches it once, so the whole group fits there and nothing is bought.
    let with_claim = |p: &mut Pod, claim: &str| attach_ebs(p, &format!("default/{claim}"));
    let mut pods = two_volumes_running_on_n();
    let mut selector = Requirements::new();
    selector.add("app", Requirement::single("group"));
    for mut p in deployment("group", 3, 100, 128) {
        with_claim(&mut p, "shared");
        p.affinity.push(crate::pod::PodAffinityTerm {
            topology_key: labels::HOSTNAME.into(),
            selector: selector.clone(),
            namespaces: Vec::new(),
            namespace_selector: None,
            anti: false,
            weight: None,
        });
        pods.push(p);
    }
    let plan = plan_beside_two_volumes(pods);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
    assert_eq!(plan.existing_nodes[0].pods.len(), 3);
}

#[test]
fn a_pod_that_only_reuses_an_attached_claim_joins_past_one_the_cap_refuses() {
    // One EBS slot left; the Deployment's pods mount claims a, a, a, b, a in that order. The
    // kube-scheduler refuses a pod only for the volumes it adds: the three a pods take the
    // slot, b does not fit, and the last a, adding nothing, still joins the node.
    let mut pods = two_volumes_running_on_n();
    for (mut p, claim) in deployment("web", 5, 100, 128)
        .into_iter()
        .zip(["a", "a", "a", "b", "a"])
    {
        attach_ebs(&mut p, &format!("default/{claim}"));
        pods.push(p);
    }
    let plan = plan_beside_two_volumes(pods);
    let mut on_node = plan.existing_nodes[0].pods.clone();
    on_node.sort();
    assert_eq!(
        on_node,
        [
            "default/web-0",
            "default/web-1",
            "default/web-2",
            "default/web-4"
        ]
    );
    assert_eq!(plan.new_nodes.len(), 1);
    assert_eq!(plan.new_nodes[0].pods, ["default/web-3"]);
}

#[test]
fn a_value_no_node_can_carry_is_refused_before_any_node_is_bought() {
    // The API server does not check node-affinity values: `team In [a/b]` is accepted on the
    // pod, but no Node can be labelled `team=a/b`, so a node bought for it never gets it.
    let mut prov = Provisioner::default_provisioner();
    prov.requirements.add("team", Requirement::any());
    let with_team = |values: &[&str]| {
        let mut p = pod("p", 500, 512);
        let mut term = Requirements::new();
        term.add("team", Requirement::one_of(values.iter().copied()));
        p.node_terms = vec![term];
        run(&Snapshot {
            pods: vec![p],
            provisioners: vec![prov.clone()],
            ..Snapshot::default()
        })
    };
    let refused = with_team(&["a/b"]);
    assert!(refused.new_nodes.is_empty(), "{:?}", refused.new_nodes);
    assert_eq!(
        refused.unschedulable[0].reason,
        "requirement team In [a/b]: \"a/b\" is not a valid label value, so no node can carry it"
    );
    // With one valid value beside it, the node is bought for that one only.
    let narrowed = with_team(&["a/b", "web"]);
    assert!(
        narrowed.unschedulable.is_empty(),
        "{:?}",
        narrowed.unschedulable
    );
    assert_eq!(
        narrowed.new_nodes[0].requirements.get("team"),
        Some(&Requirement::single("web"))
    );
}

#[test]
fn label_values_are_checked_as_kubernetes_does() {
    for ok in ["", "a", "web", "a.b_c-d", "A1", &"x".repeat(63)] {
        assert!(labels::is_valid_value(ok), "{ok:?}");
    }
    for bad in ["a/b", "-a", "a-", "_a", "a b", "é", &"x".repeat(64)] {
        assert!(!labels::is_valid_value(bad), "{bad:?}");
    }
}
