//! A Provisioner's disruption fields (TTLs, `consolidation`, `disruption.budgets`) checked and
//! turned into the planner's [`DisruptionSettings`], naming the field on error.

use joiner_core::disruption::cron::Schedule;
use joiner_core::disruption::{
    Budget, BudgetNodes, ConsolidationPolicy, DisruptionSettings, Reason,
};

use super::Check;
use crate::disruption::{self, MAX_BUDGETS};
use crate::duration;
use crate::provisioner::ProvisionerSpec;
use crate::ApiError;

/// Whether `spec.interruption.rebalance` is `Replace` (`Notify`, the default, otherwise).
pub(super) fn rebalance_replaces(check: &Check, spec: &ProvisionerSpec) -> Result<bool, ApiError> {
    match spec
        .interruption
        .as_ref()
        .and_then(|i| i.rebalance.as_deref())
    {
        None | Some("Notify") => Ok(false),
        Some("Replace") => Ok(true),
        Some(other) => Err(check.invalid(
            "spec.interruption.rebalance",
            format!("unknown action {other:?} (expected Notify or Replace)"),
        )),
    }
}

/// The settings of `spec`, or the first field that is wrong.
pub(super) fn disruption(
    check: &Check,
    spec: &ProvisionerSpec,
) -> Result<DisruptionSettings, ApiError> {
    let mut out = DisruptionSettings {
        empty_after: spec.ttl_seconds_after_empty,
        expire_after: spec.ttl_seconds_until_expired,
        ..DisruptionSettings::default()
    };
    if let Some(c) = &spec.consolidation {
        out.consolidation = c.enabled.unwrap_or(false);
        if let Some(p) = &c.policy {
            out.policy = ConsolidationPolicy::parse(p).ok_or_else(|| {
                check.invalid(
                    "spec.consolidation.policy",
                    format!(
                        "unknown policy {p:?} (expected one of {})",
                        ConsolidationPolicy::NAMES.join(", ")
                    ),
                )
            })?;
        }
        if let Some(score) = c.min_score {
            if !score.is_finite() || score < 0.0 {
                return Err(check.invalid(
                    "spec.consolidation.minScore",
                    format!("{score} is not a score (a number from 0 up)"),
                ));
            }
            out.min_score = Some(score);
        }
        if let Some(p) = &c.min_price_improvement {
            let percent = p
                .strip_suffix('%')
                .and_then(|n| n.parse::<u8>().ok())
                .filter(|n| *n <= 100)
                .ok_or_else(|| {
                    check.invalid(
                        "spec.consolidation.minPriceImprovement",
                        format!("invalid value {p:?} (expected a percentage such as \"10%\")"),
                    )
                })?;
            out.min_price_improvement = Some(f64::from(percent) / 100.0);
        }
        if let Some(after) = &c.consolidate_after {
            out.consolidate_after = if after == "Never" {
                i64::MAX
            } else {
                duration::parse_seconds(after)
                    .and_then(|s| i64::try_from(s).ok())
                    .ok_or_else(|| {
                        check.invalid(
                            "spec.consolidation.consolidateAfter",
                            format!("invalid duration {after:?} (expected e.g. 30s, 5m or Never)"),
                        )
                    })?
            };
        }
    }
    if let Some(d) = &spec.disruption {
        out.budgets = budgets(check, &d.budgets)?;
    }
    Ok(out)
}

fn budgets(check: &Check, list: &[disruption::Budget]) -> Result<Vec<Budget>, ApiError> {
    if list.len() > MAX_BUDGETS {
        return Err(check.invalid(
            "spec.disruption.budgets",
            format!("{} budgets, at most {MAX_BUDGETS} allowed", list.len()),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, b) in list.iter().enumerate() {
        let at = |leaf: &str| format!("spec.disruption.budgets[{i}].{leaf}");
        let nodes = BudgetNodes::parse(&b.nodes).ok_or_else(|| {
            check.invalid(
                at("nodes"),
                format!(
                    "invalid value {:?} (expected a count such as \"3\" or a percentage such as \"10%\")",
                    b.nodes
                ),
            )
        })?;
        let mut reasons = Vec::with_capacity(b.reasons.len());
        for (j, r) in b.reasons.iter().enumerate() {
            reasons.push(Reason::parse_budget_reason(r).ok_or_else(|| {
                check.invalid(
                    format!("spec.disruption.budgets[{i}].reasons[{j}]"),
                    format!("unknown reason {r:?} (expected Empty, Drifted or Underutilized)"),
                )
            })?);
        }
        let window = match (&b.schedule, &b.duration) {
            (Some(_), None) => {
                return Err(
                    check.invalid(at("duration"), crate::spec_rules::SCHEDULE_NEEDS_DURATION)
                )
            }
            (None, Some(_)) => {
                return Err(
                    check.invalid(at("schedule"), crate::spec_rules::DURATION_NEEDS_SCHEDULE)
                )
            }
            (Some(s), Some(d)) => {
                let schedule = Schedule::parse(s).map_err(|e| {
                    check.invalid(
                        at("schedule"),
                        format!("invalid cron schedule {s:?}: {}", e.why),
                    )
                })?;
                let seconds = duration::parse_seconds(d)
                    .and_then(|s| i64::try_from(s).ok())
                    .ok_or_else(|| {
                        check.invalid(
                            at("duration"),
                            format!("invalid duration {d:?} (expected e.g. 1h30m)"),
                        )
                    })?;
                Some((schedule, seconds))
            }
            (None, None) => None,
        };
        out.push(Budget {
            nodes,
            reasons,
            window,
        });
    }
    Ok(out)
}
