//! The boundary between the controller and a cloud: what the controller may ask of it.
//!
//! The controller decides (with the simulation) *what* to launch or remove; a `CloudProvider`
//! only carries one decision out and reports what exists. Keeping the trait this small lets the
//! controller be tested against a fake and keeps AWS details (templates, subnets, AMIs) out of
//! the decisions. Methods return `impl Future + Send` so the controller can drive them from a
//! multi-threaded runtime without boxing or an async-trait macro, and without this crate
//! depending on a runtime.

use std::future::Future;

use crate::instance_type::{CapacityType, InstanceType};

/// One launch, as the controller has planned it for a NodeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRequest {
    /// The NodeClaim name: tagged on the instance so a restart finds it again.
    pub claim_name: String,
    /// The NodeClaim UID: the idempotency token, so a retried launch never makes two nodes.
    pub claim_uid: String,
    /// The Provisioner whose settings (and NodeTemplate) the node is launched with.
    pub provisioner: String,
    /// The capacity type the plan chose.
    pub capacity_type: CapacityType,
    /// Instance type names with their price (USD/h), cheapest first: every type the claim's
    /// pods fit, so the cloud may substitute one when the cheapest has no capacity.
    pub candidates: Vec<(String, f64)>,
    /// Zones the claim may land in; empty means any zone the provider can reach.
    pub zones: Vec<String>,
    /// A launch into the Provisioner's warm pool, and the state its members wait in: the
    /// instance is tagged as a member, boots with user data that does not join the cluster,
    /// and is stopped once warm; a claim takes it later through [`CloudProvider::start_warm`].
    pub warm_pool: Option<WarmState>,
}

/// The state a warm-pool member waits in (`spec.warmPool.state`). The state decides how the
/// member is launched (hibernation configured, how many boots hold it back) and how a claim
/// makes it join: a start for `Stopped` and `Hibernated`, a reboot for `Running`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WarmState {
    /// Stopped after its warm-up: only its volumes cost.
    #[default]
    Stopped,
    /// Running, not joined: costs as a running instance, taken by a reboot.
    Running,
    /// Hibernated after a hold boot: its memory is kept on its (RAM-sized, encrypted) root
    /// volume and resumed on the start.
    Hibernated,
}

impl WarmState {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WarmState::Stopped => "Stopped",
            WarmState::Running => "Running",
            WarmState::Hibernated => "Hibernated",
        }
    }

    /// From the API spelling; `None` for anything else.
    pub fn parse(s: &str) -> Option<WarmState> {
        match s {
            "Stopped" => Some(WarmState::Stopped),
            "Running" => Some(WarmState::Running),
            "Hibernated" => Some(WarmState::Hibernated),
            _ => None,
        }
    }

    /// True when a member boots once more after its warm-up before it is taken (the hold
    /// boot of `Running` and `Hibernated` members), so its user data must not join then.
    pub fn holds(self) -> bool {
        self != WarmState::Stopped
    }
}

/// What a pull of images into a warming member has come to ([`CloudProvider::pull_warm`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PullProgress {
    /// Still pulling, or not yet started on the instance.
    Running,
    /// Every image pulled.
    Succeeded,
    /// Over, with some image not pulled (or the pull itself failed): why, for the member's
    /// status. Pods pull what is missing when they start.
    Failed(String),
}

/// A node the cloud has (or is starting), as the controller tracks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchedNode {
    /// The NodeClaim it was launched for, when the cloud records one (instances launched by
    /// hand have none, which is how orphans and foreign nodes are told apart).
    pub claim_name: Option<String>,
    /// The cloud's ID (`i-...` on AWS).
    pub instance_id: String,
    /// The ID the Node object carries in `spec.providerID`: how Node and instance are matched.
    pub provider_id: String,
    /// The type the cloud chose among the candidates.
    pub instance_type: String,
    /// The zone it runs in.
    pub zone: String,
    /// spot or on-demand.
    pub capacity_type: CapacityType,
    /// The cloud's lifecycle state (`pending`, `running`, `stopped`, ...): the controller
    /// waits on `pending` and garbage-collects what is gone.
    pub state: String,
    /// When the cloud launched it, when known: the orphan collector waits a grace period from
    /// here so an instance whose NodeClaim write is still in flight is never taken for an orphan.
    pub launch_time: Option<std::time::SystemTime>,
    /// The image it booted, when the cloud reports it: recorded on the claim, so a newer
    /// image for its settings shows as drift.
    pub image_id: Option<String>,
    /// The subnet it was launched in, when known (recorded for drift, as the image).
    pub subnet_id: Option<String>,
    /// The security groups it was launched with (recorded for drift, as the image).
    pub security_group_ids: Vec<String>,
    /// True for a member of a Provisioner's warm pool (tag `joiner.sh/warm-pool`): it has no
    /// NodeClaim on purpose and is exempt from orphan garbage collection.
    pub warm_pool: bool,
}

/// What kind of failure a cloud call had. The controller's next step depends on it (plan
/// again, release, back off, tell a person), so it is a typed answer of the provider, never
/// read from message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloudErrorKind {
    /// The offerings tried have no capacity now: the controller plans the claim again (the
    /// failed offerings are already excluded from [`CloudProvider::instance_types`]).
    InsufficientCapacity,
    /// The cloud throttled the call: the next pass retries.
    Throttled,
    /// The cloud does not know the instance: a delete of it has nothing left to do.
    NotFound,
    /// The instance is not joiner's (its ownership tags are missing): never touched.
    NotOwned,
    /// The settings (a Provisioner, its NodeTemplate) cannot launch as they are: a person
    /// must change them.
    Misconfigured,
    /// A warm-pool member was started for the claim, but its take did not finish (it could
    /// not be released from the pool): the instance is the claim's. The launcher must not
    /// launch another one for the claim; its next launch resumes the take.
    TakeUnfinished,
    /// Anything else: the cloud failed or could not be reached.
    Other,
}

/// An error of a [`CloudProvider`], classified.
pub trait CloudError: std::error::Error + Send + Sync + 'static {
    /// What kind of failure it is.
    fn kind(&self) -> CloudErrorKind;

    /// The cloud's own error code (`InsufficientInstanceCapacity`, `RequestLimitExceeded`), or
    /// `other` when the cloud gave none: a metric label, so the set stays small.
    fn code(&self) -> String;
}

/// What the controller drives to launch and remove nodes.
pub trait CloudProvider: Send + Sync {
    /// Why a call failed, classified by [`CloudError::kind`].
    type Error: CloudError;

    /// The instance types `provisioner` may launch, with offerings that recently failed for
    /// capacity marked unavailable, so a re-plan avoids them.
    fn instance_types(
        &self,
        provisioner: &str,
    ) -> impl Future<Output = Result<Vec<InstanceType>, Self::Error>> + Send;

    /// Launches one node for `request`.
    fn create(
        &self,
        request: &LaunchRequest,
    ) -> impl Future<Output = Result<LaunchedNode, Self::Error>> + Send;

    /// Terminates the instance `instance_id`, refusing one the cluster does not own.
    fn delete(&self, instance_id: &str) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The live node launched for NodeClaim `claim_name`, if any: a claim whose launch was
    /// interrupted finds its instance here instead of launching another.
    fn get(
        &self,
        claim_name: &str,
    ) -> impl Future<Output = Result<Option<LaunchedNode>, Self::Error>> + Send;

    /// Every live node of the cluster, for garbage collection of instances without a claim.
    fn list(&self) -> impl Future<Output = Result<Vec<LaunchedNode>, Self::Error>> + Send;

    /// The live nodes launched for the NodeClaims named `claims` or with the IDs
    /// `instance_ids`: what termination needs, without listing the whole fleet while a
    /// drain waits (a provider lists them with a filter; this default filters [`Self::list`]).
    fn list_some(
        &self,
        claims: &[String],
        instance_ids: &[String],
    ) -> impl Future<Output = Result<Vec<LaunchedNode>, Self::Error>> + Send {
        async move {
            let all = self.list().await?;
            Ok(all
                .into_iter()
                .filter(|n| {
                    n.claim_name.as_ref().is_some_and(|c| claims.contains(c))
                        || instance_ids.contains(&n.instance_id)
                })
                .collect())
        }
    }

    /// Hands warm-pool member `instance_id` to NodeClaim `claim_name` and starts it: the
    /// instance is recorded as the claim's first (so [`CloudProvider::get`] finds it from
    /// then on and a crash never starts a second member), then started, then released from the
    /// pool: the node it becomes is no longer a member ([`LaunchedNode::warm_pool`] false), so
    /// nothing meant for members (stop, commands) can reach it. Starting a member that
    /// already runs for the claim, not yet released, finishes the take; it is not an error.
    /// An instance that is not a warm-pool member of this cluster is refused
    /// ([`CloudErrorKind::NotOwned`]).
    fn start_warm(
        &self,
        instance_id: &str,
        claim_name: &str,
    ) -> impl Future<Output = Result<LaunchedNode, Self::Error>> + Send;

    /// Stops warm-pool member `instance_id` at the end of its warm-up, so it waits in the pool
    /// costing only its volumes. Refuses an instance that is not a warm-pool member of this
    /// cluster, so it can never stop a node that serves pods.
    fn stop_warm(&self, instance_id: &str) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Starts warm-pool member `instance_id` for its hold boot, without handing it out: a
    /// `Running` or `Hibernated` member, whose user data holds it back on that boot. Refuses
    /// a member launched to wait `Stopped` (its next boot joins the cluster).
    fn hold_warm(&self, instance_id: &str) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Hibernates warm-pool member `instance_id` after its hold boot (a stop that keeps its
    /// memory). Refuses an instance that is not a warm-pool member of this cluster.
    fn hibernate_warm(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Starts pulling `images` into warm-pool member `instance_id` while it warms, for AMI
    /// families whose warm-up user data cannot pull them itself (Bottlerocket runs no user
    /// scripts), to be over `within` (the time left of the member's warm-up: the cloud stops
    /// a pull still running then); returns the pull's handle for
    /// [`CloudProvider::pull_progress`]. Fails while the instance cannot take the pull yet
    /// (its agent is still starting): the caller retries until its warm-up deadline. Refuses
    /// an instance that is not a warm-pool member of this cluster.
    fn pull_warm(
        &self,
        instance_id: &str,
        images: &[String],
        within: std::time::Duration,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send;

    /// How the pull `pull` (from [`CloudProvider::pull_warm`]) into `instance_id` is doing.
    fn pull_progress(
        &self,
        instance_id: &str,
        pull: &str,
    ) -> impl Future<Output = Result<PullProgress, Self::Error>> + Send;

    /// Why instance type `instance_type` cannot be a warm member waiting in `state`, when it
    /// cannot (hibernation needs support from the type); `None` when it can.
    fn warm_type_refusal(&self, instance_type: &InstanceType, state: WarmState) -> Option<String> {
        let _ = (instance_type, state);
        None
    }

    /// Marks the offering (`instance_type`, `zone`, `capacity_type`) unavailable for a while,
    /// as a capacity error would: the cloud said it is taking such capacity back (a spot
    /// interruption), so replacements must not be planned onto it.
    fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: CapacityType);
}
