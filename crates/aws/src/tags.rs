//! The tags joiner puts on what it creates, and reads back to know what it owns.

use std::collections::BTreeMap;

/// `kubernetes.io/cluster/<cluster>`: the cluster-ownership tag key (value [`OWNED`]). Nothing
/// without it is ever terminated or deleted.
pub fn cluster_tag_key(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

/// The value of the cluster tag on resources the cluster owns.
pub const OWNED: &str = "owned";
/// Marks resources created by joiner (launch templates), so foreign ones are left alone even
/// when they carry the cluster tag.
pub const MANAGED_BY: &str = "joiner.sh/managed-by";
/// The value of [`MANAGED_BY`].
pub const MANAGED_BY_VALUE: &str = "joiner";
/// The NodeClaim an instance was launched for (same key as the label).
pub const NODECLAIM: &str = joiner_core::labels::NODECLAIM;
/// The Provisioner an instance was launched for (same key as the label).
pub const PROVISIONER_NAME: &str = joiner_core::labels::PROVISIONER_NAME;

/// True when `tags` mark the resource as owned by `cluster`.
pub fn is_owned(tags: &BTreeMap<String, String>, cluster: &str) -> bool {
    tags.get(&cluster_tag_key(cluster)).map(String::as_str) == Some(OWNED)
}

/// `tags` as EC2 tags, sorted by key.
pub fn to_ec2(tags: &BTreeMap<String, String>) -> Vec<aws_sdk_ec2::types::Tag> {
    tags.iter()
        .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
        .collect()
}
