//! `BackendTrafficPolicy` `healthCheck.active` end to end: `pier run` on manifests.
//!
//! - HTTP: one Service with two endpoints (127.0.0.2 and 127.0.0.3, one port) whose health
//!   answer the test sets; a failing endpoint gets no new request until it passes again; both
//!   failing: requests go to both (panic threshold 0 %); a slow health answer never has two
//!   checks in flight at one endpoint.
//! - TCP: an endpoint whose listener is gone is taken out, and back when it listens again.
//! - Passive (outlier detection per policy): an endpoint whose requests get 500 is ejected
//!   after `consecutive5XxErrors` of them (pier's default counts only 502/503/504);
//!   `maxEjectionPercent` keeps one of two in.
//! - gRPC: grpcio's server (`tests/fixtures/grpc/peer.py`) answering `grpc.health.v1.Health`
//!   NOT_SERVING takes its endpoint out; SERVING brings it back.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use support::cluster::sample;
use support::web::*;
use support::*;

/// An HTTP/1.1 backend: `/healthz` answers the status the test sets (after `delay` ms),
/// anything else `answer` (200 unless the test sets another) with the backend's name. Counts both kinds of request, and the most
/// health checks it had in flight at once.
struct Backend {
    health: Arc<AtomicU16>,
    answer: Arc<AtomicU16>,
    delay_ms: Arc<AtomicU64>,
    checks: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    max_checks_in_flight: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    async fn start(addr: SocketAddr, name: &'static str) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let health = Arc::new(AtomicU16::new(200));
        let answer = Arc::new(AtomicU16::new(200));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let checks = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU64::new(0));
        let max_checks_in_flight = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let state = (
            health.clone(),
            answer.clone(),
            delay_ms.clone(),
            checks.clone(),
            requests.clone(),
            max_checks_in_flight.clone(),
            in_flight,
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (health, answer, delay, checks, requests, max, in_flight) =
                            state.clone();
                        async move {
                            let resp = if req.uri().path() == "/healthz" {
                                checks.fetch_add(1, Ordering::SeqCst);
                                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                                max.fetch_max(now, Ordering::SeqCst);
                                let ms = delay.load(Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                                in_flight.fetch_sub(1, Ordering::SeqCst);
                                http::Response::builder()
                                    .status(health.load(Ordering::SeqCst))
                                    .body(Full::new(Bytes::from_static(b"health\n")))
                            } else {
                                requests.fetch_add(1, Ordering::SeqCst);
                                http::Response::builder()
                                    .status(answer.load(Ordering::SeqCst))
                                    .body(Full::new(Bytes::from(name)))
                            };
                            Ok::<_, std::convert::Infallible>(resp.unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Self {
            health,
            answer,
            delay_ms,
            checks,
            requests,
            max_checks_in_flight,
            task,
        }
    }

    fn set_health(&self, status: u16) {
        self.health.store(status, Ordering::SeqCst);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn metrics(admin: u16) -> String {
    get(&format!("http://127.0.0.1:{admin}/metrics"), &[])
        .await
        .text()
}

/// Waits until `backend` has `n` endpoints taken out by health checks.
async fn until_unhealthy(admin: u16, backend: &str, n: f64) {
    let series = format!("pier_proxy_unhealthy_endpoints{{backend=\"{backend}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = metrics(admin).await;
        if sample(&m, &series) == n {
            return;
        }
        assert!(Instant::now() < deadline, "{series} never {n}: {m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` GETs of `/app`: how many each backend answered.
async fn spread(port: u16, n: usize) -> (usize, usize) {
    let (mut a, mut b) = (0, 0);
    for _ in 0..n {
        let r = get(&format!("http://127.0.0.1:{port}/app"), &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        match r.text().as_str() {
            "a" => a += 1,
            "b" => b += 1,
            other => panic!("answered by {other:?}"),
        }
    }
    (a, b)
}

/// Backends `a` (127.0.0.2) and `b` (127.0.0.3) on one port, Service `pool`, the routes
/// `/app` and `/plain` to it, and the BackendTrafficPolicy `spec` on `/app`, served by pier.
/// Tests bind every field they destructure (`_pier`, not `_`): a field left out would be dropped
/// at once, and pier with it.
struct Two {
    a: Backend,
    b: Backend,
    a_addr: SocketAddr,
    port: u16,
    admin: u16,
    _pier: Child,
    _dir: tempfile::TempDir,
}

impl Two {
    async fn start(spec: &str) -> Self {
        let echo_port = free_port();
        let a_addr = SocketAddr::from(([127, 0, 0, 2], echo_port));
        let a = Backend::start(a_addr, "a").await;
        let b = Backend::start(SocketAddr::from(([127, 0, 0, 3], echo_port)), "b").await;
        let dir = tempfile::tempdir().unwrap();
        let (port, admin) = (free_port(), free_port());
        let mut m = format!("{}---\n", gateway(port));
        m += &service_pool("pool", echo_port, &["127.0.0.2", "127.0.0.3"], None);
        m += "---\n";
        for name in ["app", "plain"] {
            m += &route(name, &format!("/{name}"), "pool");
            m += "---\n";
        }
        m += &route_policy("BackendTrafficPolicy", "checks", "app", spec);
        std::fs::write(dir.path().join("all.yaml"), m).unwrap();
        let pier = start_pier(dir.path(), admin, &[], &[]).await;
        Self {
            a,
            b,
            a_addr,
            port,
            admin,
            _pier: pier,
            _dir: dir,
        }
    }
}

#[tokio::test]
async fn http_checks_take_a_failing_endpoint_out_and_bring_it_back() {
    let Two {
        a,
        b,
        port,
        admin,
        _pier,
        _dir,
        ..
    } = Two::start(
        "  healthCheck:
    active:
      type: HTTP
      interval: 100ms
      timeout: 1s
      unhealthyThreshold: 2
      healthyThreshold: 2
      http: {path: /healthz, expectedStatuses: [200, 204]}
",
    )
    .await;
    let backend = "default/pool:80";

    // Both healthy: both get requests, and both are checked.
    let (to_a, to_b) = spread(port, 40).await;
    assert!(to_a > 0 && to_b > 0, "a {to_a}, b {to_b}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.checks.load(Ordering::SeqCst) < 2 || b.checks.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the endpoints are not checked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // a fails its checks: out after two, no new request reaches it.
    a.set_health(503);
    until_unhealthy(admin, backend, 1.0).await;
    let before = a.requests.load(Ordering::SeqCst);
    let (to_a, to_b) = spread(port, 40).await;
    assert_eq!((to_a, to_b), (0, 40));
    assert_eq!(a.requests.load(Ordering::SeqCst), before);

    // a passes again (a 204 is expected too): back after two passes.
    a.set_health(204);
    until_unhealthy(admin, backend, 0.0).await;
    let (to_a, _) = spread(port, 40).await;
    assert!(to_a > 0, "a is back");

    // Both fail: requests still go to both (a panic threshold of 0 %).
    a.set_health(500);
    b.set_health(500);
    until_unhealthy(admin, backend, 2.0).await;
    let (to_a, to_b) = spread(port, 40).await;
    assert!(to_a > 0 && to_b > 0, "a {to_a}, b {to_b}");

    // A check slower than the interval: never two at once at one endpoint.
    b.set_health(200);
    b.delay_ms.store(300, Ordering::SeqCst);
    let checks = b.checks.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = b.checks.load(Ordering::SeqCst) - checks;
    assert!(
        (3..=8).contains(&during),
        "{during} checks in 2 s of 300 ms answers and 100 ms intervals"
    );
    assert_eq!(b.max_checks_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(a.max_checks_in_flight.load(Ordering::SeqCst), 1);

    let m = metrics(admin).await;
    for result in ["healthy", "unhealthy"] {
        let series =
            format!("pier_proxy_health_checks_total{{backend=\"{backend}\",result=\"{result}\"}}");
        assert!(sample(&m, &series) >= 1.0, "{series}: {m}");
    }
}

#[tokio::test]
async fn tcp_checks_follow_a_listener_that_goes_and_comes_back() {
    let Two {
        a,
        b: _b,
        a_addr,
        port,
        admin,
        _pier,
        _dir,
    } = Two::start(
        "  healthCheck:\n    active: {type: TCP, interval: 100ms, unhealthyThreshold: 1}\n",
    )
    .await;
    let backend = "default/pool:80";

    drop(a);
    until_unhealthy(admin, backend, 1.0).await;
    let (to_a, to_b) = spread(port, 20).await;
    assert_eq!((to_a, to_b), (0, 20));

    let a = Backend::start(a_addr, "a").await;
    until_unhealthy(admin, backend, 0.0).await;
    let (to_a, _) = spread(port, 40).await;
    assert!(to_a > 0);
    assert!(a.requests.load(Ordering::SeqCst) > 0);
    let m = metrics(admin).await;
    let series =
        format!("pier_proxy_health_checks_total{{backend=\"{backend}\",result=\"error\"}}");
    assert!(sample(&m, &series) >= 1.0, "{series}: {m}");
}

#[tokio::test]
async fn grpc_checks_ask_the_standard_health_service() {
    let dir = tempfile::tempdir().unwrap();
    let health = dir.path().join("health");
    std::fs::write(&health, "SERVING").unwrap();
    let server = support::grpc::GrpcServer::plain_with_health("g", &health);
    let (port, admin) = (free_port(), free_port());
    let mut m = format!("{}---\n", gateway(port));
    m += &service_pool(
        "grpc",
        server.addr.port(),
        &[&server.addr.ip().to_string()],
        Some("kubernetes.io/h2c"),
    );
    m += "---\n";
    m += &route("app", "/pier.test.Echo", "grpc");
    m += "---\n";
    m += &route_policy(
        "BackendTrafficPolicy",
        "checks",
        "app",
        "  healthCheck:
    active:
      type: GRPC
      interval: 100ms
      unhealthyThreshold: 1
      grpc: {service: pier.test.Echo}
",
    );
    std::fs::write(dir.path().join("all.yaml"), m).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let backend = "default/grpc:80";
    let healthy =
        format!("pier_proxy_health_checks_total{{backend=\"{backend}\",result=\"healthy\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = metrics(admin).await;
        if sample(&m, &healthy) >= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no SERVING answer: {m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(&health, "NOT_SERVING").unwrap();
    until_unhealthy(admin, backend, 1.0).await;
    std::fs::write(&health, "SERVING").unwrap();
    until_unhealthy(admin, backend, 0.0).await;
}

/// A meshed endpoint is checked over mesh mTLS, with pier's client certificate, like its
/// requests: never in plaintext, although this workload would answer plaintext too.
#[tokio::test]
async fn checks_of_a_meshed_endpoint_go_over_mesh_mtls() {
    use support::mesh::{self as m, MeshPki, PIER_ID, Workload};
    let pki = MeshPki::new();
    let web = Workload::spawn_with(&pki.workload, &pki.client_ca, true).await;
    let port = free_port();
    let routes = format!(
        "{}---\n{}",
        m::route("app", "web", "", "web"),
        "apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: checks, namespace: app}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}]
  healthCheck:
    active: {type: HTTP, interval: 100ms, http: {path: /healthz}}
"
    );
    let pier = m::start_meshed(port, &pki, m::service("app", "web", web.addr), routes).await;
    let checks = || {
        (web.requests().into_iter())
            .filter(|s| s.path == "/healthz")
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while checks().len() < 3 {
        assert!(Instant::now() < deadline, "{:?}", web.requests());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for s in checks() {
        assert!(s.tls, "{s:?}");
        assert_eq!(s.client_uris, [PIER_ID], "{s:?}");
        assert_eq!(s.sni.as_deref(), Some("web.app.svc.cluster.local"));
    }
    assert!(
        web.accepted().iter().all(|a| a.tls),
        "a plaintext connection: {:?}",
        web.accepted()
    );
    pier.shutdown().await;
}

#[tokio::test]
async fn passive_checks_eject_an_endpoint_that_answers_500() {
    let Two {
        a,
        b: _b,
        port,
        _pier,
        _dir,
        ..
    } = Two::start(
        "  healthCheck:\n    passive: {consecutive5XxErrors: 2, baseEjectionTime: 1m}\n",
    )
    .await;
    a.answer.store(500, Ordering::SeqCst);
    let answers = |path: &'static str| async move {
        let mut by_status = std::collections::BTreeMap::new();
        for _ in 0..30 {
            let r = get(&format!("http://127.0.0.1:{port}/{path}"), &[]).await;
            *by_status.entry(r.status.as_u16()).or_insert(0) += 1;
        }
        by_status
    };
    // Without the policy a 500 is the application's answer: a keeps getting requests.
    let plain = answers("plain").await;
    assert!(plain.get(&500).copied().unwrap_or(0) > 2, "{plain:?}");
    // Under it, two 500s in a row eject a for a minute: its requests stop.
    let before = a.requests.load(Ordering::SeqCst);
    let app = answers("app").await;
    assert!(app.get(&500).copied().unwrap_or(0) <= 2, "{app:?}");
    assert!(a.requests.load(Ordering::SeqCst) - before <= 2);
    let app = answers("app").await;
    assert_eq!(app.get(&200), Some(&30), "{app:?}");
}

/// `healthCheck.passive.maxEjectionPercent`: both endpoints answer 500 and one failure
/// ejects. At 50 % one of the two may be out, so the other keeps every request; at 100 % both
/// go out and requests spread over both again (pier's "all out" rule).
#[tokio::test]
async fn max_ejection_percent_keeps_an_endpoint_in() {
    for (pct, both_asked) in [(50, false), (100, true)] {
        let Two {
            a,
            b,
            port,
            _pier,
            _dir,
            ..
        } = Two::start(&format!(
            "  healthCheck:\n    passive: {{consecutive5XxErrors: 1, baseEjectionTime: 1m, \
             maxEjectionPercent: {pct}}}\n"
        ))
        .await;
        a.answer.store(500, Ordering::SeqCst);
        b.answer.store(500, Ordering::SeqCst);
        for _ in 0..6 {
            get(&format!("http://127.0.0.1:{port}/app"), &[]).await;
        }
        let before = (
            a.requests.load(Ordering::SeqCst),
            b.requests.load(Ordering::SeqCst),
        );
        for _ in 0..20 {
            let r = get(&format!("http://127.0.0.1:{port}/app"), &[]).await;
            assert_eq!(r.status, 500, "{r:?}");
        }
        let asked = (
            a.requests.load(Ordering::SeqCst) - before.0,
            b.requests.load(Ordering::SeqCst) - before.1,
        );
        assert_eq!(asked.0 + asked.1, 20);
        assert_eq!(asked.0 > 0 && asked.1 > 0, both_asked, "{pct} %: {asked:?}");
    }
}

/// `http.expectedResponse`: the status is not enough, the body must hold the text too (the
/// backends answer their health path with `health`).
#[tokio::test]
async fn an_expected_response_must_be_in_the_body() {
    let expecting = |text: &str| {
        format!(
            "  healthCheck:
    active:
      type: HTTP
      interval: 100ms
      unhealthyThreshold: 1
      http: {{path: /healthz, expectedResponse: {{type: Text, text: {text}}}}}
"
        )
    };
    let missing = Two::start(&expecting("ready")).await;
    until_unhealthy(missing.admin, "default/pool:80", 2.0).await;
    let healthy = "pier_proxy_health_checks_total{backend=\"default/pool:80\",result=\"healthy\"}";
    let m = metrics(missing.admin).await;
    assert_eq!(sample(&m, healthy), 0.0, "{m}");

    // The text the backends do answer: healthy.
    let found = Two::start(&expecting("heal")).await;
    let admin = found.admin;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sample(&metrics(admin).await, healthy) < 4.0 {
        assert!(Instant::now() < deadline, "no check passed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unhealthy = "pier_proxy_unhealthy_endpoints{backend=\"default/pool:80\"}";
    assert_eq!(sample(&metrics(admin).await, unhealthy), 0.0);
}
