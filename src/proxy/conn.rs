//! One downstream connection: optional TLS (one deadline for the whole handshake), then the
//! HTTP/1.1 fast path (`h1`), which hands the connection to hyper-util's auto server (with
//! what it has read) as soon as a request needs it: HTTP/2 by preface (h2c prior knowledge),
//! upgrades, streamed request bodies and the rest. ALPN `h2` on TLS ports goes to hyper at
//! once. Graceful shutdown on drain either way.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::rt::{Read, Write};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::listener::DrainToken;
use super::{Shared, h1, service};
use crate::model::Protocol;

/// What the request path needs to know about the connection it arrived on.
#[derive(Debug)]
pub struct ConnInfo {
    pub port: u16,
    pub peer: SocketAddr,
    /// `peer`'s IP as an `X-Forwarded-For` entry, formatted once per connection.
    pub forwarded_for: http::HeaderValue,
    /// Upgrade tunnels take a clone so that draining waits for them too.
    pub drain: DrainToken,
}

pub async fn serve(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    port: u16,
    tls: TlsAcceptor,
    drain: DrainToken,
) {
    let _active = shared.metrics.connection(port);
    let _ = tcp.set_nodelay(true);
    // The protocol is read per connection, so a port that changes between HTTP and HTTPS
    // needs no rebinding.
    let protocol = shared.snapshot.load().port(port).map(|p| p.protocol);
    let info = Arc::new(ConnInfo {
        port,
        peer,
        forwarded_for: super::headers::forwarded_for(peer.ip()),
        drain: drain.clone(),
    });
    match protocol {
        None => {}
        Some(Protocol::Http) => serve_h1(&shared, tcp, info, drain).await,
        // Boxed, like hyper's fallback below: the TLS states (handshake, rustls connection)
        // would otherwise size every plain connection's future too.
        Some(Protocol::Https) => Box::pin(serve_tls(&shared, tcp, tls, info, drain)).await,
    }
}

async fn serve_tls(
    shared: &Arc<Shared>,
    tcp: TcpStream,
    tls: TlsAcceptor,
    info: Arc<ConnInfo>,
    mut drain: DrainToken,
) {
    let (peer, port) = (info.peer, info.port);
    let deadline = shared.config.tls_handshake_timeout;
    let handshake = tokio::select! {
        r = tokio::time::timeout(deadline, tls.accept(tcp)) => r,
        _ = drain.closed() => return,
    };
    match handshake {
        Ok(Ok(stream)) if stream.get_ref().1.alpn_protocol() == Some(b"h2") => {
            serve_http(shared, TokioIo::new(stream), info, drain).await
        }
        Ok(Ok(stream)) => serve_h1(shared, stream, info, drain).await,
        Ok(Err(error)) => tracing::debug!(%peer, port, %error, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, port, "TLS handshake timed out"),
    }
}

/// The fast path first; hyper for the rest of the connection if a request needs it.
async fn serve_h1<I>(shared: &Arc<Shared>, io: I, info: Arc<ConnInfo>, mut drain: DrainToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match h1::serve(shared, io, &info, &mut drain).await {
        h1::Served::Closed => {}
        h1::Served::Fallback(io) => {
            Box::pin(serve_http(shared, TokioIo::new(io), info, drain)).await
        }
    }
}

async fn serve_http<I>(shared: &Arc<Shared>, io: I, info: Arc<ConnInfo>, mut drain: DrainToken)
where
    I: Read + Write + Unpin + Send + 'static,
{
    let svc_shared = shared.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let shared = svc_shared.clone();
        let info = info.clone();
        async move { Ok::<_, Infallible>(service::handle(shared, info, req).await) }
    });
    let conn = shared.server.serve_connection_with_upgrades(io, svc);
    let mut conn = std::pin::pin!(conn);
    // The connection first: one handed over by the fast path while draining has its request
    // already buffered, and hyper must read it before a graceful shutdown (which would cancel
    // a connection still detecting its protocol).
    let result = tokio::select! {
        biased;
        r = conn.as_mut() => r,
        _ = drain.draining() => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = conn.as_mut() => r,
                _ = drain.closed() => Ok(()),
            }
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "connection ended with an error");
    }
}
