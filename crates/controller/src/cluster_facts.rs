//! Facts about the cluster that new nodes need and that a default install should not have to
//! be told: the cluster DNS address (kubelet's `clusterDNS`) and the service CIDR (nodeadm's
//! `cluster.cidr` on AL2023). They are read from the API once at start-up.
//!
//! - DNS: the `clusterIP` of the `kube-system/kube-dns` Service (EKS's CoreDNS Service keeps
//!   that name).
//! - Service CIDR: the `networking.k8s.io/v1` ServiceCIDR named `kubernetes` (Kubernetes 1.33
//!   and later), else inferred from the `default/kubernetes` Service, whose `clusterIP` is the
//!   first address of the range: EKS assigns a /16 (`10.100.0.0/16` or `172.20.0.0/16`) unless
//!   the cluster was created with another, so the /16 around it is taken (logged, and
//!   `--service-cidr` overrides it).

use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

use crate::k8s::codes::is_not_found;

/// The cluster DNS Service's address, if it exists and has one.
pub async fn cluster_dns_ip(client: &kube::Client) -> Result<Option<String>, kube::Error> {
    let api: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    match api.get("kube-dns").await {
        Ok(svc) => Ok(svc
            .spec
            .and_then(|s| s.cluster_ip)
            .filter(|ip| !ip.is_empty() && ip != "None")),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The service CIDR (IPv4 when the cluster has both families), and whether it was read (true)
/// or inferred from the `kubernetes` Service's address (false).
pub async fn service_cidr(client: &kube::Client) -> Result<Option<(String, bool)>, kube::Error> {
    let gvk = GroupVersionKind::gvk("networking.k8s.io", "v1", "ServiceCIDR");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "servicecidrs");
    let cidrs: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match cidrs.get("kubernetes").await {
        Ok(obj) => {
            let listed: Vec<String> = obj.data["spec"]["cidrs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_str().map(str::to_string))
                .collect();
            let chosen = listed
                .iter()
                .find(|c| !c.contains(':'))
                .or(listed.first())
                .cloned();
            if let Some(cidr) = chosen {
                return Ok(Some((cidr, true)));
            }
        }
        // Older API servers have no ServiceCIDR resource (404), or it is not readable.
        Err(e) if is_not_found(&e) || matches!(crate::k8s::codes::api_code(&e), Some(403)) => {}
        Err(e) => return Err(e),
    }
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let ip = match services.get("kubernetes").await {
        Ok(svc) => svc.spec.and_then(|s| s.cluster_ip),
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(e),
    };
    Ok(ip.and_then(|ip| inferred_cidr(&ip)).map(|c| (c, false)))
}

/// The /16 holding `first` (the `kubernetes` Service's address, the range's first address):
/// what EKS assigns unless told otherwise. IPv6 is not inferred.
pub fn inferred_cidr(first: &str) -> Option<String> {
    let ip: std::net::Ipv4Addr = first.parse().ok()?;
    let [a, b, _, _] = ip.octets();
    Some(format!("{a}.{b}.0.0/16"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_the_slash_16_around_the_first_address() {
        assert_eq!(
            inferred_cidr("10.100.0.1").as_deref(),
            Some("10.100.0.0/16")
        );
        assert_eq!(
            inferred_cidr("172.20.0.1").as_deref(),
            Some("172.20.0.0/16")
        );
        assert_eq!(inferred_cidr("fd00::1"), None);
        assert_eq!(inferred_cidr("not an address"), None);
    }
}
