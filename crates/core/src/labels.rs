//! Well-known label keys, annotations and the normalization of deprecated beta keys.
//!
//! Workloads written for Karpenter or the kube-scheduler keep working because joiner speaks the
//! same keys; deprecated beta keys are rewritten to their GA names before any comparison.

/// Zone of a node.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// Region of a node.
pub const REGION: &str = "topology.kubernetes.io/region";
/// Instance type of a node.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// CPU architecture (amd64, arm64).
pub const ARCH: &str = "kubernetes.io/arch";
/// Operating system (linux, windows).
pub const OS: &str = "kubernetes.io/os";
/// Node name label.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// spot or on-demand.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Owning provisioner of a joiner node.
pub const PROVISIONER_NAME: &str = "joiner.sh/provisioner-name";
/// Owning NodeClaim of a joiner node.
pub const NODECLAIM: &str = "joiner.sh/nodeclaim";
/// Karpenter's provisioner label, honored on imported nodes.
pub const KARPENTER_PROVISIONER_NAME: &str = "karpenter.sh/provisioner-name";

/// NodeClaim annotation: the pods (`namespace/name`, a JSON list) the claim's room was bought
/// or set aside for. Written with the claim and added to when a plan places more pods on it,
/// so every snapshot — after a restart too — keeps that room for them until they bind.
pub const NOMINATED_PODS: &str = "joiner.sh/nominated-pods";
/// NodeClaim annotation on the old nodes of a disruption under way: the command (its reason,
/// nodes, replacement claims, start), so a new leader carries it on or rolls it back.
pub const DISRUPTION_COMMAND: &str = "joiner.sh/disruption-command";

/// Pod/node annotation that blocks voluntary disruption.
pub const DO_NOT_DISRUPT: &str = "joiner.sh/do-not-disrupt";
/// Karpenter's older pod annotation with the same meaning as [`DO_NOT_DISRUPT`], honored so
/// workloads written for Karpenter keep their protection.
pub const KARPENTER_DO_NOT_EVICT: &str = "karpenter.sh/do-not-evict";

/// Startup taint (effect NoSchedule) every joiner node registers with: no workload lands on it
/// before joiner has applied its NodeClaim's labels and taints and the node is Ready; joiner
/// removes it then.
pub const UNREGISTERED_TAINT: &str = "joiner.sh/unregistered";
/// Taint (effect NoSchedule) joiner puts on a node it is draining, so nothing new lands on it.
pub const DISRUPTED_TAINT: &str = "joiner.sh/disrupted";
/// Finalizer on NodeClaims and joiner's Nodes: held until the node is drained and its instance
/// terminated, so deleting either object never leaks an instance.
pub const TERMINATION_FINALIZER: &str = "joiner.sh/termination";
/// Taints Kubernetes itself puts on a node while it comes up (the node lifecycle controller's
/// `not-ready` and `unreachable`, the cloud controller's `uninitialized`), as (key, effect):
/// Karpenter's known ephemeral taints. A node is not initialized while it carries one, and a
/// Ready node's `not-ready`/`unreachable` NoSchedule is the lifecycle controller's lag (it
/// removes them a few seconds after Ready), not a node that refuses pods.
pub const EPHEMERAL_TAINTS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoSchedule"),
    ("node.kubernetes.io/unreachable", "NoSchedule"),
    (
        "node.cloudprovider.kubernetes.io/uninitialized",
        "NoSchedule",
    ),
];

/// The [`EPHEMERAL_TAINTS`] the node lifecycle controller lags on: gone a few seconds after the
/// node turned Ready.
pub const LIFECYCLE_LAG_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// True when (`key`, `effect`) is one of [`EPHEMERAL_TAINTS`].
pub fn is_ephemeral_taint(key: &str, effect: &str) -> bool {
    EPHEMERAL_TAINTS
        .iter()
        .any(|(k, e)| *k == key && *e == effect)
}

/// Instance tag marking a warm-pool member: exempt from orphan garbage collection.
pub const WARM_POOL: &str = "joiner.sh/warm-pool";
/// Instance tag and member-claim annotation: the state a warm-pool member was launched to wait
/// in (`Stopped`, `Running`, `Hibernated`); its user data and launch settings depend on it, so
/// a pool whose state changes replaces its members, and a start or hold is checked against it.
pub const WARM_STATE: &str = "joiner.sh/warm-state";

/// True when `value` can be a label value: empty, or at most 63 of `[A-Za-z0-9_.-]` starting
/// and ending with an alphanumeric. A node can never carry another, so a pod requiring one
/// (`team In [a/b]`) can never be placed, and a node launched for it could not be labelled.
pub fn is_valid_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let Some((first, last)) = bytes.first().zip(bytes.last()) else {
        return true;
    };
    bytes.len() <= 63
        && first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Keys Kubernetes and joiner define on every node, whatever the cloud: their values come from
/// the instance type, its offerings or the Provisioner. A pod may require them even when a
/// Provisioner does not mention them; the chosen instance type decides. A cloud provider adds
/// its own instance keys (`karpenter.k8s.aws/instance-family`, ...) through
/// [`crate::InstanceType::provider_keys`].
pub const WELL_KNOWN: &[&str] = &[
    ZONE,
    REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    CAPACITY_TYPE,
    PROVISIONER_NAME,
];

/// True for the keys of [`WELL_KNOWN`].
pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key)
}

/// Deprecated label keys and the keys that replaced them.
pub const DEPRECATED: &[(&str, &str)] = &[
    ("failure-domain.beta.kubernetes.io/zone", ZONE),
    ("failure-domain.beta.kubernetes.io/region", REGION),
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
];

/// True for a key in Karpenter's own domain that joiner's nodes never carry
/// (`karpenter.sh/nodepool`, `karpenter.sh/provisioner-name`): only Karpenter's nodes do, so
/// it is not read as joiner's Provisioner label. `karpenter.sh/capacity-type` is shared.
pub fn is_karpenter_only(key: &str) -> bool {
    key.starts_with("karpenter.sh/") && key != CAPACITY_TYPE
}

/// Rewrites deprecated beta label keys to their GA names.
pub fn normalize(key: &str) -> &str {
    DEPRECATED
        .iter()
        .find(|(old, _)| *old == key)
        .map_or(key, |(_, new)| *new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_keys_normalize() {
        assert_eq!(normalize("failure-domain.beta.kubernetes.io/zone"), ZONE);
        assert_eq!(normalize("beta.kubernetes.io/instance-type"), INSTANCE_TYPE);
        assert_eq!(normalize("example.com/rack"), "example.com/rack");
        // Karpenter's provisioner label is Karpenter's: joiner's nodes do not carry it.
        assert_eq!(
            normalize(KARPENTER_PROVISIONER_NAME),
            KARPENTER_PROVISIONER_NAME
        );
        assert!(is_karpenter_only("karpenter.sh/nodepool"));
        assert!(!is_karpenter_only(CAPACITY_TYPE));
        assert!(is_well_known(ZONE));
        assert!(!is_well_known("example.com/rack"));
    }
}
