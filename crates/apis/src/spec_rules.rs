//! The cross-field rules of validation that a CEL rule can say, as `x-kubernetes-validations`
//! on the CRDs: `kubectl apply` refuses what the controller would refuse at runtime, in the
//! controller's words. Each message here is also the one validation.rs returns (its `reason`),
//! so the two cannot drift apart; `tests` runs every rule through a CEL interpreter beside the
//! controller's check.
//!
//! The API server estimates a rule's cost from the bounds of the lists and maps it runs over,
//! and refuses a CRD whose rules could cost too much. Rules here run on single objects (a
//! budget, a volume, a requirement: their lists carry `maxItems`) or over maps whose key set is
//! bounded by `maxProperties`, and use `has`, `size`, `in` and string concatenation only.
//!
//! Rules the controller keeps to itself: anything needing AWS (subnets, AMIs, instance types),
//! another object (the NodeTemplate a Provisioner names), or a parse CEL cannot do exactly
//! (cron fields, Go durations, quantities' ranges).

use serde_json::{json, Value};

/// `amiFamily: Custom` without an `amiSelector`.
pub const CUSTOM_NEEDS_SELECTOR: &str =
    "amiFamily Custom needs an amiSelector (there are no default AMIs)";
/// An empty subnet or security-group selector.
pub const SELECTOR_REQUIRED: &str = "at least one tag or aws-ids entry is required";
/// `ttlSecondsAfterEmpty` beside enabled consolidation.
pub const TTL_AFTER_EMPTY_WITH_CONSOLIDATION: &str =
    "cannot be set when consolidation is enabled (consolidation removes empty nodes)";
/// A budget window without its length.
pub const SCHEDULE_NEEDS_DURATION: &str = "a schedule needs a duration";
/// A budget window length without its schedule.
pub const DURATION_NEEDS_SCHEDULE: &str = "a duration needs a schedule";
/// Most block device mappings a NodeTemplate may list (Karpenter's bound).
pub const MAX_BLOCK_DEVICES: usize = 50;

/// `x-kubernetes-validations` on a NodeTemplate's `spec`.
pub fn node_template_rules() -> Value {
    let mut rules = vec![json!({
        "rule": "!has(self.amiFamily) || self.amiFamily != 'Custom' || (has(self.amiSelector) && size(self.amiSelector) > 0)",
        "message": format!("spec.amiSelector: {CUSTOM_NEEDS_SELECTOR}"),
        "fieldPath": ".amiSelector",
    })];
    for field in ["subnetSelector", "securityGroupSelector"] {
        rules.push(json!({
            "rule": format!("has(self.{field}) && size(self.{field}) > 0"),
            "message": format!("spec.{field}: {SELECTOR_REQUIRED}"),
            "fieldPath": format!(".{field}"),
        }));
    }
    Value::Array(rules)
}

/// `x-kubernetes-validations` on a Provisioner's `spec`.
pub fn provisioner_rules() -> Value {
    let mut rules = vec![json!({
        "rule": "!has(self.ttlSecondsAfterEmpty) || !has(self.consolidation) || !has(self.consolidation.enabled) || !self.consolidation.enabled",
        "message": format!("spec.ttlSecondsAfterEmpty: {TTL_AFTER_EMPTY_WITH_CONSOLIDATION}"),
        "fieldPath": ".ttlSecondsAfterEmpty",
    })];
    if let Value::Array(more) = label_requirement_rules() {
        rules.extend(more);
    }
    Value::Array(rules)
}

/// Most values one requirement may list: a bound for the cost of the rule comparing labels
/// with requirements (an instance-type list of every type in a region stays below it).
pub const MAX_REQUIREMENT_VALUES: usize = 1000;

/// The message of a label whose value a requirement on its key refuses, naming the
/// requirement as the manifest writes it.
pub fn label_contradicts(value: &str, key: &str, operator: &str, values: &[String]) -> String {
    let listed = if values.is_empty() {
        String::new()
    } else {
        format!(" [{}]", values.join(", "))
    };
    format!("label value {value:?} contradicts the requirement {key} {operator}{listed}")
}

/// `x-kubernetes-validations` on a Provisioner's `spec`: each label allowed by every
/// requirement on the same key (the nodes carry both, so a contradiction launches nodes no
/// pod selecting either can use). Keys are compared as written; validation also maps
/// deprecated keys to their current names.
pub fn label_requirement_rules() -> Value {
    let ok = "(r.operator == 'In' ? (has(r.values) && self.labels[r.key] in r.values) \
        : r.operator == 'NotIn' ? !(has(r.values) && self.labels[r.key] in r.values) \
        : r.operator == 'Exists' ? true \
        : r.operator == 'DoesNotExist' ? false \
        : (has(r.values) && size(r.values) == 1 \
           && self.labels[r.key].matches('^[-+]?[0-9]+$') && r.values[0].matches('^[-+]?[0-9]+$') \
           && (r.operator == 'Gt' ? int(self.labels[r.key]) > int(r.values[0]) \
               : int(self.labels[r.key]) < int(r.values[0]))))";
    let bad = format!("self.requirements.filter(r, r.key in self.labels && !{ok})[0]");
    json!([{
        "rule": format!("!has(self.labels) || !has(self.requirements) || self.requirements.all(r, !(r.key in self.labels) || {ok})"),
        "message": "spec.labels: a label's value contradicts a requirement on its key",
        "messageExpression": format!(
            "'label value \"' + self.labels[{bad}.key] + '\" contradicts the requirement ' + {bad}.key + ' ' + {bad}.operator + (has({bad}.values) && size({bad}.values) > 0 ? ' [' + {bad}.values.join(', ') + ']' : '')"
        ),
        "fieldPath": ".labels",
    }])
}

/// `x-kubernetes-validations` on one disruption budget: a window is a schedule and a
/// duration together.
pub fn budget_rules() -> Value {
    json!([
        {
            "rule": "!has(self.schedule) || has(self.duration)",
            "message": SCHEDULE_NEEDS_DURATION,
            "fieldPath": ".duration",
        },
        {
            "rule": "has(self.schedule) || !has(self.duration)",
            "message": DURATION_NEEDS_SCHEDULE,
            "fieldPath": ".schedule",
        },
    ])
}

/// A budget's `nodes` as validation reads it: a count, or a percentage up to 100.
pub const BUDGET_NODES_PATTERN: &str = r"^\s*([0-9]+|0*(100|[0-9]{1,2})%)\s*$";
/// A budget's reasons.
pub const BUDGET_REASON_PATTERN: &str = r"^(Empty|Drifted|Underutilized)$";

/// The message of a low image-GC threshold not below the high one, as validation words it.
pub fn gc_low_not_below_high(low: i64, high: i64) -> String {
    format!("{low} must be below imageGCHighThresholdPercent {high}")
}

/// The message of a soft eviction threshold without a grace period.
pub fn soft_without_grace(signal: &str) -> String {
    format!("soft eviction threshold {signal} needs a grace period")
}

/// The message of a grace period without a soft eviction threshold.
pub fn grace_without_soft(signal: &str) -> String {
    format!("grace period for {signal}, which has no soft threshold")
}

/// `x-kubernetes-validations` on `spec.kubeletConfiguration`: image GC thresholds in order,
/// soft eviction thresholds and grace periods in pairs.
pub fn kubelet_rules() -> Value {
    let has_grace = "has(self.evictionSoftGracePeriod) && k in self.evictionSoftGracePeriod";
    let has_soft = "has(self.evictionSoft) && k in self.evictionSoft";
    json!([
        {
            "rule": "!has(self.imageGCHighThresholdPercent) || !has(self.imageGCLowThresholdPercent) || self.imageGCLowThresholdPercent < self.imageGCHighThresholdPercent",
            "message": "imageGCLowThresholdPercent must be below imageGCHighThresholdPercent",
            "messageExpression": "string(self.imageGCLowThresholdPercent) + ' must be below imageGCHighThresholdPercent ' + string(self.imageGCHighThresholdPercent)",
            "fieldPath": ".imageGCLowThresholdPercent",
        },
        {
            "rule": format!("!has(self.evictionSoft) || self.evictionSoft.all(k, {has_grace})"),
            "message": "each soft eviction threshold needs a grace period",
            "messageExpression": format!("'soft eviction threshold ' + self.evictionSoft.filter(k, !({has_grace}))[0] + ' needs a grace period'"),
            "fieldPath": ".evictionSoftGracePeriod",
        },
        {
            "rule": format!("!has(self.evictionSoftGracePeriod) || self.evictionSoftGracePeriod.all(k, {has_soft})"),
            "message": "each grace period needs a soft eviction threshold",
            "messageExpression": format!("'grace period for ' + self.evictionSoftGracePeriod.filter(k, !({has_soft}))[0] + ', which has no soft threshold'"),
            "fieldPath": ".evictionSoftGracePeriod",
        },
    ])
}

/// The message of a map key outside `allowed`, as validation words it for `what`.
fn key_rule(allowed: &[&str], message: &str, message_expression: String) -> Value {
    let list = allowed
        .iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    json!([{
        "rule": format!("self.all(k, k in [{list}])"),
        "message": message,
        "messageExpression": message_expression.replace("LIST", &list),
    }])
}

/// Resources kubeReserved and systemReserved may name.
pub const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// The message of a reservation of something not reservable.
pub fn not_reservable(name: &str) -> String {
    format!("cannot reserve {name:?} (expected cpu, memory, ephemeral-storage or pid)")
}

/// Schema additions of `kubeReserved` and `systemReserved`: only [`RESERVABLE`] keys.
pub fn reserved_rules() -> Value {
    key_rule(
        RESERVABLE,
        "only cpu, memory, ephemeral-storage and pid can be reserved",
        "'cannot reserve \"' + self.filter(k, !(k in [LIST]))[0] + '\" (expected cpu, memory, ephemeral-storage or pid)'".into(),
    )
}

/// Eviction signals the kubelet knows.
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

/// The message of an unknown eviction signal.
pub fn unknown_signal(signal: &str) -> String {
    format!("unknown eviction signal {signal:?}")
}

/// Schema additions of the eviction threshold maps: only [`EVICTION_SIGNALS`] keys.
pub fn eviction_rules() -> Value {
    key_rule(
        EVICTION_SIGNALS,
        "unknown eviction signal",
        "'unknown eviction signal \"' + self.filter(k, !(k in [LIST]))[0] + '\"'".into(),
    )
}

/// The message of a warm pool whose `maxSize` is below its count.
pub fn max_size_below_size(max_size: i64, size: i64) -> String {
    format!("{max_size} is below size {size}")
}

/// `x-kubernetes-validations` on `spec.warmPool`: `maxSize` is not below a counted `size`
/// (`size` is an int-or-string: `auto` is the one string validation lets through).
pub fn warm_pool_rules() -> Value {
    json!([{
        "rule": "!has(self.size) || !has(self.maxSize) || string(self.size) == 'auto' || self.maxSize >= int(self.size)",
        "message": "maxSize is below size",
        "messageExpression": "string(self.maxSize) + ' is below size ' + string(self.size)",
        "fieldPath": ".maxSize",
    }])
}

/// The message of iops on a volume type without them.
pub fn no_iops(volume_type: &str) -> String {
    format!("volume type {volume_type} takes no iops")
}

/// The message of throughput on a volume type other than gp3.
pub fn no_throughput(volume_type: &str) -> String {
    format!("volume type {volume_type} takes no throughput (gp3 only)")
}

/// `x-kubernetes-validations` on an EBS volume: iops only on io1, io2 and gp3 (the default
/// type), throughput only on gp3.
pub fn ebs_rules() -> Value {
    json!([
        {
            "rule": "!has(self.iops) || !has(self.volumeType) || self.volumeType in ['io1', 'io2', 'gp3']",
            "message": "iops needs volume type io1, io2 or gp3",
            "messageExpression": "'volume type ' + self.volumeType + ' takes no iops'",
            "fieldPath": ".iops",
        },
        {
            "rule": "!has(self.throughput) || !has(self.volumeType) || self.volumeType == 'gp3'",
            "message": "throughput needs volume type gp3",
            "messageExpression": "'volume type ' + self.volumeType + ' takes no throughput (gp3 only)'",
            "fieldPath": ".throughput",
        },
    ])
}

/// `x-kubernetes-validations` on a Provisioner's `requirements` list: the value count each
/// operator takes, in the words of `joiner_core::RequirementError`. On the list (bounded at
/// 100), not on the requirement type: NodeClaims share the type, and their list is unbounded,
/// which would multiply a per-item rule's estimated cost past the API server's budget.
pub fn requirement_rules() -> Value {
    let count = "(has(x.values) ? size(x.values) : 0)";
    let rule = |ops: &str, ok: String, message: &str, words: &str| {
        let holds = format!("!(x.operator in [{ops}]) || {ok}");
        json!({
            "rule": format!("self.all(x, {holds})"),
            "message": message,
            "messageExpression": format!("'operator ' + self.filter(x, !({holds}))[0].operator + ' {words}'"),
        })
    };
    json!([
        rule(
            "'In', 'NotIn'",
            format!("{count} > 0"),
            "In and NotIn need at least one value",
            "needs at least one value"
        ),
        rule(
            "'Exists', 'DoesNotExist'",
            format!("{count} == 0"),
            "Exists and DoesNotExist take no values",
            "takes no values"
        ),
        rule(
            "'Gt', 'Lt'",
            format!("{count} == 1"),
            "Gt and Lt need exactly one value",
            "needs exactly one value"
        ),
    ])
}

#[cfg(test)]
mod tests;
