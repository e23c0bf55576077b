//! Disruption: which of joiner's nodes to remove or replace, and when.
//!
//! [`settings`] holds what a Provisioner says about its nodes' disruption (methods, policy,
//! budgets), [`cron`] the schedules of budget windows and [`budgets`] how many nodes they let
//! go at a time.

pub mod budgets;
pub mod cron;
pub mod settings;

pub use settings::{Budget, BudgetNodes, ConsolidationPolicy, DisruptionSettings, Reason};
