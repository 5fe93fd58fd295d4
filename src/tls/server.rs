//! Server-side TLS for HTTPS and TLS ports: `ServerConfig`s per bound port whose certificate
//! resolver reads the *current* snapshot's [`CertTable`](crate::model::CertTable) for that
//! port. A certificate change is a snapshot swap; the config itself is never rebuilt.
//!
//! The handshake takes no lock: `ArcSwap::load` is a few atomic operations, and the lookup is
//! a hash map probe plus a short wildcard scan (names were checked at translation time).

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, crypto::CryptoProvider};

use crate::model::{PortKey, Snapshot};

/// Resolves the certificate of one port from the current snapshot.
pub struct SnapshotCertResolver {
    snapshot: Arc<ArcSwap<Snapshot>>,
    port: PortKey,
}

/// Shared across every port's config so that session tickets stay valid as ports come and go
/// (the one justified piece of long-lived TLS state; STYLE §4).
#[derive(Clone)]
pub struct Ticketer(Arc<dyn ProducesTickets>);

#[derive(Debug, thiserror::Error)]
pub enum ServerConfigError {
    #[error("building the TLS server config failed")]
    Rustls(#[from] rustls::Error),
}

// === impl SnapshotCertResolver ===

impl SnapshotCertResolver {
    pub fn new(snapshot: Arc<ArcSwap<Snapshot>>, port: PortKey) -> Self {
        Self { snapshot, port }
    }
}

impl ResolvesServerCert for SnapshotCertResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let snapshot = self.snapshot.load();
        snapshot
            .port_at(self.port)?
            .certs
            .as_ref()?
            .resolve(hello.server_name())
    }
}

impl std::fmt::Debug for SnapshotCertResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotCertResolver")
            .field("port", &self.port)
            .finish()
    }
}

// === impl Ticketer ===

impl Ticketer {
    pub fn new() -> Result<Self, ServerConfigError> {
        Ok(Self(rustls::crypto::ring::Ticketer::new()?))
    }
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticketer")
    }
}

/// What a port's TLS carries, which decides the ALPN protocols it offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carries {
    /// HTTPS: ALPN `h2` then `http/1.1`.
    Http,
    /// TLS streams (terminated TLSRoutes): no ALPN, the bytes are the backend's protocol.
    Stream,
}

/// The config for one port: ring, TLS 1.2 and 1.3, ALPN by what it carries, no client auth,
/// certificates from the snapshot. Built with an explicit provider so it does not depend on a
/// process-wide default being installed.
pub fn server_config(
    snapshot: Arc<ArcSwap<Snapshot>>,
    port: PortKey,
    ticketer: Option<&Ticketer>,
    carries: Carries,
) -> Result<Arc<ServerConfig>, ServerConfigError> {
    let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SnapshotCertResolver::new(snapshot, port)));
    config.alpn_protocols = match carries {
        Carries::Http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Carries::Stream => vec![],
    };
    if let Some(t) = ticketer {
        config.ticketer = t.0.clone();
    }
    Ok(Arc::new(config))
}
