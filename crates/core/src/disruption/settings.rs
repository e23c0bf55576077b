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

    /// Parses any reason's name ([`Reason::as_str`]).
    pub fn parse(s: &str) -> Option<Reason> {
        match s {
            "Expired" => Some(Reason::Expired),
            other => Reason::parse_budget_reason(other),
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
///
/// The default is Karpenter's default (`WhenEmptyOrUnderutilized`): every move that saves
/// anything. `Balanced` is Karpenter's Balanced rule (a move's savings share must be at least
/// half its disruption share); `Conservative` is joiner's stricter step (at least its whole
/// share). `minScore` and `minPriceImprovement` are opt-in knobs on top of any of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConsolidationPolicy {
    /// Karpenter's default: delete a node whose pods fit elsewhere, replace nodes by a
    /// strictly cheaper one; no score gate.
    #[default]
    WhenEmptyOrUnderutilized,
    /// The same moves as `WhenEmptyOrUnderutilized` (joiner's older name for it).
    Aggressive,
    /// Karpenter's Balanced: score ≥ 0.5 (k = 2), the savings share at least half the
    /// disruption share.
    Balanced,
    /// A move must save at least its whole share of disruption: score ≥ 1.
    Conservative,
}

/// Karpenter's Balanced threshold: 1/k with its fixed k = 2.
pub const BALANCED_SCORE: f64 = 0.5;
/// Conservative's threshold: 1/k with k = 1.
pub const CONSERVATIVE_SCORE: f64 = 1.0;

impl ConsolidationPolicy {
    /// Every policy's name, as the API spells it.
    pub const NAMES: [&'static str; 4] = [
        "WhenEmptyOrUnderutilized",
        "Aggressive",
        "Balanced",
        "Conservative",
    ];

    /// Parses one of [`ConsolidationPolicy::NAMES`].
    pub fn parse(s: &str) -> Option<ConsolidationPolicy> {
        match s {
            "WhenEmptyOrUnderutilized" => Some(ConsolidationPolicy::WhenEmptyOrUnderutilized),
            "Aggressive" => Some(ConsolidationPolicy::Aggressive),
            "Balanced" => Some(ConsolidationPolicy::Balanced),
            "Conservative" => Some(ConsolidationPolicy::Conservative),
            _ => None,
        }
    }

    /// The lowest score a move needs under this policy; `None`: no score gate (any saving).
    pub fn min_score(self) -> Option<f64> {
        match self {
            ConsolidationPolicy::WhenEmptyOrUnderutilized | ConsolidationPolicy::Aggressive => None,
            ConsolidationPolicy::Balanced => Some(BALANCED_SCORE),
            ConsolidationPolicy::Conservative => Some(CONSERVATIVE_SCORE),
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsolidationPolicy::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
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
    /// most 90 % of what it replaces); `None`, the default: strictly cheaper, as Karpenter.
    pub min_price_improvement: Option<f64>,
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
            min_price_improvement: None,
            consolidate_after: 30,
            empty_after: None,
            expire_after: None,
            budgets: Vec::new(),
        }
    }
}

impl DisruptionSettings {
    /// The score a consolidation move needs; `None`: any move that saves.
    pub fn score_threshold(&self) -> Option<f64> {
        self.min_score.or(self.policy.min_score())
    }

    /// The most a replacement may cost for nodes costing `price_before` ($/h), and whether
    /// that bound is inclusive: at most (1 − `minPriceImprovement`) of it when set, strictly
    /// less than it otherwise.
    pub fn price_bound(&self, price_before: f64) -> PriceBound {
        match self.min_price_improvement {
            Some(f) => PriceBound {
                most: price_before * (1.0 - f),
                inclusive: true,
            },
            None => PriceBound {
                most: price_before,
                inclusive: false,
            },
        }
    }

    /// The name of the threshold a refused move failed: `minScore` when set, else the policy.
    pub fn threshold_name(&self) -> &'static str {
        if self.min_score.is_some() {
            "minScore"
        } else {
            self.policy.as_str()
        }
    }

    /// How the improvement a replacement needs reads in a reason.
    pub fn improvement_words(&self) -> String {
        match self.min_price_improvement {
            Some(f) => format!("{:.0}% cheaper", f * 100.0),
            None => "cheaper".to_string(),
        }
    }
}

/// The most a replacement may cost: see [`DisruptionSettings::price_bound`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PriceBound {
    /// $/h.
    pub most: f64,
    /// True: `most` itself passes; false: only prices strictly below it.
    pub inclusive: bool,
}

impl PriceBound {
    /// Whether `price` passes.
    pub fn allows(self, price: f64) -> bool {
        if self.inclusive {
            price <= self.most
        } else {
            price < self.most
        }
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
        assert_eq!(s.policy, ConsolidationPolicy::WhenEmptyOrUnderutilized);
        assert_eq!(
            s.score_threshold(),
            None,
            "Karpenter's default: no score gate"
        );
        assert!(s.price_bound(1.0).allows(0.99) && !s.price_bound(1.0).allows(1.0));
        s.policy = ConsolidationPolicy::parse("Balanced").expect("policy");
        assert_eq!(
            s.score_threshold(),
            Some(0.5),
            "Karpenter's Balanced, k = 2"
        );
        s.policy = ConsolidationPolicy::parse("Conservative").expect("policy");
        assert_eq!(s.score_threshold(), Some(1.0));
        s.min_score = Some(0.25);
        assert_eq!(s.score_threshold(), Some(0.25), "an explicit score wins");
        s.min_price_improvement = Some(0.10);
        assert!(s.price_bound(1.0).allows(0.89) && !s.price_bound(1.0).allows(0.91));
        assert_eq!(ConsolidationPolicy::parse("balanced"), None);
        for name in ConsolidationPolicy::NAMES {
            let p = ConsolidationPolicy::parse(name).expect("every name parses");
            assert_eq!(p.as_str(), name);
        }
        assert_eq!(Reason::parse_budget_reason("Expired"), None, "not budgeted");
    }
}
