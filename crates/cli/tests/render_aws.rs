//! `joiner launch-template render --resolve-ami` against moto through the standard chain: the
//! AMI is read from the family's SSM parameter (under a test prefix, since moto cannot write
//! `/aws/` names) and the template name, which depends on it, is computed.

use std::path::Path;
use std::process::Command;

#[tokio::test]
async fn resolve_ami_reads_the_ssm_parameter_and_names_the_template() {
    let moto = joiner_moto::MotoServer::session().expect("moto");
    let config = moto.sdk_config("us-east-1").await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let images = ec2
        .describe_images()
        .owners("amazon")
        .send()
        .await
        .expect("images");
    let image_id = images
        .images()
        .iter()
        .find(|i| i.architecture().map(|a| a.as_str()) == Some("x86_64"))
        .and_then(|i| i.image_id())
        .expect("a built-in x86_64 image")
        .to_string();
    aws_sdk_ssm::Client::new(&config)
        .put_parameter()
        .name("/joiner-test/service/eks/optimized-ami/1.31/amazon-linux-2/recommended/image_id")
        .value(&image_id)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .expect("put parameter");

    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/render");
    let run = |version: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_joiner"));
        cmd.args(["launch-template", "render", "--nodetemplate"])
            .arg(fixtures.join("nodetemplate-al2.yaml"))
            .arg("--provisioner")
            .arg(fixtures.join("provisioner.yaml"))
            .args([
                "--instance-type",
                "m5.large",
                "--cluster-name",
                "prod",
                "--cluster-endpoint",
                "https://ABC.gr7.us-east-1.eks.amazonaws.com",
                "--cluster-ca-bundle",
                "Q0FCVU5ETEU=",
                "--resolve-ami",
                "--ssm-prefix",
                "/joiner-test/service",
            ]);
        if let Some(v) = version {
            cmd.args(["--kubernetes-version", v]);
        }
        cmd.env("AWS_ENDPOINT_URL", moto.endpoint())
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env_remove("AWS_PROFILE")
            .output()
            .expect("run joiner")
    };

    let out = run(Some("1.31"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("  ami: {image_id}\n")), "{stdout}");
    assert!(stdout.contains("  name: joiner/prod/"), "{stdout}");

    // A version with no parameter: the error names the parameter, exit code 1 (AWS side).
    let out = run(Some("9.99"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("9.99"), "{stderr}");
    // No version and no amiSelector: a usage error.
    let out = run(None);
    assert_eq!(out.status.code(), Some(2));
}
