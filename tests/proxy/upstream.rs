//! The upstream pool over plaintext: original Host to HTTP/2 backends, HTTP/1.1 keep-alive
//! reuse, HTTP/2 multiplexing.

use http::Version;
use pier::model::AppProtocol;

use crate::support::client::{get, send};
use crate::support::snap::*;
use crate::support::*;

#[tokio::test]
async fn h2c_backend_sees_the_original_host_as_authority() {
    let a = echo("a").await;
    let p = free_port();
    let b = backend_with("a", AppProtocol::H2c, &[a.addr]);
    let h = Harness::start(simple(p, &b)).await;
    let seen = bounded(send(local(p), get("grpc.example.com:8443", "/svc/M?x=1")))
        .await
        .echo();
    assert_eq!(seen.protocol, "HTTP/2.0");
    assert_eq!(seen.authority.as_deref(), Some("grpc.example.com:8443"));
    assert_eq!(seen.host, "grpc.example.com:8443");
    assert!(
        !seen.headers.contains_key("host"),
        "the Host moved into :authority: {:?}",
        seen.headers
    );
    assert_eq!(seen.path, "/svc/M");
    assert_eq!(seen.query.as_deref(), Some("x=1"));
    assert_eq!(seen.headers["x-forwarded-host"], ["grpc.example.com:8443"]);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn http1_backend_gets_origin_form_and_the_original_host() {
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("a", &[a.addr]))).await;
    let seen = bounded(send(local(p), get("www.example.com", "/x?y=1")))
        .await
        .echo();
    assert_eq!(seen.protocol, "HTTP/1.1");
    assert_eq!(seen.host, "www.example.com");
    assert_eq!(seen.authority, None, "origin-form, no absolute URI");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_reuse_one_keepalive_connection() {
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("a", &[a.addr]))).await;
    for i in 0..10 {
        // A fresh client connection each time: only the upstream side is pooled.
        let resp = bounded(send(local(p), get("x", &format!("/{i}")))).await;
        assert_eq!(resp.status, 200);
    }
    assert_eq!(a.count(), 10);
    assert_eq!(
        a.connections(),
        1,
        "every request reused the first connection"
    );
    let m = h.metrics_text();
    assert!(
        m.contains(
            r#"pier_proxy_upstream_connections_opened_total{protocol="http1",tls="plain"} 1"#
        ),
        "{m}"
    );
    assert!(m.contains("pier_proxy_upstream_idle_connections 1"), "{m}");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_http1_requests_open_connections_and_pool_them() {
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("a", &[a.addr]))).await;
    let batch =
        || futures::future::join_all((0..4).map(|_| send(local(p), get("x", "/delay/100"))));
    for resp in bounded(batch()).await {
        assert_eq!(resp.status, 200);
    }
    let opened = a.connections();
    assert!((2..=4).contains(&opened), "{opened}");
    // The second batch finds them idle.
    for resp in bounded(batch()).await {
        assert_eq!(resp.status, 200);
    }
    assert!(a.connections() <= 4, "{}", a.connections());
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn h2c_requests_are_multiplexed_over_one_connection() {
    let a = echo("a").await;
    let p = free_port();
    let b = backend_with("a", AppProtocol::H2c, &[a.addr]);
    let h = Harness::start(simple(p, &b)).await;
    let requests = (0..16).map(|i| send(local(p), get("x", &format!("/delay/{}", 100 + i))));
    let responses = bounded(futures::future::join_all(requests)).await;
    for resp in &responses {
        assert_eq!(resp.status, 200);
        assert_eq!(resp.echo().protocol, "HTTP/2.0");
    }
    assert_eq!(
        a.connections(),
        1,
        "16 concurrent streams on one connection"
    );
    let m = h.metrics_text();
    assert!(
        m.contains(r#"pier_proxy_upstream_open_connections{protocol="http2"} 1"#),
        "{m}"
    );
    assert_eq!(responses[0].version, Version::HTTP_11);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_closed_idle_connection_is_replaced() {
    let p = free_port();
    let a = echo("a").await;
    let addr = a.addr;
    let h = Harness::start(simple(p, &backend("a", &[addr]))).await;
    assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 200);
    // The backend restarts on the same address: the pooled connection is dead.
    drop(a);
    let closed = r#"pier_proxy_upstream_open_connections{protocol="http1"} 0"#;
    crate::support::web::eventually(BOUND, || async { h.metrics_text().contains(closed) }).await;
    let _a = bounded(pier::echo::spawn(addr, "a2")).await.unwrap();
    let resp = bounded(send(local(p), get("x", "/"))).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.backend(), "a2");
    bounded(h.proxy.shutdown(BOUND)).await;
}
