//! A new leader (or a restarted one) carries on the disruption its predecessor left, from the
//! records on the old NodeClaims ([`super::record`]): each command whose replacements all
//! exist goes on waiting for them (and for its check: old claims already being deleted, by the
//! previous leader's `finish` or by an interruption, are skipped); any other (a replacement
//! gone, a record that does not parse) is rolled back: its replacements deleted, its old nodes
//! untainted and unmarked. Every pass also removes the disrupted taints no command under way
//! holds ([`sweep`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use joiner_apis::NodeClaim;
use joiner_core::CloudProvider;

use super::command::{self, Command};
use super::record::{self, Record};
use crate::context::Context;
use joiner_apis::cluster::matching::NodeIndex;

/// The commands to carry on, after rolling back the others.
pub async fn recover<P: CloudProvider>(ctx: &Context<P>, now: Instant) -> Vec<Command> {
    let claims = ctx.state.claims();
    let nodes = ctx.state.nodes.state();
    let index = NodeIndex::new(&nodes);
    let mut commands: BTreeMap<String, (Record, Vec<Arc<NodeClaim>>)> = BTreeMap::new();
    for claim in &claims {
        match Record::of(claim) {
            None => {}
            Some(Err(why)) => {
                tracing::warn!(error = %why, "a disruption record that does not parse; freeing its node");
                record::unmark(&ctx.client, &[claim.name().to_string()]).await;
                let node: Vec<String> = index
                    .node_of(claim)
                    .and_then(|n| n.metadata.name.clone())
                    .into_iter()
                    .collect();
                record::untaint(&ctx.client, &node).await;
            }
            Some(Ok(r)) => commands
                .entry(r.id.clone())
                .or_insert_with(|| (r, Vec::new()))
                .1
                .push(claim.clone()),
        }
    }
    let mut resumed = Vec::new();
    for (_, (r, old)) in commands {
        let names: Vec<String> = old.iter().map(|c| c.name().to_string()).collect();
        let Some(cmd) = Command::from_record(&r, names.clone(), now) else {
            tracing::warn!(command = %r.id, reason = %r.reason, "a disruption record with an unknown reason; rolling it back");
            record::untaint(&ctx.client, &r.nodes).await;
            record::unmark(&ctx.client, &names).await;
            continue;
        };
        // Old claims being deleted (the previous leader was finishing, or an interruption
        // took one) change nothing: the command goes on as it would have, its check skips
        // nodes on their way out, and `finish` deletes only the others.
        let live = cmd.replacements.iter().all(|name| {
            claims
                .iter()
                .any(|c| c.name() == name && c.metadata.deletion_timestamp.is_none())
        });
        if live {
            tracing::info!(command = %cmd.id, nodes = ?cmd.key.nodes, replacements = ?cmd.replacements, "carrying on the disruption the previous leader started");
            resumed.push(cmd);
        } else {
            let why = "a replacement is gone".to_string();
            tracing::warn!(command = %cmd.id, why = %why, "rolling back a disruption the previous leader started");
            command::tell_failed(
                ctx,
                &cmd.old_claims,
                &format!("given up after a leader change: {why}"),
            )
            .await;
            command::abandon(ctx, &cmd, true).await;
        }
    }
    resumed
}

/// Removes the disrupted taints commands left on nodes whose claims record no command (a
/// rollback whose untaint failed, a leader gone between the taint and the record), except on
/// the nodes of the commands `under_way` (whose records the stores may not show yet).
pub async fn sweep<P: CloudProvider>(ctx: &Context<P>, under_way: &BTreeSet<String>) {
    let nodes = ctx.state.nodes.state();
    let mut stale = record::stale_taints(&nodes, &ctx.state.claims());
    stale.retain(|n| !under_way.contains(n));
    if !stale.is_empty() {
        tracing::info!(nodes = ?stale, "removing disrupted taints no command holds");
        record::untaint(&ctx.client, &stale).await;
    }
}
