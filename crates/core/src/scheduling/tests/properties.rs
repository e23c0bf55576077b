//! Property tests of the scheduling simulation on random small clusters.
//!
//! They protect the promises every plan must keep, whatever the input:
//!
//! 1. conservation: every pending pod is placed exactly once or reported with a reason;
//! 2. capacity: no node is overfilled (DaemonSet overhead included) and each new node is the
//!    cheapest of the types it lists;
//! 3. pods only land where their node requirements and tolerations allow;
//! 4. provisioner cpu limits hold across existing and new nodes;
//! 5. a pod is left pending only when no node, existing or new, could hold it alone;
//! 6. the same input gives the same plan.
//!
//! The checks recompute everything from the snapshot with the model's primitives (label
//! matching, toleration matching, resource fits), never with the simulation's own helpers, so a
//! mistake in the simulation cannot hide behind the same mistake in its checker.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use crate::instance_type::{CapacityType, InstanceType, Offering};
use crate::labels;
use crate::pod::{DaemonSet, Node, Owner, Pod};
use crate::provisioner::{Limits, Provisioner};
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::{Resources, NVIDIA_GPU};
use crate::scheduling::{simulate, Options, Plan};
use crate::snapshot::Snapshot;
use crate::taints::{Effect, Taint, Toleration};

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;
const ZONES: [&str; 3] = ["z-a", "z-b", "z-c"];
const FAMILIES: [&str; 3] = ["m9", "c9", "r9"];
const GIB_PER_CPU: [i64; 4] = [1, 2, 4, 8];
const TEAM: &str = "team";
const TEAMS: [&str; 2] = ["a", "b"];
const MAX_PENDING: usize = 60;

// ---------------------------------------------------------------------------------------------
// Generation: compact specs (which shrink well and print readably), turned into a snapshot.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct TypeSpec {
    cpus: i64,
    ratio: usize,
    max_pods: i64,
    noise: f64,
    arm: bool,
    family: usize,
    zones: usize,
    spot: bool,
    available: Vec<bool>,
    gpus: i64,
}

#[derive(Clone, Debug)]
struct NodeSpec {
    cpus: i64,
    arm: bool,
    zone: usize,
    taint: Option<usize>,
    cordoned: bool,
    provisioner: Option<usize>,
    team: Option<usize>,
    running: Vec<(i64, i64)>,
    daemon: bool,
}

#[derive(Clone, Debug)]
struct ProvSpec {
    weight: i32,
    taint: Option<usize>,
    requirement: usize,
    cpu_limit: Option<i64>,
    team: Option<usize>,
}

#[derive(Clone, Debug)]
struct DaemonSpec {
    cpu: i64,
    mem_mi: i64,
    selector: Option<usize>,
    toleration: Option<usize>,
}

#[derive(Clone, Debug)]
struct ClassSpec {
    count: usize,
    cpu: i64,
    mem_mi: i64,
    selector: Option<usize>,
    second_term: Option<usize>,
    toleration: Option<usize>,
    gpus: i64,
}

#[derive(Clone, Debug)]
struct Spec {
    types: Vec<TypeSpec>,
    nodes: Vec<NodeSpec>,
    provisioners: Vec<ProvSpec>,
    daemonsets: Vec<DaemonSpec>,
    classes: Vec<ClassSpec>,
    pending_daemon_pod: bool,
}

fn type_spec() -> impl Strategy<Value = TypeSpec> {
    (
        1i64..=64,
        0usize..GIB_PER_CPU.len(),
        4i64..=110,
        0.8f64..1.25,
        prop::bool::weighted(0.3),
        0usize..FAMILIES.len(),
        1usize..=ZONES.len(),
        any::<bool>(),
        prop::collection::vec(prop::bool::weighted(0.9), 2 * ZONES.len()),
        prop_oneof![6 => Just(0i64), 1 => 1i64..=4],
    )
        .prop_map(
            |(cpus, ratio, max_pods, noise, arm, family, zones, spot, available, gpus)| TypeSpec {
                cpus,
                ratio,
                max_pods,
                noise,
                arm,
                family,
                zones,
                spot,
                available,
                gpus,
            },
        )
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        1i64..=16,
        prop::bool::weighted(0.3),
        0usize..ZONES.len(),
        prop::option::weighted(0.3, 0usize..4),
        prop::bool::weighted(0.15),
        prop::option::weighted(0.5, 0usize..3),
        prop::option::weighted(0.3, 0usize..TEAMS.len()),
        prop::collection::vec((50i64..3000, 64i64..4096), 0..4),
        any::<bool>(),
    )
        .prop_map(
            |(cpus, arm, zone, taint, cordoned, provisioner, team, running, daemon)| NodeSpec {
                cpus,
                arm,
                zone,
                taint,
                cordoned,
                provisioner,
                team,
                running,
                daemon,
            },
        )
}

fn prov_spec(limits: bool) -> impl Strategy<Value = ProvSpec> {
    let limit = if limits {
        prop::option::weighted(0.4, 2i64..=96).boxed()
    } else {
        Just(None).boxed()
    };
    (
        0i32..=100,
        prop::option::weighted(0.3, 0usize..4),
        0usize..7,
        limit,
        prop::option::weighted(0.3, 0usize..TEAMS.len()),
    )
        .prop_map(|(weight, taint, requirement, cpu_limit, team)| ProvSpec {
            weight,
            taint,
            requirement,
            cpu_limit,
            team,
        })
}

fn daemon_spec() -> impl Strategy<Value = DaemonSpec> {
    (
        10i64..=500,
        16i64..=512,
        prop::option::weighted(0.4, 0usize..3),
        prop::option::weighted(0.4, 0usize..5),
    )
        .prop_map(|(cpu, mem_mi, selector, toleration)| DaemonSpec {
            cpu,
            mem_mi,
            selector,
            toleration,
        })
}

fn class_spec() -> impl Strategy<Value = ClassSpec> {
    (
        1usize..=15,
        prop_oneof![9 => 50i64..4000, 1 => 70_000i64..200_000],
        prop_oneof![19 => 64i64..16_384, 1 => 600_000i64..700_000],
        prop::option::weighted(0.5, 0usize..10),
        prop::option::weighted(0.1, 0usize..10),
        prop::option::weighted(0.3, 0usize..5),
        prop_oneof![9 => Just(0i64), 1 => 1i64..=2],
    )
        .prop_map(
            |(count, cpu, mem_mi, selector, second_term, toleration, gpus)| ClassSpec {
                count,
                cpu,
                mem_mi,
                selector,
                second_term,
                toleration,
                gpus,
            },
        )
}

fn spec(limits: bool) -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(type_spec(), 3..=12),
        prop::collection::vec(node_spec(), 0..=3),
        prop::collection::vec(prov_spec(limits), 1..=3),
        prop::collection::vec(daemon_spec(), 0..=2),
        prop::collection::vec(class_spec(), 1..=5),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(types, nodes, provisioners, daemonsets, classes, pending_daemon_pod)| Spec {
                types,
                nodes,
                provisioners,
                daemonsets,
                classes,
                pending_daemon_pod,
            },
        )
}

fn taint(i: usize) -> Taint {
    let (key, value, effect) = match i {
        0 => ("dedicated", "batch", Effect::NoSchedule),
        1 => ("gpu", "true", Effect::NoSchedule),
        2 => ("soft", "x", Effect::PreferNoSchedule),
        _ => ("evict", "y", Effect::NoExecute),
    };
    Taint {
        key: key.into(),
        value: value.into(),
        effect,
    }
}

fn toleration(i: usize) -> Toleration {
    let (key, exists, value, effect) = match i {
        0 => ("dedicated", true, "", None),
        1 => ("gpu", false, "true", None),
        2 => ("", true, "", None),
        3 => ("dedicated", false, "wrong", None),
        _ => ("evict", true, "", Some(Effect::NoExecute)),
    };
    Toleration {
        key: key.into(),
        exists,
        value: value.into(),
        effect,
    }
}

/// A pod's nodeSelector (or one node-affinity term).
fn pod_selector(i: usize) -> Requirements {
    let mut r = Requirements::new();
    match i {
        0 => r.add(labels::ARCH, Requirement::single("amd64")),
        1 => r.add(labels::ARCH, Requirement::single("arm64")),
        2 => r.add(labels::ZONE, Requirement::single("z-a")),
        3 => r.add(labels::ZONE, Requirement::single("z-b")),
        4 => r.add(TEAM, Requirement::single("a")),
        5 => r.add(TEAM, Requirement::single("b")),
        6 => r.add("example.com/rack", Requirement::single("r1")),
        7 => r.add(labels::CAPACITY_TYPE, Requirement::single("spot")),
        8 => r.add(TEAM, Requirement::new(Operator::NotIn, &["a"]).unwrap()),
        _ => r.add(
            crate::testing::catalog::INSTANCE_FAMILY,
            Requirement::single("c9"),
        ),
    }
    r
}

/// A DaemonSet's nodeSelector: only keys whose value a node claim fixes exactly (the instance
/// type's arch, the provisioner's labels), so "would run there" has one answer per node.
fn daemon_selector(i: usize) -> Requirements {
    let mut r = Requirements::new();
    match i {
        0 => r.add(labels::ARCH, Requirement::single("amd64")),
        1 => r.add(labels::ARCH, Requirement::single("arm64")),
        _ => r.add(TEAM, Requirement::single("a")),
    }
    r
}

fn arch(arm: bool) -> &'static str {
    if arm {
        "arm64"
    } else {
        "amd64"
    }
}

struct Case {
    snapshot: Snapshot,
    catalog: Vec<InstanceType>,
}

fn build(spec: &Spec) -> Case {
    let catalog = spec
        .types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let name = format!("{}.t{i}", FAMILIES[t.family]);
            let mut l = BTreeMap::new();
            l.insert(labels::ARCH.to_string(), arch(t.arm).to_string());
            l.insert(labels::OS.to_string(), "linux".to_string());
            l.insert(
                crate::testing::catalog::INSTANCE_FAMILY.to_string(),
                FAMILIES[t.family].to_string(),
            );
            l.insert(labels::INSTANCE_TYPE.to_string(), name.clone());
            l.insert(
                crate::testing::catalog::INSTANCE_CPU.to_string(),
                t.cpus.to_string(),
            );
            let gib = GIB_PER_CPU[t.ratio];
            let mut capacity =
                Resources::new(t.cpus * 1000, t.cpus * gib * GI, 20 * GI, t.max_pods);
            if t.gpus > 0 {
                capacity.set(NVIDIA_GPU, t.gpus);
                l.insert(
                    crate::testing::catalog::INSTANCE_GPU_NAME.to_string(),
                    "t4".to_string(),
                );
            }
            let mut allocatable = capacity.clone();
            allocatable.cpu -= 80;
            allocatable.memory -= GI / 2;
            allocatable.ephemeral_storage = 17 * GI;
            let od = t.cpus as f64 * (0.03 + 0.006 * gib as f64) * t.noise + 0.5 * t.gpus as f64;
            let mut offerings = Vec::new();
            for (z, zone) in ZONES.iter().enumerate().take(t.zones) {
                offerings.push(Offering {
                    zone: zone.to_string(),
                    capacity_type: CapacityType::OnDemand,
                    price: od,
                    price_estimated: false,
                    available: t.available[2 * z],
                });
                if t.spot {
                    offerings.push(Offering {
                        zone: zone.to_string(),
                        capacity_type: CapacityType::Spot,
                        price: od * 0.35 * (1.0 + 0.05 * z as f64),
                        price_estimated: false,
                        available: t.available[2 * z + 1],
                    });
                }
            }
            InstanceType {
                name,
                labels: l,
                capacity,
                allocatable,
                offerings,
                provider_keys: crate::testing::catalog::PROVIDER_KEYS,
            }
        })
        .collect();

    let mut pods = Vec::new();
    let mut nodes = Vec::new();
    for (i, n) in spec.nodes.iter().enumerate() {
        let name = format!("n{i}");
        let mut l = BTreeMap::new();
        l.insert(labels::ARCH.to_string(), arch(n.arm).to_string());
        l.insert(labels::OS.to_string(), "linux".to_string());
        l.insert(labels::ZONE.to_string(), ZONES[n.zone].to_string());
        l.insert(labels::HOSTNAME.to_string(), name.clone());
        if let Some(p) = n.provisioner {
            l.insert(labels::PROVISIONER_NAME.to_string(), format!("p{p}"));
        }
        if let Some(t) = n.team {
            l.insert(TEAM.to_string(), TEAMS[t].to_string());
        }
        let capacity = Resources::new(n.cpus * 1000, n.cpus * 4 * GI, 20 * GI, 20);
        let allocatable =
            Resources::new(n.cpus * 1000 - 100, n.cpus * 4 * GI - GI / 2, 17 * GI, 20);
        // Running pods as the kube-scheduler would have bound them: never more than fits.
        let mut used = Resources::default();
        let mut running: Vec<(String, Resources, Option<Owner>)> = n
            .running
            .iter()
            .enumerate()
            .map(|(j, (cpu, mem))| {
                (
                    format!("run-{i}-{j}"),
                    Resources::new(*cpu, mem * MI, 0, 1),
                    None,
                )
            })
            .collect();
        if n.daemon {
            running.push((
                format!("ds-on-{i}"),
                Resources::new(100, 128 * MI, 0, 1),
                Some(Owner {
                    kind: "DaemonSet".into(),
                    name: "agent".into(),
                }),
            ));
        }
        for (pod_name, requests, owner) in running {
            let mut after = used.clone();
            after.add(&requests);
            if !after.fits(&allocatable) {
                continue;
            }
            used = after;
            pods.push(Pod {
                namespace: "default".into(),
                name: pod_name,
                requests,
                owner,
                node_name: Some(name.clone()),
                ..Pod::default()
            });
        }
        nodes.push(Node {
            name,
            labels: l,
            taints: n.taint.map(taint).into_iter().collect(),
            capacity,
            allocatable,
            unschedulable: n.cordoned,
            ..Node::default()
        });
    }

    let provisioners = spec
        .provisioners
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut requirements = Requirements::new();
            match p.requirement {
                1 => requirements.add(labels::ARCH, Requirement::single("amd64")),
                2 => requirements.add(labels::ARCH, Requirement::single("arm64")),
                3 => requirements.add(labels::CAPACITY_TYPE, Requirement::single("spot")),
                4 => requirements.add(
                    labels::CAPACITY_TYPE,
                    Requirement::one_of(["spot", "on-demand"]),
                ),
                5 => requirements.add(labels::CAPACITY_TYPE, Requirement::single("on-demand")),
                6 => requirements.add(labels::ZONE, Requirement::one_of(["z-b", "z-c"])),
                _ => {}
            }
            let mut l = BTreeMap::new();
            if let Some(t) = p.team {
                l.insert(TEAM.to_string(), TEAMS[t].to_string());
            }
            Provisioner {
                name: format!("p{i}"),
                weight: p.weight,
                requirements,
                labels: l,
                taints: p.taint.map(taint).into_iter().collect(),
                startup_taints: Vec::new(),
                limits: Limits {
                    cpu: p.cpu_limit.map(|c| c * 1000),
                    ..Limits::default()
                },
                kubelet: crate::kubelet::KubeletSettings::default(),
                node_template: None,
                held: crate::Resources::default(),
            }
        })
        .collect();

    let daemonsets = spec
        .daemonsets
        .iter()
        .enumerate()
        .map(|(i, d)| DaemonSet {
            namespace: "kube-system".into(),
            name: format!("ds{i}"),
            pod: Pod {
                namespace: "kube-system".into(),
                name: format!("ds{i}"),
                requests: Resources::new(d.cpu, d.mem_mi * MI, 0, 1),
                node_terms: d.selector.map(daemon_selector).into_iter().collect(),
                tolerations: d.toleration.map(toleration).into_iter().collect(),
                owner: Some(Owner {
                    kind: "DaemonSet".into(),
                    name: format!("ds{i}"),
                }),
                ..Pod::default()
            },
        })
        .collect();

    let mut pending = 0;
    for (ci, c) in spec.classes.iter().enumerate() {
        let mut requests = Resources::new(c.cpu, c.mem_mi * MI, 0, 1);
        if c.gpus > 0 {
            requests.set(NVIDIA_GPU, c.gpus);
        }
        let mut node_terms: Vec<Requirements> = c.selector.map(pod_selector).into_iter().collect();
        if let (false, Some(s)) = (node_terms.is_empty(), c.second_term) {
            node_terms.push(pod_selector(s));
        }
        for j in 0..c.count {
            if pending == MAX_PENDING {
                break;
            }
            pending += 1;
            let mut pod_labels = BTreeMap::new();
            pod_labels.insert("app".to_string(), format!("c{ci}"));
            pods.push(Pod {
                namespace: "default".into(),
                name: format!("c{ci}-{j}"),
                labels: pod_labels.into(),
                requests: requests.clone(),
                node_terms: node_terms.clone(),
                tolerations: c.toleration.map(toleration).into_iter().collect(),
                owner: Some(Owner {
                    kind: "Deployment".into(),
                    name: format!("c{ci}"),
                }),
                ..Pod::default()
            });
        }
    }
    if spec.pending_daemon_pod {
        pods.push(Pod {
            namespace: "kube-system".into(),
            name: "ds-pending".into(),
            requests: Resources::new(100, 64 * MI, 0, 1),
            owner: Some(Owner {
                kind: "DaemonSet".into(),
                name: "agent".into(),
            }),
            ..Pod::default()
        });
    }

    Case {
        snapshot: Snapshot {
            pods,
            nodes,
            daemonsets,
            provisioners,
            ..Snapshot::default()
        },
        catalog,
    }
}

// ---------------------------------------------------------------------------------------------
// Independent model of where a pod may go.
// ---------------------------------------------------------------------------------------------

/// True when some NoSchedule / NoExecute taint is not tolerated.
fn blocked_by(taints: &[Taint], tolerations: &[Toleration]) -> bool {
    taints.iter().any(|t| {
        t.effect != Effect::PreferNoSchedule && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

/// True when a node with these labels satisfies one of the pod's terms (or it has none).
fn terms_match(pod: &Pod, node_labels: &BTreeMap<String, String>) -> bool {
    pod.node_terms.is_empty() || pod.node_terms.iter().any(|t| t.matches_labels(node_labels))
}

/// The labels a node launched by `prov` on this type and offering carries.
fn claim_labels(
    t: &InstanceType,
    zone: &str,
    ct: CapacityType,
    prov: &Provisioner,
) -> BTreeMap<String, String> {
    let mut l = t.labels.clone();
    l.insert(labels::ZONE.to_string(), zone.to_string());
    l.insert(labels::CAPACITY_TYPE.to_string(), ct.as_str().to_string());
    for (k, v) in &prov.labels {
        l.insert(k.clone(), v.clone());
    }
    l.insert(labels::PROVISIONER_NAME.to_string(), prov.name.clone());
    l
}

/// True when the provisioner may launch a node with these labels (its requirements, and
/// on-demand only unless it names capacity types).
fn prov_allows(prov: &Provisioner, node_labels: &BTreeMap<String, String>) -> bool {
    let on_demand_default = prov.requirements.get(labels::CAPACITY_TYPE).is_some()
        || node_labels.get(labels::CAPACITY_TYPE).map(String::as_str) == Some("on-demand");
    on_demand_default && prov.requirements.matches_labels(node_labels)
}

/// Requests of the DaemonSets whose pods would run on a node of `prov` with these labels.
fn daemon_overhead(
    snap: &Snapshot,
    prov: &Provisioner,
    node_labels: &BTreeMap<String, String>,
) -> Resources {
    let mut r = Resources::default();
    for ds in &snap.daemonsets {
        if !blocked_by(&prov.taints, &ds.pod.tolerations) && terms_match(&ds.pod, node_labels) {
            r.add(&ds.pod.requests);
        }
    }
    r
}

fn sum_requests<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Resources {
    let mut r = Resources::default();
    for p in pods {
        r.add(&p.requests);
    }
    r
}

struct World<'a> {
    snap: &'a Snapshot,
    catalog: &'a [InstanceType],
    by_key: HashMap<String, &'a Pod>,
}

impl<'a> World<'a> {
    fn new(case: &'a Case) -> Self {
        World {
            snap: &case.snapshot,
            catalog: &case.catalog,
            by_key: case.snapshot.pods.iter().map(|p| (p.key(), p)).collect(),
        }
    }

    fn pod(&self, key: &str) -> &'a Pod {
        self.by_key[key]
    }

    fn pods(&self, keys: &[String]) -> Vec<&'a Pod> {
        keys.iter().map(|k| self.pod(k)).collect()
    }

    fn prov(&self, name: &str) -> &'a Provisioner {
        self.snap
            .provisioners
            .iter()
            .find(|p| p.name == name)
            .unwrap()
    }

    fn itype(&self, name: &str) -> &'a InstanceType {
        self.catalog.iter().find(|t| t.name == name).unwrap()
    }

    fn node(&self, name: &str) -> &'a Node {
        self.snap.nodes.iter().find(|n| n.name == name).unwrap()
    }

    /// Free capacity of each existing node after its running pods, and also after the pods the
    /// plan puts there.
    fn existing_free(&self, plan: &Plan) -> (Vec<Resources>, Vec<Resources>) {
        let before: Vec<Resources> = self
            .snap
            .nodes
            .iter()
            .map(|n| {
                let mut f = n.allocatable.clone();
                for p in &self.snap.pods {
                    if p.node_name.as_deref() == Some(n.name.as_str()) {
                        f.sub(&p.requests);
                    }
                }
                f
            })
            .collect();
        let mut after = before.clone();
        for u in &plan.existing_nodes {
            let i = self
                .snap
                .nodes
                .iter()
                .position(|n| n.name == u.name)
                .unwrap();
            for p in self.pods(&u.pods) {
                after[i].sub(&p.requests);
            }
        }
        (before, after)
    }

    /// True when some existing node with free capacity `free` admits the pod alone.
    fn fits_existing(&self, pod: &Pod, free: &[Resources]) -> bool {
        self.snap.nodes.iter().zip(free).any(|(n, f)| {
            !n.unschedulable
                && !blocked_by(&n.taints, &pod.tolerations)
                && terms_match(pod, &n.labels)
                && pod.requests.fits(f)
        })
    }

    /// True when some provisioner could launch a node of some type and offering that holds the
    /// pod alone next to its DaemonSets. With `plain_only`, accelerated types do not count.
    fn fits_new(&self, pod: &Pod, only: Option<&Provisioner>, plain_only: bool) -> bool {
        self.snap
            .provisioners
            .iter()
            .filter(|p| only.is_none_or(|o| o.name == p.name))
            .filter(|p| !blocked_by(&p.taints, &pod.tolerations))
            .any(|prov| {
                self.catalog
                    .iter()
                    .filter(|t| !plain_only || !t.is_accelerated())
                    .any(|t| {
                        t.offerings.iter().filter(|o| o.available).any(|o| {
                            let l = claim_labels(t, &o.zone, o.capacity_type, prov);
                            if !prov_allows(prov, &l) || !terms_match(pod, &l) {
                                return false;
                            }
                            let mut need = pod.requests.clone();
                            need.add(&daemon_overhead(self.snap, prov, &l));
                            need.fits(&t.allocatable)
                        })
                    })
            })
    }

    /// Price of the cheapest available offering of `t` a node of `prov` holding `pods` may
    /// use (the provisioner's requirements and the pods' zone and capacity-type terms); `None`
    /// when there is none.
    fn node_price(&self, t: &InstanceType, prov: &Provisioner, pods: &[&Pod]) -> Option<f64> {
        t.offerings
            .iter()
            .filter(|o| o.available && self.offering_ok(o, t, prov, pods))
            .map(|o| o.price)
            .min_by(f64::total_cmp)
    }

    fn offering_ok(
        &self,
        o: &Offering,
        t: &InstanceType,
        prov: &Provisioner,
        pods: &[&Pod],
    ) -> bool {
        let l = claim_labels(t, &o.zone, o.capacity_type, prov);
        prov_allows(prov, &l)
            && pods.iter().all(|p| {
                p.node_terms.is_empty()
                    || p.node_terms.iter().any(|term| {
                        [labels::ZONE, labels::CAPACITY_TYPE]
                            .iter()
                            .all(|k| term.get(k).is_none_or(|r| r.allows(&l[*k])))
                    })
            })
    }
}

fn pending_keys(snap: &Snapshot) -> Vec<String> {
    snap.pods
        .iter()
        .filter(|p| p.node_name.is_none() && !p.is_daemon())
        .map(Pod::key)
        .collect()
}

fn run(case: &Case) -> Plan {
    simulate(&case.snapshot, &case.catalog, &Options::default())
}

// ---------------------------------------------------------------------------------------------
// Checks.
// ---------------------------------------------------------------------------------------------

fn check_conservation(case: &Case, plan: &Plan) -> Result<(), TestCaseError> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for n in &plan.new_nodes {
        prop_assert!(!n.pods.is_empty(), "new node {} holds no pod", n.name);
        for p in &n.pods {
            *seen.entry(p.clone()).or_default() += 1;
        }
    }
    for u in &plan.existing_nodes {
        for p in &u.pods {
            *seen.entry(p.clone()).or_default() += 1;
        }
    }
    for u in &plan.unschedulable {
        prop_assert!(!u.reason.trim().is_empty(), "{} has an empty reason", u.pod);
        *seen.entry(u.pod.clone()).or_default() += 1;
    }
    let pending = pending_keys(&case.snapshot);
    for k in &pending {
        prop_assert_eq!(
            seen.get(k).copied(),
            Some(1),
            "pending pod {} in {:?}",
            k,
            plan
        );
    }
    prop_assert_eq!(
        seen.len(),
        pending.len(),
        "plan names non-pending pods: {:?}",
        plan
    );
    Ok(())
}

fn check_capacity(case: &Case, plan: &Plan) -> Result<(), TestCaseError> {
    let w = World::new(case);
    for n in &plan.new_nodes {
        let prov = w.prov(&n.provisioner);
        let t = w.itype(&n.instance_type);
        let pods = w.pods(&n.pods);
        let l = claim_labels(t, &n.zone, n.capacity_type, prov);
        let mut need = sum_requests(pods.iter().copied());
        need.add(&daemon_overhead(w.snap, prov, &l));
        prop_assert!(
            need.fits(&t.allocatable),
            "{} ({}) needs {:?}, has {:?}",
            n.name,
            t.name,
            need,
            t.allocatable
        );
        // The chosen offering exists, is allowed and is what the node costs.
        prop_assert!(
            t.offerings.iter().any(|o| o.available
                && o.zone == n.zone
                && o.capacity_type == n.capacity_type
                && o.price == n.price_per_hour
                && w.offering_ok(o, t, prov, &pods)),
            "{}: no allowed offering {} {} at {}",
            n.name,
            n.zone,
            n.capacity_type,
            n.price_per_hour
        );
        prop_assert!(
            n.instance_type_options.contains(&n.instance_type),
            "{}: chosen type not among its options",
            n.name
        );
        for opt in n.instance_type_options.iter() {
            let ot = w.itype(opt);
            let ol = claim_labels(ot, &n.zone, n.capacity_type, prov);
            let mut oneed = sum_requests(pods.iter().copied());
            oneed.add(&daemon_overhead(w.snap, prov, &ol));
            prop_assert!(
                oneed.fits(&ot.allocatable),
                "{}: option {} cannot hold {:?}",
                n.name,
                opt,
                oneed
            );
        }
        // Cheapest: compare prices only when every pod's terms are a single constraint.
        if pods.iter().all(|p| p.node_terms.len() <= 1) {
            let chosen = w.node_price(t, prov, &pods);
            prop_assert_eq!(
                chosen,
                Some(n.price_per_hour),
                "{}: price of chosen",
                &n.name
            );
            for opt in n.instance_type_options.iter() {
                let p = w.node_price(w.itype(opt), prov, &pods);
                prop_assert!(
                    p.is_some_and(|p| p >= n.price_per_hour - 1e-9),
                    "{}: option {} at {:?} is cheaper than {} at {}",
                    n.name,
                    opt,
                    p,
                    n.instance_type,
                    n.price_per_hour
                );
            }
        }
    }
    let (_, after) = w.existing_free(plan);
    for (n, free) in w.snap.nodes.iter().zip(&after) {
        prop_assert!(
            free.is_non_negative(),
            "existing {} overfilled: free {:?}",
            n.name,
            free
        );
    }
    Ok(())
}

fn check_requirements(case: &Case, plan: &Plan) -> Result<(), TestCaseError> {
    let w = World::new(case);
    for n in &plan.new_nodes {
        let prov = w.prov(&n.provisioner);
        let t = w.itype(&n.instance_type);
        let l = claim_labels(t, &n.zone, n.capacity_type, prov);
        prop_assert!(
            prov_allows(prov, &l),
            "{}: {} breaks its provisioner",
            n.name,
            t.name
        );
        for p in w.pods(&n.pods) {
            prop_assert!(
                !blocked_by(&prov.taints, &p.tolerations),
                "{} on {} does not tolerate {:?}",
                p.key(),
                n.name,
                prov.taints
            );
            prop_assert!(
                terms_match(p, &l),
                "{} on {}: terms {:?} vs labels {:?}",
                p.key(),
                n.name,
                p.node_terms,
                l
            );
            // Plain pods stay off accelerated types when a plain type of the provisioner would
            // hold them alone.
            if !p.requests.has_extended() && t.is_accelerated() {
                prop_assert!(
                    !w.fits_new(p, Some(prov), true),
                    "{} put on accelerated {} though a plain type holds it",
                    p.key(),
                    t.name
                );
            }
        }
    }
    for u in &plan.existing_nodes {
        let node = w.node(&u.name);
        prop_assert!(!node.unschedulable, "pods placed on cordoned {}", node.name);
        for p in w.pods(&u.pods) {
            prop_assert!(
                !blocked_by(&node.taints, &p.tolerations),
                "{} on {} does not tolerate {:?}",
                p.key(),
                node.name,
                node.taints
            );
            prop_assert!(
                terms_match(p, &node.labels),
                "{} on {}: terms {:?} vs labels {:?}",
                p.key(),
                node.name,
                p.node_terms,
                node.labels
            );
        }
    }
    Ok(())
}

fn check_limits(case: &Case, plan: &Plan) -> Result<(), TestCaseError> {
    let w = World::new(case);
    for prov in &w.snap.provisioners {
        let Some(limit) = prov.limits.cpu else {
            continue;
        };
        let existing: i64 = w
            .snap
            .nodes
            .iter()
            .filter(|n| n.labels.get(labels::PROVISIONER_NAME) == Some(&prov.name))
            .map(|n| n.capacity.cpu)
            .sum();
        let new: i64 = plan
            .new_nodes
            .iter()
            .filter(|n| n.provisioner == prov.name)
            .map(|n| w.itype(&n.instance_type).capacity.cpu)
            .sum();
        prop_assert!(
            new == 0 || existing + new <= limit,
            "{}: existing {}m + new {}m over limit {}m",
            prov.name,
            existing,
            new,
            limit
        );
    }
    Ok(())
}

fn check_completeness(case: &Case, plan: &Plan) -> Result<(), TestCaseError> {
    let w = World::new(case);
    let (before, after) = w.existing_free(plan);
    let unschedulable: BTreeMap<&str, &str> = plan
        .unschedulable
        .iter()
        .map(|u| (u.pod.as_str(), u.reason.as_str()))
        .collect();
    for key in pending_keys(w.snap) {
        let p = w.pod(&key);
        let new = w.fits_new(p, None, false);
        match unschedulable.get(key.as_str()) {
            Some(reason) => {
                prop_assert!(
                    !w.fits_existing(p, &after),
                    "{} ({}) left pending but an existing node has room: {:?}",
                    key,
                    reason,
                    plan
                );
                prop_assert!(
                    !new,
                    "{} ({}) left pending but a new node could hold it",
                    key,
                    reason
                );
            }
            None => prop_assert!(
                new || w.fits_existing(p, &before),
                "{} placed though nothing holds it: {:?}",
                key,
                plan
            ),
        }
    }
    Ok(())
}

fn config() -> ProptestConfig {
    // PROPTEST_CASES runs a deeper search on demand; the default keeps `cargo test` quick.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn conservation(s in spec(true)) {
        let case = build(&s);
        check_conservation(&case, &run(&case))?;
    }

    #[test]
    fn capacity(s in spec(true)) {
        let case = build(&s);
        check_capacity(&case, &run(&case))?;
    }

    #[test]
    fn requirements_and_taints(s in spec(true)) {
        let case = build(&s);
        check_requirements(&case, &run(&case))?;
    }

    #[test]
    fn limits(s in spec(true)) {
        let case = build(&s);
        check_limits(&case, &run(&case))?;
    }

    #[test]
    fn brute_force_completeness(s in spec(false)) {
        let case = build(&s);
        check_completeness(&case, &run(&case))?;
    }

    #[test]
    fn determinism(s in spec(true)) {
        let case = build(&s);
        let first = run(&case);
        let again = simulate(&case.snapshot.clone(), &case.catalog.clone(), &Options::default());
        prop_assert_eq!(first, again);
    }
}
