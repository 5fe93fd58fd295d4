//! Test clients over loopback: one fresh connection per request, redirects never followed.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use pier::echo::EchoRequest;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// The echo server's description of the request it received.
    pub fn echo(&self) -> EchoRequest {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not an echo body ({e}): {:?} {:?}", self.status, self.body))
    }

    pub fn backend(&self) -> String {
        self.echo().backend
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path` with `Host: host`.
pub fn get(host: &str, path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .header(http::header::HOST, host)
        .body(Full::default())
        .unwrap()
}

/// HTTP/1.1 over a fresh connection.
pub async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> Resp {
    let tcp = TcpStream::connect(addr).await.unwrap();
    send_h1_on(tcp, req).await
}

pub async fn send_h1_on<T>(io: T, req: Request<Full<Bytes>>) -> Resp
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut tx, conn) = http1::handshake(TokioIo::new(io)).await.unwrap();
    tokio::spawn(conn);
    collect(tx.send_request(req).await.unwrap()).await
}

/// HTTP/2 with prior knowledge over a fresh connection; `req` needs an absolute URI (its
/// authority becomes `:authority`).
pub async fn send_h2(addr: SocketAddr, req: Request<Full<Bytes>>) -> Resp {
    let tcp = TcpStream::connect(addr).await.unwrap();
    send_h2_on(tcp, req).await
}

pub async fn send_h2_on<T>(io: T, req: Request<Full<Bytes>>) -> Resp
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut tx, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    collect(tx.send_request(req).await.unwrap()).await
}

pub async fn collect(resp: http::Response<hyper::body::Incoming>) -> Resp {
    let (parts, body) = resp.into_parts();
    Resp {
        status: parts.status,
        version: parts.version,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

/// TLS to `addr` with SNI `sni`, trusting `config`'s roots.
pub async fn connect_tls(
    addr: SocketAddr,
    sni: &str,
    config: Arc<rustls::ClientConfig>,
) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(sni.to_string()).unwrap();
    TlsConnector::from(config).connect(name, tcp).await.unwrap()
}
