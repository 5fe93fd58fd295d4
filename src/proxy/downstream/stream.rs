//! TLS ports (listener protocol TLS, TLSRoute). The ClientHello is read, not answered, to
//! learn the SNI; the most specific listener for it, then its route table, decide where the
//! connection goes:
//!
//! ```text
//! ClientHello (recorded) ─ SNI ─> listener ─> route ─> weighted backendRef ─> endpoint (P2C)
//!   Passthrough: TCP to the endpoint, the recorded bytes first, then both ways as they come
//!   Terminate:   pier's certificate for the SNI (no ALPN), then plaintext to the endpoint, or
//!                mesh mTLS / BackendTLSPolicy TLS when the backend has it (never plaintext
//!                instead: an unavailable TLS config closes the connection)
//! ```
//!
//! No SNI matches only listeners and routes without hostnames. Nothing to route to closes the
//! connection (there is no way to answer inside someone else's TLS). Bytes are relayed both ways
//! with half-close passed on (one side's EOF shuts the other's write side) until both are done,
//! the stream idles for `Limits::stream_idle_timeout`, or a drain's grace period ends (streams
//! have no requests to finish, so draining does not cut them early).
//!
//! TCP ports (listener protocol TCP, TCPRoute) take the same way without the ClientHello
//! ([`serve_tcp`]): the listener and route for no name, and the upstream connection at once.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};
use rustls::ServerConfig;
use rustls::server::{Accepted, Acceptor};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::StartHandshake;

use crate::model::host::normalize_host;
use crate::model::matcher::RequestParts;
use crate::model::{
    Backend, BackendTarget, Endpoint, Listener, PortKey, Snapshot, TlsMode, UpstreamTls,
};
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::drain::DrainToken;
use crate::proxy::error::{DownstreamTlsFailure, ProxyError};
use crate::proxy::exchange::Shared;
use crate::proxy::exchange::send::{outcome, pick_endpoint};
use crate::proxy::observe::metrics::{StreamMode, StreamResult, UpstreamGuard};
use crate::proxy::policy::route::pick_weighted;
use crate::proxy::upstream;

/// Most bytes read while waiting for a complete ClientHello (rustls bounds the message itself;
/// this bounds what a client can make pier buffer for a passthrough replay).
const MAX_HELLO: usize = 64 * 1024;

/// Why a connection produced no usable ClientHello.
#[derive(Debug, thiserror::Error)]
enum HelloError {
    #[error("reading the ClientHello failed")]
    Io(#[from] io::Error),
    #[error("the client closed before a complete ClientHello")]
    Closed,
    #[error("not a TLS ClientHello")]
    Tls(#[source] rustls::Error),
    #[error("the ClientHello is larger than {MAX_HELLO} bytes")]
    TooLarge,
}

/// Where one stream goes: references into the snapshot the connection loaded.
pub(super) struct Plan<'s> {
    /// The port the client connected to (the handshake metric's label).
    port: u16,
    pub(super) listener: &'s Listener,
    pub(super) backend: &'s Backend,
    pub(super) endpoint: &'s Endpoint,
    /// The endpoint's upstream TLS (terminated listeners); `None` for plaintext. Passthrough
    /// never adds TLS.
    pub(super) tls: Option<&'s UpstreamTls>,
}

pub async fn serve(
    shared: &Arc<Shared>,
    mut tcp: TcpStream,
    info: Arc<ConnInfo>,
    tls: Arc<crate::tls::server::PortTls>,
    mut drain: DrainToken,
) {
    let peer = info.peer;
    let deadline = Instant::now() + shared.config.tls_handshake_timeout;
    let hello = tokio::select! {
        r = tokio::time::timeout_at(deadline, read_hello(&mut tcp)) => r,
        _ = drain.closed() => return,
    };
    let (accepted, recorded) = match hello {
        Ok(Ok(hello)) => hello,
        Ok(Err(error)) => {
            tracing::debug!(%peer, port = info.port, error = %crate::translate::error_chain(&error), "no ClientHello");
            return shared
                .metrics
                .stream(None, StreamMode::Unknown, StreamResult::BadHello);
        }
        Err(_) => {
            tracing::debug!(%peer, port = info.port, "no ClientHello within the handshake timeout");
            return shared
                .metrics
                .stream(None, StreamMode::Unknown, StreamResult::BadHello);
        }
    };
    let sni = accepted
        .client_hello()
        .server_name()
        .map(|n| normalize_host(n).into_owned());
    let snapshot = shared.snapshot.load_full();
    let sni = sni.as_deref().unwrap_or("");
    let plan = match plan(shared, &snapshot, info.key(), info.peer, sni) {
        Ok(plan) => plan,
        Err((listener, result)) => {
            tracing::debug!(%peer, port = info.port, sni, ?result, "TLS stream not routed");
            let mode = listener.map_or(StreamMode::Unknown, mode_of);
            return shared.metrics.stream(listener.map(|l| &l.id), mode, result);
        }
    };
    let listener = plan.listener;
    let mode = mode_of(listener);
    let result = if listener.passthrough {
        passthrough(shared, &snapshot, &plan, tcp, &recorded, drain).await
    } else {
        drop(recorded);
        // The listener's own TLS settings, if it has any (ClientTrafficPolicy `tls`).
        let config = match &listener.tls_profile {
            None => Some(tls.stream.clone()),
            Some(p) => tls.stream_profiles.get(p),
        };
        drop(tls);
        let Some(config) = config else {
            return shared
                .metrics
                .stream(Some(&listener.id), mode, StreamResult::HandshakeFailed);
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        terminate(
            shared,
            &snapshot,
            &plan,
            (accepted, tcp),
            config,
            remaining,
            drain,
        )
        .await
    };
    shared.metrics.stream(Some(&listener.id), mode, result);
}

fn mode_of(listener: &Listener) -> StreamMode {
    if listener.passthrough {
        StreamMode::Passthrough
    } else {
        StreamMode::Terminate
    }
}

/// Reads until rustls has a complete ClientHello, keeping every byte read (a passthrough
/// replays them to the backend).
async fn read_hello<I>(io: &mut I) -> Result<(Accepted, Vec<u8>), HelloError>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let mut acceptor = Acceptor::default();
    let mut seen: Vec<u8> = Vec::with_capacity(2048);
    loop {
        let start = seen.len();
        seen.reserve(4096);
        let n = io.read_buf(&mut seen).await?;
        if n == 0 {
            return Err(HelloError::Closed);
        }
        let mut chunk = &seen[start..];
        while !chunk.is_empty() {
            if acceptor.read_tls(&mut chunk)? == 0 {
                break;
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => return Ok((accepted, seen)),
            Ok(None) if chunk.is_empty() && seen.len() <= MAX_HELLO => {}
            Ok(None) => return Err(HelloError::TooLarge),
            Err((error, mut alert)) => {
                // Tell a TLS client why (a protocol alert), best effort.
                let mut out = Vec::new();
                if alert.write_all(&mut out).is_ok() {
                    let _ = io.write_all(&out).await;
                }
                return Err(HelloError::Tls(error));
            }
        }
    }
}

/// Listener, route, backendRef and endpoint for `sni` on port `key`, for a client at `peer`.
pub(super) fn plan<'s>(
    shared: &Shared,
    snapshot: &'s Snapshot,
    key: PortKey,
    peer: std::net::SocketAddr,
    sni: &str,
) -> Result<Plan<'s>, (Option<&'s Listener>, StreamResult)> {
    let listener = snapshot
        .port_at(key)
        .and_then(|p| p.listener(sni))
        .ok_or((None, StreamResult::NoRoute))?;
    let headers = HeaderMap::new();
    let parts = RequestParts {
        method: &Method::GET,
        path: "/",
        query: None,
        headers: &headers,
    };
    let entry = listener
        .routes
        .find(sni, &parts)
        .ok_or((Some(listener), StreamResult::NoRoute))?;
    // Who may come in: a SecurityPolicy on the route, its listener or Gateway (fail closed).
    if let Some(access) = &entry.rule.access
        && !access.admits_stream(peer.ip(), &[])
    {
        return Err((Some(listener), StreamResult::Denied));
    }
    let no_backend = (Some(listener), StreamResult::NoBackend);
    let weighted = pick_weighted(&entry.rule.backends).map_err(|_| no_backend)?;
    let BackendTarget::Service(backend) = &weighted.target else {
        return Err(no_backend);
    };
    let endpoint = pick_endpoint(shared, backend).map_err(|_| no_backend)?;
    let tls = match backend.tls_for(endpoint) {
        // Translation never attaches a meshed route to a Passthrough listener; should a mesh
        // config get here anyway, it is not bypassed.
        Ok(Some(t)) if listener.passthrough && t.mode == TlsMode::Mesh => {
            Err(crate::model::TlsUnavailable::InvalidMeshConfig)
        }
        other => other,
    };
    let tls = match tls {
        Ok(tls) => tls,
        Err(why) => {
            shared.metrics.tls_unavailable(&backend.id, why);
            return Err(no_backend);
        }
    };
    Ok(Plan {
        port: key.port,
        listener,
        backend,
        endpoint,
        tls,
    })
}

/// A TCP listener's connection (TCPRoute): no name to route by, so the listener and route
/// that take any host (the oldest route on the listener), then the weighted backendRef and its
/// endpoint; the upstream connection is made at once (a server may speak first), in mesh mTLS
/// or BackendTLSPolicy TLS when the backend has it, never plaintext instead. Nothing to route
/// to closes the connection.
pub async fn serve_tcp(
    shared: &Arc<Shared>,
    tcp: TcpStream,
    info: Arc<ConnInfo>,
    drain: DrainToken,
) {
    let snapshot = shared.snapshot.load_full();
    let plan = match plan(shared, &snapshot, info.key(), info.peer, "") {
        Ok(plan) => plan,
        Err((listener, result)) => {
            tracing::debug!(peer = %info.peer, port = info.port, ?result, "TCP stream not routed");
            return shared
                .metrics
                .stream(listener.map(|l| &l.id), StreamMode::Tcp, result);
        }
    };
    let result = connect_and_relay(shared, &snapshot, &plan, tcp, drain).await;
    shared
        .metrics
        .stream(Some(&plan.listener.id), StreamMode::Tcp, result);
}

/// The client's TLS, untouched, to the endpoint over TCP.
async fn passthrough(
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    plan: &Plan<'_>,
    tcp: TcpStream,
    recorded: &[u8],
    drain: DrainToken,
) -> StreamResult {
    let Plan {
        backend, endpoint, ..
    } = plan;
    let in_flight = shared.in_flight(snapshot, backend, endpoint);
    let (mut up, _open) = match connect(shared, backend, endpoint, None).await {
        Ok(c) => c,
        Err(result) => return result,
    };
    if let Err(error) = up.write_all(recorded).await {
        tracing::debug!(backend = %backend.id, %error, "writing the ClientHello upstream failed");
        return StreamResult::ConnectFailed;
    }
    relay(shared, tcp, up, drain).await;
    drop(in_flight);
    StreamResult::Relayed
}

/// pier's TLS with the client, then the bytes to the endpoint (in TLS when the backend has it).
async fn terminate(
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    plan: &Plan<'_>,
    (accepted, tcp): (Accepted, TcpStream),
    config: Arc<ServerConfig>,
    handshake_time: Duration,
    drain: DrainToken,
) -> StreamResult {
    let port = plan.port;
    let handshake = StartHandshake::from_parts(accepted, tcp).into_stream(config);
    let client = match tokio::time::timeout(handshake_time, handshake).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            let reason = DownstreamTlsFailure::of(&error);
            shared.metrics.downstream_tls_handshake(port, Some(reason));
            tracing::debug!(%error, reason = reason.as_str(), "TLS handshake with the client failed");
            return StreamResult::HandshakeFailed;
        }
        Err(_) => {
            let reason = DownstreamTlsFailure::Timeout;
            shared.metrics.downstream_tls_handshake(port, Some(reason));
            tracing::debug!("TLS handshake with the client timed out");
            return StreamResult::HandshakeFailed;
        }
    };
    shared.metrics.downstream_tls_handshake(port, None);
    connect_and_relay(shared, snapshot, plan, client, drain).await
}

/// The plan's endpoint, connected (in its TLS, if any), then the bytes both ways with `down`:
/// a terminated TLS stream's plaintext, or a TCP listener's connection.
async fn connect_and_relay<D>(
    shared: &Shared,
    snapshot: &Arc<Snapshot>,
    plan: &Plan<'_>,
    down: D,
    drain: DrainToken,
) -> StreamResult
where
    D: AsyncRead + AsyncWrite + Unpin,
{
    let Plan {
        backend,
        endpoint,
        tls,
        ..
    } = plan;
    let in_flight = shared.in_flight(snapshot, backend, endpoint);
    let (up, _open) = match connect(shared, backend, endpoint, *tls).await {
        Ok(c) => c,
        Err(result) => return result,
    };
    relay(shared, down, up, drain).await;
    drop(in_flight);
    StreamResult::Relayed
}

async fn connect(
    shared: &Shared,
    backend: &Backend,
    endpoint: &Endpoint,
    tls: Option<&crate::model::UpstreamTls>,
) -> Result<(upstream::Stream, UpstreamGuard), StreamResult> {
    let result = shared
        .upstream
        .open_stream(backend, endpoint.addr, tls)
        .await;
    let status: Result<StatusCode, &ProxyError> = match &result {
        Ok(_) => Ok(StatusCode::OK),
        Err(e) => Err(e),
    };
    outcome(shared, backend, endpoint, status);
    result.map_err(|error| {
        tracing::debug!(backend = %backend.id, endpoint = %endpoint.addr, error = %crate::translate::error_chain(&error), "TLS stream: connecting upstream failed");
        StreamResult::ConnectFailed
    })
}

/// Copies both ways, passing each side's EOF on as a write shutdown to the other, until both
/// directions are done, the stream idles out (`Limits::stream_idle_timeout`; once one direction
/// is done, [`HALF_CLOSED_IDLE`] at most), or the drain's grace period ends.
async fn relay<A, B>(shared: &Shared, down: A, up: B, mut drain: DrainToken)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let activity = Arc::new(Activity {
        clock: Instant::now(),
        last: AtomicU64::new(0),
    });
    let (down_r, mut down_w) = tokio::io::split(Active {
        io: down,
        activity: activity.clone(),
    });
    let (up_r, mut up_w) = tokio::io::split(Active {
        io: up,
        activity: activity.clone(),
    });
    // One read takes up to a whole TLS record (16 KiB), where `tokio::io::copy`'s 8 KiB
    // buffer takes it in two (docs/src/history/benchmarks.md, TLS passthrough).
    let mut down_r = tokio::io::BufReader::with_capacity(RELAY_BUFFER, down_r);
    let mut up_r = tokio::io::BufReader::with_capacity(RELAY_BUFFER, up_r);
    let to_up = async {
        let r = tokio::io::copy_buf(&mut down_r, &mut up_w).await;
        let _ = up_w.shutdown().await;
        r
    };
    let to_down = async {
        let r = tokio::io::copy_buf(&mut up_r, &mut down_w).await;
        let _ = down_w.shutdown().await;
        r
    };
    tokio::pin!(to_up, to_down);
    let idle = shared.config.limits.stream_idle_timeout;
    let first = tokio::select! {
        r = &mut to_up => Direction::Up(r),
        r = &mut to_down => Direction::Down(r),
        _ = activity.idle_for(idle) => return tracing::debug!("closing an idle TLS stream"),
        _ = drain.closed() => return,
    };
    // The end of one direction counts as activity: the other gets its own quiet period.
    activity.stamp();
    let rest = async {
        match first {
            Direction::Up(r) => (r, to_down.await),
            Direction::Down(r) => (to_up.await, r),
        }
    };
    tokio::select! {
        (up, down) = rest => match (up, down) {
            (Ok(sent), Ok(received)) => tracing::debug!(sent, received, "TLS stream closed"),
            (Err(error), _) | (_, Err(error)) => tracing::debug!(%error, "TLS stream ended with an error"),
        },
        _ = activity.idle_for(idle.min(HALF_CLOSED_IDLE)) => {
            tracing::debug!("closing a half-closed TLS stream")
        }
        _ = drain.closed() => {}
    }
}

/// Bytes read at once in each direction of a stream (memory per stream: twice this).
const RELAY_BUFFER: usize = 16 * 1024;

/// How long a stream with one direction done may stay quiet before it is closed (HAProxy's
/// `timeout client-fin`/`server-fin`): a peer that half-closes and never finishes does not
/// hold a connection for the whole idle timeout.
const HALF_CLOSED_IDLE: Duration = Duration::from_secs(30);

enum Direction {
    Up(io::Result<u64>),
    Down(io::Result<u64>),
}

/// When a stream last carried a byte.
struct Activity {
    clock: Instant,
    /// Milliseconds after `clock`.
    last: AtomicU64,
}

impl Activity {
    fn stamp(&self) {
        let now = self.clock.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    /// Completes once nothing was read for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let since = Duration::from_millis(self.last.load(Ordering::Relaxed));
            let quiet = self.clock.elapsed().saturating_sub(since);
            match limit.checked_sub(quiet) {
                Some(left) if !left.is_zero() => tokio::time::sleep(left).await,
                _ => return,
            }
        }
    }
}

/// Stamps the time of the last byte read through it.
struct Active<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Active<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.stamp();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Active<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
