//! Every rule, as the generated CRD carries it, run by a CEL interpreter the way the API server
//! runs it (each schema node's rules on the value at that node, absent values skipped), agrees
//! with the controller: it refuses exactly the manifests the controller refuses for that rule,
//! and its message is the controller's reason.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::Value;

use crate::node_template::NodeTemplate;
use crate::provisioner::Provisioner;

/// The messages of the rules `value` breaks below `schema` (messageExpression when given).
fn refusals(schema: &JSONSchemaProps, value: &Value, out: &mut Vec<String>) {
    for rule in schema.x_kubernetes_validations.iter().flatten() {
        let ctx = crate::cel_library::context(cel::to_value(value).expect("CEL value"));
        let program =
            cel::Program::compile(&rule.rule).unwrap_or_else(|e| panic!("{}: {e}", rule.rule));
        match program.execute(&ctx) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let message = match &rule.message_expression {
                    Some(expr) => match cel::Program::compile(expr)
                        .expect("messageExpression compiles")
                        .execute(&ctx)
                        .expect("messageExpression runs")
                    {
                        cel::Value::String(s) => s.to_string(),
                        other => panic!("{expr}: {other:?}"),
                    },
                    None => rule.message.clone().expect("a message"),
                };
                out.push(message);
            }
            other => panic!("{}: {other:?} on {value}", rule.rule),
        }
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if let Some(s) = schema.properties.as_ref().and_then(|p| p.get(k)) {
                    refusals(s, v, out);
                } else if let Some(JSONSchemaPropsOrBool::Schema(s)) = &schema.additional_properties
                {
                    refusals(s, v, out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(JSONSchemaPropsOrArray::Schema(s)) = &schema.items {
                for v in items {
                    refusals(s, v, out);
                }
            }
        }
        _ => {}
    }
}

/// The CEL refusals of a spec of `kind` (as JSON).
fn cel_refusals(kind: &str, spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    refusals(&crate::crds::spec_schema(kind), spec, &mut out);
    out
}

fn provisioner(spec: &str) -> Provisioner {
    serde_yaml::from_str(&format!(
        "apiVersion: joiner.sh/v1alpha1\nkind: Provisioner\nmetadata: {{name: p}}\nspec:\n{spec}"
    ))
    .unwrap_or_else(|e| panic!("{spec}: {e}"))
}

fn node_template(spec: &str) -> NodeTemplate {
    serde_yaml::from_str(&format!(
        "apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {{name: t}}\nspec:\n{spec}"
    ))
    .unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// Checks one manifest: the controller's verdict and the rules' agree. `refused` is the
/// controller's reason when it refuses; the rules must then say it (alone or after the field
/// path, for rules on the spec), and must say nothing when it accepts.
fn agree(kind: &str, spec: &str, refused: Option<&str>) {
    let (controller, json) = match kind {
        "Provisioner" => {
            let p = provisioner(spec);
            (
                p.to_core().map(|_| ()),
                serde_json::to_value(&p.spec).expect("json"),
            )
        }
        _ => {
            let t = node_template(spec);
            (t.validate(), serde_json::to_value(&t.spec).expect("json"))
        }
    };
    let cel = cel_refusals(kind, &json);
    match (refused, controller) {
        (None, Ok(())) => assert!(cel.is_empty(), "{spec}: the rules refuse {cel:?}"),
        (Some(reason), Err(e)) => {
            assert_eq!(e.reason(), reason, "{spec}: the controller's reason");
            let with_field = format!("{}: {reason}", e.field());
            assert!(
                cel.iter().any(|m| m == reason || *m == with_field),
                "{spec}: the rules say {cel:?}, the controller {e}"
            );
        }
        (want, got) => panic!("{spec}: expected {want:?}, the controller says {got:?}"),
    }
}

const SELECTORS: &str = "  subnetSelector: {a: b}\n  securityGroupSelector: {a: b}\n";

#[test]
fn node_template_rules_agree_with_the_controller() {
    agree("NodeTemplate", SELECTORS, None);
    agree(
        "NodeTemplate",
        "  securityGroupSelector: {a: b}\n",
        Some(super::SELECTOR_REQUIRED),
    );
    agree(
        "NodeTemplate",
        "  subnetSelector: {a: b}\n  securityGroupSelector: {}\n",
        Some(super::SELECTOR_REQUIRED),
    );
    agree(
        "NodeTemplate",
        &format!("{SELECTORS}  amiFamily: Custom\n"),
        Some(super::CUSTOM_NEEDS_SELECTOR),
    );
    agree(
        "NodeTemplate",
        &format!(
            "{SELECTORS}  amiFamily: Custom\n  amiSelector: {{aws-ids: ami-0123456789abcdef0}}\n"
        ),
        None,
    );
    let volume = |ebs: &str| {
        format!("{SELECTORS}  blockDeviceMappings:\n    - deviceName: /dev/xvda\n      ebs: {{{ebs}}}\n")
    };
    agree(
        "NodeTemplate",
        &volume("volumeSize: 20Gi, iops: 3000"),
        None,
    );
    agree("NodeTemplate", &volume("volumeType: io2, iops: 3000"), None);
    agree(
        "NodeTemplate",
        &volume("volumeType: gp2, iops: 3000"),
        Some(&super::no_iops("gp2")),
    );
    agree("NodeTemplate", &volume("throughput: 250"), None);
    agree(
        "NodeTemplate",
        &volume("volumeType: io1, throughput: 250"),
        Some(&super::no_throughput("io1")),
    );
}

#[test]
fn provisioner_rules_agree_with_the_controller() {
    agree("Provisioner", "  ttlSecondsAfterEmpty: 30\n", None);
    agree(
        "Provisioner",
        "  ttlSecondsAfterEmpty: 30\n  consolidation: {enabled: false}\n",
        None,
    );
    agree(
        "Provisioner",
        "  ttlSecondsAfterEmpty: 30\n  consolidation: {enabled: true}\n",
        Some(super::TTL_AFTER_EMPTY_WITH_CONSOLIDATION),
    );
    let budget = |b: &str| format!("  disruption:\n    budgets:\n      - {{{b}}}\n");
    agree(
        "Provisioner",
        &budget("nodes: \"0\", schedule: \"0 9 * * *\", duration: 8h"),
        None,
    );
    agree(
        "Provisioner",
        &budget("nodes: \"0\", schedule: \"0 9 * * *\""),
        Some(super::SCHEDULE_NEEDS_DURATION),
    );
    agree(
        "Provisioner",
        &budget("nodes: \"0\", duration: 8h"),
        Some(super::DURATION_NEEDS_SCHEDULE),
    );
    let labelled =
        |req: &str| format!("  labels: {{team: a, size: \"8\"}}\n  requirements:\n{req}");
    for (req, refused) in [
        ("    - {key: team, operator: In, values: [a, b]}\n", None),
        (
            "    - {key: team, operator: In, values: [b, c]}\n",
            Some(super::label_contradicts("a", "team", "In", &["b".into(), "c".into()])),
        ),
        (
            "    - {key: team, operator: Exists}\n    - {key: team, operator: NotIn, values: [a]}\n",
            Some(super::label_contradicts("a", "team", "NotIn", &["a".into()])),
        ),
        (
            "    - {key: team, operator: DoesNotExist}\n",
            Some(super::label_contradicts("a", "team", "DoesNotExist", &[])),
        ),
        ("    - {key: size, operator: Gt, values: [\"4\"]}\n", None),
        (
            "    - {key: size, operator: Lt, values: [\"4\"]}\n",
            Some(super::label_contradicts("8", "size", "Lt", &["4".into()])),
        ),
        ("    - {key: other, operator: DoesNotExist}\n", None),
    ] {
        agree("Provisioner", &labelled(req), refused.as_deref());
    }
    let requirement = |r: &str| format!("  requirements:\n    - {{{r}}}\n");
    for (r, refused) in [
        ("key: team, operator: In, values: [a]", None),
        (
            "key: team, operator: In",
            Some("operator In needs at least one value"),
        ),
        (
            "key: team, operator: NotIn, values: []",
            Some("operator NotIn needs at least one value"),
        ),
        ("key: team, operator: Exists", None),
        (
            "key: team, operator: DoesNotExist, values: [a]",
            Some("operator DoesNotExist takes no values"),
        ),
        ("key: size, operator: Gt, values: [\"4\"]", None),
        (
            "key: size, operator: Lt, values: [\"4\", \"8\"]",
            Some("operator Lt needs exactly one value"),
        ),
    ] {
        agree("Provisioner", &requirement(r), refused);
    }
}

#[test]
fn warm_pool_rules_agree_with_the_controller() {
    let pool = |w: &str| format!("  warmPool: {{{w}}}\n");
    agree("Provisioner", &pool("size: 3, maxSize: 5"), None);
    agree("Provisioner", &pool("size: auto, maxSize: 5"), None);
    agree("Provisioner", &pool("size: 3"), None);
    agree(
        "Provisioner",
        &pool("size: 6, maxSize: 5"),
        Some(&super::max_size_below_size(5, 6)),
    );
}

#[test]
fn kubelet_rules_agree_with_the_controller() {
    let kubelet = |k: &str| format!("  kubeletConfiguration: {{{k}}}\n");
    for (k, refused) in [
        (
            "imageGCHighThresholdPercent: 85, imageGCLowThresholdPercent: 80",
            None,
        ),
        ("imageGCLowThresholdPercent: 80", None),
        (
            "imageGCHighThresholdPercent: 70, imageGCLowThresholdPercent: 80",
            Some(super::gc_low_not_below_high(80, 70)),
        ),
        (
            "evictionSoft: {memory.available: 500Mi}, evictionSoftGracePeriod: {memory.available: 1m}",
            None,
        ),
        (
            "evictionSoft: {memory.available: 500Mi}",
            Some(super::soft_without_grace("memory.available")),
        ),
        (
            "evictionSoft: {memory.available: 500Mi}, evictionSoftGracePeriod: {memory.available: 1m, nodefs.available: 1m}",
            Some(super::grace_without_soft("nodefs.available")),
        ),
        (
            "evictionHard: {memory.available: 5%, nodefs.available: 10%}",
            None,
        ),
        (
            "evictionHard: {memory.free: 5%}",
            Some(super::unknown_signal("memory.free")),
        ),
        ("kubeReserved: {cpu: 100m, pid: \"100\"}", None),
        (
            "systemReserved: {cpu: 100m, gpu: \"1\"}",
            Some(super::not_reservable("gpu")),
        ),
    ] {
        agree("Provisioner", &kubelet(k), refused.as_deref());
    }
}

/// The schema's patterns for a budget's `nodes` and `reasons` accept what the controller
/// reads, and refuse what it refuses.
#[test]
fn budget_patterns_are_the_controllers_parsers() {
    let nodes = regex::Regex::new(super::BUDGET_NODES_PATTERN).expect("pattern");
    for s in [
        "0", "3", "10%", "100%", "007%", "0%", " 5 ", "101%", "10.5%", "%", "", "-1", "ten",
        "1000%",
    ] {
        assert_eq!(
            nodes.is_match(s),
            crate::disruption::BudgetNodes::parse(s).is_some(),
            "{s:?}"
        );
    }
    let reasons = regex::Regex::new(super::BUDGET_REASON_PATTERN).expect("pattern");
    for s in ["Empty", "Drifted", "Underutilized", "Expired", "empty", ""] {
        assert_eq!(
            reasons.is_match(s),
            joiner_core::disruption::Reason::parse_budget_reason(s).is_some(),
            "{s:?}"
        );
    }
}

/// The bounds that keep the rules' cost estimate small are in the CRDs, and the controller
/// refuses the same sizes.
#[test]
fn the_lists_and_maps_the_rules_run_over_are_bounded() {
    let spec = crate::crds::spec_schema("Provisioner");
    let props = spec.properties.as_ref().expect("properties");
    let kubelet = props["kubeletConfiguration"]
        .properties
        .as_ref()
        .expect("kubelet");
    for (field, max) in [
        ("kubeReserved", 4),
        ("systemReserved", 4),
        ("evictionHard", 8),
        ("evictionSoft", 8),
        ("evictionSoftGracePeriod", 8),
    ] {
        assert_eq!(kubelet[field].max_properties, Some(max), "{field}");
    }
    let budgets = &props["disruption"].properties.as_ref().expect("disruption")["budgets"];
    assert_eq!(
        budgets.max_items,
        Some(crate::disruption::MAX_BUDGETS as i64)
    );
    assert_eq!(props["requirements"].max_items, Some(100));
    let template = crate::crds::spec_schema("NodeTemplate");
    let mappings = &template.properties.as_ref().expect("properties")["blockDeviceMappings"];
    assert_eq!(mappings.max_items, Some(super::MAX_BLOCK_DEVICES as i64));
    let too_many: String = (0..=super::MAX_BLOCK_DEVICES)
        .map(|i| format!("    - {{deviceName: /dev/xvd{i}}}\n"))
        .collect();
    let t = node_template(&format!("{SELECTORS}  blockDeviceMappings:\n{too_many}"));
    assert_eq!(
        t.validate().expect_err("refused").field(),
        "spec.blockDeviceMappings"
    );
}

/// The API server multiplies a rule's estimated cost by how many times the lists and maps
/// above it could hold it, and refuses a CRD past its budget: no rule of any CRD sits below a
/// list without `maxItems` or a map without `maxProperties`.
#[test]
fn no_rule_sits_below_an_unbounded_list_or_map() {
    fn walk(s: &JSONSchemaProps, path: &str, unbounded: Option<&str>, out: &mut Vec<String>) {
        if s.x_kubernetes_validations
            .as_ref()
            .is_some_and(|r| !r.is_empty())
        {
            if let Some(u) = unbounded {
                out.push(format!("{path} (below unbounded {u})"));
            }
        }
        for (k, p) in s.properties.iter().flatten() {
            walk(p, &format!("{path}.{k}"), unbounded, out);
        }
        if let Some(JSONSchemaPropsOrArray::Schema(items)) = &s.items {
            let here = format!("{path}[]");
            let u = if s.max_items.is_none() {
                Some(path)
            } else {
                unbounded
            };
            walk(items, &here, u, out);
        }
        if let Some(JSONSchemaPropsOrBool::Schema(values)) = &s.additional_properties {
            let here = format!("{path}{{}}");
            let u = if s.max_properties.is_none() {
                Some(path)
            } else {
                unbounded
            };
            walk(values, &here, u, out);
        }
    }
    let mut found = Vec::new();
    let mut rules = 0;
    for crd in crate::crds::crds() {
        for v in &crd.spec.versions {
            let schema = v
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema");
            let mut none = Vec::new();
            walk(schema, &crd.spec.names.kind, None, &mut none);
            found.extend(none);
            fn count(s: &JSONSchemaProps) -> usize {
                s.x_kubernetes_validations.as_ref().map_or(0, Vec::len)
                    + s.properties
                        .iter()
                        .flatten()
                        .map(|(_, p)| count(p))
                        .sum::<usize>()
                    + match &s.items {
                        Some(JSONSchemaPropsOrArray::Schema(i)) => count(i),
                        _ => 0,
                    }
                    + match &s.additional_properties {
                        Some(JSONSchemaPropsOrBool::Schema(a)) => count(a),
                        _ => 0,
                    }
            }
            rules += count(schema);
        }
    }
    assert!(rules > 20, "only {rules} rules found");
    assert!(
        found.is_empty(),
        "rules below unbounded collections:\n{}",
        found.join("\n")
    );
}

/// What `import-karpenter` makes of Karpenter manifests passes the CRDs' rules: an imported
/// object is never one `kubectl apply` refuses.
#[test]
fn imported_karpenter_objects_pass_the_rules() {
    use serde::Deserialize;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    fn yaml_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                yaml_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    yaml_files(&root.join("../../examples/karpenter"), &mut files);
    yaml_files(&root.join("tests/fixtures/karpenter"), &mut files);
    // Karpenter's own example folders, for a run by hand (as tests/karpenter_fields.rs).
    if let Some(extra) = std::env::var_os("JOINER_KARPENTER_EXAMPLES") {
        yaml_files(std::path::Path::new(&extra), &mut files);
    }
    assert!(files.len() >= 6, "{files:?}");
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .filter_map(|d| Value::deserialize(d).ok())
            .filter(|v| {
                crate::karpenter::is_karpenter(
                    v["apiVersion"].as_str().unwrap_or_default(),
                    v["kind"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        let converted = crate::karpenter::convert(&objects)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let specs = converted
            .provisioners
            .iter()
            .map(|p| ("Provisioner", p.name(), serde_json::to_value(&p.spec)))
            .chain(
                converted
                    .node_templates
                    .iter()
                    .map(|t| ("NodeTemplate", t.name(), serde_json::to_value(&t.spec))),
            );
        for (kind, name, spec) in specs {
            let refused = cel_refusals(kind, &spec.expect("json"));
            assert!(
                refused.is_empty(),
                "{}: {kind} {name}: {refused:?}",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} objects checked");
}
