//! Backends: weighted backendRefs, the endpoints of a Service port, per-endpoint load state.
//!
//! Load balancing is power of two choices on in-flight requests (P2C): two random ready
//! endpoints, the one with fewer requests in flight wins. It needs no shared lock, adapts to
//! slow endpoints within a request or two, and avoids the herding of pure least-request.
//! Endpoints that refused a connection, or failed [`Outlier::consecutive_failures`] exchanges
//! in a row (502/503/504, resets, TLS handshakes), are ejected for [`Outlier::ejection`] times
//! the number of ejections since their last success, up to [`MAX_EJECTION`] (as Envoy's
//! `base_ejection_time` and `max_ejection_time`); when every endpoint is ejected they are all
//! tried again (a gateway that serves nothing helps nobody). Endpoints that fail their active
//! health checks (BackendTrafficPolicy `healthCheck.active`, `proxy::health`) are out the same
//! way ([`HEALTH_DOWN`]) until they pass again. The thresholds are pier's
//! defaults ([`CONSECUTIVE_FAILURES`], [`EJECTION`]), `--outlier-*` flags, or a Service's
//! annotations ([`Backend::outlier`]).

use std::cell::LazyCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::ObjectRef;

/// How long an endpoint is left out the first time (by default).
pub const EJECTION: Duration = Duration::from_secs(5);
/// The longest ejection, however often an endpoint fails (or the base ejection, if longer).
pub const MAX_EJECTION: Duration = Duration::from_secs(300);
/// Gateway failures in a row that eject an endpoint (Envoy's `consecutive_gateway_failure`
/// default). Only gateway failures count, not every 5xx: an application's 500 for one bad
/// request must not let a client eject healthy endpoints.
pub const CONSECUTIVE_FAILURES: u32 = 5;

/// Passive outlier detection of one backend's endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Outlier {
    /// Gateway failures in a row that eject an endpoint; 0: failures never eject (a refused
    /// or silent connect still does: nothing listens there).
    pub consecutive_failures: u32,
    /// The first ejection's length; the n-th in a row (no success in between) lasts n times
    /// this, up to [`MAX_EJECTION`].
    #[serde(serialize_with = "ms")]
    pub ejection: Duration,
    /// Every 5xx answer counts as a failure, not only 502/503/504 (a BackendTrafficPolicy's
    /// `healthCheck.passive.consecutive5XxErrors`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub any_5xx: bool,
    /// `healthCheck.passive.interval`: an ejection ends at the first sweep (a multiple of this
    /// on pier's clock) once its length has passed, as Envoy returns endpoints at its
    /// ejection sweeps; zero: as soon as its length has passed.
    #[serde(skip_serializing_if = "Duration::is_zero", serialize_with = "ms")]
    pub interval: Duration,
    /// `healthCheck.passive.maxEjectionPercent`: the most of a backend's endpoints that may be
    /// ejected at once, in percent; one may always be (Envoy's rule). 100: every one (then
    /// requests spread over all of them again).
    #[serde(skip_serializing_if = "is_all")]
    pub max_ejection_percent: u8,
}

fn is_all(p: &u8) -> bool {
    *p >= 100
}

impl Default for Outlier {
    fn default() -> Self {
        Self {
            consecutive_failures: CONSECUTIVE_FAILURES,
            ejection: EJECTION,
            any_5xx: false,
            interval: Duration::ZERO,
            max_ejection_percent: 100,
        }
    }
}

impl Outlier {
    /// How long the `n`-th ejection in a row lasts, in milliseconds.
    fn ejection_ms(&self, n: u32) -> u64 {
        let cap = MAX_EJECTION.max(self.ejection);
        ms_of(self.ejection)
            .saturating_mul(u64::from(n.max(1)))
            .min(ms_of(cap))
    }

    /// When an ejection that begins at `now_ms` ends: after its length, at the next sweep
    /// when [`Outlier::interval`] is set.
    fn ejected_until(&self, now_ms: u64, n: u32) -> u64 {
        let until = now_ms.saturating_add(self.ejection_ms(n));
        match ms_of(self.interval) {
            0 => until,
            sweep => until.div_ceil(sweep).saturating_mul(sweep),
        }
    }
}

/// What a Service's annotations say of [`Outlier`]; unset fields take pier's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct OutlierOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<u32>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_duration::serialize"
    )]
    pub ejection: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub any_5xx: Option<bool>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_duration::serialize"
    )]
    pub interval: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ejection_percent: Option<u8>,
}

impl OutlierOverride {
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }

    /// `default` with what the Service sets.
    pub fn over(&self, default: Outlier) -> Outlier {
        Outlier {
            consecutive_failures: self
                .consecutive_failures
                .unwrap_or(default.consecutive_failures),
            ejection: self.ejection.unwrap_or(default.ejection),
            any_5xx: self.any_5xx.unwrap_or(default.any_5xx),
            interval: self.interval.unwrap_or(default.interval),
            max_ejection_percent: self
                .max_ejection_percent
                .unwrap_or(default.max_ejection_percent),
        }
    }

    /// These settings, and `under`'s where these leave one unset (a policy's over a
    /// Service's annotations).
    pub fn or(self, under: OutlierOverride) -> OutlierOverride {
        OutlierOverride {
            consecutive_failures: self.consecutive_failures.or(under.consecutive_failures),
            ejection: self.ejection.or(under.ejection),
            any_5xx: self.any_5xx.or(under.any_5xx),
            interval: self.interval.or(under.interval),
            max_ejection_percent: self.max_ejection_percent.or(under.max_ejection_percent),
        }
    }
}

/// What a BackendTrafficPolicy sets on the backends of the rules it reaches, over what their
/// Services set (`BackendSet::with_override`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendOverride {
    /// `healthCheck.passive`.
    #[serde(skip_serializing_if = "OutlierOverride::is_none")]
    pub outlier: OutlierOverride,
    /// `circuitBreaker.maxParallelRequests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    /// `circuitBreaker.maxPendingRequests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<u32>,
    /// `circuitBreaker.maxConnections`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// `circuitBreaker.maxParallelRetries`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// `timeout.tcp.connectTimeout`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_duration::serialize"
    )]
    pub connect_timeout: Option<Duration>,
}

impl BackendOverride {
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }

    /// `b` with these settings where they are set.
    pub fn over(&self, b: &Backend) -> Backend {
        Backend {
            outlier: self.outlier.or(b.outlier),
            max_requests: self.max_requests.or(b.max_requests),
            max_pending: self.max_pending.or(b.max_pending),
            max_connections: self.max_connections.or(b.max_connections),
            max_retries: self.max_retries.or(b.max_retries),
            connect_timeout: self.connect_timeout.or(b.connect_timeout),
            ..b.clone()
        }
    }
}

impl Outlier {
    /// Whether an answer with `status` is a failure of the endpoint.
    #[inline]
    pub fn failed(&self, status: u16) -> bool {
        Self::fails(self.any_5xx, status)
    }

    /// [`Outlier::failed`] for the one setting it reads (`any_5xx`), so the request path
    /// reads no more of the settings for a passing answer.
    #[inline]
    pub fn fails(any_5xx: bool, status: u16) -> bool {
        if any_5xx {
            (500..=599).contains(&status)
        } else {
            matches!(status, 502..=504)
        }
    }
}

fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{}ms", d.as_millis()))
}

/// A Service port as a backend: `namespace/name:port`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct BackendId {
    pub service: ObjectRef,
    pub port: u16,
}

impl std::fmt::Display for BackendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.service, self.port)
    }
}

/// The upstream protocol, from the Service port's `appProtocol`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum AppProtocol {
    #[default]
    Http1,
    /// `kubernetes.io/h2c`: HTTP/2 with prior knowledge.
    H2c,
    /// `kubernetes.io/ws`: HTTP/1.1 with WebSocket upgrades (any HTTP/1.1 Upgrade is passed
    /// through on `Http1` too).
    WebSocket,
    /// Bytes, not HTTP: the backend of a TLSRoute. Upstream TLS (mesh, terminated listeners)
    /// offers no HTTP ALPN.
    Opaque,
}

#[derive(Clone, Debug, Serialize)]
pub struct Backend {
    pub id: BackendId,
    pub protocol: AppProtocol,
    pub endpoints: Vec<Endpoint>,
    /// Plaintext, TLS, or "must be TLS but cannot be" (fail closed).
    #[serde(skip_serializing_if = "BackendTls::is_plain")]
    pub tls: BackendTls,
    /// Most requests in flight to this backend at once (circuit breaking: the Service's
    /// `pier.dev/max-requests`); `None`: pier's default (`--max-requests-per-backend`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    /// Most requests waiting for a slot under that maximum (the Service's
    /// `pier.dev/max-pending-requests`); `None`: pier's default
    /// (`--max-pending-requests-per-backend`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<u32>,
    /// Most connections open to this backend's endpoints at once, idle ones included (a
    /// BackendTrafficPolicy's `circuitBreaker.maxConnections`); `None`: no bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Most retries in flight to this backend at once (`circuitBreaker.maxParallelRetries`);
    /// `None`: only the retry budget bounds them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Outlier detection from the Service's `pier.dev/outlier-consecutive-failures` and
    /// `pier.dev/outlier-ejection`, over pier's (`--outlier-*`).
    #[serde(skip_serializing_if = "OutlierOverride::is_none")]
    pub outlier: OutlierOverride,
    /// How long a new connection (TCP and TLS) may take: a BackendTrafficPolicy's
    /// `timeout.tcp.connectTimeout`; `None`: pier's (`--connect-timeout`).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_duration::serialize"
    )]
    pub connect_timeout: Option<Duration>,
    /// Its Service's XBackendTrafficPolicy `retryConstraint`: its own retry budget, and 503
    /// once it is spent; `None`: pier's budget (`proxy::exchange::retry::budget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_constraint: Option<super::retry::RetryConstraint>,
    /// Requests in flight to this backend (Service port), counted while a maximum applies;
    /// shared by every variant of the backend and carried over reloads ([`EndpointPool`]).
    #[serde(skip)]
    pub load: Arc<BackendLoad>,
}

/// Live load of one backend (Service port), across its endpoints.
#[derive(Debug, Default)]
pub struct BackendLoad {
    /// Turns taken by [`Backend::pick_in_turn`] (BackendTrafficPolicy `RoundRobin`).
    pub turn: AtomicU32,
    pub in_flight: AtomicU32,
    /// Requests waiting for a slot under the backend's maximum.
    pub pending: AtomicU32,
    /// Wakes one waiting request each time a counted request finishes.
    pub freed: tokio::sync::Notify,
    /// Connections open to the backend's endpoints, counted while `maxConnections` applies
    /// ([`ConnectionSlot`]).
    pub connections: AtomicU32,
    /// Wakes one request waiting for a connection each time a counted connection closes.
    pub connection_freed: tokio::sync::Notify,
    /// Retries in flight, counted while `maxParallelRetries` applies ([`RetrySlot`]).
    pub retries: AtomicU32,
}

/// Takes one of `max` places counted by `n`, if one is free.
fn claim_below(n: &AtomicU32, max: u32) -> bool {
    n.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |k| {
        (k < max).then_some(k + 1)
    })
    .is_ok()
}

/// One connection counted against its backend's `maxConnections` until dropped (it travels
/// with the connection: in the pool, in hyper's connection task, with a raw socket).
#[derive(Debug)]
pub struct ConnectionSlot(Arc<BackendLoad>);

impl ConnectionSlot {
    /// A slot, when the backend has fewer than `max` connections open.
    pub fn claim(load: &Arc<BackendLoad>, max: u32) -> Option<Self> {
        claim_below(&load.connections, max).then(|| Self(load.clone()))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
        self.0.connection_freed.notify_one();
    }
}

/// One retry counted against its backend's `maxParallelRetries` until dropped.
#[derive(Debug)]
pub struct RetrySlot(Arc<BackendLoad>);

impl RetrySlot {
    /// A slot, when the backend has fewer than `max` retries in flight.
    pub fn claim(load: &Arc<BackendLoad>, max: u32) -> Option<Self> {
        claim_below(&load.retries, max).then(|| Self(load.clone()))
    }
}

impl Drop for RetrySlot {
    fn drop(&mut self) {
        self.0.retries.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How connections to a backend's endpoints are secured. Decided at translation time: a
/// request never chooses, and a backend that must use TLS never falls back to plaintext.
#[derive(Clone, Debug, Default, Serialize)]
pub enum BackendTls {
    #[default]
    Plain,
    /// Mesh mTLS or BackendTLSPolicy TLS, with a ready-built rustls config.
    Tls(Arc<UpstreamTls>),
    /// Mesh mTLS where each endpoint has its own expected workload identity (the mesh
    /// stanza's `identity`): every endpoint carries its config ([`Endpoint::tls`]); one without
    /// fails closed. Endpoints whose identity could not be resolved are not in the backend.
    PerEndpoint(Arc<EndpointIdentities>),
    /// TLS is required (a meshed route, a BackendTLSPolicy) but no usable configuration
    /// exists: requests get a 503 and nothing is sent.
    Unavailable(TlsUnavailable),
}

/// A backend whose endpoints are checked against their own workload identity.
#[derive(Clone, Debug, Serialize)]
pub struct EndpointIdentities {
    /// The naming scheme (`SPIFFE`, `Linkerd`), for status and dumps.
    pub scheme: &'static str,
    /// Endpoints left out because pier cannot tell which identity they must present (sorted
    /// by address).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unresolved: Vec<(SocketAddr, UnresolvedIdentity)>,
}

/// Why an endpoint of a per-endpoint-identity backend has no expected identity. It is left out
/// of load balancing: pier sends it nothing (fail closed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum UnresolvedIdentity {
    /// The EndpointSlice endpoint has no `targetRef` to a Pod.
    NoPodRef,
    /// The `targetRef` names a Pod pier does not know (`namespace/name`).
    PodNotFound(String),
    /// The same, while the API server refuses to let pier list Pods (its RBAC).
    PodsRefused(String),
    /// The identity made from the Pod's ServiceAccount is not a valid name (`namespace/name`).
    InvalidIdentity(String),
}

impl std::fmt::Display for UnresolvedIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoPodRef => f.write_str("its EndpointSlice entry has no Pod targetRef"),
            Self::PodNotFound(p) => write!(f, "Pod {p} is unknown"),
            Self::PodsRefused(p) => write!(
                f,
                "Pod {p} is unknown: the API server refuses pier's list/watch of Pods (grant \
                 `get, list, watch` on `pods`, as config/rbac/clusterrole.yaml does)"
            ),
            Self::InvalidIdentity(p) => {
                write!(
                    f,
                    "the identity of Pod {p}'s ServiceAccount is not a valid name"
                )
            }
        }
    }
}

impl BackendTls {
    pub fn is_plain(&self) -> bool {
        matches!(self, Self::Plain)
    }
}

/// Why a backend that needs TLS has none. Bounded: used as a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum TlsUnavailable {
    /// The mesh trust bundle is missing, unreadable or holds no certificate.
    NoTrustBundle,
    /// The client certificate for mesh mTLS is missing or invalid (also when a Gateway's
    /// `clientCertificateRef` is set but unusable and a BackendTLSPolicy applies).
    NoClientCertificate,
    /// A BackendTLSPolicy targets the Service but cannot be used (bad CA ref, ...).
    InvalidPolicy,
    /// The Gateway's mesh configuration cannot be read (invalid selector, unreadable
    /// `infrastructure.parametersRef`): which routes are meshed is unknown, so every route of
    /// the Gateway fails closed.
    InvalidMeshConfig,
    /// Per-endpoint identity is on and the chosen endpoint has no expected identity (it is not
    /// in the snapshot's backend, e.g. a session's endpoint that left).
    NoEndpointIdentity,
}

impl TlsUnavailable {
    /// The variant name, for metric labels and status reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoTrustBundle => "NoTrustBundle",
            Self::NoClientCertificate => "NoClientCertificate",
            Self::InvalidPolicy => "InvalidPolicy",
            Self::InvalidMeshConfig => "InvalidMeshConfig",
            Self::NoEndpointIdentity => "NoEndpointIdentity",
        }
    }

    /// snake_case, for metric labels and the access log.
    pub fn label(self) -> &'static str {
        match self {
            Self::NoTrustBundle => "no_trust_bundle",
            Self::NoClientCertificate => "no_client_certificate",
            Self::InvalidPolicy => "invalid_policy",
            Self::InvalidMeshConfig => "invalid_mesh_config",
            Self::NoEndpointIdentity => "no_endpoint_identity",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum TlsMode {
    /// Mesh mTLS: client certificate presented, peer verified against the mesh trust bundle.
    Mesh,
    /// BackendTLSPolicy: peer verified against the policy's CAs (client cert if configured).
    Policy,
}

/// A ready TLS client configuration for one backend.
#[derive(Serialize)]
pub struct UpstreamTls {
    pub mode: TlsMode,
    /// Built at translation time (ALPN, client certificate, verifier).
    #[serde(skip)]
    pub config: Arc<rustls::ClientConfig>,
    /// SNI sent to every endpoint of the backend.
    #[serde(serialize_with = "ser_server_name")]
    pub server_name: rustls::pki_types::ServerName<'static>,
    /// A stable hash of the config: CA certificates, client certificate, identity check (name
    /// or SANs) and ALPN (`tls::client::ConfigSpec::trust_key`). Equal keys mean interchangeable
    /// configs. Pool connections by (endpoint address, `server_name`, `trust_key`), so
    /// connections made under different trust or SNI never mix.
    pub trust_key: u64,
    /// The workload identity the peer must present (per-endpoint identity), for status and
    /// dumps; the config enforces it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("mode", &self.mode)
            .field("server_name", &self.server_name)
            .field("trust_key", &self.trust_key)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

fn ser_server_name<S: serde::Serializer>(
    n: &rustls::pki_types::ServerName<'static>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&n.to_str())
}

#[derive(Clone, Debug, Serialize)]
pub struct Endpoint {
    pub addr: SocketAddr,
    #[serde(skip)]
    pub stats: Arc<EndpointStats>,
    /// The endpoint's own TLS config ([`BackendTls::PerEndpoint`]): the workload identity it
    /// must present, and the SNI the mesh expects for it. `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Arc<UpstreamTls>>,
}

/// `EndpointStats::ejected_until_ms` of an endpoint its active health check took out: later
/// than any clock reading, so the endpoint is neither available nor "never ejected", with no
/// extra load on the request path; not `u64::MAX`, which marks an ejection being claimed.
pub const HEALTH_DOWN: u64 = u64::MAX - 1;

/// Live load state of one endpoint address. Shared across snapshots: publishing carries it
/// over by address, so a reload neither forgets ejections nor resets in-flight counts.
#[derive(Debug, Default)]
pub struct EndpointStats {
    pub in_flight: AtomicU32,
    /// Milliseconds on the proxy's monotonic clock until which the endpoint is ejected.
    pub ejected_until_ms: AtomicU64,
    /// Gateway failures (502/503/504 answers, resets, failed TLS handshakes) in a row.
    pub failures: AtomicU32,
    /// Ejections since the last success (each one lasts longer).
    pub ejections: AtomicU32,
}

impl EndpointStats {
    /// Active health checking took the endpoint out ([`HEALTH_DOWN`]). Returns true when it
    /// was not marked so already (an ejection running is replaced: the checks know better).
    pub fn mark_unhealthy(&self) -> bool {
        self.ejected_until_ms.swap(HEALTH_DOWN, Ordering::Relaxed) != HEALTH_DOWN
    }

    /// Active health checking brings the endpoint back; an ejection that began since it was
    /// marked (none can: a marked endpoint gets no requests) is left to run out.
    pub fn mark_healthy(&self) -> bool {
        self.ejected_until_ms
            .compare_exchange(HEALTH_DOWN, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    pub fn is_unhealthy(&self) -> bool {
        self.ejected_until_ms.load(Ordering::Relaxed) == HEALTH_DOWN
    }
}

/// HTTPRoute `timeouts`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Timeouts {
    /// From the request's arrival to the response headers, across everything.
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration")]
    pub request: Option<Duration>,
    /// One attempt against the backend.
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration")]
    pub backend_request: Option<Duration>,
}

/// Load state of every endpoint address and every backend (Service port) of a snapshot, handed
/// to the next translation so that in-flight counts, ejections and circuit-breaking counts
/// survive a reload. Pure data: translation looks them up and starts new ones at zero.
#[derive(Clone, Debug, Default)]
pub struct EndpointPool {
    endpoints: std::collections::HashMap<SocketAddr, Arc<EndpointStats>>,
    backends: std::collections::HashMap<BackendId, Arc<BackendLoad>>,
}

impl EndpointPool {
    /// An endpoint for `addr`, sharing its stats with the previous snapshot's.
    pub fn endpoint(&self, addr: SocketAddr) -> Endpoint {
        Endpoint {
            addr,
            stats: self.endpoints.get(&addr).cloned().unwrap_or_default(),
            tls: None,
        }
    }

    /// The load of backend `id`, shared with the previous snapshot's.
    pub fn backend_load(&self, id: &BackendId) -> Arc<BackendLoad> {
        self.backends.get(id).cloned().unwrap_or_default()
    }

    pub fn insert(&mut self, e: &Endpoint) {
        self.endpoints
            .entry(e.addr)
            .or_insert_with(|| e.stats.clone());
    }

    pub fn insert_backend(&mut self, b: &Backend) {
        self.backends
            .entry(b.id.clone())
            .or_insert_with(|| b.load.clone());
    }

    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }
}

// === impl Backend ===

impl Backend {
    /// The TLS config for a connection to `endpoint` of this backend: `None` for plaintext,
    /// or why there is none when TLS is required (fail closed: never plaintext).
    pub fn tls_for<'a>(
        &'a self,
        endpoint: &'a Endpoint,
    ) -> Result<Option<&'a UpstreamTls>, TlsUnavailable> {
        match &self.tls {
            BackendTls::Plain => Ok(None),
            BackendTls::Tls(u) => Ok(Some(u)),
            BackendTls::PerEndpoint(_) => match &endpoint.tls {
                Some(u) => Ok(Some(u)),
                None => Err(TlsUnavailable::NoEndpointIdentity),
            },
            BackendTls::Unavailable(why) => Err(*why),
        }
    }

    /// Power of two choices over the endpoints that are not ejected at `now_ms` (read only
    /// when an endpoint to choose from was ever ejected: most requests need no clock).
    /// `r1`, `r2` are independent uniform random numbers.
    pub fn pick(&self, now_ms: impl FnOnce() -> u64, r1: u32, r2: u32) -> Option<&Endpoint> {
        let eps = &self.endpoints;
        match eps.len() {
            0 => return None,
            1 => return eps.first(),
            _ => {}
        }
        let now = LazyCell::new(now_ms);
        let available = |e: &Endpoint| e.never_ejected() || e.available(*now);
        let n = eps.len();
        let a = &eps[r1 as usize % n];
        // The second choice is distinct from the first.
        let b = &eps[(r1 as usize % n + 1 + r2 as usize % (n - 1)) % n];
        match (available(a), available(b)) {
            (true, true) => Some(if b.load() < a.load() { b } else { a }),
            (true, false) => Some(a),
            (false, true) => Some(b),
            // Both out: scan for any available endpoint, else (every endpoint ejected or
            // failing its health checks) the less loaded of the two, so that requests still
            // spread over all of them.
            (false, false) => eps
                .iter()
                .find(|e| available(e))
                .or(Some(if b.load() < a.load() { b } else { a })),
        }
    }

    /// Ejects `endpoint` ([`Endpoint::eject`]) unless that would leave out more than
    /// [`Outlier::max_ejection_percent`] of the backend's endpoints (one may always be out, as
    /// in Envoy). Endpoints down by their active health checks are not counted: they are not
    /// ejections. Concurrent ejections of two endpoints may both pass the count.
    pub fn eject(&self, endpoint: &Endpoint, now_ms: u64, outlier: &Outlier) -> bool {
        self.room_to_eject(endpoint, now_ms, outlier) && endpoint.eject(now_ms, outlier)
    }

    /// Passive outlier detection of one exchange with `endpoint` ([`Endpoint::count`]), which
    /// ejects it ([`Backend::eject`]) at the threshold. `now_ms` is read only then.
    #[inline]
    pub fn record(
        &self,
        endpoint: &Endpoint,
        failed: bool,
        now_ms: impl FnOnce() -> u64,
        outlier: &Outlier,
    ) -> bool {
        endpoint.count(failed, outlier) && self.eject(endpoint, now_ms(), outlier)
    }

    fn room_to_eject(&self, endpoint: &Endpoint, now_ms: u64, outlier: &Outlier) -> bool {
        let pct = usize::from(outlier.max_ejection_percent);
        if pct >= 100 {
            return true;
        }
        let out = (self.endpoints.iter())
            .filter(|e| e.addr != endpoint.addr && e.ejected(now_ms))
            .count();
        out == 0 || (out + 1) * 100 <= pct * self.endpoints.len()
    }

    /// The first endpoint available at `now_ms` from index `start` on, wrapping around.
    fn available_from(&self, start: usize, now_ms: u64) -> Option<&Endpoint> {
        let eps = &self.endpoints;
        let start = start % eps.len().max(1);
        (eps[start..].iter().chain(&eps[..start])).find(|e| e.available(now_ms))
    }

    /// BackendTrafficPolicy `RoundRobin`: the next available endpoint in turn (the turn is
    /// the backend's, kept across reloads); `None` when none is available (then [`pick`]
    /// chooses among the ejected).
    ///
    /// [`pick`]: Backend::pick
    pub fn pick_in_turn(&self, now_ms: u64) -> Option<&Endpoint> {
        let turn = self.load.turn.fetch_add(1, Ordering::Relaxed);
        self.available_from(turn as usize, now_ms)
    }

    /// BackendTrafficPolicy `Random`: an available endpoint, uniformly at random (`r`).
    pub fn pick_random(&self, now_ms: u64, r: u32) -> Option<&Endpoint> {
        self.available_from(r as usize, now_ms)
    }

    /// BackendTrafficPolicy `ConsistentHash`: the available endpoint that ranks `key` highest
    /// (rendezvous hashing): the same key goes to the same endpoint, on every pier instance
    /// (a fixed hash seed), and an endpoint that comes or goes moves only the keys it ranks
    /// first. One hash per endpoint per request: meant for backends of up to a few hundred
    /// endpoints.
    pub fn pick_hashed(&self, now_ms: u64, key: &[u8]) -> Option<&Endpoint> {
        use std::hash::BuildHasher;
        // Any fixed value: instances must agree, not guess.
        const SEED: u64 = 0x7069_6572_2e64_6576;
        let state = foldhash::fast::FixedState::with_seed(SEED);
        (self.endpoints.iter())
            .filter(|e| e.available(now_ms))
            .max_by_key(|e| state.hash_one((key, e.addr)))
    }

    /// The endpoint at `addr`, when the backend has it and it is not ejected at `now_ms` (a
    /// session's endpoint).
    pub fn available_at(&self, addr: SocketAddr, now_ms: u64) -> Option<&Endpoint> {
        self.endpoints
            .iter()
            .find(|e| e.addr == addr && e.available(now_ms))
    }

    /// [`Backend::pick`], but not the endpoint at `avoid` when there is another (a retry
    /// after `avoid` failed): then the first endpoint from a random start (`r2`) that is
    /// available and not `avoid`, else the first that is not `avoid`.
    pub fn pick_avoiding(
        &self,
        now_ms: u64,
        r1: u32,
        r2: u32,
        avoid: SocketAddr,
    ) -> Option<&Endpoint> {
        let first = self.pick(|| now_ms, r1, r2)?;
        let eps = &self.endpoints;
        if first.addr != avoid || eps.len() < 2 {
            return Some(first);
        }
        let start = r2 as usize % eps.len();
        let others = || {
            eps[start..]
                .iter()
                .chain(&eps[..start])
                .filter(|e| e.addr != avoid)
        };
        others()
            .find(|e| e.available(now_ms))
            .or_else(|| others().next())
            .or(Some(first))
    }

    #[cfg(test)]
    pub fn test(name: &str) -> Self {
        Self {
            id: BackendId {
                service: ObjectRef::new("default", name),
                port: 80,
            },
            protocol: AppProtocol::Http1,
            endpoints: vec![],
            tls: BackendTls::Plain,
            max_requests: None,
            max_pending: None,
            max_connections: None,
            max_retries: None,
            connect_timeout: None,
            retry_constraint: None,
            outlier: OutlierOverride::default(),
            load: Arc::default(),
        }
    }
}

// === impl Endpoint ===

impl Endpoint {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            stats: Arc::default(),
            tls: None,
        }
    }

    pub fn load(&self) -> u32 {
        self.stats.in_flight.load(Ordering::Relaxed)
    }

    pub fn available(&self, now_ms: u64) -> bool {
        self.stats.ejected_until_ms.load(Ordering::Relaxed) <= now_ms
    }

    /// Out by passive outlier detection at `now_ms` (not by its active health checks).
    fn ejected(&self, now_ms: u64) -> bool {
        let until = self.stats.ejected_until_ms.load(Ordering::Relaxed);
        until > now_ms && until != HEALTH_DOWN
    }

    /// Never ejected since it was made: available at any time.
    pub fn never_ejected(&self) -> bool {
        self.stats.ejected_until_ms.load(Ordering::Relaxed) == 0
    }

    /// Leaves the endpoint out for its next ejection's length (see [`Outlier`]), unless it is
    /// out already: failures of requests that were in flight when it was ejected do not make
    /// the ejection longer. Returns true when this call ejected it.
    pub fn eject(&self, now_ms: u64, outlier: &Outlier) -> bool {
        let until = &self.stats.ejected_until_ms;
        let current = until.load(Ordering::Relaxed);
        // Claim the ejection (u64::MAX: out until the store below), so that one of several
        // concurrent failures decides its length.
        if current > now_ms
            || until
                .compare_exchange(current, u64::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let n = self
            .stats
            .ejections
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        until.store(outlier.ejected_until(now_ms, n), Ordering::Relaxed);
        true
    }

    /// [`Endpoint::count`], and [`Endpoint::eject`] at the threshold (no backend to count
    /// ejections against).
    #[cfg(test)]
    pub fn record(&self, failed: bool, now_ms: impl FnOnce() -> u64, outlier: &Outlier) -> bool {
        self.count(failed, outlier) && self.eject(now_ms(), outlier)
    }

    /// A passing exchange: the failures in a row and the ejection length start again.
    #[inline]
    pub fn passed(&self) {
        let failures = &self.stats.failures;
        // Read first: most responses succeed, and a store would dirty the line each time.
        if failures.load(Ordering::Relaxed) != 0 {
            failures.store(0, Ordering::Relaxed);
        }
        if self.stats.ejections.load(Ordering::Relaxed) != 0 {
            self.stats.ejections.store(0, Ordering::Relaxed);
        }
    }

    /// Passive outlier detection: one exchange's outcome. [`Outlier::consecutive_failures`]
    /// gateway failures in a row reach the threshold (true: eject it, and the count starts
    /// again); any success resets the count and the ejection length.
    #[inline]
    pub fn count(&self, failed: bool, outlier: &Outlier) -> bool {
        let failures = &self.stats.failures;
        if !failed {
            self.passed();
            return false;
        }
        if outlier.consecutive_failures == 0 {
            return false;
        }
        if failures.fetch_add(1, Ordering::Relaxed) + 1 >= outlier.consecutive_failures {
            failures.store(0, Ordering::Relaxed);
            return true;
        }
        false
    }
}

pub(super) mod opt_duration {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::ms(d, s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(n: usize) -> Backend {
        let endpoints = (0..n)
            .map(|i| Endpoint::new(SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16))))
            .collect();
        Backend {
            endpoints,
            ..Backend::test("b")
        }
    }

    #[test]
    fn max_ejection_percent_keeps_endpoints_in_but_one_may_always_go() {
        let o = |pct: u8| Outlier {
            consecutive_failures: 1,
            max_ejection_percent: pct,
            ..Outlier::default()
        };
        // 50 % of four: two out, the third stays in.
        let b = backend(4);
        assert!(b.record(&b.endpoints[0], true, || 0, &o(50)));
        assert!(b.record(&b.endpoints[1], true, || 0, &o(50)));
        assert!(!b.record(&b.endpoints[2], true, || 0, &o(50)));
        assert!(b.endpoints[2].available(1), "not ejected");
        // Down by health checks is not an ejection: it leaves room.
        let b = backend(4);
        b.endpoints[0].stats.mark_unhealthy();
        b.endpoints[1].stats.mark_unhealthy();
        assert!(b.eject(&b.endpoints[2], 0, &o(50)));
        assert!(b.eject(&b.endpoints[3], 0, &o(50)));
        // 10 % of two is less than one endpoint: one may still go, not two.
        let b = backend(2);
        assert!(b.eject(&b.endpoints[0], 0, &o(10)));
        assert!(!b.eject(&b.endpoints[1], 0, &o(10)));
        // Once the first is back, the second may go.
        let back = b.endpoints[0]
            .stats
            .ejected_until_ms
            .load(Ordering::Relaxed);
        assert!(b.eject(&b.endpoints[1], back, &o(10)));
        // 0 %: still one (Envoy's rule); the default: every one.
        let b = backend(3);
        assert!(b.eject(&b.endpoints[0], 0, &o(0)));
        assert!(!b.eject(&b.endpoints[1], 0, &o(0)));
        let b = backend(3);
        assert!(
            b.endpoints
                .iter()
                .all(|e| b.eject(e, 0, &Outlier::default()))
        );
    }

    #[test]
    fn an_interval_returns_ejected_endpoints_at_the_next_sweep() {
        let e = Endpoint::new(SocketAddr::from(([127, 0, 0, 1], 1)));
        let o = Outlier {
            ejection: Duration::from_millis(1500),
            interval: Duration::from_secs(1),
            ..Outlier::default()
        };
        assert!(e.eject(200, &o));
        // 200 + 1500 = 1700: back at the sweep at 2000, not before.
        assert!(!e.available(1999));
        assert!(e.available(2000));
        let plain = Endpoint::new(SocketAddr::from(([127, 0, 0, 1], 2)));
        assert!(plain.eject(200, &Outlier::default()));
        let until = plain.stats.ejected_until_ms.load(Ordering::Relaxed);
        assert_eq!(
            until,
            200 + EJECTION.as_millis() as u64,
            "no interval: no rounding"
        );
    }

    #[test]
    fn connection_and_retry_slots_count_up_to_their_maximum() {
        let load = Arc::new(BackendLoad::default());
        let a = ConnectionSlot::claim(&load, 2).unwrap();
        let _b = ConnectionSlot::claim(&load, 2).unwrap();
        assert!(ConnectionSlot::claim(&load, 2).is_none());
        drop(a);
        assert!(
            ConnectionSlot::claim(&load, 2).is_some(),
            "a closed connection frees one"
        );
        let r = RetrySlot::claim(&load, 1).unwrap();
        assert!(RetrySlot::claim(&load, 1).is_none());
        assert!(RetrySlot::claim(&load, 0).is_none(), "0: no retries");
        drop(r);
        assert_eq!(load.retries.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn round_robin_takes_turns_and_skips_ejected_endpoints() {
        let b = backend(3);
        let ports: Vec<u16> = (0..6)
            .map(|_| b.pick_in_turn(0).unwrap().addr.port())
            .collect();
        assert_eq!(ports, [1000, 1001, 1002, 1000, 1001, 1002]);
        b.endpoints[1]
            .stats
            .ejected_until_ms
            .store(100, Ordering::Relaxed);
        let ports: Vec<u16> = (0..4)
            .map(|_| b.pick_in_turn(50).unwrap().addr.port())
            .collect();
        assert!(!ports.contains(&1001), "{ports:?}");
        for e in &b.endpoints {
            e.stats.ejected_until_ms.store(100, Ordering::Relaxed);
        }
        assert!(
            b.pick_in_turn(50).is_none(),
            "none available: the default pick decides"
        );
        assert!(backend(0).pick_in_turn(0).is_none());
    }

    #[test]
    fn random_picks_only_available_endpoints() {
        let b = backend(4);
        b.endpoints[2]
            .stats
            .ejected_until_ms
            .store(100, Ordering::Relaxed);
        let mut seen = [0; 4];
        for r in 0..400u32 {
            let e = b.pick_random(50, r.wrapping_mul(2_654_435_761)).unwrap();
            seen[(e.addr.port() - 1000) as usize] += 1;
        }
        assert_eq!(seen[2], 0);
        assert!(
            seen.iter().enumerate().all(|(i, &n)| i == 2 || n > 0),
            "{seen:?}"
        );
    }

    #[test]
    fn hashing_keeps_a_key_on_its_endpoint_and_moves_few_when_one_goes() {
        let b = backend(10);
        let key = |i: u32| format!("user-{i}");
        let first: Vec<SocketAddr> = (0..1000)
            .map(|i| b.pick_hashed(0, key(i).as_bytes()).unwrap().addr)
            .collect();
        // The same key, the same endpoint; keys spread over all of them.
        assert_eq!(b.pick_hashed(0, b"user-7").unwrap().addr, first[7]);
        for e in &b.endpoints {
            let n = first.iter().filter(|a| **a == e.addr).count();
            assert!((50..=160).contains(&n), "{} has {n} of 1000 keys", e.addr);
        }
        // One endpoint ejected: only its keys move.
        b.endpoints[3]
            .stats
            .ejected_until_ms
            .store(100, Ordering::Relaxed);
        let gone = b.endpoints[3].addr;
        for (i, was) in first.iter().enumerate() {
            let now = b.pick_hashed(50, key(i as u32).as_bytes()).unwrap().addr;
            if *was != gone {
                assert_eq!(now, *was, "key {i} moved though its endpoint stayed");
            } else {
                assert_ne!(now, gone);
            }
        }
        // Another backend with the same endpoints (another snapshot, another instance) agrees.
        let again = backend(10);
        assert_eq!(again.pick_hashed(0, b"user-42").unwrap().addr, first[42]);
    }

    #[test]
    fn p2c_prefers_the_endpoint_with_fewer_in_flight() {
        let b = backend(2);
        b.endpoints[0].stats.in_flight.store(5, Ordering::Relaxed);
        for r in 0..10 {
            assert_eq!(b.pick(|| 0, r, r * 7).unwrap().addr.port(), 1001);
        }
    }

    #[test]
    fn consecutive_gateway_failures_eject_and_a_success_resets_the_count() {
        let b = backend(1);
        let e = &b.endpoints[0];
        let o = Outlier::default();
        for _ in 0..CONSECUTIVE_FAILURES - 1 {
            assert!(!e.record(true, || 0, &o));
        }
        assert!(!e.record(false, || 0, &o), "a success in between");
        for _ in 0..CONSECUTIVE_FAILURES - 1 {
            assert!(!e.record(true, || 0, &o));
        }
        assert!(e.available(0));
        assert!(e.record(true, || 1000, &o), "the fifth in a row ejects");
        assert!(!e.available(1000 + EJECTION.as_millis() as u64 - 1));
        assert!(e.available(1000 + EJECTION.as_millis() as u64));
    }

    #[test]
    fn the_threshold_is_configurable_and_zero_never_ejects_on_failures() {
        let e = Endpoint::new(SocketAddr::from(([127, 0, 0, 1], 1)));
        let one = Outlier {
            consecutive_failures: 1,
            ejection: Duration::from_millis(100),
            ..Outlier::default()
        };
        assert!(e.record(true, || 0, &one), "one failure ejects");
        assert!(!e.available(99) && e.available(100));
        let off = Outlier {
            consecutive_failures: 0,
            ..one
        };
        for _ in 0..100 {
            assert!(!e.record(true, || 1000, &off));
        }
        assert!(e.available(1000));
    }

    #[test]
    fn ejections_in_a_row_last_longer_until_a_success() {
        let e = Endpoint::new(SocketAddr::from(([127, 0, 0, 1], 1)));
        let o = Outlier {
            consecutive_failures: 1,
            ejection: Duration::from_secs(10),
            ..Outlier::default()
        };
        let mut now = 0;
        for n in 1..=3u64 {
            assert!(e.record(true, || now, &o));
            // A request that was in flight fails too: no longer ejection.
            assert!(!e.eject(now + 1, &o));
            assert!(!e.available(now + n * 10_000 - 1), "ejection {n}");
            now += n * 10_000;
            assert!(e.available(now), "ejection {n} is {n} x 10 s");
        }
        assert!(!e.record(false, || now, &o), "a success resets the length");
        assert!(e.record(true, || now, &o));
        assert!(e.available(now + 10_000));
        // However many: at most MAX_EJECTION.
        for _ in 0..100 {
            e.stats.ejected_until_ms.store(0, Ordering::Relaxed);
            e.eject(now, &o);
        }
        let until = e.stats.ejected_until_ms.load(Ordering::Relaxed);
        assert_eq!(until - now, MAX_EJECTION.as_millis() as u64);
    }

    #[test]
    fn p2c_two_choices_are_distinct() {
        let b = backend(3);
        b.endpoints[0].stats.in_flight.store(1, Ordering::Relaxed);
        // r1 picks endpoint 0; whatever r2 is, the second choice is another endpoint.
        for r2 in 0..10 {
            assert_ne!(b.pick(|| 0, 0, r2).unwrap().addr.port(), 1000);
        }
    }

    #[test]
    fn ejected_endpoint_is_skipped_until_ejection_ends() {
        let b = backend(2);
        b.endpoints[1].eject(1000, &Outlier::default());
        for r in 0..10 {
            assert_eq!(b.pick(|| 1000, r, r).unwrap().addr.port(), 1000);
        }
        let after = 1000 + EJECTION.as_millis() as u64;
        b.endpoints[0].stats.in_flight.store(3, Ordering::Relaxed);
        assert_eq!(b.pick(|| after, 0, 0).unwrap().addr.port(), 1001);
    }

    #[test]
    fn the_clock_is_read_only_when_a_choice_was_ever_ejected() {
        let b = backend(3);
        for r in 0..10 {
            assert!(b.pick(|| panic!("clock read"), r, r + 1).is_some());
        }
        b.endpoints[2].eject(1000, &Outlier::default());
        let reads = std::cell::Cell::new(0);
        for r in 0..30 {
            let now = || {
                reads.set(reads.get() + 1);
                1000
            };
            assert_ne!(b.pick(now, r, r * 7).unwrap().addr.port(), 1002);
        }
        assert!(
            reads.get() > 0,
            "an ejected endpoint is checked against the clock"
        );
        assert!(reads.get() <= 30, "at most one read per pick");
    }

    #[test]
    fn all_ejected_still_picks_an_endpoint() {
        let b = backend(3);
        for e in &b.endpoints {
            e.eject(0, &Outlier::default());
        }
        assert!(b.pick(|| 1, 0, 0).is_some());
    }

    #[test]
    fn endpoints_down_by_health_checks_are_passed_over_and_all_down_still_spread() {
        let b = backend(3);
        let stats = |i: usize| &b.endpoints[i].stats;
        assert!(stats(0).mark_unhealthy());
        assert!(!stats(0).mark_unhealthy(), "marked already");
        assert!(stats(0).is_unhealthy());
        for r1 in 0..12 {
            for r2 in 0..12 {
                let e = b.pick(|| 1, r1, r2).unwrap();
                assert_ne!(e.addr.port(), 1000, "a down endpoint gets no request");
            }
        }
        assert_eq!(b.pick_in_turn(1).map(|e| e.addr.port()), Some(1001));
        // A passive ejection does not shorten the health check's verdict.
        assert!(!b.endpoints[0].eject(1, &Outlier::default()));
        assert!(stats(0).is_unhealthy());
        // Every endpoint down: requests still go to each of them.
        stats(1).mark_unhealthy();
        stats(2).mark_unhealthy();
        let mut seen = std::collections::BTreeSet::new();
        for r1 in 0..12 {
            for r2 in 0..12 {
                seen.insert(b.pick(|| 1, r1, r2).unwrap().addr.port());
            }
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        // Back: available again, and only a health mark is lifted by a pass.
        assert!(stats(0).mark_healthy());
        assert!(!stats(0).mark_healthy());
        assert!(b.endpoints[0].available(1));
        b.endpoints[0].eject(1, &Outlier::default());
        assert!(!stats(0).mark_healthy(), "an ejection is left to run out");
        assert!(!b.endpoints[0].available(2));
    }

    #[test]
    fn a_retry_avoids_the_endpoint_that_failed_when_there_is_another() {
        let b = backend(3);
        let failed = b.endpoints[1].addr;
        for r1 in 0..12 {
            for r2 in 0..12 {
                let e = b.pick_avoiding(0, r1, r2, failed).unwrap();
                assert_ne!(e.addr, failed);
            }
        }
        // An ejected other is passed over for an available one.
        b.endpoints[0].eject(0, &Outlier::default());
        for r in 0..12 {
            assert_eq!(b.pick_avoiding(1, r, r, failed).unwrap().addr.port(), 1002);
        }
        // With one endpoint there is nothing else.
        let one = backend(1);
        let only = one.endpoints[0].addr;
        assert_eq!(one.pick_avoiding(0, 0, 0, only).unwrap().addr, only);
    }

    #[test]
    fn no_endpoints_picks_nothing() {
        assert!(backend(0).pick(|| 0, 0, 0).is_none());
    }
}
