//! `joiner controller`: the in-cluster add-on, and the composition root that puts the AWS
//! provider into the cloud-agnostic controller. Flags (each also read from the environment, as
//! the Helm chart sets them) become `joiner_controller::runtime::RuntimeOptions` and the AWS
//! provider's [`ProviderConfig`]; the leader-only reconcilers are plugged in by
//! [`leader_tasks`].

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use clap::ValueEnum;
use joiner_aws::interruption::SqsQueue;
use joiner_aws::unavailable::UnavailableOfferings;
use joiner_aws::userdata::ClusterInfo;
use joiner_aws::{
    AwsClients, AwsCloudProvider, AwsError, CatalogOptions, LiveCatalog, ProviderConfig,
};
use joiner_controller::instrumented::Instrumented;
use joiner_controller::logging::{self, LogFormat};
use joiner_controller::runtime::{self, LeaderTasks, RuntimeError, RuntimeOptions, Started};
use joiner_controller::{
    cluster_facts, disruption, interruption, lifecycle, provisioning, status, warm_pool, Settings,
};
use thiserror::Error;

/// The cloud the production controller drives: the AWS provider with its calls measured.
pub type Cloud = Instrumented<AwsCloudProvider>;

/// One leader-only loop.
type Task = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;

/// Where the service-account CA lives in every pod: the cluster CA that signed the API
/// server's certificate, which nodes need too.
pub const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// Why the controller stopped with an error.
#[derive(Debug, Error)]
pub enum ControllerError {
    /// The cloud-agnostic runtime failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The AWS clients could not be configured.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// `--kubernetes-version` was not given and the API server's version could not be read.
    #[error("--kubernetes-version not given and {0}")]
    KubernetesVersion(#[source] RuntimeError),
    /// `--cluster-ca-bundle` was not given and the service-account CA is unreadable.
    #[error("--cluster-ca-bundle not given and {path} cannot be read: {source}")]
    CaBundle {
        /// The file tried.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Arguments of `joiner controller`.
#[derive(clap::Args, Debug)]
pub struct ControllerArgs {
    /// EKS cluster name: tags instances `kubernetes.io/cluster/<name>` and names the cluster
    /// in node bootstrap.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// API server URL nodes join with (the EKS endpoint). Required: the in-cluster service IP
    /// is not reachable from a node that is still booting.
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: String,
    /// Base64 cluster CA bundle for nodes. Default: the service-account CA the controller's
    /// pod mounts (the same cluster CA).
    #[arg(long, env = "CLUSTER_CA_BUNDLE")]
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's service CIDR (AL2023 nodes need it). Default: read from the API (the
    /// ServiceCIDR `kubernetes`, else the /16 of the `default/kubernetes` Service's address).
    #[arg(long, env = "SERVICE_CIDR")]
    pub service_cidr: Option<String>,
    /// The cluster DNS address nodes' kubelets use. Default: the `kube-system/kube-dns`
    /// Service's clusterIP.
    #[arg(long, env = "CLUSTER_DNS_IP")]
    pub cluster_dns_ip: Option<String>,
    /// AWS region. Default: the SDK's chain (profile, IMDS).
    #[arg(long, env = "AWS_REGION")]
    pub region: Option<String>,
    /// SQS queue of interruption events (its name, or its URL): spot interruption warnings,
    /// rebalance recommendations, instance state changes and AWS Health scheduled changes,
    /// sent by the EventBridge rules of iam/interruption-queue.yaml. Unset: interruptions are
    /// not handled (nodes end when the cloud takes them).
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    /// A batch of pending pods closes this long after the last new pod (`1s`, `500ms`).
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    pub batch_idle_duration: Duration,
    /// A batch closes at the latest this long after it opened.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub batch_max_duration: Duration,
    /// Log filter in EnvFilter syntax (`info`, `joiner_controller=debug,kube=warn`).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormatArg::Json)]
    pub log_format: LogFormatArg,
    /// Port of /metrics.
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Port of /healthz and /readyz.
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    pub health_port: u16,
    /// Namespace of the leader-election Lease. Default: the pod's namespace (POD_NAMESPACE),
    /// else kube-system.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = "joiner-leader-election"
    )]
    pub leader_election_name: String,
    /// Sustained Kubernetes API requests per second.
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200.0)]
    pub kube_client_qps: f64,
    /// Kubernetes API requests allowed at once above the sustained rate.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300)]
    pub kube_client_burst: u32,
    /// Kubernetes minor version for the default AMIs (`1.31`). Default: the API server's.
    #[arg(long, env = "KUBERNETES_VERSION")]
    pub kubernetes_version: Option<String>,
    /// SSM prefix of the AMI parameters.
    #[arg(long, env = "SSM_PREFIX", default_value = "/aws/service")]
    pub ssm_prefix: String,
    /// Instance profile of nodes whose NodeTemplate names none.
    #[arg(long, env = "DEFAULT_INSTANCE_PROFILE")]
    pub default_instance_profile: Option<String>,
}

/// `--log-format` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// Parses `1s`, `500ms`, `10s`, `2m`, `1h`, `1.5s`: a non-negative number and a unit.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{s}` has no unit (use ms, s, m or h, e.g. `1s`)"))?;
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` does not start with a number"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("`{s}`: {e}"))
}

impl ControllerArgs {
    /// Every problem with the flags and environment values, each naming the flag and its
    /// variable; empty when the controller may start. Checked before anything connects, so a
    /// bad value is a usage error (exit 2) rather than a failure at the first launch.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.cluster_name.trim().is_empty() {
            out.push("--cluster-name (CLUSTER_NAME): must not be empty".to_string());
        }
        match self.cluster_endpoint.parse::<http::Uri>() {
            Ok(uri) if uri.scheme_str() == Some("https") && uri.host().is_some_and(|h| !h.is_empty()) => {}
            _ => out.push(format!(
                "--cluster-endpoint (CLUSTER_ENDPOINT): `{}` is not an https URL (the EKS API endpoint, e.g. https://ABCD.gr7.us-east-1.eks.amazonaws.com)",
                self.cluster_endpoint
            )),
        }
        if let Some(ca) = self.cluster_ca_bundle.as_deref().filter(|c| !c.is_empty()) {
            let pem = base64::engine::general_purpose::STANDARD.decode(ca.trim());
            let is_pem = pem
                .as_ref()
                .is_ok_and(|b| String::from_utf8_lossy(b).contains("-----BEGIN CERTIFICATE-----"));
            if !is_pem {
                out.push(
                    "--cluster-ca-bundle (CLUSTER_CA_BUNDLE): not a base64-encoded PEM certificate"
                        .to_string(),
                );
            }
        }
        if let Some(cidr) = self.service_cidr.as_deref() {
            if !is_cidr(cidr) {
                out.push(format!(
                    "--service-cidr (SERVICE_CIDR): `{cidr}` is not a CIDR (e.g. 10.100.0.0/16)"
                ));
            }
        }
        if let Some(ip) = self.cluster_dns_ip.as_deref() {
            if ip.parse::<std::net::IpAddr>().is_err() {
                out.push(format!(
                    "--cluster-dns-ip (CLUSTER_DNS_IP): `{ip}` is not an IP address"
                ));
            }
        }
        if !(self.kube_client_qps.is_finite() && self.kube_client_qps > 0.0) {
            out.push(format!(
                "--kube-client-qps (KUBE_CLIENT_QPS): {} must be a positive number",
                self.kube_client_qps
            ));
        }
        if self.kube_client_burst == 0 {
            out.push("--kube-client-burst (KUBE_CLIENT_BURST): must be at least 1".to_string());
        }
        if self.batch_idle_duration.is_zero() {
            out.push(
                "--batch-idle-duration (BATCH_IDLE_DURATION): must be more than 0".to_string(),
            );
        }
        if self.batch_max_duration < self.batch_idle_duration {
            out.push(format!(
                "--batch-max-duration (BATCH_MAX_DURATION): {:?} is shorter than --batch-idle-duration {:?}",
                self.batch_max_duration, self.batch_idle_duration
            ));
        }
        if self.metrics_port == self.health_port {
            out.push(format!(
                "--metrics-port and --health-port (METRICS_PORT, HEALTH_PROBE_PORT): both {}",
                self.metrics_port
            ));
        }
        out
    }

    /// The cloud-agnostic runtime's options.
    pub fn options(&self) -> RuntimeOptions {
        let mut settings = Settings::new(&self.cluster_name);
        settings.batch_idle = self.batch_idle_duration;
        settings.batch_max = self.batch_max_duration;
        let namespace = self
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "kube-system".to_string());
        RuntimeOptions {
            settings,
            metrics_port: self.metrics_port,
            health_port: self.health_port,
            leader_election_namespace: namespace,
            leader_election_name: self.leader_election_name.clone(),
            kube_client_qps: self.kube_client_qps,
            kube_client_burst: self.kube_client_burst,
        }
    }
}

/// The AWS provider for the cluster `started` talks to: clients from the standard chain (and
/// `--region`), the live catalog (its metrics in the runtime's registry), and the reflector
/// stores as the Provisioner and NodeTemplate lookup.
pub async fn aws_provider(
    args: &ControllerArgs,
    started: &mut Started,
) -> Result<AwsCloudProvider, ControllerError> {
    let kubernetes_version = match args.kubernetes_version.clone() {
        Some(v) => v,
        None => runtime::server_minor_version(&started.client)
            .await
            .map_err(ControllerError::KubernetesVersion)?,
    };
    let (dns_ip, service_cidr) = cluster_facts(args, &started.client).await;
    let config = ProviderConfig {
        cluster: ClusterInfo {
            name: args.cluster_name.clone(),
            endpoint: args.cluster_endpoint.clone(),
            ca_bundle: ca_bundle(args.cluster_ca_bundle.as_deref())?,
            service_cidr,
            dns_ip,
        },
        kubernetes_version,
        ssm_prefix: args.ssm_prefix.clone(),
        default_instance_profile: args.default_instance_profile.clone(),
    };
    let clients = AwsClients::from_env(args.region.as_deref()).await?;
    let catalog = Arc::new(LiveCatalog::new(
        &clients,
        CatalogOptions::default(),
        &mut started.registry,
    ));
    // Every replica keeps the catalog loaded and fresh in the background from start-up: a
    // follower that wins the Lease plans at once, and no launch waits for a refresh.
    tokio::spawn({
        let catalog = catalog.clone();
        let stop = started.stop.clone().cancelled_owned();
        async move { catalog.keep_fresh(stop).await }
    });
    let unavailable = Arc::new(UnavailableOfferings::default());
    Ok(AwsCloudProvider::new(
        clients,
        config,
        catalog,
        unavailable,
        Arc::new(started.state.clone()),
    ))
}

/// True for `a.b.c.d/n` (n ≤ 32) or an IPv6 address with a prefix length (≤ 128).
fn is_cidr(text: &str) -> bool {
    let Some((addr, len)) = text.split_once('/') else {
        return false;
    };
    let Ok(len) = len.parse::<u8>() else {
        return false;
    };
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => len <= 32,
        Ok(std::net::IpAddr::V6(_)) => len <= 128,
        Err(_) => false,
    }
}

/// The cluster DNS address and service CIDR nodes need: the flags', else read from the API
/// (a default install must not fail at its first AL2023 launch for want of a CIDR). A fact that
/// cannot be read is left out with a warning: AL2 and Bottlerocket derive the DNS address
/// themselves, and an AL2023 launch then fails naming `--service-cidr`.
async fn cluster_facts(
    args: &ControllerArgs,
    client: &kube::Client,
) -> (Option<String>, Option<String>) {
    let dns = match &args.cluster_dns_ip {
        Some(ip) => Some(ip.clone()),
        None => match cluster_facts::cluster_dns_ip(client).await {
            Ok(Some(ip)) => {
                tracing::info!(%ip, "cluster DNS address read from kube-system/kube-dns");
                Some(ip)
            }
            Ok(None) => {
                tracing::warn!("no kube-system/kube-dns Service: nodes use their AMI's default DNS address (set --cluster-dns-ip)");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read kube-system/kube-dns (set --cluster-dns-ip)");
                None
            }
        },
    };
    let cidr = match &args.service_cidr {
        Some(c) => Some(c.clone()),
        None => match cluster_facts::service_cidr(client).await {
            Ok(Some((cidr, true))) => {
                tracing::info!(%cidr, "service CIDR read from the ServiceCIDR `kubernetes`");
                Some(cidr)
            }
            Ok(Some((cidr, false))) => {
                tracing::warn!(%cidr, "service CIDR inferred from the `kubernetes` Service's address (the EKS default /16); set --service-cidr if the cluster uses another");
                Some(cidr)
            }
            Ok(None) => {
                tracing::warn!("service CIDR unknown: AL2023 launches need --service-cidr");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the service CIDR: AL2023 launches need --service-cidr");
                None
            }
        },
    };
    (dns, cidr)
}

/// The base64 cluster CA: the flag's, or the service-account CA file encoded.
fn ca_bundle(given: Option<&str>) -> Result<String, ControllerError> {
    if let Some(ca) = given.filter(|c| !c.is_empty()) {
        return Ok(ca.to_string());
    }
    let pem = std::fs::read(SERVICE_ACCOUNT_CA).map_err(|source| ControllerError::CaBundle {
        path: SERVICE_ACCOUNT_CA.to_string(),
        source,
    })?;
    Ok(base64::engine::general_purpose::STANDARD.encode(pem))
}

/// The reconcilers that run only on the leader. Each entry is a future built from the shared
/// context and the term's stop token. The NodeTemplate status is resolved by the AWS provider
/// itself (the wrapped one: resolution is not a `CloudProvider` call), which also runs its own
/// housekeeping (stale launch templates).
pub fn leader_tasks(interruption_queue: Option<String>) -> LeaderTasks<Cloud> {
    Arc::new(move |ctx, term| {
        let aws = ctx.cloud.inner().clone();
        let mut tasks: Vec<Task> = Vec::new();
        if let Some(queue) = interruption_queue.clone() {
            let sqs = aws.sqs().clone();
            tasks.push(Box::pin(interruption::run_connecting(
                ctx.clone(),
                move || {
                    let (sqs, queue) = (sqs.clone(), queue.clone());
                    async move { SqsQueue::connect(sqs, &queue).await }
                },
                term.clone(),
            )));
        } else {
            tracing::info!("no --interruption-queue: interruption events are not handled");
        }
        tasks.extend::<[Task; 6]>([
            Box::pin(status::run(ctx.clone(), aws.clone(), term.clone())),
            Box::pin(joiner_aws::housekeeping::run(
                aws,
                term.clone().cancelled_owned(),
            )),
            Box::pin(provisioning::run(ctx.clone(), term.clone())),
            Box::pin(disruption::run(ctx.clone(), term.clone())),
            Box::pin(warm_pool::run(ctx.clone(), term.clone())),
            Box::pin(lifecycle::run(ctx, term)),
        ]);
        tasks
    })
}

/// `joiner controller` on a runtime: start, build the AWS provider, run.
async fn serve(args: &ControllerArgs) -> Result<(), ControllerError> {
    let options = args.options();
    let mut started = runtime::start(&options).await?;
    let provider = aws_provider(args, &mut started).await?;
    runtime::run(
        started,
        Arc::new(provider),
        &options,
        leader_tasks(args.interruption_queue.clone()),
    )
    .await?;
    Ok(())
}

/// Runs the controller until SIGTERM/SIGINT: exit 0 after a clean stop, 1 on a fatal error
/// (missing CRDs, no API access, lost leadership: the pod restarts), 2 on a bad log filter.
pub fn run(args: &ControllerArgs) -> ExitCode {
    let format = match args.log_format {
        LogFormatArg::Json => LogFormat::Json,
        LogFormatArg::Text => LogFormat::Text,
    };
    if let Err(e) = logging::init(&args.log_level, format) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let problems = args.problems();
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(serve(args)) {
        Ok(()) | Err(ControllerError::Runtime(RuntimeError::Stopped)) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "controller stopped");
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_units() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10").is_err_and(|e| e.contains("no unit")));
        assert!(parse_duration("5d").is_err_and(|e| e.contains("unknown unit `d`")));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
