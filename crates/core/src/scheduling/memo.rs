//! What a run of many simulations over one catalog and one set of Provisioners keeps between
//! them. The disruption planner simulates hundreds of trials of one cluster, and each worked
//! out again what no trial changes: per topology key and Provisioner, the values that
//! Provisioner's nodes can take with the most each holds; per Provisioner, the types it allows
//! and what each holds after DaemonSet overhead; and per Provisioner and requirement set, the
//! price frontier of its types and which of them it allows at what price (each a scan of the
//! whole catalog).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::scheduling::candidates::ViewBase;

/// A topology key's values for one Provisioner, each with the largest allocatable of its
/// types offering it.
pub(crate) type Values = Arc<BTreeMap<String, Resources>>;

/// A Provisioner view's price frontier: local type indices, cheapest first.
type Frontier = Arc<Vec<usize>>;

/// What a requirement set allows of a Provisioner view's types, per local type: whether its
/// labels and one of its offerings meet the requirements, and the price of its cheapest
/// offering that does (whatever its labels).
pub(crate) type Offers = Arc<Vec<(bool, Option<f64>)>>;

/// Kept between the simulations of one plan ([`super::Options::memo`]). It is valid only
/// while the catalog and the Provisioners stay as they were: its keys are topology keys and
/// Provisioner names, so a caller makes a new one for each plan and never shares it between
/// catalogs.
#[derive(Debug, Default)]
pub struct Memo {
    values: Mutex<HashMap<(String, String), Values>>,
    frontiers: Mutex<HashMap<(String, Requirements), Frontier>>,
    views: Mutex<HashMap<String, Arc<ViewBase>>>,
    offers: Mutex<HashMap<(String, Requirements), Offers>>,
}

/// The value kept in `map` under `key`, or `compute`d and kept.
fn kept<K: std::hash::Hash + Eq, V: Clone>(
    map: &Mutex<HashMap<K, V>>,
    key: K,
    compute: impl FnOnce() -> V,
) -> V {
    let lock = || map.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(v) = lock().get(&key).cloned() {
        return v;
    }
    // Computed without the lock held: `compute` may ask the memo for something else.
    let v = compute();
    lock().insert(key, v.clone());
    v
}

impl Memo {
    /// The values of `key` for Provisioner `provisioner`: kept, or `compute`d and kept.
    pub(crate) fn values(
        &self,
        key: &str,
        provisioner: &str,
        compute: impl FnOnce() -> BTreeMap<String, Resources>,
    ) -> Values {
        kept(
            &self.values,
            (key.to_string(), provisioner.to_string()),
            || Arc::new(compute()),
        )
    }

    /// What Provisioner `provisioner`'s view holds of the catalog: kept, or `compute`d and
    /// kept.
    pub(crate) fn view(
        &self,
        provisioner: &str,
        compute: impl FnOnce() -> ViewBase,
    ) -> Arc<ViewBase> {
        kept(&self.views, provisioner.to_string(), || Arc::new(compute()))
    }

    /// Provisioner `provisioner`'s price frontier under `reqs` (its view's local type
    /// indices, cheapest first): kept, or `compute`d and kept.
    pub(crate) fn frontier(
        &self,
        provisioner: &str,
        reqs: &Requirements,
        compute: impl FnOnce() -> Vec<usize>,
    ) -> Frontier {
        kept(
            &self.frontiers,
            (provisioner.to_string(), reqs.clone()),
            || Arc::new(compute()),
        )
    }

    /// What `reqs` allow of Provisioner `provisioner`'s types ([`Offers`]): kept, or
    /// `compute`d and kept. Each simulation asked it of every type it tried, per requirement
    /// set, by a scan of each type's offerings.
    pub(crate) fn offers(
        &self,
        provisioner: &str,
        reqs: &Requirements,
        compute: impl FnOnce() -> Vec<(bool, Option<f64>)>,
    ) -> Offers {
        kept(
            &self.offers,
            (provisioner.to_string(), reqs.clone()),
            || Arc::new(compute()),
        )
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

    #[test]
    fn a_frontier_is_kept_per_provisioner_and_requirement_set() {
        let memo = Memo::default();
        let mut zonal = Requirements::new();
        zonal.add(
            crate::labels::ZONE,
            crate::requirements::Requirement::single("a"),
        );
        let mut computed = 0;
        let mut get = |prov: &str, reqs: &Requirements, f: Vec<usize>| {
            memo.frontier(prov, reqs, || {
                computed += 1;
                f
            })
        };
        assert_eq!(*get("default", &zonal, vec![3, 1]), vec![3, 1]);
        assert_eq!(*get("default", &zonal, vec![9]), vec![3, 1]);
        assert_eq!(*get("default", &Requirements::new(), vec![2]), vec![2]);
        assert_eq!(*get("gpu", &zonal, vec![0]), vec![0]);
        assert_eq!(computed, 3);
    }

    #[test]
    fn offers_are_kept_per_provisioner_and_requirement_set() {
        let memo = Memo::default();
        let mut spot = Requirements::new();
        spot.add(
            crate::labels::CAPACITY_TYPE,
            crate::requirements::Requirement::single("spot"),
        );
        let mut computed = 0;
        let mut get = |prov: &str, reqs: &Requirements, f: Vec<(bool, Option<f64>)>| {
            memo.offers(prov, reqs, || {
                computed += 1;
                f
            })
        };
        let first = vec![(true, Some(0.1)), (false, None)];
        assert_eq!(*get("default", &spot, first.clone()), first);
        assert_eq!(*get("default", &spot, vec![]), first);
        assert_eq!(*get("default", &Requirements::new(), vec![]), vec![]);
        assert_eq!(
            *get("gpu", &spot, vec![(false, Some(2.0))]),
            vec![(false, Some(2.0))]
        );
        assert_eq!(computed, 3);
    }
}
