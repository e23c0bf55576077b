use super::*;
use crate::allocatable::Arch;
use crate::ami::AmiVariant;

fn node_template(yaml_spec: &str) -> NodeTemplate {
    serde_yaml::from_str(&format!(
        "apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {{name: default}}\nspec:\n  subnetSelector: {{team: web}}\n  securityGroupSelector: {{team: web}}\n{yaml_spec}"
    ))
    .unwrap()
}

fn provisioner(yaml_spec: &str) -> Provisioner {
    serde_yaml::from_str(&format!(
        "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {{name: web}}\nspec:\n  providerRef: {{name: default}}\n{yaml_spec}"
    ))
    .unwrap()
}

fn cluster() -> ClusterInfo {
    ClusterInfo {
        name: "prod".into(),
        endpoint: "https://example.eks.amazonaws.com".into(),
        ca_bundle: "Q0E=".into(),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: None,
    }
}

fn m5_large() -> InstanceFacts {
    InstanceFacts::from_eni_limits("m5.large", 2, Arch::Amd64, AmiVariant::Standard, 3, 10)
}

fn try_resolve(
    nt: &NodeTemplate,
    prov: &Provisioner,
) -> Result<ResolvedLaunchTemplate, LaunchTemplateError> {
    let sgs = vec!["sg-2".to_string(), "sg-1".to_string()];
    build(&LaunchContext {
        cluster: &cluster(),
        node_template: nt,
        provisioner: prov,
        instance: &m5_large(),
        image_id: "ami-123",
        security_group_ids: &sgs,
        default_instance_profile: Some("joiner-node"),
        warm_pool: None,
    })
}

fn resolve(nt: &NodeTemplate, prov: &Provisioner) -> ResolvedLaunchTemplate {
    try_resolve(nt, prov).unwrap()
}

#[test]
fn defaults_are_the_secure_ones() {
    let lt = resolve(&node_template(""), &provisioner(""));
    let s = &lt.spec;
    assert_eq!(s.max_pods, 29);
    assert_eq!(
        s.metadata_options,
        MetadataOptionsSpec {
            http_endpoint: "enabled".into(),
            http_protocol_ipv6: "disabled".into(),
            http_put_response_hop_limit: 1,
            http_tokens: "required".into(),
            instance_metadata_tags: "disabled".into(),
        }
    );
    assert_eq!(
        s.block_device_mappings,
        vec![BlockDeviceSpec::default_gp3("/dev/xvda", 20)]
    );
    assert_eq!(s.security_group_ids, ["sg-1", "sg-2"]);
    assert_eq!(s.instance_profile.as_deref(), Some("joiner-node"));
    assert_eq!(s.tags["kubernetes.io/cluster/prod"], "owned");
    assert_eq!(s.tags["joiner.sh/provisioner-name"], "web");
    assert!(!s.detailed_monitoring);
    assert!(s.name().starts_with("joiner/prod/"));
    assert_eq!(s.name().len(), "joiner/prod/".len() + 16);
}

#[test]
fn bottlerocket_gets_an_os_and_a_data_volume() {
    let lt = resolve(
        &node_template("  amiFamily: Bottlerocket\n"),
        &provisioner(""),
    );
    assert_eq!(
        lt.spec.block_device_mappings,
        vec![
            BlockDeviceSpec::default_gp3("/dev/xvda", 4),
            BlockDeviceSpec::default_gp3("/dev/xvdb", 20)
        ]
    );
}

#[test]
fn template_settings_are_taken() {
    let nt = node_template(
        "  instanceProfile: custom\n  detailedMonitoring: true\n  tags: {app: web}\n  metadataOptions: {httpPutResponseHopLimit: 2, httpTokens: optional}\n  blockDeviceMappings:\n  - deviceName: /dev/xvda\n    ebs: {volumeSize: 100G, volumeType: io2, iops: 3000, encrypted: false}\n",
    );
    let lt = resolve(
        &nt,
        &provisioner("  kubeletConfiguration: {maxPods: 110}\n"),
    );
    let s = &lt.spec;
    assert_eq!(s.max_pods, 110);
    assert!(lt.user_data.decoded.contains("maxPods: 110"));
    assert_eq!(s.instance_profile.as_deref(), Some("custom"));
    assert!(s.detailed_monitoring);
    assert_eq!(s.tags["app"], "web");
    assert_eq!(s.tags["joiner.sh/provisioner-name"], "web");
    assert_eq!(s.metadata_options.http_put_response_hop_limit, 2);
    assert_eq!(s.metadata_options.http_tokens, "optional");
    let d = &s.block_device_mappings[0];
    // 100 GB = 93.13 GiB, rounded up.
    assert_eq!(d.volume_size_gib, Some(94));
    assert_eq!(
        (d.volume_type.as_deref(), d.iops, d.encrypted),
        (Some("io2"), Some(3000), Some(false))
    );
}

#[test]
fn bad_volume_size_names_the_field() {
    let nt = node_template(
        "  blockDeviceMappings:\n  - deviceName: /dev/xvda\n  - deviceName: /dev/xvdb\n    ebs: {volumeSize: \"-5Gi\"}\n",
    );
    let err = build(&LaunchContext {
        cluster: &cluster(),
        node_template: &nt,
        provisioner: &provisioner(""),
        instance: &m5_large(),
        image_id: "ami-123",
        security_group_ids: &[],
        default_instance_profile: None,
        warm_pool: None,
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("NodeTemplate \"default\": spec.blockDeviceMappings[1].ebs.volumeSize:"),
        "{err}"
    );
}

#[test]
fn equal_settings_give_equal_names() {
    let a = resolve(&node_template(""), &provisioner("  labels: {team: web}\n"));
    let b = resolve(&node_template(""), &provisioner("  labels: {team: web}\n"));
    assert_eq!(a.spec.name(), b.spec.name());
    assert_eq!(a.user_data, b.user_data);
}

#[test]
fn every_setting_changes_the_name() {
    let base = resolve(&node_template(""), &provisioner("")).spec;
    type Change = Box<dyn Fn(&mut LaunchTemplateSpec)>;
    let changes: Vec<(&str, Change)> = vec![
        ("cluster", Box::new(|s| s.cluster_name.push('x'))),
        ("ami", Box::new(|s| s.image_id = "ami-456".into())),
        ("profile", Box::new(|s| s.instance_profile = None)),
        (
            "sgs",
            Box::new(|s| s.security_group_ids.push("sg-3".into())),
        ),
        ("user data", Box::new(|s| s.user_data.push('A'))),
        (
            "disk size",
            Box::new(|s| s.block_device_mappings[0].volume_size_gib = Some(21)),
        ),
        (
            "disk type",
            Box::new(|s| s.block_device_mappings[0].volume_type = Some("gp2".into())),
        ),
        (
            "hop limit",
            Box::new(|s| s.metadata_options.http_put_response_hop_limit = 2),
        ),
        (
            "tokens",
            Box::new(|s| s.metadata_options.http_tokens = "optional".into()),
        ),
        ("monitoring", Box::new(|s| s.detailed_monitoring = true)),
        (
            "tags",
            Box::new(|s| {
                s.tags.insert("a".into(), "b".into());
            }),
        ),
        ("max pods", Box::new(|s| s.max_pods += 1)),
        ("warm pool", Box::new(|s| s.warm_pool = true)),
        ("hibernation", Box::new(|s| s.hibernation = true)),
    ];
    let mut names = std::collections::BTreeSet::from([base.name()]);
    for (what, change) in changes {
        let mut s = base.clone();
        change(&mut s);
        assert!(names.insert(s.name()), "changing {what} kept a known name");
    }
}

#[test]
fn labels_taints_and_kubelet_settings_reach_the_name_through_user_data() {
    let base = resolve(&node_template(""), &provisioner("")).spec.name();
    for p in [
        "  labels: {team: web}\n",
        "  taints: [{key: a, effect: NoSchedule}]\n",
        "  startupTaints: [{key: a, effect: NoSchedule}]\n",
        "  kubeletConfiguration: {evictionHard: {memory.available: 5%}}\n",
    ] {
        assert_ne!(
            resolve(&node_template(""), &provisioner(p)).spec.name(),
            base,
            "{p}"
        );
    }
}

#[test]
fn a_reserved_tag_never_reaches_a_launch_template() {
    // Another cluster's ownership tag would make that cluster's joiner collect this node.
    let nt = node_template("  tags: {\"kubernetes.io/cluster/other\": owned, team: web}\n");
    let err = try_resolve(&nt, &provisioner("")).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "NodeTemplate \"default\": spec.tags[\"kubernetes.io/cluster/other\"]: {}",
            joiner_apis::tag_rules::refusal("kubernetes.io/cluster/other")
        )
    );
    let ok = resolve(&node_template("  tags: {team: web}\n"), &provisioner(""));
    assert_eq!(ok.spec.tags["team"], "web");
}
