//! Connections to backends: pooled keep-alive clients behind one small type, so the rest of
//! the proxy never names hyper-util's client.
//!
//! ```text
//! service ──> Upstream::send(protocol, connector kind, request)
//!               ├─ AppProtocol::Http1 | WebSocket ──> HTTP/1.1 client ─┐
//!               └─ AppProtocol::H2c              ──> HTTP/2 client ───┴─> Connector (Plain)
//! ```
//!
//! The pool key of hyper-util's client is the request URI's scheme and authority, and the URI
//! names the endpoint address, so each endpoint has its own pool. Everything else that changes
//! a connection is the [`ConnectorKind`]: mesh mTLS will add a variant (with the identity and
//! trust bundle it verifies), and with it one client per kind, so connections made with
//! different settings never share a pool.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::TcpStream;

use super::ProxyConfig;
use super::body::ProxyBody;
use super::error::{BoxError, ConnectReason, ProxyError};
use crate::model::{AppProtocol, Backend, EndpointStats};

/// How to open a connection to a backend's endpoints. Only plaintext today; mesh mTLS is the
/// next variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectorKind {
    Plain,
}

impl ConnectorKind {
    /// The connector a backend needs. The seam for per-backend TLS: the snapshot will say
    /// which backends are mesh pods.
    pub fn for_backend(_backend: &Backend) -> Self {
        Self::Plain
    }
}

/// Pooled clients, one per upstream protocol (and later per connector kind).
#[derive(Clone)]
pub struct Upstream {
    http1: Client<Connector, ProxyBody>,
    h2c: Client<Connector, ProxyBody>,
}

/// TCP (and later TLS) connections, with errors classified for the response and metrics.
#[derive(Clone)]
pub struct Connector {
    kind: ConnectorKind,
    http: HttpConnector,
}

#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct ConnectError {
    pub reason: ConnectReason,
    #[source]
    source: BoxError,
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
}

// === impl Upstream ===

impl Upstream {
    pub fn new(config: &ProxyConfig) -> Self {
        let connector = Connector::new(ConnectorKind::Plain, config);
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new());
        let http1 = builder.build(connector.clone());
        builder.http2_only(true);
        let h2c = builder.build(connector);
        Self { http1, h2c }
    }

    /// Sends `req` (absolute URI naming the endpoint) and waits for the response head.
    pub async fn send(
        &self,
        protocol: AppProtocol,
        kind: ConnectorKind,
        req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, ProxyError> {
        let client = match (kind, protocol) {
            (ConnectorKind::Plain, AppProtocol::Http1 | AppProtocol::WebSocket) => &self.http1,
            (ConnectorKind::Plain, AppProtocol::H2c) => &self.h2c,
        };
        client.request(req).await.map_err(classify)
    }
}

fn classify(e: hyper_util::client::legacy::Error) -> ProxyError {
    if e.is_connect() {
        let reason = find_source::<ConnectError>(&e).map_or(ConnectReason::Other, |c| c.reason);
        ProxyError::Connect {
            reason,
            source: Box::new(e),
        }
    } else {
        ProxyError::Upstream(Box::new(e))
    }
}

fn find_source<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<T>() {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

// === impl Connector ===

impl Connector {
    fn new(kind: ConnectorKind, config: &ProxyConfig) -> Self {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_nodelay(true);
        // Endpoint URIs carry IP addresses, so no resolver runs; keep `http://` only.
        http.enforce_http(true);
        Self { kind, http }
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        self.http
            .poll_ready(cx)
            .map_err(|e| ConnectError::new(e.into()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match self.kind {
            ConnectorKind::Plain => {
                let fut = self.http.call(dst);
                Box::pin(async move { fut.await.map_err(|e| ConnectError::new(e.into())) })
            }
        }
    }
}

impl ConnectError {
    fn new(source: BoxError) -> Self {
        let reason = match find_source::<std::io::Error>(&*source).map(std::io::Error::kind) {
            Some(std::io::ErrorKind::ConnectionRefused) => ConnectReason::Refused,
            Some(std::io::ErrorKind::TimedOut) => ConnectReason::Timeout,
            _ => ConnectReason::Other,
        };
        Self { reason, source }
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
        Self { stats, gauge }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_counts_until_dropped() {
        let stats = Arc::new(EndpointStats::default());
        let gauge = Gauge::default();
        let a = InFlight::new(stats.clone(), gauge.clone());
        let b = InFlight::new(stats.clone(), gauge.clone());
        assert_eq!(stats.in_flight.load(Ordering::Relaxed), 2);
        assert_eq!(gauge.get(), 2);
        drop(a);
        drop(b);
        assert_eq!(stats.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn connect_errors_are_classified_by_io_kind() {
        let refused = ConnectError::new(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert_eq!(refused.reason, ConnectReason::Refused);
        let timeout =
            ConnectError::new(Box::new(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        assert_eq!(timeout.reason, ConnectReason::Timeout);
        let other = ConnectError::new("dns".into());
        assert_eq!(other.reason, ConnectReason::Other);
    }

    #[tokio::test]
    async fn refused_connection_is_a_refused_connect_error() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let up = Upstream::new(&ProxyConfig::default());
        let req = Request::get(format!("http://{addr}/"))
            .body(super::super::body::empty())
            .unwrap();
        let err = up
            .send(AppProtocol::Http1, ConnectorKind::Plain, req)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), super::super::error::ErrorKind::ConnectRefused);
    }
}
