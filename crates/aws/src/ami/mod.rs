//! AMI resolution. [`ssm_path`] is pure: which SSM parameter names the default AMI of a family
//! for an architecture and accelerator variant, so `joiner launch-template render` can show it
//! without AWS access. [`resolver`] reads those parameters (or a NodeTemplate's amiSelector)
//! through SSM and EC2, with caches.

pub mod resolver;
pub mod ssm_path;

pub use resolver::{Ami, AmiError, AmiResolver};
pub use ssm_path::{ssm_parameter_path, AmiVariant, SsmPathError, DEFAULT_SSM_PREFIX};
