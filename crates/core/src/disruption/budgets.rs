//! Disruption budgets: how many of a Provisioner's nodes voluntary disruption may take now.
//!
//! As Karpenter reads them: the most restrictive budget that applies to the reason and whose
//! window is open wins; a Provisioner that lists no budgets has the default, 10 % for every
//! reason; one whose budgets are all closed (or for other reasons) is not held back. Nodes
//! already being disrupted count against the budget. Expiration is forceful and never held.

use super::settings::{BudgetNodes, DisruptionSettings, Reason};

/// How many more of a Provisioner's `total` nodes may be disrupted for `reason` at `now`
/// (unix seconds, UTC), with `disrupting` of them already on their way out.
pub fn allowed(
    settings: &DisruptionSettings,
    reason: Reason,
    total: u32,
    disrupting: u32,
    now: i64,
) -> u32 {
    if reason == Reason::Expired {
        return u32::MAX;
    }
    let limit = if settings.budgets.is_empty() {
        BudgetNodes::Percent(10).allowed(total)
    } else {
        settings
            .budgets
            .iter()
            .filter(|b| b.reasons.is_empty() || b.reasons.contains(&reason))
            .filter(|b| {
                b.window
                    .as_ref()
                    .is_none_or(|(schedule, secs)| schedule.window_open(now, *secs))
            })
            .map(|b| b.nodes.allowed(total))
            .min()
            .unwrap_or(u32::MAX)
    };
    limit.saturating_sub(disrupting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::cron::Schedule;
    use crate::disruption::settings::Budget;

    /// 2026-12-07 (a Monday) 09:00:00 UTC.
    const MON_9AM: i64 = 1_796_634_000;

    fn budget(nodes: &str, reasons: &[Reason], window: Option<(&str, i64)>) -> Budget {
        Budget {
            nodes: BudgetNodes::parse(nodes).expect("nodes"),
            reasons: reasons.to_vec(),
            window: window.map(|(s, d)| (Schedule::parse(s).expect("schedule"), d)),
        }
    }

    fn with(budgets: Vec<Budget>) -> DisruptionSettings {
        DisruptionSettings {
            budgets,
            ..DisruptionSettings::default()
        }
    }

    #[test]
    fn the_default_is_ten_percent_rounded_up_less_what_is_under_way() {
        let s = DisruptionSettings::default();
        assert_eq!(allowed(&s, Reason::Underutilized, 20, 0, MON_9AM), 2);
        assert_eq!(allowed(&s, Reason::Underutilized, 20, 1, MON_9AM), 1);
        assert_eq!(
            allowed(&s, Reason::Empty, 3, 0, MON_9AM),
            1,
            "10 % of 3 is 1"
        );
        assert_eq!(allowed(&s, Reason::Drifted, 20, 5, MON_9AM), 0);
    }

    #[test]
    fn a_budget_of_one_node_and_reasons() {
        let s = with(vec![
            budget("1", &[], None),
            budget("0", &[Reason::Drifted], None),
        ]);
        assert_eq!(allowed(&s, Reason::Underutilized, 50, 0, MON_9AM), 1);
        assert_eq!(allowed(&s, Reason::Drifted, 50, 0, MON_9AM), 0);
        assert_eq!(
            allowed(&s, Reason::Expired, 50, 10, MON_9AM),
            u32::MAX,
            "expiration is never held back"
        );
    }

    #[test]
    fn a_cron_window_holds_only_while_it_is_open() {
        // No consolidation during business hours (09:00–17:00 on weekdays).
        let s = with(vec![budget(
            "0",
            &[Reason::Underutilized],
            Some(("0 9 * * mon-fri", 8 * 3_600)),
        )]);
        assert_eq!(allowed(&s, Reason::Underutilized, 10, 0, MON_9AM + 60), 0);
        assert_eq!(
            allowed(&s, Reason::Underutilized, 10, 0, MON_9AM + 8 * 3_600),
            u32::MAX,
            "closed at 17:00: no budget holds"
        );
        assert_eq!(
            allowed(&s, Reason::Empty, 10, 0, MON_9AM + 60),
            u32::MAX,
            "other reasons are not held by it"
        );
    }
}
