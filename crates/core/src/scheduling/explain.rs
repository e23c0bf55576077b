//! Why a pod goes where it goes: per Provisioner, how many instance types each requirement,
//! resource, taint, host port, limit or topology pin excluded, and the final placement.
//!
//! `joiner plan --explain` prints this; the controller will put [`Explanation::event_message`]
//! in the pod's Event, so a person reads the same words in both places.

use std::collections::BTreeMap;
use std::fmt;

use crate::instance_type::InstanceType;
use crate::labels;
use crate::pod::Pod;
use crate::requirements::Requirements;
use crate::resources::{human_amount, Resources};
use crate::snapshot::Snapshot;

use super::candidates::ProvisionerView;
use super::pass::Pass;
use super::plan::Plan;
use super::ports::first_clash;
use super::Options;

/// How one Provisioner's catalog narrowed down for the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvisionerFilter {
    /// Provisioner name.
    pub name: String,
    /// Its weight.
    pub weight: i32,
    /// Instance types in the catalog.
    pub catalog: usize,
    /// What excluded how many types, in the order the filters apply.
    pub excluded: Vec<(String, usize)>,
    /// Types left that could hold the pod.
    pub left: usize,
}

/// Where the pod went in the plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// On an existing node.
    Existing(String),
    /// On a new node.
    New {
        /// Claim name.
        node: String,
        /// Chosen type.
        instance_type: String,
        /// Zone.
        zone: String,
        /// spot / on-demand.
        capacity_type: String,
        /// Every type listed for the launch, cheapest first.
        options: Vec<String>,
    },
    /// Nowhere, with the reason.
    Unschedulable(String),
    /// The pod is not pending (it runs already or a DaemonSet owns it).
    NotPending,
}

/// The explanation of one pod's placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    /// `namespace/name`.
    pub pod: String,
    /// What the pod requests, in people's units ("1.5 cpu cores, 3 GiB memory").
    pub requests: String,
    /// Zone or capacity type the topology pass pinned it to, if any.
    pub pinned: Option<String>,
    /// Per-node rules (anti-affinity, hostname spread, host ports) the pod takes part in.
    pub node_rules: Vec<String>,
    /// Per Provisioner, in the order they are tried.
    pub provisioners: Vec<ProvisionerFilter>,
    /// Preferences given up.
    pub relaxed: Vec<String>,
    /// The outcome.
    pub placement: Placement,
}

impl Explanation {
    /// One line for a pod Event.
    pub fn event_message(&self) -> String {
        let mut s = match &self.placement {
            Placement::Existing(n) => format!("would be scheduled on existing node {n}"),
            Placement::New {
                node,
                instance_type,
                zone,
                capacity_type,
                options,
            } => format!(
                "would be scheduled on new node {node} ({instance_type}, {zone}, {capacity_type}; {} instance type option(s))",
                options.len()
            ),
            Placement::Unschedulable(r) => format!("cannot be scheduled: {r}"),
            Placement::NotPending => "is not pending".to_string(),
        };
        if !self.relaxed.is_empty() {
            s.push_str(&format!("; relaxed {}", self.relaxed.join("; ")));
        }
        s
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Existing(n) => write!(f, "existing node {n}"),
            Placement::New {
                node,
                instance_type,
                zone,
                capacity_type,
                options,
            } => {
                // The full list is in the JSON output; a person needs the first few.
                const SHOWN: usize = 8;
                let mut list = options
                    .iter()
                    .take(SHOWN)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if options.len() > SHOWN {
                    list.push_str(&format!(", … ({} in all)", options.len()));
                }
                write!(
                    f,
                    "new node {node}: {instance_type} in {zone} ({capacity_type}); options: {list}"
                )
            }
            Placement::Unschedulable(r) => write!(f, "unschedulable: {r}"),
            Placement::NotPending => write!(f, "not pending"),
        }
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Pod {}", self.pod)?;
        writeln!(f, "  requests: {}", self.requests)?;
        if let Some(p) = &self.pinned {
            writeln!(f, "  topology: pinned to {p}")?;
        }
        for r in &self.node_rules {
            writeln!(f, "  per-node rule: {r}")?;
        }
        for p in &self.provisioners {
            writeln!(
                f,
                "Provisioner {} (weight {}): {} instance types",
                p.name, p.weight, p.catalog
            )?;
            for (what, n) in &p.excluded {
                writeln!(f, "  {n:>5} excluded by {what}")?;
            }
            writeln!(f, "  {:>5} left", p.left)?;
        }
        for r in &self.relaxed {
            writeln!(f, "Relaxed: {r}")?;
        }
        writeln!(f, "Placement: {}", self.placement)
    }
}

/// A pod's requests for people: cpu and memory always, ephemeral storage and extended
/// resources when asked for (the pod slot every pod takes is left out).
fn human_requests(r: &Resources) -> String {
    let mut parts = vec![human_amount("cpu", r.cpu), human_amount("memory", r.memory)];
    if r.ephemeral_storage > 0 {
        parts.push(human_amount("ephemeral-storage", r.ephemeral_storage));
    }
    parts.extend(r.extended().iter().map(|(k, v)| human_amount(k, *v)));
    parts.join(", ")
}

/// Explains the placement of pod `key` (`namespace/name`) in `plan`; `None` when no such pod.
pub fn explain(
    snapshot: &Snapshot,
    catalog: &[InstanceType],
    plan: &Plan,
    key: &str,
) -> Option<Explanation> {
    let idx = snapshot.pods.iter().position(|p| p.key() == key)?;
    let pod = &snapshot.pods[idx];
    // The same pass the simulation ends with (on the snapshot as given, before any preference
    // is relaxed, with the domains its earlier passes closed), so the pin, the rules and the
    // views are the ones the plan used.
    let (_, closed) = super::settle(snapshot, catalog, &Options::default());
    let mut pass = Pass::with_closed(snapshot, catalog, &Options::default(), &closed);
    let class = pass.class_of(idx);
    let pinned = class
        .map(|c| pass.classes()[c].pinned.clone())
        .unwrap_or_default();
    let node_rules = class
        .map(|c| pass.rules().describe_class(c))
        .unwrap_or_default();
    let provisioners = (0..pass.provisioners().len())
        .map(|i| filter(catalog, &pass.provisioner_view(i), pod, &pinned))
        .collect();
    let placement = if pod.node_name.is_some() || pod.is_daemon() {
        Placement::NotPending
    } else if let Some(n) = plan
        .new_nodes
        .iter()
        .find(|n| n.pods.iter().any(|p| p == key))
    {
        Placement::New {
            node: n.name.clone(),
            instance_type: n.instance_type.clone(),
            zone: n.zone.clone(),
            capacity_type: n.capacity_type.as_str().to_string(),
            options: n.instance_type_options.to_vec(),
        }
    } else if let Some(n) = plan
        .existing_nodes
        .iter()
        .find(|n| n.pods.iter().any(|p| p == key))
    {
        Placement::Existing(n.name.clone())
    } else {
        Placement::Unschedulable(
            plan.unschedulable
                .iter()
                .find(|u| u.pod == key)
                .map(|u| u.reason.clone())
                .unwrap_or_else(|| "not in the plan".to_string()),
        )
    };
    Some(Explanation {
        pod: key.to_string(),
        requests: human_requests(&pod.requests),
        pinned: (!pinned.is_empty()).then(|| pinned.to_string()),
        node_rules,
        provisioners,
        relaxed: plan
            .relaxed
            .iter()
            .find(|r| r.pod == key)
            .map(|r| r.preferences.clone())
            .unwrap_or_default(),
        placement,
    })
}

/// Applies the filters of one provisioner to every catalog type and counts what excluded each.
fn filter(
    catalog: &[InstanceType],
    view: &ProvisionerView<'_>,
    pod: &Pod,
    pinned: &Requirements,
) -> ProvisionerFilter {
    let prov = view.prov;
    let mut excluded: BTreeMap<(u8, String), usize> = BTreeMap::new();
    for (k, n) in &view.base.excluded_by_key {
        let what = if k == "offerings" {
            "no available offering the provisioner allows".to_string()
        } else {
            format!(
                "provisioner requirement {k} {}",
                view.base
                    .node_reqs
                    .get(k)
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            )
        };
        excluded.insert((0, what), *n);
    }
    let taint = pod
        .blocking_provisioner_taint(&prov.taints)
        .map(|t| t.to_string());
    let terms: Vec<Requirements> = if pod.node_terms.is_empty() {
        vec![Requirements::new()]
    } else {
        pod.node_terms.clone()
    };
    let merged: Vec<Requirements> = terms
        .iter()
        .map(|t| view.base.node_reqs.intersect(t))
        .collect();
    let with_pin: Vec<Requirements> = merged.iter().map(|m| m.intersect(pinned)).collect();
    let wants_accel = pod.requests.has_extended();
    let mut left = 0;
    let mut left_plain = 0;
    let mut accelerated_left = 0;
    for (i, &ci) in view.base.types.iter().enumerate() {
        let t = &catalog[ci];
        let why: Option<(u8, String)> = if let Some(taint) = &taint {
            Some((1, format!("taint {taint} (not tolerated)")))
        } else if let Some(k) = label_conflict(t, &merged, &terms, &view.base.node_reqs) {
            Some((2, k))
        } else if !pinned.is_empty() && with_pin.iter().all(|m| t.cheapest_offering(m).is_none()) {
            Some((3, format!("topology pin {pinned}")))
        } else if let Some(k) = first_clash(&pod.host_ports, &view.base.daemon_ports[i]) {
            Some((
                4,
                format!("host port {} bound by a DaemonSet", k.describe()),
            ))
        } else if !pod.requests.fits(&view.base.effective[i]) {
            Some((
                5,
                format!(
                    "resource {}",
                    short_resource(&pod.requests, &view.base.effective[i])
                ),
            ))
        } else if !view.within_limits(i) {
            Some((
                6,
                view.blocking_limit(i)
                    .map_or("limit".to_string(), |r| r.to_string()),
            ))
        } else {
            None
        };
        match why {
            Some(w) => *excluded.entry(w).or_default() += 1,
            None => {
                left += 1;
                if t.is_accelerated() {
                    accelerated_left += 1;
                } else {
                    left_plain += 1;
                }
            }
        }
    }
    if !wants_accel && left_plain > 0 && accelerated_left > 0 {
        excluded.insert(
            (
                7,
                "accelerator types kept for pods that request accelerators".into(),
            ),
            accelerated_left,
        );
        left = left_plain;
    }
    ProvisionerFilter {
        name: prov.name.clone(),
        weight: prov.weight,
        catalog: catalog.len(),
        excluded: excluded
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|((_, w), n)| (w, n))
            .collect(),
        left,
    }
}

/// The pod requirement that excludes the type under every node term (the first term's key).
fn label_conflict(
    t: &InstanceType,
    merged: &[Requirements],
    terms: &[Requirements],
    prov: &Requirements,
) -> Option<String> {
    let mut first = None;
    for (m, term) in merged.iter().zip(terms) {
        let custom = term
            .iter()
            .find(|(k, r)| prov.get(k).is_none() && !t.defines(k) && !r.allows_absent());
        let conflict = custom
            .map(|(k, _)| k.as_str())
            .or_else(|| t.first_label_conflict(m))
            .or_else(|| t.cheapest_offering(m).is_none().then_some(labels::ZONE));
        match conflict {
            None => return None,
            Some(k) => {
                if first.is_none() {
                    let r = m.get(k).map(|r| r.to_string()).unwrap_or_default();
                    first = Some(format!("requirement {k} {r}"));
                }
            }
        }
    }
    first
}

/// The first resource the pod asks more of than the type has left.
fn short_resource(want: &Resources, have: &Resources) -> String {
    let mut names: Vec<String> = ["cpu", "memory", "ephemeral-storage", "pods"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    names.extend(want.extended().iter().map(|(k, _)| k.clone()));
    names
        .into_iter()
        .find(|n| want.get(n) > have.get(n))
        .unwrap_or_else(|| "(together)".to_string())
}
