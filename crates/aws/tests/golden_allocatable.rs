//! Every row of Karpenter's published allocatable table must come out of the model exactly.
//! The table is read here independently of `build.rs`, so a bug in the generated catalog
//! cannot hide a bug in the model (or the other way round).

use joiner_aws::allocatable::{node_resources, Arch, NodeShape};
use joiner_core::quantity::{parse_milli, parse_units};

const TABLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/karpenter-instance-types-allocatable-al2023.csv"
);

#[test]
fn every_golden_row_matches() {
    let text = std::fs::read_to_string(TABLE).expect("golden table readable");
    let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("column {name}"))
    };
    let (name_c, arch_c, cpu_c, mem_c) = (
        col("instance_type"),
        col("arch"),
        col("instance_cpu"),
        col("instance_memory"),
    );
    let (acpu_c, amem_c, aeph_c, apods_c) = (
        col("allocatable_cpu"),
        col("allocatable_memory"),
        col("allocatable_ephemeral_storage"),
        col("allocatable_pods"),
    );

    let mut rows = 0;
    let mut mismatches = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let c: Vec<&str> = line.split(',').collect();
        rows += 1;
        let arch = Arch::parse(c[arch_c]).expect("arch");
        let pods: u32 = c[apods_c].parse().expect("pods");
        let shape = NodeShape::new(
            c[cpu_c].parse().expect("cpu"),
            c[mem_c].parse().expect("memory"),
            arch,
            pods,
        );
        let got = node_resources(&shape).allocatable;
        let want = (
            parse_milli(c[acpu_c]).expect("allocatable cpu"),
            parse_units(c[amem_c]).expect("allocatable memory"),
            parse_units(c[aeph_c]).expect("allocatable ephemeral storage"),
            i64::from(pods),
        );
        let have = (got.cpu, got.memory, got.ephemeral_storage, got.pods);
        if have != want {
            mismatches.push(format!(
                "{}: want cpu={}m mem={}Mi eph={} pods={}, got cpu={}m mem={}Mi (+{}B) eph={} pods={}",
                c[name_c],
                want.0,
                want.1 >> 20,
                want.2,
                want.3,
                have.0,
                have.1 >> 20,
                have.1 & ((1 << 20) - 1),
                have.2,
                have.3
            ));
        }
    }
    assert_eq!(rows, 1363, "golden table row count");
    assert!(
        mismatches.is_empty(),
        "{} of {rows} rows differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
