//! PodDisruptionBudgets (policy/v1) into the disruption planner's [`Pdb`].

use joiner_core::disruption::Pdb;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::selectors::label_selector;
use super::FieldError;

/// Converts a PodDisruptionBudget: its namespace (default `default`), selector (`{}` covers
/// every pod of the namespace, a missing one none), `status.disruptionsAllowed` (0 until
/// the disruption controller has computed it, so a new budget protects at once) and
/// `spec.unhealthyPodEvictionPolicy` (`AlwaysAllow` lets pods that are not Ready go).
pub fn pdb(p: &PodDisruptionBudget, name: &str) -> Result<Pdb, FieldError> {
    let selector = match p.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        Some(sel) => Some(label_selector(
            sel,
            "spec.selector",
            &Default::default(),
            &[],
        )?),
        None => None,
    };
    Ok(Pdb {
        namespace: super::namespace_or_default(&p.metadata),
        name: name.to_string(),
        selector,
        disruptions_allowed: p
            .status
            .as_ref()
            .and_then(|s| s.disruptions_allowed)
            .unwrap_or(0),
        always_allow_unhealthy: p
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
            == Some("AlwaysAllow"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::Pod;

    fn parse(v: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(v).expect("parses")
    }

    #[test]
    fn selectors_namespaces_and_the_allowed_count() {
        let p = pdb(
            &parse(serde_json::json!({
                "metadata": {"name": "db", "namespace": "data"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}},
                "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                           "expectedPods": 3}
            })),
            "db",
        )
        .expect("converts");
        assert_eq!(p.namespace, "data");
        assert_eq!(p.disruptions_allowed, 1);
        let mut db = Pod {
            namespace: "data".into(),
            ..Pod::default()
        };
        db.labels.insert("app".into(), "db".into());
        assert!(p.covers(&db) && !p.blocks(&db));
        let fresh = pdb(
            &parse(serde_json::json!({
                "metadata": {"name": "all"},
                "spec": {"maxUnavailable": 0, "selector": {}}
            })),
            "all",
        )
        .expect("converts");
        let any = Pod {
            namespace: "default".into(),
            ..Pod::default()
        };
        assert!(
            fresh.blocks(&any),
            "{{}} covers the namespace; no status yet allows nothing"
        );
        assert!(!fresh.always_allow_unhealthy, "IfHealthyBudget by default");
        let lenient = pdb(
            &parse(serde_json::json!({
                "metadata": {"name": "all"},
                "spec": {"maxUnavailable": 0, "selector": {},
                         "unhealthyPodEvictionPolicy": "AlwaysAllow"}
            })),
            "all",
        )
        .expect("converts");
        let mut sick = any.clone();
        sick.disruption.not_ready = true;
        assert!(lenient.blocks(&any), "a Ready pod is held");
        assert!(!lenient.blocks(&sick), "a pod that is not Ready may go");
        let bad = pdb(
            &parse(serde_json::json!({
                "metadata": {"name": "bad"},
                "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}
            })),
            "bad",
        )
        .expect_err("bad operator");
        assert!(bad.field.starts_with("spec.selector"), "{bad:?}");
    }
}
