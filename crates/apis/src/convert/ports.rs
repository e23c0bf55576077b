//! Host ports: two pods binding the same port cannot share a node, which the simulation must
//! know before it packs them together.

use joiner_core::HostPort;
use k8s_openapi::api::core::v1::PodSpec;

use super::FieldError;

/// Host ports of the app containers and sidecars. With `hostNetwork` every container port is a
/// host port (the API server defaults hostPort to containerPort there).
pub fn host_ports(spec: &PodSpec, prefix: &str) -> Result<Vec<HostPort>, FieldError> {
    let host_network = spec.host_network.unwrap_or(false);
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .map(|(i, c)| (format!("{prefix}.initContainers[{i}]"), c));
    let apps = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("{prefix}.containers[{i}]"), c));
    let mut out = Vec::new();
    for (at, c) in apps.chain(sidecars) {
        for (j, p) in c.ports.iter().flatten().enumerate() {
            let port = match p.host_port {
                Some(h) if h != 0 => h,
                _ if host_network => p.container_port,
                _ => continue,
            };
            let field = format!("{at}.ports[{j}]");
            if !(1..=65535).contains(&port) {
                return Err(FieldError::new(
                    format!("{field}.hostPort"),
                    format!("port {port} is outside 1–65535"),
                ));
            }
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".to_string());
            if !matches!(protocol.as_str(), "TCP" | "UDP" | "SCTP") {
                return Err(FieldError::new(
                    format!("{field}.protocol"),
                    format!("unknown protocol {protocol:?} (expected TCP, UDP or SCTP)"),
                ));
            }
            let ip = p.host_ip.clone().unwrap_or_default();
            // 0.0.0.0 and :: mean "every address", the same as no address.
            let ip = if ip == "0.0.0.0" || ip == "::" {
                String::new()
            } else {
                ip
            };
            out.push(HostPort { port, protocol, ip });
        }
    }
    Ok(out)
}
