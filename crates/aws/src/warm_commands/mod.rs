//! SSM Run Command to Bottlerocket warm-pool members: the pull of the pool's images while a
//! member warms, and the node settings of a member taken for a claim.
//!
//! Bottlerocket runs no user scripts and reads its user data only on its first boot (the
//! warm-up), so what AL2 and AL2023 members do from their first-boot script is sent to it with
//! SSM (`AWS-RunShellScript`, run by the agent in Bottlerocket's control container):
//! - **pull**: while a member warms, the controller sends [`script::commands`], asks after the
//!   command until it is over, and only then stops the member;
//! - **settings**: when a member is taken for a claim, the provider sends, before it starts,
//!   [`script::settings_commands`] with the node's settings (the user data it would have
//!   booted with); SSM delivers them when the member's agent is back up.
//!
//! Like the other warm-pool calls, sending is guarded: the instance is described first and the
//! command is sent only to a warm-pool member of this cluster ([`WarmMembers::member`]); the
//! IAM policy allows `ssm:SendCommand` only on instances with joiner's tags and the
//! `joiner.sh/warm-pool` tag, and only with the `AWS-RunShellScript` document.

pub mod script;

use std::time::Duration;

use aws_sdk_ssm::types::CommandInvocationStatus;
use joiner_core::PullProgress;

use crate::api_error::api_error;
use crate::error::AwsError;
use crate::warm_pool::{WarmError, WarmMembers};

/// The SSM document the pull runs as.
pub const DOCUMENT: &str = "AWS-RunShellScript";
/// The least time a pull is given to be delivered and to run, however little of the
/// member's warm-up is left (SSM's own minimum delivery time is 30 s).
pub const MIN_PULL_TIME: Duration = Duration::from_secs(60);
/// How long `apiclient apply` may run on a taken member before SSM stops it.
pub const SETTINGS_RUN: Duration = Duration::from_secs(120);
/// How long SSM tries to deliver a command to an agent that is not up yet.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(600);
/// The most characters of the script's output kept in a failed pull's reason.
pub const REASON_CHARS: usize = 400;

/// SSM commands to the warm-pool members of one cluster.
#[derive(Debug, Clone)]
pub struct WarmCommands {
    ssm: aws_sdk_ssm::Client,
    members: WarmMembers,
}

impl WarmCommands {
    /// Commands sent with `ssm`, to the members `members` guards.
    pub fn new(ssm: aws_sdk_ssm::Client, members: WarmMembers) -> Self {
        WarmCommands { ssm, members }
    }

    /// Sends the pull of `images` to member `id`, to be delivered and run `within` (at least
    /// [`MIN_PULL_TIME`]; SSM stops it then); returns the SSM command ID. Refused (nothing
    /// sent) for an instance that is not a live warm-pool member of this cluster. SSM answers
    /// `InvalidInstanceId` while the member's agent has not registered yet: the caller retries.
    pub async fn pull(
        &self,
        id: &str,
        images: &[String],
        within: Duration,
    ) -> Result<String, WarmError> {
        self.members.member(id).await?;
        let within = within.max(MIN_PULL_TIME);
        let command = self
            .send(
                id,
                script::commands(images),
                "pre-pull of warm-pool images",
                within,
                within,
            )
            .await?;
        tracing::info!(instance_id = %id, command, images = images.len(), "pre-pull sent to a warm-pool member");
        Ok(command)
    }

    /// Sends the settings `document` (TOML) to member `id`, about to be started (or
    /// started) for a claim; returns the command's ID without waiting for it to run. One
    /// call, never retried: a take holds the launch path for no SSM wait. SSM keeps a command
    /// for a stopped or pending instance whose agent registered during the warm-up and
    /// delivers it when the agent is back (within [`DELIVERY_TIMEOUT`]); the kubelet joins
    /// once the settings are applied. A refusal (`InvalidInstanceId` for an agent SSM does
    /// not know, access denied) is returned, and the take falls back to a launch. Settings
    /// that never apply make a node that never registers, which the claim's registration
    /// timeout replaces, as for any launch. Refused for an instance that is not a warm-pool
    /// member of this cluster.
    pub async fn apply_settings(&self, id: &str, document: &str) -> Result<String, WarmError> {
        self.members.member(id).await?;
        let command = self
            .send(
                id,
                script::settings_commands(document),
                "node settings of a taken warm-pool member",
                DELIVERY_TIMEOUT,
                SETTINGS_RUN,
            )
            .await?;
        tracing::info!(instance_id = %id, command, "node settings sent to a taken warm-pool member");
        Ok(command)
    }

    /// Sends `script` to `id` as an `AWS-RunShellScript` command that SSM delivers for at most
    /// `delivery` and runs for at most `run`; returns its ID.
    async fn send(
        &self,
        id: &str,
        script: String,
        comment: &str,
        delivery: Duration,
        run: Duration,
    ) -> Result<String, AwsError> {
        let out = self
            .ssm
            .send_command()
            .document_name(DOCUMENT)
            .instance_ids(id)
            .parameters("commands", vec![script])
            .parameters("executionTimeout", vec![run.as_secs().to_string()])
            .timeout_seconds(i32::try_from(delivery.as_secs()).unwrap_or(i32::MAX))
            .comment(format!("joiner: {comment}"))
            .send()
            .await
            .map_err(|e| api_error("ssm:SendCommand", e))?;
        out.command()
            .and_then(|c| c.command_id())
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .ok_or_else(|| AwsError::Api {
                operation: "ssm:SendCommand",
                code: "NoCommandId".to_string(),
                message: format!("SSM accepted the {comment} for {id} but returned no command ID"),
            })
    }

    /// How the command `command` (a pull, or settings) on `id` is doing. An invocation SSM does not list yet (just
    /// after the send) is still running.
    pub async fn progress(&self, id: &str, command: &str) -> Result<PullProgress, AwsError> {
        match self
            .ssm
            .get_command_invocation()
            .command_id(command)
            .instance_id(id)
            .send()
            .await
        {
            Ok(out) => Ok(progress_of(
                out.status(),
                out.standard_output_content().unwrap_or_default(),
                out.standard_error_content().unwrap_or_default(),
            )),
            Err(e) => match api_error("ssm:GetCommandInvocation", e) {
                AwsError::Api { code, .. } if code == "InvocationDoesNotExist" => {
                    Ok(PullProgress::Running)
                }
                other => Err(other),
            },
        }
    }
}

/// What an invocation's `status` and output say about the pull: pending, in progress and
/// delayed are running; success is success; anything else (failed, timed out, cancelled, an
/// unknown status) is over, with the end of the script's output as the reason.
pub fn progress_of(
    status: Option<&CommandInvocationStatus>,
    stdout: &str,
    stderr: &str,
) -> PullProgress {
    let Some(status) = status else {
        return PullProgress::Running;
    };
    match status {
        CommandInvocationStatus::Pending
        | CommandInvocationStatus::InProgress
        | CommandInvocationStatus::Delayed => PullProgress::Running,
        CommandInvocationStatus::Success => PullProgress::Succeeded,
        other => {
            let output = [stdout.trim(), stderr.trim()]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            let tail: String = {
                let chars: Vec<char> = output.chars().collect();
                let from = chars.len().saturating_sub(REASON_CHARS);
                chars[from..].iter().collect()
            };
            let status = other.as_str();
            PullProgress::Failed(if tail.is_empty() {
                format!("SSM command {status}")
            } else {
                format!("SSM command {status}: {tail}")
            })
        }
    }
}

#[cfg(test)]
mod tests;
