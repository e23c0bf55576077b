//! Interruption events: what the cloud says is about to happen to an instance, and what the
//! controller does about it.
//!
//! A cloud announces the end of an instance (a spot interruption warning, scheduled
//! maintenance, a stop or termination under way) or a hint (a spot rebalance recommendation)
//! through a queue. The cloud crate reads its own message format into an [`Event`]; the
//! controller maps each to an [`Action`] and carries it out. Messages that are not events
//! (malformed, of another source, not about an instance) are answered with a [`Rejected`]
//! reason, so every message ends deleted and counted by kind, never stuck in the queue.

use std::future::Future;

use crate::cloud_provider::CloudError;

/// What happens (or may happen) to the instances an event names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The cloud reclaims spot capacity in about two minutes.
    SpotInterruption,
    /// The spot instance is at elevated risk of interruption; nothing is decided yet.
    RebalanceRecommendation,
    /// Maintenance scheduled by the cloud (a retirement, a reboot) will stop the instance.
    ScheduledChange,
    /// The instance is stopping or stopped.
    Stopping,
    /// The instance is shutting down or terminated.
    Terminating,
}

impl EventKind {
    /// A metric label and log word (`spot_interruption`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SpotInterruption => "spot_interruption",
            EventKind::RebalanceRecommendation => "rebalance_recommendation",
            EventKind::ScheduledChange => "scheduled_change",
            EventKind::Stopping => "instance_stopping",
            EventKind::Terminating => "instance_terminating",
        }
    }

    /// The Event reason published on the node and its claim (`SpotInterrupted`, ...).
    pub fn event_reason(self) -> &'static str {
        match self {
            EventKind::SpotInterruption => "SpotInterrupted",
            EventKind::RebalanceRecommendation => "RebalanceRecommendation",
            EventKind::ScheduledChange => "ScheduledMaintenance",
            EventKind::Stopping => "InstanceStopping",
            EventKind::Terminating => "InstanceTerminating",
        }
    }

    /// What the controller does for it, given whether the node's Provisioner asks for
    /// proactive replacement on rebalance recommendations.
    pub fn action(self, rebalance_replaces: bool) -> Action {
        match self {
            EventKind::RebalanceRecommendation if !rebalance_replaces => Action::Notify,
            EventKind::SpotInterruption => Action::Replace {
                mark_unavailable: true,
            },
            _ => Action::Replace {
                mark_unavailable: false,
            },
        }
    }
}

/// What the controller does with a node an event names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Publish an Event on the node and its claim; nothing else.
    Notify,
    /// Cordon the node, launch replacement capacity for its pods at once, then delete its
    /// claim (the termination flow drains it). With `mark_unavailable`, the instance's offering
    /// (type, zone, spot) is first marked unavailable so the replacement avoids it.
    Replace {
        /// Mark the offering unavailable first (spot interruptions).
        mark_unavailable: bool,
    },
}

/// One event read from the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The event's own ID (the cloud may deliver an event twice; the ID tells duplicates).
    pub id: String,
    /// What it announces.
    pub kind: EventKind,
    /// The instances it is about (one for EC2 events; several for a Health event).
    pub instance_ids: Vec<String>,
    /// When the cloud emitted it, Unix seconds: an event older than the instance's claim is
    /// about something before the claim (e.g. a warm-pool member's own stop) and is stale.
    pub time: i64,
}

/// Why a message is not acted on. Each is deleted from the queue and counted by
/// [`Rejected::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rejected {
    /// The body is empty.
    Empty,
    /// The body is larger than a queue message can be.
    TooLarge,
    /// The body is not JSON (or not a JSON object).
    NotJson,
    /// A field the event needs is missing.
    MissingField,
    /// A field has the wrong type or an impossible value.
    WrongType,
    /// A source, detail type or version joiner does not handle.
    UnknownEvent,
    /// A valid event joiner has nothing to do for (another service's Health event, a state
    /// change to `running`).
    Ignored,
    /// No NodeClaim of this cluster has the instance: not joiner's (another node group, a
    /// warm-pool member not bound to a claim, an instance already gone).
    NotOwned,
    /// The same event was handled moments ago.
    Duplicate,
    /// The event is older than the instance's claim.
    Stale,
    /// The instance is a warm-pool member not handed to a workload yet (its claim carries the
    /// `joiner.sh/warm-pool` label): its stops and starts are joiner's own doing.
    WarmPool,
}

impl Rejected {
    /// A metric label (`not_json`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::Empty => "empty",
            Rejected::TooLarge => "too_large",
            Rejected::NotJson => "not_json",
            Rejected::MissingField => "missing_field",
            Rejected::WrongType => "wrong_type",
            Rejected::UnknownEvent => "unknown_event",
            Rejected::Ignored => "ignored",
            Rejected::NotOwned => "not_owned",
            Rejected::Duplicate => "duplicate",
            Rejected::Stale => "stale",
            Rejected::WarmPool => "warm_pool",
        }
    }

    /// Every reason, for tests and metric documentation.
    pub const ALL: [Rejected; 11] = [
        Rejected::Empty,
        Rejected::TooLarge,
        Rejected::NotJson,
        Rejected::MissingField,
        Rejected::WrongType,
        Rejected::UnknownEvent,
        Rejected::Ignored,
        Rejected::NotOwned,
        Rejected::Duplicate,
        Rejected::Stale,
        Rejected::WarmPool,
    ];
}

/// A message body that is not an event joiner acts on, and why, in words naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotAnEvent {
    /// The kind, for the metric.
    pub reason: Rejected,
    /// What was wrong (`detail.instance-id: missing`), for the log.
    pub detail: String,
}

/// One message taken from the queue: its handle for deletion and what its body says.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The queue's message ID (logged with every outcome).
    pub message_id: String,
    /// The handle that deletes it.
    pub receipt: String,
    /// The event, or why the body is not one.
    pub body: Result<Event, NotAnEvent>,
    /// When the queue received it, Unix milliseconds, when known (queue latency metric).
    pub sent_at_ms: Option<i64>,
}

/// The queue of interruption messages, as the controller drives it.
pub trait InterruptionQueue: Send + Sync {
    /// Why a queue call failed.
    type Error: CloudError;

    /// Waits (long poll) for up to a batch of messages; an empty batch is normal.
    fn receive(&self) -> impl Future<Output = Result<Vec<Message>, Self::Error>> + Send;

    /// Deletes the messages with `receipts` (handled, or not worth handling), in one call where
    /// the queue allows: one answer per receipt, in order, `None` when deleted or why not.
    fn delete(
        &self,
        receipts: &[String],
    ) -> impl Future<Output = Result<Vec<Option<String>>, Self::Error>> + Send;

    /// How long a received message stays invisible to other receivers: a message still in
    /// work when it runs out comes back and is handled twice, so the consumer extends it
    /// before then.
    fn visibility(&self) -> std::time::Duration;

    /// Keeps the messages with `receipts` invisible for another [`Self::visibility`] from
    /// now, while their handling goes on (a replacement launch throttled by the cloud).
    fn extend(&self, receipts: &[String]) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebalance_only_notifies_unless_the_provisioner_opts_in() {
        assert_eq!(
            EventKind::RebalanceRecommendation.action(false),
            Action::Notify
        );
        assert_eq!(
            EventKind::RebalanceRecommendation.action(true),
            Action::Replace {
                mark_unavailable: false
            }
        );
    }

    #[test]
    fn only_spot_interruptions_mark_the_offering() {
        for kind in [
            EventKind::ScheduledChange,
            EventKind::Stopping,
            EventKind::Terminating,
        ] {
            assert_eq!(
                kind.action(false),
                Action::Replace {
                    mark_unavailable: false
                },
                "{kind:?}"
            );
        }
        assert_eq!(
            EventKind::SpotInterruption.action(false),
            Action::Replace {
                mark_unavailable: true
            }
        );
    }

    #[test]
    fn rejection_labels_are_distinct() {
        let labels: std::collections::HashSet<&str> =
            Rejected::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), Rejected::ALL.len());
    }
}
