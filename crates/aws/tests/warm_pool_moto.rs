//! Warm-pool members against moto through the real SDK: a warm launch is tagged as a member and
//! boots the warm user data; stop and start act only on members of this cluster, and only
//! joiner's own nodes can be taken into a pool; a start
//! re-tags the instance for its claim first, so the launcher's look-up by claim finds it, and a
//! repeated start for the same claim is harmless while a start for another claim is refused.

use std::collections::BTreeMap;

use base64::Engine;
use joiner_apis::{NodeTemplate, Provisioner};
use joiner_aws::{testing, AwsClients, AwsCloudProvider};
use joiner_core::{CapacityType, CloudError, CloudErrorKind, CloudProvider, LaunchRequest};
use joiner_moto::MotoServer;

const CLUSTER: &str = "c1";
const PREFIX: &str = "/joiner-test/service";
const K8S: &str = "1.31";

fn objects() -> (Provisioner, NodeTemplate) {
    let nt: NodeTemplate = serde_yaml::from_str(
        "apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {name: default}\nspec:\n  amiFamily: AL2023\n  subnetSelector: {joiner.sh/discovery: c1}\n  securityGroupSelector: {joiner.sh/discovery: c1}\n",
    )
    .expect("node template");
    let web: Provisioner = serde_yaml::from_str(
        "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {name: web}\nspec:\n  providerRef: {name: default}\n  warmPool: {size: 2}\n",
    )
    .expect("provisioner");
    (web, nt)
}

fn warm_request(member: &str) -> LaunchRequest {
    LaunchRequest {
        claim_name: member.into(),
        claim_uid: format!("uid-{member}"),
        provisioner: "web".into(),
        capacity_type: CapacityType::OnDemand,
        candidates: vec![("m5.large".into(), 0.096), ("c5.large".into(), 0.085)],
        zones: vec!["us-east-1b".into()],
        warm_pool: true,
    }
}

struct Described {
    state: String,
    tags: BTreeMap<String, String>,
    user_data: String,
}

async fn describe(clients: &AwsClients, id: &str) -> Described {
    let out = clients
        .ec2
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .expect("describe");
    let i = &out.reservations()[0].instances()[0];
    let attr = clients
        .ec2
        .describe_instance_attribute()
        .instance_id(id)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .expect("user data");
    let user_data = attr
        .user_data()
        .and_then(|u| u.value())
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    Described {
        state: i
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap_or_default(),
        tags: i
            .tags()
            .iter()
            .map(|t| {
                (
                    t.key().unwrap_or_default().to_string(),
                    t.value().unwrap_or_default().to_string(),
                )
            })
            .collect(),
        user_data,
    }
}

async fn setup(
    moto: &joiner_moto::MotoSession,
) -> (AwsClients, AwsCloudProvider, testing::Environment) {
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let env = testing::environment(&clients, CLUSTER, PREFIX, K8S)
        .await
        .expect("environment");
    let (web, nt) = objects();
    let (p, _) = testing::provider(
        &clients,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        vec![web],
        vec![nt],
    );
    (clients, p, env)
}

#[tokio::test]
async fn a_warm_member_is_tagged_stopped_and_started_for_its_claim() {
    let moto = MotoServer::session().expect("moto server");
    let (clients, p, _env) = setup(&moto).await;

    let member = p
        .create(&warm_request("web-warm-a"))
        .await
        .expect("warm launch");
    assert!(member.warm_pool, "{member:?}");
    assert_eq!(member.capacity_type, CapacityType::OnDemand);
    let d = describe(&clients, &member.instance_id).await;
    assert_eq!(
        d.tags.get("joiner.sh/warm-pool").map(String::as_str),
        Some("web")
    );
    assert_eq!(
        d.tags.get("joiner.sh/nodeclaim").map(String::as_str),
        Some("web-warm-a")
    );
    assert_eq!(
        d.tags.get("kubernetes.io/cluster/c1").map(String::as_str),
        Some("owned")
    );
    // The warm user data: it installs the join unit instead of joining.
    assert!(
        d.user_data.contains("joiner-join.service"),
        "{}",
        d.user_data
    );
    assert!(
        !d.user_data.contains("application/node.eks.aws"),
        "{}",
        d.user_data
    );
    // list() shows it as a member.
    let listed = p.list().await.expect("list");
    assert!(listed
        .iter()
        .any(|n| n.instance_id == member.instance_id && n.warm_pool));

    p.stop_warm(&member.instance_id).await.expect("stop");
    assert_eq!(
        describe(&clients, &member.instance_id).await.state,
        "stopped"
    );
    // Stopping again is not an error.
    p.stop_warm(&member.instance_id).await.expect("stop again");

    let started = p
        .start_warm(&member.instance_id, "web-abcde")
        .await
        .expect("start");
    assert_eq!(started.claim_name.as_deref(), Some("web-abcde"));
    assert!(
        ["pending", "running"].contains(&started.state.as_str()),
        "{started:?}"
    );
    let d = describe(&clients, &member.instance_id).await;
    assert_eq!(d.state, "running");
    assert_eq!(
        d.tags.get("joiner.sh/nodeclaim").map(String::as_str),
        Some("web-abcde")
    );
    // The launcher's look-up by claim now finds it; the member's name no longer does.
    let found = p
        .get("web-abcde")
        .await
        .expect("get")
        .expect("found by claim");
    assert_eq!(found.instance_id, member.instance_id);
    assert!(p.get("web-warm-a").await.expect("get").is_none());

    // A resumed take for the same claim is harmless; another claim cannot take it.
    p.start_warm(&member.instance_id, "web-abcde")
        .await
        .expect("start again for the same claim");
    let other = p
        .start_warm(&member.instance_id, "web-other")
        .await
        .expect_err("taken");
    assert_eq!(other.kind(), CloudErrorKind::NotOwned);
    assert_eq!(
        describe(&clients, &member.instance_id).await.tags["joiner.sh/nodeclaim"],
        "web-abcde"
    );
}

#[tokio::test]
async fn start_and_stop_refuse_anything_but_this_clusters_members() {
    let moto = MotoServer::session().expect("moto server");
    let (clients, p, env) = setup(&moto).await;

    // joiner's own node that serves pods: no warm-pool tag.
    let mut ordinary = warm_request("web-node");
    ordinary.warm_pool = false;
    let node = p.create(&ordinary).await.expect("launch");
    // A managed node group's instance, and another cluster's member.
    let nodegroup = testing::run_tagged_instance(
        &clients,
        &env,
        "m5.large",
        &[
            ("kubernetes.io/cluster/c1", "owned"),
            ("eks:nodegroup-name", "system"),
        ],
    )
    .await
    .expect("nodegroup instance");
    let foreign_member = testing::run_tagged_instance(
        &clients,
        &env,
        "m5.large",
        &[
            ("kubernetes.io/cluster/other", "owned"),
            ("joiner.sh/provisioner-name", "web"),
            ("joiner.sh/warm-pool", "web"),
        ],
    )
    .await
    .expect("other cluster's member");

    for id in [&node.instance_id, &nodegroup, &foreign_member] {
        let err = p.stop_warm(id).await.expect_err("refused");
        assert_eq!(err.kind(), CloudErrorKind::NotOwned, "{id}: {err}");
        let err = p.start_warm(id, "web-x").await.expect_err("refused");
        assert_eq!(err.kind(), CloudErrorKind::NotOwned, "{id}: {err}");
        let d = describe(&clients, id).await;
        assert_eq!(d.state, "running", "{id} was touched");
        assert_ne!(
            d.tags.get("joiner.sh/nodeclaim").map(String::as_str),
            Some("web-x")
        );
    }
    let err = p
        .stop_warm("i-0123456789abcdef0")
        .await
        .expect_err("unknown");
    assert_eq!(err.kind(), CloudErrorKind::NotFound);
    assert_eq!(err.code(), "InvalidInstanceID.NotFound");
}
