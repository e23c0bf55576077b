//! A launch template built from a NodeTemplate and a Provisioner, created in EC2 (moto) through
//! the SDK and read back: what EC2 stores is what the spec says.

use joiner_apis::{NodeTemplate, Provisioner};
use joiner_aws::allocatable::Arch;
use joiner_aws::ami::AmiVariant;
use joiner_aws::launch_template::{build, InstanceFacts, LaunchContext, LaunchTemplates};
use joiner_aws::userdata::ClusterInfo;
use joiner_aws::AwsClients;
use joiner_moto::MotoServer;

const NODE_TEMPLATE: &str = r#"
apiVersion: joiner.sh/v1alpha1
kind: NodeTemplate
metadata: {name: default}
spec:
  amiFamily: AL2023
  instanceProfile: JoinerNodeProfile
  subnetSelector: {team: web}
  securityGroupSelector: {team: web}
  tags: {cost-center: "42"}
"#;

const PROVISIONER: &str = r#"
apiVersion: joiner.sh/v1alpha1
kind: Provisioner
metadata: {name: web}
spec:
  providerRef: {name: default}
  labels: {team: web}
"#;

#[tokio::test]
async fn a_built_spec_is_stored_as_specified_and_reused() {
    let moto = MotoServer::session().expect("moto server");
    let clients = AwsClients::from_config(&moto.sdk_config("us-east-1").await).expect("clients");
    let nt: NodeTemplate = serde_yaml::from_str(NODE_TEMPLATE).expect("node template");
    let prov: Provisioner = serde_yaml::from_str(PROVISIONER).expect("provisioner");
    let cluster = ClusterInfo {
        name: "prod".into(),
        endpoint: "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com".into(),
        ca_bundle: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t".into(),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: None,
    };
    let instance =
        InstanceFacts::from_eni_limits("m5.large", 2, Arch::Amd64, AmiVariant::Standard, 3, 10);
    let resolved = build(&LaunchContext {
        cluster: &cluster,
        node_template: &nt,
        provisioner: &prov,
        instance: &instance,
        image_id: "ami-0123456789abcdef0",
        security_group_ids: &["sg-1".to_string()],
        default_instance_profile: None,
        warm_pool: None,
    })
    .expect("spec");
    let spec = &resolved.spec;

    let templates = LaunchTemplates::new(clients.ec2.clone(), "prod");
    let made = templates.ensure_spec(spec).await.expect("create");
    assert_eq!(made.name, spec.name());
    let again = LaunchTemplates::new(clients.ec2.clone(), "prod")
        .ensure_spec(spec)
        .await
        .expect("reuse");
    assert_eq!(again, made, "a second controller finds the same template");

    let versions = clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(&made.id)
        .versions("$Latest")
        .send()
        .await
        .expect("describe versions");
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .expect("data");
    assert_eq!(data.image_id(), Some("ami-0123456789abcdef0"));
    assert_eq!(data.user_data(), Some(spec.user_data.as_str()));
    assert_eq!(data.security_group_ids(), ["sg-1"]);
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some("JoinerNodeProfile")
    );
    let metadata = data.metadata_options().expect("metadata options");
    assert_eq!(metadata.http_tokens().map(|t| t.as_str()), Some("required"));
    assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
    let root = &data.block_device_mappings()[0];
    assert_eq!(root.device_name(), Some("/dev/xvda"));
    let ebs = root.ebs().expect("ebs");
    assert_eq!(ebs.volume_size(), Some(20));
    assert_eq!(ebs.volume_type().map(|t| t.as_str()), Some("gp3"));
    assert_eq!(ebs.encrypted(), Some(true));
    let instance_tags: Vec<(String, String)> = data
        .tag_specifications()
        .iter()
        .filter(|t| t.resource_type().map(|r| r.as_str()) == Some("instance"))
        .flat_map(|t| t.tags())
        .map(|t| {
            (
                t.key().unwrap_or_default().to_string(),
                t.value().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        instance_tags.contains(&("kubernetes.io/cluster/prod".into(), "owned".into())),
        "{instance_tags:?}"
    );
    assert!(
        instance_tags.contains(&("cost-center".into(), "42".into())),
        "{instance_tags:?}"
    );
}
