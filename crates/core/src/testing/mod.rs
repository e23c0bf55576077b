//! Test support (feature `testing`, and the core's own tests): [`FakeCloud`], an in-memory
//! `CloudProvider` for controller tests, and for tests of the simulation a small hand-made
//! [`catalog`] with a checker of hard constraints ([`plan_check`]).

pub mod catalog;
pub mod fake_cloud;
pub mod plan_check;

pub use fake_cloud::{FakeCall, FakeCloud, FakeError, FakeMethod, DEFAULT_ZONE};
