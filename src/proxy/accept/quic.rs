//! HTTPS ports' QUIC endpoints (HTTP/3): the port's number over UDP, its certificates and
//! client validation from the current snapshot (the same resolver and verifier as its TCP
//! side), TLS 1.3 with ALPN `h3` and no early data; each connection then goes to
//! `downstream::h3`.
//!
//! ```text
//! Initial ─> over the connection cap: refused (CONNECTION_REFUSED)
//!         ─> many handshakes under way and the address unproven: Retry (a token round trip;
//!            a flood of spoofed Initials costs pier no state)
//!         ─> handshake (within --tls-handshake-timeout) ─> ConnInfo (SNI, client identity)
//!         ─> downstream::h3::serve
//! ```
//!
//! One endpoint per port in the process (not one per worker): QUIC's connection IDs and
//! migration need every packet of a connection at the socket that knows it. A drain stops new
//! connections at once (the endpoint refuses them) and asks each connection to finish
//! (`GOAWAY`); the endpoint stays until the last one has closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::model::{PortKey, TlsProfile};
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::downstream::h3;
use crate::proxy::drain::DrainToken;
use crate::proxy::error::DownstreamTlsFailure;
use crate::proxy::exchange::Shared;
use crate::tls::server::{Carries, PortConfig, server_config};

/// Streams a client may have open at once: as many as on HTTP/2 (`MAX_CONCURRENT_STREAMS`).
const MAX_BIDI_STREAMS: u32 = crate::proxy::config::MAX_CONCURRENT_STREAMS;
/// Unidirectional streams: HTTP/3 uses three per side (control, QPACK encoder and decoder);
/// the rest are for reserved (grease) types clients may open.
const MAX_UNI_STREAMS: u32 = 8;
/// What a client may have in flight to pier, per stream and per connection (bytes not yet
/// read by the request path): the memory one connection can make pier hold.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;

/// The QUIC server config of an HTTPS port: pier's TLS config for QUIC under `profile` (the
/// port's HTTP/3 listeners' settings), with pier's transport limits.
pub fn server_config_for(
    on: &PortConfig,
    profile: &TlsProfile,
    idle_timeout: Duration,
) -> std::io::Result<quinn::ServerConfig> {
    let tls = server_config(on, Carries::Quic, profile).map_err(std::io::Error::other)?;
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(std::io::Error::other)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(MAX_BIDI_STREAMS.into())
        .max_concurrent_uni_streams(MAX_UNI_STREAMS.into())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into())
        .max_idle_timeout(quinn::IdleTimeout::try_from(idle_timeout).ok());
    config.transport_config(Arc::new(transport));
    // Clients may move (a phone from Wi-Fi to mobile data): quinn validates the new path.
    config.migration(true);
    Ok(config)
}

/// The QUIC endpoint of the HTTPS port `key` on `socket`.
pub fn endpoint(
    socket: tokio::net::UdpSocket,
    config: quinn::ServerConfig,
) -> std::io::Result<quinn::Endpoint> {
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("QUIC needs the tokio runtime"))?;
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(config),
        socket.into_std()?,
        runtime,
    )
}

/// Accepts QUIC connections on `endpoint` for the HTTPS port `key` until the drain starts.
pub async fn accept(
    shared: Arc<Shared>,
    key: PortKey,
    endpoint: quinn::Endpoint,
    mut token: DrainToken,
) {
    let limits = &shared.config.limits;
    let max = limits.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max));
    let handshaking = Arc::new(AtomicUsize::new(0));
    let port = key.port;
    loop {
        let incoming = tokio::select! {
            biased;
            () = token.draining() => break,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
        };
        // The port's ClientTrafficPolicy limit, else --max-connections.
        let limit = super::policy_limit(&shared, key).unwrap_or(max);
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) if max - permits.available_permits() <= limit => p,
            _ => {
                shared.metrics.quic_refused(port);
                tracing::debug!(port, "QUIC connection refused: connection limit reached");
                incoming.refuse();
                continue;
            }
        };
        if !incoming.remote_address_validated()
            && incoming.may_retry()
            && handshaking.load(Ordering::Relaxed) >= limits.quic_validate_above
        {
            // No state kept: the client comes back with a token proving its address.
            shared.metrics.quic_retry(port);
            let _ = incoming.retry();
            continue;
        }
        // Counted from here, not from when its task first runs: a burst of Initials is
        // seen by the next ones in the same loop.
        let conn = Handshake {
            shared: shared.clone(),
            key,
            counted: Counted::new(&handshaking),
        };
        tokio::spawn(conn.serve(incoming, permit, token.clone()));
    }
    // New connections are refused from now on; the ones open drain.
    endpoint.set_server_config(None);
    tracing::debug!(port, "stopped accepting (QUIC)");
    // The endpoint's last packets (each connection's CONNECTION_CLOSE) go out before the
    // socket closes.
    let mut closing = token.clone();
    tokio::spawn(async move {
        let _token = closing.clone();
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        tokio::select! {
            _ = permits.acquire_many(all) => {}
            () = closing.closed() => endpoint.close(h3::NO_ERROR, b""),
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    });
}

/// One connection's handshake.
struct Handshake {
    shared: Arc<Shared>,
    key: PortKey,
    counted: Counted,
}

/// Counts a handshake under way while it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Handshake {
    async fn serve(
        self,
        incoming: quinn::Incoming,
        _permit: tokio::sync::OwnedSemaphorePermit,
        mut token: DrainToken,
    ) {
        let Self {
            shared,
            key,
            counted,
        } = self;
        let port = key.port;
        let _active = shared.metrics.connection(port);
        let peer = incoming.remote_address();
        let connecting = match incoming.accept() {
            Ok(c) => c,
            Err(error) => {
                let reason = failure(&error);
                shared.metrics.downstream_tls_handshake(port, Some(reason));
                tracing::debug!(%peer, port, %error, "QUIC handshake failed");
                return;
            }
        };
        let deadline = shared.config.tls_handshake_timeout;
        let conn = tokio::select! {
            r = tokio::time::timeout(deadline, connecting) => r,
            () = token.closed() => return,
        };
        drop(counted);
        let conn = match conn {
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) => {
                let reason = failure(&error);
                shared.metrics.downstream_tls_handshake(port, Some(reason));
                tracing::debug!(%peer, port, %error, reason = reason.as_str(), "QUIC handshake failed");
                return;
            }
            Err(_) => {
                let reason = DownstreamTlsFailure::Timeout;
                shared.metrics.downstream_tls_handshake(port, Some(reason));
                tracing::debug!(%peer, port, "QUIC handshake timed out");
                return;
            }
        };
        shared.metrics.downstream_tls_handshake(port, None);
        let info = info(&shared, key, &conn, &token);
        h3::serve(shared, conn, Arc::new(info), token).await;
    }
}

/// What the request path knows of a QUIC connection: as of a TLS connection, with the UDP
/// source as the client (behind an L4 load balancer: the balancer's address unless it keeps
/// the client's; QUIC has no PROXY protocol header).
fn info(shared: &Shared, key: PortKey, conn: &quinn::Connection, token: &DrainToken) -> ConnInfo {
    let mut info = super::conn::conn_info(shared, key, conn.remote_address(), None, token);
    let profile =
        (shared.snapshot.load().port_at(key)).and_then(|p| p.quic.as_ref()?.profile.clone());
    info.tls_profile = profile;
    info.sni = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name)
        .map(|name| crate::model::host::normalize_host(&name).into());
    info.client_identity = conn
        .peer_identity()
        .and_then(|c| {
            c.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| super::conn::client_identity(shared, key, &chain));
    info
}

/// Why a QUIC handshake failed, from the TLS alert quinn closed it with.
fn failure(e: &quinn::ConnectionError) -> DownstreamTlsFailure {
    use quinn::ConnectionError as E;
    match e {
        E::TransportError(t) => alert(u64::from(t.code)),
        E::ConnectionClosed(c) => alert(u64::from(c.error_code)),
        E::TimedOut => DownstreamTlsFailure::Timeout,
        _ => DownstreamTlsFailure::Closed,
    }
}

/// A CRYPTO_ERROR code (0x100 + the TLS alert) as the handshake failure it reports.
fn alert(code: u64) -> DownstreamTlsFailure {
    match code.checked_sub(0x100) {
        // certificate_required
        Some(116) => DownstreamTlsFailure::NoClientCertificate,
        // unknown_ca
        Some(48) => DownstreamTlsFailure::UnknownCa,
        // certificate_expired
        Some(45) => DownstreamTlsFailure::Expired,
        // bad_certificate, unsupported_certificate, certificate_revoked, certificate_unknown
        Some(42..=44 | 46) => DownstreamTlsFailure::BadCertificate,
        // unrecognized_name
        Some(112) => DownstreamTlsFailure::NoCertificate,
        Some(0..=255) => DownstreamTlsFailure::Protocol,
        _ => DownstreamTlsFailure::Closed,
    }
}
