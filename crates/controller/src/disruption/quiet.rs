//! A pass with nothing changed since the last does nothing: when a plan found nothing to do
//! and weighed every candidate, the next passes skip planning while the cluster's objects are
//! the same ([`fingerprint`]), for at most [`RECHECK`] (time alone makes some things due: an
//! expiry, `consolidateAfter`, a budget window; Karpenter re-plans every five minutes too).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use joiner_core::CloudProvider;

use crate::context::Context;

/// The longest a quiet cluster goes without a plan.
pub const RECHECK: Duration = Duration::from_secs(5 * 60);

/// A quiet plan: the cluster it was made on, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quiet {
    fingerprint: u64,
    at: Instant,
}

impl Quiet {
    /// A plan made at `at` on the cluster `fingerprint` found nothing and weighed everything.
    pub fn new(fingerprint: u64, at: Instant) -> Self {
        Quiet { fingerprint, at }
    }

    /// True when a pass at `now` on the cluster `fingerprint` may skip planning.
    pub fn holds(&self, fingerprint: u64, now: Instant) -> bool {
        self.fingerprint == fingerprint && now.saturating_duration_since(self.at) < RECHECK
    }
}

/// What the planner reads of the cluster, as one number: every object's name and
/// resourceVersion in the stores a plan is made from (pods, nodes, claims with those this
/// replica wrote, Provisioners, NodeTemplates, PodDisruptionBudgets, DaemonSets).
pub fn fingerprint<P: CloudProvider>(ctx: &Context<P>) -> u64 {
    let mut h = DefaultHasher::new();
    let s = &ctx.state;
    fn each<K: kube::Resource>(h: &mut DefaultHasher, kind: &str, objects: &[std::sync::Arc<K>]) {
        kind.hash(h);
        objects.len().hash(h);
        for o in objects {
            o.meta().namespace.hash(h);
            o.meta().name.hash(h);
            o.meta().resource_version.hash(h);
            o.meta().deletion_timestamp.is_some().hash(h);
        }
    }
    each(&mut h, "pods", &s.pods.state());
    each(&mut h, "nodes", &s.nodes.state());
    each(&mut h, "claims", &s.claims());
    each(&mut h, "provisioners", &s.provisioners.state());
    each(&mut h, "nodetemplates", &s.node_templates.state());
    each(&mut h, "pdbs", &s.pdbs.state());
    each(&mut h, "daemonsets", &s.daemonsets.state());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_plan_holds_while_nothing_changes_and_not_past_the_recheck() {
        let t0 = Instant::now();
        let q = Quiet::new(7, t0);
        assert!(q.holds(7, t0 + Duration::from_secs(60)));
        assert!(
            !q.holds(8, t0 + Duration::from_secs(60)),
            "something changed"
        );
        assert!(
            !q.holds(7, t0 + RECHECK),
            "planned again every five minutes"
        );
    }
}
