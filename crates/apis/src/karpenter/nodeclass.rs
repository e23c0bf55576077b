//! Karpenter `EC2NodeClass` (v1beta1 and v1) into a joiner NodeTemplate.
//!
//! Selector terms are ORed lists in Karpenter and one AND of tags (with `aws-ids`) in joiner:
//! terms that only name IDs become one `aws-ids` list; one tag term converts as it is; further
//! tag terms cannot be expressed and are noted. A v1 AMI alias (`al2023@latest`) gives the AMI
//! family. Kubelet settings of a v1 EC2NodeClass are returned for the Provisioners that use it.

use serde_json::{json, Map, Value};

use super::v1alpha5::metadata;
use super::{typed, Fields, KarpenterError, Note};
use crate::NodeTemplate;

/// The AMI family `family` names (or `default` when absent), noting what changes.
pub(super) fn family(
    spec: &Fields,
    family: Option<&str>,
    default: &str,
    notes: &mut Vec<Note>,
) -> String {
    match family {
        Some(f @ ("AL2" | "AL2023" | "Bottlerocket" | "Custom")) => f.to_string(),
        Some(other) => {
            notes.push(spec.note(
                "amiFamily",
                format!("joiner does not bootstrap {other}: converted as Custom, so the AMI (amiSelector) and userData must join the node themselves"),
            ));
            "Custom".into()
        }
        None => {
            if default == "AL2" {
                notes.push(spec.note(
                    "amiFamily",
                    "unset: Karpenter's default for this API version was AL2 (joiner's is AL2023); kept AL2, whose EKS AMIs end with Kubernetes 1.32 — move to AL2023 (nodeadm user data) before upgrading",
                ));
            }
            default.to_string()
        }
    }
}

/// Notes that an unset `metadataOptions` meant a hop limit of 2 in Karpenter before v1 (pods
/// could reach the instance metadata service) and means 1 in joiner, as in Karpenter v1.
pub(super) fn metadata_default(spec: &Fields, api_version: &str, notes: &mut Vec<Note>) {
    if api_version.ends_with("/v1") || spec.take("metadataOptions").is_some() {
        return;
    }
    notes.push(spec.note(
        "metadataOptions",
        "unset: Karpenter's default for this API version was httpPutResponseHopLimit: 2 (pods reach the instance metadata service); joiner's is 1 (only the node, as in Karpenter v1) — set spec.metadataOptions.httpPutResponseHopLimit: 2 if pods rely on the node's role",
    ));
}

/// A selector from Karpenter selector terms at `key` (`subnetSelectorTerms`, ...).
fn selector(
    spec: &Fields,
    key: &str,
    notes: &mut Vec<Note>,
) -> Result<Option<Value>, KarpenterError> {
    let terms = spec.array(key)?;
    let mut ids: Vec<String> = Vec::new();
    let mut tags: Option<Value> = None;
    for (i, t) in terms.iter().enumerate() {
        let term = Fields::new(
            Some(t),
            spec.object(),
            &spec.path_of(&format!("{key}[{i}]")),
        )?;
        if let Some(id) = term.string("id")? {
            ids.push(id.to_string());
        }
        if let Some(t) = term.take("tags") {
            if tags.is_none() {
                tags = Some(t.clone());
            } else {
                notes.push(term.note(
                    "tags",
                    "joiner selects with one set of tags (all must match); this alternative term is not converted",
                ));
            }
        }
        term.finish(notes);
    }
    if terms.is_empty() {
        return Ok(None);
    }
    let mut out = match tags {
        Some(Value::Object(m)) => m,
        Some(_) => return Err(spec.error(key, "tags: expected a map")),
        None => Map::new(),
    };
    if !ids.is_empty() {
        out.insert("aws-ids".into(), json!(ids.join(",")));
    }
    Ok(Some(Value::Object(out)))
}

/// AMI selection: a v1 alias gives the family; IDs, tags, name and owner give `amiSelector`.
fn amis(
    spec: &Fields,
    notes: &mut Vec<Note>,
) -> Result<(Option<String>, Option<Value>), KarpenterError> {
    let mut family = None;
    let mut ids = Vec::new();
    let mut sel = Map::new();
    for (i, t) in spec.array("amiSelectorTerms")?.iter().enumerate() {
        let term = Fields::new(
            Some(t),
            spec.object(),
            &spec.path_of(&format!("amiSelectorTerms[{i}]")),
        )?;
        if let Some(alias) = term.string("alias")? {
            let (name, version) = alias.split_once('@').unwrap_or((alias, "latest"));
            family = Some(match name {
                "al2" => "AL2".to_string(),
                "al2023" => "AL2023".to_string(),
                "bottlerocket" => "Bottlerocket".to_string(),
                other => {
                    notes.push(term.note(
                        "alias",
                        format!("joiner does not bootstrap {other}; converted as Custom"),
                    ));
                    "Custom".to_string()
                }
            });
            if version != "latest" {
                notes.push(term.note(
                    "alias",
                    format!("joiner resolves the family's latest EKS AMI; the pinned version {version} is not kept (pin with an AMI ID in amiSelector instead)"),
                ));
            }
        }
        if let Some(id) = term.string("id")? {
            ids.push(id.to_string());
        }
        let any_selector = !sel.is_empty();
        let mut add = |k: &str, v: Value| {
            if any_selector {
                notes.push(term.note(k, "joiner selects AMIs with one set of criteria; this alternative term is not converted"));
            } else {
                sel.insert(k.to_string(), v);
            }
        };
        if let Some(Value::Object(tags)) = term.take("tags") {
            for (k, v) in tags.clone() {
                add(&k, v);
            }
        }
        if let Some(name) = term.string("name")? {
            add("aws::name", json!(name));
        }
        if let Some(owner) = term.string("owner")? {
            add("aws::owners", json!(owner));
        }
        term.finish(notes);
    }
    if !ids.is_empty() {
        sel.insert("aws-ids".into(), json!(ids.join(",")));
    }
    Ok((family, (!sel.is_empty()).then_some(Value::Object(sel))))
}

/// Block devices, field by field (so a field joiner lacks is noted, not dropped).
pub(super) fn block_devices(
    spec: &Fields,
    notes: &mut Vec<Note>,
) -> Result<Option<Value>, KarpenterError> {
    let mut out = Vec::new();
    for (i, m) in spec.array("blockDeviceMappings")?.iter().enumerate() {
        let mapping = Fields::new(
            Some(m),
            spec.object(),
            &spec.path_of(&format!("blockDeviceMappings[{i}]")),
        )?;
        let mut o = Map::new();
        for key in ["deviceName", "rootVolume"] {
            if let Some(v) = mapping.take(key) {
                o.insert(key.into(), v.clone());
            }
        }
        let ebs = mapping.child("ebs")?;
        let mut e = Map::new();
        for key in [
            "volumeSize",
            "volumeType",
            "iops",
            "throughput",
            "encrypted",
            "kmsKeyID",
            "snapshotID",
            "deleteOnTermination",
        ] {
            if let Some(v) = ebs.take(key) {
                e.insert(key.into(), v.clone());
            }
        }
        ebs.finish(notes);
        if !e.is_empty() {
            o.insert("ebs".into(), Value::Object(e));
        }
        mapping.finish(notes);
        out.push(Value::Object(o));
    }
    Ok((!out.is_empty()).then_some(Value::Array(out)))
}

/// An EC2NodeClass of `api_version`, and its kubelet settings (v1) when it has any.
pub(super) fn node_class(
    object: &Value,
    api_version: &str,
    notes: &mut Vec<Note>,
) -> Result<(NodeTemplate, Option<Value>), KarpenterError> {
    let (name, meta) = metadata(object, "EC2NodeClass")?;
    let label = format!("EC2NodeClass {name}");
    let spec = Fields::new(object.get("spec"), &label, "spec")?;
    let mut out = Map::new();
    for (from, to) in [
        ("subnetSelectorTerms", "subnetSelector"),
        ("securityGroupSelectorTerms", "securityGroupSelector"),
    ] {
        if let Some(sel) = selector(&spec, from, notes)? {
            out.insert(to.into(), sel);
        }
    }
    let (alias_family, ami_selector) = amis(&spec, notes)?;
    if let Some(sel) = ami_selector {
        out.insert("amiSelector".into(), sel);
    }
    let declared = spec.string("amiFamily")?;
    let family = match (declared, alias_family) {
        (Some(d), _) => family(&spec, Some(d), "AL2023", notes),
        (None, Some(a)) => a,
        // v1beta1 requires amiFamily; v1 without an alias or family is a custom AMI.
        (None, None) => family(
            &spec,
            None,
            if api_version.ends_with("v1beta1") {
                "AL2"
            } else {
                "Custom"
            },
            notes,
        ),
    };
    out.insert("amiFamily".into(), json!(family));
    for key in [
        "instanceProfile",
        "userData",
        "tags",
        "metadataOptions",
        "detailedMonitoring",
    ] {
        if let Some(v) = spec.take(key) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(b) = block_devices(&spec, notes)? {
        out.insert("blockDeviceMappings".into(), b);
    }
    metadata_default(&spec, api_version, notes);
    if let Some(role) = spec.string("role")? {
        notes.push(spec.note(
            "role",
            format!("joiner launches with an instance profile, not a role: set spec.instanceProfile to a profile holding role {role}, or leave it to the controller's --default-instance-profile"),
        ));
    }
    let kubelet = match spec.take("kubelet") {
        Some(k) => {
            let fields = Fields::new(Some(k), &label, "spec.kubelet")?;
            let k = super::kubelet(&fields, notes);
            k.as_object().is_some_and(|m| !m.is_empty()).then_some(k)
        }
        None => None,
    };
    spec.finish(notes);
    let template = typed(
        &label,
        json!({"apiVersion": crate::API_VERSION, "kind": "NodeTemplate", "metadata": meta, "spec": out}),
    )?;
    Ok((template, kubelet))
}
