//! A scripted Kubernetes API server for reconciler tests: a real `kube::Client` over a
//! tower-test mock service. Every request is recorded (method, path, query, JSON body) and
//! answered by the test's handler, so a test asserts the exact requests a reconciler makes and
//! decides how the API answers (including 404, 409 and 429).
//!
//! Each test binary includes this with `mod support;`; not every binary uses every helper.
#![allow(dead_code)]

pub mod objects_api;
pub mod slow_cloud;
pub mod slow_fleet;

use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{json, Value};

/// One request the client sent.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// HTTP method.
    pub method: Method,
    /// URI path, e.g. `/apis/joiner.sh/v1alpha1/nodeclaims`.
    pub path: String,
    /// Query string without `?` (empty when none).
    pub query: String,
    /// The body parsed as JSON (`Value::Null` when empty or not JSON).
    pub body: Value,
}

impl Recorded {
    /// True for `method` on exactly `path`.
    pub fn is(&self, method: Method, path: &str) -> bool {
        self.method == method && self.path == path
    }
}

/// How the mock answers one request.
#[derive(Clone, Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// JSON body.
    pub body: Value,
    /// How long the answer takes to arrive (zero: at once).
    pub delay: std::time::Duration,
}

impl Reply {
    /// 200 with `body`.
    pub fn ok(body: Value) -> Reply {
        Reply {
            status: StatusCode::OK,
            body,
            delay: std::time::Duration::ZERO,
        }
    }

    /// 201 with `body`.
    pub fn created(body: Value) -> Reply {
        Reply {
            status: StatusCode::CREATED,
            body,
            delay: std::time::Duration::ZERO,
        }
    }

    /// A `Status` failure as the API server sends it: `code` (404, 409, 429, ...) with
    /// `reason` (`NotFound`, `AlreadyExists`, `Conflict`, `TooManyRequests`, ...).
    pub fn error(code: u16, reason: &str, message: &str) -> Reply {
        Reply {
            status: StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body: json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": message, "reason": reason, "code": code,
            }),
            delay: std::time::Duration::ZERO,
        }
    }

    /// What a real API server answers a JSON patch whose `test` operation failed: 422 with
    /// the generic message, naming no object and giving no causes.
    pub fn patch_test_failed() -> Reply {
        Reply {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            body: json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "the server rejected our request due to an error in our request",
                "reason": "Invalid", "details": {}, "code": 422,
            }),
            delay: std::time::Duration::ZERO,
        }
    }

    /// What a real API server answers a write whose content it refuses: 422 `Invalid`
    /// naming the object and, in its causes, the field.
    pub fn invalid(kind: &str, name: &str, field: &str, value: &str, detail: &str) -> Reply {
        Reply {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            body: json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("{kind} \"{name}\" is invalid: {field}: Invalid value: \"{value}\": {detail}"),
                "reason": "Invalid", "code": 422,
                "details": {"name": name, "kind": kind.to_lowercase() + "s", "causes": [
                    {"reason": "FieldValueInvalid", "message": format!("Invalid value: \"{value}\": {detail}"), "field": field}]},
            }),
            delay: std::time::Duration::ZERO,
        }
    }

    /// This answer, arriving `delay` later (a slow API server); the mock goes on answering
    /// other requests meanwhile.
    pub fn after(self, delay: std::time::Duration) -> Reply {
        Reply { delay, ..self }
    }

    /// 404 NotFound.
    pub fn not_found(what: &str) -> Reply {
        Reply::error(404, "NotFound", &format!("{what} not found"))
    }

    /// No answer at all: the request stays in flight for the rest of the test (an API
    /// server that hangs, a webhook that never returns).
    pub fn never() -> Reply {
        Reply {
            status: never_status(),
            body: Value::Null,
            delay: std::time::Duration::ZERO,
        }
    }

    /// 200 with an empty Status `Success` (what DELETE and eviction return).
    pub fn success() -> Reply {
        Reply::ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        )
    }
}

/// The body of a create, as the API server would store it: a `uid`, a `resourceVersion`, and a
/// name from `generateName` when no name was given.
pub fn stored(req: &Recorded, uid: &str) -> Value {
    let mut body = req.body.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("uid".into(), json!(uid));
        meta.insert("resourceVersion".into(), json!("1"));
        if !meta.contains_key("name") {
            let prefix = meta
                .get("generateName")
                .and_then(Value::as_str)
                .unwrap_or("generated-")
                .to_string();
            meta.insert("name".into(), json!(format!("{prefix}{uid}")));
        }
    }
    body
}

/// The status [`Reply::never`] stands for; no API server sends it.
fn never_status() -> StatusCode {
    StatusCode::from_u16(599).expect("599 is a valid status code")
}

/// The mocked API server: the requests seen so far.
pub struct MockApi {
    requests: Arc<Mutex<Vec<Recorded>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl MockApi {
    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("request log").clone()
    }

    /// The requests other than GETs (what a reconciler changed).
    pub fn writes(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != Method::GET)
            .collect()
    }

    /// `(method, path)` of every request, for compact assertions.
    pub fn calls(&self) -> Vec<(String, String)> {
        self.requests()
            .into_iter()
            .map(|r| (r.method.to_string(), r.path))
            .collect()
    }
}

/// A client whose requests go to `handler`. The handler runs on a spawned task, so call this
/// inside a tokio runtime.
pub fn mock_api<F>(mut handler: F) -> (kube::Client, MockApi)
where
    F: FnMut(&Recorded) -> Reply + Send + 'static,
{
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = requests.clone();
    let task = tokio::spawn(async move {
        // Requests answered `Reply::never`: holding their responders keeps them in flight.
        let mut hung = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default().to_string();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let recorded = Recorded {
                method,
                path,
                query,
                body,
            };
            let reply = handler(&recorded);
            log.lock().expect("request log").push(recorded);
            if reply.status == never_status() {
                hung.push(send);
                continue;
            }
            let response = Response::builder()
                .status(reply.status)
                .header("content-type", "application/json")
                .body(Body::from(
                    serde_json::to_vec(&reply.body).expect("reply serializes"),
                ))
                .expect("response builds");
            if reply.delay.is_zero() {
                send.send_response(response);
            } else {
                tokio::spawn(async move {
                    tokio::time::sleep(reply.delay).await;
                    send.send_response(response);
                });
            }
        }
    });
    (
        client,
        MockApi {
            requests,
            _task: task,
        },
    )
}

/// A reflector store holding `items`, filled through the watcher's initial-list flow; keep the
/// writer to apply further events.
pub fn store<K>(items: Vec<K>) -> kube::runtime::reflector::store::Writer<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    joiner_controller::watch::filled(items)
}

/// Parses a test object.
pub fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test object parses")
}

/// A pod store holding `pods` as the watcher keeps them (records).
pub fn pod_store(
    pods: Vec<k8s_openapi::api::core::v1::Pod>,
) -> kube::runtime::reflector::store::Writer<joiner_controller::pod_record::PodRecord> {
    store(
        pods.into_iter()
            .map(joiner_controller::pod_record::PodRecord::from)
            .collect(),
    )
}
