//! Validation rules (CEL, `x-kubernetes-validations`) for the label keys a Provisioner sets
//! and requires, so `kubectl apply` refuses what the controller would: labels in restricted
//! domains (`node-role.kubernetes.io/worker` keeps the kubelet from registering) and the
//! labels joiner sets itself.
//!
//! The rules are built from the same lists as the controller's checks
//! ([`crate::syntax::restricted_domain`], `crate::syntax::JOINER_SET_LABELS`), and use only
//! what Kubernetes' own CRDs in the field use (`all`, `in`, `endsWith` and the Kubernetes regex
//! library's `find`) on collections bounded by `maxItems`/`maxProperties`, so the API server's
//! cost estimate stays within its budget.

use schemars::{json_schema, Schema, SchemaGenerator};
use serde_json::{json, Value};

use crate::syntax::{
    allowed_keys, domain_of, within as syntax_within, DOMAIN_EXCEPTIONS, JOINER_SET_LABELS,
    LABEL_VALUE_PATTERN, RESTRICTED_DOMAINS,
};

/// Most labels (and requirements) a Provisioner may carry: bounds the rules' cost.
pub const MAX_LABELS: usize = 100;

/// The domain of the key named `var` with a dot before and a slash after (`.kubernetes.io/`;
/// `.` for a key without a domain), so one `endsWith` tests "this domain or a subdomain".
fn domain(var: &str) -> String {
    format!(r#"("." + {var}.find("^[^/]+/"))"#)
}

fn within(var: &str, d: &str) -> String {
    format!("{}.endsWith({:?})", domain(var), format!(".{d}/"))
}

fn quoted(items: &[&str]) -> String {
    let q: Vec<String> = items.iter().map(|k| format!("{k:?}")).collect();
    format!("[{}]", q.join(", "))
}

/// One condition per restricted domain on the key named `var`, with its message: the key
/// is outside the domain, one of the keys nodes carry anyway, or under an exception.
fn domain_conditions(var: &str) -> Vec<(String, String)> {
    RESTRICTED_DOMAINS
        .iter()
        .map(|d| {
            let mut alternatives = Vec::new();
            let allowed: Vec<&str> = allowed_keys()
                .filter(|k| domain_of(k).is_some_and(|kd| syntax_within(kd, d)))
                .collect();
            if !allowed.is_empty() {
                alternatives.push(format!("{var} in {}", quoted(&allowed)));
            }
            for e in DOMAIN_EXCEPTIONS.iter().filter(|e| syntax_within(e, d)) {
                alternatives.push(within(var, e));
            }
            alternatives.push(format!("!{}", within(var, d)));
            (
                alternatives.join(" || "),
                format!("label domain {d:?} is restricted: use a label of your own domain"),
            )
        })
        .collect()
}

fn joiner_set_condition(var: &str) -> (String, String) {
    (
        format!("!({var} in {})", quoted(JOINER_SET_LABELS)),
        format!(
            "labels {} are set by joiner on the nodes it launches",
            JOINER_SET_LABELS.join(", ")
        ),
    )
}

/// `x-kubernetes-validations` entries requiring `condition` of every element `x`.
fn for_all(conditions: Vec<(String, String)>) -> Value {
    Value::Array(
        conditions
            .into_iter()
            .map(|(c, message)| json!({"rule": format!("self.all(x, {c})"), "message": message}))
            .collect(),
    )
}

/// The rules on a Provisioner's `labels` map (its keys).
pub fn label_map_rules() -> Value {
    let mut c = domain_conditions("x");
    c.push(joiner_set_condition("x"));
    for_all(c)
}

/// The rules on a Provisioner's `requirements` list (each requirement's key).
pub fn requirement_list_rules() -> Value {
    let mut c = domain_conditions("x.key");
    c.push(joiner_set_condition("x.key"));
    let mut rules = for_all(c);
    if let (Value::Array(all), Value::Array(counts)) =
        (&mut rules, crate::spec_rules::requirement_rules())
    {
        all.extend(counts);
    }
    rules
}

/// Schema of a Provisioner's `labels`: label values, at most [`MAX_LABELS`] entries, keys
/// outside the restricted domains and not set by joiner.
pub fn label_map_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "type": "string",
            "maxLength": 63,
            "pattern": LABEL_VALUE_PATTERN,
        },
        "maxProperties": MAX_LABELS,
        "x-kubernetes-validations": label_map_rules(),
    })
}

#[cfg(test)]
mod tests {
    //! The rules as the generated CRD carries them, run by a CEL interpreter (with the
    //! Kubernetes regex library's `find`), refuse exactly the keys the controller refuses for
    //! their domain or for being joiner's own.

    use std::collections::HashMap;
    use std::sync::Arc;

    use cel::Program;

    use crate::syntax::{restricted_domain, JOINER_SET_LABELS};

    const KEYS: &[&str] = &[
        "team",
        "example.com/team",
        "karpenter.k8s.aws/instance-family",
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
        "beta.kubernetes.io/arch",
        "kubernetes.io/arch",
        "node.kubernetes.io/instance-type",
        "node.kubernetes.io/lifecycle",
        "pool.node.kubernetes.io/x",
        "kubelet.kubernetes.io/x",
        "node-restriction.kubernetes.io/team",
        "examplek8s.io/x",
        "myjoiner.sh",
        "kops.k8s.io/instancegroup",
        "karpenter.sh/capacity-type",
        "node-role.kubernetes.io/worker",
        "kubernetes.io/role",
        "kubernetes.io",
        "mykubernetes.io/x",
        "example.k8s.io/x",
        "karpenter.sh/nodepool",
        "karpenter.sh/provisioner-name",
        "joiner.sh/team",
        "joiner.sh/provisioner-name",
        "joiner.sh/nodeclaim",
        "kubernetes.io/hostname",
    ];

    fn controller_accepts(key: &str) -> bool {
        restricted_domain(key).is_none()
            && !JOINER_SET_LABELS.contains(&joiner_core::labels::normalize(key))
    }

    fn rules(field: &str) -> Vec<String> {
        let f = crate::crds::spec_field("Provisioner", field);
        assert_eq!(
            f.max_properties.or(f.max_items),
            Some(100),
            "{field} is bounded"
        );
        f.x_kubernetes_validations
            .as_ref()
            .expect("rules")
            .iter()
            .map(|r| r.rule.clone())
            .collect()
    }

    fn accepted(rules: &[String], value: cel::Value) -> bool {
        rules.iter().all(|rule| {
            let program = Program::compile(rule).expect("rule compiles");
            let ctx = crate::cel_library::context(value.clone());
            match program.execute(&ctx) {
                Ok(cel::Value::Bool(b)) => b,
                other => panic!("{rule}: {other:?}"),
            }
        })
    }

    #[test]
    fn label_rules_agree_with_the_controller() {
        let rules = rules("labels");
        for key in KEYS {
            let map: HashMap<String, String> = HashMap::from([(key.to_string(), "v".into())]);
            let value = cel::Value::from(map);
            assert_eq!(accepted(&rules, value), controller_accepts(key), "{key}");
        }
        let none = cel::Value::from(HashMap::<String, String>::new());
        assert!(accepted(&rules, none), "no labels");
    }

    #[test]
    fn requirement_rules_agree_with_the_controller() {
        let rules = rules("requirements");
        for key in KEYS {
            let req: HashMap<String, String> = HashMap::from([
                ("key".to_string(), key.to_string()),
                ("operator".into(), "Exists".into()),
            ]);
            let value = cel::Value::List(Arc::new(vec![cel::Value::from(req)]));
            assert_eq!(accepted(&rules, value), controller_accepts(key), "{key}");
        }
    }
}
