//! A cloud whose launches are slow: concurrency and throttling tests.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use joiner_core::testing::FakeCloud;
use joiner_core::{CloudProvider, LaunchRequest, LaunchedNode};

/// `FakeCloud` whose launches each take `delay` (a throttled CreateFleet), counting how many
/// run at once.
pub struct SlowLaunches {
    pub cloud: FakeCloud,
    pub delay: Duration,
    pub running: AtomicUsize,
    pub most: AtomicUsize,
}

impl SlowLaunches {
    pub fn new(cloud: FakeCloud, delay: Duration) -> Self {
        SlowLaunches {
            cloud,
            delay,
            running: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
        }
    }
}

impl CloudProvider for SlowLaunches {
    type Error = joiner_core::testing::FakeError;

    async fn instance_types(
        &self,
        provisioner: &str,
    ) -> Result<Vec<joiner_core::InstanceType>, Self::Error> {
        self.cloud.instance_types(provisioner).await
    }

    async fn create(&self, request: &LaunchRequest) -> Result<LaunchedNode, Self::Error> {
        use std::sync::atomic::Ordering;
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.cloud.create(request).await
    }

    async fn delete(&self, id: &str) -> Result<(), Self::Error> {
        self.cloud.delete(id).await
    }

    async fn get(&self, claim: &str) -> Result<Option<LaunchedNode>, Self::Error> {
        self.cloud.get(claim).await
    }

    async fn list(&self) -> Result<Vec<LaunchedNode>, Self::Error> {
        self.cloud.list().await
    }

    async fn start_warm(&self, id: &str, claim: &str) -> Result<LaunchedNode, Self::Error> {
        self.cloud.start_warm(id, claim).await
    }

    async fn stop_warm(&self, id: &str) -> Result<(), Self::Error> {
        self.cloud.stop_warm(id).await
    }

    async fn hold_warm(&self, id: &str) -> Result<(), Self::Error> {
        self.cloud.hold_warm(id).await
    }

    async fn hibernate_warm(&self, id: &str) -> Result<(), Self::Error> {
        self.cloud.hibernate_warm(id).await
    }

    fn warm_type_refusal(
        &self,
        t: &joiner_core::InstanceType,
        state: joiner_core::WarmState,
    ) -> Option<String> {
        self.cloud.warm_type_refusal(t, state)
    }

    async fn pull_warm(
        &self,
        id: &str,
        images: &[String],
        within: Duration,
    ) -> Result<String, Self::Error> {
        self.cloud.pull_warm(id, images, within).await
    }

    async fn pull_progress(
        &self,
        id: &str,
        pull: &str,
    ) -> Result<joiner_core::PullProgress, Self::Error> {
        self.cloud.pull_progress(id, pull).await
    }

    fn mark_unavailable(&self, t: &str, zone: &str, ct: joiner_core::CapacityType) {
        self.cloud.mark_unavailable(t, zone, ct)
    }
}
