//! A Provisioner's disruption settings, as the planner reads them: which methods may act on its
//! nodes, how eagerly consolidation trades pod moves for savings, and how many nodes may be
//! disrupted at once.

use super::cron::Schedule;

/// Why a node is disrupted. Budgets name the voluntary ones (Empty, Drifted, Underutilized);
/// expiration is forceful and no budget holds it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// Only DaemonSet (or mirror) pods for `ttlSecondsAfterEmpty`, or an empty node that
    /// consolidation deletes.
    Empty,
    /// Older than `ttlSecondsUntilExpired`.
    Expired,
    /// No longer what its Provisioner or NodeTemplate would launch.
    Drifted,
    /// Its pods fit on other nodes, or on one cheaper node.
    Underutilized,
}

impl Reason {
    /// The name budgets and events use.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Expired => "Expired",
            Reason::Drifted => "Drifted",
            Reason::Underutilized => "Underutilized",
        }
    }

    /// Parses a budget reason (`Empty`, `Drifted`, `Underutilized`).
    pub fn parse_budget_reason(s: &str) -> Option<Reason> {
        match s {
            "Empty" => Some(Reason::Empty),
            "Drifted" => Some(Reason::Drifted),
            "Underutilized" => Some(Reason::Underutilized),
            _ => None,
        }
    }
}

/// How much disruption a consolidation move may cost for what it saves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConsolidationPolicy {
    /// Any move that saves at least the minimum price improvement.
    Aggressive,
    /// A move must save at least its share of the Provisioner's disruption: score ≥ 1.
    #[default]
    Balanced,
    /// A move must save twice its share of disruption: score ≥ 2.
    Conservative,
}

impl ConsolidationPolicy {
    /// Parses `Aggressive`, `Balanced` or `Conservative`.
    pub fn parse(s: &str) -> Option<ConsolidationPolicy> {
        match s {
            "Aggressive" => Some(ConsolidationPolicy::Aggressive),
            "Balanced" => Some(ConsolidationPolicy::Balanced),
            "Conservative" => Some(ConsolidationPolicy::Conservative),
            _ => None,
        }
    }

    /// The lowest score a move needs under this policy.
    pub fn min_score(self) -> f64 {
        match self {
            ConsolidationPolicy::Aggressive => 0.0,
            ConsolidationPolicy::Balanced => 1.0,
            ConsolidationPolicy::Conservative => 2.0,
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsolidationPolicy::Aggressive => "Aggressive",
            ConsolidationPolicy::Balanced => "Balanced",
            ConsolidationPolicy::Conservative => "Conservative",
        }
    }
}

/// A budget's `nodes`: a count or a percentage of the Provisioner's nodes.
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

/// One budget: at most `nodes` at once, for `reasons` (all when empty), while its window is
/// open (always when it has none).
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    /// How many nodes.
    pub nodes: BudgetNodes,
    /// The reasons it holds back; empty means every voluntary reason.
    pub reasons: Vec<Reason>,
    /// A cron schedule opening a window of `duration_secs` at each tick (UTC).
    pub window: Option<(Schedule, i64)>,
}

/// Everything the planner needs to know about one Provisioner's disruption.
#[derive(Clone, Debug, PartialEq)]
pub struct DisruptionSettings {
    /// `consolidation.enabled`.
    pub consolidation: bool,
    /// `consolidation.policy`.
    pub policy: ConsolidationPolicy,
    /// `consolidation.minScore`: overrides the policy's threshold.
    pub min_score: Option<f64>,
    /// `consolidation.minPriceImprovement` as a fraction (0.10 = a replacement must cost at
    /// most 90 % of what it replaces).
    pub min_price_improvement: f64,
    /// `consolidation.consolidateAfter` in seconds: a node younger than this (or whose pods
    /// changed more recently) is not yet a candidate.
    pub consolidate_after: i64,
    /// `ttlSecondsAfterEmpty`.
    pub empty_after: Option<i64>,
    /// `ttlSecondsUntilExpired`.
    pub expire_after: Option<i64>,
    /// `disruption.budgets`; empty means the default, 10 % for every reason.
    pub budgets: Vec<Budget>,
}

impl Default for DisruptionSettings {
    fn default() -> Self {
        DisruptionSettings {
            consolidation: false,
            policy: ConsolidationPolicy::default(),
            min_score: None,
            min_price_improvement: 0.10,
            consolidate_after: 30,
            empty_after: None,
            expire_after: None,
            budgets: Vec::new(),
        }
    }
}

impl DisruptionSettings {
    /// The score a consolidation move needs.
    pub fn score_threshold(&self) -> f64 {
        self.min_score.unwrap_or_else(|| self.policy.min_score())
    }
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
    fn policies_and_thresholds() {
        let mut s = DisruptionSettings::default();
        assert_eq!(s.score_threshold(), 1.0, "Balanced by default");
        s.policy = ConsolidationPolicy::parse("Conservative").expect("policy");
        assert_eq!(s.score_threshold(), 2.0);
        s.min_score = Some(0.5);
        assert_eq!(s.score_threshold(), 0.5, "an explicit score wins");
        assert_eq!(ConsolidationPolicy::parse("balanced"), None);
        assert_eq!(Reason::parse_budget_reason("Expired"), None, "not budgeted");
    }
}
