//! [`FakeCloud`]: an in-memory [`CloudProvider`] for controller tests (feature `testing`), in
//! the spirit of Karpenter's `cloudprovider/fake`.
//!
//! The controller's reconcilers are generic over the cloud; with this fake they run without a
//! moto server, and a test can script what the cloud answers (a capacity error on the next
//! launch, an instance that vanished, one that was stopped) and read back every call. The AWS
//! provider keeps its own moto tests; this fake is not a model of EC2, only of the trait's
//! contract: launches are idempotent per claim, deletes of unknown instances are `NotFound`,
//! `list` shows live instances only.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use thiserror::Error;

use crate::cloud_provider::{
    CloudError, CloudErrorKind, CloudProvider, LaunchRequest, LaunchedNode, PullProgress, WarmState,
};
use crate::instance_type::{CapacityType, InstanceType};

/// The zone a launch without allowed zones lands in.
pub const DEFAULT_ZONE: &str = "fake-zone-a";
/// The image every fake launch boots.
pub const FAKE_IMAGE: &str = "ami-fake";
/// The security group every fake launch gets.
pub const FAKE_SECURITY_GROUP: &str = "sg-fake";

/// A scripted failure of the fake.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("fake cloud: {code}: {message}")]
pub struct FakeError {
    /// What kind of failure it stands for.
    pub kind: CloudErrorKind,
    /// The code it reports.
    pub code: String,
    /// Its text.
    pub message: String,
}

impl FakeError {
    /// A failure of `kind` with `code`.
    pub fn new(kind: CloudErrorKind, code: &str) -> Self {
        FakeError {
            kind,
            code: code.to_string(),
            message: format!("{kind:?}"),
        }
    }
}

impl CloudError for FakeError {
    fn kind(&self) -> CloudErrorKind {
        self.kind
    }

    fn code(&self) -> String {
        self.code.clone()
    }
}

/// A call the fake received, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum FakeCall {
    /// `instance_types(provisioner)`.
    InstanceTypes(String),
    /// `create(request)`.
    Create(LaunchRequest),
    /// `delete(instance id)`.
    Delete(String),
    /// `get(claim)`.
    Get(String),
    /// `list()`.
    List,
    /// `mark_unavailable(type, zone, capacity type)`.
    MarkUnavailable(String, String, CapacityType),
    /// `start_warm(instance id, claim)`.
    StartWarm(String, String),
    /// `stop_warm(instance id)`.
    StopWarm(String),
    /// `hold_warm(instance id)`.
    HoldWarm(String),
    /// `hibernate_warm(instance id)`.
    HibernateWarm(String),
    /// `pull_warm(instance id, images)`.
    PullWarm(String, Vec<String>),
    /// `pull_progress(instance id, pull)`.
    PullProgress(String, String),
}

/// Which method a scripted failure is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FakeMethod {
    /// `instance_types`.
    InstanceTypes,
    /// `create`.
    Create,
    /// `delete`.
    Delete,
    /// `get`.
    Get,
    /// `list`.
    List,
    /// `start_warm`.
    StartWarm,
    /// `stop_warm`.
    StopWarm,
    /// `hold_warm`.
    HoldWarm,
    /// `hibernate_warm`.
    HibernateWarm,
    /// `pull_warm`.
    PullWarm,
    /// `pull_progress`.
    PullProgress,
}

#[derive(Default)]
struct State {
    instance_types: Vec<InstanceType>,
    /// By instance ID; terminated instances stay (with state `terminated`) until forgotten.
    instances: BTreeMap<String, LaunchedNode>,
    failures: BTreeMap<FakeMethod, VecDeque<FakeError>>,
    /// Offerings marked unavailable: left out of `instance_types` (marks never expire here).
    unavailable: Vec<(String, String, CapacityType)>,
    calls: Vec<FakeCall>,
    launched: u64,
    /// Instance types that cannot hibernate, with why (`warm_type_refusal`).
    no_hibernation: BTreeMap<String, String>,
    /// Pulls by handle: the instance and how the pull is doing (`Running` until set).
    pulls: BTreeMap<String, (String, PullProgress)>,
}

/// An in-memory cloud.
#[derive(Default)]
pub struct FakeCloud {
    state: Mutex<State>,
}

impl FakeCloud {
    /// A cloud offering `instance_types` (for every Provisioner) and holding no instance.
    pub fn new(instance_types: Vec<InstanceType>) -> Self {
        FakeCloud {
            state: Mutex::new(State {
                instance_types,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next call of `method` fails with `error` (queued: several calls fail in turn).
    pub fn fail_next(&self, method: FakeMethod, error: FakeError) {
        self.lock()
            .failures
            .entry(method)
            .or_default()
            .push_back(error);
    }

    /// Adds an instance as if someone (or an earlier joiner) had launched it.
    pub fn add_instance(&self, node: LaunchedNode) {
        self.lock().instances.insert(node.instance_id.clone(), node);
    }

    /// Makes `instance_type` unable to wait `Hibernated` in a warm pool, for `why`.
    pub fn refuse_hibernation(&self, instance_type: &str, why: &str) {
        self.lock()
            .no_hibernation
            .insert(instance_type.to_string(), why.to_string());
    }

    /// Sets the state of instance `id` (`stopped`, `terminated`, ...); false if unknown.
    pub fn set_state(&self, id: &str, state: &str) -> bool {
        match self.lock().instances.get_mut(id) {
            Some(n) => {
                n.state = state.to_string();
                true
            }
            None => false,
        }
    }

    /// Sets how every pull into instance `id` is doing (they start `Running`).
    pub fn set_pull_progress(&self, id: &str, progress: PullProgress) {
        for (instance, p) in self.lock().pulls.values_mut() {
            if instance == id {
                *p = progress.clone();
            }
        }
    }

    /// Forgets instance `id` entirely, as EC2 does some time after termination.
    pub fn forget(&self, id: &str) {
        self.lock().instances.remove(id);
    }

    /// Every instance the fake knows, terminated ones included, by ID.
    pub fn instances(&self) -> Vec<LaunchedNode> {
        self.lock().instances.values().cloned().collect()
    }

    /// The calls received so far, in order.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.lock().calls.clone()
    }

    fn call(&self, method: FakeMethod, call: FakeCall) -> Result<MutexGuard<'_, State>, FakeError> {
        let mut state = self.lock();
        state.calls.push(call);
        match state
            .failures
            .get_mut(&method)
            .and_then(VecDeque::pop_front)
        {
            Some(err) => Err(err),
            None => Ok(state),
        }
    }
}

/// The live warm-pool member `id`: `NotFound` when unknown or gone, `NotOwned` when it is not
/// a member.
fn member<'a>(state: &'a mut State, id: &str) -> Result<&'a mut LaunchedNode, FakeError> {
    match state.instances.get_mut(id) {
        Some(n) if !is_live(n) => Err(FakeError::new(CloudErrorKind::NotFound, "NotFound")),
        Some(n) if !n.warm_pool => Err(FakeError::new(
            CloudErrorKind::NotOwned,
            "NotWarmPoolMember",
        )),
        Some(n) => Ok(n),
        None => Err(FakeError::new(CloudErrorKind::NotFound, "NotFound")),
    }
}

fn is_live(node: &LaunchedNode) -> bool {
    node.state != "terminated" && node.state != "shutting-down"
}

impl CloudProvider for FakeCloud {
    type Error = FakeError;

    async fn instance_types(&self, provisioner: &str) -> Result<Vec<InstanceType>, FakeError> {
        let state = self.call(
            FakeMethod::InstanceTypes,
            FakeCall::InstanceTypes(provisioner.to_string()),
        )?;
        let mut types = state.instance_types.clone();
        for t in &mut types {
            for o in &mut t.offerings {
                if state.unavailable.iter().any(|(name, zone, ct)| {
                    name == &t.name && zone == &o.zone && *ct == o.capacity_type
                }) {
                    o.available = false;
                }
            }
        }
        Ok(types)
    }

    /// Launches the cheapest candidate in the first allowed zone, unless an instance for the
    /// claim is live already (the claim's UID is the idempotency token).
    async fn create(&self, request: &LaunchRequest) -> Result<LaunchedNode, FakeError> {
        let mut state = self.call(FakeMethod::Create, FakeCall::Create(request.clone()))?;
        if let Some(existing) = state
            .instances
            .values()
            .find(|n| is_live(n) && n.claim_name.as_deref() == Some(&request.claim_name))
        {
            return Ok(existing.clone());
        }
        let Some((instance_type, _)) = request.candidates.first() else {
            return Err(FakeError::new(
                CloudErrorKind::InsufficientCapacity,
                "NoCandidates",
            ));
        };
        state.launched += 1;
        let zone = request
            .zones
            .first()
            .cloned()
            .unwrap_or_else(|| DEFAULT_ZONE.to_string());
        let id = format!("i-fake{:05}", state.launched);
        let zone_id = zone.clone();
        let node = LaunchedNode {
            claim_name: Some(request.claim_name.clone()),
            provider_id: format!("fake:///{zone}/{id}"),
            instance_id: id.clone(),
            instance_type: instance_type.clone(),
            zone,
            capacity_type: request.capacity_type,
            state: "running".to_string(),
            launch_time: Some(SystemTime::now()),
            image_id: Some(FAKE_IMAGE.to_string()),
            subnet_id: Some(format!("subnet-{zone_id}")),
            security_group_ids: vec![FAKE_SECURITY_GROUP.to_string()],
            warm_pool: request.warm_pool.is_some(),
        };
        state.instances.insert(id, node.clone());
        Ok(node)
    }

    async fn delete(&self, instance_id: &str) -> Result<(), FakeError> {
        let mut state = self.call(
            FakeMethod::Delete,
            FakeCall::Delete(instance_id.to_string()),
        )?;
        match state.instances.get_mut(instance_id) {
            Some(n) => {
                n.state = "terminated".to_string();
                Ok(())
            }
            None => Err(FakeError::new(CloudErrorKind::NotFound, "NotFound")),
        }
    }

    async fn get(&self, claim_name: &str) -> Result<Option<LaunchedNode>, FakeError> {
        let state = self.call(FakeMethod::Get, FakeCall::Get(claim_name.to_string()))?;
        Ok(state
            .instances
            .values()
            .find(|n| is_live(n) && n.claim_name.as_deref() == Some(claim_name))
            .cloned())
    }

    async fn list(&self) -> Result<Vec<LaunchedNode>, FakeError> {
        let state = self.call(FakeMethod::List, FakeCall::List)?;
        Ok(state
            .instances
            .values()
            .filter(|n| is_live(n))
            .cloned()
            .collect())
    }

    /// Refuses an instance that is not a warm-pool member (as the AWS provider's tag guard
    /// does); a member is recorded as the claim's and set running.
    async fn start_warm(
        &self,
        instance_id: &str,
        claim_name: &str,
    ) -> Result<LaunchedNode, FakeError> {
        let mut state = match self.call(
            FakeMethod::StartWarm,
            FakeCall::StartWarm(instance_id.to_string(), claim_name.to_string()),
        ) {
            Ok(state) => state,
            // Started for the claim, not released from the pool: left as the real provider
            // leaves it.
            Err(e) if e.kind() == CloudErrorKind::TakeUnfinished => {
                let mut state = self.lock();
                let node = member(&mut state, instance_id)?;
                node.claim_name = Some(claim_name.to_string());
                node.state = "running".to_string();
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let node = member(&mut state, instance_id)?;
        node.claim_name = Some(claim_name.to_string());
        node.state = "running".to_string();
        // Taken: released from the pool, as the real provider removes the warm-pool tag.
        node.warm_pool = false;
        Ok(node.clone())
    }

    async fn stop_warm(&self, instance_id: &str) -> Result<(), FakeError> {
        let mut state = self.call(
            FakeMethod::StopWarm,
            FakeCall::StopWarm(instance_id.to_string()),
        )?;
        member(&mut state, instance_id)?.state = "stopped".to_string();
        Ok(())
    }

    /// Sets a member running without recording a claim (the fake keeps no warm state to
    /// check).
    async fn hold_warm(&self, instance_id: &str) -> Result<(), FakeError> {
        let mut state = self.call(
            FakeMethod::HoldWarm,
            FakeCall::HoldWarm(instance_id.to_string()),
        )?;
        member(&mut state, instance_id)?.state = "running".to_string();
        Ok(())
    }

    fn warm_type_refusal(&self, instance_type: &InstanceType, state: WarmState) -> Option<String> {
        (state == WarmState::Hibernated)
            .then(|| self.lock().no_hibernation.get(&instance_type.name).cloned())
            .flatten()
    }

    async fn hibernate_warm(&self, instance_id: &str) -> Result<(), FakeError> {
        let mut state = self.call(
            FakeMethod::HibernateWarm,
            FakeCall::HibernateWarm(instance_id.to_string()),
        )?;
        member(&mut state, instance_id)?.state = "stopped".to_string();
        Ok(())
    }

    /// Starts a pull into a running member (`Running` until [`FakeCloud::set_pull_progress`]);
    /// a member not running fails as a real agent that is not up would.
    async fn pull_warm(
        &self,
        instance_id: &str,
        images: &[String],
        _within: std::time::Duration,
    ) -> Result<String, FakeError> {
        let mut state = self.call(
            FakeMethod::PullWarm,
            FakeCall::PullWarm(instance_id.to_string(), images.to_vec()),
        )?;
        if member(&mut state, instance_id)?.state != "running" {
            return Err(FakeError::new(CloudErrorKind::Other, "InvalidInstanceId"));
        }
        let handle = format!("pull-{}", state.pulls.len() + 1);
        state.pulls.insert(
            handle.clone(),
            (instance_id.to_string(), PullProgress::Running),
        );
        Ok(handle)
    }

    async fn pull_progress(
        &self,
        instance_id: &str,
        pull: &str,
    ) -> Result<PullProgress, FakeError> {
        let state = self.call(
            FakeMethod::PullProgress,
            FakeCall::PullProgress(instance_id.to_string(), pull.to_string()),
        )?;
        match state.pulls.get(pull) {
            Some((instance, progress)) if instance == instance_id => Ok(progress.clone()),
            _ => Err(FakeError::new(CloudErrorKind::NotFound, "InvalidCommandId")),
        }
    }

    fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) {
        let mut state = self.lock();
        let key = (instance_type.to_string(), zone.to_string(), capacity_type);
        state.calls.push(FakeCall::MarkUnavailable(
            key.0.clone(),
            key.1.clone(),
            capacity_type,
        ));
        state.unavailable.push(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    /// The fake never waits, so one poll finishes every call.
    fn now<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the fake cloud never waits"),
        }
    }

    fn request(claim: &str) -> LaunchRequest {
        LaunchRequest {
            claim_name: claim.into(),
            claim_uid: format!("uid-{claim}"),
            provisioner: "web".into(),
            capacity_type: CapacityType::OnDemand,
            candidates: vec![("m5.large".into(), 0.096), ("m5.xlarge".into(), 0.192)],
            zones: vec!["us-east-1b".into()],
            warm_pool: None,
        }
    }

    #[test]
    fn launches_are_idempotent_per_claim_and_deletes_end_them() {
        let cloud = FakeCloud::new(Vec::new());
        let a = now(cloud.create(&request("web-a"))).expect("launch");
        assert_eq!(a.instance_type, "m5.large");
        assert_eq!(a.zone, "us-east-1b");
        let again = now(cloud.create(&request("web-a"))).expect("same claim");
        assert_eq!(again.instance_id, a.instance_id);
        assert_eq!(
            now(cloud.get("web-a")).expect("get").map(|n| n.instance_id),
            Some(a.instance_id.clone())
        );
        now(cloud.delete(&a.instance_id)).expect("delete");
        assert!(now(cloud.list()).expect("list").is_empty());
        assert_eq!(now(cloud.get("web-a")).expect("get"), None);
        let gone = now(cloud.delete("i-unknown")).expect_err("unknown");
        assert_eq!(gone.kind(), CloudErrorKind::NotFound);
        assert_eq!(cloud.calls().len(), 7);
    }

    #[test]
    fn scripted_failures_come_in_turn() {
        let cloud = FakeCloud::new(Vec::new());
        cloud.fail_next(
            FakeMethod::Create,
            FakeError::new(
                CloudErrorKind::InsufficientCapacity,
                "InsufficientInstanceCapacity",
            ),
        );
        let err = now(cloud.create(&request("web-b"))).expect_err("scripted");
        assert_eq!(err.kind(), CloudErrorKind::InsufficientCapacity);
        assert_eq!(err.code(), "InsufficientInstanceCapacity");
        assert!(now(cloud.create(&request("web-b"))).is_ok());
        assert_eq!(cloud.instances().len(), 1);
    }
}
