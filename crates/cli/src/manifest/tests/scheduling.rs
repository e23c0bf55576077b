//! Node affinity, tolerations, spread, pod affinity and host ports.

use joiner_core::{labels, Effect};

use super::one_pod;

#[test]
fn no_selector_no_terms() {
    let p = one_pod("  containers: [{name: a}]\n");
    assert!(p.node_terms.is_empty());
    assert!(p.preferred_node_terms.is_empty());
}

#[test]
fn node_selector_alone_is_one_term() {
    let p = one_pod("  nodeSelector: {kubernetes.io/arch: arm64, beta.kubernetes.io/os: linux}\n  containers: [{name: a}]\n");
    assert_eq!(p.node_terms.len(), 1);
    let t = &p.node_terms[0];
    assert!(t.get(labels::ARCH).unwrap().allows("arm64"));
    assert!(t.get(labels::OS).is_some(), "beta key normalized");
}

#[test]
fn node_selector_is_merged_into_each_required_term() {
    let p = one_pod(
        r#"  nodeSelector: {kubernetes.io/arch: amd64}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}]
          - matchExpressions:
              - {key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ["4"]}
              - {key: example.com/pool, operator: DoesNotExist}
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 30
          preference:
            matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
  containers: [{name: a}]
"#,
    );
    assert_eq!(p.node_terms.len(), 2);
    for t in &p.node_terms {
        assert!(t.get(labels::ARCH).unwrap().allows("amd64"));
    }
    assert!(p.node_terms[0]
        .get(labels::ZONE)
        .unwrap()
        .allows("us-east-1a"));
    assert!(p.node_terms[1]
        .get(joiner_aws::labels::INSTANCE_CPU)
        .unwrap()
        .allows("8"));
    assert!(p.node_terms[1]
        .get("example.com/pool")
        .unwrap()
        .allows_absent());
    assert_eq!(p.preferred_node_terms.len(), 1);
    assert_eq!(p.preferred_node_terms[0].0, 30);
    assert!(p.preferred_node_terms[0]
        .1
        .get(labels::CAPACITY_TYPE)
        .unwrap()
        .allows("spot"));
}

#[test]
fn tolerations() {
    let p = one_pod(
        r#"  tolerations:
    - {operator: Exists}
    - {key: gpu, value: "true", effect: NoSchedule}
    - {key: spot, operator: Exists, effect: NoExecute, tolerationSeconds: 30}
  containers: [{name: a}]
"#,
    );
    let t = &p.tolerations;
    assert_eq!(t.len(), 3);
    assert!(t[0].exists && t[0].key.is_empty() && t[0].effect.is_none());
    assert!(!t[1].exists);
    assert_eq!((t[1].key.as_str(), t[1].value.as_str()), ("gpu", "true"));
    assert_eq!(t[1].effect, Some(Effect::NoSchedule));
    assert!(t[2].exists);
    assert_eq!(t[2].effect, Some(Effect::NoExecute));
}

#[test]
fn topology_spread() {
    let p = one_pod(
        r#"  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: DoNotSchedule
      minDomains: 3
      labelSelector:
        matchLabels: {app: web}
        matchExpressions: [{key: tier, operator: NotIn, values: [batch]}]
      matchLabelKeys: [rev]
    - maxSkew: 2
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: ScheduleAnyway
      labelSelector: {matchLabels: {app: web}}
      nodeAffinityPolicy: Ignore
      nodeTaintsPolicy: Honor
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: DoNotSchedule
  containers: [{name: a}]
"#,
    );
    assert_eq!(
        p.topology_spread.len(),
        2,
        "a constraint without selector counts nothing"
    );
    let hard = &p.topology_spread[0];
    assert!(hard.hard);
    assert_eq!((hard.max_skew, hard.min_domains), (1, Some(3)));
    assert_eq!(hard.topology_key, labels::ZONE);
    assert!(hard.selector.get("app").unwrap().allows("web"));
    assert!(!hard.selector.get("tier").unwrap().allows("batch"));
    assert!(
        hard.selector.get("rev").unwrap().allows("r1"),
        "matchLabelKeys adds own value"
    );
    let soft = &p.topology_spread[1];
    assert!(!soft.hard);
    assert_eq!((soft.max_skew, soft.min_domains), (2, None));
    // The policies' defaults (Honor node affinity, Ignore taints) and their explicit values.
    assert!(hard.honor_node_affinity && !hard.honor_node_taints);
    assert!(!soft.honor_node_affinity && soft.honor_node_taints);
}

#[test]
fn pod_affinity_and_anti_affinity() {
    let p = one_pod(
        r#"  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: topology.kubernetes.io/zone
          labelSelector: {matchLabels: {app: cache}}
          namespaces: [infra]
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector: {matchExpressions: [{key: app, operator: In, values: [web]}]}
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 40
          podAffinityTerm:
            topologyKey: topology.kubernetes.io/zone
            labelSelector: {matchLabels: {app: web}}
  containers: [{name: a}]
"#,
    );
    let a = &p.affinity;
    assert_eq!(a.len(), 3);
    assert!(!a[0].anti);
    assert_eq!(a[0].weight, None);
    assert_eq!(a[0].namespaces, ["infra"]);
    assert!(a[0].selector.get("app").unwrap().allows("cache"));
    assert!(a[1].anti);
    assert_eq!(a[1].topology_key, labels::HOSTNAME);
    assert!(a[1].namespaces.is_empty());
    assert!(a[2].anti);
    assert_eq!(a[2].weight, Some(40));
}

#[test]
fn several_required_affinity_terms_select_the_pods_matching_all_of_them() {
    // As the kube-scheduler reads them: each required term counts only pods matching every
    // term, in namespaces every term names; anti-affinity stays per term.
    let p = one_pod(
        r#"  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app: cache}}
          namespaces: [infra, default]
        - topologyKey: topology.kubernetes.io/zone
          labelSelector: {matchLabels: {tier: db}}
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app: web}}
  containers: [{name: a}]
"#,
    );
    let a = &p.affinity;
    for t in &a[..2] {
        assert!(t.selector.get("app").unwrap().allows("cache"));
        assert!(t.selector.get("tier").unwrap().allows("db"));
        assert_eq!(t.namespaces, ["default"]);
    }
    assert_eq!(a[0].topology_key, labels::HOSTNAME);
    assert_eq!(a[1].topology_key, labels::ZONE);
    assert!(a[2].anti && a[2].selector.get("tier").is_none());
}

#[test]
fn a_required_affinity_term_without_a_selector_selects_no_pod() {
    // The API's nil labelSelector selects nothing: a required affinity term without one can
    // never be met (the pod stays pending), an anti-affinity term without one repels nothing.
    let p = one_pod(
        r#"  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
  containers: [{name: a}]
"#,
    );
    assert_eq!(p.affinity.len(), 1, "{:?}", p.affinity);
    assert!(!p.affinity[0].anti);
    assert!(!p.affinity[0].selector.matches_labels(&p.labels));
    let mut anything = std::collections::BTreeMap::new();
    anything.insert("app".to_string(), "web".to_string());
    assert!(!p.affinity[0].selector.matches_labels(&anything));
}

#[test]
fn host_ports() {
    let p = one_pod(
        r#"  containers:
    - name: a
      ports:
        - {containerPort: 8080}
        - {containerPort: 80, hostPort: 80}
        - {containerPort: 53, hostPort: 53, protocol: UDP, hostIP: 10.0.0.1}
"#,
    );
    let ports: Vec<(i32, &str, &str)> = p
        .host_ports
        .iter()
        .map(|h| (h.port, h.protocol.as_str(), h.ip.as_str()))
        .collect();
    assert_eq!(ports, [(80, "TCP", ""), (53, "UDP", "10.0.0.1")]);
    let net =
        one_pod("  hostNetwork: true\n  containers: [{name: a, ports: [{containerPort: 9100}]}]\n");
    assert_eq!(
        net.host_ports[0].port, 9100,
        "hostNetwork makes container ports host ports"
    );
}

#[test]
fn namespace_selectors_select_the_namespaces_the_input_labels() {
    let l = super::load_ok(
        r#"apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: web}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ops}
---
apiVersion: v1
kind: Pod
metadata: {name: cart, namespace: shop, labels: {app: cart}}
spec:
  containers: [{name: a}]
---
apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: ops, labels: {app: agent}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app: cart}}
          namespaceSelector: {matchLabels: {team: web}}
        - topologyKey: topology.kubernetes.io/zone
          labelSelector: {matchLabels: {app: cart}}
          namespaceSelector: {}
  containers: [{name: a}]
"#,
    );
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let agent = l
        .snapshot
        .pods
        .iter()
        .find(|p| p.name == "agent")
        .expect("agent");
    assert_eq!(agent.affinity[0].namespaces, ["shop"]);
    assert_eq!(agent.affinity[1].namespaces, ["ops", "shop"]);
    assert!(agent
        .affinity
        .iter()
        .all(|a| a.namespace_selector.is_none()));
}
