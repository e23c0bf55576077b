//! What every reconciler shares: the API client, the state cache, the cloud, metrics, settings.

use std::sync::Arc;

use joiner_core::CloudProvider;

use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::state::ClusterState;

/// The handles a reconciler needs, built once by the runtime and shared behind an `Arc`.
/// Generic over the cloud so the same reconcilers run on `AwsCloudProvider` in production and in
/// the moto-backed tests.
pub struct Context<P: CloudProvider> {
    /// The API client: every change to the cluster goes through it.
    pub client: kube::Client,
    /// Reflector stores, read without requests.
    pub state: ClusterState,
    /// The cloud that launches and removes instances.
    pub cloud: Arc<P>,
    /// The controller's Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Durations and names.
    pub settings: Settings,
}

impl<P: CloudProvider> Context<P> {
    /// A context with fresh metrics (registered in no registry): for tests and tools.
    pub fn new(
        client: kube::Client,
        state: ClusterState,
        cloud: Arc<P>,
        settings: Settings,
    ) -> Self {
        Context {
            client,
            state,
            cloud,
            metrics: Arc::new(Metrics::default()),
            settings,
        }
    }
}
