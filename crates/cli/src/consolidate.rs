//! `joiner plan --consolidate`: which of joiner's nodes would go now, what would replace them,
//! $/h before and after, and for every node that stays, why — from a cluster dump
//! (`kubectl get nodes,pods,pdb -A -o yaml` plus the Provisioners, and NodeClaims with
//! NodeTemplates for the drift the nodes cannot show), offline.

use std::collections::BTreeMap;

use joiner_apis::cluster::disruption::DisruptionInputs;
use joiner_core::disruption::{plan, DisruptionPlan, DisruptionSettings, Input};
use joiner_core::scheduling::Options;
use joiner_core::{InstanceType, Snapshot};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::error::CliError;
use crate::output::{columns, round_price};
use crate::Format;

/// What the dry run needs besides the cluster.
pub struct Request<'a> {
    /// Region of the catalog, for the report.
    pub region: &'a str,
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// Each Provisioner's disruption settings.
    pub settings: &'a BTreeMap<String, DisruptionSettings>,
    /// What the NodeClaims of the input say (drift the nodes cannot show, claims being
    /// deleted), read as the controller reads it (`joiner_apis::cluster::disruption`).
    pub claims: &'a DisruptionInputs,
    /// True when the input holds NodeClaims at all.
    pub has_claims: bool,
    /// Instance types and prices.
    pub catalog: &'a [InstanceType],
    /// `--at`, RFC 3339; now when absent.
    pub at: Option<&'a str>,
    /// `--steps`: the most decisions to plan; all when absent.
    pub steps: Option<usize>,
    /// Notes gathered on the way.
    pub warnings: &'a [String],
    /// Output format.
    pub format: Format,
}

/// Plans disruption and renders it.
pub fn run(req: &Request<'_>) -> Result<String, CliError> {
    let at = match req.at {
        Some(s) => s.parse::<Timestamp>().map_err(|e| {
            CliError::Usage(format!(
                "--at {s:?}: not an RFC 3339 time (e.g. 2026-12-03T09:00:00Z): {e}"
            ))
        })?,
        None => Timestamp::now(),
    };
    let settings_of = |name: &str| req.settings.get(name).cloned();
    let started = std::time::Instant::now();
    let out = plan(&Input {
        snapshot: req.snapshot,
        catalog: req.catalog,
        opts: &Options::default(),
        settings: &settings_of,
        cloud_drift: &|node| req.claims.drifted.get(&node.name).cloned(),
        disrupting: &req.claims.disrupting,
        now: at.as_second(),
        max_decisions: req.steps,
        max_evaluations: None,
        start_at: 0,
    });
    let planned_in_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    let mut warnings = req.warnings.to_vec();
    if !req.has_claims {
        warnings.push(
            "no NodeClaims in the input: drift is only what the nodes show (labels, taints, \
             requirements); add `kubectl get nodeclaims,nodetemplates -o yaml` for AMI, subnet, \
             security-group, Provisioner and NodeTemplate drift"
                .into(),
        );
    }
    Ok(match req.format {
        Format::Table | Format::Wide => table(req.region, &at, &out, &warnings, planned_in_ms),
        Format::Json => json(req.region, &at, &out, &warnings, planned_in_ms) + "\n",
    })
}

fn table(
    region: &str,
    at: &Timestamp,
    p: &DisruptionPlan,
    warnings: &[String],
    planned_in_ms: f64,
) -> String {
    let mut out = String::new();
    if p.decisions.is_empty() {
        out.push_str("No node would be disrupted.\n");
    } else {
        let mut rows = vec![vec![
            "#".to_string(),
            "REASON".into(),
            "NODES".into(),
            "REPLACEMENT".into(),
            "$/H BEFORE".into(),
            "$/H AFTER".into(),
            "WHY".into(),
        ]];
        for (i, d) in p.decisions.iter().enumerate() {
            let replacement = if d.replacements.is_empty() {
                "-".to_string()
            } else {
                d.replacements
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {} {} {}",
                            r.name, r.instance_type, r.capacity_type, r.zone
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            rows.push(vec![
                (i + 1).to_string(),
                d.reason.as_str().to_string(),
                d.nodes.join(","),
                replacement,
                format!("{:.4}", d.price_before),
                format!("{:.4}", d.price_after),
                d.detail.clone(),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    if !p.kept.is_empty() {
        out.push('\n');
        let mut rows = vec![vec!["NODE".to_string(), "STAYS BECAUSE".into()]];
        for k in &p.kept {
            rows.push(vec![k.node.clone(), k.why.join("; ")]);
        }
        out.push_str(&columns(&rows));
    }
    if !p.refused_moves.is_empty() {
        out.push('\n');
        let mut rows = vec![vec![
            "MULTI-NODE MOVE REFUSED".to_string(),
            "BECAUSE".into(),
        ]];
        for r in &p.refused_moves {
            rows.push(vec![r.nodes.join(","), r.why.clone()]);
        }
        out.push_str(&columns(&rows));
    }
    out.push_str(&format!(
        "\nTotal: {} decision(s), {} node(s) removed, {} new; joiner's nodes ${:.4}/h -> ${:.4}/h in {region} at {at}; planned in {planned_in_ms} ms\n",
        p.decisions.len(),
        p.decisions.iter().map(|d| d.nodes.len()).sum::<usize>(),
        p.decisions.iter().map(|d| d.replacements.len()).sum::<usize>(),
        p.price_before,
        p.price_after,
    ));
    for w in warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

#[derive(Serialize)]
struct JsonPlan<'a> {
    region: &'a str,
    at: String,
    decisions: Vec<JsonDecision<'a>>,
    kept: Vec<JsonKept<'a>>,
    price_per_hour_before: f64,
    price_per_hour_after: f64,
    refused_moves: Vec<JsonRefused<'a>>,
    planned_in_ms: f64,
    warnings: &'a [String],
}

#[derive(Serialize)]
struct JsonRefused<'a> {
    nodes: &'a [String],
    why: &'a str,
}

#[derive(Serialize)]
struct JsonDecision<'a> {
    reason: &'a str,
    nodes: &'a [String],
    replacements: Vec<JsonReplacement<'a>>,
    price_per_hour_before: f64,
    price_per_hour_after: f64,
    score: Option<f64>,
    detail: &'a str,
    moves: Vec<JsonMove<'a>>,
}

#[derive(Serialize)]
struct JsonReplacement<'a> {
    /// The name the moves use (`replacement-N`).
    name: &'a str,
    provisioner: &'a str,
    instance_type: &'a str,
    zone: &'a str,
    capacity_type: &'a str,
    price_per_hour: f64,
    instance_type_options: &'a [String],
    pods: &'a [String],
}

#[derive(Serialize)]
struct JsonMove<'a> {
    pod: &'a str,
    to: &'a str,
}

#[derive(Serialize)]
struct JsonKept<'a> {
    node: &'a str,
    why: &'a [String],
}

fn json(
    region: &str,
    at: &Timestamp,
    p: &DisruptionPlan,
    warnings: &[String],
    planned_in_ms: f64,
) -> String {
    let doc = JsonPlan {
        region,
        at: at.to_string(),
        decisions: p
            .decisions
            .iter()
            .map(|d| JsonDecision {
                reason: d.reason.as_str(),
                nodes: &d.nodes,
                replacements: d
                    .replacements
                    .iter()
                    .map(|r| JsonReplacement {
                        name: &r.name,
                        provisioner: &r.provisioner,
                        instance_type: &r.instance_type,
                        zone: &r.zone,
                        capacity_type: r.capacity_type.as_str(),
                        price_per_hour: round_price(r.price_per_hour),
                        instance_type_options: &r.instance_type_options,
                        pods: &r.pods,
                    })
                    .collect(),
                price_per_hour_before: round_price(d.price_before),
                price_per_hour_after: round_price(d.price_after),
                // An empty node's deletion scores infinitely, which JSON cannot say.
                score: d.score.filter(|s| s.is_finite()).map(round_price),
                detail: &d.detail,
                moves: d
                    .moves
                    .iter()
                    .map(|(pod, to)| JsonMove { pod, to })
                    .collect(),
            })
            .collect(),
        kept: p
            .kept
            .iter()
            .map(|k| JsonKept {
                node: &k.node,
                why: &k.why,
            })
            .collect(),
        price_per_hour_before: round_price(p.price_before),
        price_per_hour_after: round_price(p.price_after),
        refused_moves: p
            .refused_moves
            .iter()
            .map(|r| JsonRefused {
                nodes: &r.nodes,
                why: &r.why,
            })
            .collect(),
        planned_in_ms,
        warnings,
    };
    // Serializing plain structs of strings and numbers cannot fail; keep a readable fallback.
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
