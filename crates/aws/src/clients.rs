//! The SDK clients joiner talks to AWS with, built once from the standard configuration chain.
//!
//! Everything goes through `aws_config`'s default chain, so `AWS_ENDPOINT_URL`, `AWS_REGION`,
//! profiles, IRSA/Pod Identity and instance roles all work unchanged: the same binary runs
//! against AWS, moto, or any compatible endpoint.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

use crate::error::AwsError;

/// The Pricing API is served from a few regions only; each partition's prices are read from
/// the nearest one. Regions outside these prefixes (us-, ca-, sa-, and new ones) use us-east-1.
pub fn pricing_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("ap-") {
        "ap-south-1"
    } else if ["eu-", "me-", "af-", "il-"]
        .iter()
        .any(|prefix| region.starts_with(prefix))
    {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

/// The time limits every client starts from: a connection that cannot be made in 5 s, an
/// attempt that takes 30 s, or a call that takes 2 min (its retries included) fails, instead of
/// holding the loop that made it. Callers with a reason to wait longer or shorter (the catalog's
/// paginated listings) set their own operation limit on top.
pub fn default_timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_secs(120))
        .build()
}

/// One client per AWS service joiner calls, all sharing a configuration.
#[derive(Clone, Debug)]
pub struct AwsClients {
    /// The region EC2, SSM and SQS are called in.
    pub region: String,
    /// EC2: catalog, discovery, launch templates, fleets, instances.
    pub ec2: aws_sdk_ec2::Client,
    /// SSM: public AMI parameters.
    pub ssm: aws_sdk_ssm::Client,
    /// Pricing: on-demand prices, in the partition's pricing region.
    pub pricing: aws_sdk_pricing::Client,
    /// SQS: the interruption queue.
    pub sqs: aws_sdk_sqs::Client,
}

impl AwsClients {
    /// Loads the default configuration chain; `region` (a flag) wins over the environment.
    pub async fn from_env(region: Option<&str>) -> Result<Self, AwsError> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(region) = region {
            loader = loader.region(Region::new(region.to_string()));
        }
        Self::from_config(&loader.load().await)
    }

    /// Builds the clients from an already loaded configuration (tests point it at moto).
    pub fn from_config(config: &SdkConfig) -> Result<Self, AwsError> {
        let region = config
            .region()
            .map(|r| r.as_ref().to_string())
            .ok_or(AwsError::NoRegion)?;
        let timeouts = default_timeouts();
        let pricing = aws_sdk_pricing::config::Builder::from(config)
            .region(Region::new(pricing_region(&region)))
            .timeout_config(timeouts.clone())
            .build();
        Ok(AwsClients {
            ec2: aws_sdk_ec2::Client::from_conf(
                aws_sdk_ec2::config::Builder::from(config)
                    .timeout_config(timeouts.clone())
                    .build(),
            ),
            ssm: aws_sdk_ssm::Client::from_conf(
                aws_sdk_ssm::config::Builder::from(config)
                    .timeout_config(timeouts.clone())
                    .build(),
            ),
            pricing: aws_sdk_pricing::Client::from_conf(pricing),
            sqs: aws_sdk_sqs::Client::from_conf(
                aws_sdk_sqs::config::Builder::from(config)
                    .timeout_config(timeouts)
                    .build(),
            ),
            region,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_has_connect_and_operation_timeouts() {
        let config = SdkConfig::builder()
            .region(Region::new("us-east-1"))
            .behavior_version(BehaviorVersion::latest())
            .build();
        let clients = AwsClients::from_config(&config).expect("clients");
        let limits = [
            clients.ec2.config().timeout_config().cloned(),
            clients.ssm.config().timeout_config().cloned(),
            clients.pricing.config().timeout_config().cloned(),
            clients.sqs.config().timeout_config().cloned(),
        ];
        for t in limits {
            let t = t.expect("a timeout config");
            assert_eq!(t.connect_timeout(), Some(Duration::from_secs(5)));
            assert_eq!(t.operation_timeout(), Some(Duration::from_secs(120)));
            assert_eq!(t.operation_attempt_timeout(), Some(Duration::from_secs(30)));
        }
    }

    #[test]
    fn pricing_regions_follow_the_partition() {
        assert_eq!(pricing_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(pricing_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_region("me-south-1"), "eu-central-1");
        assert_eq!(pricing_region("cn-north-1"), "cn-northwest-1");
        assert_eq!(pricing_region("sa-east-1"), "us-east-1");
    }
}
