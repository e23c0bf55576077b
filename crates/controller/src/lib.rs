//! joiner-controller: joiner's Kubernetes side.
//!
//! The decisions are pure functions in `joiner-core`; this crate gathers the cluster's state
//! from reflector stores ([`state::ClusterState`]), turns it into a core `Snapshot` through the
//! conversions shared with the manifest loader (`joiner_apis::convert`), and carries out results
//! through the API ([`k8s`] holds the shared API helpers and Events). [`crypto`] settles the TLS provider
//! before any client is built.

pub mod cluster_facts;
pub mod context;
pub mod crypto;
pub mod disruption;
pub mod http;
pub use joiner_apis::cluster::inflight;
pub mod instrumented;
pub mod interruption;
pub mod k8s;
pub mod launcher;
pub mod leader;
pub mod lifecycle;
pub mod logging;
pub mod metrics;
pub use joiner_apis::cluster::nominations;
pub mod pod_record;
pub mod provisioning;
pub mod reconcile;
pub mod runtime;
pub mod settings;
pub mod state;
pub mod status;
pub mod warm_pool;
pub mod watch;

pub use context::Context;
pub use metrics::Metrics;
pub use settings::Settings;
pub use state::ClusterState;
