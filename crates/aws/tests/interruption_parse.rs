//! The interruption parser on recorded EventBridge payloads (the shapes EC2 and AWS Health
//! deliver to an SQS target), on damaged copies of them, and on arbitrary input: every body
//! is an event or a named rejection, never a panic.

use joiner_aws::interruption::parse;
use joiner_core::interruption::{EventKind, Rejected};
use proptest::prelude::*;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/interruption/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn each_recorded_event_reads_as_its_kind_with_its_instances_and_time() {
    let cases = [
        (
            "spot_interruption",
            EventKind::SpotInterruption,
            vec!["i-0b662ef9931388ba0"],
            "2026-11-30T14:02:11Z",
        ),
        (
            "rebalance_recommendation",
            EventKind::RebalanceRecommendation,
            vec!["i-0b662ef9931388ba0"],
            "2026-11-30T13:58:40Z",
        ),
        (
            "state_change_stopping",
            EventKind::Stopping,
            vec!["i-1234567890abcdef0"],
            "2026-11-30T14:05:00Z",
        ),
        (
            "state_change_terminated",
            EventKind::Terminating,
            vec!["i-1234567890abcdef0"],
            "2026-11-30T14:06:30Z",
        ),
        (
            "health_scheduled_change",
            EventKind::ScheduledChange,
            vec!["i-0abcdef1234567890", "i-01234567"],
            "2026-11-29T09:00:00Z",
        ),
    ];
    for (name, kind, ids, time) in cases {
        let event = parse(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(event.kind, kind, "{name}");
        assert_eq!(event.instance_ids, ids, "{name}");
        let want: k8s_openapi::jiff::Timestamp = time.parse().expect("time");
        assert_eq!(event.time, want.as_second(), "{name}");
        assert!(!event.id.is_empty(), "{name}");
    }
}

#[test]
fn events_that_end_nothing_are_ignored_not_errors() {
    for name in ["state_change_running", "health_other_service"] {
        let e = parse(&fixture(name)).expect_err(name);
        assert_eq!(e.reason, Rejected::Ignored, "{name}: {e:?}");
    }
}

#[test]
fn a_state_change_to_stopped_or_shutting_down_is_read_as_its_family() {
    let stopped = fixture("state_change_stopping").replace("\"stopping\"", "\"stopped\"");
    assert_eq!(parse(&stopped).expect("stopped").kind, EventKind::Stopping);
    let shutting =
        fixture("state_change_terminated").replace("\"terminated\"", "\"shutting-down\"");
    assert_eq!(
        parse(&shutting).expect("shutting-down").kind,
        EventKind::Terminating
    );
}

#[test]
fn every_required_field_missing_is_named() {
    let spot: serde_json::Value =
        serde_json::from_str(&fixture("spot_interruption")).expect("json");
    for field in ["version", "id", "detail-type", "source", "time", "detail"] {
        let mut damaged = spot.clone();
        damaged.as_object_mut().expect("object").remove(field);
        let e = parse(&damaged.to_string()).expect_err(field);
        assert_eq!(e.reason, Rejected::MissingField, "{field}: {e:?}");
        assert_eq!(e.detail, format!("{field}: missing"));
    }
    let mut damaged = spot.clone();
    damaged["detail"]
        .as_object_mut()
        .expect("detail")
        .remove("instance-id");
    let e = parse(&damaged.to_string()).expect_err("instance-id");
    assert_eq!(e.detail, "detail.instance-id: missing");

    let health: serde_json::Value =
        serde_json::from_str(&fixture("health_scheduled_change")).expect("json");
    let mut damaged = health.clone();
    damaged["detail"]["affectedEntities"] = serde_json::json!("i-0abcdef1234567890");
    let e = parse(&damaged.to_string()).expect_err("entities");
    assert_eq!(e.reason, Rejected::WrongType);
    assert_eq!(
        e.detail,
        "detail.affectedEntities: expected an array, found a string"
    );
    let mut damaged = health;
    damaged["detail"]["affectedEntities"][1] = serde_json::json!({"entity": "x"});
    let e = parse(&damaged.to_string()).expect_err("entity value");
    assert_eq!(e.detail, "detail.affectedEntities[1].entityValue: missing");
}

#[test]
fn a_malformed_instance_id_is_refused() {
    let body = fixture("spot_interruption").replace(
        "\"instance-id\": \"i-0b662ef9931388ba0\"",
        "\"instance-id\": \"../../etc\"",
    );
    let e = parse(&body).expect_err("bad id");
    assert_eq!(e.reason, Rejected::WrongType);
    assert!(e.detail.starts_with("detail.instance-id:"), "{}", e.detail);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_text_makes_the_parser_panic(body in "\\PC{0,300}") {
        let _ = parse(&body);
    }

    #[test]
    fn no_json_value_in_any_field_makes_it_panic(
        field in prop::sample::select(vec!["version", "id", "detail-type", "source", "time", "detail", "resources"]),
        detail_field in prop::sample::select(vec!["instance-id", "state", "service", "eventTypeCategory", "affectedEntities"]),
        value in prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(|f| serde_json::json!(f)),
            "\\PC{0,30}".prop_map(serde_json::Value::from),
            Just(serde_json::json!([])),
            Just(serde_json::json!([{"entityValue": 1}, "x", null])),
            Just(serde_json::json!({})),
        ],
        which in prop::sample::select(vec!["spot_interruption", "state_change_stopping", "health_scheduled_change", "rebalance_recommendation"]),
    ) {
        let mut body: serde_json::Value = serde_json::from_str(&fixture(which)).expect("json");
        body[field] = value.clone();
        let outcome = parse(&body.to_string());
        if let Err(e) = &outcome {
            prop_assert!(!e.detail.is_empty());
        }
        let mut body: serde_json::Value = serde_json::from_str(&fixture(which)).expect("json");
        body["detail"][detail_field] = value;
        let _ = parse(&body.to_string());
    }

    #[test]
    fn truncating_a_real_event_anywhere_is_a_named_rejection(cut in 0usize..400) {
        let body = fixture("health_scheduled_change");
        let cut = cut.min(body.len());
        if body.is_char_boundary(cut) && cut < body.trim_end().len() {
            let e = parse(&body[..cut]).expect_err("truncated");
            prop_assert!(matches!(e.reason, Rejected::Empty | Rejected::NotJson), "{:?}", e);
        }
    }
}
