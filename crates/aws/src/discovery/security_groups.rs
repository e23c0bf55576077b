//! Security-group discovery: the groups a NodeTemplate's nodes get.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::api_error::api_error;
use crate::cache::TtlCache;
use crate::clock::{self, Clock};

use super::{cached_lookup, tag_map, DiscoveryError, DISCOVERY_TTL};

/// A security group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityGroup {
    /// `sg-...`.
    pub id: String,
    /// Group name (shown in the NodeTemplate status).
    pub name: String,
    /// The VPC it belongs to.
    pub vpc_id: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// Finds security groups by selector, through a 1-minute cache keyed by the selector.
#[derive(Debug)]
pub struct SecurityGroupDiscovery {
    ec2: aws_sdk_ec2::Client,
    cache: TtlCache<String, Vec<SecurityGroup>>,
}

impl SecurityGroupDiscovery {
    /// Discovery with the default TTL on the system clock.
    pub fn new(ec2: aws_sdk_ec2::Client) -> Self {
        Self::with_clock(ec2, DISCOVERY_TTL, clock::system())
    }

    /// Discovery with a chosen TTL and clock (tests).
    pub fn with_clock(ec2: aws_sdk_ec2::Client, ttl: Duration, clock: Arc<dyn Clock>) -> Self {
        SecurityGroupDiscovery {
            ec2,
            cache: TtlCache::new(ttl, clock),
        }
    }

    /// The security groups matching `selector` of NodeTemplate `template`, sorted by ID. An
    /// empty selector or no match is an error naming both.
    pub async fn discover(
        &self,
        template: &str,
        selector: &BTreeMap<String, String>,
    ) -> Result<Vec<SecurityGroup>, DiscoveryError> {
        let ec2 = self.ec2.clone();
        cached_lookup(
            &self.cache,
            template,
            "security group",
            selector,
            |x| x.id.as_str(),
            |q| async move {
                let mut out = Vec::new();
                let mut token = None;
                loop {
                    let page = ec2
                        .describe_security_groups()
                        .set_group_ids((!q.ids.is_empty()).then(|| q.ids.clone()))
                        .set_filters((!q.filters.is_empty()).then(|| q.filters.clone()))
                        .set_next_token(token)
                        .send()
                        .await
                        .map_err(|e| api_error("ec2:DescribeSecurityGroups", e))?;
                    for g in page.security_groups() {
                        let Some(id) = g.group_id() else { continue };
                        out.push(SecurityGroup {
                            id: id.to_string(),
                            name: g.group_name().unwrap_or_default().to_string(),
                            vpc_id: g.vpc_id().unwrap_or_default().to_string(),
                            tags: tag_map(g.tags()),
                        });
                    }
                    token = page
                        .next_token()
                        .filter(|t| !t.is_empty())
                        .map(str::to_string);
                    if token.is_none() {
                        return Ok(out);
                    }
                }
            },
        )
        .await
    }
}
