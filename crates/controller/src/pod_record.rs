//! How the controller keeps a pod: converted once, when the watch delivers it, into what its
//! decisions read, and nothing else.
//!
//! A cluster's pods dominate a controller's memory. A k8s-openapi `Pod` is 2.4 KB before any of
//! its strings, and each container another 2.3 KB: kept as such, 20,000 pods hold hundreds of
//! megabytes. A [`PodRecord`] holds the pod's identity (name, namespace, UID, resourceVersion,
//! timestamps, owner references, the annotations a drain reads), the facts the reconcilers ask
//! (its node, its role for provisioning, whether it finished, its priority class, whether it
//! tolerates joiner's disruption taint) and the simulation's own [`joiner_core::Pod`], converted
//! by the same `joiner_apis::convert` the manifest loader uses — or the conversion's error, so a
//! pod that cannot be read is reported by every snapshot and lost by none.

use std::borrow::Cow;
use std::collections::BTreeMap;

use joiner_apis::convert;
use joiner_core::labels;
use joiner_core::taints::first_untolerated;
use joiner_core::{Effect, Taint};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;

/// Annotation the kubelet puts on mirror pods.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The annotations a record keeps: a drain and disruption read them.
const KEPT_ANNOTATIONS: &[&str] = &[
    MIRROR_ANNOTATION,
    labels::DO_NOT_DISRUPT,
    labels::KARPENTER_DO_NOT_EVICT,
    "karpenter.sh/do-not-disrupt",
    "controller.kubernetes.io/pod-deletion-cost",
];

/// What a pod means to provisioning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodRole {
    /// Bound to a node (or a DaemonSet pod): its requests count on that node.
    Bound,
    /// The kube-scheduler tried and found no node: capacity may have to be made.
    Pending,
    /// Not for planning: finished, being deleted before it ran, or not yet tried.
    Ignored,
}

/// A pod as the stores keep it.
#[derive(Clone, Debug)]
pub struct PodRecord {
    /// Identity and the fields a drain reads: name, namespace, UID, resourceVersion, creation
    /// and deletion timestamps, annotations cut to `KEPT_ANNOTATIONS` (no labels: the core
    /// pod has them; no owner references: see `daemon`).
    pub metadata: ObjectMeta,
    /// True when a DaemonSet owns it (a drain leaves it; provisioning ignores it unbound).
    pub daemon: bool,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// Its role for provisioning ([`PodRole`]).
    pub role: PodRole,
    /// True in phase Succeeded or Failed: it holds nothing.
    pub finished: bool,
    /// `spec.priorityClassName`.
    pub priority_class_name: Option<String>,
    /// True when it tolerates `joiner.sh/disrupted:NoSchedule` (a drain leaves it alone).
    pub tolerates_disruption: bool,
    /// The PersistentVolumeClaims its volumes use (names in its namespace): each snapshot
    /// confines the pod to the zones those volumes are in, read from the claim stores then,
    /// since a claim binds after the pod is created.
    pub claims: Vec<convert::volumes::PodClaim>,
    /// The simulation's pod, or why the pod cannot be read (`field: reason`).
    pub core: Result<joiner_core::Pod, String>,
}

impl PodRecord {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or("default"),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// The annotation `key`, when the pod has it.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }
}

impl From<&Pod> for PodRecord {
    fn from(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let meta = &pod.metadata;
        let annotations: BTreeMap<String, String> = meta
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| KEPT_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        PodRecord {
            metadata: ObjectMeta {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                creation_timestamp: meta.creation_timestamp.clone(),
                deletion_timestamp: meta.deletion_timestamp.clone(),
                annotations: (!annotations.is_empty()).then_some(annotations),
                ..ObjectMeta::default()
            },
            daemon: meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "DaemonSet"),
            node_name: spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            role: role(pod),
            finished: convert::finished_phase(pod).is_some(),
            priority_class_name: spec.and_then(|s| s.priority_class_name.clone()),
            tolerates_disruption: tolerates_disruption(pod),
            claims: convert::volumes::claim_names(pod),
            core: convert::pod(pod).map_err(|e| e.to_string()),
        }
    }
}

impl From<Pod> for PodRecord {
    fn from(pod: Pod) -> Self {
        PodRecord::from(&pod)
    }
}

/// The record is a Pod to the reflector machinery (the same kind, group, version and plural).
impl kube::Resource for PodRecord {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Classifies a pod.
///
/// A pod without a node is pending for joiner only once the kube-scheduler has marked it
/// `PodScheduled=False` with reason `Unschedulable`: before that the scheduler may still place
/// it on capacity that exists, and launching for it would race the scheduler and buy nodes
/// nobody needs (Karpenter waits for the same condition). Pods in phase Succeeded or Failed hold
/// no resources and are ignored, as are unbound pods already being deleted. An unbound pod with
/// `status.nominatedNodeName` is waiting for a preemption the scheduler started on that node, and
/// an unbound DaemonSet pod waits for its own node (the DaemonSet controller binds it there): new
/// capacity would help neither, so both are ignored. The unbound pods skipped are those
/// `joiner_apis::convert::not_planned` names, the same `joiner plan` skips.
pub fn role(pod: &Pod) -> PodRole {
    if convert::finished_phase(pod).is_some() {
        return PodRole::Ignored;
    }
    if convert::is_bound(pod) {
        return PodRole::Bound;
    }
    if convert::not_planned(pod).is_some() {
        return PodRole::Ignored;
    }
    let unschedulable = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
    if unschedulable {
        PodRole::Pending
    } else {
        PodRole::Ignored
    }
}

/// True for pods that tolerate `joiner.sh/disrupted:NoSchedule` (a toleration that cannot be
/// read counts as not tolerating: such a pod is evicted, the safe side).
fn tolerates_disruption(pod: &Pod) -> bool {
    let Some(list) = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()) else {
        return false;
    };
    let Ok(tolerations) = convert::tolerations(list, "spec.tolerations") else {
        return false;
    };
    let disrupted = Taint {
        key: labels::DISRUPTED_TAINT.to_string(),
        value: String::new(),
        effect: Effect::NoSchedule,
    };
    first_untolerated(std::slice::from_ref(&disrupted), &tolerations).is_none()
}
