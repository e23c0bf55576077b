//! The scripted API server itself: requests are recorded and answered as the handler says,
//! including API errors, through a real `kube::Client`.

mod support;

use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{mock_api, stored, Reply};

#[tokio::test]
async fn requests_are_recorded_and_errors_reach_the_client_as_api_errors() {
    let (client, api) = mock_api(|req| {
        if req.method == Method::POST {
            Reply::created(stored(req, "uid-1"))
        } else {
            Reply::not_found("configmaps \"missing\"")
        }
    });
    let cms: Api<ConfigMap> = Api::namespaced(client, "shop");
    let cm: ConfigMap = support::obj(json!({"metadata": {"generateName": "cfg-"}}));
    let made = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create answers 201");
    assert_eq!(made.metadata.name.as_deref(), Some("cfg-uid-1"));
    assert_eq!(made.metadata.uid.as_deref(), Some("uid-1"));
    let err = cms.get("missing").await.expect_err("get answers 404");
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (404, "NotFound")),
        other => panic!("expected an API error, got {other:?}"),
    }
    let calls = api.calls();
    assert_eq!(
        calls,
        [
            (
                "POST".to_string(),
                "/api/v1/namespaces/shop/configmaps".to_string()
            ),
            (
                "GET".to_string(),
                "/api/v1/namespaces/shop/configmaps/missing".to_string()
            ),
        ]
    );
    assert_eq!(api.writes().len(), 1);
    assert_eq!(api.writes()[0].body["metadata"]["generateName"], "cfg-");
}
