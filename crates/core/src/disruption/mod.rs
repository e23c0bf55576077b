//! Disruption: which of joiner's nodes to remove or replace, and when.
//!
//! [`settings`] holds what a Provisioner says about its nodes' disruption (methods, policy,
//! budgets), [`cron`] the schedules of budget windows and [`budgets`] how many nodes they let
//! go at a time, [`pdb`] the PodDisruptionBudgets that keep a node's pods in place,
//! [`candidates`] which nodes disruption may act on (and why the others stay) and [`cost`] what
//! moving a node's pods costs, and [`consolidation`] whether removing some candidates is a
//! move worth taking. [`drift`] finds what a node shows of its Provisioner's changes,
//! [`trial`] simulates the cluster without some nodes, [`room`] what CPU and memory alone
//! refuse without a simulation ([`together`]: where a pod's required affinity lets it go),
//! [`working`] applies a decision to it, and [`planner`] runs the methods in order and says
//! why every other node stays.

pub mod budgets;
pub mod candidates;
pub mod consolidation;
pub mod cost;
pub mod cron;
pub mod drift;
#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod karpenter_scenarios;
pub mod pdb;
pub mod planner;
pub mod room;
#[cfg(test)]
mod scenarios;
pub mod settings;
pub mod together;
pub mod trial;
pub mod working;

pub use pdb::Pdb;
pub use planner::{plan, Decision, DisruptionPlan, Input, Kept, RefusedMove};
pub use settings::{
    Budget, BudgetNodes, ConsolidationPolicy, DisruptionSettings, PriceBound, Reason,
};
