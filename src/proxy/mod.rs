//! The data plane: binds the snapshot's ports, terminates HTTP and TLS, routes each request
//! over the current [`Snapshot`] and forwards it to a backend endpoint.
//!
//! ```text
//! Proxy::reconcile ─> listener (accept, Drain) ─> conn (TLS, hyper auto) ─> service
//!                                                                             │ route, filters
//!          ArcSwap<Snapshot> ── load_full() once per request ────────────────┘
//!                                                                             v
//!                                 mirror (spawned) <── upstream (pool + TLS connector)
//!                                 retry (attempts, per-backend budget) ──┘
//! ```
//!
//! Reads only `model`; never touches kube, files or translation. The only shared mutable
//! state is the snapshot (read-only here), per-endpoint load counters inside it, and metrics.

mod access;
pub use access::Fields as AccessLogFields;
mod body;
mod conn;
mod conn_info;
mod drain;
pub mod error;
mod forwarded;
mod fxhash;
mod h1;
mod headers;
mod listener;
mod lot;
pub mod metrics;
mod mirror;
mod proxy_protocol;
mod reclaim;
mod retry;
mod service;
mod stream;
pub mod trace;
mod tunnel;
mod upstream;
mod validate;
pub mod workers;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use body::{BodyFault, BodyPace};
pub use error::{
    ConnectReason, DownstreamTlsFailure, ErrorKind, ErrorSide, ProxyError, TlsFailure,
};
pub use forwarded::{Cidr, CidrError, TrustedProxies};
pub use metrics::ProxyMetrics;
pub use mirror::MAX_MIRRORED_BODY;
pub use retry::{MAX_RETRY_BODY, RetryBudgetConfig, RetryReason};
pub use upstream::RETIRE_BOUND as UPSTREAM_RETIRE_BOUND;

use crate::model::{Port, PortKey, Snapshot};
use crate::tls::server::{Carries, Ticketer, server_config};
use drain::Drain;
use retry::RetryBudgets;
use upstream::{Clock, Upstream};

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
    pub access_log_fields: access::Fields,
    /// Bind ports with `SO_REUSEPORT`, so a new process can take over (zero-downtime restart).
    pub reuse_port: bool,
    /// TLS session resumption on listeners (stateless tickets and the session-ID cache); off:
    /// every client connection is a full handshake (`--no-tls-session-resumption`).
    pub tls_session_resumption: bool,
    /// Clients whose `X-Forwarded-*`, `Forwarded` and `X-Request-Id` pier believes (the
    /// connection's client; on a PROXY protocol port the address the header named). Empty:
    /// nobody's, every request gets pier's own.
    pub trusted_proxies: forwarded::TrustedProxies,
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
            max_request_target: 8 * 1024,
            max_request_body: None,
            max_requests_per_backend: None,
            max_pending_requests_per_backend: 0,
            outlier: crate::model::Outlier::default(),
        }
    }
}

/// The proxy. Cheap to clone; all clones control the same ports.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
    ports: Arc<Mutex<Ports>>,
    /// Serialises `reconcile` and `shutdown` (both await while changing `ports`).
    changing: Arc<tokio::sync::Mutex<()>>,
}

/// What every connection and request reads.
pub(crate) struct Shared {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub config: ProxyConfig,
    pub metrics: Arc<ProxyMetrics>,
    pub upstream: Upstream,
    pub clock: Clock,
    pub server: auto::Builder<TokioExecutor>,
    /// Per-backend retry budgets; outside the snapshot, so reloads keep them.
    pub retry_budgets: RetryBudgets,
    /// Span export and trace context (`--otlp-endpoint`); `None`: tracing is off.
    pub tracer: Option<trace::Tracer>,
}

impl Shared {
    /// Counts a request (or stream) against `endpoint` of `backend` (for P2C and the
    /// in-flight gauge) until dropped.
    pub fn in_flight(
        &self,
        snapshot: &Arc<Snapshot>,
        backend: &crate::model::Backend,
        endpoint: &crate::model::Endpoint,
    ) -> upstream::InFlight {
        let gauge = self.metrics.in_flight_of(snapshot, &backend.id);
        upstream::InFlight::new(endpoint.stats.clone(), gauge)
    }

    /// [`Self::in_flight`] for an HTTP request, under the backend's maximum of requests in
    /// flight (the Service's `pier.dev/max-requests`, else `--max-requests-per-backend`):
    /// over it the request waits for a slot when the backend's queue has room (at most the
    /// connect timeout, as HAProxy's `timeout queue` defaults to its `timeout connect`), else
    /// [`ProxyError::BackendOverflow`] (503, counted) and nothing is sent. Both request paths
    /// and retries admit through here.
    pub async fn admit(
        &self,
        snapshot: &Arc<Snapshot>,
        backend: &crate::model::Backend,
        endpoint: &crate::model::Endpoint,
    ) -> Result<upstream::InFlight, ProxyError> {
        let Some(max) = backend
            .max_requests
            .or(self.config.limits.max_requests_per_backend)
        else {
            return Ok(self.in_flight(snapshot, backend, endpoint));
        };
        let queue = upstream::Queue {
            max_pending: backend
                .max_pending
                .unwrap_or(self.config.limits.max_pending_requests_per_backend),
            wait: self.config.connect_timeout,
        };
        let gauge = self.metrics.in_flight_of(snapshot, &backend.id);
        match upstream::InFlight::admit(&backend.load, max, queue, endpoint.stats.clone(), gauge)
            .await
        {
            Some(admitted) => Ok(admitted),
            None => {
                self.metrics.overflow(&backend.id);
                Err(ProxyError::BackendOverflow)
            }
        }
    }
}

#[derive(Default)]
struct Ports {
    bound: BTreeMap<PortKey, BoundPort>,
    /// Removed ports whose connections are still draining.
    retired: Vec<Arc<Drain>>,
    shut_down: bool,
    ticketer: Option<Ticketer>,
}

struct BoundPort {
    drain: Arc<Drain>,
    /// One accept loop per listening socket (one per worker, thread per core).
    accept: Vec<JoinHandle<()>>,
}

// === impl ProxyConfig ===

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            listen_host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            connect_timeout: Duration::from_secs(2),
            access_log: false,
            access_log_fields: access::Fields::ALL,
            reuse_port: false,
            tls_session_resumption: true,
            trusted_proxies: forwarded::TrustedProxies::default(),
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

// === impl Proxy ===

impl Proxy {
    pub fn new(
        snapshot: Arc<ArcSwap<Snapshot>>,
        config: ProxyConfig,
        metrics: Arc<ProxyMetrics>,
    ) -> Self {
        Self::with_tracer(snapshot, config, metrics, None)
    }

    /// [`Proxy::new`] with tracing on: `tracer` ([`trace::Tracer::start`]) gets every
    /// sampled request's span; [`Proxy::shutdown`] exports what it still holds.
    pub fn with_tracer(
        snapshot: Arc<ArcSwap<Snapshot>>,
        config: ProxyConfig,
        metrics: Arc<ProxyMetrics>,
        tracer: Option<trace::Tracer>,
    ) -> Self {
        let mut server = auto::Builder::new(TokioExecutor::new());
        server
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout)
            // The same head limit as the fast path's (hyper's default is ~400 KiB): a larger
            // head is answered 431.
            .max_buf_size(h1::MAX_HEAD);
        // HTTP/2 limits: 128 concurrent streams per connection (nginx's default), a 16 KiB
        // header list (hyper's default; CONTINUATION floods end there), at most 20 streams
        // reset by the client before pier accepts them (h2's default: rapid reset,
        // CVE-2023-44487, gets GOAWAY ENHANCE_YOUR_CALM).
        server
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .max_header_list_size(16 * 1024)
            .max_pending_accept_reset_streams(20);
        let ticketer = Ticketer::new()
            .inspect_err(|error| tracing::warn!(%error, "TLS session tickets disabled"))
            .ok();
        let upstream = Upstream::new(&config, metrics.clone(), snapshot.clone());
        let shared = Shared {
            retry_budgets: RetryBudgets::new(config.retry_budget),
            snapshot,
            upstream,
            config,
            metrics,
            clock: Clock::new(),
            server,
            tracer,
        };
        Self {
            shared: Arc::new(shared),
            ports: Arc::new(Mutex::new(Ports {
                ticketer,
                ..Ports::default()
            })),
            changing: Arc::default(),
        }
    }

    /// Makes the bound listening sockets equal the ports of the *current* snapshot: binds new
    /// ports (`listen_host:port`, or a Gateway's own `address:port`), stops accepting on ports
    /// that disappeared (their open connections drain within `drain_timeout`). Returns the
    /// ports that failed to bind, with the error; a later call retries them. Does nothing
    /// after [`Proxy::shutdown`].
    pub async fn reconcile(&self) -> Vec<(PortKey, std::io::Error)> {
        let _changing = self.changing.lock().await;
        // Upstream connections whose trust left the snapshot are retired now.
        if !self.lock_ports().shut_down {
            self.shared.upstream.start();
        }
        let wanted: Vec<PortKey> = {
            let snapshot = self.shared.snapshot.load();
            snapshot.ports.iter().map(Port::key).collect()
        };
        let (removed, missing) = {
            let mut ports = self.lock_ports();
            if ports.shut_down {
                return Vec::new();
            }
            ports.retired.retain(|d| !d.is_finished());
            let gone: Vec<PortKey> = ports
                .bound
                .keys()
                .filter(|p| !wanted.contains(p))
                .copied()
                .collect();
            let removed: Vec<BoundPort> =
                gone.iter().filter_map(|p| ports.bound.remove(p)).collect();
            let missing: Vec<PortKey> = wanted
                .iter()
                .filter(|p| !ports.bound.contains_key(p))
                .copied()
                .collect();
            (removed, missing)
        };
        for port in removed {
            self.retire(port).await;
        }
        let mut failed = Vec::new();
        for port in missing {
            match self.bind(port).await {
                Ok(bound) => {
                    self.lock_ports().bound.insert(port, bound);
                }
                Err(error) => failed.push((port, error)),
            }
        }
        failed
    }

    /// The port numbers bound (on any address).
    pub fn bound_ports(&self) -> Vec<u16> {
        self.lock_ports().bound.keys().map(|k| k.port).collect()
    }

    /// Stop accepting, let in-flight requests finish within `grace`, then close.
    pub async fn shutdown(&self, grace: Duration) {
        let _changing = self.changing.lock().await;
        let (bound, mut drains) = {
            let mut ports = self.lock_ports();
            ports.shut_down = true;
            (
                std::mem::take(&mut ports.bound),
                std::mem::take(&mut ports.retired),
            )
        };
        for b in bound.values() {
            b.drain.start();
        }
        for (_, b) in bound {
            futures::future::join_all(b.accept).await;
            drains.push(b.drain);
        }
        futures::future::join_all(drains.iter().map(|d| d.drain(grace))).await;
        self.shared.upstream.close();
        if let Some(tracer) = &self.shared.tracer {
            tracer.shutdown(trace::EXPORT_TIMEOUT).await;
        }
    }

    async fn bind(&self, key: PortKey) -> std::io::Result<BoundPort> {
        let ip = key.address.unwrap_or(self.shared.config.listen_host);
        let addr = SocketAddr::new(ip, key.port);
        let workers = self.shared.config.workers.as_ref();
        // Thread per core: one socket per worker, bound together (SO_REUSEPORT) before any
        // accepts, so a port that fails to bind leaves none behind.
        let listeners = match workers {
            None => vec![listen(addr, self.shared.config.reuse_port)?.into_std()?],
            Some(w) => {
                if !self.shared.config.reuse_port {
                    // The workers' sockets share the port with SO_REUSEPORT, which would also
                    // let them join another process's sockets there (a second pier started
                    // by mistake). Without --reuse-port that must fail as with one socket: a
                    // socket without the option cannot bind a port someone listens on.
                    drop(bound(addr, false)?);
                }
                w.handles()
                    .iter()
                    .map(|_| listen(addr, true)?.into_std())
                    .collect::<std::io::Result<Vec<_>>>()?
            }
        };
        let ticketer = self.lock_ports().ticketer.clone();
        let config = |carries| {
            server_config(
                self.shared.snapshot.clone(),
                key,
                self.shared.config.tls_session_resumption,
                ticketer.as_ref(),
                carries,
            )
            .map_err(std::io::Error::other)
        };
        let tls = Arc::new(conn::PortTls {
            https: config(Carries::Http)?.into(),
            stream: config(Carries::Stream)?,
        });
        let drain = Arc::new(Drain::new());
        let slots =
            listener::Slots::new(self.shared.config.limits.max_connections, listeners.len());
        // Every socket registered before any loop starts: a failure leaves nothing running.
        let registered = listeners
            .into_iter()
            .enumerate()
            .map(|(i, socket)| {
                let on = workers.map(|w| &w.handles()[i]);
                Ok((listener::register(socket, on)?, on))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let accept = registered
            .into_iter()
            .map(|(socket, on)| {
                let port = listener::Port {
                    shared: self.shared.clone(),
                    key,
                    tls: tls.clone(),
                    slots: slots.clone(),
                };
                listener::spawn_accept(port, socket, &drain, on)
            })
            .collect();
        tracing::info!(port = key.port, address = %ip, "listening");
        Ok(BoundPort { drain, accept })
    }

    /// Stops accepting on `port` (the socket is closed when this returns) and lets its
    /// connections drain in the background.
    async fn retire(&self, port: BoundPort) {
        port.drain.start();
        futures::future::join_all(port.accept).await;
        let drain = port.drain;
        self.lock_ports().retired.push(drain.clone());
        let grace = self.shared.config.drain_timeout;
        tokio::spawn(async move { drain.drain(grace).await });
    }

    fn lock_ports(&self) -> std::sync::MutexGuard<'_, Ports> {
        // Never held across an await; a panic while holding it leaves consistent data.
        self.ports.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A listening socket on `addr`, as `TcpListener::bind` makes it (`SO_REUSEADDR`, a backlog
/// of 1024), with `SO_REUSEPORT` when `reuse_port`: then another process may bind the same
/// address while this one listens, and the kernel spreads new connections over both; with the
/// sysctl `net.ipv4.tcp_migrate_req=1` (Linux 5.14+), connections waiting in the accept queue
/// of a socket that closes move to the other instead of being reset.
pub fn listen(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    bound(addr, reuse_port)?.listen(1024)
}

/// A socket bound to `addr` (`SO_REUSEADDR`, and `SO_REUSEPORT` when `reuse_port`), not yet
/// listening. Without `reuse_port` it fails with `AddrInUse` when anyone listens there.
fn bound(addr: SocketAddr, reuse_port: bool) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    socket.bind(addr)?;
    Ok(socket)
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("bound_ports", &self.bound_ports())
            .finish()
    }
}
