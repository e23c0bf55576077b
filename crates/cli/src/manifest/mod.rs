//! The manifest loader: YAML files in, a scheduling snapshot out.
//!
//! `joiner plan` and the tests describe a cluster with ordinary manifests (workloads, nodes,
//! Provisioners, NodeTemplates), so nobody has to learn a fixture format. Loading is strict where
//! a mistake would silently change the plan (bad quantities, operators, unsupported fields are
//! errors naming file, document, object and field) and lenient where it would not (kinds the
//! planner does not read are skipped with a warning).

mod documents;
mod dump;
mod error;
mod files;
mod kinds;
mod strict;
mod workloads;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use error::ManifestError;

/// What a set of manifests describes.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    /// Pods (workloads expanded into their replicas), nodes, DaemonSets and Provisioners.
    pub snapshot: joiner_core::Snapshot,
    /// Each Provisioner's disruption settings, by name (`joiner plan --consolidate`).
    pub disruption: std::collections::BTreeMap<String, joiner_core::disruption::DisruptionSettings>,
    /// NodeTemplates, validated; the simulation does not read them, the launch path does.
    pub node_templates: Vec<joiner_apis::NodeTemplate>,
    /// The Provisioners planned with, as written (drift compares claims with them).
    pub provisioners: Vec<joiner_apis::Provisioner>,
    /// NodeClaims (`kubectl get nodeclaims -o yaml`): the dry run reads drift from them.
    pub node_claims: Vec<joiner_apis::NodeClaim>,
    /// Things skipped on the way (unknown kinds, finished pods), for the user to see.
    pub warnings: Vec<String>,
    /// Provisioners skipped because they are being deleted or not Ready: with some of them
    /// and none usable, no default stands in for them.
    pub skipped_provisioners: usize,
    /// Where each workload's template pods are in `snapshot.pods`, until [`dump::settle`]
    /// has reconciled them with the pods the input holds.
    pub(crate) expansions: Vec<dump::Expansion>,
    /// The Nodes of the input as read, to match NodeClaims to (`spec.providerID`, name).
    pub kube_nodes: Vec<std::sync::Arc<k8s_openapi::api::core::v1::Node>>,
    /// RuntimeClasses of the input by name: what admitting a pod that names one adds.
    pub(crate) runtime_classes:
        std::collections::HashMap<String, joiner_apis::convert::RuntimeAdmission>,
    /// The RuntimeClass each pod not admitted yet names, by [`claims_key`].
    pub(crate) pod_runtime: std::collections::HashMap<String, joiner_apis::convert::PendingRuntime>,
    /// The RuntimeClass each DaemonSet's template names, not admitted yet, by `ns/name`.
    pub(crate) daemon_runtime:
        std::collections::HashMap<String, joiner_apis::convert::PendingRuntime>,
    /// The claims each pod's volumes use, by [`claims_key`], until their zones are applied.
    pub(crate) pod_claims:
        std::collections::HashMap<String, Vec<joiner_apis::convert::volumes::PodClaim>>,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses of the input.
    pub(crate) claims: Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    /// See `claims`.
    pub(crate) volumes: Vec<k8s_openapi::api::core::v1::PersistentVolume>,
    /// See `claims`.
    pub(crate) classes: Vec<k8s_openapi::api::storage::v1::StorageClass>,
    /// The attach caps of each CSINode of the input, by node name.
    pub(crate) volume_limits:
        std::collections::HashMap<String, std::collections::BTreeMap<String, i64>>,
    /// Karpenter objects (NodePool, EC2NodeClass, v1alpha5 Provisioner, AWSNodeTemplate), read
    /// as joiner's once every document is in (`joiner_apis::karpenter`).
    pub(crate) karpenter: Vec<(error::Location, serde_json::Value)>,
}

/// Loads manifests from files and folders (every `*.yaml`/`*.yml` below a folder, sorted by
/// path). Multi-document files and `List` objects are read item by item; the first error stops
/// the load, because a plan from half the input would mislead.
pub fn load(paths: &[PathBuf]) -> Result<Loaded, ManifestError> {
    let mut loaded = Loaded::default();
    let mut seen = kinds::Seen::default();
    let mut documents = 0;
    for file in files::collect(paths)? {
        let text = files::read(&file)?;
        documents += read_text(&file, &text, &mut seen, &mut loaded)?;
    }
    if documents == 0 {
        return Err(ManifestError::Empty {
            paths: paths.to_vec(),
        });
    }
    kinds::read_karpenter(&mut loaded)?;
    finish(&mut loaded);
    Ok(loaded)
}

/// The Karpenter objects in `paths` (as JSON, with where each was read), and a note per other
/// document skipped: the input of `joiner import-karpenter`.
pub fn karpenter_objects(
    paths: &[PathBuf],
) -> Result<(Vec<serde_json::Value>, Vec<String>), ManifestError> {
    let mut objects = Vec::new();
    let mut skipped = Vec::new();
    let mut documents = 0;
    for file in files::collect(paths)? {
        let text = files::read(&file)?;
        for doc in documents::split(&file, &text)? {
            documents += 1;
            let text = |k: &str| {
                doc.value
                    .get(k)
                    .and_then(serde_yaml::Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let (api_version, kind) = (text("apiVersion"), text("kind"));
            if !joiner_apis::karpenter::is_karpenter(&api_version, &kind) {
                skipped.push(format!(
                    "{}: skipped {api_version} {kind}: not a Karpenter kind joiner converts",
                    doc.location
                ));
                continue;
            }
            let value =
                serde_json::to_value(&doc.value).map_err(|e| ManifestError::NotAnObject {
                    location: doc.location.clone(),
                    reason: format!("not representable as JSON: {e}"),
                })?;
            objects.push(value);
        }
    }
    if documents == 0 {
        return Err(ManifestError::Empty {
            paths: paths.to_vec(),
        });
    }
    Ok((objects, skipped))
}

/// What follows reading every document: workloads reconciled with their dumped pods,
/// DaemonSets charged what their pods request, Provisioners narrowed to their subnets' zones,
/// pods confined to their volumes' zones, nodes given their CSINodes' attach caps, and pods
/// bound to absent nodes named.
fn finish(loaded: &mut Loaded) {
    admit_runtime_classes(loaded);
    dump::settle(loaded);
    skip_provisioners_without_their_template(loaded);
    apply_volume_zones(loaded);
    warn_of_missing_nodes(loaded);
    // As the controller settles its snapshot: the one function both call.
    joiner_apis::cluster::settle(
        &mut loaded.snapshot,
        &loaded.node_templates,
        &loaded.volume_limits,
    );
}

/// Names, in one warning, the nodes pods are bound to that the input does not hold: those pods
/// count on no node, so the plan cannot see what they use (a dump without its nodes).
fn warn_of_missing_nodes(loaded: &mut Loaded) {
    let known: std::collections::HashSet<&str> = loaded
        .snapshot
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    let mut missing: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for pod in &loaded.snapshot.pods {
        if let Some(node) = pod.node_name.as_deref().filter(|n| !known.contains(n)) {
            *missing.entry(node).or_default() += 1;
        }
    }
    if missing.is_empty() {
        return;
    }
    let pods: usize = missing.values().sum();
    let list: Vec<String> = missing
        .iter()
        .map(|(node, n)| format!("{node} ({n} pod{})", if *n == 1 { "" } else { "s" }))
        .collect();
    let warning = format!(
        "{pods} pod{} bound to nodes the input does not describe, so what they use counts on \
         no node: {}",
        if pods == 1 { " is" } else { "s are" },
        list.join(", ")
    );
    loaded.warnings.push(warning);
}

/// Confines each pod to the zones its volumes are in, and holds those a volume keeps from
/// being scheduled (see `joiner_apis::convert::volumes`; a second user of a ReadWriteOncePod
/// claim, `convert::once_pod`), from the claims, volumes and classes
/// the input holds. The input is partial: a claim, volume or class it lacks is named in one
/// warning and confines nothing.
fn apply_volume_zones(loaded: &mut Loaded) {
    use joiner_apis::convert::volumes::{Source, VolumeIndex};
    let index = VolumeIndex::new(&loaded.claims, &loaded.volumes, &loaded.classes)
        .with_source(Source::Partial);
    let mut unknown = std::collections::BTreeSet::new();
    for pod in &mut loaded.snapshot.pods {
        if let Some(claims) = loaded.pod_claims.get(&claims_key(pod)) {
            let volumes = index.pod_volumes(&pod.namespace, claims);
            unknown.extend(volumes.unknown.iter().cloned());
            volumes.apply_to(pod);
        }
    }
    joiner_apis::convert::once_pod::hold_once_pod_conflicts(
        &index,
        &mut loaded.snapshot.pods,
        |p| loaded.pod_claims.get(&claims_key(p)).map(Vec::as_slice),
    );
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.into_iter().collect();
        loaded.warnings.push(format!(
            "pods use volumes the input does not describe, so their zones are not known and \
             confine nothing: {}",
            list.join(", ")
        ));
    }
}

/// The key a pod's claims are remembered under: its owner's kind as well as its name, since a
/// Deployment's template pods and a StatefulSet's may share names.
pub(crate) fn claims_key(pod: &joiner_core::Pod) -> String {
    let kind = pod.owner.as_ref().map_or("Pod", |o| o.kind.as_str());
    format!("{kind}:{}", pod.key())
}

/// Admits the pods and DaemonSet templates that name a RuntimeClass, as the API server's
/// RuntimeClass admission would have: its overhead, node selector and tolerations. A class
/// the input lacks is named in one warning and changes nothing. Pods (and DaemonSets) whose
/// nodeSelector conflicts with their class's are refused by admission, so they never exist:
/// they are left out, with a warning per workload.
fn admit_runtime_classes(loaded: &mut Loaded) {
    if loaded.pod_runtime.is_empty() && loaded.daemon_runtime.is_empty() {
        return;
    }
    let mut unknown = std::collections::BTreeSet::new();
    // Workloads (or pods) whose pods admission refuses: the reason, and how many pods.
    let mut refused: std::collections::BTreeMap<String, (String, usize)> = Default::default();
    let classes = &loaded.runtime_classes;
    // Admits `pod`; false when admission refuses it.
    let mut admit =
        |runtime: &joiner_apis::convert::PendingRuntime, pod: &mut joiner_core::Pod| match classes
            .get(&runtime.class)
        {
            Some(a) => match a.conflict(runtime) {
                Some(why) => Err(why),
                None => {
                    a.apply_to(pod);
                    Ok(())
                }
            },
            None => {
                unknown.insert(runtime.class.clone());
                Ok(())
            }
        };
    let mut pods = std::mem::take(&mut loaded.snapshot.pods);
    pods.retain_mut(|pod| {
        let Some(runtime) = loaded.pod_runtime.get(&claims_key(pod)) else {
            return true;
        };
        match admit(runtime, pod) {
            Ok(()) => true,
            Err(why) => {
                let owner = pod.owner.as_ref().map_or_else(
                    || format!("Pod {}", pod.key()),
                    |o| format!("{} {}/{}", o.kind, pod.namespace, o.name),
                );
                refused.entry(owner).or_insert((why, 0)).1 += 1;
                false
            }
        }
    });
    loaded.snapshot.pods = pods;
    let mut daemonsets = std::mem::take(&mut loaded.snapshot.daemonsets);
    daemonsets.retain_mut(|ds| {
        let key = format!("{}/{}", ds.namespace, ds.name);
        let Some(runtime) = loaded.daemon_runtime.get(&key) else {
            return true;
        };
        match admit(runtime, &mut ds.pod) {
            Ok(()) => true,
            Err(why) => {
                refused.insert(format!("DaemonSet {key}"), (why, 0));
                false
            }
        }
    });
    loaded.snapshot.daemonsets = daemonsets;
    for (owner, (why, pods)) in refused {
        let count = match pods {
            0 => String::new(),
            1 => " (1 pod)".to_string(),
            n => format!(" ({n} pods)"),
        };
        loaded
            .warnings
            .push(format!("{owner}{count} is not planned: {why}"));
    }
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.into_iter().collect();
        loaded.warnings.push(format!(
            "pods name RuntimeClasses the input does not describe, so their overhead is not \
             known: {}",
            list.join(", ")
        ));
    }
}

/// When the input holds NodeTemplates, a Provisioner whose `providerRef` names one it does not
/// hold is skipped with a warning, as the controller does (its Ready condition is False,
/// `NodeTemplateNotFound`: nothing can be launched without the template). Input with no
/// NodeTemplate at all (a plan of the pods and Provisioners only) is planned as it is.
fn skip_provisioners_without_their_template(loaded: &mut Loaded) {
    if loaded.node_templates.is_empty() {
        return;
    }
    let missing: Vec<(String, String)> = loaded
        .provisioners
        .iter()
        .filter_map(|p| {
            let wanted = &p.spec.provider_ref.as_ref()?.name;
            (!loaded.node_templates.iter().any(|t| t.name() == wanted))
                .then(|| (p.name().to_string(), wanted.clone()))
        })
        .collect();
    for (name, template) in missing {
        loaded.warnings.push(format!(
            "skipped Provisioner {name}: its providerRef names NodeTemplate {template}, which \
             the input does not hold (the controller marks it not Ready: NodeTemplateNotFound)"
        ));
        loaded.skipped_provisioners += 1;
        loaded.provisioners.retain(|p| p.name() != name);
        loaded.snapshot.provisioners.retain(|p| p.name != name);
        loaded.disruption.remove(&name);
    }
}

/// Loads one file's text as if it had been read from `path`: the unit tests' entry point.
#[cfg(test)]
pub(crate) fn load_text(path: &str, text: &str) -> Result<Loaded, ManifestError> {
    let mut loaded = Loaded::default();
    read_text(
        Path::new(path),
        text,
        &mut kinds::Seen::default(),
        &mut loaded,
    )?;
    kinds::read_karpenter(&mut loaded)?;
    finish(&mut loaded);
    Ok(loaded)
}

/// Reads one file's documents into `loaded`; how many there were.
fn read_text(
    path: &Path,
    text: &str,
    seen: &mut kinds::Seen,
    loaded: &mut Loaded,
) -> Result<usize, ManifestError> {
    let docs = documents::split(path, text)?;
    let count = docs.len();
    for doc in docs {
        kinds::read(doc, seen, loaded)?;
    }
    Ok(count)
}
