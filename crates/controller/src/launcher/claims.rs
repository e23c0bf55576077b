//! Writing a NodeClaim for each new node of a plan, before anything is launched.
//!
//! The claim itself is built from the plan node by `joiner_apis::convert::node_claim` (a pure
//! function of the node and its Provisioner). The claim is the durable record of the decision:
//! written first, with the termination finalizer already in place, so a crash after it never leaks an instance (the launcher finds
//! the claim and launches or adopts its instance) and deleting it always goes through the
//! termination controller.

use joiner_apis::convert::node_claim::node_claim;
use joiner_apis::{drift, NodeClaim, ObjectLookup, Provisioner};
use joiner_core::scheduling::NewNode;
use kube::api::{Api, PostParams};

use super::error::ProvisioningError;
use crate::k8s::codes::is_conflict;

/// The finalizer the termination controller removes once the instance is gone.
pub use joiner_core::labels::TERMINATION_FINALIZER;

/// How many names are tried when the API server answers 409 AlreadyExists.
const NAME_ATTEMPTS: usize = 3;

pub use crate::k8s::names::random_suffix;

/// [`create_claim`] as a controller pass writes a claim: the stored claim is remembered (the
/// stores may not show it yet, and the next pass must count it as in flight) and counted in
/// `joiner_nodeclaims_created_total`. Provisioning, disruption and interruption all write their
/// claims through it, with the nomination entries of the node's pods
/// ([`crate::nominations::entries`]).
pub async fn create_recorded<P: joiner_core::CloudProvider>(
    ctx: &crate::context::Context<P>,
    prov: &Provisioner,
    node: &NewNode,
    nominated: &[String],
) -> Result<NodeClaim, ProvisioningError> {
    let stored = create_claim(&ctx.client, &ctx.state, prov, node, nominated).await?;
    ctx.state.created.remember(stored.clone());
    ctx.metrics
        .claims_created
        .get_or_create(&crate::metrics::ProvisionerLabels {
            provisioner: prov.name().to_string(),
        })
        .inc();
    Ok(stored)
}

/// Adds the pods a plan placed on claims still coming up to those claims' nominations (see
/// [`crate::nominations`]), each patched claim remembered so the next snapshot holds the room
/// before the watch delivers it. A failed patch is logged: the pods are then planned again by
/// the next batch, as before nominations existed.
pub async fn nominate<P: joiner_core::CloudProvider>(
    ctx: &crate::context::Context<P>,
    added: &[(String, Vec<String>)],
) {
    if added.is_empty() {
        return;
    }
    let claims = ctx.state.claims();
    let patches = added.iter().map(|(name, pods)| {
        let existing = claims
            .iter()
            .find(|c| c.name() == name)
            .map(|c| crate::nominations::of(c))
            .unwrap_or_default();
        let annotations = std::collections::BTreeMap::from([(
            joiner_core::labels::NOMINATED_PODS.to_string(),
            crate::nominations::value(&existing, pods),
        )]);
        async move {
            match crate::k8s::claims::patch_claim_annotations(&ctx.client, name, &annotations).await
            {
                Ok(stored) => ctx.state.created.remember_patched(stored),
                Err(e) => {
                    tracing::warn!(claim = %name, pods = pods.len(), error = %e,
                        "pods planned onto a claim still coming up not recorded on it")
                }
            }
        }
    });
    futures::future::join_all(patches).await;
}

/// Writes a claim for `node` nominating `nominated` (entries, see [`crate::nominations`]), named `<provisioner>-<random suffix>`, annotated with the hashes
/// of its Provisioner's and NodeTemplate's settings (found in `objects`) so drift can be told
/// later. A 409 AlreadyExists (the name was taken) is answered by trying a fresh name, a few
/// times; the stored claim, with the UID the API server gave it, is returned.
pub async fn create_claim(
    client: &kube::Client,
    objects: &dyn ObjectLookup,
    prov: &Provisioner,
    node: &NewNode,
    nominated: &[String],
) -> Result<NodeClaim, ProvisioningError> {
    let node_template = prov
        .spec
        .provider_ref
        .as_ref()
        .and_then(|r| objects.node_template(&r.name));
    let api: Api<NodeClaim> = Api::all(client.clone());
    let mut last_name = String::new();
    for _ in 0..NAME_ATTEMPTS {
        let name = format!("{}-{}", prov.name(), random_suffix());
        let mut claim = node_claim(&name, node, prov).map_err(|e| ProvisioningError::Invalid {
            claim: name.clone(),
            field: e.field().to_string(),
            reason: e.reason(),
        })?;
        drift::annotate(&mut claim, prov, node_template.as_deref());
        if !nominated.is_empty() {
            claim
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    joiner_core::labels::NOMINATED_PODS.to_string(),
                    crate::nominations::value(&[], nominated),
                );
        }
        match api.create(&PostParams::default(), &claim).await {
            Ok(stored) => return Ok(stored),
            Err(e) if is_conflict(&e) => {
                tracing::warn!(claim = %name, "NodeClaim name already taken; trying another");
                last_name = name;
            }
            Err(source) => {
                return Err(ProvisioningError::CreateClaim {
                    claim: name,
                    source: Box::new(source),
                })
            }
        }
    }
    Err(ProvisioningError::NameTaken {
        claim: last_name,
        attempts: NAME_ATTEMPTS,
    })
}
