//! The reflectors that fill [`ClusterState`]: one watcher per kind, each object stripped of the
//! fields no decision reads before it enters its store (pods become [`PodRecord`]s).
//!
//! A cluster's pods dominate the controller's memory, and most of a pod object is container
//! detail (environment, mounts, probes, commands) and status the scheduler side never looks
//! at. The strip functions keep exactly what `joiner_apis::convert` and the reconcilers read
//! (names, labels, annotations other than kubectl's last-applied copy, owner references,
//! deletion timestamps, finalizers, requests and limits, host ports, affinity, tolerations,
//! topology spread, priority, node name, conditions and phase) and drop the rest.
//!
//! Because store objects are incomplete, never `PUT` one back to the API server: change
//! objects with patches.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use joiner_apis::{NodeClaim, NodeTemplate, Provisioner};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Container, Namespace, Node, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeSpec, Pod, PodSpec,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{
    CSINode, StorageClass, VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
};
use kube::api::ObjectMeta;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

use crate::pod_record::PodRecord;
use crate::state::{ClusterState, CreatedClaims, VolumeStores};

/// Objects per page of a watcher's initial list.
pub const PAGE_SIZE: u32 = 500;

/// The annotation `kubectl apply` writes: a full copy of the object, often the largest field.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The cluster state and the futures that keep it current. The runtime drives every future
/// for the life of the process (on every replica, leader or not, so a new leader starts warm).
pub struct Reflectors {
    /// Read handles on the stores.
    pub state: ClusterState,
    /// One future per watcher; each runs until the process stops (watch errors are retried
    /// with the watcher's default backoff and logged).
    pub drivers: Vec<BoxFuture<'static, ()>>,
}

/// Starts nothing yet: builds the stores and the watcher futures for Pods, Nodes, DaemonSets,
/// PodDisruptionBudgets, Namespaces, Provisioners, NodeTemplates, NodeClaims,
/// PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes on `client`.
pub fn reflectors(client: &Client) -> Reflectors {
    let (pods, pods_w) = reflector::store();
    let (nodes, nodes_w) = reflector::store();
    let (daemonsets, daemonsets_w) = reflector::store();
    let (pdbs, pdbs_w) = reflector::store();
    let (namespaces, namespaces_w) = reflector::store();
    let (provisioners, provisioners_w) = reflector::store();
    let (node_templates, node_templates_w) = reflector::store();
    let (node_claims, node_claims_w) = reflector::store();
    let (volume_claims, volume_claims_w) = reflector::store();
    let (volumes, volumes_w) = reflector::store();
    let (classes, classes_w) = reflector::store();
    let (csi_nodes, csi_nodes_w) = reflector::store();
    let (attachments, attachments_w) = reflector::store();
    let created = CreatedClaims::default();
    let drivers = vec![
        drive_pods(Api::<Pod>::all(client.clone()), pods_w),
        drive(Api::<Node>::all(client.clone()), nodes_w, strip_node),
        drive(
            Api::<DaemonSet>::all(client.clone()),
            daemonsets_w,
            strip_daemon_set,
        ),
        drive(
            Api::<PodDisruptionBudget>::all(client.clone()),
            pdbs_w,
            strip_meta,
        ),
        drive(
            Api::<Namespace>::all(client.clone()),
            namespaces_w,
            strip_namespace,
        ),
        drive(
            Api::<Provisioner>::all(client.clone()),
            provisioners_w,
            strip_meta,
        ),
        drive(
            Api::<NodeTemplate>::all(client.clone()),
            node_templates_w,
            strip_meta,
        ),
        drive_reporting(
            Api::<NodeClaim>::all(client.clone()),
            node_claims_w,
            strip_meta,
            watch_health(created.clone()),
        ),
        drive(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            volume_claims_w,
            strip_volume_claim,
        ),
        drive(
            Api::<PersistentVolume>::all(client.clone()),
            volumes_w,
            strip_volume,
        ),
        drive(
            Api::<StorageClass>::all(client.clone()),
            classes_w,
            strip_meta,
        ),
        drive(Api::<CSINode>::all(client.clone()), csi_nodes_w, strip_meta),
        drive(
            Api::<VolumeAttachment>::all(client.clone()),
            attachments_w,
            strip_volume_attachment,
        ),
    ];
    Reflectors {
        state: ClusterState {
            pods,
            nodes,
            daemonsets,
            provisioners,
            node_templates,
            node_claims,
            pdbs,
            namespaces,
            created,
            claim_history: Default::default(),
            volumes: VolumeStores {
                claims: volume_claims,
                volumes,
                classes,
                csi_nodes,
                attachments,
            },
        },
        drivers,
    }
}

/// Resolves once every store has finished its initial list: before that a snapshot would
/// miss nodes and pods, and a plan made on it would buy capacity that exists. Fails only if a
/// store's writer is gone (its driver was dropped).
pub async fn wait_synced(state: &ClusterState) -> Result<(), reflector::store::WriterDropped> {
    state.pods.wait_until_ready().await?;
    state.nodes.wait_until_ready().await?;
    state.daemonsets.wait_until_ready().await?;
    state.pdbs.wait_until_ready().await?;
    state.namespaces.wait_until_ready().await?;
    state.provisioners.wait_until_ready().await?;
    state.node_templates.wait_until_ready().await?;
    state.node_claims.wait_until_ready().await?;
    state.volumes.claims.wait_until_ready().await?;
    state.volumes.volumes.wait_until_ready().await?;
    state.volumes.classes.wait_until_ready().await?;
    state.volumes.csi_nodes.wait_until_ready().await?;
    state.volumes.attachments.wait_until_ready().await?;
    Ok(())
}

/// A watcher on `api` whose objects pass through `strip` into `writer`.
fn drive<K>(api: Api<K>, writer: Writer<K>, strip: fn(&mut K)) -> BoxFuture<'static, ()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    drive_reporting(api, writer, strip, |_| {})
}

/// Tells the claims this replica wrote whether the NodeClaim watch delivers: while it fails,
/// none of them is forgotten ([`CreatedClaims`]).
fn watch_health(created: CreatedClaims) -> impl FnMut(bool) + Send + 'static {
    move |delivered| {
        if delivered {
            created.watch_delivered();
        } else {
            created.watch_failed();
        }
    }
}

/// [`drive`], telling `report` after each event whether the watch delivered (true) or failed.
fn drive_reporting<K>(
    api: Api<K>,
    writer: Writer<K>,
    strip: fn(&mut K),
    mut report: impl FnMut(bool) + Send + 'static,
) -> BoxFuture<'static, ()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let kind = K::kind(&K::DynamicType::default()).to_string();
    // The initial list comes in pages of 500, each stripped object by object as it arrives:
    // a replica never holds a whole cluster's pods unstripped (a resourceVersion=0 list is
    // served whole, ignoring the page size, by API servers before 1.33's paginated watch
    // cache). Recent API servers serve these consistent lists from their watch cache too.
    let config = watcher::Config::default().page_size(PAGE_SIZE);
    let stream = watcher(api, config).default_backoff().modify(strip);
    reflector::reflector(writer, stream)
        .for_each(move |event| {
            if let Err(e) = &event {
                tracing::warn!(kind = %kind, error = %e, "watch failed; retrying");
            }
            report(event.is_ok());
            futures::future::ready(())
        })
        .boxed()
}

/// The pod watcher: each pod, as it arrives (page by page in the initial list), becomes the
/// [`PodRecord`] the store keeps; the full object is dropped at once.
fn drive_pods(api: Api<Pod>, writer: Writer<PodRecord>) -> BoxFuture<'static, ()> {
    let config = watcher::Config::default().page_size(PAGE_SIZE);
    let stream = watcher(api, config)
        .default_backoff()
        .map_ok(|event| match event {
            watcher::Event::Apply(p) => watcher::Event::Apply(PodRecord::from(p)),
            watcher::Event::Delete(p) => watcher::Event::Delete(PodRecord::from(p)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitApply(p) => watcher::Event::InitApply(PodRecord::from(p)),
            watcher::Event::InitDone => watcher::Event::InitDone,
        });
    reflector::reflector(writer, stream)
        .for_each(|event| {
            if let Err(e) = event {
                tracing::warn!(kind = "Pod", error = %e, "watch failed; retrying");
            }
            futures::future::ready(())
        })
        .boxed()
}

/// Drops managedFields and the last-applied annotation: kept by the API server for its own
/// bookkeeping, read by no decision.
pub fn strip_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

fn strip_meta<K: Resource>(obj: &mut K) {
    strip_metadata(obj.meta_mut());
}

/// Keeps of a VolumeAttachment its name, node and volume (what termination waits on).
pub fn strip_volume_attachment(va: &mut VolumeAttachment) {
    strip_metadata(&mut va.metadata);
    va.metadata.annotations = None;
    va.metadata.labels = None;
    va.spec = VolumeAttachmentSpec {
        attacher: std::mem::take(&mut va.spec.attacher),
        node_name: std::mem::take(&mut va.spec.node_name),
        source: VolumeAttachmentSource {
            persistent_volume_name: va.spec.source.persistent_volume_name.take(),
            ..VolumeAttachmentSource::default()
        },
    };
    va.status = None;
}

/// Keeps of a Namespace its name and labels (what namespaceSelectors read).
fn strip_namespace(ns: &mut Namespace) {
    strip_metadata(&mut ns.metadata);
    ns.spec = None;
    ns.status = None;
}

/// Keeps of a container what sizing and host-port checks read: name, resources, ports,
/// and the restart policy that marks a sidecar.
fn strip_container(c: &mut Container) {
    let kept = Container {
        name: std::mem::take(&mut c.name),
        resources: c.resources.take(),
        ports: c.ports.take(),
        restart_policy: c.restart_policy.take(),
        ..Container::default()
    };
    *c = kept;
}

/// Drops from a pod spec what scheduling never reads: volumes and container details.
fn strip_pod_spec(spec: &mut PodSpec) {
    spec.containers.iter_mut().for_each(strip_container);
    if let Some(init) = spec.init_containers.as_mut() {
        init.iter_mut().for_each(strip_container);
    }
    spec.ephemeral_containers = None;
    spec.volumes = None;
    spec.image_pull_secrets = None;
    spec.readiness_gates = None;
    spec.dns_config = None;
    spec.host_aliases = None;
    spec.security_context = None;
}

/// A node without its image list and volume bookkeeping (status.images alone can be tens of
/// kilobytes per node).
pub fn strip_node(node: &mut Node) {
    strip_metadata(&mut node.metadata);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
    }
}

/// A claim as volume topology reads it: identity (with its deletion mark), the volume it is
/// bound to, its class, its phase (a Lost claim holds its pods).
pub fn strip_volume_claim(claim: &mut PersistentVolumeClaim) {
    strip_metadata(&mut claim.metadata);
    claim.metadata.annotations = None;
    claim.metadata.labels = None;
    claim.spec = claim.spec.take().map(|spec| PersistentVolumeClaimSpec {
        volume_name: spec.volume_name,
        storage_class_name: spec.storage_class_name,
        access_modes: spec.access_modes,
        ..PersistentVolumeClaimSpec::default()
    });
    claim.status = claim.status.take().map(|s| PersistentVolumeClaimStatus {
        phase: s.phase,
        ..PersistentVolumeClaimStatus::default()
    });
}

/// A volume as volume topology and attach caps read it: its name, zone labels, node affinity
/// and driver.
pub fn strip_volume(volume: &mut PersistentVolume) {
    strip_metadata(&mut volume.metadata);
    volume.metadata.annotations = None;
    volume.metadata.labels = volume.metadata.labels.take().and_then(|mut labels| {
        labels.retain(|k, _| joiner_apis::convert::volumes::PV_ZONE_LABELS.contains(&k.as_str()));
        (!labels.is_empty()).then_some(labels)
    });
    volume.spec = volume.spec.take().map(|spec| PersistentVolumeSpec {
        node_affinity: spec.node_affinity,
        // The driver attaching it (attach caps): a CSI volume's, or an in-tree EBS volume.
        csi: spec.csi.map(|c| CSIPersistentVolumeSource {
            driver: c.driver,
            volume_handle: c.volume_handle,
            ..CSIPersistentVolumeSource::default()
        }),
        aws_elastic_block_store: spec.aws_elastic_block_store,
        ..PersistentVolumeSpec::default()
    });
    volume.status = None;
}

/// A DaemonSet with its pod template stripped like a pod's spec.
pub fn strip_daemon_set(ds: &mut DaemonSet) {
    strip_metadata(&mut ds.metadata);
    if let Some(spec) = ds.spec.template.spec.as_mut() {
        strip_pod_spec(spec);
    }
    if let Some(meta) = ds.spec.template.metadata.as_mut() {
        strip_metadata(meta);
    }
}

pub use crate::k8s::stores::filled;
