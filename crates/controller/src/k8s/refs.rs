//! How objects are named in errors and logs: `NodeClaim "web-abc"`, `Node "ip-..."`.

use joiner_apis::NodeClaim;
use k8s_openapi::api::core::v1::Node;

/// `NodeClaim "name"`, for messages.
pub fn claim_ref(claim: &NodeClaim) -> String {
    format!("NodeClaim {:?}", claim.name())
}

/// `Node "name"`, for messages.
pub fn node_ref(node: &Node) -> String {
    format!("Node {:?}", node_name(node))
}

/// metadata.name of a Node, empty when missing.
pub fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}
