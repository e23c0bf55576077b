//! AMI resolution: SSM public parameters (the EKS-optimized defaults) or a NodeTemplate's
//! amiSelector. The family → parameter-path table lives elsewhere (it is pure); this module
//! only talks to SSM and EC2.

pub mod resolver;

pub use resolver::{Ami, AmiResolver, DEFAULT_SSM_PREFIX};
