//! `config/examples/edge`: one Gateway that combines PROXY protocol, frontend mTLS and a
//! meshed route, with its certificates from its own `gen-certs.sh`. `pier check` accepts every
//! object, and a request goes through it end to end: a PROXY v2 header naming a client, TLS
//! with a client certificate from the clients' CA, mesh mTLS to a workload that requires
//! pier's client certificate; the access log and the exported span name the PROXY header's
//! client and the workload identity pier checked.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

use pier::proxy::trace::TraceConfig;
use pier::run::{self, RunOptions};
use rustls::pki_types::{CertificateDer, ServerName};
use support::client::{get as request, send_h1_on};
use support::mesh::{Cert, Workload};
use support::otelcol::Collector;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const EXAMPLE: &str = "config/examples/edge";
/// The client address the PROXY header names (TEST-NET-3).
const CLIENT: &str = "203.0.113.7";
/// The workload identity pier checks on shop/web's endpoint (its Pod's ServiceAccount).
const IDENTITY: &str = "URI:spiffe://cluster.local/ns/shop/sa/web";

/// The example in a temporary directory, its ports replaced by `https` and `workload`, and its
/// certificates made by its script.
fn example(https: u16, workload: u16) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["00-gateway.yaml", "10-backends.yaml", "20-routes.yaml"] {
        let text = std::fs::read_to_string(format!("{EXAMPLE}/{f}")).unwrap();
        let text = text
            .replace("port: 8443", &format!("port: {https}"))
            .replace("18443", &workload.to_string());
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    let made = Command::new(format!("{EXAMPLE}/gen-certs.sh"))
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    dir
}

fn certs(dir: &tempfile::TempDir, name: &str) -> Vec<CertificateDer<'static>> {
    Cert::from_files(dir.path(), name).chain
}

/// Every condition `pier check` reports is True, but `Conflicted` (False).
fn all_accepted(status: &str) -> usize {
    let objects: Vec<serde_json::Value> = serde_saphyr::from_str::<serde_json::Value>(status)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let mut checked = 0;
    for o in &objects {
        let s = &o["status"];
        let listeners = s["listeners"].as_array().into_iter().flatten();
        let parents = s["parents"].as_array().into_iter().flatten();
        let lists = [&s["conditions"]]
            .into_iter()
            .chain(listeners.map(|l| &l["conditions"]))
            .chain(parents.map(|p| &p["conditions"]));
        for c in lists.filter_map(|c| c.as_array()).flatten() {
            let want = if c["type"] == "Conflicted" {
                "False"
            } else {
                "True"
            };
            assert_eq!(c["status"], want, "{}: {c}", o["kind"]);
            checked += 1;
        }
    }
    checked
}

/// A PROXY protocol v2 header: TCP over IPv4 from `src` to `dst`.
fn proxy_v2(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (src, dst) else {
        unreachable!()
    };
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&src.ip().octets());
    h.extend_from_slice(&dst.ip().octets());
    h.extend_from_slice(&src.port().to_be_bytes());
    h.extend_from_slice(&dst.port().to_be_bytes());
    h
}

#[tokio::test]
async fn the_edge_example_serves_a_proxied_mtls_client_over_the_mesh() {
    init();
    let (https, workload_port) = (free_port(), free_port());
    let dir = example(https, workload_port);

    // `pier check`: every object Accepted, Programmed, references resolved.
    let out = Command::new(env!("CARGO_BIN_EXE_pier"))
        .args(["check", "--manifests"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(all_accepted(&status) >= 10, "{status}");
    for kind in ["kind: Gateway", "kind: HTTPRoute", "type: Programmed"] {
        assert!(status.contains(kind), "{kind} not in {status}");
    }

    // The meshed workload: the example's workload certificate, pier's CA for clients.
    let workload_cert = Cert::from_files(dir.path(), "web-workload");
    let pier_ca = certs(&dir, "pier-ca");
    let workload =
        Workload::spawn_trusting_on(local(workload_port), &workload_cert, &pier_ca).await;

    let mut collector = Collector::start().await;
    let (logs, _guard) = logs::capture_json();
    let pier = run::start(RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        tracing: Some(TraceConfig::new(
            collector.endpoint.parse().unwrap(),
            "1".parse().unwrap(),
        )),
        ..RunOptions::new(run::Source::Manifests(dir.path().to_path_buf()))
    })
    .await
    .unwrap();

    // The client: alice's certificate, trusting the edge CA.
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(&dir, "edge-ca") {
        roots.add(c).unwrap();
    }
    let with_cert = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots.clone())
            .with_client_auth_cert(
                certs(&dir, "alice"),
                Cert::from_files(dir.path(), "alice").key,
            )
            .unwrap(),
    );
    let client: SocketAddr = format!("{CLIENT}:40000").parse().unwrap();
    let connect = |config: Arc<rustls::ClientConfig>, header: bool| async move {
        let mut tcp = TcpStream::connect(local(https)).await.unwrap();
        if header {
            tcp.write_all(&proxy_v2(client, local(https)))
                .await
                .unwrap();
        }
        let name = ServerName::try_from("app.example").unwrap();
        bounded(TlsConnector::from(config).connect(name, tcp)).await
    };

    let tls = connect(with_cert.clone(), true).await.expect("handshake");
    let resp = bounded(send_h1_on(tls, request("app.example", "/hello"))).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let seen: support::mesh::Seen = serde_json::from_slice(&resp.body).unwrap();
    assert!(seen.tls, "{seen:?}");
    assert_eq!(seen.sni.as_deref(), Some("web.shop.svc.cluster.local"));
    assert_eq!(seen.client_uris, ["spiffe://cluster.local/ns/edge/sa/pier"]);
    assert_eq!(seen.path, "/hello");
    assert_eq!(workload.count(), 1);

    // Without a client certificate: no handshake (the TLS 1.3 client sees it on first read).
    let without = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    if let Ok(mut tls) = connect(without, true).await {
        let _ = tls
            .write_all(b"GET / HTTP/1.1\r\nhost: app.example\r\n\r\n")
            .await;
        let mut buf = Vec::new();
        let read = bounded(tls.read_to_end(&mut buf)).await;
        assert!(
            read.is_err() || buf.is_empty(),
            "answered without a client certificate"
        );
    }
    // Without a PROXY header: closed before TLS.
    assert!(connect(with_cert, false).await.is_err());
    assert_eq!(workload.count(), 1, "nothing else reached the workload");

    // The access log and the span name the client the PROXY header carried.
    let lines = logs.access_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["client"], format!("{CLIENT}:40000"), "{lines:?}");
    assert_eq!(lines[0]["route"], "shop/web");
    assert_eq!(lines[0]["workload_identity"], IDENTITY, "{lines:?}");
    let spans = collector.wait_spans(1).await;
    let span = &spans[0];
    assert_eq!(span.attr("client.address").as_deref(), Some(CLIENT));
    assert_eq!(span.attr("network.peer.address").as_deref(), Some(CLIENT));
    assert_eq!(span.attr("pier.route").as_deref(), Some("shop/web"));
    assert_eq!(
        span.attr("pier.upstream.address"),
        Some(local(workload_port).to_string())
    );
    assert_eq!(
        span.attr("pier.workload_identity").as_deref(),
        lines[0]["workload_identity"].as_str()
    );
    assert_eq!(span.str("traceId"), lines[0]["trace_id"].as_str().unwrap());
    pier.shutdown().await;
}
