//! The request path's phases (`proxy::phase`) run alike on both request paths: a rule's access
//! policy decides the same over HTTP/1.1 on the fast path, over HTTP/1.1 handed to hyper
//! (a chunked body), and over HTTP/2; a CORS preflight is answered before it; a gRPC call it
//! denies gets PERMISSION_DENIED.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Version};
use http_body_util::Full;
use pier::model::filter::{AllowOrigins, Allowed, DEFAULT_MAX_AGE, Expose, OriginPattern};
use pier::model::policy::{AccessPolicy, Action, Authorization, AuthorizationRule, Principal};
use pier::model::{Backend, Cors, Filters};

use crate::support::client::{Resp, send, send_h2};
use crate::support::raw::Client;
use crate::support::snap::*;
use crate::support::*;

/// A policy whose rule `action`s clients in `cidr`; anyone else gets `default`.
fn policy(cidr: &str, action: Action, default: Action) -> AccessPolicy {
    AccessPolicy {
        source: "ns/policy".into(),
        invalid: None,
        jwt: None,
        api_key: None,
        basic: None,
        ext_auth: None,
        oidc: None,
        authorization: Some(Authorization {
            default_action: default,
            rules: vec![AuthorizationRule {
                name: Some("loopback".into()),
                action,
                methods: vec![],
                principal: Principal {
                    client_cidrs: vec![cidr.parse().unwrap()],
                    headers: vec![],
                    jwt: None,
                    client_sans: vec![],
                },
            }],
        }),
    }
}

/// `/guarded` under `access`, `/open` without a policy, both to `b`.
fn guarded(
    p: u16,
    b: &Arc<Backend>,
    access: AccessPolicy,
    filters: Filters,
) -> pier::model::Snapshot {
    let guarded = rule("ns/guarded")
        .to(b)
        .filters(filters)
        .access(access)
        .build();
    let open = rule("ns/open").to(b).build();
    snapshot(vec![port(
        p,
        vec![
            listener("http", None)
                .route(&[], prefix("/guarded"), &guarded)
                .route(&[], prefix("/open"), &open)
                .build(),
        ],
    )])
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .header(http::header::HOST, "app.example")
        .body(Full::default())
        .unwrap()
}

/// The status of `GET path` on the fast path (a raw HTTP/1.1 request with no body), on
/// HTTP/1.1 handed to hyper (a chunked request body), and on HTTP/2.
async fn three_ways(p: u16, path: &str) -> [u16; 3] {
    let mut c = bounded(Client::connect(p)).await;
    c.write(format!("GET {path} HTTP/1.1\r\nHost: app.example\r\n\r\n").as_bytes())
        .await;
    let fast = bounded(c.response(false)).await.status;
    c.write(
        format!(
            "POST {path} HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    let handed_over = bounded(c.response(false)).await.status;
    let h2: Resp = bounded(send_h2(local(p), get(path))).await;
    assert_eq!(h2.version, Version::HTTP_2);
    [fast, handed_over, h2.status.as_u16()]
}

#[tokio::test]
async fn an_access_policy_denies_alike_on_the_fast_path_and_on_hyper() {
    let a = echo("a").await;
    let b = backend("b", &[a.addr]);
    let p = free_port();
    let deny = policy("127.0.0.0/8", Action::Deny, Action::Allow);
    let h = Harness::start(guarded(p, &b, deny, Filters::default())).await;
    assert_eq!(three_ways(p, "/guarded").await, [403; 3]);
    assert_eq!(a.count(), 0, "a denied request reaches no backend");
    // The rule without a policy, on the same connections' paths, is untouched.
    assert_eq!(three_ways(p, "/open").await, [200; 3]);
    assert_eq!(a.count(), 3);
    let metrics = h.metrics_text();
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("kind=\"Forbidden\"") && l.ends_with(" 3")),
        "three denials counted:\n{metrics}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn an_access_policy_allows_alike_on_the_fast_path_and_on_hyper() {
    let a = echo("a").await;
    let b = backend("b", &[a.addr]);
    let p = free_port();
    // Only loopback may come in: the tests' client is loopback.
    let allow = policy("127.0.0.0/8", Action::Allow, Action::Deny);
    let h = Harness::start(guarded(p, &b, allow, Filters::default())).await;
    assert_eq!(three_ways(p, "/guarded").await, [200; 3]);
    assert_eq!(a.count(), 3);
    // Another network only: loopback falls to the default, deny.
    h.swap(guarded(
        p,
        &b,
        policy("192.0.2.0/24", Action::Allow, Action::Deny),
        Filters::default(),
    ));
    assert_eq!(three_ways(p, "/guarded").await, [403; 3]);
    assert_eq!(a.count(), 3);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_cors_preflight_is_answered_before_the_access_policy() {
    let a = echo("a").await;
    let b = backend("b", &[a.addr]);
    let p = free_port();
    let cors = Cors {
        allow_origins: AllowOrigins::List(vec![
            OriginPattern::parse("https://app.example").unwrap(),
        ]),
        allow_methods: Allowed::methods(&[Method::GET]),
        allow_headers: Allowed::headers(&[]),
        expose_headers: Expose::new(vec![], false),
        allow_credentials: false,
        max_age: http::HeaderValue::from(DEFAULT_MAX_AGE),
    };
    let filters = Filters {
        cors: Some(cors),
        ..Filters::default()
    };
    let deny = policy("127.0.0.0/8", Action::Deny, Action::Deny);
    let h = Harness::start(guarded(p, &b, deny, filters)).await;
    let preflight = || {
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/guarded")
            .header(http::header::HOST, "app.example")
            .header("origin", "https://app.example")
            .header("access-control-request-method", "GET")
            .body(Full::default())
            .unwrap()
    };
    for resp in [
        bounded(send(local(p), preflight())).await,
        bounded(send_h2(local(p), preflight())).await,
    ] {
        assert!(resp.status.is_success(), "{resp:?}");
        assert_eq!(
            resp.headers["access-control-allow-origin"],
            "https://app.example"
        );
    }
    // The actual request is denied.
    let mut actual = get("/guarded");
    actual
        .headers_mut()
        .insert("origin", "https://app.example".parse().unwrap());
    assert_eq!(
        bounded(send(local(p), actual)).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(a.count(), 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_denied_grpc_call_gets_permission_denied() {
    let a = echo("a").await;
    let b = backend("b", &[a.addr]);
    let p = free_port();
    let deny = policy("127.0.0.0/8", Action::Deny, Action::Allow);
    let h = Harness::start(guarded(p, &b, deny, Filters::default())).await;
    let call = Request::post("/guarded/pkg.Service/Method")
        .header(http::header::HOST, "app.example")
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .body(Full::default())
        .unwrap();
    let resp = bounded(send_h2(local(p), call)).await;
    assert_eq!(resp.status, StatusCode::OK, "gRPC errors are Trailers-Only");
    assert_eq!(resp.headers["grpc-status"], "7");
    assert_eq!(a.count(), 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}
