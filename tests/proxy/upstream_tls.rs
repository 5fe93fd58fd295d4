//! TLS to backends: mTLS with ALPN, fail-closed cases, handshake failure reasons, and trust
//! changes swapped in with the snapshot.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use pier::model::{AppProtocol, BackendTls, TlsMode, TlsUnavailable, UpstreamTls};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::support::client::{get, send};
use crate::support::pki::{Leaf, Pki, mtls_client, mtls_server};
use crate::support::snap::*;
use crate::support::tls_origin::{self, TlsFront};
use crate::support::web::eventually;
use crate::support::*;

const NAME: &str = "backend.example.com";
const H2_H1: &[&[u8]] = &[b"h2", b"http/1.1"];
const H1: &[&[u8]] = &[b"http/1.1"];

/// A mesh: the server CA issues the backend's certificate, the client CA pier's.
struct Mesh {
    server_ca: Pki,
    client_ca: Pki,
    client: Leaf,
}

impl Mesh {
    fn new() -> Self {
        init();
        let client_ca = Pki::new();
        let client = client_ca.issue(&["pier.example.com"]);
        Self {
            server_ca: Pki::new(),
            client_ca,
            client,
        }
    }

    /// A TLS front for `origin` with a valid certificate for [`NAME`].
    async fn front(&self, origin: std::net::SocketAddr, alpn: &[&[u8]]) -> TlsFront {
        let leaf = self.server_ca.issue(&[NAME]);
        tls_origin::spawn(mtls_server(&leaf, &self.client_ca, alpn), origin).await
    }

    /// pier's side: trusting `roots`, presenting the client certificate.
    fn tls(&self, roots: &[&Pki], alpn: &[&[u8]], trust_key: u64) -> BackendTls {
        BackendTls::Tls(Arc::new(UpstreamTls {
            mode: TlsMode::Mesh,
            config: mtls_client(roots, &self.client, alpn),
            server_name: ServerName::try_from(NAME).unwrap(),
            trust_key,
            identity: None,
        }))
    }

    fn trusted(&self, alpn: &[&[u8]], trust_key: u64) -> BackendTls {
        self.tls(&[&self.server_ca], alpn, trust_key)
    }
}

fn tls_snapshot(
    p: u16,
    protocol: AppProtocol,
    addr: std::net::SocketAddr,
    tls: BackendTls,
) -> pier::model::Snapshot {
    simple(p, &tls_backend("ns/a", protocol, &[addr], tls))
}

fn assert_metric(h: &Harness, line: &str) {
    let m = h.metrics_text();
    assert!(m.contains(line), "{line} missing in\n{m}");
}

#[tokio::test]
async fn mtls_upstream_negotiates_h2_and_presents_the_client_certificate() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let front = mesh.front(a.addr, H2_H1).await;
    let p = free_port();
    let s = tls_snapshot(p, AppProtocol::Http1, front.addr, mesh.trusted(H2_H1, 1));
    let h = Harness::start(s).await;
    for _ in 0..3 {
        let resp = bounded(send(local(p), get("app.example.com", "/x"))).await;
        assert_eq!(resp.status, 200);
        let seen = resp.echo();
        assert_eq!(seen.protocol, "HTTP/2.0", "ALPN h2 was offered and chosen");
        assert_eq!(seen.authority.as_deref(), Some("app.example.com"));
        assert_eq!(seen.headers["x-forwarded-proto"], ["http"]);
    }
    let shakes = front.handshakes();
    assert_eq!(shakes.len(), 1, "one multiplexed connection: {shakes:?}");
    assert!(shakes[0].ok);
    assert_eq!(shakes[0].alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(shakes[0].client_cert.as_ref(), Some(&mesh.client.chain[0]));
    assert_metric(
        &h,
        r#"pier_proxy_upstream_tls_handshakes_total{backend="ns/a:80",result="ok",reason="none"} 1"#,
    );
    assert_metric(
        &h,
        r#"pier_proxy_upstream_connections_opened_total{protocol="http2",tls="mesh"} 1"#,
    );
    assert_metric(&h, r#"backend="ns/a:80",status="2xx",tls="mesh"} 3"#);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_burst_of_first_requests_shares_one_h2_handshake() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let front = mesh.front(a.addr, H2_H1).await;
    let p = free_port();
    let s = tls_snapshot(p, AppProtocol::H2c, front.addr, mesh.trusted(H2_H1, 1));
    let h = Harness::start(s).await;
    let burst = (0..8).map(|_| send(local(p), get("x", "/delay/50")));
    for resp in bounded(futures::future::join_all(burst)).await {
        assert_eq!(resp.status, 200);
        assert_eq!(resp.echo().protocol, "HTTP/2.0");
    }
    assert_eq!(front.handshakes().len(), 1, "{:?}", front.handshakes());
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_burst_on_an_http1_only_server_opens_connections_in_parallel() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let front = mesh.front(a.addr, H1).await;
    let p = free_port();
    let s = tls_snapshot(p, AppProtocol::Http1, front.addr, mesh.trusted(H2_H1, 1));
    let h = Harness::start(s).await;
    let started = std::time::Instant::now();
    let burst = (0..4).map(|_| send(local(p), get("x", "/delay/300")));
    for resp in bounded(futures::future::join_all(burst)).await {
        assert_eq!(resp.status, 200);
        assert_eq!(resp.echo().protocol, "HTTP/1.1");
    }
    // One at a time would take 4 x 300 ms.
    assert!(
        started.elapsed() < Duration::from_millis(1150),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(front.handshakes().len(), 4);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn mtls_upstream_speaks_http1_when_the_server_offers_only_http1() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let front = mesh.front(a.addr, H1).await;
    let p = free_port();
    // AppProtocol H2c on TLS prefers h2, but ALPN decides.
    let s = tls_snapshot(p, AppProtocol::H2c, front.addr, mesh.trusted(H2_H1, 1));
    let h = Harness::start(s).await;
    for _ in 0..3 {
        let seen = bounded(send(local(p), get("app.example.com", "/x")))
            .await
            .echo();
        assert_eq!(seen.protocol, "HTTP/1.1");
        assert_eq!(seen.host, "app.example.com");
    }
    let shakes = front.handshakes();
    assert_eq!(shakes.len(), 1, "kept alive: {shakes:?}");
    assert_eq!(shakes[0].alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(shakes[0].client_cert.as_ref(), Some(&mesh.client.chain[0]));
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn websocket_over_tls_uses_http1_even_when_h2_is_offered() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let front = mesh.front(a.addr, H2_H1).await;
    let p = free_port();
    let s = tls_snapshot(
        p,
        AppProtocol::WebSocket,
        front.addr,
        mesh.trusted(H2_H1, 1),
    );
    let h = Harness::start(s).await;
    let tcp = bounded(TcpStream::connect(local(p))).await.unwrap();
    let (mut ws, resp) = bounded(tokio_tungstenite::client_async(
        "ws://ws.example.com/chat",
        tcp,
    ))
    .await
    .unwrap();
    assert_eq!(resp.status(), 101);
    bounded(ws.send(Message::text("over tls"))).await.unwrap();
    let echoed = bounded(ws.next()).await.unwrap().unwrap();
    assert_eq!(echoed, Message::text("over tls"));
    bounded(ws.close(None)).await.unwrap();
    drop(ws);
    assert_eq!(
        front.handshakes()[0].alpn.as_deref(),
        Some(&b"http/1.1"[..])
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn unavailable_tls_fails_closed_without_opening_a_connection() {
    init();
    let rec = bounded(pier::echo::spawn_recording(local(0)))
        .await
        .unwrap();
    let p = free_port();
    let tls = BackendTls::Unavailable(TlsUnavailable::NoTrustBundle);
    let h = Harness::start(tls_snapshot(p, AppProtocol::Http1, rec.addr, tls)).await;
    for _ in 0..2 {
        let resp = bounded(send(local(p), get("x", "/"))).await;
        assert_eq!(resp.status, 503);
    }
    // The 503 is answered before any connect could start: nothing ever reaches the endpoint.
    assert!(rec.received().is_empty());
    assert_metric(
        &h,
        r#"pier_proxy_upstream_tls_unavailable_total{backend="ns/a:80",reason="no_trust_bundle"} 2"#,
    );
    assert_metric(&h, r#"kind="TlsUnavailable",side="Internal"} 2"#);
    assert_metric(&h, r#"backend="ns/a:80",status="5xx",tls="mesh"} 2"#);
    assert!(
        !h.metrics_text()
            .contains("upstream_connections_opened_total{")
    );
    bounded(h.proxy.shutdown(BOUND)).await;
    assert!(rec.received().is_empty());
}

#[tokio::test]
async fn a_plaintext_endpoint_behind_a_tls_backend_is_502_not_tls() {
    let mesh = Mesh::new();
    let plain = echo("plain").await;
    let p = free_port();
    let s = tls_snapshot(p, AppProtocol::Http1, plain.addr, mesh.trusted(H2_H1, 1));
    let h = Harness::start(s).await;
    assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 502);
    assert_eq!(
        plain.count(),
        0,
        "no HTTP request reached the plaintext server"
    );
    assert_metric(
        &h,
        r#"pier_proxy_upstream_tls_handshakes_total{backend="ns/a:80",result="error",reason="not_tls"} 1"#,
    );
    assert_metric(&h, r#"kind="TlsHandshake",side="Upstream"} 1"#);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_tls_backend_sends_only_a_client_hello_to_a_silent_endpoint() {
    let mesh = Mesh::new();
    let rec = bounded(pier::echo::spawn_recording(local(0)))
        .await
        .unwrap();
    let p = free_port();
    let config = pier::proxy::ProxyConfig {
        connect_timeout: Duration::from_millis(300),
        ..config()
    };
    let s = tls_snapshot(p, AppProtocol::Http1, rec.addr, mesh.trusted(H2_H1, 1));
    let h = Harness::start_with(s, config).await;
    let resp = bounded(send(local(p), get("x", "/secret"))).await;
    assert_eq!(resp.status, 502, "the handshake timed out");
    let bytes = rec.received();
    assert_eq!(
        bytes.first(),
        Some(&0x16),
        "a TLS handshake record first: {bytes:?}"
    );
    assert_eq!(bytes.get(5), Some(&0x01), "a ClientHello");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        !text.contains("HTTP/1.1") && !text.contains("/secret"),
        "{text}"
    );
    assert_metric(&h, r#"result="error",reason="timeout"} 1"#);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_server_certificate_from_an_unknown_ca_is_502_unknown_ca() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let front = mesh.front(a.addr, H2_H1).await;
    let stranger = Pki::new();
    let p = free_port();
    let s = tls_snapshot(
        p,
        AppProtocol::Http1,
        front.addr,
        mesh.tls(&[&stranger], H2_H1, 1),
    );
    let h = Harness::start(s).await;
    assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 502);
    assert_eq!(a.count(), 0);
    assert_metric(
        &h,
        r#"pier_proxy_upstream_tls_handshakes_total{backend="ns/a:80",result="error",reason="unknown_ca"} 1"#,
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn an_expired_server_certificate_is_502_expired() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let leaf = mesh.server_ca.issue_expired(&[NAME]);
    let front = tls_origin::spawn(mtls_server(&leaf, &mesh.client_ca, H2_H1), a.addr).await;
    let p = free_port();
    let s = tls_snapshot(p, AppProtocol::Http1, front.addr, mesh.trusted(H2_H1, 1));
    let h = Harness::start(s).await;
    assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 502);
    assert_metric(&h, r#"result="error",reason="expired"} 1"#);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_server_certificate_for_another_name_is_502_san_mismatch() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let leaf = mesh.server_ca.issue(&["other.example.com"]);
    let front = tls_origin::spawn(mtls_server(&leaf, &mesh.client_ca, H2_H1), a.addr).await;
    let p = free_port();
    let s = tls_snapshot(p, AppProtocol::Http1, front.addr, mesh.trusted(H2_H1, 1));
    let h = Harness::start(s).await;
    assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 502);
    assert_metric(&h, r#"result="error",reason="san_mismatch"} 1"#);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn republishing_the_same_trust_keeps_the_pooled_connection() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let front = mesh.front(a.addr, H1).await;
    let p = free_port();
    let h = Harness::start(tls_snapshot(
        p,
        AppProtocol::Http1,
        front.addr,
        mesh.trusted(H1, 7),
    ))
    .await;
    assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 200);
    // A rotation that keeps the trust: a new config object, the same trust_key.
    h.swap(tls_snapshot(
        p,
        AppProtocol::Http1,
        front.addr,
        mesh.trusted(H1, 7),
    ));
    for _ in 0..3 {
        assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 200);
    }
    // Give the maintenance task a tick to (not) retire anything.
    tokio::time::sleep(pier::proxy::UPSTREAM_RETIRE_BOUND).await;
    assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 200);
    assert_eq!(
        front.handshakes().len(),
        1,
        "the pooled connection was reused"
    );
    assert_eq!(a.connections(), 1);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn removing_the_ca_fails_new_requests_and_retires_pooled_connections() {
    let mesh = Mesh::new();
    let a = echo("a").await;
    let front = mesh.front(a.addr, H1).await;
    let p = free_port();
    let h = Harness::start(tls_snapshot(
        p,
        AppProtocol::Http1,
        front.addr,
        mesh.trusted(H1, 1),
    ))
    .await;
    // Two pooled connections under the old trust.
    let two = futures::future::join(
        send(local(p), get("x", "/delay/200")),
        send(local(p), get("x", "/delay/200")),
    );
    let (r1, r2) = bounded(two).await;
    assert_eq!((r1.status.as_u16(), r2.status.as_u16()), (200, 200));
    assert_eq!(front.open(), 2);
    // One of them carries a request while the swap lands; the other stays idle.
    let in_flight = tokio::spawn(send(local(p), get("x", "/delay/1500")));
    bounded(a.wait_for(3)).await;

    // The new trust no longer includes the server's CA.
    let stranger = Pki::new();
    h.swap(tls_snapshot(
        p,
        AppProtocol::Http1,
        front.addr,
        mesh.tls(&[&stranger], H1, 2),
    ));
    let swapped = std::time::Instant::now();
    // At once, not eventually: the idle connection made under the old trust is never used.
    for _ in 0..3 {
        assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 502);
    }
    assert_eq!(
        a.count(),
        3,
        "no request reached the backend after the swap"
    );
    assert_metric(&h, r#"result="error",reason="unknown_ca"} 3"#);
    // The idle connection is closed within the bound; the busy one stays for its request.
    eventually(Duration::from_secs(1), || async { front.open() == 1 }).await;
    assert!(swapped.elapsed() < Duration::from_secs(1));
    assert_metric(&h, "pier_proxy_upstream_idle_connections 0");

    let resp = bounded(in_flight).await.unwrap();
    assert_eq!(resp.status, 200, "the in-flight request completed");
    // Its connection is not returned to the retired pool.
    eventually(BOUND, || async { front.open() == 0 }).await;
    assert_metric(&h, "pier_proxy_upstream_idle_connections 0");
    bounded(h.proxy.shutdown(BOUND)).await;
}
