//! User data: what a new instance runs to join the cluster, per AMI family.
//!
//! Every family gets the same facts ([`NodeBootstrap`]): the cluster, the node's labels and
//! taints, the kubelet settings of its Provisioner and, always, an explicit max-pods computed
//! from ENI data, so an instance type missing from the AMI's `eni-max-pods.txt` still boots
//! with the right pod density.
//!
//! - AL2 ([`al2`]): a shell script calling `/etc/eks/bootstrap.sh`, in MIME multipart after
//!   the user's own parts ([`mime`]).
//! - AL2023 ([`al2023`]): a nodeadm `NodeConfig` part (`application/node.eks.aws`), in MIME
//!   multipart after the user's parts.
//! - Bottlerocket ([`bottlerocket`]): TOML settings merged with the user's TOML; no MIME.
//! - Custom ([`custom`]): the user's data untouched.
//!
//! **Warm pools** ([`warm`]): an instance launched into a Provisioner's warm pool boots once to
//! initialize and is stopped; it must not join on that boot, and must join when it is started
//! for real. Warm-pool user data (AL2, AL2023) installs a systemd unit instead of joining: the
//! first boot only installs it, every later boot runs it until the node has joined once. See
//! [`warm`] for why this, and not an instance tag read through the metadata service.
//!
//! The result is checked against EC2's 16 KiB limit on the base64-encoded user data
//! ([`UserDataError::TooLarge`]), so a template with a large user script fails with a message
//! naming it instead of an EC2 error at launch.

pub mod al2;
pub mod al2023;
pub mod bottlerocket;
pub mod custom;
pub mod kubelet;
pub mod mime;
pub mod warm;

use std::collections::BTreeMap;

use base64::Engine as _;
use joiner_apis::{AmiFamily, KubeletConfiguration, Provisioner, Taint};
use thiserror::Error;

/// EC2's limit on user data, in bytes of its base64 encoding.
pub const MAX_USER_DATA_BYTES: usize = 16 * 1024;

/// Where the EKS AL2 AMI keeps its bootstrap script.
pub const AL2_BOOTSTRAP_SCRIPT: &str = "/etc/eks/bootstrap.sh";

/// The cluster a node joins: the facts every family's bootstrap needs. The SDK side gets them
/// from `eks:DescribeCluster` (or the controller's flags).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClusterInfo {
    /// EKS cluster name.
    pub name: String,
    /// API server URL.
    pub endpoint: String,
    /// The cluster CA bundle, base64-encoded (as EKS returns it).
    pub ca_bundle: String,
    /// Service CIDR (nodeadm's `spec.cluster.cidr`); AL2023 requires it.
    pub service_cidr: Option<String>,
    /// Cluster DNS address, when not the AMI's default (derived from the service CIDR);
    /// the Provisioner's `kubeletConfiguration.clusterDNS` wins over it.
    pub dns_ip: Option<String>,
}

/// Everything joiner's bootstrap part says about one launch template's nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeBootstrap {
    /// The cluster to join.
    pub cluster: ClusterInfo,
    /// Pods per node, already resolved (ENI data, then the Provisioner's `maxPods` and
    /// `podsPerCore`); always passed explicitly.
    pub max_pods: u32,
    /// Labels the kubelet registers the node with: the Provisioner's labels plus
    /// `joiner.sh/provisioner-name`. Per-instance labels (`joiner.sh/nodeclaim`, instance type,
    /// zone) are not here: a launch template serves many claims and types, so those are set on
    /// the Node object at registration.
    pub labels: BTreeMap<String, String>,
    /// Taints registered with the node: the Provisioner's taints, then its startup taints, then
    /// joiner's own startup taint `joiner.sh/unregistered:NoSchedule`
    /// ([`joiner_core::labels::UNREGISTERED_TAINT`]), which joiner removes once it has labelled
    /// the Node and it is Ready.
    pub taints: Vec<Taint>,
    /// The Provisioner's kubelet settings (its `maxPods` is already folded into `max_pods`).
    pub kubelet: KubeletConfiguration,
    /// AL2 `--container-runtime`, for AMIs that still accept it; omitted when `None`.
    pub container_runtime: Option<String>,
    /// Warm-pool launch, and the state the member waits in: do not join on the first boot
    /// (nor on the hold boot of `Running` and `Hibernated` members), join on every later boot
    /// until joined.
    pub warm_pool: Option<joiner_core::WarmState>,
    /// Images the warm-up pulls (the pool's `prePullImages`; AL2 and AL2023).
    pub pre_pull_images: Vec<String>,
    /// Path of the AL2 bootstrap script ([`AL2_BOOTSTRAP_SCRIPT`]); a parameter so tests can
    /// run the generated script against a stub.
    pub al2_bootstrap_script: String,
}

impl NodeBootstrap {
    /// The bootstrap of `provisioner`'s nodes: its labels plus `joiner.sh/provisioner-name`,
    /// its taints and startup taints (identical entries once) and joiner's unregistered taint,
    /// its kubelet settings.
    ///
    /// Labels the kubelet may not register itself with (`node-role.kubernetes.io/*`,
    /// `node-restriction.kubernetes.io/*`: the NodeRestriction rule) are left out, or the
    /// kubelet would refuse to start; registration puts them on the Node with the claim's other
    /// labels before the unregistered taint comes off, so no pod sees the node without them.
    pub fn for_provisioner(cluster: ClusterInfo, provisioner: &Provisioner, max_pods: u32) -> Self {
        let spec = &provisioner.spec;
        let mut labels = spec.labels.clone();
        labels.retain(|k, _| joiner_apis::syntax::kubelet_may_set(k));
        labels.insert(
            joiner_core::labels::PROVISIONER_NAME.to_string(),
            provisioner.name().to_string(),
        );
        let mut taints: Vec<Taint> = Vec::new();
        let unregistered = unregistered_taint();
        for t in spec
            .taints
            .iter()
            .chain(&spec.startup_taints)
            .chain(std::iter::once(&unregistered))
        {
            if !taints.contains(t) {
                taints.push(t.clone());
            }
        }
        NodeBootstrap {
            cluster,
            max_pods,
            labels,
            taints,
            kubelet: spec.kubelet_configuration.clone().unwrap_or_default(),
            container_runtime: None,
            warm_pool: None,
            pre_pull_images: Vec::new(),
            al2_bootstrap_script: AL2_BOOTSTRAP_SCRIPT.to_string(),
        }
    }

    /// The cluster DNS addresses: the Provisioner's `clusterDNS`, else the cluster's.
    pub fn cluster_dns(&self) -> Vec<String> {
        if self.kubelet.cluster_dns.is_empty() {
            self.cluster.dns_ip.iter().cloned().collect()
        } else {
            self.kubelet.cluster_dns.clone()
        }
    }
}

/// `joiner.sh/unregistered:NoSchedule`: keeps workloads off a new node until joiner has applied
/// its NodeClaim's labels and taints (which the launch template, shared by many claims, cannot
/// carry) and the node is Ready.
pub fn unregistered_taint() -> Taint {
    Taint {
        key: joiner_core::labels::UNREGISTERED_TAINT.to_string(),
        value: None,
        effect: "NoSchedule".to_string(),
    }
}

/// Rendered user data, both as the instance reads it and as EC2 takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserData {
    /// What the instance sees (shell script, MIME document, TOML).
    pub decoded: String,
    /// `decoded` in base64, the form launch templates carry.
    pub base64: String,
}

/// Why user data could not be produced. Each variant names the object (and field) to fix.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UserDataError {
    /// The base64 user data exceeds EC2's 16 KiB limit.
    #[error("NodeTemplate {node_template:?}: spec.userData: the user data joiner would send is {size} bytes base64-encoded, over EC2's limit of {MAX_USER_DATA_BYTES}; shorten spec.userData (e.g. download a script instead of inlining it)")]
    TooLarge {
        /// The NodeTemplate.
        node_template: String,
        /// Encoded size in bytes.
        size: usize,
    },
    /// The user's MIME multipart document cannot be read.
    #[error("NodeTemplate {node_template:?}: spec.userData: malformed MIME multipart: {reason}")]
    MalformedMime {
        /// The NodeTemplate.
        node_template: String,
        /// What is wrong.
        reason: String,
    },
    /// The user's Bottlerocket settings are not TOML.
    #[error("NodeTemplate {node_template:?}: spec.userData: Bottlerocket user data must be TOML: {reason}")]
    BottlerocketToml {
        /// The NodeTemplate.
        node_template: String,
        /// The parser's message.
        reason: String,
    },
    /// AL2023 (nodeadm) needs the service CIDR.
    #[error("NodeTemplate {node_template:?}: amiFamily AL2023 needs the cluster's service CIDR (nodeadm spec.cluster.cidr), which is unknown")]
    MissingServiceCidr {
        /// The NodeTemplate.
        node_template: String,
    },
    /// The family cannot hold a warm-pool node back from joining.
    #[error("NodeTemplate {node_template:?}: spec.amiFamily: warm pools need AL2023, AL2 or Bottlerocket user data; {family} cannot keep a warming instance from joining the cluster")]
    WarmPoolUnsupported {
        /// The NodeTemplate.
        node_template: String,
        /// The family.
        family: &'static str,
    },
    /// A generated document could not be serialized (a bug; reported, not panicked on).
    #[error("NodeTemplate {node_template:?}: cannot serialize the {what}: {reason}")]
    Serialize {
        /// The NodeTemplate.
        node_template: String,
        /// Which document.
        what: &'static str,
        /// The serializer's message.
        reason: String,
    },
}

/// Renders the user data of `family` for `bootstrap`, merged with the NodeTemplate's own
/// `user_data`, and checks its size. `node_template` names the object in errors.
pub fn render(
    family: AmiFamily,
    node_template: &str,
    user_data: Option<&str>,
    bootstrap: &NodeBootstrap,
) -> Result<UserData, UserDataError> {
    if bootstrap.warm_pool.is_some() && family == AmiFamily::Custom {
        return Err(UserDataError::WarmPoolUnsupported {
            node_template: node_template.to_string(),
            family: family.as_str(),
        });
    }
    let user_data = user_data.unwrap_or_default();
    let decoded = match family {
        AmiFamily::Al2 => al2::render(node_template, user_data, bootstrap)?,
        AmiFamily::Al2023 => al2023::render(node_template, user_data, bootstrap)?,
        AmiFamily::Bottlerocket => bottlerocket::render(node_template, user_data, bootstrap)?,
        AmiFamily::Custom => custom::render(user_data),
    };
    let base64 = base64::engine::general_purpose::STANDARD.encode(decoded.as_bytes());
    if base64.len() > MAX_USER_DATA_BYTES {
        return Err(UserDataError::TooLarge {
            node_template: node_template.to_string(),
            size: base64.len(),
        });
    }
    Ok(UserData { decoded, base64 })
}

/// `'text'` for a POSIX shell: single quotes, each inner `'` written as `'\''`.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod warm_sandbox;
