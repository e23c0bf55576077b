//! An API server that keeps NodeClaims and Provisioners, for tests where a reconciler's writes
//! must be read back by the next pass: creates get a UID, a resourceVersion and a creation
//! time; status patches are JSON merge patches (null removes) and honor a resourceVersion
//! precondition with 409 Conflict, as the API server does; a delete of an object with
//! finalizers sets its deletionTimestamp, and a patch that empties them removes it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::Method;
use joiner_apis::{NodeClaim, Provisioner};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{json, Value};

use super::{Recorded, Reply};

const CLAIMS: &str = "/apis/joiner.sh/v1alpha1/nodeclaims";
const PROVISIONERS: &str = "/apis/joiner.sh/v1alpha1/provisioners";

#[derive(Default)]
struct Objects {
    claims: BTreeMap<String, Value>,
    provisioners: BTreeMap<String, Value>,
    version: u64,
    /// Writes answered so far, and the one to fail (a crash of the writer at that point).
    writes: usize,
    fail_write: Option<usize>,
}

/// The objects the server holds; clone it to read them while the server runs.
#[derive(Clone, Default)]
pub struct ObjectsApi {
    inner: Arc<Mutex<Objects>>,
}

/// RFC 7386 merge of `patch` into `target`.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (k, v) in p {
                if v.is_null() {
                    if let Some(t) = target.as_object_mut() {
                        t.remove(k);
                    }
                } else if let Some(t) = target.as_object_mut() {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

impl ObjectsApi {
    /// A server holding `claims` and `provisioners`.
    pub fn new(claims: Vec<NodeClaim>, provisioners: Vec<Provisioner>) -> Self {
        let api = ObjectsApi::default();
        {
            let mut o = api.lock();
            for c in claims {
                let v = serde_json::to_value(&c).expect("claim");
                o.claims
                    .insert(c.metadata.name.clone().unwrap_or_default(), v);
            }
            for p in provisioners {
                let v = serde_json::to_value(&p).expect("provisioner");
                o.provisioners
                    .insert(p.metadata.name.clone().unwrap_or_default(), v);
            }
        }
        api
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.inner.lock().expect("objects")
    }

    /// Answers the `n`-th write from now on (1-based; creates, patches, deletes) with 500
    /// and changes nothing, as if the writer crashed just before it.
    pub fn fail_write(&self, n: usize) {
        let mut o = self.lock();
        o.fail_write = Some(o.writes + n);
    }

    /// Writes answered so far (failed ones included).
    pub fn writes(&self) -> usize {
        self.lock().writes
    }

    /// Adds `claim` as if another writer created it.
    pub fn put_claim(&self, claim: &NodeClaim) {
        let v = serde_json::to_value(claim).expect("claim");
        self.lock()
            .claims
            .insert(claim.metadata.name.clone().unwrap_or_default(), v);
    }

    /// The stored claims, by name.
    pub fn claims(&self) -> Vec<NodeClaim> {
        self.lock()
            .claims
            .values()
            .map(|v| serde_json::from_value(v.clone()).expect("claim"))
            .collect()
    }

    /// The stored claim `name`.
    pub fn claim(&self, name: &str) -> Option<NodeClaim> {
        self.claims()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
    }

    /// The stored Provisioners.
    pub fn provisioners(&self) -> Vec<Provisioner> {
        self.lock()
            .provisioners
            .values()
            .map(|v| serde_json::from_value(v.clone()).expect("provisioner"))
            .collect()
    }

    /// Re-lists the stored claims into `writer`, as a watch restart does.
    pub fn sync_claims(&self, writer: &mut Writer<NodeClaim>) {
        writer.apply_watcher_event(&Event::Init);
        for c in self.claims() {
            writer.apply_watcher_event(&Event::InitApply(c));
        }
        writer.apply_watcher_event(&Event::InitDone);
    }

    /// Re-lists the stored Provisioners into `writer`.
    pub fn sync_provisioners(&self, writer: &mut Writer<Provisioner>) {
        writer.apply_watcher_event(&Event::Init);
        for p in self.provisioners() {
            writer.apply_watcher_event(&Event::InitApply(p));
        }
        writer.apply_watcher_event(&Event::InitDone);
    }

    /// The request handler for [`super::mock_api`].
    pub fn handler(&self) -> impl FnMut(&Recorded) -> Reply + Send + 'static {
        let api = self.clone();
        move |req: &Recorded| api.answer(req)
    }

    fn answer(&self, req: &Recorded) -> Reply {
        if req.method == Method::POST && req.path.ends_with("/events") {
            return Reply::created(super::stored(req, "event-uid"));
        }
        // Nodes: deleting one succeeds (termination deletes the Node it releases).
        if req.path.starts_with("/api/v1/nodes/") && req.method == Method::DELETE {
            return Reply::success();
        }
        let mut o = self.lock();
        if req.method != Method::GET {
            o.writes += 1;
            if o.fail_write == Some(o.writes) {
                return Reply::error(500, "InternalError", "injected: the writer crashed here");
            }
        }
        o.version += 1;
        let version = o.version.to_string();
        let (collection, rest) = if let Some(rest) = req.path.strip_prefix(CLAIMS) {
            ("claims", rest)
        } else if let Some(rest) = req.path.strip_prefix(PROVISIONERS) {
            ("provisioners", rest)
        } else {
            return Reply::not_found(&req.path);
        };
        let objects = if collection == "claims" {
            &mut o.claims
        } else {
            &mut o.provisioners
        };
        let name = rest
            .trim_start_matches('/')
            .trim_end_matches("/status")
            .to_string();
        match req.method.clone() {
            Method::POST if name.is_empty() => {
                let mut body = req.body.clone();
                let n = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if objects.contains_key(&n) {
                    return Reply::error(409, "AlreadyExists", &format!("{n} already exists"));
                }
                body["metadata"]["uid"] = json!(format!("uid-{n}"));
                body["metadata"]["resourceVersion"] = json!(version);
                body["metadata"]["creationTimestamp"] =
                    json!(k8s_openapi::jiff::Timestamp::now().to_string());
                objects.insert(n, body.clone());
                Reply::created(body)
            }
            Method::PATCH => {
                let Some(stored) = objects.get_mut(&name) else {
                    return Reply::not_found(&format!("{collection} {name}"));
                };
                let want = &req.body["metadata"]["resourceVersion"];
                if !want.is_null() && want != &stored["metadata"]["resourceVersion"] {
                    return Reply::error(409, "Conflict", "the object has been modified");
                }
                let mut patch = req.body.clone();
                if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("resourceVersion");
                }
                merge(stored, &patch);
                stored["metadata"]["resourceVersion"] = json!(version);
                let out = stored.clone();
                let released = out["metadata"]["deletionTimestamp"].is_string()
                    && out["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(|f| f.is_empty());
                if released {
                    objects.remove(&name);
                }
                Reply::ok(out)
            }
            Method::DELETE => {
                let Some(stored) = objects.get_mut(&name) else {
                    return Reply::not_found(&format!("{collection} {name}"));
                };
                let has_finalizers = stored["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty());
                if has_finalizers {
                    if !stored["metadata"]["deletionTimestamp"].is_string() {
                        stored["metadata"]["deletionTimestamp"] =
                            json!(k8s_openapi::jiff::Timestamp::now().to_string());
                        stored["metadata"]["resourceVersion"] = json!(version);
                    }
                    Reply::ok(stored.clone())
                } else {
                    objects.remove(&name);
                    Reply::success()
                }
            }
            _ => Reply::not_found(&req.path),
        }
    }
}
