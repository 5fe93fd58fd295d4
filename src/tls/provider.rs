//! The one place pier chooses rustls' cryptography: every server and client config, signing
//! key, session ticketer and SHA-256 digest comes from here.
//!
//! **aws-lc-rs, not ring.** Measured with `scripts/tls-provider-eval` (docs/src/history/benchmarks.md, "rustls
//! provider"): the server's CPU per full TLS 1.3 handshake is about 0.6× ring's with an
//! RSA-2048 certificate and 0.87× with ECDSA P-256, resumed handshakes cost the same or less,
//! and only aws-lc-rs offers the post-quantum hybrid X25519MLKEM768, which pier prefers when a
//! client offers it (browsers do; rustls' `prefer-post-quantum`). The price is a C build
//! (aws-lc-sys) of about 2 minutes of CPU on a clean build, no run-time dependency.

use std::sync::{Arc, LazyLock};

use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::PrivateKeyDer;
use rustls::server::ProducesTickets;
use rustls::sign::SigningKey;

static PROVIDER: LazyLock<Arc<CryptoProvider>> =
    LazyLock::new(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));

/// The provider every config is built with (shared; built once).
pub fn provider() -> Arc<CryptoProvider> {
    PROVIDER.clone()
}

/// Makes [`provider`] the process default, for libraries that build their own configs (kube,
/// the OTLP exporter). Once per process; later calls do nothing.
pub fn install_default() {
    let _ = CryptoProvider::install_default(CryptoProvider::clone(&PROVIDER));
}

/// The signature algorithms certificates are verified with.
pub fn signature_algorithms() -> WebPkiSupportedAlgorithms {
    PROVIDER.signature_verification_algorithms
}

/// A signing key for a certificate's private key (RSA, ECDSA P-256/P-384, Ed25519).
pub fn signing_key(der: &PrivateKeyDer<'_>) -> Result<Arc<dyn SigningKey>, rustls::Error> {
    PROVIDER.key_provider.load_private_key(der.clone_key())
}

/// A stateless session ticketer (rotating keys, as rustls' own).
pub fn ticketer() -> Result<Arc<dyn ProducesTickets>, rustls::Error> {
    rustls::crypto::aws_lc_rs::Ticketer::new()
}

/// SHA-256, fed piece by piece.
pub struct Sha256(aws_lc_rs::digest::Context);

impl Sha256 {
    pub fn new() -> Self {
        Self(aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256))
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> [u8; 32] {
        let mut out = [0; 32];
        out.copy_from_slice(self.0.finish().as_ref());
        out
    }
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_sha256() {
        let hex: String = sha256(b"abc").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn the_provider_prefers_the_post_quantum_hybrid() {
        let groups: Vec<_> = provider().kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(groups[0], rustls::NamedGroup::X25519MLKEM768, "{groups:?}");
        assert!(groups.contains(&rustls::NamedGroup::X25519));
    }
}
