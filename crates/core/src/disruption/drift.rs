//! Drift a node shows against its Provisioner: a label its requirements no longer allow, a
//! Provisioner label it lacks or holds with another value, a Provisioner taint it lacks.
//!
//! What the node cannot show (kubelet settings, the NodeTemplate's AMI, subnets, security
//! groups, user data, tags, metadata options, block devices) is compared with the hashes its
//! NodeClaim recorded at launch, by whoever knows them (the controller and its cloud); the
//! planner takes that answer as an input and adds this one.

use crate::pod::Node;
use crate::provisioner::Provisioner;

/// Why `node` no longer matches `provisioner`, or `None` when it still does. A node whose
/// NodeClaim recorded its labels ([`crate::NodeLife::recorded_labels`]) is judged by
/// [`requirement_drift`] on those alone: its Provisioner's labels and taints are in the
/// claim's hash, which the caller compares, and the live Node's may have been edited by hand
/// or by an agent (a replacement would not undo that, and would loop).
pub fn visible_drift(node: &Node, provisioner: &Provisioner) -> Option<String> {
    if let Some(recorded) = &node.life.recorded_labels {
        return requirement_drift(recorded, provisioner);
    }
    if let Some(why) = requirement_drift(&node.labels, provisioner) {
        return Some(why);
    }
    for (key, want) in &provisioner.labels {
        match node.labels.get(key) {
            Some(v) if v == want => {}
            Some(v) => {
                return Some(format!(
                    "its label {key}={v} is {want} on Provisioner {}",
                    provisioner.name
                ))
            }
            None => {
                return Some(format!(
                    "it lacks label {key}={want} of Provisioner {}",
                    provisioner.name
                ))
            }
        }
    }
    provisioner
        .taints
        .iter()
        .find(|t| !node.taints.contains(t))
        .map(|t| format!("it lacks taint {t} of Provisioner {}", provisioner.name))
}

/// Why `labels` no longer satisfy `provisioner`'s requirements (a label a narrowed
/// requirement no longer allows; widening never drifts), or `None`.
pub fn requirement_drift(
    labels: &std::collections::BTreeMap<String, String>,
    provisioner: &Provisioner,
) -> Option<String> {
    for (key, req) in provisioner.requirements.iter() {
        if let Some(v) = labels.get(key) {
            if !req.allows(v) {
                return Some(format!(
                    "its label {key}={v} is no longer allowed by Provisioner {}",
                    provisioner.name
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::labels;
    use crate::requirements::Requirement;
    use crate::taints::{Effect, Taint};

    fn node() -> Node {
        Node {
            name: "n".into(),
            labels: BTreeMap::from([
                (labels::INSTANCE_TYPE.to_string(), "m5.large".to_string()),
                ("team".to_string(), "shop".to_string()),
            ]),
            ..Node::default()
        }
    }

    #[test]
    fn a_node_drifts_when_its_provisioner_changes_what_the_node_shows() {
        let mut p = Provisioner::default_provisioner();
        assert_eq!(visible_drift(&node(), &p), None);

        p.requirements
            .add(labels::INSTANCE_TYPE, Requirement::one_of(["c5.large"]));
        assert_eq!(
            visible_drift(&node(), &p).as_deref(),
            Some("its label node.kubernetes.io/instance-type=m5.large is no longer allowed by Provisioner default")
        );

        let mut p = Provisioner::default_provisioner();
        p.labels.insert("team".into(), "search".into());
        assert_eq!(
            visible_drift(&node(), &p).as_deref(),
            Some("its label team=shop is search on Provisioner default")
        );
        p.labels.insert("team".into(), "shop".into());
        p.labels.insert("tier".into(), "gold".into());
        assert_eq!(
            visible_drift(&node(), &p).as_deref(),
            Some("it lacks label tier=gold of Provisioner default")
        );

        let mut p = Provisioner::default_provisioner();
        p.taints.push(Taint {
            key: "gpu".into(),
            value: "true".into(),
            effect: Effect::NoSchedule,
        });
        assert_eq!(
            visible_drift(&node(), &p).as_deref(),
            Some("it lacks taint gpu=true:NoSchedule of Provisioner default")
        );
        let mut tainted = node();
        tainted.taints = p.taints.clone();
        assert_eq!(visible_drift(&tainted, &p), None);
    }

    #[test]
    fn a_node_with_recorded_labels_drifts_on_those_alone() {
        // The taint stripped and a label edited by hand on the live node: the claim's record
        // says what was launched, and that still matches.
        let mut p = Provisioner::default_provisioner();
        p.taints.push(Taint {
            key: "gpu".into(),
            value: "true".into(),
            effect: Effect::NoSchedule,
        });
        let mut n = node();
        n.labels
            .insert(labels::INSTANCE_TYPE.into(), "c5.large".into());
        n.life.recorded_labels = Some(Box::new(BTreeMap::from([(
            labels::INSTANCE_TYPE.to_string(),
            "m5.large".to_string(),
        )])));
        p.requirements
            .add(labels::INSTANCE_TYPE, Requirement::one_of(["m5.large"]));
        assert_eq!(visible_drift(&n, &p), None, "hand edits are not drift");
        // A requirement narrowed past what was launched is.
        let mut narrowed = Provisioner::default_provisioner();
        narrowed
            .requirements
            .add(labels::INSTANCE_TYPE, Requirement::one_of(["c5.large"]));
        assert_eq!(
            visible_drift(&n, &narrowed).as_deref(),
            Some("its label node.kubernetes.io/instance-type=m5.large is no longer allowed by Provisioner default")
        );
    }
}
