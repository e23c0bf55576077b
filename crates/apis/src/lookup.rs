//! Read-only access to the Provisioners and NodeTemplates, by name.
//!
//! A cloud provider needs a claim's Provisioner and NodeTemplate when it launches. It is given
//! an [`ObjectLookup`] when it is built (the controller's reflector stores, or a fixed set in
//! tools and tests) and reads the current objects from it at each call, so nothing has to push
//! objects into it and nothing can be stale by a feeding interval.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{NodeTemplate, Provisioner};

/// Where the current Provisioners and NodeTemplates are read.
pub trait ObjectLookup: Send + Sync {
    /// The Provisioner `name`, if it exists.
    fn provisioner(&self, name: &str) -> Option<Arc<Provisioner>>;
    /// The NodeTemplate `name`, if it exists.
    fn node_template(&self, name: &str) -> Option<Arc<NodeTemplate>>;
}

/// A fixed set of objects: for `joiner` subcommands that run without a cluster, and tests.
#[derive(Clone, Debug, Default)]
pub struct StaticObjects {
    provisioners: BTreeMap<String, Arc<Provisioner>>,
    node_templates: BTreeMap<String, Arc<NodeTemplate>>,
}

impl StaticObjects {
    /// The set holding `provisioners` and `node_templates`, by name.
    pub fn new(provisioners: Vec<Provisioner>, node_templates: Vec<NodeTemplate>) -> Self {
        StaticObjects {
            provisioners: provisioners
                .into_iter()
                .map(|p| (p.name().to_string(), Arc::new(p)))
                .collect(),
            node_templates: node_templates
                .into_iter()
                .map(|n| (n.name().to_string(), Arc::new(n)))
                .collect(),
        }
    }
}

impl ObjectLookup for StaticObjects {
    fn provisioner(&self, name: &str) -> Option<Arc<Provisioner>> {
        self.provisioners.get(name).cloned()
    }

    fn node_template(&self, name: &str) -> Option<Arc<NodeTemplate>> {
        self.node_templates.get(name).cloned()
    }
}
