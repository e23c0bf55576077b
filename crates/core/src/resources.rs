//! Resource vectors in integer units: the currency of every fit check.

use std::fmt;

use crate::error::QuantityError;
use crate::quantity;

/// Well-known extended resource names that the model keeps as named slots.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
/// AMD GPUs.
pub const AMD_GPU: &str = "amd.com/gpu";
/// AWS Inferentia / Trainium devices.
pub const NEURON: &str = "aws.amazon.com/neuron";

/// True for resource names outside the four fixed slots (cpu, memory, ephemeral-storage, pods):
/// device-plugin and extended resources, which a node reports only once its plugin runs.
pub fn is_extended(name: &str) -> bool {
    !matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods")
}

/// A resource vector: cpu in millicores, memory and ephemeral storage in bytes, a pod count, and
/// extended resources (GPUs, pod ENIs, ...) by name. Kept sorted and small so comparisons stay
/// cheap in the hot packing loop; arithmetic saturates so malformed input cannot overflow.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resources {
    /// Millicores.
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Pod slots.
    pub pods: i64,
    /// Extended resources, sorted by name, no zero entries.
    extended: Vec<(String, i64)>,
}

impl Resources {
    /// A vector with the four fixed slots set.
    pub fn new(cpu: i64, memory: i64, ephemeral_storage: i64, pods: i64) -> Self {
        Resources {
            cpu,
            memory,
            ephemeral_storage,
            pods,
            extended: Vec::new(),
        }
    }

    /// Parses a Kubernetes resource name and quantity and adds it to this vector.
    pub fn add_quantity(&mut self, name: &str, value: &str) -> Result<(), QuantityError> {
        match name {
            "cpu" => self.cpu = self.cpu.saturating_add(quantity::parse_milli(value)?),
            "memory" => self.memory = self.memory.saturating_add(quantity::parse_units(value)?),
            "ephemeral-storage" => {
                self.ephemeral_storage = self
                    .ephemeral_storage
                    .saturating_add(quantity::parse_units(value)?)
            }
            "pods" => self.pods = self.pods.saturating_add(quantity::parse_units(value)?),
            other => {
                let v = quantity::parse_units(value)?;
                let cur = self.get(other);
                self.set(other, cur.saturating_add(v));
            }
        }
        Ok(())
    }

    /// The amount of a resource by its Kubernetes name.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.pods,
            other => self
                .extended
                .binary_search_by(|(k, _)| k.as_str().cmp(other))
                .map(|i| self.extended[i].1)
                .unwrap_or(0),
        }
    }

    /// Sets a resource by its Kubernetes name.
    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            "cpu" => self.cpu = value,
            "memory" => self.memory = value,
            "ephemeral-storage" => self.ephemeral_storage = value,
            "pods" => self.pods = value,
            other => match self
                .extended
                .binary_search_by(|(k, _)| k.as_str().cmp(other))
            {
                Ok(i) if value == 0 => {
                    self.extended.remove(i);
                }
                Ok(i) => self.extended[i].1 = value,
                Err(_) if value == 0 => {}
                Err(i) => self.extended.insert(i, (other.to_string(), value)),
            },
        }
    }

    /// Extended resources with a non-zero amount.
    pub fn extended(&self) -> &[(String, i64)] {
        &self.extended
    }

    /// True when any extended resource is requested (GPUs and the like).
    pub fn has_extended(&self) -> bool {
        !self.extended.is_empty()
    }

    /// Component-wise sum.
    pub fn add(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_add(other.cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.pods = self.pods.saturating_add(other.pods);
        for (k, v) in &other.extended {
            let cur = self.get(k);
            self.set(k, cur.saturating_add(*v));
        }
    }

    /// Component-wise sum of `other` taken `n` times.
    pub fn add_times(&mut self, other: &Resources, n: i64) {
        self.cpu = self.cpu.saturating_add(other.cpu.saturating_mul(n));
        self.memory = self.memory.saturating_add(other.memory.saturating_mul(n));
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage.saturating_mul(n));
        self.pods = self.pods.saturating_add(other.pods.saturating_mul(n));
        for (k, v) in &other.extended {
            let cur = self.get(k);
            self.set(k, cur.saturating_add(v.saturating_mul(n)));
        }
    }

    /// Component-wise difference, which may go negative (callers check with `fits`).
    pub fn sub(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_sub(other.cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.pods = self.pods.saturating_sub(other.pods);
        for (k, v) in &other.extended {
            let cur = self.get(k);
            self.set(k, cur.saturating_sub(*v));
        }
    }

    /// Component-wise maximum: the Kubernetes rule for init containers against app containers.
    pub fn max_with(&mut self, other: &Resources) {
        self.cpu = self.cpu.max(other.cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.pods = self.pods.max(other.pods);
        for (k, v) in &other.extended {
            let cur = self.get(k);
            self.set(k, cur.max(*v));
        }
    }

    /// True when every component of `self` is at most the same component of `capacity`.
    pub fn fits(&self, capacity: &Resources) -> bool {
        self.cpu <= capacity.cpu
            && self.memory <= capacity.memory
            && self.ephemeral_storage <= capacity.ephemeral_storage
            && self.pods <= capacity.pods
            && self.extended.iter().all(|(k, v)| *v <= capacity.get(k))
    }

    /// The first resource (by name) where `self` exceeds `capacity`, for explanations.
    pub fn first_excess(&self, capacity: &Resources) -> Option<&'static str> {
        if self.cpu > capacity.cpu {
            Some("cpu")
        } else if self.memory > capacity.memory {
            Some("memory")
        } else if self.ephemeral_storage > capacity.ephemeral_storage {
            Some("ephemeral-storage")
        } else if self.pods > capacity.pods {
            Some("pods")
        } else {
            None
        }
    }

    /// How many copies of `item` fit into `self` (at most `limit`).
    pub fn copies_fitting(&self, item: &Resources, limit: i64) -> i64 {
        let mut n = limit;
        let mut slot = |cap: i64, req: i64| {
            if req > 0 {
                n = n.min(if cap <= 0 { 0 } else { cap / req });
            } else if cap < 0 {
                n = 0;
            }
        };
        slot(self.cpu, item.cpu);
        slot(self.memory, item.memory);
        slot(self.ephemeral_storage, item.ephemeral_storage);
        slot(self.pods, item.pods);
        for (k, v) in &item.extended {
            slot(self.get(k), *v);
        }
        n.max(0)
    }

    /// True when no component is negative.
    pub fn is_non_negative(&self) -> bool {
        self.cpu >= 0
            && self.memory >= 0
            && self.ephemeral_storage >= 0
            && self.pods >= 0
            && self.extended.iter().all(|(_, v)| *v >= 0)
    }

    /// Renders one named resource for people ("1500m", "6903Mi", "4").
    pub fn format_named(&self, name: &str) -> String {
        format_amount(name, self.get(name))
    }
}

/// Renders an amount of the named resource for people.
pub fn format_amount(name: &str, v: i64) -> String {
    match name {
        "cpu" => quantity::format_cpu(v),
        "memory" | "ephemeral-storage" => quantity::format_bytes(v),
        _ => v.to_string(),
    }
}

/// Renders an amount of the named resource in the units people think in, naming it: "1.5 cpu
/// cores", "3 GiB memory", "10 GiB ephemeral storage", "110 pods", "2 nvidia.com/gpu".
pub fn human_amount(name: &str, v: i64) -> String {
    match name {
        "cpu" => quantity::human_cpu(v),
        "memory" => format!("{} memory", quantity::human_bytes(v)),
        "ephemeral-storage" => format!("{} ephemeral storage", quantity::human_bytes(v)),
        _ => format!("{v} {name}"),
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{cpu: {}, memory: {}, ephemeral-storage: {}, pods: {}",
            quantity::format_cpu(self.cpu),
            quantity::format_bytes(self.memory),
            quantity::format_bytes(self.ephemeral_storage),
            self.pods
        )?;
        for (k, v) in &self.extended {
            write!(f, ", {k}: {v}")?;
        }
        write!(f, "}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_fit() {
        let mut r = Resources::default();
        r.add_quantity("cpu", "1500m").unwrap();
        r.add_quantity("memory", "1Gi").unwrap();
        r.add_quantity(NVIDIA_GPU, "1").unwrap();
        let mut cap = Resources::new(2000, 2 << 30, 0, 10);
        assert!(!r.fits(&cap), "gpu missing from capacity");
        cap.set(NVIDIA_GPU, 4);
        assert!(r.fits(&cap));
        assert_eq!(cap.copies_fitting(&r, 100), 1);
    }

    #[test]
    fn saturating_arithmetic() {
        let mut a = Resources::new(i64::MAX, 0, 0, 0);
        a.add(&Resources::new(10, 0, 0, 0));
        assert_eq!(a.cpu, i64::MAX);
        a.add_times(&Resources::new(i64::MAX, 0, 0, 0), 3);
        assert_eq!(a.cpu, i64::MAX);
    }

    #[test]
    fn extended_slots_stay_sorted_and_sparse() {
        let mut r = Resources::default();
        r.set("z/x", 1);
        r.set("a/y", 2);
        r.set("a/y", 0);
        assert_eq!(r.extended(), &[("z/x".to_string(), 1)]);
        let mut m = Resources::new(1, 5, 0, 0);
        m.max_with(&Resources::new(3, 2, 0, 0));
        assert_eq!((m.cpu, m.memory), (3, 5));
    }

    #[test]
    fn copies_with_zero_request_dimension() {
        let cap = Resources::new(4000, 1000, 0, 3);
        let item = Resources::new(1000, 0, 0, 1);
        assert_eq!(cap.copies_fitting(&item, 100), 3);
        let neg = Resources::new(-1, 1000, 0, 3);
        assert_eq!(neg.copies_fitting(&Resources::new(0, 1, 0, 0), 100), 0);
    }
}
