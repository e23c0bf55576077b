//! Shared by the lifecycle tests (registration, liveness, termination, gc): the real
//! `AwsCloudProvider` on a moto environment, a `Context` over the scripted API, and object
//! builders.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use joiner_aws::{testing, AwsClients, AwsCloudProvider};
use joiner_controller::pod_record::PodRecord;
use joiner_controller::{ClusterState, Context, Settings};
use joiner_core::{CapacityType, CloudProvider, LaunchRequest, LaunchedNode};
use joiner_moto::{MotoServer, MotoSession};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::store::Writer;
use serde_json::{json, Value};

use crate::support::{obj, store};

pub const CLUSTER: &str = "c1";
const PREFIX: &str = "/joiner-test/service";
const K8S: &str = "1.31";

/// moto, its clients and a provider for cluster `c1` knowing Provisioner `web`.
pub struct Cloud {
    pub moto: MotoSession,
    pub clients: AwsClients,
    pub provider: Arc<AwsCloudProvider>,
    pub env: testing::Environment,
}

/// NodeTemplate `default`: AL2023 on the moto environment's tagged subnets and groups.
pub fn node_template() -> NodeTemplate {
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default"},
        "spec": {"amiFamily": "AL2023",
            "subnetSelector": {"joiner.sh/discovery": CLUSTER},
            "securityGroupSelector": {"joiner.sh/discovery": CLUSTER}},
    }))
}

pub async fn cloud() -> Cloud {
    let moto = MotoServer::session().expect("moto server");
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let env = testing::environment(&clients, CLUSTER, PREFIX, K8S)
        .await
        .expect("environment");
    let nt = node_template();
    let web: Provisioner = obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
        "metadata": {"name": "web"}, "spec": {"providerRef": {"name": "default"}},
    }));
    let (p, _) = testing::provider(
        &clients,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        vec![web],
        vec![nt],
    );
    Cloud {
        moto,
        clients,
        provider: Arc::new(p),
        env,
    }
}

/// A launch of one m5.large for claim `claim` of Provisioner web, in any zone.
pub fn launch_request(claim: &str) -> LaunchRequest {
    LaunchRequest {
        claim_name: claim.into(),
        claim_uid: format!("uid-{claim}"),
        provisioner: "web".into(),
        capacity_type: CapacityType::OnDemand,
        candidates: vec![("m5.large".into(), 0.096)],
        zones: vec![],
        warm_pool: None,
    }
}

/// Launches an instance for claim `claim` through the real provider.
pub async fn launch(cloud: &Cloud, claim: &str) -> LaunchedNode {
    cloud
        .provider
        .create(&launch_request(claim))
        .await
        .expect("launch")
}

/// The state of instance `id` in moto (`running`, `terminated`, ...).
pub async fn instance_state(cloud: &Cloud, id: &str) -> String {
    let out = cloud
        .clients
        .ec2
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .expect("describe");
    out.reservations()[0].instances()[0]
        .state()
        .and_then(|s| s.name())
        .map(|n| n.as_str().to_string())
        .unwrap_or_default()
}

/// Writers of every store, to build and change the state a pass reads.
pub struct Stores {
    pub pods: Writer<PodRecord>,
    pub nodes: Writer<Node>,
    pub claims: Writer<NodeClaim>,
    pub provisioners: Writer<Provisioner>,
    pub node_templates: Writer<NodeTemplate>,
}

impl Stores {
    pub fn new(pods: Vec<Pod>, nodes: Vec<Node>, claims: Vec<NodeClaim>) -> Self {
        Stores {
            pods: store(pods.into_iter().map(PodRecord::from).collect()),
            nodes: store(nodes),
            claims: store(claims),
            provisioners: store(vec![]),
            node_templates: store(vec![]),
        }
    }

    /// The same stores, with `provisioners` and `node_templates` in theirs.
    pub fn with_objects(
        mut self,
        provisioners: Vec<Provisioner>,
        node_templates: Vec<NodeTemplate>,
    ) -> Self {
        self.provisioners = store(provisioners);
        self.node_templates = store(node_templates);
        self
    }

    pub fn state(&self) -> ClusterState {
        ClusterState {
            pods: self.pods.as_reader(),
            nodes: self.nodes.as_reader(),
            daemonsets: store(vec![]).as_reader(),
            provisioners: self.provisioners.as_reader(),
            node_templates: self.node_templates.as_reader(),
            node_claims: self.claims.as_reader(),
            pdbs: store(vec![]).as_reader(),
            namespaces: ClusterState::empty().namespaces,
            created: Default::default(),
            claim_history: Default::default(),
            volumes: joiner_controller::state::VolumeStores::empty(),
        }
    }

    /// Removes `pod` from the pods store, as the watcher does when the pod is deleted.
    pub fn delete_pod(&mut self, pod: &Pod) {
        self.pods
            .apply_watcher_event(&kube::runtime::watcher::Event::Delete(PodRecord::from(pod)));
    }
}

/// Settings with short timeouts for tests.
pub fn settings() -> Settings {
    let mut s = Settings::new(CLUSTER);
    s.orphan_grace = Duration::ZERO;
    s
}

pub fn context(
    client: kube::Client,
    stores: &Stores,
    cloud: &Cloud,
    settings: Settings,
) -> Context<AwsCloudProvider> {
    Context::new(client, stores.state(), cloud.provider.clone(), settings)
}

/// A NodeClaim `name` of Provisioner `web`, merged with `extra` (top-level keys replaced).
pub fn claim(name: &str, extra: Value) -> NodeClaim {
    let mut v = json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
        "metadata": {"name": name, "resourceVersion": "10", "uid": format!("uid-{name}"),
            "finalizers": ["joiner.sh/termination"],
            "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"provisionerName": "web"},
    });
    merge(&mut v, extra);
    obj(v)
}

/// A Node `name` merged with `extra`.
pub fn node(name: &str, extra: Value) -> Node {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "5", "uid": format!("uid-{name}")},
        "spec": {},
    });
    merge(&mut v, extra);
    obj(v)
}

/// A Pod `ns/name` on `node`, merged with `extra`.
pub fn pod(ns: &str, name: &str, node: &str, extra: Value) -> Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    });
    merge(&mut v, extra);
    obj(v)
}

/// Deep merge of objects; other values replace.
pub fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                match b.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, e) => *b = e,
    }
}
