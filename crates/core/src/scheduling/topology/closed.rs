//! What earlier passes closed to a pod ([`Closed`]) and where flexible pods are held
//! ([`Hold`]): the pinning's memory between passes.

use super::*;

/// Domains an earlier pass pinned pods to and then placed none of them in, while it placed
/// pods of the same workload elsewhere (a Provisioner's limit, no type with room there): the
/// next pass treats them as unreachable for those pods' classes, so the counts follow where
/// pods really go and the other domains take their share.
///
/// A closed domain where pods were placed still counts in the pods' spreads (its nodes will
/// be there); one where the workload got nothing is also gone from them: no node of its will
/// exist for the kube-scheduler to count.
///
/// It also says where flexible pods go under a spread that counts only some nodes ([`Hold`]).
#[derive(Clone, Debug, Default)]
pub struct Closed {
    pub(super) by_pod: HashMap<usize, BTreeSet<(String, String)>>,
    pub(super) gone: HashMap<usize, BTreeSet<(String, String)>>,
    pub(super) hold: Hold,
}

/// Where the pinning puts a class whose pods may land both on the nodes a spread counts and
/// on others (a flexible pod under the spread of on-demand-only pods, with the default
/// `nodeAffinityPolicy: Honor`). Passes start `Free`, and start over both ways once such a
/// spread came out skewed (`scheduling::settle` keeps the better plan).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hold {
    /// Counted as if it landed on counted nodes; the packer decides where it lands, which
    /// fills the room the counted pods' nodes leave (cheapest) but can undo the counts.
    #[default]
    Free,
    /// Held off the counted nodes (spot beside on-demand-only pods) and not counted.
    Off,
    /// Held on the counted nodes, and counted.
    On,
}

/// Domains as (topology key, value).
pub(super) type DomainSet = BTreeSet<(String, String)>;

/// A spread that counts only some nodes, as the pinning and the closing both name it: its
/// topology key, the pods it counts and the nodes it counts them on.
pub(crate) type FilteredSpread = (String, Scope, NodeFilter);

impl Closed {
    /// Closes domain `value` of topology key `key` to pod `pod` (a snapshot index); false when
    /// it already was.
    pub fn close(&mut self, pod: usize, key: &str, value: &str) -> bool {
        self.by_pod
            .entry(pod)
            .or_default()
            .insert((key.to_string(), value.to_string()))
    }

    /// Closes a domain to `pod` as [`Closed::close`] does, and takes it out of the domains
    /// its spreads count: its workload got no pod there. False when it already was gone.
    pub fn close_gone(&mut self, pod: usize, key: &str, value: &str) -> bool {
        self.close(pod, key, value);
        self.gone
            .entry(pod)
            .or_default()
            .insert((key.to_string(), value.to_string()))
    }

    /// Nothing closed, and flexible pods placed as `hold` says.
    pub fn holding(hold: Hold) -> Self {
        Closed {
            hold,
            ..Closed::default()
        }
    }

    /// Where flexible pods go under a spread counting only some nodes.
    pub fn hold(&self) -> Hold {
        self.hold
    }

    /// The domains closed to `pod`, and those gone from its spreads.
    pub(super) fn for_pod(&self, pod: usize) -> (DomainSet, DomainSet) {
        let get = |m: &HashMap<usize, DomainSet>| m.get(&pod).cloned().unwrap_or_default();
        (get(&self.by_pod), get(&self.gone))
    }
}
