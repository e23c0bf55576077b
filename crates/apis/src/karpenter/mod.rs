//! Karpenter manifests into joiner's: `Provisioner` + `AWSNodeTemplate` (karpenter.sh/v1alpha5,
//! karpenter.k8s.aws/v1alpha1), and `NodePool` + `EC2NodeClass` (v1beta1 and v1).
//!
//! Every field of the input is either converted or reported: each object is read through
//! [`Fields`], which records the keys it consumed, and whatever is left unread at the end is a
//! [`Note`] (`NodePool default: spec.template.spec.terminationGracePeriod: no joiner
//! equivalent; not converted`). Notes also say where a conversion changes behaviour (a
//! default that differs). Shared by `joiner import-karpenter` and `joiner plan`, so both read a
//! Karpenter manifest the same way.

mod fields;
mod nodeclass;
mod nodepool;
mod v1alpha5;

use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

use crate::{NodeTemplate, Provisioner};
pub use fields::Fields;

/// Karpenter kinds this module reads, by (apiVersion, kind).
pub fn is_karpenter(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("karpenter.sh/v1alpha5", "Provisioner")
            | ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate")
            | ("karpenter.sh/v1beta1" | "karpenter.sh/v1", "NodePool")
            | (
                "karpenter.k8s.aws/v1beta1" | "karpenter.k8s.aws/v1",
                "EC2NodeClass"
            )
    )
}

/// Something of the input that was not converted as it was, for the user to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// `Kind name` of the Karpenter object.
    pub object: String,
    /// The field path (`spec.template.spec.expireAfter`).
    pub field: String,
    /// What happened to it.
    pub message: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.object, self.field, self.message)
    }
}

/// A Karpenter object that cannot be read (a field of the wrong type, a required field
/// missing), naming the object and field.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{object}: {field}: {reason}")]
pub struct KarpenterError {
    /// `Kind name`.
    pub object: String,
    /// The field path.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// The joiner objects made from a set of Karpenter objects, and the notes.
#[derive(Clone, Debug, Default)]
pub struct Converted {
    /// One per Provisioner or NodePool.
    pub provisioners: Vec<Provisioner>,
    /// One per AWSNodeTemplate or EC2NodeClass.
    pub node_templates: Vec<NodeTemplate>,
    /// What was not converted, or changed meaning.
    pub notes: Vec<Note>,
    /// NodePools (and Provisioners) left out whole, by name: they launch nodes joiner cannot
    /// (Windows), so a plan must not stand a default Provisioner in for them.
    pub skipped: Vec<String>,
}

/// Why joiner leaves the node class `object` out, with the field that says so: it selects
/// Windows AMIs (an alias `windows2022@latest`, or `amiFamily: Windows2019|Windows2022`),
/// and joiner bootstraps Linux nodes only.
fn unsupported_class(object: &Value) -> Option<(String, String)> {
    let spec = &object["spec"];
    if let Some(f) = spec["amiFamily"]
        .as_str()
        .filter(|f| f.starts_with("Windows"))
    {
        return Some(("spec.amiFamily".into(), f.to_string()));
    }
    spec["amiSelectorTerms"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .find_map(|(i, t)| {
            let alias = t["alias"].as_str()?;
            alias.starts_with("windows").then(|| {
                (
                    format!("spec.amiSelectorTerms[{i}].alias"),
                    alias.to_string(),
                )
            })
        })
}

/// Why a converted node class names no image joiner could launch: a `Custom` family (an AMI
/// family joiner does not bootstrap, such as Ubuntu, or none) without an `amiSelector`, which
/// joiner's own loader refuses. Such a class is left out rather than emitted.
fn selects_no_image(t: &NodeTemplate) -> Option<LeftOut> {
    (t.spec.ami_family == Some(crate::AmiFamily::Custom) && t.spec.ami_selector.is_empty()).then(
        || LeftOut {
            field: "spec.amiFamily".into(),
            why: "amiFamily Custom without an amiSelector: joiner has no AMI to launch (a Custom \
                  family needs amiSelectorTerms naming the AMI, and user data that joins the node)"
                .into(),
            selects: "names no AMI joiner can launch (amiFamily Custom without an amiSelector)"
                .into(),
        },
    )
}

/// Why a converted node class selects no subnets or no security groups joiner can find: every
/// term of that kind was one joiner has no equivalent for (a security group `name`), so the
/// selector came out empty, which joiner's own loader and the CRD refuse. Such a class is left
/// out rather than emitted.
fn selects_no_network(t: &NodeTemplate) -> Option<LeftOut> {
    let (field, what) = if t.spec.subnet_selector.is_empty() {
        ("spec.subnetSelectorTerms", "subnets")
    } else if t.spec.security_group_selector.is_empty() {
        ("spec.securityGroupSelectorTerms", "security groups")
    } else {
        return None;
    };
    Some(LeftOut {
        field: field.into(),
        why: format!(
            "no term joiner can select {what} by (tags or IDs; a name term has no joiner equivalent): joiner would launch into no {what}"
        ),
        selects: format!("selects no {what} joiner can find"),
    })
}

/// Why a converted node class cannot be emitted, if it cannot.
fn cannot_run(t: &NodeTemplate) -> Option<LeftOut> {
    selects_no_image(t).or_else(|| selects_no_network(t))
}

/// Why a node class is left out: the field that says so, the note's words, and what the
/// class selects (the notes on the Provisioners or NodePools using it say it).
struct LeftOut {
    field: String,
    why: String,
    selects: String,
}

/// Leaves the node class `kind name` out with a note, and marks it so that the Provisioners
/// or NodePools using it are skipped.
fn leave_out(
    out: &mut Converted,
    left_out: &mut BTreeMap<(String, String), String>,
    kind: &str,
    name: String,
    reason: LeftOut,
) {
    let users = if kind == "EC2NodeClass" {
        "NodePools"
    } else {
        "Provisioners"
    };
    out.notes.push(Note {
        object: format!("{kind} {name}"),
        field: reason.field,
        message: format!(
            "{}; not converted, and the {users} using it are skipped",
            reason.why
        ),
    });
    left_out.insert((kind.to_string(), name), reason.selects);
}

/// Converts `objects` (each a whole Karpenter manifest as JSON, of a kind [`is_karpenter`]
/// accepts; others are refused). Node classes are read first: a v1 EC2NodeClass's kubelet
/// settings go to the Provisioners that use it.
pub fn convert(objects: &[Value]) -> Result<Converted, KarpenterError> {
    let mut out = Converted::default();
    let mut kubelets: BTreeMap<String, Value> = BTreeMap::new();
    let header = |v: &Value| {
        (
            v["apiVersion"].as_str().unwrap_or_default().to_string(),
            v["kind"].as_str().unwrap_or_default().to_string(),
        )
    };
    let name_of = |v: &Value| {
        v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // Node classes left out (Windows, or no image joiner can launch), by (kind, name): what
    // they select, in words.
    let mut left_out: BTreeMap<(String, String), String> = BTreeMap::new();
    for object in objects {
        let (api_version, kind) = header(object);
        match (api_version.as_str(), kind.as_str()) {
            ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") | (_, "EC2NodeClass")
                if let Some((field, value)) = unsupported_class(object) =>
            {
                let reason = LeftOut {
                    field,
                    why: format!("{value}: joiner launches Linux nodes only"),
                    selects: format!("selects {value} AMIs, which joiner does not launch"),
                };
                leave_out(&mut out, &mut left_out, &kind, name_of(object), reason);
            }
            ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => {
                let t = v1alpha5::node_template(object, &mut out.notes)?;
                if let Some(why) = cannot_run(&t) {
                    leave_out(&mut out, &mut left_out, &kind, name_of(object), why);
                    continue;
                }
                out.node_templates.push(t);
            }
            (_, "EC2NodeClass") => {
                let (t, kubelet) = nodeclass::node_class(object, &api_version, &mut out.notes)?;
                if let Some(why) = cannot_run(&t) {
                    leave_out(&mut out, &mut left_out, &kind, name_of(object), why);
                    continue;
                }
                if let Some(k) = kubelet {
                    kubelets.insert(t.metadata.name.clone().unwrap_or_default(), k);
                }
                out.node_templates.push(t);
            }
            _ => {}
        }
    }
    for object in objects {
        let (api_version, kind) = header(object);
        match (api_version.as_str(), kind.as_str()) {
            ("karpenter.sh/v1alpha5", "Provisioner") => {
                if skip_user(
                    object,
                    "AWSNodeTemplate",
                    "spec.providerRef.name",
                    &left_out,
                    &mut out,
                ) {
                    continue;
                }
                out.provisioners
                    .push(v1alpha5::provisioner(object, &mut out.notes)?);
            }
            (_, "NodePool") => {
                let field = "spec.template.spec.nodeClassRef.name";
                if skip_user(object, "EC2NodeClass", field, &left_out, &mut out) {
                    continue;
                }
                out.provisioners.push(nodepool::node_pool(
                    object,
                    &api_version,
                    &kubelets,
                    &mut out.notes,
                )?);
            }
            (v, k) if !is_karpenter(v, k) => {
                return Err(KarpenterError {
                    object: format!(
                        "{k} {}",
                        object["metadata"]["name"].as_str().unwrap_or("<unnamed>")
                    ),
                    field: "apiVersion".into(),
                    reason: format!("{v} {k} is not a Karpenter kind joiner converts"),
                })
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Leaves out the Provisioner or NodePool `object` when the `class_kind` its `field` names
/// was left out (see [`unsupported_class`]), with a note; true when it did.
fn skip_user(
    object: &Value,
    class_kind: &str,
    field: &str,
    left_out: &BTreeMap<(String, String), String>,
    out: &mut Converted,
) -> bool {
    let class = field
        .split('.')
        .fold(object, |v, key| &v[key])
        .as_str()
        .unwrap_or_default();
    let Some(value) = left_out.get(&(class_kind.to_string(), class.to_string())) else {
        return false;
    };
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    out.notes.push(Note {
        object: format!("{} {name}", object["kind"].as_str().unwrap_or_default()),
        field: field.into(),
        message: format!("{class_kind} {class} {value}; skipped"),
    });
    out.skipped.push(name);
    true
}

/// Reads the typed joiner object from `value`, built by a converter: a failure here is a
/// converter bug, reported with the object's name.
fn typed<T: serde::de::DeserializeOwned>(object: &str, value: Value) -> Result<T, KarpenterError> {
    serde_json::from_value(value).map_err(|e| KarpenterError {
        object: object.to_string(),
        field: String::new(),
        reason: format!("converted object does not read back: {e}"),
    })
}

/// The kubelet settings joiner has, by their (shared) Karpenter names.
const KUBELET_FIELDS: &[&str] = &[
    "clusterDNS",
    "maxPods",
    "podsPerCore",
    "systemReserved",
    "kubeReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cpuCFSQuota",
];

/// The kubelet settings of `kubelet` joiner has; the rest are noted.
fn kubelet(kubelet: &Fields, notes: &mut Vec<Note>) -> Value {
    let mut out = serde_json::Map::new();
    for key in KUBELET_FIELDS {
        if let Some(v) = kubelet.take(key) {
            out.insert((*key).to_string(), v.clone());
        }
    }
    kubelet.finish(notes);
    Value::Object(out)
}

#[cfg(test)]
mod tests;
