//! joiner-aws: the AWS side of joiner.
//!
//! The EKS AMI allocatable model ([`allocatable`]) and the catalog embedded at build time
//! ([`embedded`]) work offline: they serve `joiner plan` and stand in when the EC2 and Pricing
//! APIs cannot be reached. Everything that calls AWS goes through the SDK clients of
//! [`clients`], configured by the standard chain; [`catalog`] reads the live catalog with them.

pub mod allocatable;
pub mod api_error;
pub mod catalog;
pub mod clients;
pub mod embedded;
pub mod error;

pub use catalog::{CatalogOptions, LiveCatalog};
pub use clients::AwsClients;
pub use error::{AwsError, CatalogError};
