//! Why a provisioning step failed ([`ProvisioningError`]): one type the module's steps share, apart from
//! the steps so that they import it from below.

use thiserror::Error;

/// Why provisioning (or one claim of it) failed. Each variant names the object at fault.
#[derive(Debug, Error)]
pub enum ProvisioningError {
    /// The cloud gave no instance types for a Provisioner.
    #[error("Provisioner {provisioner}: listing instance types: {message}")]
    Catalog {
        /// The Provisioner.
        provisioner: String,
        /// The cloud's error.
        message: String,
    },
    /// No Provisioner can be planned with: none exists, or none has a catalog.
    #[error("no usable Provisioner for {pending} pending pod(s): {reasons}")]
    NoUsableProvisioner {
        /// Pods waiting.
        pending: usize,
        /// Why each Provisioner was left out.
        reasons: String,
    },
    /// The plan names a Provisioner the store does not hold (deleted meanwhile).
    #[error("Provisioner {provisioner}: not found")]
    UnknownProvisioner {
        /// The Provisioner.
        provisioner: String,
    },
    /// Writing the NodeClaim failed.
    #[error("NodeClaim {claim}: create: {source}")]
    CreateClaim {
        /// The claim's name.
        claim: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Every generated name was taken (409 AlreadyExists each time).
    #[error("NodeClaim {claim}: create: name already exists (tried {attempts} names)")]
    NameTaken {
        /// The last name tried.
        claim: String,
        /// Names tried.
        attempts: usize,
    },
    /// A field of the claim cannot be launched from.
    #[error("NodeClaim {claim}: {field}: {reason}")]
    Invalid {
        /// The claim.
        claim: String,
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A warm-pool member was started for the claim, but its take did not finish: the next
    /// launch of the claim finishes it (never a second instance).
    #[error("NodeClaim {claim}: warm-pool take not finished: {message}")]
    TakeUnfinished {
        /// The claim.
        claim: String,
        /// What failed.
        message: String,
    },
    /// Another task of this replica is launching the claim right now (a batch, an
    /// interruption or a disruption launching what it wrote, or the loop that launches what
    /// was left unlaunched): one launch at a time, never two instances.
    #[error("NodeClaim {claim}: already being launched")]
    AlreadyLaunching {
        /// The claim.
        claim: String,
    },
    /// Asking the cloud for the claim's instance failed.
    #[error("NodeClaim {claim}: looking up its instance: {message}")]
    Cloud {
        /// The claim.
        claim: String,
        /// The cloud's error.
        message: String,
    },
    /// Writing the claim's status failed.
    #[error("NodeClaim {claim}: status update: {source}")]
    PatchStatus {
        /// The claim.
        claim: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// Deleting a claim that cannot be launched failed.
    #[error("NodeClaim {claim}: delete: {source}")]
    DeleteClaim {
        /// The claim.
        claim: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The claim was deleted (404 on the status write) while its instance launched; the
    /// instance was terminated.
    #[error("NodeClaim {claim}: deleted while instance {instance_id} was launched; the instance was terminated")]
    ClaimGone {
        /// The claim.
        claim: String,
        /// Its instance.
        instance_id: String,
    },
}
