//! Error types of the core crate.

use thiserror::Error;

use crate::requirements::Operator;

/// A quantity string that cannot be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QuantityError {
    /// Nothing to parse.
    #[error("empty quantity")]
    Empty,
    /// Not a Kubernetes quantity.
    #[error("invalid quantity {0:?} (expected e.g. 500m, 2, 1.5Gi, 100M)")]
    Invalid(String),
    /// Requests cannot be negative.
    #[error("negative quantity {0:?}")]
    Negative(String),
    /// Too large to represent.
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

/// A label requirement that cannot be built.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RequirementError {
    /// Unknown operator spelling.
    #[error("unknown operator {0:?} (expected In, NotIn, Exists, DoesNotExist, Gt or Lt)")]
    UnknownOperator(String),
    /// In / NotIn without values.
    #[error("operator {0:?} needs at least one value")]
    MissingValues(Operator),
    /// Exists / DoesNotExist with values.
    #[error("operator {0:?} takes no values")]
    UnexpectedValues(Operator),
    /// Gt / Lt with other than one value.
    #[error("operator {0:?} needs exactly one value")]
    BoundNeedsOneValue(Operator),
    /// Gt / Lt with a non-integer.
    #[error("operator {0:?} needs an integer value, got {1:?}")]
    BoundNotInteger(Operator, String),
    /// Empty key.
    #[error("requirement key is empty")]
    EmptyKey,
}
