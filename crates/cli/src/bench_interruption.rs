//! `joiner bench --interruption N`: throughput of the interruption consumer.
//!
//! A cluster of 1,000 spot nodes (one 1-CPU pod each, so a lost node needs a replacement) sits
//! in the controller's stores, one in ten claims already being deleted. N messages in the mix an
//! account's EventBridge rules deliver — mostly state changes of instances joiner does not own,
//! state changes of its own nodes on their way out, a few interruption warnings and rebalance
//! recommendations for its nodes (each a replacement or an Event), some malformed bodies — are
//! consumed by the controller's own loop ([`interruption::run`], its workers, one simulation per
//! batch with replacements, claim writes and deletes through a stub API server, launches on the
//! fake cloud). In memory the queue is a list (parse + dispatch); with `--sqs-endpoint` the
//! messages are sent, ten per SendMessageBatch, to a fresh SQS queue there (moto or AWS) while
//! the consumer runs, and timed end to end: from the first send to the last delete.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use joiner_apis::{NodeClaim, Provisioner};
use joiner_aws::interruption::{parse, SqsQueue};
use joiner_controller::interruption;
use joiner_controller::state::ClusterState;
use joiner_controller::{Context, Settings};
use joiner_core::interruption::{InterruptionQueue, Message};
use joiner_core::testing::FakeCloud;
use joiner_core::{CloudError, CloudErrorKind, InstanceType};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::store::Writer;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::error::CliError;

/// Nodes of the benchmark cluster.
const NODES: usize = 1_000;

/// The instance ID of node `i` (foreign instances use IDs from `1 << 40` up).
fn instance(i: usize) -> String {
    format!("i-{i:017x}")
}

/// A deterministic generator (xorshift), so every run sends the same messages.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

fn envelope(n: usize, source: &str, detail_type: &str, detail: Value) -> String {
    json!({"version": "0", "id": format!("bench-{n}"), "detail-type": detail_type,
        "source": source, "account": "123456789012", "time": "2026-11-30T14:00:00Z",
        "region": "us-east-1", "resources": [], "detail": detail})
    .to_string()
}

/// Message `n` of the mix: per thousand, 850 state changes of foreign instances, 80 of
/// joiner's nodes being deleted, 30 interruption notices for foreign instances, 20 malformed
/// bodies, 15 rebalance recommendations and 5 spot interruptions for joiner's live nodes.
fn message(n: usize, rng: &mut Rng) -> String {
    let states = [
        "pending",
        "running",
        "stopping",
        "stopped",
        "shutting-down",
        "terminated",
    ];
    let state_change = |id: String, state: &str| {
        envelope(
            n,
            "aws.ec2",
            "EC2 Instance State-change Notification",
            json!({"instance-id": id, "state": state}),
        )
    };
    let live = |rng: &mut Rng| loop {
        let i = rng.below(NODES);
        if !i.is_multiple_of(10) {
            return i;
        }
    };
    match n % 1000 {
        0..850 => {
            let state = states[rng.below(states.len())];
            state_change(instance((1 << 40) + rng.below(1 << 20)), state)
        }
        850..930 => state_change(instance(rng.below(NODES / 10) * 10), "shutting-down"),
        930..960 => envelope(
            n,
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            json!({"instance-id": instance((1 << 40) + rng.below(1 << 20)), "instance-action": "terminate"}),
        ),
        960..970 => "{\"version\": \"0\", \"detail\": ".to_string(),
        970..975 => envelope(n, "aws.s3", "Object Created", json!({})),
        975..980 => envelope(
            n,
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            json!({}),
        ),
        980..995 => envelope(
            n,
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            json!({"instance-id": instance(live(rng))}),
        ),
        _ => envelope(
            n,
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            json!({"instance-id": instance(live(rng)), "instance-action": "terminate"}),
        ),
    }
}

/// Stores holding the cluster (kept alive with their writers).
struct Cluster {
    state: ClusterState,
    _writers: (
        Writer<Node>,
        Writer<NodeClaim>,
        Writer<joiner_controller::pod_record::PodRecord>,
        Writer<Provisioner>,
    ),
}

fn feed<K>(items: Vec<K>) -> Writer<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    joiner_controller::watch::filled(items)
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, CliError> {
    serde_json::from_value(v).map_err(|e| CliError::Usage(format!("benchmark object: {e}")))
}

fn cluster() -> Result<Cluster, CliError> {
    let mut nodes = Vec::new();
    let mut claims = Vec::new();
    let mut pods = Vec::new();
    for i in 0..NODES {
        let name = format!("node-{i}");
        let provider_id = format!("aws:///us-east-1a/{}", instance(i));
        nodes.push(from::<Node>(json!({
            "metadata": {"name": name, "labels": {
                "node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a",
                "karpenter.sh/capacity-type": "spot", "joiner.sh/provisioner-name": "web",
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
            "spec": {"providerID": provider_id},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"}},
        }))?);
        let mut claim = json!({
            "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": format!("web-{i}"), "uid": format!("uid-{i}"),
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"provisionerName": "web"},
            "status": {"providerID": provider_id, "instanceID": instance(i), "nodeName": name,
                "instanceType": "m5.large", "zone": "us-east-1a", "capacityType": "spot"},
        });
        if i.is_multiple_of(10) {
            claim["metadata"]["deletionTimestamp"] = json!("2026-11-30T13:59:00Z");
        }
        claims.push(from::<NodeClaim>(claim)?);
        pods.push(joiner_controller::pod_record::PodRecord::from(from::<k8s_openapi::api::core::v1::Pod>(json!({
            "metadata": {"name": format!("app-{i}"), "namespace": "shop", "uid": format!("pod-{i}")},
            "spec": {"nodeName": name, "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]},
            "status": {"phase": "Running"},
        }))?));
    }
    let provisioner = from::<Provisioner>(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner", "metadata": {"name": "web"},
        "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]},
    }))?;
    let (n, c, p, v) = (
        feed(nodes),
        feed(claims),
        feed(pods),
        feed(vec![provisioner]),
    );
    let state = ClusterState {
        nodes: n.as_reader(),
        node_claims: c.as_reader(),
        pods: p.as_reader(),
        provisioners: v.as_reader(),
        ..ClusterState::empty()
    };
    Ok(Cluster {
        state,
        _writers: (n, c, p, v),
    })
}

/// An API server answering what the consumer asks: claim writes, deletes, status patches, node
/// taints and Events succeed (echoing the object); anything else is 404.
#[derive(Clone)]
struct StubApi;

impl tower_service::Service<http::Request<kube::client::Body>> for StubApi {
    type Response = http::Response<kube::client::Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let mut value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let path = parts.uri.path().to_string();
            let name = path.rsplit('/').next().unwrap_or_default().to_string();
            let (status, reply) = match parts.method {
                http::Method::POST => {
                    value["metadata"]["uid"] = json!("uid-stub");
                    value["metadata"]["resourceVersion"] = json!("1");
                    (201, value)
                }
                http::Method::DELETE => (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                ),
                http::Method::PATCH if path.contains("/nodeclaims/") => {
                    let claim = path
                        .trim_end_matches("/status")
                        .rsplit('/')
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    (
                        200,
                        json!({"apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
                        "metadata": {"name": claim, "resourceVersion": "2"}, "spec": {"provisionerName": "web"}}),
                    )
                }
                http::Method::PATCH => (
                    200,
                    json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "resourceVersion": "2"}}),
                ),
                _ => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                ),
            };
            let body = serde_json::to_vec(&reply).unwrap_or_default();
            let mut response = http::Response::new(kube::client::Body::from(body));
            *response.status_mut() =
                http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
            Ok(response)
        })
    }
}

/// Why the in-memory queue failed: never.
#[derive(Debug, thiserror::Error)]
#[error("in-memory queue")]
struct Never;

impl CloudError for Never {
    fn kind(&self) -> CloudErrorKind {
        CloudErrorKind::Other
    }
    fn code(&self) -> String {
        "other".into()
    }
}

/// The messages as a list: receive takes ten and parses them, delete counts.
struct ListQueue {
    bodies: Mutex<VecDeque<(usize, String)>>,
}

impl InterruptionQueue for ListQueue {
    type Error = Never;

    async fn receive(&self) -> Result<Vec<Message>, Never> {
        let taken: Vec<(usize, String)> = {
            let mut bodies = self.bodies.lock().unwrap_or_else(|p| p.into_inner());
            let n = bodies.len().min(10);
            bodies.drain(..n).collect()
        };
        if taken.is_empty() {
            // An empty queue long-polls: do not spin.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(taken
            .into_iter()
            .map(|(i, body)| Message {
                message_id: i.to_string(),
                receipt: i.to_string(),
                body: parse(&body),
                sent_at_ms: None,
            })
            .collect())
    }

    async fn delete(&self, receipts: &[String]) -> Result<Vec<Option<String>>, Never> {
        Ok(vec![None; receipts.len()])
    }

    fn visibility(&self) -> Duration {
        Duration::from_secs(30)
    }

    async fn extend(&self, _receipts: &[String]) -> Result<(), Never> {
        Ok(())
    }
}

/// Runs the consumer on `queue` until `total` messages are deleted; returns the seconds.
async fn consume<Q: InterruptionQueue + 'static>(
    ctx: Arc<Context<FakeCloud>>,
    queue: Arc<Q>,
    total: usize,
) -> f64 {
    let stop = CancellationToken::new();
    let start = Instant::now();
    let consumer = tokio::spawn(interruption::run(ctx.clone(), queue, stop.clone()));
    while (ctx.metrics.interruption_deleted.get() as usize) < total
        && start.elapsed() < Duration::from_secs(600)
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    stop.cancel();
    let _ = consumer.await;
    seconds
}

fn context(catalog: &[InstanceType], cluster: &Cluster) -> Arc<Context<FakeCloud>> {
    let client = kube::Client::new(StubApi, "default");
    Arc::new(Context::new(
        client,
        cluster.state.clone(),
        Arc::new(FakeCloud::new(catalog.to_vec())),
        Settings::new("bench"),
    ))
}

fn summary(ctx: &Context<FakeCloud>) -> (u64, u64) {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("a", "", ctx.metrics.interruption_actions.clone());
    registry.register("r", "", ctx.metrics.interruption_rejected.clone());
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    let sum = |prefix: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    (sum("a_total"), sum("r_total"))
}

/// A fresh queue at `endpoint`, the consumer's view of it, and a producer that sends `bodies`
/// to it in batches of ten, as EventBridge would deliver a burst.
async fn sqs_queue(
    endpoint: &str,
    bodies: Vec<String>,
) -> Result<(SqsQueue, impl Future<Output = Result<(), CliError>>), CliError> {
    let config = aws_sdk_sqs::config::Builder::new()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "bench", "bench", None, None, "bench",
        ))
        .build();
    let sqs = aws_sdk_sqs::Client::from_conf(config);
    let name = format!("joiner-bench-{}", std::process::id());
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .map_err(|e| CliError::Usage(format!("--sqs-endpoint {endpoint}: creating queue: {e}")))?
        .queue_url
        .unwrap_or_default();
    let queue = SqsQueue::connect(sqs.clone(), &name)
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?
        .with_timing(1, 30);
    let endpoint = endpoint.to_string();
    let producer = async move {
        for (g, chunk) in bodies.chunks(10).enumerate() {
            let entries: Vec<_> = chunk
                .iter()
                .enumerate()
                .filter_map(|(k, body)| {
                    aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                        .id(format!("m{g}-{k}"))
                        .message_body(body)
                        .build()
                        .ok()
                })
                .collect();
            sqs.send_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| CliError::Usage(format!("--sqs-endpoint {endpoint}: sending: {e}")))?;
        }
        Ok(())
    };
    Ok((queue, producer))
}

/// CPU seconds this process has used (user + system), from /proc; 0 where unreadable.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name; 100 ticks/s.
    (ticks(11) + ticks(12)) / 100.0
}

/// Runs the benchmark and returns a Markdown table.
pub fn run(messages: usize, endpoint: Option<&str>, region: &str) -> Result<String, CliError> {
    let catalog = joiner_aws::embedded::cached(region)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let bodies: Vec<String> = (0..messages).map(|n| message(n, &mut rng)).collect();

    let started = Instant::now();
    let parsed = bodies.iter().filter(|b| parse(b).is_ok()).count();
    let parse_seconds = started.elapsed().as_secs_f64();

    let mut out = String::new();
    let _ = writeln!(out, "| queue | messages | acted on (nodes) | deleted without action | seconds | messages/s | joiner CPU s |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| parse only | {messages} | ({parsed} events) | | {parse_seconds:.3} | {:.0} | {parse_seconds:.3} |",
        messages as f64 / parse_seconds.max(1e-9)
    );
    runtime.block_on(async {
        let world = cluster()?;
        let ctx = context(&catalog.instance_types, &world);
        let queue = Arc::new(ListQueue {
            bodies: Mutex::new(bodies.iter().cloned().enumerate().collect()),
        });
        let cpu = cpu_seconds();
        let seconds = consume(ctx.clone(), queue, messages).await;
        let cpu = cpu_seconds() - cpu;
        let (acted, rejected) = summary(&ctx);
        let _ = writeln!(
            out,
            "| in memory | {messages} | {acted} | {rejected} | {seconds:.3} | {:.0} | {cpu:.2} |",
            messages as f64 / seconds.max(1e-9)
        );
        if let Some(endpoint) = endpoint {
            let world = cluster()?;
            let ctx = context(&catalog.instance_types, &world);
            let (queue, producer) = sqs_queue(endpoint, bodies.clone()).await?;
            let cpu = cpu_seconds();
            let (seconds, sent) = tokio::join!(consume(ctx.clone(), Arc::new(queue), messages), producer);
            let cpu = cpu_seconds() - cpu;
            sent?;
            let (acted, rejected) = summary(&ctx);
            let _ = writeln!(
                out,
                "| SQS at {endpoint} | {messages} | {acted} | {rejected} | {seconds:.3} | {:.0} | {cpu:.2} |",
                messages as f64 / seconds.max(1e-9)
            );
        }
        Ok::<(), CliError>(())
    })?;
    Ok(out)
}
