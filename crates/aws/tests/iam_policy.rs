//! The controller policy in iam/ must allow exactly the AWS operations the code calls: a new
//! SDK call without its permission fails in the cluster at 3 a.m., a permission the code no
//! longer needs is privilege nobody should hold. The calls are read from the source of this
//! crate (`<client>.<operation>()` chains, whitespace ignored).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Actions the policy grants that no single SDK call names: CreateFleet of type instant
/// launches through RunInstances and tags on create through CreateTags; iam:PassRole hands
/// the node role to EC2; the KMS actions are EC2's on a customer key of a block device.
const IMPLIED: &[&str] = &[
    "ec2:RunInstances",
    "ec2:CreateTags",
    "iam:PassRole",
    // A NodeTemplate's kmsKeyID: EC2 uses the key on the caller's behalf when CreateFleet
    // launches an encrypted volume with it.
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
    "kms:CreateGrant",
];

/// SDK operations IAM authorizes under another action's name: SQS batch operations need the
/// permission of the single operation (SQS developer guide, "batch actions").
const AUTHORIZED_AS: &[(&str, &str)] = &[
    ("sqs:DeleteMessageBatch", "sqs:DeleteMessage"),
    (
        "sqs:ChangeMessageVisibilityBatch",
        "sqs:ChangeMessageVisibility",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            // Test support (feature `testing`) builds moto fixtures; the controller never runs it.
            && path.file_name().is_some_and(|n| n != "testing.rs")
        {
            out.push(path);
        }
    }
}

fn camel(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// `service:Operation` for every `<ec2|ssm|pricing|sqs>.<operation>()` in non-test code.
fn calls_in_source() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut calls = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        // Unit tests at the bottom of a module may call anything.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let flat: String = code.chars().filter(|c| !c.is_whitespace()).collect();
        for service in ["ec2", "ssm", "pricing", "sqs"] {
            let needle = format!("{service}.");
            let mut rest = flat.as_str();
            while let Some(at) = rest.find(&needle) {
                let before = rest[..at].chars().last();
                rest = &rest[at + needle.len()..];
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue; // part of a longer name
                }
                let op: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if rest[op.len()..].starts_with("()")
                    && !matches!(op.as_str(), "clone" | "config" | "")
                {
                    let call = format!("{service}:{}", camel(&op));
                    let action = AUTHORIZED_AS
                        .iter()
                        .find(|(c, _)| *c == call)
                        .map_or(call.clone(), |(_, a)| a.to_string());
                    calls.insert(action);
                }
            }
        }
    }
    calls
}

fn policy_actions() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../iam/controller-policy.json");
    let policy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("policy")).expect("json");
    let mut actions = BTreeSet::new();
    for statement in policy["Statement"].as_array().expect("statements") {
        match &statement["Action"] {
            serde_json::Value::String(a) => {
                actions.insert(a.clone());
            }
            serde_json::Value::Array(list) => {
                actions.extend(list.iter().filter_map(|a| a.as_str().map(str::to_string)));
            }
            other => panic!("unexpected Action {other}"),
        }
    }
    actions
}

#[test]
fn the_policy_grants_exactly_the_operations_the_code_calls() {
    let calls = calls_in_source();
    assert!(
        calls.contains("ec2:CreateFleet") && calls.contains("pricing:GetProducts"),
        "the source scan found too little: {calls:?}"
    );
    let actions = policy_actions();
    let missing: Vec<_> = calls.difference(&actions).collect();
    assert!(missing.is_empty(), "called but not allowed: {missing:?}");
    let unused: Vec<_> = actions
        .iter()
        .filter(|a| !calls.contains(*a) && !IMPLIED.contains(&a.as_str()))
        .collect();
    assert!(unused.is_empty(), "allowed but never called: {unused:?}");
}

/// Actions that change or tag an existing resource: each statement granting one must require
/// joiner's ownership tags (`joiner.sh/cluster` naming this cluster and
/// `joiner.sh/provisioner-name`), never a cluster tag alone (EKS managed node groups, eksctl
/// groups and Karpenter's nodes carry the cluster tag too).
const GUARDED: &[&str] = &[
    "ec2:TerminateInstances",
    "ec2:StopInstances",
    "ec2:StartInstances",
    "ec2:RebootInstances",
    "ec2:ModifyInstanceAttribute",
    "ec2:CreateTags",
    "ec2:DeleteTags",
    "ec2:DeleteLaunchTemplate",
    "ssm:SendCommand",
];

/// The one document `ssm:SendCommand` may run. SendCommand is authorized on the instance and
/// on the document, and a document carries no ownership tags, so its statement is the one
/// grant of a guarded action without them.
const RUN_SHELL_SCRIPT: &str =
    "arn:${AWS_PARTITION}:ssm:${AWS_REGION}::document/AWS-RunShellScript";

fn actions_of(statement: &serde_json::Value) -> Vec<String> {
    match &statement["Action"] {
        serde_json::Value::String(a) => vec![a.clone()],
        serde_json::Value::Array(list) => list
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// The ownership conditions a statement sets, as (tag context, key) pairs found:
/// `joiner.sh/cluster` must equal the cluster's name and `joiner.sh/provisioner-name` must be present (`Null: false`),
/// both on `aws:ResourceTag` (the resource acted on) or, for tag-on-create, `aws:RequestTag`.
fn ownership_conditions(statement: &serde_json::Value) -> Vec<String> {
    let condition = &statement["Condition"];
    let mut found = Vec::new();
    for context in ["aws:ResourceTag", "aws:RequestTag", "ssm:resourceTag"] {
        let cluster = format!("{context}/joiner.sh/cluster");
        let provisioner = format!("{context}/joiner.sh/provisioner-name");
        let cluster_owned = condition["StringEquals"][&cluster].as_str() == Some("${CLUSTER_NAME}");
        let provisioner_present = condition["Null"][&provisioner].as_str() == Some("false");
        if cluster_owned && provisioner_present {
            found.push(context.to_string());
        }
    }
    found
}

#[test]
fn every_mutating_grant_requires_both_ownership_tags() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../iam/controller-policy.json");
    let policy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("policy")).expect("json");
    let mut checked = BTreeSet::new();
    for statement in policy["Statement"].as_array().expect("statements") {
        let actions = actions_of(statement);
        let guarded: Vec<&String> = actions
            .iter()
            .filter(|a| GUARDED.contains(&a.as_str()) || a.contains('*'))
            .collect();
        if guarded.is_empty() {
            continue;
        }
        if actions == ["ssm:SendCommand"] && statement["Resource"] == RUN_SHELL_SCRIPT {
            continue;
        }
        assert_eq!(statement["Effect"], "Allow", "{statement}");
        let contexts = ownership_conditions(statement);
        let tag_on_create = statement["Condition"]["StringEquals"]["ec2:CreateAction"].is_array();
        let want = if actions.iter().any(|a| a == "ec2:CreateTags") && tag_on_create {
            "aws:RequestTag"
        } else if actions.iter().any(|a| a == "ssm:SendCommand") {
            // SSM's own key for the tags of the instance a command is sent to.
            assert_eq!(
                statement["Condition"]["Null"]["ssm:resourceTag/joiner.sh/warm-pool"], "false",
                "SendCommand must be limited to warm-pool members: {statement}"
            );
            "ssm:resourceTag"
        } else {
            "aws:ResourceTag"
        };
        if actions.iter().any(|a| a == "ec2:CreateTags") && !tag_on_create {
            // CreateTags on an existing instance: only the claim and reboot tags of a member
            // being handed to a claim. Never the warm-pool tag (set at launch only: adding it
            // to a node that serves pods would open the member grants to it), never ownership.
            assert_eq!(
                statement["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"],
                serde_json::json!(["joiner.sh/nodeclaim", "joiner.sh/warm-rebooted-for"]),
                "CreateTags on existing resources must be limited to the pool's tags: {statement}"
            );
        }
        if actions.iter().any(|a| a == "ec2:DeleteTags") {
            // Only a taken member's membership tags.
            assert_eq!(
                statement["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"],
                serde_json::json!(["joiner.sh/warm-pool", "joiner.sh/warm-state"]),
                "DeleteTags must be limited to the membership tags: {statement}"
            );
        }
        if actions
            .iter()
            .any(|a| (a == "ec2:CreateTags" && !tag_on_create) || a == "ec2:DeleteTags")
        {
            // A request naming no keys would pass ForAllValues (and DeleteTags without keys
            // deletes every tag): keys are required.
            assert_eq!(
                statement["Condition"]["Null"]["aws:TagKeys"], "false",
                "{statement}"
            );
            assert_eq!(
                statement["Resource"], "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:instance/*",
                "{statement}"
            );
        }
        if actions.iter().any(|a| {
            (a == "ec2:CreateTags" && !tag_on_create)
                || a == "ec2:DeleteTags"
                || a == "ec2:StopInstances"
                || a == "ec2:StartInstances"
                || a == "ec2:RebootInstances"
                || a == "ec2:ModifyInstanceAttribute"
        }) {
            assert_eq!(
                statement["Condition"]["Null"]["aws:ResourceTag/joiner.sh/warm-pool"], "false",
                "Start/Stop/ModifyInstanceAttribute and re-tagging must be limited to warm-pool members: {statement}"
            );
        }
        assert!(
            contexts.iter().any(|c| c == want),
            "{guarded:?} granted without `{want}/joiner.sh/cluster=${{CLUSTER_NAME}}` and \
             `{want}/joiner.sh/provisioner-name` present: {statement}"
        );
        checked.extend(guarded.into_iter().cloned());
    }
    // The actions the code calls are among those checked.
    for action in [
        "ec2:TerminateInstances",
        "ec2:StartInstances",
        "ec2:StopInstances",
        "ec2:RebootInstances",
        "ec2:ModifyInstanceAttribute",
        "ec2:CreateTags",
        "ec2:DeleteTags",
        "ec2:DeleteLaunchTemplate",
        "ssm:SendCommand",
    ] {
        assert!(
            checked.contains(action),
            "{action} not granted: {checked:?}"
        );
    }
}

#[test]
fn the_ownership_check_rejects_the_cluster_tag_alone() {
    // The checker itself: statements like the ones before the fixes must not pass.
    let statement = |condition: serde_json::Value| {
        serde_json::json!({
            "Effect": "Allow",
            "Action": "ec2:TerminateInstances",
            "Resource": "*",
            "Condition": condition
        })
    };
    for before in [
        // The cluster tag alone: EKS node groups, eksctl and Karpenter nodes carry it too.
        serde_json::json!({"StringEquals": {"aws:ResourceTag/joiner.sh/cluster": "${CLUSTER_NAME}"}}),
        // The EKS cluster tag's key holds the cluster name: a CloudFormation parameter cannot
        // build it in native YAML, so the policy uses the fixed-key tag.
        serde_json::json!({
            "StringEquals": {"aws:ResourceTag/kubernetes.io/cluster/${CLUSTER_NAME}": "owned"},
            "Null": {"aws:ResourceTag/joiner.sh/provisioner-name": "false"}}),
        // Any cluster's joiner instance.
        serde_json::json!({
            "StringLike": {"aws:ResourceTag/joiner.sh/cluster": "*"},
            "Null": {"aws:ResourceTag/joiner.sh/provisioner-name": "false"}}),
    ] {
        assert!(
            ownership_conditions(&statement(before.clone())).is_empty(),
            "{before}"
        );
    }
    let after = statement(serde_json::json!({
        "StringEquals": {"aws:ResourceTag/joiner.sh/cluster": "${CLUSTER_NAME}"},
        "Null": {"aws:ResourceTag/joiner.sh/provisioner-name": "false"}}));
    assert_eq!(ownership_conditions(&after), ["aws:ResourceTag"]);
}

/// A condition: (operator, key, value).
type Condition = (&'static str, &'static str, serde_json::Value);
/// A statement as designed: (Sid, actions, resources, conditions).
type Designed = (
    &'static str,
    Vec<&'static str>,
    Vec<&'static str>,
    Vec<Condition>,
);

/// The statements of the policy as designed: Sid → (actions, resources, condition keys and the
/// values they must have). The file must hold exactly these, so a statement added, widened or
/// stripped of a condition fails here even when its actions are granted elsewhere too.
fn designed() -> Vec<Designed> {
    use serde_json::json;
    let region = (
        "StringEquals",
        "aws:RequestedRegion",
        json!("${AWS_REGION}"),
    );
    let rt_cluster = (
        "StringEquals",
        "aws:ResourceTag/joiner.sh/cluster",
        json!("${CLUSTER_NAME}"),
    );
    let rt_prov = (
        "Null",
        "aws:ResourceTag/joiner.sh/provisioner-name",
        json!("false"),
    );
    let rt_warm = (
        "Null",
        "aws:ResourceTag/joiner.sh/warm-pool",
        json!("false"),
    );
    let rt_managed = (
        "StringEquals",
        "aws:ResourceTag/joiner.sh/managed-by",
        json!("joiner"),
    );
    let rq_cluster = (
        "StringEquals",
        "aws:RequestTag/joiner.sh/cluster",
        json!("${CLUSTER_NAME}"),
    );
    let rq_prov = (
        "Null",
        "aws:RequestTag/joiner.sh/provisioner-name",
        json!("false"),
    );
    let ec2 = |kind: &'static str| -> &'static str {
        match kind {
            "image" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}::image/*",
            "snapshot" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}::snapshot/*",
            "security-group" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:security-group/*",
            "subnet" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:subnet/*",
            "network-interface" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:network-interface/*",
            "spot-instances-request" => {
                "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:spot-instances-request/*"
            }
            "launch-template" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:launch-template/*",
            "fleet" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:fleet/*",
            "instance" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:instance/*",
            "volume" => "arn:${AWS_PARTITION}:ec2:${AWS_REGION}:*:volume/*",
            other => panic!("{other}"),
        }
    };
    vec![
        ("Discovery", vec!["ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeImages", "ec2:DescribeLaunchTemplates", "ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeSpotPriceHistory"], vec!["*"], vec![region.clone()]),
        ("InterruptionQueue", vec!["sqs:GetQueueUrl", "sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage"], vec!["arn:${AWS_PARTITION}:sqs:${AWS_REGION}:${AWS_ACCOUNT_ID}:${INTERRUPTION_QUEUE_NAME}"], vec![]),
        ("Pricing", vec!["pricing:GetProducts"], vec!["*"], vec![]),
        ("AmiParameters", vec!["ssm:GetParameter"], vec!["arn:${AWS_PARTITION}:ssm:${AWS_REGION}:*:parameter${SSM_PREFIX}/*"], vec![]),
        ("LaunchIntoNetworkAndImages", vec!["ec2:CreateFleet", "ec2:RunInstances"], ["image", "snapshot", "security-group", "subnet", "network-interface", "spot-instances-request"].map(ec2).to_vec(), vec![]),
        ("LaunchWithOwnedTemplates", vec!["ec2:CreateFleet", "ec2:RunInstances"], vec![ec2("launch-template")], vec![rt_cluster.clone(), rt_prov.clone(), rt_managed.clone()]),
        ("LaunchTaggedResources", vec!["ec2:CreateFleet", "ec2:RunInstances"], ["fleet", "instance", "volume"].map(ec2).to_vec(), vec![rq_cluster.clone(), rq_prov.clone(), ("StringLike", "aws:RequestTag/joiner.sh/nodeclaim", json!("*"))]),
        ("CreateOwnedLaunchTemplates", vec!["ec2:CreateLaunchTemplate"], vec![ec2("launch-template")], vec![rq_cluster.clone(), rq_prov.clone(), ("StringEquals", "aws:RequestTag/joiner.sh/managed-by", json!("joiner"))]),
        ("TagOnCreate", vec!["ec2:CreateTags"], ["fleet", "instance", "volume", "launch-template"].map(ec2).to_vec(), vec![rq_cluster, rq_prov, ("StringEquals", "ec2:CreateAction", json!(["CreateFleet", "RunInstances", "CreateLaunchTemplate"]))]),
        ("TerminateOwnedInstances", vec!["ec2:TerminateInstances"], vec![ec2("instance")], vec![rt_cluster.clone(), rt_prov.clone()]),
        ("StartStopWarmPoolMembers", vec!["ec2:StartInstances", "ec2:StopInstances", "ec2:RebootInstances", "ec2:ModifyInstanceAttribute"], vec![ec2("instance")], vec![rt_cluster.clone(), rt_prov.clone(), rt_warm.clone()]),
        ("TagWarmPoolMembers", vec!["ec2:CreateTags"], vec![ec2("instance")], vec![rt_cluster.clone(), rt_prov.clone(), rt_warm.clone(), ("Null", "aws:TagKeys", json!("false")), ("ForAllValues:StringEquals", "aws:TagKeys", json!(["joiner.sh/nodeclaim", "joiner.sh/warm-rebooted-for"]))]),
        ("UntagTakenWarmPoolMembers", vec!["ec2:DeleteTags"], vec![ec2("instance")], vec![rt_cluster.clone(), rt_prov.clone(), rt_warm.clone(), ("Null", "aws:TagKeys", json!("false")), ("ForAllValues:StringEquals", "aws:TagKeys", json!(["joiner.sh/warm-pool", "joiner.sh/warm-state"]))]),
        ("CommandWarmPoolMembers", vec!["ssm:SendCommand"], vec![ec2("instance")], vec![("StringEquals", "ssm:resourceTag/joiner.sh/cluster", json!("${CLUSTER_NAME}")), ("Null", "ssm:resourceTag/joiner.sh/provisioner-name", json!("false")), ("Null", "ssm:resourceTag/joiner.sh/warm-pool", json!("false"))]),
        ("CommandWithRunShellScriptOnly", vec!["ssm:SendCommand"], vec![RUN_SHELL_SCRIPT], vec![]),
        ("ReadCommandResults", vec!["ssm:GetCommandInvocation"], vec!["*"], vec![region.clone()]),
        ("DeleteOwnedLaunchTemplates", vec!["ec2:DeleteLaunchTemplate"], vec![ec2("launch-template")], vec![rt_cluster, rt_prov, rt_managed]),
        ("PassNodeRole", vec!["iam:PassRole"], vec!["arn:${AWS_PARTITION}:iam::${AWS_ACCOUNT_ID}:role/${NODE_ROLE_NAME}"], vec![("StringEquals", "iam:PassedToService", json!("ec2.amazonaws.com"))]),
        ("EncryptVolumesWithCustomerKeys", vec!["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncryptFrom", "kms:ReEncryptTo"], vec!["arn:${AWS_PARTITION}:kms:${AWS_REGION}:${AWS_ACCOUNT_ID}:key/*"], vec![("StringEquals", "kms:ViaService", json!("ec2.${AWS_REGION}.amazonaws.com"))]),
        ("GrantCustomerKeysToEbs", vec!["kms:CreateGrant"], vec!["arn:${AWS_PARTITION}:kms:${AWS_REGION}:${AWS_ACCOUNT_ID}:key/*"], vec![("StringEquals", "kms:ViaService", json!("ec2.${AWS_REGION}.amazonaws.com")), ("Bool", "kms:GrantIsForAWSResource", json!("true"))]),
    ]
}

#[test]
fn every_statement_is_exactly_as_designed() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../iam/controller-policy.json");
    let policy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("policy")).expect("json");
    let statements = policy["Statement"].as_array().expect("statements");
    let design = designed();
    let sids: Vec<&str> = statements
        .iter()
        .filter_map(|s| s["Sid"].as_str())
        .collect();
    let want: Vec<&str> = design.iter().map(|d| d.0).collect();
    assert_eq!(
        sids, want,
        "statements added, removed or renamed: update the design with the reason"
    );
    for (s, (sid, actions, resources, conditions)) in statements.iter().zip(&design) {
        assert_eq!(s["Effect"], "Allow", "{sid}");
        let got: BTreeSet<String> = actions_of(s).into_iter().collect();
        let expected: BTreeSet<String> = actions.iter().map(|a| a.to_string()).collect();
        assert_eq!(got, expected, "{sid}: actions");
        let got_resources: BTreeSet<String> = match &s["Resource"] {
            serde_json::Value::String(r) => [r.clone()].into(),
            serde_json::Value::Array(rs) => rs
                .iter()
                .filter_map(|r| r.as_str().map(str::to_string))
                .collect(),
            other => panic!("{sid}: Resource {other}"),
        };
        let want_resources: BTreeSet<String> = resources.iter().map(|r| r.to_string()).collect();
        assert_eq!(got_resources, want_resources, "{sid}: resources");
        let mut count = 0;
        for (op, key, value) in conditions {
            assert_eq!(
                &s["Condition"][op][key], value,
                "{sid}: condition {op} {key}"
            );
            count += 1;
        }
        let present: usize = s["Condition"]
            .as_object()
            .map(|ops| {
                ops.values()
                    .filter_map(|v| v.as_object())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        assert_eq!(present, count, "{sid}: conditions beyond the design");
        // Only read actions may be granted on every resource.
        if want_resources.contains("*") {
            for a in &expected {
                let verb = a.split(':').nth(1).unwrap_or_default();
                assert!(
                    verb.starts_with("Describe") || verb.starts_with("Get"),
                    "{sid}: {a} on *"
                );
            }
        }
    }
}
