//! Label keys: the core's well-known ones, and the instance labels of the AWS catalog
//! (Karpenter's `karpenter.k8s.aws/*` keys, so workloads written for Karpenter keep their
//! selectors). Every instance type of the catalog lists [`INSTANCE_LABEL_KEYS`] as its provider
//! keys: a requirement on one of them that a type lacks (a GPU name on a CPU type) excludes the
//! type, while any other key is a custom label.

pub use joiner_core::labels::*;

/// Instance family (m5).
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// Instance category (m).
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// Instance generation (5).
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// Instance size (large).
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// vCPUs.
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// Memory in MiB.
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
/// CPU manufacturer (intel, amd, aws).
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// Hypervisor (nitro, xen, "" for metal).
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
/// Network bandwidth in Mbit/s.
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// EBS bandwidth in Mbit/s.
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
/// Local NVMe in GiB.
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// GPU name (t4, a10g).
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// GPU manufacturer (nvidia, amd).
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// GPU count.
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// GPU memory in MiB.
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";

/// The instance label keys of the AWS catalog.
pub const INSTANCE_LABEL_KEYS: &[&str] = &[
    INSTANCE_FAMILY,
    INSTANCE_CATEGORY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_CPU,
    INSTANCE_MEMORY,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_HYPERVISOR,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_LOCAL_NVME,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
];
