//! `BackendTrafficPolicy` `faultInjection` end to end: `pier run` on manifests; an abort
//! answers its HTTP status on both request paths (HTTP/1.1's fast path, HTTP/2) or its gRPC
//! status as gRPC; a delay holds the request that long and a route without it is not held;
//! a percentage aborts about that share; `/metrics` counts each fault by policy.

mod support;

use std::time::{Duration, Instant};

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

/// `circuitBreaker`: one request in flight to the backend and none waiting; a second request
/// while the first is at the backend gets 503 at once. A route without the policy to the same
/// backend is not limited.
#[tokio::test]
async fn a_policy_circuit_breaker_refuses_what_exceeds_it() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let manifests = format!(
        "{}---\n{}---\n{}---\n{}---\n{}",
        gateway(port),
        service("a", echo.addr),
        route("guarded", "/delay", "a"),
        route("open", "/status", "a"),
        route_policy(
            "BackendTrafficPolicy",
            "breaker",
            "guarded",
            "  circuitBreaker: {maxParallelRequests: 1, maxPendingRequests: 0}\n",
        ),
    );
    std::fs::write(dir.path().join("all.yaml"), &manifests).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
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
