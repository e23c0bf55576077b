//! [`LaunchTemplateSpec`]: the settings of one launch template, and [`build`], which resolves
//! them from a NodeTemplate, a Provisioner, an instance type, the cluster and an AMI.
//!
//! Defaults (when the NodeTemplate says nothing):
//! - metadata service: IMDSv2 required, hop limit 1, IPv6 endpoint off, instance tags in the
//!   metadata service off (EC2 refuses them with `/` in tag keys, and joiner's tags have one);
//! - disks: AL2, AL2023 and Custom get a 20 GiB gp3 encrypted root on `/dev/xvda`;
//!   Bottlerocket gets its 4 GiB OS volume on `/dev/xvda` and a 20 GiB data volume on
//!   `/dev/xvdb`, both gp3 and encrypted. A NodeTemplate's own mappings replace these whole;
//! - tags: the NodeTemplate's, then `kubernetes.io/cluster/<cluster>=owned`,
//!   `joiner.sh/cluster=<cluster>` and `joiner.sh/provisioner-name=<provisioner>` (these win
//!   over a template tag of the same key: ownership is what garbage collection and the cluster's cloud controller go by).
//!   `joiner.sh/nodeclaim` is per instance and belongs on CreateFleet's tag specifications,
//!   not on a template shared by many claims.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use joiner_apis::{AmiFamily, BlockDeviceMapping, NodeTemplate, Provisioner};
use joiner_core::WarmState;
use serde::Serialize;
use sha2::{Digest, Sha256};
use thiserror::Error;

use super::instance::{max_pods, InstanceFacts};
use crate::allocatable::DEFAULT_ROOT_VOLUME_GIB;
use crate::userdata::{self, ClusterInfo, NodeBootstrap, UserData, UserDataError};

/// Every joiner launch template is named `joiner/<cluster>/<hash>`.
pub const NAME_PREFIX: &str = "joiner";

/// Hex digits of the sha256 kept in a name: 64 bits, so two different settings sharing a name
/// in one cluster is not a practical concern.
const HASH_HEX_DIGITS: usize = 16;

/// Bottlerocket's OS volume.
const BOTTLEROCKET_OS_GIB: u64 = 4;

/// The settings of one launch template. Field order is the canonical serialization hashed into
/// the name; a new field changes every name, which is intended (the settings changed).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct LaunchTemplateSpec {
    /// Cluster the nodes join (also part of the name).
    pub cluster_name: String,
    /// AMI ID.
    pub image_id: String,
    /// IAM instance profile name.
    pub instance_profile: Option<String>,
    /// Security group IDs, sorted.
    pub security_group_ids: Vec<String>,
    /// User data, base64-encoded.
    pub user_data: String,
    /// EBS volumes.
    pub block_device_mappings: Vec<BlockDeviceSpec>,
    /// Instance metadata service settings.
    pub metadata_options: MetadataOptionsSpec,
    /// CloudWatch detailed monitoring.
    pub detailed_monitoring: bool,
    /// Tags of the template and of the instances and volumes launched from it.
    pub tags: BTreeMap<String, String>,
    /// The max-pods baked into the user data (kept here so it is visible and hashed even for
    /// Custom user data).
    pub max_pods: u32,
    /// Launched into a warm pool (the user data holds the node back on its first boot).
    pub warm_pool: bool,
    /// Hibernation configured (a `Hibernated` warm-pool member): EC2 hibernates only
    /// instances launched with it. Left out of the name's hash when off, so templates without
    /// it keep their names.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hibernation: bool,
}

impl LaunchTemplateSpec {
    /// `joiner/<cluster>/<first 16 hex digits of sha256(canonical settings)>`: equal settings
    /// give equal names, any change a new one.
    pub fn name(&self) -> String {
        // Serializing plain strings, integers, options and sorted maps cannot fail; should it
        // ever, the Debug form is just as canonical.
        let canonical = serde_json::to_vec(self).unwrap_or_else(|_| format!("{self:?}").into());
        let digest = Sha256::digest(&canonical);
        let mut hex = String::with_capacity(HASH_HEX_DIGITS);
        for byte in digest.iter().take(HASH_HEX_DIGITS / 2) {
            let _ = write!(hex, "{byte:02x}");
        }
        format!("{NAME_PREFIX}/{}/{hex}", self.cluster_name)
    }
}

/// One EBS block device mapping, in EC2's units (GiB).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct BlockDeviceSpec {
    /// `/dev/xvda`, ...
    pub device_name: String,
    /// Size in GiB (rounded up); `None` takes the snapshot's size.
    pub volume_size_gib: Option<u64>,
    /// gp3, io2, ...
    pub volume_type: Option<String>,
    /// Provisioned IOPS.
    pub iops: Option<i64>,
    /// Throughput in MiB/s.
    pub throughput: Option<i64>,
    /// Encrypted.
    pub encrypted: Option<bool>,
    /// KMS key.
    pub kms_key_id: Option<String>,
    /// Source snapshot.
    pub snapshot_id: Option<String>,
    /// Delete with the instance.
    pub delete_on_termination: Option<bool>,
}

impl BlockDeviceSpec {
    /// An encrypted gp3 volume deleted with the instance: joiner's default disk.
    pub fn default_gp3(device_name: &str, gib: u64) -> BlockDeviceSpec {
        BlockDeviceSpec {
            device_name: device_name.to_string(),
            volume_size_gib: Some(gib),
            volume_type: Some("gp3".to_string()),
            iops: None,
            throughput: None,
            encrypted: Some(true),
            kms_key_id: None,
            snapshot_id: None,
            delete_on_termination: Some(true),
        }
    }
}

/// Instance metadata service options, as EC2 spells them.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct MetadataOptionsSpec {
    /// `enabled` or `disabled`.
    pub http_endpoint: String,
    /// `enabled` or `disabled`.
    pub http_protocol_ipv6: String,
    /// 1–64; 1 keeps pods from reaching the node's credentials.
    pub http_put_response_hop_limit: i64,
    /// `required` (IMDSv2) or `optional`.
    pub http_tokens: String,
    /// Always `disabled`: EC2 refuses launches with it enabled when a tag key contains `/`.
    pub instance_metadata_tags: String,
}

/// Why a launch template could not be resolved.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaunchTemplateError {
    /// The user data could not be produced.
    #[error(transparent)]
    UserData(#[from] UserDataError),
    /// A NodeTemplate field with a value EC2 cannot take.
    #[error("NodeTemplate {node_template:?}: {field}: {reason}")]
    Invalid {
        /// The NodeTemplate.
        node_template: String,
        /// Field path.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// The inputs of one launch template.
#[derive(Clone, Copy, Debug)]
pub struct LaunchContext<'a> {
    /// The cluster nodes join.
    pub cluster: &'a ClusterInfo,
    /// The NodeTemplate (AMI family, user data, disks, metadata options, tags).
    pub node_template: &'a NodeTemplate,
    /// The Provisioner (labels, taints, kubelet settings).
    pub provisioner: &'a Provisioner,
    /// The instance type (max-pods, vCPUs).
    pub instance: &'a InstanceFacts,
    /// The AMI, already resolved for the type's architecture and variant.
    pub image_id: &'a str,
    /// Security group IDs from the NodeTemplate's selector.
    pub security_group_ids: &'a [String],
    /// Instance profile used when the NodeTemplate names none.
    pub default_instance_profile: Option<&'a str>,
    /// Launch into the warm pool, to wait in this state.
    pub warm_pool: Option<WarmState>,
}

/// A resolved template: its settings, the user data decoded (for people), and the bootstrap
/// facts it was made from.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedLaunchTemplate {
    /// The settings; `spec.name()` is the template name.
    pub spec: LaunchTemplateSpec,
    /// The user data, decoded and encoded.
    pub user_data: UserData,
    /// What the user data says.
    pub bootstrap: NodeBootstrap,
}

/// Resolves the launch template for `ctx`. max-pods is the instance's ENI value unless the
/// Provisioner's kubelet settings override it ([`max_pods`]).
pub fn build(ctx: &LaunchContext<'_>) -> Result<ResolvedLaunchTemplate, LaunchTemplateError> {
    let nt = ctx.node_template;
    let prov = ctx.provisioner;
    let family = nt.ami_family();
    let pods = max_pods(
        ctx.instance.eni_max_pods,
        ctx.instance.vcpus,
        prov.spec.kubelet_configuration.as_ref(),
    );
    let mut bootstrap = NodeBootstrap::for_provisioner(ctx.cluster.clone(), prov, pods);
    bootstrap.warm_pool = ctx.warm_pool;
    if ctx.warm_pool.is_some() {
        bootstrap.pre_pull_images = prov
            .spec
            .warm_pool
            .as_ref()
            .map(|w| w.pre_pull_images.clone())
            .unwrap_or_default();
    }
    let user_data = userdata::render(family, nt.name(), nt.spec.user_data.as_deref(), &bootstrap)?;

    let m = &nt.spec.metadata_options;
    let metadata_options = MetadataOptionsSpec {
        http_endpoint: m.http_endpoint.clone(),
        http_protocol_ipv6: m.http_protocol_ipv6.clone(),
        http_put_response_hop_limit: m.http_put_response_hop_limit,
        http_tokens: m.http_tokens.clone(),
        instance_metadata_tags: "disabled".to_string(),
    };

    // The NodeTemplate's validation and CRD refuse these; refused again here, where a tag
    // would reach EC2, so no path makes another cluster's joiner own this node.
    if let Some(key) = nt
        .spec
        .tags
        .keys()
        .find(|k| joiner_apis::tag_rules::reserved_tag(k).is_some())
    {
        return Err(LaunchTemplateError::Invalid {
            node_template: nt.name().to_string(),
            field: joiner_apis::map_field("spec.tags", key),
            reason: joiner_apis::tag_rules::refusal(key),
        });
    }
    let mut tags = nt.spec.tags.clone();
    crate::tags::insert_cluster_tags(&mut tags, &ctx.cluster.name);
    tags.insert(
        joiner_core::labels::PROVISIONER_NAME.to_string(),
        prov.name().to_string(),
    );

    let mut security_group_ids = ctx.security_group_ids.to_vec();
    security_group_ids.sort();
    security_group_ids.dedup();

    let spec = LaunchTemplateSpec {
        cluster_name: ctx.cluster.name.clone(),
        image_id: ctx.image_id.to_string(),
        instance_profile: nt
            .spec
            .instance_profile
            .clone()
            .or_else(|| ctx.default_instance_profile.map(str::to_string)),
        security_group_ids,
        user_data: user_data.base64.clone(),
        block_device_mappings: block_devices(nt, family, hibernation_memory_gib(ctx)?)?,
        metadata_options,
        detailed_monitoring: nt.spec.detailed_monitoring.unwrap_or(false),
        tags,
        max_pods: pods,
        warm_pool: ctx.warm_pool.is_some(),
        hibernation: ctx.warm_pool == Some(WarmState::Hibernated),
    };
    Ok(ResolvedLaunchTemplate {
        spec,
        user_data,
        bootstrap,
    })
}

/// For a `Hibernated` member, the memory its root volume must hold, in whole GiB (EC2 writes
/// the RAM there); `None` for every other launch.
fn hibernation_memory_gib(ctx: &LaunchContext<'_>) -> Result<Option<u64>, LaunchTemplateError> {
    if ctx.warm_pool != Some(WarmState::Hibernated) {
        return Ok(None);
    }
    let mib = ctx
        .instance
        .memory_mib
        .ok_or_else(|| LaunchTemplateError::Invalid {
            node_template: ctx.node_template.name().to_string(),
            field: "spec.blockDeviceMappings".to_string(),
            reason: format!(
                "the memory of {} is unknown, so its root volume cannot be sized for hibernation",
                ctx.instance.name
            ),
        })?;
    Ok(Some(mib.div_ceil(1024)))
}

/// The NodeTemplate's mappings, or the family's defaults when it has none. With
/// `hibernation_gib`, the root volume (`/dev/xvda`, else the first) grows by that much and is
/// encrypted: hibernation needs room for the memory on an encrypted root.
fn block_devices(
    nt: &NodeTemplate,
    family: AmiFamily,
    hibernation_gib: Option<u64>,
) -> Result<Vec<BlockDeviceSpec>, LaunchTemplateError> {
    let mut devices = configured_block_devices(nt, family)?;
    if let Some(extra) = hibernation_gib {
        let root = devices
            .iter()
            .position(|d| d.device_name == ROOT_DEVICE)
            .unwrap_or(0);
        if let Some(d) = devices.get_mut(root) {
            let base = d.volume_size_gib.unwrap_or(DEFAULT_ROOT_VOLUME_GIB);
            d.volume_size_gib = Some(base + extra);
            d.encrypted = Some(true);
        }
    }
    Ok(devices)
}

/// The root device of the Linux families joiner writes user data for.
const ROOT_DEVICE: &str = "/dev/xvda";

/// The NodeTemplate's mappings, or the family's defaults when it has none.
fn configured_block_devices(
    nt: &NodeTemplate,
    family: AmiFamily,
) -> Result<Vec<BlockDeviceSpec>, LaunchTemplateError> {
    if nt.spec.block_device_mappings.is_empty() {
        return Ok(match family {
            AmiFamily::Bottlerocket => vec![
                BlockDeviceSpec::default_gp3("/dev/xvda", BOTTLEROCKET_OS_GIB),
                BlockDeviceSpec::default_gp3("/dev/xvdb", DEFAULT_ROOT_VOLUME_GIB),
            ],
            AmiFamily::Al2 | AmiFamily::Al2023 | AmiFamily::Custom => {
                vec![BlockDeviceSpec::default_gp3(
                    "/dev/xvda",
                    DEFAULT_ROOT_VOLUME_GIB,
                )]
            }
        });
    }
    nt.spec
        .block_device_mappings
        .iter()
        .enumerate()
        .map(|(i, m)| block_device(nt.name(), i, m))
        .collect()
}

fn block_device(
    node_template: &str,
    index: usize,
    m: &BlockDeviceMapping,
) -> Result<BlockDeviceSpec, LaunchTemplateError> {
    let ebs = m.ebs.clone().unwrap_or_default();
    let volume_size_gib = match &ebs.volume_size {
        None => None,
        Some(q) => {
            let field = format!("spec.blockDeviceMappings[{index}].ebs.volumeSize");
            let invalid = |reason: String| LaunchTemplateError::Invalid {
                node_template: node_template.to_string(),
                field: field.clone(),
                reason,
            };
            let bytes = joiner_core::quantity::parse_units(&q.0)
                .map_err(|e| invalid(format!("invalid quantity {:?}: {e}", q.0)))?;
            let gib = u64::try_from(bytes)
                .ok()
                .filter(|b| *b > 0)
                .ok_or_else(|| invalid(format!("{:?} is not a positive size", q.0)))?
                .div_ceil(1 << 30);
            Some(gib)
        }
    };
    Ok(BlockDeviceSpec {
        device_name: m.device_name.clone(),
        volume_size_gib,
        volume_type: ebs.volume_type,
        iops: ebs.iops,
        throughput: ebs.throughput,
        encrypted: ebs.encrypted,
        kms_key_id: ebs.kms_key_id,
        snapshot_id: ebs.snapshot_id,
        delete_on_termination: ebs.delete_on_termination,
    })
}

#[cfg(test)]
mod tests;
