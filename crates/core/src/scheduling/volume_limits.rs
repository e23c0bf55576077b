//! Volume attach caps on existing nodes, as the kube-scheduler's NodeVolumeLimits counts them.
//!
//! A node's CSINode caps each CSI driver's attachments ([`Node::volume_limits`]). The volumes
//! on a node are the distinct claims of the pods running there, per capped driver; a pending
//! pod adds those of its claims the node does not hold yet, and may join while the sum stays
//! within the cap. New nodes are not capped (their CSINode does not exist until the driver
//! registers), as Karpenter leaves them.
//!
//! Pods placed by a pass add their claims as new volumes without naming them: two pending
//! pods sharing a claim count it twice, which can only leave a node emptier than the
//! scheduler would.

use std::collections::HashSet;

use crate::pod::{Node, Pod};

/// The attachments one existing node holds and may still take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeVolumes {
    /// (driver, cap, attached) per capped driver.
    drivers: Vec<(String, i64, i64)>,
    /// The claims running pods attached, on capped drivers.
    claims: HashSet<String>,
}

impl NodeVolumes {
    /// The caps of `node` and the distinct claims its running pods attach.
    pub fn of<'p>(node: &Node, running: impl IntoIterator<Item = &'p Pod>) -> Self {
        if node.volume_limits.is_empty() {
            return NodeVolumes::default();
        }
        let mut out = NodeVolumes {
            drivers: node
                .volume_limits
                .iter()
                .map(|(d, cap)| (d.clone(), *cap, 0))
                .collect(),
            claims: HashSet::new(),
        };
        for pod in running {
            for a in pod.attachments() {
                let Some(slot) = out.drivers.iter_mut().find(|(d, _, _)| *d == a.driver) else {
                    continue;
                };
                if out.claims.insert(a.claim.clone()) {
                    slot.2 += 1;
                }
            }
        }
        out
    }

    /// How many of `want` copies of `pod` the caps admit.
    pub fn copies_allowed(&self, pod: &Pod, want: i64) -> i64 {
        if self.drivers.is_empty() || pod.attachments().is_empty() {
            return want;
        }
        self.drivers
            .iter()
            .map(|(driver, cap, attached)| {
                let each = self.new_volumes(pod, driver);
                if each == 0 {
                    want
                } else {
                    ((cap - attached) / each).clamp(0, want)
                }
            })
            .min()
            .unwrap_or(want)
    }

    /// Counts `k` copies of `pod` as attached.
    pub fn add(&mut self, pod: &Pod, k: i64) {
        if self.drivers.is_empty() || pod.attachments().is_empty() {
            return;
        }
        let news: Vec<i64> = self
            .drivers
            .iter()
            .map(|(driver, _, _)| self.new_volumes(pod, driver))
            .collect();
        for (slot, each) in self.drivers.iter_mut().zip(news) {
            slot.2 += each * k;
        }
    }

    /// The driver whose cap keeps `pod` off the node, with its volumes attached and its cap,
    /// when one does.
    pub fn full_driver(&self, pod: &Pod) -> Option<(&str, i64, i64)> {
        self.drivers
            .iter()
            .find(|(driver, cap, attached)| {
                let each = self.new_volumes(pod, driver);
                each > 0 && attached + each > *cap
            })
            .map(|(d, cap, attached)| (d.as_str(), *attached, *cap))
    }

    /// The volumes of `driver` one copy of `pod` adds: its distinct claims the node does not
    /// hold.
    fn new_volumes(&self, pod: &Pod, driver: &str) -> i64 {
        let mut seen: Vec<&str> = Vec::new();
        for a in pod.attachments() {
            if a.driver == driver && !self.claims.contains(&a.claim) && !seen.contains(&&*a.claim) {
                seen.push(&a.claim);
            }
        }
        seen.len() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::VolumeAttachment;

    const EBS: &str = "ebs.csi.aws.com";

    fn pod(claims: &[(&str, &str)]) -> Pod {
        Pod {
            volume_attachments: Some(Box::new(
                claims
                    .iter()
                    .map(|(driver, claim)| VolumeAttachment {
                        driver: driver.to_string(),
                        claim: claim.to_string(),
                    })
                    .collect(),
            )),
            ..Pod::default()
        }
    }

    fn node(caps: &[(&str, i64)]) -> Node {
        Node {
            name: "n".into(),
            volume_limits: caps.iter().map(|(d, c)| (d.to_string(), *c)).collect(),
            ..Node::default()
        }
    }

    #[test]
    fn distinct_claims_count_once_against_their_drivers_cap() {
        // Two running pods share db/shared: three EBS volumes attached of a cap of 5.
        let running = [
            pod(&[(EBS, "db/a"), (EBS, "db/shared")]),
            pod(&[(EBS, "db/shared"), (EBS, "db/b")]),
            pod(&[("efs.csi.aws.com", "db/files")]),
        ];
        let mut v = NodeVolumes::of(&node(&[(EBS, 5)]), &running);
        let one = pod(&[(EBS, "db/new")]);
        assert_eq!(v.copies_allowed(&one, 10), 2);
        // A pod whose claim the node already holds adds nothing.
        let reuses = pod(&[(EBS, "db/shared")]);
        assert_eq!(v.copies_allowed(&reuses, 10), 10);
        // Uncapped drivers never limit.
        let files = pod(&[("efs.csi.aws.com", "db/more-files")]);
        assert_eq!(v.copies_allowed(&files, 10), 10);
        v.add(&one, 2);
        assert_eq!(v.copies_allowed(&one, 10), 0);
        assert_eq!(v.full_driver(&one), Some((EBS, 5, 5)));
        assert_eq!(v.full_driver(&reuses), None);
    }

    #[test]
    fn a_node_without_caps_takes_any_number() {
        let v = NodeVolumes::of(&node(&[]), &[pod(&[(EBS, "db/a")])]);
        assert_eq!(v.copies_allowed(&pod(&[(EBS, "db/b")]), 40), 40);
        assert_eq!(v.full_driver(&pod(&[(EBS, "db/b")])), None);
    }

    #[test]
    fn a_pod_with_two_volumes_takes_two_slots() {
        let v = NodeVolumes::of(&node(&[(EBS, 5)]), &[]);
        let two = pod(&[(EBS, "db/data"), (EBS, "db/log")]);
        assert_eq!(v.copies_allowed(&two, 10), 2);
        let zero = NodeVolumes::of(&node(&[(EBS, 0)]), &[]);
        assert_eq!(zero.copies_allowed(&two, 10), 0);
    }
}
