//! `joiner launch-template render`: the launch template and decoded user data joiner would use
//! for one NodeTemplate, Provisioner and instance type.
//!
//! A node that does not join is usually a user-data problem (a wrong endpoint, a label the
//! kubelet refuses, a user script that fails first); this shows exactly what the instance
//! would receive, offline. The AMI is the only fact it cannot know without AWS: without
//! `--ami-id` it prints the SSM parameter the launcher will read, and leaves the template name
//! (a hash that includes the AMI) out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use joiner_apis::{AmiFamily, NodeTemplate, Provisioner, API_VERSION};
use joiner_aws::allocatable::Arch;
use joiner_aws::ami::{ssm_parameter_path, AmiResolver, AmiVariant, DEFAULT_SSM_PREFIX};
use joiner_aws::clock;
use joiner_aws::launch_template::{
    build, InstanceFacts, LaunchContext, LaunchTemplateError, ResolvedLaunchTemplate,
};
use joiner_aws::userdata::{ClusterInfo, UserDataError, MAX_USER_DATA_BYTES};
use serde::de::DeserializeOwned;

use crate::error::CliError;

/// `joiner launch-template ...`.
#[derive(clap::Args)]
pub struct LaunchTemplateArgs {
    #[command(subcommand)]
    command: LaunchTemplateCommand,
}

#[derive(clap::Subcommand)]
enum LaunchTemplateCommand {
    /// Prints the launch-template settings and the decoded user data joiner would send, for
    /// debugging a node that does not join. Needs no AWS access.
    Render(Box<RenderArgs>),
}

/// Arguments of `joiner launch-template render`.
#[derive(clap::Args)]
pub struct RenderArgs {
    /// YAML file holding the NodeTemplate (joiner.sh/v1alpha1).
    #[arg(long = "nodetemplate")]
    node_template: PathBuf,
    /// YAML file holding the Provisioner (joiner.sh/v1alpha1).
    #[arg(long)]
    provisioner: PathBuf,
    /// Instance type, looked up in the embedded catalog for vCPUs, architecture and max-pods.
    #[arg(long)]
    instance_type: String,
    /// EKS cluster name.
    #[arg(long)]
    cluster_name: String,
    /// API server URL.
    #[arg(long)]
    cluster_endpoint: String,
    /// Cluster CA bundle, base64 (as `aws eks describe-cluster` prints it).
    #[arg(long)]
    cluster_ca_bundle: String,
    /// Service CIDR (required for AL2023: nodeadm's spec.cluster.cidr).
    #[arg(long)]
    service_cidr: Option<String>,
    /// Cluster DNS address, when the Provisioner's kubeletConfiguration sets none.
    #[arg(long)]
    cluster_dns: Option<String>,
    /// AMI ID; without it the SSM parameter the launcher resolves is printed instead.
    #[arg(long)]
    ami_id: Option<String>,
    /// Look the AMI up in AWS (SSM parameter, or the NodeTemplate's amiSelector) instead of
    /// printing where it would come from; uses the standard AWS credential chain.
    #[arg(long, conflicts_with = "ami_id")]
    resolve_ami: bool,
    /// Region for `--resolve-ami` (else AWS_REGION / the profile).
    #[arg(long, requires = "resolve_ami")]
    region: Option<String>,
    /// Kubernetes minor version (e.g. 1.31), for the SSM parameter path.
    #[arg(long)]
    kubernetes_version: Option<String>,
    /// Prefix of the public AMI parameters in SSM.
    #[arg(long, default_value = DEFAULT_SSM_PREFIX)]
    ssm_prefix: String,
    /// Security group ID (repeatable); at launch they come from the securityGroupSelector.
    #[arg(long = "security-group-id")]
    security_group_ids: Vec<String>,
    /// Render the warm-pool variant (does not join on the first boot), for the state the
    /// Provisioner's spec.warmPool.state names (Stopped when unset).
    #[arg(long)]
    warm_pool: bool,
    /// For a type missing from the embedded catalog: its ENI count...
    #[arg(long, requires_all = ["ipv4_per_eni", "vcpus"])]
    enis: Option<u32>,
    /// ...its IPv4 addresses per ENI...
    #[arg(long, requires = "enis")]
    ipv4_per_eni: Option<u32>,
    /// ...its vCPUs...
    #[arg(long, requires = "enis")]
    vcpus: Option<u32>,
    /// ...and its architecture (amd64 or arm64).
    #[arg(long, default_value = "amd64", requires = "enis")]
    arch: String,
}

/// Runs `joiner launch-template <command>`.
pub fn run(args: &LaunchTemplateArgs) -> Result<String, CliError> {
    match &args.command {
        LaunchTemplateCommand::Render(r) => render(r),
    }
}

fn render(args: &RenderArgs) -> Result<String, CliError> {
    let node_template: NodeTemplate = read_object(&args.node_template, "NodeTemplate")?;
    node_template
        .validate()
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.node_template.display())))?;
    let provisioner: Provisioner = read_object(&args.provisioner, "Provisioner")?;
    provisioner
        .to_core()
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.provisioner.display())))?;
    let instance = instance_facts(args)?;
    let image_id = match (&args.ami_id, args.resolve_ami) {
        (Some(id), _) => Some(id.clone()),
        (None, true) => Some(lookup_ami(args, &node_template, &instance)?),
        (None, false) => None,
    };
    let cluster = ClusterInfo {
        name: args.cluster_name.clone(),
        endpoint: args.cluster_endpoint.clone(),
        ca_bundle: args.cluster_ca_bundle.clone(),
        service_cidr: args.service_cidr.clone(),
        dns_ip: args.cluster_dns.clone(),
    };
    let resolved = build(&LaunchContext {
        cluster: &cluster,
        node_template: &node_template,
        provisioner: &provisioner,
        instance: &instance,
        image_id: image_id.as_deref().unwrap_or_default(),
        security_group_ids: &args.security_group_ids,
        default_instance_profile: None,
        warm_pool: args.warm_pool.then(|| {
            provisioner
                .spec
                .warm_pool
                .as_ref()
                .map(joiner_apis::WarmPool::warm_state)
                .unwrap_or_default()
        }),
    })
    .map_err(|e| {
        let hint = match &e {
            LaunchTemplateError::UserData(UserDataError::MissingServiceCidr { .. }) => {
                "; pass --service-cidr"
            }
            _ => "",
        };
        CliError::Usage(format!("{e}{hint}"))
    })?;
    let ami = match &image_id {
        Some(id) => id.clone(),
        None => ami_source(args, node_template.ami_family(), &instance),
    };
    Ok(report(
        &node_template,
        &instance,
        &ami,
        image_id.is_some(),
        &resolved,
    ))
}

/// The AMI the launcher would use, read from AWS: the amiSelector's newest image for the
/// instance's architecture, else the family's SSM parameter for `--kubernetes-version`.
fn lookup_ami(
    args: &RenderArgs,
    nt: &NodeTemplate,
    instance: &InstanceFacts,
) -> Result<String, CliError> {
    let name = nt.metadata.name.clone().unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let clients = joiner_aws::AwsClients::from_env(args.region.as_deref()).await?;
        let resolver = AmiResolver::with_clock(&clients, &args.ssm_prefix, clock::system());
        if !nt.spec.ami_selector.is_empty() {
            let amis = resolver
                .resolve_selector(&name, &nt.spec.ami_selector)
                .await?;
            return amis
                .into_iter()
                .find(|a| a.arch == Some(instance.arch))
                .map(|a| a.id)
                .ok_or_else(|| {
                    CliError::Usage(format!(
                        "NodeTemplate {name}: spec.amiSelector matches no {} image",
                        instance.arch.as_str()
                    ))
                });
        }
        let version = args.kubernetes_version.as_deref().ok_or_else(|| {
            CliError::Usage("--resolve-ami needs --kubernetes-version (e.g. 1.31)".to_string())
        })?;
        let ami = resolver
            .resolve_default(nt.ami_family(), version, instance.arch, instance.variant)
            .await?;
        Ok(ami.id)
    })
}

/// Where the AMI comes from when `--ami-id` is not given.
fn ami_source(args: &RenderArgs, family: AmiFamily, instance: &InstanceFacts) -> String {
    let version = args
        .kubernetes_version
        .as_deref()
        .unwrap_or("<kubernetes-version>");
    match ssm_parameter_path(
        &args.ssm_prefix,
        family,
        version,
        instance.arch,
        instance.variant,
    ) {
        Ok(path) => format!("<resolved at launch from SSM parameter {path}>"),
        Err(e) => format!("<resolved at launch from spec.amiSelector: {e}>"),
    }
}

fn instance_facts(args: &RenderArgs) -> Result<InstanceFacts, CliError> {
    if let (Some(enis), Some(ipv4), Some(vcpus)) = (args.enis, args.ipv4_per_eni, args.vcpus) {
        let arch = Arch::parse(&args.arch).ok_or_else(|| {
            CliError::Usage(format!("--arch: {:?} is not amd64 or arm64", args.arch))
        })?;
        return Ok(InstanceFacts::from_eni_limits(
            &args.instance_type,
            vcpus,
            arch,
            AmiVariant::Standard,
            enis,
            ipv4,
        ));
    }
    for region in joiner_aws::embedded::regions() {
        let catalog = joiner_aws::embedded::cached(region)?;
        if let Some(it) = catalog
            .instance_types
            .iter()
            .find(|t| t.name == args.instance_type)
        {
            return InstanceFacts::from_catalog(it).ok_or_else(|| {
                CliError::Usage(format!(
                    "--instance-type: the embedded catalog entry of {} lacks vCPU or architecture labels",
                    args.instance_type
                ))
            });
        }
    }
    Err(CliError::Usage(format!(
        "--instance-type: {} is not in the embedded catalog; give its network limits with --enis, --ipv4-per-eni and --vcpus (and --arch arm64 for Graviton)",
        args.instance_type
    )))
}

/// Reads the one `kind` object (joiner.sh/v1alpha1) of a YAML file.
fn read_object<T: DeserializeOwned>(path: &Path, kind: &str) -> Result<T, CliError> {
    let file = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{file}: cannot read: {e}")))?;
    let mut found: Vec<(usize, serde_yaml::Value)> = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = <serde_yaml::Value as serde::Deserialize>::deserialize(doc).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
                .unwrap_or_default();
            CliError::Usage(format!(
                "{file}: document {}: malformed YAML{at}: {e}",
                i + 1
            ))
        })?;
        if value.get("kind").and_then(|k| k.as_str()) == Some(kind) {
            let api = value
                .get("apiVersion")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            if api != API_VERSION {
                return Err(CliError::Usage(format!(
                    "{file}: document {}: apiVersion: {kind} must be {API_VERSION}, not {api:?} (convert Karpenter manifests with joiner import-karpenter)",
                    i + 1
                )));
            }
            found.push((i + 1, value));
        }
    }
    let mut found = found.into_iter();
    let Some((document, value)) = found.next() else {
        return Err(CliError::Usage(format!(
            "{file}: no {kind} ({API_VERSION}) found"
        )));
    };
    if found.next().is_some() {
        return Err(CliError::Usage(format!(
            "{file}: more than one {kind}; give a file with exactly one"
        )));
    }
    let name = value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_string();
    serde_path_to_error::deserialize(value).map_err(|e| {
        CliError::Usage(format!(
            "{file}: document {document} ({kind} {name}): {}: {}",
            e.path(),
            e.inner()
        ))
    })
}

fn report(
    nt: &NodeTemplate,
    instance: &InstanceFacts,
    ami: &str,
    ami_known: bool,
    lt: &ResolvedLaunchTemplate,
) -> String {
    let s = &lt.spec;
    let mut out = String::new();
    let name = if ami_known {
        s.name()
    } else {
        "<depends on the AMI; pass --ami-id to compute it>".to_string()
    };
    let m = &s.metadata_options;
    let _ = writeln!(out, "launch template:");
    let _ = writeln!(out, "  name: {name}");
    let _ = writeln!(out, "  ami: {ami}");
    let _ = writeln!(out, "  ami family: {}", nt.ami_family().as_str());
    let _ = writeln!(
        out,
        "  instance type: {} ({} vCPU, {})",
        instance.name,
        instance.vcpus,
        instance.arch.as_str()
    );
    let _ = writeln!(
        out,
        "  max-pods: {} (ENI limit {}{})",
        s.max_pods,
        instance.eni_max_pods,
        if s.max_pods == instance.eni_max_pods {
            ""
        } else {
            ", overridden by the Provisioner's kubeletConfiguration"
        }
    );
    let _ = writeln!(
        out,
        "  instance profile: {}",
        s.instance_profile
            .as_deref()
            .unwrap_or("<the controller's default>")
    );
    let sgs = if s.security_group_ids.is_empty() {
        "<from spec.securityGroupSelector at launch>".to_string()
    } else {
        s.security_group_ids.join(", ")
    };
    let _ = writeln!(out, "  security groups: {sgs}");
    let _ = writeln!(
        out,
        "  metadata options: httpEndpoint={} httpProtocolIPv6={} httpPutResponseHopLimit={} httpTokens={} instanceMetadataTags={}",
        m.http_endpoint, m.http_protocol_ipv6, m.http_put_response_hop_limit, m.http_tokens, m.instance_metadata_tags
    );
    let _ = writeln!(out, "  block devices:");
    for d in &s.block_device_mappings {
        let mut desc: Vec<String> = Vec::new();
        desc.extend(d.volume_size_gib.map(|g| format!("{g} GiB")));
        desc.extend(d.volume_type.clone());
        desc.extend(d.iops.map(|i| format!("iops={i}")));
        desc.extend(d.throughput.map(|t| format!("throughput={t}MiB/s")));
        desc.extend(
            d.encrypted
                .map(|e| if e { "encrypted" } else { "unencrypted" }.to_string()),
        );
        desc.extend(d.kms_key_id.as_ref().map(|k| format!("kms={k}")));
        desc.extend(d.snapshot_id.as_ref().map(|k| format!("snapshot={k}")));
        if d.delete_on_termination == Some(true) {
            desc.push("delete-on-termination".to_string());
        }
        let _ = writeln!(out, "    {}: {}", d.device_name, desc.join(" "));
    }
    let _ = writeln!(out, "  detailed monitoring: {}", s.detailed_monitoring);
    let _ = writeln!(out, "  warm pool: {}", s.warm_pool);
    let _ = writeln!(out, "  tags:");
    for (k, v) in &s.tags {
        let _ = writeln!(out, "    {k}: {v}");
    }
    let _ = writeln!(
        out,
        "  user data: {} bytes base64-encoded (EC2 limit {MAX_USER_DATA_BYTES})",
        s.user_data.len()
    );
    let _ = writeln!(out, "\n--- user data (decoded) ---");
    out.push_str(&lt.user_data.decoded);
    if !lt.user_data.decoded.ends_with('\n') {
        out.push('\n');
    }
    out
}
