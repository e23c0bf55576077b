//! Launch templates: found or created by name, reused, and deleted when no longer wanted.
//!
//! The name is a stable hash of the template's content (computed by the caller), so the same
//! settings always map to the same template and a restart finds the ones it made. Templates are
//! tagged with the cluster's ownership tag and [`tags::MANAGED_BY`]; cleanup deletes only
//! templates carrying both, so hand-made or other tools' templates are never touched.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{
    Filter, LaunchTemplate, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6, LaunchTemplateInstanceMetadataTagsState,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest,
    RequestLaunchTemplateData, ResourceType, TagSpecification, VolumeType,
};

use super::spec::LaunchTemplateSpec;

use crate::api_error::api_error;
use crate::discovery::tag_map;
use crate::tags::{self, MANAGED_BY, MANAGED_BY_VALUE};
use crate::AwsError;

/// The error code of a CreateLaunchTemplate that lost a race with another creator.
const ALREADY_EXISTS: &str = "InvalidLaunchTemplateName.AlreadyExistsException";

/// A launch template CreateFleet can use.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LaunchTemplateRef {
    /// `lt-...`.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// The name prefix of this cluster's templates: `joiner/<cluster>/`. Callers build names as
/// `name_prefix(cluster) + hash`, so templates of two clusters in one account never collide.
pub fn name_prefix(cluster: &str) -> String {
    format!("{}/{cluster}/", super::spec::NAME_PREFIX)
}

/// The EC2 form of a [`LaunchTemplateSpec`]: AMI, instance profile, security groups, user data,
/// EBS volumes, metadata options (IMDSv2 by default), monitoring, and the spec's tags on the
/// instances and volumes launched from it.
pub fn request_data(spec: &LaunchTemplateSpec) -> RequestLaunchTemplateData {
    let ec2_tags = tags::to_ec2(&spec.tags);
    let tag_spec = |resource: ResourceType| {
        LaunchTemplateTagSpecificationRequest::builder()
            .resource_type(resource)
            .set_tags(Some(ec2_tags.clone()))
            .build()
    };
    let devices = spec
        .block_device_mappings
        .iter()
        .map(|d| {
            let ebs = LaunchTemplateEbsBlockDeviceRequest::builder()
                .set_volume_size(
                    d.volume_size_gib
                        .map(|g| i32::try_from(g).unwrap_or(i32::MAX)),
                )
                .set_volume_type(d.volume_type.as_deref().map(VolumeType::from))
                .set_iops(d.iops.map(|v| i32::try_from(v).unwrap_or(i32::MAX)))
                .set_throughput(d.throughput.map(|v| i32::try_from(v).unwrap_or(i32::MAX)))
                .set_encrypted(d.encrypted)
                .set_kms_key_id(d.kms_key_id.clone())
                .set_snapshot_id(d.snapshot_id.clone())
                .set_delete_on_termination(d.delete_on_termination)
                .build();
            LaunchTemplateBlockDeviceMappingRequest::builder()
                .device_name(&d.device_name)
                .ebs(ebs)
                .build()
        })
        .collect();
    let m = &spec.metadata_options;
    let metadata = LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
            m.http_endpoint.as_str(),
        ))
        .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
            m.http_protocol_ipv6.as_str(),
        ))
        .http_put_response_hop_limit(i32::try_from(m.http_put_response_hop_limit).unwrap_or(1))
        .http_tokens(LaunchTemplateHttpTokensState::from(m.http_tokens.as_str()))
        .instance_metadata_tags(LaunchTemplateInstanceMetadataTagsState::from(
            m.instance_metadata_tags.as_str(),
        ))
        .build();
    RequestLaunchTemplateData::builder()
        .image_id(&spec.image_id)
        .set_iam_instance_profile(spec.instance_profile.as_ref().map(|name| {
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(name)
                .build()
        }))
        .set_security_group_ids(Some(spec.security_group_ids.clone()))
        .user_data(&spec.user_data)
        .set_block_device_mappings(Some(devices))
        .metadata_options(metadata)
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(spec.detailed_monitoring)
                .build(),
        )
        .set_hibernation_options(spec.hibernation.then(|| {
            aws_sdk_ec2::types::LaunchTemplateHibernationOptionsRequest::builder()
                .configured(true)
                .build()
        }))
        .tag_specifications(tag_spec(ResourceType::Instance))
        .tag_specifications(tag_spec(ResourceType::Volume))
        .build()
}

/// Finds, creates and deletes the launch templates of one cluster.
#[derive(Debug)]
pub struct LaunchTemplates {
    ec2: aws_sdk_ec2::Client,
    cluster: String,
    known: Mutex<HashMap<String, LaunchTemplateRef>>,
    /// When each template was last ensured (or, for one this process never used, first seen
    /// by [`LaunchTemplates::delete_stale`]).
    used: Mutex<HashMap<String, Instant>>,
}

impl LaunchTemplates {
    /// The templates of `cluster`.
    pub fn new(ec2: aws_sdk_ec2::Client, cluster: &str) -> Self {
        LaunchTemplates {
            ec2,
            cluster: cluster.to_string(),
            known: Mutex::new(HashMap::new()),
            used: Mutex::new(HashMap::new()),
        }
    }

    /// The template named `name`: from memory, else from EC2, else created with `data` and
    /// `tags` plus the ownership tags. Content is not compared: the name is the content's hash.
    /// A concurrent creation of the same name (`AlreadyExistsException`) is treated as reuse.
    pub async fn ensure(
        &self,
        name: &str,
        data: RequestLaunchTemplateData,
        tags: &BTreeMap<String, String>,
    ) -> Result<LaunchTemplateRef, AwsError> {
        self.used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), Instant::now());
        if let Some(hit) = self.lock().get(name) {
            return Ok(hit.clone());
        }
        if let Some(found) = self.find(name).await? {
            self.remember(&found);
            return Ok(found);
        }
        let mut all_tags = tags.clone();
        tags::insert_cluster_tags(&mut all_tags, &self.cluster);
        all_tags.insert(MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string());
        let created = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(data)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(tags::to_ec2(&all_tags)))
                    .build(),
            )
            .send()
            .await;
        let found = match created {
            Ok(out) => out.launch_template().and_then(template_ref),
            Err(e) => {
                let err = api_error("ec2:CreateLaunchTemplate", e);
                match &err {
                    AwsError::Api { code, .. } if code == ALREADY_EXISTS => self.find(name).await?,
                    _ => return Err(err),
                }
            }
        };
        let found = found.ok_or_else(|| AwsError::Api {
            operation: "ec2:CreateLaunchTemplate",
            code: "MissingLaunchTemplate".to_string(),
            message: format!("no launch template `{name}` after creating it"),
        })?;
        tracing::info!(name, id = %found.id, "launch template created");
        self.remember(&found);
        Ok(found)
    }

    /// The template of `spec`: [`LaunchTemplates::ensure`] under `spec.name()` with the
    /// settings of [`request_data`] and the spec's tags.
    pub async fn ensure_spec(
        &self,
        spec: &LaunchTemplateSpec,
    ) -> Result<LaunchTemplateRef, AwsError> {
        self.ensure(&spec.name(), request_data(spec), &spec.tags)
            .await
    }

    /// Forgets `name`, e.g. after CreateFleet said it does not exist (deleted behind our back).
    pub fn invalidate(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Deletes this cluster's joiner templates whose name is not in `keep`; returns the names
    /// deleted. A template is deleted only if it carries joiner's ownership tags
    /// (`kubernetes.io/cluster/<cluster>=owned` and `joiner.sh/provisioner-name`) and
    /// `joiner.sh/managed-by=joiner` (checked again on the answer, not only in the filter). A
    /// template that is already gone counts as deleted.
    pub async fn delete_unused(&self, keep: &HashSet<String>) -> Result<Vec<String>, AwsError> {
        let owned = self.owned().await?;
        self.delete_except(owned, keep).await
    }

    /// Deletes this cluster's joiner templates no launch has used for `ttl` (a template this
    /// process never used counts from when it first saw it, so a new leader keeps what the
    /// old one used for at least `ttl`); returns the names deleted. Settings that change (a
    /// new AMI, an edited NodeTemplate) leave templates nothing launches with any more: this
    /// keeps them from piling up to the account's limit.
    pub async fn delete_stale(&self, ttl: Duration) -> Result<Vec<String>, AwsError> {
        let owned = self.owned().await?;
        let now = Instant::now();
        let keep: HashSet<String> = {
            let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
            used.retain(|name, _| owned.iter().any(|lt| &lt.name == name));
            owned
                .iter()
                .filter(|lt| now.duration_since(*used.entry(lt.name.clone()).or_insert(now)) < ttl)
                .map(|lt| lt.name.clone())
                .collect()
        };
        self.delete_except(owned, &keep).await
    }

    /// This cluster's joiner templates (ownership checked again on the answer).
    async fn owned(&self) -> Result<Vec<LaunchTemplateRef>, AwsError> {
        let mut owned = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .ec2
                .describe_launch_templates()
                .set_filters(Some(tags::owned_filters(&self.cluster)))
                .filters(
                    Filter::builder()
                        .name(format!("tag:{MANAGED_BY}"))
                        .values(MANAGED_BY_VALUE)
                        .build(),
                )
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| api_error("ec2:DescribeLaunchTemplates", e))?;
            for lt in page.launch_templates() {
                let t = tag_map(lt.tags());
                let ours = tags::is_owned(&t, &self.cluster)
                    && t.get(MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE);
                if let (true, Some(r)) = (ours, template_ref(lt)) {
                    owned.push(r);
                }
            }
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        Ok(owned)
    }

    /// Deletes the templates of `owned` whose name is not in `keep`.
    async fn delete_except(
        &self,
        owned: Vec<LaunchTemplateRef>,
        keep: &HashSet<String>,
    ) -> Result<Vec<String>, AwsError> {
        let mut deleted = Vec::new();
        for lt in owned.into_iter().filter(|lt| !keep.contains(&lt.name)) {
            match self
                .ec2
                .delete_launch_template()
                .launch_template_id(&lt.id)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) => {
                    let err = api_error("ec2:DeleteLaunchTemplate", e);
                    let gone = matches!(&err, AwsError::Api { code, .. }
                        if code.starts_with("InvalidLaunchTemplateId.NotFound")
                            || code.starts_with("InvalidLaunchTemplateName.NotFound"));
                    if !gone {
                        return Err(err);
                    }
                }
            }
            tracing::info!(name = %lt.name, id = %lt.id, "unused launch template deleted");
            self.invalidate(&lt.name);
            deleted.push(lt.name);
        }
        deleted.sort();
        Ok(deleted)
    }

    /// Looks the name up with a filter (a missing name is an empty answer, not an error).
    async fn find(&self, name: &str) -> Result<Option<LaunchTemplateRef>, AwsError> {
        let out = self
            .ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name("launch-template-name")
                    .values(name)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| api_error("ec2:DescribeLaunchTemplates", e))?;
        Ok(out
            .launch_templates()
            .iter()
            .filter(|lt| lt.launch_template_name() == Some(name))
            .find_map(template_ref))
    }

    fn remember(&self, r: &LaunchTemplateRef) {
        self.lock().insert(r.name.clone(), r.clone());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, LaunchTemplateRef>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn template_ref(lt: &LaunchTemplate) -> Option<LaunchTemplateRef> {
    Some(LaunchTemplateRef {
        id: lt.launch_template_id()?.to_string(),
        name: lt.launch_template_name()?.to_string(),
    })
}
