//! Host ports: two pods binding the same port, protocol and address never share a node.
//!
//! An empty address, `0.0.0.0` and `::` mean every address, so they clash with any address on
//! the same port and protocol; two distinct specific addresses do not clash.

use crate::pod::HostPort;

/// One (port, protocol, address) binding with the address normalized.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortKey {
    /// Port number.
    pub port: i32,
    /// Protocol, upper case, TCP when unset.
    pub protocol: String,
    /// Specific address, or `None` for every address.
    pub ip: Option<String>,
}

impl PortKey {
    /// Normalizes a pod's host port.
    pub fn of(p: &HostPort) -> PortKey {
        let protocol = if p.protocol.is_empty() {
            "TCP".to_string()
        } else {
            p.protocol.to_ascii_uppercase()
        };
        let ip = match p.ip.as_str() {
            "" | "0.0.0.0" | "::" => None,
            ip => Some(ip.to_string()),
        };
        PortKey {
            port: p.port,
            protocol,
            ip,
        }
    }

    /// True when both bindings cannot be on one node.
    pub fn clashes(&self, other: &PortKey) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip.is_none() || other.ip.is_none() || self.ip == other.ip)
    }

    /// `8080/TCP` or `10.0.0.1:8080/TCP`.
    pub fn describe(&self) -> String {
        match &self.ip {
            Some(ip) => format!("{ip}:{}/{}", self.port, self.protocol),
            None => format!("{}/{}", self.port, self.protocol),
        }
    }
}

/// The first binding of `a` that clashes with one of `b`.
pub fn first_clash(a: &[HostPort], b: &[HostPort]) -> Option<PortKey> {
    a.iter()
        .map(PortKey::of)
        .find(|ka| b.iter().any(|pb| ka.clashes(&PortKey::of(pb))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(port: i32, protocol: &str, ip: &str) -> HostPort {
        HostPort {
            port,
            protocol: protocol.into(),
            ip: ip.into(),
        }
    }

    #[test]
    fn clash_rules() {
        assert!(first_clash(&[hp(80, "", "")], &[hp(80, "TCP", "10.0.0.1")]).is_some());
        assert!(first_clash(&[hp(80, "TCP", "10.0.0.2")], &[hp(80, "TCP", "10.0.0.1")]).is_none());
        assert!(first_clash(&[hp(80, "UDP", "")], &[hp(80, "TCP", "")]).is_none());
        assert!(first_clash(&[hp(53, "udp", "::")], &[hp(53, "UDP", "")]).is_some());
        assert_eq!(PortKey::of(&hp(80, "", "")).describe(), "80/TCP");
    }
}
