//! AWS-side housekeeping the leader runs beside the cloud-agnostic controllers: deleting
//! launch templates nothing has launched with for a while ([`AwsCloudProvider::collect_launch_templates`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::AwsCloudProvider;

/// How often the housekeeping runs.
pub const INTERVAL: Duration = Duration::from_secs(600);

/// Runs the housekeeping every [`INTERVAL`] (the first time at once) until `stop` resolves.
/// Failures are logged; the next round tries again.
pub async fn run(provider: Arc<AwsCloudProvider>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        match provider.collect_launch_templates().await {
            Ok(deleted) if !deleted.is_empty() => {
                tracing::info!(count = deleted.len(), templates = ?deleted, "stale launch templates deleted");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "deleting stale launch templates failed; retrying later")
            }
        }
    }
}
