//! What the disruption planner is given beside the snapshot, read from the NodeClaims the
//! same way by the controller and by `joiner plan --consolidate`: why a node has drifted in a
//! way only its claim shows (the AMI, subnet and security groups it launched with, the
//! Provisioner and NodeTemplate hashes it was created under), which nodes are already on
//! their way out (their claim is being deleted), and which nodes no command could carry a
//! decision out on (labelled with a Provisioner, with no claim).
//!
//! Drift is judged on the labels the claim recorded (its type's, its requirements'), not the
//! live Node's: a label edited by hand must not make an AMI look drifted, nor a node be
//! replaced for it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use joiner_core::{labels, Snapshot};
use k8s_openapi::api::core::v1 as k8s;

use super::matching::NodeIndex;
use crate::drift::{claim_drift, restamp};
use crate::{NodeClaim, ObjectLookup};

/// Whether the claims handed in are all the cluster has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claims {
    /// Every NodeClaim (the controller's store): a Node labelled with a Provisioner whose
    /// claim is not among them has none.
    All,
    /// Some of them (a dump, an example): a Node without its claim here may well have one.
    Some,
}

/// The disruption planner's inputs read from the claims.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DisruptionInputs {
    /// Why each node has drifted in a way only its claim shows, by node name.
    pub drifted: HashMap<String, String>,
    /// Claims being deleted, and their nodes: on their way out already, they count against
    /// the budgets and take no pod.
    pub disrupting: BTreeSet<String>,
    /// Claims whose drift hashes were recorded under an older hashing, with the annotations
    /// that record them under this one (`drift::restamp`): the controller writes them.
    pub restamps: Vec<(String, BTreeMap<String, String>)>,
}

/// Reads the planner's inputs from `claims` and their `nodes`, with the Provisioners and
/// NodeTemplates `objects` holds now; with [`Claims::All`], marks the snapshot's nodes that
/// are labelled with a Provisioner but have no claim as not disruptable (joined outside
/// joiner, or their claim is gone: no command could carry a decision out on them, so they are
/// never a candidate, and never the decision that holds every other one back).
pub fn disruption_inputs(
    snapshot: &mut Snapshot,
    nodes: &[Arc<k8s::Node>],
    claims: &[Arc<NodeClaim>],
    objects: &dyn ObjectLookup,
    complete: Claims,
) -> DisruptionInputs {
    let mut out = DisruptionInputs::default();
    let index = NodeIndex::new(nodes);
    let mut claimed: HashSet<String> = HashSet::new();
    let recorded_of: HashMap<&str, &BTreeMap<String, String>> = snapshot
        .nodes
        .iter()
        .filter_map(|n| Some((n.name.as_str(), n.life.recorded_labels.as_deref()?)))
        .collect();
    let no_labels = BTreeMap::new();
    for claim in claims {
        let node = index.node_of(claim);
        let node_name = node.and_then(|n| n.metadata.name.clone());
        claimed.extend(node_name.clone());
        if claim.metadata.deletion_timestamp.is_some() {
            out.disrupting.insert(claim.name().to_string());
            out.disrupting.extend(node_name);
            continue;
        }
        let (Some(node), Some(prov)) = (node, objects.provisioner(&claim.spec.provisioner_name))
        else {
            continue;
        };
        let node_template = prov
            .spec
            .provider_ref
            .as_ref()
            .and_then(|r| objects.node_template(&r.name));
        let recorded = node
            .metadata
            .name
            .as_deref()
            .and_then(|name| recorded_of.get(name).copied());
        let labels =
            recorded.unwrap_or_else(|| node.metadata.labels.as_ref().unwrap_or(&no_labels));
        if let Some(annotations) = restamp(claim, &prov, node_template.as_deref()) {
            out.restamps.push((claim.name().to_string(), annotations));
        }
        if let (Some(name), Some(why)) = (
            node.metadata.name.clone(),
            claim_drift(claim, &prov, node_template.as_deref(), labels),
        ) {
            out.drifted.insert(name, why);
        }
    }
    if complete == Claims::All {
        mark_unclaimed(snapshot, nodes, &claimed);
    }
    out
}

/// Marks the snapshot's nodes labelled with a Provisioner that no claim holds.
fn mark_unclaimed(snapshot: &mut Snapshot, nodes: &[Arc<k8s::Node>], claimed: &HashSet<String>) {
    let unclaimed: HashSet<&str> = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(labels::PROVISIONER_NAME))
        })
        .filter_map(|n| n.metadata.name.as_deref())
        .filter(|name| !claimed.contains(*name))
        .collect();
    for n in &mut snapshot.nodes {
        if unclaimed.contains(n.name.as_str()) {
            n.life.not_disruptable = Some("it has no NodeClaim".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeTemplate, NodeTemplateStatus, Provisioner, StaticObjects};
    use serde_json::json;

    fn provisioner() -> Provisioner {
        serde_json::from_value(json!({"metadata": {"name": "web"},
            "spec": {"providerRef": {"name": "default"}}}))
        .expect("provisioner")
    }

    /// A NodeTemplate whose AMI for amd64 nodes is now `ami-new`.
    fn node_template() -> NodeTemplate {
        let mut nt: NodeTemplate = serde_json::from_value(json!({"metadata": {"name": "default"},
            "spec": {"subnetSelector": {"k": "v"}, "securityGroupSelector": {"k": "v"}}}))
        .expect("node template");
        nt.status = Some(NodeTemplateStatus {
            amis: vec![crate::drift::amd64_ami("ami-new")],
            ..NodeTemplateStatus::default()
        });
        nt
    }

    /// A claim of Provisioner `web` launched with `ami-old` on instance `id`.
    fn claim(name: &str, id: &str, deleting: bool) -> Arc<NodeClaim> {
        let mut meta = json!({"name": name});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
        }
        Arc::new(
            serde_json::from_value(
                json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
                "metadata": meta, "spec": {"provisionerName": "web"},
                "status": {"providerID": format!("aws:///us-east-1a/{id}"), "imageID": "ami-old"}}),
            )
            .expect("claim"),
        )
    }

    /// A Node on instance `id`, labelled with Provisioner `web`, live labels `arch`.
    fn node(name: &str, id: &str, arch: &str, claim_label: &str) -> Arc<k8s::Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {
                "joiner.sh/provisioner-name": "web", "kubernetes.io/arch": arch,
                "joiner.sh/nodeclaim": claim_label}},
                "spec": {"providerID": format!("aws:///us-east-1a/{id}")}}))
            .expect("node"),
        )
    }

    fn snapshot(names: &[&str], recorded_arch: &str) -> Snapshot {
        let mut s = Snapshot::default();
        for n in names {
            let mut node = joiner_core::Node {
                name: n.to_string(),
                ..Default::default()
            };
            node.life.recorded_labels = Some(Box::new(BTreeMap::from([(
                "kubernetes.io/arch".to_string(),
                recorded_arch.to_string(),
            )])));
            s.nodes.push(node);
        }
        s
    }

    #[test]
    fn drift_is_read_from_the_claims_nodes_by_provider_id_on_their_recorded_labels() {
        let objects = StaticObjects::new(vec![provisioner()], vec![node_template()]);
        // n-1's live label says arm64 (edited by hand): the recorded amd64 decides, and the
        // AMI for amd64 nodes changed. n-2 carries web-1's claim label but runs another
        // instance: a label proves nothing. web-3 is being deleted.
        let nodes = vec![
            node("n-1", "i-1", "arm64", "web-1"),
            node("n-2", "i-2", "amd64", "web-1"),
            node("n-3", "i-3", "amd64", "web-3"),
        ];
        let claims = vec![claim("web-1", "i-1", false), claim("web-3", "i-3", true)];
        let mut snap = snapshot(&["n-1", "n-2", "n-3"], "amd64");
        let got = disruption_inputs(&mut snap, &nodes, &claims, &objects, Claims::Some);
        assert_eq!(
            got.drifted.keys().collect::<Vec<_>>(),
            ["n-1"],
            "{:?}",
            got.drifted
        );
        assert!(got.drifted["n-1"].contains("ami-old"), "{:?}", got.drifted);
        assert_eq!(
            got.disrupting,
            BTreeSet::from(["web-3".to_string(), "n-3".to_string()])
        );
        // Some claims only: n-2, whose claim is not here, is not judged.
        assert!(snap.nodes.iter().all(|n| n.life.not_disruptable.is_none()));

        // The controller holds every claim: n-2 has none, so no command could end it.
        let mut snap = snapshot(&["n-1", "n-2", "n-3"], "amd64");
        disruption_inputs(&mut snap, &nodes, &claims, &objects, Claims::All);
        let marked: Vec<&str> = snap
            .nodes
            .iter()
            .filter(|n| n.life.not_disruptable.is_some())
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(marked, ["n-2"]);
    }

    #[test]
    fn without_recorded_labels_the_live_ones_count_and_a_missing_provisioner_judges_nothing() {
        let nodes = vec![node("n-1", "i-1", "arm64", "web-1")];
        let claims = vec![claim("web-1", "i-1", false)];
        let objects = StaticObjects::new(vec![provisioner()], vec![node_template()]);
        let mut snap = Snapshot::default();
        let got = disruption_inputs(&mut snap, &nodes, &claims, &objects, Claims::All);
        // arm64 is served by no AMI the template resolves: nothing says the AMI is outdated.
        assert!(got.drifted.is_empty(), "{:?}", got.drifted);
        let none = StaticObjects::new(vec![], vec![]);
        let mut snap = snapshot(&["n-1"], "amd64");
        let got = disruption_inputs(&mut snap, &nodes, &claims, &none, Claims::All);
        assert!(got.drifted.is_empty() && got.restamps.is_empty());
    }
}
