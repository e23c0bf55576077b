//! The Kubernetes toolbox every reconciler shares: what an API error code means
//! ([`codes`]), how objects are named in messages ([`refs`]), joiner's finalizer ([`finalizers`]), resourceVersion-guarded Node
//! patches ([`node_patch`]), NodeClaim status writes and deletion ([`claims`]), Events on objects
//! ([`events`]) and a per-key retry [`backoff`]. One copy of each, so a fix (a new conflict code, a new match rule) reaches
//! provisioning, lifecycle, status, disruption and interruption at once. Which Node belongs to
//! which NodeClaim is `joiner_apis::cluster::matching`, since `joiner plan` matches them too.

pub mod backoff;
pub mod claims;
pub mod codes;
pub mod events;
pub mod finalizers;
pub mod names;
pub mod node_patch;
pub mod refs;
pub mod stores;
