//! Shared helpers for loopback integration tests: snapshot builders, a proxy harness, clients
//! and a throwaway PKI. Every wait is bounded by [`bounded`].
#![allow(dead_code)]

pub mod apiserver;
pub mod client;
pub mod cluster;
pub mod extauthz;
pub mod faulty_api;
pub mod flaky;
pub mod grpc;
pub mod h3;
pub mod haproxy;
pub mod jwks_server;
pub mod jwt;
pub mod logs;
pub mod mesh;
pub mod nginx;
pub mod oidc_provider;
pub mod otelcol;
pub mod pki;
pub mod ratelimit;
pub mod raw;
pub mod snap;
pub mod spire;
pub mod tls_origin;
pub mod web;
pub mod webdriver;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use pier::model::Snapshot;
use pier::proxy::{Proxy, ProxyConfig, ProxyMetrics};
use prometheus_client::registry::Registry;

/// Upper bound for any single wait in a test.
pub const BOUND: Duration = Duration::from_secs(10);

pub async fn bounded<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .expect("test step exceeded its time bound")
}

pub fn init() {
    pier::tls::provider::install_default();
}

/// The version a build script pins on its `VAR=${PIER_VAR:-X.Y.Z}` line (`script` is the
/// script's text, `var` e.g. `KUBE_VERSION`), so the version lives in one place.
#[allow(dead_code)]
pub fn pinned_version(script: &str, var: &str) -> String {
    let prefix = format!("{var}=${{PIER_{var}:-");
    script
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or_else(|| panic!("the script pins {var}=${{PIER_{var}:-X.Y.Z}}"))
        .to_string()
}

/// A port that is free right now on 127.0.0.1, and that no other `free_port` call of this
/// process has returned.
///
/// Drawn at random from below the kernel's ephemeral range (`ip_local_port_range`), so a
/// socket bound to port 0 or a client's source port (an echo server, an outgoing connection
/// of another test) cannot take it between this call and the test's bind. Two draws of
/// `bind(127.0.0.1:0)` return the same port about once in 12 500: enough for three ports of
/// one test to collide now and then, as CI once saw (an `AllowValidOnly` port landing on the
/// `AllowInsecureFallback` one).
pub fn free_port() -> u16 {
    use std::collections::BTreeSet;
    use std::hash::{BuildHasher, RandomState};
    use std::sync::Mutex;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    const LOW: u16 = 20_000;
    let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let random = RandomState::new();
    for attempt in 0u32..10_000 {
        let port = if high > LOW + 1_000 {
            LOW + (random.hash_one(attempt) % u64::from(high - LOW)) as u16
        } else {
            // A machine whose ephemeral range starts low: let the kernel pick.
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        if given.contains(&port) || std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        given.insert(port);
        return port;
    }
    panic!("no free port on 127.0.0.1");
}

/// An address that refuses connections (nothing listens there any more).
pub fn refused_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

pub async fn echo(name: &str) -> pier::echo::EchoServer {
    pier::echo::spawn(local(0), name).await.unwrap()
}

pub struct Harness {
    pub proxy: Proxy,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub registry: Registry,
}

impl Harness {
    pub async fn start(snapshot: Snapshot) -> Self {
        Self::start_with(snapshot, config()).await
    }

    pub async fn start_with(snapshot: Snapshot, config: ProxyConfig) -> Self {
        init();
        let mut registry = pier::metrics::registry();
        let metrics = Arc::new(ProxyMetrics::register(&mut registry));
        let snapshot = Arc::new(ArcSwap::from_pointee(snapshot));
        let proxy = Proxy::new(snapshot.clone(), config, metrics);
        let failed = proxy.reconcile().await;
        assert!(failed.is_empty(), "bind failed: {failed:?}");
        Self {
            proxy,
            snapshot,
            registry,
        }
    }

    pub fn swap(&self, mut s: Snapshot) {
        s.generation = self.snapshot.load().generation + 1;
        self.snapshot.store(Arc::new(s));
    }

    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).unwrap();
        out
    }
}

/// Loopback only, short timeouts.
pub fn config() -> ProxyConfig {
    ProxyConfig {
        listen_host: [127, 0, 0, 1].into(),
        connect_timeout: Duration::from_secs(1),
        mirror_timeout: Duration::from_secs(5),
        ..ProxyConfig::default()
    }
}
