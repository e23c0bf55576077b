//! The facts about an instance type a launch template depends on, and its max-pods.

use crate::labels;
use joiner_apis::KubeletConfiguration;
use joiner_core::InstanceType;

use crate::allocatable::{eni_limited_max_pods, Arch};
use crate::ami::AmiVariant;

/// What a launch template needs to know of its instance type. The SDK side builds it from
/// DescribeInstanceTypes ([`InstanceFacts::from_eni_limits`]); offline callers from the
/// embedded catalog ([`InstanceFacts::from_catalog`]). Either way max-pods comes from ENI
/// data, never from the AMI's `eni-max-pods.txt`, so new types boot with the right density.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceFacts {
    /// Instance type name (`m5.large`).
    pub name: String,
    /// Default vCPUs (for `podsPerCore`).
    pub vcpus: u32,
    /// CPU architecture (picks the AMI).
    pub arch: Arch,
    /// Accelerator variant (picks the AMI).
    pub variant: AmiVariant,
    /// The VPC CNI's ENI-limited max pods.
    pub eni_max_pods: u32,
    /// Memory in MiB, when known: a hibernated member's root volume holds it.
    pub memory_mib: Option<u64>,
}

impl InstanceFacts {
    /// From EC2's network facts: `MaximumNetworkInterfaces` and `Ipv4AddressesPerInterface`.
    pub fn from_eni_limits(
        name: impl Into<String>,
        vcpus: u32,
        arch: Arch,
        variant: AmiVariant,
        enis: u32,
        ipv4_per_eni: u32,
    ) -> InstanceFacts {
        InstanceFacts {
            name: name.into(),
            vcpus,
            arch,
            variant,
            eni_max_pods: eni_limited_max_pods(enis, ipv4_per_eni),
            memory_mib: None,
        }
    }

    /// From a catalog entry: vCPUs and architecture from its labels, max pods from its
    /// allocatable pods (the embedded table's ENI-limited value). `None` when the labels are
    /// missing.
    pub fn from_catalog(it: &InstanceType) -> Option<InstanceFacts> {
        let vcpus = it.labels.get(labels::INSTANCE_CPU)?.parse().ok()?;
        let arch = Arch::parse(it.labels.get(labels::ARCH)?)?;
        let eni_max_pods = u32::try_from(it.allocatable.pods).ok()?;
        Some(InstanceFacts {
            name: it.name.clone(),
            vcpus,
            arch,
            variant: AmiVariant::of(it),
            eni_max_pods,
            memory_mib: it
                .labels
                .get(labels::INSTANCE_MEMORY)
                .and_then(|m| m.parse().ok()),
        })
    }
}

/// The max-pods a node is given: the ENI value, replaced by the Provisioner's `maxPods` when
/// set, then capped by `podsPerCore × vCPUs` when that is set (the kubelet's own rule).
/// Non-positive settings are ignored (validation rejects them), and the result is at least 1.
pub fn max_pods(eni_max_pods: u32, vcpus: u32, kubelet: Option<&KubeletConfiguration>) -> u32 {
    let positive = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0);
    let mut pods = kubelet
        .and_then(|k| positive(k.max_pods))
        .unwrap_or(eni_max_pods);
    if let Some(per_core) = kubelet.and_then(|k| positive(k.pods_per_core)) {
        pods = pods.min(per_core.saturating_mul(vcpus.max(1)));
    }
    pods.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eni_value_unless_overridden() {
        assert_eq!(max_pods(29, 2, None), 29);
        let k = KubeletConfiguration {
            max_pods: Some(110),
            ..Default::default()
        };
        assert_eq!(max_pods(29, 2, Some(&k)), 110);
        let k = KubeletConfiguration {
            pods_per_core: Some(10),
            ..Default::default()
        };
        assert_eq!(max_pods(29, 2, Some(&k)), 20);
        assert_eq!(max_pods(29, 8, Some(&k)), 29);
        let k = KubeletConfiguration {
            max_pods: Some(0),
            ..Default::default()
        };
        assert_eq!(max_pods(29, 2, Some(&k)), 29);
    }

    #[test]
    fn eni_limits_give_the_cni_formula() {
        let f =
            InstanceFacts::from_eni_limits("x9.large", 2, Arch::Amd64, AmiVariant::Standard, 3, 10);
        assert_eq!(f.eni_max_pods, 29);
    }
}
