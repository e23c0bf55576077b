//! A real `kube::Client` and a mocked API server: the TLS provider does not panic, and
//! `events::publish` sends the request the API server expects.

use http::{Method, Request, Response, StatusCode};
use joiner_controller::crypto;
use joiner_controller::k8s::events;
use k8s_openapi::api::core::v1::Pod;
use kube::client::Body;
use serde_json::{json, Value};

#[tokio::test]
async fn building_a_client_after_installing_the_provider_does_not_panic() {
    crypto::install_default_provider();
    let url = "https://joiner.invalid:6443"
        .parse()
        .expect("static URL parses");
    let config = kube::Config::new(url);
    // Building the TLS connector is where an undecided provider panics; no request is made.
    let client = kube::Client::try_from(config).expect("client builds");
    assert_eq!(client.default_namespace(), "default");
}

#[tokio::test]
async fn publish_creates_a_core_v1_event_on_the_pod() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"},
    }))
    .expect("pod parses");

    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("a request arrives");
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.uri().path(), "/api/v1/namespaces/shop/events");
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .expect("body reads");
        let body: Value = serde_json::from_slice(&bytes).expect("body is JSON");
        assert_eq!(body["apiVersion"], "v1");
        assert_eq!(body["kind"], "Event");
        assert_eq!(body["metadata"]["generateName"], "web-0.");
        assert_eq!(body["metadata"]["namespace"], "shop");
        assert_eq!(
            body["involvedObject"],
            json!({"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "shop",
                   "uid": "u-1", "resourceVersion": "7"})
        );
        assert_eq!(body["reason"], "Unschedulable");
        assert_eq!(body["message"], "no provisioner admits the pod");
        assert_eq!(body["type"], "Warning");
        assert_eq!(body["source"]["component"], "joiner");
        assert_eq!(body["count"], 1);
        assert!(body["firstTimestamp"].is_string());

        let mut stored = body;
        stored["metadata"]["name"] = json!("web-0.abc12");
        let response = Response::builder()
            .status(StatusCode::CREATED)
            .body(Body::from(serde_json::to_vec(&stored).expect("serializes")))
            .expect("response builds");
        send.send_response(response);
    });

    let event = events::publish(
        &client,
        &pod.metadata,
        events::EventType::Warning,
        "Unschedulable",
        "no provisioner admits the pod",
    )
    .await
    .expect("event is created");
    server.await.expect("mock server checks pass");
    assert_eq!(event.metadata.name.as_deref(), Some("web-0.abc12"));
}

#[tokio::test]
async fn publish_names_the_pod_when_the_api_refuses() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "web-0", "namespace": "shop"}}))
            .expect("pod parses");
    let server = tokio::spawn(async move {
        let (_request, send) = handle.next_request().await.expect("a request arrives");
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "events is forbidden", "reason": "Forbidden", "code": 403});
        send.send_response(
            Response::builder()
                .status(StatusCode::FORBIDDEN)
                .body(Body::from(serde_json::to_vec(&status).expect("serializes")))
                .expect("response builds"),
        );
    });
    let err = events::publish(
        &client,
        &pod.metadata,
        events::EventType::Normal,
        "Launched",
        "m",
    )
    .await
    .expect_err("a 403 is an error");
    server.await.expect("mock server ran");
    let text = err.to_string();
    assert!(
        text.starts_with("Pod shop/web-0: creating event Launched:"),
        "{text}"
    );
}

#[test]
fn a_pod_without_namespace_is_an_error_naming_the_field() {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web-0"}})).expect("parses");
    let err = events::pod_event(
        &pod.metadata,
        events::EventType::Normal,
        "r",
        "m",
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    )
    .expect_err("no namespace");
    assert_eq!(
        err.to_string(),
        "Pod <none>/web-0: metadata.namespace: required to publish an event"
    );
}

/// A plain HTTP API server on 127.0.0.1 that answers every request with `code` and counts them.
async fn answering(code: u16) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "TooManyRequests", "code": code,
                        "message": "Cannot evict pod as it would violate the pod's disruption budget."});
                    let body = http_body_util::Full::new(hyper::body::Bytes::from(
                        serde_json::to_vec(&status).unwrap_or_default(),
                    ));
                    async move {
                        Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(body)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, hits)
}

#[tokio::test]
async fn an_eviction_refused_by_a_budget_costs_one_request_with_the_runtimes_client() {
    use joiner_controller::lifecycle::termination::eviction::{evict, Evicted};
    crypto::install_default_provider();
    let (url, hits) = answering(429).await;
    let config = kube::Config::new(url.parse().expect("url"));
    // Built exactly as `joiner controller` builds its client.
    let client =
        joiner_controller::runtime::client_from(config, 100.0, 100).expect("client builds");
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "web-0", "namespace": "shop"}}))
            .expect("pod parses");
    // kube's default retry layer would retry a 429 up to 15 times over minutes inside this one
    // call, holding the whole termination pass; joiner's client answers at once and leaves the
    // retry to its own per-pod backoff.
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        evict(
            &client,
            &joiner_controller::pod_record::PodRecord::from(&pod),
        ),
    )
    .await
    .expect("the eviction answers at once, without the client retrying")
    .expect("a 429 is not an error");
    assert_eq!(answer, Evicted::Refused);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// Every request of the runtime's client has a timeout: an API server that accepts the
/// connection and never answers fails the call after `REQUEST_TIMEOUT`, instead of holding
/// the pass (and every object behind it) for ever.
#[tokio::test(start_paused = true)]
async fn a_request_the_api_server_never_answers_times_out() {
    use joiner_controller::runtime::{client_from, REQUEST_TIMEOUT};
    crypto::install_default_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listener");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    // Accepts, reads, never answers.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let client =
        client_from(kube::Config::new(url.parse().expect("url")), 100.0, 100).expect("client");
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "shop");
    let answer = tokio::time::timeout(REQUEST_TIMEOUT * 3, pods.get("web-0"))
        .await
        .expect("the client gives up on its own");
    assert!(answer.is_err(), "{answer:?}");
}
