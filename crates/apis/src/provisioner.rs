//! The `Provisioner` resource: which nodes joiner may launch, how many, and when it may take
//! them away. Field for field Karpenter's v1alpha5 Provisioner, plus disruption budgets and a
//! warm pool, so a Karpenter manifest needs only its apiVersion changed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::disruption::Disruption;
use crate::selector::NodeSelectorRequirement;
use crate::taint::Taint;

/// `spec` of a [`Provisioner`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "joiner.sh",
    version = "v1alpha1",
    kind = "Provisioner",
    status = "ProvisionerStatus",
    shortname = "prov",
    printcolumn = r#"{"name":"Template","type":"string","jsonPath":".spec.providerRef.name"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::spec_rules::provisioner_rules()))]
pub struct ProvisionerSpec {
    /// Constraints on the nodes launched (instance types, zones, capacity types, custom labels).
    /// Without a `karpenter.sh/capacity-type` requirement only on-demand capacity is used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = crate::label_rules::MAX_LABELS,
        "x-kubernetes-validations" = crate::label_rules::requirement_list_rules()
    ))]
    pub requirements: Vec<NodeSelectorRequirement>,
    /// Labels put on every node launched; they also count as requirements.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::label_rules::label_map_schema")]
    pub labels: BTreeMap<String, String>,
    /// Annotations put on every node launched.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Taints put on every node launched; pods must tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints present only while a node starts (removed by a DaemonSet or agent); pods need not
    /// tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Caps on the total capacity of this Provisioner's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Priority among Provisioners (0–100); higher is tried first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub weight: Option<i32>,
    /// The NodeTemplate with the AWS settings (subnets, security groups, AMI, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_ref: Option<ProviderRef>,
    /// Consolidation: delete or replace nodes whose pods fit more cheaply elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation: Option<Consolidation>,
    /// Delete a node this long after its last non-daemon pod left; unset disables emptiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_empty: Option<i64>,
    /// Replace a node this long after it launched; unset means nodes never expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_until_expired: Option<i64>,
    /// kubelet settings for the nodes launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_configuration: Option<KubeletConfiguration>,
    /// Disruption budgets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,
    /// Stopped, pre-initialized instances kept ready for fast scale-out: a new claim whose
    /// types and zones admit a ready member starts it instead of launching
    /// (docs/warm-pool-design.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_pool: Option<WarmPool>,
    /// What to do on the interruption queue's hints about this Provisioner's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption: Option<Interruption>,
}

/// `spec.interruption`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interruption {
    /// On a spot rebalance recommendation (a spot node at elevated risk of interruption):
    /// `Notify` (the default) publishes an Event only; `Replace` launches a replacement at once
    /// and drains the node, trading some churn for not waiting for the two-minute warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(Notify|Replace)$"))]
    pub rebalance: Option<String>,
}

/// `spec.limits`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Resource name (cpu, memory, ...) to the most capacity all nodes together may have;
    /// `nodes` caps how many nodes it may own (Karpenter's `limits.nodes`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
}

/// `spec.providerRef`: the NodeTemplate to launch with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRef {
    /// NodeTemplate name.
    pub name: String,
    /// Kind, `NodeTemplate` when omitted (an imported `AWSNodeTemplate` is accepted too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// API version, `joiner.sh/v1alpha1` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
}

/// `spec.consolidation`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Consolidation {
    /// True to let joiner delete or replace underused nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How much disruption a move may cost for what it saves: `WhenEmptyOrUnderutilized`
    /// (the default, Karpenter's: delete a node whose pods fit elsewhere, replace nodes by a
    /// strictly cheaper one, no score gate), `Aggressive` (the same), `Balanced` (Karpenter's
    /// Balanced: a move's share of the Provisioner's savings must be at least half its share
    /// of the disruption, score ≥ 0.5) or `Conservative` (its whole share, score ≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(WhenEmptyOrUnderutilized|Aggressive|Balanced|Conservative)$"))]
    pub policy: Option<String>,
    /// The score a move needs, overriding the policy's (savings share over disruption share;
    /// 0.5 is Balanced). Opt-in: unset, only a gated policy scores moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub min_score: Option<f64>,
    /// How much cheaper a replacement must be than what it replaces, as a percentage
    /// ("10%"). Opt-in: unset, any strictly cheaper replacement passes, as in Karpenter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]|[1-9][0-9]|100)%$"))]
    pub min_price_improvement: Option<String>,
    /// How long a node's pods must stay unchanged before it is a candidate, as a Go duration
    /// ("30s", the default), or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after: Option<String>,
}

/// `spec.kubeletConfiguration`: the kubelet settings that change scheduling (pod density,
/// reservations, eviction thresholds) plus the few that launch templates carry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::spec_rules::kubelet_rules()))]
pub struct KubeletConfiguration {
    /// DNS server addresses for pods.
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// Most pods per node; replaces the ENI-derived value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_pods: Option<i32>,
    /// Most pods per core; the node's max-pods is the smaller of this times cores and maxPods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for the operating system.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = crate::spec_rules::RESERVABLE.len(),
        "x-kubernetes-validations" = crate::spec_rules::reserved_rules()
    ))]
    pub system_reserved: BTreeMap<String, Quantity>,
    /// Resources reserved for the kubelet and container runtime.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = crate::spec_rules::RESERVABLE.len(),
        "x-kubernetes-validations" = crate::spec_rules::reserved_rules()
    ))]
    pub kube_reserved: BTreeMap<String, Quantity>,
    /// Hard eviction thresholds (`memory.available: 100Mi`, `nodefs.available: 10%`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = crate::spec_rules::EVICTION_SIGNALS.len(),
        "x-kubernetes-validations" = crate::spec_rules::eviction_rules()
    ))]
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds; each needs a grace period.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = crate::spec_rules::EVICTION_SIGNALS.len(),
        "x-kubernetes-validations" = crate::spec_rules::eviction_rules()
    ))]
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace periods (Go durations) of the soft thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = crate::spec_rules::EVICTION_SIGNALS.len()))]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// Longest pod termination grace period honored on soft eviction, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage percentage that starts image garbage collection.
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percentage image garbage collection frees down to.
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Enforce CPU limits with CFS quota.
    #[serde(
        default,
        rename = "cpuCFSQuota",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
}

/// `spec.warmPool`: stopped instances initialized ahead of demand, started before any new
/// launch (docs/warm-pool-design.md says which fields are acted on so far).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::spec_rules::warm_pool_rules()))]
pub struct WarmPool {
    /// Instances kept ready: a count, or `auto` (the peak of claims per 10 minutes over the
    /// last day, at most `maxSize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<IntOrString>,
    /// The most instances `size: auto` keeps (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub max_size: Option<i32>,
    /// Instance types of the members, several so that a shortage of one does not empty the
    /// pool. Default: the cheapest allowed types that hold the Provisioner's largest recent
    /// pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    /// Zones of the members; default: the Provisioner's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// What a ready member is: `Stopped` (the default: only its volumes cost), `Hibernated`
    /// (memory kept on an encrypted root volume sized for it; hibernation-capable types,
    /// AL2023 and AL2 only) or `Running` (costs as a running instance; AL2023 and AL2 only,
    /// taken by a reboot). A pool asking for a state its NodeTemplate cannot keep launches no
    /// member and says why in its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(Stopped|Hibernated|Running)$"))]
    pub state: Option<String>,
    /// Images pulled while a member warms (ECR images with the node role's credentials), so
    /// its pods start without pulling: by the first-boot script on AL2023 and AL2, through SSM
    /// Run Command on Bottlerocket (the node role needs `AmazonSSMManagedInstanceCore`). A
    /// failed pull is skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_pull_images: Vec<String>,
    /// Deprecated and ignored: a drained node is always terminated, never returned to the
    /// pool. Returning it meant tagging a node that had served pods as a member, which let the
    /// controller's role stop, rewrite and command it; the warm-pool tag is now set at launch
    /// only. Accepted so existing manifests still apply; `joiner plan` warns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reuse_on_scale_in: bool,
    /// How much dearer than the cheapest fitting new instance a warm one may be and still be
    /// used, as a percentage ("25%", the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]|[1-9][0-9]|[1-9][0-9][0-9])%$"))]
    pub max_price_premium: Option<String>,
}

impl WarmPool {
    /// `state` read (validation refuses any other spelling; unset is `Stopped`).
    pub fn warm_state(&self) -> joiner_core::WarmState {
        self.state
            .as_deref()
            .and_then(joiner_core::WarmState::parse)
            .unwrap_or_default()
    }
}

/// `status` of a [`Provisioner`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionerStatus {
    /// Ready (validated, its NodeTemplate resolved) and the like.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Capacity of the nodes it owns now, by resource name (compared against limits).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    /// The warm pool's members by phase and what the pool costs while idle; absent without
    /// `spec.warmPool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_pool: Option<WarmPoolStatus>,
}

/// `status.warmPool` of a Provisioner.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolStatus {
    /// The size the pool is kept at now.
    pub desired: i32,
    /// Members launched and initializing.
    pub warming: i32,
    /// Members stopped and ready to be taken.
    pub ready: i32,
    /// Members handed to a claim and starting.
    pub claimed: i32,
    /// What the pool costs per hour while nobody uses it, USD: the root volumes of stopped
    /// members and the instance price of members still warming.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_cost_per_hour: Option<f64>,
    /// Why the pool cannot be kept at its size, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Provisioner {
    /// metadata.name, empty when missing (a manifest being validated may lack one).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// Why joiner launches nothing for this Provisioner now, when it does not: it is being
    /// deleted, or its Ready condition is False (its NodeTemplate does not resolve, its
    /// requirements allow no offering, ...). Karpenter skips such NodePools too. A Provisioner
    /// not yet given a status (Ready absent or Unknown) is used.
    pub fn not_planned(&self) -> Option<String> {
        if self.metadata.deletion_timestamp.is_some() {
            return Some("it is being deleted".into());
        }
        let conditions = self
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        match crate::condition::find(conditions, "Ready") {
            Some(c) if c.status == "False" => {
                Some(format!("it is not Ready ({}: {})", c.reason, c.message))
            }
            _ => None,
        }
    }

    /// Whether consolidation is on; off unless enabled, as in Karpenter v1alpha5.
    pub fn consolidation_enabled(&self) -> bool {
        self.spec
            .consolidation
            .as_ref()
            .and_then(|c| c.enabled)
            .unwrap_or(false)
    }
}
