//! The planner's input from the controller's stores: the snapshot with every usable
//! Provisioner's catalog, each Provisioner's disruption settings, the drift each claim's
//! record shows (`joiner_apis::drift`), and the nodes already on their way out (claims being
//! deleted, the old nodes of the command under way).

use std::collections::{BTreeMap, BTreeSet};

use joiner_apis::cluster::disruption::{disruption_inputs, Claims};
use joiner_core::disruption::{plan, trial, DisruptionPlan, DisruptionSettings, Input};
use joiner_core::scheduling::Options;
use joiner_core::{CloudProvider, InstanceType};
use k8s_openapi::jiff::Timestamp;

use super::pod_changes::PodChanges;
use crate::context::Context;
use crate::launcher::Catalogs;

/// Most decisions one pass plans (and may start, each after its own validation delay): the
/// commands they become run side by side, within the budgets, which count the ones under way.
pub const DECISIONS_PER_PASS: usize = 10;

/// A plan of at most [`DECISIONS_PER_PASS`] decisions, with the catalog it was made on and what had to be left
/// out (logged by the caller).
pub struct Planned {
    /// The planner's answer.
    pub plan: DisruptionPlan,
    /// The instance types of every usable Provisioner.
    pub catalog: Vec<InstanceType>,
    /// Provisioners or objects left out, in words.
    pub warnings: Vec<String>,
    /// Claims hashed by an older release (or not at all), with the hash annotations to write
    /// so that later changes of their settings show as drift.
    pub restamps: Vec<(String, BTreeMap<String, String>)>,
}

/// Most single-node consolidations one pass simulates. On a packed cluster of thousands
/// of nodes every candidate is refused only after a simulation; a bounded pass stays well
/// under a second and the next pass goes on where this one stopped.
pub const EVALUATIONS_PER_PASS: usize = 100;

/// Plans disruption on the stores as they are, `also_disrupting` counting as on their way out,
/// simulating single-node consolidations from the candidate `start_at` places in; `changes`
/// tells (and learns) when each node's pods last changed.
pub async fn planned<P: CloudProvider>(
    ctx: &Context<P>,
    also_disrupting: &BTreeSet<String>,
    now: Timestamp,
    start_at: usize,
    changes: &mut PodChanges,
) -> Planned {
    let mut warnings = Vec::new();
    let mut settings: BTreeMap<String, DisruptionSettings> = BTreeMap::new();
    let mut provisioners = ctx.state.provisioners.state();
    provisioners.sort_by(|a, b| a.name().cmp(b.name()));
    for prov in &provisioners {
        if let Some(why) = prov.not_planned() {
            warnings.push(format!("Provisioner {}: {why}", prov.name()));
            continue;
        }
        match prov.disruption_settings() {
            Ok(s) => {
                settings.insert(prov.name().to_string(), s);
            }
            Err(e) => warnings.push(format!("Provisioner {}: {e}", prov.name())),
        }
    }
    let usable: Vec<&str> = settings.keys().map(String::as_str).collect();
    let (catalog, failed) = Catalogs::default().union(ctx, &usable).await;
    for (name, why) in failed {
        warnings.push(why);
        settings.remove(&name);
    }
    let (mut snapshot, snapshot_warnings) = ctx.state.snapshot_with_catalog(&catalog);
    changes.observe(&mut snapshot, now.as_second());
    warnings.extend(snapshot_warnings);
    // Drift the nodes cannot show (the hashes and launch facts their claims recorded against
    // their Provisioner and NodeTemplate now), claims on their way out, nodes without one: as
    // `joiner plan --consolidate` reads them.
    let inputs = disruption_inputs(
        &mut snapshot,
        &ctx.state.nodes.state(),
        &ctx.state.claims(),
        &ctx.state,
        Claims::All,
    );
    let mut disrupting = also_disrupting.clone();
    disrupting.extend(inputs.disrupting);
    let drifted = inputs.drifted;
    let restamps = inputs.restamps;
    let settings_of = |name: &str| settings.get(name).cloned();
    let plan = plan(&Input {
        snapshot: &snapshot,
        catalog: &catalog,
        opts: &Options::default(),
        settings: &settings_of,
        cloud_drift: &|node| drifted.get(&node.name).cloned(),
        disrupting: &disrupting,
        now: now.as_second(),
        max_decisions: Some(DECISIONS_PER_PASS),
        max_evaluations: Some(EVALUATIONS_PER_PASS),
        start_at,
    });
    Planned {
        plan,
        catalog,
        warnings,
        restamps,
    }
}

/// Whether removing the nodes named `nodes` for `reason` still holds on the cluster as it is
/// now, checked before a command's old nodes are drained (its replacements Initialized): no
/// pod on them, one that arrived since included, opts out now (`do-not-disrupt`), and every
/// pod on them has a place on the nodes that stay, the replacements among them, with no more
/// new nodes (the room held for the moved pods is theirs: their reservations are released
/// first; pending pods wait aside). PodDisruptionBudgets are the drain's to honour, as in
/// Karpenter, not a reason to give the command up. Expiration and drift read volumes as they
/// were planned (a pod only its node mounts leaves with it). Nodes that are gone or being
/// deleted need nothing. The old nodes of the other commands under way (`others`) are on
/// their way out as the planner sees them: they take no pod, and their pods need room too,
/// so two commands never count on the same room. `Err` says why not.
pub async fn still_holds<P: CloudProvider>(
    ctx: &Context<P>,
    nodes: &[String],
    others: &[String],
    reason: joiner_core::disruption::Reason,
) -> Result<(), String> {
    let provisioners = ctx.state.provisioners.state();
    let usable: Vec<&str> = provisioners
        .iter()
        .filter(|p| p.not_planned().is_none())
        .map(|p| p.name())
        .collect();
    let (catalog, _) = Catalogs::default().union(ctx, &usable).await;
    let (mut snapshot, _) = ctx.state.snapshot_with_catalog(&catalog);
    let leaving: Vec<&str> = nodes.iter().map(String::as_str).collect();
    crate::nominations::release(&mut snapshot, &leaving);
    for n in snapshot.nodes.iter_mut() {
        if others.contains(&n.name) && !nodes.contains(&n.name) {
            n.unschedulable = true;
            n.life.deleting = true;
        }
    }
    let now = Timestamp::now().as_second();
    let mut removed = Vec::new();
    for name in nodes {
        let Some(i) = snapshot.nodes.iter().position(|n| &n.name == name) else {
            continue;
        };
        if snapshot.nodes[i].life.deleting {
            continue;
        }
        let opted_out = snapshot.pods.iter().find(|p| {
            p.node_name.as_deref() == Some(name.as_str())
                && !p.disruption.terminating
                && p.disruption.protects(now)
        });
        if let Some(p) = opted_out {
            return Err(format!(
                "node {name} no longer qualifies: pod {} is annotated {}",
                p.key(),
                p.disruption.do_not_disrupt.as_deref().unwrap_or_default()
            ));
        }
        removed.push(i);
    }
    let forced = matches!(
        reason,
        joiner_core::disruption::Reason::Expired | joiner_core::disruption::Reason::Drifted
    );
    let outcome = trial::check(
        &mut snapshot,
        &catalog,
        &Options::default(),
        &removed,
        forced,
    )
    .map_err(|why| format!("the decision no longer holds: {why}"))?;
    match outcome.replacements.len() {
        0 => Ok(()),
        n => Err(format!(
            "the decision no longer holds: the pods on its nodes now need {n} more new node(s)"
        )),
    }
}
