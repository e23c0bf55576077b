//! `joiner plan --catalog aws` against moto through the standard chain (AWS_ENDPOINT_URL,
//! region and credentials from the environment): the plan uses moto's types and zones, and
//! the Pricing fallback (moto has no Pricing API) is announced.

use std::path::Path;
use std::process::Command;

#[test]
fn plan_against_the_live_catalog_of_moto() {
    let moto = joiner_moto::MotoServer::session().expect("moto");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .current_dir(&root)
        .args([
            "plan",
            "--catalog",
            "aws",
            "-o",
            "json",
            "-f",
            "examples/web-fleet.yaml",
        ])
        .env("AWS_ENDPOINT_URL", moto.endpoint())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_PROFILE")
        .env_remove("JOINER_REGION")
        .output()
        .expect("run joiner");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "joiner plan failed: {stderr}");
    assert!(
        stderr.contains("on_demand_prices unavailable from AWS"),
        "no fallback note: {stderr}"
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json plan");
    let nodes = plan["new_nodes"].as_array().expect("new_nodes");
    assert!(!nodes.is_empty(), "{plan}");
    let warnings = plan["warnings"].to_string();
    assert!(warnings.contains("on_demand_prices"), "{warnings}");
    for n in nodes {
        let zone = n["zone"].as_str().expect("zone");
        assert!(zone.starts_with("us-east-1"), "{n}");
    }
}
