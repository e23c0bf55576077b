//! Errors of the AWS catalog.

use thiserror::Error;

/// Why a catalog could not be produced. Messages name what is available, so the person who
/// typed the region can fix it without reading the source.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatalogError {
    /// The embedded catalog has no zone offerings for this region.
    #[error("no embedded catalog for region `{region}`; embedded regions are: {available}")]
    UnknownRegion {
        /// The region asked for.
        region: String,
        /// The embedded regions, comma-separated.
        available: String,
    },
    /// The live catalog could not read instance types or offerings from AWS, and the region
    /// has no embedded catalog to stand in for them.
    #[error(
        "cannot read {what} for region `{region}` ({error}), and it has no embedded catalog \
         to fall back to; embedded regions are: {available}"
    )]
    NoFallback {
        /// The region asked for.
        region: String,
        /// The catalog source that failed (`instance_types`, `offerings`).
        what: &'static str,
        /// Why AWS could not be read.
        error: String,
        /// The embedded regions, comma-separated.
        available: String,
    },
}

/// Why a call to AWS did not give joiner what it needed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AwsError {
    /// Neither a flag nor the environment names a region.
    #[error("no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, a profile) or pass --region")]
    NoRegion,
    /// AWS (or the endpoint standing in for it) answered with an error, or did not answer.
    #[error("{operation} failed: {code}: {message}")]
    Api {
        /// The service and operation, e.g. `ec2:CreateFleet`.
        operation: &'static str,
        /// The AWS error code (`InsufficientInstanceCapacity`, `RequestLimitExceeded`, ...).
        code: String,
        /// The message AWS gave.
        message: String,
    },
}
