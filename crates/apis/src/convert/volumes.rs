//! The zones a pod's volumes confine it to, and the volumes that keep it from being scheduled
//! at all, as the kube-scheduler's VolumeBinding and VolumeZone plugins see them.
//!
//! - A claim bound to a PersistentVolume: the PV's `spec.nodeAffinity` (an EBS volume lives in
//!   one zone; its PV says which, under `topology.kubernetes.io/zone` or the EBS CSI driver's
//!   `topology.ebs.csi.aws.com/zone`), and the zone labels of older in-tree volumes
//!   (`topology.kubernetes.io/zone: us-east-1a__us-east-1b`). Expressions of one term are
//!   ANDed, terms are ORed, as node affinity always is.
//! - An unbound claim of a `WaitForFirstConsumer` class: the class's `allowedTopologies`, when
//!   it has any (the volume will be made in one of those zones); without them the volume
//!   follows the node and the zone is free.
//! - An unbound claim that binds on its own (an `Immediate` class, the default mode, or no
//!   class at all): the kube-scheduler does not place the pod until the claim is bound, so
//!   neither does joiner — the pod is held with the reason.
//! - A claim being deleted, a claim or bound volume that does not exist, a class that does not
//!   exist: held likewise (Karpenter skips such pods too). Where the objects come from a
//!   partial source (`joiner plan` on manifests), a missing object is reported as unknown
//!   instead, and confines nothing.

use std::collections::{BTreeSet, HashMap};

use joiner_core::{
    labels, Operator, Pod as CorePod, Requirement, VolumeAttachment, VolumeHost, VolumeZone,
};
use k8s_openapi::api::core::v1::{
    NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod, PodSpec,
};
use k8s_openapi::api::storage::v1::StorageClass;

/// Label keys that name a zone in volume topology.
pub const ZONE_KEYS: &[&str] = &[
    labels::ZONE,
    "failure-domain.beta.kubernetes.io/zone",
    "topology.ebs.csi.aws.com/zone",
];

/// The PV label keys in-tree volumes name their zones with; several zones are joined by `__`.
pub const PV_ZONE_LABELS: &[&str] = &[labels::ZONE, "failure-domain.beta.kubernetes.io/zone"];

/// The annotation marking a cluster's default StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// The beta form of [`DEFAULT_CLASS`], still honoured by Kubernetes.
pub const BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// The access mode whose claim one pod at a time may use, cluster-wide: the kube-scheduler
/// enforces it (VolumeRestrictions), unlike ReadWriteOnce.
pub const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// The EBS CSI driver, which in-tree EBS volumes and classes are migrated to.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// In-tree volume plugins (a StorageClass's `provisioner`) and the CSI drivers Kubernetes
/// migrated them to: their attachments count against the CSI driver's cap.
pub const MIGRATED_PROVISIONERS: &[(&str, &str)] = &[
    ("kubernetes.io/aws-ebs", EBS_CSI_DRIVER),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

/// Whether the objects indexed are all there are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Source {
    /// The cluster's own view (the controller's stores): an object missing does not exist,
    /// and a pod that needs it waits.
    #[default]
    Cluster,
    /// Some of the objects (manifests given to `joiner plan`): an object missing may exist
    /// elsewhere, so it is reported as unknown and confines nothing.
    Partial,
}

/// A claim a pod's volumes use, and, where the claim is made from a template (a generic
/// ephemeral volume's `volumeClaimTemplate`, a StatefulSet's `volumeClaimTemplates`), the
/// storage class it will be made with: until it exists, that class decides where the pod may
/// run (the volume is provisioned through it), as Karpenter reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodClaim {
    /// The claim's name in the pod's namespace.
    pub name: String,
    /// The claim template, when the claim is made from one.
    pub template: Option<ClaimTemplate>,
}

/// What a claim template says about the claim it makes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimTemplate {
    /// `spec.storageClassName`: `None` for the cluster's default class, `""` for none.
    pub storage_class_name: Option<String>,
}

impl PodClaim {
    /// A claim the pod names directly (`persistentVolumeClaim.claimName`).
    pub fn named(name: impl Into<String>) -> Self {
        PodClaim {
            name: name.into(),
            template: None,
        }
    }

    /// A claim made from a template with `storage_class_name`.
    pub fn from_template(name: impl Into<String>, storage_class_name: Option<String>) -> Self {
        PodClaim {
            name: name.into(),
            template: Some(ClaimTemplate { storage_class_name }),
        }
    }
}

/// What a pod's volumes mean for its scheduling.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodVolumes {
    /// The zones each confining claim allows.
    pub zones: Vec<VolumeZone>,
    /// The nodes each claim bound to a one-node volume can be mounted on.
    pub hosts: Vec<VolumeHost>,
    /// Why the pod cannot be scheduled yet, naming the claim, when a volume holds it.
    pub blocked: Option<String>,
    /// Claims, volumes or classes the source did not hold (only for [`Source::Partial`]),
    /// named `kind namespace/name`.
    pub unknown: Vec<String>,
    /// The claims attached through a CSI driver, which node attach caps count; each claim
    /// once.
    pub attachments: Vec<VolumeAttachment>,
}

impl PodVolumes {
    /// True when the volumes change nothing about where the pod may run.
    pub fn is_empty(&self) -> bool {
        self.zones.is_empty()
            && self.hosts.is_empty()
            && self.blocked.is_none()
            && self.attachments.is_empty()
    }

    /// Applies the zones and the hold to the simulation's pod.
    pub fn apply_to(self, pod: &mut CorePod) {
        pod.require_volume_zones(self.zones);
        pod.require_volume_hosts(self.hosts);
        if !self.attachments.is_empty() {
            pod.volume_attachments = Some(Box::new(self.attachments));
        }
        if let Some(reason) = self.blocked {
            pod.hold_for_volume(reason);
        }
    }
}

/// What one claim means.
enum ClaimEffect {
    Free,
    Confined(Requirement),
    /// Bound to a volume only some nodes can mount (and maybe in some zones).
    Pinned {
        volume: String,
        hosts: Requirement,
        zones: Option<Requirement>,
    },
    Blocked(String),
    Unknown(String),
}

/// PersistentVolumeClaims, PersistentVolumes and StorageClasses by name, to look pods'
/// volumes up in.
#[derive(Default)]
pub struct VolumeIndex<'a> {
    source: Source,
    claims: HashMap<(String, String), &'a PersistentVolumeClaim>,
    volumes: HashMap<String, &'a PersistentVolume>,
    classes: HashMap<String, &'a StorageClass>,
    default_class: Option<&'a StorageClass>,
}

impl<'a> VolumeIndex<'a> {
    /// The index of these objects, read as the cluster's whole view ([`Source::Cluster`]).
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
            let is_default = s.metadata.annotations.as_ref().is_some_and(|a| {
                [DEFAULT_CLASS, BETA_DEFAULT_CLASS]
                    .iter()
                    .any(|k| a.get(*k).is_some_and(|v| v == "true"))
            });
            // With several defaults, the newest wins, then the first by name (the admission
            // plugin's rule).
            let newer = |current: &StorageClass| {
                let (mine, theirs) = (&s.metadata, &current.metadata);
                match mine.creation_timestamp.cmp(&theirs.creation_timestamp) {
                    std::cmp::Ordering::Equal => mine.name < theirs.name,
                    order => order == std::cmp::Ordering::Greater,
                }
            };
            if is_default && index.default_class.is_none_or(newer) {
                index.default_class = Some(s);
            }
            index
                .classes
                .insert(s.metadata.name.clone().unwrap_or_default(), s);
        }
        index
    }

    /// The same index, read as [`Source::Partial`] (or back).
    pub fn with_source(mut self, source: Source) -> Self {
        self.source = source;
        self
    }

    /// True when claim `name` in `namespace` exists and is ReadWriteOncePod: one pod at a
    /// time may use it (see [`super::once_pod`]).
    pub fn is_once_pod(&self, namespace: &str, name: &str) -> bool {
        self.claims
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|c| once_pod_claim(c))
    }

    /// True when some claim indexed is ReadWriteOncePod, so the pods need reading at all.
    pub fn has_once_pod_claims(&self) -> bool {
        self.claims.values().any(|c| once_pod_claim(c))
    }

    /// What the claims `claims` (in `namespace`) mean for a pod: the zones they confine it
    /// to, and the first claim that holds it.
    pub fn pod_volumes(&self, namespace: &str, claims: &[PodClaim]) -> PodVolumes {
        let mut out = PodVolumes::default();
        for c in claims {
            let claim = format!("{namespace}/{}", c.name);
            // A claim mounted twice is attached once.
            let named = out.attachments.iter().any(|a| a.claim == claim);
            if let Some(driver) = self.claim_driver(namespace, c).filter(|_| !named) {
                out.attachments.push(VolumeAttachment {
                    driver,
                    claim: claim.clone(),
                });
            }
            match self.claim_effect(namespace, c, &claim) {
                ClaimEffect::Free => {}
                ClaimEffect::Confined(zones) => out.zones.push(VolumeZone { claim, zones }),
                ClaimEffect::Pinned {
                    volume,
                    hosts,
                    zones,
                } => {
                    if let Some(zones) = zones {
                        out.zones.push(VolumeZone {
                            claim: claim.clone(),
                            zones,
                        });
                    }
                    out.hosts.push(VolumeHost {
                        claim,
                        volume,
                        hosts,
                    });
                }
                ClaimEffect::Blocked(why) => {
                    out.blocked.get_or_insert(why);
                }
                ClaimEffect::Unknown(what) => out.unknown.push(what),
            }
        }
        out
    }

    /// The CSI driver that attaches claim `pod_claim`, as the kube-scheduler and Karpenter
    /// resolve it: a bound claim's PersistentVolume (`spec.csi.driver`, or EBS for an in-tree
    /// EBS volume); an unbound one's (or one whose volume is gone) StorageClass provisioner
    /// (migrated in-tree plugins renamed to their CSI driver); a claim not made yet, its
    /// template's class. A claim naming no class reads as the default class, as volume zones
    /// do: Kubernetes gives such a claim the default class (at creation, and retroactively
    /// since 1.28), where Karpenter counts nothing for it. `None` when the claim attaches
    /// nothing a cap counts (NFS, local volumes) or the objects to tell are missing.
    fn claim_driver(&self, namespace: &str, pod_claim: &PodClaim) -> Option<String> {
        let claim = self
            .claims
            .get(&(namespace.to_string(), pod_claim.name.clone()));
        let spec = claim.and_then(|c| c.spec.as_ref());
        let bound = spec
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        // A bound volume that is gone: its class still tells the driver, as the scheduler
        // reads it.
        if let Some(pv) = bound.and_then(|v| self.volumes.get(v)) {
            let pv = pv.spec.as_ref()?;
            if let Some(csi) = &pv.csi {
                return Some(csi.driver.clone());
            }
            return pv
                .aws_elastic_block_store
                .as_ref()
                .map(|_| EBS_CSI_DRIVER.to_string());
        }
        let class_name = match (claim, &pod_claim.template) {
            (Some(_), _) => spec.and_then(|s| s.storage_class_name.as_deref()),
            (None, Some(t)) => t.storage_class_name.as_deref(),
            (None, None) => return None,
        };
        let class = match class_name {
            Some("") => return None,
            Some(name) => *self.classes.get(name)?,
            None => self.default_class?,
        };
        let provisioner = class.provisioner.as_str();
        let driver = MIGRATED_PROVISIONERS
            .iter()
            .find(|(plugin, _)| *plugin == provisioner)
            .map_or(provisioner, |(_, csi)| *csi);
        Some(driver.to_string())
    }

    /// A missing object: held in the cluster's view, unknown in a partial one.
    fn missing(&self, what: String, why: String) -> ClaimEffect {
        match self.source {
            Source::Cluster => ClaimEffect::Blocked(why),
            Source::Partial => ClaimEffect::Unknown(what),
        }
    }

    fn claim_effect(&self, namespace: &str, pod_claim: &PodClaim, key: &str) -> ClaimEffect {
        let Some(claim) = self
            .claims
            .get(&(namespace.to_string(), pod_claim.name.clone()))
        else {
            // A claim made from a template will be made with the template's class: read it
            // as that claim, not yet bound.
            if let Some(t) = &pod_claim.template {
                return self.unbound_effect(key, t.storage_class_name.as_deref());
            }
            return self.missing(
                format!("PersistentVolumeClaim {key}"),
                format!("volume claim {key} does not exist; the pod waits for it"),
            );
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return ClaimEffect::Blocked(format!(
                "volume claim {key} is being deleted; the pod cannot start with it"
            ));
        }
        // A claim whose volume is gone never binds again: the kube-scheduler's volume binding
        // refuses the pod, so no node is bought for it.
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return ClaimEffect::Blocked(format!(
                "volume claim {key} is Lost (its PersistentVolume is gone); the pod cannot \
                 start until the claim is recreated"
            ));
        }
        let spec = claim.spec.as_ref();
        let volume_name = spec.and_then(|s| s.volume_name.as_deref());
        if let Some(volume) = volume_name.filter(|v| !v.is_empty()) {
            let Some(pv) = self.volumes.get(volume) else {
                return self.missing(
                    format!("PersistentVolume {volume}"),
                    format!(
                        "volume claim {key} is bound to PersistentVolume {volume}, which does not exist"
                    ),
                );
            };
            let zones = pv_zones(pv);
            if let Some(hosts) = pv_hosts(pv) {
                return ClaimEffect::Pinned {
                    volume: volume.to_string(),
                    hosts,
                    zones,
                };
            }
            return match zones {
                Some(zones) => ClaimEffect::Confined(zones),
                None => ClaimEffect::Free,
            };
        }
        self.unbound_effect(key, spec.and_then(|s| s.storage_class_name.as_deref()))
    }

    /// What claim `key`, not bound yet, with storage class `class_name` (`None`: the default
    /// class) means: the class's zones, or a hold when the class is missing or binds at once.
    fn unbound_effect(&self, key: &str, class_name: Option<&str>) -> ClaimEffect {
        let class = match class_name {
            Some("") => None,
            Some(class) => match self.classes.get(class) {
                Some(c) => Some(*c),
                None => {
                    return self.missing(
                        format!("StorageClass {class}"),
                        format!(
                            "volume claim {key} names StorageClass {class}, which does not exist"
                        ),
                    )
                }
            },
            None => self.default_class,
        };
        let Some(class) = class else {
            return match (self.source, class_name) {
                (Source::Partial, None) => ClaimEffect::Unknown(format!(
                    "the default StorageClass (for PersistentVolumeClaim {key})"
                )),
                _ => ClaimEffect::Blocked(format!(
                    "volume claim {key} is not bound and has no StorageClass to provision it; \
                     the pod waits until a PersistentVolume is bound to it"
                )),
            };
        };
        if class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
            return ClaimEffect::Blocked(format!(
                "volume claim {key} is not bound yet and its StorageClass {} binds Immediately; \
                 the kube-scheduler places the pod once the volume exists",
                class.metadata.name.as_deref().unwrap_or_default()
            ));
        }
        match class_zones(class) {
            Some(zones) => ClaimEffect::Confined(zones),
            None => ClaimEffect::Free,
        }
    }
}

/// The claims a pod's volumes use: `persistentVolumeClaim.claimName`, and for a generic
/// ephemeral volume the claim Kubernetes makes for it, `<pod>-<volume>`, with its template.
pub fn claim_names(pod: &Pod) -> Vec<PodClaim> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .as_ref()
        .map(|s| spec_claim_names(pod_name, s, &[]))
        .unwrap_or_default()
}

/// The claims of pod `pod_name` made from `spec` (a pod's, or a workload template's), plus
/// a StatefulSet's `volumeClaimTemplates` (`<template>-<pod>`, given as templates named).
pub fn spec_claim_names(
    pod_name: &str,
    spec: &PodSpec,
    claim_templates: &[PodClaim],
) -> Vec<PodClaim> {
    let mut out: Vec<PodClaim> = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some(PodClaim::named(pvc.claim_name.clone()))
            } else if let Some(e) = &v.ephemeral {
                let class = e
                    .volume_claim_template
                    .as_ref()
                    .and_then(|t| t.spec.storage_class_name.clone());
                Some(PodClaim::from_template(
                    format!("{pod_name}-{}", v.name),
                    class,
                ))
            } else {
                None
            }
        })
        .collect();
    for template in claim_templates {
        let name = format!("{}-{pod_name}", template.name);
        if !out.iter().any(|c| c.name == name) {
            out.push(PodClaim {
                name,
                template: template.template.clone(),
            });
        }
    }
    out
}

/// The zones a PV allows: its node affinity (terms ORed, each term's zone expressions
/// ANDed) and its zone labels, both at once; `None` when neither names a zone.
fn pv_zones(pv: &PersistentVolume) -> Option<Requirement> {
    let affinity = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .and_then(|r| union_of_terms(r.node_selector_terms.iter().map(node_term_zones)));
    let labelled = pv
        .metadata
        .labels
        .iter()
        .flatten()
        .fold(None, |acc, (k, v)| {
            if !PV_ZONE_LABELS.contains(&k.as_str()) {
                return acc;
            }
            let zones = Requirement::one_of(v.split("__").filter(|z| !z.is_empty()));
            Some(match acc {
                None => zones,
                Some(r) => zones.intersect(&r),
            })
        });
    match (affinity, labelled) {
        (Some(a), Some(l)) => Some(a.intersect(&l)),
        (a, l) => a.or(l),
    }
}

fn once_pod_claim(claim: &PersistentVolumeClaim) -> bool {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .is_some_and(|modes| modes.iter().any(|m| m == READ_WRITE_ONCE_POD))
}

/// The hosts a PV can be mounted on: its node affinity's hostname expressions (terms ORed,
/// each term's expressions ANDed); `None` when a term names no host, so it admits every node.
/// Local volumes and CSI volumes of one node say so. The kube-scheduler holds the pod to
/// them whatever the volume's kind; Karpenter ignores them for local volumes, but a node it
/// buys for such a pod is one the scheduler will not use.
fn pv_hosts(pv: &PersistentVolume) -> Option<Requirement> {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .and_then(|r| {
            union_of_terms(
                r.node_selector_terms
                    .iter()
                    .map(|t| node_term_values(t, &[labels::HOSTNAME])),
            )
        })
}

/// The zones one node-selector term allows (its zone expressions ANDed); `None` when it names
/// no zone, so it admits every zone. An expression Kubernetes would have refused is skipped.
fn node_term_zones(term: &NodeSelectorTerm) -> Option<Requirement> {
    node_term_values(term, ZONE_KEYS)
}

/// The values of the label keys `keys` one node-selector term allows (its expressions on
/// them ANDed); `None` when it names none of them.
fn node_term_values(term: &NodeSelectorTerm, keys: &[&str]) -> Option<Requirement> {
    term.match_expressions
        .iter()
        .flatten()
        .filter(|e| keys.contains(&e.key.as_str()))
        .filter_map(|e| {
            let op = Operator::parse(&e.operator).ok()?;
            Requirement::new(op, e.values.as_deref().unwrap_or_default()).ok()
        })
        .reduce(|a, b| a.intersect(&b))
}

/// The zones a StorageClass's allowedTopologies allow (terms ORed, each term's zone
/// expressions ANDed), when it has any.
fn class_zones(class: &StorageClass) -> Option<Requirement> {
    let terms = class
        .allowed_topologies
        .as_ref()
        .filter(|t| !t.is_empty())?;
    union_of_terms(terms.iter().map(|term| {
        term.match_label_expressions
            .iter()
            .flatten()
            .filter(|e| ZONE_KEYS.contains(&e.key.as_str()))
            .map(|e| Requirement::one_of(e.values.iter().cloned()))
            .reduce(|a, b| a.intersect(&b))
    }))
}

/// The zones any of the terms allows: `None` (every zone) when a term names no zone, or when
/// terms that exclude zones (`NotIn`) would have to be joined — a union the simulation's
/// requirements cannot state, and one that confines nothing in practice.
fn union_of_terms(terms: impl Iterator<Item = Option<Requirement>>) -> Option<Requirement> {
    let terms: Vec<Requirement> = terms.collect::<Option<Vec<_>>>()?;
    match terms.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => {
            let mut zones: BTreeSet<String> = BTreeSet::new();
            for t in many {
                zones.extend(t.in_values()?.iter().cloned());
            }
            Some(Requirement::one_of(zones))
        }
    }
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

    /// No zone, host or hold: the pod may run anywhere (its attachments aside).
    fn places_anywhere(v: &PodVolumes) -> bool {
        v.zones.is_empty() && v.hosts.is_empty() && v.blocked.is_none()
    }

    fn names(list: &[&str]) -> Vec<PodClaim> {
        list.iter().map(|s| PodClaim::named(*s)).collect()
    }

    #[test]
    fn bound_volumes_and_zonal_classes_confine_pods_and_waiting_classes_do_not() {
        let (c, v, s) = objects();
        let index = VolumeIndex::new(&c, &v, &s);
        let bound = index.pod_volumes("shop", &names(&["bound"]));
        assert_eq!(bound.zones.len(), 1);
        assert_eq!(bound.zones[0].claim, "shop/bound");
        assert!(bound.zones[0].zones.allows("us-east-1c"));
        assert!(!bound.zones[0].zones.allows("us-east-1a"));
        let new = index.pod_volumes("shop", &names(&["new"]));
        assert!(
            new.zones[0].zones.allows("us-east-1b") && !new.zones[0].zones.allows("us-east-1c")
        );
        assert!(places_anywhere(
            &index.pod_volumes("shop", &names(&["follows", "default-class"]))
        ));
    }

    #[test]
    fn a_claim_the_cluster_lacks_holds_the_pod_and_a_partial_input_only_reports_it() {
        let (c, v, s) = objects();
        let cluster = VolumeIndex::new(&c, &v, &s);
        let missing = cluster.pod_volumes("other", &names(&["bound"]));
        assert_eq!(
            missing.blocked.as_deref(),
            Some("volume claim other/bound does not exist; the pod waits for it"),
            "claims are namespaced"
        );
        let partial = VolumeIndex::new(&c, &v, &s).with_source(Source::Partial);
        let unknown = partial.pod_volumes("other", &names(&["bound"]));
        assert!(unknown.is_empty());
        assert_eq!(unknown.unknown, ["PersistentVolumeClaim other/bound"]);
    }

    #[test]
    fn claims_the_scheduler_will_not_wait_on_hold_the_pod_naming_the_claim() {
        let claims: Vec<PersistentVolumeClaim> = vec![
            obj(json!({"metadata": {"name": "immediate", "namespace": "a"},
                "spec": {"storageClassName": "gp2"}})),
            obj(json!({"metadata": {"name": "unset-mode", "namespace": "a"},
                "spec": {"storageClassName": "legacy"}})),
            obj(json!({"metadata": {"name": "static", "namespace": "a"},
                "spec": {"storageClassName": ""}})),
            obj(json!({"metadata": {"name": "no-class", "namespace": "a"},
                "spec": {"storageClassName": "gone"}})),
            obj(json!({"metadata": {"name": "lost", "namespace": "a"},
                "spec": {"volumeName": "pv-gone"}})),
            obj(json!({"metadata": {"name": "going", "namespace": "a",
                "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["kubernetes.io/pvc-protection"]},
                "spec": {"volumeName": "pv-1"}})),
            obj(json!({"metadata": {"name": "waits", "namespace": "a"},
                "spec": {"storageClassName": "late"}})),
            obj(json!({"metadata": {"name": "phase-lost", "namespace": "a"},
                "spec": {"volumeName": "pv-1"}, "status": {"phase": "Lost"}})),
        ];
        let classes: Vec<StorageClass> = vec![
            obj(
                json!({"metadata": {"name": "gp2"}, "provisioner": "ebs.csi.aws.com",
                "volumeBindingMode": "Immediate"}),
            ),
            obj(json!({"metadata": {"name": "legacy"}, "provisioner": "ebs.csi.aws.com"})),
            obj(
                json!({"metadata": {"name": "late"}, "provisioner": "ebs.csi.aws.com",
                "volumeBindingMode": "WaitForFirstConsumer"}),
            ),
        ];
        let volumes: Vec<PersistentVolume> = vec![obj(json!({"metadata": {"name": "pv-1"}}))];
        let index = VolumeIndex::new(&claims, &volumes, &classes);
        let held = |name: &str| index.pod_volumes("a", &names(&[name])).blocked;
        let expect = [
            ("immediate", "StorageClass gp2 binds Immediately"),
            ("unset-mode", "StorageClass legacy binds Immediately"),
            ("static", "has no StorageClass to provision it"),
            ("no-class", "names StorageClass gone, which does not exist"),
            (
                "lost",
                "bound to PersistentVolume pv-gone, which does not exist",
            ),
            ("going", "is being deleted"),
            ("phase-lost", "is Lost (its PersistentVolume is gone)"),
        ];
        for (claim, why) in expect {
            let reason = held(claim).unwrap_or_else(|| panic!("{claim} is not held"));
            assert!(reason.contains(&format!("a/{claim}")), "{reason}");
            assert!(reason.contains(why), "{claim}: {reason}");
        }
        assert_eq!(held("waits"), None);
        // The first hold of several claims is the one reported.
        let both = index.pod_volumes("a", &names(&["waits", "static", "immediate"]));
        assert!(both.blocked.is_some_and(|r| r.contains("a/static")));
    }

    #[test]
    fn a_volume_term_ands_its_zone_expressions_and_terms_or() {
        let pv = |terms: serde_json::Value, labels: serde_json::Value| -> PersistentVolume {
            obj(json!({"metadata": {"name": "pv", "labels": labels},
                "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": terms}}}}))
        };
        let zones = |v: &PersistentVolume| pv_zones(v).map(|r| r.to_string());
        let anded = pv(
            json!([{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-a", "z-b"]},
                {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["z-b", "z-c"]}]}]),
            json!({}),
        );
        assert_eq!(pv_zones(&anded), Some(Requirement::single("z-b")));
        let ored = pv(
            json!([
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-a"]}]},
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-c"]}]}]),
            json!({}),
        );
        assert_eq!(pv_zones(&ored), Some(Requirement::one_of(["z-a", "z-c"])));
        let not_in = pv(
            json!([{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["z-a"]}]}]),
            json!({}),
        );
        let r = pv_zones(&not_in).expect("a NotIn term confines");
        assert!(!r.allows("z-a") && r.allows("z-b"), "{:?}", zones(&not_in));
        let open_term = pv(
            json!([
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-a"]}]},
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]),
            json!({}),
        );
        assert_eq!(
            pv_zones(&open_term),
            None,
            "a term naming no zone admits every zone"
        );
        // In-tree volumes label their zones, several joined by "__"; both must hold.
        let labelled = pv(
            json!([{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-b", "z-c"]}]}]),
            json!({"topology.kubernetes.io/zone": "z-a__z-b"}),
        );
        assert_eq!(pv_zones(&labelled), Some(Requirement::single("z-b")));
        let only_label: PersistentVolume = obj(json!({"metadata": {"name": "pv",
            "labels": {"failure-domain.beta.kubernetes.io/zone": "z-c"}}, "spec": {}}));
        assert_eq!(pv_zones(&only_label), Some(Requirement::single("z-c")));
    }

    #[test]
    fn a_volume_of_one_node_pins_the_pod_to_it() {
        let pv = |terms: serde_json::Value| -> PersistentVolume {
            obj(json!({"metadata": {"name": "pv-local"},
                "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": terms}}}}))
        };
        let host =
            |h: &str| json!({"key": "kubernetes.io/hostname", "operator": "In", "values": [h]});
        let zone = |z: &str| json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]});
        assert_eq!(
            pv_hosts(&pv(json!([{"matchExpressions": [host("n1")]}]))),
            Some(Requirement::single("n1"))
        );
        assert_eq!(
            pv_hosts(&pv(json!([{"matchExpressions": [host("n1")]},
                {"matchExpressions": [host("n2")]}]))),
            Some(Requirement::one_of(["n1", "n2"]))
        );
        assert_eq!(
            pv_hosts(&pv(json!([{"matchExpressions": [host("n1")]},
                {"matchExpressions": [zone("z-a")]}]))),
            None,
            "a term naming no host admits every node"
        );
        // Through the index: the claim's hosts and zones both confine the pod.
        let volumes = vec![pv(json!([{"matchExpressions": [host("n1"), zone("z-a")]}]))];
        let claims: Vec<PersistentVolumeClaim> = vec![obj(
            json!({"metadata": {"name": "data", "namespace": "a"}, "spec": {"volumeName": "pv-local"}}),
        )];
        let index = VolumeIndex::new(&claims, &volumes, []);
        let v = index.pod_volumes("a", &names(&["data"]));
        assert_eq!(
            v.hosts,
            [VolumeHost {
                claim: "a/data".into(),
                volume: "pv-local".into(),
                hosts: Requirement::single("n1")
            }]
        );
        assert_eq!(v.zones[0].zones, Requirement::single("z-a"));
        let mut pod = CorePod::default();
        v.apply_to(&mut pod);
        assert!(pod.node_terms[0]
            .get(labels::HOSTNAME)
            .is_some_and(|r| r.allows("n1") && !r.allows("n2")));
    }

    #[test]
    fn class_topology_ands_within_a_term_and_ors_terms() {
        let class: StorageClass = obj(json!({"metadata": {"name": "c"}, "provisioner": "x",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [
                {"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["z-a", "z-b"]},
                    {"key": "topology.ebs.csi.aws.com/zone", "values": ["z-a"]}]},
                {"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["z-c"]}]}]}));
        assert_eq!(
            class_zones(&class),
            Some(Requirement::one_of(["z-a", "z-c"]))
        );
    }

    #[test]
    fn of_several_default_classes_the_newest_is_used() {
        let classes: Vec<StorageClass> = vec![
            obj(
                json!({"metadata": {"name": "old", "creationTimestamp": "2025-01-01T00:00:00Z",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["z-a"]}]}]}),
            ),
            obj(
                json!({"metadata": {"name": "new", "creationTimestamp": "2026-01-01T00:00:00Z",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["z-b"]}]}]}),
            ),
        ];
        let claims: Vec<PersistentVolumeClaim> = vec![obj(
            json!({"metadata": {"name": "c", "namespace": "a"}, "spec": {}}),
        )];
        // Equal timestamps: the first by name; the beta annotation counts too.
        let tied: Vec<StorageClass> = vec![
            obj(json!({"metadata": {"name": "b-class",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["z-b"]}]}]})),
            obj(json!({"metadata": {"name": "a-class",
                    "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "true"}},
                "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["z-a"]}]}]})),
        ];
        for order in [[0, 1], [1, 0]] {
            let ordered: Vec<&StorageClass> = order.iter().map(|&i| &tied[i]).collect();
            let index = VolumeIndex::new(&claims, [], ordered);
            let v = index.pod_volumes("a", &names(&["c"]));
            assert_eq!(v.zones[0].zones, Requirement::single("z-a"));
        }
        for order in [[0, 1], [1, 0]] {
            let ordered: Vec<&StorageClass> = order.iter().map(|&i| &classes[i]).collect();
            let index = VolumeIndex::new(&claims, [], ordered);
            let v = index.pod_volumes("a", &names(&["c"]));
            assert_eq!(v.zones[0].zones, Requirement::single("z-b"));
        }
    }

    #[test]
    fn a_pod_names_its_claims_and_its_ephemeral_volumes_claims() {
        let pod: Pod = obj(json!({"metadata": {"name": "db-0", "namespace": "shop"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "cfg", "configMap": {"name": "cfg"}}]}}));
        assert_eq!(
            claim_names(&pod),
            [
                PodClaim::named("data-db-0"),
                PodClaim::from_template("db-0-scratch", None)
            ]
        );
    }

    #[test]
    fn a_claim_not_made_yet_follows_its_templates_class() {
        // Karpenter's "should schedule to storage class zones if volume does not exist
        // (ephemeral volume)" and "should not schedule if storage class zones are
        // incompatible": the claim `<pod>-<volume>` is made with the template's class.
        let (c, v, s) = objects();
        for source in [Source::Cluster, Source::Partial] {
            let index = VolumeIndex::new(&c, &v, &s).with_source(source);
            let zonal = index.pod_volumes(
                "shop",
                &[PodClaim::from_template(
                    "web-scratch",
                    Some("gp3-zonal".into()),
                )],
            );
            assert_eq!(zonal.zones.len(), 1, "{source:?}");
            assert_eq!(zonal.zones[0].claim, "shop/web-scratch");
            assert_eq!(
                zonal.zones[0].zones,
                Requirement::one_of(["us-east-1a", "us-east-1b"])
            );
            assert!(zonal.unknown.is_empty(), "{:?}", zonal.unknown);
            // No class named: the default one (gp3, which follows the node).
            let default = index.pod_volumes("shop", &[PodClaim::from_template("x", None)]);
            assert!(places_anywhere(&default) && default.unknown.is_empty());
            // An existing claim wins over its template.
            let made = index.pod_volumes(
                "shop",
                &[PodClaim::from_template("bound", Some("gp3-zonal".into()))],
            );
            assert!(made.zones[0].zones.allows("us-east-1c"));
        }
        let cluster = VolumeIndex::new(&c, &v, &s);
        let gone =
            cluster.pod_volumes("shop", &[PodClaim::from_template("x", Some("gone".into()))]);
        assert_eq!(
            gone.blocked.as_deref(),
            Some("volume claim shop/x names StorageClass gone, which does not exist")
        );
        let partial = VolumeIndex::new(&c, &v, &s).with_source(Source::Partial);
        let gone =
            partial.pod_volumes("shop", &[PodClaim::from_template("x", Some("gone".into()))]);
        assert_eq!(gone.unknown, ["StorageClass gone"]);
        let pod: Pod = obj(json!({"metadata": {"name": "web", "namespace": "shop"},
            "spec": {"containers": [], "volumes": [{"name": "scratch", "ephemeral":
                {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3-zonal"}}}}]}}));
        assert_eq!(
            claim_names(&pod),
            [PodClaim::from_template(
                "web-scratch",
                Some("gp3-zonal".into())
            )]
        );
    }

    #[test]
    fn attachments_name_the_csi_driver_as_karpenter_resolves_it() {
        let claims: Vec<PersistentVolumeClaim> = vec![
            obj(json!({"metadata": {"name": "csi", "namespace": "db"},
                "spec": {"volumeName": "pv-csi", "storageClassName": "other"}})),
            obj(json!({"metadata": {"name": "in-tree", "namespace": "db"},
                "spec": {"volumeName": "pv-in-tree"}})),
            obj(json!({"metadata": {"name": "nfs", "namespace": "db"},
                "spec": {"volumeName": "pv-nfs", "storageClassName": "gp2"}})),
            obj(json!({"metadata": {"name": "new-gp2", "namespace": "db"},
                "spec": {"storageClassName": "gp2"}})),
            obj(json!({"metadata": {"name": "new-default", "namespace": "db"}, "spec": {}})),
            obj(json!({"metadata": {"name": "static", "namespace": "db"},
                "spec": {"storageClassName": ""}})),
            obj(json!({"metadata": {"name": "orphan", "namespace": "db"},
                "spec": {"volumeName": "pv-gone", "storageClassName": "gp2"}})),
        ];
        let volumes: Vec<PersistentVolume> = vec![
            obj(json!({"metadata": {"name": "pv-csi"},
                "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}})),
            obj(json!({"metadata": {"name": "pv-in-tree"},
                "spec": {"awsElasticBlockStore": {"volumeID": "vol-2"}}})),
            obj(json!({"metadata": {"name": "pv-nfs"},
                "spec": {"nfs": {"server": "10.0.0.9", "path": "/export"}}})),
        ];
        let classes: Vec<StorageClass> = vec![
            obj(
                json!({"metadata": {"name": "gp2"}, "provisioner": "kubernetes.io/aws-ebs",
                "volumeBindingMode": "WaitForFirstConsumer"}),
            ),
            obj(json!({"metadata": {"name": "efs",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "efs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"})),
        ];
        let index = VolumeIndex::new(&claims, &volumes, &classes);
        let drivers = |list: &[PodClaim]| -> Vec<(String, String)> {
            index
                .pod_volumes("db", list)
                .attachments
                .into_iter()
                .map(|a| (a.claim, a.driver))
                .collect()
        };
        let pair = |c: &str, d: &str| (c.to_string(), d.to_string());
        assert_eq!(
            drivers(&names(&[
                "csi",
                "in-tree",
                "nfs",
                "new-gp2",
                "new-default",
                "static",
                "missing",
                "csi",
                "orphan"
            ])),
            [
                // The bound volume decides, not the claim's class.
                pair("db/csi", "ebs.csi.aws.com"),
                pair("db/in-tree", "ebs.csi.aws.com"),
                // An unbound claim: its class's provisioner, in-tree renamed; no class
                // named, the default class.
                pair("db/new-gp2", "ebs.csi.aws.com"),
                pair("db/new-default", "efs.csi.aws.com"),
                // Its volume gone, its class tells.
                pair("db/orphan", "ebs.csi.aws.com"),
            ]
        );
        assert_eq!(
            drivers(&[
                PodClaim::from_template("web-0-data", Some("gp2".into())),
                PodClaim::from_template("web-0-scratch", None),
                PodClaim::from_template("web-0-none", Some(String::new())),
            ]),
            [
                pair("db/web-0-data", "ebs.csi.aws.com"),
                pair("db/web-0-scratch", "efs.csi.aws.com"),
            ]
        );
        let mut pod = CorePod::default();
        index.pod_volumes("db", &names(&["csi"])).apply_to(&mut pod);
        assert_eq!(
            pod.attachments(),
            [VolumeAttachment {
                driver: "ebs.csi.aws.com".into(),
                claim: "db/csi".into()
            }]
        );
    }
}
