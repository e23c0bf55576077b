//! `AwsCloudProvider::resolve_node_template` against moto through the real SDK: what a
//! NodeTemplate's selectors and AMI family resolve to, and one error per thing that can be
//! missing, each naming the NodeTemplate and the field.

use joiner_apis::NodeTemplate;
use joiner_aws::allocatable::Arch;
use joiner_aws::ami::AmiVariant;
use joiner_aws::testing::{self, Environment};
use joiner_aws::{AwsClients, AwsCloudProvider, ProviderError, ResolveFailure};
use joiner_moto::{MotoServer, MotoSession};

const CLUSTER: &str = "c1";
const PREFIX: &str = "/joiner-test/service";
const K8S: &str = "1.31";

fn template(spec: &str) -> NodeTemplate {
    let yaml = format!("apiVersion: joiner.sh/v1alpha1\nkind: NodeTemplate\nmetadata: {{name: nt}}\nspec: {spec}\n");
    serde_yaml::from_str(&yaml).expect("node template parses")
}

const DISCOVERED: &str =
    "{subnetSelector: {joiner.sh/discovery: c1}, securityGroupSelector: {joiner.sh/discovery: c1}";

async fn setup(moto: &MotoSession) -> (AwsCloudProvider, Environment) {
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let env = testing::environment(&clients, CLUSTER, PREFIX, K8S)
        .await
        .expect("environment");
    let (p, _) = testing::provider(
        &clients,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        Vec::new(),
        Vec::new(),
    );
    (p, env)
}

#[tokio::test]
async fn selectors_and_the_default_ami_resolve_to_what_the_account_holds() {
    let moto = MotoServer::session().expect("moto server");
    let (p, env) = setup(&moto).await;
    let nt = template(&format!("{DISCOVERED}, amiFamily: AL2023}}"));
    let resolved = p.resolve_node_template(&nt).await.expect("resolves");

    let mut want_subnets = env.subnets.clone();
    want_subnets.sort();
    let got_subnets: Vec<&str> = resolved.subnets.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(got_subnets, want_subnets, "the untagged subnet is left out");
    assert_eq!(resolved.zones(), ["us-east-1a", "us-east-1b"]);
    assert_eq!(resolved.security_groups.len(), 1);
    assert_eq!(resolved.security_groups[0].id, env.security_group);
    assert_eq!(resolved.security_groups[0].name.as_deref(), Some("nodes"));

    // Only the amd64 standard parameter exists under the test prefix: that AMI is in use, and
    // the other builds the catalog needs (arm64 at least) are reported, not fatal.
    assert_eq!(resolved.amis.len(), 1, "{:?}", resolved.amis);
    let ami = &resolved.amis[0];
    assert_eq!(ami.id, env.image_id);
    assert_eq!(
        (ami.arch, ami.variant),
        (Arch::Amd64, Some(AmiVariant::Standard))
    );
    let status = ami.to_status();
    assert_eq!(status.requirements[0].key, "kubernetes.io/arch");
    assert_eq!(status.requirements[0].values, ["amd64"]);
    let arm = resolved
        .unresolved
        .iter()
        .find(|u| (u.arch, u.variant) == (Arch::Arm64, AmiVariant::Standard))
        .expect("the arm64 standard AMI is needed and missing");
    assert!(
        arm.reason.contains("amazon-linux-2023/arm64/standard") && arm.reason.contains("not found"),
        "{}",
        arm.reason
    );
}

#[tokio::test]
async fn an_ami_selector_serves_its_architecture() {
    let moto = MotoServer::session().expect("moto server");
    let (p, env) = setup(&moto).await;
    let nt = template(&format!(
        "{DISCOVERED}, amiFamily: Custom, amiSelector: {{aws-ids: {}}}}}",
        env.image_id
    ));
    let resolved = p.resolve_node_template(&nt).await.expect("resolves");
    assert_eq!(resolved.amis.len(), 1);
    assert_eq!(resolved.amis[0].id, env.image_id);
    assert_eq!(resolved.amis[0].variant, None);
    assert_eq!(resolved.amis[0].requirements.len(), 1);
    assert_eq!(resolved.amis[0].requirements[0].values, ["amd64"]);
    assert!(resolved.unresolved.is_empty());

    let none = template(&format!(
        "{DISCOVERED}, amiSelector: {{aws::name: no-such-image-*}}}}"
    ));
    let err = p
        .resolve_node_template(&none)
        .await
        .expect_err("nothing selected");
    assert!(
        matches!(err, ProviderError::NoAmiSelected { .. }),
        "{err:?}"
    );
    assert_eq!(err.resolve_failure(), Some(ResolveFailure::Ami));
    assert_eq!(
        err.to_string(),
        "NodeTemplate `nt`: spec.amiSelector {aws::name: no-such-image-*}: no AMI matches"
    );
}

#[tokio::test]
async fn a_selector_that_matches_nothing_names_its_field() {
    let moto = MotoServer::session().expect("moto server");
    let (p, _env) = setup(&moto).await;

    let nt = template(
        "{subnetSelector: {team: nobody}, securityGroupSelector: {joiner.sh/discovery: c1}}",
    );
    let err = p.resolve_node_template(&nt).await.expect_err("no subnet");
    assert_eq!(err.resolve_failure(), Some(ResolveFailure::Subnets));
    assert_eq!(
        err.to_string(),
        "NodeTemplate `nt`: spec.subnetSelector {team: nobody}: no subnet matches"
    );

    let nt = template(
        "{subnetSelector: {aws-ids: subnet-0123456789abcdef0}, securityGroupSelector: {joiner.sh/discovery: c1}}",
    );
    let err = p
        .resolve_node_template(&nt)
        .await
        .expect_err("unknown subnet ID");
    assert_eq!(
        err.resolve_failure(),
        Some(ResolveFailure::Subnets),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("NodeTemplate `nt`: spec.subnetSelector {aws-ids: subnet-0123456789abcdef0}: InvalidSubnetID.NotFound"),
        "{err}"
    );

    let nt = template(
        "{subnetSelector: {joiner.sh/discovery: c1}, securityGroupSelector: {team: nobody}}",
    );
    let err = p.resolve_node_template(&nt).await.expect_err("no group");
    assert_eq!(err.resolve_failure(), Some(ResolveFailure::SecurityGroups));
    assert_eq!(
        err.to_string(),
        "NodeTemplate `nt`: spec.securityGroupSelector {team: nobody}: no security group matches"
    );

    let nt = template("{securityGroupSelector: {joiner.sh/discovery: c1}}");
    let err = p.resolve_node_template(&nt).await.expect_err("empty");
    assert_eq!(err.resolve_failure(), Some(ResolveFailure::Subnets));
    assert!(
        err.to_string()
            .contains("spec.subnetSelector {}: the selector is empty"),
        "{err}"
    );
}

#[tokio::test]
async fn a_missing_ssm_parameter_is_no_ami() {
    let moto = MotoServer::session().expect("moto server");
    let (p, _env) = setup(&moto).await;
    // The environment publishes only AL2023 parameters: no Bottlerocket build resolves.
    let nt = template(&format!("{DISCOVERED}, amiFamily: Bottlerocket}}"));
    let err = p.resolve_node_template(&nt).await.expect_err("no AMI");
    assert!(matches!(err, ProviderError::NoDefaultAmi { .. }), "{err:?}");
    assert_eq!(err.resolve_failure(), Some(ResolveFailure::Ami));
    let text = err.to_string();
    assert!(
        text.starts_with("NodeTemplate `nt`: spec.amiFamily Bottlerocket: no default AMI: SSM parameter `/joiner-test/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id` not found"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unreachable_api_is_not_blamed_on_the_template() {
    let moto = MotoServer::session().expect("moto server");
    let (_, _env) = setup(&moto).await;
    // Port 9 (discard) on loopback: nothing answers, so the call fails without an AWS answer.
    let config = moto
        .sdk_config("us-east-1")
        .await
        .to_builder()
        .endpoint_url("http://127.0.0.1:9")
        .build();
    let clients = AwsClients::from_config(&config).expect("clients");
    let (p, _) = testing::provider(
        &clients,
        testing::provider_config(CLUSTER, PREFIX, K8S),
        Vec::new(),
        Vec::new(),
    );
    let nt = template(&format!("{DISCOVERED}}}"));
    let err = p.resolve_node_template(&nt).await.expect_err("unreachable");
    assert_eq!(err.resolve_failure(), None, "{err}");
    assert!(err.to_string().contains("NoResponse"), "{err}");
}
