//! The instances a termination pass reads: listed for the objects being terminated only (not
//! the fleet), and at most every [`LIST_EVERY`] while nothing was terminated in between — a
//! drain a PodDisruptionBudget holds for a day costs one filtered DescribeInstances every
//! 10 s, not a fleet listing every second.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use joiner_apis::NodeClaim;
use joiner_core::{CloudProvider, LaunchedNode};
use k8s_openapi::api::core::v1::Node;

use joiner_apis::cluster::matching::node_provider_id;

/// Longest a listing is reused while the objects it covers wait.
pub const LIST_EVERY: Duration = Duration::from_secs(10);

/// What a pass asks the cloud about: the claims being terminated (by name and the instance
/// their status records) and the Nodes' instances (the last part of their providerID).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    claims: BTreeSet<String>,
    ids: BTreeSet<String>,
}

impl Wanted {
    /// The names and instance IDs of `work`'s claims and Nodes.
    pub fn of(work: &[(Option<&NodeClaim>, Option<&Node>)]) -> Self {
        let mut wanted = Wanted::default();
        for (claim, node) in work {
            if let Some(c) = claim {
                wanted.claims.insert(c.name().to_string());
                if let Some(id) = c.status.as_ref().and_then(|s| s.instance_id.as_deref()) {
                    wanted.ids.insert(id.to_string());
                }
            }
            let id = node
                .and_then(|n| node_provider_id(n))
                .and_then(|p| p.rsplit('/').next())
                .filter(|id| !id.is_empty());
            if let Some(id) = id {
                wanted.ids.insert(id.to_string());
            }
        }
        wanted
    }

    fn covered_by(&self, other: &Wanted) -> bool {
        self.claims.is_subset(&other.claims) && self.ids.is_subset(&other.ids)
    }
}

/// The last listing, reused while fresh and covering what a pass wants.
#[derive(Debug, Default)]
pub struct Listings {
    last: Mutex<Option<Listing>>,
}

#[derive(Debug)]
struct Listing {
    at: tokio::time::Instant,
    wanted: Wanted,
    instances: Arc<Vec<LaunchedNode>>,
}

impl Listings {
    /// The live instances of `wanted`: the last listing when it is younger than
    /// [`LIST_EVERY`] and covered them, else a new one (`CloudProvider::list_some`).
    pub async fn instances<P: CloudProvider>(
        &self,
        cloud: &P,
        wanted: &Wanted,
    ) -> Result<Arc<Vec<LaunchedNode>>, P::Error> {
        if let Some(l) = self.lock().as_ref() {
            if l.at.elapsed() < LIST_EVERY && wanted.covered_by(&l.wanted) {
                return Ok(l.instances.clone());
            }
        }
        let claims: Vec<String> = wanted.claims.iter().cloned().collect();
        let ids: Vec<String> = wanted.ids.iter().cloned().collect();
        let instances = Arc::new(cloud.list_some(&claims, &ids).await?);
        *self.lock() = Some(Listing {
            at: tokio::time::Instant::now(),
            wanted: wanted.clone(),
            instances: instances.clone(),
        });
        Ok(instances)
    }

    /// An instance was terminated: the next pass lists again, to see it shutting down and
    /// release its objects without waiting out the listing's age.
    pub fn invalidate(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Listing>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}
