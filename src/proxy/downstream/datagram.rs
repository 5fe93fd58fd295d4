//! UDP ports (listener protocol UDP, UDPRoute, GEP-2645). A UDP port is one socket and one
//! task that reads every datagram; each client address is a flow:
//!
//! ```text
//! datagram from a new client ─> listener ─> oldest route ─> weighted backendRef ─> endpoint
//!   a socket of pier's own, connected to that endpoint, carries the client's datagrams there
//!   and the endpoint's replies back, sent from the port's socket (the address the client
//!   sent to, so a connected client socket accepts them)
//! ```
//!
//! A flow keeps its endpoint until it idles for `Limits::udp_idle_timeout` (no datagram either
//! way, 60 s by default); a port keeps at most `Limits::max_udp_flows` (16 384), and a new
//! client past them is dropped (counted as `overflow`) until one idles out, so spoofed source addresses cannot make pier hold sockets without
//! bound. A datagram that cannot be sent at once is dropped, as UDP may. A drain ends the flows
//! at once: datagrams have no requests to finish. Nothing is sent over TLS: a backend with
//! mesh mTLS or a BackendTLSPolicy gets no datagrams (fail closed; translation does not attach
//! a meshed UDPRoute in the first place).
//!
//! A port bound on a wildcard address (the default `--listen-host`) replies from the address
//! the kernel picks for the client: on a host with several addresses, bind the one clients
//! use (`--listen-host`, or a Gateway address) so that replies come from it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::stream::plan;
use crate::model::{ListenerId, PortKey};
use crate::proxy::drain::DrainToken;
use crate::proxy::exchange::Shared;
use crate::proxy::observe::metrics::{StreamMode, StreamResult};

/// The largest UDP payload (IPv4 and IPv6 without jumbograms).
const MAX_DATAGRAM: usize = 65_535;

/// One client's flow.
struct Flow {
    /// Connected to the endpoint.
    up: Arc<UdpSocket>,
    state: Arc<FlowState>,
}

/// What the port's task and the flow's task share.
struct FlowState {
    /// Milliseconds since the port's start, at the last datagram either way.
    last: AtomicU64,
    /// Its task ended (idle, or the endpoint's socket failed).
    ended: AtomicBool,
}

impl Flow {
    fn ended(&self) -> bool {
        self.state.ended.load(Ordering::Relaxed)
    }
}

/// Serves the UDP port `key` on `socket` until the drain starts.
pub async fn serve(shared: Arc<Shared>, key: PortKey, socket: UdpSocket, mut drain: DrainToken) {
    let socket = Arc::new(socket);
    let start = Instant::now();
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let limits = &shared.config.limits;
    let (idle, max_flows) = (limits.udp_idle_timeout, limits.max_udp_flows);
    let mut sweep = tokio::time::interval(idle / 4);
    loop {
        let (n, peer) = tokio::select! {
            biased;
            () = drain.draining() => return,
            _ = sweep.tick() => {
                flows.retain(|_, f| !f.ended());
                continue;
            }
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(error) => {
                    // An ICMP error for an earlier reply, or a transient failure.
                    tracing::debug!(port = %key, %error, "receiving a datagram failed");
                    continue;
                }
            },
        };
        let datagram = &buf[..n];
        let now = millis(start);
        if let Some(flow) = flows.get(&peer).filter(|f| !f.ended()) {
            flow.state.last.store(now, Ordering::Relaxed);
            // UDP may drop: a full send buffer drops this datagram, as the network would.
            let _ = flow.up.try_send(datagram);
            continue;
        }
        if flows.len() >= max_flows {
            flows.retain(|_, f| !f.ended());
        }
        // (An ended flow of this client's is gone now: it is not one of the bound.)
        if flows.len() >= max_flows {
            let snapshot = shared.snapshot.load();
            let listener = snapshot.port_at(key).and_then(|p| p.listener(""));
            shared.metrics.stream(
                listener.map(|l| &l.id),
                StreamMode::Udp,
                StreamResult::Overflow,
            );
            continue;
        }
        match open(&shared, key, peer, &socket, &drain, start).await {
            Ok(flow) => {
                // Awaited once: a new socket's first send waits for its first readiness event
                // (`try_send` would drop the datagram until then).
                if let Err(error) = flow.up.send(datagram).await {
                    tracing::debug!(%peer, %error, "sending a flow's first datagram failed");
                }
                flows.insert(peer, flow);
            }
            Err((listener, result)) => {
                tracing::debug!(%peer, port = %key, ?result, "UDP flow not routed");
                shared
                    .metrics
                    .stream(listener.as_ref(), StreamMode::Udp, result);
            }
        }
    }
}

/// A new flow for `peer`: the listener and route for no name, the weighted backendRef and its
/// endpoint, a socket connected to it, and the task that sends its replies back.
async fn open(
    shared: &Arc<Shared>,
    key: PortKey,
    peer: SocketAddr,
    socket: &Arc<UdpSocket>,
    drain: &DrainToken,
    start: Instant,
) -> Result<Flow, (Option<ListenerId>, StreamResult)> {
    let snapshot = shared.snapshot.load_full();
    let plan = plan(shared, &snapshot, key, peer, "")
        .map_err(|(listener, result)| (listener.map(|l| l.id.clone()), result))?;
    let listener = plan.listener.id.clone();
    if plan.tls.is_some() {
        // No TLS for datagrams; never plaintext to a backend that asks for TLS.
        return Err((Some(listener), StreamResult::NoBackend));
    }
    let addr = plan.endpoint.addr;
    let local: IpAddr = match addr {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let up = match UdpSocket::bind((local, 0)).await {
        Ok(up) => up,
        Err(error) => {
            tracing::debug!(%addr, %error, "binding a UDP socket for a flow failed");
            return Err((Some(listener), StreamResult::ConnectFailed));
        }
    };
    if let Err(error) = up.connect(addr).await {
        tracing::debug!(%addr, %error, "connecting a UDP socket to the endpoint failed");
        return Err((Some(listener), StreamResult::ConnectFailed));
    }
    let up = Arc::new(up);
    let state = Arc::new(FlowState {
        last: AtomicU64::new(millis(start)),
        ended: AtomicBool::new(false),
    });
    let in_flight = shared.in_flight(&snapshot, plan.backend, plan.endpoint);
    let task = Replies {
        shared: shared.clone(),
        idle: shared.config.limits.udp_idle_timeout,
        up: up.clone(),
        down: socket.clone(),
        peer,
        state: state.clone(),
        start,
    };
    let drain = drain.clone();
    tokio::spawn(async move {
        task.run(drain).await;
        drop(in_flight);
        task.shared
            .metrics
            .stream(Some(&listener), StreamMode::Udp, StreamResult::Relayed);
    });
    Ok(Flow { up, state })
}

/// A flow's task: the endpoint's datagrams back to the client, until the flow idles or the
/// drain starts.
struct Replies {
    shared: Arc<Shared>,
    up: Arc<UdpSocket>,
    down: Arc<UdpSocket>,
    peer: SocketAddr,
    state: Arc<FlowState>,
    start: Instant,
    idle: Duration,
}

impl Replies {
    async fn run(&self, mut drain: DrainToken) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let idle_ms = self.idle.as_millis() as u64;
        loop {
            let deadline = self.start
                + Duration::from_millis(self.state.last.load(Ordering::Relaxed) + idle_ms);
            tokio::select! {
                biased;
                () = drain.draining() => break,
                () = tokio::time::sleep_until(deadline) => {
                    // The client may have sent since the deadline was computed.
                    if millis(self.start) >= self.state.last.load(Ordering::Relaxed) + idle_ms {
                        break;
                    }
                }
                r = self.up.recv(&mut buf) => match r {
                    Ok(n) => {
                        self.state.last.store(millis(self.start), Ordering::Relaxed);
                        if let Err(error) = self.down.send_to(&buf[..n], self.peer).await {
                            tracing::debug!(peer = %self.peer, %error, "a reply was not sent");
                        }
                    }
                    // ICMP port unreachable from the endpoint: the next datagram may find it.
                    Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {}
                    Err(error) => {
                        tracing::debug!(peer = %self.peer, %error, "a UDP flow's socket failed");
                        break;
                    }
                },
            }
        }
        self.state.ended.store(true, Ordering::Relaxed);
    }
}

fn millis(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}
