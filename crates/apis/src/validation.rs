//! Validation of the resources and their conversion into the core model.
//!
//! Validation happens once, at the boundary: the simulation can then trust every value it reads.
//! Each check names the field path the way `kubectl explain` does, with map keys that are not
//! plain identifiers in brackets (`spec.limits.resources["nvidia.com/gpu"]`).

use std::collections::BTreeMap;

use joiner_core::kubelet::{KubeletSettings, Reserved, Threshold};
use joiner_core::quantity;
use joiner_core::{labels, Effect, Operator, Requirement, Requirements, Resources};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::duration;
use crate::error::ApiError;
use crate::node_template::{AmiFamily, NodeTemplate};
use crate::object::ObjectRef;
use crate::provisioner::{KubeletConfiguration, Provisioner};
use crate::selector::NodeSelectorRequirement;
use crate::syntax;
use crate::taint::Taint;

use crate::syntax::JOINER_SET_LABELS as RESTRICTED_LABELS;

use crate::spec_rules::{self as rules, EVICTION_SIGNALS, RESERVABLE};

/// EBS volume types.
const VOLUME_TYPES: &[&str] = &["standard", "io1", "io2", "gp2", "gp3", "sc1", "st1"];

/// Builds errors about one object.
struct Check {
    object: ObjectRef,
}

impl Check {
    fn new(kind: &'static str, name: &str) -> Self {
        Check {
            object: ObjectRef::new(kind, name),
        }
    }

    fn invalid(&self, field: impl Into<String>, reason: impl Into<String>) -> ApiError {
        ApiError::Invalid {
            object: self.object.clone(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    fn quantity(&self, field: String, reason: joiner_core::QuantityError) -> ApiError {
        ApiError::Quantity {
            object: self.object.clone(),
            field,
            reason,
        }
    }

    fn requirement(&self, field: String, reason: joiner_core::RequirementError) -> ApiError {
        ApiError::Requirement {
            object: self.object.clone(),
            field,
            reason,
        }
    }

    fn named(&self) -> Result<(), ApiError> {
        if self.object.name.is_empty() {
            return Err(self.invalid("metadata.name", "a name is required"));
        }
        Ok(())
    }
}

/// `prefix.key` for identifier-like keys, `prefix["key"]` for keys with dots or slashes, so a
/// field path in an error stays unambiguous (`resources.requests["nvidia.com/gpu"]`). Shared
/// with the manifest loader so both speak the same path syntax.
pub fn map_field(prefix: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{prefix}.{key}")
    } else {
        format!("{prefix}[{key:?}]")
    }
}

impl Provisioner {
    /// Validates the Provisioner and converts it into the simulation's model.
    ///
    /// Why here and not in the simulation: a manifest error should be reported once, against
    /// the field a person wrote, not discovered later as an unexplained scheduling failure.
    /// Fields the simulation does not read (TTLs, budgets, warm pool, kubelet settings that do
    /// not change allocatable) are validated all the same, so `joiner plan` rejects what the controller would.
    pub fn to_core(&self) -> Result<joiner_core::Provisioner, ApiError> {
        let check = Check::new("Provisioner", self.name());
        check.named()?;
        let spec = &self.spec;

        let weight = spec.weight.unwrap_or(0);
        if !(0..=100).contains(&weight) {
            return Err(check.invalid("spec.weight", format!("weight {weight} is outside 0–100")));
        }

        let max = crate::label_rules::MAX_LABELS;
        if spec.requirements.len() > max {
            return Err(check.invalid(
                "spec.requirements",
                format!(
                    "{} requirements; at most {max} are allowed",
                    spec.requirements.len()
                ),
            ));
        }
        if spec.labels.len() > max {
            return Err(check.invalid(
                "spec.labels",
                format!("{} labels; at most {max} are allowed", spec.labels.len()),
            ));
        }
        let requirements = convert_requirements(&check, "spec.requirements", &spec.requirements)?;

        for (key, value) in &spec.labels {
            let field = map_field("spec.labels", key);
            if key.is_empty() {
                return Err(check.invalid(field, "label key is empty"));
            }
            if RESTRICTED_LABELS.contains(&labels::normalize(key)) {
                return Err(check.invalid(
                    field,
                    format!("label {key} is set by joiner and cannot be set here"),
                ));
            }
            let why = syntax::qualified_name(key)
                .or_else(|| syntax::label_value(value))
                .or_else(|| syntax::restricted_domain(key));
            if let Some(why) = why {
                return Err(check.invalid(field, why));
            }
            if let Some(req) = requirements.get(key) {
                if !req.allows(value) {
                    // The requirement as the manifest writes it (the CRD's rule says the same).
                    let written = spec.requirements.iter().find(|r| {
                        labels::normalize(&r.key) == labels::normalize(key)
                            && Operator::parse(&r.operator)
                                .and_then(|op| Requirement::new(op, &r.values))
                                .is_ok_and(|one| !one.allows(value))
                    });
                    let reason = match written {
                        Some(r) => rules::label_contradicts(value, &r.key, &r.operator, &r.values),
                        None => {
                            format!("label value {value:?} contradicts the requirement {key} {req}")
                        }
                    };
                    return Err(check.invalid(field, reason));
                }
            }
        }

        let taints = convert_taints(&check, "spec.taints", &spec.taints)?;
        let startup_taints = convert_taints(&check, "spec.startupTaints", &spec.startup_taints)?;

        let mut limits = joiner_core::Limits::default();
        if let Some(l) = &spec.limits {
            for (name, q) in &l.resources {
                let field = map_field("spec.limits.resources", name);
                match name.as_str() {
                    "cpu" => {
                        limits.cpu = Some(
                            quantity::parse_milli(&q.0).map_err(|e| check.quantity(field, e))?,
                        )
                    }
                    "memory" => {
                        limits.memory = Some(
                            quantity::parse_units(&q.0).map_err(|e| check.quantity(field, e))?,
                        )
                    }
                    other => {
                        let mut r = Resources::default();
                        r.add_quantity(other, &q.0)
                            .map_err(|e| check.quantity(field, e))?;
                        limits.other.insert(other.to_string(), r.get(other));
                    }
                }
            }
        }

        for (field, ttl) in [
            ("spec.ttlSecondsAfterEmpty", spec.ttl_seconds_after_empty),
            (
                "spec.ttlSecondsUntilExpired",
                spec.ttl_seconds_until_expired,
            ),
        ] {
            if let Some(t) = ttl.filter(|t| *t < 0) {
                return Err(check.invalid(field, format!("must not be negative, got {t}")));
            }
        }
        if self.consolidation_enabled() && spec.ttl_seconds_after_empty.is_some() {
            return Err(check.invalid(
                "spec.ttlSecondsAfterEmpty",
                rules::TTL_AFTER_EMPTY_WITH_CONSOLIDATION,
            ));
        }

        let kubelet = match &spec.kubelet_configuration {
            Some(k) => kubelet_settings(&check, k)?,
            None => KubeletSettings::default(),
        };

        settings::disruption(&check, spec)?;
        settings::rebalance_replaces(&check, spec)?;

        if let Some(w) = &spec.warm_pool {
            warm_pool(&check, w)?;
        }

        let mut node_template = None;
        if let Some(r) = &spec.provider_ref {
            if r.name.is_empty() {
                return Err(check.invalid("spec.providerRef.name", "a name is required"));
            }
            if let Some(kind) = r
                .kind
                .as_deref()
                .filter(|k| !matches!(*k, "NodeTemplate" | "AWSNodeTemplate"))
            {
                return Err(check.invalid(
                    "spec.providerRef.kind",
                    format!("kind {kind:?} is not a NodeTemplate"),
                ));
            }
            node_template = Some(r.name.clone());
        }

        Ok(joiner_core::Provisioner {
            name: self.name().to_string(),
            weight,
            requirements,
            labels: spec.labels.clone(),
            taints,
            startup_taints,
            limits,
            kubelet,
            node_template,
            held: joiner_core::Resources::default(),
        })
    }
}

/// Converts a list of node-selector requirements, naming `prefix[i].key|operator|values` on error.
fn convert_requirements(
    check: &Check,
    prefix: &str,
    list: &[NodeSelectorRequirement],
) -> Result<Requirements, ApiError> {
    let mut out = Requirements::new();
    for (i, r) in list.iter().enumerate() {
        let at = |leaf: &str| format!("{prefix}[{i}].{leaf}");
        if r.key.is_empty() {
            return Err(check.requirement(at("key"), joiner_core::RequirementError::EmptyKey));
        }
        if RESTRICTED_LABELS.contains(&labels::normalize(&r.key)) {
            return Err(check.invalid(
                at("key"),
                format!("label {} is set by joiner and cannot be required", r.key),
            ));
        }
        if let Some(why) =
            syntax::qualified_name(&r.key).or_else(|| syntax::restricted_domain(&r.key))
        {
            return Err(check.invalid(at("key"), why));
        }
        if r.values.len() > rules::MAX_REQUIREMENT_VALUES {
            return Err(check.invalid(
                at("values"),
                format!(
                    "{} values; at most {} are allowed",
                    r.values.len(),
                    rules::MAX_REQUIREMENT_VALUES
                ),
            ));
        }
        let op = Operator::parse(&r.operator).map_err(|e| check.requirement(at("operator"), e))?;
        let req =
            Requirement::new(op, &r.values).map_err(|e| check.requirement(at("values"), e))?;
        // A node is labelled with a single `In` value: one that is no label value would
        // launch a node the API server refuses to label.
        if matches!(op, Operator::In | Operator::NotIn) {
            if let Some(why) = r.values.iter().find_map(|v| syntax::label_value(v)) {
                return Err(check.invalid(at("values"), why));
            }
        }
        if labels::normalize(&r.key) == labels::CAPACITY_TYPE {
            if let Some(v) = r
                .values
                .iter()
                .find(|v| !matches!(v.as_str(), "spot" | "on-demand"))
            {
                return Err(check.invalid(
                    at("values"),
                    format!("capacity type {v:?} is neither spot nor on-demand"),
                ));
            }
        }
        out.add(&r.key, req);
    }
    Ok(out)
}

fn convert_taints(
    check: &Check,
    prefix: &str,
    list: &[Taint],
) -> Result<Vec<joiner_core::Taint>, ApiError> {
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            if t.key.is_empty() {
                return Err(check.invalid(format!("{prefix}[{i}].key"), "taint key is empty"));
            }
            if let Some(why) = syntax::qualified_name(&t.key) {
                return Err(check.invalid(format!("{prefix}[{i}].key"), why));
            }
            if let Some(why) = t.value.as_deref().and_then(syntax::label_value) {
                return Err(check.invalid(format!("{prefix}[{i}].value"), why));
            }
            let effect = Effect::parse(&t.effect).ok_or_else(|| {
                check.invalid(
                    format!("{prefix}[{i}].effect"),
                    format!(
                        "unknown effect {:?} (expected NoSchedule, PreferNoSchedule or NoExecute)",
                        t.effect
                    ),
                )
            })?;
            Ok(joiner_core::Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect,
            })
        })
        .collect()
}

/// Validates `spec.kubeletConfiguration` and reads what changes the nodes' allocatable.
/// Whether `image` reads as a container image reference (`registry/path:tag` or `@digest`):
/// the characters references use, starting with a letter or digit, at most 512 long. The warm
/// user data pulls it by name, so anything else is refused here rather than on the node.
fn image_reference(image: &str) -> Result<(), String> {
    let starts_well = image
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-/:@".contains(c);
    if !starts_well || image.len() > 512 || !image.chars().all(allowed) {
        return Err(format!(
            "{image:?} is not an image reference (registry/repository:tag or @sha256:digest)"
        ));
    }
    Ok(())
}

/// `spec.warmPool`: a size that is a count or `auto`, a state the pool knows, a premium that
/// is a percentage, and names that could be instance types and zones.
fn warm_pool(check: &Check, w: &crate::WarmPool) -> Result<(), ApiError> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match &w.size {
        Some(IntOrString::Int(n)) if *n < 0 => {
            return Err(check.invalid(
                "spec.warmPool.size",
                format!("must not be negative, got {n}"),
            ))
        }
        Some(IntOrString::Int(n)) if *n > 1000 => {
            return Err(check.invalid("spec.warmPool.size", format!("{n} is more than 1000")))
        }
        Some(IntOrString::String(s)) if s != "auto" => {
            return Err(check.invalid(
                "spec.warmPool.size",
                format!("{s:?} is neither a count nor \"auto\""),
            ))
        }
        _ => {}
    }
    if let Some(m) = w.max_size.filter(|m| !(0..=1000).contains(m)) {
        return Err(check.invalid(
            "spec.warmPool.maxSize",
            format!("must be 0 to 1000, got {m}"),
        ));
    }
    if let (Some(IntOrString::Int(n)), Some(m)) = (&w.size, w.max_size) {
        if m < *n {
            return Err(check.invalid(
                "spec.warmPool.maxSize",
                rules::max_size_below_size(m.into(), (*n).into()),
            ));
        }
    }
    if let Some(state) = w.state.as_deref() {
        if !matches!(state, "Stopped" | "Hibernated" | "Running") {
            return Err(check.invalid(
                "spec.warmPool.state",
                format!("unknown state {state:?} (expected Stopped, Hibernated or Running)"),
            ));
        }
    }
    if let Some(p) = w.max_price_premium.as_deref() {
        let ok = p
            .strip_suffix('%')
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n <= 999);
        if !ok {
            return Err(check.invalid(
                "spec.warmPool.maxPricePremium",
                format!("{p:?} is not a percentage such as \"25%\""),
            ));
        }
    }
    for (i, image) in w.pre_pull_images.iter().enumerate() {
        if let Err(why) = image_reference(image) {
            return Err(check.invalid(format!("spec.warmPool.prePullImages[{i}]"), why));
        }
    }
    for (i, t) in w.instance_types.iter().enumerate() {
        if t.is_empty() || !t.contains('.') || t.chars().any(char::is_whitespace) {
            return Err(check.invalid(
                format!("spec.warmPool.instanceTypes[{i}]"),
                format!("{t:?} is not an instance type name (family.size, e.g. m6i.large)"),
            ));
        }
    }
    for (i, z) in w.zones.iter().enumerate() {
        let why = if z.is_empty() {
            Some("a zone name is required".to_string())
        } else {
            crate::syntax::label_value(z)
        };
        if let Some(why) = why {
            return Err(check.invalid(format!("spec.warmPool.zones[{i}]"), why));
        }
    }
    Ok(())
}

fn kubelet_settings(check: &Check, k: &KubeletConfiguration) -> Result<KubeletSettings, ApiError> {
    const P: &str = "spec.kubeletConfiguration";
    for (leaf, v) in [("maxPods", k.max_pods), ("podsPerCore", k.pods_per_core)] {
        if let Some(v) = v.filter(|v| *v <= 0) {
            return Err(check.invalid(format!("{P}.{leaf}"), format!("must be positive, got {v}")));
        }
    }
    if let Some(v) = k.eviction_max_pod_grace_period.filter(|v| *v < 0) {
        return Err(check.invalid(
            format!("{P}.evictionMaxPodGracePeriod"),
            format!("must not be negative, got {v}"),
        ));
    }
    let system_reserved = reserved(check, &format!("{P}.systemReserved"), &k.system_reserved)?;
    let kube_reserved = reserved(check, &format!("{P}.kubeReserved"), &k.kube_reserved)?;
    let mut thresholds = eviction(check, &format!("{P}.evictionHard"), &k.eviction_hard)?;
    thresholds.extend(eviction(
        check,
        &format!("{P}.evictionSoft"),
        &k.eviction_soft,
    )?);
    for signal in k.eviction_soft.keys() {
        if !k.eviction_soft_grace_period.contains_key(signal) {
            return Err(check.invalid(
                map_field(&format!("{P}.evictionSoftGracePeriod"), signal),
                rules::soft_without_grace(signal),
            ));
        }
    }
    for (signal, period) in &k.eviction_soft_grace_period {
        let field = map_field(&format!("{P}.evictionSoftGracePeriod"), signal);
        if !k.eviction_soft.contains_key(signal) {
            return Err(check.invalid(field, rules::grace_without_soft(signal)));
        }
        if duration::parse_seconds(period).is_none() {
            return Err(check.invalid(
                field,
                format!("invalid duration {period:?} (expected e.g. 1m30s)"),
            ));
        }
    }
    for (leaf, v) in [
        (
            "imageGCHighThresholdPercent",
            k.image_gc_high_threshold_percent,
        ),
        (
            "imageGCLowThresholdPercent",
            k.image_gc_low_threshold_percent,
        ),
    ] {
        if let Some(v) = v.filter(|v| !(0..=100).contains(v)) {
            return Err(check.invalid(format!("{P}.{leaf}"), format!("{v} is outside 0–100")));
        }
    }
    if let (Some(hi), Some(lo)) = (
        k.image_gc_high_threshold_percent,
        k.image_gc_low_threshold_percent,
    ) {
        if lo >= hi {
            return Err(check.invalid(
                format!("{P}.imageGCLowThresholdPercent"),
                rules::gc_low_not_below_high(lo.into(), hi.into()),
            ));
        }
    }
    let signal = |name: &str| {
        thresholds
            .iter()
            .filter(|(s, _)| s == name)
            .map(|(_, t)| *t)
            .collect()
    };
    Ok(KubeletSettings {
        max_pods: k.max_pods.map(i64::from),
        pods_per_core: k.pods_per_core.map(i64::from),
        kube_reserved,
        system_reserved,
        eviction_memory: signal("memory.available"),
        eviction_nodefs: signal("nodefs.available"),
        ephemeral_volume: None,
    })
}

/// Validates a reservation map and reads its cpu, memory and ephemeral-storage amounts.
fn reserved(
    check: &Check,
    prefix: &str,
    map: &BTreeMap<String, Quantity>,
) -> Result<Reserved, ApiError> {
    let mut out = Reserved::default();
    for (name, q) in map {
        let field = map_field(prefix, name);
        if !RESERVABLE.contains(&name.as_str()) {
            return Err(check.invalid(field, rules::not_reservable(name)));
        }
        let parsed = if name == "cpu" {
            quantity::parse_milli(&q.0)
        } else {
            quantity::parse_units(&q.0)
        };
        let amount = parsed.map_err(|e| check.quantity(field, e))?;
        match name.as_str() {
            "cpu" => out.cpu = Some(amount),
            "memory" => out.memory = Some(amount),
            "ephemeral-storage" => out.ephemeral_storage = Some(amount),
            _ => {}
        }
    }
    Ok(out)
}

/// Validates an eviction threshold map and reads each threshold by signal.
fn eviction(
    check: &Check,
    prefix: &str,
    map: &BTreeMap<String, String>,
) -> Result<Vec<(String, Threshold)>, ApiError> {
    let mut out = Vec::new();
    for (signal, value) in map {
        let field = map_field(prefix, signal);
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            return Err(check.invalid(field, rules::unknown_signal(signal)));
        }
        let threshold = if let Some(p) = value.trim().strip_suffix('%') {
            match p.trim().parse::<f64>() {
                Ok(v) if (0.0..=100.0).contains(&v) => Threshold::Percent(v),
                _ => return Err(check.invalid(field, format!("invalid percentage {value:?}"))),
            }
        } else {
            Threshold::Bytes(quantity::parse_units(value).map_err(|e| check.quantity(field, e))?)
        };
        out.push((signal.clone(), threshold));
    }
    Ok(out)
}

impl Provisioner {
    /// The Provisioner's disruption settings as the planner reads them (methods, policy,
    /// thresholds, budgets with their windows); the same checks as [`Provisioner::to_core`].
    pub fn disruption_settings(
        &self,
    ) -> Result<joiner_core::disruption::DisruptionSettings, ApiError> {
        settings::disruption(&Check::new("Provisioner", self.name()), &self.spec)
    }

    /// True when the Provisioner asks for its nodes to be replaced on a spot rebalance
    /// recommendation (`spec.interruption.rebalance: Replace`); an invalid value reads as the
    /// default (`Notify`) after validation refused it.
    pub fn rebalance_replaces(&self) -> bool {
        settings::rebalance_replaces(&Check::new("Provisioner", self.name()), &self.spec)
            .unwrap_or(false)
    }
}

impl NodeTemplate {
    /// Validates the template, so a launch never fails on a value that could have been
    /// rejected when the manifest was read.
    pub fn validate(&self) -> Result<(), ApiError> {
        let check = Check::new("NodeTemplate", self.name());
        check.named()?;
        let spec = &self.spec;
        for (field, selector) in [
            ("spec.subnetSelector", &spec.subnet_selector),
            ("spec.securityGroupSelector", &spec.security_group_selector),
        ] {
            if selector.is_empty() {
                return Err(check.invalid(field, rules::SELECTOR_REQUIRED));
            }
            if selector.contains_key("") {
                return Err(check.invalid(field, "selector key is empty"));
            }
        }
        if spec.tags.len() > crate::tag_rules::MAX_TAGS {
            return Err(check.invalid(
                "spec.tags",
                format!(
                    "{} tags, at most {} are allowed",
                    spec.tags.len(),
                    crate::tag_rules::MAX_TAGS
                ),
            ));
        }
        for (key, value) in &spec.tags {
            let field = map_field("spec.tags", key);
            if crate::tag_rules::reserved_tag(key).is_some() {
                return Err(check.invalid(field, crate::tag_rules::refusal(key)));
            }
            if key.is_empty() || key.chars().count() > 128 {
                return Err(check.invalid(field, "a tag key has 1–128 characters"));
            }
            if value.chars().count() > 256 {
                return Err(check.invalid(field, "a tag value has at most 256 characters"));
            }
        }
        if spec.ami_selector.contains_key("") {
            return Err(check.invalid("spec.amiSelector", "selector key is empty"));
        }
        if self.ami_family() == AmiFamily::Custom && spec.ami_selector.is_empty() {
            return Err(check.invalid("spec.amiSelector", rules::CUSTOM_NEEDS_SELECTOR));
        }

        let m = &spec.metadata_options;
        const MO: &str = "spec.metadataOptions";
        for (leaf, v) in [
            ("httpEndpoint", &m.http_endpoint),
            ("httpProtocolIPv6", &m.http_protocol_ipv6),
        ] {
            if !matches!(v.as_str(), "enabled" | "disabled") {
                return Err(check.invalid(
                    format!("{MO}.{leaf}"),
                    format!("{v:?} is neither enabled nor disabled"),
                ));
            }
        }
        if !(1..=64).contains(&m.http_put_response_hop_limit) {
            return Err(check.invalid(
                format!("{MO}.httpPutResponseHopLimit"),
                format!("{} is outside 1–64", m.http_put_response_hop_limit),
            ));
        }
        if !matches!(m.http_tokens.as_str(), "required" | "optional") {
            return Err(check.invalid(
                format!("{MO}.httpTokens"),
                format!("{:?} is neither required nor optional", m.http_tokens),
            ));
        }

        if spec.block_device_mappings.len() > rules::MAX_BLOCK_DEVICES {
            return Err(check.invalid(
                "spec.blockDeviceMappings",
                format!(
                    "{} mappings, at most {} are allowed",
                    spec.block_device_mappings.len(),
                    rules::MAX_BLOCK_DEVICES
                ),
            ));
        }
        for (i, b) in spec.block_device_mappings.iter().enumerate() {
            let at = |leaf: &str| format!("spec.blockDeviceMappings[{i}].{leaf}");
            if b.device_name.is_empty() {
                return Err(check.invalid(at("deviceName"), "a device name is required"));
            }
            let Some(ebs) = &b.ebs else { continue };
            let volume_type = ebs.volume_type.as_deref().unwrap_or("gp3");
            if !VOLUME_TYPES.contains(&volume_type) {
                return Err(check.invalid(
                    at("ebs.volumeType"),
                    format!("unknown volume type {volume_type:?}"),
                ));
            }
            if let Some(size) = &ebs.volume_size {
                let bytes = quantity::parse_units(&size.0)
                    .map_err(|e| check.quantity(at("ebs.volumeSize"), e))?;
                if !(1 << 30..=64 << 40).contains(&bytes) {
                    return Err(check.invalid(
                        at("ebs.volumeSize"),
                        format!("{:?} is outside 1Gi–64Ti", size.0),
                    ));
                }
            }
            if let Some(iops) = ebs.iops {
                if !matches!(volume_type, "io1" | "io2" | "gp3") {
                    return Err(check.invalid(at("ebs.iops"), rules::no_iops(volume_type)));
                }
                if iops <= 0 {
                    return Err(
                        check.invalid(at("ebs.iops"), format!("must be positive, got {iops}"))
                    );
                }
            }
            if let Some(t) = ebs.throughput {
                if volume_type != "gp3" {
                    return Err(
                        check.invalid(at("ebs.throughput"), rules::no_throughput(volume_type))
                    );
                }
                if t <= 0 {
                    return Err(
                        check.invalid(at("ebs.throughput"), format!("must be positive, got {t}"))
                    );
                }
            }
        }
        Ok(())
    }
}

mod settings;
#[cfg(test)]
mod tests;
