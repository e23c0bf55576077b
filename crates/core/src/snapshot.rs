//! The state a scheduling pass starts from.

use std::collections::{BTreeMap, BTreeSet};

use crate::pod::{DaemonSet, Node, Pod};
use crate::provisioner::Provisioner;

/// Everything the simulation reads about the cluster: pods (pending ones have no node name,
/// running ones name their node), nodes, DaemonSets and Provisioners.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// All pods, pending and running.
    pub pods: Vec<Pod>,
    /// Existing and in-flight nodes.
    pub nodes: Vec<Node>,
    /// DaemonSets whose pods land on every eligible new node.
    pub daemonsets: Vec<DaemonSet>,
    /// Provisioners; when empty the simulation uses [`Provisioner::default_provisioner`].
    pub provisioners: Vec<Provisioner>,
    /// Labels of the namespaces known (from Namespace objects), for `namespaceSelector`s;
    /// every namespace also carries `kubernetes.io/metadata.name` with its name.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// PodDisruptionBudgets (disruption reads them; scheduling does not).
    pub pdbs: Vec<crate::disruption::Pdb>,
}

/// The label Kubernetes puts on every namespace, holding its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

impl Snapshot {
    /// The same cluster with other pods (a pass over hardened or moved pods): everything but
    /// the pods is copied, the pods are not copied twice.
    pub fn with_pods(&self, pods: Vec<Pod>) -> Snapshot {
        Snapshot {
            pods,
            nodes: self.nodes.clone(),
            daemonsets: self.daemonsets.clone(),
            provisioners: self.provisioners.clone(),
            namespace_labels: self.namespace_labels.clone(),
            pdbs: self.pdbs.clone(),
        }
    }

    /// Turns each pod (anti-)affinity term's `namespaceSelector` into namespace names: the
    /// namespaces of the snapshot's pods (the only ones a term can find pods in) whose labels
    /// it selects, added to the term's `namespaces`. A selector that selects none leaves a
    /// term that finds no pod, as in the kube-scheduler, not one about the pod's own namespace.
    pub fn resolve_namespace_selectors(&mut self) {
        if !self
            .pods
            .iter()
            .any(|p| p.affinity.iter().any(|a| a.namespace_selector.is_some()))
        {
            return;
        }
        let known: BTreeSet<String> = self.pods.iter().map(|p| p.namespace.clone()).collect();
        let labels_of = |ns: &str| {
            let mut l = self.namespace_labels.get(ns).cloned().unwrap_or_default();
            l.insert(NAMESPACE_NAME_LABEL.to_string(), ns.to_string());
            l
        };
        let labels: Vec<(String, BTreeMap<String, String>)> =
            known.iter().map(|ns| (ns.clone(), labels_of(ns))).collect();
        for pod in &mut self.pods {
            for term in &mut pod.affinity {
                let Some(selector) = term.namespace_selector.take() else {
                    continue;
                };
                for (ns, l) in &labels {
                    if selector.matches_labels(l) && !term.namespaces.contains(ns) {
                        term.namespaces.push(ns.clone());
                    }
                }
                if term.namespaces.is_empty() {
                    // No namespace is selected: a name no namespace can have (namespace names
                    // are never empty) keeps the term from meaning "the pod's own namespace".
                    term.namespaces.push(String::new());
                }
                term.namespaces.sort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::PodAffinityTerm;
    use crate::requirements::{Requirement, Requirements};

    fn pod_in(ns: &str, selector: Option<Requirements>) -> Pod {
        Pod {
            namespace: ns.into(),
            name: "p".into(),
            affinity: vec![PodAffinityTerm {
                topology_key: crate::labels::ZONE.into(),
                selector: Requirements::new(),
                namespaces: Vec::new(),
                namespace_selector: selector,
                anti: true,
                weight: None,
            }],
            ..Pod::default()
        }
    }

    #[test]
    fn namespace_selectors_become_the_namespaces_they_select() {
        let mut team = Requirements::new();
        team.add("team", Requirement::single("shop"));
        let mut s = Snapshot {
            pods: vec![
                pod_in("a", Some(team)),
                pod_in("b", Some(Requirements::new())),
                pod_in("c", None),
                pod_in("d", {
                    let mut none = Requirements::new();
                    none.add("team", Requirement::single("nobody"));
                    Some(none)
                }),
            ],
            ..Snapshot::default()
        };
        for ns in ["a", "b"] {
            s.namespace_labels
                .insert(ns.into(), BTreeMap::from([("team".into(), "shop".into())]));
        }
        s.resolve_namespace_selectors();
        let names = |i: usize| s.pods[i].affinity[0].namespaces.clone();
        assert_eq!(names(0), ["a", "b"]);
        assert_eq!(names(1), ["a", "b", "c", "d"], "{{}} is every namespace");
        assert!(names(2).is_empty(), "no selector: the pod's own namespace");
        assert_eq!(names(3), [""], "selects none: finds no pod");
        assert!(s
            .pods
            .iter()
            .all(|p| p.affinity[0].namespace_selector.is_none()));
    }
}
