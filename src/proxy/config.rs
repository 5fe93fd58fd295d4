//! The data plane's knobs: [`ProxyConfig`] and its parts, read by the stages above it through
//! `exchange::Shared` (and by `upstream` when it starts). It names only `model`, ground files
//! and `observe`'s access log field set. Defaults suit production; tests shorten the timeouts
//! they exercise.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::model::net::TrustedProxies;
use crate::proxy::body::BodyPace;
use crate::proxy::workers;

pub use crate::proxy::observe::access::Fields as AccessLogFields;

/// HTTP/2 streams a client may have open at once on one connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 128;

/// Data-plane knobs. `Default` suits production; tests shorten the timeouts they exercise.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// Address the snapshot's ports are bound on.
    pub listen_host: IpAddr,
    /// Bound on opening a connection to an endpoint, TCP connect and TLS handshake together
    /// (a TCP timeout answers 503, a TLS handshake that does not finish 502).
    pub connect_timeout: Duration,
    /// One `pier::access` log line per request (a Gateway's `pier.dev/access-log` annotation
    /// overrides it for its listeners).
    pub access_log: bool,
    /// The fields of an access log line (`--access-log-fields`).
    pub access_log_fields: AccessLogFields,
    /// Bind ports with `SO_REUSEPORT`, so a new process can take over (zero-downtime restart).
    pub reuse_port: bool,
    /// TLS session resumption on listeners (stateless tickets and the session-ID cache); off:
    /// every client connection is a full handshake (`--no-tls-session-resumption`).
    pub tls_session_resumption: bool,
    /// Clients whose `X-Forwarded-*`, `Forwarded` and `X-Request-Id` pier believes (the
    /// connection's client; on a PROXY protocol port the address the header named). Empty:
    /// nobody's, every request gets pier's own.
    pub trusted_proxies: TrustedProxies,
    /// HTTP/1 request heads must arrive within this.
    pub header_read_timeout: Duration,
    /// The whole TLS handshake, ClientHello included.
    pub tls_handshake_timeout: Duration,
    /// Idle upstream HTTP/1.1 connections are closed after this.
    pub pool_idle_timeout: Duration,
    /// Idle HTTP/1.1 connections kept per pool key (endpoint, TLS trust and SNI, protocol)
    /// for longer than `pool_surplus_idle`: a burst's connections above it stay pooled while
    /// the load reuses them (`upstream::pool`). With thread per core, the fast path's are
    /// kept per worker and capped per worker, as nginx's `keepalive` is per worker process.
    pub pool_max_idle_per_host: usize,
    /// How long an idle connection above `pool_max_idle_per_host` stays pooled unused before
    /// it closes (HAProxy's `pool-purge-delay`, 5 s by default too).
    pub pool_surplus_idle: Duration,
    /// How long connections on a port removed from the snapshot may finish their requests.
    pub drain_timeout: Duration,
    /// Bound on a mirrored request, body wait included.
    pub mirror_timeout: Duration,
    /// Limits on what a client may make pier hold.
    pub limits: Limits,
    /// How many retries (HTTPRoute `retry`) a backend may receive.
    pub retry_budget: RetryBudgetConfig,
    /// Thread per core: every port accepts on one `SO_REUSEPORT` socket per worker runtime
    /// and its connections stay there ([`workers`]). `None`: one socket per port on the
    /// caller's runtime.
    pub workers: Option<workers::Workers>,
}

/// Limits on idle connections, slow request bodies and request paths. Defaults are no
/// weaker than nginx's (`keepalive_timeout` 75 s, `client_body_timeout` 60 s) and Kestrel's
/// minimum body rate (240 B/s after 5 s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A connection served by hyper (HTTP/2, and HTTP/1.1 after a fallback) with no request in
    /// progress for this long is closed (HTTP/2: GOAWAY). Covers a client that sends the
    /// HTTP/2 preface and then nothing. (The HTTP/1.1 fast path closes an idle connection
    /// after `header_read_timeout`.)
    pub idle_timeout: Duration,
    /// How slowly a request body may arrive when it goes to an HTTP/1.1 upstream, where a
    /// slow body holds a whole upstream connection; `None`: no bound. (HTTP/2 upstreams —
    /// gRPC streams — are exempt: a stream may legitimately idle.)
    pub body_pace: Option<BodyPace>,
    /// Merge runs of `/` in request paths before matching and forwarding (dot segments and
    /// escaped unreserved characters are always normalised).
    pub merge_slashes: bool,
    /// Open client connections per port; at the cap a new client takes the place of the
    /// longest-waiting idle or slow one (`reclaim`), or, all busy, waits to be accepted.
    pub max_connections: usize,
    /// A TLS stream (TLSRoute) that carries no byte either way for this long is closed (as
    /// HAProxy's `timeout tunnel`, 1 h by default).
    pub stream_idle_timeout: Duration,
    /// A UDP flow (one client address on a UDP listener, UDPRoute) with no datagram either way
    /// for this long ends (Envoy's UDP proxy default, 60 s).
    pub udp_idle_timeout: Duration,
    /// Most UDP flows per UDP port; past it a new client's datagrams are dropped (counted,
    /// `result="overflow"`) until a flow ends.
    pub max_udp_flows: usize,
    /// HTTP/3: with this many QUIC handshakes under way on a port, a new client must prove its
    /// address first (a Retry round trip), so a flood of spoofed Initial packets costs no
    /// state. 0: always.
    pub quic_validate_above: usize,
    /// Longest request target (path and query) in bytes; a longer one is answered 414.
    pub max_request_target: usize,
    /// Largest request body in bytes, declared or streamed; a larger one is answered 413.
    /// `None`: no maximum (bodies stream to the backend, never buffered whole).
    pub max_request_body: Option<u64>,
    /// Most HTTP requests in flight to one backend (Service port) at once, unless its Service
    /// says otherwise (`pier.dev/max-requests`); over it 503. `None`: no maximum.
    pub max_requests_per_backend: Option<u32>,
    /// Requests over that maximum that wait for a slot (at most the connect timeout, oldest
    /// first) instead of a 503 at once, unless the Service says otherwise
    /// (`pier.dev/max-pending-requests`). 0: none wait.
    pub max_pending_requests_per_backend: u32,
    /// Passive outlier detection, unless a Service says otherwise
    /// (`pier.dev/outlier-consecutive-failures`, `pier.dev/outlier-ejection`).
    pub outlier: crate::model::Outlier,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(60),
            body_pace: Some(BodyPace {
                idle: Duration::from_secs(60),
                min_rate: 240,
                grace: Duration::from_secs(5),
            }),
            merge_slashes: false,
            max_connections: 10_000,
            stream_idle_timeout: Duration::from_secs(3600),
            udp_idle_timeout: Duration::from_secs(60),
            max_udp_flows: 16 * 1024,
            quic_validate_above: 64,
            max_request_target: 8 * 1024,
            max_request_body: None,
            max_requests_per_backend: None,
            max_pending_requests_per_backend: 0,
            outlier: crate::model::Outlier::default(),
        }
    }
}

/// The retry budget's knobs ([`ProxyConfig::retry_budget`]; a Service's XBackendTrafficPolicy
/// gives its own).
pub use crate::model::retry::RetryBudgetConfig;

// === impl ProxyConfig ===

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            listen_host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            connect_timeout: Duration::from_secs(2),
            access_log: false,
            access_log_fields: AccessLogFields::ALL,
            reuse_port: false,
            tls_session_resumption: true,
            trusted_proxies: TrustedProxies::default(),
            header_read_timeout: Duration::from_secs(30),
            tls_handshake_timeout: Duration::from_secs(10),
            pool_idle_timeout: Duration::from_secs(90),
            pool_max_idle_per_host: 1024,
            pool_surplus_idle: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(30),
            mirror_timeout: Duration::from_secs(10),
            limits: Limits::default(),
            retry_budget: RetryBudgetConfig::default(),
            workers: None,
        }
    }
}
