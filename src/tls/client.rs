//! Upstream TLS: the rustls `ClientConfig`s pier uses towards backends, for mesh mTLS and for
//! BackendTLSPolicy TLS, and the certificate verifier behind both. Pure: no I/O, no clock
//! (rustls passes the handshake time to the verifier); translation builds every config once and
//! the connector only clones the `Arc`.
//!
//! ```text
//! TrustBundle (CA DERs) ──┐
//! ClientIdentity ─────────┼─> ConfigSpec ──trust_key()──> ClientConfigs (cache) ─> Arc<ClientConfig>
//! PeerCheck, ALPN ────────┘                                     │
//!                                       PeerVerifier: chain + validity + key usage, then
//!                                       Name (BackendTLSPolicy hostname) | Sans | ChainOnly (mesh)
//! ```
//!
//! Mesh workload certificates usually carry only a SPIFFE URI SAN
//! (`spiffe://cluster.local/ns/app/sa/web`), never the Service's DNS name, so the mesh verifier
//! checks the chain against the mesh trust bundle and skips the DNS name check
//! ([`PeerCheck::ChainOnly`]); SAN requirements (from a BackendTLSPolicy's `subjectAltNames`)
//! are checked when given. Signatures are verified with the provider's algorithms ([`crate::tls::provider`]).
//!
//! Failures keep rustls' error types, so the connector can tell them apart with [`classify`]:
//!
//! | rustls error                                                   | [`HandshakeFailure`] |
//! |----------------------------------------------------------------|----------------------|
//! | `InvalidCertificate(UnknownIssuer)`                            | `UnknownCa`          |
//! | `InvalidCertificate(Expired \| ExpiredContext)`                | `Expired`            |
//! | `InvalidCertificate(NotValidYet \| NotValidYetContext)`        | `NotYetValid`        |
//! | `InvalidCertificate(NotValidForName[Context] \| ApplicationVerificationFailure)` | `SanMismatch` |
//! | `InvalidCertificate(Other(`[`IdentityMismatch`]`))` (per-endpoint identity)    | `IdentityMismatch` |
//! | any other `InvalidCertificate(_)`, `NoCertificatesPresented`   | `BadCertificate`     |
//! | `AlertReceived(_)` (the backend refused us, e.g. our client cert) | `PeerRejected`    |
//! | `NoApplicationProtocol`                                        | `AlpnMismatch`       |
//! | anything else                                                  | `Other`              |
//!
//! The verifier itself reports a SAN mismatch as `NotValidForName` (DNS and URI alike).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{
    ResolvesClientCert, verify_server_cert_signed_by_trust_anchor, verify_server_name,
};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, DnsName, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme,
};

use crate::model::AppProtocol;

/// A set of trusted CA certificates: sorted and deduplicated, so the same CAs from any number
/// of sources in any order give the same digest (and trust key).
#[derive(Clone)]
pub struct TrustBundle {
    certs: Vec<CertificateDer<'static>>,
    roots: Arc<RootCertStore>,
    digest: [u8; 32],
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("not valid PEM")]
    Pem(#[source] super::pem::PemError),
    #[error("holds no PEM certificate")]
    Empty,
    #[error("certificate {0} cannot be used as a trust anchor")]
    BadCertificate(usize),
}

/// A client certificate chain and its private key, checked to match. Never printed: `Debug`
/// shows only the chain's digest.
#[derive(Clone)]
pub struct ClientIdentity {
    key: Arc<CertifiedKey>,
    digest: [u8; 32],
}

/// What is wrong with a client certificate or key. Messages never contain key material.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("the certificate is not valid PEM")]
    CertificatePem(#[source] super::pem::PemError),
    #[error("the certificate file holds no PEM certificate")]
    NoCertificate,
    #[error("the certificate is not a valid X.509 certificate")]
    BadCertificate,
    #[error("the key is not a valid PEM private key")]
    KeyPem(#[source] super::pem::PemError),
    #[error("the key is not a supported private key")]
    KeyUnsupported(#[source] Error),
    #[error("the key does not match the certificate")]
    KeyMismatch,
}

/// A subjectAltName the backend's certificate must carry (BackendTLSPolicy `subjectAltNames`,
/// GEP-3155): at least one of the required names must match.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SanRequirement {
    /// A DNS SAN (the certificate's wildcards apply), lower-cased.
    Dns(String),
    /// A URI SAN, compared exactly (e.g. a SPIFFE ID).
    Uri(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidSan {
    #[error("{0:?} is not a valid DNS name")]
    Dns(String),
    #[error("{0:?} is not an absolute URI")]
    Uri(String),
}

/// Which identity check follows the chain check.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerCheck {
    /// The certificate must be valid for this name (BackendTLSPolicy `hostname` without
    /// `subjectAltNames`).
    Name(ServerName<'static>),
    /// The certificate must carry at least one of these SANs (sorted, deduplicated). GEP-3155:
    /// when subjectAltNames are given, the hostname is not used for authentication.
    Sans(Vec<SanRequirement>),
    /// Chain only: mesh mTLS without SAN requirements (the trust bundle is the identity).
    ChainOnly,
    /// Mesh mTLS with per-endpoint identity: the certificate must carry exactly this
    /// workload identity (a SPIFFE URI, or a Linkerd DNS-shaped name). A mismatch fails as
    /// [`IdentityMismatch`], so the connector reports `identity_mismatch`, not a SAN mismatch.
    Identity(SanRequirement),
}

/// A workload presented a valid certificate of the mesh, but for another identity than the
/// endpoint's (a reused pod IP, a stale EndpointSlice, a misrouted address).
#[derive(Debug, thiserror::Error)]
#[error("the workload's certificate is not for the identity expected at this endpoint")]
pub struct IdentityMismatch;

/// Whether a rustls error is an [`IdentityMismatch`].
pub fn is_identity_mismatch(e: &Error) -> bool {
    matches!(e, Error::InvalidCertificate(CertificateError::Other(o))
        if o.0.downcast_ref::<IdentityMismatch>().is_some())
}

/// Everything that goes into one `ClientConfig`.
#[derive(Clone, Copy, Debug)]
pub struct ConfigSpec<'a> {
    pub roots: &'a TrustBundle,
    /// Presented when the backend asks for a client certificate.
    pub client: Option<&'a ClientIdentity>,
    pub check: &'a PeerCheck,
    pub alpn: &'a [Vec<u8>],
}

/// Builds each distinct config once per translation and shares it.
#[derive(Default)]
pub struct ClientConfigs {
    built: HashMap<u64, Arc<ClientConfig>>,
    /// Configs of the previous snapshot, reused when a spec has the same trust key.
    previous: HashMap<u64, Arc<ClientConfig>>,
}

/// Why an upstream TLS handshake failed, as the connector counts it. Bounded: a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HandshakeFailure {
    /// The backend's chain does not lead to a trusted CA.
    UnknownCa,
    /// The backend's certificate (or one in its chain) has expired.
    Expired,
    /// The backend's certificate (or one in its chain) is not valid yet.
    NotYetValid,
    /// The certificate is valid but not for the required name or SANs.
    SanMismatch,
    /// A mesh certificate for another workload identity than the endpoint's.
    IdentityMismatch,
    /// Anything else wrong with the backend's certificate (encoding, signature, key usage).
    BadCertificate,
    /// The backend sent an alert: it refused the handshake, e.g. pier's client certificate.
    PeerRejected,
    /// No ALPN protocol in common.
    AlpnMismatch,
    /// Not a certificate problem (protocol errors, ...).
    Other,
}

/// The verifier behind every upstream config.
#[derive(Debug)]
struct PeerVerifier {
    roots: Arc<RootCertStore>,
    check: PeerCheck,
    algs: WebPkiSupportedAlgorithms,
}

/// Always presents the same client certificate.
#[derive(Debug)]
struct FixedClientCert(Arc<CertifiedKey>);

// === impl TrustBundle ===

impl TrustBundle {
    /// Every certificate of a PEM bundle (other PEM sections are ignored).
    pub fn from_pem(pem: &[u8]) -> Result<Self, BundleError> {
        Self::from_certs(parse_pem_certs(pem)?)
    }

    /// The union of certificates; fails when there is none.
    pub fn from_certs(
        certs: impl IntoIterator<Item = CertificateDer<'static>>,
    ) -> Result<Self, BundleError> {
        let mut certs: Vec<CertificateDer<'static>> = certs.into_iter().collect();
        certs.sort_by(|a, b| a.as_ref().cmp(b.as_ref()));
        certs.dedup();
        if certs.is_empty() {
            return Err(BundleError::Empty);
        }
        let mut roots = RootCertStore::empty();
        for (i, c) in certs.iter().enumerate() {
            roots
                .add(c.clone())
                .map_err(|_| BundleError::BadCertificate(i))?;
        }
        let mut h = Digest::new(b"pier/trust-bundle/v1");
        for c in &certs {
            h.bytes(c.as_ref());
        }
        Ok(Self {
            certs,
            roots: Arc::new(roots),
            digest: h.finish(),
        })
    }

    /// Mozilla's root program, as shipped in `webpki-root-certs`, for BackendTLSPolicy
    /// `wellKnownCACertificates: System`. Static data rather than the host's store
    /// (`rustls-native-certs`): translation stays pure and deterministic (no file reads, the
    /// same trust key on every host), and pier runs outside the cluster, where the host's store
    /// says nothing about what the cluster's backends use. Updating it means updating pier.
    pub fn well_known() -> Self {
        Self::from_certs(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned())
            .expect("webpki-root-certs holds valid trust anchors")
    }

    pub fn len(&self) -> usize {
        self.certs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }

    pub fn certs(&self) -> &[CertificateDer<'static>] {
        &self.certs
    }

    /// The certificates as rustls trust anchors.
    pub fn roots(&self) -> &Arc<RootCertStore> {
        &self.roots
    }

    /// A digest of the sorted certificates: equal digests, equal bundles.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }
}

impl fmt::Debug for TrustBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustBundle")
            .field("certs", &self.certs.len())
            .field("digest", &hex8(&self.digest))
            .finish()
    }
}

/// The certificates of a PEM text, each checked to be usable as a trust anchor. Fails on
/// broken PEM, on a certificate that does not parse, and when there is none.
pub fn parse_pem_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, BundleError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BundleError::Pem(e.into()))?;
    check_anchors(&certs)?;
    Ok(certs)
}

/// Fails when there is no certificate or one cannot be a trust anchor.
pub fn check_anchors(certs: &[CertificateDer<'_>]) -> Result<(), BundleError> {
    if certs.is_empty() {
        return Err(BundleError::Empty);
    }
    for (i, c) in certs.iter().enumerate() {
        webpki::anchor_from_trusted_cert(c).map_err(|_| BundleError::BadCertificate(i))?;
    }
    Ok(())
}

// === impl ClientIdentity ===

impl ClientIdentity {
    /// A chain (leaf first) and its private key, both PEM.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, IdentityError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| IdentityError::CertificatePem(e.into()))?;
        let der =
            PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| IdentityError::KeyPem(e.into()))?;
        Self::from_der(chain, der)
    }

    /// A chain (leaf first) and its private key, DER (the SPIFFE Workload API's X.509-SVID).
    pub fn from_der(
        chain: Vec<CertificateDer<'static>>,
        der: PrivateKeyDer<'_>,
    ) -> Result<Self, IdentityError> {
        let leaf = chain.first().ok_or(IdentityError::NoCertificate)?;
        ParsedCertificate::try_from(leaf).map_err(|_| IdentityError::BadCertificate)?;
        let signing =
            crate::tls::provider::signing_key(&der).map_err(IdentityError::KeyUnsupported)?;
        let mut h = Digest::new(b"pier/client-identity/v1");
        for c in &chain {
            h.bytes(c.as_ref());
        }
        let key = CertifiedKey::new(chain, signing);
        match key.keys_match() {
            // `Unknown`: the key type cannot report its public key; rustls accepts that too.
            Ok(()) | Err(Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(_) => return Err(IdentityError::KeyMismatch),
        }
        Ok(Self {
            key: Arc::new(key),
            digest: h.finish(),
        })
    }

    /// The chain, leaf first.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.key.cert
    }

    pub fn certified_key(&self) -> &Arc<CertifiedKey> {
        &self.key
    }
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("chain", &self.key.cert.len())
            .field("digest", &hex8(&self.digest))
            .finish_non_exhaustive()
    }
}

// === impl SanRequirement ===

impl SanRequirement {
    pub fn dns(name: &str) -> Result<Self, InvalidSan> {
        let lower = name.to_ascii_lowercase();
        DnsName::try_from(lower.as_str()).map_err(|_| InvalidSan::Dns(name.to_string()))?;
        Ok(Self::Dns(lower))
    }

    /// An absolute URI: a scheme (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`), a colon and
    /// something after it, without whitespace.
    pub fn uri(uri: &str) -> Result<Self, InvalidSan> {
        let bad = || InvalidSan::Uri(uri.to_string());
        let (scheme, rest) = uri.split_once(':').ok_or_else(bad)?;
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !scheme_ok || rest.is_empty() || uri.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        Ok(Self::Uri(uri.to_string()))
    }
}

impl fmt::Display for SanRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dns(d) => write!(f, "DNS:{d}"),
            Self::Uri(u) => write!(f, "URI:{u}"),
        }
    }
}

// === impl PeerCheck ===

impl PeerCheck {
    /// `Sans` with the requirements sorted and deduplicated; `ChainOnly` when there are none.
    pub fn sans_or_chain(mut sans: Vec<SanRequirement>) -> Self {
        sans.sort();
        sans.dedup();
        if sans.is_empty() {
            Self::ChainOnly
        } else {
            Self::Sans(sans)
        }
    }
}

// === impl ConfigSpec ===

impl ConfigSpec<'_> {
    /// A stable hash of everything that decides what is trusted and what is presented: the
    /// CA certificates, the client chain, the identity check and the ALPN list. Equal keys mean
    /// interchangeable configs; pooled connections are keyed by it.
    pub fn trust_key(&self) -> u64 {
        let mut h = Digest::new(b"pier/upstream-tls/v1");
        h.bytes(&self.roots.digest);
        match self.client {
            Some(c) => h.bytes(&c.digest),
            None => h.bytes(b""),
        }
        match self.check {
            PeerCheck::ChainOnly => h.bytes(b"chain"),
            PeerCheck::Name(n) => {
                h.bytes(b"name");
                h.bytes(n.to_str().as_bytes());
            }
            PeerCheck::Sans(sans) => {
                h.bytes(b"sans");
                for s in sans {
                    h.bytes(s.to_string().as_bytes());
                }
            }
            PeerCheck::Identity(id) => {
                h.bytes(b"identity");
                h.bytes(id.to_string().as_bytes());
            }
        }
        h.bytes(b"alpn");
        for p in self.alpn {
            h.bytes(p);
        }
        let d = h.finish();
        u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
    }
}

/// A new `ClientConfig` for `spec` (pier's provider, TLS 1.2 and 1.3).
pub fn build_config(spec: &ConfigSpec<'_>) -> Arc<ClientConfig> {
    let provider = crate::tls::provider::provider();
    let verifier = Arc::new(PeerVerifier {
        roots: spec.roots.roots.clone(),
        check: spec.check.clone(),
        algs: provider.signature_verification_algorithms,
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the provider supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match spec.client {
        Some(c) => builder.with_client_cert_resolver(Arc::new(FixedClientCert(c.key.clone()))),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = spec.alpn.to_vec();
    Arc::new(config)
}

/// The ALPN protocols offered to a backend. Plain HTTP backends get `h2` and `http/1.1` (the
/// backend picks); an explicit `appProtocol` narrows it: WebSocket upgrades need HTTP/1.1, and
/// `kubernetes.io/h2c` asks for HTTP/2. `extra` (mesh protocols such as
/// `ocg.gateway.networking.k8s.io/v1`) follow.
pub fn alpn_for(protocol: AppProtocol, extra: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let base: &[&[u8]] = match protocol {
        AppProtocol::Http1 => &[b"h2", b"http/1.1"],
        AppProtocol::H2c => &[b"h2"],
        AppProtocol::WebSocket => &[b"http/1.1"],
        AppProtocol::Opaque => &[],
    };
    let mut out: Vec<Vec<u8>> = base.iter().map(|p| p.to_vec()).collect();
    for p in extra {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

// === impl ClientConfigs ===

impl ClientConfigs {
    /// The config for `spec` and its trust key, built on first use.
    pub fn get(&mut self, spec: &ConfigSpec<'_>) -> (Arc<ClientConfig>, u64) {
        let key = spec.trust_key();
        let previous = &self.previous;
        let config = self
            .built
            .entry(key)
            .or_insert_with(|| {
                previous
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| build_config(spec))
            })
            .clone();
        (config, key)
    }

    /// Reuse `previous` configs (by trust key) instead of building equal ones: a reused
    /// config keeps its TLS session cache.
    pub fn carry(&mut self, previous: &HashMap<u64, Arc<ClientConfig>>) {
        self.previous = previous.clone();
    }

    /// How many distinct configs were built.
    pub fn len(&self) -> usize {
        self.built.len()
    }

    pub fn is_empty(&self) -> bool {
        self.built.is_empty()
    }
}

// === impl PeerVerifier ===

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        // Chain to a trusted CA, validity at `now`, serverAuth key usage; no name check.
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algs.all,
        )?;
        match &self.check {
            PeerCheck::ChainOnly => {}
            // The configured name, not the SNI: they are the same for BackendTLSPolicy, and the
            // config alone decides what is accepted.
            PeerCheck::Name(name) => verify_server_name(&cert, name)?,
            PeerCheck::Sans(sans) => check_sans(end_entity, &cert, sans)?,
            PeerCheck::Identity(id) => check_sans(end_entity, &cert, std::slice::from_ref(id))
                .map_err(|e| match e {
                    Error::InvalidCertificate(CertificateError::NotValidForName) => {
                        CertificateError::Other(rustls::OtherError(Arc::new(IdentityMismatch)))
                            .into()
                    }
                    other => other,
                })?,
        }
        Ok(ServerCertVerified::assertion())
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

/// At least one required SAN is present. DNS requirements use webpki's name matching (so a
/// certificate's `*.example.com` covers `a.example.com`); URI SANs are read with x509-parser
/// (webpki has no URI API) and compared exactly.
fn check_sans(
    der: &CertificateDer<'_>,
    cert: &ParsedCertificate<'_>,
    sans: &[SanRequirement],
) -> Result<(), Error> {
    let mut uris: Option<Vec<String>> = None;
    for san in sans {
        let found = match san {
            SanRequirement::Dns(d) => DnsName::try_from(d.as_str())
                .is_ok_and(|n| verify_server_name(cert, &ServerName::DnsName(n)).is_ok()),
            SanRequirement::Uri(u) => {
                if uris.is_none() {
                    uris = Some(uri_sans(der)?);
                }
                uris.iter().flatten().any(|have| have == u)
            }
        };
        if found {
            return Ok(());
        }
    }
    Err(CertificateError::NotValidForName.into())
}

/// The URI subjectAltNames of a certificate.
pub fn uri_sans(der: &[u8]) -> Result<Vec<String>, Error> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|_| Error::from(CertificateError::BadEncoding))?;
    match cert.subject_alternative_name() {
        Ok(Some(san)) => Ok(san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::URI(u) => Some(u.to_string()),
                _ => None,
            })
            .collect()),
        Ok(None) => Ok(vec![]),
        Err(_) => Err(CertificateError::BadEncoding.into()),
    }
}

// === impl FixedClientCert ===

impl ResolvesClientCert for FixedClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

// === HandshakeFailure ===

/// Why a handshake failed, for metrics (see the module docs for the mapping).
pub fn classify(e: &Error) -> HandshakeFailure {
    use CertificateError as C;
    if is_identity_mismatch(e) {
        return HandshakeFailure::IdentityMismatch;
    }
    match e {
        Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => HandshakeFailure::UnknownCa,
            C::Expired | C::ExpiredContext { .. } => HandshakeFailure::Expired,
            C::NotValidYet | C::NotValidYetContext { .. } => HandshakeFailure::NotYetValid,
            C::NotValidForName
            | C::NotValidForNameContext { .. }
            | C::ApplicationVerificationFailure => HandshakeFailure::SanMismatch,
            _ => HandshakeFailure::BadCertificate,
        },
        Error::NoCertificatesPresented => HandshakeFailure::BadCertificate,
        Error::AlertReceived(_) => HandshakeFailure::PeerRejected,
        Error::NoApplicationProtocol => HandshakeFailure::AlpnMismatch,
        _ => HandshakeFailure::Other,
    }
}

/// [`classify`] for the `io::Error`s tokio-rustls returns (it wraps the rustls error); `None`
/// when the error is not a TLS error (connection reset, timeout, ...).
pub fn classify_io(e: &std::io::Error) -> Option<HandshakeFailure> {
    e.get_ref()?.downcast_ref::<Error>().map(classify)
}

impl HandshakeFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownCa => "unknown_ca",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::SanMismatch => "san_mismatch",
            Self::IdentityMismatch => "identity_mismatch",
            Self::BadCertificate => "bad_certificate",
            Self::PeerRejected => "peer_rejected",
            Self::AlpnMismatch => "alpn_mismatch",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === digests ===

/// SHA-256 over length-prefixed fields, with a domain label.
struct Digest(crate::tls::provider::Sha256);

impl Digest {
    fn new(label: &[u8]) -> Self {
        let mut h = Self(crate::tls::provider::Sha256::new());
        h.bytes(label);
        h
    }

    fn bytes(&mut self, b: &[u8]) {
        self.0.update(&(b.len() as u64).to_be_bytes());
        self.0.update(b);
    }

    fn finish(self) -> [u8; 32] {
        let mut out = [0; 32];
        out.copy_from_slice(self.0.finish().as_ref());
        out
    }
}

fn hex8(d: &[u8; 32]) -> String {
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;

/// A client config that trusts the host's store (the system bundle, or what `SSL_CERT_FILE` /
/// `SSL_CERT_DIR` name), for pier's own HTTPS fetches (`remoteJWKS` key sets, OIDC discovery
/// and token endpoints). `what` names the user in the log lines about the store.
pub fn host_trust(what: &str) -> rustls::ClientConfig {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!(error = %e, "{what}: a system trust store entry was not read");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::debug!(
            ignored,
            "{what}: system root certificates rustls cannot use were skipped"
        );
    }
    if roots.is_empty() {
        tracing::warn!(
            "{what}: the system trust store is empty (set SSL_CERT_FILE?): https:// endpoints \
             cannot be reached"
        );
    }
    rustls::ClientConfig::builder_with_provider(crate::tls::provider::provider())
        .with_safe_default_protocol_versions()
        .expect("the default provider supports the safe default versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}
