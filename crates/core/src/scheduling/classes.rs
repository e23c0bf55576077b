//! Pod equivalence classes: pods the scheduler cannot tell apart are placed as counts.
//!
//! A Deployment of 500 replicas is one class, so packing cost grows with the number of distinct
//! pod shapes, not with the number of pods.

use std::collections::BTreeMap;
use std::collections::HashMap;

use crate::pod::{HostPort, Pod, PodAffinityTerm, TopologySpread};
use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::taints::Toleration;

/// Everything about a pod that scheduling reads.
#[derive(PartialEq, Eq, Hash)]
struct ClassKey<'a> {
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    requests: &'a Resources,
    node_terms: &'a [Requirements],
    own_node_terms: Option<&'a [Requirements]>,
    preferred: &'a [(i32, Requirements)],
    tolerations: &'a [Toleration],
    spread: &'a [TopologySpread],
    affinity: &'a [PodAffinityTerm],
    host_ports: &'a [HostPort],
    priority: i32,
}

impl<'a> ClassKey<'a> {
    fn of(p: &'a Pod) -> Self {
        ClassKey {
            namespace: &p.namespace,
            labels: &p.labels,
            requests: &p.requests,
            node_terms: &p.node_terms,
            own_node_terms: p.own_node_terms.as_deref(),
            preferred: &p.preferred_node_terms,
            tolerations: &p.tolerations,
            spread: &p.topology_spread,
            affinity: &p.affinity,
            host_ports: &p.host_ports,
            priority: p.priority,
        }
    }
}

/// A group of identical pending pods.
#[derive(Clone, Debug)]
pub struct PodClass {
    /// Indices into the snapshot's pods, in input order.
    pub pods: Vec<usize>,
    /// Index of the representative pod.
    pub template: usize,
    /// Effective requests of one pod.
    pub requests: Resources,
    /// Extra node requirements the topology pass pinned this group to (a zone, a capacity
    /// type); empty for an unconstrained class.
    pub pinned: Requirements,
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

/// Groups pending pods into classes, largest requests first (cpu, then memory), ties by the
/// first pod's key, so the outcome is deterministic.
pub fn build(pods: &[Pod], pending: &[usize]) -> Vec<PodClass> {
    let mut index: HashMap<ClassKey<'_>, usize> = HashMap::new();
    let mut classes: Vec<PodClass> = Vec::new();
    for &i in pending {
        let p = &pods[i];
        let key = ClassKey::of(p);
        match index.get(&key) {
            Some(&c) => classes[c].pods.push(i),
            None => {
                index.insert(key, classes.len());
                classes.push(PodClass {
                    pods: vec![i],
                    template: i,
                    requests: p.requests.clone(),
                    pinned: Requirements::new(),
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
}
