//! Server-side TLS for HTTPS and TLS ports: `ServerConfig`s per bound port whose certificate
//! resolver reads the *current* snapshot's [`CertTable`](crate::model::CertTable) for that
//! port. A certificate change is a snapshot swap; the config itself is never rebuilt.
//!
//! The handshake takes no lock: `ArcSwap::load` is a few atomic operations, and the lookup is
//! a hash map probe plus a short wildcard scan (names were checked at translation time).
//!
//! Client certificates (GEP-91 frontend validation) work the same way: the HTTPS config's
//! [`SnapshotClientVerifier`] asks the current snapshot's port whether to request a
//! certificate, whether it is mandatory, and verifies with the port's
//! [`ClientAuth`](crate::model::ClientAuth). A CA rotation is a snapshot swap: new handshakes
//! use the new bundle, established connections are not touched.
//!
//! ```text
//! ClientHello ─> SnapshotCertResolver ──(port)──> CertTable
//!             └> SnapshotClientVerifier ─(port)─> ClientAuth { mode, webpki verifier, tag }
//! session ticket / cache entry = tag ‖ session  (resumes only under the same policy)
//! ```
//!
//! Resumption skips client certificate verification, and rustls resumes any session whose
//! ticket decrypts (the ticketer is shared by every port). So every session pier stores is
//! prefixed with the port's client-auth tag at the time, and one whose tag differs from the
//! port's current one does not resume: a session from a port without client validation, or
//! from before a CA rotation, falls back to a full handshake.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{
    ClientHello, ProducesTickets, ResolvesServerCert, ServerSessionMemoryCache,
    StoresServerSessions, WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, Error, ServerConfig, SignatureScheme,
    crypto::CryptoProvider,
};

use crate::model::{ClientAuth, ClientAuthMode, PortKey, Snapshot, TlsProfile};
use crate::tls::client::TrustBundle;

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

/// Asks for and verifies client certificates as the current snapshot's port says
/// ([`ClientAuth`]); ports without it do not ask.
pub struct SnapshotClientVerifier {
    snapshot: Arc<ArcSwap<Snapshot>>,
    port: PortKey,
    algs: WebPkiSupportedAlgorithms,
}

/// The client-auth tag of a port's current policy (zeros: none), which stored sessions carry,
/// mixed with the config's [`TlsProfile`] (a session resumes only under the handshake
/// settings it was made under).
#[derive(Clone)]
struct PolicyTag {
    snapshot: Arc<ArcSwap<Snapshot>>,
    port: PortKey,
    /// TLS-terminating stream ports never validate client certificates.
    carries: Carries,
    /// A digest of the config's profile (zeros: pier's default).
    profile: [u8; 8],
}

/// The shared ticketer, with tickets bound to the port's client-auth policy.
struct BoundTickets {
    inner: Arc<dyn ProducesTickets>,
    tag: PolicyTag,
}

/// The port's session-ID cache (TLS 1.2 without tickets), bound the same way.
struct BoundSessions {
    inner: Arc<dyn StoresServerSessions>,
    tag: PolicyTag,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientAuthError {
    #[error("the CA bundle cannot be used to verify client certificates")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
}

/// The validation of a port: webpki's verifier over `bundle`, and the tag of (mode, bundle).
pub fn client_auth(
    bundle: &TrustBundle,
    mode: ClientAuthMode,
) -> Result<ClientAuth, ClientAuthError> {
    let provider = crate::tls::provider::provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(bundle.roots().clone(), provider)
        .build()
        .map_err(ClientAuthError::Verifier)?;
    let mut h = crate::tls::provider::Sha256::new();
    h.update(b"pier/frontend-client-auth/v1");
    h.update(match mode {
        ClientAuthMode::AllowValidOnly => b"valid-only",
        ClientAuthMode::AllowInsecureFallback => b"insecure-fb",
    });
    h.update(bundle.digest());
    let mut tag = [0; 32];
    tag.copy_from_slice(h.finish().as_ref());
    Ok(ClientAuth {
        mode,
        verifier,
        tag,
        cas: bundle.len(),
    })
}

/// A verified client certificate's identity: for a listener's client identity header, and its
/// URI and DNS subjectAltNames for SecurityPolicy principals (`clientSANs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// `Subject="<DN>"`, then `;URI=<uri>` and `;DNS=<name>` per subjectAltName (the shape of
    /// Envoy's `x-forwarded-client-cert`).
    pub header: http::HeaderValue,
    /// The URI and DNS subjectAltNames, in the certificate's order.
    pub sans: Box<[Box<str>]>,
}

/// A client certificate's [`ClientIdentity`]. `None` when the certificate does not parse or
/// the identity is not a valid header value.
pub fn client_identity(leaf: &CertificateDer<'_>) -> Option<ClientIdentity> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).ok()?;
    let subject = cert.subject().to_string().replace(['"', '\\'], "");
    let mut value = format!("Subject=\"{subject}\"");
    let mut sans = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::URI(u) => {
                    value.push_str(&format!(";URI={u}"));
                    sans.push(Box::from(*u));
                }
                GeneralName::DNSName(d) => {
                    value.push_str(&format!(";DNS={d}"));
                    sans.push(Box::from(*d));
                }
                _ => {}
            }
        }
    }
    Some(ClientIdentity {
        header: http::HeaderValue::try_from(value).ok()?,
        sans: sans.into(),
    })
}

/// Whether a peer chain verifies against `auth` now. For the identity of a connection on an
/// `AllowInsecureFallback` port, whose handshake accepted any certificate.
pub fn verifies(auth: &ClientAuth, chain: &[CertificateDer<'_>], now: UnixTime) -> bool {
    match chain.split_first() {
        Some((leaf, intermediates)) => auth
            .verifier
            .verify_client_cert(leaf, intermediates, now)
            .is_ok(),
        None => false,
    }
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

// === impl SnapshotClientVerifier ===

impl SnapshotClientVerifier {
    pub fn new(snapshot: Arc<ArcSwap<Snapshot>>, port: PortKey) -> Self {
        Self {
            snapshot,
            port,
            algs: crate::tls::provider::signature_algorithms(),
        }
    }

    fn current(&self) -> Option<ClientAuth> {
        self.snapshot.load().port_at(self.port)?.client_auth.clone()
    }
}

impl ClientCertVerifier for SnapshotClientVerifier {
    fn offer_client_auth(&self) -> bool {
        let snapshot = self.snapshot.load();
        snapshot
            .port_at(self.port)
            .is_some_and(|p| p.client_auth.is_some())
    }

    fn client_auth_mandatory(&self) -> bool {
        let snapshot = self.snapshot.load();
        snapshot
            .port_at(self.port)
            .and_then(|p| p.client_auth.as_ref())
            .is_some_and(ClientAuth::mandatory)
    }

    /// No hints: the bundle may change with every snapshot, and the trait lends the slice
    /// from `self`. An empty list lets clients send whichever certificate they have.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        // Validation turned off since the handshake began: nothing to check against.
        let Some(auth) = self.current() else {
            return Ok(ClientCertVerified::assertion());
        };
        match auth
            .verifier
            .verify_client_cert(end_entity, intermediates, now)
        {
            Ok(v) => Ok(v),
            // The client still proves it holds the key (CertificateVerify); the connection
            // gets no verified identity (see `verifies`).
            Err(_) if !auth.mandatory() => Ok(ClientCertVerified::assertion()),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

impl std::fmt::Debug for SnapshotClientVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotClientVerifier")
            .field("port", &self.port)
            .finish()
    }
}

// === impl PolicyTag, BoundTickets, BoundSessions ===

impl PolicyTag {
    fn current(&self) -> [u8; 32] {
        let mut tag = if self.carries == Carries::Stream {
            [0; 32]
        } else {
            let snapshot = self.snapshot.load();
            snapshot
                .port_at(self.port)
                .and_then(|p| p.client_auth.as_ref())
                .map_or([0; 32], |a| a.tag)
        };
        for (t, p) in tag.iter_mut().zip(self.profile) {
            *t ^= p;
        }
        // A session from TCP does not resume over QUIC, nor the other way round.
        if self.carries == Carries::Quic {
            tag[31] ^= 0x51;
        }
        tag
    }

    fn seal(&self, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + value.len());
        out.extend_from_slice(&self.current());
        out.extend_from_slice(value);
        out
    }

    /// The value, when it was sealed under the current policy.
    fn open(&self, mut sealed: Vec<u8>) -> Option<Vec<u8>> {
        if sealed.len() < 32 || sealed[..32] != self.current() {
            return None;
        }
        sealed.drain(..32);
        Some(sealed)
    }
}

impl ProducesTickets for BoundTickets {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }

    fn lifetime(&self) -> u32 {
        self.inner.lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.inner.encrypt(&self.tag.seal(plain))
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.tag.open(self.inner.decrypt(cipher)?)
    }
}

impl std::fmt::Debug for BoundTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundTickets")
            .field("port", &self.tag.port)
            .finish()
    }
}

impl StoresServerSessions for BoundSessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.inner.put(key, self.tag.seal(&value))
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.tag.open(self.inner.get(key)?)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.tag.open(self.inner.take(key)?)
    }

    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

impl std::fmt::Debug for BoundSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundSessions")
            .field("port", &self.tag.port)
            .finish()
    }
}

// === impl Ticketer ===

impl Ticketer {
    pub fn new() -> Result<Self, ServerConfigError> {
        Ok(Self(crate::tls::provider::ticketer()?))
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
    /// QUIC (HTTP/3): TLS 1.3 only, ALPN `h3`, client certificates as HTTPS; no early data.
    Quic,
}

/// What every server config of a bound port shares: its certificates and client validation
/// come from the current snapshot; its sessions from one ticketer.
#[derive(Clone)]
pub struct PortConfig {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub port: PortKey,
    /// Sessions resume (session-ID cache, and tickets given a ticketer).
    pub resumption: bool,
    pub ticketer: Option<Ticketer>,
}

/// The config for one port: pier's provider (aws-lc-rs), TLS 1.2 and 1.3, ALPN by what it
/// carries, certificates and (HTTPS only) client certificate validation from the snapshot,
/// sessions bound to the client-auth policy. Built with an explicit provider so it does not
/// depend on a process-wide default being installed. With `resumption`, sessions resume from
/// the session-ID cache and, given a ticketer, from stateless tickets; without it every
/// handshake is full. A [`TlsProfile`] other than the default narrows versions, suites and
/// groups and sets the ALPN protocols of HTTPS (a listener's ClientTrafficPolicy).
pub fn server_config(
    on: &PortConfig,
    carries: Carries,
    profile: &TlsProfile,
) -> Result<Arc<ServerConfig>, ServerConfigError> {
    let (snapshot, port) = (on.snapshot.clone(), on.port);
    let provider: Arc<CryptoProvider> = crate::tls::provider::tuned(profile);
    let quic = carries == Carries::Quic;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (profile.tls13, &rustls::version::TLS13),
        (profile.tls12 && !quic, &rustls::version::TLS12),
    ]
    .into_iter()
    .filter_map(|(on, v)| on.then_some(v))
    .collect();
    let builder =
        ServerConfig::builder_with_provider(provider).with_protocol_versions(&versions)?;
    let resolver = Arc::new(SnapshotCertResolver::new(snapshot.clone(), port));
    let mut config = match carries {
        // Frontend validation is for "Listeners handling HTTPS traffic" only.
        Carries::Http | Carries::Quic => builder
            .with_client_cert_verifier(Arc::new(SnapshotClientVerifier::new(
                snapshot.clone(),
                port,
            )))
            .with_cert_resolver(resolver),
        Carries::Stream => builder.with_no_client_auth().with_cert_resolver(resolver),
    };
    config.alpn_protocols = match (carries, &profile.alpn) {
        (Carries::Http, None) => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        (Carries::Http, Some(list)) => list.iter().map(|p| p.as_bytes().to_vec()).collect(),
        (Carries::Stream, _) => vec![],
        (Carries::Quic, _) => vec![b"h3".to_vec()],
    };
    // 0-RTT stays off (rustls' default): replayable requests are not taken before the
    // handshake ends.
    config.max_early_data_size = 0;
    // The server's order of suites (pier's, `tls::provider`, or the listener's `ciphers`)
    // decides, not the client's: a client listing AES-256-GCM first would otherwise get the
    // costlier SHA-384 key schedule on every connection.
    config.ignore_client_order = true;
    let tag = PolicyTag {
        snapshot,
        port,
        carries,
        profile: profile_digest(profile),
    };
    if !on.resumption {
        // No session stored, no ticket sent.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        return Ok(Arc::new(config));
    }
    // One TLS 1.3 ticket per handshake (rustls sends two): a client resuming gets a fresh
    // ticket on every connection, as from Go's servers and from OpenSSL's after a resumed
    // handshake; each ticket costs both ends a key derivation and an encryption. A client that
    // asks for more (RFC 9149 `ticket_request`) gets up to four.
    config.send_tls13_tickets = 1;
    config.max_tls13_tickets = 4;
    // rustls' default size for the session-ID cache.
    config.session_storage = Arc::new(BoundSessions {
        inner: ServerSessionMemoryCache::new(256),
        tag: tag.clone(),
    });
    if let Some(t) = &on.ticketer {
        config.ticketer = Arc::new(BoundTickets {
            inner: t.0.clone(),
            tag,
        });
    }
    Ok(Arc::new(config))
}

/// Eight bytes of a profile's digest (zeros for pier's default, so its sessions stay as they
/// were).
fn profile_digest(profile: &TlsProfile) -> [u8; 8] {
    if profile.is_default() {
        return [0; 8];
    }
    let text = serde_json::to_vec(profile).unwrap_or_default();
    let d = crate::tls::provider::sha256(&text);
    let mut out = [0; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// A bound port's TLS server configs (their certificates come from the current snapshot).
pub struct PortTls {
    /// HTTPS: ALPN `h2`, `http/1.1`.
    pub https: tokio_rustls::TlsAcceptor,
    /// TLS ports that terminate (TLSRoute): no ALPN.
    pub stream: Arc<ServerConfig>,
    /// The configs of listeners with TLS settings of their own (ClientTrafficPolicy `tls`,
    /// `tls.options`), chosen by SNI once the ClientHello is read.
    pub https_profiles: ProfileConfigs,
    pub stream_profiles: ProfileConfigs,
}

/// A bound port's server configs for the [`TlsProfile`]s its listeners have, built on first
/// use and kept while the port is bound (the profiles in use are few; a table that outgrows
/// [`ProfileConfigs::KEEP`] starts over, so edits cannot grow it without bound).
pub struct ProfileConfigs {
    port: PortConfig,
    carries: Carries,
    built: std::sync::RwLock<std::collections::HashMap<TlsProfile, Arc<ServerConfig>>>,
}

impl ProfileConfigs {
    const KEEP: usize = 64;

    pub fn new(port: PortConfig, carries: Carries) -> Self {
        Self {
            port,
            carries,
            built: Default::default(),
        }
    }

    /// The config of `profile` (`None`: it could not be built, which translation's checks
    /// rule out; the handshake is then refused, never served with other settings).
    pub fn get(&self, profile: &TlsProfile) -> Option<Arc<ServerConfig>> {
        let read = self
            .built
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = read.get(profile) {
            return Some(c.clone());
        }
        drop(read);
        let config = match server_config(&self.port, self.carries, profile) {
            Ok(c) => c,
            Err(error) => {
                tracing::warn!(port = self.port.port.port, %error, "a listener's TLS settings cannot be served");
                return None;
            }
        };
        let mut built = self
            .built
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if built.len() >= Self::KEEP {
            built.clear();
        }
        Some(built.entry(profile.clone()).or_insert(config).clone())
    }
}

#[cfg(test)]
mod tests;
