//! TLSRoute, TCPRoute and UDPRoute end to end: pier in-process from a manifest directory, real TLS on
//! every TLS hop (rustls clients and servers, certificates made at test time with rcgen).
//!
//! Gateway `gw/edge` has two TLS listeners on one port (mixed termination): `pass`
//! (`*.pass.example`, Passthrough) and `term` (`*.term.example`, Terminate with a certificate
//! from the gateway CA). Namespace `shop` is meshed (label `mesh: enabled`).
//!
//! Backends are line servers: on connect they write `welcome <name> tls=<bool> sni=<sni>`,
//! then echo each line as `<name>: <line>`, and on EOF write `bye <name>` and close, so a test
//! sees server-speaks-first protocols, both directions and a half-close passed through.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use support::mesh::*;
use support::web::eventually;
use support::{bounded, free_port};

/// A backend that speaks a line protocol, over TLS (with `cert`) or plaintext.
struct LineServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl LineServer {
    async fn spawn(name: &'static str, cert: Option<&Cert>) -> Self {
        let acceptor = cert.map(|c| {
            let provider = pier::tls::provider::provider();
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(c.chain.clone(), c.key.clone_key())
                .unwrap();
            TlsAcceptor::from(Arc::new(config))
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        None => serve_lines(name, tcp, false, None).await,
                        Some(a) => {
                            let Ok(tls) = a.accept(tcp).await else { return };
                            let sni = tls.get_ref().1.server_name().map(str::to_string);
                            serve_lines(name, tls, true, sni).await
                        }
                    }
                });
            }
        });
        Self { addr, task }
    }
}

impl Drop for LineServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_lines<S>(name: &str, io: S, tls: bool, sni: Option<String>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (r, mut w) = tokio::io::split(io);
    let sni = sni.as_deref().unwrap_or("-");
    let welcome = format!("welcome {name} tls={tls} sni={sni}\n");
    if w.write_all(welcome.as_bytes()).await.is_err() {
        return;
    }
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if w.write_all(format!("{name}: {line}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
    let _ = w.write_all(format!("bye {name}\n").as_bytes()).await;
    let _ = w.shutdown().await;
}

/// A TLS client trusting `ca`, with SNI `sni`, to pier's TLS port.
async fn connect(
    addr: SocketAddr,
    sni: &str,
    ca: &Ca,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let provider = pier::tls::provider::provider();
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_string()).unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// Reads the welcome, echoes one line, half-closes, reads the goodbye and EOF: the lines seen.
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> Vec<String> {
    let (r, mut w) = tokio::io::split(io);
    let mut lines = BufReader::new(r).lines();
    let mut seen = vec![lines.next_line().await.unwrap().expect("a welcome line")];
    w.write_all(b"ping\n").await.unwrap();
    seen.push(lines.next_line().await.unwrap().expect("an echo"));
    // Half-close: the backend sees EOF, says goodbye, and closes; pier passes each on.
    w.shutdown().await.unwrap();
    while let Some(line) = lines.next_line().await.unwrap() {
        seen.push(line);
    }
    seen
}

/// Sends an HTTP/1.1 GET for `path` over `io` (a stream pier relays to a mesh workload) and
/// reads the workload's answer to the end: what it saw.
async fn asked<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S, path: &str, host: &str) -> Seen {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    io.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![];
    bounded(tokio::io::AsyncReadExt::read_to_end(io, &mut answer))
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_string();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

fn gateway(port: u16, spec_extra: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: gw}}
spec:
  gatewayClassName: pier
  listeners:
    - name: pass
      protocol: TLS
      port: {port}
      hostname: \"*.pass.example\"
      tls: {{mode: Passthrough}}
      allowedRoutes: {{namespaces: {{from: All}}}}
    - name: term
      protocol: TLS
      port: {port}
      hostname: \"*.term.example\"
      tls: {{mode: Terminate, certificateRefs: [{{name: term-cert}}]}}
      allowedRoutes: {{namespaces: {{from: All}}}}
{spec_extra}"
    )
}

/// TLSRoute `ns/name` for `host` to Service `ns/svc:443` through listener `section`.
fn tls_route(ns: &str, name: &str, section: &str, host: &str, svc: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: edge, namespace: gw, sectionName: {section}}}]
  hostnames: [{host}]
  rules:
    - backendRefs: [{{name: {svc}, port: 443}}]
"
    )
}

/// Everything but routes and backends: class, namespaces, Gateway (meshed `shop`), the
/// terminating listener's certificate, pier's client certificate and the mesh bundle.
fn base(port: u16, pki: &MeshPki, gateway_ca: &Ca) -> Vec<(&'static str, String)> {
    let term = gateway_ca.server(&["*.term.example"]);
    vec![
        ("00-class.yaml", GATEWAY_CLASS.to_string()),
        (
            "01-namespaces.yaml",
            [
                namespace("gw", ""),
                namespace("public", ""),
                namespace("shop", "mesh: enabled"),
            ]
            .join("---\n"),
        ),
        (
            "10-gateway.yaml",
            gateway(
                port,
                &mesh_spec("    selector: {matchLabels: {mesh: enabled}}\n"),
            ),
        ),
        ("11-cert.yaml", tls_secret("gw", "term-cert", &term)),
        ("40-client.yaml", pier_client_secret(pki)),
        ("41-bundle.yaml", bundle(&[&pki.mesh_ca])),
    ]
}

/// pier on [`base`] plus these backends and routes.
async fn start(
    port: u16,
    pki: &MeshPki,
    gateway_ca: &Ca,
    backends: &[String],
    routes: &[String],
) -> Pier {
    let mut files = base(port, pki, gateway_ca);
    files.push(("20-backends.yaml", backends.join("---\n")));
    files.push(("30-routes.yaml", routes.join("---\n")));
    Pier::start(port, &files).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_routes_by_sni_and_relays_the_clients_own_tls() {
    let pki = MeshPki::new();
    let backend_ca = Ca::new("backend CA");
    let a = LineServer::spawn("a", Some(&backend_ca.server(&["a.pass.example"]))).await;
    let b = LineServer::spawn("b", Some(&backend_ca.server(&["b.pass.example"]))).await;
    let port = free_port();
    let backends = [
        service("public", "a", a.addr),
        service("public", "b", b.addr),
        service("shop", "a", a.addr),
    ];
    let routes = [
        tls_route("public", "a", "pass", "a.pass.example", "a"),
        tls_route("public", "b", "pass", "b.pass.example", "b"),
        // Meshed: may not attach to a Passthrough listener.
        tls_route("shop", "meshed", "pass", "meshed.pass.example", "a"),
    ];
    let pier = start(port, &pki, &Ca::new("gateway CA"), &backends, &routes).await;
    let addr = pier.addr();

    // The client's handshake is with the backend itself: its certificate (from the backend CA,
    // which pier does not hold) verifies, and it saw the client's SNI.
    let tls = bounded(connect(addr, "a.pass.example", &backend_ca)).await;
    let lines = bounded(converse(
        tls.expect("handshake with backend a through pier"),
    ))
    .await;
    assert_eq!(
        lines,
        ["welcome a tls=true sni=a.pass.example", "a: ping", "bye a"]
    );
    let tls = bounded(connect(addr, "b.pass.example", &backend_ca)).await;
    let lines = bounded(converse(
        tls.expect("handshake with backend b through pier"),
    ))
    .await;
    assert_eq!(lines[0], "welcome b tls=true sni=b.pass.example");

    // No route for the name (the meshed route is refused): closed, nothing relayed.
    for sni in [
        "meshed.pass.example",
        "nothing.pass.example",
        "other.example",
    ] {
        let r = bounded(connect(addr, sni, &backend_ca)).await;
        assert!(r.is_err(), "{sni}: expected the connection to be closed");
    }
    // Not TLS at all: closed.
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: a.pass.example\r\n\r\n")
        .await
        .unwrap();
    let mut rest = vec![];
    let n = bounded(tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut rest))
        .await
        .unwrap_or(0);
    assert!(
        !String::from_utf8_lossy(&rest[..n]).contains("welcome"),
        "plaintext reached a backend"
    );

    let status = pier.status().await;
    let meshed = conditions(&status, "TLSRoute", "shop", "meshed");
    let (s, reason, message) = &meshed["Accepted"];
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", "NotAllowedByListeners")
    );
    assert!(message.contains("meshed"), "{message}");
    let plain = conditions(&status, "TLSRoute", "public", "a");
    assert_eq!(plain["Accepted"].0, "True");

    pier.assert_metric(
        "pier_proxy_tls_streams_total{gateway=\"gw/edge\",listener=\"pass\",mode=\"passthrough\",result=\"relayed\"} 2",
    )
    .await;
    pier.assert_metric(
        "pier_proxy_tls_streams_total{gateway=\"gw/edge\",listener=\"pass\",mode=\"passthrough\",result=\"no_route\"} 2",
    )
    .await;
    pier.assert_metric(
        "pier_proxy_tls_streams_total{gateway=\"\",listener=\"\",mode=\"\",result=\"no_route\"} 1",
    )
    .await;
    pier.assert_metric("result=\"bad_hello\"} 1").await;
    pier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_relays_plaintext_or_originates_mesh_mtls_and_fails_closed() {
    let pki = MeshPki::new();
    let gateway_ca = Ca::new("gateway CA");
    let plain = LineServer::spawn("plain", None).await;
    let workload = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let port = free_port();
    let backends = [
        service("public", "plain", plain.addr),
        service("shop", "web", workload.addr),
    ];
    let routes = [
        tls_route("public", "plain", "term", "plain.term.example", "plain"),
        tls_route("shop", "web", "term", "web.term.example", "web"),
    ];
    let pier = start(port, &pki, &gateway_ca, &backends, &routes).await;
    let addr = pier.addr();

    // pier's certificate (gateway CA), plaintext to a server-speaks-first backend.
    let tls = bounded(connect(addr, "plain.term.example", &gateway_ca)).await;
    let tls = tls.expect("handshake with pier");
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        None,
        "no ALPN on TLS streams"
    );
    let lines = bounded(converse(tls)).await;
    assert_eq!(
        lines,
        ["welcome plain tls=false sni=-", "plain: ping", "bye plain"]
    );

    // Meshed: pier originates mesh mTLS with its client certificate; the bytes are the
    // client's (here an HTTP/1.1 request the workload answers).
    let mut tls = bounded(connect(addr, "web.term.example", &gateway_ca))
        .await
        .expect("handshake with pier");
    let seen = asked(&mut tls, "/through", "web.term.example").await;
    assert!(seen.tls);
    assert_eq!(seen.sni.as_deref(), Some("web.shop.svc.cluster.local"));
    assert_eq!(seen.client_uris, [PIER_ID]);
    assert_eq!(seen.alpn, None, "no HTTP ALPN offered on a TLS stream");
    assert_eq!(seen.path, "/through");
    drop(tls);

    // Fail closed: without pier's client certificate the meshed stream is closed at the
    // ClientHello (before pier's handshake), and the workload never sees a connection.
    let before = pier.generation().await;
    let attempts = workload.accepted().len();
    std::fs::remove_file(pier.path().join("40-client.yaml")).unwrap();
    pier.wait_generation_above(before).await;
    let r = bounded(connect(addr, "web.term.example", &gateway_ca)).await;
    assert!(r.is_err(), "expected the stream to be closed");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        workload.accepted().len(),
        attempts,
        "nothing may reach the workload"
    );
    eventually(Duration::from_secs(2), || async {
        pier.metrics().await.contains(
            "pier_proxy_tls_streams_total{gateway=\"gw/edge\",listener=\"term\",mode=\"terminate\",result=\"no_backend\"} 1",
        )
    })
    .await;
    // The two streams pier terminated were two client handshakes; the one closed at the
    // ClientHello never got to a handshake.
    let metrics = pier.metrics().await;
    let ok = format!(
        "pier_proxy_downstream_tls_handshakes_total{{port=\"{port}\",result=\"ok\",reason=\"none\"}} 2"
    );
    assert!(metrics.contains(&ok), "{ok} missing in {metrics}");
    let failed =
        format!("pier_proxy_downstream_tls_handshakes_total{{port=\"{port}\",result=\"error\"");
    assert!(!metrics.contains(&failed), "{metrics}");
    pier.shutdown().await;
}

/// A second Gateway, `gw/plain`, with one TCP listener `tcp` on `port` (TCPRoute); namespace
/// `shop` is meshed here too.
fn tcp_gateway(port: u16) -> String {
    let mesh = mesh_spec("    selector: {matchLabels: {mesh: enabled}}\n");
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: plain, namespace: gw}}
spec:
  gatewayClassName: pier
  listeners:
    - name: tcp
      protocol: TCP
      port: {port}
      allowedRoutes: {{namespaces: {{from: All}}}}
{mesh}"
    )
}

/// TCPRoute `ns/name` to Service `ns/svc:443` through `gw/plain`'s listener.
fn tcp_route(ns: &str, name: &str, created: &str, svc: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"{created}\"}}
spec:
  parentRefs: [{{name: plain, namespace: gw, sectionName: tcp}}]
  rules:
    - backendRefs: [{{name: {svc}, port: 443}}]
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_routes_relay_to_the_oldest_route_and_meshed_ones_get_mtls() {
    let pki = MeshPki::new();
    let one = LineServer::spawn("one", None).await;
    let two = LineServer::spawn("two", None).await;
    let workload = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let port = free_port();
    let tcp_port = free_port();
    let backends = [
        service("public", "one", one.addr),
        service("public", "two", two.addr),
        service("shop", "web", workload.addr),
        tcp_gateway(tcp_port),
    ];
    let routes = [
        // Two routes on one listener: both Accepted, the older gets every connection
        // (GEP-2644).
        tcp_route("public", "newer", "2026-01-02T00:00:00Z", "two"),
        tcp_route("public", "older", "2026-01-01T00:00:00Z", "one"),
    ];
    let pier = start(port, &pki, &Ca::new("gateway CA"), &backends, &routes).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], tcp_port));

    // Server speaks first: the welcome arrives before the client sends anything, so pier
    // connected upstream at once; both directions and the half-close are relayed.
    for _ in 0..5 {
        let tcp = bounded(TcpStream::connect(addr)).await.unwrap();
        let lines = bounded(converse(tcp)).await;
        assert_eq!(
            lines,
            ["welcome one tls=false sni=-", "one: ping", "bye one"]
        );
    }
    let status = pier.status().await;
    for name in ["older", "newer"] {
        let c = conditions(&status, "TCPRoute", "public", name);
        assert_eq!(c["Accepted"].0, "True", "{name}: {c:?}");
        assert_eq!(c["ResolvedRefs"].0, "True", "{name}: {c:?}");
    }
    pier.assert_metric(
        "pier_proxy_tls_streams_total{gateway=\"gw/plain\",listener=\"tcp\",mode=\"tcp\",result=\"relayed\"} 5",
    )
    .await;

    // A meshed TCPRoute (namespace shop): pier originates mesh mTLS with its client
    // certificate; the client's bytes (here HTTP/1.1) reach the workload inside it.
    let before = pier.generation().await;
    std::fs::write(
        pier.path().join("31-meshed.yaml"),
        tcp_route("shop", "web", "2025-12-31T00:00:00Z", "web"),
    )
    .unwrap();
    pier.wait_generation_above(before).await;
    let mut tcp = bounded(TcpStream::connect(addr)).await.unwrap();
    let seen = asked(&mut tcp, "/over-tcp", "web").await;
    assert!(seen.tls);
    assert_eq!(seen.client_uris, [PIER_ID]);
    assert_eq!(seen.path, "/over-tcp");
    // The workload closed its side; pier half-closes ours and waits for the client's EOF.
    drop(tcp);

    // Fail closed: without pier's client certificate nothing reaches the workload.
    let before = pier.generation().await;
    let attempts = workload.accepted().len();
    std::fs::remove_file(pier.path().join("40-client.yaml")).unwrap();
    pier.wait_generation_above(before).await;
    let mut tcp = bounded(TcpStream::connect(addr)).await.unwrap();
    let _ = tcp
        .write_all(b"GET / HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n")
        .await;
    let mut rest = vec![];
    let _ = bounded(tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut rest)).await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        workload.accepted().len(),
        attempts,
        "nothing may reach the workload"
    );
    pier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_route_only_attaches_to_tcp_listeners() {
    let pki = MeshPki::new();
    let one = LineServer::spawn("one", None).await;
    let port = free_port();
    let backends = [service("public", "one", one.addr)];
    // A TCPRoute to a TLS listener: NotAllowedByListeners; a TCP listener with a hostname:
    // not accepted.
    let routes = [format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {{name: wrong, namespace: public}}
spec:
  parentRefs: [{{name: edge, namespace: gw, sectionName: term}}]
  rules:
    - backendRefs: [{{name: one, port: 443}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: named, namespace: gw}}
spec:
  gatewayClassName: pier
  listeners:
    - name: tcp
      protocol: TCP
      port: {}
      hostname: tcp.example
",
        free_port()
    )];
    let pier = start(port, &pki, &Ca::new("gateway CA"), &backends, &routes).await;
    let status = pier.status().await;
    let c = conditions(&status, "TCPRoute", "public", "wrong");
    assert_eq!(
        (c["Accepted"].0.as_str(), c["Accepted"].1.as_str()),
        ("False", "NotAllowedByListeners")
    );
    let text = serde_json::to_string(&status).unwrap();
    assert!(text.contains("a TCP listener has no hostname"), "{text}");
    pier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_security_policy_on_a_tcp_listener_admits_by_client_address() {
    let pki = MeshPki::new();
    let one = LineServer::spawn("one", None).await;
    let port = free_port();
    let tcp_port = free_port();
    let policy = |cidr: &str| {
        format!(
            "apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: only, namespace: gw}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: plain, sectionName: tcp}}]
  authorization:
    defaultAction: Deny
    rules:
    - action: Allow
      principal: {{clientCIDRs: [\"{cidr}\"]}}
"
        )
    };
    let backends = [service("public", "one", one.addr), tcp_gateway(tcp_port)];
    let routes = [
        tcp_route("public", "db", "2026-01-01T00:00:00Z", "one"),
        policy("10.0.0.0/8"),
    ];
    let pier = start(port, &pki, &Ca::new("gateway CA"), &backends, &routes).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], tcp_port));

    // 127.0.0.1 is not in 10.0.0.0/8: closed before anything reaches the backend.
    let mut tcp = bounded(TcpStream::connect(addr)).await.unwrap();
    let mut rest = vec![];
    let _ = bounded(tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut rest)).await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    pier.assert_metric(
        "pier_proxy_tls_streams_total{gateway=\"gw/plain\",listener=\"tcp\",mode=\"tcp\",result=\"denied\"} 1",
    )
    .await;

    // Allowed once the policy names loopback.
    let before = pier.generation().await;
    std::fs::write(
        pier.path().join("30-routes.yaml"),
        [
            tcp_route("public", "db", "2026-01-01T00:00:00Z", "one"),
            policy("127.0.0.0/8"),
        ]
        .join("---\n"),
    )
    .unwrap();
    pier.wait_generation_above(before).await;
    let tcp = bounded(TcpStream::connect(addr)).await.unwrap();
    let lines = bounded(converse(tcp)).await;
    assert_eq!(lines[0], "welcome one tls=false sni=-");
    pier.shutdown().await;
}

// === UDPRoute ===

/// A UDP backend: answers each datagram with `<name>: <datagram>`, from its own address.
struct UdpEcho {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl UdpEcho {
    async fn spawn(name: &'static str) -> Self {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_535];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let reply = format!("{name}: {}", String::from_utf8_lossy(&buf[..n]));
                let _ = socket.send_to(reply.as_bytes(), from).await;
            }
        });
        Self { addr, task }
    }
}

impl Drop for UdpEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Gateway `gw/plain` with a UDP listener `udp` and a TCP listener `tcp` on the same port
/// number (two sockets: they do not conflict).
fn udp_gateway(port: u16) -> String {
    let mesh = mesh_spec("    selector: {matchLabels: {mesh: enabled}}\n");
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: plain, namespace: gw}}
spec:
  gatewayClassName: pier
  listeners:
    - name: udp
      protocol: UDP
      port: {port}
      allowedRoutes: {{namespaces: {{from: All}}}}
    - name: tcp
      protocol: TCP
      port: {port}
      allowedRoutes: {{namespaces: {{from: All}}}}
{mesh}"
    )
}

/// UDPRoute `ns/name` to Service `ns/svc:443` through `gw/plain`'s `section`.
fn udp_route(ns: &str, name: &str, created: &str, section: &str, svc: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"{created}\"}}
spec:
  parentRefs: [{{name: plain, namespace: gw, sectionName: {section}}}]
  rules:
    - backendRefs: [{{name: {svc}, port: 443}}]
"
    )
}

/// Sends `what` from `client` (connected to pier) and waits for one reply.
async fn ask_udp(client: &tokio::net::UdpSocket, what: &str) -> String {
    client.send(what.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let n = tokio::time::timeout(Duration::from_secs(5), client.recv(&mut buf))
        .await
        .expect("a reply within 5 s")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_routes_carry_each_clients_datagrams_to_the_oldest_routes_backend() {
    let pki = MeshPki::new();
    let one = UdpEcho::spawn("one").await;
    let two = UdpEcho::spawn("two").await;
    let lines = LineServer::spawn("lines", None).await;
    let workload = UdpEcho::spawn("meshed").await;
    let port = free_port();
    let both = free_port();
    let backends = [
        service("public", "one", one.addr),
        service("public", "two", two.addr),
        service("public", "lines", lines.addr),
        service("shop", "web", workload.addr),
        udp_gateway(both),
    ];
    let routes = [
        // Two routes on one listener: both Accepted, the older gets every flow.
        udp_route("public", "newer", "2026-01-02T00:00:00Z", "udp", "two"),
        udp_route("public", "older", "2026-01-01T00:00:00Z", "udp", "one"),
        tcp_route("public", "stream", "2026-01-01T00:00:00Z", "lines"),
        // Meshed (namespace shop): never sent in plaintext, so not attached at all.
        udp_route("shop", "meshed", "2025-01-01T00:00:00Z", "udp", "web"),
        // A UDPRoute on a TCP listener.
        udp_route("public", "wrong", "2026-01-03T00:00:00Z", "tcp", "one"),
    ];
    let pier = start(port, &pki, &Ca::new("gateway CA"), &backends, &routes).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], both));

    // Five clients, three datagrams each: every reply from the older route's backend, and
    // from the address the client sent to (the client's socket is connected to it).
    for c in 0..5 {
        let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.connect(addr).await.unwrap();
        for i in 0..3 {
            assert_eq!(
                ask_udp(&client, &format!("c{c} d{i}")).await,
                format!("one: c{c} d{i}")
            );
        }
    }
    // The TCP listener on the same port number relays its own streams.
    let tcp = bounded(TcpStream::connect(addr)).await.unwrap();
    assert_eq!(
        bounded(converse(tcp)).await,
        ["welcome lines tls=false sni=-", "lines: ping", "bye lines"]
    );
    let status = pier.status().await;
    for name in ["older", "newer"] {
        let c = conditions(&status, "UDPRoute", "public", name);
        assert_eq!(c["Accepted"].0, "True", "{name}: {c:?}");
        assert_eq!(c["ResolvedRefs"].0, "True", "{name}: {c:?}");
    }
    let meshed = conditions(&status, "UDPRoute", "shop", "meshed");
    assert_eq!(
        (meshed["Accepted"].0.as_str(), meshed["Accepted"].1.as_str()),
        ("False", "NotAllowedByListeners"),
        "{meshed:?}"
    );
    assert!(
        meshed["Accepted"].2.contains("mTLS runs over TCP"),
        "{meshed:?}"
    );
    let wrong = conditions(&status, "UDPRoute", "public", "wrong");
    assert_eq!(
        (wrong["Accepted"].0.as_str(), wrong["Accepted"].1.as_str()),
        ("False", "NotAllowedByListeners"),
        "{wrong:?}"
    );
    let text = serde_json::to_string(&status).unwrap();
    assert!(!text.contains("ProtocolConflict"), "{text}");

    // The older route goes: a new client's flow goes to the remaining route's backend.
    let before = pier.generation().await;
    std::fs::write(
        pier.path().join("30-routes.yaml"),
        udp_route("public", "newer", "2026-01-02T00:00:00Z", "udp", "two"),
    )
    .unwrap();
    pier.wait_generation_above(before).await;
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(addr).await.unwrap();
    assert_eq!(ask_udp(&client, "later").await, "two: later");
    pier.shutdown().await;
}

/// Flows are bounded per port and end when idle: past `--max-udp-flows` a new client's
/// datagrams are dropped (counted as overflow) until a flow idles out (`--udp-idle-timeout`);
/// then the client gets through, and an idled-out client starts a new flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_flows_are_bounded_and_idle_out() {
    let pki = MeshPki::new();
    let one = UdpEcho::spawn("one").await;
    let port = free_port();
    let both = free_port();
    let mut files = base(port, &pki, &Ca::new("gateway CA"));
    files.push((
        "20-backends.yaml",
        [service("public", "one", one.addr), udp_gateway(both)].join("---\n"),
    ));
    files.push((
        "30-routes.yaml",
        udp_route("public", "dns", "2026-01-01T00:00:00Z", "udp", "one"),
    ));
    let limits = pier::proxy::Limits {
        udp_idle_timeout: Duration::from_secs(1),
        max_udp_flows: 2,
        ..Default::default()
    };
    let pier = Pier::start_with(port, &files, limits).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], both));
    let client = || async {
        let c = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        c.connect(addr).await.unwrap();
        c
    };
    let (a, b, c) = (client().await, client().await, client().await);
    assert_eq!(ask_udp(&a, "a").await, "one: a");
    assert_eq!(ask_udp(&b, "b").await, "one: b");
    // The third flow is over the bound: no reply.
    c.send(b"c").await.unwrap();
    let mut buf = [0u8; 64];
    let late = tokio::time::timeout(Duration::from_millis(500), c.recv(&mut buf)).await;
    assert!(late.is_err(), "a reply past the flow bound");
    pier.assert_metric(
        "pier_proxy_tls_streams_total{gateway=\"gw/plain\",listener=\"udp\",mode=\"udp\",result=\"overflow\"} 1",
    )
    .await;
    // After a second without datagrams both flows end; the third client gets through, and
    // the first one's next datagram is a new flow.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    pier.assert_metric(
        "pier_proxy_tls_streams_total{gateway=\"gw/plain\",listener=\"udp\",mode=\"udp\",result=\"relayed\"} 2",
    )
    .await;
    assert_eq!(ask_udp(&c, "c again").await, "one: c again");
    assert_eq!(ask_udp(&a, "a again").await, "one: a again");
    pier.shutdown().await;
}

/// Real DNS through pier: dnsmasq (Debian's) answers, dig (BIND's) asks, over UDP (UDPRoute)
/// and over TCP (TCPRoute) on the same port number of one Gateway, as a DNS service is
/// published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_over_udp_and_tcp_reaches_dnsmasq_and_answers_dig() {
    let dns_port = free_port();
    let mut dnsmasq = std::process::Command::new("dnsmasq")
        .args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--conf-file=/dev/null",
            "--pid-file=",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--user=root",
            "--address=/shop.example/10.1.2.3",
        ])
        .arg(format!("--port={dns_port}"))
        .spawn()
        .expect("dnsmasq (Debian's dnsmasq-base; scripts/test installs it)");
    let pki = MeshPki::new();
    let port = free_port();
    let both = free_port();
    let dns = SocketAddr::from(([127, 0, 0, 1], dns_port));
    let backends = [service("public", "dns", dns), udp_gateway(both)];
    let routes = [
        udp_route("public", "dns", "2026-01-01T00:00:00Z", "udp", "dns"),
        tcp_route("public", "dns-tcp", "2026-01-01T00:00:00Z", "dns"),
    ];
    let pier = start(port, &pki, &Ca::new("gateway CA"), &backends, &routes).await;
    // dig blocks: off the runtime that serves pier.
    let dig = |extra: &'static str| async move {
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new("dig")
                .args(["@127.0.0.1", "-p", &both.to_string()])
                .args(["shop.example", "A", "+short", "+tries=1", "+time=3", extra])
                .output()
                .expect("dig (Debian's bind9-dnsutils; scripts/test installs it)");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
        .await
        .unwrap()
    };
    // dnsmasq may take a moment to bind.
    eventually(Duration::from_secs(5), || async {
        dig("+notcp").await == "10.1.2.3"
    })
    .await;
    assert_eq!(dig("+notcp").await, "10.1.2.3");
    assert_eq!(dig("+tcp").await, "10.1.2.3");
    pier.shutdown().await;
    let _ = dnsmasq.kill();
    let _ = dnsmasq.wait();
}
