//! When each Provisioner opened its claims over the last day, for `size: auto`: a pool sized
//! by the claims that still exist would forget every node consolidation already removed, so
//! the reconciler records each claim it sees (by UID) with its creation time and keeps a day
//! of them. The record lives in the leader's memory: after a failover the new leader starts
//! from the claims that exist, and the history fills again within the day.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::NodeClaim;
use k8s_openapi::jiff::Timestamp;

use super::sizing::AUTO_HISTORY;

/// Claim creations seen, per Provisioner. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct ClaimHistory(Arc<Mutex<HashMap<String, (String, Timestamp)>>>);

impl ClaimHistory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Timestamp)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `claims` that are not warm-pool members (members are the pool, not demand),
    /// and forgets what is older than a day at `now`.
    pub fn observe(&self, claims: &[Arc<NodeClaim>], now: Timestamp) {
        let since = now - AUTO_HISTORY;
        let mut seen = self.lock();
        for c in claims.iter().filter(|c| c.warm_pool().is_none()) {
            let (Some(uid), Some(created)) = (
                c.metadata.uid.as_ref(),
                c.metadata.creation_timestamp.as_ref(),
            ) else {
                continue;
            };
            if created.0 >= since {
                seen.entry(uid.clone())
                    .or_insert_with(|| (c.spec.provisioner_name.clone(), created.0));
            }
        }
        seen.retain(|_, (_, t)| *t >= since);
    }

    /// The creation times recorded for `provisioner`.
    pub fn created(&self, provisioner: &str) -> Vec<Timestamp> {
        self.lock()
            .values()
            .filter(|(p, _)| p == provisioner)
            .map(|(_, t)| *t)
            .collect()
    }

    /// How many claims are recorded, per Provisioner (for tests and logs).
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (p, _) in self.lock().values() {
            *out.entry(p.clone()).or_default() += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(uid: &str, prov: &str, created: &str, member: bool) -> Arc<NodeClaim> {
        let mut v = json!({
            "metadata": {"name": uid, "uid": uid, "creationTimestamp": created},
            "spec": {"provisionerName": prov},
        });
        if member {
            v["metadata"]["labels"] = json!({"joiner.sh/warm-pool": prov});
        }
        Arc::new(serde_json::from_value(v).expect("claim"))
    }

    #[test]
    fn claims_are_remembered_for_a_day_after_they_are_gone() {
        let h = ClaimHistory::default();
        let now: Timestamp = "2026-12-04T12:00:00Z".parse().expect("now");
        h.observe(
            &[
                claim("a", "web", "2026-12-04T09:00:00Z", false),
                claim("b", "web", "2026-12-04T09:05:00Z", false),
                claim("m", "web", "2026-12-04T09:06:00Z", true),
                claim("old", "web", "2026-12-03T09:00:00Z", false),
                claim("c", "batch", "2026-12-04T10:00:00Z", false),
            ],
            now,
        );
        // Consolidation removed a and b: they still count.
        h.observe(&[], now);
        assert_eq!(h.created("web").len(), 2);
        assert_eq!(h.counts()["batch"], 1);
        // A day later they are forgotten.
        let later: Timestamp = "2026-12-05T09:30:00Z".parse().expect("later");
        h.observe(&[], later);
        assert!(h.created("web").is_empty());
        assert_eq!(h.counts().get("batch"), Some(&1));
    }
}
