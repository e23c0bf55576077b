//! The warm pool end to end against moto through the real provider: the reconciler adds
//! members of several types, the provisioning loop launches them (tagged, warm user data), the
//! reconciler stops them after warm-up and marks them Warm; a claim that fits starts a member
//! (StartInstances, no CreateFleet) which then runs with the claim's tag, the member claim is
//! removed without terminating the instance, and a claim no member fits is launched. The API
//! server keeps what the reconcilers write, so every pass reads the previous one's result.

mod lifecycle_fixture;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use http::Method;
use joiner_apis::{NodeClaim, Provisioner};
use joiner_controller::launcher::Launch;
use joiner_controller::lifecycle::termination::Terminator;
use joiner_controller::metrics::{OutcomeLabels, PhaseLabels};
use joiner_controller::provisioning::{launch_pending_claims, Memory};
use joiner_controller::warm_pool;
use lifecycle_fixture::{claim, cloud, node_template, settings, Cloud, Stores};
use serde_json::json;
use support::objects_api::ObjectsApi;
use support::{mock_api, obj};

fn pooled_provisioner(size: i64) -> Provisioner {
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
        "metadata": {"name": "web", "resourceVersion": "1"},
        "spec": {
            "providerRef": {"name": "default"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            "warmPool": {"size": size, "instanceTypes": ["c5.large", "m5.large"]},
        },
    }))
}

/// moto's instances: id to (type, state, tags).
async fn ec2(cloud: &Cloud) -> BTreeMap<String, (String, String, BTreeMap<String, String>)> {
    let out = cloud
        .clients
        .ec2
        .describe_instances()
        .send()
        .await
        .expect("describe");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            (
                i.instance_id().unwrap_or_default().to_string(),
                (
                    i.instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    i.state()
                        .and_then(|s| s.name())
                        .map(|n| n.as_str().to_string())
                        .unwrap_or_default(),
                    i.tags()
                        .iter()
                        .map(|t| {
                            (
                                t.key().unwrap_or_default().to_string(),
                                t.value().unwrap_or_default().to_string(),
                            )
                        })
                        .collect(),
                ),
            )
        })
        .collect()
}

fn members(api: &ObjectsApi) -> Vec<NodeClaim> {
    api.claims()
        .into_iter()
        .filter(|c| c.warm_pool().is_some())
        .collect()
}

fn phases(api: &ObjectsApi) -> Vec<String> {
    let mut p: Vec<String> = members(api)
        .iter()
        .map(|m| m.warm_phase().unwrap_or_default().to_string())
        .collect();
    p.sort();
    p
}

#[tokio::test]
async fn members_warm_up_stop_and_a_fitting_claim_starts_one_instead_of_launching() {
    let cloud = cloud().await;
    let api = ObjectsApi::new(vec![], vec![pooled_provisioner(2)]);
    let (client, requests) = mock_api(api.handler());
    let mut stores = Stores::new(vec![], vec![], vec![])
        .with_objects(vec![pooled_provisioner(2)], vec![node_template()]);
    let mut s = settings();
    s.warm_pool_warmup = Duration::ZERO;
    let ctx = joiner_controller::Context::new(client, stores.state(), cloud.provider.clone(), s);
    let mut memory = Memory::default();

    // Two members, one of each type, written and then launched by the provisioning loop.
    warm_pool::reconcile(&ctx).await.expect("pass 1");
    let added = members(&api);
    assert_eq!(added.len(), 2);
    let mut types: Vec<String> = added
        .iter()
        .flat_map(|m| m.spec.requirements.iter())
        .filter(|r| r.key == "node.kubernetes.io/instance-type")
        .flat_map(|r| r.values.clone())
        .collect();
    types.sort();
    assert_eq!(types, ["c5.large", "m5.large"]);
    for m in &added {
        assert_eq!(
            m.metadata.finalizers.as_deref(),
            Some(&["joiner.sh/termination".to_string()][..])
        );
        assert!(m.name().starts_with("web-warm-"), "{}", m.name());
    }
    let launched = launch_pending_claims(&ctx, &mut memory).await;
    assert!(
        launched
            .iter()
            .all(|r| matches!(r, Ok(Launch::Launched(_)))),
        "{launched:?}"
    );
    let instances = ec2(&cloud).await;
    assert_eq!(instances.len(), 2);
    for (ty, state, tags) in instances.values() {
        assert_eq!(
            tags.get("joiner.sh/warm-pool").map(String::as_str),
            Some("web"),
            "{tags:?}"
        );
        assert!(tags["joiner.sh/nodeclaim"].starts_with("web-warm-"));
        assert_eq!(state, "running");
        assert!(["c5.large", "m5.large"].contains(&ty.as_str()));
    }
    api.sync_claims(&mut stores.claims);
    assert_eq!(phases(&api), ["Warming", "Warming"]);

    // Warm-up over: stopped, then Warm.
    warm_pool::reconcile(&ctx).await.expect("pass 2");
    assert!(ec2(&cloud)
        .await
        .values()
        .all(|(_, state, _)| state == "stopped"));
    warm_pool::reconcile(&ctx).await.expect("pass 3");
    api.sync_claims(&mut stores.claims);
    assert_eq!(phases(&api), ["Warm", "Warm"]);
    warm_pool::reconcile(&ctx).await.expect("pass 4");
    let status = api.provisioners()[0]
        .status
        .clone()
        .and_then(|s| s.warm_pool)
        .expect("status.warmPool");
    assert_eq!(
        (status.desired, status.warming, status.ready, status.claimed),
        (2, 0, 2, 0)
    );
    let idle = status.idle_cost_per_hour.expect("idle cost");
    assert!((idle - 2.0 * 20.0 * 0.08 / 730.0).abs() < 1e-5, "{idle}");
    let ready = ctx
        .metrics
        .warm_pool_members
        .get_or_create(&PhaseLabels {
            provisioner: "web".into(),
            phase: "Warm".into(),
        })
        .get();
    assert_eq!(ready, 2);

    // A claim for pods that fit m5.large (or m5.xlarge): the m5.large member is started.
    let member_m5 = members(&api)
        .into_iter()
        .find(|m| m.status.as_ref().and_then(|s| s.instance_type.as_deref()) == Some("m5.large"))
        .expect("m5 member");
    let member_id = member_m5
        .status
        .as_ref()
        .and_then(|s| s.instance_id.clone())
        .expect("member instance");
    let pods_claim = claim(
        "web-pods1",
        json!({"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]}}),
    );
    api.put_claim(&pods_claim);
    api.sync_claims(&mut stores.claims);
    let creates_before = requests.calls().len();
    let out = launch_pending_claims(&ctx, &mut memory).await;
    let Some(Ok(Launch::Launched(l))) = out.first() else {
        panic!("{out:?}")
    };
    assert_eq!(
        l.instance_id, member_id,
        "the warm member, not a new instance"
    );
    assert!(requests.calls().len() > creates_before);
    let instances = ec2(&cloud).await;
    assert_eq!(instances.len(), 2, "no CreateFleet");
    let (_, state, tags) = &instances[&member_id];
    assert_eq!(state, "running");
    assert_eq!(tags["joiner.sh/nodeclaim"], "web-pods1");
    let taken = api.claim("web-pods1").expect("claim");
    let status = taken.status.expect("status");
    assert_eq!(status.instance_id.as_deref(), Some(member_id.as_str()));
    assert_eq!(status.instance_type.as_deref(), Some("m5.large"));
    let launched_reason =
        joiner_apis::condition::find(&status.conditions, "Launched").map(|c| c.reason.clone());
    assert_eq!(launched_reason.as_deref(), Some("WarmPoolMemberStarted"));
    let hits = ctx
        .metrics
        .warm_pool_takes
        .get_or_create(&OutcomeLabels {
            provisioner: "web".into(),
            outcome: "hit".into(),
        })
        .get();
    assert_eq!(hits, 1);

    // The member claim is handed over: deleted, and its termination leaves the instance to the
    // claim.
    api.sync_claims(&mut stores.claims);
    warm_pool::reconcile(&ctx).await.expect("pass 5");
    let handed = api
        .claim(member_m5.name())
        .expect("member still finalizing");
    assert!(handed.metadata.deletion_timestamp.is_some());
    api.sync_claims(&mut stores.claims);
    let terminator = Terminator::default();
    terminator.reconcile(&ctx).await.expect("termination");
    assert!(api.claim(member_m5.name()).is_none(), "released");
    assert_eq!(
        ec2(&cloud).await[&member_id].1,
        "running",
        "the claim's instance runs on"
    );

    // The pool refills the member it gave away; a claim no member fits is launched.
    api.sync_claims(&mut stores.claims);
    warm_pool::reconcile(&ctx).await.expect("pass 6");
    assert_eq!(members(&api).len(), 2, "refilled");
    let misfit = claim(
        "web-pods2",
        json!({"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
        ]}}),
    );
    api.put_claim(&misfit);
    api.sync_claims(&mut stores.claims);
    let out = launch_pending_claims(&ctx, &mut memory).await;
    let launched: Vec<String> = out
        .iter()
        .filter_map(|r| match r {
            Ok(Launch::Launched(l)) => Some(l.instance_type.clone()),
            _ => None,
        })
        .collect();
    assert!(launched.contains(&"m5.xlarge".to_string()), "{out:?}");
    let misses = ctx
        .metrics
        .warm_pool_takes
        .get_or_create(&OutcomeLabels {
            provisioner: "web".into(),
            outcome: "miss".into(),
        })
        .get();
    assert_eq!(misses, 1);
    let patched_provisioner = requests
        .writes()
        .iter()
        .any(|r| r.method == Method::PATCH && r.path.ends_with("/provisioners/web/status"));
    assert!(patched_provisioner);
}

mod transitions {
    //! Every member transition the moto test does not reach, on the fake cloud: a failed start
    //! falls back to a launch, a take a crash interrupted is resumed for the same claim (never a
    //! second member), a member whose claim went away returns to the pool, one started by hand
    //! or beyond the size is removed, and a pool joiner cannot keep says why and adds nobody.

    use std::sync::Arc;

    use joiner_apis::NodeClaim;
    use joiner_controller::launcher::Launch;
    use joiner_controller::metrics::OutcomeLabels;
    use joiner_controller::provisioning::{launch_pending_claims, Memory};
    use joiner_controller::{warm_pool, Context};
    use joiner_core::testing::{FakeCall, FakeCloud, FakeError, FakeMethod};
    use joiner_core::{CapacityType, CloudErrorKind, LaunchedNode};
    use serde_json::json;

    use super::lifecycle_fixture::{claim, node_template, settings, Stores};
    use super::support::objects_api::ObjectsApi;
    use super::support::{mock_api, obj};
    use super::{members, pooled_provisioner};

    fn instance(id: &str, claim: &str, state: &str) -> LaunchedNode {
        LaunchedNode {
            claim_name: Some(claim.into()),
            instance_id: id.into(),
            provider_id: format!("fake:///z-a/{id}"),
            instance_type: "m5.large".into(),
            zone: "z-a".into(),
            capacity_type: CapacityType::OnDemand,
            state: state.into(),
            launch_time: None,
            image_id: None,
            subnet_id: None,
            security_group_ids: vec![],
            warm_pool: true,
        }
    }

    /// A member claim `name` of pool web on instance `id` in `phase`.
    fn member(
        name: &str,
        id: &str,
        phase: &str,
        claimed_by: Option<&str>,
        created: &str,
    ) -> NodeClaim {
        let mut c = claim(
            name,
            json!({
                "metadata": {"labels": {"joiner.sh/warm-pool": "web"}, "creationTimestamp": created},
                "spec": {"requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-a"]},
                ]},
                "status": {"instanceID": id, "providerID": format!("fake:///z-a/{id}"),
                    "instanceType": "m5.large", "zone": "z-a", "capacityType": "on-demand",
                    "conditions": [{"type": "Launched", "status": "True", "reason": "InstanceLaunched",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                    "warmPool": {"phase": phase}},
            }),
        );
        if let (Some(by), Some(s)) = (claimed_by, c.status.as_mut()) {
            if let Some(w) = s.warm_pool.as_mut() {
                w.claimed_by = Some(by.to_string());
            }
        }
        c
    }

    fn pods_claim(name: &str) -> NodeClaim {
        claim(
            name,
            json!({"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ]}}),
        )
    }

    struct Setup {
        api: ObjectsApi,
        stores: Stores,
        cloud: Arc<FakeCloud>,
        ctx: Context<FakeCloud>,
        _mock: super::support::MockApi,
    }

    fn setup(
        claims: Vec<NodeClaim>,
        prov: joiner_apis::Provisioner,
        instances: Vec<LaunchedNode>,
    ) -> Setup {
        setup_with(claims, prov, node_template(), instances, settings())
    }

    fn setup_with(
        claims: Vec<NodeClaim>,
        prov: joiner_apis::Provisioner,
        nt: joiner_apis::NodeTemplate,
        instances: Vec<LaunchedNode>,
        settings: joiner_controller::Settings,
    ) -> Setup {
        let api = ObjectsApi::new(claims.clone(), vec![prov.clone()]);
        let (client, mock) = mock_api(api.handler());
        let stores = Stores::new(vec![], vec![], claims).with_objects(vec![prov], vec![nt]);
        let cloud = Arc::new(FakeCloud::new(joiner_core::testing::catalog::catalog()));
        for i in instances {
            cloud.add_instance(i);
        }
        let ctx = Context::new(client, stores.state(), cloud.clone(), settings);
        Setup {
            api,
            stores,
            cloud,
            ctx,
            _mock: mock,
        }
    }

    fn takes(ctx: &Context<FakeCloud>, outcome: &str) -> u64 {
        ctx.metrics
            .warm_pool_takes
            .get_or_create(&OutcomeLabels {
                provisioner: "web".into(),
                outcome: outcome.into(),
            })
            .get()
    }

    /// Pool web pulling `app:1` on a NodeTemplate of `family`, with `member` on instance
    /// i-warm1 in `state`.
    fn pulling(
        family: &str,
        member: NodeClaim,
        state: &str,
        settings: joiner_controller::Settings,
    ) -> Setup {
        let prov = obj(json!({
            "apiVersion": "joiner.sh/v1alpha1", "kind": "Provisioner",
            "metadata": {"name": "web", "resourceVersion": "1"},
            "spec": {"providerRef": {"name": "default"},
                "warmPool": {"size": 1, "instanceTypes": ["m5.large"], "prePullImages": ["app:1"]}},
        }));
        let mut nt = node_template();
        nt.spec.ami_family = Some(serde_json::from_value(json!(family)).expect("a family"));
        setup_with(
            vec![member],
            prov,
            nt,
            vec![instance("i-warm1", "web-warm-a", state)],
            settings,
        )
    }

    /// Member web-warm-a, warming on i-warm1 since 2026-01-01.
    fn warming() -> NodeClaim {
        member(
            "web-warm-a",
            "i-warm1",
            "Warming",
            None,
            "2026-01-01T00:00:00Z",
        )
    }

    fn pull_status(t: &Setup) -> (Option<String>, Option<String>) {
        let w = t
            .api
            .claim("web-warm-a")
            .and_then(|c| c.status)
            .and_then(|s| s.warm_pool)
            .expect("warmPool");
        (w.pull, w.pull_result)
    }

    fn stops(t: &Setup) -> usize {
        t.cloud
            .calls()
            .iter()
            .filter(|c| matches!(c, FakeCall::StopWarm(_)))
            .count()
    }

    /// Settings whose warm-up deadline the fixture's launch time (2026-01-01) is within.
    fn long_warm_up() -> joiner_controller::Settings {
        let mut s = settings();
        s.warm_pool_warmup = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
        s
    }

    #[tokio::test]
    async fn a_bottlerocket_member_is_stopped_only_once_its_images_are_pulled() {
        let mut t = pulling("Bottlerocket", warming(), "pending", long_warm_up());
        // Pending: nothing to send to yet.
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert!(!t
            .cloud
            .calls()
            .iter()
            .any(|c| matches!(c, FakeCall::PullWarm(..))));
        // Running: the pull is sent once and recorded; the member keeps running.
        t.cloud.set_state("i-warm1", "running");
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert!(t
            .cloud
            .calls()
            .contains(&FakeCall::PullWarm("i-warm1".into(), vec!["app:1".into()])));
        assert_eq!(pull_status(&t), (Some("pull-1".into()), None));
        t.api.sync_claims(&mut t.stores.claims);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        let sent = t
            .cloud
            .calls()
            .iter()
            .filter(|c| matches!(c, FakeCall::PullWarm(..)))
            .count();
        assert_eq!(sent, 1, "asked after, not sent again");
        assert_eq!(stops(&t), 0, "still pulling");
        // Pulled: recorded, then stopped; once stopped it is Warm, the result kept.
        t.cloud
            .set_pull_progress("i-warm1", joiner_core::PullProgress::Succeeded);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(
            pull_status(&t),
            (Some("pull-1".into()), Some("Succeeded".into()))
        );
        assert_eq!(stops(&t), 1);
        t.api.sync_claims(&mut t.stores.claims);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(
            t.api
                .claim("web-warm-a")
                .and_then(|c| c.warm_phase().map(str::to_string))
                .as_deref(),
            Some("Warm")
        );
        assert_eq!(pull_status(&t).1.as_deref(), Some("Succeeded"));
    }

    #[tokio::test]
    async fn a_pull_not_over_by_the_warm_up_deadline_is_given_up_and_the_member_stopped() {
        // The agent never takes the pull: retried quietly until the deadline, then stopped.
        let t = pulling("Bottlerocket", warming(), "running", long_warm_up());
        t.cloud.fail_next(
            FakeMethod::PullWarm,
            FakeError::new(CloudErrorKind::Other, "InvalidInstanceId"),
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(pull_status(&t), (None, None));
        assert_eq!(stops(&t), 0);
        let late = Context::new(
            t.ctx.client.clone(),
            t.stores.state(),
            t.cloud.clone(),
            settings(),
        );
        t.cloud.fail_next(
            FakeMethod::PullWarm,
            FakeError::new(CloudErrorKind::Other, "InvalidInstanceId"),
        );
        warm_pool::reconcile(&late).await.expect("pass");
        let (_, result) = pull_status(&t);
        assert!(
            result
                .as_deref()
                .is_some_and(|r| r.starts_with("not pulled: ") && r.contains("InvalidInstanceId")),
            "{result:?}"
        );
        assert_eq!(stops(&t), 1);

        // Sent but still running at the deadline: stopped, and the status says so.
        let mut recorded = warming();
        if let Some(w) = recorded.status.as_mut().and_then(|s| s.warm_pool.as_mut()) {
            w.pull = Some("pull-1".into());
        }
        let t = pulling("Bottlerocket", recorded, "running", settings());
        // The fake knows no pull-1: its own pull gives it one first.
        joiner_core::CloudProvider::pull_warm(&*t.cloud, "i-warm1", &[], std::time::Duration::ZERO)
            .await
            .expect("a pull");
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        let (_, result) = pull_status(&t);
        assert!(
            result
                .as_deref()
                .is_some_and(|r| r.starts_with("not finished within the warm-up deadline")),
            "{result:?}"
        );
        assert_eq!(stops(&t), 1);
    }

    #[tokio::test]
    async fn members_whose_user_data_pulls_are_not_sent_a_pull() {
        let t = pulling("AL2023", warming(), "running", long_warm_up());
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert!(!t
            .cloud
            .calls()
            .iter()
            .any(|c| matches!(c, FakeCall::PullWarm(..) | FakeCall::PullProgress(..))));
        assert_eq!(pull_status(&t), (None, None));
    }

    #[tokio::test]
    async fn a_failed_start_falls_back_to_a_launch_and_puts_the_member_back() {
        let t = setup(
            vec![
                member(
                    "web-warm-a",
                    "i-warm1",
                    "Warm",
                    None,
                    "2026-01-01T00:00:00Z",
                ),
                pods_claim("web-pods"),
            ],
            pooled_provisioner(1),
            vec![instance("i-warm1", "web-warm-a", "stopped")],
        );
        t.cloud.fail_next(
            FakeMethod::StartWarm,
            FakeError::new(
                CloudErrorKind::InsufficientCapacity,
                "InsufficientInstanceCapacity",
            ),
        );
        let out = launch_pending_claims(&t.ctx, &mut Memory::default()).await;
        let Some(Ok(Launch::Launched(l))) = out.first() else {
            panic!("{out:?}")
        };
        assert_ne!(l.instance_id, "i-warm1", "launched instead");
        let calls = t.cloud.calls();
        let start = calls
            .iter()
            .position(|c| c == &FakeCall::StartWarm("i-warm1".into(), "web-pods".into()))
            .expect("the member was tried");
        let create = calls
            .iter()
            .position(|c| matches!(c, FakeCall::Create(r) if r.claim_name == "web-pods"))
            .expect("then a launch");
        assert!(start < create, "{calls:?}");
        let back = t.api.claim("web-warm-a").expect("member");
        assert_eq!(back.warm_phase(), Some("Warm"));
        let w = back.status.and_then(|s| s.warm_pool).expect("warmPool");
        assert_eq!(w.claimed_by, None);
        assert!(w.message.unwrap_or_default().contains("web-pods"));
        assert_eq!(takes(&t.ctx, "fallback"), 1);
        assert_eq!(takes(&t.ctx, "hit"), 0);
    }

    /// A member started for the claim whose release from the pool failed is the claim's: no
    /// second instance is launched, the member stays bound, and the claim's next launch
    /// finishes the take on the same instance.
    #[tokio::test]
    async fn a_take_whose_release_failed_is_finished_never_launched_twice() {
        let mut t = setup(
            vec![
                member(
                    "web-warm-a",
                    "i-warm1",
                    "Warm",
                    None,
                    "2026-01-01T00:00:00Z",
                ),
                pods_claim("web-pods"),
            ],
            pooled_provisioner(1),
            vec![instance("i-warm1", "web-warm-a", "stopped")],
        );
        t.cloud.fail_next(
            FakeMethod::StartWarm,
            FakeError::new(CloudErrorKind::TakeUnfinished, "TakeUnfinished"),
        );
        let mut memory = Memory::default();
        let out = launch_pending_claims(&t.ctx, &mut memory).await;
        assert!(matches!(out.first(), Some(Err(_))), "{out:?}");
        assert!(
            !t.cloud
                .calls()
                .iter()
                .any(|c| matches!(c, FakeCall::Create(_))),
            "no second instance: {:?}",
            t.cloud.calls()
        );
        assert_eq!(
            t.api
                .claim("web-warm-a")
                .and_then(|c| c.warm_phase().map(str::to_string))
                .as_deref(),
            Some("Claimed"),
            "the member stays bound to the claim"
        );
        // The next launch (after its backoff) finds the instance under the claim, still a
        // member, and finishes the take on it.
        t.api.sync_claims(&mut t.stores.claims);
        let out = launch_pending_claims(&t.ctx, &mut Memory::default()).await;
        let Some(Ok(Launch::Launched(l))) = out.first() else {
            panic!("{out:?}")
        };
        assert_eq!(l.instance_id, "i-warm1");
        assert!(!t
            .cloud
            .calls()
            .iter()
            .any(|c| matches!(c, FakeCall::Create(_))));
        assert!(!t.cloud.instances()[0].warm_pool, "released");
    }

    #[tokio::test]
    async fn a_take_interrupted_after_the_bind_or_the_tag_is_resumed_for_the_same_claim() {
        // Crash after the bind: the member is Claimed by the claim, its instance still the
        // member's.
        let t = setup(
            vec![
                member(
                    "web-warm-a",
                    "i-warm1",
                    "Claimed",
                    Some("web-pods"),
                    "2026-01-01T00:00:00Z",
                ),
                member(
                    "web-warm-b",
                    "i-warm2",
                    "Warm",
                    None,
                    "2026-01-01T00:00:00Z",
                ),
                pods_claim("web-pods"),
            ],
            pooled_provisioner(2),
            vec![
                instance("i-warm1", "web-warm-a", "stopped"),
                instance("i-warm2", "web-warm-b", "stopped"),
            ],
        );
        let out = launch_pending_claims(&t.ctx, &mut Memory::default()).await;
        let Some(Ok(Launch::Launched(l))) = out.first() else {
            panic!("{out:?}")
        };
        assert_eq!(l.instance_id, "i-warm1", "the bound member, not another");
        let calls = t.cloud.calls();
        assert!(
            !calls.iter().any(|c| matches!(c, FakeCall::Create(_))),
            "{calls:?}"
        );
        assert!(!calls
            .iter()
            .any(|c| matches!(c, FakeCall::StartWarm(id, _) if id == "i-warm2")));

        // Crash after the tag: the cloud lists the stopped member under the claim's name.
        let t = setup(
            vec![
                member(
                    "web-warm-a",
                    "i-warm1",
                    "Claimed",
                    Some("web-pods"),
                    "2026-01-01T00:00:00Z",
                ),
                pods_claim("web-pods"),
            ],
            pooled_provisioner(1),
            vec![instance("i-warm1", "web-pods", "stopped")],
        );
        let out = launch_pending_claims(&t.ctx, &mut Memory::default()).await;
        let Some(Ok(Launch::Launched(l))) = out.first() else {
            panic!("{out:?}")
        };
        assert_eq!(l.instance_id, "i-warm1");
        assert!(t
            .cloud
            .calls()
            .contains(&FakeCall::StartWarm("i-warm1".into(), "web-pods".into())));
        let reason = t
            .api
            .claim("web-pods")
            .and_then(|c| c.status)
            .and_then(|s| {
                joiner_apis::condition::find(&s.conditions, "Launched").map(|c| c.reason.clone())
            });
        assert_eq!(reason.as_deref(), Some("WarmPoolMemberStarted"));
    }

    #[tokio::test]
    async fn members_return_to_the_pool_or_go_as_their_state_says() {
        let t = setup(
            vec![
                // Bound to a claim that is gone, never started for it: back to Warm.
                member(
                    "web-warm-a",
                    "i-1",
                    "Claimed",
                    Some("web-gone"),
                    "2026-01-01T00:00:00Z",
                ),
                // Bound to a claim that is gone after the start: removed (its instance is the
                // gone claim's orphan).
                member(
                    "web-warm-b",
                    "i-2",
                    "Claimed",
                    Some("web-gone2"),
                    "2026-01-01T00:00:00Z",
                ),
                // Warm but running: started outside a take, replaced.
                member("web-warm-c", "i-3", "Warm", None, "2026-01-01T00:00:00Z"),
                // Two ready members for a pool of one: the newer goes.
                member("web-warm-d", "i-4", "Warm", None, "2026-01-01T00:00:00Z"),
                member("web-warm-e", "i-5", "Warm", None, "2026-01-02T00:00:00Z"),
            ],
            pooled_provisioner(1),
            vec![
                instance("i-1", "web-warm-a", "stopped"),
                instance("i-2", "web-gone2", "running"),
                instance("i-3", "web-warm-c", "running"),
                instance("i-4", "web-warm-d", "stopped"),
                instance("i-5", "web-warm-e", "stopped"),
            ],
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        let phase = |n: &str| {
            t.api
                .claim(n)
                .and_then(|c| c.warm_phase().map(str::to_string))
        };
        let deleting = |n: &str| {
            t.api
                .claim(n)
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
        };
        assert_eq!(phase("web-warm-a").as_deref(), Some("Warm"));
        assert!(!deleting("web-warm-a"));
        assert!(deleting("web-warm-b"));
        assert!(deleting("web-warm-c"));
        assert!(!deleting("web-warm-d"));
        // The pool is a and d once b, c go; e (newest Warm) is the surplus.
        assert!(deleting("web-warm-e"));
        drop(t.stores);
    }

    /// `size: auto` follows the claims opened in the last day, at most `maxSize`, and keeps
    /// counting them after consolidation removed them.
    #[tokio::test]
    async fn an_auto_pool_is_the_busiest_ten_minutes_of_claims_and_remembers_them() {
        let mut prov = pooled_provisioner(0);
        if let Some(w) = prov.spec.warm_pool.as_mut() {
            w.size = Some(
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("auto".into()),
            );
            w.max_size = Some(3);
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let recent: Vec<NodeClaim> = (0..4)
            .map(|i| {
                claim(
                    &format!("web-n{i}"),
                    json!({"metadata": {"creationTimestamp": (now - k8s_openapi::jiff::SignedDuration::from_secs(60 * i)).to_string()}}),
                )
            })
            .collect();
        let mut t = setup(recent, prov, vec![]);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(
            members(&t.api).len(),
            3,
            "4 claims in 10 minutes, capped at maxSize 3"
        );
        // Consolidation removes the four nodes' claims; the pool stays.
        t.api.sync_claims(&mut t.stores.claims);
        for name in ["web-n0", "web-n1", "web-n2", "web-n3"] {
            let c = t.api.claim(name).expect("claim");
            t.stores
                .claims
                .apply_watcher_event(&kube::runtime::watcher::Event::Delete(c));
        }
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        let members = members(&t.api);
        assert_eq!(members.len(), 3);
        assert!(members
            .iter()
            .all(|m| m.metadata.deletion_timestamp.is_none()));
        let status = t.api.provisioners()[0]
            .status
            .clone()
            .and_then(|s| s.warm_pool)
            .expect("status");
        assert_eq!(status.desired, 3);
    }

    /// The pool's status message after one pass over a pool of 2 whose NodeTemplate has
    /// `family` and whose state is `state`, with the members it added.
    async fn one_pass(family: &str, state: &str, cloud: FakeCloud) -> (String, Vec<NodeClaim>) {
        let mut prov = pooled_provisioner(2);
        if let Some(w) = prov.spec.warm_pool.as_mut() {
            w.state = Some(state.into());
        }
        prov.spec.provider_ref = Some(joiner_apis::ProviderRef {
            name: "nt".into(),
            kind: None,
            api_version: None,
        });
        let api = ObjectsApi::new(vec![], vec![prov.clone()]);
        let (client, _mock) = mock_api(api.handler());
        let nt: joiner_apis::NodeTemplate = obj(json!({
            "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
            "metadata": {"name": "nt"}, "spec": {"amiFamily": family},
        }));
        let stores = Stores::new(vec![], vec![], vec![]).with_objects(vec![prov], vec![nt]);
        let ctx = Context::new(client, stores.state(), Arc::new(cloud), settings());
        warm_pool::reconcile(&ctx).await.expect("pass");
        let status = api.provisioners()[0]
            .status
            .clone()
            .and_then(|s| s.warm_pool)
            .expect("status");
        assert_eq!(status.desired, 2);
        (status.message.unwrap_or_default(), members(&api))
    }

    fn fake() -> FakeCloud {
        FakeCloud::new(joiner_core::testing::catalog::catalog())
    }

    /// A pool of 3 under a Provisioner limited to 4 cpu, holding one member of 2 cpu: one more
    /// member fits the limit, a third would pass it and is not added; the status says why.
    #[tokio::test]
    async fn members_count_against_the_provisioners_limits() {
        let mut prov = pooled_provisioner(3);
        if let Some(w) = prov.spec.warm_pool.as_mut() {
            w.instance_types = vec!["m5.large".into()];
        }
        prov.spec.limits = Some(obj(json!({"resources": {"cpu": "4"}})));
        let held = member(
            "web-warm-a",
            "i-warm1",
            "Warm",
            None,
            "2026-01-01T00:00:00Z",
        );
        let api = ObjectsApi::new(vec![held.clone()], vec![prov.clone()]);
        let (client, _mock) = mock_api(api.handler());
        let stores =
            Stores::new(vec![], vec![], vec![held]).with_objects(vec![prov], vec![node_template()]);
        let cloud = Arc::new(fake());
        cloud.add_instance(instance("i-warm1", "web-warm-a", "stopped"));
        let ctx = Context::new(client, stores.state(), cloud.clone(), settings());
        warm_pool::reconcile(&ctx).await.expect("pass");
        let added = members(&api).len() - 1;
        assert_eq!(added, 1, "{:?}", members(&api));
        let status = api.provisioners()[0]
            .status
            .clone()
            .and_then(|s| s.warm_pool)
            .expect("status");
        let message = status.message.unwrap_or_default();
        assert!(
            message.contains("spec.limits") && message.contains("cpu"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_pool_joiner_cannot_keep_says_why_and_adds_no_member() {
        // EC2 does not hibernate Bottlerocket, and a running Bottlerocket member could never
        // learn its cluster (its settings come only from user data, changed only while stopped).
        for state in ["Hibernated", "Running"] {
            let (message, added) = one_pass("Bottlerocket", state, fake()).await;
            assert!(added.is_empty(), "{state}");
            assert!(
                message.starts_with(&format!("spec.warmPool.state: {state}: ")),
                "{message}"
            );
        }
        // Custom user data is the user's: joiner cannot hold a warming instance back.
        let (message, added) = one_pass("Custom", "Stopped", fake()).await;
        assert!(added.is_empty());
        assert!(message.contains("Custom"), "{message}");
        // Hibernated on AL2023: the types that cannot hibernate are left out and named.
        let cloud = fake();
        cloud.refuse_hibernation("c5.large", "c5.large: no hibernation here");
        let (message, added) = one_pass("AL2023", "Hibernated", cloud).await;
        assert_eq!(
            message,
            "spec.warmPool.instanceTypes: c5.large: no hibernation here"
        );
        assert_eq!(added.len(), 2);
        for m in &added {
            assert_eq!(m.warm_state(), joiner_core::WarmState::Hibernated);
            let types: Vec<&str> = m
                .spec
                .requirements
                .iter()
                .filter(|r| r.key == "node.kubernetes.io/instance-type")
                .flat_map(|r| r.values.iter().map(String::as_str))
                .collect();
            assert_eq!(types, ["m5.large"], "{m:?}");
        }
        // No allowed type can hibernate: nothing added, and the status says why.
        let cloud = fake();
        cloud.refuse_hibernation("c5.large", "c5.large: no");
        cloud.refuse_hibernation("m5.large", "m5.large: no");
        let (message, added) = one_pass("AL2023", "Hibernated", cloud).await;
        assert!(added.is_empty());
        assert!(message.contains("m5.large: no"), "{message}");
    }

    /// A member of `state` on instance `id` with `status.warmPool` fields `extra`.
    fn held(name: &str, id: &str, state: &str, phase: &str, extra: serde_json::Value) -> NodeClaim {
        let mut m = member(name, id, phase, None, "2026-01-01T00:00:00Z");
        m.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("joiner.sh/warm-state".into(), state.into());
        let mut status = serde_json::to_value(m.status.take()).expect("status");
        super::lifecycle_fixture::merge(&mut status, json!({"warmPool": extra}));
        m.status = serde_json::from_value(status).expect("status");
        m
    }

    fn held_pool(state: &str) -> joiner_apis::Provisioner {
        let mut prov = pooled_provisioner(1);
        if let Some(w) = prov.spec.warm_pool.as_mut() {
            w.state = Some(state.into());
        }
        prov
    }

    /// How many hold boots were asked of the cloud.
    fn holds(cloud: &FakeCloud) -> usize {
        let calls = cloud.calls();
        calls
            .iter()
            .filter(|c| matches!(c, FakeCall::HoldWarm(_)))
            .count()
    }

    /// How many hibernations were asked of the cloud.
    fn hibernations(cloud: &FakeCloud) -> usize {
        let calls = cloud.calls();
        calls
            .iter()
            .filter(|c| matches!(c, FakeCall::HibernateWarm(_)))
            .count()
    }

    /// True once member `name` is gone or being deleted.
    fn removed(api: &ObjectsApi, name: &str) -> bool {
        api.claim(name)
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
    }

    fn warm_status(api: &ObjectsApi, name: &str) -> joiner_apis::WarmMemberStatus {
        api.claim(name)
            .and_then(|c| c.status)
            .and_then(|s| s.warm_pool)
            .expect("warmPool status")
    }

    #[tokio::test]
    async fn a_running_member_is_held_after_its_warm_up_and_taken_by_a_reboot() {
        let mut t = setup(
            vec![
                held("web-warm-r", "i-warm1", "Running", "Warming", json!({})),
                pods_claim("web-pods"),
            ],
            held_pool("Running"),
            // The warm-up powered it off.
            vec![instance("i-warm1", "web-warm-r", "stopped")],
        );
        // Pass 1: the hold boot, recorded before the start.
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(holds(&t.cloud), 1);
        let w = warm_status(&t.api, "web-warm-r");
        assert_eq!(w.phase, "Warming");
        assert!(w.held_at.is_some());
        // Pass 2: running after its hold boot, it is ready.
        t.api.sync_claims(&mut t.stores.claims);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(warm_status(&t.api, "web-warm-r").phase, "Warm");
        // Pass 3: a running Warm member of a Running pool stays (it is not "started by hand").
        t.api.sync_claims(&mut t.stores.claims);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(warm_status(&t.api, "web-warm-r").phase, "Warm");
        assert_eq!(holds(&t.cloud), 1);
        // A claim takes it (the provider reboots a running member), no launch.
        let out = launch_pending_claims(&t.ctx, &mut Memory::default()).await;
        let Some(Ok(Launch::Launched(l))) = out.first() else {
            panic!("{out:?}")
        };
        assert_eq!(l.instance_id, "i-warm1");
        assert!(t
            .cloud
            .calls()
            .contains(&FakeCall::StartWarm("i-warm1".into(), "web-pods".into())));
        assert!(!t
            .cloud
            .calls()
            .iter()
            .any(|c| matches!(c, FakeCall::Create(r) if r.claim_name == "web-pods")));

        // Stopped outside a take after its hold boot: its next boot would join, so it goes.
        let t = setup(
            vec![held(
                "web-warm-r",
                "i-warm1",
                "Running",
                "Warm",
                json!({"heldAt": "2026-01-01T00:05:00Z"}),
            )],
            held_pool("Running"),
            vec![instance("i-warm1", "web-warm-r", "stopped")],
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert!(removed(&t.api, "web-warm-r"));
    }

    #[tokio::test]
    async fn a_hibernated_member_is_held_settles_then_hibernates_and_is_ready() {
        let mut t = setup(
            vec![held(
                "web-warm-h",
                "i-warm1",
                "Hibernated",
                "Warming",
                json!({}),
            )],
            held_pool("Hibernated"),
            vec![instance("i-warm1", "web-warm-h", "stopped")],
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(holds(&t.cloud), 1);
        // Running, but its hold boot only just started: not hibernated yet.
        t.api.sync_claims(&mut t.stores.claims);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(hibernations(&t.cloud), 0);
        let w = warm_status(&t.api, "web-warm-h");
        assert_eq!(w.phase, "Warming");
        assert!(w.hibernated_at.is_none());
        // Its hold boot began 10 minutes ago: hibernated, recorded first.
        let mut m = t.api.claim("web-warm-h").expect("member");
        if let Some(w) = m.status.as_mut().and_then(|s| s.warm_pool.as_mut()) {
            let ago = k8s_openapi::jiff::Timestamp::now()
                - k8s_openapi::jiff::SignedDuration::from_secs(600);
            w.held_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ago));
        }
        t.api.put_claim(&m);
        t.api.sync_claims(&mut t.stores.claims);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(hibernations(&t.cloud), 1);
        assert!(warm_status(&t.api, "web-warm-h").hibernated_at.is_some());
        // Stopped after the hibernation: ready.
        t.api.sync_claims(&mut t.stores.claims);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(warm_status(&t.api, "web-warm-h").phase, "Warm");
        assert_eq!(hibernations(&t.cloud), 1);
    }

    #[tokio::test]
    async fn a_recorded_hold_that_never_started_is_repeated_one_that_did_is_not() {
        // Crash between the record and the start: launched before the hold was recorded.
        let launched =
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600); // 2026-01-01
        let mut stopped = instance("i-warm1", "web-warm-h", "stopped");
        stopped.launch_time = Some(launched);
        let t = setup(
            vec![held(
                "web-warm-h",
                "i-warm1",
                "Hibernated",
                "Warming",
                json!({"heldAt": "2026-01-01T00:10:00Z"}),
            )],
            held_pool("Hibernated"),
            vec![stopped.clone()],
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(holds(&t.cloud), 1);
        assert!(t
            .api
            .claim("web-warm-h")
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()));
        // Started since (EC2 sets the launch time on every start) and stopped again without
        // a hibernation: its hold boot is spent, a start would join. Replaced, not held.
        stopped.launch_time = Some(launched + std::time::Duration::from_secs(3600));
        let t = setup(
            vec![held(
                "web-warm-h",
                "i-warm1",
                "Hibernated",
                "Warming",
                json!({"heldAt": "2026-01-01T00:10:00Z"}),
            )],
            held_pool("Hibernated"),
            vec![stopped],
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert_eq!(holds(&t.cloud), 0);
        assert!(removed(&t.api, "web-warm-h"));
    }

    /// A member whose instance was terminated behind joiner's back leaves the pool in the
    /// pass that sees it (out of `Warm` and `ready`), and the pool is refilled in that pass;
    /// one the listing has not shown yet is left alone while that is still eventual
    /// consistency.
    #[tokio::test]
    async fn a_member_whose_instance_was_terminated_is_replaced_at_once() {
        let t = setup(
            vec![member(
                "web-warm-t",
                "i-warm1",
                "Warm",
                None,
                "2026-01-01T00:00:00Z",
            )],
            pooled_provisioner(1),
            vec![instance("i-warm1", "web-warm-t", "terminated")],
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert!(removed(&t.api, "web-warm-t"));
        let added: Vec<String> = super::members(&t.api)
            .into_iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .map(|m| m.name().to_string())
            .collect();
        assert_eq!(added.len(), 1, "refilled in the same pass: {added:?}");
        let status = t
            .api
            .provisioners()
            .into_iter()
            .find_map(|p| p.status.and_then(|s| s.warm_pool))
            .expect("pool status");
        assert_eq!(status.ready, 0, "{status:?}");

        // Launched a moment ago and not listed yet: kept.
        let fresh = member(
            "web-warm-f",
            "i-warm2",
            "Warming",
            None,
            &k8s_openapi::jiff::Timestamp::now().to_string(),
        );
        let mut fresh = fresh;
        if let Some(c) = fresh.status.as_mut().and_then(|s| s.conditions.first_mut()) {
            c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            );
        }
        let t = setup(vec![fresh], pooled_provisioner(1), vec![]);
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert!(!removed(&t.api, "web-warm-f"));
    }

    #[tokio::test]
    async fn members_of_another_state_are_replaced() {
        // The pool went from Hibernated to Stopped: the hibernated member is replaced.
        let t = setup(
            vec![held(
                "web-warm-h",
                "i-warm1",
                "Hibernated",
                "Warm",
                json!({"heldAt": "2026-01-01T00:10:00Z", "hibernatedAt": "2026-01-01T00:20:00Z"}),
            )],
            pooled_provisioner(1),
            vec![instance("i-warm1", "web-warm-h", "stopped")],
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert!(removed(&t.api, "web-warm-h"));
        // A member left by an earlier version's reuse on scale-in (a node that served pods,
        // tagged into the pool afterwards) is removed even where its state is the pool's.
        let mut reused = member(
            "web-warm-u",
            "i-warm2",
            "Warm",
            None,
            "2026-01-01T00:00:00Z",
        );
        reused
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("joiner.sh/reused-from".into(), "web-gone".into());
        let t = setup(
            vec![reused],
            pooled_provisioner(1),
            vec![instance("i-warm2", "web-warm-u", "stopped")],
        );
        warm_pool::reconcile(&t.ctx).await.expect("pass");
        assert!(removed(&t.api, "web-warm-u"));
    }
}

mod crash_walk {
    //! Every member transition with a crash at every write: the scenario (fill a pool of two,
    //! warm it, take a member for a claim, hand it over, refill) runs once per write of the
    //! happy path with that write failing (the writer crashed just before it), and every
    //! round restarts the controller from the API server's objects (no memory kept). In the
    //! end the claim runs on exactly one instance, no instance was started for two claims,
    //! every live instance is recorded by exactly one claim, and the pool is back at its size.

    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use joiner_controller::lifecycle::termination::Terminator;
    use joiner_controller::provisioning::{launch_pending_claims, Memory};
    use joiner_controller::{warm_pool, Context};
    use joiner_core::testing::{FakeCall, FakeCloud};
    use serde_json::json;

    use super::lifecycle_fixture::{claim, node_template, settings, Stores};
    use super::pooled_provisioner;
    use super::support::mock_api;
    use super::support::objects_api::ObjectsApi;

    const ROUNDS: usize = 10;

    /// One incarnation of the controller: stores listed from the API server, nothing else.
    async fn round(
        api: &ObjectsApi,
        cloud: &Arc<FakeCloud>,
        add_claim_at: Option<usize>,
        i: usize,
    ) {
        if add_claim_at == Some(i) {
            api.put_claim(&claim(
                "web-pods",
                json!({"spec": {"requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ]}}),
            ));
        }
        let (client, _mock) = mock_api(api.handler());
        let mut stores = Stores::new(vec![], vec![], api.claims())
            .with_objects(api.provisioners(), vec![node_template()]);
        let mut s = settings();
        s.warm_pool_warmup = std::time::Duration::ZERO;
        let ctx = Context::new(client, stores.state(), cloud.clone(), s);
        // Errors are expected (injected); a pass must never panic.
        let _ = warm_pool::reconcile(&ctx).await;
        api.sync_claims(&mut stores.claims);
        let _ = launch_pending_claims(&ctx, &mut Memory::default()).await;
        api.sync_claims(&mut stores.claims);
        let _ = Terminator::default().reconcile(&ctx).await;
    }

    async fn scenario(fail_write: Option<usize>) -> (ObjectsApi, Arc<FakeCloud>) {
        let api = ObjectsApi::new(vec![], vec![pooled_provisioner(2)]);
        let cloud = Arc::new(FakeCloud::new(joiner_core::testing::catalog::catalog()));
        if let Some(k) = fail_write {
            api.fail_write(k);
        }
        for i in 0..ROUNDS {
            round(&api, &cloud, Some(3), i).await;
        }
        (api, cloud)
    }

    fn check(api: &ObjectsApi, cloud: &FakeCloud, case: &str) {
        let claims = api.claims();
        let live: Vec<_> = cloud
            .instances()
            .into_iter()
            .filter(|i| i.state != "terminated")
            .collect();
        // The claim runs on one instance, tagged for it.
        let pods = claims
            .iter()
            .find(|c| c.name() == "web-pods")
            .unwrap_or_else(|| panic!("{case}: claim lost"));
        let id = pods
            .status
            .as_ref()
            .and_then(|s| s.instance_id.clone())
            .unwrap_or_else(|| panic!("{case}: claim never launched"));
        let for_claim: Vec<_> = live
            .iter()
            .filter(|i| i.claim_name.as_deref() == Some("web-pods"))
            .collect();
        assert_eq!(for_claim.len(), 1, "{case}: {live:?}");
        assert_eq!(for_claim[0].instance_id, id, "{case}");
        assert_eq!(for_claim[0].state, "running", "{case}");
        // No instance started for two claims.
        let mut started: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for call in cloud.calls() {
            if let FakeCall::StartWarm(i, c) = call {
                started.entry(i).or_default().insert(c);
            }
        }
        assert!(
            started.values().all(|c| c.len() == 1),
            "{case}: {started:?}"
        );
        // Every live instance is recorded by exactly one live claim, under its own tag.
        for i in &live {
            let recorded: Vec<&str> = claims
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .filter(|c| {
                    c.status.as_ref().and_then(|s| s.instance_id.as_deref())
                        == Some(i.instance_id.as_str())
                })
                .map(|c| c.name())
                .collect();
            assert_eq!(
                recorded,
                [i.claim_name.as_deref().unwrap_or_default()],
                "{case}: {i:?}"
            );
        }
        // The pool is back at its size, ready.
        let ready = claims
            .iter()
            .filter(|c| c.warm_pool().is_some() && c.metadata.deletion_timestamp.is_none())
            .filter(|c| c.warm_phase() == Some("Warm"))
            .count();
        assert_eq!(ready, 2, "{case}: {claims:#?}");
        assert_eq!(live.len(), 3, "{case}: {live:?}");
    }

    #[tokio::test]
    async fn every_write_may_crash_and_the_pool_still_converges_without_loss_or_double_start() {
        let (api, cloud) = scenario(None).await;
        check(&api, &cloud, "no crash");
        let writes = api.writes();
        assert!(writes > 10, "the happy path writes {writes} times");
        eprintln!("crash points walked: {writes}");
        for k in 1..=writes {
            let (api, cloud) = scenario(Some(k)).await;
            check(&api, &cloud, &format!("crash at write {k} of {writes}"));
        }
    }
}
