//! Why a interruption step failed ([`InterruptionError`]): one type the module's steps share, apart from
//! the steps so that they import it from below.

use thiserror::Error;

use crate::launcher::ProvisioningError;
use crate::reconcile::LifecycleError;

/// Why handling a message failed (it stays in the queue and comes back).
#[derive(Debug, Error)]
pub enum InterruptionError {
    /// Writing a replacement claim failed.
    #[error(transparent)]
    Provisioning(#[from] ProvisioningError),
    /// Deleting an interrupted claim failed.
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    /// The replacement of a batch's nodes failed; every message of the batch that named one
    /// of them is kept.
    #[error("replacing NodeClaims {claims}: {reason}")]
    Replacement {
        /// The interrupted claims of the batch.
        claims: String,
        /// The failure.
        reason: String,
    },
}
