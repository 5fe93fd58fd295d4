//! Pool mechanics against loopback echo servers: reuse, LIFO order, caps, retiring.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::*;
use crate::model::{BackendId, BackendTls, EndpointStats, ObjectRef};
use crate::proxy::body;

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

fn upstream(config: &ProxyConfig) -> Upstream {
    Upstream::new(config, Arc::default(), Arc::default())
}

fn get(host: &str, path: &'static str) -> Request<ProxyBody> {
    Request::get(path)
        .header(HOST, host)
        .body(body::empty())
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
    let target = Target {
        backend: &b,
        endpoint: &ep,
        upgrade: false,
    };
    let err = up.send(target, get("x", "/")).await.unwrap_err();
    assert_eq!(err.kind(), super::super::error::ErrorKind::ConnectRefused);
}

#[tokio::test]
async fn a_fully_read_http1_response_returns_its_connection_for_reuse() {
    let echo = crate::echo::spawn(([127, 0, 0, 1], 0).into(), "e")
        .await
        .unwrap();
    let up = upstream(&ProxyConfig::default());
    let b = backend(AppProtocol::Http1);
    let ep = Endpoint::new(echo.addr);
    let target = Target {
        backend: &b,
        endpoint: &ep,
        upgrade: false,
    };
    for _ in 0..3 {
        let resp = up.send(target, get("a.example", "/")).await.unwrap();
        read(resp).await;
        // Released at the end of the body, or by a task once hyper catches up.
        tokio::time::timeout(Duration::from_secs(5), async {
            while up.pool().counts().0 != 1 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("connection pooled");
    }
    assert_eq!(echo.connections(), 1);
}

#[tokio::test]
async fn an_unread_response_body_never_returns_its_connection() {
    let echo = crate::echo::spawn(([127, 0, 0, 1], 0).into(), "e")
        .await
        .unwrap();
    let up = upstream(&ProxyConfig::default());
    let b = backend(AppProtocol::Http1);
    let ep = Endpoint::new(echo.addr);
    let target = Target {
        backend: &b,
        endpoint: &ep,
        upgrade: false,
    };
    let resp = up.send(target, get("a.example", "/")).await.unwrap();
    drop(resp);
    assert_eq!(up.pool().counts(), (0, 0));
    let resp = up.send(target, get("a.example", "/")).await.unwrap();
    read(resp).await;
    assert_eq!(echo.connections(), 2);
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
    let echo = crate::echo::spawn(([127, 0, 0, 1], 0).into(), "e")
        .await
        .unwrap();
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
    let target = Target {
        backend: &b,
        endpoint: &ep,
        upgrade: false,
    };
    // Three responses open at once need three connections, and all three are pooled: the
    // load may need them again at once.
    let three_at_once = async || {
        let mut open = Vec::new();
        for _ in 0..3 {
            open.push(up.send(target, get("a", "/")).await.unwrap());
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
    let target = Target {
        backend: &b,
        endpoint: &ep,
        upgrade: false,
    };
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
