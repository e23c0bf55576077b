//! Karpenter v1alpha5 `Provisioner` and v1alpha1 `AWSNodeTemplate`: joiner's Provisioner and
//! NodeTemplate are their descendants, so most fields carry over as they are.

use serde_json::{json, Map, Value};

use super::{kubelet, typed, Fields, KarpenterError, Note};
use crate::{NodeTemplate, Provisioner};

/// Copies `keys` of `from` into `to` unchanged.
fn copy(from: &Fields, to: &mut Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if let Some(v) = from.take(key) {
            to.insert((*key).to_string(), v.clone());
        }
    }
}

/// The object's metadata: its name (required) and labels/annotations; the rest is the API
/// server's and is not converted (nor reported: it describes the stored object, not settings).
pub(super) fn metadata(object: &Value, kind: &str) -> Result<(String, Value), KarpenterError> {
    let name = object["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| KarpenterError {
            object: format!("{kind} <unnamed>"),
            field: "metadata.name".into(),
            reason: "a name is required".into(),
        })?;
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    for key in ["labels", "annotations"] {
        if let Some(v) = object["metadata"].get(key).filter(|v| v.is_object()) {
            meta.insert(key.into(), v.clone());
        }
    }
    Ok((name.to_string(), Value::Object(meta)))
}

/// Requirements as joiner reads them; `minValues` (no equivalent) is noted per requirement.
/// Karpenter v1's `Gte`/`Lte` become `Gt n-1`/`Lt n+1` (integers either way); the `reserved`
/// capacity type (capacity reservations, which joiner does not launch into) is dropped with a
/// note.
pub(super) fn requirements(from: &Fields, notes: &mut Vec<Note>) -> Result<Value, KarpenterError> {
    let mut out = Vec::new();
    for (i, r) in from.array("requirements")?.iter().enumerate() {
        let req = Fields::new(
            Some(r),
            from.object(),
            &from.path_of(&format!("requirements[{i}]")),
        )?;
        let mut m = Map::new();
        copy(&req, &mut m, &["key", "operator", "values"]);
        if req.take("minValues").is_some() {
            notes.push(req.note(
                "minValues",
                "joiner has no minimum of distinct values (it picks the cheapest type that fits, with every allowed type as a fallback in the launch); not converted",
            ));
        }
        let op = m
            .get("operator")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(op @ ("Gte" | "Lte")) = op.as_deref() {
            let n = m
                .get("values")
                .and_then(|v| v.get(0))
                .and_then(Value::as_str)
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or_else(|| req.error("values", &format!("{op} needs one integer value")))?;
            let (op, n) = if op == "Gte" {
                ("Gt", n - 1)
            } else {
                ("Lt", n + 1)
            };
            m.insert("operator".into(), json!(op));
            m.insert("values".into(), json!([n.to_string()]));
        }
        let capacity = m.get("key").and_then(Value::as_str) == Some("karpenter.sh/capacity-type");
        if let (true, Some(Value::Array(values))) = (capacity, m.get_mut("values")) {
            let before = values.len();
            values.retain(|v| v.as_str() != Some("reserved"));
            if values.len() != before {
                notes.push(req.note(
                    "values",
                    "capacity type reserved (capacity reservations) has no joiner equivalent: removed",
                ));
                if values.is_empty() {
                    req.finish(notes);
                    continue;
                }
            }
        }
        req.finish(notes);
        out.push(Value::Object(m));
    }
    Ok(Value::Array(out))
}

/// True when `requirements` (converted) constrain `key`.
pub(super) fn has_key(requirements: &Value, keys: &[&str]) -> bool {
    requirements.as_array().is_some_and(|rs| {
        rs.iter()
            .any(|r| r["key"].as_str().is_some_and(|k| keys.contains(&k)))
    })
}

/// Karpenter's v1alpha5 webhook defaults (up to v0.31), made explicit: linux, amd64, on-demand,
/// and — when no instance type, family, category or generation is named — categories c, m, r
/// of generation > 2. joiner's own defaults differ (no arch default), so the converted
/// Provisioner carries them.
fn webhook_defaults(spec: &Fields, requirements: &mut Value, notes: &mut Vec<Note>) {
    let mut added = Vec::new();
    let mut add = |key: &str, op: &str, values: &[&str], reqs: &mut Value| {
        if let Some(a) = reqs.as_array_mut() {
            a.push(json!({"key": key, "operator": op, "values": values}));
        }
        added.push(format!("{key} {op} {values:?}"));
    };
    for (key, values) in [
        ("kubernetes.io/os", ["linux"]),
        ("kubernetes.io/arch", ["amd64"]),
        ("karpenter.sh/capacity-type", ["on-demand"]),
    ] {
        if !has_key(requirements, &[key]) {
            add(key, "In", &values, requirements);
        }
    }
    let shapes = [
        "node.kubernetes.io/instance-type",
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/instance-category",
        "karpenter.k8s.aws/instance-generation",
    ];
    if !has_key(requirements, &shapes) {
        add(
            "karpenter.k8s.aws/instance-category",
            "In",
            &["c", "m", "r"],
            requirements,
        );
        add(
            "karpenter.k8s.aws/instance-generation",
            "Gt",
            &["2"],
            requirements,
        );
    }
    if !added.is_empty() {
        notes.push(spec.note(
            "requirements",
            format!(
                "Karpenter's v1alpha5 defaults made explicit: {}",
                added.join(", ")
            ),
        ));
    }
}

/// A v1alpha5 Provisioner.
pub(super) fn provisioner(
    object: &Value,
    notes: &mut Vec<Note>,
) -> Result<Provisioner, KarpenterError> {
    let (name, meta) = metadata(object, "Provisioner")?;
    let label = format!("Provisioner {name}");
    let spec = Fields::new(object.get("spec"), &label, "spec")?;
    let mut out = Map::new();
    let mut reqs = requirements(&spec, notes)?;
    webhook_defaults(&spec, &mut reqs, notes);
    out.insert("requirements".into(), reqs);
    copy(
        &spec,
        &mut out,
        &[
            "labels",
            "annotations",
            "taints",
            "startupTaints",
            "weight",
            "ttlSecondsAfterEmpty",
            "ttlSecondsUntilExpired",
        ],
    );
    let limits = spec.child("limits")?;
    if let Some(r) = limits.take("resources") {
        out.insert("limits".into(), json!({"resources": r}));
    }
    limits.finish(notes);
    let provider_ref = spec.child("providerRef")?;
    if let Some(n) = provider_ref.string("name")? {
        out.insert("providerRef".into(), json!({"name": n}));
    }
    // kind and apiVersion name the AWSNodeTemplate, which becomes the NodeTemplate of the same
    // name.
    provider_ref.take("kind");
    provider_ref.take("apiVersion");
    provider_ref.finish(notes);
    if spec.take("provider").is_some() {
        notes.push(spec.note(
            "provider",
            "inline provider settings are not converted: move them to an AWSNodeTemplate (a NodeTemplate) and reference it with providerRef",
        ));
    }
    let consolidation = spec.child("consolidation")?;
    if let Some(enabled) = consolidation.take("enabled") {
        // Karpenter's consolidation makes any move that saves: joiner's default policy,
        // written out so the Provisioner says what it does.
        let mut c = json!({"enabled": enabled});
        if enabled.as_bool() == Some(true) {
            c["policy"] = json!("WhenEmptyOrUnderutilized");
        }
        out.insert("consolidation".into(), c);
    }
    consolidation.finish(notes);
    // With consolidation on, empty nodes are consolidation's; joiner (like Karpenter's own
    // validation) refuses both, so the TTL becomes the wait before consolidating.
    let consolidating = out
        .get("consolidation")
        .is_some_and(|c| c["enabled"].as_bool() == Some(true));
    // (Removed only then: without consolidation the TTL is what removes empty nodes.)
    if let Some(ttl) = consolidating
        .then(|| out.remove("ttlSecondsAfterEmpty"))
        .flatten()
    {
        if let Some(c) = out.get_mut("consolidation") {
            c["consolidateAfter"] = json!(format!("{}s", ttl.as_u64().unwrap_or_default()));
        }
        notes.push(spec.note(
            "ttlSecondsAfterEmpty",
            "with consolidation enabled, empty nodes are removed by consolidation: converted to spec.consolidation.consolidateAfter",
        ));
    }
    let k = spec.child("kubeletConfiguration")?;
    let kubelet = kubelet(&k, notes);
    if kubelet.as_object().is_some_and(|m| !m.is_empty()) {
        out.insert("kubeletConfiguration".into(), kubelet);
    }
    spec.finish(notes);
    typed(
        &label,
        json!({"apiVersion": crate::API_VERSION, "kind": "Provisioner", "metadata": meta, "spec": out}),
    )
}

/// A v1alpha1 AWSNodeTemplate.
pub(super) fn node_template(
    object: &Value,
    notes: &mut Vec<Note>,
) -> Result<NodeTemplate, KarpenterError> {
    let (name, meta) = metadata(object, "AWSNodeTemplate")?;
    let label = format!("AWSNodeTemplate {name}");
    let spec = Fields::new(object.get("spec"), &label, "spec")?;
    let mut out = Map::new();
    copy(
        &spec,
        &mut out,
        &[
            "subnetSelector",
            "securityGroupSelector",
            "amiSelector",
            "instanceProfile",
            "userData",
            "tags",
            "metadataOptions",
            "detailedMonitoring",
        ],
    );
    super::nodeclass::drop_reserved_tags(&spec, &mut out, notes);
    if let Some(b) = super::nodeclass::block_devices(&spec, notes)? {
        out.insert("blockDeviceMappings".into(), b);
    }
    if let Some(m) = super::nodeclass::metadata_options(&spec, "karpenter.k8s.aws/v1alpha1", notes)
    {
        out.insert("metadataOptions".into(), m);
    }
    let family = spec.string("amiFamily")?;
    out.insert(
        "amiFamily".into(),
        json!(super::nodeclass::family(&spec, family, "AL2", notes)),
    );
    super::nodeclass::custom_root_note(&spec, &out, notes);
    spec.finish(notes);
    typed(
        &label,
        json!({"apiVersion": crate::API_VERSION, "kind": "NodeTemplate", "metadata": meta, "spec": out}),
    )
}
