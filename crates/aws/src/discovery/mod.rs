//! Subnets and security groups from a NodeTemplate's selectors.
//!
//! A selector is the NodeTemplate's map: each `key: value` entry is a tag that must be present
//! with that value (`*` = the tag with any value), and the reserved key `aws-ids` (also spelt
//! `aws::ids`) lists resource IDs, comma-separated. All entries must match (AND), as in
//! Karpenter's v1alpha5 selectors. The results are cached for a minute per selector, which is
//! how long a new subnet may take to be used.

pub mod security_groups;
pub mod subnets;

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use thiserror::Error;

use crate::AwsError;

pub use security_groups::{SecurityGroup, SecurityGroupDiscovery};
pub use subnets::{per_zone_best, zones, Subnet, SubnetDiscovery};

/// How long discovered subnets and security groups are reused.
pub const DISCOVERY_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The selector key that lists resource IDs instead of tags.
pub const IDS_KEY: &str = "aws-ids";
/// The other spelling of [`IDS_KEY`], accepted because the AMI selector uses it.
pub const IDS_KEY_ALT: &str = "aws::ids";

/// Why discovery gave no usable result. Every variant names the NodeTemplate and the selector,
/// so the status condition tells the user which manifest to fix.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The selector has no entry: it would match every resource of the account.
    #[error("NodeTemplate `{template}`: the {what} selector is empty")]
    EmptySelector {
        /// NodeTemplate name.
        template: String,
        /// `subnet`, `security group` or `AMI`.
        what: &'static str,
    },
    /// Nothing matches.
    #[error("NodeTemplate `{template}`: no {what} matches the selector {selector}")]
    NoMatch {
        /// NodeTemplate name.
        template: String,
        /// `subnet`, `security group` or `AMI`.
        what: &'static str,
        /// The selector, as `{key: value, ...}`.
        selector: String,
    },
    /// The AWS call failed.
    #[error("NodeTemplate `{template}`: discovering {what} for selector {selector}: {source}")]
    Aws {
        /// NodeTemplate name.
        template: String,
        /// `subnet`, `security group` or `AMI`.
        what: &'static str,
        /// The selector, as `{key: value, ...}`.
        selector: String,
        /// The AWS error.
        source: AwsError,
    },
}

/// The lookup both discoveries share: reject an empty selector, serve the cache, ask EC2
/// through `fetch` (which reads every page), reject no match, sort by ID and cache. Keeping it
/// in one place keeps subnets and security groups failing with the same errors.
pub(crate) async fn cached_lookup<T, F, Fut>(
    cache: &crate::cache::TtlCache<String, Vec<T>>,
    template: &str,
    what: &'static str,
    selector: &BTreeMap<String, String>,
    id: fn(&T) -> &str,
    fetch: F,
) -> Result<Vec<T>, DiscoveryError>
where
    T: Clone,
    F: FnOnce(Query) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, AwsError>>,
{
    if selector.is_empty() {
        return Err(DiscoveryError::EmptySelector {
            template: template.to_string(),
            what,
        });
    }
    let key = describe(selector);
    if let Some(hit) = cache.get(&key) {
        return Ok(hit);
    }
    let mut out = fetch(query(selector, &[]))
        .await
        .map_err(|source| DiscoveryError::Aws {
            template: template.to_string(),
            what,
            selector: key.clone(),
            source,
        })?;
    if out.is_empty() {
        return Err(DiscoveryError::NoMatch {
            template: template.to_string(),
            what,
            selector: key,
        });
    }
    out.sort_by(|a, b| id(a).cmp(id(b)));
    cache.insert(key, out.clone());
    Ok(out)
}

/// A selector translated into a Describe* request: IDs and filters.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Query {
    /// IDs from `aws-ids`; empty when the selector names none.
    pub ids: Vec<String>,
    /// `tag:<key>` (values) and `tag-key` filters.
    pub filters: Vec<Filter>,
}

/// Translates `selector`; keys in `reserved` (beyond the IDs keys) are left to the caller.
pub(crate) fn query(selector: &BTreeMap<String, String>, reserved: &[&str]) -> Query {
    let mut q = Query::default();
    for (key, value) in selector {
        if key == IDS_KEY || key == IDS_KEY_ALT {
            q.ids.extend(split_list(value));
        } else if reserved.contains(&key.as_str()) {
            continue;
        } else if value == "*" {
            q.filters
                .push(Filter::builder().name("tag-key").values(key).build());
        } else {
            q.filters.push(
                Filter::builder()
                    .name(format!("tag:{key}"))
                    .set_values(Some(split_list(value)))
                    .build(),
            );
        }
    }
    q
}

/// `a, b,c` → `[a, b, c]`, empty items dropped.
pub(crate) fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// `{k: v, ...}`, for messages and as the cache key (the map is sorted, so it is stable).
pub(crate) fn describe(selector: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = selector.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", inner.join(", "))
}

/// Tags of an EC2 resource as a map.
pub(crate) fn tag_map(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tags_wildcards_and_ids() {
        let q = query(
            &sel(&[
                ("aws-ids", "subnet-1, subnet-2,"),
                ("karpenter.sh/discovery", "*"),
                ("env", "prod,staging"),
            ]),
            &[],
        );
        assert_eq!(q.ids, ["subnet-1", "subnet-2"]);
        assert_eq!(q.filters.len(), 2);
        assert_eq!(q.filters[0].name(), Some("tag:env"));
        assert_eq!(q.filters[0].values(), ["prod", "staging"]);
        assert_eq!(q.filters[1].name(), Some("tag-key"));
        assert_eq!(q.filters[1].values(), ["karpenter.sh/discovery"]);
        assert_eq!(describe(&sel(&[("a", "b"), ("c", "*")])), "{a: b, c: *}");
    }

    #[test]
    fn reserved_keys_are_skipped() {
        let q = query(
            &sel(&[("aws::name", "x"), ("aws::ids", "ami-1")]),
            &["aws::name"],
        );
        assert_eq!(q.ids, ["ami-1"]);
        assert!(q.filters.is_empty());
    }
}
