//! Test support (feature `testing`): the EC2 and SSM resources a launch needs, made in a moto
//! server through the real SDK, and a provider wired to them. Shared by this crate's moto tests
//! and the controller's, so both launch into the same kind of environment.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use joiner_apis::{AmiFamily, NodeTemplate, ObjectLookup, Provisioner, StaticObjects};
use prometheus_client::registry::Registry;
use thiserror::Error;

use crate::allocatable::Arch;
use crate::ami::{ssm_parameter_path, AmiVariant};
use crate::catalog::{CatalogOptions, LiveCatalog};
use crate::unavailable::UnavailableOfferings;
use crate::userdata::ClusterInfo;
use crate::{AwsClients, AwsCloudProvider, ProviderConfig};

/// The tag key and value the environment puts on its subnets and security group; a
/// NodeTemplate selects them with `{joiner.sh/discovery: <cluster>}`.
pub const DISCOVERY_TAG: &str = "joiner.sh/discovery";

/// A setup call failed.
#[derive(Debug, Error)]
#[error("test environment: {step}: {message}")]
pub struct SetupError {
    /// The call that failed.
    pub step: &'static str,
    /// The SDK's error, displayed.
    pub message: String,
}

fn setup<E: std::fmt::Debug>(step: &'static str) -> impl FnOnce(E) -> SetupError {
    move |e| SetupError {
        step,
        message: format!("{e:?}"),
    }
}

/// What [`environment`] made.
#[derive(Clone, Debug)]
pub struct Environment {
    /// Subnets tagged for discovery, in us-east-1a and us-east-1b.
    pub subnets: Vec<String>,
    /// An untagged subnet in us-east-1c.
    pub untagged_subnet: String,
    /// The tagged security group.
    pub security_group: String,
    /// The x86_64 image the AL2023 standard parameter names.
    pub image_id: String,
}

fn tags(rt: ResourceType, pairs: &[(&str, &str)]) -> TagSpecification {
    let mut b = TagSpecification::builder().resource_type(rt);
    for (k, v) in pairs {
        b = b.tags(Tag::builder().key(*k).value(*v).build());
    }
    b.build()
}

/// A VPC with one subnet tagged `{DISCOVERY_TAG: cluster}` in each of us-east-1a and
/// us-east-1b, an untagged one in us-east-1c, a tagged security group, and the AL2023 amd64
/// standard AMI parameter for `kubernetes_version` under `ssm_prefix`, naming one of moto's
/// built-in images.
pub async fn environment(
    clients: &AwsClients,
    cluster: &str,
    ssm_prefix: &str,
    kubernetes_version: &str,
) -> Result<Environment, SetupError> {
    let ec2 = &clients.ec2;
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .map_err(setup("CreateVpc"))?;
    let vpc_id = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .unwrap_or_default()
        .to_string();
    let mut subnets = Vec::new();
    let mut untagged_subnet = String::new();
    for (cidr, zone, tagged) in [
        ("10.0.1.0/24", "us-east-1a", true),
        ("10.0.2.0/24", "us-east-1b", true),
        ("10.0.3.0/24", "us-east-1c", false),
    ] {
        let mut call = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone);
        if tagged {
            call = call.tag_specifications(tags(ResourceType::Subnet, &[(DISCOVERY_TAG, cluster)]));
        }
        let s = call.send().await.map_err(setup("CreateSubnet"))?;
        let id = s
            .subnet()
            .and_then(|s| s.subnet_id())
            .unwrap_or_default()
            .to_string();
        if tagged {
            subnets.push(id);
        } else {
            untagged_subnet = id;
        }
    }
    let sg = ec2
        .create_security_group()
        .group_name("nodes")
        .description("nodes")
        .vpc_id(&vpc_id)
        .tag_specifications(tags(
            ResourceType::SecurityGroup,
            &[(DISCOVERY_TAG, cluster)],
        ))
        .send()
        .await
        .map_err(setup("CreateSecurityGroup"))?;
    let images = ec2
        .describe_images()
        .owners("amazon")
        .send()
        .await
        .map_err(setup("DescribeImages"))?;
    let image_id = images
        .images()
        .iter()
        .find(|i| i.architecture().map(|a| a.as_str()) == Some("x86_64"))
        .and_then(|i| i.image_id())
        .ok_or_else(|| SetupError {
            step: "DescribeImages",
            message: "no x86_64 image".into(),
        })?
        .to_string();
    let parameter = ssm_parameter_path(
        ssm_prefix,
        AmiFamily::Al2023,
        kubernetes_version,
        Arch::Amd64,
        AmiVariant::Standard,
    )
    .map_err(setup("ssm_parameter_path"))?;
    clients
        .ssm
        .put_parameter()
        .name(parameter)
        .value(&image_id)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .map_err(setup("PutParameter"))?;
    Ok(Environment {
        subnets,
        untagged_subnet,
        security_group: sg.group_id().unwrap_or_default().to_string(),
        image_id,
    })
}

/// The provider configuration of a test cluster `cluster` reading AMIs under `ssm_prefix`.
pub fn provider_config(
    cluster: &str,
    ssm_prefix: &str,
    kubernetes_version: &str,
) -> ProviderConfig {
    ProviderConfig {
        cluster: ClusterInfo {
            name: cluster.into(),
            endpoint: "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com".into(),
            ca_bundle: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t".into(),
            service_cidr: Some("10.100.0.0/16".into()),
            dns_ip: None,
        },
        kubernetes_version: kubernetes_version.into(),
        ssm_prefix: ssm_prefix.into(),
        default_instance_profile: None,
    }
}

/// A provider on `clients` with a live catalog (moto answers Pricing with HTTP 500, so one
/// retry keeps tests quick and prices fall back to the embedded ones), knowing `provisioners`
/// and `node_templates`. Returns the unavailable-offerings set it records capacity errors in.
pub fn provider(
    clients: &AwsClients,
    config: ProviderConfig,
    provisioners: Vec<Provisioner>,
    node_templates: Vec<NodeTemplate>,
) -> (AwsCloudProvider, Arc<UnavailableOfferings>) {
    let objects = Arc::new(StaticObjects::new(provisioners, node_templates));
    provider_with_lookup(clients, config, objects)
}

/// Like [`provider`], reading Provisioners and NodeTemplates from `objects` (e.g. a
/// controller's stores that the test changes).
pub fn provider_with_lookup(
    clients: &AwsClients,
    config: ProviderConfig,
    objects: Arc<dyn ObjectLookup>,
) -> (AwsCloudProvider, Arc<UnavailableOfferings>) {
    let options = CatalogOptions {
        max_attempts: 2,
        call_timeout: Duration::from_secs(60),
        ..CatalogOptions::default()
    };
    let catalog = Arc::new(LiveCatalog::new(clients, options, &mut Registry::default()));
    let unavailable = Arc::new(UnavailableOfferings::default());
    let p = AwsCloudProvider::new(
        clients.clone(),
        config,
        catalog,
        unavailable.clone(),
        objects,
    );
    (p, unavailable)
}

/// Runs one `instance_type` instance from the environment's image in its untagged subnet with
/// `tag_pairs`, as another tool sharing the account would (a managed node group, Karpenter, a
/// person); returns its ID.
pub async fn run_tagged_instance(
    clients: &AwsClients,
    env: &Environment,
    instance_type: &str,
    tag_pairs: &[(&str, &str)],
) -> Result<String, SetupError> {
    let mut request = clients
        .ec2
        .run_instances()
        .image_id(&env.image_id)
        .instance_type(instance_type.into())
        .subnet_id(&env.untagged_subnet)
        .min_count(1)
        .max_count(1);
    if !tag_pairs.is_empty() {
        request = request.tag_specifications(tags(ResourceType::Instance, tag_pairs));
    }
    let out = request.send().await.map_err(setup("RunInstances"))?;
    Ok(out
        .instances()
        .first()
        .and_then(|i| i.instance_id())
        .unwrap_or_default()
        .to_string())
}
