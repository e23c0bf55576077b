//! Replacing interrupted nodes: the capacity for their pods is launched before their drain
//! starts, not after.
//!
//! The cloud takes an interrupted instance whatever joiner decides, so nothing here waits or
//! refuses: the nodes are tainted `joiner.sh/disrupted:NoSchedule` (nothing new lands there),
//! one simulation places all of their pods on the rest of the cluster — existing and in-flight
//! nodes first, new nodes for the remainder — the new nodes' NodeClaims are written, the
//! interrupted claims deleted (the termination flow drains them through the Eviction API), and
//! then the replacements are launched. The evicted pods find the replacements as in-flight
//! capacity, so provisioning does not buy them again; a retry after a failure finds the
//! replacements already written the same way.

use futures::future::join_all;
use joiner_core::disruption::trial::evacuate;
use joiner_core::interruption::EventKind;
use joiner_core::scheduling::Options;
use joiner_core::{labels, CapacityType, CloudProvider};
use kube::api::{Patch, PatchParams};
use kube::Api;

use super::error::InterruptionError;
use super::targets::Target;
use crate::context::Context;
use crate::k8s::node_patch::taint_patch;
use crate::launcher::claims::{create_recorded, nominate};
use crate::launcher::{launch_claim, Catalogs};
use crate::nominations::{added_by, entries, release};
use crate::reconcile::delete_claim;
use crate::reconcile::disrupted_taint;

/// A node to replace and the event kind that ends it.
#[derive(Clone, Debug)]
pub struct Victim {
    /// Its claim and node.
    pub target: Target,
    /// Why it goes.
    pub kind: EventKind,
}

/// What a replacement did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replaced {
    /// The replacements' claims, written before the interrupted claims were deleted.
    pub replacements: Vec<String>,
    /// Pods of the interrupted nodes with no place anywhere (left to provisioning, which
    /// reports why once they are pending).
    pub unplaced: Vec<String>,
}

/// Marks the spot offering of a spot-interrupted node unavailable, from its claim's record
/// (or its node's labels).
fn mark_offering<P: CloudProvider>(ctx: &Context<P>, victim: &Victim) {
    if victim.kind != EventKind::SpotInterruption {
        return;
    }
    let status = victim.target.claim.status.as_ref();
    let label = |key: &str| {
        victim
            .target
            .node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(key).cloned())
    };
    let itype = status
        .and_then(|s| s.instance_type.clone())
        .or_else(|| label(labels::INSTANCE_TYPE));
    let zone = status
        .and_then(|s| s.zone.clone())
        .or_else(|| label(labels::ZONE));
    if let (Some(itype), Some(zone)) = (itype, zone) {
        ctx.cloud
            .mark_unavailable(&itype, &zone, CapacityType::Spot);
    }
}

/// Taints the victims' nodes so nothing new is scheduled there while their replacements come.
/// A failure is logged: the termination flow taints the node again before it drains.
async fn cordon<P: CloudProvider>(ctx: &Context<P>, victims: &[Victim]) {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(ctx.client.clone());
    let patches = victims.iter().filter_map(|v| {
        let node = v.target.node.as_ref()?;
        let name = node.metadata.name.clone()?;
        match taint_patch(node, disrupted_taint()) {
            Ok(Some(patch)) => Some((name, patch)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "interrupted node not tainted");
                None
            }
        }
    });
    let calls = patches.map(|(name, patch)| {
        let api = api.clone();
        async move {
            if let Err(e) = api
                .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
            {
                tracing::warn!(node = %name, error = %e, "interrupted node not tainted; the drain taints it");
            }
        }
    });
    join_all(calls).await;
}

/// Replaces `victims`: marks spot offerings, taints the nodes, writes replacement claims for
/// their pods, deletes the victims' claims, launches the replacements.
pub async fn replace<P: CloudProvider>(
    ctx: &Context<P>,
    victims: &[Victim],
) -> Result<Replaced, InterruptionError> {
    for v in victims {
        mark_offering(ctx, v);
    }
    cordon(ctx, victims).await;

    let provisioners = ctx.state.provisioners.state();
    let usable: Vec<&str> = provisioners
        .iter()
        .filter(|p| p.not_planned().is_none())
        .map(|p| p.name())
        .collect();
    let (catalog, failed) = Catalogs::default().union(ctx, &usable).await;
    for (name, why) in &failed {
        tracing::warn!(provisioner = %name, error = %why, "left out of the interruption replacement");
    }
    // From the snapshot until the replacements are written and remembered, no other plan is
    // made: a batch of provisioning or a second interruption would count their room as free.
    let planning = ctx.state.created.planning().await;
    let (mut snapshot, _) = ctx.state.snapshot_with_catalog(&catalog);
    let names: Vec<&str> = victims
        .iter()
        .filter_map(|v| v.target.node.as_ref()?.metadata.name.as_deref())
        .collect();
    // Their pods' room on replacements written for them already (a retry) is theirs again.
    release(&mut snapshot, &names);
    let removed: Vec<usize> = snapshot
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| names.contains(&n.name.as_str()))
        .map(|(i, _)| i)
        .collect();
    let mut out = Replaced::default();
    let mut planned = Vec::new();
    if !removed.is_empty() {
        let (plan, new_nodes) = evacuate(&mut snapshot, &catalog, &Options::default(), &removed);
        nominate(ctx, &added_by(&snapshot, &plan.existing_nodes)).await;
        out.unplaced = plan.unschedulable.iter().map(|u| u.pod.clone()).collect();
        for u in &plan.unschedulable {
            tracing::warn!(pod = %u.pod, reason = %u.reason, "pod of an interrupted node has no place; provisioning retries once it is pending");
        }
        for node in new_nodes {
            let Some(prov) = provisioners.iter().find(|p| p.name() == node.provisioner) else {
                continue;
            };
            let stored =
                create_recorded(ctx, prov, &node, &entries(&snapshot, &node.pod_indices)).await?;
            out.replacements.push(stored.name().to_string());
            planned.push((stored, node));
        }
    }

    drop(planning);

    for v in victims {
        let reason = format!("interruption_{}", v.kind.as_str());
        delete_claim(ctx, &v.target.claim, &reason, "deleting for interruption").await?;
    }

    let launches = planned.iter().map(|(claim, node)| {
        let catalog = &catalog;
        async move {
            if let Err(e) = launch_claim(ctx, claim, Some(node), catalog).await {
                tracing::warn!(claim = %claim.name(), error = %e, "replacement launch failed; retried by provisioning");
            }
        }
    });
    join_all(launches).await;
    Ok(out)
}

/// The victims' claim names, for logs.
pub fn claim_names(victims: &[Victim]) -> Vec<String> {
    victims
        .iter()
        .map(|v| v.target.claim.name().to_string())
        .collect()
}
