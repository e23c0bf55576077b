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

/// Which of many scopes may count a pod, found from the pod's own labels: a scope whose
/// selector requires a label to carry one of some values is listed under each of them, the
/// others are tried for every pod. Counting a cluster's pods per scope then costs a lookup per
/// pod label, not a selector match per pod and scope (hundreds of workloads' anti-affinity
/// terms over tens of thousands of pods, in every simulation of a disruption plan).
pub(crate) struct ScopeIndex<'a> {
    scopes: Vec<&'a Scope>,
    by_label: foldhash::HashMap<(&'a str, &'a str), Vec<usize>>,
    always: Vec<usize>,
}

impl<'a> ScopeIndex<'a> {
    /// Indexes `scopes` by their position in the iteration.
    pub(crate) fn new(scopes: impl Iterator<Item = &'a Scope>) -> Self {
        let mut index = ScopeIndex {
            scopes: scopes.collect(),
            by_label: foldhash::HashMap::default(),
            always: Vec::new(),
        };
        for (i, scope) in index.scopes.iter().enumerate() {
            // A pod the selector matches carries this key with one of these values.
            let required = scope.selector.iter().find_map(|(k, r)| {
                let values = r.in_values()?;
                (!r.allows_absent()).then_some((k, values))
            });
            match required {
                Some((k, values)) => {
                    for v in values {
                        index.by_label.entry((k, v)).or_default().push(i);
                    }
                }
                None => index.always.push(i),
            }
        }
        index
    }

    /// The scopes (positions) that count `pod`, each once.
    pub(crate) fn matching<'s>(&'s self, pod: &'s Pod) -> impl Iterator<Item = usize> + 's {
        let listed = pod.labels.iter().flat_map(move |(k, v)| {
            self.by_label
                .get(&(k.as_str(), v.as_str()))
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .copied()
        });
        self.always
            .iter()
            .copied()
            .chain(listed)
            .filter(move |&i| self.scopes[i].matches(pod))
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

    #[test]
    fn the_scope_index_finds_exactly_the_scopes_that_count_a_pod() {
        use crate::requirements::Operator;
        let scope = |reqs: &[(&str, Operator, &[&str])], namespaces: &[&str]| {
            let mut selector = Requirements::new();
            for (k, op, values) in reqs {
                selector.add(k, Requirement::new(*op, values).expect("valid"));
            }
            Scope {
                selector,
                namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            }
        };
        let scopes = [
            scope(&[("app", Operator::In, &["a"])], &["web"]),
            scope(&[("app", Operator::In, &["a", "b"])], &["web", "db"]),
            scope(&[("app", Operator::NotIn, &["a"])], &["web"]),
            scope(&[("tier", Operator::Exists, &[])], &["web"]),
            scope(&[("app", Operator::DoesNotExist, &[])], &["web"]),
            scope(
                &[
                    ("tier", Operator::Exists, &[]),
                    ("app", Operator::In, &["b"]),
                ],
                &["web"],
            ),
            scope(&[], &["web"]),
        ];
        let index = ScopeIndex::new(scopes.iter());
        let pods = [
            (&[("app", "a")][..], "web"),
            (&[("app", "a")][..], "db"),
            (&[("app", "b"), ("tier", "x")][..], "web"),
            (&[("tier", "x")][..], "web"),
            (&[][..], "web"),
            (&[("app", "c"), ("other", "a")][..], "web"),
        ];
        for (labels, namespace) in pods {
            let mut pod = Pod {
                namespace: namespace.into(),
                ..Pod::default()
            };
            for (k, v) in labels {
                pod.labels.insert(k.to_string(), v.to_string());
            }
            let mut found: Vec<usize> = index.matching(&pod).collect();
            found.sort_unstable();
            let want: Vec<usize> = (0..scopes.len())
                .filter(|&i| scopes[i].matches(&pod))
                .collect();
            assert_eq!(found, want, "pod {labels:?} in {namespace}");
        }
        // Not a check that cannot fail: the pods above meet most of the scopes.
        let web_a = Pod {
            namespace: "web".into(),
            labels: [("app".to_string(), "a".to_string())].into_iter().collect(),
            ..Pod::default()
        };
        assert_eq!(index.matching(&web_a).count(), 3);
    }
}
