//! Label selectors and node-selector expressions turned into core `Requirements`.
//!
//! One representation serves node constraints and pod selectors, so the simulation intersects
//! and matches them the same way everywhere.

use std::collections::BTreeMap;

use joiner_core::{Operator, Requirement, Requirements};
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::FieldError;

/// Node-selector expressions (`matchExpressions` of a node-affinity term) at path `prefix`,
/// added to `out`.
pub fn add_node_expressions(
    out: &mut Requirements,
    exprs: &[NodeSelectorRequirement],
    prefix: &str,
) -> Result<(), FieldError> {
    for (i, e) in exprs.iter().enumerate() {
        let values = e.values.as_deref().unwrap_or_default();
        add_expression(
            out,
            &e.key,
            &e.operator,
            values,
            &format!("{prefix}[{i}]"),
            true,
        )?;
    }
    Ok(())
}

/// A pod label selector at path `prefix` as requirements on pod labels. `match_label_keys`
/// (from spread constraints and affinity terms) adds the pod's own value of each key, as the
/// scheduler does, so "spread my own revision" selectors work.
pub fn label_selector(
    sel: &LabelSelector,
    prefix: &str,
    own_labels: &BTreeMap<String, String>,
    match_label_keys: &[String],
) -> Result<Requirements, FieldError> {
    let mut out = Requirements::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        if k.is_empty() {
            return Err(FieldError::new(
                format!("{prefix}.matchLabels"),
                "label key is empty",
            ));
        }
        super::check_label(&format!("{prefix}.matchLabels"), k, v)?;
        out.add(k, Requirement::single(v));
    }
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        let values = e.values.as_deref().unwrap_or_default();
        add_expression(
            &mut out,
            &e.key,
            &e.operator,
            values,
            &format!("{prefix}.matchExpressions[{i}]"),
            false,
        )?;
    }
    for key in match_label_keys {
        if let Some(v) = own_labels.get(key) {
            out.add(key, Requirement::single(v));
        }
    }
    Ok(out)
}

/// Parses one `key operator values` expression; `numeric` allows Gt/Lt, which only node
/// selectors support.
pub(super) fn add_expression(
    out: &mut Requirements,
    key: &str,
    op: &str,
    values: &[String],
    at: &str,
    numeric: bool,
) -> Result<(), FieldError> {
    if key.is_empty() {
        return Err(FieldError::new(format!("{at}.key"), "key is empty"));
    }
    if let Some(why) = crate::syntax::qualified_name(key) {
        return Err(FieldError::new(format!("{at}.key"), why));
    }
    let operator = Operator::parse(op)
        .map_err(|e| FieldError::new(format!("{at}.operator"), e.to_string()))?;
    if !numeric && matches!(operator, Operator::Gt | Operator::Lt) {
        return Err(FieldError::new(
            format!("{at}.operator"),
            format!("operator {op} is not valid in a label selector (expected In, NotIn, Exists or DoesNotExist)"),
        ));
    }
    let req = Requirement::new(operator, values)
        .map_err(|e| FieldError::new(format!("{at}.values"), e.to_string()))?;
    out.add(key, req);
    Ok(())
}

/// A workload's `spec.selector` as the API server checks it: not empty, and matching its pod
/// template's labels (otherwise the workload could never own the pods it creates).
pub fn workload_selector(
    sel: &LabelSelector,
    template_labels: &BTreeMap<String, String>,
) -> Result<(), FieldError> {
    let empty = sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && sel.match_expressions.as_ref().is_none_or(Vec::is_empty);
    if empty {
        return Err(FieldError::new(
            "spec.selector",
            "an empty selector is invalid for a workload (it would select every pod)",
        ));
    }
    let required = label_selector(sel, "spec.selector", &BTreeMap::new(), &[])?;
    if !required.matches_labels(template_labels) {
        return Err(FieldError::new(
            "spec.template.metadata.labels",
            "the selector (spec.selector) does not match the template's labels",
        ));
    }
    Ok(())
}
