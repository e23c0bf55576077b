//! Node affinity, pod affinity and pod anti-affinity of a pod spec.

use std::collections::BTreeMap;

use joiner_core::{PodAffinityTerm, Requirement, Requirements};
use k8s_openapi::api::core::v1::{self as k8s, NodeSelectorTerm, PodSpec};

use super::selectors;
use super::FieldError;

/// The node constraints of a pod: `node_terms` (ORed, each with the nodeSelector merged in) and
/// the weighted preferred terms.
pub struct NodeConstraints {
    /// Required terms; empty means no constraint.
    pub required: Vec<Requirements>,
    /// Preferred terms with their weights.
    pub preferred: Vec<(i32, Requirements)>,
}

/// Reads nodeSelector and node affinity. `matchFields` (selecting nodes by name) cannot be
/// planned for, because a new node's name is not known before it exists, so it is rejected;
/// for pods already bound to a node (`bound`), which the simulation never places, it is
/// ignored: the DaemonSet controller writes such terms into every daemon pod.
pub fn node_constraints(
    spec: &PodSpec,
    prefix: &str,
    bound: bool,
) -> Result<NodeConstraints, FieldError> {
    let mut selector = Requirements::new();
    for (k, v) in spec.node_selector.iter().flatten() {
        if k.is_empty() {
            return Err(FieldError::new(
                format!("{prefix}.nodeSelector"),
                "label key is empty",
            ));
        }
        super::check_label(&format!("{prefix}.nodeSelector"), k, v)?;
        selector.add(k, Requirement::single(v));
    }

    let node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let aff_prefix = format!("{prefix}.affinity.nodeAffinity");

    let mut required = Vec::new();
    if let Some(req) = node_affinity.and_then(|n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        let terms_prefix = format!(
            "{aff_prefix}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        );
        for (i, term) in req.node_selector_terms.iter().enumerate() {
            let at = format!("{terms_prefix}[{i}]");
            let Some(r) = term_requirements(term, &at, bound)? else {
                continue;
            };
            required.push(selector.intersect(&r));
        }
        if required.is_empty() && !bound {
            return Err(FieldError::new(
                terms_prefix,
                "no term has an expression, so no node can match (an empty term matches nothing)",
            ));
        }
    }
    if required.is_empty() && !selector.is_empty() {
        required.push(selector);
    }

    let mut preferred = Vec::new();
    if let Some(list) = node_affinity.and_then(|n| {
        n.preferred_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        for (i, p) in list.iter().enumerate() {
            let at = format!("{aff_prefix}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            if !(1..=100).contains(&p.weight) {
                return Err(FieldError::new(
                    format!("{at}.weight"),
                    format!("weight {} is outside 1–100", p.weight),
                ));
            }
            if let Some(r) = term_requirements(&p.preference, &format!("{at}.preference"), bound)? {
                preferred.push((p.weight, r));
            }
        }
    }
    Ok(NodeConstraints {
        required,
        preferred,
    })
}

/// One node-selector term; `None` for a term without expressions (it matches nothing) or
/// with only `matchFields` on a bound pod.
fn term_requirements(
    term: &NodeSelectorTerm,
    at: &str,
    bound: bool,
) -> Result<Option<Requirements>, FieldError> {
    let has_fields = term.match_fields.as_ref().is_some_and(|f| !f.is_empty());
    if has_fields && !bound {
        return Err(FieldError::new(
            format!("{at}.matchFields"),
            "matchFields is not supported: a node's name is not known before it is launched (select nodes by label instead)",
        ));
    }
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    if exprs.is_empty() {
        return Ok(None);
    }
    let mut r = Requirements::new();
    selectors::add_node_expressions(&mut r, exprs, &format!("{at}.matchExpressions"))?;
    Ok(Some(r))
}

/// Pod affinity and anti-affinity terms, required and preferred. A term without a label
/// selector selects no pods, so it constrains nothing and is left out.
pub fn pod_affinity_terms(
    spec: &PodSpec,
    prefix: &str,
    own_labels: &BTreeMap<String, String>,
) -> Result<Vec<PodAffinityTerm>, FieldError> {
    let mut out = Vec::new();
    let Some(affinity) = &spec.affinity else {
        return Ok(out);
    };
    if let Some(a) = &affinity.pod_affinity {
        let group = TermGroup {
            anti: false,
            base: format!("{prefix}.affinity.podAffinity"),
            required: a
                .required_during_scheduling_ignored_during_execution
                .as_deref(),
            preferred: a
                .preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        };
        group.collect(own_labels, &mut out)?;
    }
    if let Some(a) = &affinity.pod_anti_affinity {
        let group = TermGroup {
            anti: true,
            base: format!("{prefix}.affinity.podAntiAffinity"),
            required: a
                .required_during_scheduling_ignored_during_execution
                .as_deref(),
            preferred: a
                .preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        };
        group.collect(own_labels, &mut out)?;
    }
    Ok(out)
}

/// The required and preferred terms of podAffinity or podAntiAffinity, which share one shape.
struct TermGroup<'a> {
    anti: bool,
    base: String,
    required: Option<&'a [k8s::PodAffinityTerm]>,
    preferred: Option<&'a [k8s::WeightedPodAffinityTerm]>,
}

impl TermGroup<'_> {
    fn collect(
        &self,
        own_labels: &BTreeMap<String, String>,
        out: &mut Vec<PodAffinityTerm>,
    ) -> Result<(), FieldError> {
        let base = &self.base;
        for (i, t) in self.required.unwrap_or_default().iter().enumerate() {
            let at = format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
            if let Some(term) = affinity_term(t, &at, own_labels, self.anti, None)? {
                out.push(term);
            }
        }
        for (i, w) in self.preferred.unwrap_or_default().iter().enumerate() {
            let at = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            if !(1..=100).contains(&w.weight) {
                return Err(FieldError::new(
                    format!("{at}.weight"),
                    format!("weight {} is outside 1–100", w.weight),
                ));
            }
            let term_at = format!("{at}.podAffinityTerm");
            let term = affinity_term(
                &w.pod_affinity_term,
                &term_at,
                own_labels,
                self.anti,
                Some(w.weight),
            )?;
            out.extend(term);
        }
        Ok(())
    }
}

/// The selector key of a required pod-affinity term written without a `labelSelector`: it
/// selects no pod, and reasons name it so.
pub const NO_SELECTOR: &str = "(no labelSelector)";

fn affinity_term(
    t: &k8s::PodAffinityTerm,
    at: &str,
    own_labels: &BTreeMap<String, String>,
    anti: bool,
    weight: Option<i32>,
) -> Result<Option<PodAffinityTerm>, FieldError> {
    if t.topology_key.is_empty() {
        return Err(FieldError::new(
            format!("{at}.topologyKey"),
            "a topology key is required",
        ));
    }
    if let Some(why) = crate::syntax::qualified_name(&t.topology_key) {
        return Err(FieldError::new(format!("{at}.topologyKey"), why));
    }
    let Some(sel) = &t.label_selector else {
        // No selector selects no pod (the API's nil selector is `labels.Nothing()`): an
        // anti-affinity or preferred term then constrains nothing, but a required affinity
        // term can never be met, not even by the pod's own group, so the kube-scheduler
        // never places the pod. It stays, selecting nothing, and the pod is refused.
        if anti || weight.is_some() {
            return Ok(None);
        }
        let mut nothing = Requirements::new();
        nothing.add(NO_SELECTOR, Requirement::one_of(Vec::<String>::new()));
        return Ok(Some(PodAffinityTerm {
            topology_key: t.topology_key.clone(),
            selector: nothing,
            namespaces: t.namespaces.clone().unwrap_or_default(),
            namespace_selector: None,
            anti,
            weight,
        }));
    };
    let keys = t.match_label_keys.as_deref().unwrap_or_default();
    let selector =
        selectors::label_selector(sel, &format!("{at}.labelSelector"), own_labels, keys)?;
    let namespace_selector = t
        .namespace_selector
        .as_ref()
        .map(|s| {
            selectors::label_selector(s, &format!("{at}.namespaceSelector"), &BTreeMap::new(), &[])
        })
        .transpose()?;
    Ok(Some(PodAffinityTerm {
        topology_key: t.topology_key.clone(),
        selector,
        namespaces: t.namespaces.clone().unwrap_or_default(),
        namespace_selector,
        anti,
        weight,
    }))
}
