//! What a hostile or broken client gets: the "found already" list of the reliability issue,
//! each on the wire with a raw socket (idle HTTP/2 connections, slow and malformed request
//! bodies, transfer codings, Host rules, userinfo, path normalisation, the head size limit).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::client::{get, send, send_h2};
use crate::support::raw::Client;
use crate::support::snap::*;
use crate::support::*;

async fn proxy(a: &pier::echo::EchoServer, config: pier::proxy::ProxyConfig) -> (Harness, u16) {
    let p = free_port();
    let h = Harness::start_with(simple(p, &backend("a", &[a.addr])), config).await;
    (h, p)
}

/// Reads until the peer closes; `None` if it is still open after `within`.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((started + within).into(), tcp.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame.
const H2_SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let a = echo("a").await;
    let mut config = config();
    config.limits.idle_timeout = Duration::from_millis(300);
    let (h, p) = proxy(&a, config).await;
    // Preface and SETTINGS, then nothing: an h2 slowloris.
    let mut tcp = bounded(TcpStream::connect(local(p))).await.unwrap();
    tcp.write_all(H2_PREFACE).await.unwrap();
    tcp.write_all(H2_SETTINGS).await.unwrap();
    let closed = closed_within(&mut tcp, Duration::from_secs(3)).await;
    assert!(closed.is_some(), "an idle h2c connection stayed open");

    // A connection that is used stays open while a request is in progress, and is closed
    // once it has been idle for the timeout after it.
    let started = Instant::now();
    let resp = bounded(send_h2(local(p), get("x", "/delay/500"))).await;
    assert_eq!(resp.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(500));
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// Request bodies must average `min_rate` B/s after `grace_ms`, and never stall 5 s.
fn paced(min_rate: u32, grace_ms: u64) -> pier::proxy::ProxyConfig {
    let mut config = config();
    config.limits.body_pace = Some(pier::proxy::BodyPace {
        idle: Duration::from_secs(5),
        min_rate,
        grace: Duration::from_millis(grace_ms),
    });
    config
}

/// A chunked POST whose body trickles in one byte each `every`, for at most `n` bytes.
fn trickle(mut tcp: tokio::net::tcp::OwnedWriteHalf, every: Duration, n: usize) {
    tokio::spawn(async move {
        let head = b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
        if tcp.write_all(head).await.is_err() {
            return;
        }
        for _ in 0..n {
            tokio::time::sleep(every).await;
            if tcp.write_all(b"1\r\nx\r\n").await.is_err() {
                return;
            }
        }
    });
}

#[tokio::test]
async fn a_slow_request_body_is_cut_off_with_408() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, paced(100, 500)).await;
    let tcp = bounded(TcpStream::connect(local(p))).await.unwrap();
    let (read, write) = tcp.into_split();
    // 10 bytes a second for up to 8 s: far under 100 B/s.
    trickle(write, Duration::from_millis(100), 80);
    let mut read = read;
    let mut buf = Vec::new();
    let started = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(4), async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match read.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(got.is_ok(), "no answer to a body trickling at 10 B/s");
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let metrics = h.metrics_text();
    assert!(metrics.contains("RequestBodyTimeout"), "{metrics}");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_body_at_a_normal_pace_passes() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, paced(10, 300)).await;
    let mut c = bounded(Client::connect(p)).await;
    c.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.write(b"5\r\nhello\r\n").await;
    }
    c.write(b"0\r\n\r\n").await;
    let resp = bounded(c.response(false)).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.echo().body_bytes, 50);
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// One raw request on a fresh connection; the status of the answer.
async fn status_of(p: u16, request: &[u8]) -> u16 {
    let mut c = bounded(Client::connect(p)).await;
    c.write(request).await;
    bounded(c.response(false)).await.status
}

#[tokio::test]
async fn a_malformed_chunked_body_is_400_not_a_backend_error() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let status = status_of(
        p,
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nxx\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(status, 400);
    let metrics = h.metrics_text();
    assert!(metrics.contains("BadRequestBody"), "{metrics}");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_501_and_never_forwarded() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let status = status_of(
        p,
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(status, 501);
    assert_eq!(a.count(), 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn host_rules_of_rfc_9112_are_enforced() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    for (why, request) in [
        ("no Host", &b"GET / HTTP/1.1\r\n\r\n"[..]),
        ("two Hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        (
            "the same Host twice",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
        ),
        ("an empty Host", b"GET / HTTP/1.1\r\nHost: \r\n\r\n"),
        ("userinfo in Host", b"GET / HTTP/1.1\r\nHost: u:p@a\r\n\r\n"),
        ("a Host with a path", b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"),
        (
            "userinfo in an absolute-form target",
            b"GET http://u:p@a/x HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
    ] {
        assert_eq!(status_of(p, request).await, 400, "{why}");
    }
    assert_eq!(a.count(), 0, "none of them reached the backend");
    // HTTP/1.0 needs no Host.
    assert_eq!(status_of(p, b"GET / HTTP/1.0\r\n\r\n").await, 200);
    assert_eq!(
        status_of(p, b"GET / HTTP/1.1\r\nHost: a:8080\r\n\r\n").await,
        200
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn userinfo_in_an_http2_authority_is_400() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let req = http::Request::get(format!("http://u:p@x:{p}/a"))
        .body(Full::<Bytes>::default())
        .unwrap();
    let resp = bounded(send_h2(local(p), req)).await;
    assert_eq!(resp.status, 400);
    assert_eq!(a.count(), 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn paths_are_normalised_before_matching_and_forwarding() {
    let inner = echo("inner").await;
    let outer = echo("outer").await;
    let p = free_port();
    let to_inner = rule("ns/inner")
        .to(&backend("inner", &[inner.addr]))
        .build();
    let to_outer = rule("ns/outer")
        .to(&backend("outer", &[outer.addr]))
        .build();
    let h = Harness::start(snapshot(vec![port(
        p,
        vec![
            listener("http", None)
                .route(&[], prefix("/a"), &to_inner)
                .route(&[], prefix("/"), &to_outer)
                .build(),
        ],
    )]))
    .await;
    for (sent, backend, path) in [
        ("/a/../old", "outer", "/old"),
        ("/a/%2e%2e/old", "outer", "/old"),
        ("/a/%2E%2e/old?q=1", "outer", "/old"),
        ("/a/./x", "inner", "/a/x"),
        ("/%61/x", "inner", "/a/x"),
        ("/a/b/../c", "inner", "/a/c"),
    ] {
        // The fast path (HTTP/1.1) and hyper's (HTTP/2) agree.
        for resp in [
            bounded(send(local(p), get("x", sent))).await,
            bounded(send_h2(local(p), get("x", sent))).await,
        ] {
            assert_eq!(resp.status, 200, "{sent}");
            let echo = resp.echo();
            assert_eq!(echo.backend, backend, "{sent}");
            assert_eq!(echo.path, path, "{sent}");
        }
    }
    assert_eq!(
        status_of(p, b"GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n").await,
        400
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn slashes_merge_when_configured() {
    let a = echo("a").await;
    let mut config = config();
    config.limits.merge_slashes = true;
    let (h, p) = proxy(&a, config).await;
    let resp = bounded(send(local(p), get("x", "//a///b"))).await;
    assert_eq!(resp.echo().path, "/a/b");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_request_head_over_64_kib_is_431_on_either_path() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let big = "x".repeat(100 * 1024);
    let request = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    assert_eq!(status_of(p, request.as_bytes()).await, 431);
    // Just under the limit is fine.
    let fits = "x".repeat(60 * 1024);
    let request = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {fits}\r\n\r\n");
    assert_eq!(status_of(p, request.as_bytes()).await, 200);
    assert_eq!(a.count(), 1);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_request_target_over_8_kib_is_414_on_every_path() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let long = format!("/{}", "x".repeat(8 * 1024));
    let fits = format!("/{}", "x".repeat(8 * 1024 - 1));
    // The fast path, hyper's HTTP/1.x (HTTP/1.0 goes there) and HTTP/2.
    for version in ["HTTP/1.1", "HTTP/1.0"] {
        let request = format!("GET {long} {version}\r\nHost: x\r\n\r\n");
        assert_eq!(status_of(p, request.as_bytes()).await, 414, "{version}");
        let request = format!("GET {fits} {version}\r\nHost: x\r\n\r\n");
        assert_eq!(status_of(p, request.as_bytes()).await, 200, "{version}");
    }
    assert_eq!(
        bounded(send_h2(local(p), get("x", &long))).await.status,
        414
    );
    assert_eq!(
        bounded(send_h2(local(p), get("x", &fits))).await.status,
        200
    );
    // Only the ones that fit reached the backend.
    assert_eq!(a.count(), 3);
    // A request line of 100 KB, longer than the whole head may be: 414 too (the target is
    // what is long), on HTTP/1.1 and HTTP/1.0 alike, not the 431 of long header fields.
    let huge = format!("/{}", "x".repeat(100 * 1024));
    for version in ["HTTP/1.1", "HTTP/1.0"] {
        let request = format!("GET {huge} {version}\r\nHost: x\r\n\r\n");
        assert_eq!(status_of(p, request.as_bytes()).await, 414, "{version}");
    }
    // (HTTP/2 has no request line: a `:path` that long is over the 16 KiB header list bound.)
    assert!(h.metrics_text().contains("UriTooLong"));
    assert_eq!(a.count(), 3);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_request_body_over_the_maximum_is_413_declared_or_streamed() {
    let a = echo("a").await;
    let mut config = config();
    config.limits.max_request_body = Some(1000);
    let (h, p) = proxy(&a, config).await;
    let post = |len: usize| {
        format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n{}",
            "b".repeat(len)
        )
    };
    // Declared: a small body (fast path) and a large one (hyper), answered before the
    // backend sees them.
    assert_eq!(status_of(p, post(1001).as_bytes()).await, 413);
    let head = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n";
    assert_eq!(status_of(p, head.as_bytes()).await, 413);
    assert_eq!(status_of(p, post(1000).as_bytes()).await, 200);
    assert_eq!(a.count(), 1);
    // Streamed (chunked): cut off once it passes the maximum.
    let chunked = |len: usize| {
        format!(
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{len:x}\r\n{}\r\n0\r\n\r\n",
            "c".repeat(len)
        )
    };
    assert_eq!(status_of(p, chunked(1001).as_bytes()).await, 413);
    assert_eq!(status_of(p, chunked(1000).as_bytes()).await, 200);
    // HTTP/2.
    let h2 = |len: usize| {
        http::Request::post("/")
            .header(http::header::HOST, "x")
            .body(Full::new(Bytes::from(vec![b'd'; len])))
            .unwrap()
    };
    assert_eq!(bounded(send_h2(local(p), h2(1001))).await.status, 413);
    assert_eq!(bounded(send_h2(local(p), h2(1000))).await.status, 200);
    let metrics = h.metrics_text();
    assert!(metrics.contains("RequestBodyTooLarge"), "{metrics}");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn at_the_connection_cap_idle_http2_connections_make_room() {
    let a = echo("a").await;
    let mut config = config();
    config.limits.max_connections = 3;
    let (h, p) = proxy(&a, config).await;
    // Two HTTP/2 connections that sent their preface and nothing else, and one with a request
    // in progress, fill the cap.
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut tcp = bounded(TcpStream::connect(local(p))).await.unwrap();
        tcp.write_all(H2_PREFACE).await.unwrap();
        tcp.write_all(H2_SETTINGS).await.unwrap();
        idle.push(tcp);
    }
    let slow = tokio::spawn(send_h2(local(p), get("x", "/delay/3000")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    // New clients are served at once (not after the 60 s idle timeout), each in place of an
    // idle HTTP/2 connection; the request in progress completes.
    for _ in 0..2 {
        let started = Instant::now();
        let resp = bounded(send(local(p), get("x", "/"))).await;
        assert_eq!(resp.status, 200);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    for tcp in &mut idle {
        assert!(closed_within(tcp, Duration::from_secs(2)).await.is_some());
    }
    assert_eq!(bounded(slow).await.unwrap().status, 200);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn at_the_connection_cap_busy_connections_hold_and_new_clients_wait() {
    let a = echo("a").await;
    let mut config = config();
    config.limits.max_connections = 2;
    let (h, p) = proxy(&a, config).await;
    // Two requests in progress fill the cap.
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut c = bounded(Client::connect(p)).await;
        c.write(b"GET /delay/1500 HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        busy.push(c);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A third connects (the kernel queues it) but is not served while the cap is full of
    // connections that are busy: those are never closed to make room.
    let mut third = bounded(Client::connect(p)).await;
    third.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let early = tokio::time::timeout(Duration::from_millis(500), third.response(false)).await;
    assert!(early.is_err(), "served beyond the connection cap");
    // The busy ones finish; the waiting client is then accepted and served.
    for c in &mut busy {
        assert_eq!(bounded(c.response(false)).await.status, 200);
    }
    let resp = bounded(third.response(false)).await;
    assert_eq!(resp.status, 200);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn at_the_connection_cap_the_longest_waiting_client_makes_room() {
    let a = echo("a").await;
    let mut config = config();
    config.limits.max_connections = 4;
    config.header_read_timeout = Duration::from_secs(30);
    let (h, p) = proxy(&a, config).await;
    // The cap is full: a client that connected and sent nothing (oldest), a slowloris head
    // that never ends, an idle keep-alive connection after one request, and a request in
    // progress.
    let mut silent = bounded(TcpStream::connect(local(p))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut slow = bounded(TcpStream::connect(local(p))).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut idle = bounded(Client::connect(p)).await;
    idle.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(bounded(idle.response(false)).await.status, 200);
    let mut busy = bounded(Client::connect(p)).await;
    busy.write(b"GET /delay/1500 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Each new client is served at once (not after the 30 s header timeout), and each takes
    // the place of the client that has waited longest: the silent one, then the slowloris,
    // then the idle keep-alive connection.
    let mut fillers = Vec::new();
    for (i, victim) in ["silent", "slowloris", "idle keep-alive"]
        .iter()
        .enumerate()
    {
        let started = Instant::now();
        let mut c = bounded(Client::connect(p)).await;
        c.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        assert_eq!(bounded(c.response(false)).await.status, 200);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "client {i} waited {:?} at the cap",
            started.elapsed()
        );
        drop(c);
        let closed = match i {
            0 => closed_within(&mut silent, Duration::from_secs(2)).await,
            1 => closed_within(&mut slow, Duration::from_secs(2)).await,
            _ => closed_within(&mut idle.tcp, Duration::from_secs(2)).await,
        };
        assert!(closed.is_some(), "the {victim} connection was not closed");
        // The client that just closed frees its own slot: fill it again so the cap stays full.
        fillers.push(bounded(TcpStream::connect(local(p))).await.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The request in progress was never cut.
    assert_eq!(bounded(busy.response(false)).await.status, 200);
    let metrics = h.metrics_text();
    assert!(
        metrics.contains(&format!(
            "pier_proxy_downstream_connections_reclaimed_total{{port=\"{p}\"}} 3"
        )),
        "{metrics}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}
