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
}
