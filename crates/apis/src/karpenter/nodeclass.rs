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
            if default == "Custom" {
                notes.push(spec.note(
                    "amiFamily",
                    "unset and no AMI alias: converted as Custom, so the selected AMI and userData must join the node themselves",
                ));
            }
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

/// The instance metadata options Karpenter launched with for `api_version`, made explicit
/// where they differ from joiner's defaults (endpoint enabled, IPv6 disabled, hop limit 1,
/// tokens required — Karpenter v1's). Before v1 an unset `metadataOptions` meant hop limit 2
/// (pods reach the metadata service); v1beta1 defaulted each missing field so; v1alpha1 passed
/// a missing field to EC2, whose defaults are hop limit 1 and tokens optional. Returns the
/// options to write (`None`: joiner's defaults already match), noting what differs.
pub(super) fn metadata_options(
    spec: &Fields,
    api_version: &str,
    notes: &mut Vec<Note>,
) -> Option<Value> {
    let given = spec.take("metadataOptions");
    let karpenter_default = json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 2, "httpTokens": "required"});
    let ec2_default = json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1, "httpTokens": "optional"});
    let joiner_default = json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1, "httpTokens": "required"});
    let missing_from = match (
        api_version.ends_with("/v1"),
        api_version.ends_with("v1alpha1"),
        given,
    ) {
        (true, _, _) => return given.cloned(),
        (false, _, None) => &karpenter_default,
        (false, true, Some(_)) => &ec2_default,
        (false, false, Some(_)) => &karpenter_default,
    };
    let mut out = given
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut differs = Vec::new();
    for key in [
        "httpEndpoint",
        "httpProtocolIPv6",
        "httpPutResponseHopLimit",
        "httpTokens",
    ] {
        if out.contains_key(key) {
            continue;
        }
        let value = missing_from[key].clone();
        if value != joiner_default[key] {
            differs.push(format!("{key}: {value}"));
        }
        out.insert(key.to_string(), value);
    }
    if !differs.is_empty() {
        notes.push(spec.note(
            "metadataOptions",
            format!(
                "what Karpenter launched with for this API version is kept explicitly ({}); joiner's own default is hop limit 1 and tokens required (pods cannot reach the node's role) — consider it",
                differs.join(", ")
            ),
        ));
    }
    Some(Value::Object(out))
}

/// A selector from Karpenter selector terms at `key` (`subnetSelectorTerms`, ...). Terms are
/// alternatives (ORed) in Karpenter; joiner's selector is one AND of tags and `aws-ids`. So the
/// first term decides: ID terms become one `aws-ids` list, or the first tag term is kept; every
/// other term is noted, never ANDed into the one kept.
fn selector(
    spec: &Fields,
    key: &str,
    notes: &mut Vec<Note>,
) -> Result<Option<Value>, KarpenterError> {
    let terms = spec.array(key)?;
    let mut ids: Vec<String> = Vec::new();
    let mut tags: Option<Value> = None;
    let by_id = terms.first().is_some_and(|t| t.get("id").is_some());
    for (i, t) in terms.iter().enumerate() {
        let term = Fields::new(
            Some(t),
            spec.object(),
            &spec.path_of(&format!("{key}[{i}]")),
        )?;
        let id = term.string("id")?;
        let term_tags = term.take("tags");
        match (by_id, id, term_tags) {
            (true, Some(id), _) => ids.push(id.to_string()),
            (false, _, Some(t)) if tags.is_none() => tags = Some(t.clone()),
            (_, Some(_), _) => notes.push(term.note(
                "id",
                "an alternative to the tag term joiner keeps (joiner selects by tags or by IDs, not either); not converted",
            )),
            (_, None, Some(_)) => notes.push(term.note(
                "tags",
                "an alternative term (Karpenter ORs terms; joiner selects with one set of tags, or IDs); not converted",
            )),
            (_, None, None) => {}
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
    let terms = spec.array("amiSelectorTerms")?;
    // Terms are ORed in Karpenter: the first selecting term decides between IDs and criteria
    // (tags, name, owner); the other kind is noted, never ANDed with it.
    let by_id = terms
        .iter()
        .find(|t| {
            ["id", "tags", "name", "owner"]
                .iter()
                .any(|k| t.get(*k).is_some())
        })
        .is_some_and(|t| t.get("id").is_some());
    for (i, t) in terms.iter().enumerate() {
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
            if by_id {
                ids.push(id.to_string());
            } else {
                notes.push(term.note(
                    "id",
                    "an alternative to the AMI criteria joiner keeps (joiner selects by criteria or by IDs, not either); not converted",
                ));
            }
        }
        let any_selector = by_id || !sel.is_empty();
        // `field` is the input's (a note names it), `k` joiner's selector key.
        let mut add = |field: &str, k: &str, v: Value| {
            if any_selector {
                notes.push(term.note(field, "joiner selects AMIs with one set of criteria; this alternative term is not converted"));
            } else {
                sel.insert(k.to_string(), v);
            }
        };
        if let Some(Value::Object(tags)) = term.take("tags") {
            for (k, v) in tags.clone() {
                add(&format!("tags.{k}"), &k, v);
            }
        }
        if let Some(name) = term.string("name")? {
            add("name", "aws::name", json!(name));
        }
        if let Some(owner) = term.string("owner")? {
            add("owner", "aws::owners", json!(owner));
        }
        term.finish(notes);
    }
    if !ids.is_empty() {
        sel.insert("aws-ids".into(), json!(ids.join(",")));
    }
    Ok((family, (!sel.is_empty()).then_some(Value::Object(sel))))
}

/// A Custom family without block devices: Karpenter launched with the AMI's own mappings,
/// joiner attaches its default root volume.
pub(super) fn custom_root_note(spec: &Fields, out: &Map<String, Value>, notes: &mut Vec<Note>) {
    if out.get("amiFamily").and_then(Value::as_str) == Some("Custom")
        && !out.contains_key("blockDeviceMappings")
    {
        notes.push(spec.note(
            "blockDeviceMappings",
            "unset with a custom AMI: Karpenter used the AMI's own block devices; joiner attaches its default root volume (20 GiB /dev/xvda) — set blockDeviceMappings to match the AMI",
        ));
    }
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
        if mapping.string("deviceName")?.is_none() {
            return Err(mapping.error(
                "deviceName",
                "joiner needs the device name of each mapping (the AMI's root device, e.g. /dev/xvda)",
            ));
        }
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
        // The alias picks the AMIs, and with them how the node joins: it wins over a declared
        // family that says otherwise (which is noted), as in Karpenter v1.
        (Some(d), Some(a)) => {
            if !d.eq_ignore_ascii_case(&a) {
                notes.push(spec.note(
                    "amiFamily",
                    format!("{d} beside amiSelectorTerms' alias, which selects {a} AMIs: converted as {a}"),
                ));
            }
            a
        }
        (Some(d), None) => family(&spec, Some(d), "AL2023", notes),
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
    drop_reserved_tags(&spec, &mut out, notes);
    if let Some(b) = block_devices(&spec, notes)? {
        out.insert("blockDeviceMappings".into(), b);
    }
    custom_root_note(&spec, &out, notes);
    if let Some(m) = metadata_options(&spec, api_version, notes) {
        out.insert("metadataOptions".into(), m);
    }
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

/// Removes from the converted `out.tags` every key joiner's NodeTemplate refuses
/// ([`crate::tag_rules`]: ownership and the autoscalers' own records), each with a note: the
/// NodeTemplate written is one joiner runs, and nothing is dropped silently.
pub(super) fn drop_reserved_tags(
    spec: &Fields,
    out: &mut Map<String, Value>,
    notes: &mut Vec<Note>,
) {
    let Some(Value::Object(tags)) = out.get_mut("tags") else {
        return;
    };
    let reserved: Vec<String> = tags
        .keys()
        .filter(|k| crate::tag_rules::reserved_tag(k).is_some())
        .cloned()
        .collect();
    for key in reserved {
        tags.remove(&key);
        notes.push(spec.note(
            "tags",
            format!(
                "{}; not converted (joiner sets its own ownership tags)",
                crate::tag_rules::refusal(&key)
            ),
        ));
    }
    if tags.is_empty() {
        out.remove("tags");
    }
}
