//! joiner-apis: the `joiner.sh/v1alpha1` custom resources.
//!
//! The types here are what people write and what the controller stores: [`Provisioner`],
//! [`NodeTemplate`] and [`NodeClaim`]. They stay close to Karpenter's v1alpha5 Provisioner and
//! v1alpha1 AWSNodeTemplate so existing manifests carry over field for field. Everything the
//! simulation needs leaves this crate through a validated conversion into `joiner-core` types,
//! so a bad manifest is rejected once, here, with an error that names the object and the field.

#[cfg(test)]
mod cel_library;
pub mod cluster;
pub mod condition;
pub mod convert;
pub mod crds;
pub mod disruption;
pub mod drift;
pub mod duration;
pub mod error;
pub mod karpenter;
pub mod label_rules;
pub mod lookup;
pub mod node_claim;
pub mod node_template;
pub mod object;
pub mod provisioner;
pub mod resolution;
pub mod selector;
pub mod spec_rules;
pub mod syntax;
pub mod tag_rules;
pub mod taint;
mod validation;

pub use disruption::{Budget, BudgetNodes, Disruption};
pub use error::ApiError;
pub use lookup::{ObjectLookup, StaticObjects};
pub use node_claim::{
    NodeClaim, NodeClaimResources, NodeClaimSpec, NodeClaimStatus, NodeTemplateRef,
    WarmMemberStatus,
};
pub use node_template::{
    AmiFamily, BlockDevice, BlockDeviceMapping, MetadataOptions, NodeTemplate, NodeTemplateSpec,
    NodeTemplateStatus, ResolvedAmi, ResolvedSecurityGroup, ResolvedSubnet,
};
pub use object::ObjectRef;
pub use provisioner::{
    Consolidation, KubeletConfiguration, Limits, ProviderRef, Provisioner, ProvisionerSpec,
    ProvisionerStatus, WarmPool, WarmPoolStatus,
};
pub use resolution::{NodeTemplateResolver, ResolveError, ResolveFailure, Resolved};
pub use selector::NodeSelectorRequirement;
pub use taint::Taint;
pub use validation::map_field;

/// API group of every joiner resource.
pub const GROUP: &str = "joiner.sh";
/// API version of this crate's resources.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as it appears in manifests.
pub const API_VERSION: &str = "joiner.sh/v1alpha1";
