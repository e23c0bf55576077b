//! Which kinds the loader reads, and how each document becomes part of the snapshot.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1 as k8s;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_yaml::Value;

use super::documents::Document;
use super::error::{FieldError, Location, ManifestError};
use joiner_apis::convert::{self, volumes, PodIdentity};

use super::dump::Expansion;
use super::{workloads, Loaded};

/// The identity of one document: enough to name it in messages before it is parsed.
struct Header {
    api_version: String,
    kind: String,
    name: Option<String>,
    namespace: Option<String>,
}

impl Header {
    fn of(doc: &Document) -> Result<Header, ManifestError> {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let meta = doc.value.get("metadata");
        let kind = text(doc.value.get("kind")).filter(|k| !k.is_empty());
        let Some(kind) = kind else {
            return Err(ManifestError::NotAnObject {
                location: doc.location.clone(),
                reason: "kind: a kind is required".into(),
            });
        };
        Ok(Header {
            api_version: text(doc.value.get("apiVersion")).unwrap_or_default(),
            kind,
            name: text(meta.and_then(|m| m.get("name"))).filter(|n| !n.is_empty()),
            namespace: text(meta.and_then(|m| m.get("namespace"))).filter(|n| !n.is_empty()),
        })
    }
}

/// How an object is named in messages: `Kind namespace/name` or `Kind name`.
struct Object<'a> {
    header: &'a Header,
    location: &'a Location,
    namespaced: bool,
}

impl Object<'_> {
    fn namespace(&self) -> &str {
        self.header.namespace.as_deref().unwrap_or("default")
    }

    fn label(&self) -> String {
        let name = self.header.name.as_deref().unwrap_or("<unnamed>");
        if self.namespaced {
            format!("{} {}/{}", self.header.kind, self.namespace(), name)
        } else {
            format!("{} {}", self.header.kind, name)
        }
    }

    fn error(&self, e: FieldError) -> ManifestError {
        ManifestError::Invalid {
            location: self.location.clone(),
            object: self.label(),
            field: e.field,
            reason: e.reason,
        }
    }

    /// The object's name, checked as the API server checks names (a DNS-1123 subdomain; the
    /// namespace a DNS-1123 label).
    fn name(&self) -> Result<&str, ManifestError> {
        let name =
            self.header.name.as_deref().ok_or_else(|| {
                self.error(FieldError::new("metadata.name", "a name is required"))
            })?;
        if let Some(why) = joiner_apis::syntax::subdomain(name) {
            return Err(self.error(FieldError::new("metadata.name", why)));
        }
        if self.namespaced {
            if let Some(why) = joiner_apis::syntax::dns_label(self.namespace()) {
                return Err(self.error(FieldError::new("metadata.namespace", why)));
            }
        }
        Ok(name)
    }

    /// Deserializes into the typed object, naming the failing field path on error; a field
    /// the kind does not have is an error too (see `strict`).
    fn parse<T: DeserializeOwned + Serialize>(&self, value: Value) -> Result<T, ManifestError> {
        let document = serde_json::to_value(&value).ok();
        let mut skipped = super::strict::Skipped::default();
        let mut record = |p: serde_ignored::Path<'_>| skipped.record(&p);
        let typed: T =
            serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut record))
                .map_err(|e| {
                    let field = e.path().to_string();
                    self.error(FieldError::new(field, e.into_inner().to_string()))
                })?;
        let back = serde_json::to_value(&typed)
            .map_err(|e| self.error(FieldError::new("", format!("cannot be written back: {e}"))))?;
        // A document JSON cannot hold (a non-string key) was refused by the typed read above.
        let unknown = document.as_ref().and_then(|d| {
            super::strict::unknown_field(d, &back).or_else(|| skipped.empty_field(d))
        });
        if let Some(field) = unknown {
            return Err(self.error(FieldError::new(
                field,
                format!("unknown field (a {} has no such field)", self.header.kind),
            )));
        }
        Ok(typed)
    }
}

/// Kinds the loader reads, by (apiVersion, kind), and whether they are namespaced.
fn known(api_version: &str, kind: &str) -> Option<bool> {
    match (api_version, kind) {
        ("v1", "Pod") => Some(true),
        ("apps/v1", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => Some(true),
        ("batch/v1", "Job") => Some(true),
        ("v1", "Node" | "PersistentVolume" | "Namespace") => Some(false),
        ("v1", "PersistentVolumeClaim") => Some(true),
        ("storage.k8s.io/v1", "StorageClass" | "CSINode") => Some(false),
        ("node.k8s.io/v1", "RuntimeClass") => Some(false),
        ("policy/v1", "PodDisruptionBudget") => Some(true),
        (v, "Provisioner" | "NodeTemplate" | "NodeClaim") if v == joiner_apis::API_VERSION => {
            Some(false)
        }
        _ => None,
    }
}

/// Tracks objects already read, so the same object given twice is an error rather than twice
/// the pods or capacity.
#[derive(Default)]
pub(crate) struct Seen {
    by_key: HashMap<(String, String, String), Location>,
}

/// Adds one document to `loaded`.
pub(crate) fn read(
    doc: Document,
    seen: &mut Seen,
    loaded: &mut Loaded,
) -> Result<(), ManifestError> {
    let header = Header::of(&doc)?;
    if joiner_apis::karpenter::is_karpenter(&header.api_version, &header.kind) {
        let value = serde_json::to_value(&doc.value).map_err(|e| ManifestError::NotAnObject {
            location: doc.location.clone(),
            reason: format!("not representable as JSON: {e}"),
        })?;
        loaded.karpenter.push((doc.location, value));
        return Ok(());
    }
    let Some(namespaced) = known(&header.api_version, &header.kind) else {
        loaded.warnings.push(skip_warning(&header, &doc.location));
        return Ok(());
    };
    let obj = Object {
        header: &header,
        location: &doc.location,
        namespaced,
    };
    let name = obj.name()?.to_string();
    let namespace = obj.namespace().to_string();

    let key = (
        header.kind.clone(),
        if namespaced {
            namespace.clone()
        } else {
            String::new()
        },
        name.clone(),
    );
    if let Some(first) = seen.by_key.get(&key) {
        return Err(obj.error(FieldError::new(
            "metadata.name",
            format!("defined twice (first at {first})"),
        )));
    }
    seen.by_key.insert(key, doc.location.clone());

    let e = |err: FieldError| obj.error(err);
    match header.kind.as_str() {
        "Pod" => {
            let pod: k8s::Pod = obj.parse(doc.value)?;
            // The controller's rule: a finished pod holds nothing; an unbound pod the
            // scheduler is not trying to place is not planned for.
            let running = convert::is_bound(&pod) && convert::finished_phase(&pod).is_none();
            let skipped = if running {
                None
            } else {
                convert::not_planned(&pod)
            };
            if let Some(why) = skipped {
                loaded
                    .warnings
                    .push(format!("{}: skipped {}: {why}", doc.location, obj.label()));
                return Ok(());
            }
            let spec = pod
                .spec
                .as_ref()
                .ok_or_else(|| e(FieldError::new("spec", "a pod spec is required")))?;
            let id = PodIdentity {
                namespace,
                name,
                labels: pod.metadata.labels.clone().unwrap_or_default(),
                owner: convert::controller_owner(&pod),
            };
            let mut converted = convert::pod_spec(id, spec, "spec").map_err(e)?;
            let (disruption, bad) = convert::pod_disruption(&pod);
            converted.disruption = disruption;
            for bad in bad {
                loaded
                    .warnings
                    .push(format!("{}: {}: {bad}", doc.location, obj.label()));
            }
            let key = super::claims_key(&converted);
            if let Some(runtime) = convert::pending_runtime(spec) {
                loaded.pod_runtime.insert(key.clone(), runtime);
            }
            loaded.pod_claims.insert(key, volumes::claim_names(&pod));
            loaded.snapshot.pods.push(converted);
        }
        "PersistentVolumeClaim" => loaded.claims.push(obj.parse(doc.value)?),
        "PodDisruptionBudget" => {
            // Disruption reads them; a plan of pending pods does not.
            let p: k8s_openapi::api::policy::v1::PodDisruptionBudget = obj.parse(doc.value)?;
            let pdb = convert::pdb(&p, &name).map_err(e)?;
            loaded.snapshot.pdbs.push(pdb);
        }
        "PersistentVolume" => loaded.volumes.push(obj.parse(doc.value)?),
        "StorageClass" => loaded.classes.push(obj.parse(doc.value)?),
        "CSINode" => {
            let c: k8s_openapi::api::storage::v1::CSINode = obj.parse(doc.value)?;
            let limits = convert::csi_nodes::volume_limits(&c).map_err(e)?;
            loaded.volume_limits.insert(name.clone(), limits);
        }
        "RuntimeClass" => {
            let c: k8s_openapi::api::node::v1::RuntimeClass = obj.parse(doc.value)?;
            let admission = convert::runtime_admission(&c).map_err(e)?;
            loaded.runtime_classes.insert(name.clone(), admission);
        }
        "Namespace" => {
            // Its labels are what pod affinity namespaceSelectors select.
            let n: k8s::Namespace = obj.parse(doc.value)?;
            let labels = n.metadata.labels.unwrap_or_default();
            loaded
                .snapshot
                .namespace_labels
                .insert(name.clone(), labels);
        }
        "Deployment" => {
            let d: apps::Deployment = obj.parse(doc.value)?;
            let pods = workloads::deployment(&d, &namespace, &name).map_err(e)?;
            let pods = unless_gated(loaded, &obj, d.spec.template.spec.as_ref(), pods);
            remember_template(loaded, &pods, d.spec.template.spec.as_ref(), &[]);
            record(loaded, "Deployment", &namespace, &name, &d.metadata, pods);
        }
        "ReplicaSet" => {
            let r: apps::ReplicaSet = obj.parse(doc.value)?;
            let pods = workloads::replica_set(&r, &namespace, &name).map_err(e)?;
            let template = r.spec.template.as_ref().and_then(|t| t.spec.as_ref());
            let pods = unless_gated(loaded, &obj, template, pods);
            remember_template(loaded, &pods, template, &[]);
            record(loaded, "ReplicaSet", &namespace, &name, &r.metadata, pods);
        }
        "StatefulSet" => {
            let s: apps::StatefulSet = obj.parse(doc.value)?;
            let pods = workloads::stateful_set(&s, &namespace, &name).map_err(e)?;
            let claim_templates: Vec<volumes::PodClaim> = s
                .spec
                .volume_claim_templates
                .iter()
                .flatten()
                .filter_map(|t| {
                    let class = t.spec.as_ref().and_then(|s| s.storage_class_name.clone());
                    t.metadata
                        .name
                        .clone()
                        .map(|n| volumes::PodClaim::from_template(n, class))
                })
                .collect();
            let template = s.spec.template.spec.as_ref();
            let pods = unless_gated(loaded, &obj, template, pods);
            remember_template(loaded, &pods, template, &claim_templates);
            record(loaded, "StatefulSet", &namespace, &name, &s.metadata, pods);
        }
        "Job" => {
            let j: batch::Job = obj.parse(doc.value)?;
            let pods = workloads::job(&j, &namespace, &name).map_err(e)?;
            let template = j.spec.as_ref().and_then(|s| s.template.spec.as_ref());
            let pods = unless_gated(loaded, &obj, template, pods);
            remember_template(loaded, &pods, template, &[]);
            record(loaded, "Job", &namespace, &name, &j.metadata, pods);
        }
        "DaemonSet" => {
            let d: apps::DaemonSet = obj.parse(doc.value)?;
            let ds = convert::daemon_set(&d, &namespace, &name).map_err(e)?;
            if let Some(class) = d
                .spec
                .template
                .spec
                .as_ref()
                .and_then(convert::pending_runtime)
            {
                loaded
                    .daemon_runtime
                    .insert(format!("{namespace}/{name}"), class);
            }
            loaded.snapshot.daemonsets.push(ds);
        }
        "Node" => {
            let n: k8s::Node = obj.parse(doc.value)?;
            let node = convert::node(&n, &name).map_err(e)?;
            loaded.snapshot.nodes.push(node);
            // Kept whole: NodeClaims are matched to their Nodes by providerID once all is read.
            loaded.kube_nodes.push(std::sync::Arc::new(n));
        }
        "Provisioner" => {
            let p: joiner_apis::Provisioner = obj.parse(doc.value)?;
            add_provisioner(loaded, p, &doc.location, &obj.label()).map_err(e)?;
        }
        "NodeClaim" => {
            let c: joiner_apis::NodeClaim = obj.parse(doc.value)?;
            loaded.node_claims.push(c);
        }
        "NodeTemplate" => {
            let t: joiner_apis::NodeTemplate = obj.parse(doc.value)?;
            t.validate()
                .map_err(|err| e(FieldError::new(err.field(), err.reason())))?;
            loaded.node_templates.push(t);
        }
        other => {
            // `known` and this match list the same kinds; reaching here is a loader bug, which
            // is reported rather than panicking.
            return Err(e(FieldError::new(
                "kind",
                format!("kind {other} is recognised but not handled"),
            )));
        }
    }
    Ok(())
}

/// Adds Provisioner `p` (read from `location`, named `label` in messages) as the controller
/// would plan with it: skipped with a warning while it is being deleted or not Ready, else
/// validated with its disruption settings.
fn add_provisioner(
    loaded: &mut Loaded,
    p: joiner_apis::Provisioner,
    location: &Location,
    label: &str,
) -> Result<(), FieldError> {
    if let Some(why) = p.not_planned() {
        loaded
            .warnings
            .push(format!("{location}: skipped {label}: {why}"));
        loaded.skipped_provisioners += 1;
        return Ok(());
    }
    let core = p
        .to_core()
        .map_err(|err| FieldError::new(err.field(), err.reason()))?;
    let settings = p
        .disruption_settings()
        .map_err(|err| FieldError::new(err.field(), err.reason()))?;
    if p.spec
        .warm_pool
        .as_ref()
        .is_some_and(|w| w.reuse_on_scale_in)
    {
        loaded.warnings.push(format!(
            "{location}: {label}: spec.warmPool.reuseOnScaleIn is ignored: a node that served pods is terminated, never returned to the pool (its role could otherwise command it)"
        ));
    }
    loaded.disruption.insert(core.name.clone(), settings);
    loaded.snapshot.provisioners.push(core);
    loaded.provisioners.push(p);
    Ok(())
}

/// Reads the Karpenter objects of the input as joiner's, the way `joiner import-karpenter`
/// converts them: each note becomes a warning; a name given twice (a joiner Provisioner and a
/// NodePool of the same name) is an error.
pub(crate) fn read_karpenter(loaded: &mut Loaded) -> Result<(), ManifestError> {
    if loaded.karpenter.is_empty() {
        return Ok(());
    }
    let karpenter = std::mem::take(&mut loaded.karpenter);
    let values: Vec<serde_json::Value> = karpenter.iter().map(|(_, v)| v.clone()).collect();
    // Where the Karpenter object `Kind name` (or, for a converted object, of one of `kinds`
    // and that name) was read; the first Karpenter document when none matches.
    let find = |kinds: &[&str], name: &str| -> Location {
        karpenter
            .iter()
            .find(|(_, v)| {
                v["metadata"]["name"].as_str() == Some(name)
                    && kinds.contains(&v["kind"].as_str().unwrap_or_default())
            })
            .or(karpenter.first())
            .map(|(l, _)| l.clone())
            .unwrap_or_else(|| Location {
                path: Default::default(),
                document: 0,
                item: None,
            })
    };
    let location_of = |object: &str| {
        let (kind, name) = object.split_once(' ').unwrap_or((object, ""));
        find(&[kind], name)
    };
    let node_class_kinds = ["AWSNodeTemplate", "EC2NodeClass"];
    let pool_kinds = ["Provisioner", "NodePool"];
    let converted =
        joiner_apis::karpenter::convert(&values).map_err(|err| ManifestError::Invalid {
            location: location_of(&err.object),
            object: err.object.clone(),
            field: err.field.clone(),
            reason: err.reason.clone(),
        })?;
    loaded.warnings.push(format!(
        "read {} Karpenter object(s) as joiner's Provisioners and NodeTemplates (`joiner import-karpenter` writes them out)",
        karpenter.len()
    ));
    loaded.skipped_provisioners += converted.skipped.len();
    for note in &converted.notes {
        loaded
            .warnings
            .push(format!("{}: {note}", location_of(&note.object)));
    }
    for t in converted.node_templates {
        let label = format!("NodeTemplate {}", t.name());
        let location = find(&node_class_kinds, t.name());
        if loaded.node_templates.iter().any(|n| n.name() == t.name()) {
            return Err(ManifestError::Invalid {
                location,
                object: label,
                field: "metadata.name".into(),
                reason: "defined twice (as a NodeTemplate and as a Karpenter node class)".into(),
            });
        }
        t.validate().map_err(|err| ManifestError::Invalid {
            location: location.clone(),
            object: label.clone(),
            field: err.field().to_string(),
            reason: err.reason().to_string(),
        })?;
        loaded.node_templates.push(t);
    }
    for p in converted.provisioners {
        let label = format!("Provisioner {}", p.name());
        let location = find(&pool_kinds, p.name());
        if loaded.provisioners.iter().any(|q| q.name() == p.name()) {
            return Err(ManifestError::Invalid {
                location,
                object: label,
                field: "metadata.name".into(),
                reason:
                    "defined twice (as a Provisioner and as a Karpenter NodePool or Provisioner)"
                        .into(),
            });
        }
        add_provisioner(loaded, p, &location, &label).map_err(|err| ManifestError::Invalid {
            location: location.clone(),
            object: label.clone(),
            field: err.field,
            reason: err.reason,
        })?;
    }
    Ok(())
}

/// A workload's template pods, or none with a warning when its pod template has scheduling
/// gates: the kube-scheduler does not consider such pods, and the controller would not plan
/// for them (`convert::not_planned`).
fn unless_gated(
    loaded: &mut Loaded,
    obj: &Object,
    template: Option<&k8s::PodSpec>,
    pods: Vec<joiner_core::Pod>,
) -> Vec<joiner_core::Pod> {
    let gates: Vec<&str> = template
        .and_then(|t| t.scheduling_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|g| g.name.as_str())
        .collect();
    if gates.is_empty() {
        return pods;
    }
    loaded.warnings.push(format!(
        "{}: skipped the {} pod(s) of {}: its pod template has scheduling gates ({}); the \
         kube-scheduler considers them once they are removed",
        obj.location,
        pods.len(),
        obj.label(),
        gates.join(", ")
    ));
    Vec::new()
}

/// Remembers what each of a workload's `pods` needs once the whole input is read: the claims
/// it uses (its template's volumes, and a StatefulSet's claim templates `<template>-<pod>`),
/// and the RuntimeClass its template names, not admitted yet.
fn remember_template(
    loaded: &mut Loaded,
    pods: &[joiner_core::Pod],
    template: Option<&k8s::PodSpec>,
    claim_templates: &[volumes::PodClaim],
) {
    let Some(spec) = template else { return };
    let runtime = convert::pending_runtime(spec);
    for pod in pods {
        let claims = volumes::spec_claim_names(&pod.name, spec, claim_templates);
        if !claims.is_empty() {
            loaded.pod_claims.insert(super::claims_key(pod), claims);
        }
        if let Some(runtime) = &runtime {
            loaded
                .pod_runtime
                .insert(super::claims_key(pod), runtime.clone());
        }
    }
}

/// Adds a workload's template pods, remembering where they are so a dump that also holds the
/// real pods does not count them twice.
fn record(
    loaded: &mut Loaded,
    kind: &str,
    namespace: &str,
    name: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pods: Vec<joiner_core::Pod>,
) {
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| joiner_core::Owner {
            kind: r.kind.clone(),
            name: r.name.clone(),
        });
    loaded.expansions.push(Expansion {
        kind: kind.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        owner,
        first: loaded.snapshot.pods.len(),
        count: pods.len(),
    });
    loaded.snapshot.pods.extend(pods);
}

fn skip_warning(h: &Header, location: &Location) -> String {
    let name = match (&h.namespace, &h.name) {
        (Some(ns), Some(n)) => format!(" {ns}/{n}"),
        (None, Some(n)) => format!(" {n}"),
        _ => String::new(),
    };
    let api = if h.api_version.is_empty() {
        "no apiVersion".to_string()
    } else {
        h.api_version.clone()
    };
    let hint = if h.api_version.starts_with("karpenter.") {
        "a Karpenter object: convert it with `joiner import-karpenter`"
    } else if known_kind(&h.kind) {
        "unsupported apiVersion for this kind"
    } else {
        "kind not used for planning"
    };
    format!("{location}: skipped {}{name} ({api}): {hint}", h.kind)
}

fn known_kind(kind: &str) -> bool {
    matches!(
        kind,
        "Pod"
            | "Deployment"
            | "ReplicaSet"
            | "StatefulSet"
            | "DaemonSet"
            | "Job"
            | "Node"
            | "PodDisruptionBudget"
            | "RuntimeClass"
            | "Namespace"
            | "Provisioner"
            | "NodeTemplate"
            | "NodeClaim"
    )
}
