//! PROXY protocol on listeners (`pier.dev/proxy-protocol`), end to end: pier from manifests
//! behind HAProxy from Debian in `mode tcp` with `send-proxy` (v1) and `send-proxy-v2`, plain
//! HTTP and HTTPS (TLS terminated by pier after the header). The echo backend sees the
//! original client in `X-Forwarded-For`; a connection without a header is closed.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use pier::run::{self, RunOptions};
use rustls::pki_types::ServerName;
use support::client::{Resp, get as request, send_h1_on};
use support::haproxy::{Haproxy, Send};
use support::web::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

/// A connection to `addr` from `source` (any 127/8 address is local on Linux).
async fn connect_from(source: IpAddr, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    bounded(socket.connect(addr)).await.unwrap()
}

async fn http_get(source: IpAddr, addr: SocketAddr) -> Resp {
    let tcp = connect_from(source, addr).await;
    bounded(send_h1_on(tcp, request("foo.example.com", "/x"))).await
}

async fn https_get(source: IpAddr, addr: SocketAddr, client: Arc<rustls::ClientConfig>) -> Resp {
    let tcp = connect_from(source, addr).await;
    let name = ServerName::try_from("foo.example.com").unwrap();
    let tls = bounded(TlsConnector::from(client).connect(name, tcp))
        .await
        .unwrap();
    bounded(send_h1_on(tls, request("foo.example.com", "/x"))).await
}

fn xff(resp: &Resp) -> Vec<String> {
    resp.echo()
        .headers
        .get("x-forwarded-for")
        .cloned()
        .unwrap_or_default()
}

/// Reads until the peer closes; `true` when it closed without sending anything.
async fn closed_without_answer(mut tcp: TcpStream) -> bool {
    let mut buf = vec![];
    match bounded(tcp.read_to_end(&mut buf)).await {
        Ok(_) => buf.is_empty(),
        Err(_) => true,
    }
}

#[tokio::test]
async fn haproxy_send_proxy_v1_and_v2_carry_the_client_address_over_http_and_https() {
    init();
    let echo = pier::echo::spawn(local(0), "a").await.unwrap();
    let (http_port, https_port) = (free_port(), free_port());
    let ck = rcgen::generate_simple_self_signed(vec!["foo.example.com".to_string()]).unwrap();
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("all.yaml"),
        format!(
            "{GATEWAY_CLASS}---\n\
             apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata:\n  name: gw\n  namespace: default\n\
             \x20 annotations: {{pier.dev/proxy-protocol: \"true\"}}\n\
             spec:\n  gatewayClassName: pier\n  listeners:\n\
             \x20   - {{name: http, protocol: HTTP, port: {http_port}}}\n\
             \x20   - name: https\n      protocol: HTTPS\n      port: {https_port}\n\
             \x20     tls: {{certificateRefs: [{{name: cert}}]}}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: default}}\n\
             type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}---\n{}---\n{}",
            indent(&ck.cert.pem()),
            indent(&ck.signing_key.serialize_pem()),
            service("a", echo.addr),
            route("r", "/", "a")
        ),
    )
    .unwrap();
    let pier = run::start(RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        access_log: true,
        ..RunOptions::new(run::Source::Manifests(dir.path().to_path_buf()))
    })
    .await
    .unwrap();
    let haproxy = Haproxy::start(&[
        (local(http_port), Send::V2),
        (local(http_port), Send::V1),
        (local(https_port), Send::V2),
        (local(https_port), Send::V1),
    ])
    .await;
    let [http_v2, http_v1, https_v2, https_v1] = haproxy.frontends[..] else {
        unreachable!()
    };

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let client = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    for source in [IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 2])] {
        for (name, frontend) in [("http v2", http_v2), ("http v1", http_v1)] {
            let resp = http_get(source, frontend).await;
            assert_eq!(resp.status, 200, "{name}: {resp:?}");
            assert_eq!(xff(&resp), [source.to_string()], "{name} from {source}");
        }
        for (name, frontend) in [("https v2", https_v2), ("https v1", https_v1)] {
            let resp = https_get(source, frontend, client.clone()).await;
            assert_eq!(resp.status, 200, "{name}: {resp:?}");
            assert_eq!(xff(&resp), [source.to_string()], "{name} from {source}");
        }
    }

    // Straight to pier, without a header: closed before any HTTP or TLS.
    let mut direct = connect_from([127, 0, 0, 2].into(), local(http_port)).await;
    direct
        .write_all(b"GET /x HTTP/1.1\r\nHost: foo.example.com\r\n\r\n")
        .await
        .unwrap();
    assert!(
        closed_without_answer(direct).await,
        "plain HTTP was answered"
    );
    let tcp = connect_from([127, 0, 0, 2].into(), local(https_port)).await;
    let name = ServerName::try_from("foo.example.com").unwrap();
    let handshake = bounded(TlsConnector::from(client.clone()).connect(name, tcp)).await;
    assert!(handshake.is_err(), "TLS without a header was accepted");
    // A malformed header is closed too.
    let mut bad = connect_from([127, 0, 0, 2].into(), local(http_port)).await;
    bad.write_all(b"PROXY TCP4 not-an-address 127.0.0.1 1 2\r\nGET / HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert!(
        closed_without_answer(bad).await,
        "malformed header was answered"
    );

    let metrics = get(&format!("http://{}/metrics", pier.admin_addr), &[])
        .await
        .text();
    let count = |port: u16, result: &str| -> u64 {
        let want =
            format!("pier_proxy_proxy_protocol_total{{port=\"{port}\",result=\"{result}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(want.as_str()))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    // HAProxy's start-up probes connect too (and send a header), so at least the requests.
    assert!(count(http_port, "proxied") >= 4, "{metrics}");
    assert!(count(https_port, "proxied") >= 4, "{metrics}");
    assert_eq!(count(http_port, "missing"), 1, "{metrics}");
    assert_eq!(count(https_port, "missing"), 1, "{metrics}");
    assert_eq!(count(http_port, "malformed"), 1, "{metrics}");
    // HAProxy's health checks (`check` on the send-proxy-v2 servers) come as v2 LOCAL: served,
    // with the socket's peer as the client.
    eventually(std::time::Duration::from_secs(5), || async {
        let metrics = get(&format!("http://{}/metrics", pier.admin_addr), &[])
            .await
            .text();
        metrics.contains(&format!(
            "pier_proxy_proxy_protocol_total{{port=\"{http_port}\",result=\"local\"}}"
        ))
    })
    .await;
    let status = get(&format!("http://{}/status", pier.admin_addr), &[])
        .await
        .text();
    assert!(status.contains("PROXY protocol header"), "{status}");
    drop(haproxy);
    pier.shutdown().await;
}

/// Manifests routing a Gateway on a free port (returned) to an echo backend, with
/// `pier.dev/proxy-protocol: <annotation>` (YAML); the backend and directory must outlive pier.
async fn proxied_route(annotation: &str) -> (pier::echo::EchoServer, tempfile::TempDir, u16) {
    let echo = pier::echo::spawn(local(0), "a").await.unwrap();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(port).replace(
        "metadata: {name: gw, namespace: default}",
        &format!(
            "metadata:\n  name: gw\n  namespace: default\n  \
             annotations: {{pier.dev/proxy-protocol: {annotation}}}"
        ),
    );
    std::fs::write(
        dir.path().join("all.yaml"),
        format!(
            "{gw}---\n{}---\n{}",
            service("a", echo.addr),
            route("r", "/", "a")
        ),
    )
    .unwrap();
    (echo, dir, port)
}

/// A header that never ends is cut off after the 5 s timeout, before any HTTP.
#[tokio::test]
async fn a_header_that_never_completes_is_closed_after_the_timeout() {
    init();
    let (_echo, dir, port) = proxied_route("http").await;
    let pier = run::start(RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..RunOptions::new(run::Source::Manifests(dir.path().to_path_buf()))
    })
    .await
    .unwrap();
    let mut slow = TcpStream::connect(local(port)).await.unwrap();
    slow.write_all(b"PROXY TCP4 192.0.2.7 ").await.unwrap();
    let started = std::time::Instant::now();
    assert!(closed_without_answer(slow).await);
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(4) && waited < std::time::Duration::from_secs(8),
        "{waited:?}"
    );
    let metrics = get(&format!("http://{}/metrics", pier.admin_addr), &[])
        .await
        .text();
    assert!(
        metrics.contains(&format!(
            "pier_proxy_proxy_protocol_total{{port=\"{port}\",result=\"timeout\"}} 1"
        )),
        "{metrics}"
    );
    pier.shutdown().await;
}

/// Behind an L4 balancer the HTTP bytes are the client's, so `--trusted-proxies` is checked
/// against the client the PROXY header names, not the balancer that sent it.
#[tokio::test]
async fn trusted_proxies_are_checked_against_the_address_the_header_names() {
    init();
    let (_echo, dir, port) = proxied_route("\"true\"").await;
    let pier = run::start(RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        // The balancer (127.0.0.2) and an L7 proxy in front of it (198.51.100.0/24).
        trusted_proxies: "127.0.0.2, 198.51.100.0/24".parse().unwrap(),
        ..RunOptions::new(run::Source::Manifests(dir.path().to_path_buf()))
    })
    .await
    .unwrap();
    // `client` (named in the header) sends a spoofed X-Forwarded-For through the balancer.
    let via_balancer = |client: &'static str| async move {
        let mut tcp = connect_from([127, 0, 0, 2].into(), local(port)).await;
        let header = format!("PROXY TCP4 {client} 127.0.0.1 40000 {port}\r\n");
        tcp.write_all(header.as_bytes()).await.unwrap();
        let mut req = request("foo.example.com", "/x");
        req.headers_mut()
            .insert("x-forwarded-for", "6.6.6.6".parse().unwrap());
        xff(&bounded(send_h1_on(tcp, req)).await)
    };
    // A client on the internet: replaced, though the balancer itself is trusted.
    assert_eq!(via_balancer("203.0.113.5").await, ["203.0.113.5"]);
    // The trusted L7 proxy: its list is kept and it is appended.
    assert_eq!(
        via_balancer("198.51.100.9").await,
        ["6.6.6.6, 198.51.100.9"]
    );
    pier.shutdown().await;
}
