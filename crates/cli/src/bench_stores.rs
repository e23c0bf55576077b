//! `joiner bench --stores`: the controller's memory with a large cluster in its stores.
//!
//! Full Pod and Node objects (containers with environment, mounts and probes, volumes, status,
//! managedFields and kubectl's last-applied copy, as a real cluster returns them) go page by
//! page (500, the watchers' page size) into reflector stores the way the watchers feed them
//! (pods become `PodRecord`s, nodes are stripped), after what a controller holds from its
//! start: a `kube::Client` (TLS configuration, connection pool) and a live catalog
//! (`LiveCatalog`, assembled from the embedded tables because its AWS endpoint does not
//! answer, as a controller's is when AWS cannot be reached; the assembled catalog is the same
//! size either way). Then one snapshot is built on that catalog and planned (the scheduling
//! simulation of its pending pods), as a provisioning batch does. Resident memory is read from
//! /proc at each step.

use std::fmt::Write as _;

use joiner_controller::pod_record::PodRecord;
use joiner_controller::state::ClusterState;
use joiner_controller::watch::strip_node;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::json;

use crate::error::CliError;

/// Objects per page, as the watchers list them.
pub const PAGE: usize = 500;

/// A pod of Deployment `app` as the API server returns it (bound to `node` unless pending).
fn full_pod(i: usize, node: Option<&str>) -> Pod {
    let app = format!("app-{}", i % 400);
    let env: Vec<serde_json::Value> = (0..15)
        .map(|e| json!({"name": format!("SETTING_{e}"), "value": format!("value-{e}-{i:08}-with-some-length")}))
        .collect();
    let container = |name: &str| {
        json!({
            "name": name,
            "image": format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/{app}:v1.2.{}", i % 17),
            "command": ["/bin/server"],
            "args": ["--port=8080", "--log-level=info", "--config=/etc/app/config.yaml"],
            "env": env,
            "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/app"},
                {"name": "cache", "mountPath": "/var/cache/app"},
                {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 5},
            "imagePullPolicy": "IfNotPresent",
            "terminationMessagePath": "/dev/termination-log",
            "securityContext": {"runAsNonRoot": true, "readOnlyRootFilesystem": true}
        })
    };
    let last_applied = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": app},
        "spec": {"containers": [container("app")]}})
    .to_string();
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-{i:08}"), "namespace": format!("team-{}", i % 20),
            "uid": format!("00000000-0000-0000-0000-{i:012}"), "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": {"app": app, "tier": "backend", "version": "v1",
                "pod-template-hash": "7d9f8c6b5", "team": format!("team-{}", i % 20)},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied,
                "prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{app}-7d9f8c6b5"), "uid": "11111111-0000-0000-0000-000000000000",
                "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                "apiVersion": "v1", "time": "2026-11-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}, "f:tier": {}, "f:version": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:env": {}, "f:image": {}}}}}}]
        },
        "spec": {
            "containers": [container("app"), container("sidecar")],
            "volumes": [
                {"name": "config", "configMap": {"name": format!("{app}-config")}},
                {"name": "cache", "emptyDir": {}},
                {"name": "kube-api-access", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "serviceAccountName": "default",
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": app}}}]
        },
        "status": {"phase": "Running", "qosClass": "Burstable",
            "podIP": format!("10.0.{}.{}", (i / 250) % 256, i % 250), "hostIP": "10.0.0.1",
            "startTime": "2026-11-01T00:00:05Z",
            "conditions": [
                {"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 0, "image": "app:v1", "imageID": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "containerID": "containerd://0123456789abcdef", "started": true, "state": {"running": {"startedAt": "2026-11-01T00:00:06Z"}}},
                {"name": "sidecar", "ready": true, "restartCount": 0, "image": "sidecar:v1", "imageID": "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210", "containerID": "containerd://fedcba9876543210", "started": true, "state": {"running": {"startedAt": "2026-11-01T00:00:06Z"}}}]}
    });
    match node {
        Some(n) => v["spec"]["nodeName"] = json!(n),
        None => {
            v["status"] = json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
        }
    }
    serde_json::from_value(v).unwrap_or_default()
}

/// A node as the API server returns it.
fn full_node(i: usize) -> Node {
    let images: Vec<serde_json::Value> = (0..40)
        .map(|k| json!({"names": [format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/image-{k}@sha256:{k:064}")], "sizeBytes": 123456789}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("ip-10-0-{}-{}.ec2.internal", i / 250, i % 250),
            "uid": format!("n-{i}"), "resourceVersion": "1",
            "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m5.2xlarge",
                "topology.kubernetes.io/zone": format!("us-east-1{}", ["a", "b", "c"][i % 3]),
                "joiner.sh/provisioner-name": "default", "karpenter.sh/capacity-type": "on-demand"}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{i:017x}")},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "58"},
            "allocatable": {"cpu": "7910m", "memory": "31Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": images,
            "nodeInfo": {"kubeletVersion": "v1.33.0", "containerRuntimeVersion": "containerd://1.7.0",
                "kernelVersion": "6.1.0", "osImage": "Amazon Linux 2023", "architecture": "amd64",
                "operatingSystem": "linux", "machineID": "m", "systemUUID": "s", "bootID": "b",
                "kubeProxyVersion": "v1.33.0"}}
    }))
    .unwrap_or_default()
}

/// Resident memory now (VmRSS) and at most so far (VmHWM), MiB.
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let read = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (read("VmRSS:"), read("VmHWM:"))
}

/// Feeds `pods` pods (a fifth pending) and `nodes` nodes through the strip functions into
/// stores, page by page, builds one snapshot, and reports memory at each step.
pub fn run(pods: usize, nodes: usize, region: &str) -> Result<String, CliError> {
    let mut out = String::new();
    let (start, _) = rss_mib();
    // What a controller holds before its stores fill: the API client and the live catalog,
    // loaded (the controller loads it at start, on every replica).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    let (client, live, parts) = runtime.block_on(controller_parts(region))?;
    let types = runtime
        .block_on(live.instance_types())
        .map_err(|e| CliError::Usage(format!("live catalog: {e}")))?;
    let (with_parts, _) = rss_mib();
    let mut pod_writer: Writer<PodRecord> = Writer::default();
    let mut node_writer: Writer<Node> = Writer::default();
    pod_writer.apply_watcher_event(&Event::Init);
    node_writer.apply_watcher_event(&Event::Init);
    for first in (0..nodes).step_by(PAGE) {
        let page: Vec<Node> = (first..(first + PAGE).min(nodes)).map(full_node).collect();
        for mut n in page {
            strip_node(&mut n);
            node_writer.apply_watcher_event(&Event::InitApply(n));
        }
    }
    node_writer.apply_watcher_event(&Event::InitDone);
    let node_names: Vec<String> = (0..nodes)
        .map(|i| format!("ip-10-0-{}-{}.ec2.internal", i / 250, i % 250))
        .collect();
    for first in (0..pods).step_by(PAGE) {
        let page: Vec<Pod> = (first..(first + PAGE).min(pods))
            .map(|i| {
                let node = (i % 5 != 0 && !node_names.is_empty())
                    .then(|| node_names[i % node_names.len()].as_str());
                full_pod(i, node)
            })
            .collect();
        for p in page {
            pod_writer.apply_watcher_event(&Event::InitApply(PodRecord::from(p)));
        }
    }
    pod_writer.apply_watcher_event(&Event::InitDone);
    let (stored, peak_feed) = rss_mib();
    let state = ClusterState {
        pods: pod_writer.as_reader(),
        nodes: node_writer.as_reader(),
        ..ClusterState::empty()
    };
    let (mut snapshot, warnings) = state.snapshot_with_catalog(&types);
    let (after, _) = rss_mib();
    // As a provisioning batch plans: on its own snapshot, in place.
    let plan = joiner_core::scheduling::simulate_in_place(
        &mut snapshot,
        &types,
        &joiner_core::scheduling::Options::default(),
    );
    let (planned, peak) = rss_mib();
    let _ = writeln!(out, "| pods | nodes | RSS at start MiB | with client and live catalog MiB | stores MiB | peak while feeding MiB | with snapshot MiB | after planning MiB | peak MiB |");
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| {pods} | {nodes} | {start:.0} | {with_parts:.0} | {stored:.0} | {peak_feed:.0} | {after:.0} | {planned:.0} | {peak:.0} |"
    );
    let _ = writeln!(
        out,
        "\nRSS MiB after the kube client {:.0}, the AWS clients {:.0}, the live catalog created {:.0}, loaded {with_parts:.0}",
        parts.0, parts.1, parts.2
    );
    let _ = writeln!(
        out,
        "snapshot: {} pods, {} nodes, {} warnings; live catalog: {} types; plan: {} new nodes, {} pods unschedulable",
        snapshot.pods.len(),
        snapshot.nodes.len(),
        warnings.len(),
        types.len(),
        plan.new_nodes.len(),
        plan.unschedulable.len()
    );
    drop((client, live));
    Ok(out)
}

/// The API client and live catalog a controller holds: a client for an API server it never
/// calls here, and a catalog whose AWS endpoint refuses connections (so it stands in the
/// embedded tables after one failed attempt per source). Also the RSS after the kube client,
/// the AWS clients and the catalog's creation (before it loads).
async fn controller_parts(
    region: &str,
) -> Result<
    (
        kube::Client,
        joiner_aws::catalog::LiveCatalog,
        (f64, f64, f64),
    ),
    CliError,
> {
    joiner_controller::crypto::install_default_provider();
    let url: http::Uri = "https://127.0.0.1:6443"
        .parse()
        .map_err(|e| CliError::Usage(format!("API server URL: {e}")))?;
    let client = kube::Client::try_from(kube::Config::new(url))
        .map_err(|e| CliError::Usage(format!("kube client: {e}")))?;
    let (after_kube, _) = rss_mib();
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url("http://127.0.0.1:9")
        .region(aws_config::Region::new(region.to_string()))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "bench", "bench", None, None, "bench",
        ))
        .load()
        .await;
    let clients = joiner_aws::AwsClients::from_config(&config)
        .map_err(|e| CliError::Usage(format!("AWS clients: {e}")))?;
    let (after_aws, _) = rss_mib();
    let options = joiner_aws::catalog::CatalogOptions {
        max_attempts: 1,
        call_timeout: std::time::Duration::from_secs(5),
        ..Default::default()
    };
    let live = joiner_aws::catalog::LiveCatalog::new(
        &clients,
        options,
        &mut prometheus_client::registry::Registry::default(),
    );
    let (after_catalog, _) = rss_mib();
    Ok((client, live, (after_kube, after_aws, after_catalog)))
}
