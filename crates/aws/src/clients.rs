//! The SDK clients joiner talks to AWS with, built once from the standard configuration chain.
//!
//! Everything goes through `aws_config`'s default chain, so `AWS_ENDPOINT_URL`, `AWS_REGION`,
//! profiles, IRSA/Pod Identity and instance roles all work unchanged: the same binary runs
//! against AWS, moto, or any compatible endpoint.

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
        let pricing = aws_sdk_pricing::config::Builder::from(config)
            .region(Region::new(pricing_region(&region)))
            .build();
        Ok(AwsClients {
            ec2: aws_sdk_ec2::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
            pricing: aws_sdk_pricing::Client::from_conf(pricing),
            sqs: aws_sdk_sqs::Client::new(config),
            region,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
