//! The CORS filter on the wire, on both request paths: HTTP/1.1 (the fast path: small requests
//! without a body) and HTTP/2 (hyper). Preflights are answered by pier and never reach the
//! backend; actual requests get the policy's headers in place of the backend's own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode, Version};
use http_body_util::Full;
use pier::model::filter::{AllowOrigins, Allowed, DEFAULT_MAX_AGE, Expose, OriginPattern};
use pier::model::{Cors, Filters, HeaderModifier, Redirect};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::client::{Resp, send, send_h2};
use crate::support::snap::*;
use crate::support::*;

/// Origins `https://app.example` and `https://*.shop.example`; GET and PUT; header `x-a`;
/// exposes `x-b`; credentials; max age 60.
fn policy() -> Cors {
    Cors {
        allow_origins: AllowOrigins::List(vec![
            OriginPattern::parse("https://app.example").unwrap(),
            OriginPattern::parse("https://*.shop.example").unwrap(),
        ]),
        allow_methods: Allowed::methods(&[Method::GET, Method::PUT]),
        allow_headers: Allowed::headers(&[HeaderName::from_static("x-a")]),
        expose_headers: Expose::new(vec![HeaderName::from_static("x-b")], false),
        allow_credentials: true,
        max_age: HeaderValue::from(60u32),
    }
}

fn with_cors(cors: Cors) -> Filters {
    Filters {
        cors: Some(cors),
        ..Filters::default()
    }
}

fn request(method: Method, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .method(method)
        .uri("/api/x")
        .header(http::header::HOST, "example.com");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    req.body(Full::default()).unwrap()
}

/// The same request over HTTP/1.1 and over HTTP/2, in that order.
async fn both(p: u16, method: Method, headers: &[(&str, &str)]) -> [Resp; 2] {
    let h1 = bounded(send(local(p), request(method.clone(), headers))).await;
    let h2 = bounded(send_h2(local(p), request(method, headers))).await;
    assert_eq!(h1.version, Version::HTTP_11);
    assert_eq!(h2.version, Version::HTTP_2);
    [h1, h2]
}

fn header<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.headers.get(name).map(|v| v.to_str().unwrap())
}

fn cors_headers(r: &Resp) -> Vec<&str> {
    r.headers
        .keys()
        .map(HeaderName::as_str)
        .filter(|k| k.starts_with("access-control-"))
        .collect()
}

async fn start(r: Arc<pier::model::Rule>) -> (Harness, u16) {
    let p = free_port();
    let h = Harness::start(snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], prefix("/"), &r).build()],
    )]))
    .await;
    (h, p)
}

/// A backend that answers every request 200 with its own, wider CORS headers; counts requests.
async fn permissive_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(local(0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        let mut chunk = [0u8; 4096];
                        match tcp.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                    }
                    buf.clear();
                    counter.fetch_add(1, Ordering::SeqCst);
                    let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\
                        access-control-allow-origin: *\r\naccess-control-allow-methods: DELETE\r\n\
                        access-control-max-age: 86400\r\nvary: accept-encoding\r\n\
                        x-b: exposed\r\n\r\nok";
                    if tcp.write_all(resp).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, count)
}

#[tokio::test]
async fn an_allowed_preflight_is_answered_by_pier_on_both_paths() {
    let a = echo("a").await;
    let r = rule("ns/cors")
        .to(&backend("a", &[a.addr]))
        .filters(with_cors(policy()))
        .build();
    let (h, p) = start(r).await;
    let preflight = [
        ("origin", "https://x.y.shop.example"),
        ("access-control-request-method", "PUT"),
        ("access-control-request-headers", "x-a"),
    ];
    for resp in both(p, Method::OPTIONS, &preflight).await {
        assert_eq!(resp.status, StatusCode::OK, "{:?}", resp.version);
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            Some("https://x.y.shop.example")
        );
        assert_eq!(
            header(&resp, "access-control-allow-methods"),
            Some("GET, PUT")
        );
        assert_eq!(header(&resp, "access-control-allow-headers"), Some("x-a"));
        assert_eq!(header(&resp, "access-control-expose-headers"), Some("x-b"));
        assert_eq!(
            header(&resp, "access-control-allow-credentials"),
            Some("true")
        );
        assert_eq!(header(&resp, "access-control-max-age"), Some("60"));
        assert_eq!(header(&resp, "vary"), Some("origin"));
        assert!(resp.body.is_empty());
    }
    assert_eq!(a.count(), 0, "preflights never reach the backend");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn a_preflight_from_another_origin_is_denied_by_pier_on_both_paths() {
    let a = echo("a").await;
    let r = rule("ns/cors")
        .to(&backend("a", &[a.addr]))
        .filters(with_cors(policy()))
        .build();
    let (h, p) = start(r).await;
    for origin in [
        "https://shop.example",
        "http://app.example",
        "https://app.example:8443",
        "null",
    ] {
        let preflight = [("origin", origin), ("access-control-request-method", "GET")];
        for resp in both(p, Method::OPTIONS, &preflight).await {
            assert_eq!(resp.status, StatusCode::FORBIDDEN, "{origin}");
            assert!(
                cors_headers(&resp).is_empty(),
                "{origin}: {:?}",
                resp.headers
            );
        }
    }
    assert_eq!(
        a.count(),
        0,
        "the gateway is the final authority on preflights"
    );

    // An OPTIONS that is not a preflight (no Access-Control-Request-Method) is the backend's.
    for resp in both(p, Method::OPTIONS, &[("origin", "https://app.example")]).await {
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.echo().method, "OPTIONS");
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            Some("https://app.example")
        );
        assert_eq!(header(&resp, "access-control-allow-methods"), None);
    }
    assert_eq!(a.count(), 2);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn an_actual_response_carries_the_policys_headers_not_the_backends() {
    let (addr, count) = permissive_backend().await;
    let r = rule("ns/cors")
        .to(&backend("b", &[addr]))
        .filters(with_cors(policy()))
        .build();
    let (h, p) = start(r).await;
    for resp in both(p, Method::PUT, &[("origin", "https://app.example")]).await {
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(&resp.body[..], b"ok");
        assert_eq!(
            resp.headers
                .get_all("access-control-allow-origin")
                .iter()
                .collect::<Vec<_>>(),
            ["https://app.example"],
            "{:?}",
            resp.version
        );
        assert_eq!(
            header(&resp, "access-control-allow-credentials"),
            Some("true")
        );
        assert_eq!(header(&resp, "access-control-expose-headers"), Some("x-b"));
        assert_eq!(header(&resp, "access-control-allow-methods"), None);
        assert_eq!(header(&resp, "access-control-max-age"), None);
        assert_eq!(
            resp.headers.get_all("vary").iter().collect::<Vec<_>>(),
            ["accept-encoding", "origin"]
        );
        assert_eq!(header(&resp, "x-b"), Some("exposed"));
    }
    // A denied origin gets no CORS headers at all: the backend's `*` is not let through.
    for resp in both(p, Method::GET, &[("origin", "https://evil.example")]).await {
        assert_eq!(resp.status, StatusCode::OK);
        assert!(cors_headers(&resp).is_empty(), "{:?}", resp.headers);
    }
    assert_eq!(count.load(Ordering::SeqCst), 4);
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn without_credentials_a_wildcard_policy_answers_star_and_cookies_get_nothing() {
    let a = echo("a").await;
    let open = Cors {
        allow_origins: AllowOrigins::Any,
        allow_methods: Allowed::Any,
        allow_headers: Allowed::Any,
        expose_headers: Expose::default(),
        allow_credentials: false,
        max_age: HeaderValue::from(DEFAULT_MAX_AGE),
    };
    let r = rule("ns/cors")
        .to(&backend("a", &[a.addr]))
        .filters(with_cors(open))
        .build();
    let (h, p) = start(r).await;
    let preflight = [
        ("origin", "https://anyone.example:12345"),
        ("access-control-request-method", "DELETE"),
    ];
    for resp in both(p, Method::OPTIONS, &preflight).await {
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(header(&resp, "access-control-allow-origin"), Some("*"));
        assert_eq!(header(&resp, "access-control-allow-methods"), Some("*"));
        assert_eq!(header(&resp, "access-control-max-age"), Some("5"));
        assert_eq!(header(&resp, "access-control-allow-credentials"), None);
    }
    for resp in both(p, Method::GET, &[("origin", "https://anyone.example")]).await {
        assert_eq!(header(&resp, "access-control-allow-origin"), Some("*"));
        assert_eq!(header(&resp, "vary"), None);
    }
    let credentialed = [("origin", "https://anyone.example"), ("cookie", "s=1")];
    for resp in both(p, Method::GET, &credentialed).await {
        assert_eq!(resp.status, StatusCode::OK);
        assert!(cors_headers(&resp).is_empty(), "{:?}", resp.headers);
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// A backendRef's CORS filter replaces the rule's for requests to that backendRef.
#[tokio::test]
async fn a_backend_ref_cors_filter_replaces_the_rules() {
    let a = echo("a").await;
    let rule_policy = Cors {
        allow_origins: AllowOrigins::List(vec![
            OriginPattern::parse("https://rule.example").unwrap(),
        ]),
        ..policy()
    };
    let r = rule("ns/cors")
        .weighted_with(1, &backend("a", &[a.addr]), with_cors(policy()))
        .filters(with_cors(rule_policy))
        .build();
    let (h, p) = start(r).await;
    let from = |origin| [("origin", origin), ("access-control-request-method", "GET")];
    for resp in both(p, Method::OPTIONS, &from("https://app.example")).await {
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            Some("https://app.example")
        );
    }
    for resp in both(p, Method::OPTIONS, &from("https://rule.example")).await {
        assert_eq!(resp.status, StatusCode::FORBIDDEN);
    }
    assert_eq!(a.count(), 0);
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// A rule without any usable backendRef still answers preflights (they never need one), and
/// a redirect of the rule carries the CORS headers.
#[tokio::test]
async fn preflights_need_no_backend_and_redirects_get_cors_headers() {
    let r = rule("ns/cors")
        .invalid(1)
        .filters(with_cors(policy()))
        .build();
    let (h, p) = start(r).await;
    let preflight = [
        ("origin", "https://app.example"),
        ("access-control-request-method", "GET"),
    ];
    for resp in both(p, Method::OPTIONS, &preflight).await {
        assert_eq!(resp.status, StatusCode::OK);
    }
    for resp in both(p, Method::GET, &[("origin", "https://app.example")]).await {
        assert_eq!(resp.status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    let redirect = Redirect {
        scheme: Some("https".into()),
        hostname: None,
        port: None,
        path: None,
        status: StatusCode::FOUND,
    };
    let r = rule("ns/cors")
        .filters(Filters {
            redirect: Some(redirect),
            ..with_cors(policy())
        })
        .build();
    h.swap(snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], prefix("/"), &r).build()],
    )]));
    for resp in both(p, Method::GET, &[("origin", "https://app.example")]).await {
        assert_eq!(resp.status, StatusCode::FOUND);
        assert_eq!(header(&resp, "location"), Some("https://example.com/api/x"));
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            Some("https://app.example")
        );
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// The response header modifiers run after the CORS headers are set: an explicit
/// ResponseHeaderModifier has the last word.
#[tokio::test]
async fn a_response_header_modifier_has_the_last_word() {
    let a = echo("a").await;
    let r = rule("ns/cors")
        .to(&backend("a", &[a.addr]))
        .filters(Filters {
            response_headers: Some(HeaderModifier {
                set: vec![(
                    HeaderName::from_static("access-control-expose-headers"),
                    HeaderValue::from_static("x-set-by-modifier"),
                )],
                ..HeaderModifier::default()
            }),
            ..with_cors(policy())
        })
        .build();
    let (h, p) = start(r).await;
    for resp in both(p, Method::GET, &[("origin", "https://app.example")]).await {
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            Some("https://app.example")
        );
        assert_eq!(
            header(&resp, "access-control-expose-headers"),
            Some("x-set-by-modifier")
        );
    }
    bounded(h.proxy.shutdown(BOUND)).await;
}
