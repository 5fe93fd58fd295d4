//! HTTPRoute retries (GEP-1731) against scripted backends that count every attempt they get:
//! listed codes, connection failures, resets (idempotent methods) and backend timeouts are
//! retried up to `attempts` with `backoff` between; unlisted codes, resets after a POST, large
//! or streamed bodies and upgrades are not; the per-backend budget stops retries and leaves the last answer; `timeouts.request`
//! bounds the whole; metrics count retries sent and refused.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{Full, StreamBody};
use hyper::body::Frame;
use pier::model::{Backend, Rule};
use pier::proxy::{ProxyConfig, RetryBudgetConfig};
use tokio::net::TcpStream;

use crate::support::client::{collect, get, send, send_h2};
use crate::support::flaky::{self, Answer};
use crate::support::raw::Client;
use crate::support::snap::*;
use crate::support::*;

async fn serve(r: Arc<Rule>) -> (Harness, SocketAddr) {
    serve_with(r, config()).await
}

async fn serve_with(r: Arc<Rule>, config: ProxyConfig) -> (Harness, SocketAddr) {
    let p = free_port();
    let h = Harness::start_with(
        snapshot(vec![port(
            p,
            vec![listener("http", None).route(&[], prefix("/"), &r).build()],
        )]),
        config,
    )
    .await;
    (h, local(p))
}

fn retrying(b: &Arc<Backend>, codes: &[u16], attempts: u32) -> Arc<Rule> {
    rule("ns/r")
        .to(b)
        .retry(codes, attempts, Duration::ZERO)
        .build()
}

fn post(path: &str, body: Vec<u8>) -> Request<Full<Bytes>> {
    Request::post(path)
        .header(http::header::HOST, "x")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn metric(h: &Harness, line: &str) -> bool {
    h.metrics_text().lines().any(|l| l == line)
}

fn assert_metric(h: &Harness, line: &str) {
    assert!(metric(h, line), "{line} missing in\n{}", h.metrics_text());
}

#[tokio::test]
async fn a_listed_status_is_retried_until_the_backend_succeeds() {
    let b = flaky::failing(2, Answer::Status(500)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[500], 3)).await;
    let resp = bounded(send(addr, get("x", "/a"))).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.text(), "ok 3");
    assert_eq!(b.count(), 3, "two failures, then the success");
    assert_metric(
        &h,
        r#"pier_proxy_upstream_retries_total{backend="default/b:80",reason="status"} 2"#,
    );
    // The request counts once, with the answer the client got.
    assert!(
        h.metrics_text().contains(
            r#"pier_proxy_requests_total{gateway="default/gw",listener="http",route="ns/r",backend="default/b:80",status="2xx",tls="plain"} 1"#
        ),
        "{}",
        h.metrics_text()
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn attempts_bound_the_retries_and_the_last_response_is_the_answer() {
    let b = flaky::always(Answer::StatusWithBody(503, 7)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[500, 503], 2)).await;
    let resp = bounded(send(addr, get("x", "/"))).await;
    assert_eq!(resp.status, 503);
    assert_eq!(
        resp.headers["x-attempt"], "3",
        "the third attempt's own response"
    );
    assert_eq!(resp.body.len(), 7);
    assert_eq!(b.count(), 3, "the first attempt and two retries");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn an_unlisted_status_is_not_retried() {
    let b = flaky::failing(1, Answer::Status(502)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[500], 3)).await;
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 502);
    assert_eq!(b.count(), 1);
    // Nor is a success.
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 200);
    assert_eq!(b.count(), 2);
    assert!(
        !h.metrics_text()
            .contains("pier_proxy_upstream_retries_total{")
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn zero_attempts_or_no_policy_means_one_attempt() {
    let b = flaky::failing(1, Answer::Status(500)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[500], 0)).await;
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 500);
    assert_eq!(b.count(), 1);
    bounded(h.proxy.shutdown(BOUND)).await;

    let b = flaky::failing(1, Answer::Status(500)).await;
    let (h, addr) = serve(rule("ns/r").to(&backend("b", &[b.addr])).build()).await;
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 500);
    assert_eq!(b.count(), 1);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_reset_before_the_response_is_retried_without_listed_codes() {
    let b = flaky::failing(1, Answer::Reset).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[], 1)).await;
    let resp = bounded(send(addr, get("x", "/"))).await;
    assert_eq!(resp.status, 200);
    assert_eq!(b.count(), 2);
    assert_metric(
        &h,
        r#"pier_proxy_upstream_retries_total{backend="default/b:80",reason="reset"} 1"#,
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_reset_after_a_post_was_sent_is_not_retried() {
    // The backend may have processed it (Gateway API v1.7: SHOULD NOT retry): one attempt,
    // the reset is the answer (502).
    let b = flaky::failing(1, Answer::Reset).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[], 1)).await;
    let resp = bounded(send(addr, post("/pay", b"once".to_vec()))).await;
    assert_eq!(resp.status, 502);
    assert_eq!(b.count(), 1);
    assert!(!metric(
        &h,
        r#"pier_proxy_upstream_retries_total{backend="default/b:80",reason="reset"}"#
    ));
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_refused_connection_is_retried_on_another_endpoint() {
    let good = flaky::always(Answer::Ok).await;
    let dead = refused_addr();
    let b = backend("b", &[dead, good.addr]);
    let (h, addr) = serve(retrying(&b, &[], 1)).await;
    // Whichever endpoint a request starts on, it ends on the good one: a retry never picks
    // the endpoint that just failed when there is another.
    for _ in 0..20 {
        assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 200);
    }
    assert_eq!(good.count(), 20);
    bounded(h.proxy.shutdown(BOUND)).await;

    // With only dead endpoints every attempt fails: the last error is the answer.
    let (h, addr) = serve(retrying(&backend("d", &[refused_addr()]), &[], 2)).await;
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 502);
    assert_metric(
        &h,
        r#"pier_proxy_upstream_retries_total{backend="default/d:80",reason="connect"} 2"#,
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_retry_goes_to_another_endpoint_than_the_one_that_failed() {
    // A 500 does not eject an endpoint, so requests keep starting on the bad one half the
    // time; each of those must be retried on the good one (one retry allowed, and a budget
    // that allows one retry per request).
    let bad = flaky::always(Answer::Status(500)).await;
    let good = flaky::always(Answer::Ok).await;
    let config = ProxyConfig {
        retry_budget: RetryBudgetConfig {
            percent: 100,
            ..RetryBudgetConfig::default()
        },
        ..config()
    };
    let r = retrying(&backend("b", &[bad.addr, good.addr]), &[500], 1);
    let (h, addr) = serve_with(r, config).await;
    for _ in 0..40 {
        assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 200);
    }
    assert_eq!(good.count(), 40);
    assert!(bad.count() > 0, "P2C never started on the bad endpoint");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_backend_request_timeout_is_retried() {
    let b = flaky::failing(1, Answer::Stall).await;
    let r = rule("ns/r")
        .to(&backend("b", &[b.addr]))
        .timeouts(None, Some(Duration::from_millis(200)))
        .retry(&[], 1, Duration::ZERO)
        .build();
    let (h, addr) = serve(r).await;
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 200);
    assert_eq!(b.count(), 2);
    assert_metric(
        &h,
        r#"pier_proxy_upstream_retries_total{backend="default/b:80",reason="timeout"} 1"#,
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn backoff_is_waited_before_each_retry() {
    let backoff = Duration::from_millis(150);
    let b = flaky::failing(2, Answer::Status(503)).await;
    let r = rule("ns/r")
        .to(&backend("b", &[b.addr]))
        .retry(&[503], 2, backoff)
        .build();
    let (h, addr) = serve(r).await;
    let started = Instant::now();
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 200);
    assert!(started.elapsed() >= backoff * 2);
    let seen = b.seen();
    assert_eq!(seen.len(), 3);
    for pair in seen.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= backoff,
            "attempts {gap:?} apart, backoff {backoff:?}"
        );
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn the_request_timeout_bounds_every_attempt_and_backoff() {
    let b = flaky::always(Answer::Status(500)).await;
    let r = rule("ns/r")
        .to(&backend("b", &[b.addr]))
        .timeouts(Some(Duration::from_millis(300)), None)
        .retry(&[500], 20, Duration::from_millis(100))
        .build();
    let (h, addr) = serve(r).await;
    let started = Instant::now();
    assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 504);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        b.count() < 21,
        "the timeout ended the retries: {}",
        b.count()
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_small_body_is_sent_again_with_every_attempt() {
    let b = flaky::failing(2, Answer::Status(500)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[500], 2)).await;
    let body: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let resp = bounded(send(addr, post("/upload", body.clone()))).await;
    assert_eq!(resp.status, 200);
    let seen = b.seen();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/upload"));
        assert_eq!(s.body, body, "every attempt carries the whole body");
    }
    bounded(h.proxy.shutdown(BOUND)).await;

    // The largest body that is still buffered.
    let b = flaky::failing(1, Answer::Status(500)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[500], 1)).await;
    let body = vec![7u8; pier::proxy::MAX_RETRY_BODY as usize];
    let resp = bounded(send(addr, post("/", body.clone()))).await;
    assert_eq!(resp.status, 200);
    let seen = b.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.body == body));
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_large_or_streamed_body_is_sent_once_and_not_retried() {
    let b = flaky::always(Answer::Status(500)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[500], 3)).await;
    let body = vec![1u8; pier::proxy::MAX_RETRY_BODY as usize + 1];
    let resp = bounded(send(addr, post("/", body.clone()))).await;
    assert_eq!(resp.status, 500);
    let seen = b.seen();
    assert_eq!(seen.len(), 1, "over the bound: streamed, not retried");
    assert_eq!(seen[0].body, body);

    // A chunked body (no declared length) streams too.
    let chunks = futures::stream::iter(
        [b"abc", b"def"]
            .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(c)))),
    );
    let req = Request::post("/chunked")
        .header(http::header::HOST, "x")
        .body(StreamBody::new(chunks))
        .unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = bounded(async { collect(tx.send_request(req).await.unwrap()).await }).await;
    assert_eq!(resp.status, 500);
    let seen = b.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].body, b"abcdef");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn an_upgrade_is_never_retried() {
    let b = flaky::always(Answer::Status(500)).await;
    let p = free_port();
    let r = retrying(&backend("b", &[b.addr]), &[500], 3);
    let h = Harness::start(snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], prefix("/"), &r).build()],
    )]))
    .await;
    let mut c = Client::connect(p).await;
    c.write(
        b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\
          sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await;
    let resp = bounded(c.response(false)).await;
    assert_eq!(resp.status, 500);
    assert_eq!(b.count(), 1);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn http2_clients_are_retried_too() {
    let b = flaky::failing(1, Answer::Status(500)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[500], 1)).await;
    let req = Request::get(format!("http://x:{}/h2", addr.port()))
        .body(Full::default())
        .unwrap();
    let resp = bounded(send_h2(addr, req)).await;
    assert_eq!(resp.status, 200);
    assert_eq!(b.count(), 2);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn keep_alive_connections_on_the_fast_path_hand_retry_rules_to_hyper() {
    // One client connection: a request to a plain rule (fast path), then one to a retrying
    // rule (handed to hyper, retried), then the plain one again on the same connection.
    let plain = flaky::always(Answer::Ok).await;
    let flaky = flaky::failing(1, Answer::Status(503)).await;
    let p = free_port();
    let r_plain = rule("ns/plain")
        .to(&backend("plain", &[plain.addr]))
        .build();
    let r_retry = retrying(&backend("flaky", &[flaky.addr]), &[503], 1);
    let h = Harness::start(snapshot(vec![port(
        p,
        vec![
            listener("http", None)
                .route(&[], prefix("/retry"), &r_retry)
                .route(&[], prefix("/"), &r_plain)
                .build(),
        ],
    )]))
    .await;
    let mut c = Client::connect(p).await;
    for path in ["/", "/retry", "/"] {
        c.write(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await;
        let resp = bounded(c.response(false)).await;
        assert_eq!(resp.status, 200, "{path}");
    }
    assert_eq!((plain.count(), flaky.count()), (2, 2));
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_spent_budget_refuses_the_retry_and_returns_the_last_response() {
    // No ratio, 3 retries a second: a request allowed 10 retries gets 3 (6 if the test
    // crosses a second), then the budget answers with the last 500.
    let config = ProxyConfig {
        retry_budget: RetryBudgetConfig {
            percent: 0,
            min_retries: 3,
            min_interval: Duration::from_secs(1),
            window: Duration::from_secs(10),
        },
        ..config()
    };
    let b = flaky::always(Answer::Status(500)).await;
    let (h, addr) = serve_with(retrying(&backend("b", &[b.addr]), &[500], 10), config).await;
    let resp = bounded(send(addr, get("x", "/"))).await;
    assert_eq!(resp.status, 500);
    let attempts = b.count();
    assert!((4..=7).contains(&attempts), "{attempts} attempts");
    assert_metric(
        &h,
        r#"pier_proxy_upstream_retries_refused_total{backend="default/b:80"} 1"#,
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn the_default_budget_keeps_a_failing_backend_from_being_hammered() {
    // 40 requests to a backend that always fails, 3 retries allowed each: 160 attempts
    // without a budget. The default budget (20 % of requests, at least 10 retries a second)
    // lets through far fewer, and says so.
    let b = flaky::always(Answer::Status(503)).await;
    let (h, addr) = serve(retrying(&backend("b", &[b.addr]), &[503], 3)).await;
    let started = Instant::now();
    for _ in 0..40 {
        assert_eq!(bounded(send(addr, get("x", "/"))).await.status, 503);
    }
    // The clock seconds the loop touched.
    let seconds = started.elapsed().as_secs() as usize + 2;
    let retries = b.count() - 40;
    // At most 10 a second by the minimum, plus 20 % of 40 by the ratio.
    assert!(
        retries <= 10 * seconds + 8 && retries < 120,
        "{retries} retries in under {seconds} s"
    );
    let text = h.metrics_text();
    let refused = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"pier_proxy_upstream_retries_refused_total{backend="default/b:80"} "#)
        })
        .unwrap_or_else(|| panic!("no refusals counted: {text}"));
    assert!(refused.parse::<u64>().unwrap() > 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_session_pins_the_first_attempt_and_follows_the_endpoint_that_answered() {
    use pier::model::{Carrier, Session, SessionPolicy};
    let a = flaky::always(Answer::Ok).await;
    let b = flaky::always(Answer::Ok).await;
    let policy = SessionPolicy {
        carrier: Carrier::Header,
        name: "x-session".into(),
        absolute: None,
        idle: None,
    };
    let r = rule("ns/r")
        .to(&backend("b", &[a.addr, b.addr]))
        .retry(&[500], 1, Duration::ZERO)
        .session(policy)
        .build();
    let (h, addr) = serve(r).await;
    let token = Session {
        endpoint: b.addr,
        created: 1,
        last: 1,
    }
    .encode();
    // A far-past creation time with no timeouts is still a live session.
    for _ in 0..10 {
        let req = Request::get("/")
            .header(http::header::HOST, "x")
            .header("x-session", &token)
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_eq!(bounded(send(addr, req)).await.status, 200);
    }
    assert_eq!((a.count(), b.count()), (0, 10));
    bounded(h.proxy.shutdown(BOUND)).await;
}
