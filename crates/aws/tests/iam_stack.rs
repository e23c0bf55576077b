//! iam/joiner.yaml, the one CloudFormation stack of joiner's AWS side, stays what the other
//! IAM files and the chart say: its controller policy is iam/controller-policy.json (which
//! iam_policy.rs holds to the code) with CloudFormation's substitutions; its queue and rules
//! are iam/interruption-queue.yaml's; the controller role trusts exactly the chart's service
//! account through the cluster's OIDC issuer; the node role has the policies an EKS node
//! needs; and every reference and substitution names something the template defines.

use std::collections::BTreeSet;
use std::path::Path;

use serde_yaml::Value;

fn read(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn stack() -> Value {
    serde_yaml::from_str(&read("iam/joiner.yaml")).expect("iam/joiner.yaml is YAML")
}

fn sub_string(v: &Value) -> &str {
    v["Fn::Sub"].as_str().expect("an Fn::Sub string")
}

/// The names `${...}` substitutes in `text` (IAM policy variables would be `${!...}`).
fn substitutions(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let end = rest[start..].find('}').expect("closed ${");
        let name = &rest[start + 2..start + end];
        if !name.starts_with('!') {
            out.insert(name.to_string());
        }
        rest = &rest[start + end..];
    }
    out
}

/// CloudFormation's names and the placeholders iam/controller-policy.json documents for them.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("${AWS::Partition}", "${AWS_PARTITION}"),
    ("${AWS::Region}", "${AWS_REGION}"),
    ("${AWS::AccountId}", "${AWS_ACCOUNT_ID}"),
    ("${ClusterName}", "${CLUSTER_NAME}"),
    ("${NodeRole}", "${NODE_ROLE_NAME}"),
    (
        "${InterruptionQueue.QueueName}",
        "${INTERRUPTION_QUEUE_NAME}",
    ),
    ("${SsmPrefix}", "${SSM_PREFIX}"),
];

/// A native-YAML policy document as controller-policy.json writes it: each `Fn::Sub` string
/// with CloudFormation's names turned back into the placeholders. Keys must be plain strings
/// (CloudFormation evaluates no function in a key), so a key holding `${` fails here.
fn as_policy_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Mapping(m) if m.len() == 1 && m.contains_key("Fn::Sub") => {
            let mut text = m["Fn::Sub"]
                .as_str()
                .expect("Fn::Sub of a string")
                .to_string();
            for (cfn, placeholder) in PLACEHOLDERS {
                text = text.replace(cfn, placeholder);
            }
            serde_json::Value::String(text)
        }
        Value::Mapping(m) => serde_json::Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let k = k.as_str().expect("a string key");
                    assert!(!k.contains("${"), "a substitution in the key {k}");
                    (k.to_string(), as_policy_json(v))
                })
                .collect(),
        ),
        Value::Sequence(items) => items.iter().map(as_policy_json).collect(),
        Value::String(s) => {
            assert!(!s.contains("${"), "{s}: a substitution outside Fn::Sub");
            serde_json::Value::String(s.clone())
        }
        other => panic!("unexpected {other:?} in the policy document"),
    }
}

#[test]
fn the_controller_policy_is_controller_policy_json() {
    let t = stack();
    let doc = &t["Resources"]["ControllerPolicy"]["Properties"]["PolicyDocument"];
    // Native YAML, so that cfn-lint reads its actions and conditions.
    assert!(
        doc["Statement"].is_sequence(),
        "ControllerPolicy's PolicyDocument must be native YAML, not a JSON string: {doc:?}"
    );
    let in_stack = as_policy_json(doc);
    let file: serde_json::Value =
        serde_json::from_str(&read("iam/controller-policy.json")).expect("controller-policy.json");
    assert!(
        in_stack == file,
        "iam/joiner.yaml's ControllerPolicy differs from iam/controller-policy.json: regenerate it"
    );
    let statements = in_stack["Statement"].as_array().expect("statements");
    assert!(statements.len() >= 10, "{statements:?}");
    // The policy is attached to the controller role.
    assert_eq!(
        t["Resources"]["ControllerPolicy"]["Properties"]["Roles"][0]["Ref"].as_str(),
        Some("ControllerRole")
    );
}

#[test]
fn the_queue_and_rules_are_those_of_interruption_queue_yaml() {
    let t = stack();
    let queue: Value =
        serde_yaml::from_str(&read("iam/interruption-queue.yaml")).expect("queue template");
    let mut compared = 0;
    for (name, resource) in queue["Resources"].as_mapping().expect("resources") {
        let name = name.as_str().expect("name");
        if name == "ControllerQueuePolicy" {
            // In the stack the queue statement is part of ControllerPolicy.
            continue;
        }
        assert_eq!(&t["Resources"][name], resource, "{name} differs");
        compared += 1;
    }
    assert_eq!(compared, 6, "queue, its policy and four rules");
}

#[test]
fn the_controller_role_trusts_only_the_charts_service_account() {
    let t = stack();
    let trust =
        sub_string(&t["Resources"]["ControllerRole"]["Properties"]["AssumeRolePolicyDocument"]);
    let trust: serde_json::Value = serde_json::from_str(trust).expect("trust policy JSON");
    let statements = trust["Statement"].as_array().expect("statements");
    assert_eq!(statements.len(), 1);
    let s = &statements[0];
    assert_eq!(s["Action"], "sts:AssumeRoleWithWebIdentity");
    assert_eq!(
        s["Principal"]["Federated"],
        "arn:${AWS::Partition}:iam::${AWS::AccountId}:oidc-provider/${OIDCProvider}"
    );
    let cond = &s["Condition"]["StringEquals"];
    assert_eq!(cond["${OIDCProvider}:aud"], "sts.amazonaws.com");
    assert_eq!(
        cond["${OIDCProvider}:sub"],
        "system:serviceaccount:${ServiceAccountNamespace}:${ServiceAccountName}"
    );
    // The defaults are the chart's.
    let values: Value =
        serde_yaml::from_str(&read("charts/joiner/values.yaml")).expect("chart values");
    assert_eq!(
        t["Parameters"]["ServiceAccountName"]["Default"],
        values["serviceAccount"]["name"]
    );
}

#[test]
fn nodes_get_a_role_and_profile_that_can_join_eks() {
    let t = stack();
    let role = &t["Resources"]["NodeRole"]["Properties"];
    assert_eq!(
        role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"].as_str(),
        Some("ec2.amazonaws.com")
    );
    let policies: BTreeSet<String> = role["ManagedPolicyArns"]
        .as_sequence()
        .expect("managed policies")
        .iter()
        .map(|p| sub_string(p).rsplit('/').next().expect("name").to_string())
        .collect();
    let want: BTreeSet<String> = [
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryPullOnly",
        "AmazonSSMManagedInstanceCore",
    ]
    .map(String::from)
    .into();
    assert_eq!(policies, want);
    let profile = &t["Resources"]["NodeInstanceProfile"]["Properties"];
    assert_eq!(profile["Roles"][0]["Ref"].as_str(), Some("NodeRole"));
    let entry = &t["Resources"]["NodeAccessEntry"]["Properties"];
    assert_eq!(entry["Type"].as_str(), Some("EC2_LINUX"));
    assert_eq!(
        entry["PrincipalArn"]["Fn::GetAtt"][0].as_str(),
        Some("NodeRole")
    );
}

/// Every `Ref`, `Fn::GetAtt` and `${...}` below `v`.
fn references(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m {
                match k.as_str() {
                    Some("Ref") => out.extend(v.as_str().map(str::to_string)),
                    Some("Fn::GetAtt") => out.extend(v[0].as_str().map(str::to_string)),
                    Some("Fn::Sub") => {
                        if let Some(s) = v.as_str() {
                            out.extend(
                                substitutions(s)
                                    .into_iter()
                                    .map(|n| n.split('.').next().unwrap_or_default().to_string()),
                            );
                        }
                    }
                    _ => {}
                }
                references(v, out);
            }
        }
        Value::Sequence(items) => items.iter().for_each(|i| references(i, out)),
        _ => {}
    }
}

#[test]
fn every_reference_names_a_parameter_resource_or_pseudo_parameter() {
    let t = stack();
    let mut defined: BTreeSet<String> = BTreeSet::new();
    for section in ["Parameters", "Resources"] {
        for k in t[section].as_mapping().expect(section).keys() {
            defined.insert(k.as_str().expect("name").to_string());
        }
    }
    let mut refs = Vec::new();
    references(&t["Resources"], &mut refs);
    references(&t["Outputs"], &mut refs);
    assert!(refs.len() > 20, "{refs:?}");
    for r in refs {
        assert!(
            defined.contains(&r) || r.starts_with("AWS::"),
            "{r} is not defined in iam/joiner.yaml"
        );
    }
    // Conditions used by resources exist.
    for (name, r) in t["Resources"].as_mapping().expect("resources") {
        if let Some(c) = r["Condition"].as_str() {
            assert!(t["Conditions"][c].is_mapping(), "{name:?}: condition {c}");
        }
    }
}
