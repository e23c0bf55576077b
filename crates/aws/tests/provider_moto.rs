//! The AWS CloudProvider end to end against moto through the real SDK: discovery, AMI from an
//! SSM parameter under a test prefix, launch template, CreateFleet with the claim's tags, look-ups
//! by claim and cluster, guarded delete, and unavailable offerings in the catalog it serves.

use std::collections::BTreeMap;
use std::sync::Arc;

use joiner_apis::{NodeTemplate, Provisioner};
use joiner_aws::instances::TerminateRefusal;
use joiner_aws::testing;
use joiner_aws::unavailable::{OfferingKey, UnavailableOfferings};
use joiner_aws::{AwsClients, AwsCloudProvider, ProviderError};
use joiner_core::{CapacityType, CloudError, CloudErrorKind, CloudProvider, LaunchRequest};
use joiner_moto::{MotoServer, MotoSession};

const CLUSTER: &str = "c1";
const PREFIX: &str = "/joiner-test/service";
const K8S: &str = "1.31";

const NODE_TEMPLATE: &str = r#"
apiVersion: joiner.sh/v1alpha1
kind: NodeTemplate
metadata: {name: default}
spec:
  amiFamily: AL2023
  subnetSelector: {joiner.sh/discovery: c1}
  securityGroupSelector: {joiner.sh/discovery: c1}
  tags: {cost-center: "42"}
"#;

const PROVISIONER: &str = r#"
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: web}
spec:
  providerRef: {name: default}
"#;

const ORPHAN_PROVISIONER: &str = r#"
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: orphan}
spec:
  providerRef: {name: missing}
"#;

async fn environment(clients: &AwsClients) -> (Vec<String>, String, String) {
    let env = testing::environment(clients, CLUSTER, PREFIX, K8S)
        .await
        .expect("environment");
    (env.subnets, env.untagged_subnet, env.image_id)
}

async fn provider(moto: &MotoSession) -> (AwsClients, AwsCloudProvider, Arc<UnavailableOfferings>) {
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let nt: NodeTemplate = serde_yaml::from_str(NODE_TEMPLATE).expect("node template");
    let web: Provisioner = serde_yaml::from_str(PROVISIONER).expect("provisioner");
    let orphan: Provisioner = serde_yaml::from_str(ORPHAN_PROVISIONER).expect("provisioner");
    let (p, unavailable) = testing::provider(
        &clients,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        vec![web, orphan],
        vec![nt],
    );
    (clients, p, unavailable)
}

fn request(claim: &str, provisioner: &str, zones: &[&str]) -> LaunchRequest {
    LaunchRequest {
        claim_name: claim.into(),
        claim_uid: format!("uid-{claim}"),
        provisioner: provisioner.into(),
        capacity_type: CapacityType::OnDemand,
        // c5.large and m5.large share arch, variant and max-pods (29), so one template;
        // m5.xlarge (58 pods) gets a second one in the same fleet; the arm64 type needs another
        // AMI, which the test prefix lacks, so its group is left out.
        candidates: vec![
            ("c5.large".into(), 0.085),
            ("m5.large".into(), 0.096),
            ("m6g.xlarge".into(), 0.154),
            ("m5.xlarge".into(), 0.192),
        ],
        zones: zones.iter().map(|z| z.to_string()).collect(),
        warm_pool: None,
    }
}

async fn instance_tags(ec2: &aws_sdk_ec2::Client, id: &str) -> (BTreeMap<String, String>, String) {
    let out = ec2
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .expect("describe");
    let i = &out.reservations()[0].instances()[0];
    let tags = i
        .tags()
        .iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_string(),
                t.value().unwrap_or_default().to_string(),
            )
        })
        .collect();
    (tags, i.subnet_id().unwrap_or_default().to_string())
}

#[tokio::test]
async fn create_get_list_delete_and_the_ownership_guard() {
    let moto = MotoServer::session().expect("moto server");
    let (clients, p, _) = provider(&moto).await;
    let (tagged, untagged, image_id) = environment(&clients).await;

    let node = p
        .create(&request("claim-1", "web", &[]))
        .await
        .expect("create");
    assert!(
        ["c5.large", "m5.large", "m5.xlarge"].contains(&node.instance_type.as_str()),
        "{node:?}"
    );
    assert!(
        ["us-east-1a", "us-east-1b"].contains(&node.zone.as_str()),
        "{node:?}"
    );
    assert_eq!(node.claim_name.as_deref(), Some("claim-1"));
    assert_eq!(
        node.provider_id,
        format!("aws:///{}/{}", node.zone, node.instance_id)
    );
    let (tags, subnet) = instance_tags(&clients.ec2, &node.instance_id).await;
    assert!(tagged.contains(&subnet), "{subnet} not a tagged subnet");
    assert_ne!(subnet, untagged);
    for (k, v) in [
        ("kubernetes.io/cluster/c1", "owned"),
        ("joiner.sh/cluster", "c1"),
        ("joiner.sh/provisioner-name", "web"),
        ("joiner.sh/nodeclaim", "claim-1"),
        ("cost-center", "42"),
    ] {
        assert_eq!(
            tags.get(k).map(String::as_str),
            Some(v),
            "tag {k}: {tags:?}"
        );
    }
    let ran = clients
        .ec2
        .describe_instances()
        .instance_ids(&node.instance_id)
        .send()
        .await
        .expect("describe");
    assert_eq!(
        ran.reservations()[0].instances()[0].image_id(),
        Some(image_id.as_str()),
        "the AMI of the SSM parameter"
    );
    // The launch says what it booted, where, and with which groups (recorded on the claim
    // for drift): the NodeTemplate's groups as resolved. (moto leaves the groups of a launch
    // template off the instance, so DescribeInstances cannot be the reference here.)
    let nt: NodeTemplate = serde_yaml::from_str(NODE_TEMPLATE).expect("node template");
    let groups: Vec<String> = p
        .resolve_node_template(&nt)
        .await
        .expect("resolve")
        .security_groups
        .into_iter()
        .map(|g| g.id)
        .collect();
    assert!(!groups.is_empty());
    assert_eq!(node.image_id.as_deref(), Some(image_id.as_str()));
    assert_eq!(node.subnet_id.as_deref(), Some(subnet.as_str()));
    assert_eq!(node.security_group_ids, groups);

    let templates = clients
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("launch templates");
    let names: Vec<&str> = templates
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name())
        .filter(|n| n.starts_with("joiner/c1/"))
        .collect();
    assert_eq!(names.len(), 2, "one template per launch group: {names:?}");

    // The claim's zones are honored.
    let in_b = p
        .create(&request("claim-2", "web", &["us-east-1b"]))
        .await
        .expect("create in b");
    assert_eq!(in_b.zone, "us-east-1b");

    let got = p.get("claim-1").await.expect("get").expect("found");
    assert_eq!(got.instance_id, node.instance_id);
    assert_eq!(got.claim_name.as_deref(), Some("claim-1"));
    assert_eq!(
        (&got.image_id, &got.subnet_id),
        (&node.image_id, &node.subnet_id),
        "DescribeInstances reads back what the launch said"
    );
    assert!(p.get("claim-none").await.expect("get").is_none());

    // A foreign instance: not listed, and never terminated.
    let foreign = clients
        .ec2
        .run_instances()
        .image_id(&image_id)
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .expect("run foreign");
    let foreign_id = foreign.instances()[0]
        .instance_id()
        .expect("id")
        .to_string();
    let listed: Vec<String> = p
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|n| n.instance_id)
        .collect();
    assert!(listed.contains(&node.instance_id), "{listed:?}");
    assert!(listed.contains(&in_b.instance_id), "{listed:?}");
    assert!(!listed.contains(&foreign_id), "{listed:?}");

    let refused = p.delete(&foreign_id).await.expect_err("foreign refused");
    assert!(
        matches!(
            refused,
            ProviderError::TerminateRefused(TerminateRefusal::NotOwned { .. })
        ),
        "{refused:?}"
    );
    let state = clients
        .ec2
        .describe_instances()
        .instance_ids(&foreign_id)
        .send()
        .await
        .expect("describe foreign");
    assert_eq!(
        state.reservations()[0].instances()[0]
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str()),
        Some("running")
    );

    p.delete(&node.instance_id).await.expect("delete");
    assert!(p.get("claim-1").await.expect("get").is_none(), "terminated");
    let listed: Vec<String> = p
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|n| n.instance_id)
        .collect();
    assert_eq!(listed, vec![in_b.instance_id]);
}

#[tokio::test]
async fn missing_objects_give_errors_naming_them() {
    let moto = MotoServer::session().expect("moto server");
    let (_clients, p, _) = provider(&moto).await;

    let err = p
        .create(&request("claim-x", "orphan", &[]))
        .await
        .expect_err("no NodeTemplate");
    assert!(
        matches!(&err, ProviderError::UnknownNodeTemplate { provisioner, node_template }
            if provisioner == "orphan" && node_template == "missing"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "Provisioner `orphan`: spec.providerRef.name: NodeTemplate `missing` not found"
    );
    let err = p
        .create(&request("claim-y", "nobody", &[]))
        .await
        .expect_err("no Provisioner");
    assert_eq!(err.to_string(), "Provisioner `nobody` not found");
    assert_ne!(err.kind(), CloudErrorKind::InsufficientCapacity);
}

#[tokio::test]
async fn instance_types_apply_marked_unavailable_offerings() {
    let moto = MotoServer::session().expect("moto server");
    let (_clients, p, unavailable) = provider(&moto).await;

    let before = p.instance_types("web").await.expect("types");
    let offering = |types: &[joiner_core::InstanceType], zone: &str| {
        types
            .iter()
            .find(|t| t.name == "c5.large")
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| o.zone == zone && o.capacity_type == CapacityType::OnDemand)
            })
            .map(|o| o.available)
    };
    assert_eq!(offering(&before, "us-east-1a"), Some(true));

    unavailable.mark(OfferingKey::new(
        "c5.large",
        "us-east-1a",
        CapacityType::OnDemand,
    ));
    let after = p.instance_types("web").await.expect("types");
    assert_eq!(offering(&after, "us-east-1a"), Some(false));
    assert_eq!(offering(&after, "us-east-1b"), Some(true));
    assert!(matches!(
        p.instance_types("nobody").await,
        Err(ProviderError::UnknownProvisioner { .. })
    ));
}

/// The launch templates moto holds, by name.
async fn template_names(clients: &AwsClients) -> Vec<String> {
    let out = clients
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("describe");
    let mut names: Vec<String> = out
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_template_deleted_under_the_cache_is_made_again_and_the_launch_succeeds() {
    let moto = MotoServer::session().expect("moto server");
    let (clients, p, _) = provider(&moto).await;
    environment(&clients).await;
    let first = p
        .create(&request("web-1", "web", &[]))
        .await
        .expect("first launch");
    let made = template_names(&clients).await;
    assert!(!made.is_empty());
    // Someone deletes every template; the provider's cache still names them.
    for name in &made {
        clients
            .ec2
            .delete_launch_template()
            .launch_template_name(name)
            .send()
            .await
            .expect("delete");
    }
    assert!(template_names(&clients).await.is_empty());
    let second = p
        .create(&request("web-2", "web", &[]))
        .await
        .expect("the launch recovers: the template is made again");
    assert_ne!(first.instance_id, second.instance_id);
    assert_eq!(
        template_names(&clients).await,
        made,
        "the same settings, the same names"
    );
}

#[tokio::test]
async fn stale_templates_are_deleted_and_used_or_foreign_ones_kept() {
    let moto = MotoServer::session().expect("moto server");
    let (clients, p, _) = provider(&moto).await;
    let (_, _, image_id) = environment(&clients).await;
    p.create(&request("web-1", "web", &[]))
        .await
        .expect("launch");
    let used = template_names(&clients).await;
    // A template another tool made with the cluster tag only: never joiner's to delete.
    clients
        .ec2
        .create_launch_template()
        .launch_template_name("node-group-template")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(&image_id)
                .build(),
        )
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::LaunchTemplate)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("kubernetes.io/cluster/c1")
                        .value("owned")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("foreign template");
    // Just used: nothing is stale.
    assert!(p
        .collect_launch_templates()
        .await
        .expect("collect")
        .is_empty());
    let mut all = used.clone();
    all.push("node-group-template".into());
    all.sort();
    assert_eq!(template_names(&clients).await, all);
}
