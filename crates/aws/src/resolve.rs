//! What a NodeTemplate resolves to in the account: its subnets, security groups and AMIs, with
//! the requirements each AMI serves. The controller writes this into the NodeTemplate's status
//! (so `kubectl get nodetemplate -o yaml` shows what a launch will use) and turns a failure into
//! a `Ready=False` condition naming the field to fix, before any launch trips over it.
//!
//! The lookups are the launch path's own ([`SubnetDiscovery`], [`SecurityGroupDiscovery`],
//! [`AmiResolver`]) and share their caches, so resolving every few minutes costs little and
//! shows exactly what the next launch would get.

use std::collections::{BTreeMap, BTreeSet};

use crate::labels;
use joiner_apis::{
    NodeSelectorRequirement, NodeTemplate, ResolveFailure, ResolvedAmi, ResolvedSecurityGroup,
    ResolvedSubnet,
};
use joiner_core::InstanceType;

use crate::allocatable::Arch;
use crate::ami::{AmiError, AmiResolver, AmiVariant};
use crate::discovery::{describe, DiscoveryError, SecurityGroupDiscovery, SubnetDiscovery};
use crate::provider::ProviderError;
use crate::AwsError;

/// An AMI a NodeTemplate's nodes boot, and which instance types it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedAmi {
    /// `ami-...`.
    pub id: String,
    /// Image name.
    pub name: String,
    /// The architecture it boots.
    pub arch: Arch,
    /// The accelerator build, for a family default; `None` for an amiSelector image, which
    /// serves every type of its architecture.
    pub variant: Option<AmiVariant>,
    /// The instance types it serves, as node-selector requirements (ANDed).
    pub requirements: Vec<NodeSelectorRequirement>,
}

impl ServedAmi {
    /// The status entry.
    pub fn to_status(&self) -> ResolvedAmi {
        ResolvedAmi {
            id: self.id.clone(),
            name: (!self.name.is_empty()).then(|| self.name.clone()),
            requirements: self.requirements.clone(),
        }
    }
}

/// A default AMI the catalog needs but that could not be found: its types cannot launch with
/// this NodeTemplate, though the others can.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnresolvedAmi {
    /// The architecture.
    pub arch: Arch,
    /// The accelerator build.
    pub variant: AmiVariant,
    /// Why (the SSM parameter is missing, the family has no such build, ...).
    pub reason: String,
}

/// What a NodeTemplate resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedNodeTemplate {
    /// Every subnet the selector matched, sorted by ID.
    pub subnets: Vec<ResolvedSubnet>,
    /// Every security group the selector matched, sorted by ID.
    pub security_groups: Vec<ResolvedSecurityGroup>,
    /// The AMIs in use, by architecture then variant.
    pub amis: Vec<ServedAmi>,
    /// Default AMIs that were needed but not found (never for an amiSelector).
    pub unresolved: Vec<UnresolvedAmi>,
}

impl ResolvedNodeTemplate {
    /// The zones the subnets are in, sorted.
    pub fn zones(&self) -> Vec<String> {
        let zones: BTreeSet<&str> = self.subnets.iter().map(|s| s.zone.as_str()).collect();
        zones.into_iter().map(str::to_string).collect()
    }
}

impl ProviderError {
    /// The part of a NodeTemplate this error says cannot be resolved, or `None` when the error
    /// is not about the NodeTemplate's settings (an AWS call failed, the catalog is down): such
    /// an error may pass by itself.
    pub fn resolve_failure(&self) -> Option<ResolveFailure> {
        match self {
            ProviderError::NoSubnets { .. } => Some(ResolveFailure::Subnets),
            ProviderError::NoSecurityGroups { .. } => Some(ResolveFailure::SecurityGroups),
            ProviderError::NoDefaultAmi { .. }
            | ProviderError::NoAmiSelected { .. }
            | ProviderError::NoAmiForArch { .. } => Some(ResolveFailure::Ami),
            _ => None,
        }
    }
}

/// The lookups a resolution uses, borrowed from the provider.
pub(crate) struct Lookups<'a> {
    pub subnets: &'a SubnetDiscovery,
    pub security_groups: &'a SecurityGroupDiscovery,
    pub amis: &'a AmiResolver,
    pub kubernetes_version: &'a str,
}

/// Why a selector lookup found nothing, when it is the selector's fault: nothing matched, the
/// selector is empty, or EC2 says an ID it lists does not exist (`InvalidSubnetID.NotFound`,
/// `InvalidGroup.NotFound`, `InvalidAMIID.Malformed`, ...). `None` for other failures.
fn selector_miss(err: &DiscoveryError) -> Option<String> {
    match err {
        DiscoveryError::EmptySelector { what, .. } => Some(format!(
            "the selector is empty, so it selects no {what} (it must name tags or aws-ids)"
        )),
        DiscoveryError::NoMatch { what, .. } => Some(format!("no {what} matches")),
        DiscoveryError::Aws {
            source: AwsError::Api { code, message, .. },
            ..
        } if code.ends_with(".NotFound") || code.ends_with(".Malformed") => {
            Some(format!("{code}: {message}"))
        }
        _ => None,
    }
}

/// Resolves `nt` with the provider's lookups; `catalog` decides which default AMI builds are
/// needed (unused with an amiSelector).
pub(crate) async fn resolve(
    nt: &NodeTemplate,
    lookups: &Lookups<'_>,
    catalog: &[InstanceType],
) -> Result<ResolvedNodeTemplate, ProviderError> {
    let name = nt.name().to_string();
    let subnets = lookups
        .subnets
        .discover(&name, &nt.spec.subnet_selector)
        .await
        .map_err(|err| match selector_miss(&err) {
            Some(detail) => ProviderError::NoSubnets {
                node_template: name.clone(),
                selector: describe(&nt.spec.subnet_selector),
                detail,
            },
            None => err.into(),
        })?;
    let security_groups = lookups
        .security_groups
        .discover(&name, &nt.spec.security_group_selector)
        .await
        .map_err(|err| match selector_miss(&err) {
            Some(detail) => ProviderError::NoSecurityGroups {
                node_template: name.clone(),
                selector: describe(&nt.spec.security_group_selector),
                detail,
            },
            None => err.into(),
        })?;
    let (amis, unresolved) = if nt.spec.ami_selector.is_empty() {
        default_amis(nt, lookups, catalog).await?
    } else {
        (selected_amis(nt, lookups).await?, Vec::new())
    };
    Ok(ResolvedNodeTemplate {
        subnets: subnets
            .into_iter()
            .map(|s| ResolvedSubnet {
                id: s.id,
                zone: s.zone,
            })
            .collect(),
        security_groups: security_groups
            .into_iter()
            .map(|g| ResolvedSecurityGroup {
                id: g.id,
                name: (!g.name.is_empty()).then_some(g.name),
            })
            .collect(),
        amis,
        unresolved,
    })
}

/// The newest image per architecture that `spec.amiSelector` selects; each serves every type of
/// its architecture (the launch path picks it by architecture alone).
async fn selected_amis(
    nt: &NodeTemplate,
    lookups: &Lookups<'_>,
) -> Result<Vec<ServedAmi>, ProviderError> {
    let selector = &nt.spec.ami_selector;
    let found = lookups.amis.resolve_selector(nt.name(), selector).await;
    let images = match found {
        Ok(images) => images,
        Err(AmiError::Selector(err)) => {
            return Err(match selector_miss(&err) {
                Some(detail) => ProviderError::NoAmiSelected {
                    node_template: nt.name().to_string(),
                    selector: describe(selector),
                    detail,
                },
                None => err.into(),
            })
        }
        Err(source) => {
            return Err(ProviderError::Ami {
                node_template: nt.name().to_string(),
                source: Box::new(source),
            })
        }
    };
    Ok(images
        .into_iter()
        .filter_map(|ami| {
            let arch = ami.arch?;
            Some(ServedAmi {
                requirements: vec![requirement(labels::ARCH, "In", [arch.as_str()])],
                id: ami.id,
                name: ami.name,
                arch,
                variant: None,
            })
        })
        .collect())
}

/// The family's SSM-published AMIs for every (architecture, variant) the catalog has types of.
/// A missing parameter leaves only its types without an AMI ([`UnresolvedAmi`]); the
/// NodeTemplate fails only when no needed AMI resolves at all. An AWS failure other than a
/// missing parameter or image fails the whole resolution, since it says nothing about the
/// NodeTemplate.
async fn default_amis(
    nt: &NodeTemplate,
    lookups: &Lookups<'_>,
    catalog: &[InstanceType],
) -> Result<(Vec<ServedAmi>, Vec<UnresolvedAmi>), ProviderError> {
    let family = nt.ami_family();
    let needs = needed_variants(catalog);
    let mut amis = Vec::new();
    let mut unresolved = Vec::new();
    for ((arch, variant), families) in &needs {
        let found = lookups
            .amis
            .resolve_default(family, lookups.kubernetes_version, *arch, *variant)
            .await;
        match found {
            Ok(ami) => amis.push(ServedAmi {
                requirements: variant_requirements(*arch, *variant, &needs, families),
                id: ami.id,
                name: ami.name,
                arch: *arch,
                variant: Some(*variant),
            }),
            Err(
                err @ (AmiError::ParameterNotFound { .. }
                | AmiError::ImageNotFound { .. }
                | AmiError::Path(_)),
            ) => unresolved.push(UnresolvedAmi {
                arch: *arch,
                variant: *variant,
                reason: err.to_string(),
            }),
            Err(source) => {
                return Err(ProviderError::Ami {
                    node_template: nt.name().to_string(),
                    source: Box::new(source),
                })
            }
        }
    }
    if amis.is_empty() {
        let mut reasons: Vec<&str> = unresolved.iter().map(|u| u.reason.as_str()).collect();
        reasons.dedup();
        return Err(ProviderError::NoDefaultAmi {
            node_template: nt.name().to_string(),
            family: family.as_str(),
            detail: reasons.join("; "),
        });
    }
    Ok((amis, unresolved))
}

/// Each (architecture, variant) some catalog type needs, with the instance families of its
/// types. An empty catalog still needs the standard amd64 image, the one most types boot.
fn needed_variants(catalog: &[InstanceType]) -> BTreeMap<(Arch, AmiVariant), BTreeSet<String>> {
    let mut needs: BTreeMap<(Arch, AmiVariant), BTreeSet<String>> = BTreeMap::new();
    for t in catalog {
        let Some(arch) = t.labels.get(labels::ARCH).and_then(|a| Arch::parse(a)) else {
            continue;
        };
        let families = needs.entry((arch, AmiVariant::of(t))).or_default();
        if let Some(f) = t.labels.get(labels::INSTANCE_FAMILY) {
            families.insert(f.clone());
        }
    }
    if needs.is_empty() {
        needs.insert((Arch::Amd64, AmiVariant::Standard), BTreeSet::new());
    }
    needs
}

/// The types an AMI of `variant` serves, in the labels the catalog gives them: NVIDIA builds by
/// GPU manufacturer, Neuron builds by the families of the Neuron types (no label says
/// "Neuron"), the standard build everything else of its architecture.
fn variant_requirements(
    arch: Arch,
    variant: AmiVariant,
    needs: &BTreeMap<(Arch, AmiVariant), BTreeSet<String>>,
    families: &BTreeSet<String>,
) -> Vec<NodeSelectorRequirement> {
    let mut reqs = vec![requirement(labels::ARCH, "In", [arch.as_str()])];
    match variant {
        AmiVariant::Nvidia => reqs.push(requirement(
            labels::INSTANCE_GPU_MANUFACTURER,
            "In",
            ["nvidia"],
        )),
        AmiVariant::Neuron => reqs.push(requirement(
            labels::INSTANCE_FAMILY,
            "In",
            families.iter().map(String::as_str),
        )),
        AmiVariant::Standard => {
            reqs.push(requirement(
                labels::INSTANCE_GPU_MANUFACTURER,
                "NotIn",
                ["nvidia"],
            ));
            if let Some(neuron) = needs.get(&(arch, AmiVariant::Neuron)) {
                if !neuron.is_empty() {
                    reqs.push(requirement(
                        labels::INSTANCE_FAMILY,
                        "NotIn",
                        neuron.iter().map(String::as_str),
                    ));
                }
            }
        }
    }
    reqs
}

fn requirement<'a>(
    key: &str,
    operator: &str,
    values: impl IntoIterator<Item = &'a str>,
) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: values.into_iter().map(str::to_string).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::Resources;

    fn it(name: &str, arch: &str, family: &str, gpu: Option<&str>, neuron: i64) -> InstanceType {
        let mut labels = BTreeMap::new();
        labels.insert(labels::ARCH.to_string(), arch.to_string());
        labels.insert(labels::INSTANCE_FAMILY.to_string(), family.to_string());
        if let Some(m) = gpu {
            labels.insert(labels::INSTANCE_GPU_MANUFACTURER.to_string(), m.to_string());
        }
        let mut capacity = Resources::new(2000, 8 << 30, 20 << 30, 29);
        if neuron > 0 {
            capacity.set("aws.amazon.com/neuron", neuron);
        }
        InstanceType {
            name: name.to_string(),
            labels,
            allocatable: capacity.clone(),
            capacity,
            offerings: Vec::new(),
            provider_keys: crate::labels::INSTANCE_LABEL_KEYS,
        }
    }

    #[test]
    fn the_catalog_decides_which_default_amis_are_needed() {
        let catalog = [
            it("m5.large", "amd64", "m5", None, 0),
            it("m6g.large", "arm64", "m6g", None, 0),
            it("g4dn.xlarge", "amd64", "g4dn", Some("nvidia"), 0),
            it("inf2.xlarge", "amd64", "inf2", None, 1),
            it("g4ad.xlarge", "amd64", "g4ad", Some("amd"), 0),
        ];
        let needs = needed_variants(&catalog);
        let keys: Vec<(Arch, AmiVariant)> = needs.keys().copied().collect();
        assert_eq!(
            keys,
            [
                (Arch::Amd64, AmiVariant::Standard),
                (Arch::Amd64, AmiVariant::Nvidia),
                (Arch::Amd64, AmiVariant::Neuron),
                (Arch::Arm64, AmiVariant::Standard),
            ]
        );
        let standard = &needs[&(Arch::Amd64, AmiVariant::Standard)];
        let reqs = variant_requirements(Arch::Amd64, AmiVariant::Standard, &needs, standard);
        let shown: Vec<String> = reqs
            .iter()
            .map(|r| format!("{} {} {:?}", r.key, r.operator, r.values))
            .collect();
        assert_eq!(
            shown,
            [
                r#"kubernetes.io/arch In ["amd64"]"#,
                r#"karpenter.k8s.aws/instance-gpu-manufacturer NotIn ["nvidia"]"#,
                r#"karpenter.k8s.aws/instance-family NotIn ["inf2"]"#,
            ]
        );
        let neuron = &needs[&(Arch::Amd64, AmiVariant::Neuron)];
        let reqs = variant_requirements(Arch::Amd64, AmiVariant::Neuron, &needs, neuron);
        assert_eq!(reqs[1].values, ["inf2"]);
        // arm64 has no Neuron types, so its standard image excludes no family.
        let arm = &needs[&(Arch::Arm64, AmiVariant::Standard)];
        assert_eq!(
            variant_requirements(Arch::Arm64, AmiVariant::Standard, &needs, arm).len(),
            2
        );
    }

    #[test]
    fn an_empty_catalog_still_needs_the_standard_amd64_image() {
        let keys: Vec<(Arch, AmiVariant)> = needed_variants(&[]).keys().copied().collect();
        assert_eq!(keys, [(Arch::Amd64, AmiVariant::Standard)]);
    }

    #[test]
    fn only_selector_faults_are_misses() {
        let api = |code: &str| DiscoveryError::Aws {
            template: "t".into(),
            what: "subnet",
            selector: "{aws-ids: subnet-1}".into(),
            source: AwsError::Api {
                operation: "ec2:DescribeSubnets",
                code: code.into(),
                message: "m".into(),
            },
        };
        assert_eq!(
            selector_miss(&api("InvalidSubnetID.NotFound")).as_deref(),
            Some("InvalidSubnetID.NotFound: m")
        );
        assert_eq!(selector_miss(&api("RequestLimitExceeded")), None);
        let none = DiscoveryError::NoMatch {
            template: "t".into(),
            what: "subnet",
            selector: "{a: b}".into(),
        };
        assert_eq!(selector_miss(&none).as_deref(), Some("no subnet matches"));
    }
}
