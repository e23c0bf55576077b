//! joiner-controller: joiner's Kubernetes side.
//!
//! The decisions are pure functions in `joiner-core`; this crate gathers the cluster's state
//! from reflector stores ([`state::ClusterState`]), turns it into a core `Snapshot` through the
//! conversions shared with the manifest loader (`joiner_apis::convert`), and carries out results
//! through the API ([`events`] explains decisions on pods). [`crypto`] settles the TLS provider
//! before any client is built.

pub mod context;
pub mod crypto;
pub mod events;
pub mod gc;
pub mod http;
pub mod inflight;
pub mod instrumented;
pub mod leader;
pub mod lifecycle;
pub mod liveness;
pub mod logging;
pub mod metrics;
pub mod provisioning;
pub mod registration;
pub mod runtime;
pub mod settings;
pub mod state;
pub mod status;
pub mod termination;
pub mod watch;

pub use context::Context;
pub use metrics::Metrics;
pub use settings::Settings;
pub use state::ClusterState;
