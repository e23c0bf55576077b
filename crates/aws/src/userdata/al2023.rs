//! Amazon Linux 2023: a nodeadm `NodeConfig` (`apiVersion: node.eks.aws/v1alpha1`) in a MIME
//! part of type `application/node.eks.aws`, after the user's parts. nodeadm merges NodeConfig
//! parts in order, so joiner's (last) wins for the fields it sets: the cluster, `maxPods`,
//! the kubelet settings and the label and taint flags.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{kubelet, mime, shell_quote, warm, NodeBootstrap, UserDataError};

/// The MIME document: the user's parts, then joiner's NodeConfig part (or, for a warm-pool
/// launch, the first-boot script that keeps the NodeConfig for the real start).
pub fn render(
    node_template: &str,
    user_data: &str,
    b: &NodeBootstrap,
) -> Result<String, UserDataError> {
    let mut parts = mime::user_parts(node_template, user_data)?;
    let config = node_config(node_template, b)?;
    if let Some(state) = b.warm_pool {
        let join = format!(
            "#!/bin/bash\nset -ex\nnodeadm init --config-source {}\n",
            shell_quote(&format!("file://{}", warm::NODE_CONFIG_FILE))
        );
        let script = warm::first_boot_script(
            &join,
            &[(warm::NODE_CONFIG_FILE, &config)],
            &b.pre_pull_images,
            state,
        );
        parts.push(mime::Part::new(mime::SHELL_SCRIPT, script));
    } else {
        parts.push(mime::Part::new(mime::NODE_CONFIG, config));
    }
    mime::assemble(node_template, &parts)
}

/// joiner's NodeConfig as YAML.
pub fn node_config(node_template: &str, b: &NodeBootstrap) -> Result<String, UserDataError> {
    let c = &b.cluster;
    let cidr = c
        .service_cidr
        .clone()
        .ok_or_else(|| UserDataError::MissingServiceCidr {
            node_template: node_template.to_string(),
        })?;
    let k = &b.kubelet;
    let mut flags: Vec<String> = Vec::new();
    flags.extend(kubelet::node_labels_flag(&b.labels));
    flags.extend(kubelet::taints_flag(&b.taints));
    let doc = NodeConfig {
        api_version: "node.eks.aws/v1alpha1",
        kind: "NodeConfig",
        spec: Spec {
            cluster: Cluster {
                name: c.name.clone(),
                api_server_endpoint: c.endpoint.clone(),
                certificate_authority: c.ca_bundle.clone(),
                cidr,
            },
            kubelet: Kubelet {
                config: KubeletConfig {
                    max_pods: b.max_pods,
                    cluster_dns: b.cluster_dns(),
                    pods_per_core: k.pods_per_core,
                    system_reserved: kubelet::quantities(&k.system_reserved),
                    kube_reserved: kubelet::quantities(&k.kube_reserved),
                    eviction_hard: k.eviction_hard.clone(),
                    eviction_soft: k.eviction_soft.clone(),
                    eviction_soft_grace_period: k.eviction_soft_grace_period.clone(),
                    eviction_max_pod_grace_period: k.eviction_max_pod_grace_period,
                    image_gc_high_threshold_percent: k.image_gc_high_threshold_percent,
                    image_gc_low_threshold_percent: k.image_gc_low_threshold_percent,
                    cpu_cfs_quota: k.cpu_cfs_quota,
                },
                flags,
            },
        },
    };
    let yaml = serde_yaml::to_string(&doc).map_err(|e| UserDataError::Serialize {
        node_template: node_template.to_string(),
        what: "nodeadm NodeConfig",
        reason: e.to_string(),
    })?;
    Ok(format!("# joiner generated NodeConfig\n---\n{yaml}"))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeConfig {
    api_version: &'static str,
    kind: &'static str,
    spec: Spec,
}

#[derive(Serialize)]
struct Spec {
    cluster: Cluster,
    kubelet: Kubelet,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Cluster {
    name: String,
    api_server_endpoint: String,
    certificate_authority: String,
    cidr: String,
}

#[derive(Serialize)]
struct Kubelet {
    config: KubeletConfig,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    flags: Vec<String>,
}

/// The KubeletConfiguration fields joiner sets, in the kubelet's own spelling.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KubeletConfig {
    max_pods: u32,
    #[serde(rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    cluster_dns: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pods_per_core: Option<i32>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    system_reserved: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    kube_reserved: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    eviction_hard: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    eviction_soft: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    eviction_soft_grace_period: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    eviction_max_pod_grace_period: Option<i32>,
    #[serde(
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    image_gc_high_threshold_percent: Option<i32>,
    #[serde(
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    image_gc_low_threshold_percent: Option<i32>,
    #[serde(rename = "cpuCFSQuota", skip_serializing_if = "Option::is_none")]
    cpu_cfs_quota: Option<bool>,
}
