//! Resolving AMIs: an SSM parameter → image ID → DescribeImages, or an amiSelector →
//! DescribeImages, both cached.
//!
//! SSM answers are kept 24 h (as Karpenter does: the EKS parameters change at most with a new
//! AMI release, and a node group must not flip AMIs every minute); selector answers 1 minute,
//! so a newly registered image is picked up soon. The Kubernetes version is the caller's input
//! (a flag now, the API server later), already part of the parameter path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::Filter;
use thiserror::Error;

use joiner_apis::AmiFamily;

use super::ssm_path::{ssm_parameter_path, AmiVariant, DEFAULT_SSM_PREFIX};
use crate::allocatable::Arch;
use crate::api_error::api_error;
use crate::cache::TtlCache;
use crate::clock::{self, Clock};
use crate::discovery::{describe, query, tag_map, DiscoveryError};
use crate::{AwsClients, AwsError};

/// How long an SSM answer is reused.
pub const SSM_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long an amiSelector answer is reused.
pub const SELECTOR_TTL: Duration = Duration::from_secs(60);
/// amiSelector key matching image names (wildcards allowed, as EC2's `name` filter).
pub const NAME_KEY: &str = "aws::name";
/// amiSelector key listing owners (account IDs, `self`, `amazon`); `self,amazon` when absent.
pub const OWNERS_KEY: &str = "aws::owners";

/// An AMI and the facts the launcher needs to pair it with instance types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ami {
    /// `ami-...`.
    pub id: String,
    /// Image name.
    pub name: String,
    /// CPU architecture, if EC2 gave a known one.
    pub arch: Option<Arch>,
    /// Creation date as EC2 reports it (ISO 8601, so it sorts as a string).
    pub creation_date: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// Why an AMI could not be resolved.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AmiError {
    /// The SSM parameter does not exist (wrong family, variant or Kubernetes version).
    #[error("SSM parameter `{parameter}` not found (is the Kubernetes version right?)")]
    ParameterNotFound {
        /// The full parameter name.
        parameter: String,
    },
    /// The parameter exists but names no image EC2 knows.
    #[error("SSM parameter `{parameter}` names image `{image_id}`, which DescribeImages does not return")]
    ImageNotFound {
        /// The full parameter name.
        parameter: String,
        /// Its value.
        image_id: String,
    },
    /// The family has no public parameter for this architecture and variant (or is Custom).
    #[error(transparent)]
    Path(#[from] super::ssm_path::SsmPathError),
    /// An AWS call failed.
    #[error("resolving the AMI of SSM parameter `{parameter}`: {source}")]
    Aws {
        /// The full parameter name.
        parameter: String,
        /// The AWS error.
        source: AwsError,
    },
    /// amiSelector resolution failed.
    #[error(transparent)]
    Selector(#[from] DiscoveryError),
}

/// Resolves AMIs through SSM and EC2, with caches.
#[derive(Debug)]
pub struct AmiResolver {
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    prefix: String,
    by_parameter: TtlCache<String, Ami>,
    by_selector: TtlCache<String, Vec<Ami>>,
}

impl AmiResolver {
    /// A resolver reading parameters under [`DEFAULT_SSM_PREFIX`], on the system clock.
    pub fn new(clients: &AwsClients) -> Self {
        Self::with_clock(clients, DEFAULT_SSM_PREFIX, clock::system())
    }

    /// A resolver reading parameters under `prefix` (e.g. `/joiner-test/service`), on `clock`.
    pub fn with_clock(clients: &AwsClients, prefix: &str, clock: Arc<dyn Clock>) -> Self {
        AmiResolver {
            ec2: clients.ec2.clone(),
            ssm: clients.ssm.clone(),
            prefix: prefix.trim_end_matches('/').to_string(),
            by_parameter: TtlCache::new(SSM_TTL, clock.clone()),
            by_selector: TtlCache::new(SELECTOR_TTL, clock),
        }
    }

    /// The parameter name actually read for `path`: a path under `/aws/service` is moved under
    /// the configured prefix, a relative path is appended to it, any other absolute path is kept.
    pub fn parameter_name(&self, path: &str) -> String {
        if let Some(rest) = path.strip_prefix(DEFAULT_SSM_PREFIX) {
            if rest.is_empty() || rest.starts_with('/') {
                return format!("{}{rest}", self.prefix);
            }
        }
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", self.prefix)
        }
    }

    /// The EKS-optimized AMI of `family` for a Kubernetes version, architecture and variant:
    /// the parameter path of [`ssm_parameter_path`] under this resolver's prefix.
    pub async fn resolve_default(
        &self,
        family: AmiFamily,
        kubernetes_version: &str,
        arch: Arch,
        variant: AmiVariant,
    ) -> Result<Ami, AmiError> {
        let path = ssm_parameter_path(&self.prefix, family, kubernetes_version, arch, variant)?;
        self.resolve_parameter(&path).await
    }

    /// The AMI the SSM parameter at `path` names (see [`AmiResolver::parameter_name`]).
    pub async fn resolve_parameter(&self, path: &str) -> Result<Ami, AmiError> {
        let parameter = self.parameter_name(path);
        if let Some(hit) = self.by_parameter.get(&parameter) {
            return Ok(hit);
        }
        let out = self
            .ssm
            .get_parameter()
            .name(&parameter)
            .send()
            .await
            .map_err(|e| {
                let err = api_error("ssm:GetParameter", e);
                match &err {
                    AwsError::Api { code, .. } if code == "ParameterNotFound" => {
                        AmiError::ParameterNotFound {
                            parameter: parameter.clone(),
                        }
                    }
                    _ => AmiError::Aws {
                        parameter: parameter.clone(),
                        source: err,
                    },
                }
            })?;
        let image_id = out
            .parameter()
            .and_then(|p| p.value())
            .map(str::trim)
            .unwrap_or_default()
            .to_string();
        let images = self
            .describe_images(Some(vec![image_id.clone()]), None, Vec::new())
            .await
            .map_err(|source| AmiError::Aws {
                parameter: parameter.clone(),
                source,
            })?;
        let ami = images
            .into_iter()
            .find(|a| a.id == image_id)
            .ok_or_else(|| AmiError::ImageNotFound {
                parameter: parameter.clone(),
                image_id,
            })?;
        self.by_parameter.insert(parameter, ami.clone());
        Ok(ami)
    }

    /// The AMIs `selector` of NodeTemplate `template` selects: the newest per architecture,
    /// sorted by architecture. Keys: `aws-ids`/`aws::ids`, [`NAME_KEY`], [`OWNERS_KEY`], and
    /// tags (`*` = any value). Owners default to `self,amazon` unless IDs are given.
    pub async fn resolve_selector(
        &self,
        template: &str,
        selector: &BTreeMap<String, String>,
    ) -> Result<Vec<Ami>, AmiError> {
        const WHAT: &str = "AMI";
        if selector.is_empty() {
            return Err(DiscoveryError::EmptySelector {
                template: template.to_string(),
                what: WHAT,
            }
            .into());
        }
        let key = describe(selector);
        if let Some(hit) = self.by_selector.get(&key) {
            return Ok(hit);
        }
        let q = query(selector, &[NAME_KEY, OWNERS_KEY]);
        let mut filters = q.filters;
        if let Some(name) = selector.get(NAME_KEY) {
            filters.push(
                Filter::builder()
                    .name("name")
                    .set_values(Some(crate::discovery::split_list(name)))
                    .build(),
            );
        }
        let owners = match selector.get(OWNERS_KEY) {
            Some(o) => crate::discovery::split_list(o),
            None if q.ids.is_empty() => vec!["self".to_string(), "amazon".to_string()],
            None => Vec::new(),
        };
        let images = self
            .describe_images((!q.ids.is_empty()).then_some(q.ids), Some(filters), owners)
            .await
            .map_err(|source| DiscoveryError::Aws {
                template: template.to_string(),
                what: WHAT,
                selector: key.clone(),
                source,
            })?;
        let newest = newest_per_arch(images);
        if newest.is_empty() {
            return Err(DiscoveryError::NoMatch {
                template: template.to_string(),
                what: WHAT,
                selector: key,
            }
            .into());
        }
        self.by_selector.insert(key, newest.clone());
        Ok(newest)
    }

    async fn describe_images(
        &self,
        ids: Option<Vec<String>>,
        filters: Option<Vec<Filter>>,
        owners: Vec<String>,
    ) -> Result<Vec<Ami>, AwsError> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .ec2
                .describe_images()
                .set_image_ids(ids.clone())
                .set_filters(filters.clone().filter(|f| !f.is_empty()))
                .set_owners((!owners.is_empty()).then(|| owners.clone()))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| api_error("ec2:DescribeImages", e))?;
            for i in page.images() {
                let Some(id) = i.image_id() else { continue };
                out.push(Ami {
                    id: id.to_string(),
                    name: i.name().unwrap_or_default().to_string(),
                    arch: i.architecture().and_then(|a| Arch::parse(a.as_str())),
                    creation_date: i.creation_date().unwrap_or_default().to_string(),
                    tags: tag_map(i.tags()),
                });
            }
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        Ok(out)
    }
}

/// The newest image (by creation date, then ID) of each known architecture; images of an
/// unknown architecture cannot be matched to instance types and are left out.
fn newest_per_arch(images: Vec<Ami>) -> Vec<Ami> {
    let mut best: BTreeMap<Arch, Ami> = BTreeMap::new();
    for ami in images {
        let Some(arch) = ami.arch else { continue };
        let newer = best
            .get(&arch)
            .is_none_or(|b| (&ami.creation_date, &ami.id) > (&b.creation_date, &b.id));
        if newer {
            best.insert(arch, ami);
        }
    }
    best.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ami(id: &str, arch: Option<Arch>, date: &str) -> Ami {
        Ami {
            id: id.to_string(),
            name: String::new(),
            arch,
            creation_date: date.to_string(),
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn newest_image_per_architecture() {
        let got = newest_per_arch(vec![
            ami("ami-1", Some(Arch::Amd64), "2024-01-01T00:00:00.000Z"),
            ami("ami-2", Some(Arch::Amd64), "2024-06-01T00:00:00.000Z"),
            ami("ami-3", Some(Arch::Arm64), "2023-01-01T00:00:00.000Z"),
            ami("ami-4", None, "2025-01-01T00:00:00.000Z"),
        ]);
        let ids: Vec<&str> = got.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["ami-2", "ami-3"]);
    }
}
