use std::collections::BTreeMap;

use joiner_apis::{AmiFamily, KubeletConfiguration, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

pub(super) fn bootstrap() -> NodeBootstrap {
    NodeBootstrap {
        cluster: ClusterInfo {
            name: "prod".into(),
            endpoint: "https://ABC.gr7.us-east-1.eks.amazonaws.com".into(),
            ca_bundle: "Q0FCVU5ETEU=".into(),
            service_cidr: Some("10.100.0.0/16".into()),
            dns_ip: None,
        },
        max_pods: 29,
        labels: BTreeMap::from([
            ("joiner.sh/provisioner-name".into(), "default".into()),
            ("team".into(), "web".into()),
        ]),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("web".into()),
            effect: "NoSchedule".into(),
        }],
        kubelet: KubeletConfiguration {
            cluster_dns: vec!["10.100.0.10".into()],
            system_reserved: BTreeMap::from([("cpu".into(), Quantity("100m".into()))]),
            eviction_hard: BTreeMap::from([("memory.available".into(), "5%".into())]),
            cpu_cfs_quota: Some(false),
            ..Default::default()
        },
        container_runtime: None,
        warm_pool: None,
        pre_pull_images: Vec::new(),
        al2_bootstrap_script: AL2_BOOTSTRAP_SCRIPT.into(),
    }
}

fn render_ok(family: AmiFamily, user: Option<&str>, b: &NodeBootstrap) -> String {
    render(family, "nt", user, b).unwrap().decoded
}

#[test]
fn al2023_node_config_parses_back() {
    let b = bootstrap();
    let doc = render_ok(AmiFamily::Al2023, None, &b);
    let parts = mime::user_parts("nt", &doc).unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].content_type(), mime::NODE_CONFIG);
    let v: serde_yaml::Value = serde_yaml::from_str(&parts[0].body).unwrap();
    assert_eq!(v["apiVersion"], "node.eks.aws/v1alpha1");
    assert_eq!(v["kind"], "NodeConfig");
    let cluster = &v["spec"]["cluster"];
    assert_eq!(cluster["name"], "prod");
    assert_eq!(cluster["apiServerEndpoint"], b.cluster.endpoint.as_str());
    assert_eq!(cluster["certificateAuthority"], "Q0FCVU5ETEU=");
    assert_eq!(cluster["cidr"], "10.100.0.0/16");
    let config = &v["spec"]["kubelet"]["config"];
    assert_eq!(config["maxPods"], 29);
    assert_eq!(config["clusterDNS"][0], "10.100.0.10");
    assert_eq!(config["systemReserved"]["cpu"], "100m");
    assert_eq!(config["evictionHard"]["memory.available"], "5%");
    assert_eq!(config["cpuCFSQuota"], false);
    let flags: Vec<&str> = v["spec"]["kubelet"]["flags"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(
        flags,
        [
            "--node-labels=joiner.sh/provisioner-name=default,team=web",
            "--register-with-taints=dedicated=web:NoSchedule"
        ]
    );
}

#[test]
fn al2023_needs_the_service_cidr() {
    let mut b = bootstrap();
    b.cluster.service_cidr = None;
    let err = render(AmiFamily::Al2023, "nt", None, &b).unwrap_err();
    assert_eq!(
        err,
        UserDataError::MissingServiceCidr {
            node_template: "nt".into()
        }
    );
}

#[test]
fn al2023_user_parts_come_first() {
    let doc = render_ok(
        AmiFamily::Al2023,
        Some("#!/bin/bash\necho pre\n"),
        &bootstrap(),
    );
    let parts = mime::user_parts("nt", &doc).unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].body, "#!/bin/bash\necho pre\n");
    assert_eq!(parts[1].content_type(), mime::NODE_CONFIG);
}

#[test]
fn bottlerocket_merges_user_toml_and_owns_the_cluster_keys() {
    let user = r#"
[settings.kubernetes]
cluster-name = "someone-else"
api-server = "https://wrong"
max-pods = 50

[settings.kubernetes.node-labels]
team = "data"
extra = "yes"

[settings.host-containers.admin]
enabled = true
"#;
    let doc = render_ok(AmiFamily::Bottlerocket, Some(user), &bootstrap());
    let t: toml::Table = toml::from_str(&doc).unwrap();
    let k8s = t["settings"]["kubernetes"].as_table().unwrap();
    assert_eq!(k8s["cluster-name"].as_str(), Some("prod"));
    assert_eq!(
        k8s["api-server"].as_str(),
        Some("https://ABC.gr7.us-east-1.eks.amazonaws.com")
    );
    assert_eq!(k8s["cluster-certificate"].as_str(), Some("Q0FCVU5ETEU="));
    assert_eq!(
        k8s["max-pods"].as_integer(),
        Some(50),
        "the user's key wins"
    );
    let labels = k8s["node-labels"].as_table().unwrap();
    assert_eq!(labels["team"].as_str(), Some("data"));
    assert_eq!(labels["extra"].as_str(), Some("yes"));
    assert_eq!(
        labels["joiner.sh/provisioner-name"].as_str(),
        Some("default")
    );
    let taints = k8s["node-taints"].as_table().unwrap();
    assert_eq!(
        taints["dedicated"].as_array().unwrap()[0].as_str(),
        Some("web:NoSchedule")
    );
    assert_eq!(k8s["cluster-dns-ip"].as_str(), Some("10.100.0.10"));
    assert_eq!(k8s["cpu-cfs-quota-enforced"].as_bool(), Some(false));
    assert_eq!(
        t["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
        Some(true)
    );
    assert!(!doc.contains("MIME"));
}

#[test]
fn bottlerocket_rejects_non_toml() {
    let err = render(
        AmiFamily::Bottlerocket,
        "br",
        Some("#!/bin/bash\necho hi\n"),
        &bootstrap(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("NodeTemplate \"br\": spec.userData: Bottlerocket user data must be TOML"),
        "{err}"
    );
}

#[test]
fn custom_is_untouched_and_may_be_empty() {
    let b = bootstrap();
    assert_eq!(
        render_ok(AmiFamily::Custom, Some("anything\r\n"), &b),
        "anything\r\n"
    );
    let empty = render(AmiFamily::Custom, "nt", None, &b).unwrap();
    assert_eq!((empty.decoded.as_str(), empty.base64.as_str()), ("", ""));
}

#[test]
fn too_large_user_data_names_the_template_and_size() {
    let big = format!("#!/bin/bash\n{}\n", "x".repeat(13_000));
    let err = render(AmiFamily::Al2, "big", Some(&big), &bootstrap()).unwrap_err();
    let UserDataError::TooLarge {
        node_template,
        size,
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(node_template, "big");
    assert!(*size > MAX_USER_DATA_BYTES);
    assert!(
        err.to_string()
            .contains(&format!("is {size} bytes base64-encoded")),
        "{err}"
    );
    // Just under the limit passes.
    let ok = format!("#!/bin/bash\n{}\n", "x".repeat(10_000));
    assert!(render(AmiFamily::Al2, "big", Some(&ok), &bootstrap()).is_ok());
}

#[test]
fn labels_the_kubelet_may_not_set_are_left_to_registration() {
    let p: Provisioner = serde_yaml::from_str(
        r#"
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: web}
spec:
  labels:
    node-role.kubernetes.io/web: ""
    node-restriction.kubernetes.io/team: a
    node.kubernetes.io/lifecycle: x
    team: a
"#,
    )
    .unwrap();
    let b = NodeBootstrap::for_provisioner(bootstrap().cluster, &p, 40);
    // NodeRestriction: the kubelet refuses to start with the first two in --node-labels.
    let keys: Vec<&str> = b.labels.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "joiner.sh/provisioner-name",
            "node.kubernetes.io/lifecycle",
            "team"
        ]
    );
    for family in [AmiFamily::Al2, AmiFamily::Al2023, AmiFamily::Bottlerocket] {
        let text = render(family, "nt", None, &b).unwrap().decoded;
        assert!(text.contains("node.kubernetes.io/lifecycle"), "{text}");
        assert!(!text.contains("node-role.kubernetes.io"), "{text}");
        assert!(!text.contains("node-restriction.kubernetes.io"), "{text}");
    }
}

#[test]
fn warm_pool_user_data_does_not_join_on_first_boot() {
    let mut b = bootstrap();
    b.warm_pool = Some(joiner_core::WarmState::Stopped);
    for family in [AmiFamily::Al2, AmiFamily::Al2023] {
        let doc = render_ok(family, None, &b);
        let parts = mime::user_parts("nt", &doc).unwrap();
        let script = &parts.last().unwrap().body;
        assert_eq!(parts.last().unwrap().content_type(), "text/x-shellscript");
        assert!(
            script.contains("systemctl enable joiner-join.service"),
            "{script}"
        );
        // The join command only appears inside the join script written to disk.
        let (install, _) = script.split_once("cat > /etc/joiner/join.sh").unwrap();
        assert!(!install.contains("bootstrap.sh") && !install.contains("nodeadm init"));
        assert!(
            !doc.contains(mime::NODE_CONFIG),
            "nodeadm would join on the warm boot"
        );
    }
    assert!(matches!(
        render(AmiFamily::Custom, "nt", None, &b),
        Err(UserDataError::WarmPoolUnsupported { .. })
    ));
    // Bottlerocket warms without any cluster settings, the user's included; the rest of the
    // user's TOML stays.
    let user =
        "[settings.kubernetes]\nmax-pods = 20\n[settings.host-containers.admin]\nenabled = true\n";
    let warm = render(AmiFamily::Bottlerocket, "nt", Some(user), &b)
        .expect("renders")
        .decoded;
    let parsed: toml::Table = toml::from_str(&warm).expect("toml");
    let settings = parsed["settings"].as_table().expect("settings");
    assert!(!settings.contains_key("kubernetes"), "{warm}");
    assert_eq!(
        settings["host-containers"]["admin"]["enabled"].as_bool(),
        Some(true)
    );
    let mut cold = b.clone();
    cold.warm_pool = None;
    let real = render(AmiFamily::Bottlerocket, "nt", Some(user), &cold)
        .expect("renders")
        .decoded;
    assert!(
        real.contains("[settings.kubernetes]") && real.contains("api-server"),
        "{real}"
    );
}

#[test]
fn bottlerocket_members_that_pull_open_the_admin_container_only_while_warming() {
    let mut b = bootstrap();
    b.warm_pool = Some(joiner_core::WarmState::Stopped);
    let host_containers = |doc: &str| -> Option<toml::Value> {
        let parsed: toml::Table = toml::from_str(doc).expect("toml");
        parsed["settings"].get("host-containers").cloned()
    };
    let user = "[settings.host-containers.control]\nenabled = false\n[settings.motd]\nx = 1\n";
    // Without images to pull, the warm-up leaves the admin container alone; the control
    // container (SSM's agent, through which a take applies the settings) is always on.
    let plain = render(AmiFamily::Bottlerocket, "nt", Some(user), &b)
        .expect("renders")
        .decoded;
    let plain_hc = host_containers(&plain).expect("the user's table");
    assert_eq!(plain_hc["control"]["enabled"].as_bool(), Some(true));
    assert!(plain_hc.get("admin").is_none(), "{plain}");
    // With images, the pull's way in is open during the warm-up, the user's choice aside.
    b.pre_pull_images = vec!["app:1".into()];
    let pulling = render(AmiFamily::Bottlerocket, "nt", Some(user), &b)
        .expect("renders")
        .decoded;
    let hc = host_containers(&pulling).expect("host containers");
    assert_eq!(hc["admin"]["enabled"].as_bool(), Some(true), "{pulling}");
    assert_eq!(hc["control"]["enabled"].as_bool(), Some(true), "{pulling}");
    assert!(pulling.contains("[settings.motd]"), "{pulling}");

    // Taken: Bottlerocket keeps settings across boots, so the admin container is switched
    // back off unless the user's document says otherwise.
    let mut cold = b.clone();
    cold.warm_pool = None;
    cold.pre_pull_images.clear();
    let real = render(AmiFamily::Bottlerocket, "nt", Some(user), &cold)
        .expect("renders")
        .decoded;
    let taken = super::bottlerocket::taken_member("nt", &real).expect("toml");
    let hc = host_containers(&taken).expect("host containers");
    assert_eq!(hc["admin"]["enabled"].as_bool(), Some(false), "{taken}");
    assert_eq!(
        hc["control"]["enabled"].as_bool(),
        Some(true),
        "switching SSM's agent off would cut the apply off: {taken}"
    );
    let parsed: toml::Table = toml::from_str(&taken).expect("toml");
    assert_eq!(
        parsed["settings"]["kubernetes"]["cluster-name"].as_str(),
        Some("prod")
    );
    let with_admin = "[settings.host-containers.admin]\nenabled = true\n";
    let real = render(AmiFamily::Bottlerocket, "nt", Some(with_admin), &cold)
        .expect("renders")
        .decoded;
    let taken = super::bottlerocket::taken_member("nt", &real).expect("toml");
    assert_eq!(
        host_containers(&taken).expect("hc")["admin"]["enabled"].as_bool(),
        Some(true),
        "the user's choice stays: {taken}"
    );
    assert!(matches!(
        super::bottlerocket::taken_member("nt", "not = [toml"),
        Err(UserDataError::BottlerocketToml { .. })
    ));
}

#[test]
fn for_provisioner_adds_the_provisioner_label_and_startup_taints() {
    let p: joiner_apis::Provisioner = serde_yaml::from_str(
        r#"
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: gpu}
spec:
  labels: {team: ml}
  taints: [{key: gpu, effect: NoSchedule}]
  startupTaints: [{key: gpu, effect: NoSchedule}, {key: agent, value: "no", effect: NoExecute}]
  kubeletConfiguration: {maxPods: 40}
"#,
    )
    .unwrap();
    let b = NodeBootstrap::for_provisioner(ClusterInfo::default(), &p, 40);
    assert_eq!(
        b.labels,
        BTreeMap::from([
            ("joiner.sh/provisioner-name".to_string(), "gpu".to_string()),
            ("team".to_string(), "ml".to_string())
        ])
    );
    let taints: Vec<String> = b.taints.iter().map(kubelet::taint_string).collect();
    assert_eq!(
        taints,
        [
            "gpu:NoSchedule",
            "agent=no:NoExecute",
            "joiner.sh/unregistered:NoSchedule"
        ]
    );
}

#[test]
fn bottlerocket_user_toml_cannot_replace_the_kubernetes_table() {
    let err = render(
        AmiFamily::Bottlerocket,
        "br",
        Some("[settings]\nkubernetes = \"none\"\n"),
        &bootstrap(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("settings.kubernetes must be tables"),
        "{err}"
    );
}
