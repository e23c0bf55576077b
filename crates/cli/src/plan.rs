//! `joiner plan`: manifests in, the nodes joiner would launch out.

use joiner_core::scheduling::{simulate, Options};

use crate::error::CliError;
use crate::output::{self, Report};
use crate::{manifest, Format, PlanArgs};

/// Loads the manifests, simulates against the region's embedded catalog and renders the plan.
pub fn run(args: &PlanArgs) -> Result<String, CliError> {
    let loaded = manifest::load(&args.files)?;
    let catalog = joiner_aws::embedded::cached(&args.region)?;
    let plan = simulate(
        &loaded.snapshot,
        &catalog.instance_types,
        &Options::default(),
    );
    let mut warnings = loaded.warnings;
    let constrained = loaded
        .snapshot
        .pods
        .iter()
        .filter(|p| p.node_name.is_none())
        .filter(|p| {
            !p.topology_spread.is_empty() || !p.affinity.is_empty() || !p.host_ports.is_empty()
        })
        .count();
    if constrained > 0 {
        // Say so rather than plan silently as if they were unconstrained.
        warnings.push(format!(
            "{constrained} pending pod(s) use topology spread, pod (anti-)affinity or host ports; \
             this version of the simulation does not honor those yet, so their placement may differ"
        ));
    }
    if catalog.prices_estimated {
        warnings.push(format!(
            "no embedded price table for {}: prices are the us-east-1 on-demand prices (estimated)",
            args.region
        ));
    }
    let report = Report {
        region: &args.region,
        plan: &plan,
        warnings: &warnings,
    };
    Ok(match args.output {
        Format::Table => output::table(&report),
        Format::Json => {
            let mut s = output::json(&report);
            s.push('\n');
            s
        }
    })
}
