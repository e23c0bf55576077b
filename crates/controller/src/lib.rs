//! joiner-controller: joiner's Kubernetes side.
//!
//! The decisions are pure functions in `joiner-core`; this crate gathers the cluster's state
//! from reflector stores ([`state::ClusterState`]), turns it into a core `Snapshot` through the
//! conversions shared with the manifest loader (`joiner_apis::convert`), and carries out results
//! through the API ([`events`] explains decisions on pods). [`crypto`] settles the TLS provider
//! before any client is built.

pub mod crypto;
pub mod events;
pub mod state;

pub use state::ClusterState;
