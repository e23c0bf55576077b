//! Karpenter `NodePool` (v1beta1 and v1) into a joiner Provisioner.
//!
//! The template's labels, annotations, requirements, taints and node class move up to the
//! Provisioner's spec; `disruption` becomes joiner's consolidation, TTLs and budgets:
//! `WhenUnderutilized` / `WhenEmptyOrUnderutilized` turn consolidation on (with
//! `consolidateAfter`), `WhenEmpty` becomes `ttlSecondsAfterEmpty`, `expireAfter` becomes
//! `ttlSecondsUntilExpired`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::v1alpha5::{has_key, metadata, requirements};
use super::{kubelet, typed, Fields, KarpenterError, Note};
use crate::Provisioner;

/// Karpenter's default `expireAfter` (720h) for v1beta1 and v1 NodePools.
const KARPENTER_EXPIRE_AFTER_SECONDS: u64 = 720 * 3600;

/// Seconds of a Go duration at `key`, `None` for `Never` or absent; an error when malformed.
fn seconds(from: &Fields, key: &str) -> Result<Option<u64>, KarpenterError> {
    match from.string(key)? {
        None | Some("Never") => Ok(None),
        Some(d) => crate::duration::parse_seconds(d)
            .map(Some)
            .ok_or_else(|| from.error(key, &format!("{d:?} is not a duration"))),
    }
}

/// A NodePool of `api_version`; `kubelets` are the v1 node classes' kubelet settings by name.
pub(super) fn node_pool(
    object: &Value,
    api_version: &str,
    kubelets: &BTreeMap<String, Value>,
    notes: &mut Vec<Note>,
) -> Result<Provisioner, KarpenterError> {
    let (name, meta) = metadata(object, "NodePool")?;
    let label = format!("NodePool {name}");
    let spec = Fields::new(object.get("spec"), &label, "spec")?;
    let template = spec.child("template")?;
    let tmeta = template.child("metadata")?;
    let tspec = template.child("spec")?;
    let mut out = Map::new();
    for key in ["labels", "annotations"] {
        if let Some(v) = tmeta.take(key) {
            out.insert(key.into(), v.clone());
        }
    }
    tmeta.finish(notes);
    let mut reqs = requirements(&tspec, notes)?;
    // From v1beta1 on, a NodePool without a capacity-type requirement may launch spot (and
    // prefers it); joiner's default is on-demand only.
    if !has_key(&reqs, &["karpenter.sh/capacity-type"]) {
        if let Some(a) = reqs.as_array_mut() {
            a.push(json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}));
        }
        notes.push(tspec.note(
            "requirements",
            "no karpenter.sh/capacity-type requirement: Karpenter allows spot and on-demand (joiner's default is on-demand only), converted to an explicit In [spot, on-demand]",
        ));
    }
    out.insert("requirements".into(), reqs);
    for key in ["taints", "startupTaints"] {
        if let Some(v) = tspec.take(key) {
            out.insert(key.into(), v.clone());
        }
    }
    let class_ref = tspec.child("nodeClassRef")?;
    let class = class_ref.string("name")?;
    if let Some(c) = class {
        out.insert("providerRef".into(), json!({"name": c}));
    }
    // They name the EC2NodeClass, which becomes the NodeTemplate of the same name; a
    // reference to another provider's class names nothing joiner can launch with.
    for (key, allowed) in [
        ("kind", &["EC2NodeClass"][..]),
        ("group", &["karpenter.k8s.aws"][..]),
        (
            "apiVersion",
            &["karpenter.k8s.aws/v1beta1", "karpenter.k8s.aws/v1"][..],
        ),
    ] {
        if let Some(v) = class_ref.string(key)? {
            if !allowed.contains(&v) {
                return Err(class_ref.error(
                    key,
                    &format!(
                        "{v}: joiner reads EC2NodeClasses (karpenter.k8s.aws) only; a NodePool \
                         naming another provider's node class cannot be converted"
                    ),
                ));
            }
        }
    }
    class_ref.finish(notes);
    // v1beta1 keeps kubelet settings in the NodePool, v1 in the EC2NodeClass.
    let k = tspec.child("kubelet")?;
    let mut kube = kubelet(&k, notes);
    if let Some(from_class) = class.and_then(|c| kubelets.get(c)) {
        if kube.as_object().is_some_and(|m| !m.is_empty()) {
            notes.push(tspec.note(
                "kubelet",
                "the EC2NodeClass also has kubelet settings: those are used (as Karpenter v1 does), these are not converted",
            ));
        }
        kube = from_class.clone();
    }
    if kube.as_object().is_some_and(|m| !m.is_empty()) {
        out.insert("kubeletConfiguration".into(), kube);
    }
    if let Some(s) = seconds(&tspec, "expireAfter")? {
        out.insert("ttlSecondsUntilExpired".into(), json!(s));
    }

    let disruption = spec.child("disruption")?;
    let policy = disruption.string("consolidationPolicy")?;
    let after = disruption.string("consolidateAfter")?;
    match policy.unwrap_or(if api_version.ends_with("v1beta1") {
        "WhenUnderutilized"
    } else {
        "WhenEmptyOrUnderutilized"
    }) {
        p @ ("WhenUnderutilized" | "WhenEmptyOrUnderutilized" | "Balanced") => {
            let mut c = json!({"enabled": true});
            match after {
                Some(a) => c["consolidateAfter"] = json!(a),
                // v1 defaults consolidateAfter to 0s; v1beta1's WhenUnderutilized had none.
                None if !api_version.ends_with("v1beta1") => c["consolidateAfter"] = json!("0s"),
                None => notes.push(disruption.note(
                    "consolidateAfter",
                    "unset: joiner waits 30s after a node's pods last changed before consolidating it (spec.consolidation.consolidateAfter)",
                )),
            }
            // joiner's policies of the same names make the same moves: Karpenter's default
            // (any saving, no score gate) and Karpenter's Balanced (score ≥ 0.5).
            c["policy"] = json!(if p == "Balanced" {
                "Balanced"
            } else {
                "WhenEmptyOrUnderutilized"
            });
            out.insert("consolidation".into(), c);
        }
        "WhenEmpty" => match after {
            Some("Never") => {}
            Some(a) => {
                let s = crate::duration::parse_seconds(a).ok_or_else(|| {
                    disruption.error("consolidateAfter", &format!("{a:?} is not a duration"))
                })?;
                out.insert("ttlSecondsAfterEmpty".into(), json!(s));
            }
            None => {
                out.insert("ttlSecondsAfterEmpty".into(), json!(0));
            }
        },
        other => {
            return Err(
                disruption.error("consolidationPolicy", &format!("unknown policy {other:?}"))
            )
        }
    }
    // v1beta1 kept expireAfter under disruption.
    if let Some(s) = seconds(&disruption, "expireAfter")? {
        out.insert("ttlSecondsUntilExpired".into(), json!(s));
    }
    // Karpenter defaults expireAfter to 720h (v1beta1 under disruption, v1 in the template);
    // joiner's default is never, so an absent value is made explicit.
    if tspec.take("expireAfter").is_none() && disruption.take("expireAfter").is_none() {
        out.insert(
            "ttlSecondsUntilExpired".into(),
            json!(KARPENTER_EXPIRE_AFTER_SECONDS),
        );
        let at = if api_version.ends_with("v1beta1") {
            &disruption
        } else {
            &tspec
        };
        notes.push(at.note(
            "expireAfter",
            "unset: Karpenter's default of 720h is kept as spec.ttlSecondsUntilExpired: 2592000 (joiner's own default is never)",
        ));
    }
    if api_version.ends_with("v1beta1") && out.contains_key("ttlSecondsUntilExpired") {
        notes.push(disruption.note(
            "expireAfter",
            "joiner expires nodes whatever the disruption budgets say (as Karpenter v1 does); in v1beta1 budgets also held back expiration",
        ));
    }
    let mut budgets = Vec::new();
    for (i, b) in disruption.array("budgets")?.iter().enumerate() {
        let budget = Fields::new(
            Some(b),
            &label,
            &disruption.path_of(&format!("budgets[{i}]")),
        )?;
        let mut o = Map::new();
        for key in ["nodes", "reasons", "schedule", "duration"] {
            if let Some(v) = budget.take(key) {
                o.insert(key.into(), v.clone());
            }
        }
        budget.finish(notes);
        budgets.push(Value::Object(o));
    }
    if !budgets.is_empty() {
        out.insert("disruption".into(), json!({"budgets": budgets}));
    }
    disruption.finish(notes);

    if let Some(Value::Object(limits)) = spec.take("limits") {
        out.insert("limits".into(), json!({"resources": limits.clone()}));
    }
    if let Some(w) = spec.take("weight") {
        out.insert("weight".into(), w.clone());
    }
    tspec.finish(notes);
    template.finish(notes);
    spec.finish(notes);
    typed(
        &label,
        json!({"apiVersion": crate::API_VERSION, "kind": "Provisioner", "metadata": meta, "spec": out}),
    )
}
