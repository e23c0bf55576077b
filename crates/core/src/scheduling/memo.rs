//! What a run of many simulations over one catalog and one set of Provisioners keeps between
//! them. The disruption planner simulates hundreds of trials of one cluster, and each worked
//! out again, per topology key and Provisioner, the values that Provisioner's nodes can take
//! with the most each holds: a scan of the whole catalog that no trial changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::resources::Resources;

/// A topology key's values for one Provisioner, each with the largest allocatable of its
/// types offering it.
pub(crate) type Values = Arc<BTreeMap<String, Resources>>;

/// Kept between the simulations of one plan ([`super::Options::memo`]). It is valid only
/// while the catalog and the Provisioners stay as they were: its keys are topology keys and
/// Provisioner names, so a caller makes a new one for each plan and never shares it between
/// catalogs.
#[derive(Debug, Default)]
pub struct Memo {
    values: Mutex<HashMap<(String, String), Values>>,
}

impl Memo {
    /// The values of `key` for Provisioner `provisioner`: kept, or `compute`d and kept.
    pub(crate) fn values(
        &self,
        key: &str,
        provisioner: &str,
        compute: impl FnOnce() -> BTreeMap<String, Resources>,
    ) -> Values {
        let found = self
            .values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&(key.to_string(), provisioner.to_string()))
            .cloned();
        if let Some(v) = found {
            return v;
        }
        let v = Arc::new(compute());
        self.values
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert((key.to_string(), provisioner.to_string()), v.clone());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_computed_once_per_key_and_provisioner() {
        let memo = Memo::default();
        let mut computed = 0;
        let mut get = |key: &str, prov: &str| {
            memo.values(key, prov, || {
                computed += 1;
                BTreeMap::from([(format!("{key}-{prov}"), Resources::default())])
            })
        };
        let a = get("zone", "default");
        let b = get("zone", "default");
        let c = get("zone", "gpu");
        assert_eq!(a, b);
        assert!(c.contains_key("zone-gpu"));
        assert_eq!(computed, 2);
    }
}
