//! Pod equivalence classes: pods the scheduler cannot tell apart are placed as counts.
//!
//! A Deployment of 500 replicas is one class, so packing cost grows with the number of distinct
//! pod shapes, not with the number of pods.

use std::collections::{HashMap, HashSet};

use crate::pod::{HostPort, Pod, PodAffinityTerm, TopologySpread};
use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::taints::Toleration;

/// Everything about a pod that scheduling reads.
#[derive(PartialEq, Eq, Hash)]
struct ClassKey<'a> {
    namespace: &'a str,
    /// Only the labels some selector reads: others cannot change where a pod may go.
    labels: Vec<(&'a str, &'a str)>,
    requests: &'a Resources,
    node_terms: &'a [Requirements],
    own_node_terms: Option<&'a [Requirements]>,
    preferred: &'a [(i32, Requirements)],
    tolerations: &'a [Toleration],
    spread: &'a [TopologySpread],
    affinity: &'a [PodAffinityTerm],
    host_ports: &'a [HostPort],
    /// Per attached volume, its driver, and its claim only when a running pod holds it
    /// (a node holding it counts it once): other claims differ from pod to pod, and each
    /// counts as one new volume wherever the pod goes.
    attachments: Vec<(&'a str, Option<&'a str>)>,
    priority: i32,
    avoid_soft_taints: bool,
}

impl<'a> ClassKey<'a> {
    fn of(p: &'a Pod, selected: &HashSet<&str>, attached: &HashSet<&str>) -> Self {
        let mut attachments: Vec<(&str, Option<&str>)> = p
            .attachments()
            .iter()
            .map(|a| {
                let claim = attached
                    .contains(a.claim.as_str())
                    .then_some(a.claim.as_str());
                (a.driver.as_str(), claim)
            })
            .collect();
        attachments.sort_unstable();
        ClassKey {
            namespace: &p.namespace,
            labels: p
                .labels
                .iter()
                .filter(|(k, _)| selected.contains(k.as_str()))
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
            requests: &p.requests,
            node_terms: &p.node_terms,
            own_node_terms: p.own_node_terms.as_deref(),
            preferred: &p.preferred_node_terms,
            tolerations: &p.tolerations,
            spread: &p.topology_spread,
            affinity: &p.affinity,
            host_ports: &p.host_ports,
            attachments,
            priority: p.priority,
            avoid_soft_taints: p.avoid_soft_taints,
        }
    }
}

/// A group of identical pending pods.
#[derive(Clone, Debug)]
pub struct PodClass {
    /// Indices into the snapshot's pods, in input order (placement on existing nodes moves
    /// pods a volume attach cap passed over behind those it placed).
    pub pods: Vec<usize>,
    /// Index of the representative pod.
    pub template: usize,
    /// Effective requests of one pod.
    pub requests: Resources,
    /// Extra node requirements the topology pass pinned this group to (a zone, a capacity
    /// type); empty for an unconstrained class.
    pub pinned: Requirements,
    /// The class it was split from by topology pinning (its own index before pinning): the
    /// sub-classes of one origin are one workload spread over domains.
    pub origin: usize,
}

impl PodClass {
    /// The pod the simulation schedules for this class: the template with the pinned
    /// requirements merged into every node term, so existing-node matching and instance-type
    /// filtering both see the pin without knowing about topology.
    pub fn effective_pod(&self, pods: &[Pod]) -> Pod {
        let mut p = pods[self.template].clone();
        if !self.pinned.is_empty() {
            if p.node_terms.is_empty() {
                p.node_terms.push(self.pinned.clone());
            } else {
                for t in &mut p.node_terms {
                    *t = t.intersect(&self.pinned);
                }
            }
        }
        p
    }
}

/// Every label key a topology spread or pod (anti-)affinity selector of any pod reads.
fn selected_label_keys<'p>(pods: &'p [Pod], pending: &[usize]) -> HashSet<&'p str> {
    // Only the pending pods' own label keys are ever asked about (`ClassKey::of`): a
    // disruption trial of a large cluster has a few pending pods and thousands of running
    // ones, so the running pods' selectors are read for those keys alone, and no further
    // once all of them are found.
    let mut wanted: Vec<&str> = pending
        .iter()
        .flat_map(|&i| pods[i].labels.keys().map(String::as_str))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mut keys = HashSet::new();
    if wanted.is_empty() {
        return keys;
    }
    for p in pods {
        let selectors = p
            .topology_spread
            .iter()
            .map(|s| &s.selector)
            .chain(p.affinity.iter().map(|a| &a.selector));
        for (k, _) in selectors.flat_map(|s| s.iter()) {
            if wanted.binary_search(&k.as_str()).is_ok() {
                keys.insert(k.as_str());
            }
        }
        if keys.len() == wanted.len() {
            break;
        }
    }
    keys
}

/// Groups pending pods into classes, largest requests first (cpu, then memory), ties by the
/// first pod's key, so the outcome is deterministic.
///
/// Pods that differ only in labels no selector reads (no spread or (anti-)affinity term of any
/// pod, pending or running, names the key) are one class: a Deployment's `app` label alone
/// does not split a fleet of identical shapes into thousands of classes.
pub fn build(pods: &[Pod], pending: &[usize]) -> Vec<PodClass> {
    let selected = selected_label_keys(pods, pending);
    // The claims running pods attach, of those the pending pods attach (the only ones asked
    // about).
    let claims: HashSet<&str> = pending
        .iter()
        .flat_map(|&i| pods[i].attachments())
        .map(|a| a.claim.as_str())
        .collect();
    let attached: HashSet<&str> = if claims.is_empty() {
        HashSet::new()
    } else {
        pods.iter()
            .filter(|p| p.node_name.is_some())
            .flat_map(|p| p.attachments())
            .map(|a| a.claim.as_str())
            .filter(|c| claims.contains(c))
            .collect()
    };
    let mut index: HashMap<ClassKey<'_>, usize> = HashMap::new();
    let mut classes: Vec<PodClass> = Vec::new();
    for &i in pending {
        let p = &pods[i];
        let key = ClassKey::of(p, &selected, &attached);
        match index.get(&key) {
            Some(&c) => classes[c].pods.push(i),
            None => {
                index.insert(key, classes.len());
                classes.push(PodClass {
                    pods: vec![i],
                    template: i,
                    requests: p.requests.clone(),
                    pinned: Requirements::new(),
                    origin: 0,
                });
            }
        }
    }
    classes.sort_by(|a, b| {
        b.requests
            .cpu
            .cmp(&a.requests.cpu)
            .then(b.requests.memory.cmp(&a.requests.memory))
            .then_with(|| {
                let (pa, pb) = (&pods[a.template], &pods[b.template]);
                (&pa.namespace, &pa.name).cmp(&(&pb.namespace, &pb.name))
            })
    });
    for (i, c) in classes.iter_mut().enumerate() {
        c.origin = i;
    }
    classes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, cpu: i64) -> Pod {
        Pod {
            namespace: "default".into(),
            name: name.into(),
            requests: Resources::new(cpu, 1 << 20, 0, 1),
            ..Pod::default()
        }
    }

    #[test]
    fn identical_pods_share_a_class() {
        let pods = vec![pod("a-0", 100), pod("b-0", 500), pod("a-1", 100)];
        let classes = build(&pods, &[0, 1, 2]);
        assert_eq!(classes.len(), 2);
        assert_eq!(classes[0].pods, vec![1], "largest first");
        assert_eq!(classes[1].pods, vec![0, 2]);
    }

    #[test]
    fn labels_split_classes_only_when_a_selector_reads_them() {
        let labelled = |name: &str, app: &str| {
            let mut p = pod(name, 100);
            p.labels.insert("app".into(), app.into());
            p.labels.insert("release".into(), name.into());
            p
        };
        let mut pods = vec![labelled("a-0", "a"), labelled("b-0", "b")];
        assert_eq!(build(&pods, &[0, 1]).len(), 1, "no selector reads app");
        // A running pod's anti-affinity selecting app=a makes the key matter.
        let mut running = pod("r", 100);
        running.node_name = Some("n".into());
        let mut selector = Requirements::new();
        selector.add("app", crate::requirements::Requirement::single("a"));
        running.affinity.push(PodAffinityTerm {
            topology_key: crate::labels::HOSTNAME.into(),
            selector,
            namespaces: Vec::new(),
            namespace_selector: None,
            anti: true,
            weight: None,
        });
        pods.push(running);
        let classes = build(&pods, &[0, 1]);
        assert_eq!(
            classes.len(),
            2,
            "app is selected now; release still is not"
        );
    }
}
