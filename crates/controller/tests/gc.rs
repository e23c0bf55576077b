//! Garbage collection against moto through the real provider: an instance tagged for the
//! cluster with no NodeClaim is terminated after the grace, a claimed one and another cluster's
//! are left alone, a claim whose instance was terminated out of band is deleted, and the cost
//! gauge follows the claims' prices.

mod lifecycle_fixture;
mod support;

use std::time::Duration;

use http::Method;
use joiner_controller::lifecycle::gc::Collector;
use joiner_controller::metrics::{ProvisionerLabels, ReasonLabels};
use joiner_core::CloudProvider;
use lifecycle_fixture::{claim, cloud, context, instance_state, launch, settings, Cloud, Stores};
use serde_json::json;
use support::{mock_api, Reply};

fn terminated(
    ctx: &joiner_controller::Context<joiner_aws::AwsCloudProvider>,
    provisioner: &str,
    reason: &str,
) -> u64 {
    ctx.metrics
        .claims_terminated
        .get_or_create(&ReasonLabels {
            provisioner: provisioner.into(),
            reason: reason.into(),
        })
        .get()
}

/// An instance launched by hand without this cluster's tags.
async fn foreign_instance(cloud: &Cloud) -> String {
    let out = cloud
        .clients
        .ec2
        .run_instances()
        .image_id(&cloud.env.image_id)
        .instance_type("t3.micro".into())
        .subnet_id(&cloud.env.untagged_subnet)
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .expect("run instances");
    out.instances()[0]
        .instance_id()
        .unwrap_or_default()
        .to_string()
}

/// An instance launched by hand into cluster `c1` with `tags`, as another tool would.
async fn tagged_instance(cloud: &Cloud, tags: &[(&str, &str)]) -> String {
    joiner_aws::testing::run_tagged_instance(&cloud.clients, &cloud.env, "m5.large", tags)
        .await
        .expect("run instances")
}

fn launched_claim(name: &str, instance_id: &str, price: f64) -> joiner_apis::NodeClaim {
    claim(
        name,
        json!({"status": {"instanceID": instance_id, "pricePerHour": price,
            "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
    )
}

#[tokio::test]
async fn an_unclaimed_instance_of_the_cluster_is_terminated_and_others_are_left_alone() {
    let cloud = cloud().await;
    let orphan = launch(&cloud, "ghost").await;
    let claimed = launch(&cloud, "web-1").await;
    let foreign = foreign_instance(&cloud).await;
    let stores = Stores::new(
        vec![],
        vec![],
        vec![launched_claim("web-1", &claimed.instance_id, 0.096)],
    );
    let (client, api) = mock_api(|_| Reply::not_found("unexpected"));
    let ctx = context(client, &stores, &cloud, settings());
    Collector::default().sweep(&ctx).await.expect("sweep");

    assert_eq!(
        instance_state(&cloud, &orphan.instance_id).await,
        "terminated"
    );
    assert_eq!(
        instance_state(&cloud, &claimed.instance_id).await,
        "running"
    );
    assert_eq!(instance_state(&cloud, &foreign).await, "running");
    assert!(api.requests().is_empty(), "{:?}", api.calls());
    assert_eq!(terminated(&ctx, "unknown", "orphan"), 1);
    let cost = ctx
        .metrics
        .cost_per_hour
        .get_or_create(&ProvisionerLabels {
            provisioner: "web".into(),
        })
        .get();
    assert!((cost - 0.096).abs() < 1e-9, "{cost}");
}

#[tokio::test]
async fn an_orphan_within_its_grace_is_kept() {
    let cloud = cloud().await;
    let orphan = launch(&cloud, "ghost").await;
    let stores = Stores::new(vec![], vec![], vec![]);
    let (client, _api) = mock_api(|_| Reply::not_found("unexpected"));
    let mut s = settings();
    s.orphan_grace = Duration::from_secs(3600);
    let ctx = context(client, &stores, &cloud, s);
    Collector::default().sweep(&ctx).await.expect("sweep");
    assert_eq!(instance_state(&cloud, &orphan.instance_id).await, "running");
    assert_eq!(terminated(&ctx, "unknown", "orphan"), 0);
    // The grace is measured from the launch time DescribeInstances reports.
    let listed = cloud.provider.list().await.expect("list");
    let launched_at = listed
        .iter()
        .find(|n| n.instance_id == orphan.instance_id)
        .and_then(|n| n.launch_time)
        .expect("launch time reported");
    let age = std::time::SystemTime::now()
        .duration_since(launched_at)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(600), "{age:?}");
}

#[tokio::test]
async fn a_claim_whose_instance_was_terminated_out_of_band_is_deleted() {
    let cloud = cloud().await;
    let gone = launch(&cloud, "web-1").await;
    let alive = launch(&cloud, "web-2").await;
    cloud
        .clients
        .ec2
        .terminate_instances()
        .instance_ids(&gone.instance_id)
        .send()
        .await
        .expect("terminate out of band");
    let stores = Stores::new(
        vec![],
        vec![],
        vec![
            launched_claim("web-1", &gone.instance_id, 0.1),
            launched_claim("web-2", &alive.instance_id, 0.2),
        ],
    );
    let (client, api) = mock_api(|req| {
        if req.is(Method::DELETE, "/apis/joiner.sh/v1alpha1/nodeclaims/web-1") {
            Reply::success()
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    let collector = Collector::default();
    collector.sweep(&ctx).await.expect("sweep");
    assert_eq!(
        api.calls(),
        [(
            "DELETE".to_string(),
            "/apis/joiner.sh/v1alpha1/nodeclaims/web-1".to_string()
        )]
    );
    assert_eq!(instance_state(&cloud, &alive.instance_id).await, "running");
    assert_eq!(terminated(&ctx, "web", "instance_gone"), 1);
    let cost = ctx
        .metrics
        .cost_per_hour
        .get_or_create(&ProvisionerLabels {
            provisioner: "web".into(),
        })
        .get();
    assert!((cost - 0.3).abs() < 1e-9, "{cost}");
}

/// The instances other tools run in the same cluster carry `kubernetes.io/cluster/c1=owned`
/// too: none of them is joiner's.
const NEIGHBOURS: &[(&str, &[(&str, &str)])] = &[
    (
        "EKS managed node group",
        &[
            ("kubernetes.io/cluster/c1", "owned"),
            ("eks:cluster-name", "c1"),
            ("eks:nodegroup-name", "system"),
            ("aws:autoscaling:groupName", "eks-system-1234"),
            ("k8s.io/cluster-autoscaler/enabled", "true"),
        ],
    ),
    (
        "eksctl self-managed group",
        &[
            ("kubernetes.io/cluster/c1", "owned"),
            ("alpha.eksctl.io/cluster-name", "c1"),
            ("alpha.eksctl.io/nodegroup-name", "ng-1"),
        ],
    ),
    (
        "Karpenter v1alpha5",
        &[
            ("kubernetes.io/cluster/c1", "owned"),
            ("karpenter.sh/provisioner-name", "default"),
            ("karpenter.sh/managed-by", "c1"),
        ],
    ),
    (
        "Karpenter v1",
        &[
            ("kubernetes.io/cluster/c1", "owned"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/nodeclaim", "default-abcde"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("eks:eks-cluster-name", "c1"),
        ],
    ),
    (
        "another cluster's joiner, tagged with this cluster's EKS tag too",
        &[
            ("kubernetes.io/cluster/c1", "owned"),
            ("kubernetes.io/cluster/c2", "owned"),
            ("joiner.sh/cluster", "c2"),
            ("joiner.sh/provisioner-name", "web"),
            ("joiner.sh/nodeclaim", "web-y"),
        ],
    ),
    (
        "joiner's tags with an empty provisioner",
        &[
            ("kubernetes.io/cluster/c1", "owned"),
            ("joiner.sh/provisioner-name", ""),
            ("joiner.sh/nodeclaim", "web-x"),
        ],
    ),
];

#[tokio::test]
async fn node_groups_and_other_autoscalers_instances_survive_every_sweep_and_the_guard() {
    let cloud = cloud().await;
    let mut neighbours = Vec::new();
    for (what, tags) in NEIGHBOURS {
        neighbours.push((*what, tagged_instance(&cloud, tags).await));
    }
    let orphan = launch(&cloud, "ghost").await;
    let stores = Stores::new(vec![], vec![], vec![]);
    let (client, api) = mock_api(|_| Reply::not_found("unexpected"));
    let ctx = context(client, &stores, &cloud, settings());
    let collector = Collector::default();
    for _ in 0..3 {
        collector.sweep(&ctx).await.expect("sweep");
    }
    // joiner's own orphan goes (so the sweeps did run past their grace) ...
    assert_eq!(
        instance_state(&cloud, &orphan.instance_id).await,
        "terminated"
    );
    assert!(api.requests().is_empty(), "{:?}", api.calls());
    // ... the neighbours stay, are not listed as joiner's, and the guard refuses them.
    let listed: Vec<String> = cloud
        .provider
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|n| n.instance_id)
        .collect();
    for (what, id) in &neighbours {
        assert_eq!(instance_state(&cloud, id).await, "running", "{what}");
        assert!(!listed.contains(id), "{what} listed as joiner's");
        let refused = cloud.provider.delete(id).await.expect_err(what);
        assert!(
            refused.to_string().contains("lacks joiner's ownership tag"),
            "{what}: {refused}"
        );
        assert_eq!(instance_state(&cloud, id).await, "running", "{what}");
    }
    assert_eq!(terminated(&ctx, "unknown", "orphan"), 1);
}
