//! Offerings that recently failed for lack of capacity, so the planner avoids them a while.
//!
//! When CreateFleet answers InsufficientInstanceCapacity (or a kin, see
//! [`crate::fleet::CAPACITY_ERROR_CODES`]) for (type, zone, capacity type), asking again at once
//! fails the same way; the offering is marked unavailable for 3 minutes (Karpenter's figure) and
//! the claim is planned again without it. Marks expire on their own, since capacity comes back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use joiner_core::{CapacityType, InstanceType};

use crate::clock::{self, Clock};

/// How long an offering stays unavailable after a capacity error.
pub const DEFAULT_TTL: Duration = Duration::from_secs(180);

/// One offering: instance type, zone name and capacity type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfferingKey {
    /// e.g. `m5.large`.
    pub instance_type: String,
    /// Zone name, e.g. `us-east-1a`.
    pub zone: String,
    /// spot or on-demand.
    pub capacity_type: CapacityType,
}

impl OfferingKey {
    /// Builds a key.
    pub fn new(instance_type: &str, zone: &str, capacity_type: CapacityType) -> Self {
        OfferingKey {
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type,
        }
    }
}

/// A thread-safe TTL set of unavailable offerings, shared by the launcher (which marks) and the
/// catalog and planner (which read it through [`UnavailableOfferings::apply`]).
#[derive(Debug)]
pub struct UnavailableOfferings {
    ttl: Duration,
    clock: Arc<dyn Clock>,
    marks: Mutex<HashMap<OfferingKey, Instant>>,
}

impl Default for UnavailableOfferings {
    fn default() -> Self {
        Self::new(DEFAULT_TTL, clock::system())
    }
}

impl UnavailableOfferings {
    /// An empty set whose marks last `ttl` on `clock`.
    pub fn new(ttl: Duration, clock: Arc<dyn Clock>) -> Self {
        UnavailableOfferings {
            ttl,
            clock,
            marks: Mutex::new(HashMap::new()),
        }
    }

    /// Marks `key` unavailable for a full TTL from now (a repeated failure extends it).
    pub fn mark(&self, key: OfferingKey) {
        let until = self.clock.now() + self.ttl;
        tracing::info!(
            instance_type = %key.instance_type,
            zone = %key.zone,
            capacity_type = key.capacity_type.as_str(),
            "offering marked unavailable"
        );
        self.lock().insert(key, until);
    }

    /// True while `key` is marked.
    pub fn is_unavailable(&self, instance_type: &str, zone: &str, capacity: CapacityType) -> bool {
        let now = self.clock.now();
        self.lock()
            .get(&OfferingKey::new(instance_type, zone, capacity))
            .is_some_and(|until| *until > now)
    }

    /// The marks still in force, sorted; expired marks are dropped.
    pub fn current(&self) -> Vec<OfferingKey> {
        let now = self.clock.now();
        let mut marks = self.lock();
        marks.retain(|_, until| *until > now);
        let mut keys: Vec<_> = marks.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Sets `available = false` on every offering of `types` that is marked. Offerings are only
    /// ever turned off here: one unavailable for another reason stays so.
    pub fn apply(&self, types: &mut [InstanceType]) {
        let current = self.current();
        if current.is_empty() {
            return;
        }
        for it in types.iter_mut() {
            for o in &mut it.offerings {
                if current.iter().any(|k| {
                    k.instance_type == it.name
                        && k.zone == o.zone
                        && k.capacity_type == o.capacity_type
                }) {
                    o.available = false;
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<OfferingKey, Instant>> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use joiner_core::{Offering, Resources};

    fn it(name: &str) -> InstanceType {
        let offering = |zone: &str, capacity_type| Offering {
            zone: zone.to_string(),
            capacity_type,
            price: 0.1,
            price_estimated: false,
            available: true,
        };
        InstanceType {
            name: name.to_string(),
            labels: Default::default(),
            capacity: Resources::new(1000, 1, 1, 1),
            allocatable: Resources::new(1000, 1, 1, 1),
            offerings: vec![
                offering("us-east-1a", CapacityType::Spot),
                offering("us-east-1a", CapacityType::OnDemand),
                offering("us-east-1b", CapacityType::Spot),
            ],
            provider_keys: crate::labels::INSTANCE_LABEL_KEYS,
        }
    }

    #[test]
    fn marks_apply_to_the_exact_offering_and_expire() {
        let clock = ManualClock::new();
        let u = UnavailableOfferings::new(DEFAULT_TTL, clock.clone());
        u.mark(OfferingKey::new(
            "m5.large",
            "us-east-1a",
            CapacityType::Spot,
        ));
        assert!(u.is_unavailable("m5.large", "us-east-1a", CapacityType::Spot));
        assert!(!u.is_unavailable("m5.large", "us-east-1a", CapacityType::OnDemand));

        let mut types = vec![it("m5.large"), it("c5.large")];
        u.apply(&mut types);
        let avail: Vec<bool> = types[0].offerings.iter().map(|o| o.available).collect();
        assert_eq!(avail, [false, true, true]);
        assert!(types[1].offerings.iter().all(|o| o.available));

        clock.advance(DEFAULT_TTL - Duration::from_secs(1));
        assert!(u.is_unavailable("m5.large", "us-east-1a", CapacityType::Spot));
        clock.advance(Duration::from_secs(1));
        assert!(!u.is_unavailable("m5.large", "us-east-1a", CapacityType::Spot));
        assert!(u.current().is_empty());
        let mut fresh = vec![it("m5.large")];
        u.apply(&mut fresh);
        assert!(fresh[0].offerings.iter().all(|o| o.available));
    }
}
