//! Reading an interruption queue message: the EventBridge envelope and the four event kinds
//! joiner acts on.
//!
//! The body is the EventBridge event as the rule delivers it (`version`, `id`, `detail-type`,
//! `source`, `account`, `time`, `region`, `resources`, `detail`). Dispatch is on
//! (`version`, `source`, `detail-type`); each kind reads only the detail fields it needs, so a
//! field AWS adds later changes nothing. Anything else — an empty or huge body, not JSON, a
//! missing or mistyped field, an unknown source — is answered with a [`NotAnEvent`] naming the
//! field, never a panic: the consumer deletes and counts it.

use joiner_core::interruption::{Event, EventKind, NotAnEvent, Rejected};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};

/// The largest body read: EventBridge events are at most 256 KiB, so a larger body is not one
/// (and is not worth parsing).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// `source` of EC2 events.
pub const SOURCE_EC2: &str = "aws.ec2";
/// `source` of AWS Health events.
pub const SOURCE_HEALTH: &str = "aws.health";
/// `detail-type` of a spot interruption warning.
pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
/// `detail-type` of a rebalance recommendation.
pub const REBALANCE: &str = "EC2 Instance Rebalance Recommendation";
/// `detail-type` of an instance state change.
pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
/// `detail-type` of an AWS Health event.
pub const HEALTH: &str = "AWS Health Event";

fn reject(reason: Rejected, detail: impl Into<String>) -> NotAnEvent {
    NotAnEvent {
        reason,
        detail: detail.into(),
    }
}

/// The string at `key` of `obj` (`path` names it in errors).
fn string<'a>(obj: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a str, NotAnEvent> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(reject(
            Rejected::MissingField,
            format!("{path}{key}: missing"),
        )),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(reject(
            Rejected::WrongType,
            format!("{path}{key}: expected a string, found {}", kind_of(other)),
        )),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// True for an EC2 instance ID (`i-` and 8 or 17 hex digits).
pub fn is_instance_id(s: &str) -> bool {
    s.strip_prefix("i-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17) && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn instance_id(detail: &Map<String, Value>) -> Result<String, NotAnEvent> {
    let id = string(detail, "instance-id", "detail.")?;
    if !is_instance_id(id) {
        return Err(reject(
            Rejected::WrongType,
            format!("detail.instance-id: {id:?} is not an instance ID"),
        ));
    }
    Ok(id.to_string())
}

/// Reads one message body.
pub fn parse(body: &str) -> Result<Event, NotAnEvent> {
    if body.trim().is_empty() {
        return Err(reject(Rejected::Empty, "empty body"));
    }
    if body.len() > MAX_BODY_BYTES {
        return Err(reject(
            Rejected::TooLarge,
            format!(
                "body of {} bytes is larger than any event ({MAX_BODY_BYTES})",
                body.len()
            ),
        ));
    }
    let value: Value = serde_json::from_str(body)
        .map_err(|e| reject(Rejected::NotJson, format!("not JSON: {e}")))?;
    let Value::Object(envelope) = value else {
        return Err(reject(
            Rejected::NotJson,
            format!("expected a JSON object, found {}", kind_of(&value)),
        ));
    };
    let version = string(&envelope, "version", "")?;
    let source = string(&envelope, "source", "")?;
    let detail_type = string(&envelope, "detail-type", "")?;
    if version != "0" {
        return Err(reject(
            Rejected::UnknownEvent,
            format!("version {version:?} of {source} {detail_type:?} is not handled"),
        ));
    }
    let id = string(&envelope, "id", "")?.to_string();
    let time_text = string(&envelope, "time", "")?;
    let time = time_text.parse::<Timestamp>().map_err(|e| {
        reject(
            Rejected::WrongType,
            format!("time: {time_text:?} is not an RFC 3339 time: {e}"),
        )
    })?;
    let detail = match envelope.get("detail") {
        None | Some(Value::Null) => return Err(reject(Rejected::MissingField, "detail: missing")),
        Some(Value::Object(d)) => d,
        Some(other) => {
            return Err(reject(
                Rejected::WrongType,
                format!("detail: expected an object, found {}", kind_of(other)),
            ))
        }
    };
    let (kind, instance_ids) = match (source, detail_type) {
        (SOURCE_EC2, SPOT_INTERRUPTION) => {
            (EventKind::SpotInterruption, vec![instance_id(detail)?])
        }
        (SOURCE_EC2, REBALANCE) => (
            EventKind::RebalanceRecommendation,
            vec![instance_id(detail)?],
        ),
        (SOURCE_EC2, STATE_CHANGE) => {
            let id = instance_id(detail)?;
            let kind = match string(detail, "state", "detail.")? {
                "stopping" | "stopped" => EventKind::Stopping,
                "shutting-down" | "terminated" => EventKind::Terminating,
                other => {
                    return Err(reject(
                        Rejected::Ignored,
                        format!("detail.state: {other:?} ends nothing"),
                    ))
                }
            };
            (kind, vec![id])
        }
        (SOURCE_HEALTH, HEALTH) => (EventKind::ScheduledChange, health_instances(detail)?),
        _ => {
            return Err(reject(
                Rejected::UnknownEvent,
                format!("source {source:?} detail-type {detail_type:?} is not handled"),
            ))
        }
    };
    Ok(Event {
        id,
        kind,
        instance_ids,
        time: time.as_second(),
    })
}

/// The instances of an EC2 scheduled-change Health event.
fn health_instances(detail: &Map<String, Value>) -> Result<Vec<String>, NotAnEvent> {
    let service = string(detail, "service", "detail.")?;
    if service != "EC2" {
        return Err(reject(
            Rejected::Ignored,
            format!("detail.service: {service:?} events are not about instances"),
        ));
    }
    let category = string(detail, "eventTypeCategory", "detail.")?;
    if category != "scheduledChange" {
        return Err(reject(
            Rejected::Ignored,
            format!("detail.eventTypeCategory: {category:?} needs no action"),
        ));
    }
    let entities = match detail.get("affectedEntities") {
        None | Some(Value::Null) => {
            return Err(reject(
                Rejected::MissingField,
                "detail.affectedEntities: missing",
            ))
        }
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(reject(
                Rejected::WrongType,
                format!(
                    "detail.affectedEntities: expected an array, found {}",
                    kind_of(other)
                ),
            ))
        }
    };
    let mut ids = Vec::new();
    for (i, entity) in entities.iter().enumerate() {
        let Value::Object(entity) = entity else {
            return Err(reject(
                Rejected::WrongType,
                format!(
                    "detail.affectedEntities[{i}]: expected an object, found {}",
                    kind_of(entity)
                ),
            ));
        };
        let value = string(
            entity,
            "entityValue",
            &format!("detail.affectedEntities[{i}]."),
        )?;
        // Health events may name other entities (volumes, hosts) beside instances.
        if is_instance_id(value) && !ids.iter().any(|id| id == value) {
            ids.push(value.to_string());
        }
    }
    if ids.is_empty() {
        return Err(reject(
            Rejected::Ignored,
            "detail.affectedEntities: no instance among them",
        ));
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(body: &str) -> NotAnEvent {
        parse(body).expect_err(body)
    }

    #[test]
    fn instance_ids_are_checked() {
        assert!(is_instance_id("i-0123456789abcdef0"));
        assert!(is_instance_id("i-0123abcd"));
        assert!(!is_instance_id("i-"));
        assert!(!is_instance_id("i-xyz12345"));
        assert!(!is_instance_id("vol-0123456789abcdef0"));
    }

    #[test]
    fn empty_huge_and_non_json_bodies_are_rejected_by_kind() {
        assert_eq!(rejected("").reason, Rejected::Empty);
        assert_eq!(rejected("  \n").reason, Rejected::Empty);
        assert_eq!(rejected("{not json").reason, Rejected::NotJson);
        assert_eq!(rejected("[1,2]").reason, Rejected::NotJson);
        assert_eq!(rejected("\"text\"").reason, Rejected::NotJson);
        let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_BODY_BYTES));
        assert_eq!(rejected(&huge).reason, Rejected::TooLarge);
    }

    #[test]
    fn missing_and_mistyped_fields_are_named() {
        let e = rejected(r#"{"version":"0","source":"aws.ec2"}"#);
        assert_eq!(e.reason, Rejected::MissingField);
        assert_eq!(e.detail, "detail-type: missing");
        let e = rejected(
            r#"{"version":"0","id":"x","time":"2026-01-01T00:00:00Z","source":"aws.ec2",
               "detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":5}}"#,
        );
        assert_eq!(e.reason, Rejected::WrongType);
        assert_eq!(
            e.detail,
            "detail.instance-id: expected a string, found a number"
        );
        let e = rejected(
            r#"{"version":"0","id":"x","time":"yesterday","source":"aws.ec2",
               "detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}"#,
        );
        assert_eq!(e.reason, Rejected::WrongType);
        assert!(e.detail.starts_with("time: \"yesterday\""), "{}", e.detail);
    }

    #[test]
    fn unknown_sources_types_and_versions_are_unknown_events() {
        for body in [
            r#"{"version":"0","id":"x","time":"2026-01-01T00:00:00Z","source":"aws.s3","detail-type":"Object Created","detail":{}}"#,
            r#"{"version":"1","id":"x","time":"2026-01-01T00:00:00Z","source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}"#,
        ] {
            assert_eq!(rejected(body).reason, Rejected::UnknownEvent, "{body}");
        }
    }
}
