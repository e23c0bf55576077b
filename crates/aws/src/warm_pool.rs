//! Warm-pool members: the guarded start and stop of instances launched into a Provisioner's
//! warm pool.
//!
//! Starting and stopping are the calls that turn a waiting instance into a node and back, so,
//! like termination ([`crate::instances`]), they never trust the caller: the instance is
//! described first and acted on only when it carries joiner's ownership tags for this cluster
//! *and* `joiner.sh/warm-pool`. A node that serves pods (no warm-pool tag) can never be stopped
//! through here, whatever the controller asks; the IAM policy grants StartInstances,
//! StopInstances, ModifyInstanceAttribute, SendCommand and the claim re-tag on the same tags
//! only (iam/controller-policy.json).
//!
//! Taking a member for a claim writes the claim's name into the instance's
//! `joiner.sh/nodeclaim` tag *before* starting it: from then on the launcher's look-up by claim
//! finds the instance, so a crash between the tag and the start is resumed (the start is
//! repeated for that claim) and never starts a second member. Once started (and, for
//! Bottlerocket, sent its settings) the member is released ([`WarmMembers::release`]): its
//! `joiner.sh/warm-pool` tag is removed, and with it every permission the controller's role
//! had to stop, modify or command it. The tag is set only at launch (a request tag of
//! CreateFleet) and never added to a running instance, so a node that serves pods can never
//! become commandable again, whatever the role is made to call.

use aws_sdk_ec2::types::InstanceStateName;
use base64::Engine;
use joiner_core::WarmState;
use thiserror::Error;

use crate::api_error::api_error;
use crate::instances::{Instance, Instances};
use crate::tags;
use crate::AwsError;

/// The tag key marking a warm-pool member (value: its Provisioner).
pub const WARM_POOL: &str = joiner_core::labels::WARM_POOL;
/// The tag key of the state a member was launched to wait in (value `Stopped`, `Running` or
/// `Hibernated`; absent on members launched before it: `Stopped`).
pub const WARM_STATE: &str = joiner_core::labels::WARM_STATE;
/// The tag a `Running` member gets once it was rebooted for a claim (value: the claim), so a
/// take resumed after a crash reboots it at most once more than needed, never forgets to.
pub const REBOOTED_FOR: &str = "joiner.sh/warm-rebooted-for";

/// How many times [`WarmMembers::release`] sends its DeleteTags.
pub const RELEASE_ATTEMPTS: u32 = 3;
/// The wait before the second attempt (doubled before the third).
pub const RELEASE_BACKOFF: std::time::Duration = std::time::Duration::from_millis(500);

/// Why a warm-pool call was refused before any change was made.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarmRefusal {
    /// EC2 does not know the instance, or it is terminated.
    #[error("warm-pool member {instance_id}: no such live instance")]
    NotFound {
        /// The instance.
        instance_id: String,
    },
    /// It lacks one of joiner's ownership tags for this cluster.
    #[error(
        "refusing to start or stop {instance_id}: it lacks joiner's ownership tag `{missing}`"
    )]
    NotOwned {
        /// The instance.
        instance_id: String,
        /// The missing tag.
        missing: String,
    },
    /// It is joiner's but not a warm-pool member: a node serving pods is never stopped or
    /// re-tagged here.
    #[error("refusing to start or stop {instance_id}: it is not a warm-pool member (no `{WARM_POOL}` tag)")]
    NotMember {
        /// The instance.
        instance_id: String,
    },
    /// A hold boot asked of a member launched to wait `Stopped`: its next boot would join.
    #[error("refusing to hold {instance_id}: it was launched to wait {state}, so its next boot joins the cluster")]
    NotHeld {
        /// The instance.
        instance_id: String,
        /// The state it waits in.
        state: &'static str,
    },
    /// It already runs for another claim: a member is handed out once.
    #[error("warm-pool member {instance_id} already runs for NodeClaim `{claim}`")]
    TakenByOther {
        /// The instance.
        instance_id: String,
        /// The claim it runs for.
        claim: String,
    },
}

/// A failed warm-pool call.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WarmError {
    /// Refused by the guard; nothing was changed.
    #[error(transparent)]
    Refused(#[from] WarmRefusal),
    /// An EC2 call failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

/// Start and stop of the warm-pool members of one cluster.
#[derive(Debug, Clone)]
pub struct WarmMembers {
    ec2: aws_sdk_ec2::Client,
    instances: Instances,
    cluster: String,
}

impl WarmMembers {
    /// The members of `cluster`'s pools.
    pub fn new(ec2: aws_sdk_ec2::Client, cluster: &str) -> Self {
        WarmMembers {
            instances: Instances::new(ec2.clone(), cluster),
            ec2,
            cluster: cluster.to_string(),
        }
    }

    /// The live instance `id` of joiner's in this cluster, or why it may not be touched
    /// (`doing` says what was refused, for the log).
    async fn owned(&self, id: &str, doing: &str) -> Result<Instance, WarmError> {
        let found = self.instances.get(id).await?;
        let Some(instance) =
            found.filter(|i| !matches!(i.state.as_str(), "terminated" | "shutting-down"))
        else {
            return Err(WarmRefusal::NotFound {
                instance_id: id.to_string(),
            }
            .into());
        };
        if let Some(missing) = tags::missing_ownership_tag(&instance.tags, &self.cluster) {
            tracing::warn!(instance_id = %id, cluster = %self.cluster, %missing, doing, "refused: the instance lacks joiner's ownership tags");
            return Err(WarmRefusal::NotOwned {
                instance_id: id.to_string(),
                missing,
            }
            .into());
        }
        Ok(instance)
    }

    /// The live member `id`, or why it may not be touched.
    pub async fn member(&self, id: &str) -> Result<Instance, WarmError> {
        let instance = self
            .owned(id, "starting or stopping a warm-pool member")
            .await?;
        if !instance.tags.contains_key(WARM_POOL) {
            tracing::warn!(instance_id = %id, "refusing to start or stop an instance that is not a warm-pool member");
            return Err(WarmRefusal::NotMember {
                instance_id: id.to_string(),
            }
            .into());
        }
        Ok(instance)
    }

    /// Hands member `id` to NodeClaim `claim`: tags it with the claim, then starts it (unless
    /// it already runs for the claim: a resumed take). Returns the instance as it is now.
    pub async fn start(&self, id: &str, claim: &str) -> Result<Instance, WarmError> {
        let instance = self.member(id).await?;
        self.start_member(instance, claim, None).await
    }

    /// [`WarmMembers::start`] for `instance`, found with [`WarmMembers::member`]; with
    /// `user_data` (base64), the instance's user data is replaced first while it is stopped
    /// (Bottlerocket, whose warm-up document has no cluster settings).
    pub async fn start_member(
        &self,
        mut instance: Instance,
        claim: &str,
        user_data: Option<&str>,
    ) -> Result<Instance, WarmError> {
        let id = instance.id.clone();
        let id = id.as_str();
        let tagged_for = instance.tags.get(tags::NODECLAIM).cloned();
        let running = matches!(instance.state.as_str(), "pending" | "running");
        if running && state_of(&instance) == WarmState::Running {
            return self.reboot_for(instance, claim).await;
        }
        if running && tagged_for.as_deref() == Some(claim) {
            return Ok(instance);
        }
        if running {
            return Err(WarmRefusal::TakenByOther {
                instance_id: id.to_string(),
                claim: tagged_for.unwrap_or_default(),
            }
            .into());
        }
        if let Some(encoded) = user_data {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| AwsError::Api {
                    operation: "ec2:ModifyInstanceAttribute",
                    code: "InvalidUserData".to_string(),
                    message: format!("user data is not base64: {e}"),
                })?;
            self.ec2
                .modify_instance_attribute()
                .instance_id(id)
                .user_data(
                    aws_sdk_ec2::types::SecureBlobAttributeValue::builder()
                        .value(aws_sdk_ec2::primitives::Blob::new(decoded))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| api_error("ec2:ModifyInstanceAttribute", e))?;
        }
        let retagged = tagged_for.as_deref() != Some(claim);
        if retagged {
            self.tag_claim(id, claim).await?;
            instance
                .tags
                .insert(tags::NODECLAIM.to_string(), claim.to_string());
        }
        let out = match self.ec2.start_instances().instance_ids(id).send().await {
            Ok(out) => out,
            Err(e) => {
                let err = api_error("ec2:StartInstances", e);
                // The claim falls back to CreateFleet: the stopped member must not be found as
                // the claim's instance any more.
                if let (true, Some(previous)) = (retagged, tagged_for.as_deref()) {
                    if let Err(restore) = self.tag_claim(id, previous).await {
                        tracing::warn!(instance_id = %id, claim, error = %restore, "restoring the member's claim tag after a failed start failed");
                    }
                }
                return Err(err.into());
            }
        };
        instance.state = out
            .starting_instances()
            .iter()
            .find(|c| c.instance_id() == Some(id))
            .and_then(|c| c.current_state())
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap_or_else(|| InstanceStateName::Pending.as_str().to_string());
        tracing::info!(instance_id = %id, claim, "warm-pool member started for a NodeClaim");
        Ok(instance)
    }

    /// Takes a running `Running` member for `claim`: tags it with the claim, reboots it (the
    /// boot after its hold boot joins), then records the reboot ([`REBOOTED_FOR`]). Already
    /// rebooted for the claim: nothing to do.
    async fn reboot_for(&self, mut instance: Instance, claim: &str) -> Result<Instance, WarmError> {
        let id = instance.id.clone();
        if instance.tags.get(REBOOTED_FOR).map(String::as_str) == Some(claim) {
            return Ok(instance);
        }
        if instance.tags.get(tags::NODECLAIM).map(String::as_str) != Some(claim) {
            self.tag(&id, tags::NODECLAIM, claim).await?;
            instance
                .tags
                .insert(tags::NODECLAIM.to_string(), claim.to_string());
        }
        self.ec2
            .reboot_instances()
            .instance_ids(&id)
            .send()
            .await
            .map_err(|e| api_error("ec2:RebootInstances", e))?;
        // Rebooted: the take happened. A record that cannot be written only means a resumed
        // take reboots once more; failing here would send the claim to a second instance.
        match self.tag(&id, REBOOTED_FOR, claim).await {
            Ok(()) => {
                instance
                    .tags
                    .insert(REBOOTED_FOR.to_string(), claim.to_string());
            }
            Err(e) => {
                tracing::warn!(instance_id = %id, claim, error = %e, "recording the reboot of a taken member failed");
            }
        }
        tracing::info!(instance_id = %id, claim, "running warm-pool member rebooted to join for a NodeClaim");
        Ok(instance)
    }

    /// Starts member `id` for its hold boot (see `userdata::warm`), not handed out: only a
    /// member launched to wait `Running` or `Hibernated`, whose user data holds that boot
    /// back. Already running: nothing to do.
    pub async fn hold(&self, id: &str) -> Result<(), WarmError> {
        let instance = self.member(id).await?;
        let state = state_of(&instance);
        if !state.holds() {
            return Err(WarmRefusal::NotHeld {
                instance_id: id.to_string(),
                state: state.as_str(),
            }
            .into());
        }
        if matches!(instance.state.as_str(), "pending" | "running") {
            return Ok(());
        }
        self.ec2
            .start_instances()
            .instance_ids(id)
            .send()
            .await
            .map_err(|e| api_error("ec2:StartInstances", e))?;
        tracing::info!(instance_id = %id, state = state.as_str(), "warm-pool member started for its hold boot");
        Ok(())
    }

    /// Ends member `id`'s membership once it was taken for a claim: removes its
    /// `joiner.sh/warm-pool` and `joiner.sh/warm-state` tags, so from now on no start, stop,
    /// user-data change or SSM command is allowed on it (the IAM policy grants those only on
    /// instances carrying the warm-pool tag, which can be set at launch only). A failure is
    /// retried a few times; the caller decides what a lasting one means.
    pub async fn release(&self, id: &str) -> Result<(), WarmError> {
        self.member(id).await?;
        let mut attempt = 0;
        loop {
            let sent = self
                .ec2
                .delete_tags()
                .resources(id)
                .tags(aws_sdk_ec2::types::Tag::builder().key(WARM_POOL).build())
                .tags(aws_sdk_ec2::types::Tag::builder().key(WARM_STATE).build())
                .send()
                .await;
            match sent {
                Ok(_) => {
                    tracing::info!(instance_id = %id, "warm-pool member taken: membership tags removed");
                    return Ok(());
                }
                Err(e) => {
                    let err = api_error("ec2:DeleteTags", e);
                    // A reply lost after the tags went: a retry would be denied (the policy
                    // grants DeleteTags only while the tag is on), so look first.
                    if let Ok(Some(now)) = self.instances.get(id).await {
                        if !now.tags.contains_key(WARM_POOL) {
                            return Ok(());
                        }
                    }
                    if attempt + 1 >= RELEASE_ATTEMPTS {
                        return Err(err.into());
                    }
                    tracing::warn!(instance_id = %id, error = %err, attempt, "removing a taken member's warm-pool tag failed; retrying");
                    attempt += 1;
                    tokio::time::sleep(RELEASE_BACKOFF * attempt).await;
                }
            }
        }
    }

    /// Sets the instance's `joiner.sh/nodeclaim` tag to `claim`.
    async fn tag_claim(&self, id: &str, claim: &str) -> Result<(), AwsError> {
        self.tag(id, tags::NODECLAIM, claim).await
    }

    /// Sets one tag of the instance.
    async fn tag(&self, id: &str, key: &str, value: &str) -> Result<(), AwsError> {
        self.ec2
            .create_tags()
            .resources(id)
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key(key)
                    .value(value)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| api_error("ec2:CreateTags", e))?;
        Ok(())
    }

    /// Stops member `id` (its warm-up is over), or with `hibernate` hibernates it (a
    /// `Hibernated` member after its hold boot). Stopping one already stopped or stopping is a
    /// no-op, not an error.
    pub async fn stop(&self, id: &str, hibernate: bool) -> Result<(), WarmError> {
        let instance = self.member(id).await?;
        if matches!(instance.state.as_str(), "stopped" | "stopping") {
            return Ok(());
        }
        self.ec2
            .stop_instances()
            .instance_ids(id)
            .set_hibernate(hibernate.then_some(true))
            .send()
            .await
            .map_err(|e| api_error("ec2:StopInstances", e))?;
        tracing::info!(instance_id = %id, hibernate, "warm-pool member stopped");
        Ok(())
    }
}

/// The state `instance` was launched to wait in (its [`WARM_STATE`] tag; `Stopped` without).
fn state_of(instance: &Instance) -> WarmState {
    instance
        .tags
        .get(WARM_STATE)
        .and_then(|s| WarmState::parse(s))
        .unwrap_or_default()
}
