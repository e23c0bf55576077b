//! Errors of the command line, each with the exit code a script can act on.

use thiserror::Error;

use crate::manifest::ManifestError;

/// What can stop a subcommand.
#[derive(Debug, Error)]
pub enum CliError {
    /// The manifests could not be read.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The region has no embedded catalog.
    #[error(transparent)]
    Catalog(#[from] joiner_aws::CatalogError),
    /// AWS could not be set up or read (credentials, region, an API and no fallback).
    #[error(transparent)]
    Aws(#[from] joiner_aws::AwsError),
    /// The AMI could not be looked up.
    #[error(transparent)]
    Ami(Box<joiner_aws::ami::AmiError>),
    /// The async runtime for the AWS calls could not start.
    #[error("cannot start the runtime for AWS calls: {0}")]
    Runtime(std::io::Error),
    /// A flag value that makes no sense.
    #[error("{0}")]
    Usage(String),
}

impl From<joiner_aws::ami::AmiError> for CliError {
    fn from(e: joiner_aws::ami::AmiError) -> Self {
        CliError::Ami(Box::new(e))
    }
}

impl CliError {
    /// 2 for bad input (manifests, flags, regions), as documented in the README.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Manifest(_) | CliError::Catalog(_) | CliError::Usage(_) => 2,
            CliError::Aws(_) | CliError::Ami(_) | CliError::Runtime(_) => 1,
        }
    }
}
