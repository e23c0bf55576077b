//! Synthetic workloads for benchmarks and quality tests: deterministic, seeded, no I/O.
//!
//! `mixed_fleet` models a cluster of many Deployments of different sizes and cpu:memory
//! ratios (where node-shape choice decides the bill); `karpenter_mix` follows the shape of
//! Karpenter's scheduling benchmark (generic, zonal spread, hostname spread, zonal self-affinity,
//! hostname anti-affinity), so figures can be compared with its published ones.

use joiner_core::labels;
use joiner_core::Resources;
use joiner_core::{Owner, Pod, PodAffinityTerm, TopologySpread};
use joiner_core::{Requirement, Requirements};

/// A small deterministic generator (xorshift64*), so workloads are reproducible everywhere.
pub struct Rng(u64);

impl Rng {
    /// Seeded generator; seed 0 is remapped.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// One element of a non-empty slice.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

fn deployment_pods(name: &str, replicas: usize, cpu: i64, memory: i64) -> Vec<Pod> {
    let mut template = Pod {
        namespace: "default".into(),
        requests: Resources::new(cpu, memory, 0, 1),
        owner: Some(Owner {
            kind: "Deployment".into(),
            name: name.into(),
        }),
        ..Pod::default()
    };
    template.labels.insert("app".into(), name.into());
    (0..replicas)
        .map(|i| {
            let mut p = template.clone();
            p.name = format!("{name}-{i}");
            p
        })
        .collect()
}

/// About `pods` pending pods from Deployments of 1–200 replicas with varied shapes.
pub fn mixed_fleet(seed: u64, pods: usize) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let cpus = [100, 250, 500, 750, 1000, 1500, 2000, 4000];
    let gib_per_cpu_x4 = [2, 4, 8, 16, 32]; // 0.5, 1, 2, 4, 8 GiB per cpu
    let sizes = [1, 2, 3, 5, 8, 10, 20, 30, 50, 100, 200];
    let mut out = Vec::with_capacity(pods);
    let mut d = 0;
    while out.len() < pods {
        let cpu = rng.pick(&cpus);
        let memory = cpu * (1 << 30) / 1000 * rng.pick(&gib_per_cpu_x4) / 4;
        let replicas = rng.pick(&sizes).min(pods - out.len());
        out.extend(deployment_pods(&format!("app{d}"), replicas, cpu, memory));
        d += 1;
    }
    out
}

/// `pods` pending pods in Deployments of `replicas` each, every Deployment with a shape of its
/// own (cpu 100m–4 in 10m steps, 0.5–8 GiB per cpu, plus a MiB per Deployment), so there are
/// as many pod classes as Deployments: the scaling case of a cluster with thousands of
/// workloads.
pub fn many_workloads(seed: u64, pods: usize, replicas: usize) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let gib_per_cpu_x4 = [2, 4, 8, 16, 32];
    let replicas = replicas.max(1);
    let mut out = Vec::with_capacity(pods);
    let mut d: i64 = 0;
    while out.len() < pods {
        let cpu = 100 + 10 * rng.below(391) as i64;
        let memory = cpu * (1 << 30) / 1000 * rng.pick(&gib_per_cpu_x4) / 4 + (d << 20);
        let n = replicas.min(pods - out.len());
        out.extend(deployment_pods(&format!("app{d}"), n, cpu, memory));
        d += 1;
    }
    out
}

/// `pods` pending pods in Karpenter's benchmark mix: a fifth each of generic pods, zonal
/// topology spread (maxSkew 1, DoNotSchedule), hostname spread, zonal self-affinity and hostname
/// anti-affinity (all mutually anti-affine). Requests from the same value sets as Karpenter's.
pub fn karpenter_mix(seed: u64, pods: usize) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let cpus = [100, 250, 500, 1000, 1500];
    let mems_mi = [100, 256, 512, 1024, 2048, 4096];
    let fifth = pods / 5;
    let mut out = Vec::with_capacity(pods);
    let kinds = [
        "generic",
        "zonal-spread",
        "host-spread",
        "zonal-affinity",
        "host-anti",
    ];
    for (k, kind) in kinds.iter().enumerate() {
        let count = if k == 0 { pods - 4 * fifth } else { fifth };
        // Groups of 50 identical pods, like Deployments.
        let mut made = 0;
        let mut g = 0;
        while made < count {
            let n = (count - made).min(50);
            let cpu = rng.pick(&cpus);
            let mem = rng.pick(&mems_mi) << 20;
            let app = format!("{kind}-{g}");
            let mut group = deployment_pods(&app, n, cpu, mem);
            let mut sel = Requirements::new();
            let sel_app = if *kind == "host-anti" {
                "host-anti"
            } else {
                app.as_str()
            };
            sel.add("app", Requirement::single(sel_app));
            for p in &mut group {
                if *kind == "host-anti" {
                    p.labels.insert("app".into(), "host-anti".into());
                }
                match *kind {
                    "zonal-spread" | "host-spread" => p.topology_spread.push(TopologySpread {
                        topology_key: if *kind == "zonal-spread" {
                            labels::ZONE.into()
                        } else {
                            labels::HOSTNAME.into()
                        },
                        max_skew: 1,
                        min_domains: None,
                        hard: true,
                        selector: sel.clone(),
                        honor_node_affinity: true,
                        honor_node_taints: false,
                    }),
                    "zonal-affinity" | "host-anti" => p.affinity.push(PodAffinityTerm {
                        topology_key: if *kind == "zonal-affinity" {
                            labels::ZONE.into()
                        } else {
                            labels::HOSTNAME.into()
                        },
                        selector: sel.clone(),
                        namespaces: Vec::new(),
                        namespace_selector: None,
                        anti: *kind == "host-anti",
                        weight: None,
                    }),
                    _ => {}
                }
            }
            out.extend(group);
            made += n;
            g += 1;
        }
    }
    out
}

/// `pods` pending pods that are all mutually anti-affine on `kubernetes.io/hostname` (one label,
/// one required anti-affinity term), in Deployments of 50 with requests drawn like Karpenter's:
/// every node may hold one of them, which is where pairwise checks would go quadratic.
pub fn mutually_anti_affine(seed: u64, pods: usize) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let cpus = [100, 250, 500, 1000, 1500];
    let mems_mi = [100, 256, 512, 1024, 2048, 4096];
    let mut sel = Requirements::new();
    sel.add("app", Requirement::single("anti"));
    let mut out = Vec::with_capacity(pods);
    let mut g = 0;
    while out.len() < pods {
        let n = (pods - out.len()).min(50);
        let mut group = deployment_pods(
            &format!("anti-{g}"),
            n,
            rng.pick(&cpus),
            rng.pick(&mems_mi) << 20,
        );
        for p in &mut group {
            p.labels.insert("app".into(), "anti".into());
            p.affinity.push(PodAffinityTerm {
                topology_key: labels::HOSTNAME.into(),
                selector: sel.clone(),
                namespaces: Vec::new(),
                namespace_selector: None,
                anti: true,
                weight: None,
            });
        }
        out.extend(group);
        g += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_sized() {
        let a = mixed_fleet(7, 1000);
        let b = mixed_fleet(7, 1000);
        assert_eq!(a.len(), 1000);
        assert_eq!(a, b);
        assert_ne!(a, mixed_fleet(8, 1000));
        let m = karpenter_mix(42, 1003);
        assert_eq!(m.len(), 1003);
        assert_eq!(
            m.iter().filter(|p| !p.topology_spread.is_empty()).count(),
            400
        );
        assert_eq!(
            m.iter()
                .filter(|p| p.affinity.iter().any(|a| a.anti))
                .count(),
            200
        );
        let a = mutually_anti_affine(1, 120);
        assert_eq!(a.len(), 120);
        assert!(a
            .iter()
            .all(|p| p.labels["app"] == "anti" && p.affinity.len() == 1));
    }
}
