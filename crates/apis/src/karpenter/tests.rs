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

/// A Provisioner's requirements as `key operator ["values"]` lines.
fn requirement_lines(p: &crate::Provisioner) -> Vec<String> {
    p.spec
        .requirements
        .iter()
        .map(|r| format!("{} {} {:?}", r.key, r.operator, r.values))
        .collect()
}

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
    // The three given, then the v1alpha5 webhook's defaults the seed did not override (an
    // instance family is named, so no category or generation default).
    let reqs = requirement_lines(p);
    assert_eq!(
        reqs[3..],
        [
            "kubernetes.io/os In [\"linux\"]",
            "kubernetes.io/arch In [\"amd64\"]",
            "karpenter.sh/capacity-type In [\"on-demand\"]"
        ],
        "{reqs:?}"
    );
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
    // Karpenter's consolidation makes any move that saves: the same-named joiner policy.
    assert_eq!(
        p.spec
            .consolidation
            .as_ref()
            .and_then(|c| c.policy.as_deref()),
        Some("WhenEmptyOrUnderutilized")
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
            "spec.requirements",
            "spec.ttlSecondsAfterEmpty"
        ],
        "{:?}",
        c.notes
    );
}

#[test]
fn ttl_seconds_after_empty_stays_when_consolidation_is_off() {
    for consolidation in ["", "  consolidation: {enabled: false}\n"] {
        let text = format!(
            "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {{name: batch}}\nspec:\n  providerRef: {{name: default}}\n{consolidation}  ttlSecondsAfterEmpty: 30\n"
        );
        let c = convert(&yaml(&text)).expect("converts");
        let p = &c.provisioners[0];
        assert_eq!(
            p.spec.ttl_seconds_after_empty,
            Some(30),
            "empty nodes are still removed after 30 s ({consolidation:?})"
        );
        assert!(
            c.notes
                .iter()
                .all(|n| !n.field.contains("ttlSecondsAfterEmpty")),
            "{:?}",
            c.notes
        );
    }
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
    let settings = p.disruption_settings().expect("settings");
    assert_eq!(
        settings.policy,
        joiner_core::disruption::ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(
        settings.score_threshold(),
        None,
        "no score gate, as Karpenter"
    );
    assert_eq!(settings.min_price_improvement, None, "strictly cheaper");
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
fn a_node_pool_naming_another_providers_node_class_is_refused() {
    for (key, value) in [
        ("group", "karpenter.azure.com"),
        ("kind", "AKSNodeClass"),
        ("apiVersion", "karpenter.azure.com/v1alpha2"),
    ] {
        let e = convert(
            &[json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "x"},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {key: value, "name": "default"}}}}})],
        )
        .expect_err("refused");
        assert_eq!(
            (e.object.as_str(), e.field.as_str()),
            (
                "NodePool x",
                format!("spec.template.spec.nodeClassRef.{key}").as_str()
            )
        );
        assert!(e.reason.contains(value), "{e}");
    }
    // Karpenter's own references convert.
    for class_ref in [
        json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}),
        json!({"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "default"}),
    ] {
        convert(
            &[json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "x"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": class_ref}}}})],
        )
        .expect("converts");
    }
}

#[test]
fn a_second_ami_term_is_noted_by_its_own_fields() {
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: nc}
spec:
  amiFamily: AL2
  role: r
  amiSelectorTerms: [{id: ami-1}, {name: "eks-*", owner: amazon, tags: {team: a}}]
  subnetSelectorTerms: [{tags: {team: a}}]
  securityGroupSelectorTerms: [{id: sg-1}]
"#,
    ))
    .expect("converts");
    let fields: Vec<&str> = c.notes.iter().map(|n| n.field.as_str()).collect();
    for field in [
        "spec.amiSelectorTerms[1].name",
        "spec.amiSelectorTerms[1].owner",
        "spec.amiSelectorTerms[1].tags.team",
    ] {
        assert!(fields.contains(&field), "{field}: {fields:?}");
    }
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

#[test]
fn v1_operators_and_reserved_capacity_convert_or_are_reported() {
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: p}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: nc}
      requirements:
        - {key: karpenter.k8s.aws/instance-generation, operator: Gte, values: ["6"]}
        - {key: karpenter.k8s.aws/instance-cpu, operator: Lte, values: ["16"]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}
  limits: {cpu: "100", nodes: "10"}
  disruption: {consolidationPolicy: Balanced}
"#,
    ))
    .expect("converts");
    let p = &c.provisioners[0];
    let reqs = requirement_lines(p);
    // Gte 6 is Gt 5, Lte 16 is Lt 17 on integers; reserved has no joiner equivalent.
    assert_eq!(
        reqs,
        [
            "karpenter.k8s.aws/instance-generation Gt [\"5\"]",
            "karpenter.k8s.aws/instance-cpu Lt [\"17\"]",
            "karpenter.sh/capacity-type In [\"on-demand\"]"
        ]
    );
    assert!(p.to_core().is_ok(), "{:?}", p.to_core().err());
    let limits = &p.spec.limits.as_ref().expect("limits").resources;
    // Karpenter's node-count limit carries over as the `nodes` limit.
    assert_eq!(limits.get("nodes").map(|q| q.0.as_str()), Some("10"));
    assert!(limits.contains_key("cpu"), "{limits:?}");
    assert_eq!(
        p.to_core().expect("converts").limits.other.get("nodes"),
        Some(&10)
    );
    let c2 = p.spec.consolidation.as_ref().expect("consolidation");
    assert_eq!(c2.enabled, Some(true));
    // v1's documented default consolidateAfter is 0s, written out (joiner's is 30s).
    assert_eq!(c2.consolidate_after.as_deref(), Some("0s"));
    // Karpenter's Balanced is joiner's Balanced: the same rule (score ≥ 0.5), no note needed.
    assert_eq!(c2.policy.as_deref(), Some("Balanced"));
    let settings = p.disruption_settings().expect("settings");
    assert_eq!(settings.score_threshold(), Some(0.5));
    let fields: Vec<&str> = c.notes.iter().map(|n| n.field.as_str()).collect();
    assert!(
        fields.contains(&"spec.template.spec.requirements[2].values"),
        "{fields:?}"
    );
    assert!(
        !fields.contains(&"spec.disruption.consolidationPolicy"),
        "{fields:?}"
    );
}

#[test]
fn a_node_pool_without_capacity_type_may_use_spot_as_in_karpenter() {
    let c = convert(&yaml(
        "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {name: nc}\n",
    ))
    .expect("converts");
    let r = &c.provisioners[0].spec.requirements;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].key, "karpenter.sh/capacity-type");
    assert_eq!(r[0].values, ["spot", "on-demand"]);
}

#[test]
fn selector_terms_are_alternatives_never_anded() {
    // Karpenter ORs terms: tags X, or subnet-1. joiner keeps the first kind and reports the
    // other, rather than requiring both (which would select nothing).
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: nc}
spec:
  amiSelectorTerms: [{alias: al2023@latest}]
  role: r
  subnetSelectorTerms: [{tags: {team: a}}, {id: subnet-1}]
  securityGroupSelectorTerms: [{id: sg-1}, {tags: {team: a}}, {id: sg-2}]
"#,
    ))
    .expect("converts");
    let t = &c.node_templates[0];
    assert_eq!(
        t.spec.subnet_selector.get("team").map(String::as_str),
        Some("a")
    );
    assert!(!t.spec.subnet_selector.contains_key("aws-ids"));
    assert_eq!(t.spec.security_group_selector["aws-ids"], "sg-1,sg-2");
    assert!(!t.spec.security_group_selector.contains_key("team"));
    let fields: Vec<&str> = c.notes.iter().map(|n| n.field.as_str()).collect();
    assert!(
        fields.contains(&"spec.subnetSelectorTerms[1].id"),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"spec.securityGroupSelectorTerms[1].tags"),
        "{fields:?}"
    );
}

#[test]
fn metadata_options_keep_what_karpenter_launched_with() {
    // v1alpha1 with only httpEndpoint set: EC2's defaults applied to the rest (tokens optional).
    let c = convert(&yaml(
        "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: t}\nspec:\n  amiFamily: AL2023\n  subnetSelector: {a: b}\n  securityGroupSelector: {a: b}\n  metadataOptions: {httpEndpoint: enabled}\n",
    ))
    .expect("converts");
    let m = &c.node_templates[0].spec.metadata_options;
    assert_eq!(m.http_tokens, "optional");
    assert_eq!(m.http_put_response_hop_limit, 1);
    // v1beta1 unset: hop limit 2, tokens required.
    let c = convert(&yaml(
        "apiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata: {name: t}\nspec:\n  amiFamily: AL2023\n  role: r\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n",
    ))
    .expect("converts");
    let m = &c.node_templates[0].spec.metadata_options;
    assert_eq!(m.http_tokens, "required");
    assert_eq!(m.http_put_response_hop_limit, 2);
    assert!(
        c.notes.iter().any(|n| n.field == "spec.metadataOptions"),
        "{:?}",
        c.notes
    );
}

#[test]
fn node_classes_joiner_has_no_image_for_are_left_out_never_emitted() {
    // Ubuntu (a family joiner does not bootstrap) and a v1 class with neither alias nor family
    // would become Custom with no amiSelector, which joiner's loader refuses: left out, their
    // NodePools skipped, each with a note. A Custom class that selects its AMI stays.
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: ubuntu}
spec: {amiFamily: Ubuntu, role: r, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: bare}
spec: {role: r, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: own}
spec: {role: r, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}], amiSelectorTerms: [{id: ami-0123456789abcdef0}]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: on-ubuntu}
spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: ubuntu}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: on-own}
spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: own}, requirements: []}}}
"#,
    ))
    .expect("converts");
    let templates: Vec<&str> = c.node_templates.iter().map(|t| t.name()).collect();
    assert_eq!(templates, ["own"]);
    let pools: Vec<&str> = c.provisioners.iter().map(|p| p.name()).collect();
    assert_eq!(pools, ["on-own"]);
    assert_eq!(c.skipped, ["on-ubuntu"]);
    for class in ["EC2NodeClass ubuntu", "EC2NodeClass bare"] {
        assert!(
            c.notes.iter().any(|n| n.object == class
                && n.message.contains("without an amiSelector")
                && n.message
                    .ends_with("not converted, and the NodePools using it are skipped")),
            "{class}: {:?}",
            c.notes
        );
    }
    assert!(c.notes.iter().any(|n| n.object == "NodePool on-ubuntu"
        && n.message
            == "EC2NodeClass ubuntu names no AMI joiner can launch (amiFamily Custom without an amiSelector); skipped"));
}

#[test]
fn an_alias_beside_an_ami_family_picks_the_family_and_says_so() {
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: both}
spec: {role: r, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}], amiFamily: AL2, amiSelectorTerms: [{alias: bottlerocket@latest}]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: same}
spec: {role: r, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}], amiFamily: AL2023, amiSelectorTerms: [{alias: al2023@latest}]}
"#,
    ))
    .expect("converts");
    let family = |name: &str| {
        c.node_templates
            .iter()
            .find(|t| t.name() == name)
            .and_then(|t| t.spec.ami_family)
    };
    assert_eq!(family("both"), Some(crate::AmiFamily::Bottlerocket));
    assert_eq!(family("same"), Some(crate::AmiFamily::Al2023));
    let on = |name: &str| {
        c.notes
            .iter()
            .filter(|n| n.object == format!("EC2NodeClass {name}") && n.field == "spec.amiFamily")
            .count()
    };
    assert_eq!(on("both"), 1, "{:?}", c.notes);
    assert_eq!(on("same"), 0, "{:?}", c.notes);
}

#[test]
fn windows_node_classes_and_their_node_pools_are_left_out_with_a_note() {
    // Karpenter's "should launch pods with different operating systems on different
    // instances": a Linux and a Windows NodePool. joiner launches the Linux one only.
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: linux}
spec: {subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}], amiSelectorTerms: [{alias: al2023@latest}]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: windows}
spec: {amiSelectorTerms: [{alias: windows2022@latest}]}
---
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: old-windows}
spec: {amiFamily: Windows2019}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: linux}
spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: linux}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: win}
spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: windows}, requirements: []}}}
"#,
    ))
    .expect("converts");
    let templates: Vec<&str> = c.node_templates.iter().map(|t| t.name()).collect();
    assert_eq!(templates, ["linux"]);
    let pools: Vec<&str> = c.provisioners.iter().map(|p| p.name()).collect();
    assert_eq!(pools, ["linux"]);
    assert_eq!(c.skipped, ["win"]);
    let said = |object: &str, field: &str| {
        c.notes
            .iter()
            .find(|n| n.object == object && n.field == field)
            .map(|n| n.message.clone())
            .unwrap_or_else(|| panic!("no note on {object} {field}: {:?}", c.notes))
    };
    assert_eq!(
        said("EC2NodeClass windows", "spec.amiSelectorTerms[0].alias"),
        "windows2022@latest: joiner launches Linux nodes only; not converted, and the NodePools using it are skipped"
    );
    assert!(said("EC2NodeClass old-windows", "spec.amiFamily").starts_with("Windows2019: "));
    assert_eq!(
        said("NodePool win", "spec.template.spec.nodeClassRef.name"),
        "EC2NodeClass windows selects windows2022@latest AMIs, which joiner does not launch; skipped"
    );
}

#[test]
fn a_windows_aws_node_template_and_its_provisioners_are_left_out_with_a_note() {
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: win}
spec: {providerRef: {name: win}}
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: win}
spec: {amiFamily: Windows2022, subnetSelector: {a: b}, securityGroupSelector: {a: b}}
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: linux}
spec: {amiFamily: AL2, subnetSelector: {a: b}, securityGroupSelector: {a: b}}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: linux}
spec: {providerRef: {name: linux}}
"#,
    ))
    .expect("converts");
    let templates: Vec<&str> = c.node_templates.iter().map(|t| t.name()).collect();
    assert_eq!(templates, ["linux"]);
    let provisioners: Vec<&str> = c.provisioners.iter().map(|p| p.name()).collect();
    assert_eq!(provisioners, ["linux"]);
    assert_eq!(c.skipped, ["win"]);
    let said = |object: &str, field: &str| {
        c.notes
            .iter()
            .find(|n| n.object == object && n.field == field)
            .map(|n| n.message.clone())
            .unwrap_or_else(|| panic!("no note on {object} {field}: {:?}", c.notes))
    };
    assert_eq!(
        said("AWSNodeTemplate win", "spec.amiFamily"),
        "Windows2022: joiner launches Linux nodes only; not converted, and the Provisioners using it are skipped"
    );
    assert_eq!(
        said("Provisioner win", "spec.providerRef.name"),
        "AWSNodeTemplate win selects Windows2022 AMIs, which joiner does not launch; skipped"
    );
}

#[test]
fn reserved_tags_are_left_out_with_a_note() {
    // Karpenter refuses some of these itself; joiner refuses all of its ownership namespaces,
    // so the converted NodeTemplate must not carry them (it would not validate).
    for (api_version, kind, selectors) in [
        (
            "karpenter.k8s.aws/v1alpha1",
            "AWSNodeTemplate",
            "subnetSelector: {a: b}\n  securityGroupSelector: {a: b}",
        ),
        (
            "karpenter.k8s.aws/v1",
            "EC2NodeClass",
            "amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]",
        ),
    ] {
        let c = convert(&yaml(&format!(
            "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: t}}\nspec:\n  {selectors}\n  tags: {{team: web, karpenter.sh/discovery: prod, kubernetes.io/cluster/other: owned}}\n"
        )))
        .expect("converts");
        let t = &c.node_templates[0];
        assert_eq!(
            t.spec.tags.keys().collect::<Vec<_>>(),
            ["team"],
            "{kind}"
        );
        t.validate().expect("the NodeTemplate written validates");
        for key in ["karpenter.sh/discovery", "kubernetes.io/cluster/other"] {
            assert!(
                c.notes
                    .iter()
                    .any(|n| n.field == "spec.tags" && n.message.contains(&format!("tag {key} is reserved"))),
                "{kind} {key}: {:?}",
                c.notes
            );
        }
    }
}

#[test]
fn a_node_class_selecting_security_groups_by_name_only_is_left_out() {
    let c = convert(&yaml(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: named}
spec:
  amiSelectorTerms: [{alias: al2023@latest}]
  role: r
  subnetSelectorTerms: [{tags: {team: a}}]
  securityGroupSelectorTerms: [{name: nodes}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: p}
spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: named}, requirements: []}}}
"#,
    ))
    .expect("converts");
    assert!(c.node_templates.is_empty(), "{:?}", c.node_templates);
    assert!(c.provisioners.is_empty());
    assert_eq!(c.skipped, ["p"]);
    assert!(
        c.notes.iter().any(|n| n.object == "EC2NodeClass named"
            && n.field == "spec.securityGroupSelectorTerms"
            && n.message.contains("no security groups")),
        "{:?}",
        c.notes
    );
}
