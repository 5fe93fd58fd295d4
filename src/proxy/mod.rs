//! The data plane: binds the snapshot's ports, terminates HTTP and TLS, routes each request
//! over the current [`Snapshot`] and forwards it to a backend endpoint.
//!
//! Stages, each a folder, calls going one way, down this list (`tests/architecture.rs` fails
//! on an import that runs back up, and on any circle of imports between files):
//!
//! ```text
//! Proxy (this file)  reconcile: bind, retire and drain the snapshot's ports
//!  accept/           accept loops, connection slots, PROXY protocol, TLS, the parking lot
//!  downstream/       the request paths: h1/ (HTTP/1.1 fast path), service (hyper: HTTP/2 and
//!                    the HTTP/1.1 fallback), stream (TLSRoute, TCPRoute), datagram (UDPRoute),
//!                    tunnel (upgrades)
//!  phase             the named phases both request paths call, in one order
//!  policy/           the pure decision: listener, route, rule, filters, header rewrites,
//!                    access policies (no I/O, no `Shared`)
//!  health            active health checks: one task per checked endpoint, through upstream/
//!  exchange/         `Shared`, admission, endpoint pick, send and outcome; retry, mirror,
//!                    session persistence
//!  upstream/         the pools and the connector (TLS, mesh mTLS)
//!  config            the knobs
//!  observe/          the request record, metrics, access log, forwarding identity, tracing
//!  (ground)          body, error, headers, validate, conn_info, trusted, drain, reclaim,
//!                    workers, fxhash, streams (HTTP/2 streams in their connection task),
//!                    h1wire (HTTP/1.1 response heads and chunked framing), stock
//!                    (per-thread stocks of read buffers):
//!                    files any stage may use, which use no stage
//! ```
//!
//! ```text
//! Proxy::reconcile ─> accept (Drain) ─> accept::conn (TLS, PROXY) ─┬─> downstream::h1 ───┐
//!                                                                  └─> downstream::service┤
//!     ArcSwap<Snapshot> ── load_full() once per request                                  │
//!     phase: arrive ─> route ─> access ─> request head ─> exchange (admit, pick, send) ─> upstream
//!            log <─ response head <────────────────────── retry, mirror ─┘
//! ```
//!
//! Reads only `model`; never touches kube, files or translation. The only shared mutable
//! state is the snapshot (read-only here), per-endpoint load counters inside it, and metrics.

mod accept;
mod body;
mod config;
mod conn_info;
mod downstream;
mod drain;
pub mod error;
mod exchange;
mod fxhash;
mod h1wire;
mod headers;
mod health;
mod observe;
mod phase;
mod policy;
mod reclaim;
mod stock;
mod streams;
mod upstream;
mod validate;
pub mod workers;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper_util::rt::TokioTimer;
use hyper_util::server::conn::auto;
use tokio::task::JoinHandle;

pub use crate::model::net::TrustedProxies;
pub use crate::model::net::{Cidr, CidrError};
pub use accept::listen;
pub use body::{BodyFault, BodyPace};
pub use config::{AccessLogFields, Limits, MAX_CONCURRENT_STREAMS, ProxyConfig, RetryBudgetConfig};
pub use error::{
    ConnectReason, DownstreamTlsFailure, ErrorKind, ErrorSide, ProxyError, TlsFailure,
};
pub use exchange::mirror::MAX_MIRRORED_BODY;
pub use exchange::retry::MAX_RETRY_BODY;
pub use observe::metrics::{self, ProxyMetrics, RetryReason};
pub use observe::trace;
pub use upstream::RETIRE_BOUND as UPSTREAM_RETIRE_BOUND;

use crate::model::TlsProfile;
use crate::model::{Port, PortKey, Snapshot};
use crate::tls::server::{Carries, PortConfig, ProfileConfigs, Ticketer, server_config};
use drain::Drain;
use exchange::Shared;
use exchange::retry::budget::RetryBudgets;
use upstream::{Clock, Upstream};

/// The proxy. Cheap to clone; all clones control the same ports.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
    /// BackendTrafficPolicy `healthCheck.active`, looked at on every reconcile.
    health: health::HealthChecks,
    ports: Arc<Mutex<Ports>>,
    /// Serialises `reconcile` and `shutdown` (both await while changing `ports`).
    changing: Arc<tokio::sync::Mutex<()>>,
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
    /// An HTTPS port's QUIC endpoint (on its UDP key), and the TLS settings it offers.
    quic: Option<(quinn::Endpoint, Option<Arc<TlsProfile>>)>,
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
        let mut server = auto::Builder::new(streams::StreamExec);
        server
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout)
            // The same head limit as the fast path's (hyper's default is ~400 KiB): a larger
            // head is answered 431.
            .max_buf_size(downstream::h1::MAX_HEAD);
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
        let health = health::HealthChecks::new(upstream.clone(), snapshot.clone(), metrics.clone());
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
            health,
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
            self.health.wake();
        }
        // Each port's key; an HTTPS port serving HTTP/3 also its UDP key, with the TLS
        // settings its QUIC endpoint offers.
        type Quic = Option<Option<Arc<TlsProfile>>>;
        let wanted: Vec<(PortKey, Quic)> = {
            let snapshot = self.shared.snapshot.load();
            let quic = |p: &Port| Some((p.quic_key()?, Some(p.quic.as_ref()?.profile.clone())));
            (snapshot.ports.iter())
                .flat_map(|p| [Some((p.key(), None)), quic(p)])
                .flatten()
                .collect()
        };
        let wanted_at = |key: &PortKey| wanted.iter().find(|(k, _)| k == key).map(|(_, q)| q);
        let (removed, missing) = {
            let mut ports = self.lock_ports();
            if ports.shut_down {
                return Vec::new();
            }
            ports.retired.retain(|d| !d.is_finished());
            // Gone, or a UDP key that changed between a UDP listener's and a QUIC endpoint.
            let gone: Vec<PortKey> = ports
                .bound
                .iter()
                .filter(|(k, b)| wanted_at(k).is_none_or(|q| q.is_some() != b.quic.is_some()))
                .map(|(k, _)| *k)
                .collect();
            let removed: Vec<BoundPort> =
                gone.iter().filter_map(|p| ports.bound.remove(p)).collect();
            let missing: Vec<PortKey> = wanted
                .iter()
                .map(|(k, _)| *k)
                .filter(|p| !ports.bound.contains_key(p))
                .collect();
            // A QUIC endpoint whose listeners' TLS settings changed offers the new ones to
            // new connections. (The ports' lock is held: the ticketer is taken from here.)
            let ticketer = ports.ticketer.clone();
            for (key, bound) in &mut ports.bound {
                if let (Some((endpoint, offered)), Some(Some(profile))) =
                    (&mut bound.quic, wanted_at(key))
                    && offered != profile
                {
                    match self.quic_config(*key, profile.as_deref(), ticketer.clone()) {
                        Ok(config) => {
                            endpoint.set_server_config(Some(config));
                            *offered = profile.clone();
                        }
                        Err(error) => {
                            tracing::warn!(port = key.port, %error, "the QUIC endpoint keeps its TLS settings");
                        }
                    }
                }
            }
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
        self.health.close();
        self.shared.upstream.close();
        if let Some(tracer) = &self.shared.tracer {
            tracer.shutdown(trace::EXPORT_TIMEOUT).await;
        }
    }

    async fn bind(&self, key: PortKey) -> std::io::Result<BoundPort> {
        let ip = key.address.unwrap_or(self.shared.config.listen_host);
        let addr = SocketAddr::new(ip, key.port);
        // A UDP key is a UDP listener's port, or an HTTPS port's QUIC endpoint.
        let quic = match key.udp {
            false => None,
            true => {
                let snapshot = self.shared.snapshot.load();
                let tcp = PortKey { udp: false, ..key };
                match snapshot.port_at(key) {
                    Some(_) => None,
                    None => snapshot.port_at(tcp).and_then(|p| p.quic.clone()),
                }
            }
        };
        if let Some(quic) = quic {
            // One endpoint, on the main runtime (`accept::quic`).
            let socket = accept::bind_udp(addr, self.shared.config.reuse_port)?;
            let ticketer = self.lock_ports().ticketer.clone();
            let config = self.quic_config(key, quic.profile.as_deref(), ticketer)?;
            let endpoint = accept::quic::endpoint(socket, config)?;
            let drain = Arc::new(Drain::new());
            let tcp = PortKey { udp: false, ..key };
            let serve =
                accept::quic::accept(self.shared.clone(), tcp, endpoint.clone(), drain.token());
            tracing::info!(address = %ip, port = key.port, "listening (QUIC, HTTP/3)");
            return Ok(BoundPort {
                drain,
                accept: vec![tokio::spawn(serve)],
                quic: Some((endpoint, quic.profile)),
            });
        }
        if key.udp {
            // One socket and one task, on the main runtime: datagrams are not accepted.
            let socket = accept::bind_udp(addr, self.shared.config.reuse_port)?;
            let drain = Arc::new(Drain::new());
            let serve =
                downstream::datagram::serve(self.shared.clone(), key, socket, drain.token());
            tracing::info!(address = %ip, port = key.port, "listening (UDP)");
            return Ok(BoundPort {
                drain,
                accept: vec![tokio::spawn(serve)],
                quic: None,
            });
        }
        let workers = self.shared.config.workers.as_ref();
        // Thread per core: one socket per worker, bound together (SO_REUSEPORT) before any
        // accepts, so a port that fails to bind leaves none behind.
        let listeners = match workers {
            None => vec![accept::listen(addr, self.shared.config.reuse_port)?.into_std()?],
            Some(w) => {
                if !self.shared.config.reuse_port {
                    // The workers' sockets share the port with SO_REUSEPORT, which would also
                    // let them join another process's sockets there (a second pier started
                    // by mistake). Without --reuse-port that must fail as with one socket: a
                    // socket without the option cannot bind a port someone listens on.
                    drop(accept::bound(addr, false)?);
                }
                w.handles()
                    .iter()
                    .map(|_| accept::listen(addr, true)?.into_std())
                    .collect::<std::io::Result<Vec<_>>>()?
            }
        };
        let on = self.port_config(key, self.lock_ports().ticketer.clone());
        let config = |carries| {
            server_config(&on, carries, &TlsProfile::DEFAULT).map_err(std::io::Error::other)
        };
        let tls = Arc::new(accept::conn::PortTls {
            https: config(Carries::Http)?.into(),
            stream: config(Carries::Stream)?,
            https_profiles: ProfileConfigs::new(on.clone(), Carries::Http),
            stream_profiles: ProfileConfigs::new(on.clone(), Carries::Stream),
        });
        let drain = Arc::new(Drain::new());
        let slots = accept::Slots::new(self.shared.config.limits.max_connections, listeners.len());
        // Every socket registered before any loop starts: a failure leaves nothing running.
        let registered = listeners
            .into_iter()
            .enumerate()
            .map(|(i, socket)| {
                let on = workers.map(|w| &w.handles()[i]);
                Ok((accept::register(socket, on)?, on))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let accept = registered
            .into_iter()
            .map(|(socket, on)| {
                let port = accept::Port {
                    shared: self.shared.clone(),
                    key,
                    tls: tls.clone(),
                    slots: slots.clone(),
                };
                accept::spawn_accept(port, socket, &drain, on)
            })
            .collect();
        tracing::info!(address = %ip, port = key.port, "listening");
        Ok(BoundPort {
            drain,
            accept,
            quic: None,
        })
    }

    /// What every TLS server config of the port `key` shares: the current snapshot's
    /// certificates and client validation, and the process's `ticketer` (`Ports::ticketer`:
    /// the caller takes it, as it may hold the ports' lock).
    fn port_config(&self, key: PortKey, ticketer: Option<Ticketer>) -> PortConfig {
        PortConfig {
            snapshot: self.shared.snapshot.clone(),
            port: key,
            resumption: self.shared.config.tls_session_resumption,
            ticketer,
        }
    }

    /// The QUIC server config of the HTTPS port whose UDP key is `key`.
    fn quic_config(
        &self,
        key: PortKey,
        profile: Option<&TlsProfile>,
        ticketer: Option<Ticketer>,
    ) -> std::io::Result<quinn::ServerConfig> {
        let on = self.port_config(PortKey { udp: false, ..key }, ticketer);
        let profile = profile.unwrap_or(&TlsProfile::DEFAULT);
        accept::quic::server_config_for(&on, profile, self.shared.config.limits.idle_timeout)
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

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("bound_ports", &self.bound_ports())
            .finish()
    }
}
