//! A small hand-made catalog (m5, c5, r5, x1e and g4dn families in zones z-a, z-b, z-c, spot at
//! 40 % of on-demand) for tests of the simulation: shared by the core's own tests and by other
//! crates' (the benchmark workloads are checked on it).

use std::collections::BTreeMap;

use crate::instance_type::{CapacityType, InstanceType, Offering};
use crate::labels;
use crate::resources::{Resources, NVIDIA_GPU};

const GI: i64 = 1 << 30;

/// Instance family, as the AWS catalog spells it (test data: the core knows no cloud's keys).
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// vCPUs.
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// GPU name.
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// The provider keys of the test catalog's types.
pub const PROVIDER_KEYS: &[&str] = &[INSTANCE_FAMILY, INSTANCE_CPU, INSTANCE_GPU_NAME];

/// A family with linear prices: `per_cpu` $/h per vCPU, `gib_per_cpu` memory ratio.
pub fn family(
    fam: &str,
    per_cpu: f64,
    gib_per_cpu: i64,
    sizes: &[(&str, i64, i64)],
) -> Vec<InstanceType> {
    sizes
        .iter()
        .map(|(size, cpus, pods)| {
            let mut l = BTreeMap::new();
            l.insert(labels::ARCH.to_string(), "amd64".to_string());
            l.insert(labels::OS.to_string(), "linux".to_string());
            l.insert(INSTANCE_FAMILY.to_string(), fam.to_string());
            l.insert(labels::INSTANCE_TYPE.to_string(), format!("{fam}.{size}"));
            l.insert(INSTANCE_CPU.to_string(), cpus.to_string());
            let cap = Resources::new(cpus * 1000, cpus * gib_per_cpu * GI, 20 * GI, *pods);
            let mut alloc = cap.clone();
            alloc.cpu -= 70;
            alloc.memory -= GI / 2;
            alloc.ephemeral_storage = 17 * GI;
            let price = per_cpu * *cpus as f64;
            let offerings = ["z-a", "z-b", "z-c"]
                .iter()
                .flat_map(|z| {
                    [
                        Offering {
                            zone: z.to_string(),
                            capacity_type: CapacityType::OnDemand,
                            price,
                            price_estimated: false,
                            available: true,
                        },
                        Offering {
                            zone: z.to_string(),
                            capacity_type: CapacityType::Spot,
                            price: price * 0.4,
                            price_estimated: false,
                            available: true,
                        },
                    ]
                })
                .collect();
            InstanceType {
                name: format!("{fam}.{size}"),
                labels: l,
                capacity: cap,
                allocatable: alloc,
                offerings,
                provider_keys: PROVIDER_KEYS,
            }
        })
        .collect()
}

/// The catalog: every family above.
pub fn catalog() -> Vec<InstanceType> {
    let sizes = [
        ("large", 2, 29),
        ("xlarge", 4, 58),
        ("2xlarge", 8, 58),
        ("4xlarge", 16, 234),
        ("12xlarge", 48, 234),
        ("24xlarge", 96, 737),
    ];
    let mut c = family("m5", 0.048, 4, &sizes);
    c.extend(family("c5", 0.0425, 2, &sizes));
    c.extend(family("r5", 0.063, 8, &sizes));
    c.extend(family("x1e", 0.834, 122, &[("32xlarge", 128, 234)]));
    let mut gpu = family(
        "g4dn",
        0.263,
        4,
        &[("xlarge", 4, 29), ("12xlarge", 48, 234)],
    );
    for (t, n) in gpu.iter_mut().zip([1, 4]) {
        t.capacity.set(NVIDIA_GPU, n);
        t.allocatable.set(NVIDIA_GPU, n);
        t.labels
            .insert(INSTANCE_GPU_NAME.to_string(), "t4".to_string());
    }
    c.extend(gpu);
    c
}
