//! `BackendTrafficPolicy` `faultInjection` end to end: `pier run` on manifests; an abort
//! answers its HTTP status on both request paths (HTTP/1.1's fast path, HTTP/2) or its gRPC
//! status as gRPC; a delay holds the request that long and a route without it is not held;
//! a percentage aborts about that share; `/metrics` counts each fault by policy. The
//! circuit breaker's bounds (`maxParallelRequests`, `maxConnections`, `maxParallelRetries`),
//! request and connect timeouts.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use support::cluster::sample;
use support::web::*;
use support::*;

fn policy(name: &str, route: &str, faults: &str) -> String {
    route_policy(
        "BackendTrafficPolicy",
        name,
        route,
        &format!("  faultInjection:\n{faults}"),
    )
}

#[tokio::test]
async fn aborts_and_delays_are_injected_as_configured() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let mut manifests = format!("{}---\n{}---\n", gateway(port), service("a", echo.addr));
    for name in ["abort", "grpc-abort", "delay", "half", "plain"] {
        manifests.push_str(&route(name, &format!("/{name}"), "a"));
        manifests.push_str("---\n");
    }
    manifests.push_str(&policy("abort", "abort", "    abort: {httpStatus: 503}\n"));
    manifests.push_str(&policy(
        "grpc-abort",
        "grpc-abort",
        "    abort: {grpcStatus: 14}\n",
    ));
    manifests.push_str(&policy(
        "delay",
        "delay",
        "    delay: {fixedDelay: 400ms}\n",
    ));
    manifests.push_str(&policy(
        "half",
        "half",
        "    abort: {httpStatus: 418, percentage: 50}\n",
    ));
    std::fs::write(dir.path().join("all.yaml"), &manifests).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let base = format!("http://127.0.0.1:{port}");

    // An HTTP abort: the status and Envoy's text, over HTTP/1.1 (the fast path) and HTTP/2;
    // the backend never sees the request.
    let before = echo.requests().len();
    let r = get(&format!("{base}/abort"), &[]).await;
    assert_eq!(
        (r.status.as_u16(), r.text().as_str()),
        (503, "fault filter abort\n")
    );
    let r = get_h2(port, "/abort", &[]).await;
    assert_eq!(r.status, 503);
    // A gRPC call to the same route gets the HTTP status too (as Envoy's fault filter).
    let r = get_h2(port, "/abort", &[("content-type", "application/grpc")]).await;
    assert_eq!(r.status, 503);
    // A gRPC abort: Trailers-Only, HTTP 200, the code.
    let r = get_h2(port, "/grpc-abort", &[("content-type", "application/grpc")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["grpc-status"], "14");
    assert_eq!(r.headers["grpc-message"], "fault filter abort");
    assert_eq!(
        echo.requests().len(),
        before,
        "aborted requests reach no backend"
    );

    // A delay holds the request on both paths; a route without one is not held.
    for (name, took) in [
        ("h1", {
            let t = Instant::now();
            assert_eq!(get(&format!("{base}/delay"), &[]).await.status, 200);
            t.elapsed()
        }),
        ("h2", {
            let t = Instant::now();
            assert_eq!(get_h2(port, "/delay", &[]).await.status, 200);
            t.elapsed()
        }),
    ] {
        assert!(took >= Duration::from_millis(400), "{name}: {took:?}");
        assert!(took < Duration::from_secs(3), "{name}: {took:?}");
    }
    let t = Instant::now();
    assert_eq!(get(&format!("{base}/plain"), &[]).await.status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );

    // 50 %: of 400 requests, about half are aborted (binomial: 200 ± 10; ±60 is 6 σ).
    let mut aborted = 0;
    for _ in 0..400 {
        match get(&format!("{base}/half"), &[]).await.status.as_u16() {
            418 => aborted += 1,
            200 => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert!((140..=260).contains(&aborted), "{aborted} of 400 aborted");

    let m = get(&format!("http://127.0.0.1:{admin}/metrics"), &[])
        .await
        .text();
    let count = |policy: &str, fault: &str| {
        sample(
            &m,
            &format!(
                "pier_proxy_faults_injected_total{{policy=\"default/{policy}\",fault=\"{fault}\"}}"
            ),
        )
    };
    assert_eq!(count("abort", "abort"), 3.0, "{m}");
    assert_eq!(count("grpc-abort", "abort"), 1.0);
    assert_eq!(count("delay", "delay"), 2.0);
    assert_eq!(count("half", "abort"), f64::from(aborted));
}

/// `timeout.http.requestTimeout`: a backend slower than the policy's timeout gets the client a
/// 504 at the timeout, on both request paths.
#[tokio::test]
async fn a_policy_request_timeout_answers_504() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let manifests = format!(
        "{}---\n{}---\n{}---
apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {{name: quick, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  timeout:
    http: {{requestTimeout: 300ms}}
",
        gateway(port),
        service("a", echo.addr),
        route("slow", "/delay", "a"),
    );
    std::fs::write(dir.path().join("all.yaml"), &manifests).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    for (name, r, took) in [
        ("h1", {
            let t = Instant::now();
            (get(&format!("{base}/delay/2000"), &[]).await, t.elapsed())
        }),
        ("h2", {
            let t = Instant::now();
            (get_h2(port, "/delay/2000", &[]).await, t.elapsed())
        }),
    ]
    .map(|(n, (r, t))| (n, r, t))
    {
        assert_eq!(r.status, 504, "{name}");
        assert!(took >= Duration::from_millis(300), "{name}: {took:?}");
        assert!(took < Duration::from_millis(1500), "{name}: {took:?}");
    }
    // Within the timeout: answered.
    assert_eq!(get(&format!("{base}/delay/10"), &[]).await.status, 200);
}

/// `timeout.tcp.connectTimeout`: a meshed endpoint that never answers the TLS handshake fails
/// the request at the policy's connect timeout (300 ms), not pier's (2 s); a route without the
/// policy to the same endpoint waits pier's.
#[tokio::test]
async fn a_policy_connect_timeout_bounds_the_connection_and_its_handshake() {
    use support::mesh::{self as m, MeshPki};
    let pki = MeshPki::new();
    let silent = pier::echo::spawn_recording(local(0)).await.unwrap();
    let port = free_port();
    let routes = format!(
        "{}---\n{}---\n{}",
        m::route("app", "quick", "", "silent"),
        m::route("app", "patient", "", "silent"),
        "apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: quick, namespace: app}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: quick}]
  timeout:
    tcp: {connectTimeout: 300ms}
"
    );
    let pier = m::start_meshed(port, &pki, m::service("app", "silent", silent.addr), routes).await;
    let t = Instant::now();
    let r = pier.get("quick.example").await;
    let quick = t.elapsed();
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        quick >= Duration::from_millis(300) && quick < Duration::from_millis(1500),
        "{quick:?}"
    );
    let t = Instant::now();
    let r = pier.get("patient.example").await;
    let patient = t.elapsed();
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(patient >= Duration::from_millis(1900), "{patient:?}");
    pier.shutdown().await;
}

/// pier serving a Gateway with two routes to one Service (`name` at `addr`): the first route
/// under the BackendTrafficPolicy `policy` (`name`, spec lines), the second without.
struct TwoRoutes {
    port: u16,
    _pier: Child,
    _dir: tempfile::TempDir,
}

impl TwoRoutes {
    async fn start(
        (name, addr): (&str, std::net::SocketAddr),
        routes: [(&str, &str); 2],
        (policy, spec): (&str, &str),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (port, admin) = (free_port(), free_port());
        let mut manifests = format!("{}---\n{}---\n", gateway(port), service(name, addr));
        for (route_name, prefix) in routes {
            manifests += &route(route_name, prefix, name);
            manifests += "---\n";
        }
        manifests += &route_policy("BackendTrafficPolicy", policy, routes[0].0, spec);
        std::fs::write(dir.path().join("all.yaml"), &manifests).unwrap();
        let pier = start_pier(dir.path(), admin, &[], &[]).await;
        Self {
            port,
            _pier: pier,
            _dir: dir,
        }
    }
}

/// `circuitBreaker`: one request in flight to the backend and none waiting; a second request
/// while the first is at the backend gets 503 at once. A route without the policy to the same
/// backend is not limited.
#[tokio::test]
async fn a_policy_circuit_breaker_refuses_what_exceeds_it() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let two = TwoRoutes::start(
        ("a", echo.addr),
        [("guarded", "/delay"), ("open", "/status")],
        (
            "breaker",
            "  circuitBreaker: {maxParallelRequests: 1, maxPendingRequests: 0}\n",
        ),
    )
    .await;
    let port = two.port;
    let base = format!("http://127.0.0.1:{port}");
    let slow = tokio::spawn({
        let url = format!("{base}/delay/1000");
        async move { get(&url, &[]).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let refused = get(&format!("{base}/delay/0"), &[]).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // The other route shares the backend's count but not the policy's maximum.
    assert_eq!(get(&format!("{base}/status/200"), &[]).await.status, 200);
    assert_eq!(slow.await.unwrap().status, 200);
    assert_eq!(get(&format!("{base}/delay/0"), &[]).await.status, 200);
}

/// A backend that answers `/fail/<ms>` with 500 and `/wait/<ms>` with 200 after that many
/// milliseconds, and counts requests, the most in progress at once, and connections open.
struct Counting {
    addr: std::net::SocketAddr,
    requests: Arc<AtomicUsize>,
    most_busy: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Counting {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let busy = Arc::new(AtomicUsize::new(0));
        let most_busy = Arc::new(AtomicUsize::new(0));
        let state = (requests.clone(), open.clone(), busy, most_busy.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (requests, open, busy, most_busy) = state.clone();
                open.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (requests, busy, most_busy) =
                            (requests.clone(), busy.clone(), most_busy.clone());
                        async move {
                            requests.fetch_add(1, Ordering::SeqCst);
                            let now = busy.fetch_add(1, Ordering::SeqCst) + 1;
                            most_busy.fetch_max(now, Ordering::SeqCst);
                            let path = req.uri().path().to_string();
                            let (status, ms) = match path.rsplit_once('/') {
                                Some(("/fail", ms)) => (500, ms.parse().unwrap_or(0)),
                                Some((_, ms)) => (200, ms.parse().unwrap_or(0)),
                                None => (200, 0),
                            };
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            busy.fetch_sub(1, Ordering::SeqCst);
                            let resp = http::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from_static(b"counted\n")));
                            Ok::<_, std::convert::Infallible>(resp.unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Self {
            addr,
            requests,
            most_busy,
            open,
            task,
        }
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `circuitBreaker.maxConnections`: 12 requests at once (6 over HTTP/1.1, pier's fast path;
/// 6 over HTTP/2, hyper's) through a policy of 2 connections with room to wait: all are
/// answered, and the backend never has more than 2 requests at once (one per HTTP/1.1
/// connection: it never has more than 2 of pier's connections in use; counting them open at
/// the backend would count a closed one until it reads the close). Without the policy the
/// same burst has more (the test fails if the bound is not applied).
#[tokio::test]
async fn a_policy_bounds_the_connections_to_a_backend() {
    let backend = Counting::start().await;
    let two = TwoRoutes::start(
        ("counted", backend.addr),
        [("bounded", "/wait"), ("free", "/free")],
        (
            "connections",
            "  circuitBreaker: {maxConnections: 2, maxPendingRequests: 100}\n",
        ),
    )
    .await;
    let port = two.port;
    let burst = |prefix: &'static str| async move {
        let mut tasks = Vec::new();
        for i in 0..12 {
            let url = format!("http://127.0.0.1:{port}{prefix}/200");
            tasks.push(tokio::spawn(async move {
                if i % 2 == 0 {
                    get(&url, &[]).await
                } else {
                    get_h2(port, &format!("{prefix}/200"), &[]).await
                }
            }));
        }
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap().status.as_u16());
        }
        statuses
    };
    let statuses = burst("/wait").await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert!(
        backend.most_busy.load(Ordering::SeqCst) <= 2,
        "{} requests at once",
        backend.most_busy.load(Ordering::SeqCst)
    );
    assert_eq!(backend.requests.load(Ordering::SeqCst), 12);
    // The unbounded route to the same backend opens what its burst needs.
    let statuses = burst("/free").await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert!(backend.most_busy.load(Ordering::SeqCst) > 2);
    assert!(
        backend.open.load(Ordering::SeqCst) >= 1,
        "pooled connections stay open"
    );
}

/// `circuitBreaker.maxParallelRetries`: a rule retrying 500s up to 3 times; two requests at
/// once to a backend that fails after 300 ms. With one retry in flight allowed, the first
/// request to fail retries (three times) and the second answers its first 500: 2 + 3
/// requests reach the backend, against 2 + 2 × 3 without the bound. With 0, none retries.
/// A Gateway on `port` and HTTPRoute `retried`: `/fail` to `backend` (Service `counted`),
/// retrying a 500 three times.
fn retried_route(port: u16, backend: &Counting) -> String {
    format!(
        "{}---\n{}---\n{}",
        gateway(port),
        service("counted", backend.addr),
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: retried, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /fail}}]
      backendRefs: [{name: counted, port: 80}]
      retry: {codes: [500], attempts: 3}
---
"
    )
}

#[tokio::test]
async fn a_policy_bounds_the_retries_in_flight() {
    for (bound, want) in [(Some(1), 5), (Some(0), 2), (None, 8)] {
        let backend = Counting::start().await;
        let dir = tempfile::tempdir().unwrap();
        let (port, admin) = (free_port(), free_port());
        let mut manifests = retried_route(port, &backend);
        if let Some(n) = bound {
            manifests += &route_policy(
                "BackendTrafficPolicy",
                "retries",
                "retried",
                &format!("  circuitBreaker: {{maxParallelRetries: {n}}}\n"),
            );
        }
        std::fs::write(dir.path().join("all.yaml"), &manifests).unwrap();
        let _pier = start_pier(dir.path(), admin, &[], &[]).await;
        let url = format!("http://127.0.0.1:{port}/fail/300");
        let (a, b) = tokio::join!(get(&url, &[]), get(&url, &[]));
        assert_eq!((a.status.as_u16(), b.status.as_u16()), (500, 500));
        assert_eq!(
            backend.requests.load(Ordering::SeqCst),
            want,
            "maxParallelRetries {bound:?}"
        );
    }
}

/// Gateway API's XBackendTrafficPolicy (v1.7): a Service's retryConstraint replaces pier's
/// budget, and once it is spent the client gets 503 (the API's MUST) instead of the failed
/// attempt's answer; a Service without one keeps pier's budget and the last answer.
#[tokio::test]
async fn an_x_backend_traffic_policy_budget_answers_503_once_spent() {
    for constrained in [true, false] {
        let backend = Counting::start().await;
        let dir = tempfile::tempdir().unwrap();
        let (port, admin) = (free_port(), free_port());
        let mut manifests = retried_route(port, &backend);
        if constrained {
            // No share of requests, one retry an hour.
            manifests += "apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: budget, namespace: default}
spec:
  targetRefs: [{group: '', kind: Service, name: counted}]
  retryConstraint:
    budget: {percent: 0, interval: 10s}
    minRetryRate: {count: 1, interval: 1h}
";
        }
        std::fs::write(dir.path().join("all.yaml"), &manifests).unwrap();
        let _pier = start_pier(dir.path(), admin, &[], &[]).await;
        let url = format!("http://127.0.0.1:{port}/fail/0");
        let first = get(&url, &[]).await.status.as_u16();
        let second = get(&url, &[]).await.status.as_u16();
        let sent = backend.requests.load(Ordering::SeqCst);
        if constrained {
            // The first request: its attempt, the one retry the minimum allows, then 503; the
            // second: its attempt, then 503 at once.
            assert_eq!((first, second, sent), (503, 503, 3));
            let status = get(&format!("http://127.0.0.1:{admin}/status"), &[])
                .await
                .text();
            assert!(status.contains("XBackendTrafficPolicy"), "{status}");
            assert!(status.contains("Policy is accepted"), "{status}");
        } else {
            // pier's budget (10 retries a second at least): every attempt, the last answer.
            assert_eq!((first, second, sent), (500, 500, 8));
        }
    }
}

/// `curl` (the real client) sending `size` bytes to `url` with `args` (how: a declared length,
/// chunked, HTTP/2 without a length); the status it got.
async fn upload(url: String, size: usize, args: &'static [&'static str]) -> u16 {
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "10",
            ])
            .args(args)
            .arg(&url)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("curl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&vec![b'x'; size])
            .unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
    })
    .await
    .unwrap()
}

/// `requestBuffer`: bodies up to the limit (1Ki) reach the backend whole, with their length
/// (a chunked one too); a longer one is answered 413 and nothing reaches the backend, whether
/// its length is declared (HTTP/1.1's fast path), chunked (hyper's path) or unknown
/// (HTTP/2). A route without the policy streams a long chunked body as it comes.
#[tokio::test]
async fn a_policy_request_buffer_sends_whole_bodies_and_refuses_longer_ones() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let two = TwoRoutes::start(
        ("a", echo.addr),
        [("buffered", "/buffered"), ("streamed", "/streamed")],
        ("buffer", "  requestBuffer: {limit: 1Ki}\n"),
    )
    .await;
    let port = two.port;
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    const DECLARED: &[&str] = &["--data-binary", "@-"];
    const CHUNKED: &[&str] = &["-H", "transfer-encoding: chunked", "--data-binary", "@-"];
    const H2_UNKNOWN: &[&str] = &["--http2-prior-knowledge", "-T", "-", "-X", "POST"];
    for how in [DECLARED, CHUNKED, H2_UNKNOWN] {
        let before = echo.requests().len();
        assert_eq!(
            upload(url("/buffered/long"), 1025, how).await,
            413,
            "{how:?}"
        );
        assert_eq!(
            echo.requests().len(),
            before,
            "{how:?}: nothing reaches the backend"
        );
        assert_eq!(
            upload(url("/buffered/short"), 1024, how).await,
            200,
            "{how:?}"
        );
        let seen = echo.requests().last().cloned().unwrap();
        assert_eq!(seen.body_bytes, 1024, "{how:?}");
        assert_eq!(
            seen.headers.get("content-length").map(|v| v[0].as_str()),
            Some("1024"),
            "{how:?}: sent whole, with its length: {seen:?}"
        );
        assert!(!seen.headers.contains_key("transfer-encoding"), "{seen:?}");
    }
    assert_eq!(upload(url("/streamed"), 100_000, CHUNKED).await, 200);
    let seen = echo.requests().last().cloned().unwrap();
    assert_eq!(seen.body_bytes, 100_000);
    assert!(
        seen.headers.contains_key("transfer-encoding"),
        "streamed: {seen:?}"
    );
}
