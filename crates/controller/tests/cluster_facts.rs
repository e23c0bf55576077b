//! Cluster facts read at start-up through the scripted API: the DNS Service's address, the
//! service CIDR from the ServiceCIDR API, else inferred from the `kubernetes` Service.

mod support;

use http::Method;
use joiner_controller::cluster_facts::{cluster_dns_ip, service_cidr};
use serde_json::json;
use support::{mock_api, Reply};

const DNS: &str = "/api/v1/namespaces/kube-system/services/kube-dns";
const CIDR: &str = "/apis/networking.k8s.io/v1/servicecidrs/kubernetes";
const KUBERNETES: &str = "/api/v1/namespaces/default/services/kubernetes";

fn service(name: &str, ip: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name}, "spec": {"clusterIP": ip}})
}

#[tokio::test]
async fn the_dns_address_is_the_kube_dns_service() {
    let (client, _api) = mock_api(|req| {
        if req.is(Method::GET, DNS) {
            Reply::ok(service("kube-dns", "10.100.0.10"))
        } else {
            Reply::not_found(&req.path)
        }
    });
    assert_eq!(
        cluster_dns_ip(&client).await.expect("answer").as_deref(),
        Some("10.100.0.10")
    );
    let (client, _api) = mock_api(|req| Reply::not_found(&req.path));
    assert_eq!(cluster_dns_ip(&client).await.expect("answer"), None);
}

#[tokio::test]
async fn the_service_cidr_is_read_when_the_api_has_it() {
    let (client, api) = mock_api(|req| {
        if req.is(Method::GET, CIDR) {
            Reply::ok(
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
                "metadata": {"name": "kubernetes"},
                "spec": {"cidrs": ["fd00:10:96::/112", "10.96.0.0/12"]}}),
            )
        } else {
            Reply::not_found(&req.path)
        }
    });
    assert_eq!(
        service_cidr(&client).await.expect("answer"),
        Some(("10.96.0.0/12".to_string(), true))
    );
    assert_eq!(api.calls(), [("GET".to_string(), CIDR.to_string())]);
}

#[tokio::test]
async fn the_service_cidr_is_inferred_from_the_kubernetes_service_on_older_clusters() {
    let (client, _api) = mock_api(|req| {
        if req.is(Method::GET, KUBERNETES) {
            Reply::ok(service("kubernetes", "172.20.0.1"))
        } else {
            Reply::not_found(&req.path)
        }
    });
    assert_eq!(
        service_cidr(&client).await.expect("answer"),
        Some(("172.20.0.0/16".to_string(), false))
    );
}
