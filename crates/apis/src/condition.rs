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

/// `current` with the condition of `new.type_` replaced by `new` (other types kept, in order,
/// the new one last). `lastTransitionTime` is carried over from the condition it replaces when
/// the status does not change, so it keeps saying since when the condition has held; a flip
/// keeps `new`'s time. Every writer of conditions goes through this one rule.
pub fn set(current: &[Condition], mut new: Condition) -> Vec<Condition> {
    if let Some(old) = find(current, &new.type_) {
        if old.status == new.status {
            new.last_transition_time = old.last_transition_time.clone();
        }
    }
    let mut out: Vec<Condition> = current
        .iter()
        .filter(|c| c.type_ != new.type_)
        .cloned()
        .collect();
    out.push(new);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cond(type_: &str, status: &str, at: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: Time(at.parse().expect("timestamp")),
            observed_generation: None,
        }
    }

    #[test]
    fn the_transition_time_is_kept_unless_the_status_flips() {
        let current = vec![
            cond(READY, "True", "2026-01-01T00:00:00Z"),
            cond(LAUNCHED, "True", "2026-01-01T00:00:00Z"),
        ];
        let same = set(&current, cond(READY, "True", "2026-02-02T00:00:00Z"));
        assert_eq!(same.len(), 2);
        assert_eq!(same[0].type_, LAUNCHED);
        assert_eq!(
            same[1].last_transition_time,
            current[0].last_transition_time
        );
        let flipped = set(&current, cond(READY, "False", "2026-02-02T00:00:00Z"));
        assert_eq!(
            flipped[1].last_transition_time.0.to_string(),
            "2026-02-02T00:00:00Z"
        );
        let added = set(&[], cond(REGISTERED, "True", "2026-03-03T00:00:00Z"));
        assert_eq!(added.len(), 1);
    }
}
