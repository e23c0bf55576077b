//! Launch templates, the pure part: what a template holds and what it is named.
//!
//! One template exists per distinct set of launch settings (AMI, max-pods, kubelet settings,
//! labels, taints, user data, security groups, instance profile, block devices, metadata
//! options, tags). Its name is a hash of all of them ([`LaunchTemplateSpec::name`]), so the SDK
//! side can find-or-create by name, reuse it for every claim with the same settings, and delete
//! templates no claim uses any more: a changed setting gives a new name, never an edited
//! template under an old one.

pub mod ec2;
pub mod instance;
pub mod spec;

pub use ec2::{name_prefix, LaunchTemplateRef, LaunchTemplates};
pub use instance::{max_pods, InstanceFacts};
pub use spec::{
    build, BlockDeviceSpec, LaunchContext, LaunchTemplateError, LaunchTemplateSpec,
    MetadataOptionsSpec, ResolvedLaunchTemplate, NAME_PREFIX,
};
