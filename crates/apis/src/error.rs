//! Errors of the API crate: a manifest that parses but does not make sense.

use joiner_core::{QuantityError, RequirementError};
use thiserror::Error;

use crate::object::ObjectRef;

/// A validation failure. Every variant names the object and the field path inside it
/// (`spec.requirements[2].values`) so the message points at the exact line to fix.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// A node-selector requirement that cannot be built (unknown operator, missing values, ...).
    #[error("{object}: {field}: {reason}")]
    Requirement {
        /// The object.
        object: ObjectRef,
        /// Field path.
        field: String,
        /// What is wrong.
        reason: RequirementError,
    },
    /// A quantity string that cannot be read.
    #[error("{object}: {field}: {reason}")]
    Quantity {
        /// The object.
        object: ObjectRef,
        /// Field path.
        field: String,
        /// What is wrong.
        reason: QuantityError,
    },
    /// Any other invalid value.
    #[error("{object}: {field}: {reason}")]
    Invalid {
        /// The object.
        object: ObjectRef,
        /// Field path.
        field: String,
        /// What is wrong, for people.
        reason: String,
    },
}

impl ApiError {
    /// The object the error is about.
    pub fn object(&self) -> &ObjectRef {
        match self {
            ApiError::Requirement { object, .. }
            | ApiError::Quantity { object, .. }
            | ApiError::Invalid { object, .. } => object,
        }
    }

    /// The field path inside the object.
    pub fn field(&self) -> &str {
        match self {
            ApiError::Requirement { field, .. }
            | ApiError::Quantity { field, .. }
            | ApiError::Invalid { field, .. } => field,
        }
    }

    /// What is wrong, without the object and field, for callers that name those their own way
    /// (the manifest loader adds the file and document).
    pub fn reason(&self) -> String {
        match self {
            ApiError::Requirement { reason, .. } => reason.to_string(),
            ApiError::Quantity { reason, .. } => reason.to_string(),
            ApiError::Invalid { reason, .. } => reason.clone(),
        }
    }
}
