//! Keep-alive connections idle for a second are parked: a plain one leaves its task and waits
//! in its accept loop's parking lot (`proxy::lot`: its socket in the lot's epoll set, no task,
//! no readiness state in tokio's driver); a TLS one waits in its task, which drops the fast
//! path's states (`conn::idle`). Every limit of an idle connection still holds while it is
//! parked, and the next request is served as before.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::client::connect_tls;
use crate::support::pki::Pki;
use crate::support::raw::Client;
use crate::support::snap::*;
use crate::support::*;

/// Longer than the fast path waits before it parks an idle connection (1 s).
const PARKED: Duration = Duration::from_millis(1400);

fn parked(h: &Harness, p: u16) -> u64 {
    let metrics = h.metrics_text();
    let line = format!("pier_proxy_downstream_connections_parked{{port=\"{p}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |v| v.trim().parse().unwrap())
}

async fn proxy(a: &pier::echo::EchoServer, config: pier::proxy::ProxyConfig) -> (Harness, u16) {
    let p = free_port();
    let h = Harness::start_with(simple(p, &backend("a", &[a.addr])), config).await;
    (h, p)
}

async fn get_on<S>(c: &mut Client<S>, path: &str) -> crate::support::raw::Raw
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    c.write(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await;
    bounded(c.response(false)).await
}

/// A graceful shutdown (5 s grace) under way.
fn shut_down(h: &Harness) -> tokio::task::JoinHandle<()> {
    let proxy = h.proxy.clone();
    tokio::spawn(async move { proxy.shutdown(Duration::from_secs(5)).await })
}

/// During a drain: `path` is answered with `Connection: close`, then the connection closes;
/// returns the status.
async fn last_answer(c: &mut Client, path: &str) -> u16 {
    let resp = get_on(c, path).await;
    assert_eq!(resp.header("connection"), Some("close"), "{path}");
    assert!(bounded(c.closed()).await, "{path}: still open");
    resp.status
}

#[tokio::test]
async fn an_idle_keep_alive_connection_parks_and_serves_its_next_requests() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let mut c = bounded(Client::connect(p)).await;
    assert_eq!(get_on(&mut c, "/one").await.status, 200);
    assert_eq!(parked(&h, p), 0, "parked at once");
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 1);

    // Back on the fast path: served, and no longer parked.
    let resp = get_on(&mut c, "/two").await;
    assert_eq!((resp.status, resp.echo().path.as_str()), (200, "/two"));
    assert_eq!(parked(&h, p), 0);
    // A request that needs hyper (HTTP/1.0) after parking is served too.
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 1);
    c.write(b"GET /three HTTP/1.0\r\nHost: x\r\n\r\n").await;
    let resp = bounded(c.response(false)).await;
    assert_eq!((resp.status, resp.echo().path.as_str()), (200, "/three"));
    assert_eq!(parked(&h, p), 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// Parked plain connections are not tasks: 20 of them idle cost the runtime no task each, and
/// every one serves its next request (from a task spawned again when its client sends).
#[tokio::test]
async fn parked_plain_connections_hold_no_task_of_their_own() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let mut clients = Vec::new();
    for _ in 0..20 {
        let mut c = bounded(Client::connect(p)).await;
        assert_eq!(get_on(&mut c, "/one").await.status, 200);
        clients.push(c);
    }
    let serving = tasks();
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 20);
    let parked_tasks = tasks();
    assert!(
        serving >= parked_tasks + 20,
        "{serving} tasks with 20 connections idle briefly, {parked_tasks} once parked"
    );
    for c in &mut clients {
        let resp = get_on(c, "/two").await;
        assert_eq!((resp.status, resp.echo().path.as_str()), (200, "/two"));
    }
    assert_eq!(parked(&h, p), 0);
    assert!(tasks() >= parked_tasks + 20);
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// The client's address as the echo backend saw it (`X-Forwarded-For`).
fn forwarded_for(resp: &crate::support::raw::Raw) -> Vec<String> {
    let echo = resp.echo();
    echo.headers
        .get("x-forwarded-for")
        .cloned()
        .unwrap_or_default()
}

/// A connection from `source` (any 127/8 address is local on Linux).
async fn connect_from(source: [u8; 4], p: u16) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    bounded(socket.connect(local(p))).await.unwrap()
}

/// A parked plain connection keeps only its client's address; what the request path knows of
/// the connection is built again when it wakes, and says the same: the client the socket
/// came from, or on a PROXY protocol port the client its header named.
#[tokio::test]
async fn a_woken_connection_still_knows_its_client() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let mut c = Client::on(connect_from([127, 0, 0, 7], p).await);
    assert_eq!(forwarded_for(&get_on(&mut c, "/one").await), ["127.0.0.7"]);
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 1);
    assert_eq!(forwarded_for(&get_on(&mut c, "/two").await), ["127.0.0.7"]);
    bounded(h.proxy.shutdown(BOUND)).await;

    let p = free_port();
    let mut port = port(
        p,
        vec![
            listener("http", None)
                .route(
                    &[],
                    prefix("/"),
                    &rule("ns/r").to(&backend("a", &[a.addr])).build(),
                )
                .build(),
        ],
    );
    port.proxy_protocol = true;
    let h = Harness::start(snapshot(vec![port])).await;
    let mut tcp = connect_from([127, 0, 0, 8], p).await;
    tcp.write_all(b"PROXY TCP4 203.0.113.9 127.0.0.1 40000 80\r\n")
        .await
        .unwrap();
    let mut c = Client::on(tcp);
    assert_eq!(
        forwarded_for(&get_on(&mut c, "/one").await),
        ["203.0.113.9"]
    );
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 1);
    assert_eq!(
        forwarded_for(&get_on(&mut c, "/two").await),
        ["203.0.113.9"]
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_parked_tls_connection_serves_its_next_request() {
    init();
    let pki = Pki::new();
    let mut certs = pier::model::CertTable::default();
    certs.add(&["a.example.com".into()], pki.leaf(&["a.example.com"]));
    let a = echo("a").await;
    let p = free_port();
    let r = rule("ns/r").to(&backend("a", &[a.addr])).build();
    let listener = listener("https", None).route(&[], prefix("/"), &r).build();
    let h = Harness::start(snapshot(vec![https_port(p, vec![listener], certs)])).await;
    let tls = connect_tls(local(p), "a.example.com", pki.client(&[b"http/1.1"]));
    let mut c = Client::on(bounded(tls).await);
    for path in ["/one", "/two", "/three"] {
        c.write(format!("GET {path} HTTP/1.1\r\nHost: a.example.com\r\n\r\n").as_bytes())
            .await;
        let resp = bounded(c.response(false)).await;
        assert_eq!((resp.status, resp.echo().path.as_str()), (200, path));
        assert_eq!(parked(&h, p), 0);
        tokio::time::sleep(PARKED).await;
        assert_eq!(parked(&h, p), 1);
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// The connection closes 2.5 s (the test's idle timeout) after `idle_from`, not before.
async fn closed_at_the_idle_timeout(c: &mut Client, idle_from: Instant) {
    assert!(bounded(c.closed()).await);
    let after = idle_from.elapsed();
    assert!(
        after >= Duration::from_millis(2400) && after < Duration::from_secs(4),
        "{after:?}"
    );
}

/// The idle timeout (the header read timeout) counts from the end of the last response,
/// parked or not; a head that starts while parked must still arrive by then.
#[tokio::test]
async fn a_parked_connection_keeps_its_idle_timeout() {
    let a = echo("a").await;
    let mut config = config();
    config.header_read_timeout = Duration::from_millis(2500);
    let (h, p) = proxy(&a, config).await;

    // Silent: closed at the idle timeout, not before.
    let mut c = bounded(Client::connect(p)).await;
    assert_eq!(get_on(&mut c, "/").await.status, 200);
    let idle_from = Instant::now();
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 1);
    closed_at_the_idle_timeout(&mut c, idle_from).await;
    assert_eq!(parked(&h, p), 0);

    // Part of a head while parked, the rest never: closed at the same deadline.
    let mut c = bounded(Client::connect(p)).await;
    assert_eq!(get_on(&mut c, "/").await.status, 200);
    let idle_from = Instant::now();
    tokio::time::sleep(PARKED).await;
    c.write(b"GET / HTTP/1.1\r\nHost: x\r\n").await;
    closed_at_the_idle_timeout(&mut c, idle_from).await;
    assert_eq!(a.count(), 2);
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// A head that stalls for longer than the park point is not idle: the connection keeps
/// waiting for the rest (until the header timeout), and serves it.
#[tokio::test]
async fn a_head_that_stalls_past_the_park_point_is_still_served() {
    let a = echo("a").await;
    let mut config = config();
    config.header_read_timeout = Duration::from_secs(5);
    let (h, p) = proxy(&a, config).await;
    let mut c = bounded(Client::connect(p)).await;
    c.write(b"GET /slow HTTP/1.1\r\n").await;
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 0);
    c.write(b"Host: x\r\n\r\n").await;
    let resp = bounded(c.response(false)).await;
    assert_eq!((resp.status, resp.echo().path.as_str()), (200, "/slow"));
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// On shutdown a parked connection gets the same moment as an idle one for a request its
/// client may be sending right then (answered, with `Connection: close`), and is closed
/// when nothing comes.
#[tokio::test]
async fn shutdown_answers_a_parked_connection_that_sends_then_closes_it() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let mut sends = bounded(Client::connect(p)).await;
    let mut silent = bounded(Client::connect(p)).await;
    assert_eq!(get_on(&mut sends, "/").await.status, 200);
    assert_eq!(get_on(&mut silent, "/").await.status, 200);
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 2);

    let shutdown = shut_down(&h);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(last_answer(&mut sends, "/last").await, 200);
    assert!(bounded(silent.closed()).await);
    bounded(shutdown).await.unwrap();
}

/// A drain that starts just before the park point: the drain's own wait (1 s from its start)
/// decides, not the park timer, so a request sent 0.6 s into the drain is answered.
#[tokio::test]
async fn a_drain_just_before_the_park_point_still_waits_its_whole_grace() {
    let a = echo("a").await;
    let (h, p) = proxy(&a, config()).await;
    let mut c = bounded(Client::connect(p)).await;
    assert_eq!(get_on(&mut c, "/").await.status, 200);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let shutdown = shut_down(&h);
    // Idle 1.3 s by now, past the park point, and 0.6 s into the drain.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(last_answer(&mut c, "/late").await, 200);
    bounded(shutdown).await.unwrap();
}

/// pier's own answers (a 404 here) are written before the drain is noticed on the resumed
/// connection's first poll: they must say `Connection: close` too.
#[tokio::test]
async fn during_a_drain_a_resumed_connection_gets_pier_s_own_answer_with_close() {
    let a = echo("a").await;
    let p = free_port();
    let r = rule("ns/r").to(&backend("a", &[a.addr])).build();
    let listener = listener("http", None)
        .route(&[], prefix("/app"), &r)
        .build();
    let h = Harness::start(snapshot(vec![port(p, vec![listener])])).await;
    let mut c = bounded(Client::connect(p)).await;
    assert_eq!(get_on(&mut c, "/app").await.status, 200);
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 1);
    let shutdown = shut_down(&h);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(last_answer(&mut c, "/nothing").await, 404);
    bounded(shutdown).await.unwrap();
}

/// At the connection cap a parked connection is one that waits on its client: a new client
/// takes its place.
#[tokio::test]
async fn at_the_connection_cap_a_parked_connection_makes_room() {
    let a = echo("a").await;
    let mut config = config();
    config.limits.max_connections = 1;
    let (h, p) = proxy(&a, config).await;
    let mut idle = bounded(Client::connect(p)).await;
    assert_eq!(get_on(&mut idle, "/").await.status, 200);
    tokio::time::sleep(PARKED).await;
    assert_eq!(parked(&h, p), 1);

    let started = Instant::now();
    let mut next = bounded(TcpStream::connect(local(p))).await.unwrap();
    next.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut next = Client::on(next);
    assert_eq!(bounded(next.response(false)).await.status, 200);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(bounded(idle.closed()).await);
    assert_eq!(parked(&h, p), 0);
    let metrics = h.metrics_text();
    assert!(
        metrics.contains(&format!(
            "pier_proxy_downstream_connections_reclaimed_total{{port=\"{p}\"}} 1"
        )),
        "{metrics}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}
