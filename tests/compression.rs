//! `BackendTrafficPolicy` `compressor` end to end: `pier run` on manifests in front of an
//! origin whose responses the test chooses. curl (`--compressed`, Debian's build with zlib,
//! brotli and zstd) decodes what pier sends; hyper clients over HTTP/1.1 and HTTP/2 check the
//! head (`Content-Encoding`, `Vary`, weakened ETag, no length) and decode with the codecs'
//! own crates; what must not be compressed is not; a stream is compressed as it comes; a huge
//! compressible response leaves pier's memory flat; `/metrics` counts it all.

mod support;

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::client::{Resp, send_h1_on};
use support::web::*;
use support::*;
use tokio::sync::Notify;

type OriginBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A page of text: compresses well, and its bytes are checked after decoding.
fn page() -> Vec<u8> {
    (0..20_000u32)
        .map(|i| b"<p>pier compresses what it may, and nothing else.</p>\n"[(i % 54) as usize])
        .collect()
}

fn full(b: impl Into<Bytes>) -> OriginBody {
    Full::new(b.into()).boxed()
}

/// The origin: each path answers one kind of response. `/plain/...` is the same response on
/// a route without a policy. `/stream` sends its first line, then waits for `release`.
async fn origin(release: Arc<Notify>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let release = release.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let release = release.clone();
                    async move { Ok::<_, Infallible>(answer(req, release)) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

fn answer(req: Request<Incoming>, release: Arc<Notify>) -> Response<OriginBody> {
    let path = req.uri().path();
    let path = path.strip_prefix("/plain").unwrap_or(path);
    let r = Response::builder();
    let html = "text/html; charset=utf-8";
    match path {
        "/page" => r
            .header("content-type", html)
            .header("etag", "\"v1\"")
            .header("accept-ranges", "bytes")
            .body(full(page())),
        "/tiny" => r.header("content-type", "text/plain").body(full("tiny")),
        "/image" => r
            .header("content-type", "image/png")
            .body(full(vec![7u8; 20_000])),
        "/gzipped" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&page()).unwrap();
            r.header("content-type", html)
                .header("content-encoding", "gzip")
                .body(full(e.finish().unwrap()))
        }
        "/no-transform" => r
            .header("content-type", html)
            .header("cache-control", "public, no-transform")
            .body(full(page())),
        "/partial" => r
            .status(StatusCode::PARTIAL_CONTENT)
            .header("content-type", html)
            .header("content-range", "bytes 0-19999/40000")
            .body(full(page())),
        "/empty" => r.status(StatusCode::NO_CONTENT).body(full("")),
        "/stream" => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            tokio::spawn(async move {
                let line = |i| Ok(Frame::data(Bytes::from(format!("{{\"line\": {i}}}\n"))));
                let _ = tx.send(line(1)).await;
                release.notified().await;
                let _ = tx.send(line(2)).await;
                let _ = tx.send(line(3)).await;
            });
            let mut rx = rx;
            let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
            r.header("content-type", "application/x-ndjson")
                .body(StreamBody::new(stream).boxed())
        }
        "/zeros" => {
            // 64 MiB of zeros, streamed in 64 KiB frames: compresses ~1000:1.
            let zeros = Bytes::from(vec![b'0'; 64 * 1024]);
            let stream =
                futures::stream::iter((0..1024).map(move |_| Ok(Frame::data(zeros.clone()))));
            r.header("content-type", "text/plain")
                .body(StreamBody::new(stream).boxed())
        }
        _ => r.status(404).body(full("")),
    }
    .unwrap()
}

fn manifests(port: u16, origin: SocketAddr, compressors: &str) -> String {
    format!(
        "{}---\n{}---\n{}---\n{}---
apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {{name: compress, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: site}}]
  compressor:
{compressors}",
        gateway(port),
        service("origin", origin),
        route("site", "/", "origin"),
        route("plain", "/plain", "origin"),
    )
}

const ALL: &str = "    - type: Zstd
    - {type: Brotli, brotli: {}}
    - {type: Gzip, minContentLength: 100}
";

async fn h1(port: u16, path: &str, headers: &[(&str, &str)]) -> Resp {
    get(&format!("http://127.0.0.1:{port}{path}"), headers).await
}

fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "gzip" => {
            let mut d = flate2::write::GzDecoder::new(&mut out);
            d.write_all(body).unwrap();
            d.finish().unwrap();
        }
        "br" => {
            let mut d = brotli::DecompressorWriter::new(&mut out, 4096);
            d.write_all(body).unwrap();
            d.close().unwrap();
        }
        "zstd" => out = zstd::decode_all(body).unwrap(),
        other => panic!("unexpected encoding {other}"),
    }
    out
}

fn header<'r>(r: &'r Resp, name: &str) -> Option<&'r str> {
    r.headers.get(name).map(|v| v.to_str().unwrap())
}

/// `curl --compressed` with the client's own `Accept-Encoding` (curl decodes any coding it
/// was built with): the response head and the decoded body.
async fn curl(port: u16, path: &str, accept: &str) -> (String, Vec<u8>) {
    let url = format!("http://127.0.0.1:{port}{path}");
    let accept = format!("accept-encoding: {accept}");
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("head");
        let body = dir.path().join("body");
        let status = std::process::Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "--compressed",
                "-H",
                &accept,
                "-D",
            ])
            .arg(&head)
            .arg("-o")
            .arg(&body)
            .arg(&url)
            .status()
            .unwrap();
        assert!(status.success(), "curl {url}: {status}");
        (
            std::fs::read_to_string(head).unwrap().to_ascii_lowercase(),
            std::fs::read(body).unwrap(),
        )
    })
    .await
    .unwrap()
}

/// pier on manifests in front of the origin, with [`ALL`] on the `site` route: the process,
/// its listener and admin ports (and the directory, kept while pier runs).
async fn site(release: Arc<Notify>) -> (Child, u16, u16, tempfile::TempDir) {
    let origin = origin(release).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    std::fs::write(dir.path().join("all.yaml"), manifests(port, origin, ALL)).unwrap();
    let pier = start_pier(dir.path(), admin, &[], &[]).await;
    (pier, port, admin, dir)
}

/// `GET path` accepting `coding`, over a fresh HTTP/1.1 connection: the response with its
/// body still streaming, once its head says it is compressed with `coding`.
async fn compressed(port: u16, path: &str, coding: &str) -> Response<Incoming> {
    let tcp = tokio::net::TcpStream::connect(local(port)).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "example.com")
        .header("accept-encoding", coding)
        .body(Full::<Bytes>::default())
        .unwrap();
    let resp = bounded(send.send_request(req)).await.unwrap();
    assert_eq!(resp.headers()["content-encoding"], coding);
    resp
}

#[tokio::test]
async fn responses_are_compressed_as_the_client_accepts_and_only_when_they_may_be() {
    let (_pier, port, admin, _dir) = site(Arc::new(Notify::new())).await;
    let page = page();

    // curl asks for one coding at a time and decodes it.
    for (coding, sent) in [("gzip", "gzip"), ("br", "br"), ("zstd", "zstd")] {
        let (head, body) = curl(port, "/page", coding).await;
        assert!(
            head.contains(&format!("content-encoding: {sent}\r\n")),
            "{coding}: {head}"
        );
        assert!(head.contains("vary: accept-encoding"), "{head}");
        assert_eq!(body, page, "{coding}: decoded body");
    }

    // All three at equal weight: the policy's order (Zstd first). The head over HTTP/1.1 and
    // HTTP/2: no length, no ranges, a weak ETag, Vary.
    for (name, r) in [
        (
            "h1",
            h1(port, "/page", &[("accept-encoding", "gzip, br, zstd")]).await,
        ),
        (
            "h2",
            get_h2(port, "/page", &[("accept-encoding", "gzip, br, zstd")]).await,
        ),
    ] {
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(
            header(&r, "content-encoding"),
            Some("zstd"),
            "{name}: {r:?}"
        );
        assert_eq!(header(&r, "vary"), Some("accept-encoding"), "{name}");
        assert_eq!(header(&r, "etag"), Some("W/\"v1\""), "{name}");
        assert_eq!(header(&r, "content-length"), None, "{name}");
        assert_eq!(header(&r, "accept-ranges"), None, "{name}");
        assert!(
            r.body.len() < page.len() / 10,
            "{name}: {} bytes",
            r.body.len()
        );
        assert_eq!(decode("zstd", &r.body), page, "{name}");
    }
    // Weights decide; q=0 refuses.
    let r = h1(
        port,
        "/page",
        &[("accept-encoding", "zstd;q=0.1, br;q=0.9, gzip")],
    )
    .await;
    assert_eq!(header(&r, "content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page);
    let r = h1(port, "/page", &[("accept-encoding", "zstd;q=0, br;q=0.5")]).await;
    assert_eq!(header(&r, "content-encoding"), Some("br"));
    assert_eq!(decode("br", &r.body), page);

    // No Accept-Encoding (or nothing pier has): the response as it came, but with Vary, as
    // it could have been compressed.
    for accept in [
        None,
        Some("deflate, identity"),
        Some("gzip;q=0, br;q=0, zstd;q=0"),
    ] {
        let headers: Vec<_> = accept.iter().map(|a| ("accept-encoding", *a)).collect();
        let r = h1(port, "/page", &headers).await;
        assert_eq!(header(&r, "content-encoding"), None, "{accept:?}");
        assert_eq!(header(&r, "vary"), Some("accept-encoding"), "{accept:?}");
        assert_eq!(header(&r, "etag"), Some("\"v1\""), "{accept:?}");
        assert_eq!(header(&r, "content-length"), Some("20000"), "{accept:?}");
        assert_eq!(&r.body[..], &page[..]);
    }

    // Not compressed, whatever the client accepts: below minContentLength (gzip's 100, the
    // others' default 30), already encoded, not a compressible type, no-transform, a range,
    // no content, a HEAD, and a route without the policy.
    let every = [("accept-encoding", "gzip, br, zstd")];
    let gzip_only = [("accept-encoding", "gzip")];
    let r = h1(port, "/tiny", &every).await;
    assert_eq!(
        (header(&r, "content-encoding"), &r.body[..]),
        (None, &b"tiny"[..])
    );
    assert_eq!(
        header(&r, "vary"),
        None,
        "too small to be compressed at all"
    );
    let r = h1(port, "/gzipped", &every).await;
    assert_eq!(header(&r, "content-encoding"), Some("gzip"));
    assert_eq!(
        decode("gzip", &r.body),
        page,
        "passed through, not compressed twice"
    );
    for path in ["/image", "/no-transform", "/partial", "/plain/page"] {
        for (name, r) in [
            ("h1", h1(port, path, &every).await),
            ("h2", get_h2(port, path, &gzip_only).await),
        ] {
            assert_eq!(header(&r, "content-encoding"), None, "{path} {name}");
            assert_eq!(r.body.len(), 20_000, "{path} {name}");
        }
    }
    let r = h1(port, "/empty", &every).await;
    assert_eq!(
        (r.status, header(&r, "content-encoding")),
        (StatusCode::NO_CONTENT, None)
    );
    let head = {
        let req = Request::head("/page")
            .header("host", format!("127.0.0.1:{port}"))
            .header("accept-encoding", "gzip")
            .body(Full::<Bytes>::default())
            .unwrap();
        let tcp = tokio::net::TcpStream::connect(local(port)).await.unwrap();
        send_h1_on(tcp, req).await
    };
    assert_eq!(header(&head, "content-encoding"), None);

    // Counted, by encoding; bytes in and out.
    let metrics = h1(admin, "/metrics", &[]).await.text();
    let value = |needle: &str| -> f64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no {needle} in:\n{metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("pier_proxy_compressed_responses_total{encoding=\"zstd\"}") >= 3.0);
    assert!(value("pier_proxy_compressed_responses_total{encoding=\"br\"}") >= 2.0);
    assert!(value("pier_proxy_compressed_responses_total{encoding=\"gzip\"}") >= 2.0);
    let zin = value("pier_proxy_compression_bytes_total{encoding=\"zstd\",direction=\"in\"}");
    let zout = value("pier_proxy_compression_bytes_total{encoding=\"zstd\",direction=\"out\"}");
    assert!(
        zin >= 60_000.0 && zout < zin / 10.0,
        "zstd in {zin} out {zout}"
    );
}

/// A stream is compressed as it comes: the first line reaches the client, decodable, while
/// the origin still holds the next.
#[tokio::test]
async fn a_stream_is_compressed_as_it_comes() {
    let release = Arc::new(Notify::new());
    let (_pier, port, _admin, _dir) = site(release.clone()).await;

    for coding in ["gzip", "br", "zstd"] {
        let mut body = compressed(port, "/stream", coding).await.into_body();
        let mut seen = Vec::new();
        let first = b"{\"line\": 1}\n";
        // Streaming decoders: each frame is fed as it arrives.
        let mut gz = flate2::write::GzDecoder::new(Vec::new());
        let mut br = brotli::DecompressorWriter::new(Vec::new(), 4096);
        let mut zs = zstd::stream::write::Decoder::new(Vec::new()).unwrap();
        let mut decoded = |b: &[u8]| -> Vec<u8> {
            match coding {
                "gzip" => {
                    gz.write_all(b).unwrap();
                    gz.flush().unwrap();
                    gz.get_ref().clone()
                }
                "br" => {
                    br.write_all(b).unwrap();
                    br.flush().unwrap();
                    br.get_ref().clone()
                }
                _ => {
                    zs.write_all(b).unwrap();
                    zs.flush().unwrap();
                    zs.get_ref().clone()
                }
            }
        };
        let mut so_far = Vec::new();
        while so_far.len() < first.len() {
            let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
                .await
                .unwrap_or_else(|_| panic!("{coding}: the first line was held back"))
                .unwrap()
                .unwrap();
            if let Ok(data) = frame.into_data() {
                seen.extend_from_slice(&data);
                so_far = decoded(&data);
            }
        }
        assert_eq!(so_far, first, "{coding}");
        release.notify_one();
        while let Some(frame) = bounded(body.frame()).await {
            if let Ok(data) = frame.unwrap().into_data() {
                so_far = decoded(&data);
            }
        }
        assert_eq!(
            String::from_utf8(so_far).unwrap(),
            "{\"line\": 1}\n{\"line\": 2}\n{\"line\": 3}\n",
            "{coding}"
        );
    }
}

/// 64 MiB of zeros compress to ~64 KiB: pier streams them through the encoder with its
/// memory flat (the encoder's state and a frame or two), whatever the ratio.
#[tokio::test]
async fn a_huge_compressible_response_leaves_memory_flat() {
    let (pier, port, _admin, _dir) = site(Arc::new(Notify::new())).await;
    let rss = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", pier.0.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    // Warm: one small compressed response of each encoding.
    for coding in ["gzip", "br", "zstd"] {
        h1(port, "/page", &[("accept-encoding", coding)]).await;
    }
    let before = rss();
    for coding in ["gzip", "br", "zstd"] {
        let resp = tokio::time::timeout(Duration::from_secs(60), async {
            let resp = compressed(port, "/zeros", coding).await;
            resp.into_body().collect().await.unwrap().to_bytes()
        })
        .await
        .expect("64 MiB in 60 s");
        let decoded = decode(coding, &resp);
        assert_eq!(decoded.len(), 64 << 20, "{coding}");
        assert!(decoded.iter().all(|&b| b == b'0'));
        assert!(resp.len() < 1 << 20, "{coding}: {} bytes", resp.len());
    }
    let after = rss();
    assert!(
        after < before + (32 << 20),
        "RSS grew from {before} to {after} bytes"
    );
}
