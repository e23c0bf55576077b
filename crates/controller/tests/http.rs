//! The metrics and probe servers over a real TCP listener.

use std::sync::Arc;
use std::time::Duration;

use joiner_controller::http::{serve, Endpoint, Health};
use joiner_controller::Metrics;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Sends `GET path` and returns (status code, body).
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("sends the request");
    let mut raw = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut raw))
        .await
        .expect("answers in time")
        .expect("reads the answer");
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

async fn start(endpoint: Endpoint, stop: &CancellationToken) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("has an address");
    tokio::spawn(serve(listener, endpoint, stop.clone()));
    addr
}

#[tokio::test]
async fn metrics_are_served_in_the_openmetrics_text_format() {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let health = Health::register(&mut registry);
    health.beat(true);
    metrics.pods_pending.set(7);
    metrics.reconcile_failed("provisioning");
    let stop = CancellationToken::new();
    let addr = start(Endpoint::Metrics(Arc::new(registry)), &stop).await;

    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(body.contains("joiner_pods_pending 7"), "{body}");
    assert!(
        body.contains(r#"joiner_reconcile_errors_total{controller="provisioning"} 1"#),
        "{body}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    assert!(body.contains("joiner_leader 1"), "{body}");

    let (status, _) = get(addr, "/healthz").await;
    assert_eq!(status, 404, "probes are on the other port");

    // The value is read at each scrape.
    metrics.pods_pending.set(2);
    health.beat(false);
    let (_, body) = get(addr, "/metrics").await;
    assert!(body.contains("joiner_pods_pending 2"), "{body}");
    assert!(body.contains("joiner_leader 0"), "{body}");

    stop.cancel();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = TcpStream::connect(addr).await;
    assert!(refused.is_err(), "the listener closed after stop");
}

#[tokio::test]
async fn readyz_turns_200_once_stores_synced_and_the_election_runs() {
    let health = Arc::new(Health::default());
    let stop = CancellationToken::new();
    let addr = start(Endpoint::Health(health.clone()), &stop).await;

    assert_eq!(get(addr, "/healthz").await.0, 200, "alive while starting");
    assert_eq!(get(addr, "/readyz").await.0, 503, "nothing synced yet");
    health.mark_synced();
    assert_eq!(
        get(addr, "/readyz").await.0,
        503,
        "election not running yet"
    );
    health.beat(false);
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (200, "ok\n"),
        "a follower is ready too"
    );
    assert_eq!(get(addr, "/metrics").await.0, 404);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn healthz_fails_when_the_election_loop_stalls() {
    let health = Health::new(Duration::from_secs(30));
    health.mark_synced();
    health.beat(true);
    assert!(health.is_live() && health.is_ready() && health.is_leader());
    tokio::time::advance(Duration::from_secs(31)).await;
    assert!(!health.is_live());
    assert!(!health.is_ready());
    health.beat(false);
    assert!(health.is_live() && !health.is_leader());
}

/// On the leader, /healthz fails once a control loop has neither begun nor ended a pass for
/// its period plus `PASS_STALL` (a reconciler wedged on a call that never returns), so the
/// kubelet restarts the controller; a follower, whose loops do not run, is not judged by them.
#[tokio::test(start_paused = true)]
async fn healthz_fails_when_a_leaders_control_loop_stalls() {
    use joiner_controller::http::PASS_STALL;
    let metrics = std::sync::Arc::new(joiner_controller::metrics::Metrics::default());
    let health = Health::new(Duration::from_secs(30));
    health.watch_passes(metrics.clone());
    health.beat(true);
    metrics
        .passes
        .tick("gc", Duration::from_secs(30), PASS_STALL);
    metrics
        .passes
        .tick("termination", Duration::from_secs(1), PASS_STALL);
    // The election loop keeps beating; gc keeps passing; termination is stuck in a pass.
    for _ in 0..10 {
        tokio::time::advance(Duration::from_secs(25)).await;
        health.beat(true);
        metrics
            .passes
            .tick("gc", Duration::from_secs(30), PASS_STALL);
    }
    assert!(health.is_live(), "250 s: within 1 s + 300 s");
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(25)).await;
        health.beat(true);
        metrics
            .passes
            .tick("gc", Duration::from_secs(30), PASS_STALL);
    }
    assert!(!health.is_live(), "325 s: termination is overdue");
    // Stepped down: its loops stopped, so they say nothing.
    health.beat(false);
    assert!(health.is_live());
}
