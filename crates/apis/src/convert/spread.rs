//! Topology spread constraints.

use std::collections::BTreeMap;

use joiner_core::TopologySpread;
use k8s_openapi::api::core::v1 as k8s;

use super::selectors;
use super::FieldError;

/// Converts spread constraints at path `prefix`. A constraint without a label selector counts
/// no pods, so it can never be violated and is left out.
pub fn topology_spread(
    list: &[k8s::TopologySpreadConstraint],
    prefix: &str,
    own_labels: &BTreeMap<String, String>,
) -> Result<Vec<TopologySpread>, FieldError> {
    let mut out = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let at = |leaf: &str| format!("{prefix}[{i}].{leaf}");
        if c.topology_key.is_empty() {
            return Err(FieldError::new(
                at("topologyKey"),
                "a topology key is required",
            ));
        }
        if let Some(why) = crate::syntax::qualified_name(&c.topology_key) {
            return Err(FieldError::new(at("topologyKey"), why));
        }
        if c.max_skew < 1 {
            return Err(FieldError::new(
                at("maxSkew"),
                format!("must be at least 1, got {}", c.max_skew),
            ));
        }
        if let Some(m) = c.min_domains.filter(|m| *m < 1) {
            return Err(FieldError::new(
                at("minDomains"),
                format!("must be at least 1, got {m}"),
            ));
        }
        let hard = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => true,
            "ScheduleAnyway" => false,
            other => {
                return Err(FieldError::new(
                    at("whenUnsatisfiable"),
                    format!("unknown value {other:?} (expected DoNotSchedule or ScheduleAnyway)"),
                ))
            }
        };
        if !hard && c.min_domains.is_some() {
            return Err(FieldError::new(
                at("minDomains"),
                "can only be set when whenUnsatisfiable is DoNotSchedule",
            ));
        }
        let honor_node_affinity = match c.node_affinity_policy.as_deref() {
            None | Some("Honor") => true,
            Some("Ignore") => false,
            Some(other) => {
                return Err(FieldError::new(
                    at("nodeAffinityPolicy"),
                    format!("unknown value {other:?} (expected Honor or Ignore)"),
                ))
            }
        };
        let honor_node_taints = match c.node_taints_policy.as_deref() {
            Some("Honor") => true,
            None | Some("Ignore") => false,
            Some(other) => {
                return Err(FieldError::new(
                    at("nodeTaintsPolicy"),
                    format!("unknown value {other:?} (expected Honor or Ignore)"),
                ))
            }
        };
        let Some(sel) = &c.label_selector else {
            continue;
        };
        let keys = c.match_label_keys.as_deref().unwrap_or_default();
        let selector = selectors::label_selector(sel, &at("labelSelector"), own_labels, keys)?;
        out.push(TopologySpread {
            topology_key: c.topology_key.clone(),
            max_skew: c.max_skew,
            min_domains: c.min_domains,
            hard,
            selector,
            honor_node_affinity,
            honor_node_taints,
        });
    }
    Ok(out)
}
