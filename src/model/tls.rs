//! Server certificates of an HTTPS port, chosen by SNI: an exact name, then the longest
//! matching wildcard, then the port's default. Built and checked at translation time, so the
//! handshake only does map lookups.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use serde::Serialize;

#[derive(Clone, Default)]
pub struct CertTable {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// (suffix starting with '.', cert), longest suffix first.
    wildcard: Vec<(String, Arc<CertifiedKey>)>,
    default: Option<Arc<CertifiedKey>>,
}

impl CertTable {
    /// Adds a certificate under each name (lower-case; `*.example.com` for wildcards).
    /// The first certificate added for a name keeps it; the first one overall is the default
    /// for clients that send no SNI or an unknown name.
    pub fn add(&mut self, names: &[String], key: Arc<CertifiedKey>) {
        for n in names {
            let n = n.to_ascii_lowercase();
            match n.strip_prefix('*') {
                Some(suffix) if suffix.starts_with('.') => {
                    if !self.wildcard.iter().any(|(s, _)| s == suffix) {
                        self.wildcard.push((suffix.to_string(), key.clone()));
                        self.wildcard.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
                    }
                }
                _ => {
                    self.exact.entry(n).or_insert_with(|| key.clone());
                }
            }
        }
        if self.default.is_none() {
            self.default = Some(key);
        }
    }

    pub fn resolve(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = sni {
            // rustls hands SNI over lower-cased already.
            if let Some(k) = self.exact.get(name) {
                return Some(k.clone());
            }
            if let Some((_, k)) = self
                .wildcard
                .iter()
                .find(|(s, _)| name.len() > s.len() && name.ends_with(s.as_str()))
            {
                return Some(k.clone());
            }
        }
        self.default.clone()
    }

    pub fn is_empty(&self) -> bool {
        self.default.is_none()
    }

    /// The names certificates are served under (`*.example.com` for wildcards), sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .exact
            .keys()
            .cloned()
            .chain(self.wildcard.iter().map(|(s, _)| format!("*{s}")))
            .collect();
        v.sort();
        v
    }
}

impl std::fmt::Debug for CertTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertTable")
            .field("names", &self.names())
            .finish()
    }
}

/// Only the names are shown; certificates and keys never leave the process.
impl Serialize for CertTable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("CertTable", 1)?;
        st.serialize_field("serverNames", &self.names())?;
        st.end()
    }
}

/// Client certificate validation on an HTTPS port (GEP-91, Gateway `spec.tls.frontend`): the
/// verifier built from the CA bundle at translation time, and what to do without a valid
/// certificate. A CA rotation is a new snapshot with a new `ClientAuth`; handshakes read the
/// current one, connections already up keep the identity they proved.
#[derive(Clone)]
pub struct ClientAuth {
    pub mode: ClientAuthMode,
    /// Verifies a chain against the CA bundle (rustls' webpki verifier, mandatory).
    pub verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    /// A digest of the mode and the sorted CA certificates: equal tags, equal policy. TLS
    /// session tickets carry it, so a session resumes only under the policy it was made under.
    pub tag: [u8; 32],
    /// How many CA certificates the bundle holds (for `/config`).
    pub cas: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ClientAuthMode {
    /// A client without a certificate that chains to the bundle cannot complete the handshake.
    AllowValidOnly,
    /// Clients may present no certificate, or one that does not verify; only a verified one
    /// counts as an identity.
    AllowInsecureFallback,
}

impl ClientAuth {
    /// Whether a client must present a valid certificate to complete the handshake.
    pub fn mandatory(&self) -> bool {
        self.mode == ClientAuthMode::AllowValidOnly
    }
}

impl PartialEq for ClientAuth {
    fn eq(&self, other: &Self) -> bool {
        self.tag == other.tag
    }
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuth")
            .field("mode", &self.mode)
            .field("cas", &self.cas)
            .finish()
    }
}

/// The mode and the number of CAs; never the certificates.
impl Serialize for ClientAuth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("ClientAuth", 2)?;
        st.serialize_field("mode", &self.mode)?;
        st.serialize_field("ca_certificates", &self.cas)?;
        st.end()
    }
}

/// The TLS handshake a listener offers its clients when it is not pier's default (a
/// ClientTrafficPolicy's `tls`, or the listener's `tls.options`): checked at translation time
/// against what rustls implements, so the proxy builds its server config without failing.
/// Names are rustls's (`TLS13_AES_128_GCM_SHA256`, `secp256r1`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsProfile {
    /// TLS 1.2 is offered.
    pub tls12: bool,
    /// TLS 1.3 is offered.
    pub tls13: bool,
    /// Cipher suites in order of preference (`None`: the provider's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ciphers: Option<Vec<String>>,
    /// Key exchange groups in order of preference (`None`: the provider's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    /// ALPN protocols offered on HTTPS (`None`: `h2`, `http/1.1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alpn: Option<Vec<String>>,
}

impl TlsProfile {
    /// pier's defaults: what a listener without settings gets.
    pub const DEFAULT: TlsProfile = TlsProfile {
        tls12: true,
        tls13: true,
        ciphers: None,
        groups: None,
        alpn: None,
    };

    pub fn is_default(&self) -> bool {
        self == &Self::DEFAULT
    }
}

/// A ClientTrafficPolicy as the listeners it applies to get it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientPolicy {
    /// `namespace/name` of the policy.
    pub source: String,
    /// The handshake it asks for (`None`: the listener's own `tls.options`, or pier's defaults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Arc<TlsProfile>>,
    /// What it sets of its listeners' connections (`connection`, `clientIPDetection`,
    /// `timeout.http.idleTimeout`, `path`, `headers`); unset fields: the flags'.
    pub connection: PortClient,
    /// `http3`: its HTTPS listeners serve HTTP/3 too.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub http3: bool,
}

/// What a request header whose name has `_` comes to. Ordered from the most lenient.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Underscores {
    #[default]
    Allow,
    /// Removed before routing and forwarding.
    DropHeader,
    /// The request is answered 400.
    RejectRequest,
}

/// What a path's `%2F` and `%5C` come to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum EscapedSlashes {
    /// Left as they are (upper-cased): not separators, routed as data.
    #[default]
    KeepUnchanged,
    /// The request is answered 400.
    RejectRequest,
    /// Decoded to `/` and `\` before the path is normalised and routed.
    UnescapeAndForward,
}

/// Settings of a connection, decided before any request says which listener it is for: what
/// one ClientTrafficPolicy sets, and what a port's connections get of its listeners'
/// policies together ([`PortClient::of`]). Unset fields: the flags'. Listeners that
/// share a port and differ: the smallest connection limit, idle timeout and request receive
/// timeout apply, forwarding
/// headers are believed only when every listener believes the same proxies (else nobody's),
/// slashes are merged as `--merge-slashes` says and escaped slashes refused, header names with
/// `_` get the strictest handling, and untrusted request IDs are kept only if every listener
/// keeps them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortClient {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_limit: Option<u32>,
    /// `None`: `--trusted-proxies`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trusted_proxies: Option<Arc<super::net::TrustedProxies>>,
    /// How long a connection may idle (`None`: the flags').
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<std::time::Duration>,
    /// How long a request (head and body) may take to arrive from its first byte
    /// (`timeout.http.requestReceivedTimeout`; `None`: no bound of its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_received: Option<std::time::Duration>,
    /// Merge runs of `/` (`None`: `--merge-slashes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_slashes: Option<bool>,
    /// Escaped slashes in paths (`None`: kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escaped_slashes: Option<EscapedSlashes>,
    /// Header names with `_` (`None`: allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub underscores: Option<Underscores>,
    /// Keep an untrusted client's `X-Request-Id`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub preserve_request_id: bool,
}

impl PortClient {
    /// The settings of a port whose listeners have `policies` (`None`: a listener without
    /// one); `None` when nothing differs from the flags.
    pub fn of<'p>(policies: impl IntoIterator<Item = Option<&'p PortClient>>) -> Option<Self> {
        let mut limit: Option<u32> = None;
        let mut idle: Option<std::time::Duration> = None;
        let mut received: Option<std::time::Duration> = None;
        let mut merge: Option<Option<bool>> = None;
        let mut escaped: Option<Option<EscapedSlashes>> = None;
        let (mut merge_agree, mut escaped_agree) = (true, true);
        let mut underscores: Option<Underscores> = None;
        let mut preserve: Option<bool> = None;
        let mut trust: Option<Option<&Arc<super::net::TrustedProxies>>> = None;
        let mut agree = true;
        for p in policies {
            if let Some(l) = p.and_then(|p| p.connection_limit) {
                limit = Some(limit.map_or(l, |m| m.min(l)));
            }
            if let Some(t) = p.and_then(|p| p.idle_timeout) {
                idle = Some(idle.map_or(t, |m| m.min(t)));
            }
            if let Some(t) = p.and_then(|p| p.request_received) {
                received = Some(received.map_or(t, |m| m.min(t)));
            }
            let m = p.and_then(|p| p.merge_slashes);
            merge_agree &= *merge.get_or_insert(m) == m;
            let e = p.and_then(|p| p.escaped_slashes);
            escaped_agree &= *escaped.get_or_insert(e) == e;
            // The strictest handling of underscores; request IDs kept only if all keep them.
            let u = p.and_then(|p| p.underscores).unwrap_or_default();
            underscores = Some(underscores.map_or(u, |m| m.max(u)));
            let keep = p.is_some_and(|p| p.preserve_request_id);
            preserve = Some(preserve.unwrap_or(true) && keep);
            let t = p.and_then(|p| p.trusted_proxies.as_ref());
            match trust {
                None => trust = Some(t),
                Some(seen) if seen != t => agree = false,
                Some(_) => {}
            }
        }
        let trusted_proxies = match trust.flatten() {
            _ if !agree => Some(Arc::new(super::net::TrustedProxies::default())),
            Some(t) => Some(t.clone()),
            None => None,
        };
        let port = Self {
            connection_limit: limit,
            trusted_proxies,
            idle_timeout: idle,
            request_received: received,
            // Listeners that disagree: the flag's merging, and escaped slashes refused (a
            // request must not be routed one way on one listener and another on the next).
            merge_slashes: merge.flatten().filter(|_| merge_agree),
            escaped_slashes: if escaped_agree {
                escaped.flatten()
            } else {
                Some(EscapedSlashes::RejectRequest)
            },
            underscores: underscores.filter(|u| *u != Underscores::Allow),
            preserve_request_id: preserve.unwrap_or(false),
        };
        (port != Self::default()).then_some(port)
    }
}
