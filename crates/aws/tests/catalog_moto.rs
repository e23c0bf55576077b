//! The live catalog against moto through the real SDK: types (all pages), offerings per zone,
//! spot prices from moto's history, and the fallback to embedded on-demand prices when the
//! Pricing API fails (moto has none).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, LocationType};
use joiner_aws::catalog::{CatalogOptions, LiveCatalog, Source, SourceState};
use joiner_aws::{embedded, AwsClients};
use joiner_core::CapacityType;
use prometheus_client::registry::Registry;

fn options() -> CatalogOptions {
    CatalogOptions {
        page_size: Some(50),
        // moto answers Pricing with HTTP 500; one retry keeps the test quick.
        max_attempts: 2,
        call_timeout: Duration::from_secs(60),
        ..CatalogOptions::default()
    }
}

/// The hvm x86_64/arm64 types moto lists, read directly with the SDK.
async fn moto_types(ec2: &aws_sdk_ec2::Client) -> BTreeSet<String> {
    let mut pages = ec2
        .describe_instance_types()
        .filters(
            Filter::builder()
                .name("supported-virtualization-type")
                .values("hvm")
                .build(),
        )
        .filters(
            Filter::builder()
                .name("processor-info.supported-architecture")
                .values("x86_64")
                .values("arm64")
                .build(),
        )
        .into_paginator()
        .send();
    let mut out = BTreeSet::new();
    while let Some(page) = pages.next().await {
        for t in page.expect("DescribeInstanceTypes").instance_types() {
            out.insert(t.instance_type().expect("type").as_str().to_string());
        }
    }
    out
}

async fn moto_offerings(ec2: &aws_sdk_ec2::Client) -> BTreeMap<String, BTreeSet<String>> {
    let mut pages = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .into_paginator()
        .send();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    while let Some(page) = pages.next().await {
        for o in page.expect("offerings").instance_type_offerings() {
            out.entry(o.instance_type().expect("type").as_str().to_string())
                .or_default()
                .insert(o.location().expect("zone").to_string());
        }
    }
    out
}

#[tokio::test]
async fn live_catalog_against_moto() {
    let moto = joiner_moto::MotoServer::session().expect("moto");
    let config = moto.sdk_config("us-east-1").await;
    let clients = AwsClients::from_config(&config).expect("clients");
    let mut registry = Registry::default();
    let catalog = LiveCatalog::new(&clients, options(), &mut registry);

    let types = catalog.instance_types().await.expect("catalog");
    let status = catalog.status().await;

    // Every type moto lists was read. moto 5.2.1 ignores MaxResults and answers in one page,
    // so pagination itself is only exercised against AWS; the paginator is the SDK's.
    let listed = moto_types(&clients.ec2).await;
    assert!(status.type_pages >= 1, "pages read: {}", status.type_pages);
    assert_eq!(
        status.sources[&Source::InstanceTypes],
        SourceState::Live { last_error: None }
    );
    assert_eq!(
        status.sources[&Source::Offerings],
        SourceState::Live { last_error: None }
    );
    let offered = moto_offerings(&clients.ec2).await;
    let expected: BTreeSet<String> = listed
        .iter()
        .filter(|t| offered.contains_key(*t))
        .cloned()
        .collect();
    let got: BTreeSet<String> = types.iter().map(|t| t.name.clone()).collect();
    assert!(!expected.is_empty());
    assert_eq!(
        got.len() + status.skipped[&Source::InstanceTypes],
        expected.len()
    );
    assert!(got.is_subset(&expected));

    // Each zone sells types, and each type's zones are DescribeInstanceTypeOfferings'.
    for zone in ["us-east-1a", "us-east-1b"] {
        assert!(types
            .iter()
            .any(|t| t.offerings.iter().any(|o| o.zone == zone)));
    }
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large");
    let zones: BTreeSet<String> = m5.offerings.iter().map(|o| o.zone.clone()).collect();
    assert_eq!(Some(&zones), offered.get("m5.large"));

    // Pricing failed: on-demand prices are the embedded ones, exact in us-east-1.
    let status_od = &status.sources[&Source::OnDemandPrices];
    assert!(
        matches!(status_od, SourceState::Fallback { .. }),
        "{status_od:?}"
    );
    let embedded_price = embedded::on_demand_price("m5.large").expect("embedded price");
    for o in m5
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
    {
        assert_eq!(o.price, embedded_price);
        assert!(!o.price_estimated);
    }
    assert_eq!(status.fallbacks().len(), 1);
    assert_eq!(status.fallbacks()[0].0, Source::OnDemandPrices);

    // Spot prices come from moto's history.
    let spot: Vec<_> = m5
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::Spot)
        .collect();
    assert!(!spot.is_empty());
    assert!(spot
        .iter()
        .any(|o| !o.price_estimated && o.price < embedded_price));

    // The metrics say so.
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains("joiner_catalog_fallback{source=\"on_demand_prices\"} 1"),
        "{text}"
    );
    assert!(text.contains("joiner_catalog_fallback{source=\"instance_types\"} 0"));
    assert!(text.contains("joiner_catalog_refresh_errors_total{source=\"on_demand_prices\"} 1"));
    assert!(text.contains(&format!("joiner_catalog_instance_types {}", types.len())));
}

#[tokio::test]
async fn unreachable_ec2_falls_back_to_the_embedded_catalog() {
    let moto = joiner_moto::MotoServer::session().expect("moto");
    let mut config = moto.sdk_config("us-east-1").await.into_builder();
    // Nothing listens on port 9 of localhost: every call fails without an answer.
    config.set_endpoint_url(Some("http://127.0.0.1:9".to_string()));
    let clients = AwsClients::from_config(&config.build()).expect("clients");
    let mut registry = Registry::default();
    let opts = CatalogOptions {
        max_attempts: 1,
        ..options()
    };
    let catalog = LiveCatalog::new(&clients, opts, &mut registry);
    let types = catalog.instance_types().await.expect("embedded fallback");
    let embedded = embedded::cached("us-east-1").expect("embedded");
    assert_eq!(types.len(), embedded.instance_types.len());
    assert_eq!(catalog.status().await.fallbacks().len(), 4);

    // A region without an embedded catalog has nothing to fall back to.
    let mut cfg = moto.sdk_config("ap-southeast-2").await.into_builder();
    cfg.set_endpoint_url(Some("http://127.0.0.1:9".to_string()));
    let clients = AwsClients::from_config(&cfg.build()).expect("clients");
    let catalog = LiveCatalog::new(&clients, opts_single(), &mut Registry::default());
    let err = catalog.instance_types().await.expect_err("no fallback");
    assert!(err.to_string().contains("ap-southeast-2"), "{err}");
}

fn opts_single() -> CatalogOptions {
    CatalogOptions {
        max_attempts: 1,
        ..options()
    }
}

/// Counts the EC2 requests a client sends.
#[derive(Debug, Clone, Default)]
struct CountRequests(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl aws_sdk_ec2::config::Intercept for CountRequests {
    fn name(&self) -> &'static str {
        "CountRequests"
    }

    fn read_before_transmit(
        &self,
        _ctx: &aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_sdk_ec2::config::RuntimeComponents,
        _cfg: &mut aws_sdk_ec2::config::ConfigBag,
    ) -> Result<(), aws_sdk_ec2::error::BoxError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_stale_catalog_is_served_at_once_and_refreshed_in_the_background_only() {
    let moto = joiner_moto::MotoServer::session().expect("moto");
    let config = moto.sdk_config("us-east-1").await;
    let mut clients = AwsClients::from_config(&config).expect("clients");
    let counter = CountRequests::default();
    clients.ec2 = aws_sdk_ec2::Client::from_conf(
        clients
            .ec2
            .config()
            .to_builder()
            .interceptor(counter.clone())
            .build(),
    );
    // Every source is stale the moment it is read.
    let stale = CatalogOptions {
        types_ttl: Duration::ZERO,
        prices_ttl: Duration::ZERO,
        failure_retry: Duration::ZERO,
        ..options()
    };
    let catalog = LiveCatalog::new(&clients, stale, &mut Registry::default());
    let first = catalog.instance_types().await.expect("first load");
    let loads = counter.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(loads > 0, "the first call fetched");
    // A launch asking again gets the catalog at once, stale or not: no call to AWS.
    let again = catalog.instance_types().await.expect("served");
    assert!(std::sync::Arc::ptr_eq(&first, &again));
    assert_eq!(counter.0.load(std::sync::atomic::Ordering::SeqCst), loads);
    // The background refresher is what fetches again.
    let refreshed = catalog.refresh_due().await.expect("refresh");
    assert!(counter.0.load(std::sync::atomic::Ordering::SeqCst) > loads);
    assert_eq!(refreshed.len(), first.len());
    let served = catalog.instance_types().await.expect("served");
    assert!(
        std::sync::Arc::ptr_eq(&refreshed, &served),
        "the refreshed catalog is served"
    );
}
