//! The controller policy evaluated, request by request, as IAM would: a stolen controller role
//! cannot get a shell on a node that serves pods. The path it would take is to make the node
//! look like a warm-pool member (tag it `joiner.sh/warm-pool`), then run a shell script on it
//! through SSM, or stop it, rewrite its user data and start it again. Every step is denied;
//! the calls joiner itself makes on members are allowed, so the evaluator is no wall that
//! denies everything.
//!
//! The evaluator knows the parts of the policy language the policy uses (Allow statements,
//! `*` in actions and ARNs, StringEquals, StringLike, Null and ForAllValues:StringEquals on the
//! condition keys below) and fails on anything else, so a statement it cannot read is never
//! taken as allowing or denying.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

const CLUSTER: &str = "c1";
const REGION: &str = "us-east-1";
const ACCOUNT: &str = "111122223333";

/// One authorization: an action on one resource, with the request's context.
#[derive(Clone, Debug, Default)]
struct Request {
    action: &'static str,
    resource: String,
    /// The tags the resource carries now (`aws:ResourceTag/*`, `ssm:resourceTag/*`).
    resource_tags: BTreeMap<String, String>,
    /// The tags the request sets (`aws:RequestTag/*`, `aws:TagKeys`).
    request_tags: BTreeMap<String, String>,
    /// DeleteTags names keys only.
    deleted_keys: Vec<String>,
    /// `ec2:CreateAction`: present only when tags are set by the call that creates the resource.
    create_action: Option<&'static str>,
}

fn policy() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../iam/controller-policy.json");
    let text = std::fs::read_to_string(path).expect("policy");
    let text = text
        .replace("${AWS_PARTITION}", "aws")
        .replace("${AWS_REGION}", REGION)
        .replace("${AWS_ACCOUNT_ID}", ACCOUNT)
        .replace("${CLUSTER_NAME}", CLUSTER)
        .replace("${NODE_ROLE_NAME}", "joiner-node")
        .replace("${INTERRUPTION_QUEUE_NAME}", "joiner-c1")
        .replace("${SSM_PREFIX}", "/aws/service");
    serde_json::from_str(&text).expect("json")
}

/// `pattern` with `*` (any run) and `?` (one character) matches `text`.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().expect("string").to_string())
            .collect(),
        other => panic!("expected a string or a list: {other}"),
    }
}

/// A tag looked up as IAM does: the key part of a tag condition key ignores case.
fn tag<'a>(tags: &'a BTreeMap<String, String>, key: &str) -> Option<&'a String> {
    tags.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v)
}

/// The single values of a condition key in `req`; `None` when the key is absent.
fn single(req: &Request, key: &str) -> Option<String> {
    if let Some(k) = key
        .strip_prefix("aws:ResourceTag/")
        .or_else(|| key.strip_prefix("ssm:resourceTag/"))
    {
        return tag(&req.resource_tags, k).cloned();
    }
    if let Some(k) = key.strip_prefix("aws:RequestTag/") {
        return tag(&req.request_tags, k).cloned();
    }
    match key {
        "ec2:CreateAction" => req.create_action.map(str::to_string),
        "aws:RequestedRegion" => Some(REGION.to_string()),
        "iam:PassedToService" => Some("ec2.amazonaws.com".to_string()),
        other => panic!("the evaluator does not know condition key {other}"),
    }
}

/// `aws:TagKeys`: the keys the request sets or deletes.
fn tag_keys(req: &Request) -> Vec<String> {
    req.request_tags
        .keys()
        .cloned()
        .chain(req.deleted_keys.iter().cloned())
        .collect()
}

fn condition_holds(op: &str, key: &str, want: &Value, req: &Request) -> bool {
    let want = strings(want);
    match op {
        "StringEquals" => single(req, key).is_some_and(|v| want.contains(&v)),
        "StringLike" => single(req, key).is_some_and(|v| want.iter().any(|w| glob(w, &v))),
        "Null" => {
            let present = if key == "aws:TagKeys" {
                !tag_keys(req).is_empty()
            } else {
                single(req, key).is_some()
            };
            match want.as_slice() {
                [w] if w == "true" => !present,
                [w] if w == "false" => present,
                other => panic!("Null takes true or false, not {other:?}"),
            }
        }
        "ForAllValues:StringEquals" => {
            assert_eq!(
                key, "aws:TagKeys",
                "the evaluator knows ForAllValues on tag keys only"
            );
            tag_keys(req).iter().all(|k| want.contains(k))
        }
        other => panic!("the evaluator does not know operator {other}"),
    }
}

fn statement_allows(s: &Value, req: &Request) -> bool {
    assert_eq!(s["Effect"], "Allow", "the policy has Allow statements only");
    let action = strings(&s["Action"]).iter().any(|a| glob(a, req.action));
    let resource = strings(&s["Resource"])
        .iter()
        .any(|r| glob(r, &req.resource));
    if !action || !resource {
        return false;
    }
    let Some(conditions) = s.get("Condition").and_then(Value::as_object) else {
        return true;
    };
    conditions.iter().all(|(op, keys)| {
        keys.as_object()
            .expect("condition block")
            .iter()
            .all(|(key, want)| condition_holds(op, key, want, req))
    })
}

fn allowed(req: &Request) -> bool {
    let policy = policy();
    policy["Statement"]
        .as_array()
        .expect("statements")
        .iter()
        .any(|s| statement_allows(s, req))
}

fn instance_arn() -> String {
    format!("arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0")
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A node of this cluster's joiner that serves pods (a taken member is one too: its
/// warm-pool tag was removed when it was taken).
fn serving_node() -> BTreeMap<String, String> {
    tags(&[
        ("kubernetes.io/cluster/c1", "owned"),
        ("joiner.sh/cluster", "c1"),
        ("joiner.sh/provisioner-name", "web"),
        ("joiner.sh/nodeclaim", "web-abcde"),
    ])
}

/// A warm-pool member, launched with the warm-pool tag.
fn member() -> BTreeMap<String, String> {
    let mut t = serving_node();
    t.insert("joiner.sh/warm-pool".into(), "web".into());
    t.insert("joiner.sh/warm-state".into(), "Stopped".into());
    t
}

fn on_instance(action: &'static str, resource_tags: BTreeMap<String, String>) -> Request {
    Request {
        action,
        resource: instance_arn(),
        resource_tags,
        ..Request::default()
    }
}

fn create_tags(on: BTreeMap<String, String>, set: &[(&str, &str)]) -> Request {
    Request {
        request_tags: tags(set),
        ..on_instance("ec2:CreateTags", on)
    }
}

fn delete_tags(on: BTreeMap<String, String>, keys: &[&str]) -> Request {
    Request {
        deleted_keys: keys.iter().map(|k| k.to_string()).collect(),
        ..on_instance("ec2:DeleteTags", on)
    }
}

/// SendCommand is authorized on the instance and on the document: both must be allowed.
fn send_command_allowed(on: BTreeMap<String, String>, document: &str) -> bool {
    let instance = on_instance("ssm:SendCommand", on);
    let doc = Request {
        action: "ssm:SendCommand",
        resource: format!("arn:aws:ssm:{REGION}::document/{document}"),
        ..Request::default()
    };
    allowed(&instance) && allowed(&doc)
}

#[test]
fn the_escalation_path_to_a_shell_on_a_serving_node_is_denied_at_every_step() {
    let node = serving_node();
    // Step 1: make the node look like a member.
    for (key, value) in [
        ("joiner.sh/warm-pool", "web"),
        ("Joiner.sh/Warm-Pool", "web"),
        ("joiner.sh/nodeclaim", "web-other"),
        ("joiner.sh/warm-rebooted-for", "web-other"),
    ] {
        assert!(
            !allowed(&create_tags(node.clone(), &[(key, value)])),
            "tagging a serving node {key} must be denied"
        );
    }
    // ... not even by claiming to tag on create: a plain CreateTags has no ec2:CreateAction.
    let mut forged = create_tags(node.clone(), &[("joiner.sh/warm-pool", "web")]);
    forged.request_tags.extend(node.clone());
    assert!(
        !allowed(&forged),
        "re-sending the ownership tags opens nothing"
    );
    // Step 2: run a shell script on it.
    assert!(
        !send_command_allowed(node.clone(), "AWS-RunShellScript"),
        "SendCommand on a serving node must be denied"
    );
    // Or stop it, rewrite its user data and start it again.
    for action in [
        "ec2:StopInstances",
        "ec2:ModifyInstanceAttribute",
        "ec2:StartInstances",
        "ec2:RebootInstances",
    ] {
        assert!(
            !allowed(&on_instance(action, node.clone())),
            "{action} on a serving node must be denied"
        );
    }
    // Nor can its tags be stripped or rewritten.
    for keys in [
        &["joiner.sh/warm-pool"][..],
        &["kubernetes.io/cluster/c1"][..],
        &["joiner.sh/cluster"][..],
        &[][..],
    ] {
        assert!(
            !allowed(&delete_tags(node.clone(), keys)),
            "DeleteTags {keys:?} on a serving node must be denied"
        );
    }
}

#[test]
fn the_calls_joiner_makes_on_members_are_allowed_and_no_more() {
    let m = member();
    // Launching a member tags it on create, warm-pool tag included.
    let launch = Request {
        request_tags: m.clone(),
        create_action: Some("CreateFleet"),
        ..on_instance("ec2:CreateTags", BTreeMap::new())
    };
    assert!(allowed(&launch), "tag on create at CreateFleet");
    // A take: the claim tag, the start, Bottlerocket's settings, then the release.
    assert!(allowed(&create_tags(
        m.clone(),
        &[("joiner.sh/nodeclaim", "web-xyz")]
    )));
    assert!(allowed(&on_instance("ec2:StartInstances", m.clone())));
    assert!(allowed(&on_instance("ec2:StopInstances", m.clone())));
    assert!(allowed(&on_instance(
        "ec2:ModifyInstanceAttribute",
        m.clone()
    )));
    assert!(send_command_allowed(m.clone(), "AWS-RunShellScript"));
    assert!(allowed(&delete_tags(
        m.clone(),
        &["joiner.sh/warm-pool", "joiner.sh/warm-state"]
    )));
    // No other document; no ownership tag rewritten; no DeleteTags without keys (it would
    // delete every tag).
    assert!(!send_command_allowed(m.clone(), "AWS-RunPowerShellScript"));
    for ownership in [
        ("kubernetes.io/cluster/c1", "owned"),
        ("joiner.sh/cluster", "c2"),
    ] {
        assert!(!allowed(&create_tags(m.clone(), &[ownership])));
    }
    assert!(!allowed(&delete_tags(
        m.clone(),
        &["joiner.sh/provisioner-name"]
    )));
    assert!(!allowed(&delete_tags(m.clone(), &[])));
    // Another cluster's member, or an instance only the cluster tag marks (a node group's):
    // nothing.
    let mut foreign = m.clone();
    foreign.remove("kubernetes.io/cluster/c1");
    foreign.insert("kubernetes.io/cluster/other".into(), "owned".into());
    foreign.insert("joiner.sh/cluster".into(), "other".into());
    // Another cluster's member that also carries this cluster's EKS tag: the fixed-key tag
    // names one cluster only, so it is still not this cluster's.
    let mut doubly_tagged = foreign.clone();
    doubly_tagged.insert("kubernetes.io/cluster/c1".into(), "owned".into());
    let mut node_group = tags(&[("kubernetes.io/cluster/c1", "owned")]);
    node_group.insert("joiner.sh/warm-pool".into(), "web".into());
    // An older joiner's member (no fixed-key tag).
    let mut older = m.clone();
    older.remove("joiner.sh/cluster");
    for other in [foreign, doubly_tagged, node_group, older] {
        assert!(!send_command_allowed(other.clone(), "AWS-RunShellScript"));
        assert!(!allowed(&on_instance("ec2:StopInstances", other.clone())));
        assert!(!allowed(&on_instance(
            "ec2:TerminateInstances",
            other.clone()
        )));
    }
    // Terminating joiner's own serving node stays allowed (disruption, termination).
    assert!(allowed(&on_instance(
        "ec2:TerminateInstances",
        serving_node()
    )));
}

#[test]
fn the_evaluator_reads_conditions_as_iam_does() {
    assert!(glob("arn:aws:ec2:*:*:instance/*", &instance_arn()));
    assert!(!glob("arn:aws:ec2:*:*:volume/*", &instance_arn()));
    let req = create_tags(member(), &[]);
    assert!(condition_holds(
        "Null",
        "aws:ResourceTag/joiner.sh/warm-pool",
        &Value::from("false"),
        &req
    ));
    assert!(!condition_holds(
        "Null",
        "aws:TagKeys",
        &Value::from("false"),
        &req
    ));
    assert!(
        condition_holds(
            "ForAllValues:StringEquals",
            "aws:TagKeys",
            &serde_json::json!(["a"]),
            &req
        ),
        "ForAllValues over no keys holds (why Null aws:TagKeys is needed)"
    );
    assert!(!condition_holds(
        "StringEquals",
        "ec2:CreateAction",
        &serde_json::json!(["CreateFleet"]),
        &req
    ));
}
