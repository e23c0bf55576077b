//! Dumps holding workloads together with their pods plan each replica once.

use super::load_ok;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, resources: {requests: {cpu: 250m}}}]
"#;

fn rs_pod(name: &str, rs: &str) -> String {
    format!(
        r#"
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: shop
  labels: {{app: web}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: {rs}, uid: "9", controller: true}}]
spec:
  containers: [{{name: app, resources: {{requests: {{cpu: 250m}}}}}}]
status:
  phase: Pending
  conditions: [{{type: PodScheduled, status: "False", reason: Unschedulable}}]
"#
    )
}

fn names(l: &crate::manifest::Loaded) -> Vec<String> {
    let mut n: Vec<String> = l.snapshot.pods.iter().map(|p| p.key()).collect();
    n.sort();
    n
}

#[test]
fn dumped_pods_of_a_deployment_replace_its_template_replicas() {
    let text = format!(
        "{DEPLOYMENT}{}{}",
        rs_pod("web-5d8f7c9b6-abcde", "web-5d8f7c9b6"),
        rs_pod("web-5d8f7c9b6-fghij", "web-5d8f7c9b6")
    );
    let l = load_ok(&text);
    // Two dumped pods plus one replica still to come from the template: three, not five.
    assert_eq!(
        names(&l),
        [
            "shop/web-0",
            "shop/web-5d8f7c9b6-abcde",
            "shop/web-5d8f7c9b6-fghij"
        ]
    );
    assert!(
        l.warnings
            .iter()
            .any(|w| w == "Deployment shop/web: 2 of its pods are in the input; 1 more replica(s) planned from its template"),
        "{:?}",
        l.warnings
    );
}

#[test]
fn a_replica_set_of_a_dumped_deployment_adds_nothing() {
    let text = format!(
        r#"{DEPLOYMENT}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-7b9
  namespace: shop
  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, name: web, uid: "1", controller: true}}]
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: app, resources: {{requests: {{cpu: 250m}}}}}}]
{}"#,
        rs_pod("web-7b9-xyz12", "web-7b9")
    );
    let l = load_ok(&text);
    assert_eq!(
        names(&l),
        ["shop/web-0", "shop/web-1", "shop/web-7b9-xyz12"]
    );
}

#[test]
fn stateful_set_pods_keep_their_ordinal_names_once() {
    let text = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: db-1
  namespace: shop
  labels: {app: db}
  ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: "2", controller: true}]
spec:
  nodeName: ip-10-0-0-1
  containers: [{name: db, resources: {requests: {cpu: "1"}}}]
status: {phase: Running}
"#;
    let l = load_ok(text);
    assert_eq!(names(&l), ["shop/db-0", "shop/db-1", "shop/db-2"]);
    let bound: Vec<_> = l
        .snapshot
        .pods
        .iter()
        .filter(|p| p.node_name.is_some())
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        bound,
        ["db-1"],
        "the dumped db-1 is kept, its template twin dropped"
    );
}

#[test]
fn pods_of_workloads_not_in_the_input_change_nothing() {
    let text = format!("{DEPLOYMENT}{}", rs_pod("api-6c4-aaaaa", "api-6c4"));
    let l = load_ok(&text);
    assert_eq!(
        names(&l),
        [
            "shop/api-6c4-aaaaa",
            "shop/web-0",
            "shop/web-1",
            "shop/web-2"
        ]
    );
    assert!(l.warnings.iter().all(|w| !w.contains("in the input")));
}
