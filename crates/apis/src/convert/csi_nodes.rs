//! CSINodes: how many volumes each CSI driver may attach to a node.
//!
//! A CSI driver reports its per-node cap when it registers on the node, in the CSINode of the
//! same name (`spec.drivers[].allocatable.count`; the EBS driver reports what the instance
//! type allows, less the network interfaces and instance-store disks sharing the slots). The
//! kube-scheduler's NodeVolumeLimits refuses a pod that would take a node over the cap, and
//! Karpenter counts the caps of existing nodes the same way. A node with no CSINode yet (in
//! flight, or its driver not registered) has no cap: neither does a driver that reports none
//! (EFS).

use std::collections::{BTreeMap, HashMap};

use joiner_core::Node;
use k8s_openapi::api::storage::v1::CSINode;

use super::FieldError;

/// The caps a CSINode reports, by driver. A negative count, which the API server refuses,
/// is an error naming the field.
pub fn volume_limits(csi: &CSINode) -> Result<BTreeMap<String, i64>, FieldError> {
    let mut limits = BTreeMap::new();
    for (i, driver) in csi.spec.drivers.iter().enumerate() {
        let Some(count) = driver.allocatable.as_ref().and_then(|a| a.count) else {
            continue;
        };
        if count < 0 {
            return Err(FieldError::new(
                format!("spec.drivers[{i}].allocatable.count"),
                format!("must be at least 0, not {count}"),
            ));
        }
        limits.insert(driver.name.clone(), i64::from(count));
    }
    Ok(limits)
}

/// Gives each node the caps of the CSINode of its name (`limits`, by node name, as
/// [`volume_limits`] read them); nodes without one keep none.
pub fn apply_volume_limits(nodes: &mut [Node], limits: &HashMap<String, BTreeMap<String, i64>>) {
    for node in nodes {
        if let Some(l) = limits.get(&node.name) {
            node.volume_limits = l.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn csi(drivers: serde_json::Value) -> CSINode {
        serde_json::from_value(json!({
            "metadata": {"name": "ip-10-0-1-1.ec2.internal"},
            "spec": {"drivers": drivers}}))
        .expect("parses")
    }

    #[test]
    fn drivers_with_a_count_are_capped_and_others_are_not() {
        let node = csi(json!([
            {"name": "ebs.csi.aws.com", "nodeID": "i-0abc", "allocatable": {"count": 25}},
            {"name": "efs.csi.aws.com", "nodeID": "i-0abc"},
            {"name": "example.com/none", "nodeID": "i-0abc", "allocatable": {}},
        ]));
        let limits = volume_limits(&node).expect("valid");
        assert_eq!(
            limits.into_iter().collect::<Vec<_>>(),
            [("ebs.csi.aws.com".to_string(), 25)]
        );
    }

    #[test]
    fn a_negative_count_names_the_field() {
        let node = csi(json!([
            {"name": "ebs.csi.aws.com", "nodeID": "i-0abc", "allocatable": {"count": 25}},
            {"name": "other.example.com", "nodeID": "i-0abc", "allocatable": {"count": -1}},
        ]));
        let err = volume_limits(&node).expect_err("refused");
        assert_eq!(err.field, "spec.drivers[1].allocatable.count");
    }

    #[test]
    fn nodes_take_the_caps_of_their_own_csi_node() {
        let mut nodes = vec![
            Node {
                name: "a".into(),
                ..Node::default()
            },
            Node {
                name: "b".into(),
                ..Node::default()
            },
        ];
        let limits: HashMap<String, BTreeMap<String, i64>> =
            [("b".to_string(), [("ebs.csi.aws.com".to_string(), 3)].into())].into();
        apply_volume_limits(&mut nodes, &limits);
        assert!(nodes[0].volume_limits.is_empty());
        assert_eq!(nodes[1].volume_limits.get("ebs.csi.aws.com"), Some(&3));
    }
}
