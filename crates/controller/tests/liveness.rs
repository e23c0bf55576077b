//! Liveness through the scripted API: claims past their launch or registration deadline are
//! deleted and counted by reason; others are left alone; a 404 on the delete is not a failure.

mod lifecycle_fixture;
mod support;

use http::Method;
use joiner_controller::lifecycle::liveness;
use joiner_controller::metrics::ReasonLabels;
use k8s_openapi::jiff::Timestamp;
use lifecycle_fixture::{claim, cloud, context, settings, Stores};
use serde_json::{json, Value};
use support::{mock_api, Reply};

fn conditions(types: &[&str]) -> Value {
    Value::Array(
        types
            .iter()
            .map(|t| {
                json!({"type": t, "status": "True", "reason": "R", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .collect(),
    )
}

fn path(name: &str) -> String {
    format!("/apis/joiner.sh/v1alpha1/nodeclaims/{name}")
}

#[tokio::test]
async fn expired_claims_are_deleted_by_reason_and_live_ones_are_kept() {
    let cloud = cloud().await;
    let now = Timestamp::now().to_string();
    let stores = Stores::new(
        vec![],
        vec![],
        vec![
            // Created long ago (the fixture's creationTimestamp) and never launched.
            claim("stuck", json!({})),
            // Launched long ago, never registered.
            claim(
                "silent",
                json!({"status": {"conditions": conditions(&["Launched"])}}),
            ),
            // Registered: alive.
            claim(
                "fine",
                json!({"status": {"conditions": conditions(&["Launched", "Registered"])}}),
            ),
            // Just created: within its launch timeout.
            claim("young", json!({"metadata": {"creationTimestamp": now}})),
            // Already being deleted.
            claim(
                "going",
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:30:00Z"}}),
            ),
            // Someone deleted it first: 404.
            claim("raced", json!({})),
        ],
    );
    let (client, api) = mock_api(|req| {
        if req.method == Method::DELETE && req.path != path("raced") {
            Reply::success()
        } else {
            Reply::not_found("nodeclaims \"raced\"")
        }
    });
    let ctx = context(client, &stores, &cloud, settings());
    liveness::reconcile(&ctx).await.expect("pass");

    let mut deleted: Vec<String> = api
        .writes()
        .iter()
        .filter(|w| w.method == Method::DELETE)
        .map(|w| w.path.clone())
        .collect();
    deleted.sort();
    assert_eq!(deleted, [path("raced"), path("silent"), path("stuck")]);
    let count = |reason: &str| {
        ctx.metrics
            .claims_terminated
            .get_or_create(&ReasonLabels {
                provisioner: "web".into(),
                reason: reason.into(),
            })
            .get()
    };
    assert_eq!(count("launch_timeout"), 1);
    assert_eq!(count("registration_timeout"), 1);
}

#[tokio::test]
async fn lifecycle_run_drives_the_passes_and_stops_when_cancelled() {
    let cloud = cloud().await;
    let stores = Stores::new(vec![], vec![], vec![claim("stuck", json!({}))]);
    let (client, api) = mock_api(|req| {
        if req.method == Method::DELETE {
            Reply::success()
        } else {
            Reply::not_found("unexpected")
        }
    });
    let ctx = std::sync::Arc::new(context(client, &stores, &cloud, settings()));
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(joiner_controller::lifecycle::run(ctx.clone(), stop.clone()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !api.calls().contains(&("DELETE".to_string(), path("stuck")))
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("run stops when cancelled")
        .expect("run does not panic");
    assert!(
        api.calls().contains(&("DELETE".to_string(), path("stuck"))),
        "{:?}",
        api.calls()
    );
}
