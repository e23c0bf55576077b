//! The live EC2 catalog: instance types, zone offerings, on-demand and spot prices read from
//! AWS, with the embedded catalog as the fallback of each source (see [`live`]).
//!
//! Each file reads one API and turns its answer into plain data; [`live::LiveCatalog`]
//! refreshes them on their intervals and assembles `joiner_core::InstanceType`s identical in
//! shape and labels to the embedded catalog's, so the simulation treats both alike.

pub mod instance_types;
pub mod live;
pub mod offerings;
pub mod pricing;
pub mod spot;

pub use live::{CatalogMetrics, CatalogOptions, CatalogStatus, LiveCatalog, Source, SourceState};
