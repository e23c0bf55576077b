//! NodeClaims to and from the simulation's types.
//!
//! A new node of a plan becomes a NodeClaim through [`node_claim`], a pure function of the plan
//! node and its Provisioner: the plan already holds the node's merged requirements (zone pins,
//! custom labels, the term the simulation used), its instance-type options and its requests.
//! The reverse conversions ([`claim_requirements`], [`claim_taints`], [`quantities`]) read a
//! stored claim back for the in-flight view, the launcher and registration. They reuse the
//! selector, taint and quantity conversions of Pods and Nodes, so one spelling is read one way.

use std::collections::BTreeMap;

use joiner_core::quantity::{format_bytes, format_cpu};
use joiner_core::scheduling::NewNode;
use joiner_core::{labels, Requirements, Resources, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::nodes::taint;
use super::requests::parse_map;
use super::selectors::add_expression;
use super::FieldError;
use crate::{
    ApiError, NodeClaim, NodeClaimResources, NodeClaimSpec, NodeSelectorRequirement,
    NodeTemplateRef, Provisioner,
};

/// The claim of plan node `node`, named `name`, for Provisioner `prov` (the one the plan
/// names). Its requirements are the Provisioner's with what the plan decided in their place, in
/// this order: the Provisioner's own requirements the plan left as they were, its labels,
/// every other key the plan narrowed (a custom label a pod selects, an architecture), the
/// provisioner name, `instance-type In` the node's options, the zone when the plan narrowed it
/// (a pod's selector, a topology pin, the NodeTemplate's subnets) and `capacity-type In` the
/// chosen one. The zone the cheapest offering happened to be in is not a requirement: the
/// cloud keeps the freedom to launch in any allowed zone with capacity. The claim carries the
/// termination finalizer from the start.
pub fn node_claim(name: &str, node: &NewNode, prov: &Provisioner) -> Result<NodeClaim, ApiError> {
    let base = prov.to_core()?.node_requirements();
    let narrowed = |key: &str| node.requirements.get(key) != base.get(key);
    let fixed = |key: &str| {
        key == labels::INSTANCE_TYPE
            || key == labels::CAPACITY_TYPE
            || key == labels::PROVISIONER_NAME
            || key == labels::NODECLAIM
            || prov.spec.labels.contains_key(key)
    };
    let mut out: Vec<NodeSelectorRequirement> = prov
        .spec
        .requirements
        .iter()
        .filter(|r| {
            let key = labels::normalize(&r.key);
            !fixed(key) && !narrowed(key)
        })
        .cloned()
        .collect();
    for (k, v) in &prov.spec.labels {
        out.push(requirement(k, "In", vec![v.clone()]));
    }
    for (key, req) in node.requirements.iter() {
        if !fixed(key) && key != labels::ZONE && narrowed(key) {
            out.extend(expressions(key, req));
        }
    }
    out.push(requirement(
        labels::PROVISIONER_NAME,
        "In",
        vec![prov.name().to_string()],
    ));
    out.push(requirement(
        labels::INSTANCE_TYPE,
        "In",
        node.instance_type_options.to_vec(),
    ));
    if narrowed(labels::ZONE) {
        if let Some(zone) = node.requirements.get(labels::ZONE) {
            out.extend(expressions(labels::ZONE, zone));
        }
    }
    out.push(requirement(
        labels::CAPACITY_TYPE,
        "In",
        vec![node.capacity_type.as_str().to_string()],
    ));

    let spec = NodeClaimSpec {
        provisioner_name: prov.name().to_string(),
        requirements: out,
        resources: NodeClaimResources {
            requests: quantities(&node.requests),
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
        labels: Some(BTreeMap::from([(
            labels::PROVISIONER_NAME.to_string(),
            prov.name().to_string(),
        )])),
        finalizers: Some(vec![labels::TERMINATION_FINALIZER.to_string()]),
        ..ObjectMeta::default()
    };
    Ok(claim)
}

fn requirement(key: &str, operator: &str, values: Vec<String>) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values,
    }
}

/// `req` on `key` as node-selector requirements.
pub fn expressions(key: &str, req: &joiner_core::Requirement) -> Vec<NodeSelectorRequirement> {
    req.to_expressions()
        .into_iter()
        .map(|(op, values)| requirement(key, op.as_str(), values))
        .collect()
}

/// The claim's `spec.requirements` as core requirements, an error naming the entry.
pub fn claim_requirements(claim: &NodeClaim) -> Result<Requirements, FieldError> {
    selector_requirements(&claim.spec.requirements, "spec.requirements")
}

/// A list of node-selector requirements (ANDed) at field path `at`, as core requirements.
pub fn selector_requirements(
    list: &[NodeSelectorRequirement],
    at: &str,
) -> Result<Requirements, FieldError> {
    let mut reqs = Requirements::new();
    for (i, r) in list.iter().enumerate() {
        add_expression(
            &mut reqs,
            &r.key,
            &r.operator,
            &r.values,
            &format!("{at}[{i}]"),
            true,
        )?;
    }
    Ok(reqs)
}

/// The claim's taints, and its startup taints when `with_startup` (what the node registers
/// with), as core taints.
pub fn claim_taints(claim: &NodeClaim, with_startup: bool) -> Result<Vec<Taint>, FieldError> {
    let mut out = Vec::new();
    for (i, t) in claim.spec.taints.iter().enumerate() {
        out.push(taint(
            &t.key,
            t.value.as_deref(),
            &t.effect,
            &format!("spec.taints[{i}]"),
        )?);
    }
    if with_startup {
        for (i, t) in claim.spec.startup_taints.iter().enumerate() {
            out.push(taint(
                &t.key,
                t.value.as_deref(),
                &t.effect,
                &format!("spec.startupTaints[{i}]"),
            )?);
        }
    }
    Ok(out)
}

/// `resources` as quantities: cpu in cores or millicores, memory and ephemeral storage with a
/// binary suffix, counts as plain numbers. Zero entries are left out.
pub fn quantities(resources: &Resources) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    let mut put = |name: &str, value: String| {
        out.insert(name.to_string(), Quantity(value));
    };
    if resources.cpu != 0 {
        put("cpu", format_cpu(resources.cpu));
    }
    if resources.memory != 0 {
        put("memory", format_bytes(resources.memory));
    }
    if resources.ephemeral_storage != 0 {
        put(
            "ephemeral-storage",
            format_bytes(resources.ephemeral_storage),
        );
    }
    if resources.pods != 0 {
        put("pods", resources.pods.to_string());
    }
    for (name, v) in resources.extended() {
        put(name, v.to_string());
    }
    out
}

/// A quantity map found at `field` (e.g. `status.allocatable`) as a resource vector, naming
/// the entry that does not parse.
pub fn resources(map: &BTreeMap<String, Quantity>, field: &str) -> Result<Resources, FieldError> {
    parse_map(map, field)
}

/// The labels registration puts on the claim's Node: provisioner-name, nodeclaim, every
/// requirement with operator In and a single value, and the instance type, zone and capacity
/// type the claim's status reports (what was actually launched).
pub fn claim_labels(claim: &NodeClaim) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for r in &claim.spec.requirements {
        if r.operator == "In" && r.values.len() == 1 {
            out.insert(labels::normalize(&r.key).to_string(), r.values[0].clone());
        }
    }
    if let Some(status) = &claim.status {
        for (key, value) in [
            (labels::INSTANCE_TYPE, &status.instance_type),
            (labels::ZONE, &status.zone),
            (labels::CAPACITY_TYPE, &status.capacity_type),
        ] {
            if let Some(v) = value.as_ref().filter(|v| !v.is_empty()) {
                out.insert(key.to_string(), v.clone());
            }
        }
    }
    out.insert(
        labels::PROVISIONER_NAME.to_string(),
        claim.spec.provisioner_name.clone(),
    );
    out.insert(labels::NODECLAIM.to_string(), claim.name().to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::{CapacityType, Requirement};
    use serde_json::json;

    /// A plan node of Provisioner `web` whose merged requirements are the Provisioner's node
    /// requirements narrowed by `narrow`.
    fn new_node(prov: &Provisioner, narrow: &[(&str, Requirement)]) -> NewNode {
        let mut requirements = prov.to_core().expect("valid").node_requirements();
        for (k, r) in narrow {
            requirements.add(k, r.clone());
        }
        NewNode {
            name: "web-1".into(),
            provisioner: "web".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1b".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 0.03,
            price_estimated: false,
            instance_type_options: vec!["m5.large".into(), "m5.xlarge".into()].into(),
            option_prices: vec![Some(0.03), Some(0.06)].into(),
            pods: vec!["shop/a".into()],
            pod_indices: vec![0],
            requirements,
            requests: Resources::new(1500, 1 << 30, 0, 2),
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

    fn text(reqs: &[NodeSelectorRequirement]) -> Vec<String> {
        reqs.iter()
            .map(|r| format!("{} {} {:?}", r.key, r.operator, r.values))
            .collect()
    }

    #[test]
    fn what_the_plan_narrowed_replaces_the_provisioner_requirement() {
        let api = api_provisioner();
        let node = new_node(
            &api,
            &[
                ("team", Requirement::single("a")),
                (labels::ZONE, Requirement::single("us-east-1b")),
            ],
        );
        let claim = node_claim("web-abcde", &node, &api).expect("claim");
        assert_eq!(
            text(&claim.spec.requirements),
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
    fn a_node_the_plan_did_not_narrow_keeps_the_provisioner_requirements() {
        let api = api_provisioner();
        let node = new_node(&api, &[]);
        let claim = node_claim("web-abcde", &node, &api).expect("claim");
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
            Some(&[labels::TERMINATION_FINALIZER.to_string()][..])
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
        // Read back, the claim's requirements are the plan node's for every key it wrote.
        let back = claim_requirements(&claim).expect("reads back");
        assert_eq!(back.get("team"), node.requirements.get("team"));
        assert_eq!(back.get(labels::ZONE), node.requirements.get(labels::ZONE));
    }

    #[test]
    fn quantities_round_trip() {
        let mut r = Resources::new(1500, 3 << 30, 20 << 30, 29);
        r.set("nvidia.com/gpu", 1);
        let q = quantities(&r);
        assert_eq!(q["cpu"].0, "1500m");
        assert_eq!(q["memory"].0, "3Gi");
        assert_eq!(q["pods"].0, "29");
        assert_eq!(q["nvidia.com/gpu"].0, "1");
        assert_eq!(resources(&q, "status.allocatable"), Ok(r));
    }

    #[test]
    fn a_bad_quantity_names_its_entry() {
        let mut map = BTreeMap::new();
        map.insert("cpu".to_string(), Quantity("lots".into()));
        let err = resources(&map, "status.allocatable").expect_err("does not parse");
        assert!(err.field.starts_with("status.allocatable"), "{err}");
        assert!(err.field.contains("cpu"), "{err}");
    }

    #[test]
    fn claim_taints_name_the_bad_entry() {
        let mut claim = NodeClaim::new("c", NodeClaimSpec::default());
        claim.spec.taints = vec![crate::Taint {
            key: "a".into(),
            value: None,
            effect: "NoSchedule".into(),
        }];
        claim.spec.startup_taints = vec![crate::Taint {
            key: "b".into(),
            value: Some("x".into()),
            effect: "Sometimes".into(),
        }];
        assert_eq!(claim_taints(&claim, false).map(|t| t.len()), Ok(1));
        let err = claim_taints(&claim, true).expect_err("bad effect");
        assert_eq!(err.field, "spec.startupTaints[0].effect");
    }
}
