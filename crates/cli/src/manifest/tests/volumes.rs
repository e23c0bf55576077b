//! Volume topology in manifests: which pods their claims confine or hold, and what the input
//! lacks.

use super::load_ok;

const CLASSES_AND_VOLUMES: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp2}
provisioner: ebs.csi.aws.com
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: db-data, namespace: shop}
spec: {volumeName: pv-a, resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-a}
spec:
  capacity: {storage: 1Gi}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-db-0, namespace: shop}
spec: {storageClassName: gp2, resources: {requests: {storage: 1Gi}}}
"#;

#[test]
fn a_deployment_and_a_stateful_set_of_one_name_keep_their_own_claims() {
    // Deployment "db" has one replica named db-0, as the StatefulSet "db" does: each pod keeps
    // the claims of its own workload.
    let text = format!(
        "{CLASSES_AND_VOLUMES}---\n{}",
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: db, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: i}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: db-data}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: i}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {resources: {requests: {storage: 1Gi}}}
"#
    );
    let l = load_ok(&text);
    let by_kind = |kind: &str| {
        l.snapshot
            .pods
            .iter()
            .find(|p| p.owner.as_ref().is_some_and(|o| o.kind == kind))
            .unwrap_or_else(|| panic!("no {kind} pod"))
    };
    let deployment = by_kind("Deployment");
    let stateful = by_kind("StatefulSet");
    assert_eq!(deployment.name, stateful.name, "the names collide");
    assert_eq!(deployment.volume_zones.len(), 1);
    assert_eq!(deployment.volume_zones[0].claim, "shop/db-data");
    assert!(deployment.volume_hold.is_none());
    // The StatefulSet's claim is unbound and its class binds Immediately: held, not confined.
    assert!(stateful.volume_zones.is_empty());
    let hold = stateful.volume_hold.as_deref().expect("held");
    assert!(
        hold.contains("shop/data-db-0") && hold.contains("gp2"),
        "{hold}"
    );
}

#[test]
fn claims_the_input_lacks_are_named_in_one_warning_and_confine_nothing() {
    let pods = r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: cache, namespace: shop}
spec:
  replicas: 3
  serviceName: cache
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec:
      containers: [{name: c, image: i}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {resources: {requests: {storage: 1Gi}}}
"#;
    let l = load_ok(pods);
    assert!(l
        .snapshot
        .pods
        .iter()
        .all(|p| p.volume_zones.is_empty() && p.volume_hold.is_none()));
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    let w = &l.warnings[0];
    for i in 0..3 {
        assert!(
            w.contains(&format!("PersistentVolumeClaim shop/data-cache-{i}")),
            "{w}"
        );
    }
}

#[test]
fn claims_not_made_yet_follow_their_templates_class() {
    // No claim exists yet: the StatefulSet's and the ephemeral volume's claims will be made
    // with their templates' classes, and those classes' zones confine the pods.
    let text = r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: zonal}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
  - matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [us-east-1b, us-east-1c]}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: i}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {storageClassName: zonal, resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: scratch, namespace: shop}
spec:
  containers: [{name: c, image: i}]
  volumes:
    - name: tmp
      ephemeral:
        volumeClaimTemplate:
          spec: {storageClassName: zonal, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"#;
    let l = load_ok(text);
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let mut claims: Vec<String> = Vec::new();
    for p in &l.snapshot.pods {
        assert_eq!(p.volume_zones.len(), 1, "{}", p.name);
        let z = &p.volume_zones[0].zones;
        assert!(z.allows("us-east-1b") && z.allows("us-east-1c") && !z.allows("us-east-1a"));
        claims.push(p.volume_zones[0].claim.clone());
    }
    claims.sort();
    assert_eq!(
        claims,
        ["shop/data-db-0", "shop/data-db-1", "shop/scratch-tmp"]
    );
}

#[test]
fn a_volume_of_one_node_takes_the_pod_there_or_nowhere() {
    // Two CSI volumes each only one node can mount (a single-node storage driver): one on a
    // node of the input, one on a node that is gone. The kube-scheduler's VolumeBinding
    // keeps each pod to its volume's node, so no new node is bought for either.
    let volume = |name: &str, host: &str| {
        format!(
            r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: 1Gi}}
  csi: {{driver: example.com/node-disk, volumeHandle: {name}}}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{host}]}}]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default}}
spec: {{volumeName: {name}, resources: {{requests: {{storage: 1Gi}}}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: uses-{name}, namespace: default}}
spec:
  containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
  volumes: [{{name: v, persistentVolumeClaim: {{claimName: {name}}}}}]
"#
        )
    };
    let node = r#"apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: us-east-1a, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
status:
  capacity: {cpu: "2", memory: 4Gi, pods: "10"}
  allocatable: {cpu: "2", memory: 4Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
"#;
    let text = format!(
        "{}---\n{}---\n{node}",
        volume("here", "n1"),
        volume("gone", "old-node")
    );
    let l = load_ok(&text);
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let catalog = joiner_aws::embedded::catalog("us-east-1")
        .expect("embedded catalog")
        .instance_types;
    let plan = joiner_core::scheduling::simulate(
        &l.snapshot,
        &catalog,
        &joiner_core::scheduling::Options::default(),
    );
    assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
    assert_eq!(plan.existing_nodes.len(), 1);
    assert_eq!(plan.existing_nodes[0].pods, ["default/uses-here"]);
    assert_eq!(plan.unschedulable.len(), 1);
    assert_eq!(
        plan.unschedulable[0].reason,
        "volume claim default/gone is bound to PersistentVolume gone, which only nodes \
         kubernetes.io/hostname In [old-node] can mount; no such node exists and a new node \
         cannot be one"
    );
}

#[test]
fn one_pod_at_a_time_uses_a_read_write_once_pod_claim() {
    // Kubernetes' ReadWriteOncePod: the kube-scheduler refuses a pod whose such claim a
    // scheduled pod uses (VolumeRestrictions). "solo" is used by a running pod: the
    // Deployment's three replicas all wait. "queued" is used by no scheduled pod: the scheduler
    // counts none of its pending users, so none waits yet. A ReadWriteOnce claim restricts
    // nothing.
    let claim = |name: &str, mode: &str| {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: shop}}\n\
             spec: {{accessModes: [{mode}], storageClassName: gp3, resources: {{requests: {{storage: 1Gi}}}}}}\n"
        )
    };
    let deployment = |name: &str, claim: &str| {
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: shop}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
      volumes: [{{name: v, persistentVolumeClaim: {{claimName: {claim}}}}}]
"#
        )
    };
    let text = [
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gp3}\n\
         provisioner: ebs.csi.aws.com\nvolumeBindingMode: WaitForFirstConsumer\n"
            .to_string(),
        claim("solo", "ReadWriteOncePod"),
        claim("queued", "ReadWriteOncePod"),
        claim("shared", "ReadWriteOnce"),
        r#"apiVersion: v1
kind: Pod
metadata: {name: owner, namespace: shop}
spec:
  nodeName: n1
  containers: [{name: c, image: i}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: solo}}]
---
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: us-east-1a, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
status:
  capacity: {cpu: "1", memory: 4Gi, pods: "10"}
  allocatable: {cpu: "1", memory: 4Gi, pods: "10"}
  conditions: [{type: Ready, status: "True"}]
"#
        .to_string(),
        deployment("waits", "solo"),
        deployment("takes", "queued"),
        deployment("rwo", "shared"),
    ]
    .join("---\n");
    let l = load_ok(&text);
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let holds = |app: &str| -> Vec<Option<&str>> {
        l.snapshot
            .pods
            .iter()
            .filter(|p| p.labels.get("app").map(String::as_str) == Some(app))
            .map(|p| p.volume_hold.as_deref())
            .collect()
    };
    let waits = holds("waits");
    assert_eq!(waits.len(), 3);
    assert!(
        waits.iter().all(|h| h.is_some_and(|h| h
            .starts_with("volume claim shop/solo is ReadWriteOncePod and pod shop/owner uses it"))),
        "{waits:?}"
    );
    assert_eq!(holds("takes"), [None, None, None]);
    assert_eq!(holds("rwo"), [None, None, None]);

    let catalog = joiner_aws::embedded::catalog("us-east-1")
        .expect("embedded catalog")
        .instance_types;
    let plan = joiner_core::scheduling::simulate(
        &l.snapshot,
        &catalog,
        &joiner_core::scheduling::Options::default(),
    );
    let placed: usize = plan
        .existing_nodes
        .iter()
        .map(|n| n.pods.len())
        .sum::<usize>()
        + plan.new_nodes.iter().map(|n| n.pods.len()).sum::<usize>();
    assert_eq!(placed, 6, "the 'takes' and 'rwo' pods");
    assert_eq!(plan.unschedulable.len(), 3, "the 'waits' pods");
}

#[test]
fn a_csi_node_gives_its_node_attach_caps_and_a_bad_count_names_the_field() {
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n\
                status: {allocatable: {cpu: '4', memory: 8Gi, pods: '58'}}\n";
    let csi = |count: i64| {
        format!(
            "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {{name: n1}}\n\
             spec:\n  drivers:\n    - {{name: ebs.csi.aws.com, nodeID: i-1, allocatable: {{count: {count}}}}}\n\
             \x20   - {{name: efs.csi.aws.com, nodeID: i-1}}\n"
        )
    };
    let loaded = load_ok(&format!("{}---\n{node}", csi(25)));
    let limits = &loaded.snapshot.nodes[0].volume_limits;
    assert_eq!(
        limits.iter().collect::<Vec<_>>(),
        [(&"ebs.csi.aws.com".to_string(), &25)]
    );
    // A node without a CSINode has no cap.
    assert!(load_ok(node).snapshot.nodes[0].volume_limits.is_empty());
    let err = super::load_err(&format!("{node}---\n{}", csi(-1)));
    assert!(
        err.contains("CSINode n1") && err.contains("spec.drivers[0].allocatable.count"),
        "{err}"
    );
    let typo = super::load_err(&format!(
        "{node}---\n{}",
        csi(25).replace("allocatable:", "allocatible:")
    ));
    assert!(typo.contains("allocatible"), "{typo}");
}
