//! Connections to backends: pier's own pool and connector, behind one small type, so the rest
//! of the proxy never names hyper's client types.
//!
//! ```text
//! service ─> Upstream::send(Target { backend, addr, upgrade }, request)
//!              │ BackendTls::Unavailable ─> 503, nothing opened (fail closed)
//!              ├─ pool entry for (addr, (trust_key, SNI)?, protocol)      pool.rs
//!              ├─ no body, HTTP/1.1: a raw connection, in the request's future   h1.rs, raw.rs
//!              │    HTTP/2: the shared connection   HTTP/1.1: newest idle connection
//!              └─ else a new connection: TCP ─> TLS? ─> hyper handshake  connect.rs
//!                   (HTTP/2 connects are shared by the requests waiting for them)
//!          <─ Response<UpstreamBody>: pools its HTTP/1.1 connection at end of body  body.rs
//! ```
//!
//! An HTTP/1.1 endpoint's pool entry holds hyper's idle connections (requests with a body)
//! and raw ones (requests without: the fast path's, and hyper's request path's through
//! `h1.rs`) in lists of their own; a connection serves the kind that opened it.
//!
//! Requests keep the Host the client used: HTTP/1.1 goes out in origin-form with its `Host`
//! header; HTTP/2 as `http(s)://<host><path>`, so `:authority` is that host (never the
//! endpoint address).
//!
//! Trust changes: every new connection uses the rustls config of the request's snapshot, and
//! connections are pooled by `trust_key`, so connections made under different trust never mix.
//! A maintenance task retires the entries whose `trust_key` (or endpoint) left the snapshot (their
//! idle connections close, in-flight requests finish) within [`RETIRE_BOUND`] of a swap, at once
//! when a request or `reconcile` reports a new generation; it also closes idle connections past
//! the idle timeout.

mod body;
mod connect;
mod h1;
mod pool;
mod raw;
mod spare;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, StatusCode, Uri, Version};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

pub use body::UpstreamBody;
pub use connect::Stream;
pub use raw::{Raw, RawConn};

use crate::model::{
    AppProtocol, Backend, BackendLoad, ConnectionSlot, Endpoint, EndpointStats, Snapshot,
    UpstreamTls,
};
use crate::proxy::body::ProxyBody;
use crate::proxy::config::ProxyConfig;
use crate::proxy::error::ProxyError;
use crate::proxy::observe::metrics::{ProxyMetrics, Transport, UpstreamGuard, UpstreamProtocol};
use connect::{Conn, Connector, Dial, Failed, H1Sender, H2Sender};
use pool::{Entry, Mode, Pool, ShortKey};

/// How often a request waiting for room under a backend's `maxConnections` looks for a
/// connection that came back to the pool (closes wake it at once).
const ROOM_TICK: Duration = Duration::from_millis(10);

/// Upper bound between a snapshot swap and the retirement of connections whose trust left it.
pub const RETIRE_BOUND: Duration = Duration::from_millis(500);

/// The upstream pool and connector. Cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    connector: Connector,
    metrics: Arc<ProxyMetrics>,
    snapshot: Arc<ArcSwap<Snapshot>>,
    /// The newest snapshot generation a request has reported.
    seen: AtomicU64,
    wake: Arc<Notify>,
    started: AtomicBool,
    closed: AtomicBool,
    tick: Duration,
    /// `--connect-timeout` and `--max-pending-requests-per-backend`, for requests waiting
    /// for a connection under a backend's `maxConnections`.
    connect_timeout: Duration,
    max_pending_per_backend: u32,
}

/// Where one request goes.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub backend: &'a Backend,
    /// One of `backend`'s endpoints (its address, and its own TLS config when the backend
    /// checks identities per endpoint).
    pub endpoint: &'a Endpoint,
    /// An HTTP/1.1 Upgrade: needs an HTTP/1.1 connection of its own (never pooled after 101).
    pub upgrade: bool,
}

/// The proxy's monotonic clock in milliseconds, for endpoint ejection.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
}

/// Counts a request against an endpoint (for P2C) and the in-flight gauge until dropped.
#[derive(Debug)]
pub struct InFlight {
    stats: Arc<EndpointStats>,
    gauge: Gauge,
    /// The backend's count, when a maximum applies ([`InFlight::admit`]).
    backend: Option<Arc<BackendLoad>>,
}

enum Pooled {
    Done(Result<Response<UpstreamBody>, ProxyError>),
    Unsent(Request<ProxyBody>),
}

/// A request that failed on a connection; `NotSent` hands the request back because not a
/// byte of it was written (the connection closed under us), so it can go on another one.
// Returned once and matched at once; boxing the request would cost an allocation instead.
#[allow(clippy::large_enum_variant)]
enum SendError {
    NotSent(Request<ProxyBody>, hyper::Error),
    Failed(hyper::Error),
}

// === impl Upstream ===

impl Upstream {
    pub fn new(
        config: &ProxyConfig,
        metrics: Arc<ProxyMetrics>,
        snapshot: Arc<ArcSwap<Snapshot>>,
    ) -> Self {
        let pool = Pool::new(pool::Settings {
            max_idle: config.pool_max_idle_per_host,
            idle_timeout: config.pool_idle_timeout,
            surplus_idle: config.pool_surplus_idle,
            idle_gauge: metrics.upstream_idle(),
        });
        let tick = (config.pool_idle_timeout / 2).clamp(Duration::from_millis(10), RETIRE_BOUND);
        let inner = Inner {
            pool,
            connector: Connector::new(config.connect_timeout, metrics.clone()),
            metrics,
            snapshot,
            seen: AtomicU64::new(0),
            wake: Arc::default(),
            started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            tick,
            connect_timeout: config.connect_timeout,
            max_pending_per_backend: config.limits.max_pending_requests_per_backend,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Starts the maintenance task (once; needs a runtime) and has it look at the current
    /// snapshot now.
    pub fn start(&self) {
        if !self.inner.started.swap(true, Ordering::AcqRel) {
            let task = maintain(
                Arc::downgrade(&self.inner),
                self.inner.wake.clone(),
                self.inner.tick,
            );
            tokio::spawn(task);
        }
        self.inner.wake.notify_one();
    }

    /// Called with each request's snapshot generation: the first request on a new generation
    /// wakes the maintenance task. One relaxed load otherwise.
    pub fn observe(&self, generation: u64) {
        let seen = &self.inner.seen;
        if generation > seen.load(Ordering::Relaxed)
            && seen.fetch_max(generation, Ordering::Relaxed) < generation
        {
            self.inner.wake.notify_one();
        }
    }

    /// Closes the idle connections and stops the maintenance task (shutdown).
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.pool.close();
        self.inner.wake.notify_one();
    }

    /// The TLS settings for `endpoint` of `backend` ([`Backend::tls_for`]); when TLS is
    /// required but unusable it fails closed (counted, nothing opened, never plaintext).
    pub fn tls_for<'b>(
        &self,
        backend: &'b Backend,
        endpoint: &'b Endpoint,
    ) -> Result<Option<&'b UpstreamTls>, ProxyError> {
        backend.tls_for(endpoint).map_err(|reason| {
            self.inner.metrics.tls_unavailable(&backend.id, reason);
            ProxyError::TlsUnavailable(reason)
        })
    }

    /// A connection for one byte stream (TLSRoute): TCP, then TLS when `tls` is given (mesh
    /// mTLS, or BackendTLSPolicy, behind a terminating listener). Never pooled; the guard counts
    /// it as an open upstream connection until dropped.
    pub async fn open_stream(
        &self,
        backend: &Backend,
        addr: SocketAddr,
        tls: Option<&UpstreamTls>,
    ) -> Result<(Stream, UpstreamGuard), ProxyError> {
        let dial = Dial {
            backend: &backend.id,
            addr,
            protocol: AppProtocol::Opaque,
            tls,
            tls_config: None,
            connect_timeout: backend.connect_timeout,
        };
        let (io, _) = self.inner.connector.connect_stream(&dial).await?;
        let transport = tls.map_or(Transport::Plain, |t| Transport::of_mode(t.mode));
        let open = (self.inner.metrics).upstream_opened(UpstreamProtocol::Opaque, transport);
        Ok((io, open))
    }

    /// Sends `req` (origin-form URI, `Host` as the client sent it or as rewritten) and waits
    /// for the response head.
    pub async fn send(
        &self,
        target: Target<'_>,
        req: Request<ProxyBody>,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        let backend = target.backend;
        let addr = target.endpoint.addr;
        let tls = self.tls_for(backend, target.endpoint)?;
        let protocol = if target.upgrade {
            AppProtocol::WebSocket
        } else {
            backend.protocol
        };
        let key = ShortKey {
            addr,
            trust_key: tls.map(|u| u.trust_key),
            protocol,
        };
        let entry = self.inner.pool.entry(key, tls.map(|u| &u.server_name));
        let shape = Shape {
            scheme: if tls.is_some() {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            },
            addr,
        };
        let mut req = req;
        if protocol == AppProtocol::Http1 && entry.mode() != Mode::Http2 && h1::bare(&req) {
            shape.http1(&mut req);
            let mut head = Vec::with_capacity(256);
            h1::write_head(&req, &mut head);
            let method = req.method();
            if let Some(resp) = self.send_bare(backend, &entry, tls, method, &head).await? {
                return Ok(resp.map(UpstreamBody::raw));
            }
        }
        let req = match self.send_pooled(&entry, &shape, req).await {
            Pooled::Done(result) => return result,
            Pooled::Unsent(req) => req,
        };
        let dial = Dial {
            backend: &backend.id,
            addr,
            protocol,
            tls,
            tls_config: tls.map(|t| entry.tls_config(t)),
            connect_timeout: backend.connect_timeout,
        };
        // Boxed: connecting (TCP, TLS handshake, HTTP/2 handshake) takes kilobytes of future
        // state that would otherwise be part of, and moved with, every request's future.
        Box::pin(self.send_new(backend, entry, &dial, &shape, req)).await
    }

    /// Room for one more connection to `backend` under its `maxConnections` ([`Room`]). At the bound an idle connection of another of the backend's
    /// entries is closed to make room; while every one is busy the request waits like a
    /// pending request (`maxPendingRequests`, at most the connect timeout), looking again
    /// when a connection closes and every [`ROOM_TICK`] for one that came back to the pool;
    /// else [`ProxyError::BackendOverflow`] (503, counted).
    /// Called from the boxed connect paths only, so none of it is in a request's future
    /// while a pooled connection serves it.
    async fn room(&self, backend: &Backend, entry: &Entry, raw: bool) -> Result<Room, ProxyError> {
        let Some(max) = backend.max_connections else {
            return Ok(Room::New(None));
        };
        if let Some(slot) = ConnectionSlot::claim(&backend.load, max) {
            return Ok(Room::New(Some(slot)));
        }
        match self.wait_for_room(backend, entry, raw, max).await {
            Some(room) => Ok(room),
            None => {
                self.inner.metrics.overflow(&backend.id);
                Err(ProxyError::BackendOverflow)
            }
        }
    }

    async fn wait_for_room(
        &self,
        backend: &Backend,
        entry: &Entry,
        raw: bool,
        max: u32,
    ) -> Option<Room> {
        let load = &backend.load;
        let mut closed = self.inner.pool.close_idle(backend, entry, raw);
        // A request that closed an idle connection for itself is not queued: its place is
        // coming.
        let _waiting = match closed {
            true => None,
            false => {
                let max_pending =
                    (backend.max_pending).unwrap_or(self.inner.max_pending_per_backend);
                Some(Waiting::join(load, max_pending)?)
            }
        };
        let wait = backend
            .connect_timeout
            .unwrap_or(self.inner.connect_timeout);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the checks, so a close in between still wakes this one.
            let freed = load.connection_freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = ConnectionSlot::claim(load, max) {
                return Some(Room::New(Some(slot)));
            }
            if entry.has_idle(raw) {
                return Some(Room::Pooled);
            }
            if !closed {
                closed = self.inner.pool.close_idle(backend, entry, raw);
            }
            let tick = (tokio::time::Instant::now() + ROOM_TICK).min(deadline);
            if tokio::time::timeout_at(tick, freed).await.is_err() {
                if tick >= deadline {
                    return None;
                }
                closed = false;
            }
        }
    }

    /// Sends on a new connection.
    async fn send_new(
        &self,
        backend: &Backend,
        entry: Arc<Entry>,
        dial: &Dial<'_>,
        shape: &Shape,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        // Room under the backend's `maxConnections`, or a connection that came back meanwhile.
        let slot = loop {
            if backend.max_connections.is_none() {
                break None;
            }
            match self.room(backend, &entry, false).await? {
                Room::New(slot) => break slot,
                Room::Pooled => {
                    req = match self.send_pooled(&entry, shape, req).await {
                        Pooled::Done(result) => return result,
                        Pooled::Unsent(req) => req,
                    }
                }
            }
        };
        // HTTP/2 connects are shared, and so is a TLS key's first connect when it may
        // negotiate h2: a burst of first requests then costs one handshake, not one each.
        let shared = match entry.mode() {
            Mode::Http2 => true,
            Mode::Unknown => dial.tls.is_some_and(connect::offers_h2),
            Mode::Http1 => false,
        };
        let conn = if shared {
            self.connect_shared(&entry, dial, slot).await?
        } else {
            self.connect(&entry, dial, slot).await?
        };
        let sent = match conn {
            Conn::Http1(tx) => send_h1(entry, tx, req, shape).await,
            Conn::Http2(tx) => send_h2(tx, req, shape).await,
        };
        sent.map_err(SendError::into_proxy_error)
    }

    /// Tries the entry's pooled connection; hands the request back when there is none, or it
    /// closed before the request was written.
    async fn send_pooled(
        &self,
        entry: &Arc<Entry>,
        shape: &Shape,
        req: Request<ProxyBody>,
    ) -> Pooled {
        let sent = if entry.mode() == Mode::Http2 {
            let Some(tx) = entry.h2_sender() else {
                return Pooled::Unsent(req);
            };
            let sent = send_h2(tx, req, shape).await;
            if matches!(sent, Err(SendError::NotSent(..))) {
                entry.forget_h2();
            }
            sent
        } else {
            let Some(tx) = entry.checkout_h1() else {
                return Pooled::Unsent(req);
            };
            send_h1(entry.clone(), tx, req, shape).await
        };
        match sent {
            Ok(resp) => Pooled::Done(Ok(resp)),
            Err(SendError::NotSent(req, error)) => {
                tracing::debug!(%error, "pooled connection closed; using a new one");
                Pooled::Unsent(req)
            }
            Err(e) => Pooled::Done(Err(e.into_proxy_error())),
        }
    }

    async fn connect(
        &self,
        entry: &Entry,
        dial: &Dial<'_>,
        slot: Option<ConnectionSlot>,
    ) -> Result<Conn, ProxyError> {
        let conn = self.inner.connector.connect(dial, slot).await?;
        entry.learned(match conn {
            Conn::Http1(_) => Mode::Http1,
            Conn::Http2(_) => Mode::Http2,
        });
        if let Conn::Http2(tx) = &conn {
            entry.install_h2(tx);
        }
        Ok(conn)
    }

    /// One HTTP/2 connect at a time per entry: requests that arrive meanwhile wait and share
    /// its connection, or its failure. (An async gate: it is held across the connect, which is
    /// the point, and only on this slow path.)
    async fn connect_shared(
        &self,
        entry: &Entry,
        dial: &Dial<'_>,
        slot: Option<ConnectionSlot>,
    ) -> Result<Conn, ProxyError> {
        let before = entry.h2_attempts();
        let mut last_failure = entry.h2_gate().lock().await;
        if let Some(tx) = entry.h2_sender() {
            return Ok(Conn::Http2(tx));
        }
        if entry.mode() == Mode::Http1 {
            // The attempt ahead negotiated HTTP/1.1: one connection per request, in parallel.
            drop(last_failure);
            return self.connect(entry, dial, slot).await;
        }
        if entry.h2_attempts() != before
            && let Some(failed) = *last_failure
        {
            return Err(failed.to_error());
        }
        let result = self.connect(entry, dial, slot).await;
        *last_failure = result.as_ref().err().map(Failed::of);
        entry.h2_attempted();
        result
    }

    #[cfg(test)]
    fn pool(&self) -> &Pool {
        &self.inner.pool
    }
}

/// Runs until the proxy is dropped or closed: on every tick, and whenever woken, retires the
/// entries whose trust left the current snapshot and closes idle connections past their time.
async fn maintain(inner: Weak<Inner>, wake: Arc<Notify>, tick: Duration) {
    let mut generation = None;
    let mut live = pool::Live::default();
    loop {
        {
            let Some(inner) = inner.upgrade() else { return };
            if inner.closed.load(Ordering::Acquire) {
                return;
            }
            let snapshot = inner.snapshot.load();
            if generation != Some(snapshot.generation) {
                live = pool::Live::of(&snapshot);
                generation = Some(snapshot.generation);
            }
            drop(snapshot);
            inner.pool.sweep(Some(&live));
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = wake.notified() => {}
        }
    }
}

/// What a request that needs a new connection found under its backend's `maxConnections`.
enum Room {
    /// Open one, holding this place (`None`: the backend has no bound).
    New(Option<ConnectionSlot>),
    /// A connection of the request's pool entry came back meanwhile: take it instead.
    Pooled,
}

/// How to address the request on the connection it ends up on.
struct Shape {
    scheme: Scheme,
    addr: SocketAddr,
}

async fn send_h1(
    entry: Arc<Entry>,
    mut tx: H1Sender,
    mut req: Request<ProxyBody>,
    shape: &Shape,
) -> Result<Response<UpstreamBody>, SendError> {
    shape.http1(&mut req);
    match tx.try_send_request(req).await {
        Ok(resp) => {
            // After a 101 the connection belongs to the upgrade.
            let conn = (resp.status() != StatusCode::SWITCHING_PROTOCOLS).then_some((entry, tx));
            Ok(resp.map(|b| UpstreamBody::new(b, conn)))
        }
        Err(e) => Err(SendError::from(e)),
    }
}

async fn send_h2(
    mut tx: H2Sender,
    mut req: Request<ProxyBody>,
    shape: &Shape,
) -> Result<Response<UpstreamBody>, SendError> {
    shape.http2(&mut req);
    match tx.try_send_request(req).await {
        Ok(resp) => Ok(resp.map(|b| UpstreamBody::new(b, None))),
        Err(e) => Err(SendError::from(e)),
    }
}

// === impl Shape ===

impl Shape {
    /// Origin-form with a `Host` header (the endpoint address if the client sent none).
    fn http1(&self, req: &mut Request<ProxyBody>) {
        *req.version_mut() = Version::HTTP_11;
        if let Some(authority) = req.uri().authority() {
            // Shaped for HTTP/2 before, handed back unsent: the authority is the Host.
            if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
                req.headers_mut().entry(HOST).or_insert(host);
            }
            let pq = origin(req.uri());
            *req.uri_mut() = Uri::from(pq);
        }
        if !req.headers().contains_key(HOST)
            && let Ok(host) = HeaderValue::from_str(&self.addr.to_string())
        {
            req.headers_mut().insert(HOST, host);
        }
    }

    /// `scheme://<Host><path>`: hyper sends the authority as `:authority`. The Host header
    /// moves into it (HTTP/2 prefers `:authority`); one that is not a valid authority stays a
    /// header, and `:authority` falls back to the endpoint address.
    fn http2(&self, req: &mut Request<ProxyBody>) {
        *req.version_mut() = Version::HTTP_2;
        if req.uri().authority().is_some() {
            return;
        }
        let host = req
            .headers()
            .get(HOST)
            .and_then(|h| Authority::try_from(h.as_bytes()).ok());
        let authority = match host {
            Some(a) => {
                req.headers_mut().remove(HOST);
                a
            }
            None => match Authority::try_from(self.addr.to_string()) {
                Ok(a) => a,
                Err(_) => return,
            },
        };
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(authority);
        parts.path_and_query = Some(origin(req.uri()));
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
}

fn origin(uri: &Uri) -> PathAndQuery {
    uri.path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"))
}

// === impl SendError ===

impl From<hyper::client::conn::TrySendError<Request<ProxyBody>>> for SendError {
    fn from(mut e: hyper::client::conn::TrySendError<Request<ProxyBody>>) -> Self {
        match e.take_message() {
            Some(req) => Self::NotSent(req, e.into_error()),
            None => Self::Failed(e.into_error()),
        }
    }
}

impl SendError {
    fn into_proxy_error(self) -> ProxyError {
        match self {
            Self::NotSent(_, e) | Self::Failed(e) => ProxyError::Upstream(Box::new(e)),
        }
    }
}

// === impl Clock ===

impl Clock {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

// === impl InFlight ===

impl InFlight {
    pub fn new(stats: Arc<EndpointStats>, gauge: Gauge) -> Self {
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        gauge.inc();
        Self {
            stats,
            gauge,
            backend: None,
        }
    }

    /// Counts a request against `backend` too, once it has fewer than `max` in flight
    /// (circuit breaking). A request that finds it full waits in `queue` when it has room, the
    /// oldest first, at most `queue.wait`; `None` when it does not get a slot (nothing counted).
    pub async fn admit(
        backend: &Arc<BackendLoad>,
        max: u32,
        queue: Queue,
        stats: Arc<EndpointStats>,
        gauge: Gauge,
    ) -> Option<Self> {
        // A newcomer takes a free slot only when nobody waits for one.
        let free = backend.pending.load(Ordering::Acquire) == 0 && claim(backend, max);
        if !free {
            // Boxed: the queue's wait is the rare path, and unboxed it would be ~400 bytes of
            // every forwarding request's state.
            Box::pin(wait_for_slot(backend, max, queue)).await?;
        }
        let mut admitted = Self::new(stats, gauge);
        admitted.backend = Some(backend.clone());
        Some(admitted)
    }
}

/// Joins `backend`'s queue (when it has room) and waits until a slot is claimed; `None` when
/// the queue is full or the wait ends first.
async fn wait_for_slot(backend: &BackendLoad, max: u32, queue: Queue) -> Option<()> {
    let _waiting = Waiting::join(backend, queue.max_pending)?;
    let deadline = tokio::time::Instant::now() + queue.wait;
    loop {
        // Registered before the check, so a slot freed in between still wakes this one.
        let freed = backend.freed.notified();
        let mut freed = std::pin::pin!(freed);
        freed.as_mut().enable();
        if claim(backend, max) {
            return Some(());
        }
        tokio::time::timeout_at(deadline, freed).await.ok()?;
    }
}

/// The waiting room of a full backend ([`InFlight::admit`]).
#[derive(Clone, Copy, Debug)]
pub struct Queue {
    /// How many requests may wait at once (0: none).
    pub max_pending: u32,
    /// How long one waits at most.
    pub wait: std::time::Duration,
}

/// One request in a backend's queue, until dropped.
struct Waiting<'a>(&'a BackendLoad);

impl<'a> Waiting<'a> {
    /// A place in `backend`'s queue, when fewer than `max_pending` wait.
    fn join(backend: &'a BackendLoad, max_pending: u32) -> Option<Self> {
        backend
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max_pending).then_some(n + 1)
            })
            .ok()?;
        Some(Waiting(backend))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes a slot of `backend` if it has fewer than `max` in flight.
fn claim(backend: &BackendLoad, max: u32) -> bool {
    backend
        .in_flight
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.gauge.dec();
        if let Some(b) = &self.backend {
            b.in_flight.fetch_sub(1, Ordering::AcqRel);
            // A `Notify` permit kept while nobody waits only costs the next waiter a look.
            b.freed.notify_one();
        }
    }
}

/// The request to an endpoint, in origin-form; the upstream shapes it for the connection
/// (HTTP/1.1 or HTTP/2) it goes out on.
pub(crate) fn request(
    parts: http::request::Parts,
    body: ProxyBody,
    path: PathAndQuery,
) -> Request<ProxyBody> {
    let mut req = Request::new(body);
    *req.method_mut() = parts.method;
    *req.uri_mut() = Uri::from(path);
    *req.headers_mut() = parts.headers;
    req
}
