//! `joiner plan`: manifests in, the nodes joiner would launch out.

use joiner_core::scheduling::explain::{explain, Explanation};
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
    let unsupported = joiner_core::scheduling::topology::unsupported_terms(&loaded.snapshot.pods);
    if unsupported > 0 {
        // Say so rather than plan silently as if they were unconstrained.
        warnings.push(format!(
            "{unsupported} pending pod(s) use topology keys other than {}, {} and {}; \
             the simulation does not honor those, so their placement may differ",
            joiner_core::labels::ZONE,
            joiner_core::labels::HOSTNAME,
            joiner_core::labels::CAPACITY_TYPE,
        ));
    }
    if catalog.prices_estimated {
        warnings.push(format!(
            "no embedded price table for {}: prices are the us-east-1 on-demand prices (estimated)",
            args.region
        ));
    }
    let mut explanations: Vec<Explanation> = Vec::new();
    for key in &args.explain {
        let e =
            explain(&loaded.snapshot, &catalog.instance_types, &plan, key).ok_or_else(|| {
                CliError::Usage(format!(
                    "--explain {key}: no pod {key} in the manifests (expected namespace/name)"
                ))
            })?;
        explanations.push(e);
    }
    let report = Report {
        region: &args.region,
        plan: &plan,
        warnings: &warnings,
        explanations: &explanations,
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
