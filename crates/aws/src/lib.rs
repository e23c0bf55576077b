//! joiner-aws: the AWS side of joiner.
//!
//! The EKS AMI allocatable model ([`allocatable`]) and the catalog embedded at build time
//! ([`embedded`]) work offline: they serve `joiner plan` and stand in when the EC2 and Pricing
//! APIs cannot be reached. Everything that calls AWS goes through the SDK clients of
//! [`clients`], configured by the standard chain: [`discovery`] (subnets, security groups),
//! [`ami`] (SSM parameter paths and their resolution, amiSelector), [`launch_template`]
//! (settings, stable names, find-or-create in EC2), [`userdata`] (per AMI family), [`fleet`]
//! (CreateFleet, with capacity errors recorded in [`unavailable`]), [`instances`] (look-ups,
//! guarded terminate), [`warm_pool`] (guarded start and stop of warm-pool members), [`warm_commands`] (SSM commands to Bottlerocket members: image pulls, settings) and [`catalog`] (the live catalog); [`provider`] assembles them into the
//! controller's `CloudProvider`.

pub mod allocatable;
pub mod ami;
pub mod api_error;
pub mod cache;
pub mod catalog;
pub mod clients;
pub mod clock;
pub mod discovery;
pub mod embedded;
pub mod error;
pub mod fleet;
pub mod hibernation;
pub mod housekeeping;
pub mod instances;
pub mod interruption;
pub mod labels;
pub mod launch_template;
pub mod provider;
pub mod resolve;
pub mod tags;
#[cfg(feature = "testing")]
pub mod testing;
pub mod unavailable;
pub mod userdata;
pub mod warm_commands;
pub mod warm_pool;

pub use catalog::{CatalogOptions, LiveCatalog};
pub use clients::AwsClients;
pub use error::{AwsError, CatalogError};
pub use joiner_apis::ResolveFailure;
pub use provider::aws_provider_id;
pub use provider::{AwsCloudProvider, ProviderConfig, ProviderError};
pub use resolve::ResolvedNodeTemplate;
