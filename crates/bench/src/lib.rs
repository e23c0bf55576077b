//! joiner-bench: what joiner's simulation is measured with, kept out of the production crates.
//!
//! [`workload`] generates the synthetic clusters of `joiner bench` and the criterion benches
//! (a mixed fleet of Deployments, Karpenter's benchmark mix, mutually anti-affine pods);
//! [`config_lp`] computes a lower bound on the cost of any packing (the configuration LP by
//! column generation, with [`lp`] as its simplex), which the cost-quality tests compare plans
//! against; [`cluster`] turns a workload into a running, partly drained cluster for the
//! disruption benchmark.

pub mod cluster;
pub mod config_lp;
pub mod lp;
pub mod workload;
