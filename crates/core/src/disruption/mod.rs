//! Disruption: which of joiner's nodes to remove or replace, and when.
//!
//! [`settings`] holds what a Provisioner says about its nodes' disruption (methods, policy,
//! budgets), [`cron`] the schedules of budget windows and [`budgets`] how many nodes they let
//! go at a time, [`pdb`] the PodDisruptionBudgets that keep a node's pods in place,
//! [`candidates`] which nodes disruption may act on (and why the others stay) and [`cost`] what
//! moving a node's pods costs, and [`consolidation`] whether removing some candidates is a
//! move worth taking.

pub mod budgets;
pub mod candidates;
pub mod consolidation;
pub mod cost;
pub mod cron;
pub mod pdb;
pub mod settings;

pub use pdb::Pdb;
pub use settings::{Budget, BudgetNodes, ConsolidationPolicy, DisruptionSettings, Reason};
