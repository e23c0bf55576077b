//! The controller's HTTP endpoints: `/metrics` on one port, `/healthz` and `/readyz` on
//! another (8080 and 8081 by default, as Karpenter), each a small hyper HTTP/1 server.
//!
//! Two ports keep the scrape path apart from the kubelet's probes, so a NetworkPolicy can open
//! metrics to Prometheus only.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The content type of the OpenMetrics text prometheus-client encodes.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub use crate::metrics::PASS_STALL;

/// What the probes report, updated by the runtime.
///
/// Live: the election loop has ticked within the stall limit (or has not started yet), and,
/// on the leader, every control loop has begun or ended a pass within [`PASS_STALL`].
/// Ready: every reflector store finished its initial list and the election loop is running.
#[derive(Debug)]
pub struct Health {
    synced: AtomicBool,
    leader: AtomicBool,
    heartbeat: Mutex<Option<Instant>>,
    stall_limit: Duration,
    /// The control loops' clock, once the runtime handed it over.
    passes: Mutex<Option<Arc<crate::metrics::Metrics>>>,
    /// `joiner_leader`: 1 on the replica that holds the Lease, so a dashboard shows which
    /// pod acts (and an alert can fire when none or two do).
    leader_gauge: Gauge,
}

impl Health {
    /// Probes that fail liveness when the election loop has not ticked for `stall_limit`.
    pub fn new(stall_limit: Duration) -> Self {
        Health {
            synced: AtomicBool::new(false),
            leader: AtomicBool::new(false),
            heartbeat: Mutex::new(None),
            stall_limit,
            passes: Mutex::new(None),
            leader_gauge: Gauge::default(),
        }
    }

    /// The default probes with their `joiner_leader` gauge registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let health = Health::default();
        registry.register(
            "joiner_leader",
            "1 while this replica holds the leader-election Lease",
            health.leader_gauge.clone(),
        );
        health
    }

    /// Records that every store has synced.
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Watches the control loops' pass clock of `metrics` (`Metrics::passes`).
    pub fn watch_passes(&self, metrics: Arc<crate::metrics::Metrics>) {
        *self.passes.lock().unwrap_or_else(|p| p.into_inner()) = Some(metrics);
    }

    /// Records a turn of the election loop, and whether this replica leads.
    pub fn beat(&self, is_leader: bool) {
        let was = self.leader.swap(is_leader, Ordering::SeqCst);
        if was && !is_leader {
            // The loops stopped with the leadership: their clocks say nothing any more.
            if let Some(m) = self
                .passes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                m.passes.clear();
            }
        }
        self.leader_gauge.set(i64::from(is_leader));
        *self.heartbeat.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// True while this replica holds the Lease (as of the last beat).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }

    /// /healthz.
    pub fn is_live(&self) -> bool {
        let beating = match *self.heartbeat.lock().unwrap_or_else(|p| p.into_inner()) {
            None => true,
            Some(at) => at.elapsed() < self.stall_limit,
        };
        if !beating {
            return false;
        }
        if !self.is_leader() {
            return true;
        }
        let passes = self.passes.lock().unwrap_or_else(|p| p.into_inner());
        match passes.as_ref().and_then(|m| m.passes.stalled()) {
            Some((name, over)) => {
                tracing::error!(controller = name, overdue = ?over, "a control loop has not completed a pass; failing liveness");
                false
            }
            None => true,
        }
    }

    /// /readyz.
    pub fn is_ready(&self) -> bool {
        let beating = self
            .heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        self.synced.load(Ordering::SeqCst) && beating && self.is_live()
    }
}

impl Default for Health {
    /// A 60 s stall limit: thirty missed 2 s election turns.
    fn default() -> Self {
        Health::new(Duration::from_secs(60))
    }
}

/// What one server answers.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// `GET /metrics`: the registry in the OpenMetrics text format.
    Metrics(Arc<Registry>),
    /// `GET /healthz` and `GET /readyz`.
    Health(Arc<Health>),
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    response
}

fn probe(ok: bool) -> Response<Full<Bytes>> {
    if ok {
        text(StatusCode::OK, "text/plain", "ok\n".into())
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".into(),
        )
    }
}

/// The answer of `endpoint` to `method path` (no I/O: the servers and tests share it).
pub fn respond(endpoint: &Endpoint, method: &Method, path: &str) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match (endpoint, path) {
        (Endpoint::Metrics(registry), "/metrics") => {
            let mut out = String::new();
            match prometheus_client::encoding::text::encode(&mut out, registry) {
                Ok(()) => text(StatusCode::OK, OPENMETRICS, out),
                Err(e) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("encoding the metrics failed: {e}\n"),
                ),
            }
        }
        (Endpoint::Health(h), "/healthz") => probe(h.is_live()),
        (Endpoint::Health(h), "/readyz") => probe(h.is_ready()),
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Serves `endpoint` on `listener` until `stop` is cancelled. Connection errors are logged
/// and end only that connection.
pub async fn serve(
    listener: TcpListener,
    endpoint: Endpoint,
    stop: CancellationToken,
) -> std::io::Result<()> {
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            accepted = listener.accept() => accepted?,
        };
        let endpoint = endpoint.clone();
        let conn_stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = respond(&endpoint, req.method(), req.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
                    }
                }
                _ = conn_stop.cancelled() => conn.as_mut().graceful_shutdown(),
            }
        });
    }
}

/// Binds `0.0.0.0:port` (or `127.0.0.1:0` style addresses in tests).
pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
