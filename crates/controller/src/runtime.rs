//! `joiner controller`: assembles the client, the checks, the stores, the HTTP endpoints and
//! leader election around a cloud provider built elsewhere, and runs them until SIGTERM or
//! SIGINT.
//!
//! Every replica watches (so a new leader starts with synced stores) and serves /metrics,
//! /healthz and /readyz; only the leader runs the leader-only tasks (the reconcilers), passed
//! in as [`LeaderTasks`] so the runtime does not depend on which reconcilers exist.
//!
//! Two phases, so the composition root (the `joiner` binary) can build its cloud provider in
//! between from what the runtime set up: [`start`] installs the rustls provider, the stop
//! signal, the kube client (with a client-side token bucket for the
//! `--kube-client-qps/--kube-client-burst` flags), checks that joiner's CRDs are installed, and
//! creates the metrics registry and the reflector stores; [`run`] takes the built
//! [`CloudProvider`], wraps it in [`Instrumented`], starts the reflectors and servers and, once
//! every store has synced, the election. A stop signal cancels one token: the leader's tasks
//! stop, the Lease is released, the servers and watchers end, and [`run`] returns `Ok(())`.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use joiner_core::CloudProvider;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client, CustomResourceExt};
use prometheus_client::registry::Registry;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::http::{self, Endpoint, Health};
use crate::instrumented::Instrumented;
use crate::leader::{self, LeaderElector, LeaderError, LeaseConfig};
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::state::ClusterState;
use crate::watch;

/// The leader-only work: called once per leadership term with the shared context and a token
/// cancelled when the term ends; each future should return soon after the token is cancelled.
pub type LeaderTasks<P> =
    Arc<dyn Fn(Arc<Context<P>>, CancellationToken) -> Vec<BoxFuture<'static, ()>> + Send + Sync>;

/// Everything `joiner controller` is told by flags and environment.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Durations and the cluster name.
    pub settings: Settings,
    /// Port of /metrics.
    pub metrics_port: u16,
    /// Port of /healthz and /readyz.
    pub health_port: u16,
    /// Namespace of the leader-election Lease.
    pub leader_election_namespace: String,
    /// Name of the Lease.
    pub leader_election_name: String,
    /// Sustained API requests per second of the client.
    pub kube_client_qps: f64,
    /// Requests the client may send at once above the sustained rate.
    pub kube_client_burst: u32,
}

/// Why the controller stopped with an error.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// No kubeconfig and not in a cluster.
    #[error("cannot find the Kubernetes API: {0}")]
    KubeConfig(#[from] kube::config::InferConfigError),
    /// The client could not be built from the configuration.
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// Some of joiner's CRDs are not installed.
    #[error(
        "joiner's CustomResourceDefinitions are not installed: {} missing. Install them with \
         `joiner crds | kubectl apply -f -` or `kubectl apply -f charts/joiner/crds/`",
        missing.join(", ")
    )]
    CrdsMissing {
        /// The missing CRD names.
        missing: Vec<String>,
    },
    /// Reading a CRD failed for another reason than 404 (RBAC, network).
    #[error("CustomResourceDefinition {crd}: cannot read it: {source}")]
    CrdCheck {
        /// The CRD name.
        crd: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The API server's version could not be read.
    #[error("GET /version failed: {0}")]
    ApiVersion(#[source] kube::Error),
    /// SIGTERM or SIGINT arrived before the controller was running.
    #[error("stopped before start-up finished")]
    Stopped,
    /// The API server did not answer within the start-up wait.
    #[error("the Kubernetes API did not answer within {waited:?}: {last_error}")]
    ApiUnreachable {
        /// How long it was tried.
        waited: Duration,
        /// The last failure.
        last_error: String,
    },
    /// The cloud provider could not be built.
    #[error("cloud provider: {0}")]
    Cloud(String),
    /// A port could not be bound.
    #[error("{what} port {addr}: cannot listen: {source}")]
    Bind {
        /// `metrics` or `health`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An HTTP server stopped with an error.
    #[error("{what} server: {source}")]
    Serve {
        /// `metrics` or `health`.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The stop signal handlers could not be installed.
    #[error("cannot install the SIGTERM handler: {0}")]
    Signal(#[source] std::io::Error),
    /// Leader election failed or the leadership was lost.
    #[error(transparent)]
    Leader(#[from] LeaderError),
}

/// How long start-up waits for the API server before giving up (the pod restarts and tries
/// again).
pub const API_WAIT: Duration = Duration::from_secs(120);

/// Time limit of one start-up call to the API server.
pub const API_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits until the API server answers `GET /version` with anything (each try bounded by
/// [`API_CALL_TIMEOUT`], logged with what it waits for), at most `wait`.
pub async fn wait_for_api(client: &Client, wait: Duration) -> Result<(), RuntimeError> {
    let started = tokio::time::Instant::now();
    let mut attempt = 0u32;
    tracing::info!(timeout = ?API_CALL_TIMEOUT, "waiting for the Kubernetes API server (GET /version)");
    loop {
        attempt += 1;
        let last_error =
            match tokio::time::timeout(API_CALL_TIMEOUT, client.apiserver_version()).await {
                Ok(Ok(version)) => {
                    tracing::info!(version = %version.git_version, "Kubernetes API reachable");
                    return Ok(());
                }
                // Any HTTP answer (even an error status) means the server is there; what it
                // refuses is for the calls that follow to report.
                Ok(Err(kube::Error::Api(_))) => return Ok(()),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {API_CALL_TIMEOUT:?}"),
            };
        let waited = started.elapsed();
        if waited >= wait {
            return Err(RuntimeError::ApiUnreachable { waited, last_error });
        }
        tracing::warn!(attempt, error = %last_error, "waiting for the Kubernetes API server (GET /version)");
        let pause = Duration::from_secs(u64::from(attempt.min(5)));
        tokio::time::sleep(pause.min(wait.saturating_sub(waited))).await;
    }
}

/// The names of the three CRDs (`provisioners.joiner.sh`, ...).
pub fn crd_names() -> [String; 3] {
    [
        Provisioner::crd_name().to_string(),
        NodeTemplate::crd_name().to_string(),
        NodeClaim::crd_name().to_string(),
    ]
}

/// Fails with [`RuntimeError::CrdsMissing`] (saying how to install them) unless every joiner
/// CRD exists: without them every watch would fail with 404 forever.
pub async fn check_crds(client: &Client) -> Result<(), RuntimeError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut missing = Vec::new();
    for name in crd_names() {
        match api.get_opt(&name).await {
            Ok(Some(_)) => {}
            Ok(None) => missing.push(name),
            Err(source) => return Err(RuntimeError::CrdCheck { crd: name, source }),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(RuntimeError::CrdsMissing { missing })
    }
}

/// `major.minor` of the API server (`1.31`), the part of the version AMI parameters use.
pub async fn server_minor_version(client: &Client) -> Result<String, RuntimeError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(RuntimeError::ApiVersion)?;
    // EKS reports minor versions like `31+`.
    let minor: String = info
        .minor
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Ok(format!("{}.{}", info.major, minor))
}

/// A token bucket: `burst` requests at once, refilled at `qps` per second. Shared by all
/// clones of the client (kube's `Client` funnels every request through one service).
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    burst: f64,
    qps: f64,
    at: Instant,
}

impl Bucket {
    /// Takes a token, or says how long until one is available.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.qps;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// The client-side rate limit of `--kube-client-qps` and `--kube-client-burst`, as a tower
/// layer under kube's client (kube has no QPS setting of its own).
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<Bucket>>,
}

impl RateLimitLayer {
    /// `qps` sustained (at least 0.1), `burst` at once (at least 1).
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimitLayer {
            bucket: Arc::new(Mutex::new(Bucket {
                tokens: burst,
                burst,
                qps: if qps.is_finite() { qps.max(0.1) } else { 0.1 },
                at: Instant::now(),
            })),
        }
    }
}

impl<S> tower_layer::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            token: false,
        }
    }
}

/// The service of [`RateLimitLayer`]: not ready until it holds a token.
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<Bucket>>,
    wait: Option<Pin<Box<Sleep>>>,
    token: bool,
}

impl<S, R> tower_service::Service<R> for RateLimited<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        while !self.token {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(Instant::now());
            match taken {
                Ok(()) => self.token = true,
                Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.token = false;
        self.inner.call(request)
    }
}

use std::future::Future as _;

/// The clients: in-cluster or kubeconfig (`kube::Config::infer`), one for requests built by
/// [`client_from`] and one for the reflectors' watches by [`watch_client_from`].
pub async fn kube_clients(qps: f64, burst: u32) -> Result<(Client, Client), RuntimeError> {
    let config = kube::Config::infer().await?;
    Ok((
        client_from(config.clone(), qps, burst)?,
        watch_client_from(config, qps, burst)?,
    ))
}

/// How long one request waits for the API server's answer before it fails (and the pass that
/// made it is retried): no reconciler waits forever on a connection that went silent.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The client for the reflectors' watches: [`client_from`]'s, without the read timeout (a
/// watch is quiet for minutes when nothing changes; kube's watcher has its own idle timeout
/// on top of the server's 290 s).
pub fn watch_client_from(
    mut config: kube::Config,
    qps: f64,
    burst: u32,
) -> Result<Client, RuntimeError> {
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config).map_err(RuntimeError::Client)?;
    Ok(builder.with_layer(&RateLimitLayer::new(qps, burst)).build())
}

/// The client joiner uses for `config`: rate-limited by [`RateLimitLayer`], and without kube's
/// default retry layer. That layer retries 429, 503 and 504 up to 15 times over minutes inside
/// one call: an Eviction refused by a PodDisruptionBudget would hold its reconcile pass (and
/// every claim behind it) for minutes, and joiner's own per-pod backoff would never run. Every
/// joiner loop is level-triggered, so a failed call is simply retried on its next pass.
/// Every request has [`REQUEST_TIMEOUT`] to be answered, counted from when it was sent.
pub fn client_from(mut config: kube::Config, qps: f64, burst: u32) -> Result<Client, RuntimeError> {
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.reset_reader_on_write = true;
    watch_client_from(config, qps, burst)
}

/// What [`serve_and_lead`] runs: the parts built by [`run`] (or by a test).
pub struct Parts<P: CloudProvider> {
    /// The shared context.
    pub ctx: Arc<Context<P>>,
    /// The reflector futures of the context's stores.
    pub drivers: Vec<BoxFuture<'static, ()>>,
    /// The registry served on /metrics.
    pub registry: Arc<Registry>,
    /// The probes' state.
    pub health: Arc<Health>,
    /// The /metrics listener.
    pub metrics: TcpListener,
    /// The /healthz and /readyz listener.
    pub probes: TcpListener,
    /// The Lease.
    pub lease: LeaseConfig,
}

/// Runs watchers and servers on this replica, waits for the stores to sync, then runs the
/// election with `tasks` as the leader-only work, until `stop` is cancelled (then `Ok` after
/// the Lease is released) or the leadership is lost (then [`LeaderError::Lost`]).
pub async fn serve_and_lead<P: CloudProvider + 'static>(
    parts: Parts<P>,
    tasks: LeaderTasks<P>,
    stop: CancellationToken,
) -> Result<(), RuntimeError> {
    let Parts {
        ctx,
        drivers,
        registry,
        health,
        metrics,
        probes,
        lease,
    } = parts;
    let watchers: Vec<_> = drivers.into_iter().map(tokio::spawn).collect();
    let servers = stop.child_token();
    let metrics_server = tokio::spawn(http::serve(
        metrics,
        Endpoint::Metrics(registry),
        servers.clone(),
    ));
    let health_server = tokio::spawn(http::serve(
        probes,
        Endpoint::Health(health.clone()),
        servers.clone(),
    ));

    let outcome = async {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            synced = watch::wait_synced(&ctx.state) => {
                if synced.is_err() {
                    // Writers live in the spawned watchers; they only go away when a
                    // watcher task ended, which the stop token explains.
                    return Ok(());
                }
            }
        }
        tracing::info!("every store has synced");
        health.mark_synced();
        health.watch_passes(ctx.metrics.clone());
        let elector = LeaderElector::new(ctx.client.clone(), lease);
        let lead_ctx = ctx.clone();
        let beat = health.clone();
        leader::run_elected(
            elector,
            stop.clone(),
            move |term| tasks(lead_ctx.clone(), term),
            move |is_leader| beat.beat(is_leader),
        )
        .await
        .map_err(RuntimeError::from)
    }
    .await;

    servers.cancel();
    for w in &watchers {
        w.abort();
    }
    for (what, server) in [("metrics", metrics_server), ("health", health_server)] {
        match server.await {
            Ok(Err(source)) if outcome.is_ok() => {
                return Err(RuntimeError::Serve { what, source });
            }
            _ => {}
        }
    }
    outcome
}

/// A token cancelled on SIGTERM or SIGINT.
pub fn stop_on_signal() -> Result<CancellationToken, RuntimeError> {
    let stop = CancellationToken::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(RuntimeError::Signal)?;
    let token = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        }
        token.cancel();
    });
    Ok(stop)
}

async fn listen(what: &'static str, port: u16) -> Result<TcpListener, RuntimeError> {
    let addr = SocketAddr::from(([0, 0, 0, 0], port));
    http::bind(addr)
        .await
        .map_err(|source| RuntimeError::Bind { what, addr, source })
}

/// What [`start`] set up: the pieces a cloud provider is built from (the client, the stores
/// as an object lookup, the registry for its metrics) and what [`run`] goes on with.
pub struct Started {
    /// The rate-limited client.
    pub client: Client,
    /// The reflector stores (not yet filled: [`run`] starts the watchers).
    pub state: ClusterState,
    /// The registry served on /metrics; a provider registers its own metrics here.
    pub registry: Registry,
    /// The controller's metrics, registered in `registry`.
    pub metrics: Arc<Metrics>,
    /// Cancelled on SIGTERM or SIGINT.
    pub stop: CancellationToken,
    health: Arc<Health>,
    drivers: Vec<BoxFuture<'static, ()>>,
}

/// The first phase of `joiner controller`: everything that does not depend on the cloud. It
/// waits for the API server (saying so in the log every attempt) but gives up at once on
/// SIGTERM/SIGINT ([`RuntimeError::Stopped`]), so a pod that cannot reach its API server still
/// stops within its grace period.
pub async fn start(options: &RuntimeOptions) -> Result<Started, RuntimeError> {
    crate::crypto::install_default_provider();
    let stop = stop_on_signal()?;
    let (client, watch_client) =
        kube_clients(options.kube_client_qps, options.kube_client_burst).await?;
    tokio::select! {
        _ = stop.cancelled() => return Err(RuntimeError::Stopped),
        reached = wait_for_api(&client, API_WAIT) => reached?,
    }
    tokio::select! {
        _ = stop.cancelled() => return Err(RuntimeError::Stopped),
        checked = tokio::time::timeout(API_CALL_TIMEOUT, check_crds(&client)) => {
            checked.map_err(|_| RuntimeError::ApiUnreachable {
                waited: API_CALL_TIMEOUT,
                last_error: "reading joiner's CustomResourceDefinitions timed out".into(),
            })??;
        }
    }
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let health = Arc::new(Health::register(&mut registry));
    let reflectors = watch::reflectors(&watch_client);
    Ok(Started {
        client,
        state: reflectors.state,
        registry,
        metrics,
        stop,
        health,
        drivers: reflectors.drivers,
    })
}

/// The second phase: runs the controller around `cloud` (its calls measured by
/// [`Instrumented`]) until SIGTERM/SIGINT (`Ok`) or a fatal error.
pub async fn run<P: CloudProvider + 'static>(
    started: Started,
    cloud: Arc<P>,
    options: &RuntimeOptions,
    tasks: LeaderTasks<Instrumented<P>>,
) -> Result<(), RuntimeError> {
    let Started {
        client,
        state,
        registry,
        metrics,
        stop,
        health,
        drivers,
    } = started;
    let cloud = Arc::new(Instrumented::new(cloud, metrics.clone()));
    let ctx = Arc::new(Context {
        client,
        state,
        cloud,
        metrics,
        settings: options.settings.clone(),
    });
    let parts = Parts {
        ctx,
        drivers,
        registry: Arc::new(registry),
        health,
        metrics: listen("metrics", options.metrics_port).await?,
        probes: listen("health", options.health_port).await?,
        lease: LeaseConfig::new(
            options.leader_election_namespace.clone(),
            options.leader_election_name.clone(),
            leader::identity(),
        ),
    };
    serve_and_lead(parts, tasks, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bucket_allows_a_burst_then_the_sustained_rate() {
        let start = Instant::now();
        let mut b = Bucket {
            tokens: 3.0,
            burst: 3.0,
            qps: 2.0,
            at: start,
        };
        for _ in 0..3 {
            assert_eq!(b.take(start), Ok(()));
        }
        let wait = b.take(start).err();
        assert_eq!(wait, Some(Duration::from_millis(500)));
        assert_eq!(b.take(start + Duration::from_millis(500)), Ok(()));
        // A long pause refills to the burst, not beyond.
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
    }
}
