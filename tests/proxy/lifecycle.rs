//! Snapshot swaps, port reconciliation and graceful shutdown.

use std::time::Duration;

use tokio::net::TcpStream;

use crate::support::client::{get, send};
use crate::support::snap::*;
use crate::support::*;

#[tokio::test]
async fn a_swap_mid_request_finishes_on_the_old_backend_and_routes_new_requests_anew() {
    let old = echo("old").await;
    let new = echo("new").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("old", &[old.addr]))).await;
    let in_flight = tokio::spawn(send(local(p), get("x", "/delay/300")));
    bounded(old.wait_for(1)).await;

    h.swap(simple(p, &backend("new", &[new.addr])));
    assert_eq!(
        bounded(send(local(p), get("x", "/"))).await.backend(),
        "new"
    );
    let first = bounded(in_flight).await.unwrap();
    assert_eq!(first.status, 200);
    assert_eq!(first.backend(), "old");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn reconcile_binds_new_ports_and_closes_removed_ones() {
    let a = echo("a").await;
    let b = backend("a", &[a.addr]);
    let (p1, p2) = (free_port(), free_port());
    let h = Harness::start(simple(p1, &b)).await;
    assert_eq!(h.proxy.bound_ports(), [p1]);
    assert_eq!(bounded(send(local(p1), get("x", "/"))).await.status, 200);

    h.swap(simple(p2, &b));
    let failed = bounded(h.proxy.reconcile()).await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(h.proxy.bound_ports(), [p2]);
    assert_eq!(bounded(send(local(p2), get("x", "/"))).await.status, 200);
    let refused = bounded(TcpStream::connect(local(p1))).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    // Reconciling an unchanged snapshot changes nothing.
    assert!(bounded(h.proxy.reconcile()).await.is_empty());
    assert_eq!(h.proxy.bound_ports(), [p2]);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn reconcile_reports_ports_that_fail_to_bind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = taken.local_addr().unwrap().port();
    init();
    let snapshot = std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(simple(
        p,
        &backend("a", &[refused_addr()]),
    )));
    let proxy = pier::proxy::Proxy::new(snapshot, config(), Default::default());
    let failed = bounded(proxy.reconcile()).await;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0.port, p);
    assert_eq!(failed[0].1.kind(), std::io::ErrorKind::AddrInUse);
    assert!(proxy.bound_ports().is_empty());
    bounded(proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn shutdown_lets_in_flight_requests_finish_then_closes() {
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("a", &[a.addr]))).await;
    let in_flight = tokio::spawn(send(local(p), get("x", "/delay/300")));
    bounded(a.wait_for(1)).await;

    let proxy = h.proxy.clone();
    let shutdown = tokio::spawn(async move { proxy.shutdown(Duration::from_secs(5)).await });
    let resp = bounded(in_flight).await.unwrap();
    assert_eq!(resp.status, 200);
    bounded(shutdown).await.unwrap();
    assert!(h.proxy.bound_ports().is_empty());
    assert!(bounded(TcpStream::connect(local(p))).await.is_err());
    // Shut down for good: reconcile binds nothing.
    assert!(bounded(h.proxy.reconcile()).await.is_empty());
    assert!(h.proxy.bound_ports().is_empty());
}

#[tokio::test]
async fn shutdown_closes_what_outlives_the_grace_period() {
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("a", &[a.addr]))).await;
    let in_flight = tokio::spawn(send_status(local(p), "/delay/30000"));
    bounded(a.wait_for(1)).await;
    bounded(h.proxy.shutdown(Duration::from_millis(100))).await;
    // The connection was closed under the request.
    assert!(bounded(in_flight).await.unwrap().is_err());
}

/// Like `send`, but reports a failed exchange instead of panicking.
async fn send_status(addr: std::net::SocketAddr, path: &str) -> Result<u16, hyper::Error> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = tx.send_request(get("x", path)).await?;
    Ok(resp.status().as_u16())
}

/// Reads until the peer closes; returns what arrived.
async fn read_until_closed(mut tcp: TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out).await;
    out
}

#[tokio::test]
async fn a_slow_request_head_is_cut_off_by_the_header_read_timeout() {
    use tokio::io::AsyncWriteExt;
    let a = echo("a").await;
    let p = free_port();
    let config = pier::proxy::ProxyConfig {
        header_read_timeout: Duration::from_millis(200),
        ..config()
    };
    let h = Harness::start_with(simple(p, &backend("a", &[a.addr])), config).await;
    let mut tcp = bounded(TcpStream::connect(local(p))).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // Without the timer the connection would wait for the rest of the head forever.
    bounded(read_until_closed(tcp)).await;
    assert_eq!(a.count(), 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_silent_tls_client_is_cut_off_by_the_handshake_deadline() {
    let p = free_port();
    let config = pier::proxy::ProxyConfig {
        tls_handshake_timeout: Duration::from_millis(200),
        ..config()
    };
    let r = rule("ns/r").to(&backend("a", &[refused_addr()])).build();
    let s = snapshot(vec![https_port(
        p,
        vec![listener("https", None).route(&[], prefix("/"), &r).build()],
        pier::model::CertTable::default(),
    )]);
    let h = Harness::start_with(s, config).await;
    let tcp = bounded(TcpStream::connect(local(p))).await.unwrap();
    assert!(bounded(read_until_closed(tcp)).await.is_empty());
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// Listening sockets on `port` (any address), from /proc/net/tcp.
fn listening_sockets(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&local) && f[3] == "0A"
        })
        .count()
}

#[tokio::test]
async fn thread_per_core_accepts_on_a_socket_per_worker_and_drains_them_all() {
    let a = echo("a").await;
    let b = backend("a", &[a.addr]);
    let (p1, p2) = (free_port(), free_port());
    let workers = pier::proxy::workers::Workers::start(2, Duration::ZERO).unwrap();
    let mut cfg = config();
    cfg.workers = Some(workers);
    let h = Harness::start_with(simple(p1, &b), cfg.clone()).await;
    assert_eq!(listening_sockets(p1), 2, "one socket per worker");
    // A second proxy on the same port (without `reuse_port`) fails to bind, as with one
    // socket per port, instead of joining the first one's SO_REUSEPORT group.
    let second = pier::proxy::Proxy::new(
        std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(simple(p1, &b))),
        cfg,
        Default::default(),
    );
    let failed = bounded(second.reconcile()).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].1.kind(), std::io::ErrorKind::AddrInUse);
    assert_eq!(listening_sockets(p1), 2);
    // Connections land on both sockets (the kernel hashes each 4-tuple); every one is served.
    let sends: Vec<_> = (0..32)
        .map(|_| tokio::spawn(send(local(p1), get("x", "/"))))
        .collect();
    for s in sends {
        assert_eq!(bounded(s).await.unwrap().status, 200);
    }

    // A removed port closes every worker's socket; the new one gets a socket per worker.
    h.swap(simple(p2, &b));
    assert!(bounded(h.proxy.reconcile()).await.is_empty());
    assert_eq!((listening_sockets(p1), listening_sockets(p2)), (0, 2));
    let in_flight = tokio::spawn(send(local(p2), get("x", "/delay/300")));
    bounded(a.wait_for(33)).await;
    // Shutdown waits for the request in progress on whichever worker has it.
    bounded(h.proxy.shutdown(Duration::from_secs(5))).await;
    assert_eq!(bounded(in_flight).await.unwrap().status, 200);
    assert_eq!(listening_sockets(p2), 0);
}
