use serde_json::json;

use super::*;

fn yaml(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| {
            serde_json::to_value(serde_yaml::Value::deserialize(d).expect("yaml")).expect("json")
        })
        .collect()
}

use serde::Deserialize;

/// The issue's seed: a v1alpha5 Provisioner and v1alpha1 AWSNodeTemplate.
const SEED: &str = r#"
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: default}
spec:
  requirements:
    - {key: karpenter.k8s.aws/instance-family, operator: In, values: [t3]}
    - {key: karpenter.k8s.aws/instance-size, operator: In, values: [small, medium, large]}
    - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a, us-east-1b]}
  providerRef: {name: default}
  consolidation: {enabled: true}
  ttlSecondsUntilExpired: 2592000
  ttlSecondsAfterEmpty: 30
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: default}
spec:
  subnetSelector: {karpenter.sh/discovery: eks-dev-1-26-cluster}
  securityGroupSelector: {karpenter.sh/discovery: eks-dev-1-26-cluster}
"#;

#[test]
fn the_seed_converts_field_for_field() {
    let c = convert(&yaml(SEED)).expect("converts");
    assert_eq!(c.provisioners.len(), 1);
    assert_eq!(c.node_templates.len(), 1);
    let p = &c.provisioners[0];
    assert_eq!(p.name(), "default");
    assert_eq!(p.spec.requirements.len(), 3);
    assert_eq!(p.spec.requirements[1].values, ["small", "medium", "large"]);
    assert_eq!(
        p.spec.provider_ref.as_ref().map(|r| r.name.as_str()),
        Some("default")
    );
    assert_eq!(p.spec.ttl_seconds_until_expired, Some(2_592_000));
    // Both set is refused (by Karpenter's validation too): the TTL becomes the wait.
    assert_eq!(p.spec.ttl_seconds_after_empty, None);
    assert_eq!(
        p.spec.consolidation.as_ref().and_then(|c| c.enabled),
        Some(true)
    );
    assert_eq!(
        p.spec
            .consolidation
            .as_ref()
            .and_then(|c| c.consolidate_after.as_deref()),
        Some("30s")
    );
    assert!(p.to_core().is_ok(), "{:?}", p.to_core().err());
    let t = &c.node_templates[0];
    assert_eq!(
        t.spec.subnet_selector["karpenter.sh/discovery"],
        "eks-dev-1-26-cluster"
    );
    assert_eq!(
        t.spec.ami_family,
        Some(crate::AmiFamily::Al2),
        "Karpenter's v1alpha1 default kept"
    );
    // Every field had a home; the notes say what changes meaning.
    let fields: Vec<&str> = c.notes.iter().map(|n| n.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.metadataOptions",
            "spec.amiFamily",
            "spec.consolidation.enabled",
            "spec.ttlSecondsAfterEmpty"
        ],
        "{:?}",
        c.notes
    );
}

#[test]
fn fields_without_an_equivalent_are_reported_never_dropped() {
    let c = convert(&yaml(r#"
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: p}
spec:
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large], minValues: 1}]
  provider: {subnetSelector: {a: b}}
  kubeletConfiguration: {maxPods: 20, containerRuntime: containerd}
  futureField: 3
"#)).expect("converts");
    let notes: Vec<String> = c
        .notes
        .iter()
        .map(|n| format!("{}: {}", n.object, n.field))
        .collect();
    for want in [
        "Provisioner p: spec.requirements[0].minValues",
        "Provisioner p: spec.provider",
        "Provisioner p: spec.kubeletConfiguration.containerRuntime",
        "Provisioner p: spec.futureField",
    ] {
        assert!(notes.iter().any(|n| n == want), "{want} not in {notes:?}");
    }
    assert_eq!(
        c.provisioners[0]
            .spec
            .kubelet_configuration
            .as_ref()
            .and_then(|k| k.max_pods),
        Some(20)
    );
}

#[test]
fn a_v1beta1_node_pool_and_node_class_convert() {
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: general}
spec:
  template:
    metadata: {labels: {team: a}}
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}]
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: nc}
      kubelet: {maxPods: 50}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 30s
    expireAfter: 720h
    budgets: [{nodes: "20%"}]
  limits: {cpu: "1000"}
  weight: 10
---
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: nc}
spec:
  amiFamily: Bottlerocket
  role: KarpenterNodeRole-c1
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: c1}}, {tags: {other: x}}]
  securityGroupSelectorTerms: [{id: sg-1}, {id: sg-2}]
  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 100Gi, volumeType: gp3}}]
"#,
    ))
    .expect("converts");
    let p = &c.provisioners[0];
    assert_eq!(p.spec.labels["team"], "a");
    assert_eq!(p.spec.ttl_seconds_after_empty, Some(30));
    assert!(
        p.spec.consolidation.is_none(),
        "WhenEmpty is not consolidation"
    );
    assert_eq!(p.spec.ttl_seconds_until_expired, Some(720 * 3600));
    assert_eq!(p.spec.weight, Some(10));
    assert_eq!(p.spec.limits.as_ref().map(|l| l.resources.len()), Some(1));
    assert_eq!(
        p.spec
            .disruption
            .as_ref()
            .map(|d| d.budgets[0].nodes.as_str()),
        Some("20%")
    );
    assert_eq!(
        p.spec
            .kubelet_configuration
            .as_ref()
            .and_then(|k| k.max_pods),
        Some(50)
    );
    assert!(p.to_core().is_ok(), "{:?}", p.to_core().err());
    let t = &c.node_templates[0];
    assert_eq!(t.spec.ami_family, Some(crate::AmiFamily::Bottlerocket));
    assert_eq!(
        t.spec
            .subnet_selector
            .get("karpenter.sh/discovery")
            .map(String::as_str),
        Some("c1")
    );
    assert_eq!(t.spec.security_group_selector["aws-ids"], "sg-1,sg-2");
    assert!(t.validate().is_ok(), "{:?}", t.validate().err());
    let notes: Vec<String> = c.notes.iter().map(|n| n.field.clone()).collect();
    assert!(
        notes.contains(&"spec.subnetSelectorTerms[1].tags".to_string()),
        "{notes:?}"
    );
    assert!(notes.contains(&"spec.role".to_string()), "{notes:?}");
}

#[test]
fn a_v1_node_pool_takes_kubelet_settings_from_its_node_class() {
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 720h
      terminationGracePeriod: 48h
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
    budgets: [{nodes: "10%", reasons: [Drifted]}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  amiSelectorTerms: [{alias: al2023@v20240807}]
  kubelet: {maxPods: 110, evictionHard: {memory.available: 5%}}
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: c1}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: c1}}]
"#,
    ))
    .expect("converts");
    let p = &c.provisioners[0];
    let k = p
        .spec
        .kubelet_configuration
        .as_ref()
        .expect("kubelet from the node class");
    assert_eq!(k.max_pods, Some(110));
    assert_eq!(
        p.spec
            .consolidation
            .as_ref()
            .and_then(|c| c.consolidate_after.as_deref()),
        Some("1m")
    );
    assert_eq!(p.spec.ttl_seconds_until_expired, Some(720 * 3600));
    assert_eq!(
        p.spec
            .disruption
            .as_ref()
            .map(|d| d.budgets[0].reasons.clone()),
        Some(vec!["Drifted".to_string()])
    );
    assert!(p.to_core().is_ok(), "{:?}", p.to_core().err());
    assert_eq!(
        c.node_templates[0].spec.ami_family,
        Some(crate::AmiFamily::Al2023)
    );
    let notes: Vec<String> = c.notes.iter().map(|n| n.field.clone()).collect();
    assert!(
        notes.contains(&"spec.template.spec.terminationGracePeriod".to_string()),
        "{notes:?}"
    );
    assert!(
        notes.contains(&"spec.amiSelectorTerms[0].alias".to_string()),
        "the pinned version: {notes:?}"
    );
}

#[test]
fn malformed_input_names_the_object_and_field() {
    let e = convert(
        &[json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "x"}, "spec": {"template": {"spec": {"requirements": "all"}}}})],
    )
    .expect_err("refused");
    assert_eq!(
        (e.object.as_str(), e.field.as_str()),
        ("NodePool x", "spec.template.spec.requirements")
    );
    let e = convert(&[
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {},
        "spec": {}}),
    ])
    .expect_err("refused");
    assert_eq!(e.field, "metadata.name");
    let e = convert(&[
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"},
        "spec": {"disruption": {"consolidationPolicy": "Sometimes"}}}),
    ])
    .expect_err("refused");
    assert_eq!(e.field, "spec.disruption.consolidationPolicy");
}

#[test]
fn an_unset_expire_after_keeps_karpenters_default_of_720h() {
    // Karpenter v1beta1 and v1 expire nodes after 720h unless told otherwise; "Never" opts
    // out. joiner's own default is never, so the converted Provisioner says it.
    for (version, at) in [
        ("v1beta1", "spec.disruption.expireAfter"),
        ("v1", "spec.template.spec.expireAfter"),
    ] {
        let c = convert(&yaml(&format!(
            "apiVersion: karpenter.sh/{version}\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {{name: nc}}\n"
        )))
        .expect("converts");
        assert_eq!(
            c.provisioners[0].spec.ttl_seconds_until_expired,
            Some(2_592_000),
            "{version}"
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.field == at && n.message.contains("720h")),
            "{version}: {:?}",
            c.notes
        );
    }
    let never = convert(&yaml(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  template:\n    spec:\n      expireAfter: Never\n      requirements: []\n      nodeClassRef: {name: nc}\n",
    ))
    .expect("converts");
    assert_eq!(never.provisioners[0].spec.ttl_seconds_until_expired, None);
    assert!(!never.notes.iter().any(|n| n.field.ends_with("expireAfter")));
}
