//! Which pods a spread constraint or an (anti-)affinity term is about.
//!
//! A term names pods by a label selector within some namespaces. The simulation turns each
//! distinct term into one counter per domain (a node, a zone, a capacity type) and asks classes,
//! not pod pairs, whether they match: that keeps constraints linear in the number of pods.

use crate::pod::{Pod, PodAffinityTerm, TopologySpread};
use crate::requirements::Requirements;

/// The pods a term counts: a selector within a set of namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    /// Label selector on pod labels.
    pub selector: Requirements,
    /// Namespaces searched, sorted.
    pub namespaces: Vec<String>,
}

impl Scope {
    /// The scope of a pod's affinity term: its namespaces, or the pod's own when none are named.
    pub fn of_term(owner: &Pod, term: &PodAffinityTerm) -> Scope {
        let mut namespaces = if term.namespaces.is_empty() {
            vec![owner.namespace.clone()]
        } else {
            term.namespaces.clone()
        };
        namespaces.sort();
        namespaces.dedup();
        Scope {
            selector: term.selector.clone(),
            namespaces,
        }
    }

    /// The scope of a spread constraint: always the pod's own namespace.
    pub fn of_spread(owner: &Pod, spread: &TopologySpread) -> Scope {
        Scope {
            selector: spread.selector.clone(),
            namespaces: vec![owner.namespace.clone()],
        }
    }

    /// True when the scope counts this pod.
    pub fn matches(&self, pod: &Pod) -> bool {
        self.namespaces.contains(&pod.namespace) && self.selector.matches_labels(&pod.labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Requirement;

    #[test]
    fn scope_matches_namespace_and_labels() {
        let mut owner = Pod {
            namespace: "web".into(),
            ..Pod::default()
        };
        owner.labels.insert("app".into(), "a".into());
        let mut sel = Requirements::new();
        sel.add("app", Requirement::single("a"));
        let term = PodAffinityTerm {
            topology_key: crate::labels::HOSTNAME.into(),
            selector: sel,
            namespaces: Vec::new(),
            namespace_selector: None,
            anti: true,
            weight: None,
        };
        let s = Scope::of_term(&owner, &term);
        assert!(s.matches(&owner));
        let mut other = owner.clone();
        other.namespace = "db".into();
        assert!(!s.matches(&other), "another namespace is not counted");
        other.namespace = "web".into();
        other.labels.insert("app".into(), "b".into());
        assert!(!s.matches(&other));
    }
}
