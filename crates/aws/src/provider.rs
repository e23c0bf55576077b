//! [`AwsCloudProvider`]: the [`CloudProvider`] the controller drives, assembled from the
//! catalog, discovery, AMI resolution, launch templates, CreateFleet and guarded instances.
//!
//! A launch template fixes the AMI (so the architecture and accelerator variant) and the
//! max-pods baked into the user data, so the candidates are grouped by those three and each
//! group gets its own template, all in one CreateFleet (one LaunchTemplateConfig each): EC2 can
//! fall back from the cheapest type to any candidate. The cheapest candidate's group must
//! resolve; a later group whose AMI or template cannot be made is left out of this launch
//! (logged), since the claim can still launch without it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use joiner_apis::{
    NodeTemplate, NodeTemplateResolver, ObjectLookup, Provisioner, ResolveError, Resolved,
};
use joiner_core::{
    CapacityType, CloudError, CloudErrorKind, CloudProvider, InstanceType, LaunchRequest,
    LaunchedNode,
};
use thiserror::Error;

use crate::allocatable::Arch;
use crate::ami::{AmiError, AmiResolver, AmiVariant};
use crate::catalog::LiveCatalog;
use crate::clock;
use crate::discovery::{DiscoveryError, SecurityGroupDiscovery, SubnetDiscovery};
use crate::fleet::{Fleet, FleetRequest, LaunchError, TemplateCandidates};
use crate::instances::{Instance, Instances, TerminateRefusal};
use crate::launch_template::{
    build, max_pods, InstanceFacts, LaunchContext, LaunchTemplateError, LaunchTemplateRef,
    LaunchTemplates,
};
use crate::resolve::{self, Lookups, ResolvedNodeTemplate};
use crate::tags;
use crate::unavailable::{OfferingKey, UnavailableOfferings};
use crate::userdata::{bottlerocket, ClusterInfo};
use crate::warm_commands::WarmCommands;
use crate::warm_pool::{WarmError, WarmMembers, WarmRefusal};
use crate::{AwsClients, AwsError, CatalogError};

/// What the provider needs to know of its cluster and environment.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// The cluster nodes join (name, endpoint, CA, service CIDR).
    pub cluster: ClusterInfo,
    /// Kubernetes minor version (`1.31`): part of the default AMIs' SSM parameter path.
    pub kubernetes_version: String,
    /// Where the AMI parameters are read (`/aws/service`, or a mirror's prefix).
    pub ssm_prefix: String,
    /// Instance profile of nodes whose NodeTemplate names none.
    pub default_instance_profile: Option<String>,
}

/// Why a provider call failed. Each variant names the object (claim, Provisioner, NodeTemplate,
/// instance) so the NodeClaim condition tells the user what to fix.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// No Provisioner of that name is known (not yet seen by the reflector, or deleted).
    #[error("Provisioner `{provisioner}` not found")]
    UnknownProvisioner {
        /// The name asked for.
        provisioner: String,
    },
    /// The Provisioner has no `spec.providerRef`, so no NodeTemplate to launch with.
    #[error("Provisioner `{provisioner}`: spec.providerRef is not set")]
    NoProviderRef {
        /// The Provisioner.
        provisioner: String,
    },
    /// The Provisioner's `spec.providerRef.name` names no known NodeTemplate.
    #[error("Provisioner `{provisioner}`: spec.providerRef.name: NodeTemplate `{node_template}` not found")]
    UnknownNodeTemplate {
        /// The Provisioner.
        provisioner: String,
        /// The missing NodeTemplate.
        node_template: String,
    },
    /// None of the candidates is a type the catalog knows with launch facts.
    #[error(
        "claim `{claim}`: none of the candidate instance types [{candidates}] is in the catalog"
    )]
    NoKnownCandidate {
        /// The NodeClaim.
        claim: String,
        /// The candidates, comma-separated.
        candidates: String,
    },
    /// No discovered subnet is in a zone the claim allows.
    #[error("claim `{claim}`: NodeTemplate `{node_template}` has no subnet in the allowed zones [{zones}]")]
    NoSubnetInZones {
        /// The NodeClaim.
        claim: String,
        /// The NodeTemplate.
        node_template: String,
        /// The allowed zones, comma-separated.
        zones: String,
    },
    /// The NodeTemplate's amiSelector selects no image of the architecture needed.
    #[error("NodeTemplate `{node_template}`: spec.amiSelector selects no {arch} image")]
    NoAmiForArch {
        /// The NodeTemplate.
        node_template: String,
        /// The architecture needed.
        arch: &'static str,
    },
    /// `spec.subnetSelector` selects no subnet (found by resolving the NodeTemplate).
    #[error("NodeTemplate `{node_template}`: spec.subnetSelector {selector}: {detail}")]
    NoSubnets {
        /// The NodeTemplate.
        node_template: String,
        /// The selector, as `{key: value, ...}`.
        selector: String,
        /// Why nothing was selected.
        detail: String,
    },
    /// `spec.securityGroupSelector` selects no security group.
    #[error("NodeTemplate `{node_template}`: spec.securityGroupSelector {selector}: {detail}")]
    NoSecurityGroups {
        /// The NodeTemplate.
        node_template: String,
        /// The selector, as `{key: value, ...}`.
        selector: String,
        /// Why nothing was selected.
        detail: String,
    },
    /// Without an amiSelector, none of the family's default AMIs the catalog needs resolved.
    #[error("NodeTemplate `{node_template}`: spec.amiFamily {family}: no default AMI: {detail}")]
    NoDefaultAmi {
        /// The NodeTemplate.
        node_template: String,
        /// The AMI family.
        family: &'static str,
        /// Why, per AMI looked for (missing SSM parameters, ...).
        detail: String,
    },
    /// `spec.amiSelector` selects no image.
    #[error("NodeTemplate `{node_template}`: spec.amiSelector {selector}: {detail}")]
    NoAmiSelected {
        /// The NodeTemplate.
        node_template: String,
        /// The selector, as `{key: value, ...}`.
        selector: String,
        /// Why nothing was selected.
        detail: String,
    },
    /// Subnet or security-group discovery failed.
    #[error(transparent)]
    Discovery(Box<DiscoveryError>),
    /// AMI resolution failed.
    #[error("NodeTemplate `{node_template}`: {source}")]
    Ami {
        /// The NodeTemplate.
        node_template: String,
        /// Why.
        source: Box<AmiError>,
    },
    /// The launch template could not be built.
    #[error(transparent)]
    LaunchTemplate(#[from] LaunchTemplateError),
    /// CreateFleet gave no instance; [`LaunchError::InsufficientCapacity`] is the capacity case.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The catalog could not be read.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// Terminate was refused by the ownership guard (or the instance is unknown).
    #[error(transparent)]
    TerminateRefused(#[from] TerminateRefusal),
    /// A warm-pool start or stop was refused by its guard (or the instance is unknown).
    #[error(transparent)]
    WarmRefused(#[from] WarmRefusal),
    /// Another AWS call failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// A warm-pool member was started for the claim but could not be released from the pool
    /// (its warm-pool tag is still on): the instance is the claim's, and the take is finished
    /// by the claim's next launch, never replaced by a second instance.
    #[error("warm-pool member {instance_id} started for the claim but not released from the pool: {source}")]
    TakeUnfinished {
        /// The member's instance.
        instance_id: String,
        /// Why the release failed.
        #[source]
        source: Box<ProviderError>,
    },
}

impl From<WarmError> for ProviderError {
    fn from(err: WarmError) -> Self {
        match err {
            WarmError::Refused(r) => ProviderError::WarmRefused(r),
            WarmError::Aws(e) => ProviderError::Aws(e),
        }
    }
}

impl From<DiscoveryError> for ProviderError {
    fn from(err: DiscoveryError) -> Self {
        ProviderError::Discovery(Box::new(err))
    }
}

/// Launch settings shared by a group of candidates: architecture, AMI variant, max-pods.
type GroupKey = (Arch, AmiVariant, u32);

/// How long a launch template may go unused before it is deleted: long enough that a template
/// is never deleted between two launches of a steady workload, short enough that templates of
/// old settings (a replaced AMI, an edited NodeTemplate) do not pile up.
pub const TEMPLATE_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// `aws:///<zone>/<instance id>`: the providerID the AWS cloud controller puts on Nodes, so a
/// Node registering from this instance is recognised as the claim's.
pub fn aws_provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The AWS [`CloudProvider`]. It reads a claim's Provisioner and NodeTemplate from the
/// [`ObjectLookup`] it was built with (the controller's reflector stores), so a launch sees the
/// current settings without an API call of its own.
pub struct AwsCloudProvider {
    config: ProviderConfig,
    catalog: Arc<LiveCatalog>,
    unavailable: Arc<UnavailableOfferings>,
    subnets: SubnetDiscovery,
    security_groups: SecurityGroupDiscovery,
    amis: AmiResolver,
    templates: LaunchTemplates,
    fleet: Fleet,
    instances: Instances,
    warm: WarmMembers,
    commands: WarmCommands,
    objects: Arc<dyn ObjectLookup>,
    sqs: aws_sdk_sqs::Client,
}

impl std::fmt::Debug for AwsCloudProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCloudProvider")
            .field("cluster", &self.config.cluster.name)
            .finish_non_exhaustive()
    }
}

impl AwsCloudProvider {
    /// A provider on `clients`; `unavailable` must be the set the planner's catalog reads, so
    /// capacity failures recorded here steer the next plan; `objects` is where Provisioners and
    /// NodeTemplates are looked up at each call.
    pub fn new(
        clients: AwsClients,
        config: ProviderConfig,
        catalog: Arc<LiveCatalog>,
        unavailable: Arc<UnavailableOfferings>,
        objects: Arc<dyn ObjectLookup>,
    ) -> Self {
        let cluster = config.cluster.name.clone();
        let warm = WarmMembers::new(clients.ec2.clone(), &cluster);
        AwsCloudProvider {
            subnets: SubnetDiscovery::new(clients.ec2.clone()),
            security_groups: SecurityGroupDiscovery::new(clients.ec2.clone()),
            amis: AmiResolver::with_clock(&clients, &config.ssm_prefix, clock::system()),
            templates: LaunchTemplates::new(clients.ec2.clone(), &cluster),
            fleet: Fleet::new(&clients.ec2, unavailable.clone()),
            instances: Instances::new(clients.ec2.clone(), &cluster),
            warm: warm.clone(),
            commands: WarmCommands::new(clients.ssm.clone(), warm),
            sqs: clients.sqs.clone(),
            objects,
            config,
            catalog,
            unavailable,
        }
    }

    /// The SQS client of the provider's configuration: the interruption queue is read with
    /// the same credentials and region as every other call.
    pub fn sqs(&self) -> &aws_sdk_sqs::Client {
        &self.sqs
    }

    /// Deletes the launch templates no launch has used for [`TEMPLATE_TTL`]; returns their
    /// names. Run periodically by [`crate::housekeeping`].
    pub async fn collect_launch_templates(&self) -> Result<Vec<String>, ProviderError> {
        Ok(self.templates.delete_stale(TEMPLATE_TTL).await?)
    }

    /// What `node_template` resolves to now: subnets, security groups and AMIs (the family's
    /// defaults for every architecture and accelerator build the catalog has types of, or the
    /// amiSelector's images). The controller writes it into the NodeTemplate's status; a
    /// failure names the field to fix ([`ProviderError::resolve_failure`]). The lookups are the
    /// launch path's, with their caches.
    pub async fn resolve_node_template(
        &self,
        node_template: &NodeTemplate,
    ) -> Result<ResolvedNodeTemplate, ProviderError> {
        let catalog = if node_template.spec.ami_selector.is_empty() {
            self.catalog.instance_types().await?
        } else {
            Arc::new(Vec::new())
        };
        let lookups = Lookups {
            subnets: &self.subnets,
            security_groups: &self.security_groups,
            amis: &self.amis,
            kubernetes_version: &self.config.kubernetes_version,
        };
        resolve::resolve(node_template, &lookups, &catalog).await
    }

    /// The catalog's instance types as read (offerings that failed for capacity still marked
    /// available): whether a Provisioner's requirements admit any type at all is a question of
    /// its settings, not of today's capacity.
    pub async fn catalog_instance_types(&self) -> Result<Arc<Vec<InstanceType>>, ProviderError> {
        Ok(self.catalog.instance_types().await?)
    }

    /// The Provisioner `name` and its NodeTemplate.
    fn objects_for(
        &self,
        name: &str,
    ) -> Result<(Arc<Provisioner>, Arc<NodeTemplate>), ProviderError> {
        let prov =
            self.objects
                .provisioner(name)
                .ok_or_else(|| ProviderError::UnknownProvisioner {
                    provisioner: name.to_string(),
                })?;
        let nt_name = prov
            .spec
            .provider_ref
            .as_ref()
            .map(|r| r.name.clone())
            .ok_or_else(|| ProviderError::NoProviderRef {
                provisioner: name.to_string(),
            })?;
        let nt = self.objects.node_template(&nt_name).ok_or_else(|| {
            ProviderError::UnknownNodeTemplate {
                provisioner: name.to_string(),
                node_template: nt_name,
            }
        })?;
        Ok((prov, nt))
    }

    async fn image_for(
        &self,
        nt: &NodeTemplate,
        arch: Arch,
        variant: AmiVariant,
    ) -> Result<String, ProviderError> {
        let ami_err = |source| ProviderError::Ami {
            node_template: nt.name().to_string(),
            source: Box::new(source),
        };
        if nt.spec.ami_selector.is_empty() {
            let ami = self
                .amis
                .resolve_default(
                    nt.ami_family(),
                    &self.config.kubernetes_version,
                    arch,
                    variant,
                )
                .await
                .map_err(ami_err)?;
            return Ok(ami.id);
        }
        let amis = self
            .amis
            .resolve_selector(nt.name(), &nt.spec.ami_selector)
            .await
            .map_err(ami_err)?;
        amis.into_iter()
            .find(|a| a.arch == Some(arch))
            .map(|a| a.id)
            .ok_or_else(|| ProviderError::NoAmiForArch {
                node_template: nt.name().to_string(),
                arch: arch.as_str(),
            })
    }

    /// The launch template of each candidate group, paired with its candidates: the first
    /// group's, then the others' (a later group whose template cannot be made is left out);
    /// and the AMI of each candidate type, so the launch can say which one its instance boots.
    async fn templates_for(
        &self,
        req: &LaunchRequest,
        nt: &NodeTemplate,
        prov: &Provisioner,
        groups: &[(InstanceFacts, Vec<(String, f64)>)],
        security_group_ids: &[String],
    ) -> Result<
        (
            TemplateCandidates,
            Vec<TemplateCandidates>,
            HashMap<String, String>,
        ),
        ProviderError,
    > {
        let mut templates = Vec::new();
        let mut images = HashMap::new();
        for (i, (facts, candidates)) in groups.iter().enumerate() {
            match self
                .template_for(nt, prov, facts, security_group_ids, req.warm_pool)
                .await
            {
                Ok((launch_template, image_id)) => {
                    for (name, _) in candidates {
                        images.insert(name.clone(), image_id.clone());
                    }
                    templates.push(TemplateCandidates {
                        launch_template,
                        candidates: candidates.clone(),
                    })
                }
                Err(err) if i == 0 => return Err(err),
                Err(err) => tracing::warn!(
                    claim = %req.claim_name,
                    instance_type = %facts.name,
                    error = %err,
                    "candidates left out of the launch: no launch template for their group"
                ),
            }
        }
        let mut templates = templates.into_iter();
        let Some(first) = templates.next() else {
            // Unreachable: the first group either gave a template or returned its error.
            return Err(ProviderError::NoKnownCandidate {
                claim: req.claim_name.clone(),
                candidates: String::new(),
            });
        };
        Ok((first, templates.collect(), images))
    }

    /// The launch template of one candidate group (its AMI, the spec, found or created in
    /// EC2), with the AMI.
    async fn template_for(
        &self,
        nt: &NodeTemplate,
        prov: &Provisioner,
        facts: &InstanceFacts,
        security_group_ids: &[String],
        warm_pool: Option<joiner_core::WarmState>,
    ) -> Result<(LaunchTemplateRef, String), ProviderError> {
        let image_id = self.image_for(nt, facts.arch, facts.variant).await?;
        let resolved = build(&LaunchContext {
            cluster: &self.config.cluster,
            node_template: nt,
            provisioner: prov,
            instance: facts,
            image_id: &image_id,
            security_group_ids,
            default_instance_profile: self.config.default_instance_profile.as_deref(),
            warm_pool,
        })?;
        Ok((self.templates.ensure_spec(&resolved.spec).await?, image_id))
    }

    /// The node settings a taken Bottlerocket member needs (TOML): its launch settings without
    /// the warm-up variant, for its type and image, with the admin container the warm-up may
    /// have enabled for pulls set back to the user's choice ([`bottlerocket::taken_member`]);
    /// `None` for families whose first-boot script joins on the next start.
    async fn taken_member_settings(
        &self,
        instance: &Instance,
    ) -> Result<Option<String>, ProviderError> {
        let provisioner = instance
            .tags
            .get(tags::PROVISIONER_NAME)
            .cloned()
            .unwrap_or_default();
        let (prov, nt) = self.objects_for(&provisioner)?;
        if nt.ami_family() != joiner_apis::AmiFamily::Bottlerocket {
            return Ok(None);
        }
        let catalog = self.catalog.instance_types().await?;
        let facts = catalog
            .iter()
            .find(|t| t.name == instance.instance_type)
            .and_then(InstanceFacts::from_catalog)
            .ok_or_else(|| ProviderError::NoKnownCandidate {
                claim: instance
                    .tags
                    .get(tags::NODECLAIM)
                    .cloned()
                    .unwrap_or_default(),
                candidates: instance.instance_type.clone(),
            })?;
        let image_id = instance.image_id.clone().unwrap_or_default();
        let resolved = build(&LaunchContext {
            cluster: &self.config.cluster,
            node_template: &nt,
            provisioner: &prov,
            instance: &facts,
            image_id: &image_id,
            security_group_ids: &instance.security_group_ids,
            default_instance_profile: self.config.default_instance_profile.as_deref(),
            warm_pool: None,
        })?;
        let document = bottlerocket::taken_member(nt.name(), &resolved.user_data.decoded)
            .map_err(LaunchTemplateError::from)?;
        Ok(Some(document))
    }

    fn node(&self, i: Instance) -> LaunchedNode {
        LaunchedNode {
            claim_name: i.tags.get(tags::NODECLAIM).cloned(),
            provider_id: aws_provider_id(&i.zone, &i.id),
            instance_id: i.id,
            instance_type: i.instance_type,
            zone: i.zone,
            capacity_type: i.capacity_type,
            state: i.state,
            launch_time: i.launch_time,
            image_id: i.image_id,
            subnet_id: i.subnet_id,
            security_group_ids: i.security_group_ids,
            warm_pool: i.tags.contains_key(joiner_core::labels::WARM_POOL),
        }
    }
}

/// The candidates grouped by launch settings (architecture, AMI variant, max-pods), each group
/// with the facts of its first member, groups and members in the request's order (cheapest
/// first, so the first group holds the cheapest candidate). Candidates the catalog does not know are skipped.
fn launch_groups(
    candidates: &[(String, f64)],
    catalog: &[InstanceType],
    prov: &Provisioner,
) -> Vec<(InstanceFacts, Vec<(String, f64)>)> {
    let by_name: HashMap<&str, &InstanceType> =
        catalog.iter().map(|t| (t.name.as_str(), t)).collect();
    let kubelet = prov.spec.kubelet_configuration.as_ref();
    let mut keys: Vec<GroupKey> = Vec::new();
    let mut groups: Vec<(InstanceFacts, Vec<(String, f64)>)> = Vec::new();
    for (name, price) in candidates {
        let Some(facts) = by_name
            .get(name.as_str())
            .and_then(|t| InstanceFacts::from_catalog(t))
        else {
            tracing::debug!(instance_type = %name, "candidate skipped: not in the catalog");
            continue;
        };
        let key = (
            facts.arch,
            facts.variant,
            max_pods(facts.eni_max_pods, facts.vcpus, kubelet),
        );
        match keys.iter().position(|k| *k == key) {
            Some(i) => groups[i].1.push((name.clone(), *price)),
            None => {
                keys.push(key);
                groups.push((facts, vec![(name.clone(), *price)]));
            }
        }
    }
    groups
}

/// AWS error codes that mean "slow down".
const THROTTLING_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
];

fn api_kind(code: &str) -> CloudErrorKind {
    if THROTTLING_CODES.contains(&code) {
        CloudErrorKind::Throttled
    } else if code.starts_with("InvalidInstanceID.NotFound") {
        CloudErrorKind::NotFound
    } else {
        CloudErrorKind::Other
    }
}

impl CloudError for ProviderError {
    fn kind(&self) -> CloudErrorKind {
        match self {
            ProviderError::Launch(LaunchError::InsufficientCapacity { .. }) => {
                CloudErrorKind::InsufficientCapacity
            }
            ProviderError::Launch(LaunchError::Api { code, .. }) => api_kind(code),
            ProviderError::TerminateRefused(TerminateRefusal::NotFound { .. }) => {
                CloudErrorKind::NotFound
            }
            ProviderError::TerminateRefused(TerminateRefusal::NotOwned { .. }) => {
                CloudErrorKind::NotOwned
            }
            ProviderError::WarmRefused(WarmRefusal::NotFound { .. }) => CloudErrorKind::NotFound,
            ProviderError::WarmRefused(_) => CloudErrorKind::NotOwned,
            ProviderError::TakeUnfinished { .. } => CloudErrorKind::TakeUnfinished,
            ProviderError::Aws(AwsError::Api { code, .. }) => api_kind(code),
            ProviderError::Aws(AwsError::NoRegion)
            | ProviderError::UnknownProvisioner { .. }
            | ProviderError::NoProviderRef { .. }
            | ProviderError::UnknownNodeTemplate { .. }
            | ProviderError::NoKnownCandidate { .. }
            | ProviderError::NoSubnetInZones { .. }
            | ProviderError::NoAmiForArch { .. }
            | ProviderError::NoSubnets { .. }
            | ProviderError::NoSecurityGroups { .. }
            | ProviderError::NoDefaultAmi { .. }
            | ProviderError::NoAmiSelected { .. } => CloudErrorKind::Misconfigured,
            _ => CloudErrorKind::Other,
        }
    }

    fn code(&self) -> String {
        let code = match self {
            ProviderError::Launch(LaunchError::InsufficientCapacity { code, .. })
            | ProviderError::Launch(LaunchError::Api { code, .. })
            | ProviderError::Aws(AwsError::Api { code, .. }) => Some(code.as_str()),
            ProviderError::TerminateRefused(TerminateRefusal::NotFound { .. })
            | ProviderError::WarmRefused(WarmRefusal::NotFound { .. }) => {
                Some("InvalidInstanceID.NotFound")
            }
            ProviderError::WarmRefused(WarmRefusal::TakenByOther { .. }) => Some("TakenByOther"),
            ProviderError::WarmRefused(WarmRefusal::NotHeld { .. }) => Some("NotHeld"),
            ProviderError::WarmRefused(_) => Some("NotWarmPoolMember"),
            ProviderError::TakeUnfinished { .. } => Some("TakeUnfinished"),
            _ => None,
        };
        code.filter(|c| !c.is_empty())
            .unwrap_or("other")
            .to_string()
    }
}

impl NodeTemplateResolver for AwsCloudProvider {
    async fn resolve(&self, node_template: &NodeTemplate) -> Result<Resolved, ResolveError> {
        match self.resolve_node_template(node_template).await {
            Ok(r) => Ok(Resolved {
                amis: r.amis.iter().map(|a| a.to_status()).collect(),
                unresolved: r
                    .unresolved
                    .iter()
                    .map(|u| format!("{}/{}", u.arch.as_str(), u.variant.as_str()))
                    .collect(),
                subnets: r.subnets,
                security_groups: r.security_groups,
            }),
            Err(err) => Err(ResolveError {
                failure: err.resolve_failure(),
                message: err.to_string(),
            }),
        }
    }
}

impl CloudProvider for AwsCloudProvider {
    type Error = ProviderError;

    async fn instance_types(&self, provisioner: &str) -> Result<Vec<InstanceType>, ProviderError> {
        // Unknown names fail here rather than plan against a catalog no launch could use.
        self.objects_for(provisioner)?;
        let mut types = self.catalog.instance_types().await?.as_ref().clone();
        self.unavailable.apply(&mut types);
        Ok(types)
    }

    async fn create(&self, req: &LaunchRequest) -> Result<LaunchedNode, ProviderError> {
        let (prov, nt) = self.objects_for(&req.provisioner)?;
        let catalog = self.catalog.instance_types().await?;
        let groups = launch_groups(&req.candidates, &catalog, &prov);
        if groups.is_empty() {
            return Err(ProviderError::NoKnownCandidate {
                claim: req.claim_name.clone(),
                candidates: req
                    .candidates
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }

        let mut subnets = self
            .subnets
            .discover(nt.name(), &nt.spec.subnet_selector)
            .await?;
        if !req.zones.is_empty() {
            subnets.retain(|s| req.zones.contains(&s.zone));
        }
        if subnets.is_empty() {
            return Err(ProviderError::NoSubnetInZones {
                claim: req.claim_name.clone(),
                node_template: nt.name().to_string(),
                zones: req.zones.join(", "),
            });
        }
        let security_group_ids: Vec<String> = self
            .security_groups
            .discover(nt.name(), &nt.spec.security_group_selector)
            .await?
            .into_iter()
            .map(|g| g.id)
            .collect();

        let mut fleet_tags: BTreeMap<String, String> = nt.spec.tags.clone();
        tags::insert_cluster_tags(&mut fleet_tags, &self.config.cluster.name);
        fleet_tags.insert(tags::PROVISIONER_NAME.to_string(), prov.name().to_string());
        fleet_tags.insert(tags::NODECLAIM.to_string(), req.claim_name.clone());
        if let Some(state) = req.warm_pool {
            fleet_tags.insert(
                crate::warm_pool::WARM_POOL.to_string(),
                prov.name().to_string(),
            );
            fleet_tags.insert(
                crate::warm_pool::WARM_STATE.to_string(),
                state.as_str().to_string(),
            );
        }

        // A template deleted behind the cache's back (by a person, or another replica's
        // clean-up) fails the launch once: the cache forgets it, the templates are ensured
        // again (found or re-created) and the launch is retried, once.
        let mut retried = false;
        let (launched, mut images) = loop {
            let (first, more, images) = self
                .templates_for(req, &nt, &prov, &groups, &security_group_ids)
                .await?;
            let names: Vec<String> = std::iter::once(&first)
                .chain(&more)
                .map(|t| t.launch_template.name.clone())
                .collect();
            let result = self
                .fleet
                .launch(&FleetRequest {
                    client_token: req.claim_uid.clone(),
                    launch_template: first.launch_template,
                    capacity_type: req.capacity_type,
                    candidates: first.candidates,
                    subnets: subnets.clone(),
                    tags: fleet_tags.clone(),
                    more_templates: more,
                })
                .await;
            match result {
                Err(e) if !retried && e.is_missing_template() => {
                    tracing::warn!(claim = %req.claim_name, error = %e, "launch template gone; ensuring it again and retrying once");
                    for name in &names {
                        self.templates.invalidate(name);
                    }
                    retried = true;
                }
                other => break (other?, images),
            }
        };
        let image_id = images.remove(&launched.instance_type);
        Ok(LaunchedNode {
            claim_name: Some(req.claim_name.clone()),
            provider_id: aws_provider_id(&launched.zone, &launched.instance_id),
            instance_id: launched.instance_id,
            instance_type: launched.instance_type,
            zone: launched.zone,
            capacity_type: launched.capacity_type,
            state: "pending".to_string(),
            launch_time: Some(std::time::SystemTime::now()),
            image_id,
            subnet_id: launched.subnet_id,
            security_group_ids,
            warm_pool: req.warm_pool.is_some(),
        })
    }

    async fn delete(&self, instance_id: &str) -> Result<(), ProviderError> {
        let outcome = self.instances.terminate(&[instance_id.to_string()]).await?;
        match outcome.refused.into_iter().next() {
            Some(refusal) => Err(refusal.into()),
            None => Ok(()),
        }
    }

    async fn get(&self, claim_name: &str) -> Result<Option<LaunchedNode>, ProviderError> {
        let found = self.instances.find_by_claim(claim_name).await?;
        Ok(found.into_iter().next().map(|i| self.node(i)))
    }

    async fn list(&self) -> Result<Vec<LaunchedNode>, ProviderError> {
        let found = self.instances.list_by_cluster().await?;
        Ok(found.into_iter().map(|i| self.node(i)).collect())
    }

    async fn list_some(
        &self,
        claims: &[String],
        instance_ids: &[String],
    ) -> Result<Vec<LaunchedNode>, ProviderError> {
        let found = self.instances.list_some(claims, instance_ids).await?;
        Ok(found.into_iter().map(|i| self.node(i)).collect())
    }

    async fn start_warm(
        &self,
        instance_id: &str,
        claim_name: &str,
    ) -> Result<LaunchedNode, ProviderError> {
        let instance = self.warm.member(instance_id).await?;
        // A take a crash interrupted after the start: the instance already runs for the claim
        // (and may have its settings, even have joined). It is sent its settings again, but
        // nothing that fails then undoes the take: a node that never joins is replaced by
        // the claim's registration timeout, as any launch is.
        let resumed = matches!(instance.state.as_str(), "pending" | "running")
            && instance.tags.get(tags::NODECLAIM).map(String::as_str) == Some(claim_name);
        let settings = match self.taken_member_settings(&instance).await {
            Ok(settings) => settings,
            Err(e) if resumed => {
                tracing::warn!(instance_id, claim = claim_name, error = %e,
                    "the node settings of a resumed take cannot be made; not sending them again");
                None
            }
            Err(e) => return Err(e),
        };
        // Written while stopped (EC2 allows no other time), for the record: Bottlerocket
        // reads user data on its first boot only, so the settings go through SSM.
        let stopped = matches!(instance.state.as_str(), "stopped" | "stopping");
        let user_data = settings
            .as_deref()
            .filter(|_| stopped)
            .map(|d| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, d));
        // A fresh take sends the settings before the start, in one call: SSM accepts a command
        // for a stopped instance whose agent registered during the warm-up and delivers it
        // when the agent is back. A refusal (an agent SSM does not know, access denied) fails
        // the take before anything started, so nothing waits and nothing is put back; the
        // claim is launched instead. A command left queued by a start that then failed is
        // delivered only if the member is started again, which only a take does, with the
        // same settings (they depend on the Provisioner, NodeTemplate, type and image, never
        // on the claim).
        if let Some(document) = settings.as_deref().filter(|_| stopped) {
            self.commands.apply_settings(&instance.id, document).await?;
        }
        let instance = self
            .warm
            .start_member(instance, claim_name, user_data.as_deref())
            .await?;
        // A resumed take sends them again (once; the first send may not have happened), and
        // keeps the take whatever SSM answers: the node may have joined already.
        if let Some(document) = settings.as_deref().filter(|_| !stopped) {
            if let Err(e) = self.commands.apply_settings(&instance.id, document).await {
                tracing::warn!(instance_id, claim = claim_name, error = %e,
                    "sending the node settings of a resumed take again failed; keeping the take");
            }
        }
        // Taken: the instance is the claim's node from now on, and leaves the pool's
        // permissions (no stop, user-data change or command on a node that serves pods). A
        // failure is `TakeUnfinished`: the launcher neither falls back to a launch nor puts the
        // member back; the claim's next launch finds the instance, still tagged as a member,
        // and comes back here, without starting anything twice.
        self.warm
            .release(&instance.id)
            .await
            .map_err(|e| ProviderError::TakeUnfinished {
                instance_id: instance.id.clone(),
                source: Box::new(e.into()),
            })?;
        let mut instance = instance;
        instance.tags.remove(crate::warm_pool::WARM_POOL);
        instance.tags.remove(crate::warm_pool::WARM_STATE);
        Ok(self.node(instance))
    }

    async fn pull_warm(
        &self,
        instance_id: &str,
        images: &[String],
        within: std::time::Duration,
    ) -> Result<String, ProviderError> {
        Ok(self.commands.pull(instance_id, images, within).await?)
    }

    async fn pull_progress(
        &self,
        instance_id: &str,
        pull: &str,
    ) -> Result<joiner_core::PullProgress, ProviderError> {
        Ok(self.commands.progress(instance_id, pull).await?)
    }

    async fn stop_warm(&self, instance_id: &str) -> Result<(), ProviderError> {
        Ok(self.warm.stop(instance_id, false).await?)
    }

    async fn hold_warm(&self, instance_id: &str) -> Result<(), ProviderError> {
        Ok(self.warm.hold(instance_id).await?)
    }

    async fn hibernate_warm(&self, instance_id: &str) -> Result<(), ProviderError> {
        Ok(self.warm.stop(instance_id, true).await?)
    }

    fn warm_type_refusal(
        &self,
        instance_type: &InstanceType,
        state: joiner_core::WarmState,
    ) -> Option<String> {
        (state == joiner_core::WarmState::Hibernated)
            .then(|| crate::hibernation::refusal(instance_type))
            .flatten()
    }

    fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) {
        self.unavailable
            .mark(OfferingKey::new(instance_type, zone, capacity_type));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded;

    #[test]
    fn candidates_are_grouped_by_their_launch_settings() {
        let catalog = &embedded::cached("us-east-1")
            .expect("embedded us-east-1")
            .instance_types;
        let prov: Provisioner =
            serde_yaml::from_str("metadata: {name: web}\nspec: {}").expect("provisioner");
        let candidates = vec![
            ("c5.large".to_string(), 0.085),
            ("m6g.large".to_string(), 0.077),
            ("no-such.type".to_string(), 0.09),
            ("m5.large".to_string(), 0.096),
            ("m5.xlarge".to_string(), 0.192),
        ];
        let groups = launch_groups(&candidates, catalog, &prov);
        let summary: Vec<(&str, Arch, Vec<&str>)> = groups
            .iter()
            .map(|(facts, members)| {
                (
                    facts.name.as_str(),
                    facts.arch,
                    members.iter().map(|(n, _)| n.as_str()).collect(),
                )
            })
            .collect();
        // arm64 and a different max-pods (m5.xlarge: 58) get their own group; unknown types
        // are skipped.
        assert_eq!(
            summary,
            [
                ("c5.large", Arch::Amd64, vec!["c5.large", "m5.large"]),
                ("m6g.large", Arch::Arm64, vec!["m6g.large"]),
                ("m5.xlarge", Arch::Amd64, vec!["m5.xlarge"]),
            ]
        );
        assert!(launch_groups(&candidates[2..3], catalog, &prov).is_empty());
    }

    fn is_capacity_error(err: &ProviderError) -> bool {
        err.kind() == CloudErrorKind::InsufficientCapacity
    }

    fn is_not_found(err: &ProviderError) -> bool {
        err.kind() == CloudErrorKind::NotFound
    }

    #[test]
    fn provider_id_has_the_aws_cloud_controller_form() {
        assert_eq!(
            aws_provider_id("us-east-1a", "i-0abc"),
            "aws:///us-east-1a/i-0abc"
        );
    }

    #[test]
    fn errors_carry_their_kind_and_code() {
        let throttled = ProviderError::Launch(LaunchError::Api {
            client_token: "uid".into(),
            code: "RequestLimitExceeded".into(),
            message: "slow down".into(),
        });
        assert_eq!(throttled.kind(), CloudErrorKind::Throttled);
        assert_eq!(throttled.code(), "RequestLimitExceeded");
        let config = ProviderError::UnknownProvisioner {
            provisioner: "web".into(),
        };
        assert_eq!(config.kind(), CloudErrorKind::Misconfigured);
        assert_eq!(config.code(), "other");
        let foreign = ProviderError::TerminateRefused(TerminateRefusal::NotOwned {
            instance_id: "i-1".into(),
            missing: "joiner.sh/provisioner-name".into(),
        });
        assert_eq!(foreign.kind(), CloudErrorKind::NotOwned);
    }

    #[test]
    fn only_insufficient_capacity_is_a_capacity_error() {
        let capacity = ProviderError::Launch(LaunchError::InsufficientCapacity {
            client_token: "uid".into(),
            unavailable: Vec::new(),
            code: "InsufficientInstanceCapacity".into(),
            message: "none".into(),
        });
        assert!(is_capacity_error(&capacity));
        assert_eq!(capacity.code(), "InsufficientInstanceCapacity");
        let api = ProviderError::Launch(LaunchError::Api {
            client_token: "uid".into(),
            code: "UnauthorizedOperation".into(),
            message: "no".into(),
        });
        assert!(!is_capacity_error(&api));
    }

    #[test]
    fn only_an_unknown_instance_is_not_found() {
        let gone = ProviderError::TerminateRefused(TerminateRefusal::NotFound {
            instance_id: "i-1".into(),
        });
        assert!(is_not_found(&gone));
        let foreign = ProviderError::TerminateRefused(TerminateRefusal::NotOwned {
            instance_id: "i-1".into(),
            missing: "kubernetes.io/cluster/c1=owned".into(),
        });
        assert!(!is_not_found(&foreign));
    }
}
