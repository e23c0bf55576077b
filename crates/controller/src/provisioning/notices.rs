//! Telling pods what a batch decided: `Nominated` naming the claim a pod should land on, or
//! `FailedScheduling` with the simulation's reason.
//!
//! A pod stays pending across several batches (its node is still starting), so the same
//! message would be posted again and again; the last message per pod is remembered and only a
//! change is published.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::pod_record::PodRecord;
use futures::StreamExt;
use joiner_core::scheduling::Plan;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::k8s::events::{self, EventType};

/// Reason of the Event naming the claim a pod is waiting for.
pub const NOMINATED: &str = "Nominated";
/// Reason of the Event explaining why no node joiner could launch fits the pod.
pub const FAILED_SCHEDULING: &str = "FailedScheduling";

/// The message of a `Nominated` Event.
pub fn nominated_message(claim: &str) -> String {
    format!("Pod should schedule on nodeclaim/{claim}")
}

/// One Event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// Normal or Warning.
    pub kind: EventType,
    /// `Nominated` or `FailedScheduling`.
    pub reason: &'static str,
    /// The message.
    pub message: String,
    /// For `Nominated`, the claim named.
    pub claim: Option<String>,
}

/// The Events a plan calls for: `Nominated` for pods on new claims (`claim_of_node` maps the
/// plan's node names to the claims written for them) and on in-flight claims (`in_flight`),
/// `FailedScheduling` for pods the plan cannot place. Pods placed on registered nodes get none:
/// the kube-scheduler binds them.
pub fn notices(
    plan: &Plan,
    claim_of_node: &BTreeMap<String, String>,
    in_flight: &HashSet<String>,
) -> Vec<Notice> {
    let mut out = Vec::new();
    for node in &plan.new_nodes {
        if let Some(claim) = claim_of_node.get(&node.name) {
            for pod in &node.pods {
                out.push(nominated(pod, claim));
            }
        }
    }
    for used in &plan.existing_nodes {
        if in_flight.contains(&used.name) {
            for pod in &used.pods {
                out.push(nominated(pod, &used.name));
            }
        }
    }
    for u in &plan.unschedulable {
        out.push(Notice {
            pod: u.pod.clone(),
            kind: EventType::Warning,
            reason: FAILED_SCHEDULING,
            message: u.reason.clone(),
            claim: None,
        });
    }
    out
}

fn nominated(pod: &str, claim: &str) -> Notice {
    Notice {
        pod: pod.to_string(),
        kind: EventType::Normal,
        reason: NOMINATED,
        message: nominated_message(claim),
        claim: Some(claim.to_string()),
    }
}

/// The last notice published per pod.
#[derive(Debug, Default)]
pub struct Published {
    last: HashMap<String, Notice>,
}

impl Published {
    /// Keeps only the pods in `pending`: a pod that was scheduled or deleted is forgotten, so
    /// the memory stays as small as the pending set.
    pub fn retain_pending(&mut self, pending: &HashSet<String>) {
        self.last.retain(|k, _| pending.contains(k));
    }

    /// True when `notice` tells the pod something new. A pod already nominated to a claim
    /// that is still in flight (`in_flight`) is not nominated again to another: identical pods
    /// may trade identical claims from one simulation to the next, and which one a pod lands on
    /// is the kube-scheduler's choice anyway.
    pub fn is_new(&self, notice: &Notice, in_flight: &HashSet<String>) -> bool {
        let Some(last) = self.last.get(&notice.pod) else {
            return true;
        };
        if last.reason == NOMINATED
            && notice.reason == NOMINATED
            && last.claim.as_ref().is_some_and(|c| in_flight.contains(c))
        {
            return false;
        }
        last.reason != notice.reason || last.message != notice.message
    }

    fn remember(&mut self, notice: &Notice) {
        self.last.insert(notice.pod.clone(), notice.clone());
    }
}

/// Events a batch publishes at once.
pub const EVENT_CONCURRENCY: usize = 16;

/// Publishes each notice that is new for its pod (see [`Published::is_new`]), several at once;
/// returns how many were published. A failure is logged and the notice is not remembered, so
/// the next batch tries again: an Event is an explanation, never a reason to fail the batch.
pub async fn publish_all(
    client: &kube::Client,
    pods: &Store<PodRecord>,
    published: &mut Published,
    notices: &[Notice],
    in_flight: &HashSet<String>,
) -> usize {
    let sends: Vec<_> = notices
        .iter()
        .filter(|notice| published.is_new(notice, in_flight))
        .filter_map(|notice| {
            let (namespace, name) = notice.pod.split_once('/')?;
            let pod = pods.get(&ObjectRef::new(name).within(namespace))?;
            Some(async move {
                let sent = events::publish(
                    client,
                    &pod.metadata,
                    notice.kind,
                    notice.reason,
                    &notice.message,
                )
                .await;
                (notice, sent)
            })
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(sends)
        .buffer_unordered(EVENT_CONCURRENCY)
        .collect()
        .await;
    let mut sent = 0;
    for (notice, result) in results {
        match result {
            Ok(_) => {
                published.remember(notice);
                sent += 1;
            }
            Err(e) => tracing::warn!(pod = %notice.pod, error = %e, "could not publish event"),
        }
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::scheduling::{ExistingNodeUse, Unschedulable};

    fn plan_on(claim: &str) -> Plan {
        Plan {
            existing_nodes: vec![ExistingNodeUse {
                name: claim.into(),
                pods: vec!["shop/a".into()],
            }],
            unschedulable: vec![Unschedulable {
                pod: "shop/big".into(),
                reason: "no instance type has 64 cpu".into(),
            }],
            ..Plan::default()
        }
    }

    #[test]
    fn pods_on_in_flight_claims_are_nominated_and_registered_nodes_are_not() {
        let in_flight: HashSet<String> = ["web-aaaaa".to_string()].into();
        let n = notices(&plan_on("web-aaaaa"), &BTreeMap::new(), &in_flight);
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].reason, NOMINATED);
        assert_eq!(n[0].message, "Pod should schedule on nodeclaim/web-aaaaa");
        assert_eq!(n[1].reason, FAILED_SCHEDULING);
        assert_eq!(n[1].kind, EventType::Warning);
        let on_node = notices(&plan_on("ip-10-0-1-5"), &BTreeMap::new(), &in_flight);
        assert_eq!(on_node.len(), 1, "a registered node needs no nomination");
    }

    #[test]
    fn repeats_and_trades_between_in_flight_claims_are_not_new() {
        let both: HashSet<String> = ["web-aaaaa".to_string(), "web-bbbbb".to_string()].into();
        let mut p = Published::default();
        let first = notices(&plan_on("web-aaaaa"), &BTreeMap::new(), &both);
        for n in &first {
            assert!(p.is_new(n, &both));
            p.remember(n);
        }
        for n in &first {
            assert!(!p.is_new(n, &both), "identical: {n:?}");
        }
        let traded = notices(&plan_on("web-bbbbb"), &BTreeMap::new(), &both);
        assert!(
            !p.is_new(&traded[0], &both),
            "still waiting for an in-flight claim"
        );
        // Once the first claim is gone, the new nomination is news.
        let only_b: HashSet<String> = ["web-bbbbb".to_string()].into();
        assert!(p.is_new(&traded[0], &only_b));
        p.retain_pending(&HashSet::new());
        assert!(
            p.is_new(&first[1], &both),
            "forgotten once no longer pending"
        );
    }
}
