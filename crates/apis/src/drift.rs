//! Drift a node cannot show: whether the settings its NodeClaim was launched with still are
//! its Provisioner's and NodeTemplate's.
//!
//! Two kinds, as Karpenter has them:
//! - **Static** settings (the Provisioner's labels, annotations, taints, startup taints,
//!   kubelet configuration and NodeTemplate reference; the NodeTemplate's AMI family, instance
//!   profile, user data, tags, metadata options, block devices and monitoring) are hashed when
//!   the claim is written and recorded as annotations ([`PROVISIONER_HASH`],
//!   [`NODE_TEMPLATE_HASH`]). A different hash now is drift. The hashes carry a version
//!   ([`HASH_VERSION`]): a claim hashed another way is not called drifted, so a joiner upgrade
//!   that changes what is hashed never replaces every node at once.
//! - **Dynamic** settings (which AMIs, subnets and security groups the selectors resolve to,
//!   including a newer AMI behind the SSM alias) are compared with what the instance was
//!   launched with, recorded in the claim's status, against the NodeTemplate's status, which
//!   the status controller keeps resolved.
//!
//! The requirements, labels and taints a node shows are compared by the planner itself
//! (`joiner_core::disruption::visible_drift`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::convert::node_claim::selector_requirements;
use crate::{NodeClaim, NodeTemplate, NodeTemplateSpec, Provisioner, ProvisionerSpec};

/// Annotation on a NodeClaim: the hash of its Provisioner's static settings at launch.
pub const PROVISIONER_HASH: &str = "joiner.sh/provisioner-hash";
/// Annotation on a NodeClaim: the hash of its NodeTemplate's static settings at launch.
pub const NODE_TEMPLATE_HASH: &str = "joiner.sh/nodetemplate-hash";
/// Annotation on a NodeClaim: how its hashes were computed.
pub const HASH_VERSION: &str = "joiner.sh/drift-hash-version";
/// The way this release computes the hashes; bumped whenever what is hashed changes.
pub const CURRENT_HASH_VERSION: &str = "v1";

/// The Provisioner settings a launched node carries and cannot be changed in place.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProvisionerHashed<'a> {
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    taints: Vec<String>,
    startup_taints: Vec<String>,
    kubelet_configuration: &'a Option<crate::KubeletConfiguration>,
    node_template: Option<&'a str>,
}

/// The NodeTemplate settings baked into a launch that no selector resolves.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeTemplateHashed<'a> {
    ami_family: Option<&'static str>,
    instance_profile: &'a Option<String>,
    user_data: &'a Option<String>,
    tags: &'a BTreeMap<String, String>,
    metadata_options: &'a crate::MetadataOptions,
    block_device_mappings: &'a [crate::BlockDeviceMapping],
    detailed_monitoring: &'a Option<bool>,
}

/// Taints as a sorted list: their order in the manifest means nothing.
fn taint_set(taints: &[crate::Taint]) -> Vec<String> {
    let set: BTreeSet<String> = taints
        .iter()
        .map(|t| serde_json::to_string(t).unwrap_or_default())
        .collect();
    set.into_iter().collect()
}

fn digest<T: Serialize>(value: &T) -> String {
    // Serializing these plain structs of strings, maps and numbers cannot fail; an empty
    // body would still hash the same way every time.
    let body = serde_json::to_vec(value).unwrap_or_default();
    let d = Sha256::digest(&body);
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The hash of `spec`'s static settings (16 hex digits).
pub fn provisioner_hash(spec: &ProvisionerSpec) -> String {
    digest(&ProvisionerHashed {
        labels: &spec.labels,
        annotations: &spec.annotations,
        taints: taint_set(&spec.taints),
        startup_taints: taint_set(&spec.startup_taints),
        kubelet_configuration: &spec.kubelet_configuration,
        node_template: spec.provider_ref.as_ref().map(|r| r.name.as_str()),
    })
}

/// The hash of `spec`'s static settings (16 hex digits).
pub fn node_template_hash(spec: &NodeTemplateSpec) -> String {
    digest(&NodeTemplateHashed {
        ami_family: spec.ami_family.map(|f| f.as_str()),
        instance_profile: &spec.instance_profile,
        user_data: &spec.user_data,
        tags: &spec.tags,
        metadata_options: &spec.metadata_options,
        block_device_mappings: &spec.block_device_mappings,
        detailed_monitoring: &spec.detailed_monitoring,
    })
}

/// Records on `claim` the hashes of the settings it is launched with.
pub fn annotate(claim: &mut NodeClaim, prov: &Provisioner, node_template: Option<&NodeTemplate>) {
    let annotations = claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(HASH_VERSION.to_string(), CURRENT_HASH_VERSION.to_string());
    annotations.insert(PROVISIONER_HASH.to_string(), provisioner_hash(&prov.spec));
    if let Some(nt) = node_template {
        annotations.insert(NODE_TEMPLATE_HASH.to_string(), node_template_hash(&nt.spec));
    }
}

/// The hash annotations to write on `claim` when it was hashed another way (an older release)
/// or not at all: the current hashes of its Provisioner and NodeTemplate, as Karpenter
/// re-stamps claims after an upgrade. Settings changed before the re-stamp are not drift (they
/// cannot be told apart from a change in what is hashed); settings changed after it are.
/// `None` when the claim's hashes are current.
pub fn restamp(
    claim: &NodeClaim,
    prov: &Provisioner,
    node_template: Option<&NodeTemplate>,
) -> Option<BTreeMap<String, String>> {
    let version = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HASH_VERSION));
    if version.map(String::as_str) == Some(CURRENT_HASH_VERSION) {
        return None;
    }
    let mut out = BTreeMap::new();
    out.insert(HASH_VERSION.to_string(), CURRENT_HASH_VERSION.to_string());
    out.insert(PROVISIONER_HASH.to_string(), provisioner_hash(&prov.spec));
    if let Some(nt) = node_template {
        out.insert(NODE_TEMPLATE_HASH.to_string(), node_template_hash(&nt.spec));
    }
    Some(out)
}

/// Why the node of `claim` (with labels `node_labels`) no longer matches `prov` and its
/// NodeTemplate `node_template`, in words, or `None`. A claim recorded without hashes, or
/// hashed another way, is compared only on what its status shows; a NodeTemplate not resolved
/// yet (empty status) is not compared. An AMI is drift only when the NodeTemplate now resolves
/// an AMI that serves the node (its architecture and accelerator build): when the build it
/// needs could not be resolved, nothing says its AMI is outdated.
pub fn claim_drift(
    claim: &NodeClaim,
    prov: &Provisioner,
    node_template: Option<&NodeTemplate>,
    node_labels: &BTreeMap<String, String>,
) -> Option<String> {
    let annotations = claim.metadata.annotations.as_ref();
    let recorded = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    if recorded(HASH_VERSION) == Some(CURRENT_HASH_VERSION) {
        if let Some(h) = recorded(PROVISIONER_HASH) {
            if h != provisioner_hash(&prov.spec) {
                return Some(format!(
                    "Provisioner {} changed since launch (labels, annotations, taints, startup taints, kubelet configuration or NodeTemplate reference)",
                    prov.name()
                ));
            }
        }
        if let (Some(h), Some(nt)) = (recorded(NODE_TEMPLATE_HASH), node_template) {
            if h != node_template_hash(&nt.spec) {
                return Some(format!(
                    "NodeTemplate {} changed since launch (AMI family, instance profile, user data, tags, metadata options, block devices or monitoring)",
                    nt.name()
                ));
            }
        }
    }
    let nt = node_template?;
    let status = claim.status.as_ref()?;
    let resolved = nt.status.as_ref()?;
    if let Some(image) = &status.image_id {
        let serving: Vec<&str> = resolved
            .amis
            .iter()
            .filter(|a| {
                selector_requirements(&a.requirements, "requirements")
                    .is_ok_and(|r| r.matches_labels(node_labels))
            })
            .map(|a| a.id.as_str())
            .collect();
        if !serving.is_empty() && !resolved.amis.iter().any(|a| &a.id == image) {
            let now = serving;
            return Some(format!(
                "its AMI {image} is no longer one NodeTemplate {} resolves to ({})",
                nt.name(),
                now.join(", ")
            ));
        }
    }
    if let Some(subnet) = &status.subnet_id {
        if !resolved.subnets.is_empty() && !resolved.subnets.iter().any(|s| &s.id == subnet) {
            return Some(format!(
                "its subnet {subnet} is no longer selected by NodeTemplate {}",
                nt.name()
            ));
        }
    }
    if !status.security_group_ids.is_empty() && !resolved.security_groups.is_empty() {
        let had: BTreeSet<&str> = status
            .security_group_ids
            .iter()
            .map(String::as_str)
            .collect();
        let now: BTreeSet<&str> = resolved
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect();
        if had != now {
            let list = |s: &BTreeSet<&str>| s.iter().copied().collect::<Vec<_>>().join(", ");
            return Some(format!(
                "its security groups ({}) are not those NodeTemplate {} selects now ({})",
                list(&had),
                nt.name(),
                list(&now)
            ));
        }
    }
    None
}

/// An AMI a NodeTemplate resolves for amd64 nodes, for tests.
#[cfg(test)]
pub(crate) fn amd64_ami(id: &str) -> crate::ResolvedAmi {
    crate::ResolvedAmi {
        id: id.into(),
        name: None,
        requirements: vec![crate::NodeSelectorRequirement {
            key: "kubernetes.io/arch".into(),
            operator: "In".into(),
            values: vec!["amd64".into()],
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeClaimStatus, NodeTemplateStatus, ResolvedSecurityGroup, ResolvedSubnet};

    fn provisioner(yaml: &str) -> Provisioner {
        serde_yaml::from_str(yaml).expect("provisioner")
    }

    fn node_template(yaml: &str) -> NodeTemplate {
        serde_yaml::from_str(yaml).expect("node template")
    }

    const PROV: &str = "metadata: {name: web}
spec:
  providerRef: {name: default}
  labels: {team: shop}
  taints: [{key: a, value: x, effect: NoSchedule}, {key: b, effect: NoExecute}]
  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]";

    const NT: &str = "metadata: {name: default}
spec:
  subnetSelector: {karpenter.sh/discovery: dev}
  securityGroupSelector: {karpenter.sh/discovery: dev}
  userData: echo hi";

    fn resolved(nt: &mut NodeTemplate) {
        nt.status = Some(NodeTemplateStatus {
            subnets: vec![ResolvedSubnet {
                id: "subnet-1".into(),
                zone: "us-east-1a".into(),
            }],
            security_groups: vec![
                ResolvedSecurityGroup {
                    id: "sg-1".into(),
                    name: None,
                },
                ResolvedSecurityGroup {
                    id: "sg-2".into(),
                    name: None,
                },
            ],
            amis: vec![amd64_ami("ami-new")],
            conditions: vec![],
        });
    }

    fn amd64() -> BTreeMap<String, String> {
        BTreeMap::from([("kubernetes.io/arch".to_string(), "amd64".to_string())])
    }

    fn launched_claim(prov: &Provisioner, nt: &NodeTemplate) -> NodeClaim {
        let mut claim = NodeClaim::new("web-abcde", Default::default());
        annotate(&mut claim, prov, Some(nt));
        claim.status = Some(NodeClaimStatus {
            image_id: Some("ami-new".into()),
            subnet_id: Some("subnet-1".into()),
            security_group_ids: vec!["sg-2".into(), "sg-1".into()],
            ..NodeClaimStatus::default()
        });
        claim
    }

    #[test]
    fn a_claim_launched_with_the_current_settings_has_not_drifted() {
        let prov = provisioner(PROV);
        let mut nt = node_template(NT);
        resolved(&mut nt);
        let claim = launched_claim(&prov, &nt);
        assert_eq!(claim_drift(&claim, &prov, Some(&nt), &amd64()), None);
        // Requirements, limits, weight, disruption settings are not static settings of the
        // node (requirements are compared on the node itself).
        let mut changed = prov.clone();
        changed.spec.weight = Some(50);
        changed.spec.ttl_seconds_after_empty = Some(30);
        changed.spec.requirements.clear();
        assert_eq!(claim_drift(&claim, &changed, Some(&nt), &amd64()), None);
        // The order of taints is not a change.
        changed.spec.taints.reverse();
        assert_eq!(claim_drift(&claim, &changed, Some(&nt), &amd64()), None);
    }

    #[test]
    fn a_claim_hashed_another_way_is_restamped_and_later_changes_are_drift() {
        let prov = provisioner(PROV);
        let mut nt = node_template(NT);
        resolved(&mut nt);
        let mut claim = launched_claim(&prov, &nt);
        assert_eq!(restamp(&claim, &prov, Some(&nt)), None, "current hashes");
        // An older release's hashes: not drift, and re-stamped with today's.
        let annotations = claim.metadata.annotations.as_mut().expect("annotations");
        annotations.insert(HASH_VERSION.into(), "v0".into());
        annotations.insert(PROVISIONER_HASH.into(), "0123456789abcdef".into());
        assert_eq!(claim_drift(&claim, &prov, Some(&nt), &amd64()), None);
        let stamped = restamp(&claim, &prov, Some(&nt)).expect("re-stamped");
        assert_eq!(stamped[HASH_VERSION], CURRENT_HASH_VERSION);
        claim.metadata.annotations = Some(stamped);
        assert_eq!(claim_drift(&claim, &prov, Some(&nt), &amd64()), None);
        let mut changed = prov.clone();
        changed.spec.labels.insert("team".into(), "payments".into());
        assert!(claim_drift(&claim, &changed, Some(&nt), &amd64()).is_some());
        // A claim with no hashes at all (written before hashing) is stamped too.
        claim.metadata.annotations = None;
        assert!(restamp(&claim, &prov, Some(&nt)).is_some());
    }

    #[test]
    fn a_changed_provisioner_or_node_template_is_drift() {
        let prov = provisioner(PROV);
        let mut nt = node_template(NT);
        resolved(&mut nt);
        let claim = launched_claim(&prov, &nt);

        let mut p = prov.clone();
        p.spec.taints.pop();
        assert_eq!(
            claim_drift(&claim, &p, Some(&nt), &amd64()).as_deref(),
            Some("Provisioner web changed since launch (labels, annotations, taints, startup taints, kubelet configuration or NodeTemplate reference)")
        );
        let mut p = prov.clone();
        p.spec.kubelet_configuration = serde_yaml::from_str("{maxPods: 20}").expect("kubelet");
        assert!(claim_drift(&claim, &p, Some(&nt), &amd64()).is_some());

        let mut n = nt.clone();
        n.spec.user_data = Some("echo bye".into());
        assert_eq!(
            claim_drift(&claim, &prov, Some(&n), &amd64()).as_deref(),
            Some("NodeTemplate default changed since launch (AMI family, instance profile, user data, tags, metadata options, block devices or monitoring)")
        );
        let mut n = nt.clone();
        n.spec.metadata_options.http_tokens = "optional".into();
        assert!(claim_drift(&claim, &prov, Some(&n), &amd64()).is_some());
        let mut n = nt.clone();
        n.spec.tags.insert("cost-center".into(), "42".into());
        assert!(claim_drift(&claim, &prov, Some(&n), &amd64()).is_some());
        // A selector change alone is not static drift: what it resolves to is compared.
        let mut n = nt.clone();
        n.spec
            .subnet_selector
            .insert("tier".into(), "private".into());
        assert_eq!(claim_drift(&claim, &prov, Some(&n), &amd64()), None);
    }

    #[test]
    fn a_newer_ami_other_subnets_or_security_groups_are_drift() {
        let prov = provisioner(PROV);
        let mut nt = node_template(NT);
        resolved(&mut nt);
        let mut claim = launched_claim(&prov, &nt);
        claim.status.as_mut().expect("status").image_id = Some("ami-old".into());
        assert_eq!(
            claim_drift(&claim, &prov, Some(&nt), &amd64()).as_deref(),
            Some("its AMI ami-old is no longer one NodeTemplate default resolves to (ami-new)")
        );

        let mut claim = launched_claim(&prov, &nt);
        claim.status.as_mut().expect("status").subnet_id = Some("subnet-9".into());
        assert_eq!(
            claim_drift(&claim, &prov, Some(&nt), &amd64()).as_deref(),
            Some("its subnet subnet-9 is no longer selected by NodeTemplate default")
        );

        let mut claim = launched_claim(&prov, &nt);
        claim.status.as_mut().expect("status").security_group_ids = vec!["sg-1".into()];
        assert_eq!(
            claim_drift(&claim, &prov, Some(&nt), &amd64()).as_deref(),
            Some("its security groups (sg-1) are not those NodeTemplate default selects now (sg-1, sg-2)")
        );

        // An arm64 node: the NodeTemplate resolves no AMI for arm64 now (its build is missing),
        // so nothing says the node's AMI is outdated.
        let mut arm = launched_claim(&prov, &nt);
        arm.status.as_mut().expect("status").image_id = Some("ami-arm-old".into());
        let arm64 = BTreeMap::from([("kubernetes.io/arch".to_string(), "arm64".to_string())]);
        assert_eq!(claim_drift(&arm, &prov, Some(&nt), &arm64), None);

        // A NodeTemplate not resolved yet says nothing.
        let claim = launched_claim(&prov, &nt);
        let mut unresolved = nt.clone();
        unresolved.status = None;
        let mut c = claim.clone();
        c.status.as_mut().expect("status").image_id = Some("ami-old".into());
        assert_eq!(claim_drift(&c, &prov, Some(&unresolved), &amd64()), None);
    }

    #[test]
    fn claims_hashed_another_way_or_not_at_all_are_compared_on_their_status_only() {
        let prov = provisioner(PROV);
        let mut nt = node_template(NT);
        resolved(&mut nt);
        let mut changed = nt.clone();
        changed.spec.user_data = Some("echo bye".into());

        let mut claim = launched_claim(&prov, &nt);
        claim
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .insert(HASH_VERSION.into(), "v0".into());
        assert_eq!(claim_drift(&claim, &prov, Some(&changed), &amd64()), None);

        let mut bare = launched_claim(&prov, &nt);
        bare.metadata.annotations = None;
        assert_eq!(claim_drift(&bare, &prov, Some(&changed), &amd64()), None);
        bare.status.as_mut().expect("status").image_id = Some("ami-old".into());
        assert!(claim_drift(&bare, &prov, Some(&changed), &amd64()).is_some());
    }

    #[test]
    fn hashes_are_stable_across_releases() {
        // Written down once: a change here would drift every node of every cluster on upgrade,
        // so it must come with a new CURRENT_HASH_VERSION.
        // The expected values are sha256 of the canonical JSON bodies, computed apart:
        // {"labels":{"team":"shop"},"annotations":{},"taints":["{\"key\":\"a\",...}", ...],
        //  "startupTaints":[],"kubeletConfiguration":null,"nodeTemplate":"default"} and
        // {"amiFamily":null,"instanceProfile":null,"userData":"echo hi","tags":{},
        //  "metadataOptions":{defaults},"blockDeviceMappings":[],"detailedMonitoring":null}.
        let prov = provisioner(PROV);
        let nt = node_template(NT);
        assert_eq!(provisioner_hash(&prov.spec), "46565b8a613388ad");
        assert_eq!(node_template_hash(&nt.spec), "297f494b7dfb5c22");
        let other = node_template("metadata: {name: other}\nspec: {userData: echo hi}");
        // Selectors and the name are not hashed.
        assert_eq!(
            node_template_hash(&nt.spec),
            node_template_hash(&other.spec)
        );
    }
}
