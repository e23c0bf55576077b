//! The runtime: the CRD check through the scripted API, and a whole replica (watchers, both
//! HTTP servers, election, leader-only tasks, shutdown) against the scripted API with the real
//! AWS provider on moto.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use http::Method;
use joiner_aws::{testing, AwsClients, AwsCloudProvider};
use joiner_controller::http::Health;
use joiner_controller::leader::LeaseConfig;
use joiner_controller::runtime::{
    check_crds, crd_names, serve_and_lead, LeaderTasks, Parts, RuntimeError,
};
use joiner_controller::{watch, Context, Metrics, Settings};
use joiner_core::CloudProvider;
use joiner_moto::MotoServer;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use support::{mock_api, Recorded, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn crd(name: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": name},
           "spec": {"group": "joiner.sh", "scope": "Cluster",
                    "names": {"plural": name.split('.').next().unwrap_or(name), "kind": "X"},
                    "versions": []}})
}

#[tokio::test]
async fn the_crd_check_reads_each_of_the_three_crds() {
    let (client, api) = mock_api(|r: &Recorded| {
        let name = r.path.rsplit('/').next().unwrap_or_default();
        Reply::ok(crd(name))
    });
    check_crds(&client).await.expect("all installed");
    let expected: Vec<(String, String)> = [
        "provisioners.joiner.sh",
        "nodetemplates.joiner.sh",
        "nodeclaims.joiner.sh",
    ]
    .iter()
    .map(|n| ("GET".to_string(), format!("{CRDS}/{n}")))
    .collect();
    assert_eq!(api.calls(), expected);
    assert_eq!(crd_names().len(), 3);
}

#[tokio::test]
async fn missing_crds_fail_with_how_to_install_them() {
    let (client, _api) = mock_api(|r: &Recorded| {
        if r.path.ends_with("/provisioners.joiner.sh") {
            Reply::ok(crd("provisioners.joiner.sh"))
        } else {
            Reply::not_found("customresourcedefinitions")
        }
    });
    let err = check_crds(&client).await.err();
    let Some(RuntimeError::CrdsMissing { missing }) = &err else {
        panic!("expected CrdsMissing, got {err:?}");
    };
    assert_eq!(
        missing,
        &["nodetemplates.joiner.sh", "nodeclaims.joiner.sh"]
    );
    let text = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("nodetemplates.joiner.sh, nodeclaims.joiner.sh"),
        "{text}"
    );
    assert!(text.contains("joiner crds | kubectl apply -f -"), "{text}");
    assert!(
        text.contains("kubectl apply -f charts/joiner/crds/"),
        "{text}"
    );
}

#[tokio::test]
async fn a_forbidden_crd_read_is_not_mistaken_for_a_missing_crd() {
    let (client, api) = mock_api(|_| Reply::error(403, "Forbidden", "forbidden"));
    let err = check_crds(&client).await.err();
    assert!(
        matches!(&err, Some(RuntimeError::CrdCheck { crd, .. }) if crd == "provisioners.joiner.sh"),
        "{err:?}"
    );
    assert_eq!(api.requests().len(), 1, "stops at the first failure");
}

/// A scripted cluster: empty lists for every watched kind, watches answered 500 (the
/// watcher backs off), and a Lease store.
fn cluster() -> impl FnMut(&Recorded) -> Reply + Send + 'static {
    let lease: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    let lists = [
        ("/api/v1/pods", "PodList", "v1"),
        ("/api/v1/nodes", "NodeList", "v1"),
        ("/apis/apps/v1/daemonsets", "DaemonSetList", "apps/v1"),
        (
            "/api/v1/persistentvolumeclaims",
            "PersistentVolumeClaimList",
            "v1",
        ),
        ("/api/v1/persistentvolumes", "PersistentVolumeList", "v1"),
        ("/api/v1/namespaces", "NamespaceList", "v1"),
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            "StorageClassList",
            "storage.k8s.io/v1",
        ),
        (
            "/apis/storage.k8s.io/v1/csinodes",
            "CSINodeList",
            "storage.k8s.io/v1",
        ),
        (
            "/apis/storage.k8s.io/v1/volumeattachments",
            "VolumeAttachmentList",
            "storage.k8s.io/v1",
        ),
        (
            "/apis/policy/v1/poddisruptionbudgets",
            "PodDisruptionBudgetList",
            "policy/v1",
        ),
        (
            "/apis/joiner.sh/v1alpha1/provisioners",
            "ProvisionerList",
            "joiner.sh/v1alpha1",
        ),
        (
            "/apis/joiner.sh/v1alpha1/nodetemplates",
            "NodeTemplateList",
            "joiner.sh/v1alpha1",
        ),
        (
            "/apis/joiner.sh/v1alpha1/nodeclaims",
            "NodeClaimList",
            "joiner.sh/v1alpha1",
        ),
    ];
    move |r: &Recorded| {
        if r.path.starts_with("/apis/coordination.k8s.io/") {
            let mut current = lease.lock().expect("lease");
            return match r.method {
                Method::GET => match current.as_ref() {
                    Some(v) => Reply::ok(v.clone()),
                    None => Reply::not_found("lease"),
                },
                _ => {
                    let mut v = r.body.clone();
                    let rv = current
                        .as_ref()
                        .and_then(|c| c["metadata"]["resourceVersion"].as_str())
                        .and_then(|s| s.parse::<u64>().ok())
                        .unwrap_or(0);
                    v["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
                    *current = Some(v.clone());
                    Reply::ok(v)
                }
            };
        }
        if r.query.contains("watch=true") {
            return Reply::error(500, "InternalError", "no watches in this test");
        }
        match lists.iter().find(|(path, _, _)| *path == r.path) {
            Some((_, kind, api_version)) => Reply::ok(json!({
                "kind": kind, "apiVersion": api_version,
                "metadata": {"resourceVersion": "10"}, "items": [],
            })),
            None => Reply::not_found(&r.path),
        }
    }
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut raw = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut raw)).await;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, raw)
}

/// The production cloud: the AWS provider with its calls measured.
type Cloud = joiner_controller::instrumented::Instrumented<AwsCloudProvider>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_syncs_leads_runs_its_tasks_and_releases_the_lease_on_stop() {
    let moto = MotoServer::session().expect("moto");
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let (client, api) = mock_api(cluster());

    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let (provider, _unavailable): (AwsCloudProvider, _) = testing::provider(
        &clients,
        testing::provider_config("rt-test", "/joiner/test", "1.31"),
        Vec::new(),
        Vec::new(),
    );
    let cloud = Arc::new(joiner_controller::instrumented::Instrumented::new(
        Arc::new(provider),
        metrics.clone(),
    ));
    let reflectors = watch::reflectors(&client);
    let ctx = Arc::new(Context {
        client: client.clone(),
        state: reflectors.state,
        cloud,
        metrics,
        settings: Settings::new("rt-test"),
    });
    let metrics_listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let probes_listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let metrics_addr = metrics_listener.local_addr().expect("addr");
    let probes_addr = probes_listener.local_addr().expect("addr");

    // The leader-only task lists the cluster's instances in moto (none yet) and waits.
    let listed = Arc::new(AtomicUsize::new(usize::MAX));
    let terms = Arc::new(AtomicUsize::new(0));
    let (l, t) = (listed.clone(), terms.clone());
    let tasks: LeaderTasks<Cloud> =
        Arc::new(move |ctx: Arc<Context<Cloud>>, term: CancellationToken| {
            t.fetch_add(1, Ordering::SeqCst);
            let l = l.clone();
            vec![async move {
                if let Ok(nodes) = ctx.cloud.list().await {
                    l.store(nodes.len(), Ordering::SeqCst);
                }
                term.cancelled().await;
            }
            .boxed()]
        });
    let health = Arc::new(Health::register(&mut registry));
    let parts = Parts {
        ctx,
        drivers: reflectors.drivers,
        registry: Arc::new(registry),
        health: health.clone(),
        metrics: metrics_listener,
        probes: probes_listener,
        lease: LeaseConfig::new("joiner", "joiner-leader-election", "replica-a_1"),
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(serve_and_lead(parts, tasks, stop.clone()));

    let mut ready = false;
    for _ in 0..100 {
        if get(probes_addr, "/readyz").await.0 == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "readyz never turned 200: {:?}", api.calls());
    assert_eq!(get(probes_addr, "/healthz").await.0, 200);
    for _ in 0..100 {
        if listed.load(Ordering::SeqCst) != usize::MAX {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        listed.load(Ordering::SeqCst),
        0,
        "the task listed moto's instances"
    );
    assert_eq!(terms.load(Ordering::SeqCst), 1);
    assert!(health.is_leader());
    let (status, body) = get(metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        body.contains(r#"joiner_cloudprovider_duration_seconds_count{method="list"} 1"#),
        "{body}"
    );
    assert!(body.contains("joiner_leader 1"), "{body}");

    // Every kind was listed before the lease was asked for.
    let calls = api.calls();
    let first_lease = calls
        .iter()
        .position(|(_, p)| p.contains("/leases/"))
        .expect("the lease was read");
    for kind in [
        "pods",
        "nodes",
        "daemonsets",
        "poddisruptionbudgets",
        "namespaces",
        "nodeclaims",
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
        "csinodes",
        "volumeattachments",
    ] {
        let listed_at = calls
            .iter()
            .position(|(m, p)| m == "GET" && p.ends_with(&format!("/{kind}")));
        assert!(
            listed_at.is_some_and(|i| i < first_lease),
            "{kind} listed before the election: {calls:?}"
        );
    }

    // Initial lists come in pages of 500 (stripped as each page arrives), consistent reads.
    let pod_list = api
        .requests()
        .into_iter()
        .find(|r| r.path == "/api/v1/pods" && !r.query.contains("watch=true"))
        .expect("pods listed");
    assert!(pod_list.query.contains("limit=500"), "{}", pod_list.query);
    assert!(
        !pod_list.query.contains("resourceVersion=0"),
        "{}",
        pod_list.query
    );

    stop.cancel();
    let result = tokio::time::timeout(Duration::from_secs(15), run)
        .await
        .expect("stops in time")
        .expect("joins");
    assert!(result.is_ok(), "{result:?}");
    let release = api
        .writes()
        .into_iter()
        .rev()
        .find(|w| w.path.contains("/leases/"))
        .expect("lease writes");
    assert_eq!(release.method, Method::PUT);
    assert_eq!(release.body["spec"]["holderIdentity"], json!(""));
    assert_eq!(
        get(probes_addr, "/healthz").await.0,
        0,
        "the servers stopped"
    );
}

#[tokio::test(start_paused = true)]
async fn the_client_rate_limit_allows_the_burst_then_the_sustained_rate() {
    use joiner_controller::runtime::RateLimitLayer;
    use tower_layer::Layer;

    let (service, mut handle) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let served = Arc::new(Mutex::new(Vec::new()));
    let log = served.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            log.lock().expect("log").push((
                tokio::time::Instant::now(),
                request.uri().path().to_string(),
            ));
            let body = serde_json::to_vec(&crd("provisioners.joiner.sh")).expect("serializes");
            send.send_response(
                http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body))
                    .expect("builds"),
            );
        }
    });
    // 2 requests at once, then 1 per second.
    let client = kube::Client::new(RateLimitLayer::new(1.0, 2).layer(service), "default");
    let start = tokio::time::Instant::now();
    for _ in 0..2 {
        check_crds(&client).await.expect("answers");
    }
    let times: Vec<Duration> = served
        .lock()
        .expect("log")
        .iter()
        .map(|(t, _)| t.duration_since(start))
        .collect();
    assert_eq!(times.len(), 6, "three CRDs, twice");
    assert!(times[0] < Duration::from_millis(10) && times[1] < Duration::from_millis(10));
    // Each later request waited for its token: one per second.
    for (i, t) in times.iter().enumerate().skip(2) {
        let due = Duration::from_secs(i as u64 - 1);
        assert!(
            *t >= due && *t < due + Duration::from_millis(100),
            "request {i} at {t:?}, due at {due:?}: {times:?}"
        );
    }
}
