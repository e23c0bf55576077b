//! Status conditions shared by the joiner resources.
//!
//! The standard Kubernetes `Condition` is used as is, so `kubectl wait --for=condition=...`
//! and generic tooling understand joiner objects; only the condition types are joiner's.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The object was validated and is in use.
pub const READY: &str = "Ready";
/// A NodeClaim's instance was created by the cloud provider.
pub const LAUNCHED: &str = "Launched";
/// A NodeClaim's node joined the cluster.
pub const REGISTERED: &str = "Registered";
/// A NodeClaim's node is ready, its startup taints are gone and its resources are reported.
pub const INITIALIZED: &str = "Initialized";

/// Finds a condition by type, the lookup every status reader needs.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of that type is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}
