//! What the controller and `joiner plan` both derive from cluster objects, written once so that
//! a plan is the controller's: the capacity NodeClaims hold before their Nodes are usable
//! ([`inflight`]), the room recently launched nodes keep for the pods they were bought for
//! ([`nominations`]), and the warm pools' sizing and the rule a take follows ([`warm_pool`]).
//! Pure functions of the objects; the controller's reflector stores and the CLI's manifest
//! loader are two sources of the same objects.

pub mod inflight;
pub mod nominations;
pub mod warm_pool;
