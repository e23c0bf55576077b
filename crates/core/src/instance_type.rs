//! Instance types and their offerings: what the simulation may buy, and at what price.

use std::collections::BTreeMap;
use std::fmt;

use crate::labels;
use crate::requirements::Requirements;
use crate::resources::Resources;

/// spot or on-demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CapacityType {
    /// Interruptible, usually cheaper.
    Spot,
    /// Regular capacity.
    OnDemand,
}

impl CapacityType {
    /// The label value (`karpenter.sh/capacity-type`).
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Spot => "spot",
            CapacityType::OnDemand => "on-demand",
        }
    }

    /// Parses the label value.
    pub fn parse(s: &str) -> Option<CapacityType> {
        match s {
            "spot" => Some(CapacityType::Spot),
            "on-demand" => Some(CapacityType::OnDemand),
            _ => None,
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One place an instance type can be bought: a zone and a capacity type, with its price.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    /// Availability zone name.
    pub zone: String,
    /// spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// True when the price is a stand-in (spot offline, or another region's table).
    pub price_estimated: bool,
    /// False while the offering is known to lack capacity.
    pub available: bool,
}

/// An EC2 instance type as the simulation sees it.
#[derive(Clone, Debug)]
pub struct InstanceType {
    /// API name, e.g. `m5.large`.
    pub name: String,
    /// Well-known labels with single values (arch, os, family, cpu, ...). Zone and capacity type
    /// are not here: they come from the offerings.
    pub labels: BTreeMap<String, String>,
    /// Raw capacity (vCPUs as millicores, memory after VM overhead, root volume, max pods).
    pub capacity: Resources,
    /// What kubelet reports as allocatable: capacity minus reservations and eviction thresholds.
    pub allocatable: Resources,
    /// Where and at what price it can be bought.
    pub offerings: Vec<Offering>,
    /// The instance label keys its cloud provider defines on instance types (the AWS catalog's
    /// `karpenter.k8s.aws/*`), whether or not this type has a value for them: a requirement on
    /// such a key that the type lacks (a GPU name on a CPU type) excludes it, while a key no
    /// provider defines is a custom label, the Provisioner's business. The core's own
    /// well-known keys ([`crate::labels::WELL_KNOWN`]) need not be listed.
    pub provider_keys: &'static [&'static str],
}

impl InstanceType {
    /// True when the type carries accelerators (GPUs, Neuron): kept for pods that ask for them.
    pub fn is_accelerated(&self) -> bool {
        self.capacity.has_extended()
            && self.capacity.extended().iter().any(|(k, _)| {
                k == crate::resources::NVIDIA_GPU
                    || k == crate::resources::AMD_GPU
                    || k == crate::resources::NEURON
                    || k.starts_with("aws.amazon.com/neuron")
                    || k.starts_with("habana.ai/")
            })
    }

    /// The cheapest available offering that the requirements allow.
    pub fn cheapest_offering(&self, reqs: &Requirements) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available && offering_allowed(o, reqs))
            .min_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.capacity_type.cmp(&b.capacity_type))
                    .then_with(|| a.zone.cmp(&b.zone))
            })
    }

    /// True when `key` is an instance label the simulation decides by the type (a well-known
    /// key, or one of its provider's keys), rather than a custom label.
    pub fn defines(&self, key: &str) -> bool {
        labels::is_well_known(key) || self.provider_keys.contains(&key)
    }

    /// The first requirement key the type's own labels violate (zone and capacity type are
    /// checked against the offerings instead). Custom keys are the claim's business.
    pub fn first_label_conflict<'a>(&self, reqs: &'a Requirements) -> Option<&'a str> {
        for (k, r) in reqs.iter() {
            match k.as_str() {
                labels::ZONE | labels::CAPACITY_TYPE => {
                    if !self.offerings.iter().any(|o| offering_allowed(o, reqs)) {
                        return Some(self.offering_conflict(reqs).unwrap_or(k.as_str()));
                    }
                }
                key => match self.labels.get(key) {
                    Some(v) => {
                        if !r.allows(v) {
                            return Some(k.as_str());
                        }
                    }
                    None => {
                        if self.defines(key)
                            && key != labels::PROVISIONER_NAME
                            && key != labels::REGION
                            && !r.allows_absent()
                        {
                            return Some(k.as_str());
                        }
                    }
                },
            }
        }
        None
    }
}

impl InstanceType {
    /// Which of the zone and capacity-type requirements leaves the type no offering: the zone
    /// when no offering is in an allowed zone, else the capacity type when none has an allowed
    /// one, else the zone (each is offered, never together).
    fn offering_conflict<'a>(&self, reqs: &'a Requirements) -> Option<&'a str> {
        let key = |name: &str| reqs.iter().map(|(k, _)| k.as_str()).find(|k| *k == name);
        let zone_ok = reqs
            .get(labels::ZONE)
            .is_none_or(|r| self.offerings.iter().any(|o| r.allows(&o.zone)));
        let capacity_ok = reqs.get(labels::CAPACITY_TYPE).is_none_or(|r| {
            self.offerings
                .iter()
                .any(|o| r.allows(o.capacity_type.as_str()))
        });
        if zone_ok && !capacity_ok {
            key(labels::CAPACITY_TYPE)
        } else {
            key(labels::ZONE).or_else(|| key(labels::CAPACITY_TYPE))
        }
    }
}

/// True when the offering's zone and capacity type satisfy the requirements.
pub fn offering_allowed(o: &Offering, reqs: &Requirements) -> bool {
    reqs.get(labels::ZONE).is_none_or(|r| r.allows(&o.zone))
        && reqs
            .get(labels::CAPACITY_TYPE)
            .is_none_or(|r| r.allows(o.capacity_type.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Requirement;

    fn it() -> InstanceType {
        let mut labels = BTreeMap::new();
        labels.insert(labels::ARCH.to_string(), "amd64".to_string());
        InstanceType {
            name: "m5.large".into(),
            labels,
            capacity: Resources::new(2000, 8 << 30, 20 << 30, 29),
            allocatable: Resources::new(1930, 6903 << 20, 17 << 30, 29),
            offerings: vec![
                Offering {
                    zone: "a".into(),
                    capacity_type: CapacityType::OnDemand,
                    price: 0.096,
                    price_estimated: false,
                    available: true,
                },
                Offering {
                    zone: "b".into(),
                    capacity_type: CapacityType::Spot,
                    price: 0.03,
                    price_estimated: false,
                    available: true,
                },
            ],
            provider_keys: crate::testing::catalog::PROVIDER_KEYS,
        }
    }

    #[test]
    fn the_key_blamed_for_no_offering_is_the_one_no_offering_meets() {
        // On-demand in zone a, spot in zone b.
        let t = it();
        let reqs = |zone: &str, capacity: &str| {
            let mut r = Requirements::new();
            r.add(labels::ZONE, Requirement::single(zone));
            r.add(labels::CAPACITY_TYPE, Requirement::single(capacity));
            r
        };
        // No offering in zone c at all: the zone, though capacity-type sorts first.
        assert_eq!(
            t.first_label_conflict(&reqs("c", "on-demand")),
            Some(labels::ZONE)
        );
        // Zone a is offered, reserved capacity is not.
        assert_eq!(
            t.first_label_conflict(&reqs("a", "reserved")),
            Some(labels::CAPACITY_TYPE)
        );
        // Both offered, never together: the zone.
        assert_eq!(
            t.first_label_conflict(&reqs("a", "spot")),
            Some(labels::ZONE)
        );
        assert_eq!(t.first_label_conflict(&reqs("b", "spot")), None);
    }

    #[test]
    fn offerings_follow_requirements() {
        let t = it();
        let mut r = Requirements::new();
        assert_eq!(t.cheapest_offering(&r).unwrap().zone, "b");
        r.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
        assert_eq!(t.cheapest_offering(&r).unwrap().zone, "a");
        r.add(labels::ZONE, Requirement::single("b"));
        assert!(t.cheapest_offering(&r).is_none());
        // Zone b and on-demand are each offered, never together: the zone is named.
        assert_eq!(t.first_label_conflict(&r), Some(labels::ZONE));
    }

    #[test]
    fn label_conflicts() {
        let t = it();
        let mut r = Requirements::new();
        r.add(labels::ARCH, Requirement::single("arm64"));
        assert_eq!(t.first_label_conflict(&r), Some(labels::ARCH));
        let mut g = Requirements::new();
        let gpu_name = crate::testing::catalog::INSTANCE_GPU_NAME;
        g.add(gpu_name, Requirement::single("t4"));
        assert_eq!(t.first_label_conflict(&g), Some(gpu_name));
        let mut custom = Requirements::new();
        custom.add("example.com/rack", Requirement::single("r1"));
        assert_eq!(t.first_label_conflict(&custom), None);
        assert!(!t.is_accelerated());
    }
}
