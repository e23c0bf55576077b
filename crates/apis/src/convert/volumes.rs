//! The zones a pod's volumes confine it to, as the kube-scheduler's VolumeBinding and
//! VolumeZone plugins see them.
//!
//! - A claim bound to a PersistentVolume: the PV's `spec.nodeAffinity` (an EBS volume lives in
//!   one zone; its PV says which, under `topology.kubernetes.io/zone` or the EBS CSI driver's
//!   `topology.ebs.csi.aws.com/zone`).
//! - An unbound claim: its StorageClass's `allowedTopologies`, when it has any (the volume will
//!   be made in one of those zones). A WaitForFirstConsumer class without them leaves the zone
//!   to the pod: the volume follows the node. An Immediate class binds on its own; until it
//!   has, nothing is known and nothing is required.
//! - A claim or volume joiner cannot find requires nothing: the kube-scheduler will say why the
//!   pod waits.

use std::collections::{BTreeSet, HashMap};

use joiner_core::{labels, Requirement, VolumeZone};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, PodSpec};
use k8s_openapi::api::storage::v1::StorageClass;

/// Label keys that name a zone in volume topology.
pub const ZONE_KEYS: &[&str] = &[
    labels::ZONE,
    "failure-domain.beta.kubernetes.io/zone",
    "topology.ebs.csi.aws.com/zone",
];

/// The annotation marking a cluster's default StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// PersistentVolumeClaims, PersistentVolumes and StorageClasses by name, to look pods'
/// volumes up in.
#[derive(Default)]
pub struct VolumeIndex<'a> {
    claims: HashMap<(String, String), &'a PersistentVolumeClaim>,
    volumes: HashMap<String, &'a PersistentVolume>,
    classes: HashMap<String, &'a StorageClass>,
    default_class: Option<&'a StorageClass>,
}

impl<'a> VolumeIndex<'a> {
    /// The index of these objects.
    pub fn new(
        claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
        volumes: impl IntoIterator<Item = &'a PersistentVolume>,
        classes: impl IntoIterator<Item = &'a StorageClass>,
    ) -> Self {
        let mut index = VolumeIndex::default();
        for c in claims {
            let ns = c
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let name = c.metadata.name.clone().unwrap_or_default();
            index.claims.insert((ns, name), c);
        }
        for v in volumes {
            index
                .volumes
                .insert(v.metadata.name.clone().unwrap_or_default(), v);
        }
        for s in classes {
            let is_default = s
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS))
                .is_some_and(|v| v == "true");
            if is_default {
                index.default_class = Some(s);
            }
            index
                .classes
                .insert(s.metadata.name.clone().unwrap_or_default(), s);
        }
        index
    }

    /// True when the index holds nothing (no volume can constrain anything).
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    /// The zones the claims `claims` (names in `namespace`) confine a pod to.
    pub fn zones(&self, namespace: &str, claims: &[String]) -> Vec<VolumeZone> {
        claims
            .iter()
            .filter_map(|name| {
                let claim = self.claims.get(&(namespace.to_string(), name.clone()))?;
                let zones = self.claim_zones(claim)?;
                Some(VolumeZone {
                    claim: format!("{namespace}/{name}"),
                    zones: Requirement::one_of(zones),
                })
            })
            .collect()
    }

    fn claim_zones(&self, claim: &PersistentVolumeClaim) -> Option<BTreeSet<String>> {
        let spec = claim.spec.as_ref()?;
        match spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
            Some(volume) => pv_zones(self.volumes.get(volume)?),
            None => {
                let class = match spec.storage_class_name.as_deref() {
                    Some("") => return None,
                    Some(name) => *self.classes.get(name)?,
                    None => self.default_class?,
                };
                class_zones(class)
            }
        }
    }
}

/// The claim names a pod's volumes use: `persistentVolumeClaim.claimName`, and for a generic
/// ephemeral volume the claim Kubernetes makes for it, `<pod>-<volume>`.
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .as_ref()
        .map(|s| spec_claim_names(pod_name, s, &[]))
        .unwrap_or_default()
}

/// The claim names of pod `pod_name` made from `spec` (a pod's, or a workload template's),
/// plus a StatefulSet's `volumeClaimTemplates` (`<template>-<pod>`).
pub fn spec_claim_names(pod_name: &str, spec: &PodSpec, claim_templates: &[String]) -> Vec<String> {
    let mut out: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some(pvc.claim_name.clone())
            } else if v.ephemeral.is_some() {
                Some(format!("{pod_name}-{}", v.name))
            } else {
                None
            }
        })
        .collect();
    for template in claim_templates {
        let name = format!("{template}-{pod_name}");
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The zones a PV's node affinity allows, when every term names zones.
fn pv_zones(pv: &PersistentVolume) -> Option<BTreeSet<String>> {
    let terms = &pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    let mut zones = BTreeSet::new();
    for term in terms {
        let in_term: Vec<String> = term
            .match_expressions
            .iter()
            .flatten()
            .filter(|e| ZONE_KEYS.contains(&e.key.as_str()) && e.operator == "In")
            .flat_map(|e| e.values.iter().flatten().cloned())
            .collect();
        if in_term.is_empty() {
            // A term that names no zone admits every zone.
            return None;
        }
        zones.extend(in_term);
    }
    (!zones.is_empty()).then_some(zones)
}

/// The zones a StorageClass's allowedTopologies allow, when it has any.
fn class_zones(class: &StorageClass) -> Option<BTreeSet<String>> {
    let mut zones = BTreeSet::new();
    for term in class.allowed_topologies.iter().flatten() {
        let in_term: Vec<String> = term
            .match_label_expressions
            .iter()
            .flatten()
            .filter(|e| ZONE_KEYS.contains(&e.key.as_str()))
            .flat_map(|e| e.values.iter().cloned())
            .collect();
        if in_term.is_empty() {
            return None;
        }
        zones.extend(in_term);
    }
    (!zones.is_empty()).then_some(zones)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("parses")
    }

    fn objects() -> (
        Vec<PersistentVolumeClaim>,
        Vec<PersistentVolume>,
        Vec<StorageClass>,
    ) {
        let claims = vec![
            obj(json!({"metadata": {"name": "bound", "namespace": "shop"},
                "spec": {"volumeName": "pv-1", "storageClassName": "gp3"}})),
            obj(json!({"metadata": {"name": "new", "namespace": "shop"},
                "spec": {"storageClassName": "gp3-zonal"}})),
            obj(json!({"metadata": {"name": "follows", "namespace": "shop"},
                "spec": {"storageClassName": "gp3"}})),
            obj(json!({"metadata": {"name": "default-class", "namespace": "shop"}, "spec": {}})),
        ];
        let volumes = vec![obj(json!({"metadata": {"name": "pv-1"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone",
                    "operator": "In", "values": ["us-east-1c"]}]}]}}}}))];
        let classes = vec![
            obj(json!({"metadata": {"name": "gp3",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"})),
            obj(
                json!({"metadata": {"name": "gp3-zonal"}, "provisioner": "ebs.csi.aws.com",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["us-east-1a", "us-east-1b"]}]}]}),
            ),
        ];
        (claims, volumes, classes)
    }

    #[test]
    fn bound_volumes_and_zonal_classes_confine_pods_and_waiting_classes_do_not() {
        let (c, v, s) = objects();
        let index = VolumeIndex::new(&c, &v, &s);
        let names = |ns: &str, list: &[&str]| {
            index.zones(ns, &list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        let bound = names("shop", &["bound"]);
        assert_eq!(bound.len(), 1);
        assert_eq!(bound[0].claim, "shop/bound");
        assert!(bound[0].zones.allows("us-east-1c") && !bound[0].zones.allows("us-east-1a"));
        let new = names("shop", &["new"]);
        assert!(new[0].zones.allows("us-east-1b") && !new[0].zones.allows("us-east-1c"));
        assert!(names("shop", &["follows", "default-class", "missing"]).is_empty());
        assert!(
            names("other", &["bound"]).is_empty(),
            "claims are namespaced"
        );
    }

    #[test]
    fn a_pod_names_its_claims_and_its_ephemeral_volumes_claims() {
        let pod: Pod = obj(json!({"metadata": {"name": "db-0", "namespace": "shop"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "cfg", "configMap": {"name": "cfg"}}]}}));
        assert_eq!(claim_names(&pod), ["data-db-0", "db-0-scratch"]);
    }
}
