//! Behaviour of the embedded catalog, checked against facts in the data tables.

use joiner_aws::embedded::{cached, catalog, regions};
use joiner_aws::labels;
use joiner_aws::CatalogError;
use joiner_core::{CapacityType, InstanceType};

fn find<'a>(types: &'a [InstanceType], name: &str) -> &'a InstanceType {
    types
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn regions_are_the_three_embedded_ones() {
    assert_eq!(regions(), &["eu-west-1", "us-east-1", "us-west-2"]);
    for r in regions() {
        let c = catalog(r).expect("embedded region");
        assert_eq!(c.region, *r);
        assert!(!c.instance_types.is_empty());
    }
}

#[test]
fn us_east_1_is_large_sorted_and_priced() {
    let c = catalog("us-east-1").expect("us-east-1");
    assert!(!c.prices_estimated);
    let with_offerings = c
        .instance_types
        .iter()
        .filter(|t| !t.offerings.is_empty())
        .count();
    assert!(
        with_offerings > 700,
        "only {with_offerings} types with offerings"
    );
    assert!(c.instance_types.windows(2).all(|w| w[0].name < w[1].name));
    for t in &c.instance_types {
        assert_eq!(t.labels.get(labels::INSTANCE_TYPE), Some(&t.name));
        assert_eq!(t.labels.get(labels::OS).map(String::as_str), Some("linux"));
        assert!(t.allocatable.fits(&t.capacity), "{}", t.name);
        for o in &t.offerings {
            assert!(o.available);
            assert!(o.zone.starts_with("us-east-1"));
            match o.capacity_type {
                CapacityType::OnDemand => assert!(!o.price_estimated, "{}", t.name),
                CapacityType::Spot => assert!(o.price_estimated, "{}", t.name),
            }
        }
    }
}

#[test]
fn m5_large_in_us_east_1() {
    let c = catalog("us-east-1").expect("us-east-1");
    let t = find(&c.instance_types, "m5.large");
    // The offerings table lists m5.large in us-east-1a, b, c, d and f (not e).
    let mut zones: Vec<&str> = t.offerings.iter().map(|o| o.zone.as_str()).collect();
    zones.dedup();
    assert_eq!(
        zones,
        [
            "us-east-1a",
            "us-east-1b",
            "us-east-1c",
            "us-east-1d",
            "us-east-1f"
        ]
    );
    assert_eq!(t.offerings.len(), 10);
    assert!(t.offerings.iter().all(|o| o.price == 0.096));
    assert_eq!(t.allocatable.cpu, 1930);
    assert_eq!(t.allocatable.memory, 6903 << 20);
    assert_eq!(t.allocatable.ephemeral_storage, 17 << 30);
    assert_eq!(t.allocatable.pods, 29);
    assert_eq!(t.capacity.cpu, 2000);
    assert_eq!(t.capacity.ephemeral_storage, 20 << 30);
    let l = |k: &str| t.labels.get(k).map(String::as_str);
    assert_eq!(l(labels::ARCH), Some("amd64"));
    assert_eq!(l(labels::INSTANCE_FAMILY), Some("m5"));
    assert_eq!(l(labels::INSTANCE_CATEGORY), Some("m"));
    assert_eq!(l(labels::INSTANCE_GENERATION), Some("5"));
    assert_eq!(l(labels::INSTANCE_SIZE), Some("large"));
    assert_eq!(l(labels::INSTANCE_CPU), Some("2"));
    assert_eq!(l(labels::INSTANCE_MEMORY), Some("8192"));
    assert_eq!(l(labels::INSTANCE_CPU_MANUFACTURER), Some("intel"));
    assert_eq!(l(labels::INSTANCE_HYPERVISOR), Some("nitro"));
    assert_eq!(l(labels::REGION), Some("us-east-1"));
    assert_eq!(
        l(labels::INSTANCE_GPU_NAME),
        None,
        "empty cells give no label"
    );
    assert_eq!(l(labels::INSTANCE_LOCAL_NVME), None);
    assert_eq!(t.capacity.get("vpc.amazonaws.com/pod-eni"), 9);
    assert!(!t.is_accelerated());
}

#[test]
fn arm64_types_get_arch_arm64() {
    let c = catalog("us-west-2").expect("us-west-2");
    for name in ["a1.medium", "m6g.large", "c7g.xlarge", "t4g.small"] {
        let t = find(&c.instance_types, name);
        assert_eq!(
            t.labels.get(labels::ARCH).map(String::as_str),
            Some("arm64")
        );
        assert_eq!(
            t.labels
                .get(labels::INSTANCE_CPU_MANUFACTURER)
                .map(String::as_str),
            Some("aws")
        );
    }
    let a1 = find(&c.instance_types, "a1.medium");
    assert_eq!(a1.allocatable.cpu, 940);
    assert_eq!(a1.allocatable.memory, 1392 << 20);
}

#[test]
fn gpu_and_accelerator_types() {
    let c = catalog("us-east-1").expect("us-east-1");
    let g = find(&c.instance_types, "g4dn.xlarge");
    assert_eq!(g.capacity.get("nvidia.com/gpu"), 1);
    assert_eq!(g.allocatable.get("nvidia.com/gpu"), 1);
    assert!(g.is_accelerated());
    let l = |t: &InstanceType, k: &str| t.labels.get(k).cloned();
    assert_eq!(l(g, labels::INSTANCE_GPU_NAME).as_deref(), Some("t4"));
    assert_eq!(l(g, labels::INSTANCE_GPU_COUNT).as_deref(), Some("1"));
    assert_eq!(
        l(g, labels::INSTANCE_GPU_MANUFACTURER).as_deref(),
        Some("nvidia")
    );
    assert!(l(g, labels::INSTANCE_GPU_MEMORY).is_some());

    let amd = find(&c.instance_types, "g4ad.xlarge");
    assert_eq!(amd.capacity.get("amd.com/gpu"), 1);
    assert_eq!(
        l(amd, labels::INSTANCE_GPU_MANUFACTURER).as_deref(),
        Some("amd")
    );

    let inf = find(&c.instance_types, "inf2.xlarge");
    assert_eq!(inf.capacity.get("aws.amazon.com/neuron"), 1);
    assert_eq!(inf.capacity.get("aws.amazon.com/neuroncore"), 2);
    assert!(inf.is_accelerated());

    let p5 = find(&c.instance_types, "p5.48xlarge");
    assert_eq!(p5.capacity.get("nvidia.com/gpu"), 8);
    assert_eq!(p5.capacity.get("vpc.amazonaws.com/efa"), 32);
}

#[test]
fn unknown_region_names_the_available_ones() {
    let err = catalog("mars-north-1").expect_err("unknown region");
    assert!(matches!(err, CatalogError::UnknownRegion { .. }));
    let msg = err.to_string();
    assert!(msg.contains("mars-north-1"), "{msg}");
    for r in regions() {
        assert!(msg.contains(r), "{msg}");
    }
}

#[test]
fn eu_west_1_prices_are_estimated() {
    let c = catalog("eu-west-1").expect("eu-west-1");
    assert!(c.prices_estimated);
    let priced: Vec<_> = c
        .instance_types
        .iter()
        .flat_map(|t| t.offerings.iter())
        .collect();
    assert!(!priced.is_empty());
    assert!(priced.iter().all(|o| o.price_estimated));
    assert!(priced.iter().all(|o| o.zone.starts_with("eu-west-1")));
    let m5 = find(&c.instance_types, "m5.large");
    assert_eq!(m5.offerings.len(), 6, "eu-west-1a, b, c × on-demand, spot");
}

#[test]
fn unpriced_types_stay_listed_without_offerings() {
    // hpc7a.96xlarge is offered in eu-west-1 but has no price in the (us-east-1) table.
    let c = catalog("eu-west-1").expect("eu-west-1");
    let t = find(&c.instance_types, "hpc7a.96xlarge");
    assert!(t.offerings.is_empty());
    assert!(t.allocatable.cpu > 0);
}

#[test]
fn types_missing_from_the_allocatable_table_are_left_out() {
    let c = catalog("us-east-1").expect("us-east-1");
    assert!(c.instance_types.iter().all(|t| t.name != "mac1.metal"));
}

#[test]
fn cached_catalog_is_built_once_and_equals_a_fresh_one() {
    let a = cached("us-west-2").expect("us-west-2");
    let b = cached("us-west-2").expect("us-west-2");
    assert!(std::ptr::eq(a, b));
    let fresh = catalog("us-west-2").expect("us-west-2");
    let names = |c: &joiner_aws::embedded::EmbeddedCatalog| {
        c.instance_types
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(a), names(&fresh));
    assert!(matches!(
        cached("mars-north-1"),
        Err(CatalogError::UnknownRegion { .. })
    ));
}
