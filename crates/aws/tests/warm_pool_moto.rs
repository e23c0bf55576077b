//! Warm-pool members against moto through the real SDK: a warm launch is tagged as a member and
//! boots the warm user data; stop and start act only on members of this cluster; a start
//! re-tags the instance for its claim first, so the launcher's look-up by claim finds it, and
//! ends by releasing the member (its warm-pool tag removed), after which nothing meant for
//! members reaches the node; a take interrupted before its release is resumed for the same
//! claim only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_smithy_types::body::SdkBody;

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
        warm_pool: Some(joiner_core::WarmState::Stopped),
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

/// The instance as a crash between a take's start and its release leaves it: started for its
/// claim, still tagged a member (tags put back here with the test's own credentials).
async fn interrupted_before_release(clients: &AwsClients, id: &str, state: &str) {
    clients
        .ec2
        .create_tags()
        .resources(id)
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("joiner.sh/warm-pool")
                .value("web")
                .build(),
        )
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("joiner.sh/warm-state")
                .value(state)
                .build(),
        )
        .send()
        .await
        .expect("tags put back");
}

/// A taken member is released: no membership tag left, so nothing meant for members reaches it.
async fn assert_released(clients: &AwsClients, id: &str) {
    let d = describe(clients, id).await;
    for key in ["joiner.sh/warm-pool", "joiner.sh/warm-state"] {
        assert!(
            !d.tags.contains_key(key),
            "{key} left on a taken member: {:?}",
            d.tags
        );
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

    // Taken, it is released from the pool: the node it becomes is no member, so it can
    // never be stopped, started or taken again through the pool.
    assert!(!started.warm_pool, "{started:?}");
    assert_released(&clients, &member.instance_id).await;
    assert!(!found.warm_pool, "{found:?}");
    for err in [
        p.stop_warm(&member.instance_id)
            .await
            .expect_err("no member"),
        p.start_warm(&member.instance_id, "web-other")
            .await
            .expect_err("no member"),
        p.start_warm(&member.instance_id, "web-abcde")
            .await
            .expect_err("no member"),
    ] {
        assert_eq!(err.kind(), CloudErrorKind::NotOwned, "{err}");
    }
    assert_eq!(
        describe(&clients, &member.instance_id).await.state,
        "running"
    );

    // A crash between the start and the release: the take is resumed for the same claim
    // and finishes with the release; another claim cannot take it meanwhile.
    interrupted_before_release(&clients, &member.instance_id, "Stopped").await;
    let other = p
        .start_warm(&member.instance_id, "web-other")
        .await
        .expect_err("taken");
    assert_eq!(other.kind(), CloudErrorKind::NotOwned);
    p.start_warm(&member.instance_id, "web-abcde")
        .await
        .expect("resumed for the same claim");
    assert_released(&clients, &member.instance_id).await;
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
    ordinary.warm_pool = None;
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

/// Bottlerocket reads its user data on its first boot only: the member warms with a document
/// without cluster settings; the start writes the real one (ModifyInstanceAttribute, for the
/// record) and then applies it through SSM (`apiclient apply`), which is what the node reads.
#[tokio::test]
async fn a_bottlerocket_member_gets_its_cluster_settings_only_when_started_for_a_claim() {
    let moto = MotoServer::session().expect("moto server");
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let env = testing::environment(&clients, CLUSTER, PREFIX, K8S)
        .await
        .expect("environment");
    let sent = Recorded::default();
    let p = bottlerocket_provider(&clients, &env, sent.clone(), None);
    let member = p
        .create(&warm_request("web-warm-br"))
        .await
        .expect("warm launch");
    let warm = describe(&clients, &member.instance_id).await;
    assert!(
        !warm.user_data.contains("settings.kubernetes"),
        "{}",
        warm.user_data
    );
    assert!(!warm.user_data.contains("api-server"), "{}", warm.user_data);
    p.stop_warm(&member.instance_id).await.expect("stop");
    p.start_warm(&member.instance_id, "web-claim")
        .await
        .expect("start");
    let started = describe(&clients, &member.instance_id).await;
    assert_eq!(started.state, "running");
    assert!(
        started.user_data.contains("[settings.kubernetes]")
            && started.user_data.contains("api-server"),
        "{}",
        started.user_data
    );
    assert_eq!(started.tags["joiner.sh/nodeclaim"], "web-claim");
    // What AWS receives: the TOML itself, base64-encoded once on the wire by the SDK.
    let sent = sent.user_data();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].starts_with("[settings"), "{}", sent[0]);
    // The settings the node reads: applied with apiclient through SSM, to this instance only,
    // with the admin container off (the user did not ask for it).
    let commands = ssm_commands(&clients).await;
    assert_eq!(commands.len(), 1, "{commands:?}");
    let (targets, script) = &commands[0];
    assert_eq!(targets, std::slice::from_ref(&member.instance_id));
    assert!(
        script.contains("apiclient apply <<'JOINER_EOF'"),
        "{script}"
    );
    let document = script
        .split_once("<<'JOINER_EOF'\n")
        .and_then(|(_, rest)| rest.split_once("\nJOINER_EOF"))
        .map(|(doc, _)| doc)
        .expect("the settings document");
    let parsed: toml::Table = toml::from_str(document).expect("TOML");
    assert_eq!(
        parsed["settings"]["kubernetes"]["cluster-name"].as_str(),
        Some(CLUSTER)
    );
    assert_eq!(
        parsed["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
        Some(false)
    );
    assert_released(&clients, &member.instance_id).await;
    // A take resumed after a crash (the member already runs for the claim, not yet released)
    // applies them again.
    interrupted_before_release(&clients, &member.instance_id, "Stopped").await;
    p.start_warm(&member.instance_id, "web-claim")
        .await
        .expect("resumed take");
    assert_eq!(ssm_commands(&clients).await.len(), 2);
    assert_released(&clients, &member.instance_id).await;
    interrupted_before_release(&clients, &member.instance_id, "Stopped").await;

    // A pull goes to members only, and is asked after.
    let pull = p
        .pull_warm(
            &member.instance_id,
            &["app:1".to_string()],
            std::time::Duration::from_secs(300),
        )
        .await
        .expect("pull sent");
    let commands = ssm_commands(&clients).await;
    let (_, script) = commands.last().expect("the pull");
    assert!(
        script.contains("images pull") && script.contains("joiner-pull 'app:1'"),
        "{script}"
    );
    // The pull is given the warm-up time left, to be delivered and to run.
    let listed = clients
        .ssm
        .list_commands()
        .command_id(&pull)
        .send()
        .await
        .expect("the pull");
    let sent = &listed.commands()[0];
    assert_eq!(
        sent.parameters().and_then(|p| p.get("executionTimeout")),
        Some(&vec!["300".to_string()])
    );
    assert_eq!(sent.timeout_seconds(), Some(300));
    assert_eq!(
        p.pull_progress(&member.instance_id, &pull)
            .await
            .expect("progress"),
        joiner_core::PullProgress::Succeeded
    );
    let mut ordinary = warm_request("web-node");
    ordinary.warm_pool = None;
    let node = p.create(&ordinary).await.expect("launch");
    let err = p
        .pull_warm(
            &node.instance_id,
            &["app:1".to_string()],
            std::time::Duration::from_secs(300),
        )
        .await
        .expect_err("not a member");
    assert_eq!(err.kind(), CloudErrorKind::NotOwned, "{err}");
    assert_eq!(ssm_commands(&clients).await.len(), 3, "nothing sent to it");
}

/// A provider whose Provisioner web launches Bottlerocket; ModifyInstanceAttribute's user data
/// and every EC2 action are recorded in `sent` (see [`MotoUserData`]); `ssm_faults` answers
/// SSM calls instead of moto.
fn bottlerocket_provider(
    clients: &AwsClients,
    env: &testing::Environment,
    sent: Recorded,
    ssm_faults: Option<SsmRefuses>,
) -> AwsCloudProvider {
    let nt: NodeTemplate = serde_yaml::from_str(&format!(
        "apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {{name: default}}\nspec:\n  amiFamily: Bottlerocket\n  amiSelector: {{aws-ids: {}}}\n  subnetSelector: {{joiner.sh/discovery: c1}}\n  securityGroupSelector: {{joiner.sh/discovery: c1}}\n",
        env.image_id
    ))
    .expect("node template");
    let (web, _) = objects();
    let mut ssm = clients.ssm.config().to_builder();
    if let Some(faults) = ssm_faults {
        ssm = ssm.interceptor(faults);
    }
    let adapted = AwsClients {
        ec2: aws_sdk_ec2::Client::from_conf(
            clients
                .ec2
                .config()
                .to_builder()
                .interceptor(MotoUserData(sent))
                .build(),
        ),
        ssm: aws_sdk_ssm::Client::from_conf(ssm.build()),
        ..clients.clone()
    };
    testing::provider(
        &adapted,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        vec![web],
        vec![nt],
    )
    .0
}

/// Answers every SSM call with the error `code` (moto has no fault injection), counting them.
#[derive(Debug, Clone)]
struct SsmRefuses {
    code: &'static str,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl SsmRefuses {
    fn with(code: &'static str) -> Self {
        SsmRefuses {
            code,
            calls: Arc::default(),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Intercept for SsmRefuses {
    fn name(&self) -> &'static str {
        "SsmRefuses"
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut aws_sdk_ec2::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let resp = ctx.response_mut();
        *resp.status_mut() = aws_smithy_runtime_api::http::StatusCode::try_from(400)?;
        *resp.body_mut() = SdkBody::from(format!(
            r#"{{"__type":"{}","message":"refused by the test"}}"#,
            self.code
        ));
        Ok(())
    }
}

/// A take whose settings SSM refuses fails at once, before the member starts: one SendCommand,
/// no wait for an agent SSM does not know, no StartInstances, the member stopped and still the
/// pool's (the launcher then launches instead).
#[tokio::test]
async fn a_bottlerocket_take_whose_settings_ssm_refuses_never_starts_the_member() {
    let moto = MotoServer::session().expect("moto server");
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let env = testing::environment(&clients, CLUSTER, PREFIX, K8S)
        .await
        .expect("environment");
    let member = bottlerocket_provider(&clients, &env, Recorded::default(), None)
        .create(&warm_request("web-warm-s"))
        .await
        .expect("warm launch");
    for code in ["InvalidInstanceId", "AccessDeniedException"] {
        let refuses = SsmRefuses::with(code);
        let recorded = Recorded::default();
        let p = bottlerocket_provider(&clients, &env, recorded.clone(), Some(refuses.clone()));
        p.stop_warm(&member.instance_id).await.expect("stop");
        let err = p
            .start_warm(&member.instance_id, "web-claim")
            .await
            .expect_err("settings refused");
        assert_eq!(err.code(), code, "{err}");
        assert_eq!(refuses.calls(), 1, "{code}: sent once, never retried");
        let actions = recorded.actions();
        assert!(
            !actions
                .iter()
                .any(|a| a == "StartInstances" || a == "CreateTags"),
            "{code}: {actions:?}"
        );
        let d = describe(&clients, &member.instance_id).await;
        assert_eq!(d.state, "stopped");
        assert_eq!(d.tags["joiner.sh/nodeclaim"], "web-warm-s");
        assert!(d.tags.contains_key("joiner.sh/warm-pool"));
        assert!(p.get("web-claim").await.expect("get").is_none());
    }

    let p = bottlerocket_provider(
        &clients,
        &env,
        Recorded::default(),
        Some(SsmRefuses::with("AccessDeniedException")),
    );
    // A take a crash interrupted after its start is resumed; sending the settings again
    // failing then does not undo it (the node may have joined): it stays the claim's.
    let working = bottlerocket_provider(&clients, &env, Recorded::default(), None);
    working
        .start_warm(&member.instance_id, "web-claim")
        .await
        .expect("taken");
    interrupted_before_release(&clients, &member.instance_id, "Stopped").await;
    let resumed = p
        .start_warm(&member.instance_id, "web-claim")
        .await
        .expect("a resumed take keeps its instance");
    assert_eq!(resumed.instance_id, member.instance_id);
    let d = describe(&clients, &member.instance_id).await;
    assert_eq!(d.state, "running");
    assert_eq!(d.tags["joiner.sh/nodeclaim"], "web-claim");
}

/// Every SSM command sent: its target instances and its `commands` script.
async fn ssm_commands(clients: &AwsClients) -> Vec<(Vec<String>, String)> {
    let out = clients
        .ssm
        .list_commands()
        .send()
        .await
        .expect("list commands");
    out.commands()
        .iter()
        .map(|c| {
            assert_eq!(c.document_name(), Some("AWS-RunShellScript"));
            let script = c
                .parameters()
                .and_then(|p| p.get("commands"))
                .map(|v| v.join("\n"))
                .unwrap_or_default();
            (c.instance_ids().to_vec(), script)
        })
        .collect()
}

/// moto (5.2) takes ModifyInstanceAttribute's `UserData.Value` blob, once the query decoding
/// is undone, to be base64 text itself, while EC2 and the SDKs put the user data itself in
/// the blob (the SDK base64-encodes it on the wire once, as for every blob). This interceptor
/// records the user data the SDK sent and adds moto's second layer, so the test runs the real
/// call against moto and checks what EC2 would receive.
#[derive(Debug)]
struct MotoUserData(Recorded);

/// What [`MotoUserData`] saw: the user data of each ModifyInstanceAttribute, and the action of
/// every EC2 call, in order.
#[derive(Debug, Clone, Default)]
struct Recorded {
    user_data: Arc<Mutex<Vec<String>>>,
    actions: Arc<Mutex<Vec<String>>>,
}

impl Recorded {
    fn user_data(&self) -> Vec<String> {
        self.user_data.lock().expect("user data").clone()
    }

    fn actions(&self) -> Vec<String> {
        self.actions.lock().expect("actions").clone()
    }
}

fn percent_decode(v: &str) -> String {
    v.replace("%2B", "+")
        .replace("%2F", "/")
        .replace("%3D", "=")
}

fn percent_encode(v: &str) -> String {
    v.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

impl Intercept for MotoUserData {
    fn name(&self) -> &'static str {
        "MotoUserData"
    }

    fn modify_before_transmit(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(bytes) = ctx.request().body().bytes() else {
            return Ok(());
        };
        let body = String::from_utf8_lossy(bytes).to_string();
        if let Some(action) = body.split('&').find_map(|kv| kv.strip_prefix("Action=")) {
            self.0
                .actions
                .lock()
                .expect("actions")
                .push(action.to_string());
        }
        if !body
            .split('&')
            .any(|kv| kv == "Action=ModifyInstanceAttribute")
        {
            return Ok(());
        }
        let engine = base64::engine::general_purpose::STANDARD;
        let mut out = Vec::new();
        for kv in body.split('&') {
            match kv.strip_prefix("UserData.Value=") {
                Some(v) => {
                    let once = percent_decode(v);
                    let raw = engine.decode(&once)?;
                    self.0
                        .user_data
                        .lock()
                        .expect("user data")
                        .push(String::from_utf8_lossy(&raw).into_owned());
                    out.push(format!(
                        "UserData.Value={}",
                        percent_encode(&engine.encode(once.as_bytes()))
                    ));
                }
                None => out.push(kv.to_string()),
            }
        }
        let body = out.join("&");
        let len = body.len();
        *ctx.request_mut().body_mut() = SdkBody::from(body);
        ctx.request_mut()
            .headers_mut()
            .insert("content-length", len.to_string());
        Ok(())
    }
}

/// Answers every StartInstances with EC2's capacity error (moto has no fault injection).
#[derive(Debug)]
struct StartsFail;

/// Marks a StartInstances call in the call's config bag, before it is sent.
#[derive(Debug, Clone)]
struct IsStart;

impl aws_smithy_types::config_bag::Storable for IsStart {
    type Storer = aws_smithy_types::config_bag::StoreReplace<IsStart>;
}

impl Intercept for StartsFail {
    fn name(&self) -> &'static str {
        "StartsFail"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let is_start = ctx.request().body().bytes().is_some_and(|b| {
            String::from_utf8_lossy(b)
                .split('&')
                .any(|kv| kv == "Action=StartInstances")
        });
        if is_start {
            cfg.interceptor_state().store_put(IsStart);
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut aws_sdk_ec2::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<IsStart>().is_none() {
            return Ok(());
        }
        let resp = ctx.response_mut();
        *resp.status_mut() = aws_smithy_runtime_api::http::StatusCode::try_from(400)?;
        *resp.body_mut() = SdkBody::from(
            "<Response><Errors><Error><Code>InsufficientInstanceCapacity</Code><Message>We currently do not have sufficient m5.large capacity in the Availability Zone you requested.</Message></Error></Errors><RequestID>r-1</RequestID></Response>",
        );
        Ok(())
    }
}

/// A start that fails (capacity) is reported with EC2's code, and the instance's claim tag
/// goes back to the member, so the claim's launch that follows never finds the stopped member
/// as its instance.
#[tokio::test]
async fn a_failed_start_restores_the_members_claim_tag() {
    let moto = MotoServer::session().expect("moto server");
    let (clients, p, _env) = setup(&moto).await;
    let member = p
        .create(&warm_request("web-warm-f"))
        .await
        .expect("warm launch");
    p.stop_warm(&member.instance_id).await.expect("stop");
    let failing = AwsClients {
        ec2: aws_sdk_ec2::Client::from_conf(
            clients
                .ec2
                .config()
                .to_builder()
                .interceptor(StartsFail)
                .build(),
        ),
        ..clients.clone()
    };
    let (web, nt) = objects();
    let (q, _) = testing::provider(
        &failing,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        vec![web],
        vec![nt],
    );
    let err = q
        .start_warm(&member.instance_id, "web-claim")
        .await
        .expect_err("no capacity");
    assert_eq!(err.code(), "InsufficientInstanceCapacity", "{err}");
    // (The fault is injected into moto's answer: moto itself did start the instance, so its
    // state says nothing here; the tag is what the launcher's look-up reads.)
    let d = describe(&clients, &member.instance_id).await;
    assert_eq!(d.tags["joiner.sh/nodeclaim"], "web-warm-f");
    assert!(q.get("web-claim").await.expect("get").is_none());
}

/// Records the query body of every EC2 call the client sends.
#[derive(Debug, Clone, Default)]
struct Sent(Arc<Mutex<Vec<String>>>);

impl Sent {
    /// The bodies of the calls of `action` so far.
    fn of(&self, action: &str) -> Vec<String> {
        let want = format!("Action={action}");
        self.0
            .lock()
            .expect("sent")
            .iter()
            .filter(|b| b.split('&').any(|kv| kv == want))
            .cloned()
            .collect()
    }
}

impl Intercept for Sent {
    fn name(&self) -> &'static str {
        "Sent"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(bytes) = ctx.request().body().bytes() {
            self.0
                .lock()
                .expect("sent")
                .push(String::from_utf8_lossy(bytes).into_owned());
        }
        Ok(())
    }
}

/// A provider whose EC2 calls are recorded.
async fn recorded(clients: &AwsClients) -> (AwsCloudProvider, Sent) {
    let sent = Sent::default();
    let recording = AwsClients {
        ec2: aws_sdk_ec2::Client::from_conf(
            clients
                .ec2
                .config()
                .to_builder()
                .interceptor(sent.clone())
                .build(),
        ),
        ..clients.clone()
    };
    let (web, nt) = objects();
    let (p, _) = testing::provider(
        &recording,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        vec![web],
        vec![nt],
    );
    (p, sent)
}

/// A `Running` member: tagged with its state, started again after its warm-up for its hold
/// boot (StartInstances, no claim), then taken by a reboot (RebootInstances, never a start or
/// a launch) with the claim's tag and the reboot recorded; a resumed take does not reboot it
/// again. A `Stopped` member is never started for a hold boot (its next boot joins).
#[tokio::test]
async fn a_running_member_is_held_then_rebooted_for_its_claim() {
    let moto = MotoServer::session().expect("moto server");
    let (clients, _, _env) = setup(&moto).await;
    let (p, sent) = recorded(&clients).await;
    let mut request = warm_request("web-warm-r");
    request.warm_pool = Some(joiner_core::WarmState::Running);
    let member = p.create(&request).await.expect("warm launch");
    let d = describe(&clients, &member.instance_id).await;
    assert_eq!(d.tags["joiner.sh/warm-state"], "Running");
    // The hold boot is in the user data: a Running member's warm-up writes one held boot.
    assert!(d.user_data.contains("hold-boots"), "{}", d.user_data);

    // Its warm-up powered it off; the pool starts its hold boot.
    p.stop_warm(&member.instance_id).await.expect("stop");
    p.hold_warm(&member.instance_id).await.expect("hold");
    let d = describe(&clients, &member.instance_id).await;
    assert_eq!(d.state, "running");
    assert_eq!(d.tags["joiner.sh/nodeclaim"], "web-warm-r");
    p.hold_warm(&member.instance_id)
        .await
        .expect("holding a running member again is nothing to do");
    assert_eq!(sent.of("StartInstances").len(), 1);

    let taken = p
        .start_warm(&member.instance_id, "web-claim")
        .await
        .expect("take");
    assert_eq!(taken.claim_name.as_deref(), Some("web-claim"));
    assert_eq!(sent.of("RebootInstances").len(), 1);
    assert_eq!(
        sent.of("StartInstances").len(),
        1,
        "a take of a running member never starts it"
    );
    assert!(
        sent.of("CreateFleet").len() == 1,
        "only the warm launch itself"
    );
    let d = describe(&clients, &member.instance_id).await;
    assert_eq!(d.state, "running");
    assert_eq!(d.tags["joiner.sh/nodeclaim"], "web-claim");
    assert_eq!(d.tags["joiner.sh/warm-rebooted-for"], "web-claim");
    assert_eq!(
        p.get("web-claim")
            .await
            .expect("get")
            .map(|n| n.instance_id),
        Some(member.instance_id.clone())
    );

    assert_released(&clients, &member.instance_id).await;
    // Resumed after a crash: already rebooted for this claim, so not again.
    interrupted_before_release(&clients, &member.instance_id, "Running").await;
    p.start_warm(&member.instance_id, "web-claim")
        .await
        .expect("resumed take");
    assert_eq!(sent.of("RebootInstances").len(), 1);

    // A Stopped member refuses a hold boot and stays stopped.
    let stopped = p
        .create(&warm_request("web-warm-s"))
        .await
        .expect("warm launch");
    p.stop_warm(&stopped.instance_id).await.expect("stop");
    let err = p
        .hold_warm(&stopped.instance_id)
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), CloudErrorKind::NotOwned);
    assert_eq!(err.code(), "NotHeld");
    assert_eq!(
        describe(&clients, &stopped.instance_id).await.state,
        "stopped"
    );
}

/// A `Hibernated` member is launched with hibernation configured and an encrypted root volume
/// grown by its memory (m5.large: 8 GiB on the default 20), and hibernated (StopInstances with
/// Hibernate=true) after its hold boot.
#[tokio::test]
async fn a_hibernated_member_is_launched_for_hibernation_and_hibernated() {
    let moto = MotoServer::session().expect("moto server");
    let (clients, _, _env) = setup(&moto).await;
    let (p, sent) = recorded(&clients).await;
    let mut request = warm_request("web-warm-h");
    request.warm_pool = Some(joiner_core::WarmState::Hibernated);
    request.candidates = vec![("m5.large".into(), 0.096)];
    let member = p.create(&request).await.expect("warm launch");
    assert_eq!(member.instance_type, "m5.large");
    let d = describe(&clients, &member.instance_id).await;
    assert_eq!(d.tags["joiner.sh/warm-state"], "Hibernated");

    let templates = sent.of("CreateLaunchTemplate");
    assert_eq!(templates.len(), 1, "{templates:?}");
    let lt = &templates[0];
    assert!(
        lt.contains("LaunchTemplateData.HibernationOptions.Configured=true"),
        "{lt}"
    );
    assert!(
        lt.contains("LaunchTemplateData.BlockDeviceMapping.1.Ebs.VolumeSize=28"),
        "{lt}"
    );
    assert!(
        lt.contains("LaunchTemplateData.BlockDeviceMapping.1.Ebs.Encrypted=true"),
        "{lt}"
    );

    p.stop_warm(&member.instance_id)
        .await
        .expect("stop after warm-up");
    assert!(!sent.of("StopInstances")[0].contains("Hibernate=true"));
    p.hold_warm(&member.instance_id).await.expect("hold");
    p.hibernate_warm(&member.instance_id)
        .await
        .expect("hibernate");
    let stops = sent.of("StopInstances");
    assert_eq!(stops.len(), 2);
    assert!(stops[1].contains("Hibernate=true"), "{}", stops[1]);
    assert_eq!(
        describe(&clients, &member.instance_id).await.state,
        "stopped"
    );
    // A take starts it (a resume), as a stopped member.
    p.start_warm(&member.instance_id, "web-claim")
        .await
        .expect("take");
    assert_eq!(sent.of("StartInstances").len(), 2);
    assert!(sent.of("RebootInstances").is_empty());
}
