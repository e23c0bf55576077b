//! ReadWriteOncePod claims: one pod at a time, cluster-wide.
//!
//! The kube-scheduler's VolumeRestrictions plugin refuses a pod whose ReadWriteOncePod claim
//! another scheduled pod uses, on every node: the pod stays pending until that pod is gone
//! (or preempted, which nominates the pod to the victim's node, where nothing need be
//! bought). Of several pending pods sharing one such claim the scheduler binds one; the others
//! then conflict with it. joiner holds the pods the scheduler would refuse (`Pod::volume_hold`),
//! naming the claim and the pod using it, so no node is bought for a pod that cannot start.
//! ReadWriteOnce claims are not restricted by the scheduler and are not held here.

use std::collections::HashMap;

use joiner_core::Pod as CorePod;

use super::volumes::{PodClaim, VolumeIndex};

/// Holds each pending pod in `pods` that the kube-scheduler would refuse for a
/// ReadWriteOncePod claim (see the module docs). `claims_of` gives a pod's claims. Users
/// are taken in the scheduler's queue order, highest priority first (then by name, so the
/// choice is stable between snapshots); a pending pod already held for another reason takes
/// no claim. Bound pods are never held.
pub fn hold_once_pod_conflicts<'c>(
    index: &VolumeIndex<'_>,
    pods: &mut [CorePod],
    claims_of: impl Fn(&CorePod) -> Option<&'c [PodClaim]>,
) {
    if !index.has_once_pod_claims() {
        return;
    }
    // Claim (`namespace/name`) → the pod using it, and whether that pod is pending too.
    let mut users: HashMap<String, (String, bool)> = HashMap::new();
    let mut pending = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let Some(claims) = claims_of(pod) else {
            continue;
        };
        let once: Vec<&PodClaim> = claims
            .iter()
            .filter(|c| index.is_once_pod(&pod.namespace, &c.name))
            .collect();
        if once.is_empty() {
            continue;
        }
        if pod.node_name.is_some() {
            for c in once {
                users
                    .entry(format!("{}/{}", pod.namespace, c.name))
                    .or_insert_with(|| (pod.key(), false));
            }
        } else {
            pending.push((i, once));
        }
    }
    pending.sort_by(|(a, _), (b, _)| {
        let (a, b) = (&pods[*a], &pods[*b]);
        b.priority
            .cmp(&a.priority)
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    for (i, once) in pending {
        let pod = &mut pods[i];
        if pod.volume_hold.is_some() {
            continue;
        }
        let keys: Vec<String> = once
            .iter()
            .map(|c| format!("{}/{}", pod.namespace, c.name))
            .collect();
        let taken = keys.iter().find_map(|k| users.get(k).map(|user| (k, user)));
        if let Some((claim, (user, user_pending))) = taken {
            let how = if *user_pending {
                "is to take it first (pending too)"
            } else {
                "uses it"
            };
            pod.hold_for_volume(format!(
                "volume claim {claim} is ReadWriteOncePod and pod {user} {how}; one pod at a \
                 time may use it, so this one waits"
            ));
            continue;
        }
        for k in keys {
            users.insert(k, (pod.key(), true));
        }
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

    fn pod(name: &str, node: Option<&str>, priority: i32) -> CorePod {
        CorePod {
            namespace: "shop".into(),
            name: name.into(),
            node_name: node.map(str::to_string),
            priority,
            ..CorePod::default()
        }
    }

    fn holds(pods: &[CorePod]) -> Vec<(&str, Option<&str>)> {
        pods.iter()
            .map(|p| (p.name.as_str(), p.volume_hold.as_deref()))
            .collect()
    }

    #[test]
    fn a_second_user_of_a_once_pod_claim_waits_and_a_once_claim_does_not() {
        let claims = [
            claim("solo", "ReadWriteOncePod"),
            claim("shared", "ReadWriteOnce"),
            claim("queued", "ReadWriteOncePod"),
        ];
        let index = VolumeIndex::new(&claims, [], []);
        let uses: HashMap<&str, Vec<PodClaim>> = [
            ("running", vec![PodClaim::named("solo")]),
            ("wants-solo", vec![PodClaim::named("solo")]),
            ("rwo-a", vec![PodClaim::named("shared")]),
            ("rwo-b", vec![PodClaim::named("shared")]),
            ("low", vec![PodClaim::named("queued")]),
            ("high", vec![PodClaim::named("queued")]),
            ("also", vec![PodClaim::named("queued")]),
        ]
        .into_iter()
        .collect();
        let mut pods = vec![
            pod("wants-solo", None, 0),
            pod("running", Some("n1"), 0),
            pod("rwo-a", None, 0),
            pod("rwo-b", Some("n1"), 0),
            pod("low", None, 0),
            pod("high", None, 100),
            pod("also", None, 0),
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
                (
                    "low",
                    Some(
                        "volume claim shop/queued is ReadWriteOncePod and pod shop/high is to \
                         take it first (pending too); one pod at a time may use it, so this \
                         one waits"
                    )
                ),
                ("high", None),
                (
                    "also",
                    Some(
                        "volume claim shop/queued is ReadWriteOncePod and pod shop/high is to \
                         take it first (pending too); one pod at a time may use it, so this \
                         one waits"
                    )
                ),
            ]
        );
    }

    #[test]
    fn a_pod_held_for_another_reason_leaves_the_claim_to_the_next() {
        let claims = [claim("solo", "ReadWriteOncePod")];
        let index = VolumeIndex::new(&claims, [], []);
        let uses = [PodClaim::named("solo")];
        let mut pods = vec![pod("a", None, 0), pod("b", None, 0)];
        pods[0].hold_for_volume("another claim is missing".into());
        hold_once_pod_conflicts(&index, &mut pods, |_| Some(&uses[..]));
        assert_eq!(
            holds(&pods),
            [("a", Some("another claim is missing")), ("b", None)]
        );
    }
}
