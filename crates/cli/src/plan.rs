//! `joiner plan`: manifests in, the nodes joiner would launch out.

use joiner_core::scheduling::explain::{explain, Explanation};
use joiner_core::scheduling::{simulate, Options};

use crate::error::CliError;
use crate::output::{self, Report};
use std::sync::Arc;

use joiner_core::{InstanceType, Provisioner};

use crate::{manifest, CatalogKind, Format, PlanArgs};

/// The catalog a plan was made on, and what to warn about it.
struct Loaded {
    types: Arc<Vec<InstanceType>>,
    warnings: Vec<String>,
}

fn embedded_catalog(region: &str) -> Result<Loaded, CliError> {
    let catalog = joiner_aws::embedded::cached(region)?;
    let mut warnings = Vec::new();
    if catalog.prices_estimated {
        warnings.push(format!(
            "no embedded price table for {region}: prices are the us-east-1 on-demand prices (estimated)"
        ));
    }
    Ok(Loaded {
        types: Arc::new(catalog.instance_types.clone()),
        warnings,
    })
}

/// Loads the live catalog once. The runtime exists only for this path, so `joiner plan` on
/// the embedded catalog starts no threads.
fn aws_catalog(region: &str) -> Result<Loaded, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let clients = joiner_aws::AwsClients::from_env(Some(region)).await?;
        let mut registry = prometheus_client::registry::Registry::default();
        let catalog = joiner_aws::LiveCatalog::new(
            &clients,
            joiner_aws::CatalogOptions::default(),
            &mut registry,
        );
        let types = catalog.refresh().await?;
        let status = catalog.status().await;
        let warnings: Vec<String> = status
            .fallbacks()
            .into_iter()
            .map(|(source, reason)| {
                format!(
                    "catalog: {source} unavailable from AWS ({reason}); using the embedded data"
                )
            })
            .collect();
        for w in &warnings {
            // People running the command see it even with `-o json` piped elsewhere.
            eprintln!("note: {w}");
        }
        Ok(Loaded { types, warnings })
    })
}

/// The Provisioner `joiner plan` uses when its input has none: the requirements of the
/// default NodePool in Karpenter's getting-started guide (linux, amd64, on-demand, instance
/// categories c, m and r of generation 3 or newer), which is what an EKS engineer expects
/// "no configuration" to launch — not every type in the catalog.
pub fn default_provisioner() -> Provisioner {
    use joiner_core::{labels, Requirement};
    let mut p = Provisioner::default_provisioner();
    let r = &mut p.requirements;
    r.add(labels::OS, Requirement::single("linux"));
    r.add(labels::ARCH, Requirement::single("amd64"));
    r.add(labels::CAPACITY_TYPE, Requirement::single("on-demand"));
    r.add(
        joiner_aws::labels::INSTANCE_CATEGORY,
        Requirement::one_of(["c", "m", "r"]),
    );
    // `Gt 2` is a valid expression; the test below shows it is in force.
    if let Ok(newer) = Requirement::new(joiner_core::Operator::Gt, &["2"]) {
        r.add(joiner_aws::labels::INSTANCE_GENERATION, newer);
    }
    p
}

/// The pod `--explain key` is about: the pod `namespace/name`, or else a pending pod of the
/// workload of that name (its controller, or for a Deployment one of its ReplicaSets,
/// `<name>-<hash>`): the first the plan leaves unschedulable, since that is the one the user
/// asks about, else the first. Pods of a workload share their constraints, but topology can
/// place some and refuse others.
fn pod_to_explain(
    pods: &[joiner_core::Pod],
    key: &str,
    unschedulable: &std::collections::HashSet<&str>,
) -> Option<String> {
    if pods.iter().any(|p| p.key() == key) {
        return Some(key.to_string());
    }
    let (namespace, name) = key.split_once('/')?;
    let replica_set_prefix = format!("{name}-");
    let mut pending = pods
        .iter()
        .filter(|p| p.namespace == namespace && p.node_name.is_none())
        .filter(|p| {
            p.owner.as_ref().is_some_and(|o| {
                o.name == name
                    || (o.kind == "ReplicaSet" && o.name.starts_with(&replica_set_prefix))
            })
        })
        .map(joiner_core::Pod::key)
        .peekable();
    let first = pending.peek().cloned();
    pending
        .find(|k| unschedulable.contains(k.as_str()))
        .or(first)
}

/// The NodeClaims of the input as the stores hold them.
fn arcs(claims: &[joiner_apis::NodeClaim]) -> Vec<Arc<joiner_apis::NodeClaim>> {
    claims.iter().cloned().map(Arc::new).collect()
}

/// The capacity NodeClaims of the input stand for, as the controller reads it (the one
/// function both call, `joiner_apis::cluster::claimed_capacity`): a claim whose Node has not registered becomes an
/// in-flight node, and a registered Node whose claim is not initialized yet is planned
/// without its startup and not-ready taints. Pods of an earlier batch are still pending and
/// will run there, so a plan from a dump taken during a scale-up does not buy them again.
/// Returns a warning per claim that could not be sized.
fn add_claimed_capacity(
    loaded: &mut manifest::Loaded,
    catalog: &[joiner_core::InstanceType],
) -> Vec<String> {
    if loaded.node_claims.is_empty() {
        return Vec::new();
    }
    let claims = arcs(&loaded.node_claims);
    joiner_apis::cluster::claimed_capacity(
        &mut loaded.snapshot,
        &loaded.kube_nodes,
        &claims,
        catalog,
        k8s_openapi::jiff::Timestamp::now(),
    )
}

/// Loads the manifests, simulates against the region's catalog and renders the plan.
pub fn run(args: &PlanArgs) -> Result<String, CliError> {
    let mut loaded = manifest::load(&args.files)?;
    let catalog = match args.catalog {
        CatalogKind::Embedded => embedded_catalog(&args.region)?,
        CatalogKind::Aws => aws_catalog(&args.region)?,
    };
    if loaded.snapshot.provisioners.is_empty() && loaded.skipped_provisioners > 0 {
        return Err(CliError::Usage(format!(
            "every Provisioner in the input is skipped ({}); joiner would launch nothing",
            loaded.warnings.join("; ")
        )));
    }
    if loaded.snapshot.provisioners.is_empty() {
        let default = default_provisioner();
        loaded.warnings.push(format!(
            "no Provisioner in the input: planned with Provisioner {:?} as Karpenter's \
             documented default NodePool ({})",
            default.name, default.requirements
        ));
        // Karpenter's default NodePool consolidates (WhenEmptyOrUnderutilized).
        loaded.disruption.insert(
            default.name.clone(),
            joiner_core::disruption::DisruptionSettings {
                consolidation: true,
                ..Default::default()
            },
        );
        loaded.snapshot.provisioners.push(default);
    }
    let claim_warnings = add_claimed_capacity(&mut loaded, &catalog.types);
    loaded.warnings.extend(claim_warnings);
    if args.consolidate {
        if !args.explain.is_empty() {
            return Err(CliError::Usage(
                "--explain is about provisioning; with --consolidate every node that stays \
                 already says why"
                    .into(),
            ));
        }
        // The input may hold some claims only, so a node without one here may have one.
        let claims = joiner_apis::cluster::disruption::disruption_inputs(
            &mut loaded.snapshot,
            &loaded.kube_nodes,
            &arcs(&loaded.node_claims),
            &joiner_apis::StaticObjects::new(
                loaded.provisioners.clone(),
                loaded.node_templates.clone(),
            ),
            joiner_apis::cluster::disruption::Claims::Some,
        );
        let mut warnings = loaded.warnings;
        warnings.extend(catalog.warnings);
        return crate::consolidate::run(&crate::consolidate::Request {
            region: &args.region,
            snapshot: &loaded.snapshot,
            settings: &loaded.disruption,
            claims: &claims,
            has_claims: !loaded.node_claims.is_empty(),
            catalog: &catalog.types,
            at: args.at.as_deref(),
            steps: args.steps,
            warnings: &warnings,
            format: args.output,
        });
    }
    let plan = simulate(&loaded.snapshot, &catalog.types, &Options::default());
    let mut warnings = loaded.warnings;
    warnings.extend(catalog.warnings);
    let mut explanations: Vec<Explanation> = Vec::new();
    let refused: std::collections::HashSet<&str> =
        plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    for key in &args.explain {
        let pod = pod_to_explain(&loaded.snapshot.pods, key, &refused).ok_or_else(|| {
            CliError::Usage(format!(
                "--explain {key}: no pod and no workload {key} in the manifests (expected \
                 namespace/name of a pod, Deployment, StatefulSet, ReplicaSet or Job)"
            ))
        })?;
        let e = explain(&loaded.snapshot, &catalog.types, &plan, &pod).ok_or_else(|| {
            CliError::Usage(format!("--explain {key}: no pod {pod} in the manifests"))
        })?;
        explanations.push(e);
    }
    let warm = crate::warm_pools::overlay(
        &plan,
        &loaded.provisioners,
        &loaded.node_templates,
        &loaded.node_claims,
        &catalog.types,
    );
    let claims: Vec<Option<crate::claim_view::ClaimView>> = plan
        .new_nodes
        .iter()
        .map(|n| {
            let prov = loaded
                .snapshot
                .provisioners
                .iter()
                .find(|p| p.name == n.provisioner)?;
            crate::claim_view::view(n, prov, &catalog.types)
        })
        .collect();
    let report = Report {
        region: &args.region,
        plan: &plan,
        warnings: &warnings,
        explanations: &explanations,
        warm: &warm,
        claims: &claims,
    };
    Ok(match args.output {
        Format::Table => output::table(&report, false),
        Format::Wide => output::table(&report, true),
        Format::Json => {
            let mut s = output::json(&report);
            s.push('\n');
            s
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_name_stands_for_its_first_pending_pod() {
        let pod = |name: &str, kind: &str, owner: &str, node: Option<&str>| joiner_core::Pod {
            namespace: "shop".into(),
            name: name.into(),
            owner: Some(joiner_core::Owner {
                kind: kind.into(),
                name: owner.into(),
            }),
            node_name: node.map(str::to_string),
            ..joiner_core::Pod::default()
        };
        let pods = vec![
            pod("web-7d9f-a", "ReplicaSet", "web-7d9f", Some("n1")),
            pod("web-7d9f-b", "ReplicaSet", "web-7d9f", None),
            pod("db-0", "StatefulSet", "db", None),
            pod("webhook-0", "StatefulSet", "webhook", None),
        ];
        let none = std::collections::HashSet::new();
        let find = |key: &str| pod_to_explain(&pods, key, &none);
        assert_eq!(find("shop/web").as_deref(), Some("shop/web-7d9f-b"));
        assert_eq!(find("shop/db").as_deref(), Some("shop/db-0"));
        assert_eq!(find("shop/db-0").as_deref(), Some("shop/db-0"));
        assert_eq!(find("other/db"), None);
        assert_eq!(find("shop/we"), None);
        // When the plan refuses some of a workload's pods, the first refused one is explained.
        let mut more = pods.clone();
        more.push(pod("web-7d9f-c", "ReplicaSet", "web-7d9f", None));
        let refused = std::collections::HashSet::from(["shop/web-7d9f-c"]);
        assert_eq!(
            pod_to_explain(&more, "shop/web", &refused).as_deref(),
            Some("shop/web-7d9f-c")
        );
    }

    #[test]
    fn the_default_provisioner_is_karpenters_default_node_pool() {
        let p = default_provisioner();
        let r = &p.requirements;
        let allows = |key: &str, v: &str| r.get(key).is_some_and(|req| req.allows(v));
        assert!(allows("kubernetes.io/os", "linux") && !allows("kubernetes.io/os", "windows"));
        assert!(allows("kubernetes.io/arch", "amd64") && !allows("kubernetes.io/arch", "arm64"));
        assert!(!allows("karpenter.sh/capacity-type", "spot"));
        let category = "karpenter.k8s.aws/instance-category";
        assert!(["c", "m", "r"].iter().all(|c| allows(category, c)));
        assert!(!allows(category, "t") && !allows(category, "p"));
        let generation = "karpenter.k8s.aws/instance-generation";
        assert!(allows(generation, "3") && allows(generation, "7"));
        assert!(!allows(generation, "2") && !allows(generation, "1"));
    }
}
