//! Parsing of YAML manifests and every validation error.

use joiner_core::{labels, Effect};

use crate::node_template::{AmiFamily, NodeTemplate};
use crate::provisioner::Provisioner;
use crate::ApiError;

const GPU: &str = r#"
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata:
  name: gpu
spec:
  weight: 10
  requirements:
    - key: karpenter.sh/capacity-type
      operator: In
      values: ["spot", "on-demand"]
    - key: karpenter.k8s.aws/instance-gpu-count
      operator: Gt
      values: ["0"]
    - key: failure-domain.beta.kubernetes.io/zone
      operator: In
      values: ["us-east-1a"]
  labels:
    team: ml
  taints:
    - key: nvidia.com/gpu
      effect: NoSchedule
  startupTaints:
    - key: example.com/agent
      value: starting
      effect: NoExecute
  limits:
    resources:
      cpu: 1000
      memory: 1000Gi
      nvidia.com/gpu: 8
  providerRef:
    name: default
  consolidation:
    enabled: true
  ttlSecondsUntilExpired: 2592000
  kubeletConfiguration:
    maxPods: 110
    clusterDNS: ["10.0.0.10"]
    systemReserved:
      cpu: 100m
      memory: 100Mi
    evictionHard:
      memory.available: 5%
    evictionSoft:
      nodefs.available: 15%
    evictionSoftGracePeriod:
      nodefs.available: 1m30s
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80
    cpuCFSQuota: true
  disruption:
    budgets:
      - nodes: "10%"
      - nodes: "0"
        reasons: [Underutilized]
        schedule: "0 9 * * mon-fri"
        duration: 8h
  warmPool:
    size: 2
    instanceTypes: [m6i.large, m6a.large, m5.large]
    zones: [us-east-1a, us-east-1b]
    state: Stopped
    prePullImages: [public.ecr.aws/nginx/nginx:1.27]
    reuseOnScaleIn: true
    maxPricePremium: "25%"
"#;

fn provisioner(yaml: &str) -> Provisioner {
    serde_yaml::from_str(yaml).unwrap()
}

/// A minimal valid Provisioner with `extra` appended under `spec:` (indented two spaces).
fn with_spec(extra: &str) -> Provisioner {
    let yaml = format!(
        "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata:\n  name: gpu\nspec:\n{extra}"
    );
    provisioner(&yaml)
}

fn err(p: &Provisioner) -> ApiError {
    p.to_core().expect_err("should be rejected")
}

#[test]
fn parses_and_converts_a_full_provisioner() {
    let p = provisioner(GPU);
    assert_eq!(
        p.spec.kubelet_configuration.as_ref().unwrap().cluster_dns,
        ["10.0.0.10"]
    );
    assert_eq!(p.spec.disruption.as_ref().unwrap().budgets.len(), 2);
    assert!(p.consolidation_enabled());
    let c = p.to_core().unwrap();
    assert_eq!(c.name, "gpu");
    assert_eq!(c.weight, 10);
    assert_eq!(c.limits.cpu, Some(1_000_000));
    assert_eq!(c.limits.memory, Some(1000 << 30));
    assert_eq!(c.kubelet.max_pods, Some(110));
    // The settings that change allocatable are carried to the simulation.
    assert_eq!(c.kubelet.system_reserved.cpu, Some(100));
    assert_eq!(c.kubelet.system_reserved.memory, Some(100 << 20));
    assert_eq!(
        c.kubelet.kube_reserved,
        joiner_core::kubelet::Reserved::default()
    );
    assert_eq!(
        c.kubelet.eviction_memory,
        vec![joiner_core::kubelet::Threshold::Percent(5.0)]
    );
    assert_eq!(
        c.kubelet.eviction_nodefs,
        vec![joiner_core::kubelet::Threshold::Percent(15.0)]
    );
    assert_eq!(c.node_template.as_deref(), Some("default"));
    assert!(
        c.requirements
            .get(labels::ZONE)
            .unwrap()
            .allows("us-east-1a"),
        "beta key normalized"
    );
    assert!(c
        .requirements
        .get("karpenter.k8s.aws/instance-gpu-count")
        .unwrap()
        .allows("1"));
    assert_eq!(c.taints[0].effect, Effect::NoSchedule);
    assert_eq!(c.taints[0].value, "");
    assert_eq!(c.startup_taints[0].value, "starting");
    assert_eq!(c.labels["team"], "ml");
}

#[test]
fn minimal_provisioner_parses_with_defaults() {
    let p = provisioner(
        "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata:\n  name: default\nspec: {}\n",
    );
    let c = p.to_core().unwrap();
    assert_eq!(c.weight, 0);
    assert!(c.requirements.is_empty());
    assert_eq!(c.limits, joiner_core::Limits::default());
    assert_eq!(c.kubelet.max_pods, None);
    assert!(!p.consolidation_enabled());
}

#[test]
fn round_trips_through_json() {
    let p = provisioner(GPU);
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(
        json["spec"]["kubeletConfiguration"]["clusterDNS"][0],
        "10.0.0.10"
    );
    assert_eq!(json["spec"]["ttlSecondsUntilExpired"], 2592000);
    let back: Provisioner = serde_json::from_value(json).unwrap();
    assert_eq!(back.spec, p.spec);
}

#[test]
fn in_without_values_names_object_and_field() {
    let p = with_spec(
        "  requirements:\n    - {key: a, operator: Exists}\n    - {key: b, operator: Exists}\n    - {key: c, operator: In}\n",
    );
    let e = err(&p);
    assert_eq!(
        e.to_string(),
        r#"Provisioner "gpu": spec.requirements[2].values: operator In needs at least one value"#
    );
    assert_eq!(e.field(), "spec.requirements[2].values");
    assert_eq!(e.reason(), "operator In needs at least one value");
}

#[test]
fn unknown_operator() {
    let e = err(&with_spec(
        "  requirements:\n    - {key: a, operator: Equals, values: [x]}\n",
    ));
    assert_eq!(e.field(), "spec.requirements[0].operator");
    assert!(
        e.to_string().contains(r#"unknown operator "Equals""#),
        "{e}"
    );
}

#[test]
fn gt_needs_one_integer() {
    let e = err(&with_spec(
        "  requirements:\n    - {key: a, operator: Gt, values: [\"1\", \"2\"]}\n",
    ));
    assert_eq!(e.field(), "spec.requirements[0].values");
    assert!(e.reason().contains("exactly one value"), "{e}");
    let e = err(&with_spec(
        "  requirements:\n    - {key: a, operator: Lt, values: [four]}\n",
    ));
    assert!(e.reason().contains("integer"), "{e}");
}

#[test]
fn exists_takes_no_values_and_key_required() {
    let e = err(&with_spec(
        "  requirements:\n    - {key: a, operator: Exists, values: [x]}\n",
    ));
    assert_eq!(e.field(), "spec.requirements[0].values");
    let e = err(&with_spec(
        "  requirements:\n    - {key: \"\", operator: Exists}\n",
    ));
    assert_eq!(e.field(), "spec.requirements[0].key");
}

#[test]
fn restricted_and_capacity_type_requirements() {
    let e = err(&with_spec(
        "  requirements:\n    - {key: kubernetes.io/hostname, operator: In, values: [n1]}\n",
    ));
    assert_eq!(e.field(), "spec.requirements[0].key");
    let e = err(&with_spec(
        "  requirements:\n    - {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}\n",
    ));
    assert_eq!(e.field(), "spec.requirements[0].values");
    let e = err(&with_spec("  labels:\n    joiner.sh/provisioner-name: x\n"));
    assert_eq!(e.field(), r#"spec.labels["joiner.sh/provisioner-name"]"#);
    let e = err(&with_spec(
        "  labels:\n    team: ml\n  requirements:\n    - {key: team, operator: In, values: [web]}\n",
    ));
    assert_eq!(e.field(), "spec.labels.team");
}

#[test]
fn at_most_a_hundred_labels_and_requirements() {
    let labels: String = (0..101).map(|i| format!("    l{i}: v\n")).collect();
    let e = err(&with_spec(&format!("  labels:\n{labels}")));
    assert_eq!(e.field(), "spec.labels");
    assert!(e.reason().contains("at most 100"), "{e}");
    let reqs: String = (0..101)
        .map(|i| format!("    - {{key: r{i}, operator: Exists}}\n"))
        .collect();
    let e = err(&with_spec(&format!("  requirements:\n{reqs}")));
    assert_eq!(e.field(), "spec.requirements");
    let e = err(&with_spec("  labels:\n    karpenter.sh/team: a\n"));
    assert!(
        e.reason()
            .contains("in the domain karpenter.sh, reserved for Karpenter and joiner"),
        "{e}"
    );
    // The Kubernetes domains are allowed (registration puts such labels on the Node).
    let ok = with_spec("  labels:\n    node-role.kubernetes.io/worker: \"\"\n")
        .to_core()
        .expect("converts");
    assert!(ok
        .node_requirements()
        .get("node-role.kubernetes.io/worker")
        .is_some_and(|r| r.allows("")));
}

#[test]
fn weight_out_of_range() {
    for w in ["-1", "101"] {
        let e = err(&with_spec(&format!("  weight: {w}\n")));
        assert_eq!(e.field(), "spec.weight");
    }
    assert!(with_spec("  weight: 100\n").to_core().is_ok());
}

#[test]
fn bad_limit_quantity() {
    let e = err(&with_spec("  limits:\n    resources:\n      cpu: abc\n"));
    assert_eq!(
        e.to_string(),
        r#"Provisioner "gpu": spec.limits.resources.cpu: invalid quantity "abc" (expected e.g. 500m, 2, 1.5Gi, 100M)"#
    );
    assert!(matches!(e, ApiError::Quantity { .. }));
    let e = err(&with_spec(
        "  limits:\n    resources:\n      nvidia.com/gpu: lots\n",
    ));
    assert_eq!(e.field(), r#"spec.limits.resources["nvidia.com/gpu"]"#);
}

#[test]
fn bad_taints() {
    let e = err(&with_spec("  taints:\n    - {key: a, effect: NoWay}\n"));
    assert_eq!(e.field(), "spec.taints[0].effect");
    assert!(e.reason().contains("NoWay"));
    let e = err(&with_spec(
        "  startupTaints:\n    - {key: \"\", effect: NoSchedule}\n",
    ));
    assert_eq!(e.field(), "spec.startupTaints[0].key");
}

#[test]
fn requirement_values_must_be_label_values() {
    // A node launched for `team In [a/b]` could never be labelled with it.
    let e = err(&with_spec(
        "  requirements:\n    - {key: team, operator: In, values: [a/b]}\n",
    ));
    assert_eq!(e.field(), "spec.requirements[0].values");
    assert!(e.reason().contains("\"a/b\""), "{e}");
    // Core's check agrees with the API's.
    for v in ["a/b", "web", "", "-x", "x.y_z"] {
        assert_eq!(
            joiner_core::labels::is_valid_value(v),
            crate::syntax::label_value(v).is_none(),
            "{v:?}"
        );
    }
}

#[test]
fn negative_ttls_and_consolidation_conflict() {
    let e = err(&with_spec("  ttlSecondsAfterEmpty: -1\n"));
    assert_eq!(e.field(), "spec.ttlSecondsAfterEmpty");
    let e = err(&with_spec("  ttlSecondsUntilExpired: -5\n"));
    assert_eq!(e.field(), "spec.ttlSecondsUntilExpired");
    let e = err(&with_spec(
        "  ttlSecondsAfterEmpty: 30\n  consolidation: {enabled: true}\n",
    ));
    assert!(e.reason().contains("consolidation"), "{e}");
    assert!(with_spec("  ttlSecondsAfterEmpty: 30\n").to_core().is_ok());
}

#[test]
fn rebalance_action_is_notify_or_replace() {
    assert!(!with_spec("  interruption: {}\n").rebalance_replaces());
    assert!(!with_spec("  interruption: {rebalance: Notify}\n").rebalance_replaces());
    let replace = with_spec("  interruption: {rebalance: Replace}\n");
    assert!(replace.rebalance_replaces());
    assert!(replace.to_core().is_ok());
    let bad = with_spec("  interruption: {rebalance: Drain}\n");
    let e = err(&bad);
    assert_eq!(e.field(), "spec.interruption.rebalance");
    assert!(e.reason().contains("Notify or Replace"), "{e}");
    assert!(
        !bad.rebalance_replaces(),
        "an invalid value acts as the default"
    );
}

#[test]
fn kubelet_errors() {
    let cases = [
        ("maxPods: 0", "spec.kubeletConfiguration.maxPods"),
        ("podsPerCore: -2", "spec.kubeletConfiguration.podsPerCore"),
        (
            "systemReserved: {gpu: 1}",
            "spec.kubeletConfiguration.systemReserved.gpu",
        ),
        (
            "kubeReserved: {memory: lots}",
            "spec.kubeletConfiguration.kubeReserved.memory",
        ),
        (
            "evictionHard: {memory.free: 1Gi}",
            r#"spec.kubeletConfiguration.evictionHard["memory.free"]"#,
        ),
        (
            "evictionHard: {memory.available: 120%}",
            r#"spec.kubeletConfiguration.evictionHard["memory.available"]"#,
        ),
        (
            "evictionSoft: {memory.available: 1Gi}",
            r#"spec.kubeletConfiguration.evictionSoftGracePeriod["memory.available"]"#,
        ),
        (
            "imageGCHighThresholdPercent: 50\n    imageGCLowThresholdPercent: 60",
            "spec.kubeletConfiguration.imageGCLowThresholdPercent",
        ),
    ];
    for (body, field) in cases {
        let e = err(&with_spec(&format!(
            "  kubeletConfiguration:\n    {body}\n"
        )));
        assert_eq!(e.field(), field, "{body}: {e}");
    }
}

#[test]
fn budget_errors() {
    let cases = [
        ("- nodes: ten", "spec.disruption.budgets[0].nodes"),
        ("- nodes: \"150%\"", "spec.disruption.budgets[0].nodes"),
        (
            "- reasons: [Expired]",
            "spec.disruption.budgets[0].reasons[0]",
        ),
        (
            "- schedule: \"@daily\"",
            "spec.disruption.budgets[0].duration",
        ),
        ("- duration: 1h", "spec.disruption.budgets[0].schedule"),
        (
            "- {schedule: \"every day\", duration: 1h}",
            "spec.disruption.budgets[0].schedule",
        ),
        (
            "- {schedule: \"@daily\", duration: 1d}",
            "spec.disruption.budgets[0].duration",
        ),
    ];
    for (body, field) in cases {
        let e = err(&with_spec(&format!(
            "  disruption:\n    budgets:\n    {body}\n"
        )));
        assert_eq!(e.field(), field, "{body}: {e}");
    }
    let p = with_spec("  disruption:\n    budgets:\n    - {}\n");
    assert_eq!(
        p.spec.disruption.as_ref().unwrap().budgets[0].nodes,
        "10%",
        "default nodes"
    );
    assert!(p.to_core().is_ok());
}

#[test]
fn disruption_settings_are_read_for_the_planner() {
    use joiner_core::disruption::{ConsolidationPolicy, Reason};
    let p = with_spec(
        "  consolidation: {enabled: true, policy: Conservative, minPriceImprovement: \"20%\", consolidateAfter: 5m}\n  ttlSecondsUntilExpired: 86400\n  disruption:\n    budgets:\n    - {nodes: \"0\", reasons: [Underutilized], schedule: \"0 9 * * mon-fri\", duration: 8h}\n    - nodes: \"2\"\n",
    );
    let s = p.disruption_settings().expect("valid");
    assert!(s.consolidation);
    assert_eq!(s.policy, ConsolidationPolicy::Conservative);
    assert_eq!(s.score_threshold(), Some(1.0));
    assert_eq!(s.min_price_improvement, Some(0.20));
    assert_eq!(s.consolidate_after, 300);
    assert_eq!(s.expire_after, Some(86_400));
    assert_eq!(s.budgets.len(), 2);
    assert_eq!(s.budgets[0].reasons, [Reason::Underutilized]);
    assert_eq!(
        s.budgets[0].window.as_ref().map(|(_, d)| *d),
        Some(8 * 3_600)
    );
    // Defaults: Karpenter's WhenEmptyOrUnderutilized (no score gate), strictly cheaper, 30 s;
    // minScore overrides the policy; Never never.
    let d = with_spec("  consolidation: {enabled: true, consolidateAfter: Never}\n")
        .disruption_settings()
        .expect("valid");
    assert_eq!(d.policy, ConsolidationPolicy::WhenEmptyOrUnderutilized);
    assert_eq!(d.min_price_improvement, None);
    assert_eq!(d.score_threshold(), None);
    let scored = with_spec("  consolidation: {enabled: true, minScore: 0.25, policy: Balanced}\n")
        .disruption_settings()
        .expect("valid");
    assert_eq!(scored.score_threshold(), Some(0.25));
    assert_eq!(d.consolidate_after, i64::MAX);
    assert!(
        d.budgets.is_empty(),
        "no budgets: the planner's 10 % default"
    );
    for (body, field) in [
        ("{policy: Eager}", "spec.consolidation.policy"),
        ("{minScore: -1}", "spec.consolidation.minScore"),
        (
            "{minPriceImprovement: \"0.1\"}",
            "spec.consolidation.minPriceImprovement",
        ),
        (
            "{minPriceImprovement: \"150%\"}",
            "spec.consolidation.minPriceImprovement",
        ),
        (
            "{consolidateAfter: soon}",
            "spec.consolidation.consolidateAfter",
        ),
    ] {
        let e = err(&with_spec(&format!("  consolidation: {body}\n")));
        assert_eq!(e.field(), field, "{body}: {e}");
    }
}

#[test]
fn warm_pool_and_provider_ref_errors() {
    for (body, field) in [
        ("{size: -1}", "spec.warmPool.size"),
        ("{size: lots}", "spec.warmPool.size"),
        ("{size: 3, maxSize: 2}", "spec.warmPool.maxSize"),
        ("{size: auto, maxSize: 5000}", "spec.warmPool.maxSize"),
        ("{state: Frozen}", "spec.warmPool.state"),
        ("{maxPricePremium: \"25\"}", "spec.warmPool.maxPricePremium"),
        ("{instanceTypes: [large]}", "spec.warmPool.instanceTypes[0]"),
        ("{zones: [\"us east\"]}", "spec.warmPool.zones[0]"),
        (
            "{prePullImages: [\"nginx; rm -rf /\"]}",
            "spec.warmPool.prePullImages[0]",
        ),
        (
            "{prePullImages: [\"app:1\", \"-bad\"]}",
            "spec.warmPool.prePullImages[1]",
        ),
    ] {
        let e = err(&with_spec(&format!("  warmPool: {body}\n")));
        assert_eq!(e.field(), field, "{body}: {e}");
    }
    // `auto` and a count both read.
    for ok in ["{size: auto, maxSize: 8}", "{size: 3}", "{size: 0}"] {
        let p = with_spec(&format!("  warmPool: {ok}\n"));
        assert!(p.to_core().is_ok(), "{ok}: {:?}", p.to_core().err());
    }
    let e = err(&with_spec("  providerRef: {name: \"\"}\n"));
    assert_eq!(e.field(), "spec.providerRef.name");
    let e = err(&with_spec("  providerRef: {name: x, kind: ConfigMap}\n"));
    assert_eq!(e.field(), "spec.providerRef.kind");
}

#[test]
fn name_is_required() {
    let p =
        provisioner("apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {}\nspec: {}\n");
    assert_eq!(
        err(&p).to_string(),
        r#"Provisioner "": metadata.name: a name is required"#
    );
}

const TEMPLATE: &str = r#"
apiVersion: joiner.sh/v1alpha1
kind: NodeTemplate
metadata:
  name: default
spec:
  subnetSelector:
    karpenter.sh/discovery: demo
  securityGroupSelector:
    karpenter.sh/discovery: demo
  amiFamily: Bottlerocket
  instanceProfile: KarpenterNodeInstanceProfile
  userData: |
    [settings.kubernetes]
    max-pods = 110
  tags:
    team: ml
  metadataOptions:
    httpPutResponseHopLimit: 2
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs:
        volumeSize: 100Gi
        volumeType: gp3
        iops: 4000
        throughput: 250
        encrypted: true
        kmsKeyID: arn:aws:kms:us-east-1:111122223333:key/abc
        snapshotID: snap-1
        deleteOnTermination: true
  detailedMonitoring: true
"#;

fn template(yaml: &str) -> NodeTemplate {
    serde_yaml::from_str(yaml).unwrap()
}

fn with_template_spec(extra: &str) -> NodeTemplate {
    template(&format!(
        "apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata:\n  name: default\nspec:\n  subnetSelector: {{a: b}}\n  securityGroupSelector: {{a: b}}\n{extra}"
    ))
}

#[test]
fn parses_a_full_node_template() {
    let t = template(TEMPLATE);
    t.validate().unwrap();
    assert_eq!(t.ami_family(), AmiFamily::Bottlerocket);
    let m = &t.spec.metadata_options;
    assert_eq!(m.http_put_response_hop_limit, 2);
    assert_eq!(
        m.http_tokens, "required",
        "unset fields keep their defaults"
    );
    assert_eq!(m.http_endpoint, "enabled");
    assert_eq!(m.http_protocol_ipv6, "disabled");
    let ebs = t.spec.block_device_mappings[0].ebs.as_ref().unwrap();
    assert_eq!(ebs.volume_size.as_ref().unwrap().0, "100Gi");
    assert_eq!(
        ebs.kms_key_id.as_deref(),
        Some("arn:aws:kms:us-east-1:111122223333:key/abc")
    );
    assert_eq!(ebs.snapshot_id.as_deref(), Some("snap-1"));
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(
        json["spec"]["blockDeviceMappings"][0]["ebs"]["kmsKeyID"],
        "arn:aws:kms:us-east-1:111122223333:key/abc"
    );
    assert_eq!(
        json["spec"]["metadataOptions"]["httpProtocolIPv6"],
        "disabled"
    );
}

#[test]
fn minimal_node_template_requires_imdsv2() {
    let t = with_template_spec("");
    t.validate().unwrap();
    assert_eq!(t.ami_family(), AmiFamily::Al2023);
    assert_eq!(t.spec.metadata_options, crate::MetadataOptions::default());
    assert_eq!(t.spec.metadata_options.http_tokens, "required");
    assert_eq!(t.spec.metadata_options.http_put_response_hop_limit, 1);
}

#[test]
fn ami_family_spellings() {
    for (s, f) in [
        ("AL2", AmiFamily::Al2),
        ("AL2023", AmiFamily::Al2023),
        ("Bottlerocket", AmiFamily::Bottlerocket),
        ("Custom", AmiFamily::Custom),
    ] {
        let parsed: AmiFamily = serde_yaml::from_str(s).unwrap();
        assert_eq!(parsed, f);
        assert_eq!(f.as_str(), s);
    }
    assert!(serde_yaml::from_str::<AmiFamily>("Ubuntu").is_err());
}

#[test]
fn node_template_errors() {
    let t = template("apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {name: x}\nspec:\n  securityGroupSelector: {a: b}\n");
    assert_eq!(
        t.validate().unwrap_err().to_string(),
        r#"NodeTemplate "x": spec.subnetSelector: at least one tag or aws-ids entry is required"#
    );
    let cases = [
        ("  amiFamily: Custom\n", "spec.amiSelector"),
        ("  metadataOptions: {httpTokens: sometimes}\n", "spec.metadataOptions.httpTokens"),
        ("  metadataOptions: {httpEndpoint: on}\n", "spec.metadataOptions.httpEndpoint"),
        (
            "  metadataOptions: {httpPutResponseHopLimit: 0}\n",
            "spec.metadataOptions.httpPutResponseHopLimit",
        ),
        ("  blockDeviceMappings: [{deviceName: \"\"}]\n", "spec.blockDeviceMappings[0].deviceName"),
        (
            "  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeType: gp9}}]\n",
            "spec.blockDeviceMappings[0].ebs.volumeType",
        ),
        (
            "  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: big}}]\n",
            "spec.blockDeviceMappings[0].ebs.volumeSize",
        ),
        (
            "  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 100Ti}}]\n",
            "spec.blockDeviceMappings[0].ebs.volumeSize",
        ),
        (
            "  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeType: gp2, iops: 3000}}]\n",
            "spec.blockDeviceMappings[0].ebs.iops",
        ),
        (
            "  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeType: io2, throughput: 300}}]\n",
            "spec.blockDeviceMappings[0].ebs.throughput",
        ),
    ];
    for (body, field) in cases {
        let e = with_template_spec(body).validate().unwrap_err();
        assert_eq!(e.field(), field, "{body}: {e}");
    }
}

#[test]
fn node_template_tags_cannot_claim_ownership() {
    // Another cluster's tag would make that cluster's joiner own (and collect) these nodes; a
    // warm-pool tag would pass the warm-pool guards.
    for key in [
        "kubernetes.io/cluster/other",
        "Kubernetes.io/Cluster/other",
        "joiner.sh/warm-pool",
        "joiner.sh/provisioner-name",
        "karpenter.sh/nodepool",
        "karpenter.k8s.aws/ec2nodeclass",
        "eks:eks-cluster-name",
    ] {
        let e = with_template_spec(&format!("  tags: {{{key:?}: owned}}\n"))
            .validate()
            .unwrap_err();
        assert_eq!(e.field(), format!("spec.tags[{key:?}]"), "{e}");
        assert!(
            e.to_string().contains(&format!("tag {key} is reserved")),
            "{e}"
        );
    }
    with_template_spec(
        "  tags: {team: ml, Name: web, \"kubernetes.io/role/internal-elb\": \"1\"}\n",
    )
    .validate()
    .unwrap();
    let long = "v".repeat(257);
    let e = with_template_spec(&format!("  tags: {{team: {long}}}\n"))
        .validate()
        .unwrap_err();
    assert_eq!(e.field(), "spec.tags.team", "{e}");
}

#[test]
fn node_claim_parses() {
    let yaml = r#"
apiVersion: joiner.sh/v1alpha1
kind: NodeClaim
metadata: {name: default-abc12}
spec:
  provisionerName: default
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m6i.large]}
  resources:
    requests: {cpu: 1500m, memory: 2Gi, pods: 3}
  nodeTemplateRef: {name: default}
status:
  instanceID: i-0123
  providerID: aws:///us-east-1a/i-0123
  instanceType: m5.large
  zone: us-east-1a
  capacityType: on-demand
  pricePerHour: 0.096
  conditions:
    - {type: Launched, status: "True", reason: Launched, message: "", lastTransitionTime: "2024-01-01T00:00:00Z"}
"#;
    let c: crate::NodeClaim = serde_yaml::from_str(yaml).unwrap();
    assert_eq!(c.name(), "default-abc12");
    assert!(c.is_launched());
    assert!(!c.is_registered());
    assert!(!c.is_initialized());
    let s = c.status.as_ref().unwrap();
    assert_eq!(s.instance_id.as_deref(), Some("i-0123"));
    assert_eq!(s.price_per_hour, Some(0.096));
    assert_eq!(c.spec.resources.requests["cpu"].0, "1500m");
}

#[test]
fn crds_generate() {
    use kube::CustomResourceExt;
    for crd in [
        Provisioner::crd(),
        NodeTemplate::crd(),
        crate::NodeClaim::crd(),
    ] {
        assert_eq!(crd.spec.group, "joiner.sh");
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
    }
    assert_eq!(Provisioner::crd_name(), "provisioners.joiner.sh");
}

#[test]
fn the_ephemeral_volume_is_the_family_root_or_the_marked_one() {
    let mapping = |device: &str, size: &str, root: &str| {
        format!("    - deviceName: {device}\n      ebs: {{volumeSize: {size}}}\n{root}")
    };
    let with = |family: &str, mappings: &[String]| {
        with_template_spec(&format!(
            "  amiFamily: {family}\n  blockDeviceMappings:\n{}",
            mappings.concat()
        ))
        .ephemeral_volume_bytes()
    };
    const GIB: i64 = 1 << 30;
    // No mappings of its own: the family default stays with the catalog.
    assert_eq!(with_template_spec("").ephemeral_volume_bytes(), None);
    assert_eq!(
        with("AL2023", &[mapping("/dev/xvda", "100Gi", "")]),
        Some(100 * GIB)
    );
    // Bottlerocket keeps pods' storage on its data volume; EC2 rounds 50G up to 47 GiB.
    assert_eq!(
        with(
            "Bottlerocket",
            &[
                mapping("/dev/xvda", "4Gi", ""),
                mapping("/dev/xvdb", "50G", "")
            ]
        ),
        Some(47 * GIB)
    );
    assert_eq!(
        with(
            "AL2",
            &[
                mapping("/dev/xvda", "30Gi", ""),
                mapping("/dev/xvdc", "200Gi", "      rootVolume: true\n")
            ]
        ),
        Some(200 * GIB)
    );
    // Mappings that leave the root volume out, or unsized: nothing to change.
    assert_eq!(with("AL2023", &[mapping("/dev/xvdb", "80Gi", "")]), None);
}
