//! What RuntimeClass admission does to a pod that names a class (`spec.runtimeClassName`):
//! it sets `spec.overhead` from the class's `overhead.podFixed`, merges the class's
//! `scheduling.nodeSelector` into the pod's and adds its `scheduling.tolerations`.
//!
//! Pods read from the cluster were admitted already (their `spec.overhead` says so). Pods of
//! workload templates and hand-written manifests were not: `joiner plan` admits them the same
//! way, so a pod with a Kata or gVisor class is planned with what it will really cost.

use joiner_core::{labels, Pod, Requirement, Requirements, Resources, Toleration};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::node::v1::RuntimeClass;

use super::requests::parse_map;
use super::tolerations::tolerations;
use super::FieldError;

/// What admitting a pod with one RuntimeClass adds to it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeAdmission {
    /// `overhead.podFixed`: added to the pod's requests.
    pub overhead: Resources,
    /// `scheduling.nodeSelector`, keys as written (admission compares them so): ANDed into
    /// each of the pod's required node terms.
    pub node_selector: Vec<(String, String)>,
    /// `scheduling.tolerations`: added to the pod's.
    pub tolerations: Vec<Toleration>,
}

/// The admission of RuntimeClass `class`; a field Kubernetes would refuse is an error naming
/// it.
pub fn runtime_admission(class: &RuntimeClass) -> Result<RuntimeAdmission, FieldError> {
    let overhead = match class.overhead.as_ref().and_then(|o| o.pod_fixed.as_ref()) {
        Some(fixed) => parse_map(fixed, "overhead.podFixed")?,
        None => Resources::default(),
    };
    let scheduling = class.scheduling.as_ref();
    let mut node_selector = Vec::new();
    for (k, v) in scheduling
        .and_then(|s| s.node_selector.as_ref())
        .into_iter()
        .flatten()
    {
        super::check_label("scheduling.nodeSelector", k, v)?;
        node_selector.push((k.clone(), v.clone()));
    }
    let tolerations = tolerations(
        scheduling
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default(),
        "scheduling.tolerations",
    )?;
    Ok(RuntimeAdmission {
        overhead,
        node_selector,
        tolerations,
    })
}

/// A RuntimeClass a pod names that admission has not applied yet, with the pod's own
/// `nodeSelector`, which admission checks the class's against.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PendingRuntime {
    /// `spec.runtimeClassName`.
    pub class: String,
    /// The pod's `spec.nodeSelector`, keys as written.
    pub node_selector: Vec<(String, String)>,
}

/// The RuntimeClass a pod names and admission has not applied yet (no `spec.overhead`).
pub fn pending_runtime(spec: &PodSpec) -> Option<PendingRuntime> {
    let class = spec
        .runtime_class_name
        .as_deref()
        .filter(|c| !c.is_empty() && spec.overhead.is_none())?;
    Some(PendingRuntime {
        class: class.to_string(),
        node_selector: spec
            .node_selector
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

impl RuntimeAdmission {
    /// Why the API server's RuntimeClass admission refuses a pod naming this class with
    /// `pending`'s nodeSelector: a key both set, as written, to different values. Such a pod
    /// is never created, so it is never pending.
    pub fn conflict(&self, pending: &PendingRuntime) -> Option<String> {
        self.node_selector.iter().find_map(|(k, class_value)| {
            let (_, pod_value) = pending
                .node_selector
                .iter()
                .find(|(pk, pv)| pk == k && pv != class_value)?;
            Some(format!(
                "RuntimeClass {} sets nodeSelector {k}={class_value} and the pod's nodeSelector \
                 has {k}={pod_value}; the API server's RuntimeClass admission refuses such a pod",
                pending.class
            ))
        })
    }

    /// Applies the admission to the simulation's pod.
    pub fn apply_to(&self, pod: &mut Pod) {
        pod.requests.add(&self.overhead);
        if !self.node_selector.is_empty() {
            if pod.node_terms.is_empty() {
                pod.node_terms.push(Requirements::new());
            }
            for term in &mut pod.node_terms {
                for (k, v) in &self.node_selector {
                    term.add(labels::normalize(k), Requirement::single(v));
                }
            }
        }
        pod.tolerations.extend(self.tolerations.iter().cloned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(v: serde_json::Value) -> RuntimeClass {
        serde_json::from_value(v).expect("parses")
    }

    #[test]
    fn admission_adds_the_overhead_selector_and_tolerations() {
        // Karpenter's "should take pod runtime class into consideration": 1 cpu requested,
        // 2 cpu of class overhead, so the pod needs 3.
        let kata = class(json!({"metadata": {"name": "kata"}, "handler": "kata",
            "overhead": {"podFixed": {"cpu": "2", "memory": "160Mi"}},
            "scheduling": {"nodeSelector": {"runtime": "kata"},
                "tolerations": [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}]}}));
        let a = runtime_admission(&kata).expect("reads");
        let mut pod = Pod {
            requests: Resources::new(1000, 1 << 30, 0, 1),
            ..Pod::default()
        };
        a.apply_to(&mut pod);
        assert_eq!(pod.requests.cpu, 3000);
        assert_eq!(pod.requests.memory, (1 << 30) + (160 << 20));
        assert_eq!(pod.node_terms.len(), 1);
        assert!(pod.node_terms[0]
            .get("runtime")
            .is_some_and(|r| r.allows("kata") && !r.allows("runc")));
        assert_eq!(pod.tolerations.len(), 1);
    }

    #[test]
    fn only_pods_not_yet_admitted_are_pending() {
        let spec = |v: serde_json::Value| -> PodSpec { serde_json::from_value(v).expect("spec") };
        assert_eq!(
            pending_runtime(&spec(json!({"containers": [], "runtimeClassName": "kata",
                "nodeSelector": {"beta.kubernetes.io/arch": "amd64"}}))),
            Some(PendingRuntime {
                class: "kata".into(),
                node_selector: vec![("beta.kubernetes.io/arch".into(), "amd64".into())],
            })
        );
        assert_eq!(
            pending_runtime(&spec(json!({"containers": [], "runtimeClassName": "kata",
                "overhead": {"cpu": "2"}}))),
            None,
            "admitted already"
        );
        assert_eq!(pending_runtime(&spec(json!({"containers": []}))), None);
    }

    #[test]
    fn a_node_selector_setting_the_classs_key_otherwise_conflicts() {
        let kata = runtime_admission(&class(
            json!({"metadata": {"name": "kata"}, "handler": "kata",
            "scheduling": {"nodeSelector": {"runtime": "kata"}}}),
        ))
        .expect("reads");
        let pending = |pairs: &[(&str, &str)]| PendingRuntime {
            class: "kata".into(),
            node_selector: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        assert_eq!(kata.conflict(&pending(&[])), None);
        // Admission compares keys as written: a beta alias of another key is no conflict (the
        // pod is admitted, and its terms then admit no node).
        let arch = runtime_admission(&class(json!({"metadata": {"name": "x86"}, "handler": "h",
            "scheduling": {"nodeSelector": {"kubernetes.io/arch": "amd64"}}})))
        .expect("reads");
        assert_eq!(
            arch.conflict(&pending(&[("beta.kubernetes.io/arch", "arm64")])),
            None
        );
        assert_eq!(
            kata.conflict(&pending(&[("runtime", "kata"), ("team", "a")])),
            None
        );
        assert_eq!(
            kata.conflict(&pending(&[("runtime", "runc")])).as_deref(),
            Some(
                "RuntimeClass kata sets nodeSelector runtime=kata and the pod's nodeSelector \
                 has runtime=runc; the API server's RuntimeClass admission refuses such a pod"
            )
        );
    }

    #[test]
    fn a_bad_overhead_names_the_field() {
        let bad = class(json!({"metadata": {"name": "x"}, "handler": "x",
            "overhead": {"podFixed": {"cpu": "lots"}}}));
        let e = runtime_admission(&bad).unwrap_err();
        assert_eq!(e.field, "overhead.podFixed.cpu");
    }
}
