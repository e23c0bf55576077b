//! The controller's Prometheus metrics, served on /metrics.
//!
//! One struct holds every family so reconcilers update them through `ctx.metrics` and the
//! runtime registers them once. Label values are bounded: provisioner names, reasons and error
//! codes, never pod or instance names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// How long a leader's control loop may go without beginning or ending a pass before
/// `/healthz` fails, so the kubelet restarts a controller wedged on a call that never returns
/// (the slowest loop, garbage collection, passes every 30 s; a termination step is bounded by
/// 30 s; a batch by its launches' timeouts).
pub const PASS_STALL: std::time::Duration = std::time::Duration::from_secs(300);

/// `provisioner` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisionerLabels {
    /// The Provisioner's name.
    pub provisioner: String,
}

/// `provisioner` and `reason` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The Provisioner's name.
    pub provisioner: String,
    /// Why (`deleted`, `launch_timeout`, `registration_timeout`, `orphan`, `instance_gone`, ...).
    pub reason: String,
}

/// `code` label: the cloud's error code (`InsufficientInstanceCapacity`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    /// The error code, or `other`.
    pub code: String,
}

/// `method` label: the CloudProvider call (`create`, `delete`, `get`, `list`, `instance_types`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// The method.
    pub method: String,
}

/// `controller` label: the reconciler (`provisioning`, `registration`, `termination`, `gc`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The reconciler.
    pub controller: String,
}

fn seconds_histogram() -> Histogram {
    // 5 ms .. ~80 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Every metric the controller exports.
#[derive(Debug)]
pub struct Metrics {
    /// Pods the kube-scheduler marked Unschedulable, at the last batch.
    pub pods_pending: Gauge,
    /// Pods a batch placed on existing, in-flight or new capacity.
    pub pods_scheduled: Counter,
    /// NodeClaims written, per Provisioner.
    pub claims_created: Family<ProvisionerLabels, Counter>,
    /// NodeClaims whose node registered, per Provisioner.
    pub claims_registered: Family<ProvisionerLabels, Counter>,
    /// Registration patches the API server refused (a label value or field it never takes),
    /// per Provisioner: each is retried only after a backoff.
    pub registrations_refused: Family<ProvisionerLabels, Counter>,
    /// NodeClaims terminated, per Provisioner and reason.
    pub claims_terminated: Family<ReasonLabels, Counter>,
    /// Launches that failed, per error code.
    pub launch_failures: Family<CodeLabels, Counter>,
    /// Duration of one scheduling simulation.
    pub scheduling_duration: Histogram,
    /// Duration of CloudProvider calls, per method.
    pub cloud_duration: Family<MethodLabels, Histogram>,
    /// CloudProvider calls that failed, per method.
    pub cloud_errors: Family<MethodLabels, Counter>,
    /// Hourly price of the running nodes (claims with a price), per Provisioner, USD.
    pub cost_per_hour: Family<ProvisionerLabels, Gauge<f64, AtomicU64>>,
    /// Reconcile passes that ended in an error, per reconciler.
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    /// Disruption decisions, per reason (`Empty`, `Expired`, `Drifted`, `Underutilized`) and
    /// outcome (`validating`, `dropped`, `replacing`, `deleted`, `failed`).
    pub disruption_decisions: Family<DecisionLabels, Counter>,
    /// $/h saved by disruption decisions carried out (what the removed nodes cost less what
    /// replaced them), USD.
    pub disruption_savings: Counter<f64, AtomicU64>,
    /// Nodes each disruption method could act on at the last pass, per reason (Karpenter's
    /// `voluntary_disruption_eligible_nodes`).
    pub disruption_eligible: Family<ReasonOnlyLabels, Gauge>,
    /// Nodes each Provisioner's budgets let go now, per reason, after those already
    /// disrupting (Karpenter's `nodepools_allowed_disruptions`, which counts before them).
    pub disruption_allowed: Family<BudgetLabels, Gauge>,
    /// Duration of one disruption plan (Karpenter's `decision_evaluation_duration_seconds`).
    pub disruption_evaluation: Histogram,
    /// Disruption commands given up (a failed launch or write, a replacement gone or never
    /// initialized, a decision that no longer held before the drain), per reason.
    pub disruption_failed: Family<ReasonOnlyLabels, Counter>,
    /// Interruption queue messages received, per kind: the event kind
    /// (`spot_interruption`, ...) or, for a body that is not an event, why (`not_json`, ...).
    pub interruption_messages: Family<KindLabels, Counter>,
    /// Interruption messages deleted without action, per reason (`not_owned`, `duplicate`,
    /// `stale`, `ignored`, and the malformed kinds).
    pub interruption_rejected: Family<KindLabels, Counter>,
    /// Nodes acted on for interruption events, per event kind and action (`notify`,
    /// `replace`).
    pub interruption_actions: Family<ActionLabels, Counter>,
    /// Interruption messages deleted from the queue.
    pub interruption_deleted: Counter,
    /// Time from a message's arrival in the queue to its deletion.
    pub interruption_latency: Histogram,
    /// Warm-pool members, per Provisioner and phase (`Warming`, `Warm`, `Claimed`).
    pub warm_pool_members: Family<PhaseLabels, Gauge>,
    /// Warm-pool takes, per Provisioner and outcome: `hit` (a member was started for a claim),
    /// `miss` (the pool had no member that fits within the premium), `fallback` (a member was
    /// chosen but its start failed, so the claim was launched).
    pub warm_pool_takes: Family<OutcomeLabels, Counter>,
    /// What each Provisioner's warm pool costs per hour while idle, USD.
    pub warm_pool_idle_cost: Family<ProvisionerLabels, Gauge<f64, AtomicU64>>,
    /// Time from a claim's creation to its Node being initialized, per source (`warm`: a
    /// warm-pool member was started; `cold`: a new instance was launched).
    pub claim_ready_duration: Family<SourceLabels, Histogram>,
    /// The Provisioners whose warm-pool gauges are set, so a removed pool's are dropped.
    warm_pools_reported: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// When each control loop must next begin or end a pass: `/healthz` fails when one is
    /// [`PASS_STALL`] past its period.
    pub passes: PassClock,
}

/// When each leader-only control loop must next begin or end a pass, for the liveness probe:
/// a loop wedged on a call that never returns shows as a loop whose deadline passed.
#[derive(Debug, Default)]
pub struct PassClock(
    std::sync::Mutex<std::collections::HashMap<&'static str, tokio::time::Instant>>,
);

impl PassClock {
    /// Loop `name`, which waits `period` between passes, began or ended a pass now: it is
    /// stalled if it does neither again within `period` plus `allowance`.
    pub fn tick(
        &self,
        name: &'static str,
        period: std::time::Duration,
        allowance: std::time::Duration,
    ) {
        self.lock()
            .insert(name, tokio::time::Instant::now() + period + allowance);
    }

    /// Loop `name` made progress within a pass (a launch, a step): a long pass that moves
    /// is not a stalled one.
    pub fn progress(&self, name: &'static str) {
        self.tick(name, std::time::Duration::ZERO, PASS_STALL);
    }

    /// The loop most overdue, and by how much, if any is.
    pub fn stalled(&self) -> Option<(&'static str, std::time::Duration)> {
        let now = tokio::time::Instant::now();
        self.lock()
            .iter()
            .filter(|(_, deadline)| now > **deadline)
            .map(|(name, deadline)| (*name, now - *deadline))
            .max_by_key(|(_, over)| *over)
    }

    /// Forgets every loop (the leadership ended: its loops stopped).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<&'static str, tokio::time::Instant>>
    {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `provisioner` and `phase` labels of warm-pool members.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The Provisioner.
    pub provisioner: String,
    /// The member phase.
    pub phase: String,
}

/// `provisioner` and `outcome` labels of warm-pool takes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The Provisioner.
    pub provisioner: String,
    /// `hit`, `miss` or `fallback`.
    pub outcome: String,
}

/// `source` label of claim-to-ready times.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// `warm` or `cold`.
    pub source: String,
}

fn ready_histogram() -> Histogram {
    // A warm start takes tens of seconds, a cold launch minutes.
    Histogram::new([
        5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 450.0, 600.0,
    ])
}

/// `kind` label of an interruption message.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The kind or reason.
    pub kind: String,
}

/// `kind` and `action` labels of an interruption action.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// The event kind.
    pub kind: String,
    /// What was done.
    pub action: String,
}

/// The `reason` label of a disruption metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonOnlyLabels {
    /// `Empty`, `Expired`, `Drifted` or `Underutilized`.
    pub reason: String,
}

/// `provisioner` and `reason` labels of a disruption budget.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabels {
    /// The Provisioner.
    pub provisioner: String,
    /// `Empty`, `Drifted` or `Underutilized`.
    pub reason: String,
}

/// `reason` and `outcome` labels of a disruption decision.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// Why the nodes go.
    pub reason: String,
    /// What became of the decision.
    pub outcome: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            pods_pending: Gauge::default(),
            pods_scheduled: Counter::default(),
            claims_created: Family::default(),
            claims_registered: Family::default(),
            registrations_refused: Family::default(),
            claims_terminated: Family::default(),
            launch_failures: Family::default(),
            scheduling_duration: seconds_histogram(),
            cloud_duration: Family::new_with_constructor(seconds_histogram),
            cloud_errors: Family::default(),
            cost_per_hour: Family::default(),
            reconcile_errors: Family::default(),
            disruption_decisions: Family::default(),
            disruption_savings: Counter::default(),
            disruption_eligible: Family::default(),
            disruption_allowed: Family::default(),
            disruption_evaluation: seconds_histogram(),
            disruption_failed: Family::default(),
            interruption_messages: Family::default(),
            interruption_rejected: Family::default(),
            interruption_actions: Family::default(),
            interruption_deleted: Counter::default(),
            interruption_latency: seconds_histogram(),
            warm_pool_members: Family::default(),
            warm_pool_takes: Family::default(),
            warm_pool_idle_cost: Family::default(),
            claim_ready_duration: Family::new_with_constructor(ready_histogram),
            warm_pools_reported: std::sync::Mutex::default(),
            passes: PassClock::default(),
        }
    }
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` (prefix-free names `joiner_*`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics::default();
        registry.register(
            "joiner_pods_pending",
            "Pods marked Unschedulable by the kube-scheduler at the last batch",
            m.pods_pending.clone(),
        );
        registry.register(
            "joiner_pods_scheduled",
            "Pods placed by a scheduling batch",
            m.pods_scheduled.clone(),
        );
        registry.register(
            "joiner_nodeclaims_created",
            "NodeClaims written",
            m.claims_created.clone(),
        );
        registry.register(
            "joiner_nodeclaims_registered",
            "NodeClaims whose node registered",
            m.claims_registered.clone(),
        );
        registry.register(
            "joiner_nodeclaims_registration_refused",
            "Registration patches the API server refused, by provisioner (retried after a backoff)",
            m.registrations_refused.clone(),
        );
        registry.register(
            "joiner_nodeclaims_terminated",
            "NodeClaims terminated, by reason",
            m.claims_terminated.clone(),
        );
        registry.register(
            "joiner_launch_failures",
            "Instance launches that failed, by error code",
            m.launch_failures.clone(),
        );
        registry.register(
            "joiner_scheduling_duration_seconds",
            "Duration of one scheduling simulation",
            m.scheduling_duration.clone(),
        );
        registry.register(
            "joiner_cloudprovider_duration_seconds",
            "Duration of cloud provider calls",
            m.cloud_duration.clone(),
        );
        registry.register(
            "joiner_cloudprovider_errors",
            "Cloud provider calls that failed",
            m.cloud_errors.clone(),
        );
        registry.register(
            "joiner_nodes_cost_per_hour",
            "Hourly price of joiner's nodes, per provisioner (USD)",
            m.cost_per_hour.clone(),
        );
        registry.register(
            "joiner_disruption_decisions",
            "Disruption decisions, by reason and outcome",
            m.disruption_decisions.clone(),
        );
        registry.register(
            "joiner_disruption_savings_per_hour",
            "Hourly price saved by the disruption decisions carried out (USD)",
            m.disruption_savings.clone(),
        );
        registry.register(
            "joiner_disruption_eligible_nodes",
            "Nodes each disruption method could act on at the last pass, by reason",
            m.disruption_eligible.clone(),
        );
        registry.register(
            "joiner_disruption_allowed_disruptions",
            "Nodes each Provisioner's budgets let go now, by reason (after those already disrupting)",
            m.disruption_allowed.clone(),
        );
        registry.register(
            "joiner_disruption_evaluation_duration_seconds",
            "Duration of one disruption plan",
            m.disruption_evaluation.clone(),
        );
        registry.register(
            "joiner_disruption_commands_failed",
            "Disruption commands given up, by reason",
            m.disruption_failed.clone(),
        );
        registry.register(
            "joiner_interruption_messages",
            "Interruption queue messages received, by event kind or malformation",
            m.interruption_messages.clone(),
        );
        registry.register(
            "joiner_interruption_rejected",
            "Interruption messages deleted without action, by reason",
            m.interruption_rejected.clone(),
        );
        registry.register(
            "joiner_interruption_actions",
            "Nodes acted on for interruption events, by event kind and action",
            m.interruption_actions.clone(),
        );
        registry.register(
            "joiner_interruption_deleted_messages",
            "Interruption messages deleted from the queue",
            m.interruption_deleted.clone(),
        );
        registry.register(
            "joiner_interruption_message_latency_seconds",
            "Time from a message's arrival in the interruption queue to its deletion",
            m.interruption_latency.clone(),
        );
        registry.register(
            "joiner_warm_pool_members",
            "Warm-pool members, by provisioner and phase",
            m.warm_pool_members.clone(),
        );
        registry.register(
            "joiner_warm_pool_takes",
            "Warm-pool takes, by provisioner and outcome (hit, miss, fallback)",
            m.warm_pool_takes.clone(),
        );
        registry.register(
            "joiner_warm_pool_idle_cost_per_hour",
            "What each warm pool costs per hour while idle (USD)",
            m.warm_pool_idle_cost.clone(),
        );
        registry.register(
            "joiner_nodeclaim_ready_seconds",
            "Time from a NodeClaim's creation to its node being initialized, by source (warm, cold)",
            m.claim_ready_duration.clone(),
        );
        registry.register(
            "joiner_reconcile_errors",
            "Reconcile passes that failed, per reconciler",
            m.reconcile_errors.clone(),
        );
        m
    }

    /// Sets the warm-pool gauges of `provisioner`: members per phase and idle cost.
    pub fn warm_pool(&self, provisioner: &str, members: &[(&str, usize)], idle_cost: f64) {
        for (phase, n) in members {
            self.warm_pool_members
                .get_or_create(&PhaseLabels {
                    provisioner: provisioner.to_string(),
                    phase: phase.to_string(),
                })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        self.warm_pool_idle_cost
            .get_or_create(&ProvisionerLabels {
                provisioner: provisioner.to_string(),
            })
            .set(idle_cost);
        self.warm_pools_reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(provisioner.to_string());
    }

    /// Drops the warm-pool gauges of every Provisioner not in `pools` (its pool was removed
    /// or it was deleted), so dashboards do not keep showing its last members and cost.
    pub fn retain_warm_pools(&self, pools: &[&str], phases: &[&str]) {
        let mut reported = self
            .warm_pools_reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        reported.retain(|p| {
            if pools.contains(&p.as_str()) {
                return true;
            }
            for phase in phases {
                self.warm_pool_members.remove(&PhaseLabels {
                    provisioner: p.clone(),
                    phase: phase.to_string(),
                });
            }
            self.warm_pool_idle_cost.remove(&ProvisionerLabels {
                provisioner: p.clone(),
            });
            false
        });
    }

    /// Counts a warm-pool take of `provisioner` that came to `outcome`.
    pub fn warm_take(&self, provisioner: &str, outcome: &str) {
        self.warm_pool_takes
            .get_or_create(&OutcomeLabels {
                provisioner: provisioner.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Counts a disruption decision for `reason` that came to `outcome`.
    pub fn decision(&self, reason: &str, outcome: &str) {
        self.disruption_decisions
            .get_or_create(&DecisionLabels {
                reason: reason.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Counts an interruption message of `kind` received.
    pub fn interruption_message(&self, kind: &str) {
        self.interruption_messages
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Counts an interruption message deleted without action for `reason`.
    pub fn interruption_rejected(&self, reason: &str) {
        self.interruption_rejected
            .get_or_create(&KindLabels {
                kind: reason.to_string(),
            })
            .inc();
    }

    /// Counts a node acted on for an event of `kind` with `action`.
    pub fn interruption_action(&self, kind: &str, action: &str) {
        self.interruption_actions
            .get_or_create(&ActionLabels {
                kind: kind.to_string(),
                action: action.to_string(),
            })
            .inc();
    }

    /// Counts a failed reconcile pass of `controller`.
    pub fn reconcile_failed(&self, controller: &str) {
        self.reconcile_errors
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn registered_metrics_appear_in_the_text_exposition() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.pods_pending.set(3);
        m.claims_terminated
            .get_or_create(&ReasonLabels {
                provisioner: "web".into(),
                reason: "orphan".into(),
            })
            .inc();
        m.reconcile_failed("gc");
        let mut out = String::new();
        encode(&mut out, &registry).expect("encodes");
        assert!(out.contains("joiner_pods_pending 3"), "{out}");
        assert!(
            out.contains(
                r#"joiner_nodeclaims_terminated_total{provisioner="web",reason="orphan"} 1"#
            ),
            "{out}"
        );
        assert!(
            out.contains(r#"joiner_reconcile_errors_total{controller="gc"} 1"#),
            "{out}"
        );
    }

    #[test]
    fn a_removed_pool_stops_reporting_its_gauges() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        let phases = ["Warming", "Warm", "Claimed"];
        m.warm_pool("web", &[("Warming", 1), ("Warm", 2), ("Claimed", 0)], 0.5);
        m.warm_pool("api", &[("Warming", 0), ("Warm", 1), ("Claimed", 0)], 0.25);
        m.retain_warm_pools(&["api"], &phases);
        let mut out = String::new();
        encode(&mut out, &registry).expect("encodes");
        assert!(
            out.contains(r#"joiner_warm_pool_members{provisioner="api",phase="Warm"} 1"#),
            "{out}"
        );
        assert!(!out.contains(r#"provisioner="web""#), "{out}");
        // A pool set again reports again.
        m.warm_pool("web", &[("Warm", 1)], 0.1);
        let mut out = String::new();
        encode(&mut out, &registry).expect("encodes");
        assert!(
            out.contains(r#"joiner_warm_pool_members{provisioner="web",phase="Warm"} 1"#),
            "{out}"
        );
    }
}
