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
const GRPC: &str = "grpc.example.com";

struct Env {
    dir: tempfile::TempDir,
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
  hostnames: [{HOST}]
  rules:
    - filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: {{add: [{{name: x-route, value: web}}]}}
        - type: ResponseHeaderModifier
          responseHeaderModifier: {{add: [{{name: x-served-by, value: pier}}]}}
      backendRefs: [{{name: a, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: rpc, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{GRPC}]
  rules:
    - matches: [{{method: {{service: echo.Echo}}}}]
      backendRefs: [{{name: rpc, port: 80}}]
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
    start_with(pier::proxy::Limits::default()).await
}

async fn start_with(limits: pier::proxy::Limits) -> Env {
    init();
    let echo = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    let (h3, tcp_only, mtls) = (free_port(), free_port(), free_port());
    let server =
        rcgen::generate_simple_self_signed(vec![HOST.to_string(), GRPC.to_string()]).unwrap();
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
        (
            "svc.yaml",
            format!(
                "{}---\n{}",
                service("a", echo.addr),
                service_pool(
                    "rpc",
                    echo.addr.port(),
                    &["127.0.0.1"],
                    Some("kubernetes.io/h2c")
                )
            ),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let pier = run::start(run::RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        limits,
        ..run::RunOptions::new(run::Source::Manifests(dir.path().to_path_buf()))
    })
    .await
    .unwrap();
    let env = Env {
        dir,
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

/// Runs aioquic's client (`tests/http3/client.py`) against `port` for `host`, trusting the
/// CA in `ca_pem`, with `requests` (`METHOD PATH [BODY_BYTES]`): one JSON answer per request.
async fn aioquic(port: u16, host: &str, ca_pem: &str, requests: &[&str]) -> Vec<serde_json::Value> {
    let python = std::env::var("PIER_AIOQUIC_PYTHON").expect(
        "PIER_AIOQUIC_PYTHON: a Python with aioquic (scripts/test makes one in ~/.cache/pier/aioquic)",
    );
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/http3/client.py");
    let args: Vec<String> = ["--port", &port.to_string(), "--host", host, "--ca"]
        .iter()
        .map(|s| s.to_string())
        .chain([ca.display().to_string()])
        .chain(requests.iter().map(|s| s.to_string()))
        .collect();
    // The script bounds itself (60 s).
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "aioquic's client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Gateway `gw/edge` with an HTTP listener and an HTTP/3 listener (`https`), meshing routes
/// labelled `mesh: enabled`.
fn meshed_files(
    pki: &support::mesh::MeshPki,
    http: u16,
    https: u16,
    server: &rcgen::CertifiedKey<rcgen::KeyPair>,
    workload: SocketAddr,
    plain: SocketAddr,
) -> Vec<(&'static str, String)> {
    use support::mesh::*;
    let listener = format!(
        "    - name: https
      protocol: HTTPS
      port: {https}
      allowedRoutes: {{namespaces: {{from: All}}}}
      tls: {{certificateRefs: [{{name: cert}}]}}
"
    );
    let selector = "    selector: {matchLabels: {mesh: enabled}}\n";
    vec![
        ("00-class.yaml", GATEWAY_CLASS.to_string()),
        (
            "10-gateway.yaml",
            gateway(http, &format!("{listener}{}", mesh_spec(selector))),
        ),
        (
            "11-policy.yaml",
            "apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {name: h3, namespace: gw}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge, sectionName: https}]
  http3: {}
"
            .to_string(),
        ),
        (
            "12-cert.yaml",
            tls_secret_pem(
                "gw",
                "cert",
                &server.cert.pem(),
                &server.signing_key.serialize_pem(),
            ),
        ),
        (
            "20-backends.yaml",
            format!(
                "{}---\n{}",
                service("app", "web", workload),
                service("public", "site", plain)
            ),
        ),
        (
            "30-routes.yaml",
            format!(
                "{}---\n{}",
                route("app", "web", "mesh: enabled", "web"),
                route("public", "site", "", "site")
            ),
        ),
        ("40-client.yaml", pier_client_secret(pki)),
        ("41-bundle.yaml", bundle(&[&pki.mesh_ca])),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meshed_and_plain_routes_over_http3_from_two_independent_clients() {
    use support::mesh::{MeshPki, Pier, Seen, Workload};
    let pki = MeshPki::new();
    let workload = Workload::spawn(&pki.workload, &pki.client_ca).await;
    let site = support::echo("site").await;
    let (http, https) = (free_port(), free_port());
    let server = rcgen::generate_simple_self_signed(vec![
        "web.example".to_string(),
        "site.example".to_string(),
    ])
    .unwrap();
    let files = meshed_files(&pki, http, https, &server, workload.addr, site.addr);
    let pier = Pier::start(http, &files).await;
    let roots = [server.cert.der().clone()];
    let wait = bounded(async {
        loop {
            if let Ok(r) =
                support::h3::get(local(https), "site.example", "/", tls(&roots, None)).await
                && r.status == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    wait.await;

    // quinn + h3: the meshed route reaches the workload over mTLS with pier's certificate,
    // the plain one the echo server in plaintext.
    let mut c = H3::connect(local(https), "web.example", tls(&roots, None))
        .await
        .unwrap();
    let r = c.get("web.example", "/m", &[]).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let seen: Seen = serde_json::from_slice(&r.body).unwrap();
    assert!(seen.tls, "{seen:?}");
    assert_eq!(
        seen.client_cert_sha256.as_deref(),
        Some(pki.pier.leaf_sha256().as_str())
    );
    let r = c.get("site.example", "/p", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.echo().backend, "site");
    c.close().await;

    // aioquic: the same, concurrently on one connection, with a body up.
    let answers = aioquic(
        https,
        "web.example",
        &server.cert.pem(),
        &["GET /a", "GET /b", "POST /c 200000"],
    )
    .await;
    assert_eq!(answers.len(), 3);
    for a in &answers {
        assert_eq!(a["status"], 200, "{a}");
        let seen: Seen = serde_json::from_str(a["body"].as_str().unwrap()).unwrap();
        assert!(seen.tls, "{seen:?}");
        assert_eq!(
            seen.client_cert_sha256.as_deref(),
            Some(pki.pier.leaf_sha256().as_str())
        );
        assert_eq!(seen.path, a["path"].as_str().unwrap());
    }
    let answers = aioquic(https, "site.example", &server.cert.pem(), &["GET /x"]).await;
    assert_eq!(answers[0]["status"], 200);
    assert!(
        answers[0]["body"]
            .as_str()
            .unwrap()
            .contains("\"backend\":\"site\"")
    );
    pier.shutdown().await;
}

/// A UDP relay in front of `target` that drops `percent` of the datagrams each way (a fixed
/// pseudo-random sequence): a lossy path on loopback. (The test kernel may have no `netem`.)
async fn lossy_relay(
    target: SocketAddr,
    percent: u32,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::net::UdpSocket;
    let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let back = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    back.connect(target).await.unwrap();
    let addr = front.local_addr().unwrap();
    let client = Arc::new(std::sync::Mutex::new(None::<SocketAddr>));
    // xorshift: the same losses on every run.
    let drop = Arc::new(std::sync::Mutex::new(0x9e37_79b9_u32));
    let lose = move || {
        let mut s = drop.lock().unwrap();
        *s ^= *s << 13;
        *s ^= *s >> 17;
        *s ^= *s << 5;
        *s % 100 < percent
    };
    let task = tokio::spawn({
        let (front, back, client) = (front.clone(), back.clone(), client.clone());
        let lose_up = lose.clone();
        async move {
            let up = async {
                let mut buf = vec![0u8; 65_535];
                loop {
                    let (n, from) = front.recv_from(&mut buf).await.unwrap();
                    *client.lock().unwrap() = Some(from);
                    if !lose_up() {
                        let _ = back.send(&buf[..n]).await;
                    }
                }
            };
            let down = async {
                let mut buf = vec![0u8; 65_535];
                loop {
                    let n = back.recv(&mut buf).await.unwrap();
                    let to = *client.lock().unwrap();
                    if let Some(to) = to
                        && !lose()
                    {
                        let _ = front.send_to(&buf[..n], to).await;
                    }
                }
            };
            tokio::join!(up, down);
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_complete_over_a_path_that_loses_a_tenth_of_its_packets() {
    let env = start().await;
    let (relay, task) = lossy_relay(local(env.h3), 10).await;
    let mut c = H3::connect(relay, HOST, env.tls()).await.unwrap();
    // 2 MiB up through the loss, then 50 requests and their answers.
    let big = Bytes::from(vec![b'y'; 2 << 20]);
    let r = c
        .send(
            Request::post(format!("https://{HOST}/up"))
                .body(())
                .unwrap(),
            big,
        )
        .await
        .unwrap();
    assert_eq!(r.echo().body_bytes, 2 << 20);
    for i in 0..50 {
        let r = c.get(HOST, &format!("/small/{i}"), &[]).await.unwrap();
        assert_eq!(r.echo().path, format!("/small/{i}"));
    }
    // Retransmissions happened: the loss was real.
    assert!(c.conn.stats().path.lost_packets > 0, "{:?}", c.conn.stats());
    c.close().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_over_http3_takes_its_grpc_route_to_an_h2c_backend() {
    let env = start().await;
    let mut c = H3::connect(local(env.h3), GRPC, env.tls()).await.unwrap();
    // One unary call: a length-prefixed message up, the answer's message and grpc-status in
    // the trailers back.
    let message = b"hello";
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    let req = Request::post(format!("https://{GRPC}/echo.Echo/Say"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let r = c.send(req, Bytes::from(framed)).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "application/grpc");
    assert_eq!(r.headers["grpc-status"], "0", "{:?}", r.headers);
    let answer: serde_json::Value = serde_json::from_slice(&r.body[5..]).unwrap();
    assert_eq!(answer["backend"], "a");
    assert_eq!(answer["path"], "/echo.Echo/Say");
    assert_eq!(
        answer["protocol"], "HTTP/2.0",
        "to the h2c backend over HTTP/2"
    );
    // A method the route does not match: gRPC's own answer, not an HTTP error page.
    let req = Request::post(format!("https://{GRPC}/other.Svc/Call"))
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let r = c.send(req, Bytes::new()).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["grpc-status"], "12",
        "UNIMPLEMENTED: {:?}",
        r.headers
    );
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unproven_addresses_get_a_retry_and_clients_may_move() {
    // Address validation for every new client (as under a flood of Initials).
    let env = start_with(pier::proxy::Limits {
        quic_validate_above: 0,
        ..Default::default()
    })
    .await;
    let retries = |m: &str| {
        support::cluster::sample(
            m,
            &format!(
                r#"pier_proxy_downstream_quic_retries_total{{port="{}"}}"#,
                env.h3
            ),
        )
    };
    let before = retries(&env.metrics().await);
    let mut c = H3::connect(local(env.h3), HOST, env.tls()).await.unwrap();
    let r = c.get(HOST, "/one", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    let after = retries(&env.metrics().await);
    assert!(after > before, "no Retry sent: {before} -> {after}");
    // Connection migration: the client's address changes (a new UDP port, as a phone that
    // moves from Wi-Fi to mobile data) and the connection carries on.
    let moved = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let new_port = moved.local_addr().unwrap().port();
    c.rebind(moved);
    for i in 0..5 {
        let r = c.get(HOST, &format!("/moved/{i}"), &[]).await.unwrap();
        assert_eq!(r.echo().path, format!("/moved/{i}"));
    }
    assert_eq!(c.local_port(), new_port);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_refused() {
    let env = start_with(pier::proxy::Limits {
        max_connections: 2,
        ..Default::default()
    })
    .await;
    // start() made and closed one; wait until pier has let it go.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = H3::connect(local(env.h3), HOST, env.tls()).await.unwrap();
    let b = H3::connect(local(env.h3), HOST, env.tls()).await.unwrap();
    let third = H3::connect(local(env.h3), HOST, env.tls()).await;
    assert!(third.is_err(), "a third connection was let in");
    let refused = support::cluster::sample(
        &env.metrics().await,
        &format!(
            r#"pier_proxy_downstream_quic_refused_total{{port="{}"}}"#,
            env.h3
        ),
    );
    assert!(refused >= 1.0, "{refused}");
    // One closes: room for another.
    a.close().await;
    let ok = bounded(async {
        loop {
            if let Ok(mut c) = H3::connect(local(env.h3), HOST, env.tls()).await {
                let r = c.get(HOST, "/", &[]).await;
                c.close().await;
                if r.is_ok_and(|r| r.status == 200) {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(ok);
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_tls_settings_reach_a_bound_quic_endpoint_and_reloads_carry_on() {
    let env = start().await;
    // The HTTP/3 listeners' policy now asks for TLS 1.3 only (the QUIC endpoint's settings
    // change while it is bound), and a new Gateway's port comes in the same reload.
    let extra = free_port();
    let path = env.dir.path().join("gw.yaml");
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "  http3: {}\n",
        "  http3: {}\n  tls: {minVersion: '1.3'}\n",
        1,
    );
    let text = format!(
        "{text}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: extra, namespace: default}}
spec:
  gatewayClassName: pier
  listeners: [{{name: http, protocol: HTTP, port: {extra}}}]
"
    );
    write_atomic(&path, &text);
    let bound = bounded(async {
        while tokio::net::TcpStream::connect(local(extra)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    bound.await;
    // HTTP/3 is still served, under the new settings.
    let r = support::h3::get(local(env.h3), HOST, "/after", env.tls())
        .await
        .unwrap();
    assert_eq!(r.echo().path, "/after");
}
