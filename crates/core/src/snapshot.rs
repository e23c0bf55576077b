//! The state a scheduling pass starts from.

use crate::pod::{DaemonSet, Node, Pod};
use crate::provisioner::Provisioner;

/// Everything the simulation reads about the cluster: pods (pending ones have no node name,
/// running ones name their node), nodes, DaemonSets and Provisioners.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// All pods, pending and running.
    pub pods: Vec<Pod>,
    /// Existing and in-flight nodes.
    pub nodes: Vec<Node>,
    /// DaemonSets whose pods land on every eligible new node.
    pub daemonsets: Vec<DaemonSet>,
    /// Provisioners; when empty the simulation uses [`Provisioner::default_provisioner`].
    pub provisioners: Vec<Provisioner>,
}
