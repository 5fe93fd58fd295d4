//! Opening one upstream connection: TCP (nodelay, connect timeout), then TLS when the backend
//! has it, then hyper's HTTP/1.1 or HTTP/2 client handshake.
//!
//! ```text
//! TCP ──(BackendTls::Plain)──────────────────────────────> h2c ? HTTP/2 : HTTP/1.1
//!     └─(BackendTls::Tls)── rustls handshake (SNI, ALPN) ─> ALPN "h2" ? HTTP/2 : HTTP/1.1
//! ```
//!
//! Nothing is written on a TLS connection before the handshake completes: the first bytes on
//! the wire are the ClientHello (no PROXY header, no preamble). One deadline
//! (`ProxyConfig::connect_timeout`) covers TCP and TLS together. The rustls config is the one of
//! the request's snapshot, so a rotated certificate or bundle is used by the next connection.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

use crate::model::{AppProtocol, BackendId, ConnectionSlot, UpstreamTls};
use crate::proxy::body::ProxyBody;
use crate::proxy::error::{BoxError, ConnectReason, ProxyError, TlsFailure, classify_tls};
use crate::proxy::observe::metrics::{ProxyMetrics, Transport, UpstreamProtocol};

/// An upstream socket: TCP, or rustls over TCP.
pub type Stream = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// hyper's request senders over an upstream connection, made by the handshake.
pub type H1Sender = http1::SendRequest<ProxyBody>;
pub type H2Sender = http2::SendRequest<ProxyBody>;

const ALPN_H2: &[u8] = b"h2";

/// A new connection, ready for requests.
pub enum Conn {
    Http1(H1Sender),
    Http2(H2Sender),
}

/// How a connect attempt failed, kept so that requests queued behind a shared HTTP/2 connect
/// fail the same way without trying again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    Connect(ConnectReason),
    Tls(TlsFailure),
}

pub struct Connector {
    connect_timeout: Duration,
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    metrics: Arc<ProxyMetrics>,
}

/// What one connect needs to know.
pub struct Dial<'a> {
    pub backend: &'a BackendId,
    pub addr: SocketAddr,
    pub protocol: AppProtocol,
    pub tls: Option<&'a UpstreamTls>,
    /// The rustls config to connect with in place of `tls.config`: a pool entry's copy with
    /// the endpoint's own sessions ([`Entry::tls_config`](super::pool::Entry::tls_config)).
    /// Unpooled streams (TLSRoute) use `tls.config` and its cache by server name.
    pub tls_config: Option<Arc<rustls::ClientConfig>>,
    /// The backend's own connect timeout, else the connector's.
    pub connect_timeout: Option<Duration>,
}

#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct ConnectError {
    pub reason: ConnectReason,
    #[source]
    source: io::Error,
}

#[derive(Debug, thiserror::Error)]
#[error("the TLS handshake did not finish within the connect timeout")]
struct HandshakeTimeout;

#[derive(Debug, thiserror::Error)]
#[error("a shared connection attempt to this endpoint failed")]
struct SharedAttemptFailed;

// === impl Connector ===

impl Connector {
    pub fn new(connect_timeout: Duration, metrics: Arc<ProxyMetrics>) -> Self {
        let h1 = http1::Builder::new();
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new());
        Self {
            connect_timeout,
            h1,
            h2,
            metrics,
        }
    }

    /// A connection for requests; `slot` (the backend's `maxConnections` place) stays with
    /// it until it closes.
    pub async fn connect(
        &self,
        dial: &Dial<'_>,
        slot: Option<ConnectionSlot>,
    ) -> Result<Conn, ProxyError> {
        let (io, h2) = self.connect_stream(dial).await?;
        let transport = dial
            .tls
            .map_or(Transport::Plain, |t| Transport::of_mode(t.mode));
        self.handshake(io, h2, transport, slot).await
    }

    /// TCP, then TLS when the backend has it: the socket, and whether it speaks HTTP/2 (h2c
    /// by `appProtocol`, or `h2` chosen by ALPN).
    pub async fn connect_stream(&self, dial: &Dial<'_>) -> Result<(Stream, bool), ProxyError> {
        let deadline = Instant::now() + dial.connect_timeout.unwrap_or(self.connect_timeout);
        let tcp = tcp(dial.addr, deadline).await?;
        match dial.tls {
            None => Ok((Stream::Left(tcp), dial.protocol == AppProtocol::H2c)),
            Some(tls) => {
                let stream = self.tls(dial, tls, tcp, deadline).await?;
                let h2 = stream.get_ref().1.alpn_protocol() == Some(ALPN_H2);
                Ok((Stream::Right(Box::new(stream)), h2))
            }
        }
    }

    async fn tls(
        &self,
        dial: &Dial<'_>,
        tls: &UpstreamTls,
        tcp: TcpStream,
        deadline: Instant,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ProxyError> {
        let config = dial.tls_config.as_ref().unwrap_or(&tls.config);
        let connector = TlsConnector::from(config.clone());
        let name = tls.server_name.clone();
        // Upgrades need HTTP/1.1: keys for them never offer h2.
        let handshake = if dial.protocol == AppProtocol::WebSocket && offers_h2(tls) {
            let alpn = tls
                .config
                .alpn_protocols
                .iter()
                .filter(|p| *p != ALPN_H2)
                .cloned()
                .collect();
            connector.with_alpn(alpn).connect(name, tcp)
        } else {
            connector.connect(name, tcp)
        };
        let result = match tokio::time::timeout_at(deadline, handshake).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err((tls_failure(&e), BoxError::from(e))),
            Err(_) => Err((TlsFailure::Timeout, BoxError::from(HandshakeTimeout))),
        };
        let failure = result.as_ref().err().map(|(reason, _)| *reason);
        self.metrics.tls_handshake(dial.backend, failure);
        result.map_err(|(reason, source)| ProxyError::TlsHandshake { reason, source })
    }

    /// hyper's client handshake on an open socket; spawns its connection task, which holds
    /// `slot` until the connection closes.
    pub async fn handshake(
        &self,
        io: Stream,
        h2: bool,
        tls: Transport,
        slot: Option<ConnectionSlot>,
    ) -> Result<Conn, ProxyError> {
        let io = TokioIo::new(io);
        if h2 {
            let (tx, conn) = self.h2.handshake(io).await.map_err(hyper_failed)?;
            let open = (self.metrics.upstream_opened(UpstreamProtocol::Http2, tls)).holding(slot);
            tokio::spawn(async move {
                if let Err(error) = conn.await {
                    tracing::debug!(%error, "upstream HTTP/2 connection failed");
                }
                drop(open);
            });
            Ok(Conn::Http2(tx))
        } else {
            let (tx, conn) = self.h1.handshake(io).await.map_err(hyper_failed)?;
            let open = (self.metrics.upstream_opened(UpstreamProtocol::Http1, tls)).holding(slot);
            tokio::spawn(async move {
                if let Err(error) = conn.with_upgrades().await {
                    tracing::debug!(%error, "upstream HTTP/1.1 connection failed");
                }
                drop(open);
            });
            Ok(Conn::Http1(tx))
        }
    }
}

/// Whether the backend's rustls config offers `h2` by ALPN.
pub fn offers_h2(tls: &UpstreamTls) -> bool {
    tls.config.alpn_protocols.iter().any(|p| p == ALPN_H2)
}

async fn tcp(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, ProxyError> {
    let result = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::from(io::ErrorKind::TimedOut)),
    };
    let tcp = result.map_err(|e| {
        let e = ConnectError::new(e);
        ProxyError::Connect {
            reason: e.reason,
            source: Box::new(e),
        }
    })?;
    // Small requests and responses must not wait for Nagle.
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}

fn hyper_failed(e: hyper::Error) -> ProxyError {
    ProxyError::Connect {
        reason: ConnectReason::Other,
        source: Box::new(e),
    }
}

/// Why a handshake failed, from what tokio-rustls returned.
fn tls_failure(e: &io::Error) -> TlsFailure {
    match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
        Some(e) => classify_tls(e),
        // The peer closed (or reset) instead of answering the ClientHello: a plaintext server
        // giving up on what it read as a bad request.
        None if matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        ) =>
        {
            TlsFailure::NotTls
        }
        None => TlsFailure::Other,
    }
}

// === impl Failed ===

impl Failed {
    pub fn of(e: &ProxyError) -> Self {
        match e {
            ProxyError::TlsHandshake { reason, .. } => Self::Tls(*reason),
            ProxyError::Connect { reason, .. } => Self::Connect(*reason),
            _ => Self::Connect(ConnectReason::Other),
        }
    }

    /// The error a request queued behind the failed attempt answers with.
    pub fn to_error(self) -> ProxyError {
        match self {
            Self::Connect(reason) => ProxyError::Connect {
                reason,
                source: Box::new(SharedAttemptFailed),
            },
            Self::Tls(reason) => ProxyError::TlsHandshake {
                reason,
                source: Box::new(SharedAttemptFailed),
            },
        }
    }
}

// === impl ConnectError ===

impl ConnectError {
    pub fn new(source: io::Error) -> Self {
        let reason = match source.kind() {
            io::ErrorKind::ConnectionRefused => ConnectReason::Refused,
            io::ErrorKind::TimedOut => ConnectReason::Timeout,
            _ => ConnectReason::Other,
        };
        Self { reason, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::CertificateError;

    #[test]
    fn connect_errors_are_classified_by_io_kind() {
        let of = |k| ConnectError::new(io::Error::from(k)).reason;
        assert_eq!(of(io::ErrorKind::ConnectionRefused), ConnectReason::Refused);
        assert_eq!(of(io::ErrorKind::TimedOut), ConnectReason::Timeout);
        assert_eq!(of(io::ErrorKind::AddrNotAvailable), ConnectReason::Other);
    }

    #[test]
    fn rustls_errors_map_to_bounded_reasons() {
        use rustls::Error as E;
        let cert = |c| classify_tls(&E::InvalidCertificate(c));
        assert_eq!(cert(CertificateError::UnknownIssuer), TlsFailure::UnknownCa);
        assert_eq!(cert(CertificateError::Expired), TlsFailure::Expired);
        assert_eq!(cert(CertificateError::NotValidYet), TlsFailure::Expired);
        assert_eq!(
            cert(CertificateError::NotValidForName),
            TlsFailure::SanMismatch
        );
        assert_eq!(
            cert(CertificateError::ApplicationVerificationFailure),
            TlsFailure::SanMismatch
        );
        assert_eq!(cert(CertificateError::Revoked), TlsFailure::Other);
        let mismatch =
            rustls::OtherError(std::sync::Arc::new(crate::tls::client::IdentityMismatch));
        assert_eq!(
            cert(CertificateError::Other(mismatch)),
            TlsFailure::IdentityMismatch
        );
        assert_eq!(
            classify_tls(&E::InvalidMessage(
                rustls::InvalidMessage::InvalidContentType
            )),
            TlsFailure::NotTls
        );
        assert_eq!(classify_tls(&E::DecryptError), TlsFailure::Other);
    }

    #[test]
    fn io_errors_from_the_handshake_are_classified() {
        let wrapped = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert_eq!(tls_failure(&wrapped), TlsFailure::UnknownCa);
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(tls_failure(&eof), TlsFailure::NotTls);
        let other = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(tls_failure(&other), TlsFailure::Other);
    }
}
