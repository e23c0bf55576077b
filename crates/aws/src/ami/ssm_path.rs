//! SSM parameter paths of the EKS-optimized and Bottlerocket AMIs.
//!
//! AWS publishes the recommended AMI of each family, Kubernetes minor version, architecture
//! and accelerator variant under a public SSM parameter. The prefix is configurable (default
//! `/aws/service`) because some partitions and air-gapped mirrors republish the parameters
//! under their own path.

use joiner_apis::AmiFamily;
use joiner_core::InstanceType;
use thiserror::Error;

use crate::allocatable::Arch;

/// The public prefix AWS publishes the AMI parameters under.
pub const DEFAULT_SSM_PREFIX: &str = "/aws/service";

/// Which accelerator build of an AMI a type needs: GPU and Neuron types boot a different image
/// (drivers, device plugins) from the standard one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AmiVariant {
    /// No accelerator drivers.
    Standard,
    /// NVIDIA drivers.
    Nvidia,
    /// AWS Neuron (Inferentia, Trainium) drivers.
    Neuron,
}

impl AmiVariant {
    /// The variant an instance type needs, from its GPU manufacturer label and Neuron
    /// resources; the same facts DescribeInstanceTypes gives the live catalog.
    pub fn of(instance_type: &InstanceType) -> AmiVariant {
        let gpu = instance_type
            .labels
            .get(crate::labels::INSTANCE_GPU_MANUFACTURER);
        if gpu.is_some_and(|m| m == "nvidia") {
            AmiVariant::Nvidia
        } else if instance_type.capacity.get("aws.amazon.com/neuron") > 0 {
            AmiVariant::Neuron
        } else {
            AmiVariant::Standard
        }
    }

    /// The spelling AL2023 parameter paths use.
    pub fn as_str(self) -> &'static str {
        match self {
            AmiVariant::Standard => "standard",
            AmiVariant::Nvidia => "nvidia",
            AmiVariant::Neuron => "neuron",
        }
    }
}

/// Why no SSM parameter names an AMI for a request.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SsmPathError {
    /// `Custom` has no default AMIs; the NodeTemplate must select them.
    #[error("amiFamily Custom has no default AMI; set spec.amiSelector")]
    CustomFamily,
    /// AWS publishes no image for this combination.
    #[error("amiFamily {family} has no {variant} AMI for {arch}")]
    NoImage {
        /// The family.
        family: &'static str,
        /// The architecture (`amd64`, `arm64`).
        arch: &'static str,
        /// The variant.
        variant: &'static str,
    },
}

/// The SSM parameter holding the recommended AMI ID for `family`, Kubernetes minor version
/// `k8s_version` (e.g. `1.31`), `arch` and `variant`, under `prefix` (see
/// [`DEFAULT_SSM_PREFIX`]; a trailing `/` is ignored).
pub fn ssm_parameter_path(
    prefix: &str,
    family: AmiFamily,
    k8s_version: &str,
    arch: Arch,
    variant: AmiVariant,
) -> Result<String, SsmPathError> {
    let prefix = prefix.trim_end_matches('/');
    let ec2_arch = match arch {
        Arch::Amd64 => "x86_64",
        Arch::Arm64 => "arm64",
    };
    let no_image = || SsmPathError::NoImage {
        family: family.as_str(),
        arch: arch.as_str(),
        variant: variant.as_str(),
    };
    match family {
        AmiFamily::Al2 => {
            // The gpu image serves both NVIDIA and Neuron types, on x86_64 only.
            let suffix = match (arch, variant) {
                (Arch::Amd64, AmiVariant::Standard) => "",
                (Arch::Arm64, AmiVariant::Standard) => "-arm64",
                (Arch::Amd64, AmiVariant::Nvidia | AmiVariant::Neuron) => "-gpu",
                (Arch::Arm64, _) => return Err(no_image()),
            };
            Ok(format!(
                "{prefix}/eks/optimized-ami/{k8s_version}/amazon-linux-2{suffix}/recommended/image_id"
            ))
        }
        AmiFamily::Al2023 => {
            if arch == Arch::Arm64 && variant == AmiVariant::Neuron {
                return Err(no_image());
            }
            Ok(format!(
                "{prefix}/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{ec2_arch}/{}/recommended/image_id",
                variant.as_str()
            ))
        }
        AmiFamily::Bottlerocket => {
            // The standard image carries the Neuron drivers.
            let flavor = if variant == AmiVariant::Nvidia {
                "-nvidia"
            } else {
                ""
            };
            Ok(format!(
                "{prefix}/bottlerocket/aws-k8s-{k8s_version}{flavor}/{ec2_arch}/latest/image_id"
            ))
        }
        AmiFamily::Custom => Err(SsmPathError::CustomFamily),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(family: AmiFamily, arch: Arch, variant: AmiVariant) -> Result<String, SsmPathError> {
        ssm_parameter_path(DEFAULT_SSM_PREFIX, family, "1.31", arch, variant)
    }

    #[test]
    fn al2_paths() {
        assert_eq!(
            path(AmiFamily::Al2, Arch::Amd64, AmiVariant::Standard).unwrap(),
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2/recommended/image_id"
        );
        assert_eq!(
            path(AmiFamily::Al2, Arch::Arm64, AmiVariant::Standard).unwrap(),
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2-arm64/recommended/image_id"
        );
        assert_eq!(
            path(AmiFamily::Al2, Arch::Amd64, AmiVariant::Neuron).unwrap(),
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2-gpu/recommended/image_id"
        );
        assert!(path(AmiFamily::Al2, Arch::Arm64, AmiVariant::Nvidia).is_err());
    }

    #[test]
    fn al2023_paths() {
        assert_eq!(
            path(AmiFamily::Al2023, Arch::Arm64, AmiVariant::Nvidia).unwrap(),
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id"
        );
        assert_eq!(
            path(AmiFamily::Al2023, Arch::Amd64, AmiVariant::Standard).unwrap(),
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert!(path(AmiFamily::Al2023, Arch::Arm64, AmiVariant::Neuron).is_err());
    }

    #[test]
    fn bottlerocket_paths_and_prefix() {
        assert_eq!(
            ssm_parameter_path(
                "/mirror/",
                AmiFamily::Bottlerocket,
                "1.30",
                Arch::Amd64,
                AmiVariant::Nvidia
            )
            .unwrap(),
            "/mirror/bottlerocket/aws-k8s-1.30-nvidia/x86_64/latest/image_id"
        );
        assert_eq!(
            path(AmiFamily::Bottlerocket, Arch::Arm64, AmiVariant::Neuron).unwrap(),
            "/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id"
        );
    }

    #[test]
    fn custom_has_none() {
        assert_eq!(
            path(AmiFamily::Custom, Arch::Amd64, AmiVariant::Standard),
            Err(SsmPathError::CustomFamily)
        );
    }
}
