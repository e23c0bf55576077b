//! DescribeInstanceTypeOfferings by availability zone: which types each zone sells.
//!
//! A type that exists in the region is not necessarily sold in every zone; planning a node in
//! a zone that lacks the type would fail only at launch, so offerings are restricted to the
//! zones EC2 lists.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::LocationType;

use crate::api_error::api_error;
use crate::error::AwsError;

/// Instance type name → the zones it is offered in, sorted.
pub type ZoneOfferings = BTreeMap<String, BTreeSet<String>>;

/// Lists every (type, zone) offering of the region, all pages.
pub async fn describe_offerings(
    ec2: &aws_sdk_ec2::Client,
    page_size: Option<i32>,
) -> Result<ZoneOfferings, AwsError> {
    let mut request = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone);
    if let Some(n) = page_size {
        request = request.max_results(n);
    }
    let mut pages = request.into_paginator().send();
    let mut out = ZoneOfferings::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| api_error("ec2:DescribeInstanceTypeOfferings", e))?;
        for o in page.instance_type_offerings() {
            match (o.instance_type(), o.location()) {
                (Some(t), Some(zone)) if !zone.is_empty() => {
                    out.entry(t.as_str().to_string())
                        .or_default()
                        .insert(zone.to_string());
                }
                _ => tracing::debug!(?o, "skipping offering without type or zone"),
            }
        }
    }
    Ok(out)
}
