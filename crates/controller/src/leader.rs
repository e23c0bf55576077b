//! Leader election on a `coordination.k8s.io/v1` Lease, so that of the chart's two replicas
//! exactly one launches and removes nodes while the other keeps warm stores and waits.
//!
//! The protocol is client-go's, reduced to what joiner needs:
//! - a replica acquires the Lease when it is absent (POST), released (empty holder), expired
//!   or already its own. Expired is judged as client-go does, by this replica's own monotonic
//!   clock: the Lease (holder, renewTime, resourceVersion) has not changed for
//!   `leaseDurationSeconds` since this replica first saw it so. The leader's timestamps are
//!   never compared with the local wall clock, so clock skew between nodes cannot make a live
//!   leader look dead (or a dead one look alive); every write is a PUT with
//!   the `resourceVersion` it read, so of two replicas racing for an expired Lease the API
//!   server lets one win and answers the other 409, which stays follower;
//! - the leader renews every [`LeaseConfig::renew_interval`]; when it has not managed to renew
//!   for [`LeaseConfig::renew_deadline`] (shorter than the lease duration) or finds another
//!   holder, it stops its leader-only work *before* the Lease can expire for the others;
//! - on graceful shutdown the leader writes an empty holder, so a follower takes over at its
//!   next retry instead of waiting for the Lease to expire.
//!
//! Defaults: lease 10 s, renew every 2 s, retry every 2 s, renew deadline 7 s. A leader that
//! dies renewed at most 2 s before, which a follower retrying every 2 s has seen; the Lease
//! then stays unchanged for 10 s of the follower's time, so it takes over within 12 s.
//!
//! Leader-only tasks are supervised: each runs on its own task, and if one ends or panics
//! while the leadership lasts, the leader steps down (its other tasks are stopped, the Lease is
//! not renewed again) and [`run_elected`] returns [`LeaderError::TaskEnded`], so the process
//! exits non-zero and restarts as a follower. A panicking reconciler never leaves a leader that
//! renews its Lease while doing nothing.
//!
//! A leader that loses the Lease returns [`LeaderError::Lost`] and the process exits, so it
//! restarts with empty in-memory state as a follower (Karpenter does the same): leader-only
//! tasks never have to undo half-done work to become followers again.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::k8s::codes::{is_conflict, is_not_found};

/// Where the Lease lives, who we are, and the timing.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Namespace of the Lease (the controller's own).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's holderIdentity.
    pub identity: String,
    /// leaseDurationSeconds written into the Lease: how long others wait after the last renew.
    pub lease_duration: Duration,
    /// How often the leader renews.
    pub renew_interval: Duration,
    /// How often a follower tries to acquire.
    pub retry_interval: Duration,
    /// The leader steps down when it has not renewed for this long (less than the lease
    /// duration, so it stops before anyone else can start).
    pub renew_deadline: Duration,
    /// Time limit of one API call.
    pub request_timeout: Duration,
}

impl LeaseConfig {
    /// The default timing (10 s lease, 2 s renew and retry, 7 s deadline, 4 s per call).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(10),
            renew_interval: Duration::from_secs(2),
            retry_interval: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(7),
            request_timeout: Duration::from_secs(4),
        }
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn path(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why leader election stopped.
#[derive(Debug, Error)]
pub enum LeaderError {
    /// A call on the Lease failed (other than the 409 of a lost race).
    #[error("Lease {lease}: {action}: {source}")]
    Api {
        /// `namespace/name`.
        lease: String,
        /// What was attempted (`get`, `create`, `replace`).
        action: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A call on the Lease did not answer in time.
    #[error("Lease {lease}: {action}: no answer within {timeout:?}")]
    Timeout {
        /// `namespace/name`.
        lease: String,
        /// What was attempted.
        action: &'static str,
        /// The limit.
        timeout: Duration,
    },
    /// This replica was leader and lost the Lease; the process should exit and restart.
    #[error("Lease {lease}: {identity} lost the leadership")]
    Lost {
        /// `namespace/name`.
        lease: String,
        /// Our holderIdentity.
        identity: String,
    },
    /// A leader-only task ended (or panicked) while this replica led; it stepped down.
    #[error("Lease {lease}: leader-only task {task} {how}; stepped down")]
    TaskEnded {
        /// `namespace/name`.
        lease: String,
        /// The task's index in the list the leader started.
        task: usize,
        /// `returned` or `panicked: <message>`.
        how: String,
    },
}

/// The wall-clock time written into renewTime and acquireTime; injectable so tests control it.
/// Expiry is never judged by it (see the module documentation).
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The holderIdentity of this replica: the pod name (env `POD_NAME`, else the host name, else
/// `joiner`) and a random suffix, so a restarted container with the same pod name never
/// mistakes its predecessor's Lease for its own.
pub fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "joiner".to_string());
    format!("{base}_{}", random_suffix())
}

/// Eight hex digits from the process's random hash keys.
fn random_suffix() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:08x}", h.finish() & 0xffff_ffff)
}

/// One replica's view of the Lease: tries to acquire or renew it, and releases it.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    clock: Clock,
    /// The other holder's Lease as last seen (holder, renewTime, resourceVersion) and when, by
    /// this replica's monotonic clock, it was first seen like that.
    observed: Option<(ObservedLease, tokio::time::Instant)>,
    /// The Lease as we last wrote it while holding it: its resourceVersion makes the release a
    /// guarded write.
    held: Option<Lease>,
}

impl LeaderElector {
    /// An elector on `client` with the system clock.
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            clock: Arc::new(Timestamp::now),
            observed: None,
            held: None,
        }
    }

    /// The same elector reading time from `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    async fn call<T>(
        &self,
        action: &'static str,
        fut: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, LeaderError> {
        tokio::time::timeout(self.config.request_timeout, fut)
            .await
            .map_err(|_| LeaderError::Timeout {
                lease: self.config.path(),
                action,
                timeout: self.config.request_timeout,
            })
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> LeaderError {
        LeaderError::Api {
            lease: self.config.path(),
            action,
            source,
        }
    }

    /// One attempt: true when this replica holds the Lease afterwards (acquired, taken over or
    /// renewed), false when another replica holds a live Lease or won a race for it.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let now = (self.clock)();
        let current = match self
            .call("get", self.api.get_opt(&self.config.name))
            .await?
        {
            Ok(lease) => lease,
            Err(e) => return Err(self.api_error("get", e)),
        };
        let Some(mut lease) = current else {
            return self.create(now).await;
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        if holder == self.config.identity {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(MicroTime(now));
            spec.lease_duration_seconds = Some(self.config.lease_seconds());
        } else if holder.is_empty() || self.unchanged_for_its_duration(&lease) {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            tracing::info!(lease = %self.config.path(), previous = %holder, identity = %self.config.identity, "taking over the Lease");
            spec.holder_identity = Some(self.config.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.renew_time = Some(MicroTime(now));
            spec.lease_duration_seconds = Some(self.config.lease_seconds());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        } else {
            self.held = None;
            return Ok(false);
        }
        self.replace(lease).await
    }

    async fn create(&mut self, now: Timestamp) -> Result<bool, LeaderError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(self.config.lease_seconds()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self
            .call("create", self.api.create(&PostParams::default(), &lease))
            .await?
        {
            Ok(stored) => {
                tracing::info!(lease = %self.config.path(), identity = %self.config.identity, "created the Lease");
                self.held = Some(stored);
                Ok(true)
            }
            Err(e) if is_conflict(&e) => {
                self.held = None;
                Ok(false)
            }
            Err(e) => Err(self.api_error("create", e)),
        }
    }

    async fn replace(&mut self, lease: Lease) -> Result<bool, LeaderError> {
        match self
            .call(
                "replace",
                self.api
                    .replace(&self.config.name, &PostParams::default(), &lease),
            )
            .await?
        {
            Ok(stored) => {
                self.held = Some(stored);
                Ok(true)
            }
            Err(e) if is_conflict(&e) => {
                tracing::info!(lease = %self.config.path(), "another replica wrote the Lease first");
                self.held = None;
                Ok(false)
            }
            Err(e) => Err(self.api_error("replace", e)),
        }
    }

    /// Gives the Lease up if we hold it: an empty holder and a 1 s duration, written with the
    /// resourceVersion of our last write (a 409 means someone else holds it already).
    pub async fn release(&mut self) -> Result<(), LeaderError> {
        let Some(mut lease) = self.held.take() else {
            return Ok(());
        };
        let now = (self.clock)();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(String::new());
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(1);
        match self
            .call(
                "replace",
                self.api
                    .replace(&self.config.name, &PostParams::default(), &lease),
            )
            .await?
        {
            Ok(_) => {
                tracing::info!(lease = %self.config.path(), "released the Lease");
                Ok(())
            }
            Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(()),
            Err(e) => Err(self.api_error("replace", e)),
        }
    }
}

/// The message a panicking task gave, when it gave a string.
fn panic_message(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|m| m.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// What identifies one writing of another replica's Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ObservedLease {
    holder: String,
    renew_time: Option<String>,
    resource_version: Option<String>,
}

impl ObservedLease {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        ObservedLease {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default(),
            renew_time: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string()),
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

impl LeaderElector {
    /// Records what this replica sees of another holder's `lease` and says whether it has
    /// stayed unchanged for its `leaseDurationSeconds` by this replica's monotonic clock (the
    /// first sight starts the count, as in client-go).
    fn unchanged_for_its_duration(&mut self, lease: &Lease) -> bool {
        let seen = ObservedLease::of(lease);
        let now = tokio::time::Instant::now();
        let since = match &self.observed {
            Some((last, at)) if *last == seen => *at,
            _ => {
                self.observed = Some((seen, now));
                now
            }
        };
        let seconds = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .unwrap_or(0)
            .max(0);
        now.duration_since(since) > Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
    }
}

/// How long leader-only tasks get to finish after their token is cancelled before they are
/// aborted: with the default timing a leader steps down 7 s after its last renewal, so they
/// are gone by 9 s, before the Lease expires for the others at 10 s.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Runs the election until `stop` is cancelled or the leadership is lost.
///
/// While this replica is leader the futures of `lead` (called once per term with a child
/// token of `stop`) run on a spawned task; stepping down cancels that token, waits up to
/// 2 s for them, then aborts them. `heartbeat(is_leader)` is called on every loop turn (for /healthz and
/// metrics). Returns `Ok(())` after a graceful stop (the Lease released),
/// [`LeaderError::Lost`] when the leadership was lost.
pub async fn run_elected<F, H>(
    mut elector: LeaderElector,
    stop: CancellationToken,
    mut lead: F,
    heartbeat: H,
) -> Result<(), LeaderError>
where
    F: FnMut(CancellationToken) -> Vec<BoxFuture<'static, ()>>,
    H: Fn(bool),
{
    let config = elector.config().clone();
    // Follower: retry until acquired. The term counts from the attempt that acquired, not
    // from its reply: the others count the Lease's duration from the renewTime it wrote, which
    // is no later than the reply.
    let acquired_at = loop {
        if stop.is_cancelled() {
            return Ok(());
        }
        let attempt = tokio::time::Instant::now();
        match elector.try_acquire_or_renew().await {
            Ok(true) => break attempt,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
        }
        heartbeat(false);
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(config.retry_interval) => {}
        }
    };

    tracing::info!(lease = %config.path(), identity = %config.identity, "became leader");
    let term = stop.child_token();
    let mut aborts = Vec::new();
    let mut running = futures::stream::FuturesUnordered::new();
    for (i, task) in lead(term.clone()).into_iter().enumerate() {
        let handle = tokio::spawn(task);
        aborts.push(handle.abort_handle());
        running.push(async move { (i, handle.await) });
    }
    let mut last_renew = acquired_at;
    let mut ended: Option<(usize, String)> = None;
    let lost = loop {
        heartbeat(true);
        tokio::select! {
            biased;
            _ = stop.cancelled() => break false,
            Some((task, result)) = futures::StreamExt::next(&mut running) => {
                if stop.is_cancelled() {
                    // Tasks end on their own once the stop reaches them.
                    break false;
                }
                let how = match result {
                    Ok(()) => "returned".to_string(),
                    Err(e) if e.is_panic() => format!("panicked: {}", panic_message(e)),
                    Err(e) => format!("was cancelled: {e}"),
                };
                tracing::error!(lease = %config.path(), task, %how, "a leader-only task ended; stepping down");
                ended = Some((task, how));
                break true;
            }
            _ = tokio::time::sleep(config.renew_interval) => {}
        }
        // The attempt must end by the deadline: a renewal still pending when the Lease
        // expires for the others would let two leaders act at once.
        let remaining = config.renew_deadline.saturating_sub(last_renew.elapsed());
        if remaining.is_zero() {
            break true;
        }
        // A renewal counts from when it was sent: a slow reply must not stretch this term
        // past the point the others count from.
        let attempt = tokio::time::Instant::now();
        match tokio::time::timeout(remaining, elector.try_acquire_or_renew()).await {
            Ok(Ok(true)) => last_renew = attempt,
            Ok(Ok(false)) => break true,
            Ok(Err(e)) => tracing::warn!(error = %e, "renewing the Lease failed"),
            Err(_) => {
                tracing::warn!("renewing the Lease did not finish before the renew deadline");
                break true;
            }
        }
        if last_renew.elapsed() >= config.renew_deadline {
            break true;
        }
    };
    term.cancel();
    let drained = async { while futures::StreamExt::next(&mut running).await.is_some() {} };
    if tokio::time::timeout(STOP_GRACE, drained).await.is_err() {
        tracing::warn!("leader-only tasks did not stop within {STOP_GRACE:?}; aborting them");
    }
    // Dropping a handle does not stop its task: whatever is left is aborted.
    for abort in &aborts {
        abort.abort();
    }
    if let Some((task, how)) = ended {
        return Err(LeaderError::TaskEnded {
            lease: config.path(),
            task,
            how,
        });
    }
    if lost {
        tracing::error!(lease = %config.path(), identity = %config.identity, "lost the leadership");
        return Err(LeaderError::Lost {
            lease: config.path(),
            identity: config.identity,
        });
    }
    elector.release().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_differ_from_one_call_to_the_next() {
        let a = identity();
        let b = identity();
        assert_ne!(a, b);
        assert!(a.contains('_'), "{a}");
    }
}
