//! The kubelet and disk settings of a Provisioner's nodes that change what those nodes can hold.
//!
//! The catalog gives each instance type its capacity and the allocatable of a node launched with
//! the defaults (the ENI max-pods, the AMI's kube-reserved, the kubelet's default eviction
//! thresholds, a 20 GiB volume for pods' ephemeral storage). A Provisioner's
//! `kubeletConfiguration` and its NodeTemplate's volume change that: a node planned with the
//! defaults would be planned fuller than kubelet will let it be. [`KubeletSettings::allocatable`]
//! recomputes the allocatable the way the kubelet and Karpenter do:
//!
//! allocatable = capacity − kube-reserved − system-reserved − eviction threshold
//!
//! where each part the Provisioner does not set keeps the catalog's value. The catalog's own
//! kube-reserved is what its allocatable leaves after the kubelet's default thresholds
//! (`memory.available` 100 MiB, `nodefs.available` 10 %); its memory part grows with the pod
//! slots (11 MiB each on the EKS-optimized and Bottlerocket AMIs, as Karpenter models it), so a
//! `maxPods` above the ENI value costs memory.

use crate::instance_type::InstanceType;
use crate::resources::Resources;

/// The kubelet's default hard threshold `memory.available`.
pub const DEFAULT_EVICTION_MEMORY: i64 = 100 << 20;
/// The kubelet's default hard threshold `nodefs.available`, in percent.
pub const DEFAULT_EVICTION_NODEFS_PERCENT: i64 = 10;
/// kube-reserved memory per pod slot on the EKS-optimized AMIs and Bottlerocket.
pub const KUBE_RESERVED_MEMORY_PER_POD: i64 = 11 << 20;

/// An eviction threshold: an amount, or a share of the capacity it watches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    /// Bytes.
    Bytes(i64),
    /// Percent of the capacity (0–100).
    Percent(f64),
}

impl Threshold {
    /// The threshold in bytes for a capacity, rounded up so allocatable is never overstated.
    pub fn bytes(self, capacity: i64) -> i64 {
        match self {
            Threshold::Bytes(b) => b,
            Threshold::Percent(p) => (capacity as f64 * p / 100.0).ceil() as i64,
        }
    }
}

/// Reservations the Provisioner sets for one of `kubeReserved` / `systemReserved`; `None`
/// leaves the resource at its default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reserved {
    /// Millicores.
    pub cpu: Option<i64>,
    /// Bytes.
    pub memory: Option<i64>,
    /// Bytes.
    pub ephemeral_storage: Option<i64>,
}

/// What a Provisioner's `kubeletConfiguration` and NodeTemplate change in its nodes' allocatable.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletSettings {
    /// `maxPods`: replaces the catalog's (ENI) pod count.
    pub max_pods: Option<i64>,
    /// `podsPerCore`: caps the pod count at this many per vCPU.
    pub pods_per_core: Option<i64>,
    /// `kubeReserved`: replaces the AMI's reservation for each resource set.
    pub kube_reserved: Reserved,
    /// `systemReserved`: taken on top (nothing by default).
    pub system_reserved: Reserved,
    /// `memory.available` thresholds, hard and soft: the largest applies; none keeps the
    /// kubelet's default.
    pub eviction_memory: Vec<Threshold>,
    /// `nodefs.available` thresholds, hard and soft, likewise.
    pub eviction_nodefs: Vec<Threshold>,
    /// Size of the volume pods' ephemeral storage lives on (the NodeTemplate's root volume,
    /// Bottlerocket's data volume), bytes.
    pub ephemeral_volume: Option<i64>,
}

impl KubeletSettings {
    /// True when nothing is set: the catalog's allocatable stands.
    pub fn is_default(&self) -> bool {
        *self == KubeletSettings::default()
    }

    /// The pod slots of a node of type `t`.
    pub fn pods(&self, t: &InstanceType) -> i64 {
        let mut pods = self.max_pods.unwrap_or(t.allocatable.pods).max(0);
        if let Some(per_core) = self.pods_per_core.filter(|n| *n > 0) {
            let cores = (t.capacity.cpu / 1000).max(1);
            pods = pods.min(per_core.saturating_mul(cores));
        }
        pods
    }

    /// The allocatable of a node of type `t` launched with these settings.
    pub fn allocatable(&self, t: &InstanceType) -> Resources {
        let mut a = t.allocatable.clone();
        if self.is_default() {
            return a;
        }
        let cap = &t.capacity;
        let catalog_nodefs = Threshold::Percent(DEFAULT_EVICTION_NODEFS_PERCENT as f64);
        // The catalog's kube-reserved, what its allocatable leaves after the default thresholds.
        let pods = self.pods(t);
        let catalog_cpu = cap.cpu - t.allocatable.cpu;
        let catalog_memory = cap.memory - t.allocatable.memory - DEFAULT_EVICTION_MEMORY
            + KUBE_RESERVED_MEMORY_PER_POD.saturating_mul(pods - t.allocatable.pods);
        let catalog_ephemeral = cap.ephemeral_storage
            - t.allocatable.ephemeral_storage
            - catalog_nodefs.bytes(cap.ephemeral_storage);

        let kube = &self.kube_reserved;
        let system = &self.system_reserved;
        let volume = self.ephemeral_volume.unwrap_or(cap.ephemeral_storage);
        a.pods = pods;
        // Saturating: reservations as large as a quantity can be must not wrap around.
        let less =
            |from: i64, parts: [i64; 3]| parts.iter().fold(from, |a, p| a.saturating_sub(*p));
        a.cpu = less(
            cap.cpu,
            [kube.cpu.unwrap_or(catalog_cpu), system.cpu.unwrap_or(0), 0],
        );
        a.memory = less(
            cap.memory,
            [
                kube.memory.unwrap_or(catalog_memory),
                system.memory.unwrap_or(0),
                largest(&self.eviction_memory, cap.memory).unwrap_or(DEFAULT_EVICTION_MEMORY),
            ],
        );
        a.ephemeral_storage = less(
            volume,
            [
                kube.ephemeral_storage.unwrap_or(catalog_ephemeral),
                system.ephemeral_storage.unwrap_or(0),
                largest(&self.eviction_nodefs, volume).unwrap_or(catalog_nodefs.bytes(volume)),
            ],
        );
        a.cpu = a.cpu.max(0);
        a.memory = a.memory.max(0);
        a.ephemeral_storage = a.ephemeral_storage.max(0);
        a
    }

    /// The capacity of a node of type `t`: the catalog's, with the ephemeral volume's size
    /// and the pod slots these settings give.
    pub fn capacity(&self, t: &InstanceType) -> Resources {
        let mut c = t.capacity.clone();
        if let Some(v) = self.ephemeral_volume {
            c.ephemeral_storage = v;
        }
        if self.max_pods.is_some() || self.pods_per_core.is_some() {
            c.pods = self.pods(t);
        }
        c
    }
}

/// The largest of `thresholds` in bytes for `capacity`; `None` when there are none.
fn largest(thresholds: &[Threshold], capacity: i64) -> Option<i64> {
    thresholds.iter().map(|t| t.bytes(capacity)).max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::catalog::family;

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    /// m5.xlarge of the test catalog: 4 vCPU, 16 GiB, 20 GiB disk, 58 pods; allocatable keeps
    /// 70m cpu, 512 MiB memory and 17 GiB disk (so its kube-reserved disk is 1 GiB).
    fn m5_xlarge() -> InstanceType {
        family("m5", 0.048, 4, &[("xlarge", 4, 58)]).remove(0)
    }

    #[test]
    fn defaults_keep_the_catalog() {
        let t = m5_xlarge();
        assert_eq!(KubeletSettings::default().allocatable(&t), t.allocatable);
    }

    #[test]
    fn a_bigger_root_volume_gives_pods_its_share() {
        // 100 GiB − 1 GiB kube-reserved − 10 % (10 GiB) eviction = 89 GiB, as on an EKS node.
        let t = m5_xlarge();
        let s = KubeletSettings {
            ephemeral_volume: Some(100 * GI),
            ..KubeletSettings::default()
        };
        let a = s.allocatable(&t);
        assert_eq!(a.ephemeral_storage, 89 * GI);
        assert_eq!((a.cpu, a.memory, a.pods), (3930, 16 * GI - 512 * MI, 58));
        assert_eq!(s.capacity(&t).ephemeral_storage, 100 * GI);
    }

    #[test]
    fn reservations_and_thresholds_replace_the_defaults() {
        let t = m5_xlarge();
        let s = KubeletSettings {
            kube_reserved: Reserved {
                cpu: Some(200),
                memory: Some(GI),
                ephemeral_storage: None,
            },
            system_reserved: Reserved {
                cpu: Some(100),
                memory: Some(256 * MI),
                ephemeral_storage: Some(GI),
            },
            eviction_memory: vec![Threshold::Bytes(500 * MI), Threshold::Bytes(200 * MI)],
            eviction_nodefs: vec![Threshold::Percent(15.0)],
            ..KubeletSettings::default()
        };
        let a = s.allocatable(&t);
        assert_eq!(a.cpu, 4000 - 200 - 100);
        assert_eq!(a.memory, 16 * GI - GI - 256 * MI - 500 * MI);
        // 20 GiB − 1 GiB (catalog kube-reserved) − 1 GiB system − 3 GiB (15 %).
        assert_eq!(a.ephemeral_storage, 15 * GI);
    }

    #[test]
    fn reservations_beyond_the_node_leave_nothing_rather_than_wrap() {
        let t = m5_xlarge();
        let huge = Reserved {
            cpu: Some(i64::MAX),
            memory: Some(i64::MAX),
            ephemeral_storage: Some(i64::MAX),
        };
        let s = KubeletSettings {
            kube_reserved: huge.clone(),
            system_reserved: huge,
            eviction_memory: vec![Threshold::Bytes(i64::MAX)],
            ..KubeletSettings::default()
        };
        let a = s.allocatable(&t);
        assert_eq!((a.cpu, a.memory, a.ephemeral_storage), (0, 0, 0));
    }

    #[test]
    fn more_pod_slots_cost_kube_reserved_memory_and_pods_per_core_caps_them() {
        let t = m5_xlarge();
        let more = KubeletSettings {
            max_pods: Some(110),
            ..KubeletSettings::default()
        };
        let a = more.allocatable(&t);
        assert_eq!(a.pods, 110);
        assert_eq!(a.memory, t.allocatable.memory - (110 - 58) * 11 * MI);
        let per_core = KubeletSettings {
            pods_per_core: Some(10),
            ..KubeletSettings::default()
        };
        let a = per_core.allocatable(&t);
        assert_eq!(a.pods, 40);
        assert_eq!(a.memory, t.allocatable.memory + 18 * 11 * MI);
    }
}
