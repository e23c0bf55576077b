//! The tag keys a NodeTemplate may not set in `spec.tags`, and the CEL rule that refuses them at
//! `kubectl apply`.
//!
//! Ownership of an instance or launch template is read from its tags
//! (`kubernetes.io/cluster/<cluster>=owned` with `joiner.sh/provisioner-name`), so a user tag
//! in those namespaces could hand this cluster's nodes to another cluster's joiner (which would
//! then collect and terminate them), or pass the warm-pool guards (`joiner.sh/warm-pool`).
//! Karpenter refuses the same namespaces in an EC2NodeClass. The controller checks the same
//! list ([`reserved_tag`]) for objects written before the rule existed, and the launch path
//! refuses them again, so no path from a manifest to EC2 carries one.
//!
//! Keys are compared without regard to ASCII case: IAM compares the tag keys of its
//! `aws:ResourceTag/...` conditions that way, so `Kubernetes.io/cluster/x` would count as the
//! cluster tag to a policy even though EC2 stores it as another key.

use serde_json::{json, Value};

/// Prefixes of tag keys reserved for ownership and for the autoscalers' own records.
pub const RESERVED_TAG_PREFIXES: &[&str] = &[
    "kubernetes.io/cluster/",
    "joiner.sh/",
    "karpenter.sh/",
    "karpenter.k8s.aws/",
];

/// Tag keys reserved as a whole.
pub const RESERVED_TAG_KEYS: &[&str] = &["eks:eks-cluster-name"];

/// Most tags a NodeTemplate may carry: EC2 takes 50 per resource, and joiner adds its own.
pub const MAX_TAGS: usize = 40;

/// The reserved namespace (a prefix or a whole key) `key` falls in, or `None` when a
/// NodeTemplate may set it.
pub fn reserved_tag(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    RESERVED_TAG_PREFIXES
        .iter()
        .find(|p| lower.starts_with(*p))
        .or_else(|| RESERVED_TAG_KEYS.iter().find(|k| lower == **k))
        .copied()
}

/// The condition on one key `var` that [`reserved_tag`] accepts.
fn allowed(var: &str) -> String {
    let mut parts: Vec<String> = RESERVED_TAG_PREFIXES
        .iter()
        .map(|p| format!("!{var}.lowerAscii().startsWith({p:?})"))
        .collect();
    parts.extend(
        RESERVED_TAG_KEYS
            .iter()
            .map(|k| format!("{var}.lowerAscii() != {k:?}")),
    );
    parts.join(" && ")
}

/// The reserved namespaces, as a person reads them.
fn reserved_list() -> String {
    let mut reserved: Vec<String> = RESERVED_TAG_PREFIXES
        .iter()
        .map(|p| format!("{p}*"))
        .collect();
    reserved.extend(RESERVED_TAG_KEYS.iter().map(|k| k.to_string()));
    reserved.join(", ")
}

/// Why a reserved key is refused, after the key: shared by the rule and the controller.
pub fn refusal(key: &str) -> String {
    format!("tag {key} is reserved ({}): {WHY}", reserved_list())
}

const WHY: &str = "ownership tags would let another cluster or autoscaler claim these nodes";

/// `x-kubernetes-validations` on `spec.tags`: every key outside the reserved namespaces; the
/// message names the first refused key.
pub fn tag_map_rules() -> Value {
    let ok = allowed("k");
    json!([{
        "rule": format!("self.all(k, {ok})"),
        "message": format!("spec.tags: tag keys {} are reserved: {WHY}", reserved_list()),
        "messageExpression": format!(
            "'spec.tags: tag ' + self.filter(k, !({ok}))[0] + {:?}",
            format!(" is reserved ({}): {WHY}", reserved_list())
        ),
    }])
}

/// Schema of `spec.tags`: string values, at most [`MAX_TAGS`] entries, no reserved key.
pub fn tag_map_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string", "maxLength": 256},
        "maxProperties": MAX_TAGS,
        "x-kubernetes-validations": tag_map_rules(),
    })
}

#[cfg(test)]
mod tests {
    //! The rule as the generated CRD carries it, run by a CEL interpreter (with the Kubernetes
    //! strings library's `lowerAscii`), refuses exactly the keys the controller refuses, and its
    //! message names the key.

    use std::collections::HashMap;

    use cel::Program;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ValidationRule;

    use super::reserved_tag;

    const KEYS: &[(&str, bool)] = &[
        ("team", true),
        ("Name", true),
        ("kubernetes.io/role/internal-elb", true),
        ("kubernetes.io/cluster/other", false),
        ("Kubernetes.IO/Cluster/other", false),
        ("kubernetes.io/cluster/", false),
        ("joiner.sh/warm-pool", false),
        ("joiner.sh/provisioner-name", false),
        ("joiner.shx/team", true),
        ("karpenter.sh/nodepool", false),
        ("karpenter.k8s.aws/ec2nodeclass", false),
        ("eks:eks-cluster-name", false),
        ("eks:nodegroup-name", true),
        ("example.com/joiner.sh/x", true),
    ];

    fn rules() -> Vec<ValidationRule> {
        let tags = crate::crds::spec_field("NodeTemplate", "tags");
        assert_eq!(tags.max_properties, Some(super::MAX_TAGS as i64));
        tags.x_kubernetes_validations.expect("rules")
    }

    fn run(expr: &str, key: &str) -> cel::Value {
        let program = Program::compile(expr).expect("rule compiles");
        let map: HashMap<String, String> = HashMap::from([(key.to_string(), "v".to_string())]);
        let ctx = crate::cel_library::context(cel::Value::from(map));
        program.execute(&ctx).expect("rule runs")
    }

    #[test]
    fn the_rule_refuses_exactly_the_reserved_keys() {
        let rules = rules();
        for (key, allowed) in KEYS {
            assert_eq!(reserved_tag(key).is_none(), *allowed, "controller: {key}");
            for rule in &rules {
                assert_eq!(
                    run(&rule.rule, key),
                    cel::Value::Bool(*allowed),
                    "{key}: {}",
                    rule.rule
                );
            }
        }
    }

    #[test]
    fn the_message_names_the_refused_key() {
        for rule in rules() {
            let expr = rule.message_expression.expect("messageExpression");
            let cel::Value::String(msg) = run(&expr, "kubernetes.io/cluster/other") else {
                panic!("message is a string");
            };
            assert!(
                msg.starts_with("spec.tags: tag kubernetes.io/cluster/other is reserved"),
                "{msg}"
            );
        }
    }
}
