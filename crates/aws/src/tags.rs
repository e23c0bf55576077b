//! The tags joiner puts on what it creates, and reads back to know what it owns.
//!
//! Ownership is three tags, never one: `kubernetes.io/cluster/<cluster>=owned` is also on EKS
//! managed node groups, eksctl's self-managed groups and Karpenter's nodes, so an instance or
//! launch template is joiner's only when it carries the cluster tag, `joiner.sh/cluster=<cluster>`
//! *and* `joiner.sh/provisioner-name`. `joiner.sh/cluster` repeats the cluster under a fixed key
//! because an IAM condition key cannot be built from a CloudFormation parameter: the policy in
//! iam/joiner.yaml is native YAML a linter reads, and it names the cluster in condition values
//! only. Listing, garbage collection, the terminate guard and the IAM policy
//! (iam/controller-policy.json) all go by the same tags.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

/// `kubernetes.io/cluster/<cluster>`: the cluster tag key (value [`OWNED`]). Necessary but not
/// sufficient for ownership: see [`is_owned`].
pub fn cluster_tag_key(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

/// The value of the cluster tag on resources the cluster owns.
pub const OWNED: &str = "owned";
/// The cluster's name under a fixed key, for IAM conditions (see the module's doc).
pub const CLUSTER: &str = "joiner.sh/cluster";

/// Adds the two cluster tags (`kubernetes.io/cluster/<cluster>=owned` and
/// `joiner.sh/cluster=<cluster>`) to `tags`: what every resource joiner creates carries.
pub fn insert_cluster_tags(tags: &mut BTreeMap<String, String>, cluster: &str) {
    tags.insert(cluster_tag_key(cluster), OWNED.to_string());
    tags.insert(CLUSTER.to_string(), cluster.to_string());
}
/// Marks resources created by joiner (launch templates), so foreign ones are left alone even
/// when they carry the cluster tag.
pub const MANAGED_BY: &str = "joiner.sh/managed-by";
/// The value of [`MANAGED_BY`].
pub const MANAGED_BY_VALUE: &str = "joiner";
/// The NodeClaim an instance was launched for (same key as the label).
pub const NODECLAIM: &str = joiner_core::labels::NODECLAIM;
/// The Provisioner an instance was launched for (same key as the label). Its presence, with
/// the cluster tag, is what makes an instance joiner's.
pub const PROVISIONER_NAME: &str = joiner_core::labels::PROVISIONER_NAME;

/// The first ownership tag `tags` lack for `cluster`, as `key=value` (or `key` when any value
/// will do); `None` when the resource is joiner's in this cluster.
pub fn missing_ownership_tag(tags: &BTreeMap<String, String>, cluster: &str) -> Option<String> {
    let cluster_key = cluster_tag_key(cluster);
    if tags.get(&cluster_key).map(String::as_str) != Some(OWNED) {
        return Some(format!("{cluster_key}={OWNED}"));
    }
    if tags.get(CLUSTER).map(String::as_str) != Some(cluster) {
        return Some(format!("{CLUSTER}={cluster}"));
    }
    if tags.get(PROVISIONER_NAME).is_none_or(|v| v.is_empty()) {
        return Some(PROVISIONER_NAME.to_string());
    }
    None
}

/// True when `tags` mark the resource as joiner's in `cluster`: the cluster tag with value
/// `owned`, `joiner.sh/cluster` naming `cluster` and a non-empty `joiner.sh/provisioner-name`.
pub fn is_owned(tags: &BTreeMap<String, String>, cluster: &str) -> bool {
    missing_ownership_tag(tags, cluster).is_none()
}

/// EC2 Describe* filters selecting what [`is_owned`] accepts (callers check the answer again
/// with [`is_owned`]: a filter is a query, not a guard).
pub fn owned_filters(cluster: &str) -> Vec<Filter> {
    vec![
        Filter::builder()
            .name(format!("tag:{}", cluster_tag_key(cluster)))
            .values(OWNED)
            .build(),
        Filter::builder()
            .name(format!("tag:{CLUSTER}"))
            .values(cluster)
            .build(),
        Filter::builder()
            .name("tag-key")
            .values(PROVISIONER_NAME)
            .build(),
    ]
}

/// `tags` as EC2 tags, sorted by key.
pub fn to_ec2(tags: &BTreeMap<String, String>) -> Vec<aws_sdk_ec2::types::Tag> {
    tags.iter()
        .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_cluster_tag_alone_is_not_ownership() {
        let c = "prod";
        // EKS managed node group, eksctl and Karpenter nodes all carry the cluster tag.
        for foreign in [
            tags(&[
                ("kubernetes.io/cluster/prod", "owned"),
                ("eks:nodegroup-name", "system"),
            ]),
            tags(&[
                ("kubernetes.io/cluster/prod", "owned"),
                ("karpenter.sh/provisioner-name", "default"),
            ]),
            tags(&[
                ("kubernetes.io/cluster/prod", "owned"),
                ("joiner.sh/provisioner-name", ""),
            ]),
        ] {
            assert!(!is_owned(&foreign, c), "{foreign:?}");
        }
        assert_eq!(
            missing_ownership_tag(&tags(&[("kubernetes.io/cluster/prod", "owned")]), c),
            Some("joiner.sh/cluster=prod".to_string())
        );
        assert_eq!(
            missing_ownership_tag(
                &tags(&[
                    ("kubernetes.io/cluster/prod", "owned"),
                    ("joiner.sh/cluster", "prod")
                ]),
                c
            ),
            Some("joiner.sh/provisioner-name".to_string())
        );
        // An instance of an older joiner (no fixed-key cluster tag) or one tagged for two
        // clusters at once is not this cluster's: the IAM policy would refuse it too.
        for half in [
            tags(&[
                ("kubernetes.io/cluster/prod", "owned"),
                ("joiner.sh/provisioner-name", "web"),
            ]),
            tags(&[
                ("kubernetes.io/cluster/prod", "owned"),
                ("kubernetes.io/cluster/dev", "owned"),
                ("joiner.sh/cluster", "dev"),
                ("joiner.sh/provisioner-name", "web"),
            ]),
        ] {
            assert!(!is_owned(&half, c), "{half:?}");
        }
        // Another cluster's joiner instance, or a shared one, is not this cluster's.
        let other = tags(&[
            ("kubernetes.io/cluster/prod", "shared"),
            ("joiner.sh/cluster", "prod"),
            ("joiner.sh/provisioner-name", "web"),
        ]);
        assert_eq!(
            missing_ownership_tag(&other, c),
            Some("kubernetes.io/cluster/prod=owned".to_string())
        );
        let mut ours = tags(&[("joiner.sh/provisioner-name", "web")]);
        insert_cluster_tags(&mut ours, c);
        assert!(is_owned(&ours, c));
    }
}
