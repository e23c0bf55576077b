//! ReadWriteOncePod claims: one pod at a time, cluster-wide.
//!
//! The kube-scheduler's VolumeRestrictions plugin refuses a pod whose ReadWriteOncePod claim
//! another scheduled pod uses, on every node: the pod stays pending until that pod is gone
//! (or preempted, which nominates the pod to the victim's node, where nothing need be
//! bought). joiner holds such a pod (`Pod::volume_hold`), naming the claim and the pod using
//! it, so no node is bought for a pod that cannot start.
//!
//! Only scheduled pods count, as in the scheduler: of several pending pods sharing one such
//! claim none is held, since which of them the scheduler binds first (and whether it can
//! bind that one at all) is not known before the pass. Once one is bound, the others are held
//! by the next snapshot. Only `persistentVolumeClaim` volumes count (the plugin reads no
//! generic ephemeral volume), and ReadWriteOnce claims are not restricted by the scheduler and
//! are not held here.

use std::collections::HashMap;

use joiner_core::Pod as CorePod;

use super::volumes::{PodClaim, VolumeIndex};

/// Holds each pending pod in `pods` whose ReadWriteOncePod claim a bound pod of `pods` uses
/// (see the module docs). `claims_of` gives a pod's claims. Bound pods are never held.
pub fn hold_once_pod_conflicts<'c>(
    index: &VolumeIndex<'_>,
    pods: &mut [CorePod],
    claims_of: impl Fn(&CorePod) -> Option<&'c [PodClaim]>,
) {
    if !index.has_once_pod_claims() {
        return;
    }
    let once = |pod: &CorePod| -> Vec<String> {
        claims_of(pod)
            .unwrap_or_default()
            .iter()
            .filter(|c| c.template.is_none() && index.is_once_pod(&pod.namespace, &c.name))
            .map(|c| format!("{}/{}", pod.namespace, c.name))
            .collect()
    };
    // Claim (`namespace/name`) → the bound pod using it.
    let mut users: HashMap<String, String> = HashMap::new();
    for pod in pods.iter().filter(|p| p.node_name.is_some()) {
        for claim in once(pod) {
            users.entry(claim).or_insert_with(|| pod.key());
        }
    }
    if users.is_empty() {
        return;
    }
    for pod in pods.iter_mut().filter(|p| p.node_name.is_none()) {
        let Some((claim, user)) = once(pod)
            .into_iter()
            .find_map(|c| users.get(&c).map(|u| (c, u.clone())))
        else {
            continue;
        };
        pod.hold_for_volume(format!(
            "volume claim {claim} is ReadWriteOncePod and pod {user} uses it; one pod at a \
             time may use it, so this one waits"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    fn claim(name: &str, mode: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"accessModes": [mode], "volumeName": format!("pv-{name}")},
            "status": {"phase": "Bound"}}))
        .expect("parses")
    }

    fn pod(name: &str, node: Option<&str>) -> CorePod {
        CorePod {
            namespace: "shop".into(),
            name: name.into(),
            node_name: node.map(str::to_string),
            ..CorePod::default()
        }
    }

    fn holds(pods: &[CorePod]) -> Vec<(&str, Option<&str>)> {
        pods.iter()
            .map(|p| (p.name.as_str(), p.volume_hold.as_deref()))
            .collect()
    }

    #[test]
    fn a_pending_user_of_a_once_pod_claim_a_bound_pod_uses_waits() {
        let claims = [
            claim("solo", "ReadWriteOncePod"),
            claim("shared", "ReadWriteOnce"),
            claim("queued", "ReadWriteOncePod"),
            claim("scratch", "ReadWriteOncePod"),
        ];
        let index = VolumeIndex::new(&claims, [], []);
        let uses: HashMap<&str, Vec<PodClaim>> = [
            ("running", vec![PodClaim::named("solo")]),
            ("wants-solo", vec![PodClaim::named("solo")]),
            ("rwo-a", vec![PodClaim::named("shared")]),
            ("rwo-b", vec![PodClaim::named("shared")]),
            // Pending users of an unused claim: which one the scheduler binds first is not
            // known before the pass, so none is held.
            ("queued-a", vec![PodClaim::named("queued")]),
            ("queued-b", vec![PodClaim::named("queued")]),
            // A generic ephemeral volume is not counted by the scheduler's VolumeRestrictions.
            ("ephemeral", vec![PodClaim::from_template("scratch", None)]),
            ("names-scratch", vec![PodClaim::named("scratch")]),
        ]
        .into_iter()
        .collect();
        let mut pods = vec![
            pod("wants-solo", None),
            pod("running", Some("n1")),
            pod("rwo-a", None),
            pod("rwo-b", Some("n1")),
            pod("queued-a", None),
            pod("queued-b", None),
            pod("ephemeral", Some("n1")),
            pod("names-scratch", None),
        ];
        hold_once_pod_conflicts(&index, &mut pods, |p| {
            uses.get(p.name.as_str()).map(Vec::as_slice)
        });
        assert_eq!(
            holds(&pods),
            [
                (
                    "wants-solo",
                    Some(
                        "volume claim shop/solo is ReadWriteOncePod and pod shop/running uses \
                         it; one pod at a time may use it, so this one waits"
                    )
                ),
                ("running", None),
                ("rwo-a", None),
                ("rwo-b", None),
                ("queued-a", None),
                ("queued-b", None),
                ("ephemeral", None),
                ("names-scratch", None),
            ]
        );
    }
}
