//! The launcher: NodeClaims written and launched, for whichever reconciler decided them.
//!
//! Provisioning buys nodes for pending pods, disruption buys replacements before it drains,
//! interruption buys replacements before a spot instance is reclaimed, and the warm pool
//! launches its members: each decides what to buy, and all of them write the claim
//! ([`claims`]) and launch its instance ([`launch`]: a warm member taken first ([`take`]),
//! else CreateFleet) the same way. It sits below the reconcilers so that none of them imports
//! another to buy a node.

pub mod claims;
mod error;
pub mod launch;
pub mod take;

pub use error::ProvisioningError;
pub use launch::{launch_claim, Catalogs, Launch, LaunchedClaim};
