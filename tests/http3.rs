//! HTTP/3 end to end: `pier run --manifests DIR` in-process, a ClientTrafficPolicy `http3: {}`
//! on one HTTPS listener, and independent clients: quinn + h3 (`support::h3`) and Python's
//! aioquic (`tests/http3/client.py`, when `PIER_AIOQUIC_PYTHON` names a Python that has it).
//!
//! Requests over HTTP/3 take the same route, filters and backend as over TCP; TCP responses of
//! the listener advertise it (`Alt-Svc`), another listener's do not, and its port has no QUIC
//! endpoint; connection-specific fields are refused (400); bodies stream both ways; the
//! listener's frontend client validation holds over QUIC; a drain sends GOAWAY and lets the
//! request in flight finish.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use pier::run;
use rustls::pki_types::CertificateDer;
use support::h3::{H3, tls};
use support::pki::Pki;
use support::web::*;
use support::*;

const HOST: &str = "app.example.com";

struct Env {
    _dir: tempfile::TempDir,
    /// The HTTP/3 listener's port (TCP and UDP).
    h3: u16,
    /// An HTTPS listener without HTTP/3.
    tcp_only: u16,
    /// An HTTP/3 listener whose clients must present a certificate of `client_ca`.
    mtls: u16,
    server_ca: CertificateDer<'static>,
    client_ca: Pki,
    pier: run::Running,
    _echo: pier::echo::EchoServer,
}

fn manifests(h3: u16, tcp_only: u16, mtls: u16, client_ca_pem: &str) -> String {
    let ca: String = client_ca_pem
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    format!(
        "{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: pier
  listeners:
    - name: h3
      protocol: HTTPS
      port: {h3}
      tls: {{certificateRefs: [{{name: cert}}]}}
    - name: tcp-only
      protocol: HTTPS
      port: {tcp_only}
      tls: {{certificateRefs: [{{name: cert}}]}}
    - name: http
      protocol: HTTP
      port: {http}
---
apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {{name: h3, namespace: default}}
spec:
  targetRefs:
    - {{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: h3}}
    - {{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}}
    - {{group: gateway.networking.k8s.io, kind: Gateway, name: secure}}
  http3: {{}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: secure, namespace: default}}
spec:
  gatewayClassName: pier
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{group: '', kind: ConfigMap, name: client-ca}}]
  listeners:
    - name: mtls
      protocol: HTTPS
      port: {mtls}
      tls: {{certificateRefs: [{{name: cert}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: gw}}, {{name: secure}}]
  rules:
    - filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: {{add: [{{name: x-route, value: web}}]}}
        - type: ResponseHeaderModifier
          responseHeaderModifier: {{add: [{{name: x-served-by, value: pier}}]}}
      backendRefs: [{{name: a, port: 80}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: client-ca, namespace: default}}
data:
  ca.crt: |
{ca}",
        http = free_port(),
    )
}

async fn start() -> Env {
    init();
    let echo = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    let (h3, tcp_only, mtls) = (free_port(), free_port(), free_port());
    let server = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).unwrap();
    let client_ca = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let secret = support::mesh::tls_secret_pem(
        "default",
        "cert",
        &server.cert.pem(),
        &server.signing_key.serialize_pem(),
    );
    let files = [
        ("gw.yaml", manifests(h3, tcp_only, mtls, client_ca.ca_pem())),
        ("secret.yaml", secret),
        ("svc.yaml", service("a", echo.addr)),
    ];
    let pier = run_manifests(dir.path(), &files).await;
    let env = Env {
        _dir: dir,
        h3,
        tcp_only,
        mtls,
        server_ca: server.cert.der().clone(),
        client_ca,
        pier,
        _echo: echo,
    };
    let ok = bounded(async {
        loop {
            if let Ok(r) = support::h3::get(local(h3), HOST, "/", env.tls()).await
                && r.status == 200
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(ok);
    env
}

impl Env {
    fn tls(&self) -> Arc<rustls::ClientConfig> {
        tls(std::slice::from_ref(&self.server_ca), None)
    }

    /// A TLS client for TCP offering `alpn`.
    fn tcp_tls(&self, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.server_ca.clone()).unwrap();
        let provider = pier::tls::provider::provider();
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![alpn.to_vec()];
        Arc::new(cfg)
    }

    async fn status(&self) -> serde_json::Value {
        support::web::get(&format!("http://{}/status", self.pier.admin_addr), &[])
            .await
            .json()
    }

    async fn metrics(&self) -> String {
        support::web::get(&format!("http://{}/metrics", self.pier.admin_addr), &[])
            .await
            .text()
    }
}

/// `GET /` over TLS on TCP port `port`, with ALPN `alpn` (`http/1.1` or `h2`).
async fn get_tcp(env: &Env, port: u16, alpn: &[u8]) -> support::client::Resp {
    let io = support::client::connect_tls(local(port), HOST, env.tcp_tls(alpn)).await;
    let req = Request::get(format!("https://{HOST}/"))
        .header("host", HOST)
        .body(http_body_util::Full::<Bytes>::default())
        .unwrap();
    let req = if alpn == b"h2" {
        req
    } else {
        let (mut parts, body) = req.into_parts();
        parts.uri = "/".parse().unwrap();
        Request::from_parts(parts, body)
    };
    match alpn {
        b"h2" => support::client::send_h2_on(io, req).await,
        _ => support::client::send_h1_on(io, req).await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_serves_the_listeners_routes_and_tcp_responses_advertise_it() {
    let env = start().await;
    let mut c = H3::connect(local(env.h3), HOST, env.tls()).await.unwrap();
    // The route's filters and backend, as over TCP.
    let r = c
        .get(HOST, "/hello?x=1", &[("x-client", "quic")])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["x-served-by"], "pier");
    let echo = r.echo();
    assert_eq!((echo.backend.as_str(), echo.path.as_str()), ("a", "/hello"));
    assert_eq!(echo.query.as_deref(), Some("x=1"));
    assert_eq!(echo.headers["x-route"], ["web"]);
    assert_eq!(echo.headers["x-client"], ["quic"]);
    assert_eq!(echo.host, HOST);
    // A GET has no body upstream: neither a length nor chunks.
    assert!(
        !echo.headers.contains_key("transfer-encoding"),
        "{:?}",
        echo.headers
    );
    // Bodies stream both ways: 1 MiB up, with and without a declared length.
    let big = Bytes::from(vec![b'x'; 1 << 20]);
    for declared in [true, false] {
        let mut req = Request::post(format!("https://{HOST}/upload"));
        if declared {
            req = req.header("content-length", big.len());
        }
        let r = c.send(req.body(()).unwrap(), big.clone()).await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.echo().body_bytes, 1 << 20, "declared: {declared}");
    }
    // Many requests at once on one connection.
    let mut many = Vec::new();
    for i in 0..50 {
        let tls = env.tls();
        let port = env.h3;
        many.push(tokio::spawn(async move {
            let mut c = H3::connect(local(port), HOST, tls).await.unwrap();
            let r = c.get(HOST, &format!("/n/{i}"), &[]).await.unwrap();
            c.close().await;
            (r.status, r.echo().path)
        }));
    }
    for (i, m) in many.into_iter().enumerate() {
        assert_eq!(m.await.unwrap(), (http::StatusCode::OK, format!("/n/{i}")));
    }
    // Connection-specific fields make a request malformed (RFC 9114 §4.2): 400, not forwarded.
    let r = c
        .get(HOST, "/bad", &[("connection", "keep-alive")])
        .await
        .unwrap();
    assert_eq!(r.status, 400);
    c.close().await;

    // TCP responses of the listener say where HTTP/3 is, over HTTP/1.1 and HTTP/2.
    let want = format!("h3=\":{}\"; ma=86400", env.h3);
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let r = get_tcp(&env, env.h3, alpn).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.headers["alt-svc"], want.as_str(), "{alpn:?}");
        // Not on a listener without HTTP/3, whose port has no QUIC endpoint.
        let r = get_tcp(&env, env.tcp_only, alpn).await;
        assert_eq!(r.status, 200);
        assert!(!r.headers.contains_key("alt-svc"), "{alpn:?}");
    }
    let refused = tokio::time::timeout(
        Duration::from_secs(3),
        H3::connect(local(env.tcp_only), HOST, env.tls()),
    )
    .await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "a QUIC endpoint on a port without HTTP/3"
    );

    // The policy on an HTTP listener: not served, and the listener says why.
    let status = env.status().await;
    let text = status.to_string();
    assert!(
        text.contains("HTTP/3 is served on HTTPS listeners only"),
        "{text}"
    );
    // Requests over QUIC are counted with the others; handshakes too.
    let metrics = env.metrics().await;
    assert!(
        metrics.contains(&format!(
            "pier_proxy_downstream_tls_handshakes_total{{port=\"{}\",result=\"ok\",reason=\"none\"}}",
            env.h3
        )),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_holds_the_listeners_client_certificate_validation() {
    let env = start().await;
    let wait = bounded(async {
        loop {
            let leaf = env.client_ca.issue(&["client.example"]);
            let cfg = tls(std::slice::from_ref(&env.server_ca), Some(&leaf));
            if let Ok(r) = support::h3::get(local(env.mtls), HOST, "/", cfg).await
                && r.status == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    wait.await;
    // No certificate, or one of another CA: no connection.
    let stranger = Pki::new().issue(&["client.example"]);
    for cert in [None, Some(&stranger)] {
        let cfg = tls(std::slice::from_ref(&env.server_ca), cert);
        let r = support::h3::get(local(env.mtls), HOST, "/", cfg).await;
        assert!(r.is_err(), "served without a valid certificate: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_sends_goaway_and_the_request_in_flight_finishes() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("pier=debug")
        .try_init();
    let env = start().await;
    let mut c = H3::connect(local(env.h3), HOST, env.tls()).await.unwrap();
    // The echo server holds `/delay/<ms>` that long.
    let slow = tokio::spawn(async move {
        let r = c.get(HOST, "/delay/1000", &[]).await;
        (r, c)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pier = env.pier;
    let shutdown = tokio::spawn(async move { pier.shutdown().await });
    let (r, c) = slow.await.unwrap();
    let r = r.expect("the request in flight finishes");
    assert_eq!(r.status, 200);
    // After it, the connection is closed by pier.
    let closed = tokio::time::timeout(Duration::from_secs(5), c.conn.closed()).await;
    assert!(closed.is_ok(), "the connection stays open after the drain");
    shutdown.await.unwrap();
}
