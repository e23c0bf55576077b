//! Custom AMIs: joiner knows nothing of their bootstrap, so the NodeTemplate's user data is
//! sent exactly as written (empty is allowed: the AMI may need none). The NodeTemplate is
//! responsible for the node's labels, taints and max-pods.

/// The user's data, untouched.
pub fn render(user_data: &str) -> String {
    user_data.to_string()
}
