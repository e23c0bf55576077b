//! Rendering a plan for people (`-o table`) and for programs (`-o json`).

use joiner_core::scheduling::explain::Explanation;
use joiner_core::scheduling::Plan;
use serde::Serialize;
use std::collections::BTreeMap;

/// What `joiner plan` reports: the plan plus the context needed to read it.
pub struct Report<'a> {
    /// Region whose catalog was used.
    pub region: &'a str,
    /// The simulation's outcome.
    pub plan: &'a Plan,
    /// Notes for the reader (estimated prices, skipped documents).
    pub warnings: &'a [String],
    /// Explanations asked for with `--explain`.
    pub explanations: &'a [Explanation],
    /// What the warm pools would serve.
    pub warm: &'a crate::warm_pools::Overlay,
    /// Per new node of the plan (same order), what its NodeClaim would say.
    pub claims: &'a [Option<crate::claim_view::ClaimView>],
}

#[derive(Serialize)]
struct JsonReport<'a> {
    region: &'a str,
    new_nodes: Vec<JsonNode<'a>>,
    existing_nodes: Vec<JsonExisting<'a>>,
    unschedulable: Vec<JsonUnschedulable<'a>>,
    relaxed: Vec<JsonRelaxed<'a>>,
    new_price_per_hour: f64,
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    explanations: Vec<JsonExplanation<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warm_pools: Vec<JsonPool<'a>>,
}

#[derive(Serialize)]
struct JsonPool<'a> {
    provisioner: &'a str,
    members: Vec<JsonMember<'a>>,
    from_spec: bool,
    idle_cost_per_hour: f64,
    serves: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonMember<'a> {
    instance_type: &'a str,
    zone: &'a str,
    price_per_hour: f64,
}

#[derive(Serialize)]
struct JsonExplanation<'a> {
    pod: &'a str,
    requests: &'a str,
    pinned: Option<&'a str>,
    node_rules: &'a [String],
    provisioners: Vec<JsonFilter<'a>>,
    relaxed: &'a [String],
    placement: String,
    event: String,
}

#[derive(Serialize)]
struct JsonFilter<'a> {
    name: &'a str,
    weight: i32,
    instance_types: usize,
    excluded: Vec<JsonExcluded<'a>>,
    left: usize,
}

#[derive(Serialize)]
struct JsonExcluded<'a> {
    by: &'a str,
    instance_types: usize,
}

#[derive(Serialize)]
struct JsonNode<'a> {
    name: &'a str,
    provisioner: &'a str,
    instance_type: &'a str,
    zone: &'a str,
    capacity_type: &'a str,
    price_per_hour: f64,
    price_estimated: bool,
    instance_type_options: &'a [String],
    pods: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    warm_pool_member: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_claim: Option<&'a crate::claim_view::ClaimView>,
}

#[derive(Serialize)]
struct JsonExisting<'a> {
    name: &'a str,
    pods: &'a [String],
}

#[derive(Serialize)]
struct JsonUnschedulable<'a> {
    pod: &'a str,
    reason: &'a str,
}

#[derive(Serialize)]
struct JsonRelaxed<'a> {
    pod: &'a str,
    preferences: &'a [String],
}

/// Prices are sums of floats; six decimals keep the output stable and exact enough for $/h.
pub fn round_price(p: f64) -> f64 {
    (p * 1e6).round() / 1e6
}

/// The JSON document of a report, pretty-printed.
pub fn json(report: &Report<'_>) -> String {
    let doc = JsonReport {
        region: report.region,
        new_nodes: report
            .plan
            .new_nodes
            .iter()
            .enumerate()
            .map(|(i, n)| JsonNode {
                name: &n.name,
                provisioner: &n.provisioner,
                instance_type: &n.instance_type,
                zone: &n.zone,
                capacity_type: n.capacity_type.as_str(),
                price_per_hour: round_price(n.price_per_hour),
                price_estimated: n.price_estimated,
                instance_type_options: &n.instance_type_options,
                pods: &n.pods,
                warm_pool_member: report.warm.served.get(&n.name).map(String::as_str),
                node_claim: report.claims.get(i).and_then(Option::as_ref),
            })
            .collect(),
        existing_nodes: report
            .plan
            .existing_nodes
            .iter()
            .map(|e| JsonExisting {
                name: &e.name,
                pods: &e.pods,
            })
            .collect(),
        unschedulable: report
            .plan
            .unschedulable
            .iter()
            .map(|u| JsonUnschedulable {
                pod: &u.pod,
                reason: &u.reason,
            })
            .collect(),
        relaxed: report
            .plan
            .relaxed
            .iter()
            .map(|r| JsonRelaxed {
                pod: &r.pod,
                preferences: &r.preferences,
            })
            .collect(),
        new_price_per_hour: round_price(report.plan.new_price_per_hour()),
        warnings: report.warnings,
        explanations: report
            .explanations
            .iter()
            .map(|e| JsonExplanation {
                pod: &e.pod,
                requests: &e.requests,
                pinned: e.pinned.as_deref(),
                node_rules: &e.node_rules,
                provisioners: e
                    .provisioners
                    .iter()
                    .map(|p| JsonFilter {
                        name: &p.name,
                        weight: p.weight,
                        instance_types: p.catalog,
                        excluded: p
                            .excluded
                            .iter()
                            .map(|(by, n)| JsonExcluded {
                                by,
                                instance_types: *n,
                            })
                            .collect(),
                        left: p.left,
                    })
                    .collect(),
                relaxed: &e.relaxed,
                placement: e.placement.to_string(),
                event: e.event_message(),
            })
            .collect(),
        warm_pools: report
            .warm
            .pools
            .iter()
            .map(|p| JsonPool {
                provisioner: &p.provisioner,
                members: p
                    .members
                    .iter()
                    .map(|(t, z, price)| JsonMember {
                        instance_type: t,
                        zone: z,
                        price_per_hour: round_price(*price),
                    })
                    .collect(),
                from_spec: p.from_spec,
                idle_cost_per_hour: round_price(p.idle_cost_per_hour),
                serves: served_by(report, &p.provisioner),
                note: p.note.as_deref(),
            })
            .collect(),
    };
    // Serializing plain structs of strings and numbers cannot fail; keep a readable fallback.
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// How many of the plan's new nodes `provisioner`'s pool would serve.
fn served_by(report: &Report<'_>, provisioner: &str) -> usize {
    report
        .plan
        .new_nodes
        .iter()
        .filter(|n| n.provisioner == provisioner && report.warm.served.contains_key(&n.name))
        .count()
}

/// Pads columns to the widest cell.
pub fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The human table: new nodes, existing nodes used, unschedulable pods, totals. `wide` adds
/// each new node's NodeClaim (labels, requirements, taints, startup taints, allocatable) in
/// columns, what `-o json` gives as `node_claim`.
pub fn table(report: &Report<'_>, wide: bool) -> String {
    let plan = report.plan;
    let mut out = String::new();
    if plan.new_nodes.is_empty() {
        out.push_str("No new nodes.\n");
    } else {
        let mut rows = vec![vec![
            "NEW NODE".to_string(),
            "PROVISIONER".into(),
            "INSTANCE TYPE".into(),
            "ZONE".into(),
            "CAPACITY".into(),
            "$/HOUR".into(),
            "PODS".into(),
        ]];
        let pools = !report.warm.pools.is_empty();
        if pools {
            rows[0].push("WARM POOL MEMBER".into());
        }
        if wide {
            rows[0].extend(
                [
                    "LABELS",
                    "REQUIREMENTS",
                    "TAINTS",
                    "STARTUP TAINTS",
                    "ALLOCATABLE",
                ]
                .map(String::from),
            );
        }
        for (i, n) in plan.new_nodes.iter().enumerate() {
            let mut row = vec![
                n.name.clone(),
                n.provisioner.clone(),
                n.instance_type.clone(),
                n.zone.clone(),
                n.capacity_type.as_str().to_string(),
                format!(
                    "{:.4}{}",
                    n.price_per_hour,
                    if n.price_estimated { "*" } else { "" }
                ),
                n.pods.len().to_string(),
            ];
            if pools {
                row.push(report.warm.served.get(&n.name).cloned().unwrap_or_default());
            }
            if wide {
                match report.claims.get(i).and_then(Option::as_ref) {
                    Some(claim) => row.extend(claim.cells()),
                    None => row.extend(std::iter::repeat_n("<unknown>".to_string(), 5)),
                }
            }
            rows.push(row);
        }
        out.push_str(&columns(&rows));
    }
    if !report.warm.pools.is_empty() {
        out.push('\n');
        let mut rows = vec![vec![
            "WARM POOL".to_string(),
            "READY MEMBERS".into(),
            "IDLE $/HOUR".into(),
            "SERVES".into(),
        ]];
        for p in &report.warm.pools {
            let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
            for (t, z, _) in &p.members {
                *kinds.entry(format!("{t} {z}")).or_default() += 1;
            }
            let members = if kinds.is_empty() {
                "0".to_string()
            } else {
                format!(
                    "{} ({}){}",
                    p.members.len(),
                    kinds
                        .iter()
                        .map(|(k, n)| format!("{n}x {k}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if p.from_spec { ", from spec" } else { "" }
                )
            };
            let total = plan
                .new_nodes
                .iter()
                .filter(|n| n.provisioner == p.provisioner)
                .count();
            rows.push(vec![
                p.provisioner.clone(),
                members,
                format!("{:.4}", p.idle_cost_per_hour),
                format!(
                    "{} of {total} new node(s)",
                    served_by(report, &p.provisioner)
                ),
            ]);
        }
        out.push_str(&columns(&rows));
        for p in &report.warm.pools {
            if let Some(note) = &p.note {
                out.push_str(&format!("warm pool {}: {note}\n", p.provisioner));
            }
        }
    }
    if !plan.existing_nodes.is_empty() {
        out.push('\n');
        let mut rows = vec![vec!["EXISTING NODE".to_string(), "PODS".into()]];
        for e in &plan.existing_nodes {
            rows.push(vec![e.name.clone(), e.pods.len().to_string()]);
        }
        out.push_str(&columns(&rows));
    }
    if !plan.unschedulable.is_empty() {
        out.push('\n');
        let mut rows = vec![vec!["UNSCHEDULABLE POD".to_string(), "REASON".into()]];
        for u in &plan.unschedulable {
            rows.push(vec![u.pod.clone(), u.reason.clone()]);
        }
        out.push_str(&columns(&rows));
    }
    if !plan.relaxed.is_empty() {
        out.push('\n');
        let mut rows = vec![vec!["POD".to_string(), "RELAXED PREFERENCE".into()]];
        for r in &plan.relaxed {
            rows.push(vec![r.pod.clone(), r.preferences.join("; ")]);
        }
        out.push_str(&columns(&rows));
    }
    let on_new: usize = plan.new_nodes.iter().map(|n| n.pods.len()).sum();
    let on_existing: usize = plan.existing_nodes.iter().map(|n| n.pods.len()).sum();
    let estimated = plan.new_nodes.iter().any(|n| n.price_estimated);
    out.push_str(&format!(
        "\nTotal: {} new node(s) at ${:.4}/h{} in {}; {} pod(s) on new nodes, {} on existing nodes, {} unschedulable\n",
        plan.new_nodes.len(),
        plan.new_price_per_hour(),
        if estimated { " (estimated)" } else { "" },
        report.region,
        on_new,
        on_existing,
        plan.unschedulable.len()
    ));
    if estimated {
        out.push_str("* estimated price (spot prices are unknown offline, or the region has no embedded price table)\n");
    }
    for w in report.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    for e in report.explanations {
        out.push('\n');
        out.push_str(&e.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::scheduling::{ExistingNodeUse, NewNode, Relaxed, Unschedulable};
    use joiner_core::{CapacityType, Resources};

    fn plan() -> Plan {
        Plan {
            new_nodes: vec![NewNode {
                name: "default-1".into(),
                provisioner: "default".into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
                capacity_type: CapacityType::OnDemand,
                price_per_hour: 0.1 + 0.2,
                price_estimated: false,
                instance_type_options: vec!["m5.large".into()].into(),
                option_prices: vec![Some(0.1 + 0.2)].into(),
                requirements: joiner_core::Requirements::new(),
                pods: vec!["default/web-0".into()],
                pod_indices: vec![0],
                requests: Resources::default(),
            }],
            existing_nodes: vec![ExistingNodeUse {
                name: "ip-10-0-0-1".into(),
                pods: vec!["default/web-1".into()],
            }],
            unschedulable: vec![Unschedulable {
                pod: "default/huge".into(),
                reason: "no instance type has 1000 cpu; largest allowed has 448".into(),
            }],
            relaxed: vec![Relaxed {
                pod: "default/web-0".into(),
                preferences: vec!["preferred node affinity zone In [a] (weight 1)".into()],
            }],
        }
    }

    #[test]
    fn json_has_the_documented_shape() {
        let p = plan();
        let w = vec![];
        let v: serde_json::Value = serde_json::from_str(&json(&Report {
            region: "us-east-1",
            plan: &p,
            warnings: &w,
            explanations: &[],
            warm: &crate::warm_pools::Overlay::default(),
            claims: &[],
        }))
        .unwrap();
        assert_eq!(v["region"], "us-east-1");
        assert_eq!(v["new_nodes"][0]["instance_type"], "m5.large");
        assert_eq!(v["new_nodes"][0]["capacity_type"], "on-demand");
        assert_eq!(v["new_nodes"][0]["price_per_hour"], 0.3);
        assert_eq!(v["existing_nodes"][0]["pods"][0], "default/web-1");
        assert_eq!(v["unschedulable"][0]["pod"], "default/huge");
        assert_eq!(v["new_price_per_hour"], 0.3);
        assert_eq!(v["relaxed"][0]["pod"], "default/web-0");
    }

    #[test]
    fn table_lists_nodes_pods_and_totals() {
        let p = plan();
        let w = vec!["skipped kind Service".to_string()];
        let t = table(
            &Report {
                region: "us-east-1",
                plan: &p,
                warnings: &w,
                explanations: &[],
                warm: &crate::warm_pools::Overlay::default(),
                claims: &[],
            },
            false,
        );
        assert!(t.contains("default-1  default      m5.large"), "{t}");
        assert!(t.contains("ip-10-0-0-1"));
        assert!(
            t.contains("default/huge       no instance type has 1000 cpu"),
            "{t}"
        );
        assert!(t.contains("Total: 1 new node(s) at $0.3000/h in us-east-1; 1 pod(s) on new nodes, 1 on existing nodes, 1 unschedulable"), "{t}");
        assert!(t.contains("warning: skipped kind Service"));
        assert!(
            t.contains("default/web-0  preferred node affinity zone In [a] (weight 1)"),
            "{t}"
        );
    }
}
