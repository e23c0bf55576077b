//! [`Instrumented`]: a [`CloudProvider`] that times every call into
//! `joiner_cloudprovider_duration_seconds{method}` and counts failures into
//! `joiner_cloudprovider_errors{method}`, so the reconcilers need no timing code of their own.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use joiner_core::{CapacityType, CloudProvider, InstanceType, LaunchRequest, LaunchedNode};

use crate::metrics::{MethodLabels, Metrics};

/// `P` with its calls measured in `metrics`.
pub struct Instrumented<P> {
    inner: Arc<P>,
    metrics: Arc<Metrics>,
}

impl<P> Instrumented<P> {
    /// Wraps `inner`; the metrics are the ones the runtime serves.
    pub fn new(inner: Arc<P>, metrics: Arc<Metrics>) -> Self {
        Instrumented { inner, metrics }
    }

    /// The wrapped provider, for what it offers besides the trait (the AWS provider also
    /// resolves NodeTemplates for their status).
    pub fn inner(&self) -> &Arc<P> {
        &self.inner
    }

    async fn measure<T, E>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let labels = MethodLabels {
            method: method.to_string(),
        };
        let started = Instant::now();
        let result = call.await;
        self.metrics
            .cloud_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        if result.is_err() {
            self.metrics.cloud_errors.get_or_create(&labels).inc();
        }
        result
    }
}

impl<P: CloudProvider> CloudProvider for Instrumented<P> {
    type Error = P::Error;

    fn instance_types(
        &self,
        provisioner: &str,
    ) -> impl Future<Output = Result<Vec<InstanceType>, Self::Error>> + Send {
        self.measure("instance_types", self.inner.instance_types(provisioner))
    }

    fn create(
        &self,
        request: &LaunchRequest,
    ) -> impl Future<Output = Result<LaunchedNode, Self::Error>> + Send {
        self.measure("create", self.inner.create(request))
    }

    fn delete(&self, instance_id: &str) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.measure("delete", self.inner.delete(instance_id))
    }

    fn get(
        &self,
        claim_name: &str,
    ) -> impl Future<Output = Result<Option<LaunchedNode>, Self::Error>> + Send {
        self.measure("get", self.inner.get(claim_name))
    }

    fn list(&self) -> impl Future<Output = Result<Vec<LaunchedNode>, Self::Error>> + Send {
        self.measure("list", self.inner.list())
    }

    fn list_some(
        &self,
        claims: &[String],
        instance_ids: &[String],
    ) -> impl Future<Output = Result<Vec<LaunchedNode>, Self::Error>> + Send {
        self.measure("list_some", self.inner.list_some(claims, instance_ids))
    }

    fn start_warm(
        &self,
        instance_id: &str,
        claim_name: &str,
    ) -> impl Future<Output = Result<LaunchedNode, Self::Error>> + Send {
        self.measure("start_warm", self.inner.start_warm(instance_id, claim_name))
    }

    fn stop_warm(&self, instance_id: &str) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.measure("stop_warm", self.inner.stop_warm(instance_id))
    }

    fn hold_warm(&self, instance_id: &str) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.measure("hold_warm", self.inner.hold_warm(instance_id))
    }

    fn hibernate_warm(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.measure("hibernate_warm", self.inner.hibernate_warm(instance_id))
    }

    fn pull_warm(
        &self,
        instance_id: &str,
        images: &[String],
        within: std::time::Duration,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send {
        self.measure(
            "pull_warm",
            self.inner.pull_warm(instance_id, images, within),
        )
    }

    fn pull_progress(
        &self,
        instance_id: &str,
        pull: &str,
    ) -> impl Future<Output = Result<joiner_core::PullProgress, Self::Error>> + Send {
        self.measure("pull_progress", self.inner.pull_progress(instance_id, pull))
    }

    fn warm_type_refusal(
        &self,
        instance_type: &joiner_core::InstanceType,
        state: joiner_core::WarmState,
    ) -> Option<String> {
        self.inner.warm_type_refusal(instance_type, state)
    }

    fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) {
        // No call to the cloud: nothing to time.
        self.inner
            .mark_unavailable(instance_type, zone, capacity_type);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_core::{CloudError, CloudErrorKind};
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    #[derive(Debug, thiserror::Error)]
    #[error("no such instance {0}")]
    struct Missing(String);

    /// Knows one instance, `i-1`; everything else is missing.
    struct OneInstance;

    fn node() -> LaunchedNode {
        LaunchedNode {
            claim_name: Some("c".into()),
            instance_id: "i-1".into(),
            provider_id: "aws:///z/i-1".into(),
            instance_type: "m5.large".into(),
            zone: "z".into(),
            capacity_type: CapacityType::OnDemand,
            state: "running".into(),
            launch_time: None,
            image_id: None,
            subnet_id: None,
            security_group_ids: vec![],
            warm_pool: false,
        }
    }

    impl CloudError for Missing {
        fn kind(&self) -> CloudErrorKind {
            CloudErrorKind::NotFound
        }
        fn code(&self) -> String {
            "other".into()
        }
    }

    impl CloudProvider for OneInstance {
        type Error = Missing;
        async fn instance_types(&self, _: &str) -> Result<Vec<InstanceType>, Missing> {
            Ok(Vec::new())
        }
        async fn create(&self, r: &LaunchRequest) -> Result<LaunchedNode, Missing> {
            Err(Missing(r.claim_name.clone()))
        }
        async fn delete(&self, id: &str) -> Result<(), Missing> {
            if id == "i-1" {
                Ok(())
            } else {
                Err(Missing(id.into()))
            }
        }
        async fn get(&self, _: &str) -> Result<Option<LaunchedNode>, Missing> {
            Ok(Some(node()))
        }
        async fn list(&self) -> Result<Vec<LaunchedNode>, Missing> {
            Ok(vec![node()])
        }
        async fn start_warm(&self, id: &str, _: &str) -> Result<LaunchedNode, Missing> {
            Err(Missing(id.into()))
        }
        async fn stop_warm(&self, id: &str) -> Result<(), Missing> {
            Err(Missing(id.into()))
        }
        async fn hold_warm(&self, id: &str) -> Result<(), Missing> {
            Err(Missing(id.into()))
        }
        async fn hibernate_warm(&self, id: &str) -> Result<(), Missing> {
            Err(Missing(id.into()))
        }
        async fn pull_warm(
            &self,
            id: &str,
            _: &[String],
            _: std::time::Duration,
        ) -> Result<String, Missing> {
            Err(Missing(id.into()))
        }
        async fn pull_progress(
            &self,
            id: &str,
            _: &str,
        ) -> Result<joiner_core::PullProgress, Missing> {
            Err(Missing(id.into()))
        }
        fn mark_unavailable(&self, _: &str, _: &str, _: CapacityType) {}
    }

    fn count(m: &Metrics, method: &str) -> (u64, u64) {
        let l = MethodLabels {
            method: method.into(),
        };
        let errors = m.cloud_errors.get_or_create(&l).get();
        let mut registry = Registry::default();
        registry.register("d", "d", m.cloud_duration.clone());
        let mut out = String::new();
        encode(&mut out, &registry).expect("encodes");
        let calls = out
            .lines()
            .find(|line| line.starts_with(&format!("d_count{{method=\"{method}\"}}")))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        (calls, errors)
    }

    #[tokio::test]
    async fn every_call_is_timed_and_failures_are_counted_per_method() {
        let metrics = Arc::new(Metrics::default());
        let cloud = Instrumented::new(Arc::new(OneInstance), metrics.clone());
        assert!(cloud.delete("i-1").await.is_ok());
        assert!(cloud.delete("i-2").await.is_err());
        assert!(cloud.delete("i-3").await.is_err());
        assert_eq!(cloud.list().await.map(|l| l.len()).ok(), Some(1));
        assert_eq!(
            cloud.get("c").await.ok().flatten().map(|n| n.instance_id),
            Some("i-1".to_string())
        );
        let request = LaunchRequest {
            claim_name: "c".into(),
            claim_uid: "u".into(),
            provisioner: "p".into(),
            capacity_type: CapacityType::OnDemand,
            candidates: vec![("m5.large".into(), 0.096)],
            zones: Vec::new(),
            warm_pool: None,
        };
        let err = cloud.create(&request).await.err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("no such instance c"));

        assert_eq!(count(&metrics, "delete"), (3, 2));
        assert_eq!(count(&metrics, "list"), (1, 0));
        assert_eq!(count(&metrics, "get"), (1, 0));
        assert_eq!(count(&metrics, "create"), (1, 1));
        assert_eq!(count(&metrics, "instance_types"), (0, 0));
    }
}
