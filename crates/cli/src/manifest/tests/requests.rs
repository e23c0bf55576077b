//! Effective request arithmetic.

use joiner_core::resources::NVIDIA_GPU;

use super::one_pod;

const MI: i64 = 1 << 20;

#[test]
fn app_containers_are_summed_plus_one_pod_slot() {
    let p = one_pod(
        "  containers:\n    - {name: a, resources: {requests: {cpu: 250m, memory: 100Mi}}}\n    - {name: b, resources: {requests: {cpu: \"1\", memory: 50Mi, ephemeral-storage: 1Gi}}}\n",
    );
    assert_eq!(p.requests.cpu, 1250);
    assert_eq!(p.requests.memory, 150 * MI);
    assert_eq!(p.requests.ephemeral_storage, 1 << 30);
    assert_eq!(p.requests.pods, 1);
}

#[test]
fn init_containers_take_the_max_per_resource() {
    // cpu: init 2 > sum 0.5; memory: sum 300Mi > init 100Mi.
    let p = one_pod(
        "  initContainers:\n    - {name: migrate, resources: {requests: {cpu: \"2\", memory: 100Mi}}}\n    - {name: warm, resources: {requests: {cpu: 1500m}}}\n  containers:\n    - {name: a, resources: {requests: {cpu: 250m, memory: 200Mi}}}\n    - {name: b, resources: {requests: {cpu: 250m, memory: 100Mi}}}\n",
    );
    assert_eq!(p.requests.cpu, 2000);
    assert_eq!(p.requests.memory, 300 * MI);
}

#[test]
fn sidecars_add_to_later_init_containers_and_to_the_app() {
    // Sidecar 500m runs throughout: init peak = 500m + 1 = 1500m; app = 200m + 500m = 700m.
    let p = one_pod(
        "  initContainers:\n    - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 500m, memory: 64Mi}}}\n    - {name: migrate, resources: {requests: {cpu: \"1\"}}}\n  containers:\n    - {name: a, resources: {requests: {cpu: 200m, memory: 100Mi}}}\n",
    );
    assert_eq!(p.requests.cpu, 1500);
    assert_eq!(p.requests.memory, 164 * MI);
}

#[test]
fn overhead_is_added() {
    let p = one_pod(
        "  overhead: {cpu: 250m, memory: 120Mi}\n  initContainers:\n    - {name: i, resources: {requests: {cpu: \"1\"}}}\n  containers:\n    - {name: a, resources: {requests: {cpu: 500m, memory: 100Mi}}}\n",
    );
    assert_eq!(p.requests.cpu, 1250, "max(1, 0.5) + 0.25");
    assert_eq!(p.requests.memory, 220 * MI);
}

#[test]
fn limits_stand_in_for_missing_requests() {
    let p = one_pod(
        "  containers:\n    - name: a\n      resources:\n        requests: {cpu: 100m}\n        limits: {cpu: \"2\", memory: 1Gi, nvidia.com/gpu: 1}\n",
    );
    assert_eq!(
        p.requests.cpu, 100,
        "an explicit request wins over the limit"
    );
    assert_eq!(p.requests.memory, 1 << 30, "limit used as request");
    assert_eq!(p.requests.get(NVIDIA_GPU), 1);
}

#[test]
fn numbers_and_no_resources() {
    let p = one_pod("  containers:\n    - {name: a, resources: {requests: {cpu: 0.5, memory: 1048576}}}\n    - {name: b}\n");
    assert_eq!(p.requests.cpu, 500);
    assert_eq!(p.requests.memory, MI);
    let empty = one_pod("  containers: [{name: a}]\n");
    assert_eq!(empty.requests, joiner_core::Resources::new(0, 0, 0, 1));
}

#[test]
fn pod_level_resources_replace_container_sums() {
    let p = one_pod(
        "  resources: {requests: {cpu: \"3\"}}\n  containers:\n    - {name: a, resources: {requests: {cpu: \"1\", memory: 64Mi}}}\n",
    );
    assert_eq!(p.requests.cpu, 3000);
    assert_eq!(
        p.requests.memory,
        64 * MI,
        "resources the pod level does not name stay"
    );
}
