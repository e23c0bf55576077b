//! What a NodeTemplate resolves to in the cloud account (subnets, security groups, images),
//! as the cloud provider reports it and the NodeTemplate status shows it.
//!
//! The resolution itself is the cloud's business ([`NodeTemplateResolver`], implemented by the
//! AWS provider); turning it into a status with a `Ready` condition is the controller's, which
//! therefore needs no cloud types.

use std::collections::BTreeSet;
use std::future::Future;

use thiserror::Error;

use crate::{NodeTemplate, ResolvedAmi, ResolvedSecurityGroup, ResolvedSubnet};

/// Which part of a NodeTemplate cannot be resolved: the `Ready=False` reason names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveFailure {
    /// `spec.subnetSelector` selects no subnet.
    Subnets,
    /// `spec.securityGroupSelector` selects no security group.
    SecurityGroups,
    /// No image: the family's default parameters are missing or `spec.amiSelector` selects
    /// nothing.
    Ami,
    /// The spec fails [`NodeTemplate::validate`] (an object written before the CRD's rules
    /// refused it): nothing is resolved or launched with it.
    Invalid,
}

/// A NodeTemplate that resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Every subnet the selector matched, sorted by ID.
    pub subnets: Vec<ResolvedSubnet>,
    /// Every security group the selector matched, sorted by ID.
    pub security_groups: Vec<ResolvedSecurityGroup>,
    /// The images in use, with the instance types each serves.
    pub amis: Vec<ResolvedAmi>,
    /// Default images that were needed but not found, as `arch/variant` (`arm64/nvidia`): their
    /// instance types cannot launch with this template, though the others can.
    pub unresolved: Vec<String>,
}

impl Resolved {
    /// The zones the subnets are in, sorted.
    pub fn zones(&self) -> Vec<String> {
        let zones: BTreeSet<&str> = self.subnets.iter().map(|s| s.zone.as_str()).collect();
        zones.into_iter().map(str::to_string).collect()
    }
}

/// A NodeTemplate that did not resolve.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{message}")]
pub struct ResolveError {
    /// The part of the template at fault, or `None` when the failure lies outside it (a cloud
    /// call failed): such a failure may pass by itself, and what resolved before is kept.
    pub failure: Option<ResolveFailure>,
    /// The cloud's message, naming the NodeTemplate and field.
    pub message: String,
}

/// The cloud side of NodeTemplate status: resolves a template's selectors in the account.
pub trait NodeTemplateResolver: Send + Sync {
    /// What `node_template` resolves to now.
    fn resolve(
        &self,
        node_template: &NodeTemplate,
    ) -> impl Future<Output = Result<Resolved, ResolveError>> + Send;
}
