//! Garbage collection: the cloud and the NodeClaims must agree.
//!
//! - An instance of joiner's (the cloud lists only those: the cluster tag *and*
//!   `joiner.sh/provisioner-name`) whose claim is missing (no claim tag, or a claim the
//!   store does not have) is an orphan: a crash between CreateFleet and the claim write, a claim
//!   deleted while its launch was in flight, a node launched by hand with joiner's tags. Once its
//!   launch is older than `settings.orphan_grace` (5 min: longer than any claim write takes) it is
//!   terminated through `CloudProvider::delete`, whose ownership guard refuses anything without
//!   both tags. Warm-pool members are NodeClaims like any other (labelled
//!   `joiner.sh/warm-pool`), so a member's instance is never an orphan while its claim exists,
//!   and one started for a claim carries that claim's name.
//! - A claim that is Launched but whose instance the cloud no longer lists (terminated out of
//!   band, spot reclaimed without notice) is deleted (`instance_gone`) once it was launched more
//!   than [`VANISHED_AFTER`] ago and its Node is not Ready (the listing is eventually
//!   consistent; a Ready Node proves the instance runs); termination then releases it at once.
//! - The sweep also sets `cost_per_hour` per Provisioner from the claims' `status.pricePerHour`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use joiner_apis::NodeClaim;
use joiner_core::{CloudError, CloudErrorKind, CloudProvider, LaunchedNode};

use k8s_openapi::jiff::Timestamp;

use crate::context::Context;
use crate::k8s::node_patch::is_ready;
use crate::metrics::{ProvisionerLabels, ReasonLabels};
use crate::reconcile::{age, delete_claim, first_error, LifecycleError};
use joiner_apis::cluster::matching::node_of;

pub use crate::reconcile::{launched_at, VANISHED_AFTER};

/// The `provisioner` label of orphans, whose Provisioner the claim would have named.
pub const UNKNOWN_PROVISIONER: &str = "unknown";

/// The garbage collector. It remembers when it first saw an instance whose launch time the
/// cloud did not report, so such an instance still gets its grace period, and which
/// Provisioners it set a cost for, so one whose nodes are all gone drops to zero.
#[derive(Debug, Default)]
pub struct Collector {
    first_seen: Mutex<HashMap<String, SystemTime>>,
    priced: Mutex<HashSet<String>>,
}

impl Collector {
    /// One sweep: orphans terminated, claims whose instance vanished deleted, costs set.
    /// Returns the first failure after every item had its turn.
    pub async fn sweep<P: CloudProvider>(&self, ctx: &Context<P>) -> Result<(), LifecycleError> {
        // Claims are read before the cloud is listed: a claim launched after this read is not
        // judged, and any claim in this read that is Launched had its instance before the list.
        // With the claims this replica wrote that the store does not show yet: a claim just
        // written must not leave its instance an orphan.
        let claims = ctx.state.claims();
        let nodes = ctx.state.nodes.state();
        let instances = ctx.cloud.list().await.map_err(|e| {
            LifecycleError::cloud(
                &format!("cluster {:?}", ctx.settings.cluster_name),
                "listing instances".into(),
                e,
            )
        })?;
        self.set_costs(ctx, &claims);
        let now = SystemTime::now();
        let names: HashSet<&str> = claims.iter().map(|c| c.name()).collect();
        let mut errors = Vec::new();

        let live: HashSet<&str> = instances.iter().map(|i| i.instance_id.as_str()).collect();
        self.forget_vanished(&live);
        for instance in &instances {
            if !self.is_orphan(instance, &names, ctx.settings.orphan_grace, now) {
                continue;
            }
            tracing::warn!(instance_id = %instance.instance_id, claim = ?instance.claim_name, "terminating an instance no NodeClaim owns");
            match ctx.cloud.delete(&instance.instance_id).await {
                Ok(()) => {}
                Err(e) if e.kind() == CloudErrorKind::NotFound => continue,
                Err(e) => {
                    errors.push(LifecycleError::cloud(
                        &format!("instance {}", instance.instance_id),
                        "terminating an orphan".into(),
                        e,
                    ));
                    continue;
                }
            }
            ctx.metrics
                .claims_terminated
                .get_or_create(&ReasonLabels {
                    provisioner: UNKNOWN_PROVISIONER.to_string(),
                    reason: "orphan".to_string(),
                })
                .inc();
        }

        for claim in &claims {
            if claim.metadata.deletion_timestamp.is_some() || !claim.is_launched() {
                continue;
            }
            let Some(id) = claim.status.as_ref().and_then(|s| s.instance_id.as_deref()) else {
                continue;
            };
            if live.contains(id) {
                continue;
            }
            // DescribeInstances is eventually consistent: a fresh instance may be missing from
            // a listing for a while. Only a claim launched long enough ago whose Node is not
            // Ready (a Ready Node proves the instance runs) is taken as gone.
            if age(launched_at(claim), Timestamp::now()) < VANISHED_AFTER {
                continue;
            }
            if node_of(claim, &nodes).is_some_and(|n| is_ready(n)) {
                continue;
            }
            tracing::warn!(
                claim = claim.name(),
                instance_id = id,
                "deleting a NodeClaim whose instance is gone"
            );
            if let Err(e) = delete_claim(
                ctx,
                claim,
                "instance_gone",
                "deleting: its instance is gone",
            )
            .await
            {
                errors.push(e);
            }
        }
        first_error(errors)
    }

    /// True for an instance with no claim in the store, launched longer
    /// than `grace` ago (or first seen that long ago when its launch time is unknown).
    fn is_orphan(
        &self,
        instance: &LaunchedNode,
        claims: &HashSet<&str>,
        grace: Duration,
        now: SystemTime,
    ) -> bool {
        if instance
            .claim_name
            .as_deref()
            .is_some_and(|c| claims.contains(c))
        {
            return false;
        }
        let since = instance.launch_time.unwrap_or_else(|| {
            *self
                .first_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(instance.instance_id.clone())
                .or_insert(now)
        });
        now.duration_since(since).unwrap_or_default() >= grace
    }

    fn forget_vanished(&self, live: &HashSet<&str>) {
        self.first_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| live.contains(id.as_str()));
    }

    /// Sets `cost_per_hour{provisioner}` to the sum of `status.pricePerHour` of the claims that
    /// are launched and not yet released; Provisioners priced before and now without claims
    /// drop to 0.
    fn set_costs<P: CloudProvider>(&self, ctx: &Context<P>, claims: &[std::sync::Arc<NodeClaim>]) {
        let costs = costs(claims);
        let mut priced = self.priced.lock().unwrap_or_else(|p| p.into_inner());
        for stale in priced.iter().filter(|p| !costs.contains_key(*p)) {
            ctx.metrics
                .cost_per_hour
                .get_or_create(&ProvisionerLabels {
                    provisioner: stale.clone(),
                })
                .set(0.0);
        }
        for (provisioner, cost) in &costs {
            ctx.metrics
                .cost_per_hour
                .get_or_create(&ProvisionerLabels {
                    provisioner: provisioner.clone(),
                })
                .set(*cost);
        }
        *priced = costs.into_keys().collect();
    }
}

/// The hourly price of the launched claims, per Provisioner. Warm-pool members are left out:
/// a stopped member costs its volumes, not its price (`joiner_warm_pool_idle_cost_per_hour`).
pub fn costs(claims: &[std::sync::Arc<NodeClaim>]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for claim in claims
        .iter()
        .filter(|c| c.is_launched() && c.warm_pool().is_none())
    {
        if let Some(price) = claim.status.as_ref().and_then(|s| s.price_per_hour) {
            *out.entry(claim.spec.provisioner_name.clone())
                .or_insert(0.0) += price;
        }
    }
    out
}
