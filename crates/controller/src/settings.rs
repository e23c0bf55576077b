//! The controller's tunables, with the defaults the issue and Karpenter use.

use std::time::Duration;

/// Durations and names every reconciler reads. Built by `joiner controller` from flags and env;
/// tests shorten the durations.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The EKS cluster name: the `kubernetes.io/cluster/<name>` tag joiner's instances carry.
    pub cluster_name: String,
    /// A batch of pending pods closes this long after the last new pod arrived (1 s).
    pub batch_idle: Duration,
    /// ... and at the latest this long after it opened (10 s).
    pub batch_max: Duration,
    /// A claim whose instance was not launched within this is deleted (5 min).
    pub launch_timeout: Duration,
    /// A launched claim whose node did not register within this is deleted (15 min).
    pub registration_timeout: Duration,
    /// An instance tagged for the cluster with no NodeClaim for this long is terminated (5 min).
    pub orphan_grace: Duration,
    /// How often the garbage collector and the claim liveness checks run.
    pub sweep_interval: Duration,
    /// How often the warm pools are reconciled (15 s).
    pub warm_pool_interval: Duration,
    /// The longest a warm-pool member may run to initialize before it is stopped (10 min).
    /// Members normally power themselves off when their warm-up is done; this bounds one
    /// whose warm-up hangs.
    pub warm_pool_warmup: Duration,
}

impl Settings {
    /// The defaults for `cluster_name`.
    pub fn new(cluster_name: impl Into<String>) -> Self {
        Settings {
            cluster_name: cluster_name.into(),
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            launch_timeout: Duration::from_secs(5 * 60),
            registration_timeout: Duration::from_secs(15 * 60),
            orphan_grace: Duration::from_secs(5 * 60),
            sweep_interval: Duration::from_secs(30),
            warm_pool_interval: Duration::from_secs(15),
            warm_pool_warmup: Duration::from_secs(10 * 60),
        }
    }
}
