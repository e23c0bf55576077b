//! Disruption budgets: how many of a Provisioner's nodes voluntary disruption may take at once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Reasons a budget may be limited to. Budgets throttle only voluntary disruption, so
/// expiration and interruption are not among them.
pub const BUDGET_REASONS: &[&str] = &["Empty", "Drifted", "Underutilized"];

/// Most budgets one Provisioner may list (Karpenter's bound, kept so manifests port both ways).
pub const MAX_BUDGETS: usize = 50;

/// `spec.disruption`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Budgets; the most restrictive active one applies. Empty means the default (`10%`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<Budget>,
}

/// One budget: at most `nodes` disrupted at once, optionally only for some reasons and only in a
/// cron window of `duration` starting at each `schedule` tick (UTC).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// A count ("3") or a percentage of the Provisioner's nodes ("10%").
    #[serde(default = "default_budget_nodes")]
    pub nodes: String,
    /// Reasons this budget applies to; empty means all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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

/// A parsed `nodes` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetNodes {
    /// A fixed number of nodes.
    Count(u32),
    /// A percentage (0–100) of the Provisioner's nodes, rounded up.
    Percent(u8),
}

impl BudgetNodes {
    /// Parses "3" or "10%"; `None` when it is neither.
    pub fn parse(s: &str) -> Option<BudgetNodes> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let v: u8 = p.parse().ok()?;
            (v <= 100).then_some(BudgetNodes::Percent(v))
        } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse().ok().map(BudgetNodes::Count)
        } else {
            None
        }
    }

    /// How many of `total` nodes the budget allows to be disrupted at once. Percentages round
    /// up, so a non-zero percentage of a small Provisioner still lets one node move.
    pub fn allowed(self, total: u32) -> u32 {
        match self {
            BudgetNodes::Count(n) => n,
            BudgetNodes::Percent(p) => {
                let scaled = u64::from(total) * u64::from(p);
                u32::try_from(scaled.div_ceil(100)).unwrap_or(u32::MAX)
            }
        }
    }
}

/// True for a cron schedule joiner can read: five space-separated fields, or a macro.
pub fn is_valid_schedule(s: &str) -> bool {
    const MACROS: &[&str] = &[
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ];
    let s = s.trim();
    if MACROS.contains(&s) {
        return true;
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|f| {
            f.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '*' | ',' | '-' | '/' | '?'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_nodes() {
        assert_eq!(BudgetNodes::parse("10%"), Some(BudgetNodes::Percent(10)));
        assert_eq!(BudgetNodes::parse("3"), Some(BudgetNodes::Count(3)));
        for bad in ["", "%", "101%", "-1", "1.5", "ten"] {
            assert_eq!(BudgetNodes::parse(bad), None, "{bad}");
        }
        assert_eq!(BudgetNodes::Percent(10).allowed(19), 2);
        assert_eq!(BudgetNodes::Percent(0).allowed(19), 0);
        assert_eq!(BudgetNodes::Count(3).allowed(1), 3);
    }

    #[test]
    fn schedules() {
        assert!(is_valid_schedule("0 9 * * mon-fri"));
        assert!(is_valid_schedule("@daily"));
        assert!(!is_valid_schedule("0 9 * *"));
        assert!(!is_valid_schedule("every day"));
    }
}
