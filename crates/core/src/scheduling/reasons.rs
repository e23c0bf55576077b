//! Why a pod cannot go on a provisioner's nodes, phrased so a person knows what to change.

use std::fmt;

use crate::resources::{format_amount, human_amount};

/// One provisioner's reason to refuse a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A provisioner taint the pod does not tolerate.
    Taint(String),
    /// A pod requirement that the provisioner's requirements contradict.
    ProvisionerRequirement {
        /// The pod's requirement, `key op values`.
        requirement: String,
        /// The provisioner's requirement on the same key.
        provisioner: String,
    },
    /// A pod requirement no instance type (or label) of the provisioner satisfies.
    Requirement(String),
    /// One resource is larger than on any allowed type.
    Resource {
        /// Resource name.
        name: String,
        /// The pod's request.
        requested: i64,
        /// Allocatable of the allowed type that leaves the most beside its DaemonSets.
        largest: i64,
        /// What that type's DaemonSets request of it.
        daemons: i64,
    },
    /// Each resource fits some type but none has all of them at once.
    ResourcesTogether(String),
    /// The pod's own node requirements on a key admit no value (its nodeSelector and required
    /// node affinity, or two expressions of one term, disagree).
    Contradiction(String),
    /// The pod requires zones no instance type is offered in: not zones of the catalog's region.
    ZoneNotOffered {
        /// The pod's zone requirement.
        requirement: String,
        /// The catalog's region, when its types say.
        region: Option<String>,
        /// The zones the catalog offers.
        zones: Vec<String>,
    },
    /// Non-accelerator pods are kept off GPU types, and only GPU types are left.
    OnlyAccelerated,
    /// Every allowed type runs a DaemonSet that binds the same host port.
    HostPort(String),
    /// A topology, affinity or host-port rule leaves no domain or node for the pod.
    Topology(String),
    /// The pod requires a label only Karpenter's nodes carry (`karpenter.sh/nodepool`).
    KarpenterLabel(String),
    /// The pod requires an operating system other than Linux (Windows).
    LinuxOnly(String),
    /// The pod requires label values no node can carry (`team In [a/b]`: not a label value).
    InvalidLabelValue {
        /// The pod's requirement, `key op values`.
        requirement: String,
        /// The first value that is not a label value.
        value: String,
    },
    /// The provisioner's limit leaves no room.
    Limit {
        /// Resource capped.
        name: String,
        /// The limit.
        limit: i64,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Taint(t) => write!(f, "taint {t} is not tolerated"),
            Reason::ProvisionerRequirement {
                requirement,
                provisioner,
            } => write!(
                f,
                "requirement {requirement} conflicts with the provisioner's {provisioner}"
            ),
            Reason::Requirement(r) => write!(f, "no instance type matches requirement {r}"),
            Reason::Resource {
                name,
                requested,
                largest,
                daemons: 0,
            } => write!(
                f,
                "no instance type has {} allocatable; the largest allowed has {}",
                human_amount(name, *requested),
                human_amount(name, *largest)
            ),
            Reason::Resource {
                name,
                requested,
                largest,
                daemons,
            } => write!(
                f,
                "no instance type has {} allocatable beside its DaemonSets; the largest allowed \
                 has {}, of which DaemonSets request {}",
                human_amount(name, *requested),
                human_amount(name, *largest),
                human_amount(name, *daemons)
            ),
            Reason::ResourcesTogether(r) => {
                write!(f, "no instance type has room for {r} at once")
            }
            Reason::Contradiction(key) => write!(
                f,
                "the pod's own node requirements on {key} admit no value (its nodeSelector and \
                 required node affinity disagree)"
            ),
            Reason::ZoneNotOffered {
                requirement,
                region,
                zones,
            } => {
                match region {
                    Some(r) => write!(
                        f,
                        "requirement {} {requirement} names no zone of region {r}",
                        crate::labels::ZONE
                    )?,
                    None => write!(
                        f,
                        "requirement {} {requirement} names no zone any instance type is offered in",
                        crate::labels::ZONE
                    )?,
                }
                write!(f, " (its zones: {})", zones.join(", "))
            }
            Reason::OnlyAccelerated => write!(
                f,
                "only accelerator (GPU) instance types fit and the pod requests no accelerator"
            ),
            Reason::HostPort(p) => write!(
                f,
                "host port {p} is already bound by a DaemonSet on every allowed instance type"
            ),
            Reason::Topology(t) => write!(f, "{t}"),
            Reason::LinuxOnly(r) => write!(f, "requirement {r}: joiner launches Linux nodes only"),
            Reason::InvalidLabelValue { requirement, value } => write!(
                f,
                "requirement {requirement}: {value:?} is not a valid label value, so no node can \
                 carry it"
            ),
            Reason::KarpenterLabel(r) => write!(
                f,
                "requirement {r} selects Karpenter's nodes; joiner's nodes carry {} instead",
                crate::labels::PROVISIONER_NAME
            ),
            Reason::Limit { name, limit } => write!(
                f,
                "launching would exceed limit {name}={}",
                format_amount(name, *limit)
            ),
        }
    }
}

/// Joins per-provisioner reasons into one line; one reason shared by all is given once.
pub fn combine(reasons: &[(String, Reason)]) -> String {
    match reasons {
        [] => "no provisioner".to_string(),
        [(_, r)] => r.to_string(),
        // Every Provisioner refuses for the same reason: say it once.
        [(_, first), rest @ ..] if rest.iter().all(|(_, r)| r == first) => first.to_string(),
        many => many
            .iter()
            .map(|(p, r)| format!("provisioner {p}: {r}"))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemonset_overhead_is_named_when_it_takes_the_room() {
        // A DaemonSet requesting more than the largest type has: the pod is told why, not
        // that the largest type has nothing.
        let r = Reason::Resource {
            name: "cpu".into(),
            requested: 100,
            largest: 3_920,
            daemons: 6_000,
        };
        assert_eq!(
            r.to_string(),
            "no instance type has 0.1 cpu cores allocatable beside its DaemonSets; the largest \
             allowed has 3.92 cpu cores, of which DaemonSets request 6 cpu cores"
        );
    }

    #[test]
    fn phrasing() {
        let r = Reason::Resource {
            name: "cpu".into(),
            requested: 1_000_000,
            largest: 448_000,
            daemons: 0,
        };
        assert_eq!(
            r.to_string(),
            "no instance type has 1000 cpu cores allocatable; the largest allowed has 448 cpu cores"
        );
        let m = Reason::Resource {
            name: "memory".into(),
            requested: 3000 << 30,
            largest: (1466 << 30) + (1 << 29),
            daemons: 0,
        };
        assert_eq!(
            m.to_string(),
            "no instance type has 3000 GiB memory allocatable; the largest allowed has 1466.5 GiB memory"
        );
        let l = Reason::Limit {
            name: "cpu".into(),
            limit: 16_000,
        };
        assert_eq!(l.to_string(), "launching would exceed limit cpu=16");
        assert_eq!(
            combine(&[
                ("a".into(), l.clone()),
                ("b".into(), Reason::OnlyAccelerated)
            ]),
            format!(
                "provisioner a: {l}; provisioner b: {}",
                Reason::OnlyAccelerated
            )
        );
    }
}
