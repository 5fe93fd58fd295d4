//! Trusted proxies, the request ID and the access log line, on both request paths: the
//! HTTP/1.1 fast path, the fast path's header-map route (a request header filter), and hyper
//! (h2c prior knowledge). Clients connect from chosen loopback addresses (127.0.0.2 is the
//! trusted proxy, 127.0.0.3 anyone else).

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request};
use http_body_util::Full;
use pier::model::{Filters, HeaderModifier};
use pier::proxy::ProxyConfig;
use std::net::{IpAddr, SocketAddr};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::client::{Resp, get, send_h1_on, send_h2_on};
use crate::support::logs::capture_json;
use crate::support::snap::*;
use crate::support::*;

const TRUSTED: [u8; 4] = [127, 0, 0, 2];
const STRANGER: [u8; 4] = [127, 0, 0, 3];

#[derive(Clone, Copy, Debug)]
enum Path {
    /// HTTP/1.1, written straight from the header lines.
    Direct,
    /// HTTP/1.1 through a request header filter (the fast path's header-map route).
    Filtered,
    /// h2c prior knowledge: hyper.
    H2,
}

const PATHS: [Path; 3] = [Path::Direct, Path::Filtered, Path::H2];

async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((IpAddr::from(from), 0)))
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// A proxy on a fresh port trusting 127.0.0.2, with a route per path: `/filtered` adds a
/// request header (so the fast path builds a header map), anything else goes straight.
async fn start(config: ProxyConfig, backend_addr: SocketAddr) -> (Harness, u16) {
    let b = backend("ns/a", &[backend_addr]);
    let plain = rule("ns/plain").to(&b).build();
    let filtered = rule("ns/filtered")
        .to(&b)
        .filters(Filters {
            request_headers: Some(HeaderModifier {
                add: vec![(
                    HeaderName::from_static("x-filtered"),
                    HeaderValue::from_static("1"),
                )],
                ..HeaderModifier::default()
            }),
            ..Filters::default()
        })
        .build();
    let p = free_port();
    let l = listener("http", None)
        .route(&[], prefix("/filtered"), &filtered)
        .route(&[], prefix("/"), &plain)
        .build();
    let config = ProxyConfig {
        trusted_proxies: "127.0.0.2/32".parse().unwrap(),
        ..config
    };
    (
        Harness::start_with(snapshot(vec![port(p, vec![l])]), config).await,
        p,
    )
}

/// `headers` sent from `from` on `path`.
async fn send_on(path: Path, from: [u8; 4], p: u16, headers: &[(&str, &str)]) -> Resp {
    let (uri, h2) = match path {
        Path::Direct => ("/x".to_string(), false),
        Path::Filtered => ("/filtered".to_string(), false),
        Path::H2 => (format!("http://app.example:{p}/x"), true),
    };
    let mut req = Request::get(uri);
    if !h2 {
        req = req.header("host", format!("app.example:{p}"));
    }
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let req = req.body(Full::<Bytes>::default()).unwrap();
    let tcp = connect_from(from, local(p)).await;
    if h2 {
        bounded(send_h2_on(tcp, req)).await
    } else {
        bounded(send_h1_on(tcp, req)).await
    }
}

const SPOOFED: &[(&str, &str)] = &[
    ("x-forwarded-for", "6.6.6.6"),
    ("x-forwarded-proto", "https"),
    ("x-forwarded-host", "evil.example"),
    ("forwarded", "for=6.6.6.6;proto=https"),
    ("x-request-id", "spoofed-id"),
];

fn one<'a>(seen: &'a pier::echo::EchoRequest, name: &str) -> &'a str {
    match seen.headers.get(name).map(Vec::as_slice) {
        Some([v]) => v,
        other => panic!("{name}: {other:?} in {:?}", seen.headers),
    }
}

#[tokio::test]
async fn spoofed_forwarding_headers_from_an_untrusted_client_are_replaced() {
    let a = echo("a").await;
    let (h, p) = start(config(), a.addr).await;
    for path in PATHS {
        let resp = send_on(path, STRANGER, p, SPOOFED).await;
        assert_eq!(resp.status, 200, "{path:?}");
        let seen = resp.echo();
        assert_eq!(one(&seen, "x-forwarded-for"), "127.0.0.3", "{path:?}");
        assert_eq!(one(&seen, "x-forwarded-proto"), "http", "{path:?}");
        assert_eq!(
            one(&seen, "x-forwarded-host"),
            format!("app.example:{p}"),
            "{path:?}"
        );
        assert_eq!(
            one(&seen, "forwarded"),
            format!(r#"for=127.0.0.3;host="app.example:{p}";proto=http"#),
            "{path:?}"
        );
        let id = one(&seen, "x-request-id");
        assert_ne!(id, "spoofed-id", "{path:?}");
        assert_eq!(id.len(), 36, "a UUID: {id}");
        if matches!(path, Path::Filtered) {
            assert_eq!(one(&seen, "x-filtered"), "1");
        }
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn forwarding_headers_from_a_trusted_proxy_are_kept_and_appended_to() {
    let a = echo("a").await;
    let (h, p) = start(config(), a.addr).await;
    for path in PATHS {
        let resp = send_on(path, TRUSTED, p, SPOOFED).await;
        assert_eq!(resp.status, 200, "{path:?}");
        let seen = resp.echo();
        assert_eq!(
            one(&seen, "x-forwarded-for"),
            "6.6.6.6, 127.0.0.2",
            "{path:?}"
        );
        assert_eq!(one(&seen, "x-forwarded-proto"), "https", "{path:?}");
        assert_eq!(one(&seen, "x-forwarded-host"), "evil.example", "{path:?}");
        assert_eq!(
            one(&seen, "forwarded"),
            format!(r#"for=6.6.6.6;proto=https, for=127.0.0.2;host="app.example:{p}";proto=http"#),
            "{path:?}"
        );
        assert_eq!(one(&seen, "x-request-id"), "spoofed-id", "{path:?}");

        // Nothing sent: pier's own values, a new ID, and no `Forwarded`.
        let seen = send_on(path, TRUSTED, p, &[]).await.echo();
        assert_eq!(one(&seen, "x-forwarded-for"), "127.0.0.2", "{path:?}");
        assert_eq!(one(&seen, "x-forwarded-proto"), "http", "{path:?}");
        assert!(!seen.headers.contains_key("forwarded"), "{path:?}");
        assert_eq!(one(&seen, "x-request-id").len(), 36, "{path:?}");
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn the_json_access_log_line_has_the_request_id_and_the_forwarded_client() {
    let (captured, _guard) = capture_json();
    let a = echo("a").await;
    let config = ProxyConfig {
        access_log: true,
        ..config()
    };
    let (h, p) = start(config, a.addr).await;
    for path in PATHS {
        // Through the trusted proxy: the client is the address it names.
        let resp = send_on(
            path,
            TRUSTED,
            p,
            &[
                ("x-forwarded-for", "198.51.100.7"),
                ("x-request-id", "rid-1"),
            ],
        )
        .await;
        assert_eq!(one(&resp.echo(), "x-request-id"), "rid-1");
        // A stranger: its own address, and the ID pier made.
        let resp = send_on(path, STRANGER, p, SPOOFED).await;
        let made = one(&resp.echo(), "x-request-id").to_string();

        let lines = captured.access_lines();
        let [.., trusted, stranger] = lines.as_slice() else {
            panic!("{lines:?}");
        };
        assert_eq!(trusted["request_id"], "rid-1", "{path:?}: {trusted}");
        assert_eq!(trusted["client"], "198.51.100.7", "{path:?}: {trusted}");
        let peer = trusted["peer"].as_str().unwrap();
        assert!(peer.starts_with("127.0.0.2:"), "{path:?}: {trusted}");
        assert_eq!(
            stranger["request_id"],
            made.as_str(),
            "{path:?}: {stranger}"
        );
        let client = stranger["client"].as_str().unwrap();
        assert!(client.starts_with("127.0.0.3:"), "{path:?}: {stranger}");
        assert!(stranger.get("peer").is_none(), "{path:?}: {stranger}");
        let route = match path {
            Path::Filtered => "ns/filtered",
            _ => "ns/plain",
        };
        for (field, value) in [
            ("method", "GET".into()),
            ("status", 200.into()),
            ("route", route.into()),
            ("rule", "0".into()),
            ("backend", "ns/a:80".into()),
            ("upstream", a.addr.to_string().into()),
            ("listener", "default/gw/http".into()),
            ("host", format!("app.example:{p}").into()),
            ("path", path_of(path).into()),
            ("bytes_in", 0.into()),
        ] {
            let value: serde_json::Value = value;
            assert_eq!(stranger[field], value, "{path:?} {field}: {stranger}");
        }
        assert!(stranger["duration_ms"].is_number(), "{stranger}");
        assert!(
            stranger["bytes_out"].as_u64().is_some_and(|n| n > 0),
            "{path:?}: {stranger}"
        );
    }
    // pier's own answers are logged with their ID and why.
    let h404 = Request::get("/x")
        .header("host", "nowhere")
        .body(Full::<Bytes>::default())
        .unwrap();
    let _ = bounded(send_h1_on(connect_from(STRANGER, local(p)).await, h404)).await;
    bounded(h.proxy.shutdown(BOUND)).await;
    let lines = captured.access_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["request_id"].as_str().unwrap().len(), 36, "{last}");
    assert_eq!(lines.len(), 2 * PATHS.len() + 1);
}

fn path_of(path: Path) -> &'static str {
    match path {
        Path::Filtered => "/filtered",
        _ => "/x",
    }
}

#[tokio::test]
async fn a_listener_turns_the_access_log_on_or_off() {
    let (captured, _guard) = capture_json();
    let a = echo("a").await;
    let b = backend("ns/a", &[a.addr]);
    let r = rule("ns/r").to(&b).build();
    let (quiet, loud) = (free_port(), free_port());
    let mut off = listener("quiet", None).route(&[], prefix("/"), &r).build();
    off.access_log = Some(false);
    let mut on = listener("loud", None).route(&[], prefix("/"), &r).build();
    on.access_log = Some(true);
    let mut loud_port = port(loud, vec![on]);
    loud_port.access_log_on = true;
    let snap = snapshot(vec![port(quiet, vec![off]), loud_port]);
    // `--access-log` off: only the listener that asks logs.
    let h = Harness::start_with(snap, config()).await;
    for (p, path) in [(quiet, "/quiet"), (loud, "/loud")] {
        for h2 in [false, true] {
            let tcp = connect_from(STRANGER, local(p)).await;
            let resp = if h2 {
                let req = Request::get(format!("http://app.example{path}"))
                    .body(Full::<Bytes>::default())
                    .unwrap();
                bounded(send_h2_on(tcp, req)).await
            } else {
                bounded(send_h1_on(tcp, get("app.example", path))).await
            };
            assert_eq!(resp.status, 200);
        }
    }
    bounded(h.proxy.shutdown(BOUND)).await;
    let lines = captured.access_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l["path"] == "/loud"), "{lines:?}");
}

/// `bytes_in` counts a streamed request body as pier read it from the client: a chunked
/// HTTP/1.1 body (hyper's request path: the fast path takes only bodies with a length) and an
/// HTTP/2 body without `content-length`, neither of which declares its size up front.
#[tokio::test]
async fn the_access_log_counts_the_bytes_of_a_streamed_request_body() {
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (captured, _guard) = capture_json();
    let a = echo("a").await;
    let config = ProxyConfig {
        access_log: true,
        ..config()
    };
    let (h, p) = start(config, a.addr).await;

    // HTTP/1.1, chunked: 5 + 6 bytes in two chunks.
    let mut tcp = connect_from(STRANGER, local(p)).await;
    let head = format!(
        "POST /x HTTP/1.1\r\nhost: app.example:{p}\r\ntransfer-encoding: chunked\r\n\
         connection: close\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    bounded(tcp.read_to_end(&mut answer)).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""body_bytes":11"#), "{answer}");

    // HTTP/2: three DATA frames of 1000 bytes, no content-length.
    let tcp = connect_from(STRANGER, local(p)).await;
    let (mut tx, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let frames = (0..3)
        .map(|_| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![b'x'; 1000]))));
    let req = Request::post(format!("http://app.example:{p}/x"))
        .body(StreamBody::new(futures::stream::iter(frames)))
        .unwrap();
    let resp = crate::support::client::collect(bounded(tx.send_request(req)).await.unwrap()).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.echo().body_bytes, 3000);
    assert!(!resp.echo().headers.contains_key("content-length"));

    bounded(h.proxy.shutdown(BOUND)).await;
    let lines = captured.access_lines();
    let [chunked, h2] = lines.as_slice() else {
        panic!("{lines:?}");
    };
    assert_eq!(chunked["method"], "POST", "{chunked}");
    assert_eq!(chunked["bytes_in"], 11, "{chunked}");
    assert_eq!(h2["bytes_in"], 3000, "{h2}");
}
