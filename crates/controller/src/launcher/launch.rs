//! Launching a NodeClaim's instance and recording it in the claim's status.
//!
//! Every launch starts by asking the cloud for an instance already tagged with the claim: a
//! crash between the NodeClaim write and CreateFleet finds none and launches (with the claim's
//! UID as idempotency token), a crash between CreateFleet and the status write finds the
//! instance and only writes the status. So no path leaks or duplicates an instance.

use std::collections::BTreeMap;

use joiner_apis::condition;
use joiner_apis::convert::node_claim::{claim_requirements, quantities};
use joiner_apis::NodeClaim;
use joiner_core::instance_type::offering_allowed;
use joiner_core::scheduling::NewNode;
use joiner_core::{
    labels, CapacityType, CloudError, CloudErrorKind, CloudProvider, InstanceType, LaunchRequest,
    LaunchedNode,
};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::take::{take, TAKEN_REASON};
use crate::context::Context;
use crate::k8s::claims::{
    claim_condition, delete_claim, patch_claim_status, with_condition, Guard,
};
use crate::k8s::codes::is_not_found;
use crate::metrics::CodeLabels;
use joiner_apis::node_claim::WARMING;

use super::error::ProvisioningError;

/// Condition reason of a launch that failed for a reason other than capacity.
pub const LAUNCH_FAILED: &str = "LaunchFailed";
/// Condition reason of a successful launch.
pub const LAUNCHED_REASON: &str = "InstanceLaunched";

/// What one launch attempt did.
#[derive(Clone, Debug, PartialEq)]
pub enum Launch {
    /// The claim has an instance and its status says so.
    Launched(LaunchedClaim),
    /// No capacity (or no offering left): the claim was deleted so its pods are planned again
    /// without the offerings that failed.
    Requeued {
        /// The claim.
        claim: String,
        /// The error code (`InsufficientInstanceCapacity`, `NoAvailableOffering`).
        code: String,
    },
    /// Launching failed for another reason; the claim's Launched condition is False with the
    /// reason and the launcher retries with backoff.
    Failed {
        /// The claim.
        claim: String,
        /// The error code, `other` when unknown.
        code: String,
        /// The error, naming the object at fault.
        message: String,
    },
}

/// A claim whose instance exists.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchedClaim {
    /// The claim.
    pub claim: String,
    /// The instance.
    pub instance_id: String,
    /// Its type.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// True when the instance already existed (an interrupted launch) and was adopted.
    pub adopted: bool,
}

/// The claim's UID, the launch's idempotency token.
fn claim_uid(claim: &NodeClaim) -> Result<String, ProvisioningError> {
    claim
        .metadata
        .uid
        .clone()
        .ok_or_else(|| ProvisioningError::Invalid {
            claim: claim.name().to_string(),
            field: "metadata.uid".into(),
            reason: "the API server gave the claim no UID".into(),
        })
}

/// The launch request for `claim` written for plan node `node`: the node's priced options,
/// capacity type and zones, as the simulation chose them (no second look at the catalog).
pub fn planned_request(
    claim: &NodeClaim,
    node: &NewNode,
) -> Result<LaunchRequest, ProvisioningError> {
    Ok(LaunchRequest {
        claim_name: claim.name().to_string(),
        claim_uid: claim_uid(claim)?,
        provisioner: claim.spec.provisioner_name.clone(),
        capacity_type: node.capacity_type,
        candidates: node.priced_options(),
        zones: node.zones(),
        warm_pool: None,
    })
}

/// The launch request for a stored `claim` whose plan is gone (a crash or an error
/// interrupted its launch): candidates are the types of its instance-type requirement that the
/// catalog offers where the claim allows, with their lowest available price, cheapest first;
/// zones are those of its zone requirement (none: any zone the provider reaches).
pub fn launch_request(
    claim: &NodeClaim,
    catalog: &[InstanceType],
) -> Result<LaunchRequest, ProvisioningError> {
    let name = claim.name().to_string();
    let reqs = claim_requirements(claim).map_err(|e| ProvisioningError::Invalid {
        claim: name.clone(),
        field: e.field,
        reason: e.reason,
    })?;
    let uid = claim_uid(claim)?;
    let capacity_type = reqs
        .get(labels::CAPACITY_TYPE)
        .and_then(|r| r.single_value())
        .and_then(CapacityType::parse)
        .unwrap_or(CapacityType::OnDemand);
    let named: Vec<String> = reqs
        .get(labels::INSTANCE_TYPE)
        .and_then(|r| r.in_values())
        .map(<[String]>::to_vec)
        .unwrap_or_default();
    let mut candidates: Vec<(String, f64)> = named
        .iter()
        .filter_map(|t| {
            let it = catalog.iter().find(|c| &c.name == t)?;
            let price = it
                .offerings
                .iter()
                .filter(|o| {
                    o.available && o.capacity_type == capacity_type && offering_allowed(o, &reqs)
                })
                .map(|o| o.price)
                .min_by(f64::total_cmp)?;
            Some((t.clone(), price))
        })
        .collect();
    candidates.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let zones = reqs
        .get(labels::ZONE)
        .and_then(|r| r.in_values())
        .map(<[String]>::to_vec)
        .unwrap_or_default();
    Ok(LaunchRequest {
        claim_name: name,
        claim_uid: uid,
        provisioner: claim.spec.provisioner_name.clone(),
        capacity_type,
        candidates,
        zones,
        warm_pool: claim.warm_pool().map(|_| claim.warm_state()),
    })
}

/// Writes what the cloud launched into the claim's status, with Launched=True: the price is the
/// one the request gave the launched type, the capacity and allocatable those the catalog
/// gives it.
async fn record_launch<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    node: &LaunchedNode,
    price: Option<f64>,
    reason: &str,
    catalog: &[InstanceType],
) -> Result<(), ProvisioningError> {
    let name = claim.name();
    let it = catalog.iter().find(|t| t.name == node.instance_type);
    let message = format!(
        "NodeClaim {name}: instance {} ({}) in {}",
        node.instance_id, node.instance_type, node.zone
    );
    let conditions = with_condition(
        claim,
        claim_condition(
            claim,
            condition::LAUNCHED,
            "True",
            reason,
            &message,
            Timestamp::now(),
        ),
    );
    let mut status = json!({
        "instanceID": node.instance_id,
        "providerID": node.provider_id,
        "instanceType": node.instance_type,
        "zone": node.zone,
        "capacityType": node.capacity_type.as_str(),
        "conditions": conditions,
    });
    if let Some(p) = price {
        status["pricePerHour"] = json!(p);
    }
    if claim.warm_pool().is_some() && claim.warm_phase() == Some(WARMING) {
        status["warmPool"] = json!({ "phase": WARMING });
    }
    // What the instance was launched with, for drift: compared later with what its
    // NodeTemplate resolves to.
    if let Some(image) = &node.image_id {
        status["imageID"] = json!(image);
    }
    if let Some(subnet) = &node.subnet_id {
        status["subnetID"] = json!(subnet);
    }
    if !node.security_group_ids.is_empty() {
        status["securityGroupIDs"] = json!(node.security_group_ids);
    }
    if let Some(t) = it {
        // As the simulation sized it: the Provisioner's kubelet and volume settings applied.
        let kubelet = ctx.state.kubelet_settings(&claim.spec.provisioner_name);
        status["capacity"] = json!(quantities(&kubelet.capacity(t)));
        status["allocatable"] = json!(quantities(&kubelet.allocatable(t)));
    }
    match patch_claim_status(&ctx.client, claim, status, Guard::None).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => {
            // The claim was deleted while its instance was being launched: nothing will ever
            // register or terminate that instance through the claim, so it goes now.
            tracing::warn!(claim = %name, instance = %node.instance_id,
                "NodeClaim deleted during launch; terminating its instance");
            if let Err(e) = ctx.cloud.delete(&node.instance_id).await {
                if e.kind() != CloudErrorKind::NotFound {
                    tracing::warn!(claim = %name, instance = %node.instance_id, error = %e,
                        "terminating the instance of a deleted NodeClaim failed; garbage collection will retry");
                }
            }
            Err(ProvisioningError::ClaimGone {
                claim: name.to_string(),
                instance_id: node.instance_id.clone(),
            })
        }
        Err(source) => Err(ProvisioningError::PatchStatus {
            claim: name.to_string(),
            source: Box::new(source),
        }),
    }
}

fn count_failure<P: CloudProvider>(ctx: &Context<P>, code: &str) {
    ctx.metrics
        .launch_failures
        .get_or_create(&CodeLabels {
            code: code.to_string(),
        })
        .inc();
}

/// Gives up a claim that cannot be launched now: deleting it lets the termination controller
/// release it (it has no instance) and the next batch plan its pods again.
async fn requeue<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &str,
    code: String,
) -> Result<Launch, ProvisioningError> {
    count_failure(ctx, &code);
    delete_claim(&ctx.client, claim)
        .await
        .map_err(|source| ProvisioningError::DeleteClaim {
            claim: claim.to_string(),
            source: Box::new(source),
        })?;
    ctx.state.created.forget(claim);
    tracing::warn!(claim = %claim, code = %code, "no capacity for NodeClaim; deleted it so its pods are planned again");
    Ok(Launch::Requeued {
        claim: claim.to_string(),
        code,
    })
}

/// Launches (or adopts) the instance of `claim` and writes its status. The candidates are
/// those of plan node `planned` when the claim was just written for it, else read from the
/// claim against `catalog` (the types `ctx.cloud.instance_types` gave for its Provisioner),
/// which also gives the launched type's capacity for the status.
pub async fn launch_claim<P: CloudProvider>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    planned: Option<&NewNode>,
    catalog: &[InstanceType],
) -> Result<Launch, ProvisioningError> {
    let name = claim.name().to_string();
    let Some(_launching) = ctx.state.created.begin_launch(&name) else {
        return Err(ProvisioningError::AlreadyLaunching { claim: name });
    };
    let request = match planned {
        Some(node) => planned_request(claim, node)?,
        None => launch_request(claim, catalog)?,
    };
    let found = ctx
        .cloud
        .get(&name)
        .await
        .map_err(|e| ProvisioningError::Cloud {
            claim: name.clone(),
            message: e.to_string(),
        })?;
    let request_price = |node: &LaunchedNode| {
        request
            .candidates
            .iter()
            .find(|(t, _)| t == &node.instance_type)
            .map(|(_, p)| *p)
    };
    let (node, adopted, price, reason) = match found {
        // A warm member tagged for this claim whose start (or, for a running member, whose
        // reboot) a crash or a failed start whose tag could not be restored interrupted:
        // start it now. The provider's start is idempotent for the claim: a member already
        // started (or rebooted) for it is answered as it is.
        Some(node) if node.warm_pool && claim.warm_pool().is_none() => {
            match ctx.cloud.start_warm(&node.instance_id, &name).await {
                Ok(started) => {
                    tracing::info!(claim = %name, instance = %started.instance_id,
                        "resumed the start of a warm-pool member taken for the NodeClaim");
                    let price = request_price(&started).or(node_price(&started, catalog));
                    (started, true, price, TAKEN_REASON)
                }
                Err(e) => {
                    return Err(ProvisioningError::Cloud {
                        claim: name.clone(),
                        message: format!("starting warm-pool member {}: {e}", node.instance_id),
                    })
                }
            }
        }
        Some(node) => {
            tracing::info!(claim = %name, instance = %node.instance_id,
                "NodeClaim already has an instance; recording it");
            let price = request_price(&node);
            (node, true, price, LAUNCHED_REASON)
        }
        None if request.candidates.is_empty() => {
            return requeue(ctx, &name, "NoAvailableOffering".to_string()).await;
        }
        None => match take(ctx, claim, &request, catalog).await {
            Ok(Some(taken)) => (taken.node, false, taken.price, TAKEN_REASON),
            Err(message) => {
                return Err(ProvisioningError::TakeUnfinished {
                    claim: name.clone(),
                    message,
                })
            }
            Ok(None) => match ctx.cloud.create(&request).await {
                Ok(node) => {
                    let price = request_price(&node);
                    (node, false, price, LAUNCHED_REASON)
                }
                Err(e) if e.kind() == CloudErrorKind::InsufficientCapacity => {
                    return requeue(ctx, &name, e.code()).await;
                }
                Err(e) => {
                    let text = e.to_string();
                    let code = e.code();
                    count_failure(ctx, &code);
                    let message = format!("NodeClaim {name}: launch failed: {text}");
                    tracing::warn!(claim = %name, code = %code, error = %text, "launch failed");
                    let failed = claim_condition(
                        claim,
                        condition::LAUNCHED,
                        "False",
                        LAUNCH_FAILED,
                        &message,
                        Timestamp::now(),
                    );
                    let conditions = with_condition(claim, failed);
                    patch_claim_status(
                        &ctx.client,
                        claim,
                        json!({ "conditions": conditions }),
                        Guard::None,
                    )
                    .await
                    .map_err(|source| ProvisioningError::PatchStatus {
                        claim: name.clone(),
                        source: Box::new(source),
                    })?;
                    return Ok(Launch::Failed {
                        claim: name,
                        code,
                        message,
                    });
                }
            },
        },
    };
    record_launch(ctx, claim, &node, price, reason, catalog).await?;
    tracing::info!(claim = %name, instance = %node.instance_id, instance_type = %node.instance_type,
        zone = %node.zone, adopted, "NodeClaim launched");
    Ok(Launch::Launched(LaunchedClaim {
        claim: name,
        instance_id: node.instance_id,
        instance_type: node.instance_type,
        zone: node.zone,
        adopted,
    }))
}

/// The on-demand price of `node`'s type in its zone, from `catalog`.
fn node_price(node: &LaunchedNode, catalog: &[InstanceType]) -> Option<f64> {
    catalog
        .iter()
        .find(|t| t.name == node.instance_type)
        .and_then(|t| {
            joiner_apis::cluster::warm_pool::sizing::on_demand_price(
                t,
                std::slice::from_ref(&node.zone),
            )
        })
}

/// Per-provisioner catalogs fetched once per pass.
#[derive(Default)]
pub struct Catalogs {
    by_provisioner: BTreeMap<String, Vec<InstanceType>>,
}

impl Catalogs {
    /// The catalog of `provisioner`, asking the cloud the first time.
    pub async fn get<P: CloudProvider>(
        &mut self,
        ctx: &Context<P>,
        provisioner: &str,
    ) -> Result<&[InstanceType], ProvisioningError> {
        if !self.by_provisioner.contains_key(provisioner) {
            let types = ctx.cloud.instance_types(provisioner).await.map_err(|e| {
                ProvisioningError::Catalog {
                    provisioner: provisioner.to_string(),
                    message: e.to_string(),
                }
            })?;
            self.by_provisioner.insert(provisioner.to_string(), types);
        }
        Ok(self
            .by_provisioner
            .get(provisioner)
            .map(Vec::as_slice)
            .unwrap_or_default())
    }

    /// The catalog of `provisioner` as [`Catalogs::get`] read it; empty when it was not read.
    pub fn cached(&self, provisioner: &str) -> &[InstanceType] {
        self.by_provisioner
            .get(provisioner)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The instance types of every one of `provisioners`, each type once (in Provisioner name
    /// order), and the Provisioners whose catalog could not be read, with why: the catalog a
    /// whole-cluster simulation (disruption, interruption) runs on.
    pub async fn union<P: CloudProvider>(
        &mut self,
        ctx: &Context<P>,
        provisioners: &[&str],
    ) -> (Vec<InstanceType>, Vec<(String, String)>) {
        let mut names: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut catalog = Vec::new();
        let mut failed = Vec::new();
        let mut sorted = provisioners.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        for prov in sorted {
            match self.get(ctx, prov).await {
                Ok(types) => {
                    for t in types {
                        if names.insert(t.name.clone()) {
                            catalog.push(t.clone());
                        }
                    }
                }
                Err(e) => failed.push((prov.to_string(), e.to_string())),
            }
        }
        (catalog, failed)
    }
}
