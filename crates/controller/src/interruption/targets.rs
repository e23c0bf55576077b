//! Which of joiner's nodes an event is about, or why none.
//!
//! An instance is joiner's when a NodeClaim of this cluster records it (`status.instanceID`,
//! or the last part of `status.providerID`): the claims are joiner's own record of what it
//! launched, so instances of managed node groups, other autoscalers, warm-pool members not
//! bound to a claim and anything already forgotten are not acted on. An event older than the
//! claim (beyond [`CLOCK_SKEW`]) is about the instance's life before the claim — a warm-pool
//! member's own stop during warm-up — and is stale. A claim already being deleted is on its
//! way out: a second event about it changes nothing. A claim labelled `joiner.sh/warm-pool` is
//! a warm-pool member not handed to a workload: joiner stops and starts it itself, so its
//! state changes are not interruptions.

use std::collections::HashMap;
use std::sync::Arc;

use joiner_apis::NodeClaim;
use joiner_core::interruption::Rejected;
use k8s_openapi::api::core::v1::Node;

use joiner_apis::cluster::matching::{claim_provider_id, node_of};

/// How much earlier than its claim an event may be stamped and still count: the cloud's and
/// the API server's clocks differ a little.
pub const CLOCK_SKEW: i64 = 60;

/// A claim an event may act on, with its node once registered.
#[derive(Clone, Debug)]
pub struct Target {
    /// The claim.
    pub claim: Arc<NodeClaim>,
    /// Its Node, when registered.
    pub node: Option<Arc<Node>>,
}

/// The claims of the cluster by the instance they record.
pub struct Owned<'a> {
    by_instance: HashMap<&'a str, &'a Arc<NodeClaim>>,
    nodes: &'a [Arc<Node>],
}

/// The instance ID a claim records, when launched.
pub fn instance_of(claim: &NodeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.instance_id.as_deref())
        .filter(|id| !id.is_empty())
        .or_else(|| {
            claim_provider_id(claim)
                .and_then(|p| p.rsplit('/').next())
                .filter(|id| !id.is_empty())
        })
}

impl<'a> Owned<'a> {
    /// Indexes `claims`.
    pub fn new(claims: &'a [Arc<NodeClaim>], nodes: &'a [Arc<Node>]) -> Self {
        // A warm-pool member handed to a claim records the same instance as the claim until
        // the member is removed: the claim is the one events are about.
        let mut by_instance: HashMap<&'a str, &'a Arc<NodeClaim>> = claims
            .iter()
            .filter(|c| c.warm_pool().is_none())
            .filter_map(|c| instance_of(c).map(|id| (id, c)))
            .collect();
        for member in claims.iter().filter(|c| c.warm_pool().is_some()) {
            if let Some(id) = instance_of(member) {
                by_instance.entry(id).or_insert(member);
            }
        }
        Owned { by_instance, nodes }
    }

    /// The claim of `instance_id` an event stamped `time` (Unix seconds) acts on, or why not.
    pub fn target(&self, instance_id: &str, time: i64) -> Result<Target, Rejected> {
        let claim = self
            .by_instance
            .get(instance_id)
            .ok_or(Rejected::NotOwned)?;
        if let Some(created) = claim.metadata.creation_timestamp.as_ref() {
            if time < created.0.as_second() - CLOCK_SKEW {
                return Err(Rejected::Stale);
            }
        }
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(Rejected::Duplicate);
        }
        let warm = claim
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(joiner_core::labels::WARM_POOL));
        if warm {
            return Err(Rejected::WarmPool);
        }
        Ok(Target {
            claim: (*claim).clone(),
            node: node_of(claim, self.nodes).cloned(),
        })
    }
}

/// The rejection that best explains a message none of whose instances is acted on: stale
/// before duplicate before warm pool before not owned (the most specific first).
pub fn strongest(reasons: &[Rejected]) -> Rejected {
    for r in [Rejected::Stale, Rejected::Duplicate, Rejected::WarmPool] {
        if reasons.contains(&r) {
            return r;
        }
    }
    Rejected::NotOwned
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, extra: serde_json::Value) -> Arc<NodeClaim> {
        let mut v = json!({
            "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": "2026-11-30T14:00:00Z"},
            "spec": {"provisionerName": "web"},
        });
        json_patch::merge(&mut v, &extra);
        Arc::new(serde_json::from_value(v).expect("claim"))
    }

    fn at(text: &str) -> i64 {
        text.parse::<k8s_openapi::jiff::Timestamp>()
            .expect("time")
            .as_second()
    }

    #[test]
    fn a_warm_pool_members_state_changes_are_joiners_own() {
        // A member stopped by the pool is labelled as such: its stop is no interruption. The
        // same instance, once handed to a workload (the label gone), is acted on.
        let member = claim(
            "warm-1",
            json!({"metadata": {"labels": {"joiner.sh/warm-pool": "web"}},
                "status": {"instanceID": "i-0000000w"}}),
        );
        let claims = vec![member];
        let owned = Owned::new(&claims, &[]);
        let t = at("2026-11-30T15:00:00Z");
        assert_eq!(
            owned.target("i-0000000w", t).err(),
            Some(Rejected::WarmPool)
        );
        let bound = vec![claim(
            "web-1",
            json!({"status": {"instanceID": "i-0000000w"}}),
        )];
        assert!(Owned::new(&bound, &[]).target("i-0000000w", t).is_ok());
        // During the hand-over both the member and the claim record the instance, in either
        // order: events are the claim's.
        for both in [
            vec![claims[0].clone(), bound[0].clone()],
            vec![bound[0].clone(), claims[0].clone()],
        ] {
            let owned = Owned::new(&both, &[]);
            assert_eq!(
                owned
                    .target("i-0000000w", t)
                    .expect("the claim")
                    .claim
                    .name(),
                "web-1"
            );
        }
        assert_eq!(
            strongest(&[Rejected::NotOwned, Rejected::WarmPool]),
            Rejected::WarmPool
        );
    }

    #[test]
    fn a_claim_is_found_by_instance_id_or_provider_id() {
        let claims = vec![
            claim("a", json!({"status": {"instanceID": "i-0000000a"}})),
            claim(
                "b",
                json!({"status": {"providerID": "aws:///us-east-1a/i-0000000b"}}),
            ),
            claim("c", json!({})),
        ];
        let owned = Owned::new(&claims, &[]);
        let t = at("2026-11-30T14:05:00Z");
        assert_eq!(owned.target("i-0000000a", t).expect("a").claim.name(), "a");
        assert_eq!(owned.target("i-0000000b", t).expect("b").claim.name(), "b");
        assert_eq!(
            owned.target("i-0000000c", t).err(),
            Some(Rejected::NotOwned)
        );
    }

    #[test]
    fn events_before_the_claim_are_stale_and_deleting_claims_are_done() {
        let claims = vec![
            claim("a", json!({"status": {"instanceID": "i-0000000a"}})),
            claim(
                "d",
                json!({"metadata": {"deletionTimestamp": "2026-11-30T14:06:00Z"},
                       "status": {"instanceID": "i-0000000d"}}),
            ),
        ];
        let owned = Owned::new(&claims, &[]);
        assert_eq!(
            owned.target("i-0000000a", at("2026-11-30T13:50:00Z")).err(),
            Some(Rejected::Stale)
        );
        assert!(
            owned
                .target("i-0000000a", at("2026-11-30T13:59:30Z"))
                .is_ok(),
            "within the clock skew"
        );
        assert_eq!(
            owned.target("i-0000000d", at("2026-11-30T14:07:00Z")).err(),
            Some(Rejected::Duplicate)
        );
        assert_eq!(
            strongest(&[Rejected::NotOwned, Rejected::Stale]),
            Rejected::Stale
        );
        assert_eq!(strongest(&[Rejected::NotOwned]), Rejected::NotOwned);
    }
}
