//! iam/interruption-queue.yaml delivers what the consumer reads: one EventBridge rule per
//! (source, detail-type) the parser handles, each targeting the queue; the queue keeps
//! messages 300 s, is encrypted, takes messages from EventBridge and refuses plain HTTP; the
//! controller may do on it exactly what the code does (the same actions as the queue
//! statement of iam/controller-policy.json).

use std::collections::BTreeSet;
use std::path::Path;

use joiner_aws::interruption::parse::{
    HEALTH, REBALANCE, SOURCE_EC2, SOURCE_HEALTH, SPOT_INTERRUPTION, STATE_CHANGE,
};
use serde_yaml::Value;

fn template() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../iam/interruption-queue.yaml");
    let text = std::fs::read_to_string(&path).expect("template");
    serde_yaml::from_str(&text).expect("the template is YAML")
}

fn resources_of_type<'a>(t: &'a Value, kind: &str) -> Vec<(&'a str, &'a Value)> {
    t["Resources"]
        .as_mapping()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some(kind))
        .map(|(k, r)| (k.as_str().expect("name"), r))
        .collect()
}

fn strings(v: &Value) -> BTreeSet<String> {
    match v {
        Value::String(s) => [s.clone()].into(),
        Value::Sequence(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => BTreeSet::new(),
    }
}

fn is_queue_arn(v: &Value) -> bool {
    v["Fn::GetAtt"] == serde_yaml::to_value(["InterruptionQueue", "Arn"]).expect("yaml")
}

#[test]
fn one_rule_per_event_the_parser_reads_each_sending_to_the_queue() {
    let t = template();
    let rules = resources_of_type(&t, "AWS::Events::Rule");
    let mut patterns: BTreeSet<(String, String)> = BTreeSet::new();
    for (name, rule) in &rules {
        let p = &rule["Properties"];
        let sources = strings(&p["EventPattern"]["source"]);
        let types = strings(&p["EventPattern"]["detail-type"]);
        assert_eq!(
            (sources.len(), types.len()),
            (1, 1),
            "{name}: one source, one detail-type"
        );
        patterns.insert((
            sources.into_iter().next().unwrap_or_default(),
            types.into_iter().next().unwrap_or_default(),
        ));
        let targets = p["Targets"].as_sequence().expect("targets");
        assert_eq!(targets.len(), 1, "{name}");
        assert!(is_queue_arn(&targets[0]["Arn"]), "{name} targets the queue");
    }
    let want: BTreeSet<(String, String)> = [
        (SOURCE_EC2, SPOT_INTERRUPTION),
        (SOURCE_EC2, REBALANCE),
        (SOURCE_EC2, STATE_CHANGE),
        (SOURCE_HEALTH, HEALTH),
    ]
    .iter()
    .map(|(s, d)| (s.to_string(), d.to_string()))
    .collect();
    assert_eq!(patterns, want);

    // The state-change rule sends the states the consumer acts on, no others.
    let (_, state) = rules
        .iter()
        .find(|(_, r)| {
            strings(&r["Properties"]["EventPattern"]["detail-type"]).contains(STATE_CHANGE)
        })
        .expect("state-change rule");
    assert_eq!(
        strings(&state["Properties"]["EventPattern"]["detail"]["state"]),
        ["shutting-down", "stopped", "stopping", "terminated"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

#[test]
fn the_queue_is_short_lived_encrypted_fed_by_eventbridge_and_refuses_plain_http() {
    let t = template();
    let (_, queue) = resources_of_type(&t, "AWS::SQS::Queue")[0];
    assert_eq!(
        queue["Properties"]["MessageRetentionPeriod"].as_u64(),
        Some(300)
    );
    assert_eq!(
        queue["Properties"]["SqsManagedSseEnabled"].as_bool(),
        Some(true)
    );

    let (_, policy) = resources_of_type(&t, "AWS::SQS::QueuePolicy")[0];
    let statements = policy["Properties"]["PolicyDocument"]["Statement"]
        .as_sequence()
        .expect("statements");
    let allow = statements
        .iter()
        .find(|s| s["Effect"].as_str() == Some("Allow"))
        .expect("an allow");
    assert!(strings(&allow["Principal"]["Service"]).contains("events.amazonaws.com"));
    assert_eq!(
        strings(&allow["Action"]),
        ["sqs:SendMessage".to_string()].into()
    );
    assert!(is_queue_arn(&allow["Resource"]));
    let deny = statements
        .iter()
        .find(|s| s["Effect"].as_str() == Some("Deny"))
        .expect("a deny");
    assert_eq!(
        deny["Condition"]["Bool"]["aws:SecureTransport"].as_str(),
        Some("false")
    );
    assert!(is_queue_arn(&deny["Resource"]));
}

#[test]
fn the_controller_may_do_on_the_queue_what_the_code_does_and_nothing_else() {
    let t = template();
    let (_, managed) = resources_of_type(&t, "AWS::IAM::ManagedPolicy")[0];
    let statements = managed["Properties"]["PolicyDocument"]["Statement"]
        .as_sequence()
        .expect("statements");
    assert_eq!(statements.len(), 1);
    assert!(
        is_queue_arn(&statements[0]["Resource"]),
        "scoped to the queue"
    );
    let here = strings(&statements[0]["Action"]);

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../iam/controller-policy.json");
    let policy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("policy")).expect("json");
    let there: BTreeSet<String> = policy["Statement"]
        .as_array()
        .expect("statements")
        .iter()
        .filter(|s| s["Sid"] == "InterruptionQueue")
        .flat_map(|s| s["Action"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    assert_eq!(here, there, "the template and controller-policy.json agree");
    assert!(here.iter().all(|a| a.starts_with("sqs:")));
    assert!(!here.contains("sqs:SendMessage") && !here.contains("sqs:*"));
}

/// cfn-lint asks every stateful resource for its deletion and replacement policies: the queue
/// says Delete for both, in this template and in iam/joiner.yaml (its messages are worth
/// minutes).
#[test]
fn the_queue_says_what_happens_to_it_on_delete_and_replace() {
    let stack = {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../iam/joiner.yaml");
        let text = std::fs::read_to_string(&path).expect("stack");
        serde_yaml::from_str::<Value>(&text).expect("the stack is YAML")
    };
    for t in [template(), stack] {
        let queues = resources_of_type(&t, "AWS::SQS::Queue");
        assert_eq!(queues.len(), 1);
        for (name, q) in queues {
            assert_eq!(q["DeletionPolicy"].as_str(), Some("Delete"), "{name}");
            assert_eq!(q["UpdateReplacePolicy"].as_str(), Some("Delete"), "{name}");
        }
    }
}
