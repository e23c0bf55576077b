//! A throttled account at the SDK's own layer: an HTTP client for the EC2 SDK client that holds
//! every `CreateFleet` request for a while before sending it to moto, counting how many are
//! held at once and how many have been answered.
//!
//! The request reaches moto at once; its answer is held.
//!
//! The SDK's interceptor hooks are synchronous (a sleep there would block a runtime thread,
//! not throttle one call), so the delay sits one step further down the same request pipeline,
//! in the HTTP client the SDK sends every attempt through. Everything above it — the provider,
//! the fleet request, its retries and timeouts — is the real code.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;

/// How the held calls went.
#[derive(Debug, Default)]
pub struct FleetCalls {
    /// CreateFleet requests held or sent and not yet answered.
    pub running: AtomicUsize,
    /// The most that were in flight at once.
    pub most: AtomicUsize,
    /// CreateFleet requests answered.
    pub answered: AtomicUsize,
}

/// The HTTP client: the SDK's default one, with the answer to each `CreateFleet` held for
/// `delay`.
#[derive(Clone, Debug)]
pub struct SlowFleet {
    inner: SharedHttpClient,
    delay: Duration,
    /// What the held calls did.
    pub calls: Arc<FleetCalls>,
}

impl SlowFleet {
    pub fn new(delay: Duration) -> Self {
        SlowFleet {
            inner: aws_smithy_http_client::Builder::new()
                .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
                .build_https(),
            delay,
            calls: Arc::new(FleetCalls::default()),
        }
    }

    /// `ec2` with its requests sent through this client.
    pub fn wrap(&self, ec2: &aws_sdk_ec2::Client) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::from_conf(ec2.config().to_builder().http_client(self.clone()).build())
    }
}

impl HttpClient for SlowFleet {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(SlowConnector {
            inner: self.inner.http_connector(settings, components),
            delay: self.delay,
            calls: self.calls.clone(),
        })
    }
}

#[derive(Debug)]
struct SlowConnector {
    inner: SharedHttpConnector,
    delay: Duration,
    calls: Arc<FleetCalls>,
}

impl HttpConnector for SlowConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let fleet = request
            .body()
            .bytes()
            .is_some_and(|b| String::from_utf8_lossy(b).contains("Action=CreateFleet"));
        let inner = self.inner.clone();
        let (delay, calls) = (self.delay, self.calls.clone());
        HttpConnectorFuture::new(async move {
            if !fleet {
                return inner.call(request).await;
            }
            let now = calls.running.fetch_add(1, Ordering::SeqCst) + 1;
            calls.most.fetch_max(now, Ordering::SeqCst);
            // Sent at once and answered late, as a throttled endpoint does: holding the request
            // body instead would trip the SDK's stalled-upload protection after 5 s.
            let answer = inner.call(request).await;
            tokio::time::sleep(delay).await;
            calls.running.fetch_sub(1, Ordering::SeqCst);
            calls.answered.fetch_add(1, Ordering::SeqCst);
            answer
        })
    }
}
