//! joiner-aws: the AWS side of joiner.
//!
//! The EKS AMI allocatable model ([`allocatable`]) and the catalog embedded at build time
//! ([`embedded`]) work offline: they serve `joiner plan` and stand in when the EC2 and Pricing
//! APIs cannot be reached. Everything that calls AWS goes through the SDK clients of
//! [`clients`], configured by the standard chain.

pub mod allocatable;
pub mod ami;
pub mod api_error;
pub mod clients;
pub mod embedded;
pub mod error;
pub mod launch_template;
pub mod userdata;

pub use clients::AwsClients;
pub use error::{AwsError, CatalogError};
