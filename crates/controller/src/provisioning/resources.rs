//! Resource vectors to and from the quantity maps NodeClaims carry.
//!
//! NodeClaims store requests, capacity and allocatable as Kubernetes quantities (what people read
//! with `kubectl get -o yaml`); the simulation works in integer units. These two conversions are
//! the only place the two meet on the controller side.

use std::collections::BTreeMap;

use joiner_apis::convert::FieldError;
use joiner_core::quantity::{format_bytes, format_cpu};
use joiner_core::Resources;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// `resources` as quantities: cpu in cores or millicores, memory and ephemeral storage with a
/// binary suffix, counts as plain numbers. Zero entries are left out.
pub fn to_quantities(resources: &Resources) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    let mut put = |name: &str, value: String| {
        out.insert(name.to_string(), Quantity(value));
    };
    if resources.cpu != 0 {
        put("cpu", format_cpu(resources.cpu));
    }
    if resources.memory != 0 {
        put("memory", format_bytes(resources.memory));
    }
    if resources.ephemeral_storage != 0 {
        put(
            "ephemeral-storage",
            format_bytes(resources.ephemeral_storage),
        );
    }
    if resources.pods != 0 {
        put("pods", resources.pods.to_string());
    }
    for (name, v) in resources.extended() {
        put(name, v.to_string());
    }
    out
}

/// Parses a quantity map found at `field` (e.g. `status.allocatable`), naming the entry that
/// does not parse.
pub fn from_quantities(
    map: &BTreeMap<String, Quantity>,
    field: &str,
) -> Result<Resources, FieldError> {
    let mut r = Resources::default();
    for (name, q) in map {
        r.add_quantity(name, &q.0)
            .map_err(|e| FieldError::new(joiner_apis::map_field(field, name), e.to_string()))?;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_trip() {
        let mut r = Resources::new(1500, 3 << 30, 20 << 30, 29);
        r.set("nvidia.com/gpu", 1);
        let q = to_quantities(&r);
        assert_eq!(q["cpu"].0, "1500m");
        assert_eq!(q["memory"].0, "3Gi");
        assert_eq!(q["pods"].0, "29");
        assert_eq!(q["nvidia.com/gpu"].0, "1");
        assert_eq!(from_quantities(&q, "status.allocatable"), Ok(r));
    }

    #[test]
    fn a_bad_quantity_names_its_entry() {
        let mut map = BTreeMap::new();
        map.insert("cpu".to_string(), Quantity("lots".into()));
        let err = from_quantities(&map, "status.allocatable").expect_err("does not parse");
        assert!(err.field.starts_with("status.allocatable"), "{err}");
        assert!(err.field.contains("cpu"), "{err}");
    }
}
