//! Criterion benchmark of the scheduling simulation on the full embedded us-east-1 catalog:
//! mixed fleets of many Deployments, 1k / 10k / 50k pending pods. Figures go to
//! docs/benchmarks.md; tests never assert timings.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use joiner_bench::workload;
use joiner_core::scheduling::{simulate, Options};
use joiner_core::Snapshot;

fn bench_simulate(c: &mut Criterion) {
    let Ok(catalog) = joiner_aws::embedded::cached("us-east-1") else {
        return;
    };
    let mut group = c.benchmark_group("simulate/mixed");
    group.sample_size(10);
    for pods in [1_000usize, 10_000, 50_000] {
        let snapshot = Snapshot {
            pods: workload::mixed_fleet(42, pods),
            ..Snapshot::default()
        };
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_with_input(BenchmarkId::from_parameter(pods), &snapshot, |b, s| {
            b.iter(|| simulate(s, &catalog.instance_types, &Options::default()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_simulate);
criterion_main!(benches);
