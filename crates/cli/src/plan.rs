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
