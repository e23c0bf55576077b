//! joiner-aws: the AWS side of joiner.
//!
//! For now this holds what works offline: the EKS AMI allocatable model ([`allocatable`]) and
//! the catalog embedded at build time ([`embedded`]), which serves `joiner plan` and stands in
//! when the EC2 and Pricing APIs cannot be reached.

pub mod allocatable;
pub mod embedded;
pub mod error;

pub use error::CatalogError;
pub mod ami;
pub mod launch_template;
pub mod userdata;
