//! The conversion of a Kubernetes pod spec into the simulation's `Pod`: one function that
//! every kind (Pod, workloads, DaemonSets) goes through, so a rule is implemented once.

use std::collections::BTreeMap;

use joiner_core::{Owner, Pod, PodDisruption};
use k8s_openapi::api::core::v1::{self as k8s, PodSpec};

use super::FieldError;
use super::{affinity, ports, requests, spread, tolerations};

/// Who a pod is, apart from its spec.
pub struct PodIdentity {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Owning controller.
    pub owner: Option<Owner>,
}

/// Converts the pod spec found at field path `prefix` (`spec` for a Pod,
/// `spec.template.spec` for a workload) into a simulation pod.
pub fn convert(id: PodIdentity, spec: &PodSpec, prefix: &str) -> Result<Pod, FieldError> {
    if spec.containers.is_empty() {
        return Err(FieldError::new(
            format!("{prefix}.containers"),
            "a pod needs at least one container",
        ));
    }
    container_names(spec, prefix)?;
    for (k, v) in &id.labels {
        // Workload templates carry theirs at spec.template.metadata.labels.
        let at = match prefix.strip_suffix(".spec") {
            Some(template) => format!("{template}.metadata.labels"),
            None => "metadata.labels".to_string(),
        };
        super::check_label(&at, k, v)?;
    }
    let node_name = spec.node_name.clone().filter(|n| !n.is_empty());
    let bound = node_name.is_some() || id.owner.as_ref().is_some_and(|o| o.kind == "DaemonSet");
    let requests = requests::effective_requests(spec, prefix)?;
    let nodes = affinity::node_constraints(spec, prefix, bound)?;
    let tolerations = tolerations::tolerations(
        spec.tolerations.as_deref().unwrap_or_default(),
        &format!("{prefix}.tolerations"),
    )?;
    let topology_spread = spread::topology_spread(
        spec.topology_spread_constraints
            .as_deref()
            .unwrap_or_default(),
        &format!("{prefix}.topologySpreadConstraints"),
        &id.labels,
    )?;
    let affinity = affinity::pod_affinity_terms(spec, prefix, &id.labels)?;
    let host_ports = ports::host_ports(spec, prefix)?;
    Ok(Pod {
        namespace: id.namespace,
        name: id.name,
        labels: id.labels.into(),
        requests,
        node_terms: nodes.required,
        preferred_node_terms: nodes.preferred,
        tolerations,
        topology_spread,
        affinity,
        host_ports,
        owner: id.owner,
        priority: spec.priority.unwrap_or(0),
        node_name,
        // Volumes need the claims and volumes of the cluster: `volumes::VolumeIndex`.
        volume_zones: Vec::new(),
        volume_hosts: None,
        volume_attachments: None,
        own_node_terms: None,
        volume_hold: None,
        avoid_soft_taints: false,
        // From the object's annotations, when there is one: `pod_disruption`.
        disruption: PodDisruption::default(),
    })
}

/// Container names as the API server checks them: each a DNS-1123 label, unique among the
/// pod's containers, init containers and ephemeral containers.
fn container_names(spec: &PodSpec, prefix: &str) -> Result<(), FieldError> {
    let mut seen = std::collections::BTreeSet::new();
    let lists = [
        (
            "containers",
            spec.containers
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
        ),
        (
            "initContainers",
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| c.name.as_str())
                .collect(),
        ),
        (
            "ephemeralContainers",
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| c.name.as_str())
                .collect(),
        ),
    ];
    for (list, names) in lists {
        for (i, name) in names.into_iter().enumerate() {
            let at = format!("{prefix}.{list}[{i}].name");
            if name.is_empty() {
                return Err(FieldError::new(at, "a container needs a name"));
            }
            if let Some(why) = crate::syntax::dns_label(name) {
                return Err(FieldError::new(at, why));
            }
            if !seen.insert(name) {
                return Err(FieldError::new(
                    at,
                    format!("{name:?}: duplicate container name"),
                ));
            }
        }
    }
    Ok(())
}

/// The annotation that opts a pod's node out of voluntary disruption ("true"), and the one
/// that says what deleting the pod costs.
pub const DO_NOT_DISRUPT_ANNOTATIONS: &[&str] = &[
    "joiner.sh/do-not-disrupt",
    "karpenter.sh/do-not-disrupt",
    "karpenter.sh/do-not-evict",
];
/// `controller.kubernetes.io/pod-deletion-cost`.
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The opt-outs that may also be a duration (Karpenter's since v1.12): the node is kept for
/// that long after the pod started.
const DURATION_OPT_OUTS: &[&str] = &["joiner.sh/do-not-disrupt", "karpenter.sh/do-not-disrupt"];

/// What a pod says about disrupting its node: an opt-out ("true", or for
/// `karpenter.sh/do-not-disrupt` and `joiner.sh/do-not-disrupt` a Go duration counted from
/// `status.startTime`), the deletion cost, the creation time, whether it is being deleted and
/// whether it is Ready. A value that is neither is ignored, as Karpenter ignores it, and comes
/// back in the list to be reported ("false" is no opt-out and not reported), as does a
/// deletion cost that is not an int32 (counted as 0): one bad annotation must not keep the pod
/// out of planning.
pub fn pod_disruption(pod: &k8s::Pod) -> (PodDisruption, Vec<FieldError>) {
    let meta = &pod.metadata;
    let annotations = meta.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let mut bad = Vec::new();
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0.as_second());
    let mut do_not_disrupt = None;
    let mut do_not_disrupt_until = None;
    for key in DO_NOT_DISRUPT_ANNOTATIONS {
        let Some(value) = get(key) else { continue };
        let value = value.trim();
        if value == "true" {
            do_not_disrupt = Some(key.to_string());
            do_not_disrupt_until = None;
            break;
        }
        if value == "false" || value.is_empty() {
            continue;
        }
        let seconds = DURATION_OPT_OUTS
            .contains(key)
            .then(|| crate::duration::parse_seconds(value))
            .flatten()
            .and_then(|s| i64::try_from(s).ok())
            .filter(|s| *s > 0);
        match seconds {
            Some(s) if do_not_disrupt.is_none() => {
                do_not_disrupt = Some(format!("{key}={value}"));
                // Not started yet: held until it starts (Karpenter's reading).
                do_not_disrupt_until = started.map(|t| t.saturating_add(s));
            }
            Some(_) => {}
            None => bad.push(FieldError::new(
                format!("metadata.annotations[{key:?}]"),
                if DURATION_OPT_OUTS.contains(key) {
                    format!("{value:?} is neither \"true\" nor a positive duration; ignored")
                } else {
                    format!("{value:?} is not \"true\"; ignored")
                },
            )),
        }
    }
    let deletion_cost = match get(DELETION_COST_ANNOTATION) {
        None => 0,
        Some(v) => v.trim().parse::<i32>().unwrap_or_else(|_| {
            bad.push(FieldError::new(
                format!("metadata.annotations[{DELETION_COST_ANNOTATION:?}]"),
                format!("{v:?} is not a 32-bit integer; counted as 0"),
            ));
            0
        }),
    };
    let not_ready = is_bound(pod)
        && !pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
    (
        PodDisruption {
            do_not_disrupt,
            do_not_disrupt_until,
            deletion_cost,
            created_at: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            terminating: meta.deletion_timestamp.is_some(),
            not_ready,
            // Nominations live on NodeClaims; the snapshot sets this from them.
            nominated: None,
        },
        bad,
    )
}

/// Converts a Pod object as the API server returns it: namespace (default `default`), name and
/// labels from its metadata, the owner from its controller reference, the spec at `spec`.
pub fn pod(p: &k8s::Pod) -> Result<Pod, FieldError> {
    let name = p
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| FieldError::new("metadata.name", "a name is required"))?;
    let spec = p
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::new("spec", "a pod spec is required"))?;
    let id = PodIdentity {
        namespace: super::namespace_or_default(&p.metadata),
        name,
        labels: p.metadata.labels.clone().unwrap_or_default(),
        owner: controller_owner(p),
    };
    let mut converted = convert(id, spec, "spec")?;
    converted.disruption = pod_disruption(p).0;
    Ok(converted)
}

/// The controller named in a pod's ownerReferences, so that pods from a cluster dump keep
/// their owner (and DaemonSet pods are recognised as daemons).
pub fn controller_owner(pod: &k8s::Pod) -> Option<Owner> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| Owner {
            kind: r.kind.clone(),
            name: r.name.clone(),
        })
}

/// The phase of a pod that has finished and holds no resources any more.
pub fn finished_phase(pod: &k8s::Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .filter(|p| matches!(*p, "Succeeded" | "Failed"))
}

/// True when the pod has a node (`spec.nodeName` set and not empty).
pub fn is_bound(pod: &k8s::Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Why joiner plans no capacity for this pod, which is not bound to a node, when it plans
/// none: the kube-scheduler is not trying to place it, or placing it is not joiner's job. The
/// controller and `joiner plan` skip the same pods.
///
/// - it has finished;
/// - it is being deleted;
/// - the kube-scheduler nominated a node for it (it preempted pods there and waits for them);
/// - a DaemonSet owns it (its pods are overhead on every node, never a reason to buy one);
/// - it has scheduling gates (the kube-scheduler does not consider it until they are gone).
pub fn not_planned(pod: &k8s::Pod) -> Option<String> {
    if let Some(phase) = finished_phase(pod) {
        return Some(format!("it has finished (phase {phase})"));
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted".into());
    }
    let status = pod.status.as_ref();
    if let Some(node) = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        return Some(format!(
            "the kube-scheduler nominated node {node} for it (it waits for preempted pods there)"
        ));
    }
    if controller_owner(pod).is_some_and(|o| o.kind == "DaemonSet") {
        return Some("a DaemonSet owns it (its pods are overhead on each node)".into());
    }
    let gates: Vec<&str> = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|g| g.name.as_str())
        .collect();
    if !gates.is_empty() {
        return Some(format!(
            "it has scheduling gates ({}); the kube-scheduler considers it once they are removed",
            gates.join(", ")
        ));
    }
    None
}
