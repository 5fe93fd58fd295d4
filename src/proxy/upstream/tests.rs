//! Pool mechanics against loopback echo servers: reuse, LIFO order, caps, retiring.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::*;
use crate::model::{BackendId, BackendTls, EndpointStats, ObjectRef};
use crate::proxy::body;
use http_body::Body as _;

fn backend(protocol: AppProtocol) -> Backend {
    Backend {
        id: BackendId {
            service: ObjectRef::new("default", "b"),
            port: 80,
        },
        protocol,
        endpoints: vec![],
        tls: BackendTls::Plain,
        max_requests: None,
        max_pending: None,
        max_connections: None,
        max_retries: None,
        connect_timeout: None,
        retry_constraint: None,
        outlier: Default::default(),
        load: Arc::default(),
    }
}

/// A target of `backend` at `endpoint`, no upgrade.
fn plain<'a>(backend: &'a Backend, endpoint: &'a Endpoint) -> Target<'a> {
    Target {
        backend,
        endpoint,
        upgrade: false,
    }
}

/// pier's echo server on a loopback port, answering as "e".
async fn echo() -> crate::echo::EchoServer {
    crate::echo::spawn(([127, 0, 0, 1], 0).into(), "e")
        .await
        .unwrap()
}

fn upstream(config: &ProxyConfig) -> Upstream {
    Upstream::new(config, Arc::default(), Arc::default())
}

fn get(host: &str, path: &'static str) -> Request<ProxyBody> {
    Request::get(path)
        .header(HOST, host)
        .body(body::empty())
        .unwrap()
}

/// A request with a body: hyper's path (a request without one takes the raw path, `h1.rs`).
fn post(host: &str, path: &'static str) -> Request<ProxyBody> {
    Request::post(path)
        .header(HOST, host)
        .body(body::full(bytes::Bytes::from_static(b"x")))
        .unwrap()
}

async fn read(resp: Response<UpstreamBody>) -> bytes::Bytes {
    use http_body_util::BodyExt;
    resp.into_body().collect().await.unwrap().to_bytes()
}

#[test]
fn in_flight_counts_until_dropped() {
    let stats = Arc::new(EndpointStats::default());
    let gauge = Gauge::default();
    let a = InFlight::new(stats.clone(), gauge.clone());
    let b = InFlight::new(stats.clone(), gauge.clone());
    assert_eq!(stats.in_flight.load(Ordering::Relaxed), 2);
    assert_eq!(gauge.get(), 2);
    drop(a);
    drop(b);
    assert_eq!(stats.in_flight.load(Ordering::Relaxed), 0);
    assert_eq!(gauge.get(), 0);
}

#[tokio::test]
async fn refused_connection_is_a_refused_connect_error() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let up = upstream(&ProxyConfig::default());
    let b = backend(AppProtocol::Http1);
    let ep = Endpoint::new(addr);
    let target = plain(&b, &ep);
    let err = up.send(target, get("x", "/")).await.unwrap_err();
    assert_eq!(err.kind(), super::super::error::ErrorKind::ConnectRefused);
}

#[tokio::test]
async fn a_fully_read_http1_response_returns_its_connection_for_reuse() {
    // Hyper's connections, then raw ones.
    for request in [post as fn(&str, &'static str) -> Request<ProxyBody>, get] {
        let echo = echo().await;
        let up = upstream(&ProxyConfig::default());
        let b = backend(AppProtocol::Http1);
        let ep = Endpoint::new(echo.addr);
        let target = plain(&b, &ep);
        for _ in 0..3 {
            let resp = up.send(target, request("a.example", "/")).await.unwrap();
            read(resp).await;
            // Released at the end of the body, or by a task once hyper catches up.
            idle(&up, 1).await;
        }
        assert_eq!(echo.connections(), 1);
    }
}

#[tokio::test]
async fn an_unread_response_body_never_returns_its_connection() {
    // Hyper's connections, then raw ones.
    for request in [post as fn(&str, &'static str) -> Request<ProxyBody>, get] {
        let echo = echo().await;
        let up = upstream(&ProxyConfig::default());
        let b = backend(AppProtocol::Http1);
        let ep = Endpoint::new(echo.addr);
        let target = plain(&b, &ep);
        let resp = up.send(target, request("a.example", "/")).await.unwrap();
        drop(resp);
        assert_eq!(up.pool().counts(), (0, 0));
        let resp = up.send(target, request("a.example", "/")).await.unwrap();
        read(resp).await;
        assert_eq!(echo.connections(), 2);
    }
}

/// Waits until the pool holds `n` idle connections.
async fn idle(up: &Upstream, n: usize) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while up.pool().counts().0 != n {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} idle connections, not {}", up.pool().counts().0));
}

/// An echo server, and an upstream with a cap of two idle connections whose connections
/// above it stay 300 ms unused.
async fn capped() -> (crate::echo::EchoServer, Upstream, Backend, Endpoint) {
    let echo = echo().await;
    let up = upstream(&ProxyConfig {
        pool_max_idle_per_host: 2,
        pool_surplus_idle: Duration::from_millis(300),
        ..ProxyConfig::default()
    });
    let ep = Endpoint::new(echo.addr);
    (echo, up, backend(AppProtocol::Http1), ep)
}

#[tokio::test]
async fn idle_connections_above_the_cap_close_once_unused_for_the_surplus_time() {
    let (echo, up, b, ep) = capped().await;
    let target = plain(&b, &ep);
    // Three responses open at once need three connections, and all three are pooled: the
    // load may need them again at once.
    let three_at_once = async || {
        let mut open = Vec::new();
        for _ in 0..3 {
            open.push(up.send(target, post("a", "/")).await.unwrap());
        }
        for resp in open {
            read(resp).await;
        }
        idle(&up, 3).await;
    };
    three_at_once().await;
    up.pool().sweep(None);
    assert_eq!(up.pool().counts().0, 3, "not yet unused for long");
    // Needed again: no new connection.
    three_at_once().await;
    assert_eq!(echo.connections(), 3);
    // Unused for the surplus time, the one above the cap closes; the cap stays.
    tokio::time::sleep(Duration::from_millis(400)).await;
    up.pool().sweep(None);
    assert_eq!(up.pool().counts().0, 2);
    up.pool().sweep(None);
    assert_eq!(up.pool().counts().0, 2);
}

#[tokio::test]
async fn raw_connections_above_the_cap_close_once_unused_for_the_surplus_time() {
    let (echo, up, b, ep) = capped().await;
    let target = plain(&b, &ep);
    let checkout = async || {
        let mut conns = Vec::new();
        for _ in 0..4 {
            match up.raw(target).await.unwrap() {
                Raw::Conn(c) => conns.push(c),
                Raw::Http2 => panic!("plain HTTP/1.1 endpoint"),
            }
        }
        conns
    };
    // Four at once, all released: all four pooled.
    checkout().await.into_iter().for_each(RawConn::release);
    assert_eq!(up.pool().counts().0, 4);
    up.pool().sweep(None);
    assert_eq!(up.pool().counts().0, 4, "not yet unused for long");
    // Needed again: reused, none opened.
    let again = checkout().await;
    assert!(again.iter().all(|c| c.reused));
    again.into_iter().for_each(RawConn::release);
    assert_eq!(echo.connections(), 4);
    // The load needs one at a time for longer than the surplus time: the two oldest close.
    for _ in 0..4 {
        let Raw::Conn(c) = up.raw(target).await.unwrap() else {
            panic!("plain HTTP/1.1 endpoint")
        };
        assert!(c.reused);
        c.release();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    up.pool().sweep(None);
    assert_eq!(up.pool().counts().0, 2);
    assert_eq!(echo.connections(), 4);
}

#[tokio::test]
async fn sweeping_retires_stale_trust_and_forgets_unused_entries() {
    let pool = Pool::new(pool::Settings {
        max_idle: 4,
        surplus_idle: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(60),
        idle_gauge: Gauge::default(),
    });
    let key = |trust_key| ShortKey {
        addr: ([127, 0, 0, 1], 1).into(),
        trust_key,
        protocol: AppProtocol::Http1,
    };
    let name = rustls::pki_types::ServerName::try_from("a.example").unwrap();
    let tls = pool.entry(key(Some(7)), Some(&name));
    let plain = pool.entry(key(None), None);
    assert!(Arc::ptr_eq(&tls, &pool.entry(key(Some(7)), Some(&name))));
    let other = rustls::pki_types::ServerName::try_from("b.example").unwrap();
    assert!(!Arc::ptr_eq(&tls, &pool.entry(key(Some(7)), Some(&other))));

    let live = pool::Live {
        trust_keys: HashSet::from([8]),
        addrs: HashSet::from([key(None).addr]),
    };
    pool.sweep(Some(&live));
    assert!(tls.is_retired(), "trust 7 left the snapshot");
    assert!(!plain.is_retired());
    assert!(!Arc::ptr_eq(&tls, &pool.entry(key(Some(7)), Some(&name))));

    // The endpoint left the snapshot.
    pool.sweep(Some(&pool::Live::default()));
    assert!(plain.is_retired());
    // After close, nothing is pooled.
    pool.close();
    assert!(pool.entry(key(None), None).is_retired());
}

#[test]
fn each_entry_keeps_its_own_tls_sessions_for_the_idle_timeout() {
    let pool = Pool::new(pool::Settings {
        max_idle: 4,
        surplus_idle: Duration::from_secs(5),
        idle_timeout: Duration::from_millis(200),
        idle_gauge: Gauge::default(),
    });
    let config = rustls::ClientConfig::builder_with_provider(crate::tls::provider::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("web.app.svc.cluster.local").unwrap();
    let tls = crate::model::UpstreamTls {
        mode: crate::model::TlsMode::Mesh,
        config: Arc::new(config),
        server_name: name.clone(),
        trust_key: 7,
        identity: None,
    };
    let key = |port| ShortKey {
        addr: ([127, 0, 0, 1], port).into(),
        trust_key: Some(7),
        protocol: AppProtocol::Http1,
    };
    let live = pool::Live {
        trust_keys: HashSet::from([7]),
        addrs: HashSet::from([key(1).addr, key(2).addr]),
    };
    let (a, b) = (
        pool.entry(key(1), Some(&name)),
        pool.entry(key(2), Some(&name)),
    );
    let (config_a, config_b) = (a.tls_config(&tls), b.tls_config(&tls));
    assert!(Arc::ptr_eq(&config_a, &a.tls_config(&tls)), "made once");
    assert!(!Arc::ptr_eq(&config_a, &tls.config));
    assert!(!Arc::ptr_eq(&config_a, &config_b), "one per endpoint");
    drop((a, b));

    // No connection left, but a session opened within the idle timeout: kept.
    pool.sweep(Some(&live));
    let a = pool.entry(key(1), Some(&name));
    assert!(Arc::ptr_eq(&config_a, &a.tls_config(&tls)));
    drop(a);
    // Past the idle timeout it is forgotten, and the next connect starts a new cache.
    std::thread::sleep(Duration::from_millis(250));
    pool.sweep(Some(&live));
    let a = pool.entry(key(1), Some(&name));
    assert!(!Arc::ptr_eq(&config_a, &a.tls_config(&tls)));
}

#[test]
fn shards_spread_keys() {
    let mut used = HashSet::new();
    for port in 0..256u16 {
        let key = ShortKey {
            addr: ([10, 0, 0, 1], port).into(),
            trust_key: None,
            protocol: AppProtocol::Http1,
        };
        used.insert(pool::shard_of(&key));
    }
    assert!(used.len() > 16, "{used:?}");
}

/// What a [`scripted`] server does with the next request on a connection.
#[derive(Clone, Copy)]
enum Step {
    Answer(&'static [u8]),
    /// Answers, then closes.
    AnswerClose(&'static [u8]),
    /// Reads the request and closes without answering.
    Close,
}

/// A server that answers the requests on its n-th connection by the n-th script, keeps the
/// connection open once the script ends (until the peer closes), and keeps every request
/// head it read.
async fn scripted(scripts: Vec<Vec<Step>>) -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        for script in scripts {
            let (mut s, _) = listener.accept().await.unwrap();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for step in script {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut b = [0; 4096];
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    };
                    let head: Vec<u8> = buf.drain(..end).collect();
                    seen.lock().unwrap().push(String::from_utf8(head).unwrap());
                    match step {
                        Step::Answer(a) => s.write_all(a).await.unwrap(),
                        Step::AnswerClose(a) => return s.write_all(a).await.unwrap(),
                        Step::Close => return,
                    }
                }
                let _ = s.read(&mut [0; 1]).await;
            });
        }
    });
    (addr, heads)
}

/// Body and trailers of a response, read whole.
async fn collect(resp: Response<UpstreamBody>) -> (bytes::Bytes, Option<http::HeaderMap>) {
    use http_body_util::BodyExt;
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (collected.to_bytes(), trailers)
}

/// Requests without a body take the raw path (`h1.rs`): every framing is read as hyper
/// would hand it over, and a connection goes back to the pool only after a whole message.
#[tokio::test]
async fn bare_requests_read_every_framing_and_pool_only_whole_messages() {
    let (addr, heads) = scripted(vec![vec![
        Step::Answer(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: 1\r\nConnection: keep-alive, X-B\r\n\
              X-A: 2\r\nx-e:\r\nkeep-alive: timeout=5\r\nx-b: 3\r\nupgrade: h2c\r\n\
              trailer: x-sum\r\nproxy-connection: close\r\n\r\nhello",
        ),
        Step::Answer(
            b"HTTP/1.1 103 Early Hints\r\nlink: </s>\r\n\r\nHTTP/1.1 201 Created\r\n\
              transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;e=1\r\nde\r\n0\r\nx-sum: 9\r\n\r\n",
        ),
        Step::Answer(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"),
        Step::Answer(b"HTTP/1.1 204 No Content\r\n\r\n"),
        Step::AnswerClose(b"HTTP/1.1 200 OK\r\n\r\nuntil close"),
    ]])
    .await;
    let up = upstream(&ProxyConfig::default());
    let b = backend(AppProtocol::Http1);
    let ep = Endpoint::new(addr);
    let target = plain(&b, &ep);
    let resp = up.send(target, get("a.example", "/a?b=1")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let values: Vec<_> = resp.headers().get_all("x-a").iter().collect();
    assert_eq!(values, ["1", "2"]);
    assert_eq!(resp.headers()["x-e"], "");
    // Hop-by-hop lines, and the one `Connection` names, stop here (the connection stays).
    let names: Vec<_> = resp.headers().keys().map(|n| n.as_str()).collect();
    assert_eq!(names, ["content-length", "x-a", "x-e"]);
    assert_eq!(resp.body().size_hint().exact(), Some(5));
    assert_eq!(
        collect(resp).await,
        (bytes::Bytes::from_static(b"hello"), None)
    );
    assert_eq!(up.pool().counts().0, 1, "pooled at the end of the body");

    let resp = up.send(target, get("a.example", "/c")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED, "the 103 skipped");
    assert_eq!(up.pool().counts().0, 0, "in use until the body has ended");
    let (data, trailers) = collect(resp).await;
    assert_eq!(data, "abcde");
    assert_eq!(trailers.unwrap()["x-sum"], "9");
    assert_eq!(up.pool().counts().0, 1);

    let head = Request::head("/h")
        .header(HOST, "a.example")
        .body(body::empty())
        .unwrap();
    let resp = up.send(target, head).await.unwrap();
    assert_eq!(
        resp.headers()["content-length"],
        "5",
        "a HEAD's length kept"
    );
    assert!(resp.body().is_end_stream());
    assert_eq!(up.pool().counts().0, 1, "no body to wait for");
    assert_eq!(collect(resp).await.0, "");

    let resp = up.send(target, get("a.example", "/n")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert!(resp.body().is_end_stream());

    let resp = up.send(target, get("a.example", "/e")).await.unwrap();
    assert_eq!(collect(resp).await.0, "until close");
    assert_eq!(up.pool().counts().0, 0, "a body that ended by closing");

    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 5, "one connection served all: {heads:?}");
    assert_eq!(heads[0], "GET /a?b=1 HTTP/1.1\r\nhost: a.example\r\n\r\n");
    assert!(heads[2].starts_with("HEAD /h HTTP/1.1\r\n"));
}

/// A reused connection the endpoint closed while it was idle, found out only when the
/// request is on it: an idempotent request goes again on a new connection, once; another
/// fails (the endpoint may have acted on it).
#[tokio::test]
async fn a_bare_request_on_a_connection_closed_meanwhile_is_retried_only_if_idempotent() {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let (addr, heads) = scripted(vec![
        vec![Step::Answer(OK), Step::Close],
        vec![Step::Answer(OK), Step::Close],
    ])
    .await;
    let up = upstream(&ProxyConfig::default());
    let b = backend(AppProtocol::Http1);
    let ep = Endpoint::new(addr);
    let target = plain(&b, &ep);
    for path in ["/1", "/2"] {
        let resp = up.send(target, get("a", path)).await.unwrap();
        assert_eq!(collect(resp).await.0, "ok");
    }
    assert_eq!(heads.lock().unwrap().len(), 3, "/2 sent twice");
    let post = Request::post("/3")
        .header(HOST, "a")
        .body(body::empty())
        .unwrap();
    let err = up.send(target, post).await.unwrap_err();
    assert!(matches!(err, ProxyError::Upstream(_)), "{err:?}");
    assert_eq!(heads.lock().unwrap().len(), 4, "/3 sent once");
}

/// What is not HTTP/1.1 fails the exchange: a head (as [`BadResponse`], which the external
/// authorization check reads as garbage) or a body cut short or badly chunked.
#[tokio::test]
async fn bare_requests_fail_on_bad_heads_and_bodies() {
    use http_body_util::BodyExt;
    let (addr, _) = scripted(vec![
        vec![Step::Answer(b"SSH-2.0-OpenSSH\r\n\r\n")],
        vec![Step::AnswerClose(
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort",
        )],
        vec![Step::Answer(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcXY",
        )],
    ])
    .await;
    let up = upstream(&ProxyConfig::default());
    let b = backend(AppProtocol::Http1);
    let ep = Endpoint::new(addr);
    let target = plain(&b, &ep);
    let err = up.send(target, get("a", "/")).await.unwrap_err();
    assert!(
        matches!(&err, ProxyError::Upstream(e) if e.is::<crate::proxy::h1wire::BadResponse>()),
        "{err:?}"
    );
    for _ in 0..2 {
        let resp = up.send(target, get("a", "/")).await.unwrap();
        assert!(resp.into_body().collect().await.is_err());
        assert_eq!(up.pool().counts().0, 0);
    }
}
