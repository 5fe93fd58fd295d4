//! Tracing end to end (`--otlp-endpoint`, `--trace-sample-ratio`): W3C trace context through
//! pier to an echo backend, and spans exported over OTLP/HTTP protobuf to a real
//! OpenTelemetry Collector (`scripts/otelcol.sh`), over the HTTP/1.1 fast path and HTTP/2
//! (hyper's path). Over `https://` too: the collector's receiver on TLS with certificates made
//! here, verified by pier against `--otlp-ca-file` (a wrong CA or name exports nothing, in
//! plaintext or otherwise), and mTLS with `--otlp-client-cert`/`--otlp-client-key`.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use pier::proxy::trace::{TlsFiles, TraceConfig};
use pier::run::{self, RunOptions};
use support::client::{Resp, collect, send_h1_on, send_h2};
use support::otelcol::{Collector, ServerTls};
use support::pki::Pki;
use support::web::*;
use support::*;
use tokio::net::{TcpSocket, TcpStream};

const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

struct Pier {
    running: run::Running,
    port: u16,
    echo: pier::echo::EchoServer,
    _dir: tempfile::TempDir,
}

/// pier from manifests: one HTTP listener, `/` to an echo backend (HTTPRoute `default/r`).
async fn start(tracing: Option<TraceConfig>, trusted: &str) -> Pier {
    start_logged(tracing, trusted, false).await
}

/// [`start`], with the access log on or off. (Only the test that reads the access log turns
/// it on: tests in one binary run in parallel, and `tracing`'s per-callsite interest cache
/// can miss a thread's own subscriber when other threads hit the same callsite first.)
async fn start_logged(tracing: Option<TraceConfig>, trusted: &str, access_log: bool) -> Pier {
    try_start(tracing, trusted, access_log).await.unwrap()
}

/// [`start_logged`], returning pier's start-up error.
async fn try_start(
    tracing: Option<TraceConfig>,
    trusted: &str,
    access_log: bool,
) -> anyhow::Result<Pier> {
    init();
    let echo = echo("a").await;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("all.yaml"),
        format!(
            "{}---\n{}---\n{}---\n{}---\n{}",
            gateway(port),
            service("a", echo.addr),
            route("r", "/", "a"),
            service("gone", refused_addr()),
            route("down", "/down", "gone")
        ),
    )
    .unwrap();
    let running = run::start(RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        access_log,
        trusted_proxies: trusted.parse().unwrap(),
        tracing,
        ..RunOptions::new(run::Source::Manifests(dir.path().to_path_buf()))
    })
    .await?;
    Ok(Pier {
        running,
        port,
        echo,
        _dir: dir,
    })
}

fn traced(endpoint: &str, ratio: &str) -> Option<TraceConfig> {
    Some(TraceConfig::new(
        endpoint.parse().unwrap(),
        ratio.parse().unwrap(),
    ))
}

fn request(
    version: http::Version,
    port: u16,
    headers: &[(&str, &str)],
) -> http::Request<Full<Bytes>> {
    let mut req = http::Request::get(format!("http://app.example:{port}/x?q=1")).version(version);
    if version == http::Version::HTTP_11 {
        req = req.header("host", format!("app.example:{port}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Full::default()).unwrap()
}

/// A GET over HTTP/1.1 (pier's fast path) or HTTP/2 (hyper's), from `source`.
async fn send(version: http::Version, source: IpAddr, port: u16, headers: &[(&str, &str)]) -> Resp {
    if version == http::Version::HTTP_2 {
        assert!(source.is_loopback());
        return bounded(send_h2(local(port), request(version, port, headers))).await;
    }
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let tcp = bounded(socket.connect(local(port))).await.unwrap();
    let mut req = request(version, port, headers);
    *req.uri_mut() = "/x?q=1".parse().unwrap();
    bounded(send_h1_on(tcp, req)).await
}

/// The one value of `name` the echo backend received.
fn upstream(resp: &Resp, name: &str) -> Option<String> {
    let values = resp.echo().headers.get(name).cloned().unwrap_or_default();
    assert!(values.len() <= 1, "{name}: {values:?}");
    values.into_iter().next()
}

/// `(trace id, span id, flags)` of a version-00 `traceparent`.
fn parts(traceparent: &str) -> (String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    assert_eq!(p[0], "00", "{traceparent}");
    assert_eq!(traceparent.len(), 55, "{traceparent}");
    (p[1].to_string(), p[2].to_string(), p[3].to_string())
}

fn metric(text: &str, result: &str) -> u64 {
    let prefix = format!("pier_proxy_trace_spans_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

async fn metrics(pier: &Pier) -> String {
    cluster::metrics(&pier.running).await
}

#[tokio::test]
async fn incoming_traceparent_is_continued_and_the_span_exported_with_its_parent() {
    let mut collector = Collector::start().await;
    let (logs, _guard) = logs::capture_json();
    let pier = start_logged(traced(&collector.endpoint, "1"), "", true).await;
    let incoming = format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01");
    let mut sent = Vec::new();
    for version in [http::Version::HTTP_11, http::Version::HTTP_2] {
        let resp = send(
            version,
            [127, 0, 0, 1].into(),
            pier.port,
            &[
                ("traceparent", &incoming),
                ("tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
            ],
        )
        .await;
        assert_eq!(resp.status, 200, "{version:?}: {resp:?}");
        let up = upstream(&resp, "traceparent").expect("traceparent upstream");
        let (trace, span, flags) = parts(&up);
        assert_eq!(trace, PARENT_TRACE, "{version:?}: the trace is continued");
        assert_ne!(
            span, PARENT_SPAN,
            "{version:?}: pier's own span is the parent"
        );
        assert_eq!(flags, "01", "{version:?}");
        assert_eq!(
            upstream(&resp, "tracestate").as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
            "{version:?}"
        );
        sent.push((version, span));
    }

    let spans = collector.wait_spans(2).await;
    assert_eq!(spans.len(), 2, "{spans:?}");
    for (version, span_id) in &sent {
        let s = spans
            .iter()
            .find(|s| s.str("spanId") == *span_id)
            .unwrap_or_else(|| panic!("{version:?}: no span {span_id} in {spans:?}"));
        assert_eq!(s.str("traceId"), PARENT_TRACE);
        assert_eq!(s.str("parentSpanId"), PARENT_SPAN);
        assert_eq!(s.span["kind"], 2, "SPAN_KIND_SERVER: {s:?}");
        assert_eq!(s.str("name"), "GET /");
        assert_eq!(s.attr("http.request.method").as_deref(), Some("GET"));
        assert_eq!(s.attr("url.path").as_deref(), Some("/x"));
        assert_eq!(s.attr("http.response.status_code").as_deref(), Some("200"));
        assert_eq!(s.attr("http.route").as_deref(), Some("/"));
        assert_eq!(s.attr("server.address").as_deref(), Some("app.example"));
        assert_eq!(s.attr("server.port"), Some(pier.port.to_string()));
        assert_eq!(s.attr("client.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(s.attr("network.peer.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(s.attr("pier.route").as_deref(), Some("default/r"));
        assert_eq!(s.attr("pier.rule").as_deref(), Some("0"));
        assert_eq!(
            s.attr("pier.upstream.address"),
            Some(pier.echo.addr.to_string())
        );
        assert_eq!(s.attr("error.type"), None);
        assert!(
            s.span["status"].get("code").is_none(),
            "unset status: {s:?}"
        );
        assert_eq!(s.resource_attr("service.name").as_deref(), Some("pier"));
    }
    // The access log names the trace.
    let lines = logs.access_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l["trace_id"] == PARENT_TRACE),
        "{lines:?}"
    );

    // A 5xx is an error span.
    let tcp = TcpStream::connect(local(pier.port)).await.unwrap();
    let req = http::Request::get("/down/x")
        .header("host", "app.example")
        .header("traceparent", &incoming)
        .body(Full::<Bytes>::default())
        .unwrap();
    let resp = bounded(send_h1_on(tcp, req)).await;
    assert_eq!(resp.status, 502, "connection refused");
    let spans = collector.wait_spans(3).await;
    let s = spans
        .iter()
        .find(|s| s.attr("url.path").as_deref() == Some("/down/x"))
        .expect("the 502's span");
    assert_eq!(s.str("name"), "GET /down");
    assert_eq!(s.span["status"]["code"], 2, "STATUS_CODE_ERROR: {s:?}");
    assert_eq!(s.attr("http.response.status_code").as_deref(), Some("502"));
    assert!(s.attr("error.type").is_some(), "{s:?}");
    assert_eq!(s.attr("pier.route").as_deref(), Some("default/down"));
    assert_eq!(metric(&metrics(&pier).await, "exported"), 3);
    pier.running.shutdown().await;
}

#[tokio::test]
async fn without_a_valid_traceparent_pier_starts_a_trace() {
    let mut collector = Collector::start().await;
    let pier = start(traced(&collector.endpoint, "1"), "").await;
    let invalid = [
        // None, uppercase hex, an all-zero trace ID, two lines.
        vec![],
        vec![(
            "traceparent",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        )],
        vec![(
            "traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        )],
        vec![
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4737-00f067aa0ba902b7-01",
            ),
        ],
    ];
    let mut ids = Vec::new();
    for (i, headers) in invalid.iter().enumerate() {
        let mut headers = headers.clone();
        headers.push(("tracestate", "rojo=1"));
        for version in [http::Version::HTTP_11, http::Version::HTTP_2] {
            let resp = send(version, [127, 0, 0, 1].into(), pier.port, &headers).await;
            assert_eq!(resp.status, 200);
            let (trace, span, flags) = parts(&upstream(&resp, "traceparent").unwrap());
            assert_ne!(trace, PARENT_TRACE, "case {i} {version:?}");
            assert!(trace.bytes().any(|b| b != b'0'));
            assert_eq!(flags, "01");
            // The tracestate of a trace pier did not continue is not passed on.
            assert_eq!(upstream(&resp, "tracestate"), None, "case {i} {version:?}");
            ids.push((trace, span));
        }
    }
    let spans = collector.wait_spans(ids.len()).await;
    for (trace, span) in &ids {
        let s = spans
            .iter()
            .find(|s| s.str("spanId") == *span)
            .unwrap_or_else(|| panic!("no span {span}"));
        assert_eq!(s.str("traceId"), *trace);
        assert_eq!(s.str("parentSpanId"), "", "a root span: {s:?}");
    }
    let traces: std::collections::BTreeSet<_> = ids.iter().map(|(t, _)| t).collect();
    assert_eq!(traces.len(), ids.len(), "a new trace per request");
    pier.running.shutdown().await;
}

#[tokio::test]
async fn ratio_0_exports_nothing_but_propagates_and_only_a_trusted_parent_decides() {
    let mut collector = Collector::start().await;
    // 127.0.0.2 is a trusted proxy; 127.0.0.1 is any client.
    let pier = start(traced(&collector.endpoint, "0"), "127.0.0.2").await;
    let incoming = format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01");
    let headers = [("traceparent", incoming.as_str())];
    for version in [http::Version::HTTP_11, http::Version::HTTP_2] {
        // An untrusted client's sampled flag does not make pier sample.
        let resp = send(version, [127, 0, 0, 1].into(), pier.port, &headers).await;
        let (trace, span, flags) = parts(&upstream(&resp, "traceparent").unwrap());
        assert_eq!((trace.as_str(), flags.as_str()), (PARENT_TRACE, "00"));
        assert_ne!(span, PARENT_SPAN);
        // Nor is a request without one sampled; it still gets a traceparent.
        let resp = send(version, [127, 0, 0, 1].into(), pier.port, &[]).await;
        let (_, _, flags) = parts(&upstream(&resp, "traceparent").unwrap());
        assert_eq!(flags, "00");
    }
    // A trusted proxy's sampled parent is honoured.
    let resp = send(
        http::Version::HTTP_11,
        [127, 0, 0, 2].into(),
        pier.port,
        &headers,
    )
    .await;
    let (trace, trusted_span, flags) = parts(&upstream(&resp, "traceparent").unwrap());
    assert_eq!((trace.as_str(), flags.as_str()), (PARENT_TRACE, "01"));

    let spans = collector.wait_spans(1).await;
    // Shutdown exports what is queued; the collector then has written everything.
    let text = metrics(&pier).await;
    pier.running.shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let spans_after = collector.spans();
    assert_eq!(
        spans_after.len(),
        1,
        "only the trusted parent's: {spans_after:?}"
    );
    assert_eq!(spans[0].str("spanId"), trusted_span);
    assert_eq!(
        spans[0].attr("client.address").as_deref(),
        Some("127.0.0.2")
    );
    assert_eq!(metric(&text, "dropped"), 0);
}

#[tokio::test]
async fn spans_still_queued_are_exported_at_shutdown() {
    let mut collector = Collector::start().await;
    // No batch is due for an hour: only the shutdown flush sends these.
    let mut config = traced(&collector.endpoint, "1");
    config.as_mut().unwrap().export_every = Duration::from_secs(3600);
    let pier = start(config, "").await;
    let mut span_ids = Vec::new();
    for version in [
        http::Version::HTTP_11,
        http::Version::HTTP_2,
        http::Version::HTTP_11,
    ] {
        let resp = send(version, [127, 0, 0, 1].into(), pier.port, &[]).await;
        assert_eq!(resp.status, 200);
        span_ids.push(parts(&upstream(&resp, "traceparent").unwrap()).1);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(collector.spans().is_empty(), "exported before shutdown");
    pier.running.shutdown().await;
    let spans = collector.wait_spans(3).await;
    let mut got: Vec<String> = spans.iter().map(|s| s.str("spanId")).collect();
    got.sort();
    span_ids.sort();
    assert_eq!(got, span_ids);
}

#[tokio::test]
async fn disabled_tracing_passes_trace_headers_unchanged() {
    let pier = start(None, "").await;
    // Valid or not, pier neither reads nor rewrites them.
    for parent in [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "not-a-traceparent",
    ] {
        for version in [http::Version::HTTP_11, http::Version::HTTP_2] {
            let headers = [("traceparent", parent), ("tracestate", "rojo=1, congo=2")];
            let resp = send(version, [127, 0, 0, 1].into(), pier.port, &headers).await;
            assert_eq!(resp.status, 200);
            assert_eq!(upstream(&resp, "traceparent").as_deref(), Some(parent));
            assert_eq!(
                upstream(&resp, "tracestate").as_deref(),
                Some("rojo=1, congo=2")
            );
            let resp = send(version, [127, 0, 0, 1].into(), pier.port, &[]).await;
            assert_eq!(upstream(&resp, "traceparent"), None, "none made up");
        }
    }
    assert!(
        !metrics(&pier)
            .await
            .contains("pier_proxy_trace_spans_total{")
    );
    pier.running.shutdown().await;
}

/// An OTLP endpoint that accepts connections and never answers: every export hangs until its
/// timeout, so the queue fills.
async fn black_hole() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(local(0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_does_not_answer_never_fails_or_slows_requests() {
    let (addr, hole) = black_hole().await;
    let pier = start(traced(&format!("http://{addr}"), "1"), "").await;
    // More sampled requests than the queue and one batch hold, on keep-alive connections.
    let per_conn = 1000;
    let conns = 4;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let port = pier.port;
        tasks.push(tokio::spawn(async move {
            let tcp = TcpStream::connect(local(port)).await.unwrap();
            let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut slowest = Duration::ZERO;
            for _ in 0..per_conn {
                let t = Instant::now();
                let req = http::Request::get("/x")
                    .header("host", "app.example")
                    .body(Full::<Bytes>::default())
                    .unwrap();
                let resp = collect(tx.send_request(req).await.unwrap()).await;
                assert_eq!(resp.status, 200);
                slowest = slowest.max(t.elapsed());
            }
            slowest
        }));
    }
    let mut slowest = Duration::ZERO;
    for t in tasks {
        slowest = slowest.max(bounded(t).await.unwrap());
    }
    let total = started.elapsed();
    // The exporter's first batch hangs for its 5 s timeout; requests never wait for it.
    assert!(
        slowest < Duration::from_secs(1),
        "slowest request {slowest:?} (all {total:?})"
    );
    let text = metrics(&pier).await;
    let dropped = metric(&text, "dropped");
    // More than the queue and the batch in flight hold: some were dropped, none exported.
    assert!(dropped > 0, "nothing dropped:\n{text}");
    assert_eq!(metric(&text, "exported"), 0);
    // Shutdown is bounded too: the stuck export is given up.
    let t = Instant::now();
    pier.running.shutdown().await;
    assert!(t.elapsed() < Duration::from_secs(12), "{:?}", t.elapsed());
    hole.abort();
}

/// PEM files for pier's `--otlp-*` TLS flags.
struct TlsDir(tempfile::TempDir);

impl TlsDir {
    fn new() -> Self {
        Self(tempfile::tempdir().unwrap())
    }

    fn file(&self, name: &str, pem: &str) -> std::path::PathBuf {
        let path = self.0.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path
    }
}

/// Tracing at ratio 1 to `endpoint` with these TLS files.
fn traced_tls(endpoint: &str, tls: TlsFiles) -> Option<TraceConfig> {
    Some(TraceConfig {
        tls,
        ..traced(endpoint, "1").unwrap()
    })
}

/// One sampled GET over HTTP/1.1; returns the span ID pier wrote upstream.
async fn traced_request(pier: &Pier) -> String {
    let resp = send(
        http::Version::HTTP_11,
        [127, 0, 0, 1].into(),
        pier.port,
        &[],
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let up = upstream(&resp, "traceparent").expect("traceparent upstream");
    parts(&up).1
}

/// Waits (bounded) until pier counts `n` spans as `result`; returns the metrics text.
async fn wait_metric(pier: &Pier, result: &str, n: u64) -> String {
    let deadline = Instant::now() + BOUND;
    loop {
        let text = metrics(pier).await;
        if metric(&text, result) >= n {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{result} never reached {n}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn https_endpoint_verified_against_the_ca_file_receives_spans() {
    let pki = Pki::new();
    let (cert_pem, key_pem) = pki.issue_pem(&["127.0.0.1"]);
    let mut collector = Collector::start_tls(ServerTls {
        cert_pem: &cert_pem,
        key_pem: &key_pem,
        client_ca_pem: None,
    })
    .await;
    assert!(collector.endpoint.starts_with("https://"));
    let files = TlsDir::new();
    let tls = TlsFiles {
        ca_file: Some(files.file("ca.pem", pki.ca_pem())),
        client_cert: None,
    };
    let pier = start(traced_tls(&collector.endpoint, tls), "").await;
    let span = traced_request(&pier).await;
    let spans = collector.wait_spans(1).await;
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].str("spanId"), span);
    assert_eq!(spans[0].attr("url.path").as_deref(), Some("/x"));
    let text = wait_metric(&pier, "exported", 1).await;
    assert_eq!(metric(&text, "failed"), 0, "{text}");
    pier.running.shutdown().await;
}

#[tokio::test]
async fn https_endpoint_with_a_certificate_pier_does_not_trust_gets_nothing() {
    let pki = Pki::new();
    let other = Pki::new();
    // The collector's certificate: from `pki` for 127.0.0.1, or from `pki` for another name.
    let right_name = pki.issue_pem(&["127.0.0.1"]);
    let wrong_name = pki.issue_pem(&["collector.example"]);
    for (case, (cert_pem, key_pem), trusted) in [
        ("a CA that did not sign it", &right_name, &other),
        ("a certificate for another name", &wrong_name, &pki),
    ] {
        let collector = Collector::start_tls(ServerTls {
            cert_pem,
            key_pem,
            client_ca_pem: None,
        })
        .await;
        let files = TlsDir::new();
        let tls = TlsFiles {
            ca_file: Some(files.file("ca.pem", trusted.ca_pem())),
            client_cert: None,
        };
        let pier = start(traced_tls(&collector.endpoint, tls), "").await;
        traced_request(&pier).await;
        let text = wait_metric(&pier, "failed", 1).await;
        assert_eq!(metric(&text, "exported"), 0, "{case}: {text}");
        // The batch was refused at the handshake: no span reached the collector, over TLS
        // or in plaintext.
        assert!(
            collector.spans().is_empty(),
            "{case}: {:?}",
            collector.spans()
        );
        pier.running.shutdown().await;
        assert!(collector.spans().is_empty(), "{case}: after shutdown");
    }
}

#[tokio::test]
async fn mtls_to_the_collector_with_a_client_certificate() {
    let server_pki = Pki::new();
    let client_pki = Pki::new();
    let (cert_pem, key_pem) = server_pki.issue_pem(&["127.0.0.1"]);
    let mut collector = Collector::start_tls(ServerTls {
        cert_pem: &cert_pem,
        key_pem: &key_pem,
        client_ca_pem: Some(client_pki.ca_pem()),
    })
    .await;
    let files = TlsDir::new();
    let ca_file = files.file("ca.pem", server_pki.ca_pem());
    let (client_cert, client_key) = client_pki.issue_pem(&["pier.example"]);
    let client_cert = Some((
        files.file("client.crt", &client_cert),
        files.file("client.key", &client_key),
    ));

    // Without a client certificate the collector refuses the handshake.
    let tls = TlsFiles {
        ca_file: Some(ca_file.clone()),
        client_cert: None,
    };
    let pier = start(traced_tls(&collector.endpoint, tls), "").await;
    traced_request(&pier).await;
    let text = wait_metric(&pier, "failed", 1).await;
    assert_eq!(metric(&text, "exported"), 0, "{text}");
    pier.running.shutdown().await;
    assert!(collector.spans().is_empty(), "{:?}", collector.spans());

    let tls = TlsFiles {
        ca_file: Some(ca_file),
        client_cert,
    };
    let pier = start(traced_tls(&collector.endpoint, tls), "").await;
    let span = traced_request(&pier).await;
    let spans = collector.wait_spans(1).await;
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].str("spanId"), span);
    wait_metric(&pier, "exported", 1).await;
    pier.running.shutdown().await;
}

#[tokio::test]
async fn bad_otlp_tls_settings_stop_pier_at_start() {
    let pki = Pki::new();
    let files = TlsDir::new();
    let ca = files.file("ca.pem", pki.ca_pem());
    let (cert_pem, key_pem) = pki.issue_pem(&["pier.example"]);
    let (_, other_key) = pki.issue_pem(&["pier.example"]);
    let no_certs = files.file("empty.pem", &key_pem);
    let cert = files.file("client.crt", &cert_pem);
    let wrong_key = files.file("other.key", &other_key);
    let missing = files.0.path().join("missing.pem");
    let https = "https://127.0.0.1:4318";
    let cases = [
        (
            "http:// with a CA file",
            "http://127.0.0.1:4318",
            Some(ca.clone()),
            None,
            "need an https:// endpoint",
        ),
        (
            "an unreadable CA file",
            https,
            Some(missing.clone()),
            None,
            "cannot read",
        ),
        (
            "a CA file without certificates",
            https,
            Some(no_certs),
            None,
            "no usable CA certificate",
        ),
        (
            "a key that is not the certificate's",
            https,
            Some(ca.clone()),
            Some((cert, wrong_key)),
            "not a usable client certificate and key",
        ),
    ];
    for (case, endpoint, ca_file, client_cert, expected) in cases {
        let tls = TlsFiles {
            ca_file,
            client_cert,
        };
        let Err(e) = try_start(traced_tls(endpoint, tls), "", false).await else {
            panic!("{case}: pier started");
        };
        let text = format!("{e:#}");
        assert!(text.contains(expected), "{case}: {text}");
        assert!(
            !text.contains("PRIVATE KEY"),
            "{case}: the key leaked: {text}"
        );
    }
}
