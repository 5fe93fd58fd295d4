//! Error responses: 500 for unusable configuration, 502/503/504 for upstream failures.

use std::time::{Duration, Instant};

use crate::support::client::{get, send};
use crate::support::snap::*;
use crate::support::*;

async fn start(r: std::sync::Arc<pier::model::Rule>) -> (Harness, std::net::SocketAddr) {
    let p = free_port();
    let h = Harness::start(snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], prefix("/"), &r).build()],
    )]))
    .await;
    (h, local(p))
}

#[tokio::test]
async fn a_rule_without_backends_or_weight_is_500() {
    let (h, addr) = start(rule("ns/none").build()).await;
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 500);
    bounded(h.proxy.shutdown(BOUND)).await;

    let a = echo("a").await;
    let (h, addr) = start(
        rule("ns/zero")
            .weighted(0, &backend("a", &[a.addr]))
            .build(),
    )
    .await;
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 500);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_service_without_endpoints_is_503() {
    let (h, addr) = start(rule("ns/r").to(&backend("empty", &[])).build()).await;
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 503);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn refused_connection_is_502_and_ejects_the_endpoint() {
    let healthy = echo("healthy").await;
    let dead = refused_addr();
    let (h, addr) = start(
        rule("ns/r")
            .to(&backend("b", &[dead, healthy.addr]))
            .build(),
    )
    .await;
    // P2C picks the dead endpoint sooner or later (each pick is a coin flip while loads are
    // equal); the odds of 64 misses are 2^-64.
    let mut saw_502 = false;
    for _ in 0..64 {
        let resp = bounded(send(addr, get("x", "/"))).await;
        if resp.status == 502 {
            saw_502 = true;
            break;
        }
        assert_eq!(resp.backend(), "healthy");
    }
    assert!(saw_502, "the refused endpoint was never picked");
    // Ejected: every following request goes to the healthy endpoint.
    for _ in 0..20 {
        let resp = bounded(send(addr, get("x", "/"))).await;
        assert_eq!(resp.status, 200);
    }
    let m = h.metrics_text();
    assert!(
        m.contains(
            r#"pier_proxy_upstream_connect_errors_total{backend="default/b:80",reason="Refused"} 1"#
        ),
        "{m}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn only_refusing_endpoints_give_502() {
    let (h, addr) = start(rule("ns/r").to(&backend("b", &[refused_addr()])).build()).await;
    for _ in 0..3 {
        assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 502);
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn backend_request_timeout_is_504() {
    let a = echo("a").await;
    let r = rule("ns/r")
        .to(&backend("a", &[a.addr]))
        .timeouts(None, Some(Duration::from_millis(200)))
        .build();
    let (h, addr) = start(r).await;
    let started = Instant::now();
    assert_eq!(
        bounded(send(addr, get("x", "/delay/5000"))).await.status,
        504
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(bounded(send(addr, get("x", "/delay/10"))).await.status, 200);
    let m = h.metrics_text();
    assert!(
        m.contains(r#"kind="BackendTimeout",side="Upstream"} 1"#),
        "{m}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn request_timeout_is_504() {
    let a = echo("a").await;
    let r = rule("ns/r")
        .to(&backend("a", &[a.addr]))
        .timeouts(Some(Duration::from_millis(200)), None)
        .build();
    let (h, addr) = start(r).await;
    let started = Instant::now();
    assert_eq!(
        bounded(send(addr, get("x", "/delay/5000"))).await.status,
        504
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let m = h.metrics_text();
    assert!(
        m.contains(r#"kind="RequestTimeout",side="Upstream"} 1"#),
        "{m}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn status_codes_from_the_backend_pass_through() {
    let a = echo("a").await;
    let (h, addr) = start(rule("ns/r").to(&backend("a", &[a.addr])).build()).await;
    assert_eq!(
        bounded(send(addr, get("x", "/status/418"))).await.status,
        418
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// A backend that answers every request with `status` on keep-alive connections.
async fn always(status: &'static str) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(local(0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                loop {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let resp = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
                        if tcp.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Passive outlier detection: an endpoint that answers 503 five times in a row is ejected,
/// and the healthy one takes the traffic (on the fast path and over HTTP/2 alike).
#[tokio::test]
async fn an_endpoint_with_consecutive_gateway_failures_is_ejected() {
    let healthy = echo("healthy").await;
    let sick = always("503 Service Unavailable").await;
    let (h, addr) = start(
        rule("ns/r")
            .to(&backend("b", &[sick, healthy.addr]))
            .build(),
    )
    .await;
    let mut failures = 0;
    for _ in 0..40 {
        if bounded(send(addr, get("x", "/"))).await.status == 503 {
            failures += 1;
        }
    }
    assert!(
        (1..=pier::model::CONSECUTIVE_FAILURES).contains(&failures),
        "the sick endpoint answered {failures} of 40"
    );
    // Ejected now: every request reaches the healthy endpoint.
    for _ in 0..20 {
        assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 200);
        let h2 = bounded(crate::support::client::send_h2(addr, get("x", "/"))).await;
        assert_eq!(h2.status, 200);
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// The outlier thresholds are configurable (`--outlier-consecutive-failures`, or a Service's
/// `pier.dev/outlier-consecutive-failures`): at 1 the first 503 ejects the endpoint; at 0
/// gateway failures never eject it and it keeps its share of the traffic.
#[tokio::test]
async fn the_outlier_threshold_is_configurable_and_zero_turns_ejection_off() {
    let count_503 = |threshold: u32| async move {
        let healthy = echo("healthy").await;
        let sick = always("503 Service Unavailable").await;
        let mut config = config();
        config.limits.outlier.consecutive_failures = threshold;
        let p = free_port();
        let h = Harness::start_with(simple(p, &backend("b", &[sick, healthy.addr])), config).await;
        let addr = local(p);
        let mut failures = 0;
        for _ in 0..40 {
            if bounded(send(addr, get("x", "/"))).await.status == 503 {
                failures += 1;
            }
        }
        bounded(h.proxy.shutdown(BOUND)).await;
        failures
    };
    assert_eq!(count_503(1).await, 1, "one failure ejects at threshold 1");
    let off = count_503(0).await;
    assert!(
        (10..=30).contains(&off),
        "threshold 0: the sick endpoint keeps about half the traffic, got {off} of 40"
    );
}

/// Circuit breaking: a backend with its maximum of requests in flight gets no more; the
/// excess is answered 503 at once, on either request path, and the slots free up as the
/// requests finish.
#[tokio::test]
async fn requests_over_the_backends_maximum_in_flight_get_503_at_once() {
    use crate::support::client::send_h2;
    let a = echo("a").await;
    let mut config = config();
    config.limits.max_requests_per_backend = Some(2);
    let p = free_port();
    let h = Harness::start_with(simple(p, &backend("a", &[a.addr])), config).await;
    for h2 in [false, true] {
        let slow: Vec<_> = (0..2)
            .map(|_| {
                let req = get("x", "/delay/800");
                tokio::spawn(async move {
                    if h2 {
                        send_h2(local(p), req).await
                    } else {
                        send(local(p), req).await
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        let over = if h2 {
            send_h2(local(p), get("x", "/")).await
        } else {
            send(local(p), get("x", "/")).await
        };
        assert_eq!(over.status, 503, "h2: {h2}");
        assert!(started.elapsed() < Duration::from_millis(300), "h2: {h2}");
        for s in slow {
            assert_eq!(bounded(s).await.unwrap().status, 200, "h2: {h2}");
        }
        // Freed: the next request goes through.
        assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 200);
    }
    // The two refused never reached the backend: 2 x (2 slow + 1 after).
    assert_eq!(a.count(), 6);
    let metrics = h.metrics_text();
    assert!(
        metrics.contains(r#"pier_proxy_upstream_overflow_total{backend="default/a:80"} 2"#),
        "{metrics}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// With a queue (`--max-pending-requests-per-backend`), a request over the maximum waits for
/// a slot instead of a 503, the oldest first; one over the queue's room is refused at once, and
/// one that waits longer than the connect timeout gets a 503 without reaching the backend.
#[tokio::test]
async fn requests_over_the_maximum_wait_in_the_backends_queue() {
    let a = echo("a").await;
    let mut config = config();
    config.limits.max_requests_per_backend = Some(1);
    config.limits.max_pending_requests_per_backend = 1;
    config.connect_timeout = Duration::from_millis(700);
    let p = free_port();
    let h = Harness::start_with(simple(p, &backend("a", &[a.addr])), config).await;
    let t0 = Instant::now();
    let slow = tokio::spawn(send(local(p), get("x", "/delay/400")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Waits for the slow one's slot.
    let queued = tokio::spawn(send(local(p), get("x", "/")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The queue is full: refused at once.
    let started = Instant::now();
    assert_eq!(send(local(p), get("x", "/")).await.status, 503);
    assert!(started.elapsed() < Duration::from_millis(200));
    assert_eq!(bounded(slow).await.unwrap().status, 200);
    assert_eq!(bounded(queued).await.unwrap().status, 200);
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "the queued one waited"
    );
    assert_eq!(a.count(), 2);

    // Waiting longer than the connect timeout: 503, and the backend never sees it.
    let slow = tokio::spawn(send(local(p), get("x", "/delay/1500")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    assert_eq!(send(local(p), get("x", "/")).await.status, 503);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(600) && waited < Duration::from_millis(1200),
        "{waited:?}"
    );
    assert_eq!(bounded(slow).await.unwrap().status, 200);
    assert_eq!(a.count(), 3);
    let metrics = h.metrics_text();
    assert!(
        metrics.contains(r#"pier_proxy_upstream_overflow_total{backend="default/a:80"} 2"#),
        "{metrics}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}
