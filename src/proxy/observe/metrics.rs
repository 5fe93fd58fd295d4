//! Proxy metrics, registered under `proxy_` in pier's explicit root registry (prefix `pier`), so
//! every family is `pier_proxy_*`.
//!
//! Labels are bounded: they come from snapshot identities (gateway, listener, route, backend),
//! ports, and small enums (status class, error kind and side, connect reason, TLS transport and
//! handshake failure reason, retry reason, security mechanism and result) and SecurityPolicy
//! names. Never paths, Host values, endpoint addresses or
//! error messages.
//!
//! Per-request metrics go through a per-thread [`HandleCache`]: the label strings of a
//! (listener, route, backend, status class, transport) are built and hashed once per snapshot
//! and thread, not once per request.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::model::policy::{AccessPolicy, Mechanism};
use crate::model::{
    BackendId, BackendTls, ConnectionSlot, ListenerId, ObjectRef, Snapshot, TlsMode, TlsUnavailable,
};
use crate::proxy::error::{ConnectReason, DownstreamTlsFailure, ErrorKind, ErrorSide, TlsFailure};
use crate::proxy::fxhash::FxBuild;

#[derive(Debug)]
pub struct ProxyMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    errors: Family<ErrorLabels, Counter>,
    connect_errors: Family<ConnectErrorLabels, Counter>,
    connections: Family<PortLabels, Gauge>,
    parked: Family<PortLabels, Gauge>,
    reclaimed: Family<PortLabels, Counter>,
    quic_retries: Family<PortLabels, Counter>,
    quic_refused: Family<PortLabels, Counter>,
    in_flight: Family<BackendLabels, Gauge>,
    tls_handshakes: Family<TlsHandshakeLabels, Counter>,
    downstream_tls_handshakes: Family<DownstreamHandshakeLabels, Counter>,
    tls_unavailable: Family<TlsUnavailableLabels, Counter>,
    upstream_opened: Family<UpstreamConnLabels, Counter>,
    upstream_open: Family<UpstreamProtocolLabels, Gauge>,
    upstream_idle: Gauge,
    retries: Family<RetryLabels, Counter>,
    retries_refused: Family<BackendLabels, Counter>,
    overflow: Family<BackendLabels, Counter>,
    streams: Family<StreamLabels, Counter>,
    proxy_protocol: Family<ProxyProtocolLabels, Counter>,
    spans: Family<SpanLabels, Counter>,
    security_decisions: Family<SecurityLabels, Counter>,
    rate_limited: Family<PolicyLabels, Counter>,
    rate_limit_calls: Family<ResultLabels, Counter>,
    compressed: Family<EncodingLabels, Counter>,
    faults: Family<FaultLabels, Counter>,
    compression_bytes: Family<CompressionBytesLabels, Counter>,
    health_checks: Family<HealthCheckLabels, Counter>,
    unhealthy: Family<BackendLabels, Gauge>,
    /// Tells the [`HandleCache`] whose handles it holds.
    id: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static HANDLES: RefCell<HandleCache> = RefCell::new(HandleCache::default());
}

/// One thread's metric handles for the requests of one snapshot, keyed by the addresses of
/// the snapshot objects the labels come from. Addresses identify objects only while their
/// snapshot lives: the cache holds a `Weak` to it, which keeps the allocation (so no later
/// snapshot can have the same address) without keeping the snapshot, and starts over when a
/// request comes with another snapshot or another [`ProxyMetrics`].
#[derive(Default)]
struct HandleCache {
    owner: u64,
    snapshot: Weak<Snapshot>,
    // Keys are addresses and small enums from the snapshot, never request data.
    requests: HashMap<RequestKey, (Counter, Histogram), FxBuild>,
    in_flight: HashMap<usize, Gauge, FxBuild>,
    decisions: HashMap<(usize, Mechanism, SecurityResult), Counter, FxBuild>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct RequestKey {
    listener: usize,
    route: usize,
    backend: usize,
    status: StatusClass,
    tls: Transport,
}

/// What a request reached, for its metrics. References into the request's snapshot.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reached<'s> {
    pub listener: Option<&'s ListenerId>,
    pub route: Option<&'s ObjectRef>,
    pub backend: Option<&'s BackendId>,
    pub tls: Transport,
}

/// How a request reached its backend: the `tls` label. Empty when no backend was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    #[default]
    None,
    Plain,
    Mesh,
    Policy,
}

/// The protocol spoken on an upstream connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpstreamProtocol {
    Http1,
    Http2,
    /// A byte stream (TLSRoute).
    Opaque,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TlsHandshakeLabels {
    pub backend: String,
    pub result: HandshakeResult,
    pub reason: HandshakeReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandshakeResult {
    Ok,
    Error,
}

/// `none` for a successful handshake, else the failure reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandshakeReason(pub Option<TlsFailure>);

/// A client's handshake with a listener that terminates TLS. `port` is the listener's port.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DownstreamHandshakeLabels {
    pub port: u16,
    pub result: HandshakeResult,
    pub reason: DownstreamReason,
}

/// `none` for a successful handshake, else the failure reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DownstreamReason(pub Option<DownstreamTlsFailure>);

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TlsUnavailableLabels {
    pub backend: String,
    pub reason: UnavailableReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnavailableReason(pub TlsUnavailable);

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct UpstreamConnLabels {
    pub protocol: UpstreamProtocol,
    pub tls: Transport,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct UpstreamProtocolLabels {
    pub protocol: UpstreamProtocol,
}

/// Where a request went. Empty strings for what was not reached (a 404 has no route).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RouteLabels {
    pub gateway: String,
    pub listener: String,
    pub route: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub gateway: String,
    pub listener: String,
    pub route: String,
    pub backend: String,
    pub status: StatusClass,
    pub tls: Transport,
}

/// A call's result.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// One active health check's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct HealthCheckLabels {
    pub backend: String,
    /// `healthy`, `unhealthy` (an answer that is not the expected one), `timeout`, or
    /// `error` (no connection, a refused TLS handshake, a broken answer).
    pub result: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FaultLabels {
    pub policy: String,
    /// `delay` or `abort`.
    pub fault: &'static str,
}

/// A content coding (`gzip`, `br`, `zstd`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct EncodingLabels {
    pub encoding: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CompressionBytesLabels {
    pub encoding: &'static str,
    /// `in`: from the upstream; `out`: to the client.
    pub direction: &'static str,
}

/// A policy's `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

/// The `result` label of `pier_proxy_security_decisions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SecurityResult {
    Allowed,
    /// 401: missing or bad credentials.
    Unauthenticated,
    /// 403: the authorization rules said no.
    Denied,
    /// 500: the policy is invalid.
    Invalid,
    /// 503: too many password verifications at once.
    Busy,
    /// An external authorizer gave no verdict: the request failed closed.
    Failed,
    /// An external authorizer gave no verdict: `failOpen` let the request in.
    FailedOpen,
}

impl SecurityResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Unauthenticated => "unauthenticated",
            Self::Denied => "denied",
            Self::Invalid => "invalid",
            Self::Busy => "busy",
            Self::Failed => "failed",
            Self::FailedOpen => "failedOpen",
        }
    }
}

/// An access policy's decision (`model::policy::Mechanism`, [`SecurityResult`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SecurityLabels {
    /// `namespace/name` of the SecurityPolicy.
    pub policy: String,
    pub mechanism: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: ErrorKind,
    pub side: ErrorSide,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ConnectErrorLabels {
    pub backend: String,
    pub reason: ConnectReason,
}

/// One TLS stream (TLSRoute) and how it ended. `listener` is empty when no listener took it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StreamLabels {
    pub gateway: String,
    pub listener: String,
    pub mode: StreamMode,
    pub result: StreamResult,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamMode {
    Passthrough,
    Terminate,
    /// A plain TCP stream on a TCP listener (TCPRoute).
    Tcp,
    /// A client's datagrams on a UDP listener (UDPRoute), one flow per client address.
    Udp,
    /// Not known: the ClientHello was not read, or no listener took it.
    Unknown,
}

/// How a TLS stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamResult {
    /// Relayed until either side closed (or it idled out, or the drain ended).
    Relayed,
    /// No ClientHello within the handshake timeout, or not a TLS ClientHello.
    BadHello,
    /// No listener or route for the SNI.
    NoRoute,
    /// The route has no usable backend or endpoint, or its TLS is unavailable (fail closed).
    NoBackend,
    /// A SecurityPolicy on the route refused the client (`AccessPolicy::admits_stream`).
    Denied,
    /// The client's handshake with pier failed (Terminate).
    HandshakeFailed,
    /// Connecting to the endpoint (TCP, or TLS to it) failed.
    ConnectFailed,
    /// A UDP port already had its most flows: the client's datagram was dropped.
    Overflow,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ProxyProtocolLabels {
    pub port: u16,
    pub result: ProxyProtocolResult,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SpanLabels {
    pub result: SpanResult,
}

/// What became of a sampled request's span (`proxy::trace`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpanResult {
    /// Sent to the OTLP endpoint, which accepted it.
    Exported,
    /// The export queue was full (the endpoint is slow or down): never sent.
    Dropped,
    /// Sent in a batch the endpoint did not accept (or could not be reached for).
    Failed,
}

impl EncodeLabelValue for SpanResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Self::Exported => "exported",
            Self::Dropped => "dropped",
            Self::Failed => "failed",
        })
    }
}

/// What the PROXY protocol header of a connection on a port that requires one was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProxyProtocolResult {
    /// A header with the client's address (v1 TCP4/TCP6, v2 PROXY over AF_INET/AF_INET6).
    Proxied,
    /// v2 LOCAL, v1 UNKNOWN or an address family pier does not use: the socket's peer stands.
    Local,
    /// The connection did not start with a PROXY protocol signature.
    Missing,
    /// A signature, then something the spec does not allow, or a header over the size limit.
    Malformed,
    /// The connection closed inside the header.
    Truncated,
    /// No complete header within the timeout.
    Timeout,
}

impl EncodeLabelValue for ProxyProtocolResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Self::Proxied => "proxied",
            Self::Local => "local",
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Truncated => "truncated",
            Self::Timeout => "timeout",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PortLabels {
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BackendLabels {
    pub backend: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RetryLabels {
    pub backend: String,
    pub reason: RetryReason,
}

/// `1xx` .. `5xx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StatusClass(u8);

/// Decrements an open-connections gauge when dropped.
#[derive(Debug)]
pub struct ConnectionGuard(Gauge);

/// An open upstream connection: counted in the gauge, and holding its place under its
/// backend's `maxConnections` when one applies, until dropped. (Apart from
/// [`ConnectionGuard`], which every downstream connection holds and which stays one word.)
#[must_use = "the connection counts as open until the guard is dropped"]
#[derive(Debug)]
pub struct UpstreamGuard {
    _open: ConnectionGuard,
    slot: Option<ConnectionSlot>,
}

// === impl ProxyMetrics ===

impl ProxyMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let m = Self::default();
        // Under the root registry's `pier` prefix ([`crate::metrics::registry`]).
        let reg = reg.sub_registry_with_prefix("proxy");
        reg.register(
            "requests",
            "Requests answered, by gateway, listener, route, backend, status class and upstream \
             transport (tls: mesh, policy or plain)",
            m.requests.clone(),
        );
        reg.register(
            "request_duration_seconds",
            "Time from the request's arrival to its response headers",
            m.duration.clone(),
        );
        reg.register(
            "errors",
            "Requests that ended in a proxy error, by kind and side",
            m.errors.clone(),
        );
        reg.register(
            "upstream_connect_errors",
            "Failed connections to backend endpoints, by backend and reason",
            m.connect_errors.clone(),
        );
        reg.register(
            "downstream_connections",
            "Open client connections, by port",
            m.connections.clone(),
        );
        reg.register(
            "downstream_connections_parked",
            "Keep-alive client connections idle long enough to be parked (their request \
             buffers and states freed until the client sends again), by port",
            m.parked.clone(),
        );
        reg.register(
            "downstream_connections_reclaimed",
            "Client connections closed at the connection cap while they waited on their client \
             (idle keep-alive, a slow request head or TLS handshake), by port",
            m.reclaimed.clone(),
        );
        reg.register(
            "downstream_quic_retries",
            "QUIC connection attempts answered with a Retry (the client must prove its address \
             first: many handshakes were under way), by port",
            m.quic_retries.clone(),
        );
        reg.register(
            "downstream_quic_refused",
            "QUIC connection attempts refused at the connection limit, by port",
            m.quic_refused.clone(),
        );
        reg.register(
            "upstream_in_flight",
            "Requests in flight to a backend (until the response body ends)",
            m.in_flight.clone(),
        );
        reg.register(
            "downstream_tls_handshakes",
            "TLS handshakes clients made with HTTPS listeners and terminating TLS listeners, by \
             port, result and failure reason (no_client_certificate, unknown_ca, expired, \
             bad_certificate: the client certificate; no_certificate: none for the SNI; \
             protocol, timeout, closed)",
            m.downstream_tls_handshakes.clone(),
        );
        reg.register(
            "upstream_tls_handshakes",
            "TLS handshakes with backend endpoints, by backend, result and failure reason",
            m.tls_handshakes.clone(),
        );
        reg.register(
            "upstream_tls_unavailable",
            "Requests refused because their backend needs TLS but has no usable configuration",
            m.tls_unavailable.clone(),
        );
        reg.register(
            "upstream_connections_opened",
            "Connections opened to backend endpoints, by protocol and transport",
            m.upstream_opened.clone(),
        );
        reg.register(
            "upstream_open_connections",
            "Open connections to backend endpoints (pooled, busy or draining), by protocol",
            m.upstream_open.clone(),
        );
        reg.register(
            "upstream_idle_connections",
            "Idle HTTP/1.1 connections waiting in the upstream pool",
            m.upstream_idle.clone(),
        );
        reg.register(
            "upstream_retries",
            "Retries sent to a backend (HTTPRoute retry), by backend and why the attempt before \
             failed (status: a listed response code, connect, reset, timeout)",
            m.retries.clone(),
        );
        reg.register(
            "upstream_retries_refused",
            "Retries not sent because the backend's retry budget was spent (the last attempt's \
             answer was returned)",
            m.retries_refused.clone(),
        );
        reg.register(
            "upstream_overflow",
            "Requests answered 503 without contacting the backend because it had its maximum of \
             requests in flight (circuit breaking: pier.dev/max-requests, \
             --max-requests-per-backend)",
            m.overflow.clone(),
        );
        reg.register(
            "tls_streams",
            "Connections on TLS and TCP listeners (TLSRoute, TCPRoute) and client flows on UDP \
             listeners (UDPRoute), by gateway, listener, mode (passthrough, terminate; tcp on \
             TCP listeners, udp on UDP ones) and result",
            m.streams.clone(),
        );
        reg.register(
            "proxy_protocol",
            "PROXY protocol headers read on ports that require them, by port and result \
             (proxied, local; or missing, malformed, truncated, timeout: the connection was \
             closed)",
            m.proxy_protocol.clone(),
        );
        reg.register(
            "trace_spans",
            "Sampled request spans, by result (exported; dropped: the export queue was full; \
             failed: the OTLP endpoint did not accept the batch)",
            m.spans.clone(),
        );
        reg.register(
            "security_decisions",
            "Requests decided by a SecurityPolicy, by policy, mechanism (jwt, apiKey, basic, \
             extAuth, authorization, policy, none) and result (allowed; unauthenticated: 401; \
             denied: 403 or the authorizer's answer; invalid: 500; busy: 503; failed: no \
             verdict from an external authorizer, 403; failedOpen: no verdict, let in)",
            m.security_decisions.clone(),
        );
        reg.register(
            "rate_limited",
            "Requests refused with 429 (gRPC: RESOURCE_EXHAUSTED) by a BackendTrafficPolicy's \
             local rate limit, by policy",
            m.rate_limited.clone(),
        );
        reg.register(
            "rate_limit_calls",
            "Calls to the rate-limit service (BackendTrafficPolicy rateLimit.global), by result: \
             ok, overLimit (429), unreachable, timeout, error (a gRPC error or garbage); the \
             last three let the request through unless the policy is failClosed (500)",
            m.rate_limit_calls.clone(),
        );
        reg.register(
            "health_checks",
            "Active health checks (BackendTrafficPolicy healthCheck.active), by backend and result              (healthy, unhealthy: not the expected answer, timeout, error: no connection or a              broken answer)",
            m.health_checks.clone(),
        );
        reg.register(
            "unhealthy_endpoints",
            "Endpoints active health checking has taken out, by backend",
            m.unhealthy.clone(),
        );
        reg.register(
            "faults_injected",
            "Delays and aborts a BackendTrafficPolicy's faultInjection injected, by policy and \
             fault (delay, abort)",
            m.faults.clone(),
        );
        reg.register(
            "compressed_responses",
            "Responses compressed by a BackendTrafficPolicy's compressor, by encoding",
            m.compressed.clone(),
        );
        reg.register(
            "compression_bytes",
            "Bytes of compressed responses, by encoding and direction (in: from the upstream; \
             out: to the client)",
            m.compression_bytes.clone(),
        );
        m
    }

    /// Counts a request and observes its duration. `snapshot` is the one `reached` points into.
    pub fn request_done(
        &self,
        snapshot: &Arc<Snapshot>,
        reached: Reached<'_>,
        status: http::StatusCode,
        seconds: f64,
    ) {
        let key = RequestKey {
            listener: addr(reached.listener),
            route: addr(reached.route),
            backend: addr(reached.backend),
            status: StatusClass::of(status),
            tls: reached.tls,
        };
        self.with_cache(snapshot, |c| {
            let (count, duration) = c.requests.entry(key).or_insert_with(|| {
                let labels = RouteLabels::new(reached.listener, reached.route);
                let duration = self.duration.get_or_create(&labels).clone();
                let request = labels.with(reached.backend, status).transport(reached.tls);
                (self.requests.get_or_create(&request).clone(), duration)
            });
            // In place: no handle clone (two atomic reference counts) per request.
            count.inc();
            duration.observe(seconds);
        });
    }

    /// [`Self::in_flight`] for a backend of `snapshot`, from the handle cache.
    pub fn in_flight_of(&self, snapshot: &Arc<Snapshot>, backend: &BackendId) -> Gauge {
        self.with_cache(snapshot, |c| {
            c.in_flight
                .entry(addr(Some(backend)))
                .or_insert_with(|| self.in_flight(backend))
                .clone()
        })
    }

    fn with_cache<R>(&self, snapshot: &Arc<Snapshot>, f: impl FnOnce(&mut HandleCache) -> R) -> R {
        HANDLES.with(|cache| {
            let mut c = cache.borrow_mut();
            if c.owner != self.id || !std::ptr::eq(c.snapshot.as_ptr(), Arc::as_ptr(snapshot)) {
                c.owner = self.id;
                c.snapshot = Arc::downgrade(snapshot);
                c.requests.clear();
                c.in_flight.clear();
                c.decisions.clear();
            }
            f(&mut c)
        })
    }

    /// Counts an access policy's decision. `snapshot` is the one the policy belongs to.
    pub fn security_decision(
        &self,
        snapshot: &Arc<Snapshot>,
        policy: &AccessPolicy,
        mechanism: Mechanism,
        result: SecurityResult,
    ) {
        let key = (std::ptr::from_ref(policy).addr(), mechanism, result);
        self.with_cache(snapshot, |c| {
            c.decisions
                .entry(key)
                .or_insert_with(|| {
                    self.security_decisions
                        .get_or_create(&SecurityLabels {
                            policy: policy.source.clone(),
                            mechanism: mechanism.as_str(),
                            result: result.as_str(),
                        })
                        .clone()
                })
                .inc();
        });
    }

    /// A request over a local rate limit of `policy` (`namespace/name`).
    pub fn rate_limited(&self, policy: &str) {
        let labels = PolicyLabels {
            policy: policy.to_string(),
        };
        self.rate_limited.get_or_create(&labels).inc();
    }

    /// A response compressed with `encoding`: counted, and the counters its body adds its
    /// bytes to.
    pub fn compressing(&self, encoding: &'static str) -> crate::proxy::body::compress::Tally {
        self.compressed
            .get_or_create(&EncodingLabels { encoding })
            .inc();
        let bytes = |direction| {
            (self.compression_bytes)
                .get_or_create(&CompressionBytesLabels {
                    encoding,
                    direction,
                })
                .clone()
        };
        crate::proxy::body::compress::Tally {
            bytes_in: bytes("in"),
            bytes_out: bytes("out"),
        }
    }

    /// One active health check of an endpoint of `backend`.
    pub fn health_check(&self, backend: &BackendId, result: &'static str) {
        let labels = HealthCheckLabels {
            backend: backend.to_string(),
            result,
        };
        self.health_checks.get_or_create(&labels).inc();
    }

    /// An endpoint of `backend` taken out (`+1`) or back (`-1`) by its health check.
    pub fn unhealthy(&self, backend: &BackendId, change: i64) {
        let labels = BackendLabels {
            backend: backend.to_string(),
        };
        self.unhealthy.get_or_create(&labels).inc_by(change);
    }

    /// A fault `policy` injected (`delay`, `abort`).
    pub fn fault(&self, policy: &str, fault: &'static str) {
        let labels = FaultLabels {
            policy: policy.to_string(),
            fault,
        };
        self.faults.get_or_create(&labels).inc();
    }

    /// A call to the rate-limit service and its result.
    pub fn rate_limit_call(&self, result: &'static str) {
        self.rate_limit_calls
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    pub fn error(&self, kind: ErrorKind, side: ErrorSide) {
        self.errors.get_or_create(&ErrorLabels { kind, side }).inc();
    }

    pub fn connect_error(&self, backend: &BackendId, reason: ConnectReason) {
        self.connect_errors
            .get_or_create(&ConnectErrorLabels {
                backend: backend.to_string(),
                reason,
            })
            .inc();
    }

    pub fn connection(&self, port: u16) -> ConnectionGuard {
        let g = self.connections.get_or_create_owned(&PortLabels { port });
        g.inc();
        ConnectionGuard(g)
    }

    /// Counts a parked connection while it lives.
    pub fn parked(&self, port: u16) -> ConnectionGuard {
        let g = self.parked.get_or_create_owned(&PortLabels { port });
        g.inc();
        ConnectionGuard(g)
    }

    pub fn reclaimed(&self, port: u16) {
        self.reclaimed.get_or_create(&PortLabels { port }).inc();
    }

    pub fn quic_retry(&self, port: u16) {
        self.quic_retries.get_or_create(&PortLabels { port }).inc();
    }

    pub fn quic_refused(&self, port: u16) {
        self.quic_refused.get_or_create(&PortLabels { port }).inc();
    }

    pub fn in_flight(&self, backend: &BackendId) -> Gauge {
        self.in_flight.get_or_create_owned(&BackendLabels {
            backend: backend.to_string(),
        })
    }

    pub fn tls_handshake(&self, backend: &BackendId, failure: Option<TlsFailure>) {
        let result = match failure {
            None => HandshakeResult::Ok,
            Some(_) => HandshakeResult::Error,
        };
        self.tls_handshakes
            .get_or_create(&TlsHandshakeLabels {
                backend: backend.to_string(),
                result,
                reason: HandshakeReason(failure),
            })
            .inc();
    }

    /// A client's TLS handshake with the listener on `port`: `None` when it succeeded.
    pub fn downstream_tls_handshake(&self, port: u16, failure: Option<DownstreamTlsFailure>) {
        let result = match failure {
            None => HandshakeResult::Ok,
            Some(_) => HandshakeResult::Error,
        };
        self.downstream_tls_handshakes
            .get_or_create(&DownstreamHandshakeLabels {
                port,
                result,
                reason: DownstreamReason(failure),
            })
            .inc();
    }

    pub fn tls_unavailable(&self, backend: &BackendId, reason: TlsUnavailable) {
        self.tls_unavailable
            .get_or_create(&TlsUnavailableLabels {
                backend: backend.to_string(),
                reason: UnavailableReason(reason),
            })
            .inc();
    }

    /// Counts a new upstream connection; the returned guard is held until it closes.
    pub fn upstream_opened(&self, protocol: UpstreamProtocol, tls: Transport) -> UpstreamGuard {
        self.upstream_opened
            .get_or_create(&UpstreamConnLabels { protocol, tls })
            .inc();
        let open = self
            .upstream_open
            .get_or_create_owned(&UpstreamProtocolLabels { protocol });
        open.inc();
        UpstreamGuard {
            _open: ConnectionGuard(open),
            slot: None,
        }
    }

    pub fn upstream_idle(&self) -> Gauge {
        self.upstream_idle.clone()
    }

    pub fn retry(&self, backend: &BackendId, reason: RetryReason) {
        self.retries
            .get_or_create(&RetryLabels {
                backend: backend.to_string(),
                reason,
            })
            .inc();
    }

    pub fn overflow(&self, backend: &BackendId) {
        self.overflow
            .get_or_create(&BackendLabels {
                backend: backend.to_string(),
            })
            .inc();
    }

    pub fn retry_refused(&self, backend: &BackendId) {
        self.retries_refused
            .get_or_create(&BackendLabels {
                backend: backend.to_string(),
            })
            .inc();
    }

    pub fn proxy_protocol(&self, port: u16, result: ProxyProtocolResult) {
        self.proxy_protocol
            .get_or_create(&ProxyProtocolLabels { port, result })
            .inc();
    }

    pub fn spans(&self, result: SpanResult, n: u64) {
        self.spans.get_or_create(&SpanLabels { result }).inc_by(n);
    }

    pub fn stream(&self, listener: Option<&ListenerId>, mode: StreamMode, result: StreamResult) {
        let (gateway, listener) = match listener {
            Some(l) => (l.gateway.to_string(), l.label()),
            None => (String::new(), String::new()),
        };
        self.streams
            .get_or_create(&StreamLabels {
                gateway,
                listener,
                mode,
                result,
            })
            .inc();
    }
}

impl Default for ProxyMetrics {
    /// Unregistered metrics (for tests and embedding without a registry).
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            errors: Family::default(),
            connect_errors: Family::default(),
            connections: Family::default(),
            parked: Family::default(),
            reclaimed: Family::default(),
            quic_retries: Family::default(),
            quic_refused: Family::default(),
            in_flight: Family::default(),
            tls_handshakes: Family::default(),
            downstream_tls_handshakes: Family::default(),
            tls_unavailable: Family::default(),
            upstream_opened: Family::default(),
            upstream_open: Family::default(),
            upstream_idle: Gauge::default(),
            retries: Family::default(),
            retries_refused: Family::default(),
            overflow: Family::default(),
            streams: Family::default(),
            proxy_protocol: Family::default(),
            spans: Family::default(),
            security_decisions: Family::default(),
            rate_limited: Family::default(),
            compressed: Family::default(),
            faults: Family::default(),
            compression_bytes: Family::default(),
            health_checks: Family::default(),
            unhealthy: Family::default(),
            rate_limit_calls: Family::default(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// The address of what `r` points to (0 for `None`): an identity within one snapshot.
fn addr<T>(r: Option<&T>) -> usize {
    r.map_or(0, |r| std::ptr::from_ref(r).addr())
}

/// 1 ms to ~33 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

// === impl RouteLabels ===

impl RouteLabels {
    pub fn new(listener: Option<&ListenerId>, route: Option<&ObjectRef>) -> Self {
        Self {
            gateway: listener.map(|l| l.gateway.to_string()).unwrap_or_default(),
            listener: listener.map(ListenerId::label).unwrap_or_default(),
            route: route.map(ToString::to_string).unwrap_or_default(),
        }
    }

    pub fn with(self, backend: Option<&BackendId>, status: http::StatusCode) -> RequestLabels {
        RequestLabels {
            gateway: self.gateway,
            listener: self.listener,
            route: self.route,
            backend: backend.map(ToString::to_string).unwrap_or_default(),
            status: StatusClass::of(status),
            tls: Transport::None,
        }
    }
}

// === impl RequestLabels ===

impl RequestLabels {
    pub fn transport(mut self, tls: Transport) -> Self {
        self.tls = tls;
        self
    }
}

// === impl Transport ===

impl Transport {
    /// How a backend is reached; a backend whose TLS is unavailable still counts as the kind
    /// of TLS it requires.
    pub fn of(tls: &BackendTls) -> Self {
        match tls {
            BackendTls::Plain => Self::Plain,
            BackendTls::Tls(u) => Self::of_mode(u.mode),
            BackendTls::PerEndpoint(_) => Self::Mesh,
            BackendTls::Unavailable(TlsUnavailable::InvalidPolicy) => Self::Policy,
            BackendTls::Unavailable(
                TlsUnavailable::NoTrustBundle
                | TlsUnavailable::NoClientCertificate
                | TlsUnavailable::InvalidMeshConfig
                | TlsUnavailable::NoEndpointIdentity,
            ) => Self::Mesh,
        }
    }

    pub fn of_mode(mode: TlsMode) -> Self {
        match mode {
            TlsMode::Mesh => Self::Mesh,
            TlsMode::Policy => Self::Policy,
        }
    }
}

impl EncodeLabelValue for Transport {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Self::None => "",
            Self::Plain => "plain",
            Self::Mesh => "mesh",
            Self::Policy => "policy",
        })
    }
}

impl EncodeLabelValue for StreamMode {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Self::Passthrough => "passthrough",
            Self::Terminate => "terminate",
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Unknown => "",
        })
    }
}

impl EncodeLabelValue for StreamResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Self::Relayed => "relayed",
            Self::BadHello => "bad_hello",
            Self::NoRoute => "no_route",
            Self::NoBackend => "no_backend",
            Self::Denied => "denied",
            Self::HandshakeFailed => "handshake_failed",
            Self::ConnectFailed => "connect_failed",
            Self::Overflow => "overflow",
        })
    }
}

impl EncodeLabelValue for UpstreamProtocol {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Self::Http1 => "http1",
            Self::Http2 => "http2",
            Self::Opaque => "opaque",
        })
    }
}

impl EncodeLabelValue for HandshakeResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Self::Ok => "ok",
            Self::Error => "error",
        })
    }
}

impl EncodeLabelValue for HandshakeReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(self.0.map_or("none", TlsFailure::as_str))
    }
}

impl EncodeLabelValue for DownstreamReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(self.0.map_or("none", DownstreamTlsFailure::as_str))
    }
}

impl EncodeLabelValue for UnavailableReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(self.0.label())
    }
}

// === impl StatusClass ===

impl StatusClass {
    pub fn of(status: http::StatusCode) -> Self {
        Self((status.as_u16() / 100) as u8)
    }
}

impl EncodeLabelValue for StatusClass {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        write!(encoder, "{}xx", self.0)
    }
}

impl UpstreamGuard {
    /// The guard, holding the connection's place under its backend's `maxConnections` too.
    pub fn holding(mut self, slot: Option<ConnectionSlot>) -> Self {
        self.slot = slot;
        self
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Why an attempt was retried: the `reason` label of `pier_proxy_upstream_retries_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetryReason {
    /// A response status the rule lists.
    Status,
    /// The connection could not be made (refused, timed out, ...): nothing was sent.
    Connect,
    /// The connection was reset or closed before the response head (or spoke bad HTTP).
    Reset,
    /// `timeouts.backendRequest` ran out.
    Timeout,
}

impl EncodeLabelValue for RetryReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            Self::Status => "status",
            Self::Connect => "connect",
            Self::Reset => "reset",
            Self::Timeout => "timeout",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn metrics_encode_with_bounded_labels() {
        let mut reg = crate::metrics::registry();
        let m = ProxyMetrics::register(&mut reg);
        let listener = ListenerId {
            gateway: ObjectRef::new("ns", "gw"),
            set: None,
            name: "http".into(),
        };
        let route = ObjectRef::new("ns", "r");
        let backend = BackendId {
            service: ObjectRef::new("ns", "svc"),
            port: 8080,
        };
        let reached = Reached {
            listener: Some(&listener),
            route: Some(&route),
            backend: Some(&backend),
            tls: Transport::Mesh,
        };
        let snapshot = Arc::new(Snapshot::default());
        m.request_done(&snapshot, reached, http::StatusCode::NOT_FOUND, 0.01);
        m.tls_handshake(&backend, Some(TlsFailure::UnknownCa));
        m.tls_handshake(&backend, None);
        m.downstream_tls_handshake(443, None);
        m.downstream_tls_handshake(443, Some(DownstreamTlsFailure::NoClientCertificate));
        m.tls_unavailable(&backend, TlsUnavailable::NoTrustBundle);
        m.error(ErrorKind::NoRoute, ErrorSide::Downstream);
        m.connect_error(&backend, ConnectReason::Refused);
        m.retry(&backend, RetryReason::Status);
        m.retry(&backend, RetryReason::Reset);
        m.retry(&backend, RetryReason::Reset);
        m.retry_refused(&backend);
        let conn = m.connection(80);
        let mut out = String::new();
        encode(&mut out, &reg).unwrap();
        assert!(out.contains(
            r#"pier_proxy_requests_total{gateway="ns/gw",listener="http",route="ns/r",backend="ns/svc:8080",status="4xx",tls="mesh"} 1"#
        ), "{out}");
        for line in [
            r#"pier_proxy_upstream_tls_handshakes_total{backend="ns/svc:8080",result="error",reason="unknown_ca"} 1"#,
            r#"pier_proxy_upstream_tls_handshakes_total{backend="ns/svc:8080",result="ok",reason="none"} 1"#,
            r#"pier_proxy_downstream_tls_handshakes_total{port="443",result="ok",reason="none"} 1"#,
            r#"pier_proxy_downstream_tls_handshakes_total{port="443",result="error",reason="no_client_certificate"} 1"#,
            r#"pier_proxy_upstream_tls_unavailable_total{backend="ns/svc:8080",reason="no_trust_bundle"} 1"#,
        ] {
            assert!(out.contains(line), "{line} missing in {out}");
        }
        assert!(out.contains(r#"pier_proxy_errors_total{kind="NoRoute",side="Downstream"} 1"#));
        assert!(out.contains(
            r#"pier_proxy_upstream_connect_errors_total{backend="ns/svc:8080",reason="Refused"} 1"#
        ));
        assert!(out.contains(r#"pier_proxy_downstream_connections{port="80"} 1"#));
        for line in [
            r#"pier_proxy_upstream_retries_total{backend="ns/svc:8080",reason="status"} 1"#,
            r#"pier_proxy_upstream_retries_total{backend="ns/svc:8080",reason="reset"} 2"#,
            r#"pier_proxy_upstream_retries_refused_total{backend="ns/svc:8080"} 1"#,
        ] {
            assert!(out.contains(line), "{line} missing in {out}");
        }
        drop(conn);
        let mut out = String::new();
        encode(&mut out, &reg).unwrap();
        assert!(out.contains(r#"pier_proxy_downstream_connections{port="80"} 0"#));
    }

    fn requests_of(reg: &Registry) -> Vec<String> {
        let mut out = String::new();
        encode(&mut out, reg).unwrap();
        out.lines()
            .filter(|l| l.starts_with("pier_proxy_requests_total"))
            .map(String::from)
            .collect()
    }

    /// Handles are cached by object address per snapshot: the same address in a new snapshot
    /// is a new object with its own labels, and another registry on the same thread gets its
    /// own handles.
    #[test]
    fn cached_handles_follow_the_snapshot_and_the_registry() {
        let mut reg1 = crate::metrics::registry();
        let m1 = ProxyMetrics::register(&mut reg1);
        let mut reg2 = crate::metrics::registry();
        let m2 = ProxyMetrics::register(&mut reg2);
        let s1 = Arc::new(Snapshot::default());
        let s2 = Arc::new(Snapshot::default());
        let backend = BackendId {
            service: ObjectRef::new("ns", "svc"),
            port: 80,
        };
        let mut route = ObjectRef::new("ns", "r1");
        fn reached<'a>(route: &'a ObjectRef, backend: &'a BackendId) -> Reached<'a> {
            Reached {
                listener: None,
                route: Some(route),
                backend: Some(backend),
                tls: Transport::Plain,
            }
        }
        m1.request_done(&s1, reached(&route, &backend), http::StatusCode::OK, 0.001);
        m1.request_done(&s1, reached(&route, &backend), http::StatusCode::OK, 0.001);
        m1.request_done(
            &s1,
            reached(&route, &backend),
            http::StatusCode::BAD_GATEWAY,
            0.001,
        );
        // Same address, new object, new snapshot.
        route = ObjectRef::new("ns", "r2");
        m1.request_done(&s2, reached(&route, &backend), http::StatusCode::OK, 0.001);
        m2.request_done(&s2, reached(&route, &backend), http::StatusCode::OK, 0.001);
        let line = |r: &str, status: &str, n: u32| {
            format!(
                r#"pier_proxy_requests_total{{gateway="",listener="",route="ns/{r}",backend="ns/svc:80",status="{status}",tls="plain"}} {n}"#
            )
        };
        let mut one = requests_of(&reg1);
        one.sort();
        assert_eq!(
            one,
            [
                line("r1", "2xx", 2),
                line("r1", "5xx", 1),
                line("r2", "2xx", 1)
            ]
        );
        assert_eq!(requests_of(&reg2), [line("r2", "2xx", 1)]);
        assert_eq!(m1.in_flight_of(&s2, &backend).get(), 0);
        m1.in_flight_of(&s2, &backend).inc();
        assert_eq!(
            m1.in_flight(&backend).get(),
            1,
            "the cached gauge is the family's"
        );
        assert_eq!(m2.in_flight_of(&s2, &backend).get(), 0);
    }
}
