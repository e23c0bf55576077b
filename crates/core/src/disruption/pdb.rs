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

    /// True when it covers `pod` and allows no eviction now.
    pub fn blocks(&self, pod: &Pod) -> bool {
        self.disruptions_allowed <= 0 && self.covers(pod)
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
        };
        let mut db = Pod {
            namespace: "data".into(),
            name: "db-0".into(),
            ..Pod::default()
        };
        db.labels.insert("app".into(), "db".into());
        assert!(pdb.blocks(&db));
        let mut elsewhere = db.clone();
        elsewhere.namespace = "web".into();
        assert!(!pdb.blocks(&elsewhere), "another namespace");
        pdb.disruptions_allowed = 1;
        assert!(!pdb.blocks(&db) && pdb.covers(&db));
        pdb.selector = None;
        assert!(!pdb.covers(&db), "a null selector covers nothing");
    }
}
