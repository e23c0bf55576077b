//! Which Node is a NodeClaim's: the one whose `spec.providerID` is the claim's
//! `status.providerID` (what the cloud reported at launch), or, only while the claim or the
//! Node has no provider ID, the one the claim's `status.nodeName` names (written by
//! registration after such a match). Never a label: a
//! kubelet may set its own labels (`--node-labels`), so a label cannot prove which instance a
//! Node runs on. Every reconciler of the controller, and `joiner plan`, match with these
//! functions.

use std::collections::HashMap;
use std::sync::Arc;

use crate::NodeClaim;
use k8s_openapi::api::core::v1::Node;

/// The Node's `spec.providerID`, when set.
pub fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

/// The claim's `status.providerID`, when set. A warm-pool member has none here: it never owns
/// a Node (a member handed to a claim shares its instance, and so its provider ID, with that
/// claim until the member is removed; the Node is the claim's).
pub fn claim_provider_id(claim: &NodeClaim) -> Option<&str> {
    if claim.warm_pool().is_some() {
        return None;
    }
    claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

/// The node name `claim`'s status records (registration writes it), when set.
fn claim_node_name(claim: &NodeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// True when `node` is `claim`'s node: by provider ID whenever both have one (a Node named
/// like the claim's old node but on another instance is not its node), by the name the claim
/// recorded only when one side has no provider ID yet.
pub fn is_claims_node(claim: &NodeClaim, node: &Node) -> bool {
    match (claim_provider_id(claim), node_provider_id(node)) {
        (Some(claim_id), Some(node_id)) => claim_id == node_id,
        _ => claim_node_name(claim).is_some_and(|n| node.metadata.name.as_deref() == Some(n)),
    }
}

/// The Node of `claim`, if it has registered.
pub fn node_of<'a>(claim: &NodeClaim, nodes: &'a [Arc<Node>]) -> Option<&'a Arc<Node>> {
    nodes.iter().find(|n| is_claims_node(claim, n))
}

/// The NodeClaim of `node`, by the same rule as [`node_of`].
pub fn claim_of<'a>(node: &Node, claims: &'a [Arc<NodeClaim>]) -> Option<&'a Arc<NodeClaim>> {
    claims.iter().find(|c| is_claims_node(c, node))
}

/// Nodes by provider ID and by name, for passes that look up the node of every claim: the same
/// rule as [`node_of`] at one hash lookup per claim instead of a scan of every node.
pub struct NodeIndex<'a> {
    by_id: HashMap<&'a str, &'a Arc<Node>>,
    by_name: HashMap<&'a str, &'a Arc<Node>>,
}

impl<'a> NodeIndex<'a> {
    /// Indexes `nodes`.
    pub fn new(nodes: &'a [Arc<Node>]) -> Self {
        let mut by_id = HashMap::with_capacity(nodes.len());
        let mut by_name = HashMap::with_capacity(nodes.len());
        for n in nodes {
            if let Some(id) = node_provider_id(n) {
                by_id.insert(id, n);
            }
            if let Some(name) = n.metadata.name.as_deref() {
                by_name.insert(name, n);
            }
        }
        NodeIndex { by_id, by_name }
    }

    /// The Node of `claim`, by the rule of [`is_claims_node`].
    pub fn node_of(&self, claim: &NodeClaim) -> Option<&'a Arc<Node>> {
        let claim_id = claim_provider_id(claim);
        if let Some(found) = claim_id.and_then(|id| self.by_id.get(id)) {
            return Some(found);
        }
        claim_node_name(claim)
            .and_then(|n| self.by_name.get(n))
            .filter(|n| claim_id.is_none() || node_provider_id(n).is_none())
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Arc<Node> {
        Arc::new(serde_json::from_value(v).expect("node"))
    }

    fn claim(name: &str, status: serde_json::Value) -> Arc<NodeClaim> {
        Arc::new(
            serde_json::from_value(
                json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
                "metadata": {"name": name}, "spec": {"provisionerName": "web"},
                "status": status}),
            )
            .expect("claim"),
        )
    }

    #[test]
    fn nodes_and_claims_match_by_provider_id_or_the_registered_name_never_by_label() {
        let nodes = vec![
            node(json!({"metadata": {"name": "a"}, "spec": {"providerID": "aws:///z/i-1"}})),
            // A kubelet could label itself after any claim: that proves nothing.
            node(
                json!({"metadata": {"name": "b", "labels": {"joiner.sh/nodeclaim": "web-2"}},
                "spec": {"providerID": "aws:///z/i-9"}}),
            ),
            node(json!({"metadata": {"name": "c"}, "spec": {}})),
        ];
        let c1 = claim("web-1", json!({"providerID": "aws:///z/i-1"}));
        let c2 = claim("web-2", json!({"providerID": "aws:///z/i-2"}));
        let c3 = claim("web-3", json!({"nodeName": "c"}));
        let c4 = claim("web-4", json!({}));
        // The name recorded, but the Node of that name runs on another instance now (a
        // replacement took the name): not this claim's node.
        let c5 = claim(
            "web-5",
            json!({"providerID": "aws:///z/i-5", "nodeName": "a"}),
        );
        // No provider ID on the claim yet: the recorded name decides.
        let c6 = claim("web-6", json!({"nodeName": "a"}));
        let name = |n: Option<&Arc<Node>>| n.and_then(|n| n.metadata.name.clone());
        assert_eq!(name(node_of(&c1, &nodes)), Some("a".into()));
        assert_eq!(name(node_of(&c2, &nodes)), None);
        assert_eq!(name(node_of(&c3, &nodes)), Some("c".into()));
        assert_eq!(name(node_of(&c4, &nodes)), None);
        assert_eq!(name(node_of(&c5, &nodes)), None);
        assert_eq!(name(node_of(&c6, &nodes)), Some("a".into()));
        let index = NodeIndex::new(&nodes);
        for c in [&c1, &c2, &c3, &c4, &c5, &c6] {
            assert_eq!(
                name(index.node_of(c)),
                name(node_of(c, &nodes)),
                "{}",
                c.name()
            );
        }
        let claims = vec![c1, c2, c3, c4];
        assert_eq!(
            claim_of(&nodes[0], &claims).map(|c| c.name()),
            Some("web-1")
        );
        assert!(claim_of(&nodes[1], &claims).is_none());
        assert_eq!(
            claim_of(&nodes[2], &claims).map(|c| c.name()),
            Some("web-3")
        );
    }
}
