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
pub mod metrics;
pub mod settings;
pub mod state;
pub mod status;

pub use context::Context;
pub use metrics::Metrics;
pub use settings::Settings;
pub use state::ClusterState;
