//! Provisioning end to end: reflector stores fed by hand, the API server scripted over
//! tower-test (every request asserted), and the real `AwsCloudProvider` against moto, so a
//! batch leaves real instances with the claim's tags.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use http::Method;
use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use joiner_aws::testing;
use joiner_aws::unavailable::{OfferingKey, UnavailableOfferings};
use joiner_aws::{AwsClients, AwsCloudProvider};
use joiner_controller::instrumented::Instrumented;
use joiner_controller::launcher::{Launch, ProvisioningError};
use joiner_controller::provisioning::{self, launch_pending_claims, provision_batch, Memory};
use joiner_controller::Metrics;
use joiner_controller::{ClusterState, Context, Settings};
use joiner_core::{CapacityType, CloudProvider, LaunchRequest};
use joiner_moto::{MotoServer, MotoSession};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{json, Value};
use support::{mock_api, obj, store, stored, MockApi, Recorded, Reply};

const CLUSTER: &str = "c1";
const PREFIX: &str = "/joiner-test/service";
const K8S: &str = "1.31";
const CLAIMS: &str = "/apis/joiner.sh/v1alpha1/nodeclaims";
const TYPES: [&str; 2] = ["c5.large", "m5.large"];

fn node_template() -> NodeTemplate {
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default"},
        "spec": {
            "amiFamily": "AL2023",
            "subnetSelector": {"joiner.sh/discovery": CLUSTER},
            "securityGroupSelector": {"joiner.sh/discovery": CLUSTER},
        },
    }))
}

/// amd64 only (the moto fixture has one amd64 AMI), two small types so each 1.5-CPU pod needs
/// a node of its own.
fn provisioner() -> Provisioner {
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
        "metadata": {"name": "web"},
        "spec": {
            "providerRef": {"name": "default"},
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES},
            ],
        },
    }))
}

fn pending_pod(name: &str, cpu: &str) -> Pod {
    obj(json!({
        "metadata": {"name": name, "namespace": "shop", "uid": format!("pod-{name}"),
                     "labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]},
    }))
}

/// How the scripted API server misbehaves.
#[derive(Clone, Default)]
struct Script {
    /// Answer this many claim creates with 409 AlreadyExists first.
    conflicts: usize,
    /// Answer status writes with 404 NotFound.
    status_not_found: bool,
    /// Answer claim creates with 429 TooManyRequests.
    throttle_creates: bool,
}

fn merge_status(claim: &mut Value, status: &Value) {
    if !claim["status"].is_object() {
        claim["status"] = json!({});
    }
    for (k, v) in status.as_object().into_iter().flatten() {
        claim["status"][k] = v.clone();
    }
}

/// An API server holding NodeClaims (seeded with `seed`) and accepting Events.
fn api_server(script: Script, seed: Vec<NodeClaim>) -> impl FnMut(&Recorded) -> Reply {
    let mut claims: HashMap<String, Value> = seed
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap_or_default(),
                serde_json::to_value(&c).unwrap_or_default(),
            )
        })
        .collect();
    let mut conflicts = script.conflicts;
    let mut created = 0;
    move |req: &Recorded| {
        let item = req
            .path
            .strip_prefix(CLAIMS)
            .and_then(|p| p.strip_prefix('/'));
        if req.is(Method::POST, CLAIMS) {
            if script.throttle_creates {
                return Reply::error(429, "TooManyRequests", "client rate limiter");
            }
            if conflicts > 0 {
                conflicts -= 1;
                return Reply::error(409, "AlreadyExists", "nodeclaims already exists");
            }
            created += 1;
            let body = stored(req, &format!("uid-{created}"));
            let name = body["metadata"]["name"].as_str().unwrap_or_default();
            claims.insert(name.to_string(), body.clone());
            return Reply::created(body);
        }
        if req.method == Method::PATCH {
            if let Some(name) = item.and_then(|p| p.strip_suffix("/status")) {
                if script.status_not_found {
                    return Reply::not_found(&format!("nodeclaims {name}"));
                }
                let Some(claim) = claims.get_mut(name) else {
                    return Reply::not_found(&format!("nodeclaims {name}"));
                };
                merge_status(claim, &req.body["status"]);
                return Reply::ok(claim.clone());
            }
        }
        if req.method == Method::DELETE {
            if let Some(name) = item {
                return match claims.remove(name) {
                    Some(_) => Reply::success(),
                    None => Reply::not_found(&format!("nodeclaims {name}")),
                };
            }
        }
        if req.method == Method::POST && req.path.ends_with("/events") {
            return Reply::created(stored(req, "event-uid"));
        }
        Reply::not_found(&req.path)
    }
}

struct Harness {
    ctx: Context<Instrumented<AwsCloudProvider>>,
    api: MockApi,
    clients: AwsClients,
    unavailable: Arc<UnavailableOfferings>,
    claims: Writer<NodeClaim>,
    _pods: Writer<joiner_controller::pod_record::PodRecord>,
    _nodes: Writer<Node>,
    _daemonsets: Writer<DaemonSet>,
    _provisioners: Writer<Provisioner>,
    _templates: Writer<NodeTemplate>,
    _pdbs: Writer<PodDisruptionBudget>,
    // Last: the moto server is reset for the next test only once the session is dropped.
    _moto: MotoSession,
}

async fn harness(pods: Vec<Pod>, claims: Vec<NodeClaim>, script: Script) -> Harness {
    let moto = MotoServer::session().expect("moto server");
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    testing::environment(&clients, CLUSTER, PREFIX, K8S)
        .await
        .expect("environment");
    let (cloud, unavailable) = testing::provider(
        &clients,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        vec![provisioner()],
        vec![node_template()],
    );
    let (client, api) = mock_api(api_server(script, claims.clone()));
    let pods = support::pod_store(pods);
    let nodes = store::<Node>(vec![]);
    let daemonsets = store::<DaemonSet>(vec![]);
    let provisioners = store(vec![provisioner()]);
    let templates = store(vec![node_template()]);
    let claims = store(claims);
    let pdbs = store::<PodDisruptionBudget>(vec![]);
    let state = ClusterState {
        pods: pods.as_reader(),
        nodes: nodes.as_reader(),
        daemonsets: daemonsets.as_reader(),
        provisioners: provisioners.as_reader(),
        node_templates: templates.as_reader(),
        node_claims: claims.as_reader(),
        pdbs: pdbs.as_reader(),
        namespaces: ClusterState::empty().namespaces,
        created: Default::default(),
        claim_history: Default::default(),
        volumes: joiner_controller::state::VolumeStores::empty(),
    };
    // Instrumented, as in the controller: cloud-call metrics come from the wrapper.
    let metrics = Arc::new(Metrics::default());
    let cloud = Instrumented::new(Arc::new(cloud), metrics.clone());
    let ctx = Context {
        client,
        state,
        cloud: Arc::new(cloud),
        metrics,
        settings: Settings::new(CLUSTER),
    };
    Harness {
        ctx,
        api,
        clients,
        unavailable,
        claims,
        _pods: pods,
        _nodes: nodes,
        _daemonsets: daemonsets,
        _provisioners: provisioners,
        _templates: templates,
        _pdbs: pdbs,
        _moto: moto,
    }
}

/// An instance in moto: id, type, state, tags.
#[derive(Debug)]
struct Ec2Instance {
    id: String,
    instance_type: String,
    state: String,
    tags: BTreeMap<String, String>,
}

async fn instances(clients: &AwsClients) -> Vec<Ec2Instance> {
    let out = clients
        .ec2
        .describe_instances()
        .send()
        .await
        .expect("describe instances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| Ec2Instance {
            id: i.instance_id().unwrap_or_default().to_string(),
            instance_type: i
                .instance_type()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
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
        })
        .collect()
}

/// The live instances tagged with `claim`.
async fn live_instances_of(clients: &AwsClients, claim: &str) -> Vec<Ec2Instance> {
    instances(clients)
        .await
        .into_iter()
        .filter(|i| i.tags.get("joiner.sh/nodeclaim").map(String::as_str) == Some(claim))
        .filter(|i| i.state != "terminated" && i.state != "shutting-down")
        .collect()
}

fn claim_posts(api: &MockApi) -> Vec<Recorded> {
    api.writes()
        .into_iter()
        .filter(|r| r.is(Method::POST, CLAIMS))
        .collect()
}

fn status_patches(api: &MockApi) -> Vec<Recorded> {
    api.writes()
        .into_iter()
        .filter(|r| r.method == Method::PATCH && r.path.ends_with("/status"))
        .collect()
}

fn event_posts(api: &MockApi) -> Vec<Recorded> {
    api.writes()
        .into_iter()
        .filter(|r| r.is(Method::POST, "/api/v1/namespaces/shop/events"))
        .collect()
}

/// Each existing node the plan uses, with the pods it puts there.
fn on_existing(plan: &joiner_core::scheduling::Plan) -> Vec<(&str, Vec<&str>)> {
    plan.existing_nodes
        .iter()
        .map(|u| (u.name.as_str(), u.pods.iter().map(String::as_str).collect()))
        .collect()
}

fn requirement(key: &str, values: &[&str]) -> Value {
    json!({"key": key, "operator": "In", "values": values})
}

#[tokio::test]
async fn pending_pods_get_claims_instances_and_events_and_a_second_batch_buys_nothing() {
    let h = harness(
        vec![
            pending_pod("a", "1500m"),
            pending_pod("b", "1500m"),
            pending_pod("huge", "64"),
        ],
        vec![],
        Script::default(),
    )
    .await;
    let mut memory = Memory::default();
    let outcome = provision_batch(&h.ctx, &mut memory)
        .await
        .expect("batch runs");
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(outcome.pending, 3);
    assert_eq!(outcome.plan.new_nodes.len(), 2, "{:?}", outcome.plan);
    assert_eq!(outcome.plan.unschedulable.len(), 1);
    assert_eq!(outcome.plan.unschedulable[0].pod, "shop/huge");

    // One NodeClaim per new node, written with everything the launch and the termination
    // controller need.
    let posts = claim_posts(&h.api);
    assert_eq!(posts.len(), 2);
    let mut claim_of_pod: BTreeMap<String, String> = BTreeMap::new();
    for (post, node) in posts.iter().zip(&outcome.plan.new_nodes) {
        let body = &post.body;
        let name = body["metadata"]["name"].as_str().expect("a name");
        let suffix = name
            .strip_prefix("web-")
            .expect("named after the provisioner");
        assert_eq!(suffix.len(), 5, "{name}");
        assert_eq!(body["apiVersion"], "joiner.sh/v1alpha1");
        assert_eq!(body["kind"], "NodeClaim");
        assert_eq!(
            body["metadata"]["finalizers"],
            json!(["joiner.sh/termination"])
        );
        assert_eq!(
            body["metadata"]["labels"],
            json!({"joiner.sh/provisioner-name": "web"})
        );
        assert_eq!(body["spec"]["provisionerName"], "web");
        assert_eq!(body["spec"]["nodeTemplateRef"], json!({"name": "default"}));
        let options: Vec<&str> = node
            .instance_type_options
            .iter()
            .map(String::as_str)
            .collect();
        assert!(options.iter().all(|o| TYPES.contains(o)), "{options:?}");
        assert_eq!(
            body["spec"]["requirements"],
            json!([
                requirement("kubernetes.io/arch", &["amd64"]),
                requirement("joiner.sh/provisioner-name", &["web"]),
                requirement("node.kubernetes.io/instance-type", &options),
                requirement("karpenter.sh/capacity-type", &["on-demand"]),
            ]),
            "no zone: the pods do not pin one"
        );
        let cpu = &body["spec"]["resources"]["requests"]["cpu"];
        assert_eq!(cpu, "1500m", "{body}");
        for pod in &node.pods {
            claim_of_pod.insert(pod.clone(), name.to_string());
        }
        // The claim records the pods it was bought for: a restart keeps their room.
        let nominated = body["metadata"]["annotations"]["joiner.sh/nominated-pods"]
            .as_str()
            .expect("nominations recorded");
        assert_eq!(
            serde_json::from_str::<Vec<String>>(nominated).expect("a JSON list"),
            node.pods
        );
    }
    assert_eq!(outcome.claims.len(), 2);
    assert_eq!(outcome.claims[0].metadata.uid.as_deref(), Some("uid-1"));

    // Then the status, through the status subresource, naming what moto launched.
    let patches = status_patches(&h.api);
    assert_eq!(patches.len(), 2);
    // Claims launch concurrently: each claim's status patch, whatever the order.
    for claim in &outcome.claims {
        let name = claim.name();
        let patch = patches
            .iter()
            .find(|p| p.path == format!("{CLAIMS}/{name}/status"))
            .expect("a status patch per claim");
        assert_eq!(patch.path, format!("{CLAIMS}/{name}/status"));
        let status = &patch.body["status"];
        let id = status["instanceID"].as_str().expect("instance id");
        let zone = status["zone"].as_str().expect("zone");
        assert_eq!(status["providerID"], format!("aws:///{zone}/{id}"));
        assert_eq!(status["capacityType"], "on-demand");
        assert!(
            status["pricePerHour"].as_f64().is_some_and(|p| p > 0.0),
            "{status}"
        );
        assert!(status["allocatable"]["cpu"].is_string(), "{status}");
        assert_eq!(status["conditions"][0]["type"], "Launched");
        assert_eq!(status["conditions"][0]["status"], "True");

        let live = live_instances_of(&h.clients, name).await;
        assert_eq!(live.len(), 1, "one instance per claim: {live:?}");
        assert_eq!(live[0].id, id);
        assert_eq!(
            live[0].instance_type,
            status["instanceType"].as_str().unwrap_or_default()
        );
        assert!(TYPES.contains(&live[0].instance_type.as_str()));
        assert_eq!(
            live[0]
                .tags
                .get("kubernetes.io/cluster/c1")
                .map(String::as_str),
            Some("owned")
        );
        assert_eq!(
            live[0]
                .tags
                .get("joiner.sh/provisioner-name")
                .map(String::as_str),
            Some("web")
        );
    }
    assert_eq!(
        instances(&h.clients).await.len(),
        2,
        "nothing else launched"
    );
    assert!(matches!(outcome.launches[0], Launch::Launched(ref l) if !l.adopted));

    // Events: which claim each pod waits for, and why the huge one waits for nothing.
    let events = event_posts(&h.api);
    assert_eq!(events.len(), 3);
    for e in &events {
        let pod = format!(
            "shop/{}",
            e.body["involvedObject"]["name"]
                .as_str()
                .unwrap_or_default()
        );
        if pod == "shop/huge" {
            assert_eq!(e.body["type"], "Warning");
            assert_eq!(e.body["reason"], "FailedScheduling");
            assert_eq!(
                e.body["message"],
                outcome.plan.unschedulable[0].reason.as_str()
            );
        } else {
            assert_eq!(e.body["type"], "Normal");
            assert_eq!(e.body["reason"], "Nominated");
            assert_eq!(
                e.body["message"],
                format!("Pod should schedule on nodeclaim/{}", claim_of_pod[&pod])
            );
        }
    }
    let created = h
        .ctx
        .metrics
        .claims_created
        .get_or_create(&joiner_controller::metrics::ProvisionerLabels {
            provisioner: "web".into(),
        })
        .get();
    assert_eq!(created, 2);
    assert_eq!(h.ctx.metrics.pods_pending.get(), 3);
    assert_eq!(h.ctx.metrics.pods_scheduled.get(), 2);

    // The claims reach the store (as the watcher would deliver them) while the pods are
    // still pending: the second batch finds each pod's room held on its claim (its
    // nomination) and writes nothing new.
    let mut claims_writer = h.claims;
    for patch in &patches {
        let name = patch
            .path
            .trim_start_matches(&format!("{CLAIMS}/"))
            .trim_end_matches("/status");
        let mut body = posts
            .iter()
            .map(|p| stored(p, "x"))
            .find(|b| b["metadata"]["name"] == name)
            .expect("the claim was posted");
        merge_status(&mut body, &patch.body["status"]);
        claims_writer.apply_watcher_event(&Event::Apply(obj::<NodeClaim>(body)));
    }
    let writes_before = h.api.writes().len();
    let second = provision_batch(&h.ctx, &mut memory)
        .await
        .expect("second batch runs");
    assert!(second.errors.is_empty(), "{:?}", second.errors);
    assert!(second.plan.new_nodes.is_empty(), "{:?}", second.plan);
    let unschedulable: Vec<&str> = second
        .plan
        .unschedulable
        .iter()
        .map(|u| u.pod.as_str())
        .collect();
    assert!(
        second.plan.existing_nodes.is_empty() && unschedulable == ["shop/huge"],
        "the pods are held on their claims, not planned again: {:?}",
        second.plan
    );
    assert_eq!(
        h.api.writes().len(),
        writes_before,
        "no claim, status or repeated event: {:?}",
        &h.api.writes()[writes_before..]
    );
    assert_eq!(instances(&h.clients).await.len(), 2);

    // Nor does the launcher touch claims it has just launched.
    assert!(launch_pending_claims(&h.ctx, &mut memory).await.is_empty());
}

#[tokio::test]
async fn a_self_affine_group_waits_on_the_claim_bought_for_it_rather_than_buying_another() {
    // Pods that must share a node (required pod affinity on the hostname to their own app):
    // while the node bought for them is in flight they are still pending, and the next batch
    // must put them on it, not buy a second node for the group.
    let together = |name: &str| {
        let mut pod = pending_pod(name, "500m");
        pod.spec.as_mut().expect("spec").affinity = Some(obj(json!({"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": "shop"}}}]}})));
        pod
    };
    let h = harness(
        vec![together("a"), together("b")],
        vec![],
        Script::default(),
    )
    .await;
    let mut memory = Memory::default();
    let first = provision_batch(&h.ctx, &mut memory)
        .await
        .expect("batch runs");
    assert!(first.errors.is_empty(), "{:?}", first.errors);
    assert_eq!(first.plan.new_nodes.len(), 1, "{:?}", first.plan);
    assert_eq!(first.plan.new_nodes[0].pods, ["shop/a", "shop/b"]);

    let posts = claim_posts(&h.api);
    let patches = status_patches(&h.api);
    assert_eq!((posts.len(), patches.len()), (1, 1));
    let mut body = stored(&posts[0], "x");
    merge_status(&mut body, &patches[0].body["status"]);
    // Without its nominations (a claim an older release wrote), the simulation itself must
    // put the group on the claim; with them the pods are held there before it runs.
    body["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .remove("joiner.sh/nominated-pods");
    let name = body["metadata"]["name"].as_str().expect("name").to_string();
    let mut claims_writer = h.claims;
    claims_writer.apply_watcher_event(&Event::Apply(obj::<NodeClaim>(body)));

    let second = provision_batch(&h.ctx, &mut memory)
        .await
        .expect("second batch runs");
    assert!(second.errors.is_empty(), "{:?}", second.errors);
    assert!(second.plan.new_nodes.is_empty(), "{:?}", second.plan);
    assert_eq!(
        on_existing(&second.plan),
        [(name.as_str(), vec!["shop/a", "shop/b"])]
    );
    assert_eq!(claim_posts(&h.api).len(), 1, "no second claim");
    assert_eq!(instances(&h.clients).await.len(), 1);
}

#[tokio::test]
async fn a_node_whose_csi_node_allows_no_more_volumes_takes_only_pods_without_one() {
    // An existing node with room, whose CSINode lets the EBS driver attach nothing more: the
    // kube-scheduler's NodeVolumeLimits keeps a pod with an EBS volume off it, so the batch
    // buys a node for that pod and puts the other pod on the existing node.
    let mut stateful = pending_pod("stateful", "500m");
    stateful.spec.as_mut().expect("spec").volumes = Some(vec![obj(json!(
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    ))]);
    let mut h = harness(
        vec![pending_pod("plain", "500m"), stateful],
        vec![],
        Script::default(),
    )
    .await;
    h._nodes
        .apply_watcher_event(&Event::Apply(obj::<Node>(json!({
        "metadata": {"name": "ip-existing", "labels": {"kubernetes.io/hostname": "ip-existing"}},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "58"},
                   "conditions": [{"type": "Ready", "status": "True"}]}}))));
    let claims = store(vec![obj(json!({
        "metadata": {"name": "data", "namespace": "shop"},
        "spec": {"storageClassName": "gp3", "accessModes": ["ReadWriteOnce"]}}))]);
    let classes = store(vec![obj(json!({
        "metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer"}))]);
    let csi_nodes = store(vec![obj(json!({
        "metadata": {"name": "ip-existing"},
        "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-0abc",
                              "allocatable": {"count": 0}}]}}))]);
    h.ctx.state.volumes = joiner_controller::state::VolumeStores {
        claims: claims.as_reader(),
        volumes: store(Vec::new()).as_reader(),
        classes: classes.as_reader(),
        csi_nodes: csi_nodes.as_reader(),
        attachments: joiner_controller::state::VolumeStores::empty().attachments,
    };
    let mut memory = Memory::default();
    let batch = provision_batch(&h.ctx, &mut memory)
        .await
        .expect("batch runs");
    assert!(batch.errors.is_empty(), "{:?}", batch.errors);
    assert_eq!(
        on_existing(&batch.plan),
        [("ip-existing", vec!["shop/plain"])]
    );
    assert_eq!(batch.plan.new_nodes.len(), 1, "{:?}", batch.plan);
    assert_eq!(batch.plan.new_nodes[0].pods, ["shop/stateful"]);
    assert_eq!(claim_posts(&h.api).len(), 1);
}

#[tokio::test]
async fn a_taken_claim_name_is_retried_with_a_fresh_one() {
    let h = harness(
        vec![pending_pod("a", "1500m")],
        vec![],
        Script {
            conflicts: 1,
            ..Script::default()
        },
    )
    .await;
    let outcome = provision_batch(&h.ctx, &mut Memory::default())
        .await
        .expect("batch runs");
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    let posts = claim_posts(&h.api);
    assert_eq!(posts.len(), 2, "one 409, one retry");
    let first = posts[0].body["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let second = posts[1].body["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    assert_ne!(first, second);
    assert_eq!(outcome.claims.len(), 1);
    assert_eq!(outcome.claims[0].name(), second);
    assert_eq!(live_instances_of(&h.clients, second).await.len(), 1);
    assert!(live_instances_of(&h.clients, first).await.is_empty());
}

#[tokio::test]
async fn claim_names_taken_every_time_are_an_error_and_launch_nothing() {
    let h = harness(
        vec![pending_pod("a", "1500m")],
        vec![],
        Script {
            conflicts: 100,
            ..Script::default()
        },
    )
    .await;
    let outcome = provision_batch(&h.ctx, &mut Memory::default())
        .await
        .expect("the batch itself runs");
    assert_eq!(outcome.errors.len(), 1);
    let text = outcome.errors[0].to_string();
    assert!(
        text.starts_with("NodeClaim web-") && text.ends_with("name already exists (tried 3 names)"),
        "{text}"
    );
    assert_eq!(claim_posts(&h.api).len(), 3);
    assert!(status_patches(&h.api).is_empty());
    assert!(instances(&h.clients).await.is_empty(), "nothing launched");
}

#[tokio::test]
async fn a_claim_deleted_during_launch_has_its_instance_terminated() {
    let h = harness(
        vec![pending_pod("a", "1500m")],
        vec![],
        Script {
            status_not_found: true,
            ..Script::default()
        },
    )
    .await;
    let outcome = provision_batch(&h.ctx, &mut Memory::default())
        .await
        .expect("the batch itself runs");
    assert_eq!(outcome.errors.len(), 1, "{:?}", outcome.errors);
    let name = outcome.claims[0].name().to_string();
    match &outcome.errors[0] {
        ProvisioningError::ClaimGone { claim, instance_id } => {
            assert_eq!(claim, &name);
            let all = instances(&h.clients).await;
            let inst = all.iter().find(|i| &i.id == instance_id).expect("in moto");
            assert!(
                inst.state == "terminated" || inst.state == "shutting-down",
                "{inst:?}"
            );
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(outcome.errors[0]
        .to_string()
        .starts_with(&format!("NodeClaim {name}: deleted")));
    assert!(live_instances_of(&h.clients, &name).await.is_empty());
}

/// A claim as a previous controller run wrote it: spec and UID, no status.
fn written_claim(name: &str, zones: &[&str]) -> NodeClaim {
    let mut requirements = vec![
        requirement("kubernetes.io/arch", &["amd64"]),
        requirement("joiner.sh/provisioner-name", &["web"]),
        requirement("node.kubernetes.io/instance-type", &TYPES),
        requirement("karpenter.sh/capacity-type", &["on-demand"]),
    ];
    if !zones.is_empty() {
        requirements.push(requirement("topology.kubernetes.io/zone", zones));
    }
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
        "metadata": {"name": name, "uid": format!("uid-{name}"),
                     "finalizers": ["joiner.sh/termination"],
                     "labels": {"joiner.sh/provisioner-name": "web"}},
        "spec": {
            "provisionerName": "web",
            "requirements": requirements,
            "resources": {"requests": {"cpu": "1500m"}},
            "nodeTemplateRef": {"name": "default"},
        },
    }))
}

#[tokio::test]
async fn room_bought_for_a_pod_stays_its_own_after_a_leader_restart() {
    // The old leader wrote web-held for shop/a (1.5 cpu) and lost its lease before launching.
    // The new leader launches the claim, then plans shop/a and shop/b (1.6 cpu, packed first
    // as the larger): b must not take the room bought for a; b gets a claim of its own.
    let mut held = written_claim("web-held", &[]);
    held.metadata.annotations = Some(
        [(
            "joiner.sh/nominated-pods".to_string(),
            r#"["shop/a"]"#.to_string(),
        )]
        .into(),
    );
    let h = harness(
        vec![pending_pod("a", "1500m"), pending_pod("b", "1600m")],
        vec![held],
        Script::default(),
    )
    .await;
    let mut memory = Memory::default();
    let launched = launch_pending_claims(&h.ctx, &mut memory).await;
    assert!(
        matches!(launched[..], [Ok(Launch::Launched(_))]),
        "{launched:?}"
    );

    let outcome = provision_batch(&h.ctx, &mut memory)
        .await
        .expect("batch runs");
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert!(outcome.plan.existing_nodes.is_empty(), "{:?}", outcome.plan);
    assert_eq!(outcome.plan.new_nodes.len(), 1, "{:?}", outcome.plan);
    assert_eq!(outcome.plan.new_nodes[0].pods, ["shop/b"]);
    let posts = claim_posts(&h.api);
    assert_eq!(posts.len(), 1);
    assert_eq!(
        posts[0].body["metadata"]["annotations"]["joiner.sh/nominated-pods"],
        r#"["shop/b"]"#
    );
}

#[tokio::test]
async fn crash_after_the_claim_write_launches_once_and_a_rerun_adopts() {
    // The previous run wrote the claim and died before CreateFleet.
    let claim = written_claim("web-crsh1", &[]);
    let h = harness(vec![], vec![claim.clone()], Script::default()).await;
    assert!(live_instances_of(&h.clients, "web-crsh1").await.is_empty());

    let results = launch_pending_claims(&h.ctx, &mut Memory::default()).await;
    assert_eq!(results.len(), 1);
    let first = match &results[0] {
        Ok(Launch::Launched(l)) => l.clone(),
        other => panic!("not launched: {other:?}"),
    };
    assert!(!first.adopted);
    let live = live_instances_of(&h.clients, "web-crsh1").await;
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].id, first.instance_id);

    // It died again before the status reached the store: a fresh run adopts the instance.
    let again = launch_pending_claims(&h.ctx, &mut Memory::default()).await;
    match &again[0] {
        Ok(Launch::Launched(l)) => {
            assert!(l.adopted);
            assert_eq!(l.instance_id, first.instance_id);
        }
        other => panic!("not adopted: {other:?}"),
    }
    assert_eq!(live_instances_of(&h.clients, "web-crsh1").await.len(), 1);
    let patches = status_patches(&h.api);
    assert_eq!(patches.len(), 2);
    for p in &patches {
        assert_eq!(p.path, format!("{CLAIMS}/web-crsh1/status"));
        assert_eq!(p.body["status"]["instanceID"], first.instance_id.as_str());
    }
    assert!(
        claim_posts(&h.api).is_empty(),
        "the launcher never writes claims"
    );
}

#[tokio::test]
async fn crash_after_create_fleet_writes_the_status_without_launching_again() {
    let claim = written_claim("web-crsh2", &[]);
    let h = harness(vec![], vec![claim.clone()], Script::default()).await;
    // The previous run launched and died before the status write.
    let launched = h
        .ctx
        .cloud
        .create(&LaunchRequest {
            claim_name: "web-crsh2".into(),
            claim_uid: "uid-web-crsh2".into(),
            provisioner: "web".into(),
            capacity_type: CapacityType::OnDemand,
            candidates: vec![("c5.large".into(), 0.085)],
            zones: vec![],
            warm_pool: None,
        })
        .await
        .expect("the first run's launch");

    let results = launch_pending_claims(&h.ctx, &mut Memory::default()).await;
    match &results[..] {
        [Ok(Launch::Launched(l))] => {
            assert!(l.adopted);
            assert_eq!(l.instance_id, launched.instance_id);
            assert_eq!(l.instance_type, "c5.large");
        }
        other => panic!("not adopted: {other:?}"),
    }
    let live = live_instances_of(&h.clients, "web-crsh2").await;
    assert_eq!(live.len(), 1, "no second instance: {live:?}");
    let patches = status_patches(&h.api);
    assert_eq!(patches.len(), 1);
    assert_eq!(
        patches[0].body["status"]["instanceID"],
        launched.instance_id.as_str()
    );
    assert_eq!(
        patches[0].body["status"]["providerID"],
        launched.provider_id.as_str()
    );
    assert_eq!(patches[0].body["status"]["instanceType"], "c5.large");
}

#[tokio::test]
async fn no_capacity_deletes_the_claim_so_its_pods_are_planned_again() {
    let claim = written_claim("web-nocap", &[]);
    let h = harness(vec![], vec![claim], Script::default()).await;
    for t in TYPES {
        for z in ["a", "b", "c", "d", "e", "f"] {
            h.unavailable.mark(OfferingKey::new(
                t,
                &format!("us-east-1{z}"),
                CapacityType::OnDemand,
            ));
        }
    }
    let results = launch_pending_claims(&h.ctx, &mut Memory::default()).await;
    match &results[..] {
        [Ok(Launch::Requeued { claim, code })] => {
            assert_eq!(claim, "web-nocap");
            assert_eq!(code, "NoAvailableOffering");
        }
        other => panic!("not requeued: {other:?}"),
    }
    let writes = h.api.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].is(Method::DELETE, &format!("{CLAIMS}/web-nocap")));
    assert!(instances(&h.clients).await.is_empty());
    let failures = h
        .ctx
        .metrics
        .launch_failures
        .get_or_create(&joiner_controller::metrics::CodeLabels {
            code: "NoAvailableOffering".into(),
        })
        .get();
    assert_eq!(failures, 1);
}

#[tokio::test]
async fn other_launch_failures_mark_the_claim_and_back_off() {
    // us-east-1c has no tagged subnet: the provider cannot launch there.
    let claim = written_claim("web-nosub", &["us-east-1c"]);
    let h = harness(vec![], vec![claim], Script::default()).await;
    let mut memory = Memory::default();
    let results = launch_pending_claims(&h.ctx, &mut memory).await;
    let message = match &results[..] {
        [Ok(Launch::Failed {
            claim,
            code,
            message,
        })] => {
            assert_eq!(claim, "web-nosub");
            assert_eq!(code, "other");
            message.clone()
        }
        other => panic!("not failed: {other:?}"),
    };
    assert!(
        message.starts_with("NodeClaim web-nosub: launch failed:"),
        "{message}"
    );
    assert!(message.contains("us-east-1c"), "{message}");
    let patches = status_patches(&h.api);
    assert_eq!(patches.len(), 1);
    let cond = &patches[0].body["status"]["conditions"][0];
    assert_eq!(cond["type"], "Launched");
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "LaunchFailed");
    assert_eq!(cond["message"], message.as_str());
    assert!(instances(&h.clients).await.is_empty());

    let metrics = &h.ctx.metrics;
    let failures = metrics
        .launch_failures
        .get_or_create(&joiner_controller::metrics::CodeLabels {
            code: "other".into(),
        })
        .get();
    assert_eq!(failures, 1);
    let create_errors = metrics
        .cloud_errors
        .get_or_create(&joiner_controller::metrics::MethodLabels {
            method: "create".into(),
        })
        .get();
    assert_eq!(create_errors, 1);

    // Backing off: an immediate second pass does not try again.
    assert!(memory.next_attempt("web-nosub").is_some());
    assert!(launch_pending_claims(&h.ctx, &mut memory).await.is_empty());
    assert_eq!(status_patches(&h.api).len(), 1);
}

#[tokio::test]
async fn run_provisions_pending_pods_and_stops_when_cancelled() {
    let h = harness(vec![pending_pod("a", "1500m")], vec![], Script::default()).await;
    let mut settings = Settings::new(CLUSTER);
    settings.batch_idle = std::time::Duration::from_millis(200);
    let ctx = Arc::new(Context::new(
        h.ctx.client.clone(),
        h.ctx.state.clone(),
        h.ctx.cloud.clone(),
        settings,
    ));
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(provisioning::run(ctx.clone(), stop.clone()));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while status_patches(&h.api).is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(30), task)
        .await
        .expect("run returns after cancel")
        .expect("run does not panic");
    assert_eq!(claim_posts(&h.api).len(), 1);
    assert_eq!(status_patches(&h.api).len(), 1);
    let name = claim_posts(&h.api)[0].body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(live_instances_of(&h.clients, &name).await.len(), 1);
}

#[tokio::test]
async fn a_zone_the_pods_select_pins_the_claim_and_the_instance() {
    let mut pod = pending_pod("zonal", "1500m");
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_selector = Some(
            [(
                "topology.kubernetes.io/zone".to_string(),
                "us-east-1b".to_string(),
            )]
            .into(),
        );
    }
    let h = harness(vec![pod], vec![], Script::default()).await;
    let outcome = provision_batch(&h.ctx, &mut Memory::default())
        .await
        .expect("batch runs");
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    let posts = claim_posts(&h.api);
    assert_eq!(posts.len(), 1);
    let reqs = posts[0].body["spec"]["requirements"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        reqs.contains(&requirement("topology.kubernetes.io/zone", &["us-east-1b"])),
        "{reqs:?}"
    );
    let patches = status_patches(&h.api);
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].body["status"]["zone"], "us-east-1b");
    let name = outcome.claims[0].name();
    assert_eq!(live_instances_of(&h.clients, name).await.len(), 1);
}

#[tokio::test]
async fn a_throttled_claim_write_is_an_error_naming_the_claim_and_launches_nothing() {
    let h = harness(
        vec![pending_pod("a", "1500m")],
        vec![],
        Script {
            throttle_creates: true,
            ..Script::default()
        },
    )
    .await;
    let mut memory = Memory::default();
    let outcome = provision_batch(&h.ctx, &mut memory)
        .await
        .expect("the batch itself runs");
    assert_eq!(outcome.errors.len(), 1, "{:?}", outcome.errors);
    let name = claim_posts(&h.api)[0].body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match &outcome.errors[0] {
        ProvisioningError::CreateClaim { claim, .. } => assert_eq!(claim, &name),
        other => panic!("unexpected error {other}"),
    }
    assert!(
        outcome.errors[0]
            .to_string()
            .starts_with(&format!("NodeClaim {name}: create:")),
        "{}",
        outcome.errors[0]
    );
    assert!(outcome.claims.is_empty());
    assert!(instances(&h.clients).await.is_empty(), "nothing launched");
    // The pod is told nothing yet: no claim was written for it.
    assert!(event_posts(&h.api).is_empty());
}

#[tokio::test]
async fn run_plans_nothing_before_the_claims_are_listed() {
    let h = harness(vec![pending_pod("a", "1500m")], vec![], Script::default()).await;
    let mut settings = Settings::new(CLUSTER);
    settings.batch_idle = std::time::Duration::from_millis(100);
    let mut state = h.ctx.state.clone();
    // The NodeClaim watcher has not delivered its initial list yet.
    let unlisted = Writer::<NodeClaim>::default();
    state.node_claims = unlisted.as_reader();
    let ctx = Arc::new(Context::new(
        h.ctx.client.clone(),
        state,
        h.ctx.cloud.clone(),
        settings,
    ));
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(provisioning::run(ctx, stop.clone()));
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(h.api.requests().is_empty(), "{:?}", h.api.calls());
    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("run returns after cancel while waiting")
        .expect("run does not panic");
    assert!(instances(&h.clients).await.is_empty());
    drop(unlisted);
}

#[tokio::test]
async fn the_pending_gauge_returns_to_zero_when_nothing_is_pending() {
    // The last batch's count must not outlive it: alerts on pods pending too long read it.
    let h = harness(vec![], vec![], Script::default()).await;
    let ctx = Arc::new(Context::new(
        h.ctx.client.clone(),
        h.ctx.state.clone(),
        h.ctx.cloud.clone(),
        Settings::new(CLUSTER),
    ));
    ctx.metrics.pods_pending.set(5);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(provisioning::run(ctx.clone(), stop.clone()));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while ctx.metrics.pods_pending.get() != 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(30), task)
        .await
        .expect("run returns after cancel")
        .expect("run does not panic");
    assert_eq!(ctx.metrics.pods_pending.get(), 0);
    assert!(claim_posts(&h.api).is_empty());
}
