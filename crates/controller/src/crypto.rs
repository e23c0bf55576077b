//! The process-wide rustls crypto provider.
//!
//! rustls picks a provider by itself only when exactly one is compiled in. The AWS SDK brings
//! `aws-lc-rs`, and other crates in the build may enable `ring`; with both present, building a
//! `kube::Client` panics ("Could not automatically determine the process-level CryptoProvider").
//! Installing one provider explicitly at start-up removes the guess.

use std::sync::Arc;

/// Installs `aws-lc-rs` (the provider the AWS SDK already builds) as the process default, unless
/// a provider is installed already. Idempotent and safe to call from several threads or tests;
/// returns whether this call installed it.
pub fn install_default_provider() -> bool {
    if rustls::crypto::CryptoProvider::get_default().is_some() {
        return false;
    }
    // A concurrent caller may win the race; then its provider stands and this one is dropped.
    rustls::crypto::aws_lc_rs::default_provider()
        .install_default()
        .is_ok()
}

/// The provider in force after [`install_default_provider`], for code that configures rustls
/// itself.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    install_default_provider();
    match rustls::crypto::CryptoProvider::get_default() {
        Some(p) => Arc::clone(p),
        None => Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installing_twice_keeps_one_provider() {
        install_default_provider();
        assert!(
            !install_default_provider(),
            "a second call installs nothing"
        );
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        assert!(!provider().cipher_suites.is_empty());
    }
}
