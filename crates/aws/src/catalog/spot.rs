//! DescribeSpotPriceHistory: the current spot price of each (type, zone).
//!
//! Asking with `StartTime = now` returns, for each (type, zone), the price in force now (the
//! latest change before it) and any later ones; the newest entry per pair wins.

use std::collections::BTreeMap;

use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_ec2::types::SpotPrice;

use crate::api_error::api_error;
use crate::error::AwsError;

/// (instance type, zone) → USD per hour.
pub type SpotPrices = BTreeMap<(String, String), f64>;

/// The parsed history and how many entries were unusable.
#[derive(Clone, Debug, Default)]
pub struct SpotHistory {
    /// The latest price per (type, zone).
    pub prices: SpotPrices,
    /// Entries without type, zone or a positive numeric price.
    pub skipped: usize,
}

/// The Linux spot prices in force now, all pages.
pub async fn describe_spot_prices(
    ec2: &aws_sdk_ec2::Client,
    page_size: Option<i32>,
) -> Result<SpotHistory, AwsError> {
    let mut request = ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .product_descriptions("Linux/UNIX (Amazon VPC)")
        .start_time(DateTime::from(std::time::SystemTime::now()));
    if let Some(n) = page_size {
        request = request.max_results(n);
    }
    let mut pages = request.into_paginator().send();
    let mut entries = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| api_error("ec2:DescribeSpotPriceHistory", e))?;
        entries.extend_from_slice(page.spot_price_history());
    }
    Ok(latest_prices(&entries))
}

/// Keeps the newest usable entry per (type, zone). Entries without a timestamp count as the
/// oldest; malformed ones are skipped and counted.
pub fn latest_prices(entries: &[SpotPrice]) -> SpotHistory {
    let mut newest: BTreeMap<(String, String), (Option<DateTime>, f64)> = BTreeMap::new();
    let mut skipped = 0;
    for e in entries {
        let price = e
            .spot_price()
            .and_then(|p| p.trim().parse::<f64>().ok())
            .filter(|p| p.is_finite() && *p > 0.0);
        let (Some(t), Some(zone), Some(price)) = (e.instance_type(), e.availability_zone(), price)
        else {
            tracing::debug!(?e, "skipping unusable spot price entry");
            skipped += 1;
            continue;
        };
        let stamp = e.timestamp().copied();
        let key = (t.as_str().to_string(), zone.to_string());
        match newest.get(&key) {
            Some((old, _)) if *old >= stamp => {}
            _ => {
                newest.insert(key, (stamp, price));
            }
        }
    }
    SpotHistory {
        prices: newest.into_iter().map(|(k, (_, p))| (k, p)).collect(),
        skipped,
    }
}
