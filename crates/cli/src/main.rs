//! `joiner`: the command-line entry point.
//!
//! `joiner plan` answers "what would joiner launch for this cluster, and why" from plain
//! manifests and the embedded catalog, with no AWS credentials and no cluster; `joiner bench`
//! measures the simulation on synthetic workloads; `joiner crds` prints the CRDs; `joiner
//! controller` runs in the cluster.

mod bench;
mod bench_disruption;
mod bench_interruption;
mod bench_stores;
mod claim_view;
mod consolidate;
mod controller;
mod crds;
mod error;
mod import;
mod manifest;
#[cfg(test)]
mod mutated_input_tests;
mod output;
mod plan;
mod reference;
mod render;
mod warm_pools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// A node autoscaler for Kubernetes on AWS.
#[derive(Parser)]
#[command(name = "joiner", version = env!("JOINER_VERSION"), about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the controller in the cluster: watches pods, launches and removes nodes.
    Controller(Box<controller::ControllerArgs>),
    /// Plans the nodes joiner would launch for the pending pods in some manifests.
    Plan(PlanArgs),
    /// Times the scheduling simulation on synthetic workloads against the embedded catalog.
    Bench(bench::BenchArgs),
    /// Prints (or writes) the CustomResourceDefinitions of joiner's resources.
    Crds(crds::CrdsArgs),
    /// Launch templates: `render` prints the settings and decoded user data joiner would use.
    LaunchTemplate(render::LaunchTemplateArgs),
    /// Converts Karpenter Provisioner/AWSNodeTemplate (v1alpha5) and NodePool/EC2NodeClass
    /// (v1beta1, v1) manifests into joiner's, noting every field without an equivalent.
    ImportKarpenter(import::ImportArgs),
    /// Prints the reference (every flag, CRD field, label, annotation and metric) as Markdown:
    /// docs/reference.md.
    Reference(reference::ReferenceArgs),
}

/// Arguments of `joiner plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Manifest file or folder (repeatable): Pods, workloads, Nodes, DaemonSets, Provisioners,
    /// NodeTemplates.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Region whose catalog (types, zones, prices) is used.
    #[arg(long, default_value = "us-east-1", env = "JOINER_REGION")]
    pub region: String,
    /// Explains one pod's placement (`namespace/name` of a pod, or of a workload for its first
    /// unschedulable, else first pending, pod; repeatable): per Provisioner, how many instance types each requirement,
    /// resource, taint, host port, limit or topology rule excluded, and where the pod goes.
    #[arg(long = "explain", value_name = "NAMESPACE/POD_OR_WORKLOAD")]
    pub explain: Vec<String>,
    /// Where instance types, zones and prices come from: the tables built into joiner, or the
    /// EC2 and Pricing APIs (standard AWS credential chain; `AWS_ENDPOINT_URL` honored), with
    /// the embedded data standing in for any API that fails.
    #[arg(long, value_enum, default_value_t = CatalogKind::Embedded)]
    pub catalog: CatalogKind,
    /// Plans disruption instead of provisioning: which of joiner's nodes would go now
    /// (expired, drifted, empty, consolidated), what would replace them, $/h before and after,
    /// and for every node that stays, why. Input: the cluster's nodes and pods as `kubectl get
    /// nodes,pods,pdb -A -o yaml` prints them, and the Provisioners.
    #[arg(long)]
    pub consolidate: bool,
    /// With `--consolidate`: plan as of this time (RFC 3339, e.g. 2026-12-03T09:00:00Z)
    /// instead of now; ages, empty times and budget windows are measured from it.
    #[arg(long, value_name = "TIME", requires = "consolidate")]
    pub at: Option<String>,
    /// With `--consolidate`: stop after this many decisions (the controller plans up to 10 a
    /// pass and starts each once validated; `--steps 1` shows the next).
    #[arg(long, value_name = "N", requires = "consolidate")]
    pub steps: Option<usize>,
}

/// Catalogs `joiner plan` can plan against.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CatalogKind {
    /// The catalog embedded at build time: no credentials needed.
    Embedded,
    /// The live catalog read from AWS.
    Aws,
}

/// Output formats of `joiner plan`.
#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// A JSON document for programs.
    Json,
    /// The table, with each new node's NodeClaim in more columns: labels, requirements,
    /// taints, startup taints and allocatable (`plan --consolidate` prints the table).
    Wide,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Controller(args) => return controller::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Crds(args) => crds::run(&args),
        Command::LaunchTemplate(args) => render::run(&args),
        Command::ImportKarpenter(args) => import::run(&args),
        Command::Reference(args) => reference::run(&args),
    };
    match result {
        Ok(text) => write_stdout(&text),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Writes the result; a reader that went away (`joiner plan | head`) ends the output quietly
/// instead of panicking as `print!` would.
fn write_stdout(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write the output: {e}");
            ExitCode::from(1)
        }
    }
}
