//! The live catalog: EC2 and Pricing answers, refreshed on an interval, with the embedded
//! catalog standing in for any source that cannot be read.
//!
//! Four sources feed it, each refreshed on its own clock and each able to fail alone:
//! instance types and zone offerings (DescribeInstanceTypes, DescribeInstanceTypeOfferings;
//! cached 5 min by default), on-demand prices (Pricing GetProducts) and spot prices
//! (DescribeSpotPriceHistory; both 12 h by default). A source that fails keeps its last good
//! answer; if it never had one, the embedded data for that source serves instead. Either way
//! the catalog keeps answering: moto has no Pricing API and isolated VPCs reach none, and
//! neither must stop scheduling. A source that starts failing is logged once (`warn`), its
//! recovery once (`info`), and the `joiner_catalog_fallback{source}` gauge says which sources
//! serve embedded data right now.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use joiner_core::{CapacityType, InstanceType, Offering};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::{Mutex, MutexGuard};

use super::instance_types::{describe_instance_types, LiveType};
use super::offerings::{describe_offerings, ZoneOfferings};
use super::pricing::{get_on_demand_prices, OnDemandPrices};
use super::spot::{describe_spot_prices, SpotPrices};
use crate::clients::AwsClients;
use crate::embedded;
use crate::error::{AwsError, CatalogError};

/// One input of the catalog, refreshed and falling back on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// DescribeInstanceTypes.
    InstanceTypes,
    /// DescribeInstanceTypeOfferings (availability zones).
    Offerings,
    /// Pricing GetProducts.
    OnDemandPrices,
    /// DescribeSpotPriceHistory.
    SpotPrices,
}

impl Source {
    /// Every source, in refresh order.
    pub const ALL: [Source; 4] = [
        Source::InstanceTypes,
        Source::Offerings,
        Source::OnDemandPrices,
        Source::SpotPrices,
    ];

    /// The `source` label value of the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::InstanceTypes => "instance_types",
            Source::Offerings => "offerings",
            Source::OnDemandPrices => "on_demand_prices",
            Source::SpotPrices => "spot_prices",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How often the catalog asks AWS again and how hard it tries. The defaults are Karpenter's
/// (types and offerings cached 5 min, prices 12 h).
#[derive(Clone, Debug)]
pub struct CatalogOptions {
    /// Age after which instance types and offerings are fetched again.
    pub types_ttl: Duration,
    /// Age after which on-demand and spot prices are fetched again.
    pub prices_ttl: Duration,
    /// Wait before asking a failing source again (a Pricing endpoint that is unreachable
    /// would otherwise cost its retries on every call).
    pub failure_retry: Duration,
    /// MaxResults of the EC2 list calls; `None` lets EC2 choose. Tests make it small to
    /// exercise pagination.
    pub page_size: Option<i32>,
    /// Attempts per call in the SDK's standard retry mode (throttling, 5xx, timeouts).
    pub max_attempts: u32,
    /// Time limit of one call, all its pages' retries included.
    pub call_timeout: Duration,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            types_ttl: Duration::from_secs(5 * 60),
            prices_ttl: Duration::from_secs(12 * 60 * 60),
            failure_retry: Duration::from_secs(5 * 60),
            page_size: None,
            max_attempts: 3,
            call_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

/// The catalog's Prometheus metrics, registered in the registry the controller serves.
#[derive(Clone, Debug, Default)]
pub struct CatalogMetrics {
    /// 1 while a source serves embedded data, 0 otherwise.
    fallback: Family<SourceLabels, Gauge>,
    /// Failed refreshes per source (after the SDK's retries).
    refresh_errors: Family<SourceLabels, Counter>,
    /// Malformed items skipped in the last answer of a source.
    skipped: Family<SourceLabels, Gauge>,
    /// Instance types in the last assembled catalog.
    instance_types: Gauge,
}

impl CatalogMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = CatalogMetrics::default();
        registry.register(
            "joiner_catalog_fallback",
            "1 while the catalog source serves the embedded data because AWS could not be read",
            m.fallback.clone(),
        );
        registry.register(
            "joiner_catalog_refresh_errors",
            "Catalog refreshes that failed after retries, per source",
            m.refresh_errors.clone(),
        );
        registry.register(
            "joiner_catalog_skipped_items",
            "Malformed items skipped in the last answer of the catalog source",
            m.skipped.clone(),
        );
        registry.register(
            "joiner_catalog_instance_types",
            "Instance types in the catalog",
            m.instance_types.clone(),
        );
        for s in Source::ALL {
            m.fallback.get_or_create(&labels(s)).set(0);
            let _ = m.refresh_errors.get_or_create(&labels(s));
        }
        m
    }
}

fn labels(source: Source) -> SourceLabels {
    SourceLabels {
        source: source.as_str(),
    }
}

/// What a source is serving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceState {
    /// Not fetched yet.
    Unfetched,
    /// AWS's answer (possibly an older one kept while a refresh fails: `last_error` says so).
    Live {
        /// Why the last refresh failed, when it did.
        last_error: Option<String>,
    },
    /// The embedded data, because AWS has not answered since start.
    Fallback {
        /// Why the last attempt failed.
        reason: String,
    },
}

/// A snapshot of where the catalog's data comes from, for `joiner plan` and readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogStatus {
    /// The region of the catalog.
    pub region: String,
    /// Each source's state.
    pub sources: BTreeMap<Source, SourceState>,
    /// Instance types in the last assembled catalog.
    pub instance_types: usize,
    /// Malformed API items skipped in the last answers, per source.
    pub skipped: BTreeMap<Source, usize>,
    /// DescribeInstanceTypes pages read in the last successful fetch.
    pub type_pages: usize,
}

impl CatalogStatus {
    /// The sources serving embedded data, with the reason.
    pub fn fallbacks(&self) -> Vec<(Source, &str)> {
        self.sources
            .iter()
            .filter_map(|(s, st)| match st {
                SourceState::Fallback { reason } => Some((*s, reason.as_str())),
                _ => None,
            })
            .collect()
    }
}

/// One source's data, when it was fetched and whether it is AWS's.
struct Slot<T> {
    data: Option<T>,
    /// When the last attempt (success or failure) finished.
    attempted: Option<Instant>,
    /// True when the last attempt succeeded.
    ok: bool,
    /// True once any attempt succeeded (then `data` is AWS's answer).
    ever_ok: bool,
    last_error: Option<String>,
    skipped: usize,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            data: None,
            attempted: None,
            ok: false,
            ever_ok: false,
            last_error: None,
            skipped: 0,
        }
    }
}

impl<T> Slot<T> {
    fn stale(&self, ttl: Duration, failure_retry: Duration, now: Instant) -> bool {
        match self.attempted {
            None => true,
            Some(at) => {
                let wait = if self.ok { ttl } else { ttl.min(failure_retry) };
                now.saturating_duration_since(at) >= wait
            }
        }
    }

    fn state(&self) -> SourceState {
        match (self.attempted, self.ever_ok) {
            (None, _) => SourceState::Unfetched,
            (Some(_), true) => SourceState::Live {
                last_error: if self.ok {
                    None
                } else {
                    self.last_error.clone()
                },
            },
            (Some(_), false) => SourceState::Fallback {
                reason: self.last_error.clone().unwrap_or_default(),
            },
        }
    }
}

#[derive(Default)]
struct State {
    types: Slot<Vec<LiveType>>,
    type_pages: usize,
    offerings: Slot<ZoneOfferings>,
    on_demand: Slot<OnDemandPrices>,
    spot: Slot<SpotPrices>,
    assembled: Option<Arc<Vec<InstanceType>>>,
}

/// How often [`LiveCatalog::keep_fresh`] looks for due sources (a fresh source costs nothing).
pub const REFRESH_POLL: Duration = Duration::from_secs(30);

/// The instance types of one region with live zones and prices, falling back per source to
/// the embedded catalog. Share it (`Arc`) between the provisioner and the controller loops;
/// calls are serialised internally.
pub struct LiveCatalog {
    region: String,
    ec2: aws_sdk_ec2::Client,
    pricing: aws_sdk_pricing::Client,
    options: CatalogOptions,
    metrics: CatalogMetrics,
    /// Held only to read or record, never across a call to AWS: a launch reading the catalog
    /// never waits for a refresh.
    state: Mutex<State>,
    /// One refresh at a time (the others find the sources fresh once it is done).
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for LiveCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCatalog")
            .field("region", &self.region)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl LiveCatalog {
    /// A catalog calling EC2 and Pricing through `clients` (with the standard retry mode and
    /// the options' attempts and time limit), its metrics registered in `registry`. Nothing is
    /// fetched until the first call.
    pub fn new(clients: &AwsClients, options: CatalogOptions, registry: &mut Registry) -> Self {
        let retry = RetryConfig::standard().with_max_attempts(options.max_attempts.max(1));
        // The clients' connect and attempt limits, with the catalog's own call limit.
        let timeout = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .operation_attempt_timeout(options.call_timeout)
            .operation_timeout(options.call_timeout)
            .build();
        let ec2 = aws_sdk_ec2::Client::from_conf(
            clients
                .ec2
                .config()
                .to_builder()
                .retry_config(retry.clone())
                .timeout_config(timeout.clone())
                .build(),
        );
        let pricing = aws_sdk_pricing::Client::from_conf(
            clients
                .pricing
                .config()
                .to_builder()
                .retry_config(retry)
                .timeout_config(timeout)
                .build(),
        );
        LiveCatalog {
            region: clients.region.clone(),
            ec2,
            pricing,
            options,
            metrics: CatalogMetrics::register(registry),
            state: Mutex::new(State::default()),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// The region the catalog describes.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The catalog as last assembled, at once, however old: refreshing is
    /// [`LiveCatalog::keep_fresh`]'s job, in the background, so a launch never waits for AWS to
    /// list instance types. Only the very first call (nothing assembled yet) fetches, and
    /// waits. Errors only when instance types or offerings cannot be read and the region has
    /// no embedded catalog to stand in; price failures never fail it.
    pub async fn instance_types(&self) -> Result<Arc<Vec<InstanceType>>, CatalogError> {
        if let Some(current) = self.lock().assembled.clone() {
            return Ok(current);
        }
        self.refresh_sources(false).await
    }

    /// Fetches the sources whose interval has passed (none when all are fresh) and returns
    /// the catalog.
    pub async fn refresh_due(&self) -> Result<Arc<Vec<InstanceType>>, CatalogError> {
        self.refresh_sources(false).await
    }

    /// Refreshes due sources now and then every [`REFRESH_POLL`] until `stop` resolves: run on
    /// every replica from start-up, so a follower that wins the Lease plans at once with a
    /// loaded catalog, and the leader's launches never wait for a refresh.
    pub async fn keep_fresh(&self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            if let Err(e) = self.refresh_due().await {
                tracing::warn!(error = %e, "catalog refresh failed; keeping the last catalog");
            }
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(REFRESH_POLL) => {}
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fetches every source now, whatever its age (a controller's "prices may have changed"
    /// hook, `joiner plan --catalog aws`), and returns the catalog.
    pub async fn refresh(&self) -> Result<Arc<Vec<InstanceType>>, CatalogError> {
        self.refresh_sources(true).await
    }

    /// Where each source's data comes from now.
    pub async fn status(&self) -> CatalogStatus {
        let st = self.lock();
        CatalogStatus {
            region: self.region.clone(),
            sources: BTreeMap::from([
                (Source::InstanceTypes, st.types.state()),
                (Source::Offerings, st.offerings.state()),
                (Source::OnDemandPrices, st.on_demand.state()),
                (Source::SpotPrices, st.spot.state()),
            ]),
            instance_types: st.assembled.as_ref().map_or(0, |a| a.len()),
            skipped: BTreeMap::from([
                (Source::InstanceTypes, st.types.skipped),
                (Source::Offerings, st.offerings.skipped),
                (Source::OnDemandPrices, st.on_demand.skipped),
                (Source::SpotPrices, st.spot.skipped),
            ]),
            type_pages: st.type_pages,
        }
    }

    async fn refresh_sources(&self, force: bool) -> Result<Arc<Vec<InstanceType>>, CatalogError> {
        let _one_at_a_time = self.refreshing.lock().await;
        let o = &self.options;
        let (want_types, want_offerings, want_od, want_spot) = {
            let st = self.lock();
            let now = Instant::now();
            let due = |stale: bool| force || stale;
            (
                due(st.types.stale(o.types_ttl, o.failure_retry, now)),
                due(st.offerings.stale(o.types_ttl, o.failure_retry, now)),
                due(st.on_demand.stale(o.prices_ttl, o.failure_retry, now)),
                due(st.spot.stale(o.prices_ttl, o.failure_retry, now)),
            )
        };

        let (types, offerings, on_demand, spot) = tokio::join!(
            async {
                if want_types {
                    Some(describe_instance_types(&self.ec2, &self.region, o.page_size).await)
                } else {
                    None
                }
            },
            async {
                if want_offerings {
                    Some(describe_offerings(&self.ec2, o.page_size).await)
                } else {
                    None
                }
            },
            async {
                if want_od {
                    Some(get_on_demand_prices(&self.pricing, &self.region).await)
                } else {
                    None
                }
            },
            async {
                if want_spot {
                    Some(describe_spot_prices(&self.ec2, o.page_size).await)
                } else {
                    None
                }
            },
        );
        let finished = Instant::now();
        let mut st = self.lock();
        let mut changed = false;
        if let Some(r) = types {
            let r = r.map(|p| {
                st.type_pages = p.pages;
                (p.types, p.skipped)
            });
            self.record(Source::InstanceTypes, &mut st.types, r, finished);
            changed = true;
        }
        if let Some(r) = offerings {
            self.record(
                Source::Offerings,
                &mut st.offerings,
                r.map(|o| (o, 0)),
                finished,
            );
            changed = true;
        }
        if let Some(r) = on_demand {
            let r = r.map(|t| (t.prices, t.skipped));
            self.record(Source::OnDemandPrices, &mut st.on_demand, r, finished);
            changed = true;
        }
        if let Some(r) = spot {
            let r = r.map(|h| (h.prices, h.skipped));
            self.record(Source::SpotPrices, &mut st.spot, r, finished);
            changed = true;
        }
        if !changed {
            if let Some(a) = &st.assembled {
                return Ok(Arc::clone(a));
            }
        }
        let assembled = Arc::new(self.assemble(&st)?);
        self.metrics
            .instance_types
            .set(i64::try_from(assembled.len()).unwrap_or(i64::MAX));
        st.assembled = Some(Arc::clone(&assembled));
        Ok(assembled)
    }

    /// Stores one source's answer, keeping the last good data on failure, and logs and
    /// counts the transitions.
    fn record<T>(
        &self,
        source: Source,
        slot: &mut Slot<T>,
        result: Result<(T, usize), AwsError>,
        at: Instant,
    ) {
        let was_failing = slot.attempted.is_some() && !slot.ok;
        slot.attempted = Some(at);
        match result {
            Ok((data, skipped)) => {
                if was_failing {
                    tracing::info!(%source, region = %self.region, "catalog source reachable again; using AWS data");
                }
                slot.data = Some(data);
                slot.ok = true;
                slot.ever_ok = true;
                slot.last_error = None;
                slot.skipped = skipped;
                if skipped > 0 {
                    tracing::debug!(%source, skipped, "catalog source answer had malformed items");
                }
            }
            Err(e) => {
                self.metrics
                    .refresh_errors
                    .get_or_create(&labels(source))
                    .inc();
                if !was_failing {
                    if slot.ever_ok {
                        tracing::warn!(%source, region = %self.region, error = %e, "catalog refresh failed; keeping the last AWS data");
                    } else {
                        tracing::warn!(%source, region = %self.region, error = %e, "catalog source unavailable; using the embedded data");
                    }
                }
                slot.ok = false;
                slot.last_error = Some(e.to_string());
            }
        }
        let fallback = slot.attempted.is_some() && !slot.ever_ok;
        self.metrics
            .fallback
            .get_or_create(&labels(source))
            .set(i64::from(fallback));
        self.metrics
            .skipped
            .get_or_create(&labels(source))
            .set(i64::try_from(slot.skipped).unwrap_or(i64::MAX));
    }

    /// The embedded tables standing in for `source`, built for this assembly and dropped
    /// after it (not the process-wide [`embedded::cached`] copy): the assembled catalog is
    /// what the controller keeps, and a second copy of the tables for as long as the
    /// process runs would cost it about 8 MiB.
    fn embedded_or(
        &self,
        source: Source,
        slot_error: Option<&str>,
    ) -> Result<embedded::EmbeddedCatalog, CatalogError> {
        embedded::catalog(&self.region).map_err(|_| CatalogError::NoFallback {
            region: self.region.clone(),
            what: source.as_str(),
            error: slot_error.unwrap_or("not fetched").to_string(),
            available: embedded::regions().join(", "),
        })
    }

    fn assemble(&self, st: &State) -> Result<Vec<InstanceType>, CatalogError> {
        let embedded_types;
        let types: &[LiveType] = match &st.types.data {
            Some(t) => t,
            None => {
                let e = self.embedded_or(Source::InstanceTypes, st.types.last_error.as_deref())?;
                embedded_types = e
                    .instance_types
                    .into_iter()
                    .map(|t| LiveType {
                        info: InstanceType {
                            offerings: Vec::new(),
                            provider_keys: crate::labels::INSTANCE_LABEL_KEYS,
                            ..t
                        },
                        on_demand: true,
                        spot: true,
                    })
                    .collect::<Vec<_>>();
                &embedded_types
            }
        };
        let embedded_zones;
        let zones: &ZoneOfferings = match &st.offerings.data {
            Some(z) => z,
            None => {
                let e = self.embedded_or(Source::Offerings, st.offerings.last_error.as_deref())?;
                embedded_zones = e
                    .instance_types
                    .iter()
                    .map(|t| {
                        let z: BTreeSet<String> =
                            t.offerings.iter().map(|o| o.zone.clone()).collect();
                        (t.name.clone(), z)
                    })
                    .collect::<ZoneOfferings>();
                &embedded_zones
            }
        };
        let borrowed_prices_estimated = self.region != embedded::price_region();
        let mut out = Vec::with_capacity(types.len());
        for t in types {
            let Some(type_zones) = zones.get(&t.info.name).filter(|z| !z.is_empty()) else {
                // Not sold in any zone of the region: as in the embedded catalog, left out.
                continue;
            };
            let live_price = st
                .on_demand
                .data
                .as_ref()
                .and_then(|p| p.get(&t.info.name).copied());
            let price = match live_price {
                Some(p) => Some((p, false)),
                None => embedded::on_demand_price(&t.info.name).map(|p| {
                    // The embedded table is exact only in its own region and only when the
                    // live prices are unavailable (a type the live table lacks is suspect).
                    (p, borrowed_prices_estimated || st.on_demand.data.is_some())
                }),
            };
            let mut info = t.info.clone();
            if let Some((od_price, od_estimated)) = price {
                for zone in type_zones {
                    if t.on_demand {
                        info.offerings.push(Offering {
                            zone: zone.clone(),
                            capacity_type: CapacityType::OnDemand,
                            price: od_price,
                            price_estimated: od_estimated,
                            available: true,
                        });
                    }
                    if t.spot {
                        let spot = st
                            .spot
                            .data
                            .as_ref()
                            .and_then(|s| s.get(&(t.info.name.clone(), zone.clone())).copied());
                        info.offerings.push(Offering {
                            zone: zone.clone(),
                            capacity_type: CapacityType::Spot,
                            price: spot.unwrap_or(od_price),
                            price_estimated: spot.is_none(),
                            available: true,
                        });
                    }
                }
            }
            out.push(info);
        }
        Ok(out)
    }
}
