//! Launching one node with CreateFleet (`instant`, target capacity 1).
//!
//! Flexibility is what makes a launch succeed: the fleet gets every (instance type × zonal
//! subnet) pair of the at most 60 cheapest candidate types and EC2 picks one
//! (price-capacity-optimized for spot, lowest-price for on-demand). The NodeClaim UID is the
//! ClientToken, so a retried call (a controller restart mid-launch, an SDK retry) never
//! launches a second instance. Capacity errors mark the failing offerings unavailable for
//! 3 minutes and come back as [`LaunchError::InsufficientCapacity`], so the claim is planned
//! again without them; throttling is retried by the SDK ([`launch_retry_config`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, InstanceLifecycle, OnDemandOptionsRequest,
    ResourceType, SpotAllocationStrategy, SpotOptionsRequest, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use joiner_core::CapacityType;
use thiserror::Error;

use crate::api_error::api_error;
use crate::discovery::{per_zone_best, Subnet};
use crate::launch_template::LaunchTemplateRef;
use crate::tags;
use crate::unavailable::{OfferingKey, UnavailableOfferings};
use crate::AwsError;

/// At most this many instance types go into one fleet (Karpenter's figure): more adds little
/// flexibility and makes the request large.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// CreateFleet error codes meaning "this offering has no capacity for you now" (Karpenter's
/// list). Any other code is a configuration or permission problem and is surfaced as is.
pub const CAPACITY_ERROR_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "MaxFleetCountExceeded",
    "ReservationCapacityExceeded",
];

/// True when `code` is one of [`CAPACITY_ERROR_CODES`].
pub fn is_capacity_error(code: &str) -> bool {
    CAPACITY_ERROR_CODES.contains(&code)
}

/// The retry policy of the launch client: standard mode (throttling codes such as
/// `RequestLimitExceeded` and transient errors are retried with exponential backoff and jitter),
/// 5 attempts. Safe for CreateFleet because the ClientToken makes the call idempotent.
pub fn launch_retry_config() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(5)
        .with_initial_backoff(Duration::from_millis(200))
        .with_max_backoff(Duration::from_secs(20))
}

/// One launch.
#[derive(Clone, Debug)]
pub struct FleetRequest {
    /// The NodeClaim UID: EC2 launches at most once per token.
    pub client_token: String,
    /// The template holding AMI, user data, security groups, profile, disks, metadata options.
    pub launch_template: LaunchTemplateRef,
    /// spot or on-demand.
    pub capacity_type: CapacityType,
    /// Candidate instance types with their price (USD/h) for this capacity type.
    pub candidates: Vec<(String, f64)>,
    /// Subnets to launch into; only the best of each zone is used (see [`per_zone_best`]).
    pub subnets: Vec<Subnet>,
    /// Tags for the instance, its volumes and the fleet (cluster, claim, provisioner, user tags).
    pub tags: BTreeMap<String, String>,
    /// Further templates with their own candidates (types needing another AMI or max-pods),
    /// each a LaunchTemplateConfig of the same fleet, so EC2 can fall back to them. The
    /// [`MAX_INSTANCE_TYPES`] cap counts the types of all templates together.
    pub more_templates: Vec<TemplateCandidates>,
}

/// A launch template and the candidate types (with price, USD/h) launched with it.
#[derive(Clone, Debug)]
pub struct TemplateCandidates {
    /// The template.
    pub launch_template: LaunchTemplateRef,
    /// Its candidate types.
    pub candidates: Vec<(String, f64)>,
}

/// The instance a launch produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launched {
    /// `i-...`.
    pub instance_id: String,
    /// The type EC2 chose among the candidates.
    pub instance_type: String,
    /// Zone name of the chosen subnet.
    pub zone: String,
    /// spot or on-demand.
    pub capacity_type: CapacityType,
    /// The chosen subnet, when EC2 named it.
    pub subnet_id: Option<String>,
}

/// Why a launch gave no instance.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum LaunchError {
    /// Every offering tried lacked capacity. The listed ones are marked unavailable; plan the
    /// claim again without them.
    #[error("claim {client_token}: insufficient capacity ({code}: {message}); {} offering(s) marked unavailable", unavailable.len())]
    InsufficientCapacity {
        /// The ClientToken (NodeClaim UID).
        client_token: String,
        /// The offerings EC2 reported as lacking capacity.
        unavailable: Vec<OfferingKey>,
        /// The first capacity error code.
        code: String,
        /// Its message.
        message: String,
    },
    /// Nothing to launch: no candidate type, no subnet, or every pair marked unavailable.
    #[error("claim {client_token}: nothing to launch: {reason}")]
    NoOfferings {
        /// The ClientToken (NodeClaim UID).
        client_token: String,
        /// Which input was empty.
        reason: String,
    },
    /// Any other failure, with the AWS code and message.
    #[error("claim {client_token}: ec2:CreateFleet failed: {code}: {message}")]
    Api {
        /// The ClientToken (NodeClaim UID).
        client_token: String,
        /// The AWS error code.
        code: String,
        /// Its message.
        message: String,
    },
}

impl LaunchError {
    /// True when EC2 says a launch template of the request does not exist (deleted behind
    /// the template cache's back).
    pub fn is_missing_template(&self) -> bool {
        matches!(self, LaunchError::Api { code, .. } if code.starts_with("InvalidLaunchTemplate"))
    }
}

/// Launches instances through CreateFleet and records capacity failures.
#[derive(Debug, Clone)]
pub struct Fleet {
    ec2: aws_sdk_ec2::Client,
    unavailable: Arc<UnavailableOfferings>,
}

impl Fleet {
    /// A launcher on a copy of `ec2` with [`launch_retry_config`], recording capacity errors
    /// into `unavailable` (share it with the catalog and planner).
    pub fn new(ec2: &aws_sdk_ec2::Client, unavailable: Arc<UnavailableOfferings>) -> Self {
        let conf = ec2
            .config()
            .to_builder()
            .retry_config(launch_retry_config())
            .build();
        Fleet {
            ec2: aws_sdk_ec2::Client::from_conf(conf),
            unavailable,
        }
    }

    /// The unavailable-offerings set this launcher records into.
    pub fn unavailable(&self) -> &Arc<UnavailableOfferings> {
        &self.unavailable
    }

    /// Launches one instance for `req`.
    pub async fn launch(&self, req: &FleetRequest) -> Result<Launched, LaunchError> {
        let configs = build_configs(req, &self.unavailable)?;
        let capacity = match req.capacity_type {
            CapacityType::Spot => DefaultTargetCapacityType::Spot,
            CapacityType::OnDemand => DefaultTargetCapacityType::OnDemand,
        };
        let tag_spec = |rt: ResourceType| {
            TagSpecification::builder()
                .resource_type(rt)
                .set_tags(Some(tags::to_ec2(&req.tags)))
                .build()
        };
        let mut call = self
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(&req.client_token)
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(capacity)
                    .build(),
            )
            .set_launch_template_configs(Some(
                configs
                    .into_iter()
                    .map(|(template, overrides)| {
                        FleetLaunchTemplateConfigRequest::builder()
                            .launch_template_specification(
                                FleetLaunchTemplateSpecificationRequest::builder()
                                    .launch_template_id(&template.id)
                                    .version("$Latest")
                                    .build(),
                            )
                            .set_overrides(Some(overrides))
                            .build()
                    })
                    .collect(),
            ))
            .tag_specifications(tag_spec(ResourceType::Instance))
            .tag_specifications(tag_spec(ResourceType::Volume))
            .tag_specifications(tag_spec(ResourceType::Fleet));
        call = match req.capacity_type {
            CapacityType::Spot => call.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            ),
            CapacityType::OnDemand => call.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            ),
        };
        let out = call
            .send()
            .await
            .map_err(|e| match api_error("ec2:CreateFleet", e) {
                AwsError::Api { code, message, .. } => LaunchError::Api {
                    client_token: req.client_token.clone(),
                    code,
                    message,
                },
                other => LaunchError::Api {
                    client_token: req.client_token.clone(),
                    code: "Unknown".to_string(),
                    message: other.to_string(),
                },
            })?;

        let zone_of_subnet = |id: &str| {
            req.subnets
                .iter()
                .find(|s| s.id == id)
                .map(|s| s.zone.clone())
        };
        // Record capacity failures even when another override succeeded: the next launch
        // should not try them first again.
        let mut unavailable = Vec::new();
        let mut first_capacity = None;
        let mut first_other = None;
        for err in out.errors() {
            let code = err.error_code().unwrap_or("Unknown");
            let message = err.error_message().unwrap_or_default();
            if !is_capacity_error(code) {
                first_other.get_or_insert((code.to_string(), message.to_string()));
                continue;
            }
            first_capacity.get_or_insert((code.to_string(), message.to_string()));
            let ov = err
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            let Some(ov) = ov else { continue };
            let zone = ov
                .availability_zone()
                .map(str::to_string)
                .or_else(|| ov.subnet_id().and_then(zone_of_subnet));
            let (Some(it), Some(zone)) = (ov.instance_type(), zone) else {
                continue;
            };
            let capacity_type = match err.lifecycle() {
                Some(InstanceLifecycle::Spot) => CapacityType::Spot,
                Some(InstanceLifecycle::OnDemand) => CapacityType::OnDemand,
                _ => req.capacity_type,
            };
            let key = OfferingKey::new(it.as_str(), &zone, capacity_type);
            if !unavailable.contains(&key) {
                self.unavailable.mark(key.clone());
                unavailable.push(key);
            }
        }

        for inst in out.instances() {
            let Some(id) = inst.instance_ids().first() else {
                continue;
            };
            let ov = inst
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            let instance_type = inst
                .instance_type()
                .or_else(|| ov.and_then(|o| o.instance_type()))
                .map(|t| t.as_str().to_string())
                .unwrap_or_default();
            let zone = inst
                .availability_zone()
                .map(str::to_string)
                .or_else(|| ov.and_then(|o| o.availability_zone()).map(str::to_string))
                .or_else(|| inst.subnet_id().and_then(zone_of_subnet))
                .or_else(|| ov.and_then(|o| o.subnet_id()).and_then(zone_of_subnet))
                .unwrap_or_default();
            let capacity_type = match inst.lifecycle() {
                Some(InstanceLifecycle::Spot) => CapacityType::Spot,
                Some(InstanceLifecycle::OnDemand) => CapacityType::OnDemand,
                _ => req.capacity_type,
            };
            tracing::info!(instance_id = %id, %instance_type, %zone, claim = %req.client_token, "instance launched");
            let subnet_id = inst
                .subnet_id()
                .or_else(|| ov.and_then(|o| o.subnet_id()))
                .map(str::to_string);
            return Ok(Launched {
                instance_id: id.clone(),
                instance_type,
                zone,
                capacity_type,
                subnet_id,
            });
        }

        match (first_other, first_capacity) {
            // A non-capacity error among them (permissions, bad template) is the one to show:
            // re-planning would not fix it.
            (Some((code, message)), _) => Err(LaunchError::Api {
                client_token: req.client_token.clone(),
                code,
                message,
            }),
            (None, Some((code, message))) => Err(LaunchError::InsufficientCapacity {
                client_token: req.client_token.clone(),
                unavailable,
                code,
                message,
            }),
            (None, None) => Err(LaunchError::Api {
                client_token: req.client_token.clone(),
                code: "NoInstance".to_string(),
                message: "CreateFleet returned neither an instance nor an error".to_string(),
            }),
        }
    }
}

/// The overrides of `req` for all its templates together, in template order (see
/// [`build_configs`]); with one template, ordered by price, then zone.
pub fn build_overrides(
    req: &FleetRequest,
    unavailable: &UnavailableOfferings,
) -> Result<Vec<FleetLaunchTemplateOverridesRequest>, LaunchError> {
    Ok(build_configs(req, unavailable)?
        .into_iter()
        .flat_map(|(_, overrides)| overrides)
        .collect())
}

/// One (template, overrides) per template of `req` that has any: the at most
/// [`MAX_INSTANCE_TYPES`] cheapest distinct candidate types over all templates (price NaN
/// sorts last, ties by name; a type listed under two templates goes with the first) × the best
/// subnet of each zone, leaving out pairs marked unavailable. Overrides are ordered by price,
/// then zone.
pub fn build_configs(
    req: &FleetRequest,
    unavailable: &UnavailableOfferings,
) -> Result<Vec<(LaunchTemplateRef, Vec<FleetLaunchTemplateOverridesRequest>)>, LaunchError> {
    let none = |reason: &str| LaunchError::NoOfferings {
        client_token: req.client_token.clone(),
        reason: reason.to_string(),
    };
    let templates: Vec<(&LaunchTemplateRef, &[(String, f64)])> =
        std::iter::once((&req.launch_template, req.candidates.as_slice()))
            .chain(
                req.more_templates
                    .iter()
                    .map(|t| (&t.launch_template, t.candidates.as_slice())),
            )
            .collect();
    let mut candidates: Vec<(usize, &str, f64)> = templates
        .iter()
        .enumerate()
        .flat_map(|(i, (_, c))| {
            c.iter()
                .map(move |(name, price)| (i, name.as_str(), *price))
        })
        .collect();
    candidates.sort_by(|a, b| {
        a.2.total_cmp(&b.2)
            .then_with(|| a.1.cmp(b.1))
            .then_with(|| a.0.cmp(&b.0))
    });
    let mut seen = HashSet::new();
    candidates.retain(|(_, name, price)| !price.is_nan() && seen.insert(*name));
    candidates.truncate(MAX_INSTANCE_TYPES);
    if candidates.is_empty() {
        return Err(none("no candidate instance type (with a price)"));
    }
    let subnets = per_zone_best(&req.subnets);
    if subnets.is_empty() {
        return Err(none("no subnet"));
    }
    let mut out = Vec::new();
    for (i, (template, _)) in templates.iter().enumerate() {
        let mut overrides = Vec::new();
        for (_, name, _) in candidates.iter().filter(|c| c.0 == i) {
            for s in &subnets {
                if unavailable.is_unavailable(name, &s.zone, req.capacity_type) {
                    continue;
                }
                overrides.push(
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type(aws_sdk_ec2::types::InstanceType::from(*name))
                        .subnet_id(&s.id)
                        .availability_zone(&s.zone)
                        .build(),
                );
            }
        }
        if !overrides.is_empty() {
            out.push(((*template).clone(), overrides));
        }
    }
    if out.is_empty() {
        return Err(none(
            "every (instance type, zone) pair is marked unavailable",
        ));
    }
    Ok(out)
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

    fn req(candidates: Vec<(String, f64)>) -> FleetRequest {
        FleetRequest {
            client_token: "uid-1".to_string(),
            launch_template: LaunchTemplateRef {
                id: "lt-1".to_string(),
                name: "n".to_string(),
            },
            capacity_type: CapacityType::Spot,
            candidates,
            subnets: vec![
                subnet("subnet-a1", "us-east-1a", 5),
                subnet("subnet-a2", "us-east-1a", 50),
                subnet("subnet-b", "us-east-1b", 5),
            ],
            tags: BTreeMap::new(),
            more_templates: Vec::new(),
        }
    }

    #[test]
    fn overrides_are_the_60_cheapest_types_times_zonal_subnets() {
        let candidates: Vec<(String, f64)> = (0..80)
            .map(|i| (format!("t{i:02}.large"), f64::from(80 - i)))
            .chain([
                ("nan.large".to_string(), f64::NAN),
                ("t79.large".to_string(), 9.0),
            ])
            .collect();
        let u = UnavailableOfferings::default();
        let o = build_overrides(&req(candidates), &u).expect("overrides");
        assert_eq!(o.len(), 60 * 2);
        let first = &o[0];
        assert_eq!(first.instance_type().map(|t| t.as_str()), Some("t79.large"));
        assert_eq!(first.subnet_id(), Some("subnet-a2"));
        assert_eq!(o[1].subnet_id(), Some("subnet-b"));
        let types: HashSet<_> = o.iter().filter_map(|x| x.instance_type()).collect();
        assert_eq!(types.len(), 60);
        assert!(!types
            .iter()
            .any(|t| t.as_str() == "nan.large" || t.as_str() == "t00.large"));
    }

    #[test]
    fn unavailable_pairs_are_left_out_and_empty_inputs_are_typed() {
        let u = UnavailableOfferings::default();
        u.mark(OfferingKey::new(
            "m5.large",
            "us-east-1a",
            CapacityType::Spot,
        ));
        let r = req(vec![("m5.large".to_string(), 0.1)]);
        let o = build_overrides(&r, &u).expect("overrides");
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].availability_zone(), Some("us-east-1b"));
        u.mark(OfferingKey::new(
            "m5.large",
            "us-east-1b",
            CapacityType::Spot,
        ));
        assert!(matches!(
            build_overrides(&r, &u),
            Err(LaunchError::NoOfferings { .. })
        ));
        assert!(matches!(
            build_overrides(&req(vec![]), &u),
            Err(LaunchError::NoOfferings { .. })
        ));
        assert!(is_capacity_error("InsufficientInstanceCapacity"));
        assert!(!is_capacity_error("UnauthorizedOperation"));
    }

    #[test]
    fn several_templates_share_the_type_cap_and_keep_their_own_types() {
        let mut r = req((0..50).map(|i| (format!("a{i:02}.large"), 1.0)).collect());
        r.more_templates.push(TemplateCandidates {
            launch_template: LaunchTemplateRef {
                id: "lt-2".to_string(),
                name: "arm".to_string(),
            },
            candidates: (0..50)
                .map(|i| (format!("g{i:02}.large"), 0.5))
                .chain([("a00.large".to_string(), 0.1)])
                .collect(),
        });
        let u = UnavailableOfferings::default();
        let configs = build_configs(&r, &u).expect("configs");
        assert_eq!(configs.len(), 2);
        let types = |o: &[FleetLaunchTemplateOverridesRequest]| -> HashSet<String> {
            o.iter()
                .filter_map(|x| x.instance_type().map(|t| t.as_str().to_string()))
                .collect()
        };
        let first = types(&configs[0].1);
        let second = types(&configs[1].1);
        assert_eq!(configs[0].0.id, "lt-1");
        assert_eq!(configs[1].0.id, "lt-2");
        // 60 types in all: a00 (listed twice, kept where it is cheapest: lt-2), the 50 cheaper
        // g types, and 9 more a types.
        assert_eq!(first.len() + second.len(), 60);
        assert_eq!(second.len(), 51);
        assert!(second.contains("a00.large") && !first.contains("a00.large"));
        assert_eq!(first.len(), 9);
    }
}
