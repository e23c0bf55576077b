//! What the NodeClaim of each new node of a plan would say, for `joiner plan -o json`: the
//! labels its node carries, its requirements, taints and allocatable. A reader checks from the
//! output alone what a pod's selector, spread or affinity on any key (a custom label too) will
//! see on the node, without running the controller.

use std::collections::BTreeMap;

use joiner_core::quantity::{format_bytes, format_cpu};
use joiner_core::scheduling::NewNode;
use joiner_core::{labels, InstanceType, Provisioner};
use serde::Serialize;

/// One node-selector requirement, as a NodeClaim's `spec.requirements` lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expression {
    /// The label key.
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt or Lt.
    pub operator: &'static str,
    /// The values (none for Exists and DoesNotExist).
    pub values: Vec<String>,
}

/// The claim of one new node, as `-o json` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClaimView {
    /// The labels the node gets when launched as the plan's cheapest option: the
    /// Provisioner's labels, every requirement with a single allowed value (custom keys
    /// included), the instance type's well-known labels, its zone and capacity type.
    pub labels: BTreeMap<String, String>,
    /// The claim's requirements: every key the plan narrowed or the Provisioner constrains,
    /// the instance-type options and the capacity type chosen.
    pub requirements: Vec<Expression>,
    /// Taints the node is launched with (`key=value:Effect`).
    pub taints: Vec<String>,
    /// Taints removed once the node is initialized.
    pub startup_taints: Vec<String>,
    /// What the chosen type offers pods with the Provisioner's kubelet settings.
    pub allocatable: BTreeMap<String, String>,
}

impl ClaimView {
    /// The cells `plan -o wide` adds to a new node's row: labels, requirements, taints,
    /// startup taints and allocatable, each `<none>` when empty (as kubectl prints it).
    pub fn cells(&self) -> [String; 5] {
        fn or_none(items: Vec<String>, sep: &str) -> String {
            if items.is_empty() {
                "<none>".into()
            } else {
                items.join(sep)
            }
        }
        let pairs =
            |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| format!("{k}={v}")).collect();
        [
            or_none(pairs(&self.labels), ","),
            or_none(
                self.requirements
                    .iter()
                    .map(Expression::to_string)
                    .collect(),
                "; ",
            ),
            or_none(self.taints.clone(), ","),
            or_none(self.startup_taints.clone(), ","),
            or_none(pairs(&self.allocatable), ","),
        ]
    }
}

impl std::fmt::Display for Expression {
    /// `key In [a,b]`, `key Exists`, `key Gt [3]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.key, self.operator)?;
        if !self.values.is_empty() {
            write!(f, " [{}]", self.values.join(","))?;
        }
        Ok(())
    }
}

/// The claim view of `node`, launched by `prov` from `catalog`; `None` when the plan names a
/// Provisioner or type the inputs lack (never, for a plan made from them).
pub fn view(node: &NewNode, prov: &Provisioner, catalog: &[InstanceType]) -> Option<ClaimView> {
    let t = catalog.iter().find(|t| t.name == node.instance_type)?;
    let mut requirements = Vec::new();
    for (key, req) in node.requirements.iter() {
        if key == labels::INSTANCE_TYPE || key == labels::CAPACITY_TYPE {
            continue;
        }
        for (op, values) in req.to_expressions() {
            requirements.push(Expression {
                key: key.clone(),
                operator: op.as_str(),
                values,
            });
        }
    }
    requirements.push(Expression {
        key: labels::INSTANCE_TYPE.into(),
        operator: "In",
        values: node.instance_type_options.to_vec(),
    });
    requirements.push(Expression {
        key: labels::CAPACITY_TYPE.into(),
        operator: "In",
        values: vec![node.capacity_type.as_str().into()],
    });
    let mut node_labels: BTreeMap<String, String> = t.labels.clone();
    for r in &requirements {
        if let ("In", [one]) = (r.operator, r.values.as_slice()) {
            node_labels.insert(r.key.clone(), one.clone());
        }
    }
    node_labels.extend(prov.labels.clone());
    node_labels.insert(labels::PROVISIONER_NAME.into(), prov.name.clone());
    node_labels.insert(labels::INSTANCE_TYPE.into(), t.name.clone());
    node_labels.insert(labels::ZONE.into(), node.zone.clone());
    node_labels.insert(
        labels::CAPACITY_TYPE.into(),
        node.capacity_type.as_str().into(),
    );
    let a = prov.kubelet.allocatable(t);
    let mut allocatable = BTreeMap::from([
        ("cpu".to_string(), format_cpu(a.cpu)),
        ("memory".to_string(), format_bytes(a.memory)),
        ("pods".to_string(), a.pods.to_string()),
    ]);
    if a.ephemeral_storage > 0 {
        allocatable.insert(
            "ephemeral-storage".into(),
            format_bytes(a.ephemeral_storage),
        );
    }
    Some(ClaimView {
        labels: node_labels,
        requirements,
        taints: prov.taints.iter().map(ToString::to_string).collect(),
        startup_taints: prov
            .startup_taints
            .iter()
            .map(ToString::to_string)
            .collect(),
        allocatable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::scheduling::{simulate, Options};
    use joiner_core::{Pod, Requirement, Resources, Snapshot};

    /// A pod that selects a custom label gets a node whose claim requires it and whose labels
    /// carry it; the Provisioner's taints and the type's allocatable are there too.
    #[test]
    fn a_custom_label_a_pod_selects_shows_in_the_claim() {
        let catalog = joiner_core::testing::catalog::catalog();
        let mut prov = Provisioner::default_provisioner();
        prov.requirements
            .add("team", Requirement::one_of(["a", "b"]));
        prov.taints = vec![joiner_core::Taint {
            key: "dedicated".into(),
            value: "batch".into(),
            effect: joiner_core::Effect::NoSchedule,
        }];
        let mut pod = Pod {
            namespace: "default".into(),
            name: "web".into(),
            requests: Resources::new(500, 1 << 30, 0, 1),
            ..Pod::default()
        };
        pod.node_terms = vec![{
            let mut r = joiner_core::Requirements::new();
            r.add("team", Requirement::single("b"));
            r
        }];
        pod.tolerations = vec![joiner_core::Toleration {
            key: "dedicated".into(),
            exists: true,
            value: String::new(),
            effect: None,
        }];
        let snapshot = Snapshot {
            pods: vec![pod],
            provisioners: vec![prov.clone()],
            ..Snapshot::default()
        };
        let plan = simulate(&snapshot, &catalog, &Options::default());
        let node = &plan.new_nodes[0];
        let v = view(node, &prov, &catalog).expect("a view");
        assert_eq!(v.labels.get("team").map(String::as_str), Some("b"));
        assert!(v
            .requirements
            .iter()
            .any(|r| r.key == "team" && r.operator == "In" && r.values == ["b"]));
        assert_eq!(
            v.labels.get(labels::INSTANCE_TYPE),
            Some(&node.instance_type)
        );
        assert_eq!(v.taints, ["dedicated=batch:NoSchedule"]);
        let t = catalog
            .iter()
            .find(|t| t.name == node.instance_type)
            .expect("type");
        assert_eq!(v.allocatable["cpu"], format_cpu(t.allocatable.cpu));
    }
}
