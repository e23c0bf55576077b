//! The Pricing and spot parsers on recorded answers of the real shapes (Pricing is not served
//! by moto): prices are read, malformed items are skipped and counted, nothing panics.

use aws_sdk_ec2::primitives::{DateTime, DateTimeFormat};
use aws_sdk_ec2::types::{InstanceType, RiProductDescription, SpotPrice};
use joiner_aws::catalog::pricing::{currency, PriceTable};
use joiner_aws::catalog::spot::latest_prices;
use serde_json::Value;

fn fixture(path: &str) -> Value {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).expect("read fixture");
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn price_table(path: &str, region: &str) -> PriceTable {
    let doc = fixture(path);
    let mut table = PriceTable::default();
    for item in doc["PriceList"].as_array().expect("PriceList") {
        table.add_item(item.as_str().expect("items are strings"), currency(region));
    }
    table
}

#[test]
fn get_products_items_give_hourly_usd_prices() {
    let t = price_table("pricing/get-products-us-east-1.json", "us-east-1");
    assert_eq!(t.prices.get("m5.large"), Some(&0.096));
    assert_eq!(t.prices.get("c6g.large"), Some(&0.068));
    // Zero price, no type, unparsable price, not JSON.
    assert!(!t.prices.contains_key("x1e.32xlarge"));
    assert!(!t.prices.contains_key("t3.micro"));
    assert_eq!(t.prices.len(), 2);
    assert_eq!(t.skipped, 4);
}

#[test]
fn china_prices_are_read_in_cny() {
    assert_eq!(currency("cn-north-1"), "CNY");
    let t = price_table("pricing/get-products-cn-north-1.json", "cn-north-1");
    assert_eq!(t.prices.get("m5.large"), Some(&0.844));
    // Read as USD, the same item has no price.
    let usd = price_table("pricing/get-products-cn-north-1.json", "us-east-1");
    assert!(usd.prices.is_empty());
    assert_eq!(usd.skipped, 1);
}

/// The recorded DescribeSpotPriceHistory answer (as the CLI prints it) into the SDK's types.
fn spot_entries() -> Vec<SpotPrice> {
    let doc = fixture("spot/describe-spot-price-history.json");
    doc["SpotPriceHistory"]
        .as_array()
        .expect("SpotPriceHistory")
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().map(str::to_string);
            SpotPrice::builder()
                .set_availability_zone(s("AvailabilityZone"))
                .set_instance_type(s("InstanceType").map(|t| InstanceType::from(t.as_str())))
                .set_product_description(
                    s("ProductDescription").map(|d| RiProductDescription::from(d.as_str())),
                )
                .set_spot_price(s("SpotPrice"))
                .set_timestamp(
                    s("Timestamp")
                        .map(|t| DateTime::from_str(&t, DateTimeFormat::DateTime).expect("time")),
                )
                .build()
        })
        .collect()
}

#[test]
fn spot_history_keeps_the_latest_price_per_type_and_zone() {
    let h = latest_prices(&spot_entries());
    let get = |t: &str, z: &str| h.prices.get(&(t.to_string(), z.to_string())).copied();
    assert_eq!(get("m5.large", "us-east-1a"), Some(0.0412));
    assert_eq!(get("m5.large", "us-east-1b"), Some(0.0381));
    // The newer entry is malformed: the older valid one stays.
    assert_eq!(get("c6g.large", "us-east-1a"), Some(0.0273));
    assert_eq!(h.prices.len(), 3);
    assert_eq!(h.skipped, 2);
}
