//! The launch path against moto through the real SDK: discovery, AMIs, launch templates,
//! CreateFleet (with injected capacity errors and throttling), and guarded termination.
//!
//! moto facts these tests rely on (moto 5.2.1): CreateFleet always takes the first override and
//! never fills `Errors[]`, and it ignores `ClientToken` (a second call with the same token
//! launches a second instance, unlike EC2). Capacity errors and throttling are therefore
//! injected with SDK interceptors that rewrite the HTTP response.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_ec2::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_sdk_ec2::types::{
    InstanceType as Ec2InstanceType, RequestLaunchTemplateData, ResourceType, Tag, TagSpecification,
};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use joiner_apis::AmiFamily;
use joiner_aws::allocatable::Arch;
use joiner_aws::ami::{ssm_parameter_path, AmiResolver, AmiVariant, DEFAULT_SSM_PREFIX};
use joiner_aws::clock::ManualClock;
use joiner_aws::discovery::{
    per_zone_best, zones, DiscoveryError, SecurityGroupDiscovery, Subnet, SubnetDiscovery,
    DISCOVERY_TTL,
};
use joiner_aws::fleet::{Fleet, FleetRequest, LaunchError};
use joiner_aws::instances::{Instances, TerminateRefusal};
use joiner_aws::launch_template::{name_prefix, LaunchTemplateRef, LaunchTemplates};
use joiner_aws::tags::cluster_tag_key;
use joiner_aws::unavailable::{OfferingKey, UnavailableOfferings, DEFAULT_TTL};
use joiner_aws::AwsClients;
use joiner_core::CapacityType;
use joiner_moto::{MotoServer, MotoSession};

const CLUSTER: &str = "c1";
const DISCOVERY: &str = "joiner.sh/discovery";

async fn setup() -> (MotoSession, AwsClients) {
    let moto = MotoServer::session().expect("moto server");
    let cfg = moto.sdk_config("us-east-1").await;
    let clients = AwsClients::from_config(&cfg).expect("clients");
    (moto, clients)
}

fn sel(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A tag specification, or none for no tags (EC2 rejects an empty one).
fn tag_spec(rt: ResourceType, tags: &[(&str, &str)]) -> Option<Vec<TagSpecification>> {
    if tags.is_empty() {
        return None;
    }
    let mut b = TagSpecification::builder().resource_type(rt);
    for (k, v) in tags {
        b = b.tags(Tag::builder().key(*k).value(*v).build());
    }
    Some(vec![b.build()])
}

/// A VPC with tagged subnets in three zones (two in `a`, the /20 one has more free addresses)
/// and one untagged subnet. Returns the tagged subnets' IDs (a-small, a-big, b, c) and the
/// untagged one.
async fn network(ec2: &aws_sdk_ec2::Client) -> (Vec<String>, String) {
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("vpc");
    let vpc_id = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let mut tagged = Vec::new();
    for (cidr, zone) in [
        ("10.0.1.0/24", "us-east-1a"),
        ("10.0.16.0/20", "us-east-1a"),
        ("10.0.2.0/24", "us-east-1b"),
        ("10.0.3.0/24", "us-east-1c"),
    ] {
        let s = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .set_tag_specifications(tag_spec(
                ResourceType::Subnet,
                &[(DISCOVERY, CLUSTER), ("tier", "private")],
            ))
            .send()
            .await
            .expect("subnet");
        tagged.push(
            s.subnet()
                .and_then(|s| s.subnet_id())
                .expect("id")
                .to_string(),
        );
    }
    let untagged = ec2
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.0.4.0/24")
        .availability_zone("us-east-1a")
        .send()
        .await
        .expect("subnet");
    let untagged = untagged
        .subnet()
        .and_then(|s| s.subnet_id())
        .expect("id")
        .to_string();
    (tagged, untagged)
}

fn ids(subnets: &[Subnet]) -> Vec<String> {
    subnets.iter().map(|s| s.id.clone()).collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn subnets_by_tag_wildcard_and_id_with_the_best_subnet_per_zone() {
    let (_moto, clients) = setup().await;
    let (tagged, untagged) = network(&clients.ec2).await;
    let clock = ManualClock::new();
    let d = SubnetDiscovery::with_clock(clients.ec2.clone(), DISCOVERY_TTL, clock.clone());

    let by_value = d
        .discover("default", &sel(&[(DISCOVERY, CLUSTER)]))
        .await
        .expect("by value");
    assert_eq!(ids(&by_value), sorted(tagged.clone()));
    assert!(!ids(&by_value).contains(&untagged));
    let z: Vec<String> = zones(&by_value).into_iter().collect();
    assert_eq!(z, ["us-east-1a", "us-east-1b", "us-east-1c"]);
    let best = per_zone_best(&by_value);
    assert_eq!(best.len(), 3);
    assert_eq!(best[0].zone, "us-east-1a");
    assert_eq!(best[0].id, tagged[1], "the /20 has more free addresses");
    assert!(best[0].available_ips > 1000);

    let wildcard = d
        .discover("default", &sel(&[(DISCOVERY, "*"), ("tier", "private")]))
        .await
        .expect("wildcard");
    assert_eq!(ids(&wildcard), sorted(tagged.clone()));

    let by_id = d
        .discover(
            "default",
            &sel(&[("aws-ids", &format!("{},{}", tagged[2], untagged))]),
        )
        .await
        .expect("by id");
    assert_eq!(
        ids(&by_id),
        sorted(vec![tagged[2].clone(), untagged.clone()])
    );

    let none = d
        .discover("gpu", &sel(&[(DISCOVERY, "other-cluster")]))
        .await
        .expect_err("no match");
    assert!(matches!(&none, DiscoveryError::NoMatch { template, .. } if template == "gpu"));
    assert!(none.to_string().contains("other-cluster"), "{none}");
    assert!(matches!(
        d.discover("gpu", &BTreeMap::new()).await,
        Err(DiscoveryError::EmptySelector { .. })
    ));

    // Cached for the TTL: a new tagged subnet shows up only after it.
    let vpc_id = by_value[0].vpc_id.clone();
    clients
        .ec2
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.0.5.0/24")
        .availability_zone("us-east-1b")
        .set_tag_specifications(tag_spec(ResourceType::Subnet, &[(DISCOVERY, CLUSTER)]))
        .send()
        .await
        .expect("subnet");
    let sel1 = sel(&[(DISCOVERY, CLUSTER)]);
    assert_eq!(d.discover("default", &sel1).await.expect("cached").len(), 4);
    clock.advance(DISCOVERY_TTL);
    assert_eq!(d.discover("default", &sel1).await.expect("fresh").len(), 5);
}

#[tokio::test]
async fn security_groups_by_tag_wildcard_and_id() {
    let (_moto, clients) = setup().await;
    let ec2 = &clients.ec2;
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.1.0.0/16")
        .send()
        .await
        .expect("vpc");
    let vpc_id = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let mut made = Vec::new();
    for (name, tags) in [
        ("nodes", vec![(DISCOVERY, CLUSTER)]),
        ("extra", vec![(DISCOVERY, "other")]),
        ("plain", vec![]),
    ] {
        let g = ec2
            .create_security_group()
            .group_name(name)
            .description(name)
            .vpc_id(&vpc_id)
            .set_tag_specifications(tag_spec(ResourceType::SecurityGroup, &tags))
            .send()
            .await
            .expect("sg");
        made.push(g.group_id().expect("id").to_string());
    }
    let d = SecurityGroupDiscovery::new(ec2.clone());
    let by_value = d
        .discover("default", &sel(&[(DISCOVERY, CLUSTER)]))
        .await
        .expect("by value");
    assert_eq!(by_value.len(), 1);
    assert_eq!(by_value[0].id, made[0]);
    assert_eq!(by_value[0].name, "nodes");

    let wildcard = d
        .discover("default", &sel(&[(DISCOVERY, "*")]))
        .await
        .expect("wildcard");
    let got: Vec<String> = wildcard.iter().map(|g| g.id.clone()).collect();
    assert_eq!(got, sorted(vec![made[0].clone(), made[1].clone()]));

    let by_id = d
        .discover("default", &sel(&[("aws-ids", &made[2])]))
        .await
        .expect("by id");
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].name, "plain");

    let err = d
        .discover("default", &sel(&[(DISCOVERY, "nobody")]))
        .await
        .expect_err("no match");
    assert!(err.to_string().contains("NodeTemplate `default`"), "{err}");
}

/// One of moto's built-in amazon x86_64 images.
async fn builtin_ami(ec2: &aws_sdk_ec2::Client) -> (String, String) {
    let out = ec2
        .describe_images()
        .owners("amazon")
        .send()
        .await
        .expect("images");
    let img = out
        .images()
        .iter()
        .find(|i| i.architecture().map(|a| a.as_str()) == Some("x86_64") && i.name().is_some())
        .expect("a built-in x86_64 image");
    (
        img.image_id().expect("id").to_string(),
        img.name().expect("name").to_string(),
    )
}

#[tokio::test]
async fn amis_from_ssm_under_a_test_prefix_and_from_selectors() {
    let (_moto, clients) = setup().await;
    let (image_id, image_name) = builtin_ami(&clients.ec2).await;
    let full = ssm_parameter_path(
        DEFAULT_SSM_PREFIX,
        AmiFamily::Al2023,
        "1.31",
        Arch::Amd64,
        AmiVariant::Standard,
    )
    .expect("AL2023 path");
    let relative = full
        .strip_prefix("/aws/service/")
        .expect("under the default prefix")
        .to_string();
    clients
        .ssm
        .put_parameter()
        .name(format!("/joiner-test/service/{relative}"))
        .value(&image_id)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .expect("put parameter");

    let clock = ManualClock::new();
    let r = AmiResolver::with_clock(&clients, "/joiner-test/service", clock.clone());
    // Public paths start with /aws/service: they are moved under the configured prefix.
    assert_eq!(
        r.parameter_name(&full),
        format!("/joiner-test/service/{relative}")
    );
    let ami = r.resolve_parameter(&full).await.expect("resolve");
    assert_eq!(ami.id, image_id);
    assert_eq!(ami.name, image_name);
    assert_eq!(ami.arch, Some(Arch::Amd64));
    assert!(!ami.creation_date.is_empty());
    assert_eq!(r.resolve_parameter(&relative).await.expect("cached"), ami);
    let by_family = r
        .resolve_default(AmiFamily::Al2023, "1.31", Arch::Amd64, AmiVariant::Standard)
        .await
        .expect("resolve by family");
    assert_eq!(by_family, ami);

    let missing = r
        .resolve_parameter(
            "eks/optimized-ami/9.99/amazon-linux-2023/x86_64/standard/recommended/image_id",
        )
        .await
        .expect_err("missing");
    assert!(missing.to_string().contains("9.99"), "{missing}");

    // amiSelector: by tag, by name, by id.
    clients
        .ec2
        .create_tags()
        .resources(&image_id)
        .tags(
            Tag::builder()
                .key("joiner.sh/ami")
                .key("joiner.sh/ami")
                .value("nodes")
                .build(),
        )
        .send()
        .await
        .expect("tag image");
    let by_tag = r
        .resolve_selector("default", &sel(&[("joiner.sh/ami", "nodes")]))
        .await
        .expect("by tag");
    assert_eq!(by_tag.len(), 1);
    assert_eq!(by_tag[0].id, image_id);
    let by_name = r
        .resolve_selector("default", &sel(&[("aws::name", &image_name)]))
        .await
        .expect("by name");
    assert_eq!(
        by_name.first().map(|a| a.id.as_str()),
        Some(image_id.as_str())
    );
    let by_id = r
        .resolve_selector("default", &sel(&[("aws-ids", &image_id)]))
        .await
        .expect("by id");
    assert_eq!(by_id.len(), 1);
    let none = r
        .resolve_selector("default", &sel(&[("joiner.sh/ami", "none")]))
        .await
        .expect_err("no match");
    assert!(none.to_string().contains("no AMI matches"), "{none}");
}

/// Counts requests whose form body names `action`, and remembers their bodies.
#[derive(Debug, Default)]
struct Recorder {
    action: &'static str,
    calls: AtomicUsize,
    bodies: Mutex<Vec<String>>,
}

#[derive(Debug, Clone)]
struct Record(Arc<Recorder>);

fn body_has_action(body: Option<&[u8]>, action: &str) -> Option<String> {
    let body = String::from_utf8_lossy(body?).to_string();
    body.split('&')
        .any(|kv| kv == format!("Action={action}"))
        .then_some(body)
}

impl Intercept for Record {
    fn name(&self) -> &'static str {
        "Record"
    }

    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(body) = body_has_action(ctx.request().body().bytes(), self.0.action) {
            self.0.calls.fetch_add(1, Ordering::SeqCst);
            self.0.bodies.lock().expect("lock").push(body);
        }
        Ok(())
    }
}

fn with_interceptor(clients: &AwsClients, i: impl Intercept + 'static) -> aws_sdk_ec2::Client {
    aws_sdk_ec2::Client::from_conf(clients.ec2.config().to_builder().interceptor(i).build())
}

fn lt_data(image_id: &str) -> RequestLaunchTemplateData {
    RequestLaunchTemplateData::builder()
        .image_id(image_id)
        .instance_type(Ec2InstanceType::M5Large)
        .build()
}

#[tokio::test]
async fn launch_templates_are_created_reused_and_deleted_when_unused() {
    let (_moto, clients) = setup().await;
    let (image_id, _) = builtin_ami(&clients.ec2).await;
    let creates = Arc::new(Recorder {
        action: "CreateLaunchTemplate",
        ..Recorder::default()
    });
    let ec2 = with_interceptor(&clients, Record(creates.clone()));
    let lts = LaunchTemplates::new(ec2.clone(), CLUSTER);
    let name = format!("{}abc123", name_prefix(CLUSTER));
    let tags = sel(&[("team", "infra"), ("joiner.sh/provisioner-name", "web")]);

    let first = lts
        .ensure(&name, lt_data(&image_id), &tags)
        .await
        .expect("create");
    assert_eq!(first.name, name);
    assert_eq!(creates.calls.load(Ordering::SeqCst), 1);
    let again = lts
        .ensure(&name, lt_data(&image_id), &tags)
        .await
        .expect("reuse");
    assert_eq!(again, first);
    // A fresh instance (a restarted controller) finds it in EC2 instead of creating it.
    let restarted = LaunchTemplates::new(ec2.clone(), CLUSTER);
    let found = restarted
        .ensure(&name, lt_data(&image_id), &tags)
        .await
        .expect("find");
    assert_eq!(found, first);
    assert_eq!(creates.calls.load(Ordering::SeqCst), 1, "no second create");

    let described = clients
        .ec2
        .describe_launch_templates()
        .launch_template_ids(&first.id)
        .send()
        .await
        .expect("describe");
    let t: BTreeMap<_, _> = described.launch_templates()[0]
        .tags()
        .iter()
        .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()))
        .collect();
    assert_eq!(t.get(cluster_tag_key(CLUSTER).as_str()), Some(&"owned"));
    assert_eq!(t.get("joiner.sh/cluster"), Some(&CLUSTER));
    assert_eq!(t.get("joiner.sh/managed-by"), Some(&"joiner"));
    assert_eq!(t.get("team"), Some(&"infra"));

    let kept_name = format!("{}keep", name_prefix(CLUSTER));
    let kept = lts
        .ensure(&kept_name, lt_data(&image_id), &tags)
        .await
        .expect("create");
    // Foreign templates: one without tags, one with the cluster tag but not joiner's, one
    // with the cluster and managed-by tags but no provisioner, one without the fixed-key
    // cluster tag (an older joiner's: the IAM policy would refuse its deletion).
    for (foreign, tags) in [
        ("hand-made", vec![]),
        (
            "other-tool",
            vec![(cluster_tag_key(CLUSTER), "owned".to_string())],
        ),
        (
            "no-provisioner",
            vec![
                (cluster_tag_key(CLUSTER), "owned".to_string()),
                ("joiner.sh/cluster".to_string(), CLUSTER.to_string()),
                ("joiner.sh/managed-by".to_string(), "joiner".to_string()),
            ],
        ),
        (
            "older-joiner",
            vec![
                (cluster_tag_key(CLUSTER), "owned".to_string()),
                ("joiner.sh/managed-by".to_string(), "joiner".to_string()),
                (
                    "joiner.sh/provisioner-name".to_string(),
                    "default".to_string(),
                ),
            ],
        ),
    ] {
        let tags: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        clients
            .ec2
            .create_launch_template()
            .launch_template_name(foreign)
            .launch_template_data(lt_data(&image_id))
            .set_tag_specifications(tag_spec(ResourceType::LaunchTemplate, &tags))
            .send()
            .await
            .expect("foreign template");
    }

    let keep: HashSet<String> = [kept_name.clone()].into();
    let deleted = lts.delete_unused(&keep).await.expect("delete");
    assert_eq!(deleted, std::slice::from_ref(&name));
    let left = clients
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("describe");
    let mut names: Vec<&str> = left
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "hand-made",
            kept_name.as_str(),
            "no-provisioner",
            "older-joiner",
            "other-tool"
        ]
    );
    assert_eq!(kept.name, kept_name);
    // Deleted templates are forgotten: ensure creates it again.
    lts.ensure(&name, lt_data(&image_id), &tags)
        .await
        .expect("recreate");
    assert_eq!(creates.calls.load(Ordering::SeqCst), 3);
}

struct LaunchFixture {
    template: LaunchTemplateRef,
    subnets: Vec<Subnet>,
    image_id: String,
}

async fn launch_fixture(clients: &AwsClients) -> LaunchFixture {
    let (image_id, _) = builtin_ami(&clients.ec2).await;
    network(&clients.ec2).await;
    let subnets = SubnetDiscovery::new(clients.ec2.clone())
        .discover("default", &sel(&[(DISCOVERY, CLUSTER)]))
        .await
        .expect("subnets");
    let template = LaunchTemplates::new(clients.ec2.clone(), CLUSTER)
        .ensure(
            &format!("{}fleet", name_prefix(CLUSTER)),
            lt_data(&image_id),
            &BTreeMap::new(),
        )
        .await
        .expect("template");
    LaunchFixture {
        template,
        subnets,
        image_id,
    }
}

fn fleet_request(f: &LaunchFixture, claim: &str, capacity_type: CapacityType) -> FleetRequest {
    FleetRequest {
        client_token: format!("uid-{claim}"),
        launch_template: f.template.clone(),
        capacity_type,
        candidates: vec![
            ("m5.large".to_string(), 0.096),
            ("c5.large".to_string(), 0.085),
            ("t3.large".to_string(), 0.083),
        ],
        subnets: f.subnets.clone(),
        tags: sel(&[
            (&cluster_tag_key(CLUSTER), "owned"),
            ("joiner.sh/cluster", CLUSTER),
            ("joiner.sh/nodeclaim", claim),
            ("joiner.sh/provisioner-name", "default"),
        ]),
        more_templates: Vec::new(),
    }
}

#[tokio::test]
async fn create_fleet_launches_a_candidate_in_a_chosen_subnet_with_tags() {
    let (_moto, clients) = setup().await;
    let f = launch_fixture(&clients).await;
    let fleets = Arc::new(Recorder {
        action: "CreateFleet",
        ..Recorder::default()
    });
    let ec2 = with_interceptor(&clients, Record(fleets.clone()));
    let fleet = Fleet::new(&ec2, Arc::new(UnavailableOfferings::default()));
    let req = fleet_request(&f, "claim-1", CapacityType::OnDemand);

    let launched = fleet.launch(&req).await.expect("launch");
    let candidates: Vec<&str> = req.candidates.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        candidates.contains(&launched.instance_type.as_str()),
        "{launched:?}"
    );
    assert_eq!(launched.capacity_type, CapacityType::OnDemand);
    let chosen = per_zone_best(&f.subnets);
    assert!(
        chosen.iter().any(|s| s.zone == launched.zone),
        "{launched:?}"
    );

    let instances = Instances::new(clients.ec2.clone(), CLUSTER);
    let got = instances
        .get(&launched.instance_id)
        .await
        .expect("get")
        .expect("instance exists");
    assert_eq!(got.instance_type, launched.instance_type);
    assert_eq!(got.zone, launched.zone);
    assert_eq!(
        got.tags.get(&cluster_tag_key(CLUSTER)).map(String::as_str),
        Some("owned")
    );
    assert_eq!(
        got.tags.get("joiner.sh/nodeclaim").map(String::as_str),
        Some("claim-1")
    );
    assert_eq!(
        got.tags
            .get("joiner.sh/provisioner-name")
            .map(String::as_str),
        Some("default")
    );
    let found = instances.find_by_claim("claim-1").await.expect("find");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, launched.instance_id);
    assert!(instances
        .find_by_claim("claim-2")
        .await
        .expect("find")
        .is_empty());
    let states = instances
        .describe_state(&[
            launched.instance_id.clone(),
            "i-0000000000000dead".to_string(),
        ])
        .await
        .expect("state");
    assert_eq!(states.len(), 1);
    assert!(matches!(
        states[&launched.instance_id].as_str(),
        "pending" | "running"
    ));

    // The request: instant, capacity 1, the token, overrides type × best zonal subnet, the
    // on-demand strategy and tags for instance, volume and fleet.
    let body = fleets.bodies.lock().expect("lock")[0].clone();
    for expected in [
        "Type=instant",
        "ClientToken=uid-claim-1",
        "TargetCapacitySpecification.TotalTargetCapacity=1",
        "TargetCapacitySpecification.DefaultTargetCapacityType=on-demand",
        "OnDemandOptions.AllocationStrategy=lowest-price",
        "TagSpecification.1.ResourceType=instance",
        "TagSpecification.2.ResourceType=volume",
        "TagSpecification.3.ResourceType=fleet",
    ] {
        assert!(
            body.split('&').any(|kv| kv == expected),
            "{expected} missing in {body}"
        );
    }
    for s in &chosen {
        assert!(body.contains(&format!("SubnetId={}", s.id)), "{}", s.id);
    }
    for s in f.subnets.iter().filter(|s| !chosen.contains(s)) {
        let unwanted = format!("SubnetId={}&", s.id);
        assert!(
            !body.contains(&unwanted),
            "a subnet that is not its zone's best: {}",
            s.id
        );
    }
    assert_eq!(body.matches("InstanceType=").count(), 3 * 3);

    // Idempotency is EC2's: moto ignores ClientToken and launches again, so only the token's
    // presence is checked (above). Against EC2 the same token returns the same fleet.
    let spot = fleet
        .launch(&fleet_request(&f, "claim-2", CapacityType::Spot))
        .await
        .expect("spot launch");
    assert_eq!(spot.capacity_type, CapacityType::Spot);
    let body = fleets.bodies.lock().expect("lock")[1].clone();
    assert!(body.contains("SpotOptions.AllocationStrategy=price-capacity-optimized"));
    assert_eq!(instances.list_by_cluster().await.expect("list").len(), 2);
    // Termination asks about its objects only: by claim, by instance ID, each once.
    let ids = |found: Vec<joiner_aws::instances::Instance>| {
        let mut ids: Vec<String> = found.into_iter().map(|i| i.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(instances
            .list_some(&["claim-1".into()], &[])
            .await
            .expect("by claim")),
        vec![launched.instance_id.clone()]
    );
    assert_eq!(
        ids(instances
            .list_some(&[], std::slice::from_ref(&spot.instance_id))
            .await
            .expect("by id")),
        vec![spot.instance_id.clone()]
    );
    let mut both = vec![launched.instance_id.clone(), spot.instance_id.clone()];
    both.sort();
    assert_eq!(
        ids(instances
            .list_some(
                &["claim-1".into(), "claim-9".into()],
                &[launched.instance_id.clone(), spot.instance_id.clone()]
            )
            .await
            .expect("both")),
        both
    );
    assert!(instances
        .list_some(&["claim-9".into()], &[])
        .await
        .expect("none")
        .is_empty());
    assert!(!f.image_id.is_empty());
}

/// Replaces the answer of matching calls: the first `times` ones get `status` and `body`.
#[derive(Debug, Clone)]
struct Rewrite {
    action: &'static str,
    times: usize,
    status: u16,
    body: String,
    seen: Arc<AtomicUsize>,
}

/// Set on an attempt whose request is the rewritten action (the request is no longer in the
/// context once the response arrives).
#[derive(Debug, Clone)]
struct Targeted;

impl Storable for Targeted {
    type Storer = StoreReplace<Self>;
}

impl Intercept for Rewrite {
    fn name(&self) -> &'static str {
        "Rewrite"
    }

    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if body_has_action(ctx.request().body().bytes(), self.action).is_some() {
            cfg.interceptor_state().store_put(Targeted);
        } else {
            cfg.interceptor_state().unset::<Targeted>();
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<Targeted>().is_none() {
            return Ok(());
        }
        if self.seen.fetch_add(1, Ordering::SeqCst) >= self.times {
            return Ok(());
        }
        let resp = ctx.response_mut();
        *resp.status_mut() = aws_smithy_runtime_api::http::StatusCode::try_from(self.status)?;
        *resp.body_mut() = SdkBody::from(self.body.clone());
        Ok(())
    }
}

fn ice_body(subnets: &[Subnet]) -> String {
    let items: String = subnets
        .iter()
        .map(|s| {
            format!(
                "<item><launchTemplateAndOverrides><launchTemplateSpecification>\
                 <launchTemplateId>lt-0123</launchTemplateId><version>1</version>\
                 </launchTemplateSpecification><overrides><instanceType>m5.large</instanceType>\
                 <subnetId>{}</subnetId><availabilityZone>{}</availabilityZone></overrides>\
                 </launchTemplateAndOverrides><lifecycle>on-demand</lifecycle>\
                 <errorCode>InsufficientInstanceCapacity</errorCode>\
                 <errorMessage>We currently do not have sufficient m5.large capacity.</errorMessage>\
                 </item>",
                s.id, s.zone
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
         <requestId>00000000-0000-0000-0000-000000000000</requestId>\
         <fleetId>fleet-00000000-0000-0000-0000-000000000000</fleetId>\
         <errorSet>{items}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
    )
}

#[tokio::test]
async fn insufficient_capacity_is_typed_and_marks_offerings_for_three_minutes() {
    let (_moto, clients) = setup().await;
    let f = launch_fixture(&clients).await;
    let best = per_zone_best(&f.subnets);
    let ec2 = with_interceptor(
        &clients,
        Rewrite {
            action: "CreateFleet",
            times: usize::MAX,
            status: 200,
            body: ice_body(&best[..2]),
            seen: Arc::default(),
        },
    );
    let clock = ManualClock::new();
    let unavailable = Arc::new(UnavailableOfferings::new(DEFAULT_TTL, clock.clone()));
    let fleet = Fleet::new(&ec2, unavailable.clone());
    let req = fleet_request(&f, "claim-ice", CapacityType::OnDemand);

    let err = fleet.launch(&req).await.expect_err("no capacity");
    let LaunchError::InsufficientCapacity {
        unavailable: marked,
        code,
        ..
    } = &err
    else {
        panic!("expected InsufficientCapacity, got {err:?}");
    };
    assert_eq!(code, "InsufficientInstanceCapacity");
    let expected: Vec<OfferingKey> = best[..2]
        .iter()
        .map(|s| OfferingKey::new("m5.large", &s.zone, CapacityType::OnDemand))
        .collect();
    assert_eq!(marked, &expected);
    assert_eq!(unavailable.current(), expected);
    assert!(unavailable.is_unavailable("m5.large", &best[0].zone, CapacityType::OnDemand));
    assert!(!unavailable.is_unavailable("m5.large", &best[0].zone, CapacityType::Spot));
    assert!(!unavailable.is_unavailable("m5.large", &best[2].zone, CapacityType::OnDemand));

    clock.advance(DEFAULT_TTL);
    assert!(unavailable.current().is_empty());
}

#[tokio::test]
async fn other_fleet_errors_surface_with_code_and_message() {
    let (_moto, clients) = setup().await;
    let f = launch_fixture(&clients).await;
    let body = ice_body(&f.subnets[..1])
        .replace("InsufficientInstanceCapacity", "UnauthorizedOperation")
        .replace("We currently", "You are not authorized; we currently");
    let ec2 = with_interceptor(
        &clients,
        Rewrite {
            action: "CreateFleet",
            times: usize::MAX,
            status: 200,
            body,
            seen: Arc::default(),
        },
    );
    let unavailable = Arc::new(UnavailableOfferings::default());
    let fleet = Fleet::new(&ec2, unavailable.clone());
    let err = fleet
        .launch(&fleet_request(&f, "claim-x", CapacityType::OnDemand))
        .await
        .expect_err("unauthorized");
    assert!(
        matches!(&err, LaunchError::Api { code, message, .. }
            if code == "UnauthorizedOperation" && message.contains("not authorized")),
        "{err:?}"
    );
    assert!(unavailable.current().is_empty());
}

#[tokio::test]
async fn throttled_create_fleet_is_retried_until_it_succeeds() {
    let (_moto, clients) = setup().await;
    let f = launch_fixture(&clients).await;
    let seen = Arc::new(AtomicUsize::new(0));
    let throttle = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
        <Response><Errors><Error><Code>RequestLimitExceeded</Code>\
        <Message>Request limit exceeded.</Message></Error></Errors>\
        <RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>";
    let ec2 = with_interceptor(
        &clients,
        Rewrite {
            action: "CreateFleet",
            times: 2,
            status: 503,
            body: throttle.to_string(),
            seen: seen.clone(),
        },
    );
    let fleet = Fleet::new(&ec2, Arc::new(UnavailableOfferings::default()));
    let launched = fleet
        .launch(&fleet_request(&f, "claim-t", CapacityType::OnDemand))
        .await
        .expect("launch after throttling");
    assert!(launched.instance_id.starts_with("i-"));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "two throttled attempts, then success"
    );

    // Without retries left the code surfaces.
    let always = with_interceptor(
        &clients,
        Rewrite {
            action: "CreateFleet",
            times: usize::MAX,
            status: 503,
            body: throttle.to_string(),
            seen: Arc::default(),
        },
    );
    let err = Fleet::new(&always, Arc::new(UnavailableOfferings::default()))
        .launch(&fleet_request(&f, "claim-u", CapacityType::OnDemand))
        .await
        .expect_err("throttled");
    assert!(
        matches!(&err, LaunchError::Api { code, .. } if code == "RequestLimitExceeded"),
        "{err:?}"
    );
}

#[tokio::test]
async fn terminate_refuses_instances_without_the_cluster_tag() {
    let (_moto, clients) = setup().await;
    let f = launch_fixture(&clients).await;
    let owned = Fleet::new(&clients.ec2, Arc::new(UnavailableOfferings::default()))
        .launch(&fleet_request(&f, "claim-1", CapacityType::OnDemand))
        .await
        .expect("launch");
    let foreign = clients
        .ec2
        .run_instances()
        .image_id(&f.image_id)
        .instance_type(Ec2InstanceType::T3Micro)
        .min_count(1)
        .max_count(1)
        .subnet_id(&f.subnets[0].id)
        .set_tag_specifications(tag_spec(
            ResourceType::Instance,
            &[
                ("joiner.sh/nodeclaim", "claim-1"),
                ("kubernetes.io/cluster/other", "owned"),
            ],
        ))
        .send()
        .await
        .expect("run instances");
    let foreign = foreign.instances()[0]
        .instance_id()
        .expect("id")
        .to_string();

    let instances = Instances::new(clients.ec2.clone(), CLUSTER);
    let listed: Vec<String> = instances
        .list_by_cluster()
        .await
        .expect("list")
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(listed, std::slice::from_ref(&owned.instance_id));
    assert_eq!(
        instances
            .find_by_claim("claim-1")
            .await
            .expect("find")
            .len(),
        1
    );

    let missing = "i-0123456789abcdef0".to_string();
    let outcome = instances
        .terminate(&[
            foreign.clone(),
            owned.instance_id.clone(),
            missing.clone(),
            foreign.clone(),
        ])
        .await
        .expect("terminate");
    assert_eq!(outcome.terminated, std::slice::from_ref(&owned.instance_id));
    assert_eq!(
        outcome.refused,
        [
            TerminateRefusal::NotOwned {
                instance_id: foreign.clone(),
                missing: format!("{}=owned", cluster_tag_key(CLUSTER)),
            },
            TerminateRefusal::NotFound {
                instance_id: missing,
            },
        ]
    );
    assert!(outcome.refused[0].to_string().contains(&foreign));

    let states = instances
        .describe_state(&[foreign.clone(), owned.instance_id.clone()])
        .await
        .expect("state");
    assert_eq!(states[&foreign], "running");
    assert!(matches!(
        states[&owned.instance_id].as_str(),
        "shutting-down" | "terminated"
    ));
    // moto may still list the instance while it shuts down; it must not be running.
    let left = instances.list_by_cluster().await.expect("list");
    assert!(left.iter().all(|i| i.state != "running"), "{left:?}");
}

#[tokio::test]
async fn templates_unused_for_their_ttl_are_deleted_and_foreign_ones_never() {
    let (_moto, clients) = setup().await;
    let (image_id, _) = builtin_ami(&clients.ec2).await;
    let lts = LaunchTemplates::new(clients.ec2.clone(), CLUSTER);
    let name = format!("{}stale", name_prefix(CLUSTER));
    let tags = sel(&[("joiner.sh/provisioner-name", "web")]);
    lts.ensure(&name, lt_data(&image_id), &tags)
        .await
        .expect("create");
    clients
        .ec2
        .create_launch_template()
        .launch_template_name("other-tool")
        .launch_template_data(lt_data(&image_id))
        .set_tag_specifications(tag_spec(
            ResourceType::LaunchTemplate,
            &[(&cluster_tag_key(CLUSTER), "owned")],
        ))
        .send()
        .await
        .expect("foreign template");
    // Used a moment ago: kept for an hour.
    let hour = std::time::Duration::from_secs(3600);
    assert!(lts.delete_stale(hour).await.expect("sweep").is_empty());
    // A restarted controller has never used it: it counts from first sight, so it is kept too.
    let restarted = LaunchTemplates::new(clients.ec2.clone(), CLUSTER);
    assert!(restarted
        .delete_stale(hour)
        .await
        .expect("sweep")
        .is_empty());
    // Unused for longer than the TTL: deleted; the foreign template stays.
    let deleted = lts
        .delete_stale(std::time::Duration::ZERO)
        .await
        .expect("sweep");
    assert_eq!(deleted, std::slice::from_ref(&name));
    let left = clients
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("describe");
    let names: Vec<&str> = left
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name())
        .collect();
    assert_eq!(names, ["other-tool"]);
}
