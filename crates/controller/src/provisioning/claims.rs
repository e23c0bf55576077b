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
use joiner_core::{labels, Pod, Requirement};
use kube::api::{Api, ObjectMeta, PostParams};

use super::resources::to_quantities;
use super::ProvisioningError;
use crate::k8s::codes::is_conflict;

/// The finalizer the termination controller removes once the instance is gone.
pub use joiner_core::labels::TERMINATION_FINALIZER;

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

/// What the pods placed on a new node decide beyond the plan's type, zone and capacity type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Narrowing {
    /// The plan's zone is a constraint of the pods (a zone node selector or affinity, or a zone
    /// spread or affinity term) rather than just where the cheapest offering happened to be:
    /// only then is the claim pinned to it, so the cloud keeps the freedom to launch in any
    /// zone with capacity otherwise.
    pub pin_zone: bool,
    /// Custom label keys (not instance or joiner keys) narrowed by the pods' node requirements
    /// to a finite set of values: the node must carry one of them or the pods cannot run there
    /// (a Provisioner allowing `team In [a, b]` for a pod selecting `team: a` gives `[a]`).
    pub custom: BTreeMap<String, Vec<String>>,
}

impl Narrowing {
    /// The narrowing of `node`, from the snapshot's `pods` and the Provisioner as the
    /// simulation saw it. A pod with several ORed node terms narrows nothing: which term the
    /// simulation used is not part of the plan.
    pub fn of(node: &NewNode, pods: &[Pod], prov: &joiner_core::Provisioner) -> Narrowing {
        let on_node: Vec<&Pod> = pods
            .iter()
            .filter(|p| node.pods.contains(&p.key()))
            .collect();
        let pin_zone = on_node.iter().any(|p| {
            p.node_terms.iter().any(|t| t.get(labels::ZONE).is_some())
                || p.topology_spread
                    .iter()
                    .any(|s| s.topology_key == labels::ZONE)
                || p.affinity.iter().any(|a| a.topology_key == labels::ZONE)
        });
        let base = prov.node_requirements();
        let mut narrowed: BTreeMap<String, Requirement> = BTreeMap::new();
        for pod in &on_node {
            let [term] = pod.node_terms.as_slice() else {
                continue;
            };
            for (key, req) in term.iter() {
                if labels::is_well_known(key) || key == labels::NODECLAIM {
                    continue;
                }
                let current = narrowed
                    .get(key)
                    .cloned()
                    .or_else(|| base.get(key).cloned())
                    .unwrap_or_else(Requirement::any);
                narrowed.insert(key.clone(), current.intersect(req));
            }
        }
        let custom = narrowed
            .into_iter()
            .filter_map(|(k, r)| {
                let values = r.in_values()?;
                (!values.is_empty() && !r.allows_absent())
                    .then(|| (k, values.iter().cloned().collect()))
            })
            .collect();
        Narrowing { pin_zone, custom }
    }
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
/// zone In the planned zone when pinned, custom keys as the pods narrowed them), plus its
/// labels and name as single values.
pub fn claim_requirements(
    prov: &Provisioner,
    node: &NewNode,
    narrowing: &Narrowing,
) -> Vec<NodeSelectorRequirement> {
    let pin_zone = narrowing.pin_zone;
    let decided = |key: &str| {
        let key = labels::normalize(key);
        key == labels::INSTANCE_TYPE
            || key == labels::CAPACITY_TYPE
            || key == labels::PROVISIONER_NAME
            || (pin_zone && key == labels::ZONE)
            || narrowing.custom.contains_key(key)
            || prov.spec.labels.contains_key(key)
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
    for (k, values) in &narrowing.custom {
        if !prov.spec.labels.contains_key(k) {
            out.push(requirement(k, values.clone()));
        }
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
pub fn build_claim(
    name: &str,
    prov: &Provisioner,
    node: &NewNode,
    narrowing: &Narrowing,
) -> NodeClaim {
    let mut meta_labels = BTreeMap::new();
    meta_labels.insert(
        labels::PROVISIONER_NAME.to_string(),
        prov.name().to_string(),
    );
    let spec = NodeClaimSpec {
        provisioner_name: prov.name().to_string(),
        requirements: claim_requirements(prov, node, narrowing),
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
    narrowing: &Narrowing,
) -> Result<NodeClaim, ProvisioningError> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let mut last_name = String::new();
    for _ in 0..NAME_ATTEMPTS {
        let name = format!("{}-{}", prov.name(), random_suffix());
        let claim = build_claim(&name, prov, node, narrowing);
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

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::{CapacityType, Requirements, Resources};
    use serde_json::json;

    fn new_node(pods: &[&str]) -> NewNode {
        NewNode {
            name: "web-1".into(),
            provisioner: "web".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1b".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 0.03,
            price_estimated: false,
            instance_type_options: vec!["m5.large".into(), "m5.xlarge".into()],
            pods: pods.iter().map(|p| p.to_string()).collect(),
            requests: Resources::new(1500, 1 << 30, 0, 2),
        }
    }

    fn pod(name: &str, terms: Vec<Requirements>) -> Pod {
        Pod {
            namespace: "shop".into(),
            name: name.into(),
            node_terms: terms,
            ..Pod::default()
        }
    }

    fn api_provisioner() -> Provisioner {
        serde_json::from_value(json!({
            "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
            "metadata": {"name": "web"},
            "spec": {
                "providerRef": {"name": "default"},
                "labels": {"env": "prod"},
                "requirements": [
                    {"key": "team", "operator": "In", "values": ["a", "b"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
                ],
            },
        }))
        .expect("provisioner parses")
    }

    #[test]
    fn pods_narrow_custom_keys_and_pin_their_zone() {
        let api = api_provisioner();
        let core = api.to_core().expect("valid provisioner");
        let mut term = Requirements::new();
        term.add("team", Requirement::single("a"));
        term.add(labels::ZONE, Requirement::single("us-east-1b"));
        let pods = vec![
            pod("a", vec![term]),
            pod("b", vec![]),
            pod("elsewhere", vec![]),
        ];
        let node = new_node(&["shop/a", "shop/b"]);
        let n = Narrowing::of(&node, &pods, &core);
        assert!(n.pin_zone);
        assert_eq!(
            n.custom,
            BTreeMap::from([("team".to_string(), vec!["a".to_string()])])
        );
        let reqs = claim_requirements(&api, &node, &n);
        let text: Vec<String> = reqs
            .iter()
            .map(|r| format!("{} {} {:?}", r.key, r.operator, r.values))
            .collect();
        assert_eq!(
            text,
            [
                "env In [\"prod\"]",
                "team In [\"a\"]",
                "joiner.sh/provisioner-name In [\"web\"]",
                "node.kubernetes.io/instance-type In [\"m5.large\", \"m5.xlarge\"]",
                "topology.kubernetes.io/zone In [\"us-east-1b\"]",
                "karpenter.sh/capacity-type In [\"spot\"]",
            ]
        );
    }

    #[test]
    fn pods_without_constraints_leave_the_provisioner_requirements() {
        let api = api_provisioner();
        let core = api.to_core().expect("valid provisioner");
        let node = new_node(&["shop/b"]);
        let n = Narrowing::of(&node, &[pod("b", vec![])], &core);
        assert_eq!(n, Narrowing::default());
        let claim = build_claim("web-abcde", &api, &node, &n);
        let keys: Vec<&str> = claim
            .spec
            .requirements
            .iter()
            .map(|r| r.key.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "team",
                "topology.kubernetes.io/zone",
                "env",
                "joiner.sh/provisioner-name",
                "node.kubernetes.io/instance-type",
                "karpenter.sh/capacity-type",
            ]
        );
        assert_eq!(claim.spec.requirements[0].values, ["a", "b"]);
        assert_eq!(
            claim.metadata.finalizers.as_deref(),
            Some(&[TERMINATION_FINALIZER.to_string()][..])
        );
        assert_eq!(claim.spec.resources.requests["cpu"].0, "1500m");
        assert_eq!(
            claim
                .spec
                .node_template_ref
                .as_ref()
                .map(|r| r.name.as_str()),
            Some("default")
        );
    }

    #[test]
    fn suffixes_use_the_alphabet_and_differ() {
        let a = random_suffix();
        let b = random_suffix();
        assert_eq!(a.len(), 5);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)), "{a}");
        assert_ne!(a, b);
    }
}
