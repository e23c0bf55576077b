//! Volume attach caps on existing nodes, as the kube-scheduler's NodeVolumeLimits counts them.
//!
//! A node's CSINode caps each CSI driver's attachments ([`Node::volume_limits`]). The volumes
//! on a node are the distinct claims of the pods running there, per capped driver; a pending
//! pod adds those of its claims the node does not hold yet, and may join while the sum stays
//! within the cap. New nodes are not capped (their CSINode does not exist until the driver
//! registers), as Karpenter leaves them.
//!
//! Pods placed by a pass attach their claims too: a pending pod sharing a claim with a pod
//! placed before it on the node adds nothing. Pods of one class differ only in their claims
//! (the class key names a claim only when a running pod holds it), so placement walks the
//! members themselves on a capped node.

use std::collections::HashSet;

use crate::pod::{Node, Pod};

/// The attachments one existing node holds and may still take. Claims are borrowed from the
/// snapshot's pods: a disruption plan builds these for every node in every trial.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeVolumes<'p> {
    /// (driver, cap, attached) per capped driver.
    drivers: Vec<(String, i64, i64)>,
    /// The claims attached, on capped drivers: running pods' and placed pods'.
    claims: HashSet<&'p str>,
}

impl<'p> NodeVolumes<'p> {
    /// The caps of `node` and the distinct claims its running pods attach.
    pub fn of(node: &Node, running: impl IntoIterator<Item = &'p Pod>) -> Self {
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
                if out.claims.insert(a.claim.as_str()) {
                    slot.2 += 1;
                }
            }
        }
        out
    }

    /// True when the caps may limit pods shaped like `pod`: the node caps a driver `pod`
    /// attaches through. Members of one class attach through the same drivers.
    pub fn limits(&self, pod: &Pod) -> bool {
        !self.drivers.is_empty()
            && pod
                .attachments()
                .iter()
                .any(|a| self.drivers.iter().any(|(d, _, _)| *d == a.driver))
    }

    /// Which of `members` (at most `max` of them), in order, fit within the caps, by
    /// position: each adds the claims of capped drivers that neither the node nor the members
    /// taken before it hold. A member that would take a driver over its cap ends the walk,
    /// unless `skip`: then it is passed over, as a later member may only reuse claims taken
    /// before it (the kube-scheduler refuses a pod only for the volumes it adds).
    pub fn fitting<'m>(
        &self,
        members: impl IntoIterator<Item = &'m Pod>,
        max: i64,
        skip: bool,
    ) -> Vec<usize> {
        let max = usize::try_from(max).unwrap_or(0);
        let mut added: HashSet<&str> = HashSet::new();
        let mut extra = vec![0i64; self.drivers.len()];
        let mut out = Vec::new();
        for (at, pod) in members.into_iter().enumerate() {
            if out.len() == max {
                break;
            }
            let mine = self.new_claims(pod, &added);
            let over = mine.iter().any(|&(d, _)| {
                let adds = mine.iter().filter(|(x, _)| *x == d).count() as i64;
                let (_, cap, attached) = &self.drivers[d];
                attached + extra[d] + adds > *cap
            });
            if over {
                if skip {
                    continue;
                }
                break;
            }
            for (d, claim) in mine {
                extra[d] += 1;
                added.insert(claim);
            }
            out.push(at);
        }
        out
    }

    /// Records `members` as placed on the node: their claims of capped drivers are attached.
    pub fn add(&mut self, members: impl IntoIterator<Item = &'p Pod>) {
        if self.drivers.is_empty() {
            return;
        }
        for pod in members {
            for (d, claim) in self.new_claims(pod, &HashSet::new()) {
                self.drivers[d].2 += 1;
                self.claims.insert(claim);
            }
        }
    }

    /// The claims of `pod` on capped drivers (driver index, claim) that the node does not
    /// hold and `also_held` does not name, each once.
    fn new_claims<'m>(&self, pod: &'m Pod, also_held: &HashSet<&str>) -> Vec<(usize, &'m str)> {
        let mut out: Vec<(usize, &str)> = Vec::new();
        for a in pod.attachments() {
            let Some(d) = self.drivers.iter().position(|(drv, _, _)| *drv == a.driver) else {
                continue;
            };
            let claim = a.claim.as_str();
            if self.claims.contains(claim)
                || also_held.contains(claim)
                || out.iter().any(|(_, c)| *c == claim)
            {
                continue;
            }
            out.push((d, claim));
        }
        out
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
        let new: Vec<Pod> = (0..10)
            .map(|i| pod(&[(EBS, &format!("db/new-{i}"))]))
            .collect();
        assert!(v.limits(&new[0]));
        assert_eq!(v.fitting(&new, 10, false).len(), 2);
        assert_eq!(v.fitting(&new, 1, false).len(), 1, "never more than asked");
        // A pod whose claim the node already holds adds nothing.
        let reuses = vec![pod(&[(EBS, "db/shared")]); 10];
        assert_eq!(v.fitting(&reuses, 10, false).len(), 10);
        // Uncapped drivers never limit.
        let files = pod(&[("efs.csi.aws.com", "db/more-files")]);
        assert!(!v.limits(&files));
        v.add(&new[..2]);
        assert_eq!(v.fitting(&new[2..], 10, false).len(), 0);
        // The claims placed are held now: another pod using one still joins.
        assert_eq!(v.fitting(&new[..1], 10, false).len(), 1);
    }

    #[test]
    fn pending_pods_sharing_a_claim_attach_it_once() {
        // One free slot: three pods sharing db/a fit, the fourth (its own claim) does not,
        // and the walk stops there unless told to pass over it.
        let running = [pod(&[(EBS, "db/x")]), pod(&[(EBS, "db/y")])];
        let v = NodeVolumes::of(&node(&[(EBS, 3)]), &running);
        let members = [
            pod(&[(EBS, "db/a")]),
            pod(&[(EBS, "db/a")]),
            pod(&[(EBS, "db/a")]),
            pod(&[(EBS, "db/b")]),
            pod(&[(EBS, "db/a")]),
        ];
        assert_eq!(v.fitting(&members, 5, false), [0, 1, 2]);
        // Passing over the one that does not fit, the fifth joins too.
        assert_eq!(v.fitting(&members, 5, true), [0, 1, 2, 4]);
    }

    #[test]
    fn a_node_without_caps_takes_any_number() {
        let running = [pod(&[(EBS, "db/a")])];
        let v = NodeVolumes::of(&node(&[]), &running);
        assert!(!v.limits(&pod(&[(EBS, "db/b")])));
    }

    #[test]
    fn a_pod_with_two_volumes_takes_two_slots() {
        let v = NodeVolumes::of(&node(&[(EBS, 5)]), &[]);
        let two: Vec<Pod> = (0..10)
            .map(|i| {
                pod(&[
                    (EBS, &format!("db/data-{i}")),
                    (EBS, &format!("db/log-{i}")),
                ])
            })
            .collect();
        assert_eq!(v.fitting(&two, 10, false).len(), 2);
        let zero = NodeVolumes::of(&node(&[(EBS, 0)]), &[]);
        assert_eq!(zero.fitting(&two, 10, false).len(), 0);
        // A pod mounting one claim twice attaches it once.
        let twice = [pod(&[(EBS, "db/c"), (EBS, "db/c")])];
        assert_eq!(
            NodeVolumes::of(&node(&[(EBS, 1)]), &[])
                .fitting(&twice, 1, false)
                .len(),
            1
        );
    }
}
