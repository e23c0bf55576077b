//! Disruption: which of joiner's nodes to remove or replace, and when.
//!
//! [`settings`] holds what a Provisioner says about its nodes' disruption (methods, policy,
//! budgets) and [`cron`] the schedules of budget windows.

pub mod cron;
pub mod settings;

pub use settings::{Budget, BudgetNodes, ConsolidationPolicy, DisruptionSettings, Reason};
