//! Why a disruption step failed ([`DisruptionError`]): one type the module's steps share, apart from
//! the steps so that they import it from below.

use thiserror::Error;

use crate::launcher::ProvisioningError;
use crate::reconcile::LifecycleError;

/// Why a disruption step failed; each names the object at fault.
#[derive(Debug, Error)]
pub enum DisruptionError {
    /// Writing or launching a replacement failed.
    #[error(transparent)]
    Provisioning(#[from] ProvisioningError),
    /// Deleting an old claim failed.
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    /// A node to disrupt has no NodeClaim (it was deleted meanwhile).
    #[error("Node {node:?}: no NodeClaim to delete")]
    NoClaim {
        /// The node.
        node: String,
    },
    /// A replacement names a Provisioner the store no longer holds.
    #[error("Provisioner {provisioner}: not found")]
    UnknownProvisioner {
        /// The Provisioner.
        provisioner: String,
    },
}
