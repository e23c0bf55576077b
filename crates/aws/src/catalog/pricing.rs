//! On-demand prices from the Pricing API's GetProducts.
//!
//! Each PriceList entry is a JSON document (a string inside the response) describing one SKU:
//! `product.attributes.instanceType` names the type and `terms.OnDemand.*.priceDimensions.*.
//! pricePerUnit.<currency>` holds the hourly price. The filters keep to Linux, shared tenancy,
//! no pre-installed software and used capacity (not reservations), so each type has one SKU.
//! Entries that do not have this shape are skipped and counted, never trusted.

use std::collections::BTreeMap;

use aws_sdk_pricing::types::{Filter, FilterType};
use serde_json::Value;

use crate::api_error::api_error;
use crate::error::AwsError;

/// Instance type → on-demand price per hour in the partition's currency.
pub type OnDemandPrices = BTreeMap<String, f64>;

/// The prices read and how many PriceList entries were unusable.
#[derive(Clone, Debug, Default)]
pub struct PriceTable {
    /// Type → lowest positive on-demand price among its SKUs.
    pub prices: OnDemandPrices,
    /// Entries skipped: not JSON, no instance type, no positive price.
    pub skipped: usize,
}

impl PriceTable {
    /// Adds one PriceList entry; a malformed one only bumps `skipped`.
    pub fn add_item(&mut self, item: &str, currency: &str) {
        match parse_item(item, currency) {
            Some((name, price)) => {
                let slot = self.prices.entry(name).or_insert(price);
                *slot = slot.min(price);
            }
            None => self.skipped += 1,
        }
    }
}

/// The currency of a region's prices: CNY in China, USD everywhere else.
pub fn currency(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "CNY"
    } else {
        "USD"
    }
}

/// One PriceList entry → (instance type, price), or `None` when it lacks either. Zero prices
/// (SKUs not sold) count as missing, as upstream treats them.
pub fn parse_item(item: &str, currency: &str) -> Option<(String, f64)> {
    let doc: Value = match serde_json::from_str(item) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!("skipping price item that is not JSON: {e}");
            return None;
        }
    };
    let name = doc
        .pointer("/product/attributes/instanceType")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())?;
    let price = doc
        .pointer("/terms/OnDemand")
        .and_then(Value::as_object)?
        .values()
        .filter_map(|term| term.get("priceDimensions").and_then(Value::as_object))
        .flat_map(|dims| dims.values())
        .filter_map(|dim| dim.pointer(&format!("/pricePerUnit/{currency}")))
        .filter_map(Value::as_str)
        .filter_map(|s| s.trim().parse::<f64>().ok())
        .filter(|p| p.is_finite() && *p > 0.0)
        .reduce(f64::min);
    match price {
        Some(p) => Some((name.to_string(), p)),
        None => {
            tracing::debug!(instance_type = name, "skipping price item without a price");
            None
        }
    }
}

fn term(field: &str, value: &str) -> Result<Filter, AwsError> {
    Filter::builder()
        .r#type(FilterType::TermMatch)
        .field(field)
        .value(value)
        .build()
        .map_err(|e| AwsError::Api {
            operation: "pricing:GetProducts",
            code: "InvalidFilter".to_string(),
            message: e.to_string(),
        })
}

/// Reads every Linux shared-tenancy on-demand price of `region`, all pages. The client must
/// point at the partition's pricing region (see [`crate::clients::pricing_region`]).
pub async fn get_on_demand_prices(
    pricing: &aws_sdk_pricing::Client,
    region: &str,
) -> Result<PriceTable, AwsError> {
    let mut request = pricing
        .get_products()
        .service_code("AmazonEC2")
        .format_version("aws_v1")
        .max_results(100);
    for (field, value) in [
        ("regionCode", region),
        ("serviceCode", "AmazonEC2"),
        ("productFamily", "Compute Instance"),
        ("tenancy", "Shared"),
        ("preInstalledSw", "NA"),
        ("operatingSystem", "Linux"),
        ("capacitystatus", "Used"),
        ("marketoption", "OnDemand"),
    ] {
        request = request.filters(term(field, value)?);
    }
    let currency = currency(region);
    let mut pages = request.into_paginator().send();
    let mut table = PriceTable::default();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| api_error("pricing:GetProducts", e))?;
        for item in page.price_list() {
            table.add_item(item, currency);
        }
    }
    Ok(table)
}
