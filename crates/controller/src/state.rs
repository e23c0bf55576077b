//! The cluster state cache: reflector stores for everything the simulation reads, and their
//! conversion into a core [`Snapshot`].
//!
//! The stores are filled by watchers (or, in tests, by `Writer::apply_watcher_event`); this
//! module only reads them, so a snapshot is a consistent-enough copy taken without a request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use joiner_apis::convert;
use joiner_apis::convert::csi_nodes;
use joiner_apis::convert::once_pod;
use joiner_apis::convert::volumes::{PodClaim, VolumeIndex};
use joiner_apis::{NodeClaim, NodeTemplate, ObjectLookup, Provisioner};
use joiner_core::kubelet::KubeletSettings;
use joiner_core::{InstanceType, Snapshot};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::nominations;
use crate::pod_record::{PodRecord, PodRole};

/// Read handles on the reflector stores the controller keeps. Cloning is cheap (the stores are
/// shared), so each reconciler can hold its own copy.
#[derive(Clone)]
pub struct ClusterState {
    /// Every pod in the cluster, as a [`PodRecord`] (converted once, when delivered).
    pub pods: Store<PodRecord>,
    /// Every node.
    pub nodes: Store<Node>,
    /// Every DaemonSet: their pods land on each new node and reduce what it can hold.
    pub daemonsets: Store<DaemonSet>,
    /// joiner Provisioners.
    pub provisioners: Store<Provisioner>,
    /// joiner NodeTemplates: their resolved subnets narrow a Provisioner's zones.
    pub node_templates: Store<NodeTemplate>,
    /// joiner NodeClaims: launches in flight and done. Claims whose node has not registered
    /// enter the snapshot as in-flight nodes ([`ClusterState::snapshot_with_catalog`]).
    pub node_claims: Store<NodeClaim>,
    /// PodDisruptionBudgets: drains and disruption decisions respect them.
    pub pdbs: Store<PodDisruptionBudget>,
    /// Namespaces (metadata only): the labels pod-affinity `namespaceSelector`s select.
    pub namespaces: Store<Namespace>,
    /// NodeClaims this replica wrote that the claims store may not hold yet.
    pub created: CreatedClaims,
    /// When each Provisioner opened its claims over the last day (warm pools' `size: auto`).
    pub claim_history: joiner_apis::cluster::warm_pool::history::ClaimHistory,
    /// Where pods' volumes are: a pending pod whose EBS volume exists in one zone can only run
    /// there.
    pub volumes: VolumeStores,
}

/// The objects that say which zones pods' volumes confine them to (see
/// `joiner_apis::convert::volumes`).
#[derive(Clone)]
pub struct VolumeStores {
    /// PersistentVolumeClaims (name, namespace, deletion mark, volume name and class only).
    pub claims: Store<PersistentVolumeClaim>,
    /// PersistentVolumes (name, zone labels and node affinity only).
    pub volumes: Store<PersistentVolume>,
    /// StorageClasses (allowed topologies, provisioner, and the annotation marking the
    /// default).
    pub classes: Store<StorageClass>,
    /// CSINodes: how many volumes each CSI driver may attach to each node.
    pub csi_nodes: Store<CSINode>,
    /// VolumeAttachments (name, node, volume): termination waits for a drained node's volumes
    /// to detach before terminating its instance.
    pub attachments: Store<VolumeAttachment>,
}

impl VolumeStores {
    /// Stores that hold nothing and count as synced: no pod is confined by a volume.
    pub fn empty() -> Self {
        VolumeStores {
            claims: synced_empty(),
            volumes: synced_empty(),
            classes: synced_empty(),
            csi_nodes: synced_empty(),
            attachments: synced_empty(),
        }
    }

    /// A pending pod's core form confined to its volumes' zones, or held by a volume it
    /// waits for; `None` when its volumes change nothing (the caller keeps the stored pod).
    fn confine(&self, index: &VolumeIndex<'_>, pod: &PodRecord) -> Option<joiner_core::Pod> {
        let core = pod.core.as_ref().ok()?;
        let volumes = index.pod_volumes(&core.namespace, &pod.claims);
        if volumes.is_empty() {
            return None;
        }
        let mut confined = core.clone();
        volumes.apply_to(&mut confined);
        Some(confined)
    }
}

/// How long a NodeClaim this replica wrote is remembered when the watch never delivers it (it
/// was deleted at once): long past any watch delay. The time counts only while the NodeClaim
/// watch is healthy, so an outage of any length keeps every claim written meanwhile.
const CREATED_TTL: Duration = Duration::from_secs(60);

/// NodeClaims this replica created, remembered until the claims store holds them. The watch
/// delivers a write a moment after it was made; a batch planned in between would not see the
/// capacity the previous one bought and buy it again. The planner reads
/// [`ClusterState::claims`], the store with these added.
#[derive(Clone, Default)]
pub struct CreatedClaims {
    remembered: Arc<Mutex<Remembered>>,
    planning: Arc<tokio::sync::Mutex<()>>,
    /// The claims a task of this replica is launching now ([`CreatedClaims::begin_launch`]).
    launching: Arc<Mutex<std::collections::HashSet<String>>>,
}

/// Held while a claim is being launched; the claim is free to launch again once dropped.
pub struct LaunchGuard {
    launching: Arc<Mutex<std::collections::HashSet<String>>>,
    name: String,
}

impl Drop for LaunchGuard {
    fn drop(&mut self) {
        self.launching
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.name);
    }
}

/// Held from the snapshot a plan is made from until the plan's claims are written and
/// remembered (never across a launch): two plans made at once from one snapshot would both
/// count the same free room — provisioning, an interruption's replacement, a disruption's.
pub type PlanningGuard = tokio::sync::OwnedMutexGuard<()>;

/// What [`CreatedClaims`] holds.
#[derive(Default)]
struct Remembered {
    /// The claims this replica wrote, when, and whether the write was a patch of a claim
    /// already stored (which only ever overlays the store's copy, never adds one: the claim
    /// may have been deleted meanwhile).
    claims: Vec<(Arc<NodeClaim>, tokio::time::Instant, bool)>,
    /// Since when the NodeClaim watch has failed, while it does.
    outage_since: Option<tokio::time::Instant>,
    /// When the watch last came back from an outage.
    back_at: Option<tokio::time::Instant>,
}

impl CreatedClaims {
    /// Remembers `claim` as the API server stored it when this replica created it.
    pub fn remember(&self, claim: NodeClaim) {
        self.lock()
            .claims
            .push((Arc::new(claim), tokio::time::Instant::now(), false));
    }

    /// Remembers `claim` as the API server answered a patch of it (its nominations).
    pub fn remember_patched(&self, claim: NodeClaim) {
        self.lock()
            .claims
            .push((Arc::new(claim), tokio::time::Instant::now(), true));
    }

    /// Forgets claim `name`: this replica deleted it (the watch may not say so for a while,
    /// and a deleted claim must not count as capacity on its way).
    pub fn forget(&self, name: &str) {
        self.lock().claims.retain(|(c, _, _)| c.name() != name);
    }

    /// The NodeClaim watch failed: until it delivers again, nothing written is forgotten.
    pub fn watch_failed(&self) {
        let mut r = self.lock();
        r.outage_since.get_or_insert_with(tokio::time::Instant::now);
    }

    /// The NodeClaim watch delivered an event: the forgetting clock runs again, from now for
    /// claims written before or during an outage.
    pub fn watch_delivered(&self) {
        let mut r = self.lock();
        if r.outage_since.take().is_some() {
            r.back_at = Some(tokio::time::Instant::now());
        }
    }

    /// `stored` plus the remembered claims it does not hold yet (by name); remembered claims
    /// the store now holds, or that the healthy watch has not delivered within the TTL, are
    /// forgotten.
    pub fn merged(&self, mut stored: Vec<Arc<NodeClaim>>) -> Vec<Arc<NodeClaim>> {
        let mut r = self.lock();
        let (outage, back_at) = (r.outage_since.is_some(), r.back_at);
        r.claims.retain(|(c, at, _)| {
            let since = back_at.map_or(*at, |b| b.max(*at));
            (outage || since.elapsed() < CREATED_TTL) && !stored.iter().any(|s| delivered(s, c))
        });
        // In the order remembered: a claim patched after it was written is remembered twice,
        // and the later answer wins.
        for (c, _, patched) in r.claims.iter() {
            match stored.iter_mut().find(|s| s.name() == c.name()) {
                Some(s) if s.metadata.deletion_timestamp.is_none() => *s = c.clone(),
                Some(_) => {}
                None if !patched => stored.push(c.clone()),
                None => {}
            }
        }
        stored
    }

    /// Claims the launch of claim `name` for the caller until the guard drops; `None` when
    /// another task launches it now (the one that wrote it, and the loop that launches what
    /// was left unlaunched, must not both call the cloud).
    pub fn begin_launch(&self, name: &str) -> Option<LaunchGuard> {
        let mut set = self
            .launching
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set.insert(name.to_string()).then(|| LaunchGuard {
            launching: self.launching.clone(),
            name: name.to_string(),
        })
    }

    /// True while a task launches claim `name`.
    pub fn is_launching(&self, name: &str) -> bool {
        self.launching
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(name)
    }

    /// Waits for the turn to plan: see [`PlanningGuard`].
    pub async fn planning(&self) -> PlanningGuard {
        self.planning.clone().lock_owned().await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.remembered.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// True when the store's `stored` claim is `remembered` or newer: the same name, and the same
/// nominations or a resource version at least as recent (a claim this replica patched is
/// remembered again with the patch's answer, which the store may not show yet).
fn delivered(stored: &NodeClaim, remembered: &NodeClaim) -> bool {
    if stored.name() != remembered.name() {
        return false;
    }
    if nominations::of(stored) == nominations::of(remembered) {
        return true;
    }
    let version = |c: &NodeClaim| {
        c.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    match (version(stored), version(remembered)) {
        (Some(s), Some(r)) => s >= r,
        // Not comparable: the store's copy is taken, as before any patch was remembered.
        _ => true,
    }
}

/// The cloud provider reads a claim's Provisioner and NodeTemplate straight from the stores,
/// so a launch always sees what the watch last delivered.
impl ObjectLookup for ClusterState {
    fn provisioner(&self, name: &str) -> Option<Arc<Provisioner>> {
        self.provisioners.get(&ObjectRef::new(name))
    }

    fn node_template(&self, name: &str) -> Option<Arc<NodeTemplate>> {
        self.node_templates.get(&ObjectRef::new(name))
    }
}

/// True when joiner should plan capacity for `pod`: the kube-scheduler marked it
/// `PodScheduled=False` reason `Unschedulable`, it has no `spec.nodeName` and no
/// `status.nominatedNodeName`, no DaemonSet owns it, and it is neither finished nor being
/// deleted. The provisioning batcher watches exactly these pods.
pub fn is_provisionable(pod: &PodRecord) -> bool {
    pod.role == PodRole::Pending
}

/// A store whose initial list has completed with no objects: `watch::wait_synced`
/// does not wait for it.
fn synced_empty<K>() -> Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    crate::k8s::stores::filled(Vec::new()).as_reader()
}

/// `namespace/name` of a namespaced object, for warnings.
fn namespaced_name(meta: &kube::api::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or("<unnamed>")
    )
}

/// The name of a cluster-scoped object, for warnings.
fn cluster_name(meta: &kube::api::ObjectMeta) -> String {
    meta.name.as_deref().unwrap_or("<unnamed>").to_string()
}

impl ClusterState {
    /// Stores that hold nothing and count as synced (each read from a writer of its own): for
    /// tools, tests and benchmarks that fill a few of them and replace those fields.
    pub fn empty() -> Self {
        ClusterState {
            pods: synced_empty(),
            nodes: synced_empty(),
            daemonsets: synced_empty(),
            provisioners: synced_empty(),
            node_templates: synced_empty(),
            node_claims: synced_empty(),
            pdbs: synced_empty(),
            namespaces: synced_empty(),
            created: CreatedClaims::default(),
            claim_history: Default::default(),
            volumes: VolumeStores::empty(),
        }
    }

    /// The simulation's view of the cluster, with one warning per object that could not be
    /// converted (`Pod ns/name: field: reason`). Such an object is skipped rather than failing
    /// the snapshot: one bad pod must not stop capacity for every other pod.
    ///
    /// NodeClaims are left out: without the catalog their allocatable is unknown. Provisioning
    /// uses [`ClusterState::snapshot_with_catalog`].
    pub fn snapshot(&self) -> (Snapshot, Vec<String>) {
        self.build(None)
    }

    /// The NodeClaims: the store's, and those this replica just wrote that it does not hold
    /// yet ([`CreatedClaims`]).
    pub fn claims(&self) -> Vec<Arc<NodeClaim>> {
        self.created.merged(self.node_claims.state())
    }

    /// The NodeTemplates the store holds, as `convert::apply_node_templates` reads them.
    fn node_templates(&self) -> Vec<NodeTemplate> {
        self.node_templates
            .state()
            .iter()
            .map(|t| NodeTemplate::clone(t))
            .collect()
    }

    /// The kubelet and volume settings of Provisioner `name` (its `kubeletConfiguration` and
    /// its NodeTemplate's ephemeral volume), as the simulation sizes its nodes; the defaults
    /// when it is gone or invalid (its status says why).
    pub fn kubelet_settings(&self, name: &str) -> KubeletSettings {
        let Some(mut prov) = self
            .provisioners
            .state()
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.to_core().ok())
        else {
            return KubeletSettings::default();
        };
        let templates = self.node_templates();
        convert::apply_node_templates(std::slice::from_mut(&mut prov), &templates);
        prov.kubelet
    }

    /// [`ClusterState::snapshot`] plus the capacity the NodeClaims stand for, sized from
    /// `catalog` (`joiner_apis::cluster::claimed_capacity`, which `joiner plan` calls too): one
    /// in-flight node per claim whose node has not registered yet, nodes of claims not yet
    /// initialized planned without their startup and not-ready taints, warm members against
    /// their limits and the nominated room. Pods of an earlier batch are still pending and fit
    /// there, so a later batch does not buy their capacity again.
    pub fn snapshot_with_catalog(&self, catalog: &[InstanceType]) -> (Snapshot, Vec<String>) {
        self.build(Some(catalog))
    }

    fn build(&self, catalog: Option<&[InstanceType]>) -> (Snapshot, Vec<String>) {
        let mut snap = Snapshot::default();
        let mut warnings = Vec::new();

        let volume_claims = self.volumes.claims.state();
        let volumes = self.volumes.volumes.state();
        let classes = self.volumes.classes.state();
        let index = VolumeIndex::new(
            volume_claims.iter().map(|c| c.as_ref()),
            volumes.iter().map(|v| v.as_ref()),
            classes.iter().map(|c| c.as_ref()),
        );
        let pods = self.pods.state();
        // The claims of each pod, by key, only when some claim is ReadWriteOncePod.
        let once_pod = index.has_once_pod_claims();
        let mut claims_of: HashMap<String, &[PodClaim]> = HashMap::new();
        for pod in &pods {
            if pod.role == PodRole::Ignored {
                continue;
            }
            if let (true, false, Ok(core)) = (once_pod, pod.claims.is_empty(), &pod.core) {
                claims_of.insert(core.key(), &pod.claims);
            }
            // Bound pods too: disruption moves them in its trials, and a pod whose volume
            // only its node (or zone) can mount must not be moved elsewhere, as the plan's
            // `--consolidate` does not move it.
            if !pod.claims.is_empty() {
                if let Some(confined) = self.volumes.confine(&index, pod) {
                    snap.pods.push(confined);
                    continue;
                }
            }
            match &pod.core {
                Ok(p) => snap.pods.push(p.clone()),
                Err(e) => warnings.push(format!("Pod {}: {e}", namespaced_name(&pod.metadata))),
            }
        }
        once_pod::hold_once_pod_conflicts(&index, &mut snap.pods, |p| {
            claims_of.get(&p.key()).copied()
        });

        let kube_nodes = self.nodes.state();
        for node in &kube_nodes {
            let name = cluster_name(&node.metadata);
            match convert::node(node, &name) {
                Ok(n) => snap.nodes.push(n),
                Err(e) => warnings.push(format!("Node {name}: {e}")),
            }
        }
        let mut limits = HashMap::new();
        for csi in self.volumes.csi_nodes.state() {
            let name = cluster_name(&csi.metadata);
            match csi_nodes::volume_limits(&csi) {
                Ok(l) => {
                    limits.insert(name, l);
                }
                Err(e) => warnings.push(format!("CSINode {name}: {e}")),
            }
        }

        for ds in self.daemonsets.state() {
            let namespace = ds.metadata.namespace.as_deref().unwrap_or("default");
            let name = cluster_name(&ds.metadata);
            match convert::daemon_set(&ds, namespace, &name) {
                Ok(d) => snap.daemonsets.push(d),
                Err(e) => warnings.push(format!("DaemonSet {namespace}/{name}: {e}")),
            }
        }

        for pdb in self.pdbs.state() {
            let name = cluster_name(&pdb.metadata);
            match convert::pdb(&pdb, &name) {
                Ok(p) => snap.pdbs.push(p),
                Err(e) => warnings.push(format!(
                    "PodDisruptionBudget {}: {e}",
                    namespaced_name(&pdb.metadata)
                )),
            }
        }

        for prov in self.provisioners.state() {
            if let Some(why) = prov.not_planned() {
                warnings.push(format!(
                    "Provisioner {} is not planned with: {why}",
                    cluster_name(&prov.metadata)
                ));
                continue;
            }
            match prov.to_core() {
                Ok(p) => snap.provisioners.push(p),
                Err(e) => warnings.push(format!(
                    "Provisioner {}: {}: {}",
                    cluster_name(&prov.metadata),
                    e.field(),
                    e.reason()
                )),
            }
        }

        // The labels namespaceSelectors select (every namespace also carries
        // kubernetes.io/metadata.name, which resolving adds when a namespace is not stored).
        for ns in self.namespaces.state() {
            if let Some(name) = ns.metadata.name.clone() {
                let labels = ns.metadata.labels.clone().unwrap_or_default();
                snap.namespace_labels.insert(name, labels);
            }
        }
        // As `joiner plan` settles its snapshot: the one function both call.
        joiner_apis::cluster::settle(&mut snap, &self.node_templates(), &limits);

        if let Some(catalog) = catalog {
            // As `joiner plan` counts it: the one function both call.
            warnings.extend(joiner_apis::cluster::claimed_capacity(
                &mut snap,
                &kube_nodes,
                &self.claims(),
                catalog,
                k8s_openapi::jiff::Timestamp::now(),
            ));
        }

        // Store order is a hash order; sorting keeps the snapshot (and so the plan and its
        // messages) the same from one call to the next.
        snap.pods
            .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        snap.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        snap.daemonsets
            .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        snap.provisioners.sort_by(|a, b| a.name.cmp(&b.name));
        snap.pdbs
            .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        warnings.sort();
        (snap, warnings)
    }
}

#[cfg(test)]
mod created_tests {
    use super::*;

    #[test]
    fn a_claim_is_launched_by_one_task_at_a_time() {
        let created = CreatedClaims::default();
        let first = created.begin_launch("web-a").expect("free");
        assert!(created.is_launching("web-a"));
        assert!(
            created.begin_launch("web-a").is_none(),
            "the loop must not launch what a batch is launching"
        );
        assert!(created.begin_launch("web-b").is_some(), "another claim");
        drop(first);
        assert!(!created.is_launching("web-a"));
        assert!(created.begin_launch("web-a").is_some(), "free again");
    }

    fn claim(name: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": name}, "spec": {"provisionerName": "web"}}))
        .expect("claim")
    }

    fn names(claims: &[Arc<NodeClaim>]) -> Vec<&str> {
        claims.iter().map(|c| c.name()).collect()
    }

    /// In-flight capacity survives a NodeClaim watch outage of any length: what this replica
    /// wrote is kept while the watch fails, and forgotten only a TTL after it delivers again.
    #[tokio::test(start_paused = true)]
    async fn claims_written_survive_a_watch_outage_of_any_length() {
        let created = CreatedClaims::default();
        created.remember(claim("web-a"));
        tokio::time::advance(Duration::from_secs(30)).await;
        created.watch_failed();
        created.remember(claim("web-b"));
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(names(&created.merged(vec![])), ["web-a", "web-b"]);
        created.watch_delivered();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(names(&created.merged(vec![])), ["web-a", "web-b"]);
        // The store holds one now: that one is the store's.
        let stored = created.merged(vec![Arc::new(claim("web-a"))]);
        assert_eq!(names(&stored), ["web-a", "web-b"]);
        assert_eq!(names(&created.merged(vec![])), ["web-b"]);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(
            created.merged(vec![]).is_empty(),
            "never delivered: gone at last"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_an_outage_a_claim_never_delivered_is_forgotten_after_the_ttl() {
        let created = CreatedClaims::default();
        created.remember(claim("web-a"));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(names(&created.merged(vec![])), ["web-a"]);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(created.merged(vec![]).is_empty());
    }
}
