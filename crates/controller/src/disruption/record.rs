//! What a disruption under way leaves in the cluster, so that nothing lands on its old nodes
//! and a new leader can carry it on or roll it back.
//!
//! - The old Nodes get joiner's disrupted taint (NoSchedule) before any replacement is
//!   written: no pod lands there meanwhile, and a pod that does (it tolerates the taint) is
//!   counted when the command is validated again before the drain. The taint disruption puts
//!   carries `timeAdded`, unlike the drain's and interruption's, so a taint left by a command
//!   that was rolled back or forgotten is told apart and removed ([`stale_taints`]).
//! - The old NodeClaims get the [`Record`] (annotation [`labels::DISRUPTION_COMMAND`]) once
//!   the replacements are written: reason, nodes, replacement claims, start. A leader that
//!   finds records carries the command on ([`super::recover`]).

use std::sync::Arc;

use joiner_apis::NodeClaim;
use joiner_core::labels;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::k8s::claims::patch_claim_annotations;
use crate::k8s::node_patch::{guarded, node_taints, taint_patch, taints_op};
use crate::reconcile::disrupted_taint;

/// A disruption command as its old NodeClaims record it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Which command (the same on every old claim of one command).
    pub id: String,
    /// Why (`Underutilized`, `Drifted`, `Expired`, `Empty`).
    pub reason: String,
    /// The old nodes.
    pub nodes: Vec<String>,
    /// The replacements' instance types, sorted.
    pub replacement_types: Vec<String>,
    /// The replacements' NodeClaims.
    pub replacements: Vec<String>,
    /// When the command started (RFC 3339).
    pub started_at: String,
    /// The planner's words.
    pub detail: String,
    /// $/h it saves.
    pub savings: f64,
}

impl Record {
    /// The record on `claim`: `None` without one, `Err` (naming the claim) for one that does
    /// not parse.
    pub fn of(claim: &NodeClaim) -> Option<Result<Record, String>> {
        let raw = claim
            .metadata
            .annotations
            .as_ref()?
            .get(labels::DISRUPTION_COMMAND)?;
        Some(serde_json::from_str(raw).map_err(|e| {
            format!(
                "NodeClaim {}: metadata.annotations[{:?}]: {e}",
                claim.metadata.name.as_deref().unwrap_or_default(),
                labels::DISRUPTION_COMMAND
            )
        }))
    }

    /// When the command started, if the record says so readably.
    pub fn started(&self) -> Option<Timestamp> {
        self.started_at.parse().ok()
    }
}

/// The disrupted taint as disruption puts it: stamped with `now`, which tells it apart from
/// the drain's and interruption's.
pub fn command_taint(now: Timestamp) -> Taint {
    Taint {
        time_added: Some(Time(now)),
        ..disrupted_taint()
    }
}

/// Writes `record` on `claims`; the first failure is returned (the caller rolls back).
pub async fn mark(
    client: &kube::Client,
    claims: &[Arc<NodeClaim>],
    record: &Record,
) -> Result<(), String> {
    let value = serde_json::to_string(record).map_err(|e| format!("the record: {e}"))?;
    let annotations =
        std::collections::BTreeMap::from([(labels::DISRUPTION_COMMAND.to_string(), value)]);
    for claim in claims {
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        patch_claim_annotations(client, name, &annotations)
            .await
            .map_err(|e| format!("NodeClaim {name}: recording the disruption: {e}"))?;
    }
    Ok(())
}

/// Removes the record from the claims named `claims`; failures are logged (a record whose
/// command is not under way is removed again by the next leader's recovery).
pub async fn unmark(client: &kube::Client, claims: &[String]) {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let body = json!({"metadata": {"annotations": {labels::DISRUPTION_COMMAND: null}}});
    for name in claims {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(claim = %name, error = %e, "removing a disruption record failed")
            }
        }
    }
}

/// Taints the Nodes named `nodes` with [`command_taint`], each from a fresh read when the
/// stored one is outdated (a conflict); returns the nodes tainted so far and, on a failure,
/// why (the caller untaints those and gives the command up).
pub async fn taint(
    client: &kube::Client,
    stored: &[Arc<Node>],
    nodes: &[String],
    now: Timestamp,
) -> (Vec<String>, Option<String>) {
    let mut done = Vec::new();
    for name in nodes {
        match patch_node(client, stored, name, |n| {
            taint_patch(n, command_taint(now)).map_err(|e| e.to_string())
        })
        .await
        {
            // A node another flow tainted already is not the command's to untaint.
            Ok(true) => done.push(name.clone()),
            Ok(false) => {}
            Err(e) => return (done, Some(format!("Node {name}: tainting it: {e}"))),
        }
    }
    (done, None)
}

/// Removes the taint disruption put ([`command_taint`], stamped) from the Nodes named
/// `nodes`, read afresh (the store may not show a taint put a moment ago); the drain's and
/// interruption's taints stay, and so does any taint on a Node being deleted. Failures are
/// logged (a taint left behind is removed by a later pass: [`stale_taints`]).
pub async fn untaint(client: &kube::Client, nodes: &[String]) {
    for name in nodes {
        let result = patch_node(client, &[], name, |n| {
            if n.metadata.deletion_timestamp.is_some() {
                return Ok(None);
            }
            let taints = node_taints(n);
            let kept: Vec<Taint> = taints
                .iter()
                .filter(|t| !(t.key == labels::DISRUPTED_TAINT && t.time_added.is_some()))
                .cloned()
                .collect();
            if kept.len() == taints.len() {
                return Ok(None);
            }
            guarded(n, vec![taints_op(n, &kept)])
                .map(Some)
                .map_err(|e| e.to_string())
        })
        .await;
        if let Err(e) = result {
            tracing::warn!(node = %name, error = %e, "removing the disrupted taint failed");
        }
    }
}

/// Nodes carrying the taint disruption puts ([`command_taint`]: stamped) whose claim is live
/// and records no command: left by a command rolled back or forgotten.
pub fn stale_taints(nodes: &[Arc<Node>], claims: &[Arc<NodeClaim>]) -> Vec<String> {
    let index = joiner_apis::cluster::matching::NodeIndex::new(nodes);
    let mut out = Vec::new();
    for claim in claims {
        if claim.metadata.deletion_timestamp.is_some() || Record::of(claim).is_some() {
            continue;
        }
        let Some(node) = index.node_of(claim) else {
            continue;
        };
        let ours = node_taints(node)
            .iter()
            .any(|t| t.key == labels::DISRUPTED_TAINT && t.time_added.is_some());
        if ours {
            out.extend(node.metadata.name.clone());
        }
    }
    out
}

/// Applies the patch `build` makes of Node `name` (nothing when it makes none): from the
/// store first, and once more from a fresh read when the store's copy was outdated. A Node
/// that is gone needs nothing. True when a patch was applied.
async fn patch_node(
    client: &kube::Client,
    stored: &[Arc<Node>],
    name: &str,
    build: impl Fn(&Node) -> Result<Option<json_patch::Patch>, String>,
) -> Result<bool, String> {
    let api: Api<Node> = Api::all(client.clone());
    let mut node: Option<Node> = stored
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
        .map(|n| n.as_ref().clone());
    for attempt in 0..2 {
        let current = match node.take() {
            Some(n) => n,
            None => match api.get_opt(name).await.map_err(|e| e.to_string())? {
                Some(n) => n,
                None => return Ok(false),
            },
        };
        let Some(patch) = build(&current)? else {
            return Ok(false);
        };
        match api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
            // The stored copy was outdated (the resourceVersion test failed): read it again.
            Err(kube::Error::Api(e)) if attempt == 0 && (e.code == 409 || e.code == 422) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("the Node kept changing under the patch".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(annotation: Option<&str>) -> NodeClaim {
        let mut c: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "old-1"},
            "spec": {"provisionerName": "default"}
        }))
        .expect("claim");
        if let Some(a) = annotation {
            c.metadata.annotations = Some(std::collections::BTreeMap::from([(
                labels::DISRUPTION_COMMAND.to_string(),
                a.to_string(),
            )]));
        }
        c
    }

    #[test]
    fn a_record_reads_back_and_a_bad_one_names_its_claim() {
        let record = Record {
            id: "old-1-1796634000".into(),
            reason: "Underutilized".into(),
            nodes: vec!["n1".into()],
            replacement_types: vec!["c5.large".into()],
            replacements: vec!["default-abc".into()],
            started_at: "2026-12-07T09:00:00Z".into(),
            detail: "underutilized".into(),
            savings: 0.01,
        };
        let raw = serde_json::to_string(&record).expect("json");
        assert_eq!(Record::of(&claim(Some(&raw))), Some(Ok(record.clone())));
        assert_eq!(record.started().map(|t| t.as_second()), Some(1_796_634_000));
        assert_eq!(Record::of(&claim(None)), None);
        let bad = Record::of(&claim(Some("{not json"))).expect("present");
        let e = bad.expect_err("malformed");
        assert!(
            e.starts_with(
                "NodeClaim old-1: metadata.annotations[\"joiner.sh/disruption-command\"]: "
            ),
            "{e}"
        );
    }

    #[test]
    fn the_command_taint_is_told_apart_from_the_drains() {
        let now: Timestamp = "2026-12-07T09:00:00Z".parse().expect("time");
        let t = command_taint(now);
        assert_eq!(t.key, labels::DISRUPTED_TAINT);
        assert_eq!(t.effect, "NoSchedule");
        assert!(t.time_added.is_some());
        assert!(disrupted_taint().time_added.is_none());
    }
}
