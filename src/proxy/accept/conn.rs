//! One downstream connection: optional TLS (one deadline for the whole handshake), then the
//! HTTP/1.1 fast path (`h1`), which hands the connection to hyper-util's auto server (with
//! what it has read) as soon as a request needs it: HTTP/2 by preface (h2c prior knowledge),
//! upgrades, streamed request bodies and the rest. ALPN `h2` on TLS ports goes to hyper at
//! once. Graceful shutdown on drain either way. TLS ports (TLSRoute) go to `stream`.
//!
//! A connection's task is small: the serving states (kilobytes: TLS handshake, request
//! exchange, hyper) are boxed while they run. A keep-alive connection idle for
//! [`h1::PARK_AFTER`] drops them: a plain one leaves its task for its accept loop's parking
//! lot ([`super::lot`]) and gets a new task when its client sends again; a TLS one (its
//! rustls state stays with it) waits in its task alone ([`idle`]). So 10 000 idle clients
//! cost their sockets and a few hundred bytes each, not the states of a request.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};

use hyper::body::Incoming;
use hyper::rt::{Read, Write};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use super::lot::{Lot, Woken};
use super::proxy_protocol;
use crate::model::host::normalize_host;
use crate::model::{PortKey, Protocol, TlsProfile};
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::downstream::h1::{self, ReadReady};
use crate::proxy::downstream::{service, stream};
use crate::proxy::drain::DrainToken;
use crate::proxy::error::DownstreamTlsFailure;
use crate::proxy::exchange::Shared;
use crate::proxy::observe::metrics::ConnectionGuard;
use crate::proxy::reclaim::Registration;
use crate::proxy::streams::Streams;
pub use crate::tls::server::PortTls;

/// A connection's place under its port's cap, from the accept loop: the registration through
/// which the loop may close it while it waits on its client, the slot it holds until it
/// ends, and the lot where it waits when idle.
pub struct Admitted {
    pub reclaim: Registration,
    pub slot: OwnedSemaphorePermit,
    pub lot: Arc<PortLot>,
}

/// An accept loop's parking lot for its idle plain connections, and their port.
pub type PortLot = Lot<Asleep, PortKey>;

/// What a connection holds for its whole life, in its task or in the lot: its slot under the
/// port's cap, and its place in the open-connections gauge.
pub struct Held {
    _slot: OwnedSemaphorePermit,
    _active: ConnectionGuard,
}

/// What a plain connection parked in the lot keeps besides its socket. Its drain token is
/// the lot's while it is parked (a new one when it wakes), and its [`ConnInfo`] is built
/// again when it wakes (from its client's address, and the port's), so a parked connection
/// costs a slab entry of 88 bytes and its registration, not ~250 bytes more.
pub struct Asleep {
    client: Client,
    held: Held,
    _parked: ConnectionGuard,
}

/// Who a parked connection's client is.
enum Client {
    /// The socket's peer: everything else in its [`ConnInfo`] follows from it and the port.
    Peer(SocketAddr),
    /// A client a PROXY protocol header named (`via`): kept whole, as such ports are few.
    Proxied(Arc<ConnInfo>),
}

impl Client {
    fn of(info: Arc<ConnInfo>) -> Self {
        match info.via {
            None => Client::Peer(info.peer),
            Some(_) => Client::Proxied(info),
        }
    }

    fn info(self, shared: &Shared, key: PortKey, drain: &DrainToken) -> Arc<ConnInfo> {
        match self {
            Client::Peer(peer) => Arc::new(conn_info(shared, key, peer, None, drain)),
            Client::Proxied(info) => info,
        }
    }
}

/// What the request paths know of a plain connection (TLS fills in more after the
/// handshake).
pub(super) fn conn_info(
    shared: &Shared,
    key: PortKey,
    peer: SocketAddr,
    via: Option<SocketAddr>,
    drain: &DrainToken,
) -> ConnInfo {
    // The port's ClientTrafficPolicy settings, if its listeners have any (decided at
    // translation).
    let client = (shared.snapshot.load().port_at(key)).and_then(|p| p.client.clone());
    let trusted_hop = match client.as_ref().and_then(|c| c.trusted_proxies.as_deref()) {
        None => shared.config.trusted_proxies.trusts(peer.ip()),
        Some(t) => t.trusts(peer.ip()),
    };
    ConnInfo {
        port: key.port,
        address: key.address,
        peer,
        via,
        sni: None,
        forwarded_for: crate::proxy::headers::forwarded_for(peer.ip()),
        client_identity: None,
        tls_profile: None,
        trusted_hop,
        client,
        drain: drain.clone(),
    }
}

/// Serves one accepted connection until it ends, or until the accept loop closes it while it
/// waits on its client (at the connection cap: `reclaim`).
pub fn serve(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    key: PortKey,
    tls: Arc<PortTls>,
    drain: DrainToken,
    admitted: Admitted,
) -> impl Future<Output = ()> + Send + 'static {
    let Admitted { reclaim, slot, lot } = admitted;
    let held = Held {
        _slot: slot,
        _active: shared.metrics.connection(key.port),
    };
    // Boxed: the serving states are kilobytes, and the runtime moves a task's future by
    // value several times between spawn and completion (callgrind: ~86 KB of memcpy per
    // connection unboxed; BENCHMARKS.md); they are freed while the connection is parked.
    // Built here, not in the task's own future, so that the task keeps none of the
    // arguments it hands over.
    let serving = Box::pin({
        let (shared, reclaim) = (shared.clone(), reclaim.clone());
        async move { serve_conn(&shared, tcp, peer, key, tls, drain, &reclaim).await }
    });
    // This is the task's future itself (the accept loop spawns it as it is): a wrapping
    // `async move { conn.await; .. }` would hold it twice, once as the captured value and
    // once as the future it awaits (1 664 bytes a task instead of 896, massif).
    live(shared, held, reclaim, serving, lot)
}

/// Serves a connection the lot hands back, in a task of its own again, with a clone of the
/// lot's drain token.
pub fn woken(shared: &Arc<Shared>, lot: &Arc<PortLot>, drain: &DrainToken, woken: Woken<Asleep>) {
    let key = *lot.owner();
    match woken {
        Woken::Ready {
            tcp,
            deadline,
            reclaim,
            value,
        } => {
            let Asleep { client, held, .. } = value;
            let p = Parked {
                io: ParkedIo::Plain(tcp),
                info: client.info(shared, key, drain),
                drain: drain.clone(),
                deadline,
            };
            let serving = Box::pin({
                let (shared, reclaim) = (shared.clone(), reclaim.clone());
                async move { resume(&shared, p, &reclaim).await }
            });
            tokio::spawn(live(shared.clone(), held, reclaim, serving, lot.clone()));
        }
        Woken::Reclaimed(_) => shared.metrics.reclaimed(key.port),
    }
}

/// A connection's task: `serving`, then while the connection idles, waiting on its client
/// (plain ones in the lot, where the task ends; TLS ones, and plain ones the lot refuses, in
/// the task: [`idle`]).
async fn live<F>(
    shared: Arc<Shared>,
    mut held: Held,
    mut reclaim: Registration,
    serving: Pin<Box<F>>,
    lot: Arc<PortLot>,
) where
    F: Future<Output = Option<Parked>>,
{
    let mut parked = unless_reclaimed(&shared, lot.owner().port, &reclaim, serving)
        .await
        .flatten();
    while let Some(idled) = parked {
        let p;
        (p, held, reclaim) = match to_lot(&shared, &lot, idled, held, reclaim) {
            Some(back) => back,
            None => return,
        };
        parked = idle(&shared, p, &reclaim).await;
    }
}

/// Parks a plain connection in the lot (`None`: parked, or closed if it could not leave the
/// runtime); gives back what is to wait in the task (a TLS connection, or one the lot
/// refused).
fn to_lot(
    shared: &Shared,
    lot: &PortLot,
    p: Parked,
    held: Held,
    reclaim: Registration,
) -> Option<(Parked, Held, Registration)> {
    let ParkedIo::Plain(tcp) = p.io else {
        return Some((p, held, reclaim));
    };
    let key = *lot.owner();
    let tcp = tcp.into_std().ok()?;
    let asleep = Asleep {
        client: Client::of(p.info),
        held,
        _parked: shared.metrics.parked(key.port),
    };
    let back = lot.park(tcp, p.deadline, reclaim, asleep).err()?;
    let tcp = TcpStream::from_std(back.tcp).ok()?;
    let Asleep { client, held, .. } = back.value;
    let p = Parked {
        io: ParkedIo::Plain(tcp),
        info: client.info(shared, key, &p.drain),
        drain: p.drain,
        deadline: p.deadline,
    };
    Some((p, held, back.reclaim))
}

/// `serving`, unless the accept loop closes the connection first (`None`).
async fn unless_reclaimed<T>(
    shared: &Shared,
    port: u16,
    reclaim: &Registration,
    serving: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        out = serving => Some(out),
        () = reclaim.closed() => {
            shared.metrics.reclaimed(port);
            None
        }
    }
}

/// A keep-alive connection idle for [`h1::PARK_AFTER`], outside the fast path's states.
struct Parked {
    io: ParkedIo,
    info: Arc<ConnInfo>,
    drain: DrainToken,
    /// When the next request head must have arrived (the idle timeout).
    deadline: tokio::time::Instant,
}

enum ParkedIo {
    Plain(TcpStream),
    /// Boxed: a rustls connection is over a kilobyte, and plain connections are the many.
    Tls(Box<TlsStream<TcpStream>>),
}

/// A client stream the fast path can hand back parked.
trait Park {
    fn park(self) -> ParkedIo;
}

impl Park for TcpStream {
    fn park(self) -> ParkedIo {
        ParkedIo::Plain(self)
    }
}

impl Park for TlsStream<TcpStream> {
    fn park(self) -> ParkedIo {
        ParkedIo::Tls(Box::new(self))
    }
}

impl ParkedIo {
    async fn read_ready(&mut self) -> std::io::Result<()> {
        match self {
            ParkedIo::Plain(tcp) => tcp.read_ready().await,
            ParkedIo::Tls(tls) => tls.read_ready().await,
        }
    }

    /// FIN, and close_notify on TLS, as the fast path closes.
    async fn close(&mut self) {
        let shutdown = async {
            match self {
                ParkedIo::Plain(tcp) => tcp.shutdown().await,
                ParkedIo::Tls(tls) => tls.shutdown().await,
            }
        };
        let _ = tokio::time::timeout(h1::SHUTDOWN_WAIT, shutdown).await;
    }
}

/// How a parked connection's wait ended.
enum Wake {
    /// The client sent something (or closed, or failed: reading will tell).
    Ready,
    /// The idle timeout, or the drain.
    Close,
    Reclaimed,
    Draining,
}

/// Waits on a parked connection's client, then serves what it sends (the states boxed again)
/// until the connection closes (`None`) or parks once more. The same limits hold as in the
/// fast path's own wait: the idle timeout, the accept loop's reclaim at the cap, and on drain
/// a moment for a request the client may be sending right then (answered with
/// `Connection: close`).
async fn idle(shared: &Arc<Shared>, mut p: Parked, reclaim: &Registration) -> Option<Parked> {
    let port = p.info.port;
    let parked = shared.metrics.parked(port);
    let mut wake = tokio::select! {
        biased;
        () = reclaim.closed() => Wake::Reclaimed,
        _ = p.io.read_ready() => Wake::Ready,
        () = tokio::time::sleep_until(p.deadline) => Wake::Close,
        () = p.drain.draining() => Wake::Draining,
    };
    if let Wake::Draining = wake {
        wake = tokio::select! {
            biased;
            () = reclaim.closed() => Wake::Reclaimed,
            _ = p.io.read_ready() => Wake::Ready,
            // The drain's wait, or the idle timeout if sooner.
            () = tokio::time::sleep_until(
                p.deadline.min(tokio::time::Instant::now() + h1::DRAIN_IDLE_WAIT),
            ) => Wake::Close,
            () = p.drain.closed() => Wake::Close,
        };
    }
    drop(parked);
    match wake {
        Wake::Ready => {
            let serving = Box::pin(resume(shared, p, reclaim));
            unless_reclaimed(shared, port, reclaim, serving)
                .await
                .flatten()
        }
        Wake::Reclaimed => {
            shared.metrics.reclaimed(port);
            None
        }
        Wake::Close | Wake::Draining => {
            // Counted as closed at once by the accept loop at the cap: so it is.
            tokio::select! {
                biased;
                () = reclaim.closed() => {}
                () = p.io.close() => {}
            }
            None
        }
    }
}

/// A parked connection back on the fast path.
async fn resume(shared: &Arc<Shared>, p: Parked, reclaim: &Registration) -> Option<Parked> {
    let due = Some(p.deadline);
    match p.io {
        ParkedIo::Plain(tcp) => serve_h1(shared, tcp, p.info, p.drain, reclaim, due).await,
        ParkedIo::Tls(tls) => serve_h1(shared, *tls, p.info, p.drain, reclaim, due).await,
    }
}

async fn serve_conn(
    shared: &Arc<Shared>,
    mut tcp: TcpStream,
    peer: SocketAddr,
    key: PortKey,
    tls: Arc<PortTls>,
    drain: DrainToken,
    reclaim: &Registration,
) -> Option<Parked> {
    let port = key.port;
    let _ = tcp.set_nodelay(true);
    // The protocol is read per connection, so a port that changes between HTTP and HTTPS
    // needs no rebinding.
    let (protocol, proxy_protocol) = match shared.snapshot.load().port_at(key) {
        Some(p) => (Some(p.protocol), p.proxy_protocol),
        None => (None, false),
    };
    let (peer, via) = if proxy_protocol {
        // Boxed: the header buffer is a few kilobytes, on opt-in ports only.
        match Box::pin(proxy_header(shared, &mut tcp, peer, port, &drain)).await {
            Some(client) if client != peer => (client, Some(peer)),
            Some(_) => (peer, None),
            None => return None,
        }
    } else {
        (peer, None)
    };
    let info = Arc::new(conn_info(shared, key, peer, via, &drain));
    match protocol {
        None => None,
        Some(Protocol::Http) => serve_h1(shared, tcp, info, drain, reclaim, None).await,
        // Boxed, like hyper's fallback below: the TLS states (handshake, rustls connection)
        // would otherwise size every plain connection's future too.
        Some(Protocol::Https) => Box::pin(serve_tls(shared, tcp, tls, info, drain, reclaim)).await,
        Some(Protocol::Tls) => {
            // TLS streams bound their own idleness (handshake and stream idle timeouts).
            if reclaim.busy() {
                Box::pin(stream::serve(shared, tcp, info, tls, drain)).await
            }
            None
        }
        // UDP ports have no TCP socket (`downstream::datagram`).
        Some(Protocol::Udp) => None,
        Some(Protocol::Tcp) => {
            // TCP streams bound their own idleness (the stream idle timeout).
            if reclaim.busy() {
                Box::pin(stream::serve_tcp(shared, tcp, info, drain)).await
            }
            None
        }
    }
}

/// Reads the PROXY protocol header: the client it names (the socket's peer for `LOCAL` and
/// `UNKNOWN`), or `None` when the connection is to be closed (no header, a malformed one, too
/// slow, or the drain).
async fn proxy_header(
    shared: &Shared,
    tcp: &mut TcpStream,
    peer: SocketAddr,
    port: u16,
    drain: &DrainToken,
) -> Option<SocketAddr> {
    use crate::proxy::observe::metrics::ProxyProtocolResult as R;
    let mut drain = drain.clone();
    let read = tokio::select! {
        r = tokio::time::timeout(proxy_protocol::HEADER_TIMEOUT, proxy_protocol::read(tcp)) => r,
        _ = drain.closed() => return None,
    };
    let (result, client) = match read {
        Ok(Ok(h)) => (
            if h.source.is_some() {
                R::Proxied
            } else {
                R::Local
            },
            Some(h.source.unwrap_or(peer)),
        ),
        Ok(Err(error)) => {
            tracing::debug!(%peer, port, %error, "PROXY protocol header rejected");
            let result = match error {
                proxy_protocol::Error::Missing => R::Missing,
                proxy_protocol::Error::Truncated => R::Truncated,
                proxy_protocol::Error::Malformed(_) | proxy_protocol::Error::TooLarge => {
                    R::Malformed
                }
            };
            (result, None)
        }
        Err(_) => {
            tracing::debug!(%peer, port, "no PROXY protocol header within the timeout");
            (R::Timeout, None)
        }
    };
    shared.metrics.proxy_protocol(port, result);
    client
}

/// The TLS handshake of an HTTPS connection, and the listener settings it was made under
/// (`None`: pier's default). A port whose listeners all have the default takes the one config
/// at once; otherwise the ClientHello is read first and the SNI's listener picks the config.
async fn handshake(
    shared: &Shared,
    tcp: TcpStream,
    tls: Arc<PortTls>,
    key: PortKey,
) -> std::io::Result<(TlsStream<TcpStream>, Option<Arc<TlsProfile>>)> {
    let profiles = shared
        .snapshot
        .load()
        .port_at(key)
        .is_some_and(|p| p.tls_profiles);
    if !profiles {
        let acceptor = tls.https.clone();
        drop(tls);
        return Ok((acceptor.accept(tcp).await?, None));
    }
    let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await?;
    let sni = start
        .client_hello()
        .server_name()
        .map(|n| normalize_host(n).into_owned());
    let profile = (shared.snapshot.load().port_at(key))
        .and_then(|p| p.tls_profile_for(sni.as_deref()))
        .cloned();
    let config = match &profile {
        None => tls.https.config().clone(),
        Some(p) => tls
            .https_profiles
            .get(p)
            .ok_or_else(|| std::io::Error::other("the listener's TLS settings cannot be served"))?,
    };
    drop(tls);
    Ok((start.into_stream(config).await?, profile))
}

async fn serve_tls(
    shared: &Arc<Shared>,
    tcp: TcpStream,
    tls: Arc<PortTls>,
    info: Arc<ConnInfo>,
    mut drain: DrainToken,
    reclaim: &Registration,
) -> Option<Parked> {
    let (peer, port) = (info.peer, info.port);
    let deadline = shared.config.tls_handshake_timeout;
    let handshake = tokio::select! {
        r = tokio::time::timeout(deadline, handshake(shared, tcp, tls, info.key())) => r,
        _ = drain.closed() => return None,
    };
    let (stream, tls_profile) = match handshake {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            let reason = DownstreamTlsFailure::of(&error);
            shared.metrics.downstream_tls_handshake(port, Some(reason));
            tracing::debug!(%peer, port, %error, reason = reason.as_str(), "TLS handshake failed");
            return None;
        }
        Err(_) => {
            let reason = DownstreamTlsFailure::Timeout;
            shared.metrics.downstream_tls_handshake(port, Some(reason));
            tracing::debug!(%peer, port, "TLS handshake timed out");
            return None;
        }
    };
    shared.metrics.downstream_tls_handshake(port, None);
    let tls = stream.get_ref().1;
    let client_identity = tls
        .peer_certificates()
        .and_then(|chain| client_identity(shared, info.key(), chain));
    let info = match (tls.server_name(), client_identity, tls_profile) {
        (None, None, None) => info,
        (sni, client_identity, tls_profile) => Arc::new(ConnInfo {
            sni: sni.map(|name| normalize_host(name).into()),
            client_identity,
            tls_profile,
            ..(*info).clone()
        }),
    };
    match tls.alpn_protocol() {
        Some(b"h2") => {
            serve_http(shared, TokioIo::new(stream), info, drain, reclaim.clone()).await;
            None
        }
        _ => serve_h1(shared, stream, info, drain, reclaim, None).await,
    }
}

/// The identity of a client certificate the handshake accepted, if it is a verified one: on an
/// `AllowValidOnly` port the handshake verified it; on an `AllowInsecureFallback` port it
/// accepted anything, so the chain is verified again here (against the current snapshot).
pub(super) fn client_identity(
    shared: &Shared,
    key: PortKey,
    chain: &[rustls::pki_types::CertificateDer<'static>],
) -> Option<Arc<crate::tls::server::ClientIdentity>> {
    let auth = shared.snapshot.load().port_at(key)?.client_auth.clone()?;
    if !auth.mandatory()
        && !crate::tls::server::verifies(&auth, chain, rustls::pki_types::UnixTime::now())
    {
        return None;
    }
    crate::tls::server::client_identity(chain.first()?).map(Arc::new)
}

/// The fast path first; hyper for the rest of the connection if a request needs it.
/// `resume`: a parked connection's, with its head's deadline.
async fn serve_h1<I>(
    shared: &Arc<Shared>,
    io: I,
    info: Arc<ConnInfo>,
    mut drain: DrainToken,
    reclaim: &Registration,
    resume: Option<tokio::time::Instant>,
) -> Option<Parked>
where
    I: AsyncRead + AsyncWrite + ReadReady + Park + Unpin + Send + 'static,
{
    match h1::serve(shared, io, &info, &mut drain, reclaim, resume).await {
        h1::Served::Closed => None,
        h1::Served::Fallback(io) => {
            let reclaim = reclaim.clone();
            Box::pin(serve_http(shared, TokioIo::new(io), info, drain, reclaim)).await;
            None
        }
        h1::Served::Parked(io, deadline) => Some(Parked {
            io: io.park(),
            info,
            drain,
            deadline,
        }),
    }
}

/// hyper for the rest of the connection. With no request in progress it waits on its client
/// (`reclaim`: the accept loop may close it at the cap), as an idle HTTP/2 connection that
/// sent only its preface does; it is busy while a request is in progress.
async fn serve_http<I>(
    shared: &Arc<Shared>,
    io: I,
    info: Arc<ConnInfo>,
    mut drain: DrainToken,
    reclaim: Registration,
) where
    I: Read + Write + Unpin + Send + 'static,
{
    let activity_peer = info.peer;
    let idle_timeout = info.idle_timeout(shared.config.limits.idle_timeout);
    let svc_shared = shared.clone();
    let activity = Arc::new(Activity::new(reclaim));
    let svc_activity = activity.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let shared = svc_shared.clone();
        let info = info.clone();
        // Busy from the request's arrival until its response body is done (or dropped).
        let busy = Activity::busy(&svc_activity);
        // Boxed once here: hyper moves the service's future into its stream future and tokio
        // moves that into a task, kilobytes each time unboxed (HTTP/2 spawns a task per
        // request).
        let handled = Box::pin(service::handle(shared, info, req.map(Into::into)));
        async move {
            let resp = handled.await;
            Ok::<_, Infallible>(resp.map(|body| Tracked { body, _busy: busy }))
        }
    });
    let conn = shared.server.serve_connection_with_upgrades(io, svc);
    let mut conn = std::pin::pin!(conn);
    // HTTP/2 streams run in this task (`proxy::streams`).
    let mut streams = Streams::default();
    let idle = activity.idle_for(idle_timeout);
    let mut idle = std::pin::pin!(idle);
    // The connection first: one handed over by the fast path while draining has its request
    // already buffered, and hyper must read it before a graceful shutdown (which would cancel
    // a connection still detecting its protocol).
    let result = tokio::select! {
        biased;
        r = streams.drive(conn.as_mut()) => r,
        _ = drain.draining() => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = streams.drive(conn.as_mut()) => r,
                _ = drain.closed() => Ok(()),
            }
        }
        // No request for the idle timeout (an HTTP/2 client may open a connection, send the
        // preface and nothing else): GOAWAY, then close.
        _ = idle.as_mut() => {
            tracing::debug!(peer = %activity_peer, "closing an idle connection");
            conn.as_mut().graceful_shutdown();
            // HTTP/2's graceful close waits for the client to answer a PING; one that never
            // does is cut once nothing has been in progress for a little while more.
            tokio::select! {
                r = streams.drive(conn.as_mut()) => r,
                _ = drain.closed() => Ok(()),
                _ = activity.quiet_for(IDLE_CLOSE_GRACE) => Ok(()),
            }
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// How long an idle connection's graceful close (HTTP/2 GOAWAY and PING) may take.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Requests in progress on one hyper-served connection, and since when it has had none.
struct Activity {
    start: tokio::time::Instant,
    active: AtomicUsize,
    /// Milliseconds after `start` when `active` last dropped to zero.
    idle_since: AtomicU64,
    /// Busy while `active` > 0, waiting on the client otherwise.
    reclaim: Registration,
}

/// Keeps its connection busy while it lives.
struct Busy(Arc<Activity>);

impl Activity {
    fn new(reclaim: Registration) -> Self {
        let start = tokio::time::Instant::now();
        // From the hand-over until its first request: a request the fast path read is
        // served within microseconds; an HTTP/2 client may send nothing.
        reclaim.wait(start.into_std());
        Self {
            start,
            active: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            reclaim,
        }
    }

    /// Completes after `grace`, once nothing is in progress.
    async fn quiet_for(&self, grace: Duration) {
        tokio::time::sleep(grace).await;
        while self.active.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(grace).await;
        }
    }

    fn busy(this: &Arc<Self>) -> Busy {
        if this.active.fetch_add(1, Ordering::AcqRel) == 0 {
            // `false`: the accept loop closed the connection an instant before this request
            // (the client sees the connection close, as with an idle keep-alive connection).
            let _ = this.reclaim.busy();
        }
        Busy(this.clone())
    }

    /// Completes once the connection has had no request in progress for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        loop {
            let wait = if self.active.load(Ordering::Acquire) > 0 {
                timeout
            } else {
                let since = Duration::from_millis(self.idle_since.load(Ordering::Acquire));
                let idle = self.start.elapsed().saturating_sub(since);
                match timeout.checked_sub(idle) {
                    Some(left) if !left.is_zero() => left,
                    _ => return,
                }
            };
            tokio::time::sleep(wait).await;
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        let now = a.start.elapsed().as_millis() as u64;
        // Stamp first, so a watcher that sees zero in flight reads a fresh time.
        a.idle_since.store(now, Ordering::Release);
        if a.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            a.reclaim.wait(std::time::Instant::now());
        }
    }
}

/// A response body that keeps its connection [`Busy`] until it is done or dropped.
struct Tracked<B> {
    body: B,
    _busy: Busy,
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    /// The size of the future an async function returns, from its type alone.
    fn future_size<A, B, C, D, E, G, H, R>(_: fn(A, B, C, D, E, G, H) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// The boxed serving states live while a connection is busy or briefly idle: the states
    /// of TLS, a PROXY header and hyper are boxed again when they start, so the HTTP/1.1
    /// request states set the size. This keeps it from growing unnoticed: 3 056 bytes in a
    /// debug build and 2 984 in a release build, 2026-11-28 (5 784 and 5 712 before
    /// `respond` and `forward` borrowed the request's common part instead of storing it
    /// twice each, and before the exchange got a future of its own, `h1::watching`); 3 192
    /// in a debug build since a forwarded request is set aside (`h1::Conn::set_aside`: its
    /// copy, and `watching`'s wait for the client before it takes a read buffer), which
    /// saves the 8 KiB read buffer; 3 232 since an upstream connection's guard holds its
    /// place under the backend's `maxConnections` too (2026-11-30, issue 39: a second word in
    /// every raw connection the request holds); 3 240 with the request's own deadline
    /// (`requestReceivedTimeout`: two flags of `h1::Conn::run`); 3 248 with the access log's
    /// `protocol` (2026-12-01: the request's version in its `LogHead`).
    #[test]
    fn a_connections_serving_states_stay_within_their_budget() {
        let size = future_size(super::serve_conn);
        assert!(size <= 3 * 1024 + 176, "{size} bytes");
    }

    /// The task's future itself (the accept loop spawns it unwrapped), held while the
    /// connection is served and while a parked TLS one waits (plain ones leave it for the
    /// lot): 808 bytes in a debug build, 2026-11-28, the port's slot included; the serving
    /// states it boxes are not in it.
    #[test]
    fn a_parked_connections_task_stays_small() {
        let size = future_size(super::serve);
        assert!(size <= 816, "{size} bytes");
    }

    /// A parked plain connection's entry in its lot (the slab entry; besides it: its
    /// registration's 64-byte slot and 16 bytes in the deadline heap): 88 bytes, 2026-11-28.
    /// It was a task with tokio's readiness state and its `ConnInfo`, ~1.4 KiB in all.
    #[test]
    fn a_parked_connections_lot_entry_stays_small() {
        let size = super::PortLot::ENTRY_SIZE;
        assert!(size <= 88, "{size} bytes");
    }
}
