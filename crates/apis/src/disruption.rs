//! Disruption budgets: how many of a Provisioner's nodes voluntary disruption may take at once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most budgets one Provisioner may list (Karpenter's bound, kept so manifests port both ways).
pub const MAX_BUDGETS: usize = 50;

/// `spec.disruption`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Budgets; the most restrictive active one applies. Empty means the default (`10%`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_BUDGETS))]
    pub budgets: Vec<Budget>,
}

/// One budget: at most `nodes` disrupted at once, optionally only for some reasons and only in a
/// cron window of `duration` starting at each `schedule` tick (UTC).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::spec_rules::budget_rules()))]
pub struct Budget {
    /// A count ("3") or a percentage of the Provisioner's nodes ("10%").
    #[serde(default = "default_budget_nodes")]
    #[schemars(regex(pattern = crate::spec_rules::BUDGET_NODES_PATTERN))]
    pub nodes: String,
    /// Reasons this budget applies to; empty means all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = crate::spec_rules::BUDGET_REASON_PATTERN)))]
    pub reasons: Vec<String>,
    /// Cron schedule (five fields or an `@daily`-style macro) at which the window opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// Window length as a Go duration ("1h30m"); set together with `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            nodes: default_budget_nodes(),
            reasons: Vec::new(),
            schedule: None,
            duration: None,
        }
    }
}

fn default_budget_nodes() -> String {
    "10%".to_string()
}

pub use joiner_core::disruption::BudgetNodes;
