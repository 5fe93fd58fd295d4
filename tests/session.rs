//! Session persistence (GEP-1619) end to end: pier in-process from a manifest directory, two
//! echo endpoints behind one Service (one EndpointSlice each, so either can be taken away).

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use pier::echo::EchoServer;

use support::client::{Resp, send};
use support::mesh::{GATEWAY_CLASS, Pier, namespace};
use support::{bounded, echo, free_port};

fn gateway(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: gw}}
spec:
  gatewayClassName: pier
  listeners:
    - {{name: http, protocol: HTTP, port: {port}, allowedRoutes: {{namespaces: {{from: All}}}}}}
"
    )
}

/// Service `app/web` and one EndpointSlice per `(slice name, port)` (all on 127.0.0.1).
fn backends(slices: &[(&str, u16)]) -> String {
    let mut out = "apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec: {ports: [{name: http, port: 80}]}
"
    .to_string();
    for (name, port) in slices {
        out.push_str(&format!(
            "---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}, namespace: app, labels: {{kubernetes.io/service-name: web}}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints: [{{addresses: [\"127.0.0.1\"], conditions: {{ready: true}}}}]
"
        ));
    }
    out
}

fn routes() -> String {
    "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: sticky, namespace: app}
spec:
  parentRefs: [{name: edge, namespace: gw}]
  hostnames: [cookie.example]
  rules:
    - sessionPersistence: {sessionName: sid, idleTimeout: 2s, absoluteTimeout: 1h}
      backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: by-header, namespace: app}
spec:
  parentRefs: [{name: edge, namespace: gw}]
  hostnames: [header.example]
  rules:
    - sessionPersistence: {type: Header, sessionName: X-Session}
      backendRefs: [{name: web, port: 80}]
"
    .to_string()
}

/// pier with both echo servers behind `app/web` and both routes.
async fn start(a: &EchoServer, b: &EchoServer) -> Pier {
    let port = free_port();
    let files = vec![
        ("00-class.yaml", GATEWAY_CLASS.to_string()),
        (
            "01-namespaces.yaml",
            [namespace("gw", ""), namespace("app", "")].join("---\n"),
        ),
        ("10-gateway.yaml", gateway(port)),
        (
            "20-backends.yaml",
            backends(&[("a", a.addr.port()), ("b", b.addr.port())]),
        ),
        ("30-routes.yaml", routes()),
    ];
    Pier::start(port, &files).await
}

async fn request(pier: &Pier, host: &str, header: Option<(&str, &str)>) -> Resp {
    let mut req = Request::get("/").header("host", host);
    if let Some((k, v)) = header {
        req = req.header(k, v);
    }
    let req = req.body(Full::<Bytes>::default()).unwrap();
    let r = bounded(send(pier.addr(), req)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r
}

/// The `sid` cookie a response sets: (`name=value`, the whole Set-Cookie line).
fn set_cookie(r: &Resp) -> Option<(String, String)> {
    let line = r.headers.get("set-cookie")?.to_str().unwrap().to_string();
    let pair = line.split(';').next().unwrap().trim().to_string();
    Some((pair, line))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_sessions_stick_survive_churn_of_others_and_time_out() {
    let (a, b) = (echo("a").await, echo("b").await);
    let pier = start(&a, &b).await;

    // Without a session: a new one, and no pinning (both endpoints answer over a few tries).
    let first = request(&pier, "cookie.example", None).await;
    let (cookie, line) = set_cookie(&first).expect("a session cookie");
    assert!(cookie.starts_with("sid="), "{line}");
    assert!(
        line.contains("Path=/") && line.contains("HttpOnly"),
        "{line}"
    );
    assert!(!line.contains("Max-Age"), "a Session cookie: {line}");
    let pinned = first.backend();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        seen.insert(request(&pier, "cookie.example", None).await.backend());
    }
    assert_eq!(seen.len(), 2, "both endpoints serve new sessions: {seen:?}");

    // With the cookie: always the same endpoint.
    for _ in 0..20 {
        let r = request(&pier, "cookie.example", Some(("cookie", &cookie))).await;
        assert_eq!(r.backend(), pinned);
    }

    // The other endpoint goes away: the session is not disturbed.
    let other = if pinned == "a" {
        ("b", b.addr.port())
    } else {
        ("a", a.addr.port())
    };
    let mine = if pinned == "a" {
        ("a", a.addr.port())
    } else {
        ("b", b.addr.port())
    };
    let before = pier.generation().await;
    pier.write("20-backends.yaml", &backends(&[mine]));
    pier.wait_generation_above(before).await;
    let r = request(&pier, "cookie.example", Some(("cookie", &cookie))).await;
    assert_eq!(r.backend(), pinned);
    // Back again, and the session's own endpoint goes: the next request starts a new
    // session on the one that is left, and says so.
    let before = pier.generation().await;
    pier.write("20-backends.yaml", &backends(&[other]));
    pier.wait_generation_above(before).await;
    let r = request(&pier, "cookie.example", Some(("cookie", &cookie))).await;
    assert_eq!(r.backend(), other.0);
    let (moved, _) = set_cookie(&r).expect("a new session cookie");
    assert_ne!(moved, cookie);
    let r = request(&pier, "cookie.example", Some(("cookie", &moved))).await;
    assert_eq!(r.backend(), other.0);

    // Idle for longer than idleTimeout (2 s): the token is refused and a new session begins
    // (a fresh creation time in the token).
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let r = request(&pier, "cookie.example", Some(("cookie", &moved))).await;
    let (renewed, _) = set_cookie(&r).expect("a new session after the idle timeout");
    let created = |c: &str| c.split('~').nth(1).unwrap().parse::<u64>().unwrap();
    assert!(created(&renewed) > created(&moved), "{moved} -> {renewed}");
    pier.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_sessions_come_back_in_the_header() {
    let (a, b) = (echo("a").await, echo("b").await);
    let pier = start(&a, &b).await;
    let first = request(&pier, "header.example", None).await;
    let token = first.headers["x-session"].to_str().unwrap().to_string();
    assert!(first.headers.get("set-cookie").is_none());
    for _ in 0..20 {
        let r = request(&pier, "header.example", Some(("x-session", &token))).await;
        assert_eq!(r.backend(), first.backend());
        // No idle timeout: the token does not change, so it is not sent again.
        assert!(r.headers.get("x-session").is_none());
    }
    // A forged token naming no endpoint of the rule starts a new session.
    let r = request(
        &pier,
        "header.example",
        Some(("x-session", "7f0000010001~1~1")),
    )
    .await;
    assert!(r.headers.get("x-session").is_some());
    pier.shutdown().await;
}
