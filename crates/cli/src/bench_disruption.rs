//! `joiner bench --consolidate PCT`: the disruption planner's time for the controller's
//! bounded pass, to its first decision and to its whole plan on running clusters (a workload
//! launched, a share of its pods finished, a PodDisruptionBudget per app).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use joiner_bench::cluster::running;
use joiner_controller::disruption::decide::EVALUATIONS_PER_PASS;
use joiner_core::disruption::{plan, DisruptionSettings, Input};
use joiner_core::scheduling::Options;
use joiner_core::{InstanceType, Pod, Provisioner};

/// Builds each cluster with `provisioner`, times the planner `repeat` times (median) and
/// returns a Markdown table.
pub fn run(
    sizes: &[usize],
    repeat: usize,
    finished_percent: u64,
    types: &[InstanceType],
    provisioner: &Provisioner,
    pending: &dyn Fn(usize) -> Vec<Pod>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| pods launched | pods running | nodes | decisions | nodes removed | $/h before | $/h after | controller pass ms | first decision ms | whole plan ms |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let settings = DisruptionSettings {
        consolidation: true,
        ..DisruptionSettings::default()
    };
    let settings_of = |_: &str| Some(settings.clone());
    for &n in sizes {
        let cluster = running(pending(n), types, provisioner.clone(), 7, finished_percent);
        // The controller's pass (one decision at most, a bounded number of simulations), the
        // first decision however many simulations it takes, and the dry run's whole plan.
        let mut pass: Vec<Duration> = Vec::new();
        let mut first: Vec<Duration> = Vec::new();
        let mut whole: Vec<Duration> = Vec::new();
        let mut last = None;
        let bound = Some(EVALUATIONS_PER_PASS);
        for _ in 0..repeat.max(1) {
            for (limit, evaluations, times) in [
                (Some(1), bound, &mut pass),
                (Some(1), None, &mut first),
                (None, None, &mut whole),
            ] {
                let t0 = Instant::now();
                let p = plan(&Input {
                    snapshot: &cluster,
                    catalog: types,
                    opts: &Options::default(),
                    settings: &settings_of,
                    cloud_drift: &|_| None,
                    disrupting: &BTreeSet::new(),
                    now: 86_400,
                    max_decisions: limit,
                    max_evaluations: evaluations,
                    start_at: 0,
                });
                times.push(t0.elapsed());
                last = Some(p);
            }
        }
        let median = |times: &mut Vec<Duration>| {
            times.sort();
            times[times.len() / 2].as_secs_f64() * 1e3
        };
        let Some(p) = last else { continue };
        let _ = writeln!(
            out,
            "| {n} | {} | {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} |",
            cluster.pods.len(),
            cluster.nodes.len(),
            p.decisions.len(),
            p.decisions.iter().map(|d| d.nodes.len()).sum::<usize>(),
            p.price_before,
            p.price_after,
            median(&mut pass),
            median(&mut first),
            median(&mut whole),
        );
    }
    out
}
