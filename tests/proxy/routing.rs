//! Listener and route selection, weighted backends.

use http::{HeaderName, Method, Request};
use pier::model::{HeaderMatch, QueryMatch, RequestMatch, ValueMatch};

use crate::support::client::{get, send};
use crate::support::snap::*;
use crate::support::*;

#[tokio::test]
async fn unmatched_path_and_unmatched_listener_are_404() {
    let a = echo("a").await;
    let p = free_port();
    let r = rule("ns/r").to(&backend("a", &[a.addr])).build();
    let s = snapshot(vec![port(
        p,
        vec![
            listener("foo", Some("foo.example.com"))
                .route(&[], exact("/a"), &r)
                .build(),
        ],
    )]);
    let h = Harness::start(s).await;
    let addr = local(p);
    assert_eq!(
        bounded(send(addr, get("foo.example.com", "/a")))
            .await
            .status,
        200
    );
    assert_eq!(
        bounded(send(addr, get("foo.example.com", "/b")))
            .await
            .status,
        404
    );
    assert_eq!(
        bounded(send(addr, get("bar.example.com", "/a")))
            .await
            .status,
        404
    );
    let m = h.metrics_text();
    assert!(m.contains(r#"kind="NoRoute",side="Downstream"} 1"#), "{m}");
    assert!(
        m.contains(r#"kind="NoListener",side="Downstream"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"pier_proxy_requests_total{gateway="default/gw",listener="foo",route="ns/r",backend="default/a:80",status="2xx",tls="plain"} 1"#),
        "{m}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn routes_by_host_path_header_query_and_method() {
    let names = ["host", "path", "header", "query", "method", "fallback"];
    let mut echoes = Vec::new();
    for n in names {
        echoes.push(echo(n).await);
    }
    let rules: Vec<_> = names
        .iter()
        .zip(&echoes)
        .map(|(n, e)| rule(&format!("ns/{n}")).to(&backend(n, &[e.addr])).build())
        .collect();
    let header = RequestMatch {
        headers: vec![HeaderMatch {
            name: HeaderName::from_static("x-version"),
            value: ValueMatch::Exact("2".into()),
        }],
        ..prefix("/p")
    };
    let query = RequestMatch {
        query: vec![QueryMatch {
            name: "tier".into(),
            value: ValueMatch::Exact("gold".into()),
        }],
        ..prefix("/q")
    };
    let method = RequestMatch {
        method: Some(Method::POST),
        ..prefix("/m")
    };
    let p = free_port();
    let l = listener("http", None)
        .route(&["host.example.com"], prefix("/"), &rules[0])
        .route(&[], prefix("/p"), &rules[1])
        .route(&[], header, &rules[2])
        .route(&[], query, &rules[3])
        .route(&[], method, &rules[4])
        .route(&[], prefix("/"), &rules[5])
        .build();
    let h = Harness::start(snapshot(vec![port(p, vec![l])])).await;
    let addr = local(p);
    let backend_of = |req| async move { bounded(send(addr, req)).await.backend() };

    assert_eq!(backend_of(get("host.example.com", "/p")).await, "host");
    assert_eq!(backend_of(get("other.example.com", "/p/x")).await, "path");
    // `/pq` is not under the `/p` prefix.
    assert_eq!(
        backend_of(get("other.example.com", "/pq")).await,
        "fallback"
    );
    let with_header = Request::get("/p/x")
        .header("host", "x")
        .header("x-version", "2")
        .body(Default::default())
        .unwrap();
    assert_eq!(backend_of(with_header).await, "header");
    assert_eq!(backend_of(get("x", "/q?tier=gold")).await, "query");
    assert_eq!(backend_of(get("x", "/q?tier=silver")).await, "fallback");
    let post = Request::post("/m")
        .header("host", "x")
        .body(Default::default())
        .unwrap();
    assert_eq!(backend_of(post).await, "method");
    assert_eq!(backend_of(get("x", "/m")).await, "fallback");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn listener_isolation_never_falls_through_to_a_less_specific_listener() {
    let exact_echo = echo("exact").await;
    let wild_echo = echo("wild").await;
    let any_echo = echo("any").await;
    let to = |n: &str, e: &pier::echo::EchoServer| rule(n).to(&backend(n, &[e.addr])).build();
    let p = free_port();
    let listeners = vec![
        listener("any", None)
            .route(&[], prefix("/"), &to("any", &any_echo))
            .build(),
        listener("wild", Some("*.example.com"))
            .route(&[], prefix("/only"), &to("wild", &wild_echo))
            .build(),
        listener("exact", Some("foo.example.com"))
            .route(&[], prefix("/"), &to("exact", &exact_echo))
            .build(),
    ];
    let h = Harness::start(snapshot(vec![port(p, listeners)])).await;
    let addr = local(p);
    assert_eq!(
        bounded(send(addr, get("foo.example.com", "/x")))
            .await
            .backend(),
        "exact"
    );
    assert_eq!(
        bounded(send(addr, get("bar.example.com", "/only")))
            .await
            .backend(),
        "wild"
    );
    // The wildcard listener owns bar.example.com; its routes don't match, and the catch-all
    // listener must not serve it.
    assert_eq!(
        bounded(send(addr, get("bar.example.com", "/x")))
            .await
            .status,
        404
    );
    assert_eq!(
        bounded(send(addr, get("other.net", "/x"))).await.backend(),
        "any"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn weighted_split_roughly_follows_weights() {
    let a = echo("a").await;
    let b = echo("b").await;
    let r = rule("ns/split")
        .weighted(3, &backend("a", &[a.addr]))
        .weighted(1, &backend("b", &[b.addr]))
        .build();
    let p = free_port();
    let h = Harness::start(snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], prefix("/"), &r).build()],
    )]))
    .await;
    let n = 200;
    let mut to_a = 0;
    for _ in 0..n {
        if bounded(send(local(p), get("x", "/"))).await.backend() == "a" {
            to_a += 1;
        }
    }
    // Expect 150 (sd ~6); the bounds are loose on purpose.
    assert!((110..=185).contains(&to_a), "a got {to_a} of {n}");
    bounded(h.proxy.shutdown(BOUND)).await;
}

#[tokio::test]
async fn the_invalid_share_of_a_split_gets_500() {
    let a = echo("a").await;
    let r = rule("ns/half-invalid")
        .weighted(1, &backend("a", &[a.addr]))
        .invalid(1)
        .build();
    let p = free_port();
    let h = Harness::start(snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], prefix("/"), &r).build()],
    )]))
    .await;
    let (mut ok, mut failed) = (0, 0);
    for _ in 0..100 {
        match bounded(send(local(p), get("x", "/"))).await.status.as_u16() {
            200 => ok += 1,
            500 => failed += 1,
            s => panic!("unexpected status {s}"),
        }
    }
    assert!(ok >= 20 && failed >= 20, "ok {ok}, 500 {failed}");
    bounded(h.proxy.shutdown(BOUND)).await;
}

/// Two Gateways with addresses of their own listen on the same port number; each address
/// serves its own Gateway's routes.
#[tokio::test]
async fn ports_on_different_addresses_serve_their_own_listeners() {
    let a = echo("a").await;
    let b = echo("b").await;
    let p = free_port();
    let (ip_a, ip_b): (std::net::IpAddr, std::net::IpAddr) =
        ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
    let on = |ip, backend: &std::sync::Arc<pier::model::Backend>| {
        let r = rule("ns/r").to(backend).build();
        let mut port = port(
            p,
            vec![listener("http", None).route(&[], prefix("/"), &r).build()],
        );
        port.address = Some(ip);
        port
    };
    let ports = vec![
        on(ip_a, &backend("a", &[a.addr])),
        on(ip_b, &backend("b", &[b.addr])),
    ];
    let h = Harness::start(snapshot(ports)).await;
    for (ip, want) in [(ip_a, "a"), (ip_b, "b")] {
        let addr = std::net::SocketAddr::new(ip, p);
        assert_eq!(bounded(send(addr, get("x", "/"))).await.backend(), want);
        assert_eq!(
            bounded(crate::support::client::send_h2(addr, get("x", "/")))
                .await
                .backend(),
            want
        );
    }
    assert_eq!(h.proxy.bound_ports(), [p, p]);
    bounded(h.proxy.shutdown(BOUND)).await;
}
