//! A small echo backend for `pier demo` and the tests: HTTP/1.1 and h2c (prior knowledge) on
//! one port, answering every request with a JSON description of what it received.
//!
//! Paths: `/status/<code>` answers that status; `/delay/<ms>` waits (at most a minute) before
//! answering; a WebSocket upgrade is accepted and every text or binary message is echoed.
//! A gRPC call (`content-type: application/grpc`, any `/<service>/<method>`) is answered as
//! gRPC: one message holding the JSON description, then `grpc-status: 0` in the trailers.
//! Each request is also recorded (the most recent [`LOG_LIMIT`]) so tests can await and
//! inspect what arrived, e.g. a mirrored request.
//!
//! [`spawn_recording`] is a raw TCP listener that records every byte it receives and never
//! answers, for tests that must prove nothing (or exactly what) was sent.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

mod files;
pub use files::{TlsFiles, server_config as files_server_config};

/// How many recent requests an [`EchoServer`] keeps.
pub const LOG_LIMIT: usize = 1024;
const MAX_DELAY: Duration = Duration::from_secs(60);

/// The JSON body of every echo response, and what [`EchoServer::requests`] returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EchoRequest {
    pub backend: String,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// The Host header, else the HTTP/2 `:authority`.
    pub host: String,
    /// The request target's authority: the HTTP/2 `:authority` (or an HTTP/1.1 absolute-form
    /// target's).
    #[serde(default)]
    pub authority: Option<String>,
    /// Lower-case names, values in arrival order.
    pub headers: BTreeMap<String, Vec<String>>,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub protocol: String,
    pub body_bytes: u64,
    /// Arrived over TLS with a client certificate the server verified ([`spawn_tls`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_certificate_verified: bool,
}

/// A running echo server; stops (with its connections) when dropped.
pub struct EchoServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

/// A TCP listener that records what it receives and never answers; stops when dropped.
pub struct RecordingServer {
    pub addr: SocketAddr,
    bytes: Arc<watch::Sender<Vec<u8>>>,
    task: JoinHandle<()>,
}

struct State {
    name: String,
    log: Mutex<VecDeque<EchoRequest>>,
    count: watch::Sender<u64>,
    connections: AtomicU64,
    /// TLS echoes: connections whose first byte does not start a TLS handshake record.
    plaintext: AtomicU64,
}

pub async fn spawn(addr: SocketAddr, name: &str) -> std::io::Result<EchoServer> {
    start(addr, name, None).await
}

/// [`spawn`] behind TLS: `tls` decides the certificate and whether (and whom) clients must
/// authenticate; a config with a client-certificate verifier makes this an mTLS workload.
pub async fn spawn_tls(
    addr: SocketAddr,
    name: &str,
    tls: Arc<rustls::ServerConfig>,
) -> std::io::Result<EchoServer> {
    start(addr, name, Some(tokio_rustls::TlsAcceptor::from(tls))).await
}

async fn start(
    addr: SocketAddr,
    name: &str,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> std::io::Result<EchoServer> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(State {
        name: name.to_string(),
        log: Mutex::new(VecDeque::new()),
        count: watch::channel(0).0,
        connections: AtomicU64::new(0),
        plaintext: AtomicU64::new(0),
    });
    let task = tokio::spawn(accept(listener, state.clone(), tls));
    Ok(EchoServer { addr, state, task })
}

pub async fn spawn_recording(addr: SocketAddr) -> std::io::Result<RecordingServer> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let bytes = Arc::new(watch::channel(Vec::new()).0);
    let sink = bytes.clone();
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((mut tcp, _)) = listener.accept().await {
            let sink = sink.clone();
            conns.spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = tcp.read(&mut buf).await {
                    sink.send_modify(|v| v.extend_from_slice(&buf[..n]));
                }
            });
        }
    });
    Ok(RecordingServer { addr, bytes, task })
}

// === impl EchoServer ===

impl EchoServer {
    /// The most recent requests, oldest first.
    pub fn requests(&self) -> Vec<EchoRequest> {
        let log = self
            .state
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        log.iter().cloned().collect()
    }

    /// TLS echoes: connections that began with anything but a TLS handshake record (each
    /// also reported on stderr), e.g. a proxy that fell back to plaintext.
    pub fn plaintext_connections(&self) -> u64 {
        self.state.plaintext.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::Relaxed)
    }

    /// Requests received so far.
    pub fn count(&self) -> u64 {
        *self.state.count.borrow()
    }

    /// Waits until at least `n` requests have arrived (callers bound it with a timeout).
    pub async fn wait_for(&self, n: u64) {
        let mut rx = self.state.count.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// === impl RecordingServer ===

impl RecordingServer {
    pub fn received(&self) -> Vec<u8> {
        self.bytes.borrow().clone()
    }

    /// Waits until at least `n` bytes have arrived (callers bound it with a timeout).
    pub async fn wait_for_bytes(&self, n: usize) {
        let mut rx = self.bytes.subscribe();
        let _ = rx.wait_for(|v| v.len() >= n).await;
    }
}

impl Drop for RecordingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// === serving ===

async fn accept(listener: TcpListener, state: Arc<State>, tls: Option<tokio_rustls::TlsAcceptor>) {
    // Connections live in the set, so aborting this task closes them too.
    let mut conns = JoinSet::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().keep_alive(true);
    let builder = Arc::new(builder);
    loop {
        tokio::select! {
            r = listener.accept() => {
                let Ok((tcp, peer)) = r else { continue };
                state.connections.fetch_add(1, Ordering::Relaxed);
                let _ = tcp.set_nodelay(true);
                let state = state.clone();
                let builder = builder.clone();
                let tls = tls.clone();
                conns.spawn(async move {
                    match tls {
                        None => serve(&builder, TokioIo::new(tcp), state, false).await,
                        Some(acceptor) => {
                            // 22: a TLS handshake record. Anything else is plaintext.
                            let mut first = [0u8; 1];
                            if matches!(tcp.peek(&mut first).await, Ok(1..)) && first[0] != 22 {
                                state.plaintext.fetch_add(1, Ordering::Relaxed);
                                eprintln!("echo {}: plaintext connection from {peer}", state.name);
                            }
                            let Ok(stream) = acceptor.accept(tcp).await else { return };
                            let verified = stream.get_ref().1.peer_certificates().is_some();
                            serve(&builder, TokioIo::new(stream), state, verified).await;
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// One connection; `verified`: it arrived over TLS with a verified client certificate.
async fn serve<I>(builder: &auto::Builder<TokioExecutor>, io: I, state: Arc<State>, verified: bool)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| handle(state.clone(), req, verified));
    let _ = builder.serve_connection_with_upgrades(io, svc).await;
}

type EchoBody = UnsyncBoxBody<Bytes, Infallible>;

async fn handle(
    state: Arc<State>,
    mut req: Request<Incoming>,
    client_certificate_verified: bool,
) -> Result<Response<EchoBody>, Infallible> {
    if let Some(resp) = websocket(&state, &mut req) {
        return Ok(resp.map(BodyExt::boxed_unsync));
    }
    let grpc = req
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    let (parts, body) = req.into_parts();
    let body_bytes = body
        .collect()
        .await
        .map_or(0, |b| b.to_bytes().len() as u64);
    let seen = EchoRequest {
        client_certificate_verified,
        ..describe(&state.name, &parts, body_bytes)
    };
    state.record(seen.clone());
    let mut status = StatusCode::OK;
    let mut segments = parts.uri.path().trim_start_matches('/').splitn(3, '/');
    match (segments.next(), segments.next()) {
        (Some("status"), Some(code)) => {
            if let Some(s) = code.parse().ok().and_then(|c| StatusCode::from_u16(c).ok()) {
                status = s;
            }
        }
        (Some("delay"), Some(ms)) => {
            let ms = Duration::from_millis(ms.parse().unwrap_or(0));
            tokio::time::sleep(ms.min(MAX_DELAY)).await;
        }
        _ => {}
    }
    let json = serde_json::to_vec(&seen).unwrap_or_default();
    if grpc {
        return Ok(grpc_answer(&state.name, json));
    }
    let mut resp = Response::new(Full::new(Bytes::from(json)).boxed_unsync());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(&state.name) {
        h.insert("x-echo-backend", v);
    }
    Ok(resp)
}

/// A gRPC answer: the message (length-prefixed, uncompressed), then `grpc-status: 0`.
fn grpc_answer(name: &str, message: Vec<u8>) -> Response<EchoBody> {
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(&message);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = Full::new(Bytes::from(framed))
        .with_trailers(async move { Some(Ok(trailers)) })
        .boxed_unsync();
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    if let Ok(v) = HeaderValue::from_str(name) {
        h.insert("x-echo-backend", v);
    }
    resp
}

fn describe(name: &str, parts: &http::request::Parts, body_bytes: u64) -> EchoRequest {
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (n, v) in &parts.headers {
        headers
            .entry(n.as_str().to_string())
            .or_default()
            .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
    }
    let host = parts
        .headers
        .get(header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    EchoRequest {
        backend: name.to_string(),
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        host,
        authority: parts.uri.authority().map(|a| a.to_string()),
        headers,
        protocol: format!("{:?}", parts.version),
        body_bytes,
        client_certificate_verified: false,
    }
}

/// Answers a WebSocket upgrade with 101 and echoes messages on the upgraded connection.
fn websocket(state: &Arc<State>, req: &mut Request<Incoming>) -> Option<Response<Full<Bytes>>> {
    let is_ws = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    let key = req.headers().get(header::SEC_WEBSOCKET_KEY)?;
    if !is_ws {
        return None;
    }
    let accept = derive_accept_key(key.as_bytes());
    let seen = {
        let mut head = Request::new(());
        *head.method_mut() = req.method().clone();
        *head.uri_mut() = req.uri().clone();
        *head.version_mut() = req.version();
        *head.headers_mut() = req.headers().clone();
        describe(&state.name, &head.into_parts().0, 0)
    };
    state.record(seen);
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let mut ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        while let Some(Ok(msg)) = ws.next().await {
            let echo = match msg {
                Message::Text(_) | Message::Binary(_) => msg,
                Message::Close(_) => break,
                _ => continue,
            };
            if ws.send(echo).await.is_err() {
                break;
            }
        }
    });
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    Some(resp)
}

impl State {
    fn record(&self, seen: EchoRequest) {
        {
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            if log.len() == LOG_LIMIT {
                log.pop_front();
            }
            log.push_back(seen);
        }
        self.count.send_modify(|c| *c += 1);
    }
}
