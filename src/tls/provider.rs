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

static PROVIDER: LazyLock<Arc<CryptoProvider>> = LazyLock::new(|| {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    // TLS 1.3's suites first, as rustls lists them; within each version, by rank.
    p.cipher_suites.sort_by_key(|s| {
        let tls12 = !matches!(s, rustls::SupportedCipherSuite::Tls13(_));
        (tls12, suite_rank(s.suite()))
    });
    Arc::new(p)
});

/// pier's order of preference among the suites of one TLS version: AES-128-GCM, then
/// AES-256-GCM, then ChaCha20-Poly1305, as BoringSSL (Envoy) orders TLS 1.3's on a machine
/// with AES instructions. rustls' own order puts AES-256-GCM first, whose SHA-384 key
/// schedule cost a resumed handshake here about 15 % of its CPU (aws-lc's SHA-512 has no
/// vector code on AMD CPUs; SHA-256 uses the SHA extensions). Servers apply this order (see
/// `tls::server::server_config`), and pier's upstream connections offer it.
fn suite_rank(suite: rustls::CipherSuite) -> u8 {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS13_AES_128_GCM_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
        S::TLS13_AES_256_GCM_SHA384
        | S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 1,
        _ => 2,
    }
}

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

/// OpenSSL's names of the suites rustls implements (Envoy's `ciphers` are written so), and
/// rustls's names for them.
const OPENSSL_NAMES: [(&str, &str); 9] = [
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    ("TLS_AES_128_GCM_SHA256", "TLS13_AES_128_GCM_SHA256"),
    ("TLS_AES_256_GCM_SHA384", "TLS13_AES_256_GCM_SHA384"),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS13_CHACHA20_POLY1305_SHA256",
    ),
];

/// Other names of the key exchange groups (Envoy's and OpenSSL's), and rustls's.
const GROUP_NAMES: [(&str, &str); 4] = [
    ("P-256", "secp256r1"),
    ("P-384", "secp384r1"),
    ("prime256v1", "secp256r1"),
    ("X25519Kyber768Draft00", "X25519MLKEM768"),
];

/// The cipher suites pier's provider implements, by rustls's name, with whether each is a
/// TLS 1.3 suite.
pub fn cipher_suites() -> Vec<(String, bool)> {
    PROVIDER
        .cipher_suites
        .iter()
        .map(|s| {
            let tls13 = matches!(s, rustls::SupportedCipherSuite::Tls13(_));
            (format!("{:?}", s.suite()), tls13)
        })
        .collect()
}

/// The key exchange groups pier's provider implements, by rustls's name.
pub fn kx_groups() -> Vec<String> {
    PROVIDER
        .kx_groups
        .iter()
        .map(|g| format!("{:?}", g.name()))
        .collect()
}

/// A cipher suite's rustls name from its rustls, IANA or OpenSSL name (case does not
/// matter), and whether it is a TLS 1.3 suite; `None` when the provider does not implement it.
pub fn cipher_suite(name: &str) -> Option<(String, bool)> {
    let name = name.trim();
    let name = OPENSSL_NAMES
        .iter()
        .find(|(o, _)| o.eq_ignore_ascii_case(name))
        .map_or(name, |(_, r)| r);
    cipher_suites()
        .into_iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// A key exchange group's rustls name from its rustls, Envoy or OpenSSL name; `None` when the
/// provider does not implement it.
pub fn kx_group(name: &str) -> Option<String> {
    let name = name.trim();
    let name = GROUP_NAMES
        .iter()
        .find(|(o, _)| o.eq_ignore_ascii_case(name))
        .map_or(name, |(_, r)| r);
    kx_groups()
        .into_iter()
        .find(|n| n.eq_ignore_ascii_case(name))
}

/// The provider narrowed to a listener's suites and groups (in its order), or the shared one
/// when the profile narrows neither. Names are rustls's (checked at translation time; one the
/// provider lacks is left out).
pub fn tuned(profile: &crate::model::TlsProfile) -> Arc<CryptoProvider> {
    if profile.ciphers.is_none() && profile.groups.is_none() {
        return provider();
    }
    let mut p = CryptoProvider::clone(&PROVIDER);
    if let Some(names) = &profile.ciphers {
        p.cipher_suites = names
            .iter()
            .filter_map(|n| {
                (PROVIDER.cipher_suites.iter()).find(|s| format!("{:?}", s.suite()) == *n)
            })
            .copied()
            .collect();
    }
    if let Some(names) = &profile.groups {
        p.kx_groups = names
            .iter()
            .filter_map(|n| (PROVIDER.kx_groups.iter()).find(|g| format!("{:?}", g.name()) == *n))
            .copied()
            .collect();
    }
    Arc::new(p)
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
    fn the_provider_prefers_aes_128_then_aes_256_then_chacha() {
        let suites: Vec<_> = provider().cipher_suites.iter().map(|s| s.suite()).collect();
        use rustls::CipherSuite as S;
        assert_eq!(
            suites,
            [
                S::TLS13_AES_128_GCM_SHA256,
                S::TLS13_AES_256_GCM_SHA384,
                S::TLS13_CHACHA20_POLY1305_SHA256,
                S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            ]
        );
    }

    #[test]
    fn the_provider_prefers_the_post_quantum_hybrid() {
        let groups: Vec<_> = provider().kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(groups[0], rustls::NamedGroup::X25519MLKEM768, "{groups:?}");
        assert!(groups.contains(&rustls::NamedGroup::X25519));
    }

    #[test]
    fn suites_and_groups_are_found_by_every_name() {
        let s = cipher_suite;
        assert_eq!(
            s("ECDHE-ECDSA-AES128-GCM-SHA256"),
            Some(("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into(), false))
        );
        assert_eq!(
            s("tls_ecdhe_rsa_with_aes_256_gcm_sha384"),
            Some(("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into(), false))
        );
        assert_eq!(
            s("TLS_AES_256_GCM_SHA384"),
            Some(("TLS13_AES_256_GCM_SHA384".into(), true))
        );
        assert_eq!(s("AES128-SHA"), None, "CBC suites are not implemented");
        assert_eq!(kx_group("P-256").as_deref(), Some("secp256r1"));
        assert_eq!(kx_group("x25519").as_deref(), Some("X25519"));
        assert_eq!(kx_group("X448"), None);
    }

    #[test]
    fn a_tuned_provider_keeps_the_listed_order() {
        let profile = crate::model::TlsProfile {
            ciphers: Some(vec![
                "TLS13_CHACHA20_POLY1305_SHA256".into(),
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".into(),
            ]),
            groups: Some(vec!["secp384r1".into()]),
            ..crate::model::TlsProfile::DEFAULT
        };
        let p = tuned(&profile);
        let suites: Vec<_> = p.cipher_suites.iter().map(|s| s.suite()).collect();
        assert_eq!(
            suites,
            [
                rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
                rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            ]
        );
        let groups: Vec<_> = p.kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(groups, [rustls::NamedGroup::secp384r1]);
        assert!(Arc::ptr_eq(
            &tuned(&crate::model::TlsProfile::DEFAULT),
            &provider()
        ));
    }
}
