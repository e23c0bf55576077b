//! AMI resolution, the pure part: which SSM parameter names the default AMI of a family for
//! an architecture and accelerator variant. The SDK side reads the parameter; keeping the path
//! builder here lets `joiner launch-template render` show it without AWS access.

pub mod ssm_path;

pub use ssm_path::{ssm_parameter_path, AmiVariant, SsmPathError, DEFAULT_SSM_PREFIX};
