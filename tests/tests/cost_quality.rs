//! Cost quality of the packer against the configuration-LP lower bound, on the real embedded
//! catalog: plans must never beat a valid lower bound (that would be a bug in the bound or in
//! the cost bookkeeping) and, on mixed fleets, stay within 10 % of it.

use joiner_bench::config_lp::{configuration_bound, NodeType};
use joiner_bench::workload;
use joiner_core::scheduling::classes;
use joiner_core::scheduling::{simulate, Options};
use joiner_core::{CapacityType, InstanceType, Resources, Snapshot};

/// General-purpose families of three generations, as a typical provisioner allows; keeps the
/// bound fast enough for a debug build.
fn catalog() -> Vec<InstanceType> {
    let all = &joiner_aws::embedded::cached("us-east-1")
        .expect("embedded us-east-1")
        .instance_types;
    all.iter()
        .filter(|t| {
            t.labels
                .get(joiner_aws::labels::INSTANCE_FAMILY)
                .is_some_and(|f| ["c5", "m5", "r5", "c6i", "m6i", "r6i"].contains(&f.as_str()))
        })
        .cloned()
        .collect()
}

fn node_types(cat: &[InstanceType]) -> Vec<NodeType> {
    cat.iter()
        .filter_map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::OnDemand)
                .map(|o| o.price)
                .reduce(f64::min)
                .map(|price| NodeType {
                    capacity: t.allocatable.clone(),
                    price,
                })
        })
        .collect()
}

fn gap(seed: u64, pods: usize) -> (f64, f64) {
    let cat = catalog();
    let snapshot = Snapshot {
        pods: workload::mixed_fleet(seed, pods),
        ..Snapshot::default()
    };
    let plan = simulate(&snapshot, &cat, &Options::default());
    assert!(
        plan.unschedulable.is_empty(),
        "{:?}",
        plan.unschedulable.first()
    );
    let all: Vec<usize> = (0..snapshot.pods.len()).collect();
    let demand: Vec<(Resources, i64)> = classes::build(&snapshot.pods, &all)
        .iter()
        .map(|c| (c.requests.clone(), c.pods.len() as i64))
        .collect();
    let bound = configuration_bound(&demand, &node_types(&cat));
    (plan.new_price_per_hour(), bound.lower)
}

#[test]
fn mixed_fleets_are_within_ten_percent_of_the_configuration_lp() {
    for (seed, pods) in [(11, 300), (12, 600)] {
        let (cost, lower) = gap(seed, pods);
        assert!(
            cost >= lower * (1.0 - 1e-9),
            "seed {seed}: plan {cost} below the lower bound {lower}"
        );
        assert!(
            cost <= lower * 1.10,
            "seed {seed}: plan {cost:.3} is {:.1} % above the bound {lower:.3}",
            (cost / lower - 1.0) * 100.0
        );
    }
}
