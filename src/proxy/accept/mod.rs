//! The accept stage: listening sockets, the accept loop with a cap on open connections per
//! port (backpressure: at the cap it stops accepting until a connection closes), and each
//! connection's start ([`conn`]: PROXY protocol, TLS, then a request path of `downstream`).
//! Idle keep-alive connections wait in the port's parking lot ([`lot`]).

pub mod conn;
pub mod lot;
pub mod proxy_protocol;
pub mod quic;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::model::PortKey;
use crate::proxy::downstream::h1;
use crate::proxy::drain::{Drain, DrainToken};
use crate::proxy::exchange::Shared;
use crate::proxy::reclaim::Reclaim;

/// How many waiting connections a full accept loop closes at once: nginx drains 32; fewer
/// for small caps (one per 256 connections of the cap, at least one).
fn reclaim_batch(max_connections: usize) -> usize {
    (max_connections / 256).clamp(1, 32)
}

/// A port's cap on open connections, shared by its accept loops (one per worker, thread per
/// core). At the cap each loop holds the one client it accepted until a slot frees, so a full
/// port has up to one connection per loop waiting beyond the cap.
#[derive(Clone)]
pub struct Slots {
    permits: Arc<Semaphore>,
    reclaim: Arc<Reclaim>,
    batch: usize,
}

impl Slots {
    /// For `loops` accept loops, which share the closing of waiting connections at the cap
    /// (each closes its part of the batch).
    pub fn new(max_connections: usize, loops: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_connections.max(1))),
            reclaim: Reclaim::new(),
            batch: (reclaim_batch(max_connections) / loops.max(1)).max(1),
        }
    }
}

/// What every accept loop of one port shares.
pub struct Port {
    pub shared: Arc<Shared>,
    pub key: PortKey,
    pub tls: Arc<conn::PortTls>,
    pub slots: Slots,
}

/// `socket` registered with the runtime `on` (a worker's, thread per core), else with the
/// caller's: the runtime its accept loop and connections will run on, whose driver then
/// delivers their events.
pub fn register(
    socket: std::net::TcpListener,
    on: Option<&Handle>,
) -> std::io::Result<TcpListener> {
    let _entered = on.map(Handle::enter);
    TcpListener::from_std(socket)
}

/// Accepts connections on `listener` until the drain starts, then drops the socket. The loop
/// and its connections run on `on`, the runtime `listener` was [`register`]ed with.
pub fn spawn_accept(
    port: Port,
    listener: TcpListener,
    drain: &Drain,
    on: Option<&Handle>,
) -> JoinHandle<()> {
    let token = drain.token();
    let (lot, poll) = conn::PortLot::new(port.key);
    // The lot runs beside its accept loop, on its runtime: the connections it hands back are
    // served there, as they were before they parked.
    if let Some(poll) = poll {
        let (shared, woken_lot) = (port.shared.clone(), lot.clone());
        let drain = drain.token();
        let parking = lot.clone().run(
            poll,
            drain.clone(),
            port.slots.reclaim.clone(),
            h1::DRAIN_IDLE_WAIT,
            move |w| conn::woken(&shared, &woken_lot, &drain, w),
        );
        spawn_on(on, parking);
    }
    spawn_on(on, accept(port, listener, token, lot))
}

/// `task` on the runtime `on`, else on the caller's.
fn spawn_on<F>(on: Option<&Handle>, task: F) -> JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match on {
        Some(runtime) => runtime.spawn(task),
        None => tokio::spawn(task),
    }
}

// At the cap, a client that arrives makes room: the loop closes connections that wait on
// their clients (idle keep-alive, slow heads and handshakes), the longest-waiting first, so
// slow or idle clients cannot hold every slot; connections with a request in progress are
// never closed. When every connection is busy, the loop holds the client it accepted and
// stops accepting (backpressure: the next ones wait in the kernel's accept queue) until a
// connection closes or goes idle.
async fn accept(port: Port, listener: TcpListener, mut token: DrainToken, lot: Arc<conn::PortLot>) {
    let Port {
        shared,
        key,
        tls,
        slots,
    } = port;
    let Slots {
        permits,
        reclaim,
        batch,
    } = slots;
    let port = key.port;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = token.draining() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let permit = match admit(&shared, key, &permits) {
                    Some(p) => p,
                    None => {
                        let permit = tokio::select! {
                            biased;
                            _ = token.draining() => break,
                            p = make_room(&shared, key, &permits, &reclaim, batch) => p,
                        };
                        match permit {
                            Some(p) => p,
                            None => break,
                        }
                    }
                };
                // Spawned as it is, holding the permit itself: small, since `conn::serve`
                // boxes the serving states.
                tokio::spawn(conn::serve(
                    shared.clone(),
                    tcp,
                    peer,
                    key,
                    tls.clone(),
                    token.clone(),
                    conn::Admitted {
                        reclaim: reclaim.register(),
                        slot: permit,
                        lot: lot.clone(),
                    },
                ));
            }
            Err(error) => {
                // Out of file descriptors and the like: back off briefly instead of
                // spinning; the listener stays open.
                tracing::warn!(port, %error, "accept failed");
                tokio::select! {
                    _ = token.draining() => break,
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        }
    }
    tracing::debug!(port, "stopped accepting");
}

/// The port's ClientTrafficPolicy `connection.connectionLimit`, when it is below
/// `--max-connections` (decided at translation; read once per accepted connection).
pub(super) fn policy_limit(shared: &Shared, key: PortKey) -> Option<usize> {
    let snapshot = shared.snapshot.load();
    let limit = snapshot.port_at(key)?.client.as_ref()?.connection_limit?;
    usize::try_from(limit)
        .ok()
        .filter(|l| *l < shared.config.limits.max_connections)
}

/// A slot for a new connection, if the port is under its limits now.
fn admit(
    shared: &Shared,
    key: PortKey,
    permits: &Arc<Semaphore>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Some(limit) = policy_limit(shared, key) {
        let total = shared.config.limits.max_connections.max(1);
        if total.saturating_sub(permits.available_permits()) >= limit {
            return None;
        }
    }
    permits.clone().try_acquire_owned().ok()
}

/// At the cap with a client accepted: closes the connections that have waited on their clients
/// longest, and waits for a slot; while every connection is busy, looks again every
/// [`RECLAIM_RETRY`] for one that has gone idle. `None` once the semaphore is closed.
async fn make_room(
    shared: &Shared,
    key: PortKey,
    permits: &Arc<Semaphore>,
    reclaim: &Reclaim,
    batch: usize,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let port = key.port;
    let mut warned = false;
    loop {
        // A policy's smaller limit closes a batch in proportion to it.
        let batch = policy_limit(shared, key).map_or(batch, |l| reclaim_batch(l).min(batch));
        let closed = reclaim.close_longest_waiting(batch);
        if closed > 0 {
            tracing::debug!(
                port,
                closed,
                "connection limit reached; closed connections waiting on their clients"
            );
        } else if !warned {
            warned = true;
            let limit = policy_limit(shared, key).unwrap_or(shared.config.limits.max_connections);
            tracing::warn!(
                port,
                limit,
                "connection limit reached with every connection busy; new connections wait"
            );
        }
        if policy_limit(shared, key).is_some() {
            // A policy's limit is below the semaphore's: look again after a while.
            tokio::time::sleep(RECLAIM_RETRY).await;
            if permits.is_closed() {
                return None;
            }
            if let Some(p) = admit(shared, key, permits) {
                return Some(p);
            }
            continue;
        }
        tokio::select! {
            p = permits.clone().acquire_owned() => return p.ok(),
            _ = tokio::time::sleep(RECLAIM_RETRY) => {}
        }
    }
}

/// How often a full accept loop looks for a connection gone idle.
const RECLAIM_RETRY: Duration = Duration::from_millis(50);

/// A listening socket on `addr`, as `TcpListener::bind` makes it (`SO_REUSEADDR`, a backlog
/// of 1024), with `SO_REUSEPORT` when `reuse_port`: then another process may bind the same
/// address while this one listens, and the kernel spreads new connections over both; with the
/// sysctl `net.ipv4.tcp_migrate_req=1` (Linux 5.14+), connections waiting in the accept queue
/// of a socket that closes move to the other instead of being reset.
pub fn listen(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    bound(addr, reuse_port)?.listen(1024)
}

/// A UDP socket bound to `addr` (`SO_REUSEPORT` when `reuse_port`: a new pier started beside
/// this one shares the port, as its TCP ports).
pub fn bind_udp(addr: SocketAddr, reuse_port: bool) -> std::io::Result<tokio::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    tokio::net::UdpSocket::from_std(socket.into())
}

/// A socket bound to `addr` (`SO_REUSEADDR`, and `SO_REUSEPORT` when `reuse_port`), not yet
/// listening. Without `reuse_port` it fails with `AddrInUse` when anyone listens there.
pub(super) fn bound(addr: SocketAddr, reuse_port: bool) -> std::io::Result<tokio::net::TcpSocket> {
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
