//! `joiner bench`: scheduling throughput, memory and cost quality on synthetic workloads.
//!
//! Timings belong in benchmarks, not in tests: this command prints the figures recorded in
//! docs/benchmarks.md. Cost quality is reported against the configuration-LP lower bound, so a
//! reader sees how far a plan is from the fractional optimum, not just how fast it came.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use joiner_bench::config_lp::{configuration_bound, NodeType};
use joiner_bench::workload;
use joiner_core::scheduling::classes;
use joiner_core::scheduling::{simulate, Options};
use joiner_core::{CapacityType, Operator, Provisioner, Requirement, Resources, Snapshot};

use crate::error::CliError;

/// Arguments of `joiner bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Pending pod counts to run.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1000, 10000, 50000])]
    pods: Vec<usize>,
    /// Workload shape.
    #[arg(long, value_enum, default_value_t = Workload::Mixed)]
    workload: Workload,
    /// Runs per size; the median is reported.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Also compute the configuration-LP lower bound for sizes up to this many pods (slow).
    #[arg(long, default_value_t = 0)]
    bound_up_to: usize,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Region of the embedded catalog.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Instead of the simulation, measure the controller's memory with the first `--pods`
    /// count of pods and this many nodes fed through its reflector stores.
    #[arg(long)]
    stores: Option<usize>,

    /// Instead of the simulation, time the disruption planner on a running cluster: the
    /// workload launched, this share (percent) of its pods finished, a PodDisruptionBudget
    /// per app, consolidation on (the default policy, the default 10 % budget).
    #[arg(long, value_name = "FINISHED_PERCENT")]
    consolidate: Option<u64>,

    /// With `--consolidate`: launch the workload on types with at least this many vCPUs (the
    /// default Provisioner with `karpenter.k8s.aws/instance-cpu` greater than one less), so
    /// the cluster has fewer, larger nodes: 20,000 mixed pods on about 1,000 nodes at 16.
    #[arg(long, value_name = "VCPUS", requires = "consolidate")]
    node_cpus: Option<u32>,

    /// Instead of the simulation, time the interruption consumer on this many queue messages
    /// (a mix of foreign and own instances, malformed bodies, interruptions and rebalance
    /// recommendations of a 1,000-node cluster), in memory.
    #[arg(long, value_name = "MESSAGES")]
    interruption: Option<usize>,

    /// With `--interruption`: also send the messages to a new queue at this SQS endpoint
    /// (e.g. a moto server, `http://127.0.0.1:5000`) and time their consumption end to end.
    #[arg(long, value_name = "URL", requires = "interruption")]
    sqs_endpoint: Option<String>,

    /// Pods per Deployment of the `many` workload (50,000 pods at 10 are 5,000 workloads).
    #[arg(long, default_value_t = 10)]
    replicas: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    /// Many Deployments of 1–200 replicas with varied cpu:memory ratios.
    Mixed,
    /// Karpenter's benchmark mix (a fifth each: generic, zonal spread, hostname spread, zonal
    /// self-affinity, hostname anti-affinity).
    Karpenter,
    /// N mutually hostname-anti-affine pods: one per node, the worst case for pairwise checks.
    Antiaffine,
    /// Deployments of `--replicas` pods, each of its own shape: as many classes as workloads.
    Many,
}

/// `n` pending pods of the chosen workload.
fn pending(args: &BenchArgs, n: usize) -> Vec<joiner_core::Pod> {
    match args.workload {
        Workload::Mixed => workload::mixed_fleet(args.seed, n),
        Workload::Karpenter => workload::karpenter_mix(args.seed, n),
        Workload::Antiaffine => workload::mutually_anti_affine(args.seed, n),
        Workload::Many => workload::many_workloads(args.seed, n, args.replicas),
    }
}

/// Runs the benchmark and returns a Markdown table.
pub fn run(args: &BenchArgs) -> Result<String, CliError> {
    if args.repeat == 0 {
        return Err(CliError::Usage("--repeat must be at least 1".into()));
    }
    if let Some(messages) = args.interruption {
        return crate::bench_interruption::run(
            messages,
            args.sqs_endpoint.as_deref(),
            &args.region,
        );
    }
    if let Some(nodes) = args.stores {
        let pods = args.pods.first().copied().unwrap_or(20_000);
        return crate::bench_stores::run(pods, nodes, &args.region);
    }
    let catalog = joiner_aws::embedded::cached(&args.region)?;
    let types = &catalog.instance_types;
    if let Some(finished) = args.consolidate {
        let mut provisioner = Provisioner::default_provisioner();
        if let Some(cpus) = args.node_cpus {
            let more_than = cpus.saturating_sub(1).to_string();
            let at_least = Requirement::new(Operator::Gt, &[more_than])
                .map_err(|e| CliError::Usage(format!("--node-cpus {cpus}: {e}")))?;
            provisioner
                .requirements
                .add(joiner_aws::labels::INSTANCE_CPU, at_least);
        }
        return Ok(crate::bench_disruption::run(
            &args.pods,
            args.repeat,
            finished,
            types,
            &provisioner,
            &|n| pending(args, n),
        ));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| workload | pods | classes | nodes | $/h | median ms | pods/s | peak RSS MiB | config-LP bound $/h | gap |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &args.pods {
        let pods = pending(args, n);
        let snapshot = Snapshot {
            pods,
            ..Snapshot::default()
        };
        let mut times: Vec<Duration> = Vec::new();
        let mut plan = None;
        for _ in 0..args.repeat {
            let t0 = Instant::now();
            let p = simulate(&snapshot, types, &Options::default());
            times.push(t0.elapsed());
            plan = Some(p);
        }
        times.sort();
        let median = times[times.len() / 2];
        let Some(plan) = plan else { continue };
        let all: Vec<usize> = (0..snapshot.pods.len()).collect();
        let cls = classes::build(&snapshot.pods, &all);
        let cost = plan.new_price_per_hour();
        let (bound, gap) = if n <= args.bound_up_to {
            let demand: Vec<(Resources, i64)> = cls
                .iter()
                .map(|c| (c.requests.clone(), c.pods.len() as i64))
                .collect();
            let node_types: Vec<NodeType> = types
                .iter()
                .filter(|t| {
                    !t.is_accelerated()
                        && t.labels.get(joiner_core::labels::OS).map(String::as_str)
                            == Some("linux")
                })
                .filter_map(|t| {
                    t.offerings
                        .iter()
                        .filter(|o| o.capacity_type == CapacityType::OnDemand && o.available)
                        .map(|o| o.price)
                        .reduce(f64::min)
                        .map(|price| NodeType {
                            capacity: t.allocatable.clone(),
                            price,
                        })
                })
                .collect();
            let b = configuration_bound(&demand, &node_types);
            (
                format!("{:.2} (master {:.2})", b.lower, b.master),
                format!("{:+.1} %", (cost / b.lower - 1.0) * 100.0),
            )
        } else {
            ("–".to_string(), "–".to_string())
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} | {:.1} | {:.0} | {} | {} | {} |",
            match args.workload {
                Workload::Mixed => "mixed",
                Workload::Karpenter => "karpenter-mix",
                Workload::Antiaffine => "anti-affine",
                Workload::Many => "many-workloads",
            },
            n,
            cls.len(),
            plan.new_nodes.len(),
            cost,
            median.as_secs_f64() * 1000.0,
            n as f64 / median.as_secs_f64().max(1e-9),
            peak_rss_mib().map_or("?".to_string(), |m| format!("{m:.0}")),
            bound,
            gap
        );
    }
    Ok(out)
}

/// Peak resident memory of this process so far (VmHWM), on Linux.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
