//! The benchmark workloads are real workloads: the simulation places them without breaking
//! any hard constraint (checked on the core's test catalog, zones z-a, z-b, z-c).

use joiner_core::scheduling::{simulate, Options};
use joiner_core::testing::catalog::catalog;
use joiner_core::testing::plan_check::check;
use joiner_core::Snapshot;

#[test]
fn karpenter_mix_placement_satisfies_every_hard_constraint() {
    // The benchmark workload itself, on the hand-made catalog (zones z-a, z-b, z-c).
    let s = Snapshot {
        pods: joiner_bench::workload::karpenter_mix(7, 600),
        ..Snapshot::default()
    };
    let plan = simulate(&s, &catalog(), &Options::default());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    if let Err(e) = check(&s, &catalog(), &plan) {
        panic!("{e}");
    }
    let mutual = joiner_bench::workload::mutually_anti_affine(3, 300);
    let s = Snapshot {
        pods: mutual,
        ..Snapshot::default()
    };
    let plan = simulate(&s, &catalog(), &Options::default());
    assert_eq!(
        plan.new_nodes.len(),
        300,
        "one node per mutually anti-affine pod"
    );
    if let Err(e) = check(&s, &catalog(), &plan) {
        panic!("{e}");
    }
}
