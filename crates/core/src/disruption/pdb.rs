//! PodDisruptionBudgets as disruption reads them: a node whose pods a budget allows no
//! eviction of keeps its node (the drain would only stall on them).

use crate::pod::Pod;
use crate::requirements::Requirements;

/// A PodDisruptionBudget: the pods it selects in its namespace and how many may go now.
#[derive(Clone, Debug, PartialEq)]
pub struct Pdb {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The pods it covers; `None` (a null selector) covers none.
    pub selector: Option<Requirements>,
    /// `status.disruptionsAllowed` (0 while the status is not computed yet).
    pub disruptions_allowed: i32,
    /// `spec.unhealthyPodEvictionPolicy: AlwaysAllow`: a covered pod that is not Ready may
    /// be evicted whatever the budget allows.
    pub always_allow_unhealthy: bool,
}

impl Pdb {
    /// True when the budget covers `pod`.
    pub fn covers(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches_labels(&pod.labels))
    }

    /// True when it covers `pod` and allows no eviction of it now (a pod that is not Ready
    /// under `AlwaysAllow` may always go).
    pub fn blocks(&self, pod: &Pod) -> bool {
        self.disruptions_allowed <= 0
            && !(self.always_allow_unhealthy && pod.disruption.not_ready)
            && self.covers(pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Requirement;

    #[test]
    fn a_budget_blocks_the_pods_it_covers_when_it_allows_nothing() {
        let mut sel = Requirements::new();
        sel.add("app", Requirement::single("db"));
        let mut pdb = Pdb {
            namespace: "data".into(),
            name: "db".into(),
            selector: Some(sel),
            disruptions_allowed: 0,
            always_allow_unhealthy: false,
        };
        let mut db = Pod {
            namespace: "data".into(),
            name: "db-0".into(),
            ..Pod::default()
        };
        db.labels.insert("app".into(), "db".into());
        assert!(pdb.blocks(&db));
        // A pod that is not Ready: blocked under the default policy, free under AlwaysAllow.
        let mut sick = db.clone();
        sick.disruption.not_ready = true;
        assert!(pdb.blocks(&sick));
        pdb.always_allow_unhealthy = true;
        assert!(!pdb.blocks(&sick), "AlwaysAllow lets a not-Ready pod go");
        assert!(pdb.blocks(&db), "a Ready pod is still held");
        pdb.always_allow_unhealthy = false;
        let mut elsewhere = db.clone();
        elsewhere.namespace = "web".into();
        assert!(!pdb.blocks(&elsewhere), "another namespace");
        pdb.disruptions_allowed = 1;
        assert!(!pdb.blocks(&db) && pdb.covers(&db));
        pdb.selector = None;
        assert!(!pdb.covers(&db), "a null selector covers nothing");
    }
}
