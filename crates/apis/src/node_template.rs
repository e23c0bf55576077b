//! The `NodeTemplate` resource: the AWS side of a launch (network, AMI, instance profile,
//! user data, disks, metadata service). The fields are those of Karpenter's v1alpha1
//! AWSNodeTemplate so an imported template keeps its meaning.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::selector::NodeSelectorRequirement;

/// `spec` of a [`NodeTemplate`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "joiner.sh",
    version = "v1alpha1",
    kind = "NodeTemplate",
    status = "NodeTemplateStatus",
    shortname = "nt",
    printcolumn = r#"{"name":"AMIFamily","type":"string","jsonPath":".spec.amiFamily"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::spec_rules::node_template_rules()))]
pub struct NodeTemplateSpec {
    /// Tags (or `aws-ids`) that select the subnets nodes launch into.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subnet_selector: BTreeMap<String, String>,
    /// Tags (or `aws-ids`) that select the security groups of the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_group_selector: BTreeMap<String, String>,
    /// Which bootstrap format and default AMIs to use; AL2023 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    /// Tags, names or `aws-ids` selecting AMIs instead of the family's SSM defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ami_selector: BTreeMap<String, String>,
    /// IAM instance profile of the nodes; the controller's default when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// The user's own user data, merged with joiner's bootstrap part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// Tags put on instances, volumes and launch templates. Keys in joiner's, Karpenter's,
    /// the cluster's and EKS's namespaces are refused: they decide who owns a node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::tag_rules::tag_map_schema")]
    pub tags: BTreeMap<String, String>,
    /// Instance metadata service settings; IMDSv2 is required unless changed here.
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    /// EBS volumes; the family's root volume when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::spec_rules::MAX_BLOCK_DEVICES))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// CloudWatch detailed (1-minute) monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
}

/// AMI families joiner knows how to bootstrap.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AmiFamily {
    /// Amazon Linux 2 with bootstrap.sh.
    #[serde(rename = "AL2")]
    Al2,
    /// Amazon Linux 2023 with nodeadm.
    #[serde(rename = "AL2023")]
    Al2023,
    /// Bottlerocket with TOML settings.
    Bottlerocket,
    /// The user's AMI and user data, unmodified.
    Custom,
}

impl AmiFamily {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AmiFamily::Al2 => "AL2",
            AmiFamily::Al2023 => "AL2023",
            AmiFamily::Bottlerocket => "Bottlerocket",
            AmiFamily::Custom => "Custom",
        }
    }
}

/// `spec.metadataOptions`. Defaults are the secure ones: endpoint on, IPv6 endpoint off, one
/// hop (pods cannot reach the node's credentials through the metadata service), tokens required.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// `enabled` or `disabled`.
    #[serde(default = "enabled")]
    #[schemars(regex(pattern = r"^(enabled|disabled)$"))]
    pub http_endpoint: String,
    /// `enabled` or `disabled`.
    #[serde(default = "disabled", rename = "httpProtocolIPv6")]
    #[schemars(regex(pattern = r"^(enabled|disabled)$"))]
    pub http_protocol_ipv6: String,
    /// 1–64.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: i64,
    /// `required` (IMDSv2) or `optional`.
    #[serde(default = "required")]
    #[schemars(regex(pattern = r"^(required|optional)$"))]
    pub http_tokens: String,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            http_endpoint: enabled(),
            http_protocol_ipv6: disabled(),
            http_put_response_hop_limit: one(),
            http_tokens: required(),
        }
    }
}

fn enabled() -> String {
    "enabled".to_string()
}
fn disabled() -> String {
    "disabled".to_string()
}
fn required() -> String {
    "required".to_string()
}
fn one() -> i64 {
    1
}

/// One entry of `spec.blockDeviceMappings`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// Device name, e.g. `/dev/xvda`.
    #[schemars(length(min = 1))]
    pub device_name: String,
    /// The EBS volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Marks the volume pods' ephemeral storage lives on (Karpenter's `rootVolume`); without
    /// a mark it is `/dev/xvda`, or Bottlerocket's data volume `/dev/xvdb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

/// An EBS volume of a block device mapping.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::spec_rules::ebs_rules()))]
pub struct BlockDevice {
    /// Size as a quantity ("20Gi"); 1Gi–64Ti.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<Quantity>,
    /// standard, io1, io2, gp2, gp3, sc1 or st1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(standard|io1|io2|gp2|gp3|sc1|st1)$"))]
    pub volume_type: Option<String>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub iops: Option<i64>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub throughput: Option<i64>,
    /// Encrypt the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// KMS key for encryption.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Snapshot to create the volume from.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Delete with the instance (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
}

/// `status` of a [`NodeTemplate`]: what the selectors resolved to at the last reconcile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplateStatus {
    /// Subnets the selector matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResolvedSubnet>,
    /// Security groups the selector matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<ResolvedSecurityGroup>,
    /// AMIs in use, with the requirements (architecture, GPU, ...) each one serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<ResolvedAmi>,
    /// Ready and the like.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A resolved subnet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    /// Subnet ID.
    pub id: String,
    /// Availability zone.
    pub zone: String,
}

/// A resolved security group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSecurityGroup {
    /// Security group ID.
    pub id: String,
    /// Group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved AMI.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedAmi {
    /// AMI ID.
    pub id: String,
    /// AMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Instance types this AMI serves (e.g. `kubernetes.io/arch In [arm64]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<NodeSelectorRequirement>,
}

impl NodeTemplate {
    /// metadata.name, empty when missing.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The size, in bytes as EC2 creates it (whole GiB), of the volume pods' ephemeral storage
    /// lives on, when the template's own mappings size it; `None` leaves the family's default
    /// (20 GiB) to the catalog.
    pub fn ephemeral_volume_bytes(&self) -> Option<i64> {
        const GIB: i64 = 1 << 30;
        let mappings = &self.spec.block_device_mappings;
        let default_device = match self.ami_family() {
            AmiFamily::Bottlerocket => "/dev/xvdb",
            _ => "/dev/xvda",
        };
        let volume = mappings
            .iter()
            .find(|m| m.root_volume == Some(true))
            .or_else(|| mappings.iter().find(|m| m.device_name == default_device))?;
        let size = volume.ebs.as_ref()?.volume_size.as_ref()?;
        let bytes = joiner_core::quantity::parse_units(&size.0).ok()?;
        let gib = u64::try_from(bytes)
            .ok()
            .filter(|b| *b > 0)?
            .div_ceil(GIB as u64);
        i64::try_from(gib).ok()?.checked_mul(GIB)
    }

    /// The AMI family, AL2023 when omitted: AL2 is past its end of support, and AL2023 is
    /// the family the embedded allocatable data was measured on.
    pub fn ami_family(&self) -> AmiFamily {
        self.spec.ami_family.unwrap_or(AmiFamily::Al2023)
    }
}
