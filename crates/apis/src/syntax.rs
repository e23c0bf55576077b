//! Kubernetes name syntax: label keys and values, taint keys, object names.
//!
//! The API server refuses an object whose labels, selectors or name break these rules, so a
//! plan made from such input would describe a cluster that cannot exist. Each check returns
//! the reason in the API server's words, for the caller to attach to the field.

/// A qualified name as a JSON-schema pattern, for the CRDs: the API server then refuses what
/// [`qualified_name`] refuses (save the 253-character prefix limit).
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$";
/// A label value as a JSON-schema pattern (see [`label_value`]).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";

/// Longest name part of a qualified name, and longest label value.
const NAME_MAX: usize = 63;
/// Longest DNS-1123 subdomain (a qualified name's prefix, most object names).
const SUBDOMAIN_MAX: usize = 253;

/// Why `s` is not a qualified name (`[prefix/]name`: a label key, a taint key, a topology
/// key), or `None`. The name is at most 63 alphanumerics, `-`, `_` or `.`, starting and ending
/// with an alphanumeric; the prefix a DNS-1123 subdomain.
pub fn qualified_name(s: &str) -> Option<String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some(format!("{s:?}: the prefix before '/' is empty"));
        }
        if let Some(why) = subdomain(p) {
            return Some(format!("{s:?}: prefix {why}"));
        }
    }
    if name.is_empty() {
        return Some(format!("{s:?}: the name part is empty"));
    }
    if name.contains('/') {
        return Some(format!("{s:?}: at most one '/' is allowed"));
    }
    name_part(name).map(|why| format!("{s:?}: {why}"))
}

/// Why `s` is not a label value (empty, or a name part of at most 63 characters), or `None`.
pub fn label_value(s: &str) -> Option<String> {
    if s.is_empty() {
        return None;
    }
    name_part(s).map(|why| format!("value {s:?}: {why}"))
}

/// Why `s` is not a DNS-1123 subdomain (at most 253 lowercase alphanumerics, `-` or `.`,
/// starting and ending with an alphanumeric): the rule for most object names.
pub fn subdomain(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > SUBDOMAIN_MAX {
        return Some(format!("must be at most {SUBDOMAIN_MAX} characters"));
    }
    let ok = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    // Each dot-separated part starts and ends with an alphanumeric ("a..b", "a.-b" are not).
    let parts_ok = s
        .split('.')
        .all(|p| ends(p.chars().next()) && ends(p.chars().last()));
    if !ok || !parts_ok {
        return Some(format!(
            "{s:?} must consist of lower case alphanumerics, '-' or '.', and start and end \
             with an alphanumeric"
        ));
    }
    None
}

/// Why `s` is not a DNS-1123 label (at most 63 lowercase alphanumerics or `-`, starting and
/// ending with an alphanumeric): the rule for namespaces.
pub fn dns_label(s: &str) -> Option<String> {
    if s.len() > NAME_MAX {
        return Some(format!("{s:?} must be at most {NAME_MAX} characters"));
    }
    if s.contains('.') {
        return Some(format!("{s:?} must not contain '.'"));
    }
    subdomain(s)
}

/// Labels joiner sets itself on the nodes it launches: a Provisioner may neither require nor
/// set them, or its nodes would claim an identity they do not have.
pub(crate) const JOINER_SET_LABELS: &[&str] = &[
    joiner_core::labels::HOSTNAME,
    joiner_core::labels::PROVISIONER_NAME,
    joiner_core::labels::NODECLAIM,
];

/// Label domains reserved for Karpenter and joiner: a Provisioner may neither set nor require
/// a label in them (other than the well-known keys), or its nodes would claim an identity
/// they do not have. `kubernetes.io` and `k8s.io` are not among them (Karpenter >= 1.10
/// allows them too): labels there the kubelet may not set itself are put on the Node by
/// registration instead ([`kubelet_may_set`]).
pub(crate) const RESTRICTED_DOMAINS: &[&str] = &["karpenter.sh", "joiner.sh"];
/// Domains the kubelet refuses in `--node-labels` (the NodeRestriction rule).
const KUBELET_REFUSED_DOMAINS: &[&str] = &["kubernetes.io", "k8s.io"];
/// Subdomains of those that the kubelet may set.
pub(crate) const DOMAIN_EXCEPTIONS: &[&str] = &["node.kubernetes.io", "kubelet.kubernetes.io"];
/// Keys in the restricted domains that nodes carry anyway: the kubelet's own labels and the
/// capacity type (their deprecated spellings are allowed through [`allowed_keys`]).
const ALLOWED_KEYS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "karpenter.sh/capacity-type",
    "joiner.sh/provisioner-name",
];

/// The keys in restricted domains a node may carry: [`ALLOWED_KEYS`] and the deprecated
/// spellings of well-known keys.
pub(crate) fn allowed_keys() -> impl Iterator<Item = &'static str> {
    ALLOWED_KEYS
        .iter()
        .copied()
        .chain(joiner_core::labels::DEPRECATED.iter().map(|(old, _)| *old))
}

/// The domain of a label key (what precedes its `/`), `None` for a key without one.
pub(crate) fn domain_of(key: &str) -> Option<&str> {
    key.split_once('/').map(|(d, _)| d)
}

/// True when `domain` is `d` or one of its subdomains (`node-role.kubernetes.io` is within
/// `kubernetes.io`; `mykubernetes.io` is not).
pub(crate) fn within(domain: &str, d: &str) -> bool {
    domain == d
        || domain
            .strip_suffix(d)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Why `key` is in one of `domains` and not allowed there, or `None`.
fn refused_in(key: &str, domains: &[&'static str]) -> Option<&'static str> {
    let domain = domain_of(key)?;
    if allowed_keys().any(|k| k == key) || DOMAIN_EXCEPTIONS.iter().any(|e| within(domain, e)) {
        return None;
    }
    domains.iter().copied().find(|d| within(domain, d))
}

/// True when the kubelet accepts `key` in `--node-labels`: outside `kubernetes.io` and
/// `k8s.io`, or one of the kubelet's own keys, or under `node.kubernetes.io` or
/// `kubelet.kubernetes.io`. Other labels (`node-role.kubernetes.io/worker`,
/// `node-restriction.kubernetes.io/team`) are left out of the kubelet's flags and put on the
/// Node by registration, before joiner's startup taint comes off.
pub fn kubelet_may_set(key: &str) -> bool {
    refused_in(key, KUBELET_REFUSED_DOMAINS).is_none()
}

/// Why a Provisioner may not set or require label `key` because of its domain (`karpenter.sh`
/// and `joiner.sh` are reserved), or `None`. The well-known keys (capacity type, ...) are
/// allowed.
pub fn restricted_domain(key: &str) -> Option<String> {
    refused_in(key, RESTRICTED_DOMAINS).map(|d| {
        format!(
            "label {key} is in the domain {d}, reserved for Karpenter and joiner (use a label \
             of your own domain)"
        )
    })
}

fn name_part(s: &str) -> Option<String> {
    if s.len() > NAME_MAX {
        return Some(format!("must be at most {NAME_MAX} characters"));
    }
    let ok = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !ok || !ends(s.chars().next()) || !ends(s.chars().last()) {
        return Some(
            "must consist of alphanumerics, '-', '_' or '.', and start and end with an \
             alphanumeric"
                .into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qualified names the API server takes, and some it refuses.
    pub(super) const GOOD_KEYS: &[&str] = &[
        "app",
        "kubernetes.io/arch",
        "example.com/My_Key-1.x",
        "a",
        "v1.2",
    ];
    pub(super) const BAD_KEYS: &[&str] = &[
        "",
        "bad key",
        "/x",
        "a/b/c",
        "Example.com/x",
        "x/",
        "-x",
        "x_",
        "a..b/x",
        "a.-b.com/x",
    ];

    #[test]
    fn qualified_names() {
        let max = "k".repeat(63);
        for ok in GOOD_KEYS.iter().copied().chain([max.as_str()]) {
            assert_eq!(qualified_name(ok), None, "{ok}");
        }
        let long = "k".repeat(64);
        for bad in BAD_KEYS.iter().copied().chain([long.as_str()]) {
            assert!(qualified_name(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn restricted_domains() {
        assert!(restricted_domain("karpenter.sh/nodepool").is_some());
        assert!(restricted_domain("joiner.sh/team").is_some());
        assert!(restricted_domain("sub.karpenter.sh/x").is_some());
        // Karpenter >= 1.10 allows the Kubernetes domains; registration labels the Node.
        for ok in [
            "node-role.kubernetes.io/worker",
            "kubernetes.io/role",
            "example.k8s.io/x",
            "kops.k8s.io/instancegroup",
            "node-restriction.kubernetes.io/team",
            "node.kubernetes.io/instance-type",
            "beta.kubernetes.io/arch",
            "topology.kubernetes.io/zone",
            "karpenter.sh/capacity-type",
            "node.kubernetes.io/lifecycle",
            "pool.node.kubernetes.io/x",
            "kubelet.kubernetes.io/x",
            "karpenter.k8s.aws/instance-family",
            "example.com/team",
            "mykarpenter.sh/x",
            "karpenter.sh",
            "team",
        ] {
            assert_eq!(restricted_domain(ok), None, "{ok}");
        }
        assert!(
            kubelet_may_set("karpenter.sh/nodepool"),
            "not the kubelet's business"
        );
        assert!(kubelet_may_set("kubernetes.io/hostname"));
        assert!(kubelet_may_set("node.kubernetes.io/lifecycle"));
        assert!(kubelet_may_set("topology.kubernetes.io/zone"));
        assert!(!kubelet_may_set("node-role.kubernetes.io/worker"));
        assert!(!kubelet_may_set("node-restriction.kubernetes.io/team"));
        assert!(!kubelet_may_set("kops.k8s.io/instancegroup"));
    }

    #[test]
    fn values_and_object_names() {
        assert_eq!(label_value(""), None);
        assert_eq!(label_value("us-east-1a"), None);
        assert!(label_value("with space").is_some());
        assert!(label_value(&"v".repeat(64)).is_some());
        assert_eq!(subdomain("web-1.shop"), None);
        assert!(subdomain("Bad_Name").is_some());
        assert!(subdomain("web-").is_some());
        assert!(subdomain("a..b").is_some());
        assert!(subdomain("a.-b.com").is_some());
        assert_eq!(dns_label("kube-system"), None);
        assert!(dns_label("a.b").is_some());
    }
}

#[cfg(test)]
mod pattern_tests {
    use super::*;

    /// The CRD patterns refuse what the loader's checks refuse, so `kubectl apply` and
    /// `joiner plan` agree.
    #[test]
    fn crd_patterns_agree_with_the_checks() {
        let key = regex::Regex::new(QUALIFIED_NAME_PATTERN).expect("pattern compiles");
        let value = regex::Regex::new(LABEL_VALUE_PATTERN).expect("pattern compiles");
        let long = "k".repeat(64);
        let max = "k".repeat(63);
        let samples = super::tests::GOOD_KEYS
            .iter()
            .chain(super::tests::BAD_KEYS)
            .copied()
            .chain([long.as_str(), max.as_str()]);
        for s in samples {
            assert_eq!(key.is_match(s), qualified_name(s).is_none(), "key {s:?}");
            assert_eq!(value.is_match(s), label_value(s).is_none(), "value {s:?}");
        }
    }
}
