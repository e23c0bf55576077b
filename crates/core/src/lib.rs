//! joiner-core: the pure model and scheduling simulation of joiner.
//!
//! Nothing here performs I/O: the CLI and the controller gather state, call into this crate,
//! and carry out what it decides. That keeps every decision testable from plain data.

pub mod cloud_provider;
pub mod disruption;
pub mod error;
pub mod instance_type;
pub mod interruption;
pub mod kubelet;
pub mod labels;
pub mod pod;
pub mod pod_labels;
pub mod provisioner;
pub mod quantity;
pub mod requirements;
pub mod resources;
pub mod scheduling;
pub mod snapshot;
pub mod taints;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use cloud_provider::{
    CloudError, CloudErrorKind, CloudProvider, LaunchRequest, LaunchedNode, PullProgress, WarmState,
};
pub use error::{QuantityError, RequirementError};
pub use instance_type::{CapacityType, InstanceType, Offering};
pub use pod::{
    DaemonSet, HostPort, Node, NodeLife, Owner, Pod, PodAffinityTerm, PodDisruption,
    TopologySpread, VolumeAttachment, VolumeHost, VolumeZone,
};
pub use pod_labels::PodLabels;
pub use provisioner::{Limits, Provisioner, NODES_LIMIT};
pub use requirements::{Operator, Requirement, Requirements};
pub use resources::Resources;
pub use snapshot::Snapshot;
pub use taints::{Effect, Taint, Toleration};
