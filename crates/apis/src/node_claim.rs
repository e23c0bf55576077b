//! The `NodeClaim` resource: joiner's record of one launch. It is written before the cloud is
//! asked for an instance, so a restart finds the claim and never launches twice or leaks an
//! instance (the claim's UID is the launch's idempotency token).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{self, Condition};
use crate::selector::NodeSelectorRequirement;
use crate::taint::Taint;

/// `spec` of a [`NodeClaim`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "joiner.sh",
    version = "v1alpha1",
    kind = "NodeClaim",
    status = "NodeClaimStatus",
    shortname = "nc",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".status.instanceType"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".status.zone"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".status.capacityType"}"#,
    printcolumn = r#"{"name":"Warm","type":"string","jsonPath":".status.warmPool.phase","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    /// The Provisioner that opened the claim.
    pub provisioner_name: String,
    /// What the instance must satisfy: the Provisioner's requirements narrowed by the pods
    /// planned onto it (including the instance types that fit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<NodeSelectorRequirement>,
    /// Resources the planned pods (and daemons) request.
    #[serde(default)]
    pub resources: NodeClaimResources,
    /// Taints the node registers with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints the node starts with and loses once initialized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// NodeTemplate to launch with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template_ref: Option<NodeTemplateRef>,
}

/// `spec.resources`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimResources {
    /// Requests by resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

/// `spec.nodeTemplateRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplateRef {
    /// NodeTemplate name.
    pub name: String,
}

/// `status` of a [`NodeClaim`]: what was launched and how far it got.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// EC2 instance ID.
    #[serde(
        default,
        rename = "instanceID",
        skip_serializing_if = "Option::is_none"
    )]
    pub instance_id: Option<String>,
    /// `aws:///<zone>/<instance-id>`, as the node will report it.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Instance type launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// Availability zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `on-demand` or `spot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    /// The AMI the instance booted: compared with the AMIs its NodeTemplate resolves to now,
    /// so a newer AMI (behind the SSM alias or an amiSelector) drifts the node.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The subnet it was launched in: compared with the subnets its NodeTemplate selects now.
    #[serde(default, rename = "subnetID", skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// The security groups it was launched with: compared with those its NodeTemplate
    /// selects now.
    #[serde(
        default,
        rename = "securityGroupIDs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub security_group_ids: Vec<String>,
    /// Price of the offering at launch, USD per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_hour: Option<f64>,
    /// Node name once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Capacity of the instance, by resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Allocatable of the instance, by resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Launched, Registered, Initialized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Set on a warm-pool member (a claim labelled `joiner.sh/warm-pool`): where it is in the
    /// pool. Absent on claims opened for pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_pool: Option<WarmMemberStatus>,
}

/// `status.warmPool` of a warm-pool member: every member is at all times `Warming` (launched,
/// initializing; for `Running` and `Hibernated` members also their hold boot and the
/// hibernation), `Warm` (ready to be taken: stopped, hibernated or running, as its
/// `joiner.sh/warm-state` annotation says) or `Claimed` (handed to the NodeClaim
/// `claimedBy`, starting); a member being deleted is being terminated (or, once handed over,
/// only released: its instance belongs to the claim).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmMemberStatus {
    /// `Warming`, `Warm` or `Claimed`.
    #[schemars(regex(pattern = r"^(Warming|Warm|Claimed)$"))]
    pub phase: String,
    /// The NodeClaim the member was handed to (phase `Claimed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// Why the member is not progressing, when it is not (a failed stop, a refused start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the pool started the member again after its warm-up, for its hold boot (members
    /// waiting `Running` or `Hibernated`; written before the start, so a crash repeats it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// When the pool asked EC2 to hibernate the member, after its hold boot (members waiting
    /// `Hibernated`; written before the call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernated_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The pull of the pool's `prePullImages` sent to the member while it warms (Bottlerocket,
    /// whose user data runs no scripts: an SSM command ID), so the next pass asks after it
    /// instead of sending another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<String>,
    /// How that pull ended (`Succeeded`, or why images are missing: the pods pull them when
    /// they start); written before the member is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_result: Option<String>,
}

/// Phase of a member launched and initializing.
pub const WARMING: &str = "Warming";
/// Phase of a member stopped and ready to be taken.
pub const WARM: &str = "Warm";
/// Phase of a member handed to a claim and starting.
pub const CLAIMED: &str = "Claimed";

impl NodeClaim {
    /// metadata.name, empty when missing.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// True once the cloud provider created the instance.
    pub fn is_launched(&self) -> bool {
        self.has_condition(condition::LAUNCHED)
    }

    /// True once the node joined the cluster.
    pub fn is_registered(&self) -> bool {
        self.has_condition(condition::REGISTERED)
    }

    /// True once the node is ready for pods.
    pub fn is_initialized(&self) -> bool {
        self.has_condition(condition::INITIALIZED)
    }

    /// The Provisioner whose warm pool the claim is a member of, when it is one (label
    /// `joiner.sh/warm-pool`). Members serve no pods: they are not in-flight capacity, never
    /// register while in the pool, and are not disrupted or interrupted as nodes.
    pub fn warm_pool(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(joiner_core::labels::WARM_POOL))
            .map(String::as_str)
    }

    /// The member's phase (`Warming` until its status says otherwise); `None` for claims that
    /// are not warm-pool members.
    pub fn warm_phase(&self) -> Option<&str> {
        self.warm_pool()?;
        Some(
            self.status
                .as_ref()
                .and_then(|s| s.warm_pool.as_ref())
                .map_or(WARMING, |w| w.phase.as_str()),
        )
    }

    /// The state a warm-pool member was launched to wait in (annotation
    /// `joiner.sh/warm-state`; members written before it are `Stopped`).
    pub fn warm_state(&self) -> joiner_core::WarmState {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(joiner_core::labels::WARM_STATE))
            .and_then(|s| joiner_core::WarmState::parse(s))
            .unwrap_or_default()
    }

    fn has_condition(&self, type_: &str) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| condition::is_true(&s.conditions, type_))
    }
}
