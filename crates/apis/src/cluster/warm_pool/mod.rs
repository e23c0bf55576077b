//! The warm pools, as far as they are pure: how big a pool is kept and with which members
//! ([`sizing`]), which member may serve a claim ([`serves`]), and which pools cannot be kept
//! ([`unsupported`]). The controller's reconciler and takes, and `joiner plan`'s view of the
//! pools, go by these.

pub mod history;
pub mod sizing;

use joiner_core::{labels, CapacityType, Requirements, WarmState};

use crate::{AmiFamily, NodeTemplate, Provisioner};

/// The Launched condition reason of a claim served by a warm member.
pub const TAKEN_REASON: &str = "WarmPoolMemberStarted";

/// A warm member as a take judges it.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate<'a> {
    /// Its instance type.
    pub instance_type: &'a str,
    /// Its zone.
    pub zone: &'a str,
    /// Its on-demand price, USD/h.
    pub price: f64,
}

/// True when `member` may serve a claim with requirements `reqs` and allowed `zones` (empty:
/// any), whose cheapest new candidate costs `cheapest` USD/h: the requirements allow its type,
/// zone and on-demand capacity, and it costs at most `premium` (a fraction) more. The launch
/// path and `joiner plan` judge members by this one rule.
pub fn serves(
    reqs: &Requirements,
    zones: &[String],
    cheapest: Option<f64>,
    premium: f64,
    member: &Candidate<'_>,
) -> bool {
    reqs.get(labels::INSTANCE_TYPE)
        .is_none_or(|r| r.allows(member.instance_type))
        && reqs.get(labels::ZONE).is_none_or(|r| r.allows(member.zone))
        && reqs
            .get(labels::CAPACITY_TYPE)
            .is_none_or(|r| r.allows(CapacityType::OnDemand.as_str()))
        && (zones.is_empty() || zones.iter().any(|z| z == member.zone))
        && cheapest.is_none_or(|c| member.price <= c * (1.0 + premium) + 1e-9)
}

/// Why a Provisioner's pool cannot be kept now, when it cannot: the Custom AMI family (whose
/// user data joiner does not write), or a state Bottlerocket cannot wait in (`Hibernated`: EC2
/// does not hibernate Bottlerocket; `Running`: a Bottlerocket member learns its cluster from
/// settings applied when a take starts it, and a running member is never started). Members
/// are then not launched (existing ones stay).
pub fn unsupported(prov: &Provisioner, node_template: Option<&NodeTemplate>) -> Option<String> {
    let pool = prov.spec.warm_pool.as_ref()?;
    let family = node_template.map(|nt| nt.ami_family())?;
    let state = pool.warm_state();
    if family == AmiFamily::Bottlerocket && state != WarmState::Stopped {
        let why = match state {
            WarmState::Hibernated => "EC2 does not hibernate Bottlerocket instances",
            _ => "Bottlerocket members wait stopped only: their node settings are applied when a take starts them",
        };
        return Some(format!(
            "spec.warmPool.state: {}: {why}; use Stopped with NodeTemplate {}",
            state.as_str(),
            node_template.map(|nt| nt.name()).unwrap_or_default(),
        ));
    }
    if family == AmiFamily::Custom {
        return Some(format!(
            "NodeTemplate {}: spec.amiFamily Custom: joiner does not write Custom user data, so it cannot keep a warming instance from joining; use AL2023, Bottlerocket or AL2",
            node_template.map(|nt| nt.name()).unwrap_or_default(),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::Requirement;

    fn member(price: f64) -> Candidate<'static> {
        Candidate {
            instance_type: "m5.large",
            zone: "us-east-1a",
            price,
        }
    }

    #[test]
    fn a_member_serves_within_the_claims_requirements_and_premium() {
        let mut reqs = Requirements::new();
        reqs.add(
            labels::INSTANCE_TYPE,
            Requirement::one_of(["m5.large", "m5.xlarge"]),
        );
        let any: Vec<String> = Vec::new();
        // 25 % above a 0.08 $/h candidate is 0.10: 0.096 serves, 0.101 does not.
        assert!(serves(&reqs, &any, Some(0.08), 0.25, &member(0.096)));
        assert!(serves(&reqs, &any, Some(0.08), 0.25, &member(0.1)));
        assert!(!serves(&reqs, &any, Some(0.08), 0.25, &member(0.101)));
        // Another zone than the claim allows, a type it does not, spot only: no.
        assert!(!serves(
            &reqs,
            &["us-east-1b".to_string()],
            Some(0.1),
            0.25,
            &member(0.096)
        ));
        let other = Candidate {
            instance_type: "c5.large",
            ..member(0.085)
        };
        assert!(!serves(&reqs, &any, Some(0.1), 0.25, &other));
        let mut spot = reqs.clone();
        spot.add(labels::CAPACITY_TYPE, Requirement::single("spot"));
        assert!(!serves(&spot, &any, Some(0.1), 0.25, &member(0.096)));
        let mut zone = reqs.clone();
        zone.add(labels::ZONE, Requirement::single("us-east-1b"));
        assert!(!serves(&zone, &any, Some(0.1), 0.25, &member(0.096)));
    }
}
