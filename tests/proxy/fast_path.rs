//! The HTTP/1.1 fast path on the wire: raw client sockets (keep-alive, pipelining, a hand-over
//! to hyper in the middle of a connection) and scripted raw backends (chunked and
//! close-delimited responses, a pooled connection the backend drops).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::raw::Client;
use crate::support::snap::*;
use crate::support::*;
/// A proxy routing every request to the backend at `addr`, and a client connection to it.
async fn proxy_to(addr: SocketAddr) -> (Harness, Client) {
    let p = free_port();
    let h = Harness::start(simple(p, &backend("b", &[addr]))).await;
    let c = bounded(Client::connect(p)).await;
    (h, c)
}

fn get_req(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: app.example\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn one_client_connection_carries_keep_alive_and_pipelined_requests() {
    let a = echo("a").await;
    let (h, mut c) = proxy_to(a.addr).await;
    c.write(&get_req("/first")).await;
    let first = bounded(c.response(false)).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.echo().path, "/first");
    // Three requests in one write: answered in order on the same connection.
    let mut pipelined = Vec::new();
    for path in ["/p1", "/p2", "/p3"] {
        pipelined.extend_from_slice(&get_req(path));
    }
    c.write(&pipelined).await;
    for path in ["/p1", "/p2", "/p3"] {
        let resp = bounded(c.response(false)).await;
        assert_eq!(resp.status, 200);
        let seen = resp.echo();
        assert_eq!(seen.path, path);
        assert_eq!(seen.headers["x-forwarded-for"], ["127.0.0.1"]);
        assert!(resp.header("date").is_some(), "{resp:?}");
    }
    assert_eq!(a.count(), 4);
    assert_eq!(a.connections(), 1, "one upstream connection, reused");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_connection_hands_over_to_hyper_with_what_it_has_read() {
    let a = echo("a").await;
    let (h, mut c) = proxy_to(a.addr).await;
    c.write(&get_req("/one")).await;
    assert_eq!(bounded(c.response(false)).await.echo().path, "/one");
    // A chunked request body is hyper's: the connection moves over, this request included,
    // and the next request (already sent) is served there too.
    let mut two = b"POST /two HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_vec();
    two.extend_from_slice(&get_req("/three"));
    c.write(&two).await;
    let second = bounded(c.response(false)).await.echo();
    assert_eq!(
        (
            second.method.as_str(),
            second.path.as_str(),
            second.body_bytes
        ),
        ("POST", "/two", 5)
    );
    assert_eq!(bounded(c.response(false)).await.echo().path, "/three");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn head_responses_carry_no_body_and_close_is_honoured() {
    let a = echo("a").await;
    let (h, mut c) = proxy_to(a.addr).await;
    c.write(b"HEAD /h HTTP/1.1\r\nHost: app.example\r\n\r\n")
        .await;
    let head = bounded(c.response(true)).await;
    assert_eq!(head.status, 200);
    assert!(head.header("content-length").is_some(), "{head:?}");
    c.write(b"GET /after HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
        .await;
    let after = bounded(c.response(false)).await;
    assert_eq!(after.echo().path, "/after", "no stray body bytes before it");
    assert_eq!(after.header("connection"), Some("close"));
    assert!(bounded(c.closed()).await);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn pier_answers_errors_itself_and_keeps_the_connection() {
    let (h, mut c) = proxy_to(refused_addr()).await;
    for _ in 0..2 {
        c.write(&get_req("/")).await;
        let resp = bounded(c.response(false)).await;
        assert_eq!(resp.status, 502, "{resp:?}");
        assert_eq!(resp.body, b"Bad Gateway\n");
        assert!(resp.header("connection").is_none(), "{resp:?}");
    }
    let m = h.metrics_text();
    assert!(m.contains(r#"reason="Refused"} 2"#), "{m}");
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// What a scripted backend does with the next request it reads.
#[derive(Clone, Debug)]
enum Act {
    /// Writes these parts (with a pause between them) and keeps the connection.
    Answer(Vec<&'static [u8]>),
    /// Writes this and closes.
    AnswerAndClose(&'static [u8]),
    /// Closes without answering (a keep-alive connection the backend just dropped).
    Drop,
    /// Never answers; logs `closed` when pier closes the connection.
    Hold,
    /// Answers after a pause and keeps the connection.
    Late(u64, &'static [u8]),
}

/// A raw HTTP/1.1 backend that plays `acts` in order across all its connections; returns
/// its address and the log of (connection number, request line).
async fn scripted(acts: Vec<Act>) -> (SocketAddr, Log) {
    let listener = TcpListener::bind(local(0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acts = Arc::new(Mutex::new(VecDeque::from(acts)));
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut tcp, _)) = listener.accept().await {
            n += 1;
            let (acts, log, conn) = (acts.clone(), seen.clone(), n);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match tcp.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    let line = head.lines().next().unwrap_or("").to_string();
                    log.lock().unwrap().push((conn, line));
                    let act = acts.lock().unwrap().pop_front();
                    match act {
                        Some(Act::Answer(parts)) => {
                            for part in parts {
                                tcp.write_all(part).await.unwrap();
                                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                            }
                        }
                        Some(Act::AnswerAndClose(bytes)) => {
                            tcp.write_all(bytes).await.unwrap();
                            return;
                        }
                        Some(Act::Late(ms, bytes)) => {
                            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                            tcp.write_all(bytes).await.unwrap();
                        }
                        Some(Act::Hold) => {
                            let mut rest = [0u8; 1024];
                            while matches!(tcp.read(&mut rest).await, Ok(n) if n > 0) {}
                            log.lock().unwrap().push((conn, "closed".into()));
                            return;
                        }
                        Some(Act::Drop) | None => return,
                    }
                }
            });
        }
    });
    (addr, log)
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

type Log = Arc<Mutex<Vec<(usize, String)>>>;

/// Waits (within `BOUND`) until the scripted backend's log satisfies `done`.
async fn until_logged(log: &Log, done: impl Fn(&[(usize, String)]) -> bool) {
    crate::support::web::eventually(BOUND, || {
        let ok = done(&log.lock().unwrap());
        async move { ok }
    })
    .await;
}

#[tokio::test]
async fn chunked_and_close_delimited_responses_are_relayed() {
    let (addr, log) = scripted(vec![
        Act::Answer(vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Part: 1\r\n\r\n4\r\nabcd\r\n",
            b"3\r\nefg\r\n",
            b"0\r\nx-trailer: t\r\n\r\n",
        ]),
        Act::AnswerAndClose(b"HTTP/1.1 200 OK\r\nX-Part: 2\r\n\r\nuntil the end"),
        Act::Answer(vec![OK]),
    ])
    .await;
    let (h, mut c) = proxy_to(addr).await;
    c.write(&get_req("/chunked")).await;
    let chunked = bounded(c.response(false)).await;
    assert_eq!(chunked.header("transfer-encoding"), Some("chunked"));
    assert_eq!(chunked.header("x-part"), Some("1"));
    assert_eq!(chunked.body, b"abcdefg");
    // Trailer lines were relayed with the body and consumed by the client's decoder above;
    // the next response must start cleanly.
    // A body the backend ends by closing reaches the client chunked, and the client
    // connection stays open.
    c.write(&get_req("/eof")).await;
    let eof = bounded(c.response(false)).await;
    assert_eq!(eof.header("x-part"), Some("2"));
    assert_eq!(eof.header("transfer-encoding"), Some("chunked"));
    assert_eq!(eof.header("connection"), None);
    assert_eq!(eof.body, b"until the end");
    c.write(&get_req("/after")).await;
    assert_eq!(bounded(c.response(false)).await.body, b"ok");
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            (1, "GET /chunked HTTP/1.1".into()),
            (1, "GET /eof HTTP/1.1".into()),
            (2, "GET /after HTTP/1.1".into()),
        ],
        "the connection was reused after the chunked body, not after the closed one"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_pooled_connection_the_backend_drops_is_retried_for_get_only() {
    let (addr, log) = scripted(vec![
        Act::Answer(vec![OK]),
        Act::Drop,
        Act::Answer(vec![OK]),
        Act::Drop,
    ])
    .await;
    let (h, mut c) = proxy_to(addr).await;
    for path in ["/1", "/2"] {
        c.write(&get_req(path)).await;
        assert_eq!(bounded(c.response(false)).await.status, 200, "{path}");
    }
    // A POST is not repeated: the backend may have acted on it.
    c.write(b"POST /3 HTTP/1.1\r\nHost: app.example\r\nContent-Length: 1\r\n\r\nx")
        .await;
    assert_eq!(bounded(c.response(false)).await.status, 502);
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            (1, "GET /1 HTTP/1.1".into()),
            (1, "GET /2 HTTP/1.1".into()),
            (2, "GET /2 HTTP/1.1".into()),
            (2, "POST /3 HTTP/1.1".into()),
        ]
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn framing_headers_are_pier_own_whatever_connection_names() {
    // A client that names Content-Length in Connection must not turn its body into a second
    // request on the pooled upstream connection.
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("a", &[a.addr]))).await;
    let smuggled = b"GET /admin HTTP/1.1\r\nHost: app.example\r\n\r\n";
    let mut req = format!(
        "POST /form HTTP/1.1\r\nHost: app.example\r\nConnection: content-length\r\nContent-Length: {}\r\n\r\n",
        smuggled.len()
    )
    .into_bytes();
    req.extend_from_slice(smuggled);
    let mut c = bounded(Client::connect(p)).await;
    c.write(&req).await;
    let seen = bounded(c.response(false)).await.echo();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/form")
    );
    assert_eq!(seen.body_bytes, smuggled.len() as u64);
    assert_eq!(seen.headers["content-length"], [smuggled.len().to_string()]);
    c.write(&get_req("/next")).await;
    assert_eq!(bounded(c.response(false)).await.echo().path, "/next");
    let paths: Vec<String> = a.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/form", "/next"], "no request came out of the body");

    // A backend that names Content-Length in Connection still gets a delimited response.
    let (addr, _log) = scripted(vec![
        Act::Answer(vec![
            b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 2\r\n\r\nok",
        ]),
        Act::Answer(vec![OK]),
    ])
    .await;
    let q = free_port();
    let h2 = Harness::start(simple(q, &backend("s", &[addr]))).await;
    let mut c = bounded(Client::connect(q)).await;
    for path in ["/1", "/2"] {
        c.write(&get_req(path)).await;
        let resp = bounded(c.response(false)).await;
        assert_eq!(resp.header("content-length"), Some("2"), "{path}: {resp:?}");
        assert_eq!(resp.body, b"ok");
    }
    bounded(h.proxy.shutdown(BOUND)).await;
    bounded(h2.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_client_that_hangs_up_cancels_the_upstream_exchange() {
    let (addr, log) = scripted(vec![Act::Hold]).await;
    let (h, mut c) = proxy_to(addr).await;
    c.write(&get_req("/long-poll")).await;
    until_logged(&log, |l| !l.is_empty()).await;
    drop(c);
    until_logged(&log, |l| l.contains(&(1, "closed".to_string()))).await;
    let m = h.metrics_text();
    assert!(m.contains("pier_proxy_upstream_idle_connections 0"), "{m}");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_response_that_arrives_after_the_client_left_keeps_its_upstream_connection() {
    let (addr, log) = scripted(vec![Act::Late(50, OK), Act::Answer(vec![OK])]).await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("b", &[addr]))).await;
    let mut c = bounded(Client::connect(p)).await;
    c.write(&get_req("/left")).await;
    until_logged(&log, |l| !l.is_empty()).await;
    drop(c);
    crate::support::web::eventually(BOUND, || async {
        h.metrics_text()
            .contains("pier_proxy_upstream_idle_connections 1")
    })
    .await;
    let mut c = bounded(Client::connect(p)).await;
    c.write(&get_req("/next")).await;
    assert_eq!(bounded(c.response(false)).await.body, b"ok");
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            (1, "GET /left HTTP/1.1".into()),
            (1, "GET /next HTTP/1.1".into())
        ]
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_request_body_that_trickles_in_is_forwarded_whole() {
    let a = echo("a").await;
    let (h, mut c) = proxy_to(a.addr).await;
    // The head and the first bytes of the body, then the rest in two late pieces: the request
    // waits for its whole body and goes upstream once, with the client's Content-Length.
    c.write(b"POST /slow HTTP/1.1\r\nHost: app.example\r\nContent-Length: 10\r\n\r\nabc")
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    c.write(b"defg").await;
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    c.write(b"hij").await;
    let resp = bounded(c.response(false)).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let seen = resp.echo();
    assert_eq!((seen.path.as_str(), seen.body_bytes), ("/slow", 10));
    assert_eq!(seen.headers["content-length"], ["10"]);
    // The connection is still in step: the next request is answered on it.
    c.write(&get_req("/next")).await;
    assert_eq!(bounded(c.response(false)).await.echo().path, "/next");
    assert_eq!(a.count(), 2);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn an_https_connection_that_closes_ends_with_close_notify() {
    use crate::support::client::connect_tls;
    use crate::support::pki::Pki;
    let pki = Pki::new();
    let mut certs = pier::model::CertTable::default();
    certs.add(&["a.example.com".into()], pki.leaf(&["a.example.com"]));
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple_https(p, certs, &backend("a", &[a.addr]))).await;
    let mut tls = bounded(connect_tls(
        local(p),
        "a.example.com",
        pki.client(&[b"http/1.1"]),
    ))
    .await;
    tls.write_all(b"GET /bye HTTP/1.1\r\nHost: a.example.com\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    // rustls reports a TCP close without a TLS close_notify as an UnexpectedEof error, so a
    // clean read to the end shows pier closed the TLS session before the socket.
    let mut all = Vec::new();
    bounded(tls.read_to_end(&mut all))
        .await
        .expect("the connection ends with close_notify");
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.contains("\"/bye\""), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}
