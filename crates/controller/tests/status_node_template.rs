//! NodeTemplate status through a real `kube::Client` on the scripted API server, with the
//! resolution done by the real `AwsCloudProvider` against moto: the exact status PATCH for
//! Ready=True with the resolved lists and for each Ready=False reason, no PATCH when nothing
//! changed, lastTransitionTime kept unless Ready flips, and 404/409/500 answers.

mod support;

use http::Method;
use joiner_apis::NodeTemplate;
use joiner_apis::NodeTemplateResolver;
use joiner_aws::testing::{self, Environment};
use joiner_aws::{AwsClients, AwsCloudProvider};
use joiner_controller::status::{node_template, Outcome, StatusError};
use joiner_moto::{MotoServer, MotoSession};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};
use support::{mock_api, obj, Reply};

const CLUSTER: &str = "c1";
const PREFIX: &str = "/joiner-test/service";
const K8S: &str = "1.31";
const PATH: &str = "/apis/joiner.sh/v1alpha1/nodetemplates/default/status";
const EARLIER: &str = "2026-01-01T00:00:00Z";

async fn aws(moto: &MotoSession) -> (AwsCloudProvider, Environment) {
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

/// A NodeTemplate `default` of generation 3 with `spec` and `status`.
fn template(spec: Value, status: Value) -> NodeTemplate {
    obj(json!({
        "apiVersion": "joiner.sh/v1alpha1", "kind": "NodeTemplate",
        "metadata": {"name": "default", "generation": 3, "resourceVersion": "10"},
        "spec": spec, "status": status,
    }))
}

fn discovered() -> Value {
    json!({"subnetSelector": {"joiner.sh/discovery": CLUSTER},
           "securityGroupSelector": {"joiner.sh/discovery": CLUSTER}})
}

fn now() -> Timestamp {
    "2026-06-01T12:00:00Z".parse().expect("timestamp")
}

/// The API server's answer to a status merge patch of `nt`: the object with the new status.
fn echo(nt: &NodeTemplate) -> impl FnMut(&support::Recorded) -> Reply {
    let base = serde_json::to_value(nt).expect("serializes");
    move |req| {
        let mut stored = base.clone();
        stored["status"] = req.body["status"].clone();
        if let Some(s) = stored["status"].as_object_mut() {
            s.retain(|_, v| !v.is_null());
        }
        stored["metadata"]["resourceVersion"] = json!("11");
        Reply::ok(stored)
    }
}

fn ready(body: &Value) -> &Value {
    let conditions = body["status"]["conditions"]
        .as_array()
        .expect("conditions list");
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    &conditions[0]
}

#[tokio::test]
async fn resolved_lists_and_ready_true_are_patched_once() {
    let moto = MotoServer::session().expect("moto server");
    let (p, env) = aws(&moto).await;
    let nt = template(discovered(), json!({}));
    let resolved = NodeTemplateResolver::resolve(&p, &nt).await;
    assert!(resolved.is_ok(), "{resolved:?}");

    let (client, api) = mock_api(echo(&nt));
    let outcome = node_template::reconcile_one(&client, &nt, &resolved, now())
        .await
        .expect("patched");
    let writes = api.writes();
    assert_eq!(writes.len(), 1);
    assert!(writes[0].is(Method::PATCH, PATH), "{:?}", writes[0]);
    let body = &writes[0].body;
    let mut subnets: Vec<(String, &str)> = env
        .subnets
        .iter()
        .cloned()
        .zip(["us-east-1a", "us-east-1b"])
        .collect();
    subnets.sort();
    let want_subnets: Vec<Value> = subnets
        .iter()
        .map(|(id, zone)| json!({"id": id, "zone": zone}))
        .collect();
    assert_eq!(body["status"]["subnets"], json!(want_subnets));
    assert_eq!(
        body["status"]["securityGroups"],
        json!([{"id": env.security_group, "name": "nodes"}])
    );
    let amis = body["status"]["amis"].as_array().expect("amis");
    assert_eq!(amis.len(), 1);
    assert_eq!(amis[0]["id"], json!(env.image_id));
    assert_eq!(
        amis[0]["requirements"][0],
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]})
    );
    let c = ready(body);
    assert_eq!(c["type"], "Ready");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "Ready");
    assert_eq!(c["observedGeneration"], 3);
    assert_eq!(c["lastTransitionTime"], "2026-06-01T12:00:00Z");
    let message = c["message"].as_str().expect("message");
    assert!(
        message.starts_with(
            "2 subnets in us-east-1a, us-east-1b; 1 security group; 1 AMI; no default AMI for "
        ),
        "{message}"
    );

    // The stored object now says it: the next pass sends nothing, even later.
    let Outcome::Patched(stored) = outcome else {
        panic!("expected a patch, got {outcome:?}");
    };
    let later: Timestamp = "2026-06-01T12:05:00Z".parse().expect("timestamp");
    let again = node_template::reconcile_one(&client, &stored, &resolved, later)
        .await
        .expect("no error");
    assert!(matches!(again, Outcome::Unchanged), "{again:?}");
    assert_eq!(api.requests().len(), 1);

    // A list that changed is patched, but Ready stayed True: its transition time is kept.
    let mut stale = (*stored).clone();
    if let Some(s) = stale.status.as_mut() {
        s.subnets.pop();
        s.conditions[0].last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            EARLIER.parse().expect("timestamp"),
        );
    }
    node_template::reconcile_one(&client, &stale, &resolved, later)
        .await
        .expect("patched");
    let writes = api.writes();
    assert_eq!(writes.len(), 2);
    assert_eq!(writes[1].body["status"]["subnets"], json!(want_subnets));
    assert_eq!(ready(&writes[1].body)["lastTransitionTime"], EARLIER);
}

#[tokio::test]
async fn each_missing_part_is_its_own_ready_false_reason() {
    let moto = MotoServer::session().expect("moto server");
    let (p, env) = aws(&moto).await;
    // Previously ready with lists: they are cleared and Ready flips (new transition time).
    let previous = json!({
        "subnets": [{"id": env.subnets[0], "zone": "us-east-1a"}],
        "securityGroups": [{"id": env.security_group}],
        "amis": [{"id": env.image_id}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "ok",
                        "lastTransitionTime": EARLIER, "observedGeneration": 2}],
    });
    let cases = [
        (
            json!({"subnetSelector": {"team": "nobody"},
                   "securityGroupSelector": {"joiner.sh/discovery": CLUSTER}}),
            "SubnetsNotFound",
            "NodeTemplate `default`: spec.subnetSelector {team: nobody}: no subnet matches",
        ),
        (
            json!({"subnetSelector": {"joiner.sh/discovery": CLUSTER},
                   "securityGroupSelector": {"team": "nobody"}}),
            "SecurityGroupsNotFound",
            "NodeTemplate `default`: spec.securityGroupSelector {team: nobody}: no security group matches",
        ),
        (
            json!({"subnetSelector": {"joiner.sh/discovery": CLUSTER},
                   "securityGroupSelector": {"joiner.sh/discovery": CLUSTER},
                   "amiSelector": {"aws::name": "no-such-image-*"}}),
            "AmiNotFound",
            "NodeTemplate `default`: spec.amiSelector {aws::name: no-such-image-*}: no AMI matches",
        ),
        (
            json!({"subnetSelector": {"joiner.sh/discovery": CLUSTER},
                   "securityGroupSelector": {"joiner.sh/discovery": CLUSTER},
                   "amiFamily": "Bottlerocket"}),
            "AmiNotFound",
            "NodeTemplate `default`: spec.amiFamily Bottlerocket: no default AMI: SSM parameter \
             `/joiner-test/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id` not found",
        ),
        (
            // Written before the CRD refused it: another cluster's ownership tag would hand
            // these nodes to that cluster's joiner. Not resolved, so nothing launches with it.
            json!({"subnetSelector": {"joiner.sh/discovery": CLUSTER},
                   "securityGroupSelector": {"joiner.sh/discovery": CLUSTER},
                   "tags": {"kubernetes.io/cluster/other": "owned"}}),
            "InvalidSpec",
            "NodeTemplate \"default\": spec.tags[\"kubernetes.io/cluster/other\"]: tag \
             kubernetes.io/cluster/other is reserved",
        ),
    ];
    for (spec, reason, message) in cases {
        let nt = template(spec, previous.clone());
        let resolved = node_template::resolve(&p, &nt).await;
        let (client, api) = mock_api(echo(&nt));
        node_template::reconcile_one(&client, &nt, &resolved, now())
            .await
            .expect("patched");
        let writes = api.writes();
        assert_eq!(writes.len(), 1, "{reason}");
        assert!(writes[0].is(Method::PATCH, PATH));
        let body = &writes[0].body;
        for list in ["subnets", "securityGroups", "amis"] {
            assert_eq!(
                body["status"][list],
                Value::Null,
                "{reason}: {list} cleared"
            );
            assert!(
                body["status"]
                    .as_object()
                    .is_some_and(|s| s.contains_key(list)),
                "{reason}: {list} is sent as null so the merge removes it"
            );
        }
        let c = ready(body);
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], reason);
        let got = c["message"].as_str().expect("message");
        assert!(got.starts_with(message), "{reason}: {got}");
        assert_eq!(
            c["lastTransitionTime"], "2026-06-01T12:00:00Z",
            "Ready flipped"
        );
        assert_eq!(c["observedGeneration"], 3);
    }
}

#[tokio::test]
async fn an_unreachable_aws_is_resolution_failed_and_keeps_the_lists() {
    let moto = MotoServer::session().expect("moto server");
    // Loopback port 9: nothing answers there.
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
    let lists = json!({
        "subnets": [{"id": "subnet-1", "zone": "us-east-1a"}],
        "securityGroups": [{"id": "sg-1", "name": "nodes"}],
        "amis": [{"id": "ami-1"}],
    });
    let mut status = lists.clone();
    status["conditions"] = json!([{"type": "Ready", "status": "False",
        "reason": "ResolutionFailed", "message": "earlier failure",
        "lastTransitionTime": EARLIER, "observedGeneration": 3}]);
    let nt = template(discovered(), status);
    let resolved = NodeTemplateResolver::resolve(&p, &nt).await;
    assert_eq!(
        node_template::reason(resolved.as_ref().expect_err("unreachable")),
        "ResolutionFailed"
    );

    let (client, api) = mock_api(echo(&nt));
    node_template::reconcile_one(&client, &nt, &resolved, now())
        .await
        .expect("patched");
    let writes = api.writes();
    assert_eq!(writes.len(), 1, "the message changed");
    let body = &writes[0].body;
    for list in ["subnets", "securityGroups", "amis"] {
        assert_eq!(body["status"][list], lists[list], "{list} kept");
    }
    let c = ready(body);
    assert_eq!(c["reason"], "ResolutionFailed");
    assert_eq!(c["lastTransitionTime"], EARLIER, "still False: no flip");
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.contains("NoResponse")),
        "{c}"
    );
}

#[tokio::test]
async fn deleted_conflicting_and_refused_patches() {
    let moto = MotoServer::session().expect("moto server");
    let (p, _env) = aws(&moto).await;
    let nt = template(discovered(), json!({}));
    let resolved = NodeTemplateResolver::resolve(&p, &nt).await;

    let (client, api) = mock_api(|_| Reply::not_found("nodetemplates.joiner.sh \"default\""));
    let gone = node_template::reconcile_one(&client, &nt, &resolved, now())
        .await
        .expect("404 is not an error");
    assert!(matches!(gone, Outcome::Gone), "{gone:?}");
    assert_eq!(api.calls(), [("PATCH".to_string(), PATH.to_string())]);

    let (client, _api) =
        mock_api(|_| Reply::error(409, "Conflict", "the object has been modified"));
    let conflict = node_template::reconcile_one(&client, &nt, &resolved, now())
        .await
        .expect("409 is retried later, not an error");
    assert!(matches!(conflict, Outcome::Conflict), "{conflict:?}");

    let (client, _api) =
        mock_api(|_| Reply::error(403, "Forbidden", "nodetemplates/status is forbidden"));
    let err = node_template::reconcile_one(&client, &nt, &resolved, now())
        .await
        .expect_err("403 is an error");
    assert!(matches!(err, StatusError::Patch { .. }));
    assert!(
        err.to_string()
            .starts_with("NodeTemplate `default`: patching status:"),
        "{err}"
    );
}
