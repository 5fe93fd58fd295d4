//! Redirect, URL rewrite, header modifiers (rule and backendRef level), mirrors, and the
//! headers the proxy itself adds and removes.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::Full;
use pier::model::{Filters, HeaderModifier, Mirror, PathModifier, Redirect, UrlRewrite};

use crate::support::client::{get, send};
use crate::support::snap::*;
use crate::support::*;

fn pair(n: &'static str, v: &'static str) -> (HeaderName, HeaderValue) {
    (HeaderName::from_static(n), HeaderValue::from_static(v))
}

async fn start_rule(m: pier::model::RequestMatch, r: Arc<pier::model::Rule>) -> (Harness, u16) {
    let p = free_port();
    let h = Harness::start(snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], m, &r).build()],
    )]))
    .await;
    (h, p)
}

/// A RequestRedirect on a backendRef answers for that backendRef (on HTTP/1.1's fast path and
/// HTTP/2 alike); the other backendRef of the rule is proxied as usual.
#[tokio::test]
async fn a_backend_ref_redirect_redirects_instead_of_proxying() {
    let a = echo("a").await;
    let redirect = Redirect {
        scheme: None,
        hostname: Some("moved.example.com".into()),
        port: None,
        path: None,
        status: StatusCode::FOUND,
    };
    let only_redirect = Filters {
        redirect: Some(redirect),
        ..Filters::default()
    };
    let r = rule("ns/r")
        .weighted_with(1, &backend("a", &[a.addr]), only_redirect)
        .build();
    let (h, p) = start_rule(prefix("/"), r).await;
    for resp in [
        bounded(send(local(p), get("example.com", "/y"))).await,
        bounded(crate::support::client::send_h2(
            local(p),
            get("example.com", "/y"),
        ))
        .await,
    ] {
        assert_eq!(resp.status, 302);
        assert_eq!(
            resp.headers["location"],
            format!("http://moved.example.com:{p}/y")
        );
    }
    assert_eq!(a.count(), 0, "never proxied");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn redirect_answers_with_status_and_location() {
    let redirect = Redirect {
        scheme: Some("https".into()),
        hostname: None,
        port: None,
        path: Some(PathModifier::ReplacePrefixMatch("/new".into())),
        status: StatusCode::MOVED_PERMANENTLY,
    };
    let r = rule("ns/redirect")
        .filters(Filters {
            redirect: Some(redirect),
            ..Filters::default()
        })
        .build();
    let (h, p) = start_rule(prefix("/old"), r).await;
    let resp = bounded(send(local(p), get("Example.com:1234", "/old/x?a=1"))).await;
    assert_eq!(resp.status, 301);
    assert_eq!(resp.headers["location"], "https://example.com/new/x?a=1");

    // Without a scheme change the listener's port is kept.
    let redirect = Redirect {
        scheme: None,
        hostname: Some("other.example.com".into()),
        port: None,
        path: None,
        status: StatusCode::FOUND,
    };
    let r = rule("ns/redirect")
        .filters(Filters {
            redirect: Some(redirect),
            ..Filters::default()
        })
        .build();
    h.swap(snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], prefix("/"), &r).build()],
    )]));
    let resp = bounded(send(local(p), get("example.com", "/y"))).await;
    assert_eq!(resp.status, 302);
    assert_eq!(
        resp.headers["location"],
        format!("http://other.example.com:{p}/y")
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn url_rewrite_replaces_host_and_prefix_and_keeps_the_query() {
    let a = echo("a").await;
    let r = rule("ns/rewrite")
        .to(&backend("a", &[a.addr]))
        .filters(Filters {
            rewrite: Some(UrlRewrite {
                hostname: Some(HeaderValue::from_static("rewritten.example.com")),
                path: Some(PathModifier::ReplacePrefixMatch("/v2".into())),
            }),
            ..Filters::default()
        })
        .build();
    let (h, p) = start_rule(prefix("/v1"), r).await;
    let seen = bounded(send(local(p), get("orig.example.com", "/v1/items?x=1")))
        .await
        .echo();
    assert_eq!(seen.host, "rewritten.example.com");
    assert_eq!(seen.path, "/v2/items");
    assert_eq!(seen.query.as_deref(), Some("x=1"));
    assert_eq!(seen.headers["x-forwarded-host"], ["orig.example.com"]);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn header_modifiers_apply_to_requests_and_responses() {
    let a = echo("a").await;
    let rule_filters = Filters {
        request_headers: Some(HeaderModifier {
            set: vec![pair("x-set", "rule")],
            add: vec![pair("x-add", "rule")],
            remove: vec![HeaderName::from_static("x-remove")],
        }),
        response_headers: Some(HeaderModifier {
            set: vec![pair("x-resp", "rule")],
            add: vec![],
            remove: vec![HeaderName::from_static("x-echo-backend")],
        }),
        ..Filters::default()
    };
    let backend_filters = Filters {
        request_headers: Some(HeaderModifier {
            add: vec![pair("x-backend", "ref")],
            ..HeaderModifier::default()
        }),
        response_headers: Some(HeaderModifier {
            add: vec![pair("x-resp", "ref")],
            ..HeaderModifier::default()
        }),
        ..Filters::default()
    };
    let r = rule("ns/headers")
        .weighted_with(1, &backend("a", &[a.addr]), backend_filters)
        .filters(rule_filters)
        .build();
    let (h, p) = start_rule(prefix("/"), r).await;
    let req = Request::get("/")
        .header("host", "x")
        .header("x-set", "client")
        .header("x-add", "client")
        .header("x-remove", "client")
        .body(Full::default())
        .unwrap();
    let resp = bounded(send(local(p), req)).await;
    let seen = resp.echo();
    assert_eq!(seen.headers["x-set"], ["rule"]);
    assert_eq!(seen.headers["x-add"], ["client", "rule"]);
    assert_eq!(seen.headers["x-backend"], ["ref"]);
    assert!(!seen.headers.contains_key("x-remove"));
    let resp_values: Vec<_> = resp.headers.get_all("x-resp").iter().collect();
    assert_eq!(resp_values, ["rule", "ref"]);
    assert!(resp.headers.get("x-echo-backend").is_none());
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn mirror_sends_a_copy_with_small_bodies_only() {
    let a = echo("a").await;
    let m = echo("mirror").await;
    let mirror = Mirror {
        backend: backend("mirror", &[m.addr]),
        numerator: 1,
        denominator: 1,
    };
    let r = rule("ns/mirror")
        .to(&backend("a", &[a.addr]))
        .filters(Filters {
            mirrors: vec![mirror],
            request_headers: Some(HeaderModifier {
                set: vec![pair("x-filtered", "yes")],
                ..HeaderModifier::default()
            }),
            ..Filters::default()
        })
        .build();
    let (h, p) = start_rule(prefix("/"), r).await;

    let small = Request::post("/m?q=1")
        .header("host", "x")
        .body(Full::new(Bytes::from_static(b"hello")))
        .unwrap();
    let resp = bounded(send(local(p), small)).await;
    assert_eq!(resp.backend(), "a");
    assert_eq!(resp.echo().body_bytes, 5);
    bounded(m.wait_for(1)).await;
    let copy = &m.requests()[0];
    assert_eq!((copy.method.as_str(), copy.path.as_str()), ("POST", "/m"));
    assert_eq!(copy.query.as_deref(), Some("q=1"));
    assert_eq!(copy.headers["x-filtered"], ["yes"]);
    assert_eq!(copy.body_bytes, 5);

    let big = vec![b'x'; pier::proxy::MAX_MIRRORED_BODY as usize + 1];
    let large = Request::post("/big")
        .header("host", "x")
        .body(Full::new(Bytes::from(big)))
        .unwrap();
    let resp = bounded(send(local(p), large)).await;
    assert_eq!(resp.echo().body_bytes, pier::proxy::MAX_MIRRORED_BODY + 1);
    bounded(m.wait_for(2)).await;
    let copy = &m.requests()[1];
    assert_eq!(copy.path, "/big");
    assert_eq!(copy.body_bytes, 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_failing_mirror_does_not_affect_the_request() {
    let a = echo("a").await;
    let mirror = Mirror {
        backend: backend("mirror", &[refused_addr()]),
        numerator: 1,
        denominator: 1,
    };
    let r = rule("ns/mirror")
        .to(&backend("a", &[a.addr]))
        .filters(Filters {
            mirrors: vec![mirror],
            ..Filters::default()
        })
        .build();
    let (h, p) = start_rule(prefix("/"), r).await;
    assert_eq!(bounded(send(local(p), get("x", "/"))).await.status, 200);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn forwarded_headers_are_added_and_hop_by_hop_headers_removed() {
    let a = echo("a").await;
    let (h, p) = start_rule(
        prefix("/"),
        rule("ns/r").to(&backend("a", &[a.addr])).build(),
    )
    .await;
    let req = Request::get("/")
        .header("host", "Example.com:8080")
        .header("x-forwarded-for", "10.0.0.1")
        .header("connection", "keep-alive, x-private")
        .header("x-private", "secret")
        .header("keep-alive", "timeout=5")
        .header("proxy-connection", "keep-alive")
        .header("te", "trailers")
        .header("trailer", "x-checksum")
        .header("x-kept", "1")
        .body(Full::default())
        .unwrap();
    let seen = bounded(send(local(p), req)).await.echo();
    assert_eq!(
        seen.host, "Example.com:8080",
        "Host reaches the backend unchanged"
    );
    // No trusted proxies (the default): the client's own list is replaced.
    assert_eq!(seen.headers["x-forwarded-for"], ["127.0.0.1"]);
    assert_eq!(seen.headers["x-forwarded-proto"], ["http"]);
    assert_eq!(seen.headers["x-forwarded-host"], ["Example.com:8080"]);
    assert_eq!(seen.headers["x-kept"], ["1"]);
    for gone in [
        "x-private",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
    ] {
        assert!(!seen.headers.contains_key(gone), "{gone} was forwarded");
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}
