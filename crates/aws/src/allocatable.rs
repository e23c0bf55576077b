//! The allocatable model of the EKS-optimized AMIs (AL2, AL2023) as a pure function.
//!
//! The scheduling simulation must know what kubelet will report as allocatable *before* a node
//! exists, or it buys nodes that cannot hold the pods it planned for them. This module
//! reproduces the overhead the EKS AMI bootstrap configures (and that Karpenter models), checked
//! row by row against Karpenter's published table in `data/` (see `tests/golden_allocatable.rs`).
//!
//! Rounding rules (all verified against the 1,363 golden rows):
//! - capacity memory (MiB) = `M − 64` on arm64 (or `M` on amd64), then minus
//!   `ceil((M − 64) × overhead)`: the VM overhead is computed from the memory *after* the arm64
//!   reservation, in whole MiB, rounded up;
//! - kube-reserved cpu is computed per tier in integer millicores, each tier rounded down
//!   (the same integer arithmetic as the AMI's bootstrap script);
//! - the ephemeral-storage eviction threshold (10 % of capacity) is rounded up to a whole byte,
//!   so allocatable is never overstated.

use joiner_core::Resources;

/// Root EBS volume size Karpenter and joiner give a node when the template sets none.
pub const DEFAULT_ROOT_VOLUME_GIB: u64 = 20;
/// Share of the instance memory the hypervisor and kernel keep (Karpenter's
/// `--vm-memory-overhead-percent`); the real figure varies by type, 7.5 % covers most.
pub const DEFAULT_VM_MEMORY_OVERHEAD: f64 = 0.075;
/// Memory Graviton kernels reserve for the contiguous memory allocator.
pub const ARM64_RESERVED_MIB: i64 = 64;
/// kube-reserved memory per pod slot (the simulation's kubelet model holds the figure).
pub const KUBE_RESERVED_MIB_PER_POD: i64 = joiner_core::kubelet::KUBE_RESERVED_MEMORY_PER_POD >> 20;
/// kube-reserved memory independent of the pod count.
pub const KUBE_RESERVED_BASE_MIB: i64 = 255;
/// kube-reserved ephemeral storage.
pub const KUBE_RESERVED_EPHEMERAL_GIB: i64 = 1;
/// Hard eviction threshold `memory.available` (the kubelet's default).
pub const EVICTION_MEMORY_MIB: i64 = joiner_core::kubelet::DEFAULT_EVICTION_MEMORY >> 20;
/// Hard eviction threshold `nodefs.available`, in percent of the root volume (the kubelet's
/// default).
pub const EVICTION_NODEFS_PERCENT: i64 = joiner_core::kubelet::DEFAULT_EVICTION_NODEFS_PERCENT;

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// kube-reserved cpu tiers: (upper bound in millicores, basis points of the tier reserved).
/// 6 % of the first core, 1 % of the second, 0.5 % of cores 3–4, 0.25 % of the rest.
const CPU_TIERS: &[(i64, i64)] = &[(1000, 600), (2000, 100), (4000, 50), (i64::MAX, 25)];

/// CPU architecture of an instance type, as the `kubernetes.io/arch` label spells it. The
/// model needs it because arm64 kernels reserve extra memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// x86_64.
    Amd64,
    /// Graviton.
    Arm64,
}

impl Arch {
    /// The `kubernetes.io/arch` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// Parses the label value or the EC2 spelling (`x86_64`, `arm64`), because the embedded
    /// catalog uses the former and DescribeInstanceTypes the latter.
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "amd64" | "x86_64" => Some(Arch::Amd64),
            "arm64" | "aarch64" => Some(Arch::Arm64),
            _ => None,
        }
    }
}

/// The facts about an instance type (and its launch settings) that decide its allocatable.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeShape {
    /// Default vCPUs.
    pub vcpus: u32,
    /// Memory in MiB as EC2 reports it (`MemoryInfo.SizeInMiB`).
    pub memory_mib: u64,
    /// CPU architecture.
    pub arch: Arch,
    /// Max pods: the ENI-limited value on AL2/AL2023, see [`eni_limited_max_pods`].
    pub max_pods: u32,
    /// Root volume size in GiB (ephemeral-storage capacity).
    pub root_volume_gib: u64,
    /// VM memory overhead as a fraction of memory; clamped to `0.0..=1.0`, NaN counts as 0.
    pub vm_memory_overhead: f64,
}

impl NodeShape {
    /// A shape with the default root volume and VM overhead, the settings the golden data uses.
    pub fn new(vcpus: u32, memory_mib: u64, arch: Arch, max_pods: u32) -> Self {
        NodeShape {
            vcpus,
            memory_mib,
            arch,
            max_pods,
            root_volume_gib: DEFAULT_ROOT_VOLUME_GIB,
            vm_memory_overhead: DEFAULT_VM_MEMORY_OVERHEAD,
        }
    }
}

/// What a node of a given shape offers, and why it is less than the hardware: kept apart so
/// `joiner plan` can explain where the memory went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeResources {
    /// What kubelet reports as capacity (memory after VM overhead, root volume, max pods).
    pub capacity: Resources,
    /// kube-reserved (cpu, memory, ephemeral storage).
    pub kube_reserved: Resources,
    /// Hard eviction thresholds (memory, ephemeral storage).
    pub eviction_threshold: Resources,
    /// capacity − kube-reserved − eviction threshold, never below zero.
    pub allocatable: Resources,
}

/// Computes capacity and allocatable of the EKS AMI for one node shape. Pure and cheap, so the
/// embedded and the live catalog can call it for every type on every refresh.
pub fn node_resources(shape: &NodeShape) -> NodeResources {
    let cpu = i64::from(shape.vcpus).saturating_mul(1000);
    let memory = capacity_memory_mib(shape).saturating_mul(MIB);
    let ephemeral = i64::try_from(shape.root_volume_gib)
        .unwrap_or(i64::MAX)
        .saturating_mul(GIB);
    let pods = i64::from(shape.max_pods);
    let capacity = Resources::new(cpu, memory, ephemeral, pods);

    let kube_reserved = Resources::new(
        kube_reserved_cpu_millis(cpu),
        KUBE_RESERVED_MIB_PER_POD
            .saturating_mul(pods)
            .saturating_add(KUBE_RESERVED_BASE_MIB)
            .saturating_mul(MIB),
        KUBE_RESERVED_EPHEMERAL_GIB * GIB,
        0,
    );
    let eviction_threshold = Resources::new(
        0,
        EVICTION_MEMORY_MIB * MIB,
        percent_rounded_up(ephemeral, EVICTION_NODEFS_PERCENT),
        0,
    );

    let mut allocatable = capacity.clone();
    allocatable.sub(&kube_reserved);
    allocatable.sub(&eviction_threshold);
    allocatable.cpu = allocatable.cpu.max(0);
    allocatable.memory = allocatable.memory.max(0);
    allocatable.ephemeral_storage = allocatable.ephemeral_storage.max(0);

    NodeResources {
        capacity,
        kube_reserved,
        eviction_threshold,
        allocatable,
    }
}

/// Memory capacity in MiB after the arm64 reservation and the VM overhead. The overhead is
/// taken from the memory left after the arm64 reservation and rounded up to a whole MiB.
fn capacity_memory_mib(shape: &NodeShape) -> i64 {
    let mut mib = i64::try_from(shape.memory_mib).unwrap_or(i64::MAX);
    if shape.arch == Arch::Arm64 {
        mib = mib.saturating_sub(ARM64_RESERVED_MIB);
    }
    let mib = mib.max(0);
    let fraction = if shape.vm_memory_overhead.is_nan() {
        0.0
    } else {
        shape.vm_memory_overhead.clamp(0.0, 1.0)
    };
    // Float on purpose: it is what the overhead percentage is configured as, and for every
    // memory size EC2 sells the product is far from the next integer. `as` saturates.
    let overhead = (mib as f64 * fraction).ceil() as i64;
    mib.saturating_sub(overhead).max(0)
}

/// kube-reserved cpu in millicores for a node with `cpu_millis` of capacity: each tier's share
/// rounded down, as the EKS AMI computes it.
pub fn kube_reserved_cpu_millis(cpu_millis: i64) -> i64 {
    let mut reserved = 0i64;
    let mut start = 0i64;
    for &(end, basis_points) in CPU_TIERS {
        if cpu_millis <= start {
            break;
        }
        let width = cpu_millis.min(end) - start;
        reserved = reserved.saturating_add(width.saturating_mul(basis_points) / 10_000);
        start = end;
    }
    reserved
}

/// `value × percent / 100`, rounded up, without overflowing for large values.
fn percent_rounded_up(value: i64, percent: i64) -> i64 {
    let whole = (value / 100).saturating_mul(percent);
    let rest = (value % 100) * percent;
    whole.saturating_add(rest / 100 + i64::from(rest % 100 > 0))
}

/// The VPC CNI's default max pods for an instance type: one IPv4 address per ENI is the ENI's
/// own, the rest go to pods, plus 2 for host-network pods (aws-node, kube-proxy). The live
/// catalog computes it from DescribeInstanceTypes so a type missing from eni-max-pods.txt still
/// gets a correct value. Saturates instead of overflowing.
pub fn eni_limited_max_pods(enis: u32, ipv4_per_eni: u32) -> u32 {
    enis.saturating_mul(ipv4_per_eni.saturating_sub(1))
        .saturating_add(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mib(r: &Resources) -> i64 {
        r.memory / MIB
    }

    #[test]
    fn m5_large_matches_karpenter() {
        let n = node_resources(&NodeShape::new(2, 8192, Arch::Amd64, 29));
        assert_eq!(n.capacity.cpu, 2000);
        assert_eq!(mib(&n.capacity), 8192 - 615);
        assert_eq!(n.allocatable.cpu, 1930);
        assert_eq!(mib(&n.allocatable), 6903);
        assert_eq!(n.allocatable.memory % MIB, 0);
        assert_eq!(n.allocatable.ephemeral_storage, 17 * GIB);
        assert_eq!(n.allocatable.pods, 29);
        assert_eq!(n.kube_reserved.cpu, 70);
        assert_eq!(mib(&n.kube_reserved), 11 * 29 + 255);
    }

    #[test]
    fn a1_medium_arm64_reserves_64_mib_before_the_overhead() {
        let n = node_resources(&NodeShape::new(1, 2048, Arch::Arm64, 8));
        // (2048 − 64) = 1984; ceil(1984 × 0.075) = 149; 1984 − 149 = 1835.
        assert_eq!(mib(&n.capacity), 1835);
        assert_eq!(n.allocatable.cpu, 940);
        assert_eq!(mib(&n.allocatable), 1392);
    }

    #[test]
    fn cpu_tiers() {
        assert_eq!(kube_reserved_cpu_millis(0), 0);
        assert_eq!(kube_reserved_cpu_millis(500), 30);
        assert_eq!(kube_reserved_cpu_millis(1000), 60);
        assert_eq!(kube_reserved_cpu_millis(2000), 70);
        assert_eq!(kube_reserved_cpu_millis(4000), 80);
        assert_eq!(kube_reserved_cpu_millis(8000), 90);
        // 1000m above 4000m is 2.5m: rounded down.
        assert_eq!(kube_reserved_cpu_millis(5000), 82);
        assert_eq!(kube_reserved_cpu_millis(96_000), 310);
    }

    #[test]
    fn root_volume_and_overhead_are_inputs() {
        let mut s = NodeShape::new(2, 8192, Arch::Amd64, 29);
        s.root_volume_gib = 100;
        s.vm_memory_overhead = 0.0;
        let n = node_resources(&s);
        assert_eq!(n.capacity.ephemeral_storage, 100 * GIB);
        assert_eq!(n.allocatable.ephemeral_storage, 89 * GIB);
        assert_eq!(mib(&n.capacity), 8192);
        s.vm_memory_overhead = f64::NAN;
        assert_eq!(mib(&node_resources(&s).capacity), 8192);
        s.vm_memory_overhead = 7.0;
        assert_eq!(node_resources(&s).capacity.memory, 0);
    }

    #[test]
    fn tiny_and_huge_shapes_do_not_go_negative_or_overflow() {
        let n = node_resources(&NodeShape::new(0, 0, Arch::Arm64, 0));
        assert!(n.allocatable.is_non_negative());
        let mut s = NodeShape::new(u32::MAX, u64::MAX, Arch::Amd64, u32::MAX);
        s.root_volume_gib = u64::MAX;
        let n = node_resources(&s);
        assert!(n.allocatable.is_non_negative());
        assert_eq!(percent_rounded_up(1001, 10), 101);
        assert_eq!(percent_rounded_up(i64::MAX, 10), i64::MAX / 10 + 1);
    }

    #[test]
    fn eni_formula() {
        assert_eq!(eni_limited_max_pods(3, 10), 29); // m5.large
        assert_eq!(eni_limited_max_pods(2, 4), 8); // a1.medium
        assert_eq!(eni_limited_max_pods(15, 50), 737); // m5.24xlarge
        assert_eq!(eni_limited_max_pods(0, 0), 2);
        assert_eq!(eni_limited_max_pods(u32::MAX, u32::MAX), u32::MAX);
    }

    #[test]
    fn arch_parsing() {
        assert_eq!(Arch::parse("x86_64"), Some(Arch::Amd64));
        assert_eq!(Arch::parse("arm64").map(Arch::as_str), Some("arm64"));
        assert_eq!(Arch::parse("s390x"), None);
    }
}
