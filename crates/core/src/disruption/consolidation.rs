//! Consolidation of a set of candidate nodes: simulate their pods on the rest of the cluster
//! and decide whether the move is taken — deleted (the pods fit on other nodes) or replaced
//! by cheaper nodes — or why not.
//!
//! A move is taken when every moved pod has a place; its replacements are the cheapest way to
//! hold the pods that need one (one node when one node holds them, several only when that is
//! cheaper: [`trial::run_together`]); together they are strictly cheaper than what they
//! replace (or by `minPriceImprovement`, when set); a spot node is replaced by spot only with
//! at least [`MIN_SPOT_OPTIONS`] cheaper spot types to choose from, and then only the 15
//! cheapest are offered (fewer would race to the cheapest pool, Karpenter's rule); and, under
//! a policy with a score gate (Balanced, Conservative, `minScore`), the move's score passes it.
//!
//! The score weighs what a move saves against what it disrupts, each as a share of the
//! Provisioner's whole: (savings ÷ the Provisioner's $/h) ÷ (the move's disruption cost ÷ the
//! Provisioner's). A score of 1 saves exactly its share of the disruption it causes; deleting
//! an empty node scores high, churning many pods for cents scores low. Karpenter's Balanced
//! takes a move at 0.5.

use crate::instance_type::{CapacityType, InstanceType};
use crate::scheduling::{NewNode, Options, Plan};
use crate::snapshot::Snapshot;

use super::candidates::Candidate;
use super::trial;
use super::{DisruptionSettings, PriceBound};

/// Fewest cheaper spot types a spot-to-spot replacement needs.
pub const MIN_SPOT_OPTIONS: usize = 15;

/// What a move would do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The pods fit on the other nodes.
    Delete,
    /// The pods need new nodes, together cheaper than what they replace: one when one holds
    /// them, several only when that is cheaper.
    Replace(Vec<NewNode>),
}

/// A move that passes every check.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    /// Delete or replace.
    pub action: Action,
    /// $/h of the nodes removed.
    pub price_before: f64,
    /// $/h of the replacement (0 for a delete).
    pub price_after: f64,
    /// Savings share over disruption share.
    pub score: f64,
    /// The simulation of the cluster without the nodes: where every moved pod goes.
    pub plan: Plan,
}

/// The Provisioner-wide sums a score is relative to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Totals {
    /// $/h of the Provisioner's nodes.
    pub price: f64,
    /// Disruption cost of all its nodes.
    pub cost: f64,
}

/// Evaluates removing `nodes` (candidates of one Provisioner, or of several: the strictest
/// settings apply) from `snapshot`.
pub fn evaluate(
    snapshot: &mut Snapshot,
    catalog: &[InstanceType],
    opts: &Options,
    nodes: &[&Candidate],
    settings: &DisruptionSettings,
    totals: Totals,
) -> Result<Move, String> {
    if let Some(c) = nodes
        .iter()
        .find(|c| snapshot.nodes[c.node].life.do_not_consolidate)
    {
        return Err(format!(
            "node {} is annotated karpenter.sh/do-not-consolidate",
            snapshot.nodes[c.node].name
        ));
    }
    let removed: Vec<usize> = nodes.iter().map(|c| c.node).collect();
    let split = trial::run(snapshot, catalog, opts, &removed)?;
    let price_before: f64 = nodes.iter().map(|c| c.price).sum();
    let action_of = |o: &trial::Outcome| -> Result<Action, String> {
        Ok(match o.replacements.as_slice() {
            [] => Action::Delete,
            new => Action::Replace(replacements(
                new,
                o.price_after,
                nodes,
                price_before,
                settings,
            )?),
        })
    };
    // The packer may split the pods over several new nodes where one node of the same
    // family holds them for the same price: the cheaper wins, one node on a tie, and the
    // split when one node fails the price rules. A move of several nodes is replaced by one
    // node at most, as Karpenter's multi-node consolidation is: re-packing a hundred nodes
    // onto ninety-eight new ones saves a little and spends the whole budget on churn, where
    // one-node moves save more per node disrupted.
    let several = nodes.len() > 1;
    let one = (split.replacements.len() > 1)
        .then(|| trial::run_together(snapshot, catalog, opts, &removed, &split).ok())
        .flatten()
        .filter(|one| several || one.price_after <= split.price_after + 1e-9);
    let (outcome, action) = match one {
        Some(one) => match action_of(&one) {
            Ok(action) => (one, action),
            Err(why) if several => return Err(why),
            Err(_) => {
                let action = action_of(&split)?;
                (split, action)
            }
        },
        None if several && split.replacements.len() > 1 => {
            return Err(format!(
                "their pods need {} new nodes and no one node holds them: several nodes are replaced by one node at most",
                split.replacements.len()
            ))
        }
        None => {
            let action = action_of(&split)?;
            (split, action)
        }
    };
    let price_after = outcome.price_after;
    let cost: f64 = nodes.iter().map(|c| c.disruption).sum();
    let score = score(price_before - price_after, cost, totals);
    if price_after >= price_before {
        return Err(format!(
            "it saves nothing (${price_after:.4}/h after, ${price_before:.4}/h before)"
        ));
    }
    if let Some(threshold) = settings.score_threshold() {
        if score < threshold || score <= 0.0 {
            return Err(format!(
                "its score {score:.2} is below the {} threshold {threshold:.2} (saves ${:.4}/h for {cost:.1} of disruption)",
                settings.threshold_name(),
                price_before - price_after
            ));
        }
    }
    Ok(Move {
        action,
        price_before,
        price_after,
        score,
        plan: outcome.plan,
    })
}

/// Savings share over disruption share (infinite when nothing is disrupted).
pub fn score(savings: f64, cost: f64, totals: Totals) -> f64 {
    if totals.price <= 0.0 {
        return 0.0;
    }
    let saved = savings / totals.price;
    if cost <= 0.0 || totals.cost <= 0.0 {
        return if saved > 0.0 { f64::INFINITY } else { 0.0 };
    }
    saved / (cost / totals.cost)
}

/// The replacements with only the options cheap enough to launch (a dearer option the cloud
/// might pick would undo the saving), or why there are none: together they must pass the
/// price bound, and so must the dearest options kept on each.
fn replacements(
    new: &[NewNode],
    price_after: f64,
    nodes: &[&Candidate],
    price_before: f64,
    settings: &DisruptionSettings,
) -> Result<Vec<NewNode>, String> {
    let bound = settings.price_bound(price_before);
    if !bound.allows(price_after) {
        let types: Vec<String> = new
            .iter()
            .map(|n| format!("{} {}", n.instance_type, n.capacity_type))
            .collect();
        return Err(format!(
            "{} ({}, ${price_after:.4}/h) {} not {} than ${price_before:.4}/h",
            if new.len() == 1 {
                "a replacement"
            } else {
                "the replacements"
            },
            types.join(", "),
            if new.len() == 1 { "is" } else { "are" },
            settings.improvement_words()
        ));
    }
    // The slack under the bound is shared in proportion to each node's chosen price, so
    // the dearest options kept on every node still sum within the bound (EC2 may launch
    // any option listed, not the cheapest).
    let slack = (bound.most - price_after).max(0.0);
    let count = new.len() as f64;
    new.iter()
        .map(|n| {
            let share = if price_after > 0.0 {
                n.price_per_hour / price_after
            } else {
                1.0 / count
            };
            let own = PriceBound {
                most: n.price_per_hour + slack * share,
                ..bound
            };
            replacement(n, own, nodes)
        })
        .collect()
}

/// One replacement with only the options `bound` allows.
fn replacement(new: &NewNode, bound: PriceBound, nodes: &[&Candidate]) -> Result<NewNode, String> {
    if nodes.len() > 1 {
        // Replacing several nodes by one of a type some of them already run, no cheaper,
        // only moves that node's pods for nothing: removing the others is the better move
        // (Karpenter's filterOutSameInstanceType).
        if let Some(same) = nodes
            .iter()
            .find(|c| c.instance_type == new.instance_type && c.price <= new.price_per_hour)
        {
            return Err(format!(
                "the replacement would be a {} like one of the nodes (${:.4}/h): removing the others alone is the better move",
                same.instance_type, same.price
            ));
        }
    }
    let all_spot = nodes.iter().all(|c| c.capacity_type == CapacityType::Spot);
    let mut allowed: Vec<(String, f64)> = new
        .priced_options()
        .into_iter()
        .filter(|(_, p)| bound.allows(*p))
        .collect();
    if all_spot && new.capacity_type == CapacityType::Spot {
        if allowed.len() < MIN_SPOT_OPTIONS {
            return Err(format!(
                "a spot replacement needs {MIN_SPOT_OPTIONS} cheaper spot types to choose from; {} are allowed",
                allowed.len()
            ));
        }
        // The 15 cheapest only (Karpenter's rule): EC2's price-capacity-optimized choice
        // among them can never be a type that is itself worth consolidating again.
        allowed.truncate(MIN_SPOT_OPTIONS);
    }
    let allowed: std::collections::HashSet<&str> =
        allowed.iter().map(|(n, _)| n.as_str()).collect();
    // In the packer's order, as the launcher reads them.
    let (names, prices): (Vec<String>, Vec<Option<f64>>) = new
        .instance_type_options
        .iter()
        .zip(new.option_prices.iter())
        .filter(|(n, _)| allowed.contains(n.as_str()))
        .map(|(n, p)| (n.clone(), *p))
        .unzip();
    Ok(NewNode {
        instance_type_options: names.into(),
        option_prices: prices.into(),
        ..new.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::candidates::candidates;
    use crate::disruption::fixtures::*;
    use crate::disruption::ConsolidationPolicy;
    use crate::labels;
    use crate::pod::Pod;
    use crate::requirements::Requirement;
    use crate::testing::catalog::catalog;

    /// Evaluates removing the node named `name`.
    fn remove(s: &Snapshot, name: &str, settings: &DisruptionSettings) -> Result<Move, String> {
        let mut work = s.clone();
        let settings_of = |_: &str| Some(settings.clone());
        let all: Vec<Candidate> = candidates(s, &catalog(), &settings_of, 100)
            .into_iter()
            .map(|c| c.expect("candidate"))
            .collect();
        let totals = Totals {
            price: all.iter().map(|c| c.price).sum(),
            cost: all.iter().map(|c| c.disruption).sum(),
        };
        let this = all
            .iter()
            .find(|c| s.nodes[c.node].name == name)
            .expect("node");
        let before = format!("{work:?}");
        let out = evaluate(
            &mut work,
            &catalog(),
            &Options::default(),
            &[this],
            settings,
            totals,
        );
        assert_eq!(format!("{work:?}"), before, "the trial is undone");
        out
    }

    #[test]
    fn a_node_whose_pods_fit_on_the_others_is_deleted() {
        let s = cluster(
            vec![
                node("a", "m5.xlarge", "on-demand"),
                node("b", "m5.xlarge", "on-demand"),
            ],
            vec![pod("web-1", "a", 1000), pod("web-2", "b", 1000)],
        );
        let m = remove(&s, "b", &aggressive()).expect("taken");
        assert_eq!(m.action, Action::Delete);
        assert_eq!(m.price_before, 0.192);
        assert_eq!(m.price_after, 0.0);
    }

    /// An m5.4xlarge holding one 500m pod.
    fn oversized() -> Snapshot {
        cluster(
            vec![node("big", "m5.4xlarge", "on-demand")],
            vec![pod("web", "big", 500)],
        )
    }

    /// The replacement of a move that must be one, by one node.
    fn replacement_of(m: &Move) -> &NewNode {
        match &m.action {
            Action::Replace(new) if new.len() == 1 => &new[0],
            other => panic!("not a replacement by one node: {other:?}"),
        }
    }

    #[test]
    fn an_oversized_node_is_replaced_by_a_cheaper_one() {
        let m = remove(&oversized(), "big", &aggressive()).expect("taken");
        let new = replacement_of(&m);
        assert_eq!(new.instance_type, "c5.large");
        assert!(m.price_after < m.price_before * 0.9);
    }

    #[test]
    fn a_replacement_not_cheaper_by_the_minimum_is_refused() {
        // m5.large → c5.large saves 11.5 %: enough by default (strictly cheaper) and for 10 %,
        // not for 20 %.
        let s = cluster(
            vec![node("a", "m5.large", "on-demand")],
            vec![pod("web", "a", 1500)],
        );
        assert!(remove(&s, "a", &aggressive()).is_ok());
        let ten = DisruptionSettings {
            min_price_improvement: Some(0.10),
            ..aggressive()
        };
        assert!(remove(&s, "a", &ten).is_ok());
        let strict = DisruptionSettings {
            min_price_improvement: Some(0.20),
            ..aggressive()
        };
        let e = remove(&s, "a", &strict).expect_err("refused");
        assert_eq!(
            e,
            "a replacement (c5.large on-demand, $0.0850/h) is not 20% cheaper than $0.0960/h"
        );
    }

    #[test]
    fn spot_is_replaced_by_spot_only_with_fifteen_cheaper_types() {
        let s = spot_cluster(
            vec![node("a", "m5.xlarge", "spot")],
            vec![pod("web", "a", 500)],
        );
        let e = remove(&s, "a", &aggressive()).expect_err("refused");
        assert!(
            e.starts_with("a spot replacement needs 15 cheaper spot types to choose from;"),
            "{e}"
        );
    }

    #[test]
    fn spot_to_spot_carries_only_the_fifteen_cheapest_types() {
        // A spot m5.24xlarge for one small pod: 17 types of the test catalog are cheaper.
        let s = spot_cluster(
            vec![node("a", "m5.24xlarge", "spot")],
            vec![pod("web", "a", 500)],
        );
        let m = remove(&s, "a", &aggressive()).expect("taken");
        let new = replacement_of(&m);
        assert_eq!(new.capacity_type, CapacityType::Spot);
        let kept = new.priced_options();
        assert_eq!(kept.len(), MIN_SPOT_OPTIONS, "{kept:?}");
        let dearest_kept = kept.last().map(|(_, p)| *p).expect("options");
        // Every spot type cheaper than the node that is left out costs more than every type
        // kept (GPU types aside: the packer never offers them for pods that ask for none).
        let cheaper: Vec<(String, f64)> = crate::testing::catalog::catalog()
            .iter()
            .filter(|t| {
                !t.labels
                    .contains_key(crate::testing::catalog::INSTANCE_GPU_NAME)
            })
            .filter_map(|t| {
                t.offerings
                    .iter()
                    .filter(|o| o.capacity_type == CapacityType::Spot)
                    .map(|o| o.price)
                    .reduce(f64::min)
                    .map(|p| (t.name.clone(), p))
            })
            .filter(|(_, p)| *p < m.price_before)
            .collect();
        assert!(cheaper.len() > MIN_SPOT_OPTIONS, "{cheaper:?}");
        for (name, price) in &cheaper {
            if !kept.iter().any(|(k, _)| k == name) {
                assert!(
                    *price >= dearest_kept,
                    "{name} at {price} left out: {kept:?}"
                );
            }
        }
    }

    #[test]
    fn a_replacement_lists_only_options_cheap_enough() {
        let m = remove(&oversized(), "big", &aggressive()).expect("taken");
        let new = replacement_of(&m);
        let bound = m.price_before;
        assert!(!new.instance_type_options.is_empty());
        for (name, price) in new.priced_options() {
            assert!(price < bound, "{name} at {price} not under {bound}");
        }
        assert!(!new.instance_type_options.iter().any(|n| n == "m5.4xlarge"));
    }

    #[test]
    fn a_node_annotated_do_not_consolidate_stays() {
        let mut b = node("b", "m5.xlarge", "on-demand");
        b.life.do_not_consolidate = true;
        let s = cluster(
            vec![node("a", "m5.xlarge", "on-demand"), b],
            vec![pod("web-1", "a", 1000), pod("web-2", "b", 1000)],
        );
        let e = remove(&s, "b", &aggressive()).expect_err("kept");
        assert_eq!(e, "node b is annotated karpenter.sh/do-not-consolidate");
    }

    #[test]
    fn pods_with_no_other_place_keep_their_node() {
        let mut pinned = pod("db", "a", 500);
        let mut r = crate::requirements::Requirements::new();
        r.add(labels::HOSTNAME, Requirement::single("a"));
        pinned.node_terms = vec![r];
        let s = cluster(vec![node("a", "m5.large", "on-demand")], vec![pinned]);
        let e = remove(&s, "a", &aggressive()).expect_err("refused");
        assert!(
            e.starts_with("pod default/db would not fit elsewhere:"),
            "{e}"
        );
    }

    #[test]
    fn a_move_that_saves_less_than_its_share_of_disruption_waits_under_balanced() {
        // Two m5.large nodes: `a` holds ten high-priority pods that a c5.large would take
        // (11.5 % cheaper), `b` one pod. Replacing `a` saves 6 % of the Provisioner's $/h for
        // most of its disruption: Aggressive takes it, Balanced does not.
        let mut pods: Vec<Pod> = (0..10)
            .map(|i| {
                let mut p = pod(&format!("api-{i}"), "a", 150);
                p.requests.memory = 128 << 20;
                p.priority = 1_000_000;
                p
            })
            .collect();
        pods.push(pod("web", "b", 1500));
        let s = cluster(
            vec![
                node("a", "m5.large", "on-demand"),
                node("b", "m5.large", "on-demand"),
            ],
            pods,
        );
        assert!(remove(&s, "a", &aggressive()).is_ok());
        let balanced = DisruptionSettings {
            policy: ConsolidationPolicy::Balanced,
            ..aggressive()
        };
        let e = remove(&s, "a", &balanced).expect_err("refused");
        assert!(e.starts_with("its score 0."), "{e}");
        assert!(e.contains("below the Balanced threshold 0.50"), "{e}");
    }
}
