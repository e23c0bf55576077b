//! The simulation's own pod, node and DaemonSet records: only what scheduling decisions read.
//!
//! These are built from Kubernetes objects (by the CLI's loader or the controller's reflectors)
//! so the simulation never depends on the API types and stays cheap to copy.

use std::collections::BTreeMap;

use crate::pod_labels::PodLabels;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::{Taint, Toleration};

/// A label selector (matchLabels and matchExpressions) expressed as requirements on pod labels.
pub type LabelSelector = Requirements;

/// A topology spread constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopologySpread {
    /// Node label that defines the domains.
    pub topology_key: String,
    /// Maximum allowed difference between the fullest and emptiest domain.
    pub max_skew: i32,
    /// With fewer domains than this, the global minimum counts as zero.
    pub min_domains: Option<i32>,
    /// `DoNotSchedule` when true; `ScheduleAnyway` (a preference) when false.
    pub hard: bool,
    /// Which pods are counted.
    pub selector: LabelSelector,
    /// `nodeAffinityPolicy: Honor` (the default): only pods on nodes the pod's own node
    /// selector and required node affinity select are counted. `Ignore`: pods on every node.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only pods on nodes whose taints the pod tolerates are
    /// counted. `Ignore` (the default): taints do not matter.
    pub honor_node_taints: bool,
}

/// A pod (anti-)affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodAffinityTerm {
    /// Node label that defines "together" / "apart".
    pub topology_key: String,
    /// Which pods the term is about.
    pub selector: LabelSelector,
    /// Namespaces the selector looks in; empty (with no `namespace_selector`) means the pod's
    /// own namespace.
    pub namespaces: Vec<String>,
    /// `namespaceSelector`: namespaces by their labels, added to `namespaces` (`{}`, an empty
    /// selector, is every namespace). [`crate::Snapshot::resolve_namespace_selectors`] turns it
    /// into names before the simulation runs.
    pub namespace_selector: Option<Requirements>,
    /// True for anti-affinity.
    pub anti: bool,
    /// `None` for a required term, the weight for a preferred one.
    pub weight: Option<i32>,
}

/// A host port a container binds on the node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// Port number.
    pub port: i32,
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// Host IP; empty means every address.
    pub ip: String,
}

/// The controller that owns a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// Kind (Deployment, ReplicaSet, StatefulSet, Job, DaemonSet).
    pub kind: String,
    /// Name.
    pub name: String,
}

/// A pod as the simulation sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels (for selectors of other pods' spread and affinity terms).
    pub labels: PodLabels,
    /// Effective requests: max(init containers, sum of containers) plus overhead, plus one pod slot.
    pub requests: Resources,
    /// Required node constraints: nodeSelector merged into each required node-affinity term.
    /// The terms are ORed; empty means no constraint.
    pub node_terms: Vec<Requirements>,
    /// Preferred node-affinity terms with their weights.
    pub preferred_node_terms: Vec<(i32, Requirements)>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints.
    pub topology_spread: Vec<TopologySpread>,
    /// Pod affinity and anti-affinity terms.
    pub affinity: Vec<PodAffinityTerm>,
    /// Host ports.
    pub host_ports: Vec<HostPort>,
    /// Owning controller.
    pub owner: Option<Owner>,
    /// Priority.
    pub priority: i32,
    /// The node it runs on; `None` for a pending pod.
    pub node_name: Option<String>,
    /// The zones its volumes confine it to (already ANDed into `node_terms`; kept to name the
    /// claim when no Provisioner reaches the zone).
    pub volume_zones: Vec<VolumeZone>,
    /// The nodes its volumes pin it to (already ANDed into `node_terms`; kept to name the
    /// claim when none of those nodes exists). Boxed: rare, and every pod carries the field.
    pub volume_hosts: Option<Box<Vec<VolumeHost>>>,
    /// The volumes it has attached through CSI drivers, one per claim: a node whose CSINode
    /// caps a driver's attachments (EBS: about 25 on most Nitro types) takes the pod only
    /// while the count stays within the cap, as the kube-scheduler's NodeVolumeLimits
    /// decides. Boxed: most pods have none, and every pod carries the field.
    pub volume_attachments: Option<Box<Vec<VolumeAttachment>>>,
    /// The required node terms as the pod states them, before its volumes' zones were ANDed
    /// in; `None` when no volume confines it. Topology spread counts domains from these: the
    /// kube-scheduler's spread honours the pod's node affinity, not where its volumes are.
    pub own_node_terms: Option<Vec<Requirements>>,
    /// Why the pod cannot be scheduled until its volumes change (a claim that does not exist
    /// or is not bound yet, naming it): the simulation holds it with this reason.
    pub volume_hold: Option<String>,
    /// True while the simulation holds the pod to its preference for Provisioners without
    /// `PreferNoSchedule` taints: such taints then repel it like `NoSchedule` ones. Karpenter
    /// tolerates them only as the last relaxation, so a soft-tainted Provisioner is used only
    /// when no other fits.
    pub avoid_soft_taints: bool,
    /// What disruption reads about the pod (its opt-out, its deletion cost).
    pub disruption: PodDisruption,
}

/// A pod's say in disruption: whether it keeps its node, and what evicting it costs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodDisruption {
    /// The annotation keeping its node from voluntary disruption (`joiner.sh/do-not-disrupt`,
    /// `karpenter.sh/do-not-disrupt` or `karpenter.sh/do-not-evict` set to "true", or one of
    /// the first two set to a duration, as `key=duration`), if any.
    pub do_not_disrupt: Option<String>,
    /// For a duration opt-out (`karpenter.sh/do-not-disrupt: "30m"`): when it ends (unix
    /// seconds: the pod's start plus the duration). `None` with an opt-out: it holds for ever
    /// ("true", or a duration on a pod that has not started yet).
    pub do_not_disrupt_until: Option<i64>,
    /// True once the pod is being deleted (`metadata.deletionTimestamp`): it is going anyway,
    /// so it neither keeps its node nor needs room elsewhere (a StatefulSet's pod excepted:
    /// its replacement of the same name is created only once it is gone).
    pub terminating: bool,
    /// True for a bound pod whose `Ready` condition is not True: a PodDisruptionBudget with
    /// `unhealthyPodEvictionPolicy: AlwaysAllow` lets it be evicted whatever its budget.
    pub not_ready: bool,
    /// `controller.kubernetes.io/pod-deletion-cost`: pods that cost more to delete make their
    /// node a worse candidate.
    pub deletion_cost: i32,
    /// When the pod was created (unix seconds), if known: a pod that just arrived makes its
    /// node a fresh one for `consolidateAfter`.
    pub created_at: Option<i64>,
    /// The NodeClaim whose room is held for the pod while it is not bound there (its
    /// nomination, [`crate::labels::NOMINATED_PODS`]): the snapshot places it on that claim's
    /// node, and that node is not disrupted until the pod arrives or the nomination lapses.
    pub nominated: Option<String>,
}

impl PodDisruption {
    /// True when the pod's opt-out keeps its node at `now`: "true", or a duration not over.
    pub fn protects(&self, now: i64) -> bool {
        self.do_not_disrupt.is_some() && self.do_not_disrupt_until.is_none_or(|until| now < until)
    }
}

/// A zone constraint a pod's volume puts on it: a bound PersistentVolume's node affinity, or
/// the allowedTopologies of the StorageClass an unbound claim will be provisioned from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeZone {
    /// The PersistentVolumeClaim, `namespace/name`.
    pub claim: String,
    /// The zones allowed (`topology.kubernetes.io/zone In [...]`).
    pub zones: Requirement,
}

/// The nodes a pod's volume can be mounted on: a bound PersistentVolume whose node affinity
/// names hosts (`kubernetes.io/hostname In [...]`, a local volume or a CSI volume of one
/// node). No new node can be one of them, so only those existing nodes can take the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeHost {
    /// The PersistentVolumeClaim, `namespace/name`.
    pub claim: String,
    /// The PersistentVolume bound to it.
    pub volume: String,
    /// The hosts allowed (`kubernetes.io/hostname In [...]`).
    pub hosts: Requirement,
}

/// One volume a pod attaches to its node through a CSI driver.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeAttachment {
    /// The CSI driver attaching it (`ebs.csi.aws.com`; in-tree EBS volumes are migrated to it).
    pub driver: String,
    /// The PersistentVolumeClaim, `namespace/name`: two pods using one claim on a node attach
    /// it once.
    pub claim: String,
}

impl Pod {
    /// The volumes the pod attaches ([`Pod::volume_attachments`]), none for most pods.
    pub fn attachments(&self) -> &[VolumeAttachment] {
        self.volume_attachments
            .as_deref()
            .map_or(&[], Vec::as_slice)
    }

    /// Pins the pod to the nodes its volumes can be mounted on: each is ANDed into every
    /// required node term, like [`Pod::require_volume_zones`], and recorded in
    /// [`Pod::volume_hosts`].
    pub fn require_volume_hosts(&mut self, hosts: Vec<VolumeHost>) {
        if hosts.is_empty() {
            return;
        }
        for vh in &hosts {
            self.and_volume_requirement(crate::labels::HOSTNAME, &vh.hosts);
        }
        self.volume_hosts.get_or_insert_default().extend(hosts);
    }

    /// Confines the pod to the zones of its volumes: each is ANDed into every required node
    /// term (a pod without terms gets one), and recorded in [`Pod::volume_zones`].
    pub fn require_volume_zones(&mut self, zones: Vec<VolumeZone>) {
        if zones.is_empty() {
            return;
        }
        for vz in &zones {
            self.and_volume_requirement(crate::labels::ZONE, &vz.zones);
        }
        self.volume_zones.extend(zones);
    }

    /// ANDs a volume's requirement on `key` into every required node term (a pod without
    /// terms gets one), keeping the pod's own terms first in [`Pod::own_node_terms`].
    fn and_volume_requirement(&mut self, key: &str, req: &Requirement) {
        if self.own_node_terms.is_none() {
            self.own_node_terms = Some(self.node_terms.clone());
        }
        if self.node_terms.is_empty() {
            self.node_terms.push(Requirements::new());
        }
        for term in &mut self.node_terms {
            term.add(key, req.clone());
        }
    }

    /// Holds the pod for a volume that keeps it from being scheduled (see
    /// [`Pod::volume_hold`]); the first reason given is kept.
    pub fn hold_for_volume(&mut self, reason: String) {
        self.volume_hold.get_or_insert(reason);
    }

    /// The required node terms as the pod states them (see [`Pod::own_node_terms`]).
    pub fn spread_node_terms(&self) -> &[Requirements] {
        self.own_node_terms.as_deref().unwrap_or(&self.node_terms)
    }

    /// The first of a Provisioner's `taints` that keeps the pod off its nodes: a `NoSchedule`
    /// or `NoExecute` taint it does not tolerate, or a `PreferNoSchedule` one while
    /// [`Pod::avoid_soft_taints`] holds.
    pub fn blocking_provisioner_taint<'a>(&self, taints: &'a [Taint]) -> Option<&'a Taint> {
        crate::taints::first_untolerated(taints, &self.tolerations).or_else(|| {
            if self.avoid_soft_taints {
                crate::taints::first_untolerated_soft(taints, &self.tolerations)
            } else {
                None
            }
        })
    }

    /// `namespace/name`, the key people use.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// True when a DaemonSet owns the pod: the autoscaler never provisions for those.
    pub fn is_daemon(&self) -> bool {
        self.owner.as_ref().is_some_and(|o| o.kind == "DaemonSet")
    }

    /// True when the pod is being deleted and nothing takes its place on its own: a
    /// terminating pod that no StatefulSet owns (a StatefulSet recreates the pod of the same
    /// name only once it is gone, so its room is still needed; Karpenter counts it too).
    pub fn is_going(&self) -> bool {
        self.disruption.terminating && self.owner.as_ref().is_none_or(|o| o.kind != "StatefulSet")
    }
}

/// A node that exists (or is in flight): capacity the simulation can use at no new cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Raw capacity (counts against Provisioner limits).
    pub capacity: Resources,
    /// Allocatable.
    pub allocatable: Resources,
    /// True when the node is cordoned or being deleted: it takes no new pods.
    pub unschedulable: bool,
    /// How many volumes each CSI driver may attach to it (its CSINode's
    /// `spec.drivers[].allocatable.count`); a driver not named here is not capped. Empty for
    /// a node whose CSINode is not known yet (in flight, or its driver not registered), as
    /// Karpenter reads it.
    pub volume_limits: BTreeMap<String, i64>,
    /// What disruption reads about the node (age, readiness, opt-outs).
    pub life: NodeLife,
}

/// A node's standing for disruption.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLife {
    /// When it was created (unix seconds), if known.
    pub created_at: Option<i64>,
    /// Registered, Ready and past its startup taints once (its NodeClaim's `Initialized`,
    /// which stays true): only such nodes are disrupted, and only they count in budgets.
    pub initialized: bool,
    /// Its Node is being deleted, or the caller knows it is already being disrupted (its
    /// NodeClaim deleted): its pods are leaving, and it takes none.
    pub deleting: bool,
    /// Its Ready condition is not True now. An initialized node that is not Ready is
    /// disrupting for budgets (Karpenter's count), takes no moved pods, and is a candidate
    /// for expiration only.
    pub not_ready: bool,
    /// The annotation keeping it from voluntary disruption (`joiner.sh/do-not-disrupt` or
    /// `karpenter.sh/do-not-disrupt` set to "true"), if any.
    pub do_not_disrupt: Option<String>,
    /// `karpenter.sh/do-not-consolidate: "true"`: drift and expiry may still replace it.
    pub do_not_consolidate: bool,
    /// When a pod last left it (unix seconds), when someone watching saw it (the controller):
    /// arrivals are known from the pods' own creation times, departures only from here.
    pub pods_changed_at: Option<i64>,
    /// Why the controller leaves it out of disruption whatever its state (labelled with a
    /// Provisioner but without a NodeClaim: nothing could carry a decision on it out).
    pub not_disruptable: Option<String>,
    /// The labels its NodeClaim records (its single-valued requirements, its instance type's
    /// labels, its zone and capacity type), when it has a claim: drift reads these, not the
    /// live Node's, so a label edited by hand does not replace the node (Karpenter compares
    /// the NodeClaim's labels too). Boxed: most snapshots made without claims have none.
    pub recorded_labels: Option<Box<std::collections::BTreeMap<String, String>>>,
}

impl Node {
    /// The joiner provisioner owning this node, from its label.
    pub fn provisioner(&self) -> Option<&str> {
        self.labels
            .get(crate::labels::PROVISIONER_NAME)
            .map(String::as_str)
    }
}

/// A DaemonSet: its pod template decides where it runs and what it costs on each new node.
#[derive(Clone, Debug, PartialEq)]
pub struct DaemonSet {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The pod it runs on every eligible node.
    pub pod: Pod,
}
