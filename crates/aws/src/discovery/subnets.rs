//! Subnet discovery: which subnets (and so which zones) nodes of a NodeTemplate launch into.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::api_error::api_error;
use crate::cache::TtlCache;
use crate::clock::{self, Clock};

use super::{cached_lookup, tag_map, DiscoveryError, DISCOVERY_TTL};

/// A subnet as the launcher needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subnet {
    /// `subnet-...`.
    pub id: String,
    /// Zone name (`us-east-1a`): what offerings and node labels use.
    pub zone: String,
    /// Zone ID (`use1-az1`): the same physical zone in every account.
    pub zone_id: String,
    /// Free IPv4 addresses: the zone's best subnet is the one with the most.
    pub available_ips: u32,
    /// The VPC it belongs to.
    pub vpc_id: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// One subnet per zone, the one with the most free addresses (ties: the smaller ID, so the
/// choice is stable), sorted by zone. CreateFleet gets one override per (type, zone), and the
/// emptiest subnet is the least likely to fail with InsufficientFreeAddressesInSubnet.
pub fn per_zone_best(subnets: &[Subnet]) -> Vec<Subnet> {
    let mut best: BTreeMap<&str, &Subnet> = BTreeMap::new();
    for s in subnets {
        match best.get(s.zone.as_str()) {
            Some(b)
                if (b.available_ips, std::cmp::Reverse(&b.id))
                    >= (s.available_ips, std::cmp::Reverse(&s.id)) => {}
            _ => {
                best.insert(&s.zone, s);
            }
        }
    }
    best.into_values().cloned().collect()
}

/// The zones the subnets are in: a NodeTemplate can only launch there.
pub fn zones(subnets: &[Subnet]) -> BTreeSet<String> {
    subnets.iter().map(|s| s.zone.clone()).collect()
}

/// Finds subnets by selector, through a 1-minute cache keyed by the selector.
#[derive(Debug)]
pub struct SubnetDiscovery {
    ec2: aws_sdk_ec2::Client,
    cache: TtlCache<String, Vec<Subnet>>,
}

impl SubnetDiscovery {
    /// Discovery with the default TTL on the system clock.
    pub fn new(ec2: aws_sdk_ec2::Client) -> Self {
        Self::with_clock(ec2, DISCOVERY_TTL, clock::system())
    }

    /// Discovery with a chosen TTL and clock (tests).
    pub fn with_clock(ec2: aws_sdk_ec2::Client, ttl: Duration, clock: Arc<dyn Clock>) -> Self {
        SubnetDiscovery {
            ec2,
            cache: TtlCache::new(ttl, clock),
        }
    }

    /// The available subnets matching `selector` of NodeTemplate `template`, sorted by ID. An
    /// empty selector or no match is an error naming both.
    pub async fn discover(
        &self,
        template: &str,
        selector: &BTreeMap<String, String>,
    ) -> Result<Vec<Subnet>, DiscoveryError> {
        let ec2 = self.ec2.clone();
        cached_lookup(
            &self.cache,
            template,
            "subnet",
            selector,
            |x| x.id.as_str(),
            |q| async move {
                let mut out = Vec::new();
                let mut token = None;
                loop {
                    let page = ec2
                        .describe_subnets()
                        .set_subnet_ids((!q.ids.is_empty()).then(|| q.ids.clone()))
                        .set_filters((!q.filters.is_empty()).then(|| q.filters.clone()))
                        .set_next_token(token)
                        .send()
                        .await
                        .map_err(|e| api_error("ec2:DescribeSubnets", e))?;
                    for s in page.subnets() {
                        let available = s
                            .state()
                            .is_none_or(|st| *st == aws_sdk_ec2::types::SubnetState::Available);
                        let (Some(id), Some(zone), true) =
                            (s.subnet_id(), s.availability_zone(), available)
                        else {
                            continue;
                        };
                        out.push(Subnet {
                            id: id.to_string(),
                            zone: zone.to_string(),
                            zone_id: s.availability_zone_id().unwrap_or_default().to_string(),
                            available_ips: s
                                .available_ip_address_count()
                                .and_then(|n| u32::try_from(n).ok())
                                .unwrap_or(0),
                            vpc_id: s.vpc_id().unwrap_or_default().to_string(),
                            tags: tag_map(s.tags()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(id: &str, zone: &str, ips: u32) -> Subnet {
        Subnet {
            id: id.to_string(),
            zone: zone.to_string(),
            zone_id: String::new(),
            available_ips: ips,
            vpc_id: String::new(),
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn best_subnet_per_zone_has_the_most_free_addresses() {
        let all = [
            subnet("subnet-b", "us-east-1a", 10),
            subnet("subnet-a", "us-east-1a", 10),
            subnet("subnet-c", "us-east-1a", 5),
            subnet("subnet-d", "us-east-1b", 1),
            subnet("subnet-e", "us-east-1b", 100),
        ];
        let best: Vec<String> = per_zone_best(&all).into_iter().map(|s| s.id).collect();
        assert_eq!(best, ["subnet-a", "subnet-e"]);
        assert_eq!(zones(&all).len(), 2);
    }
}
