//! Writing a NodeClaim for each new node of a plan, before anything is launched.
//!
//! The claim is the durable record of the decision: written first, with the termination
//! finalizer already in place, so a crash after it never leaks an instance (the launcher finds
//! the claim and launches or adopts its instance) and deleting it always goes through the
//! termination controller.

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use joiner_apis::{
    NodeClaim, NodeClaimResources, NodeClaimSpec, NodeSelectorRequirement, NodeTemplateRef,
    Provisioner,
};
use joiner_core::scheduling::NewNode;
use joiner_core::{labels, Pod};
use kube::api::{Api, ObjectMeta, PostParams};

use super::resources::to_quantities;
use super::ProvisioningError;

/// The finalizer the termination controller removes once the instance is gone.
pub const TERMINATION_FINALIZER: &str = "joiner.sh/termination";

/// How many names are tried when the API server answers 409 AlreadyExists.
const NAME_ATTEMPTS: usize = 3;

/// Consonants and digits as Kubernetes uses for generated names: no vowels, so no words.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A random five-character suffix. The hasher's per-instance random keys give the randomness;
/// the clock and a counter make two calls in one process differ even if the keys repeated.
pub fn random_suffix() -> String {
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    h.write_u128(nanos);
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let mut v = h.finish();
    let n = ALPHABET.len() as u64;
    (0..5)
        .map(|_| {
            let c = ALPHABET[(v % n) as usize] as char;
            v /= n;
            c
        })
        .collect()
}

/// True when the plan's zone is a constraint of the node's pods (a zone node selector or
/// affinity, or a zone spread or affinity term) rather than just where the cheapest offering
/// happened to be: only then is the claim pinned to it, so the cloud keeps the freedom to
/// launch in any zone with capacity otherwise.
pub fn pins_zone(node: &NewNode, pods: &[Pod]) -> bool {
    pods.iter()
        .filter(|p| node.pods.contains(&p.key()))
        .any(|p| {
            p.node_terms.iter().any(|t| t.get(labels::ZONE).is_some())
                || p.topology_spread
                    .iter()
                    .any(|s| s.topology_key == labels::ZONE)
                || p.affinity.iter().any(|a| a.topology_key == labels::ZONE)
        })
}

fn requirement(key: &str, values: Vec<String>) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: "In".to_string(),
        values,
    }
}

/// The claim's requirements: the Provisioner's, with the keys the plan decided replaced by its
/// decision (instance-type In the types that hold the pods, capacity-type In the chosen one,
/// zone In the planned zone when pinned), plus its labels and name as single values.
pub fn claim_requirements(
    prov: &Provisioner,
    node: &NewNode,
    pin_zone: bool,
) -> Vec<NodeSelectorRequirement> {
    let decided = |key: &str| {
        let key = labels::normalize(key);
        key == labels::INSTANCE_TYPE
            || key == labels::CAPACITY_TYPE
            || key == labels::PROVISIONER_NAME
            || (pin_zone && key == labels::ZONE)
    };
    let mut out: Vec<NodeSelectorRequirement> = prov
        .spec
        .requirements
        .iter()
        .filter(|r| !decided(&r.key))
        .cloned()
        .collect();
    for (k, v) in &prov.spec.labels {
        out.push(requirement(k, vec![v.clone()]));
    }
    out.push(requirement(
        labels::PROVISIONER_NAME,
        vec![prov.name().to_string()],
    ));
    out.push(requirement(
        labels::INSTANCE_TYPE,
        node.instance_type_options.clone(),
    ));
    if pin_zone {
        out.push(requirement(labels::ZONE, vec![node.zone.clone()]));
    }
    out.push(requirement(
        labels::CAPACITY_TYPE,
        vec![node.capacity_type.as_str().to_string()],
    ));
    out
}

/// The NodeClaim for `node` of Provisioner `prov`, named `name`.
pub fn build_claim(name: &str, prov: &Provisioner, node: &NewNode, pin_zone: bool) -> NodeClaim {
    let mut meta_labels = BTreeMap::new();
    meta_labels.insert(
        labels::PROVISIONER_NAME.to_string(),
        prov.name().to_string(),
    );
    let spec = NodeClaimSpec {
        provisioner_name: prov.name().to_string(),
        requirements: claim_requirements(prov, node, pin_zone),
        resources: NodeClaimResources {
            requests: to_quantities(&node.requests),
        },
        taints: prov.spec.taints.clone(),
        startup_taints: prov.spec.startup_taints.clone(),
        node_template_ref: prov.spec.provider_ref.as_ref().map(|r| NodeTemplateRef {
            name: r.name.clone(),
        }),
    };
    let mut claim = NodeClaim::new(name, spec);
    claim.metadata = ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(meta_labels),
        finalizers: Some(vec![TERMINATION_FINALIZER.to_string()]),
        ..ObjectMeta::default()
    };
    claim
}

/// Writes a claim for `node`, named `<provisioner>-<random suffix>`. A 409 AlreadyExists (the
/// name was taken) is answered by trying a fresh name, a few times; the stored claim, with the
/// UID the API server gave it, is returned.
pub async fn create_claim(
    client: &kube::Client,
    prov: &Provisioner,
    node: &NewNode,
    pin_zone: bool,
) -> Result<NodeClaim, ProvisioningError> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let mut last_name = String::new();
    for _ in 0..NAME_ATTEMPTS {
        let name = format!("{}-{}", prov.name(), random_suffix());
        let claim = build_claim(&name, prov, node, pin_zone);
        match api.create(&PostParams::default(), &claim).await {
            Ok(stored) => return Ok(stored),
            Err(kube::Error::Api(status)) if status.code == 409 => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_use_the_alphabet_and_differ() {
        let a = random_suffix();
        let b = random_suffix();
        assert_eq!(a.len(), 5);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)), "{a}");
        assert_ne!(a, b);
    }
}
