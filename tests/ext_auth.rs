//! External authorization end to end: `pier run` on manifests with SecurityPolicy `extAuth`
//! (HTTP and gRPC mode) and GEP-1494 `ExternalAuth` filters, in front of the real authorizer
//! of `tests/extauthz` (Envoy's ext_authz gRPC API from go-control-plane, and an HTTP one).
//! Requests come over HTTP/1.1 (the fast path, which hands these rules to hyper's) and HTTP/2.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use support::client::{Resp, send, send_h2};
use support::web::*;
use support::*;

/// A Service `name` whose one endpoint is `addr` (port 80 on the Service).
fn svc(name: &str, addr: SocketAddr) -> String {
    format!("{}---\n", service(name, addr))
}

/// A SecurityPolicy `name` on HTTPRoute `route` with `ext_auth` (the `extAuth` body, indented
/// under it).
fn policy(name: &str, route: &str, ext_auth: &str) -> String {
    format!(
        "apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {route}}}]
  extAuth:
{ext_auth}---
"
    )
}

/// An HTTPRoute `name` on `prefix` to Service `a`, with `filter` (an ExternalAuth filter's
/// `externalAuth` body) on its rule.
fn filtered_route(name: &str, prefix: &str, external_auth: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
      filters:
        - type: ExternalAuth
          externalAuth:
{external_auth}      backendRefs: [{{name: a, port: 80}}]
---
"
    )
}

#[derive(Clone, Copy, Debug)]
enum Client {
    H1,
    H2,
}

struct Pier {
    addr: SocketAddr,
}

impl Pier {
    async fn send(
        &self,
        client: Client,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &'static [u8],
    ) -> Resp {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:{}{path}", self.addr.port()));
        if matches!(client, Client::H1) {
            req = req.uri(path).header("host", "127.0.0.1");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from_static(body))).unwrap();
        let send = async {
            match client {
                Client::H1 => send(self.addr, req).await,
                Client::H2 => send_h2(self.addr, req).await,
            }
        };
        tokio::time::timeout(Duration::from_secs(20), send)
            .await
            .expect("pier answers within 20 s")
    }

    async fn get(&self, client: Client, path: &str, token: Option<&str>) -> Resp {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("authorization", a)])
            .unwrap_or_default();
        self.send(client, "GET", path, &headers, b"").await
    }
}

#[tokio::test]
async fn ext_auth_allows_denies_and_fails_closed_over_http_and_grpc() {
    let authz = support::extauthz::start("30s");
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let mut m = format!("{}---\n", gateway(port));
    m += &svc("a", echo.addr);
    m += &svc("authz-http", authz.http);
    m += &svc("authz-grpc", authz.grpc);
    m += &svc("authz-down", refused_addr());
    for (name, prefix) in [
        ("http", "/http"),
        ("grpc", "/grpc"),
        ("down", "/down"),
        ("down-open", "/down-open"),
        ("slow", "/slow"),
        ("slow-http", "/slow-http"),
        ("down-grpc", "/down-grpc"),
        ("body", "/body"),
    ] {
        m += &route(name, prefix, "a");
        m += "---\n";
    }
    m += &policy(
        "http",
        "http",
        "    http:\n      backendRefs: [{name: authz-http, port: 80}]\n      \
         headersToBackend: [x-user, x-seen-headers, x-seen-path, x-seen-host]\n    \
         headersToExtAuth: [x-extra]\n",
    );
    m += &policy(
        "grpc",
        "grpc",
        "    grpc:\n      backendRefs: [{name: authz-grpc, port: 80}]\n",
    );
    m += &policy(
        "down",
        "down",
        "    http:\n      backendRefs: [{name: authz-down, port: 80}]\n",
    );
    m += &policy(
        "down-open",
        "down-open",
        "    http:\n      backendRefs: [{name: authz-down, port: 80}]\n    failOpen: true\n",
    );
    m += &policy(
        "slow",
        "slow",
        "    grpc:\n      backendRefs: [{name: authz-grpc, port: 80}]\n    timeout: 300ms\n",
    );
    m += &policy(
        "slow-http",
        "slow-http",
        "    http:\n      backendRefs: [{name: authz-http, port: 80}]\n    timeout: 300ms\n",
    );
    m += &policy(
        "down-grpc",
        "down-grpc",
        "    grpc:\n      backendRefs: [{name: authz-down, port: 80}]\n",
    );
    m += &policy(
        "body",
        "body",
        "    http:\n      backendRefs: [{name: authz-http, port: 80}]\n      \
         headersToBackend: [x-user, x-seen-body-length, x-seen-content-length]\n    \
         bodyToExtAuth: {maxRequestBytes: 16}\n",
    );
    m += &filtered_route(
        "filter",
        "/filter",
        "            protocol: HTTP\n            backendRef: {name: authz-http, port: 80}\n            \
         http: {path: /check}\n            forwardBody: {maxSize: 4}\n",
    );
    m += &filtered_route(
        "filter-grpc",
        "/filter-grpc",
        "            protocol: GRPC\n            backendRef: {name: authz-grpc, port: 80}\n",
    );
    std::fs::write(dir.path().join("all.yaml"), m).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let pier = Pier { addr: local(port) };

    for client in [Client::H1, Client::H2] {
        let at = |what: &str| format!("{client:?} {what}");
        for path in ["/http", "/grpc", "/filter-grpc"] {
            // Allowed: the authorizer's x-user reaches the backend; the client's own is gone.
            let r = pier
                .send(
                    client,
                    "GET",
                    path,
                    &[("authorization", "Bearer good"), ("x-user", "mallory")],
                    b"",
                )
                .await;
            assert_eq!(r.status, 200, "{}", at(path));
            assert_eq!(r.echo().headers["x-user"], ["alice"], "{}", at(path));
            // Denied: the authorizer's status, headers and body.
            let r = pier.get(client, path, Some("bad")).await;
            assert_eq!(r.status, 403, "{}", at(path));
            assert_eq!(r.headers["x-denied-by"], "extauthz", "{}", at(path));
            assert_eq!(r.text(), "denied by extauthz\n", "{}", at(path));
            let r = pier.get(client, path, None).await;
            assert_eq!(r.status, 401, "{}", at(path));
            // Garbage from the authorizer: fail closed with pier's own 403.
            let r = pier.get(client, path, Some("garbage")).await;
            assert_eq!(r.status, 403, "{}", at(&format!("{path} garbage")));
            assert_eq!(r.text(), "Forbidden\n", "{}", at(path));
        }

        // HTTP mode: what the authorizer was sent (method, path, Host, the always-sent and the
        // named headers, never the others).
        let r = pier
            .send(
                client,
                "GET",
                "/http/x?q=1",
                &[
                    ("authorization", "Bearer good"),
                    ("x-extra", "1"),
                    ("x-private", "1"),
                ],
                b"",
            )
            .await;
        assert_eq!(r.status, 200);
        let e = r.echo();
        assert_eq!(e.headers["x-seen-path"], ["/http/x?q=1"]);
        // The host as the client sent it: HTTP/1.1's Host, HTTP/2's `:authority` (with its
        // port), as Envoy's check request carries it.
        let sent = match client {
            Client::H1 => "127.0.0.1".to_string(),
            Client::H2 => format!("127.0.0.1:{}", pier.addr.port()),
        };
        assert_eq!(e.headers["x-seen-host"], [sent], "{}", at("host"));
        let seen = &e.headers["x-seen-headers"][0];
        assert!(
            seen.contains("authorization") && seen.contains("x-extra"),
            "{seen}"
        );
        assert!(!seen.contains("x-private"), "{seen}");
        let r = pier.get(client, "/http", None).await;
        assert_eq!(r.headers["www-authenticate"], "Bearer realm=\"extauthz\"");
        assert_eq!(r.text(), "who are you?\n");

        // Down: fail closed (403), or open with failOpen.
        let r = pier.get(client, "/down", Some("good")).await;
        assert_eq!(r.status, 403, "{}", at("down"));
        let r = pier.get(client, "/down-open", Some("bad")).await;
        assert_eq!(r.status, 200, "{}", at("down, failOpen"));

        let r = pier.get(client, "/down-grpc", Some("good")).await;
        assert_eq!(r.status, 403, "{}", at("down, gRPC"));

        // Slow (gRPC, HTTP): past its 300 ms, fail closed, long before the authorizer's 30 s.
        for path in ["/slow", "/slow-http"] {
            let started = Instant::now();
            let r = pier.get(client, path, Some("slow")).await;
            assert_eq!(r.status, 403, "{}", at(path));
            assert_eq!(r.text(), "Forbidden\n");
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{:?}",
                started.elapsed()
            );
        }

        // Body: up to maxRequestBytes to the authorizer, the whole body to the backend; over
        // it, 413.
        let body: &[u8] = b"0123456789";
        let r = pier
            .send(
                client,
                "POST",
                "/body",
                &[("authorization", "Bearer good")],
                body,
            )
            .await;
        assert_eq!(r.status, 200, "{}", at("body"));
        let e = r.echo();
        assert_eq!(e.headers["x-seen-body-length"], ["10"]);
        assert_eq!(e.headers["x-seen-content-length"], ["10"]);
        assert_eq!(e.body_bytes, 10);
        let r = pier
            .send(
                client,
                "POST",
                "/body",
                &[("authorization", "Bearer good")],
                &[b'x'; 40],
            )
            .await;
        assert_eq!(r.status, 413, "{}", at("body over the limit"));

        // The ExternalAuth filter, HTTP: path prefixed, the body truncated to maxSize for the
        // authorizer (Content-Length its length), every answer header but Host upstream.
        let r = pier
            .send(
                client,
                "POST",
                "/filter/y",
                &[("authorization", "Bearer good")],
                body,
            )
            .await;
        assert_eq!(r.status, 200, "{}", at("filter"));
        let e = r.echo();
        assert_eq!(e.headers["x-seen-path"], ["/check/filter/y"]);
        assert_eq!(e.headers["x-seen-body-length"], ["4"]);
        assert_eq!(e.headers["x-seen-content-length"], ["4"]);
        assert_eq!(e.headers["x-user"], ["alice"]);
        assert_eq!(e.body_bytes, 10, "the backend gets the whole body");
        let r = pier.get(client, "/filter", Some("bad")).await;
        assert_eq!(r.status, 403);
        assert_eq!(r.text(), "denied by extauthz\n");
    }

    // gRPC calls get gRPC statuses: UNAUTHENTICATED (16) and PERMISSION_DENIED (7).
    for (token, code) in [
        (None, "16"),
        (Some("Bearer bad"), "7"),
        (Some("Bearer garbage"), "7"),
    ] {
        let mut headers = vec![("content-type", "application/grpc"), ("te", "trailers")];
        if let Some(t) = token {
            headers.push(("authorization", t));
        }
        let r = pier
            .send(Client::H2, "POST", "/grpc/pkg.Svc/M", &headers, b"")
            .await;
        assert_eq!(r.status, 200, "{token:?}");
        assert_eq!(r.headers["grpc-status"], code, "{token:?}");
    }

    // Each authorizer's decision is counted under its policy (HTTP/1.1 and HTTP/2 above, then
    // the three gRPC calls on /grpc).
    let metrics = get(&format!("http://127.0.0.1:{admin}/metrics"), &[])
        .await
        .text();
    let count = |policy: &str, result: &str| {
        let series = format!(
            "pier_proxy_security_decisions_total{{policy=\"default/{policy}\",mechanism=\"extAuth\",result=\"{result}\"}} "
        );
        support::cluster::sample(&metrics, &series) as u64
    };
    assert_eq!(count("grpc", "allowed"), 2, "{metrics}");
    assert_eq!(count("grpc", "denied"), 6, "{metrics}");
    assert_eq!(count("grpc", "failed"), 3, "{metrics}");
    assert_eq!(count("down", "failed"), 2, "{metrics}");
    assert_eq!(count("down-open", "failedOpen"), 2, "{metrics}");
}

#[tokio::test]
async fn bad_ext_auth_references_are_reported_and_fail_closed() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let mut m = format!("{}---\n", gateway(port));
    m += &svc("a", echo.addr);
    m += &route("missing", "/missing", "a");
    m += "---\n";
    m += &route("elsewhere", "/elsewhere", "a");
    m += "---\n";
    m += &policy(
        "missing",
        "missing",
        "    http:\n      backendRefs: [{name: nope, port: 80}]\n",
    );
    m += &policy(
        "elsewhere",
        "elsewhere",
        "    grpc:\n      backendRefs: [{name: a, namespace: other, port: 80}]\n",
    );
    m += &filtered_route(
        "filter-missing",
        "/filter-missing",
        "            protocol: HTTP\n            backendRef: {name: nope, port: 80}\n",
    );
    std::fs::write(dir.path().join("all.yaml"), m).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    for path in ["/missing", "/elsewhere"] {
        let r = get(
            &format!("{base}{path}"),
            &[("authorization", "Bearer good")],
        )
        .await;
        assert_eq!(r.status, 500, "{path} fails closed");
    }
    // The filter's rule is invalid, and it was the route's only one: not served at all.
    let r = get(
        &format!("{base}/filter-missing"),
        &[("authorization", "Bearer good")],
    )
    .await;
    assert_eq!(r.status, 404);
    let status = get(&format!("http://127.0.0.1:{admin}/status"), &[])
        .await
        .text();
    assert!(
        status.contains("extAuth.http.backendRefs[0]: Service default/nope not found"),
        "{status}"
    );
    assert!(
        status.contains("Service other/a is in another namespace and no ReferenceGrant in other"),
        "{status}"
    );
    assert!(
        status.contains("filters[0].externalAuth.backendRef"),
        "{status}"
    );
}

/// The phases' order on one rule: authentication (an API key here) before the authorizer,
/// which sees the headers it set; the policy's authorization rules after it, on the headers
/// the authorizer set.
#[tokio::test]
async fn authentication_then_the_authorizer_then_authorization_rules() {
    let authz = support::extauthz::start("30s");
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let mut m = format!("{}---\n", gateway(port));
    m += &svc("a", echo.addr);
    m += &svc("authz", authz.http);
    m += &route("alice", "/alice", "a");
    m += "---\n";
    m += &route("bob", "/bob", "a");
    m += "---\n";
    // The API key's client ID goes to the authorizer as x-client (headersToExtAuth), which
    // echoes the header names it saw; authorization then wants x-user (from the authorizer).
    let body = |who: &str| {
        format!(
            "  apiKeyAuth:\n    credentialRefs: [{{name: keys}}]\n    \
             extractFrom: [{{headers: [x-api-key]}}]\n    forwardClientIDHeader: x-client\n  \
             extAuth:\n    http:\n      backendRefs: [{{name: authz, port: 80}}]\n      \
             headersToBackend: [x-user, x-seen-headers]\n    headersToExtAuth: [x-client]\n  \
             authorization:\n    defaultAction: Deny\n    rules:\n    - action: Allow\n      \
             principal: {{headers: [{{name: x-user, values: [{who}]}}]}}\n"
        )
    };
    for who in ["alice", "bob"] {
        m += &format!(
            "apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: {who}, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {who}}}]
{}---
",
            body(who)
        );
    }
    m += "apiVersion: v1\nkind: Secret\nmetadata: {name: keys, namespace: default}\n\
          stringData: {acme: key-1}\n---\n";
    std::fs::write(dir.path().join("all.yaml"), m).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let pier = Pier { addr: local(port) };
    for client in [Client::H1, Client::H2] {
        let good = [("x-api-key", "key-1"), ("authorization", "Bearer good")];
        // Authenticated, allowed by the authorizer, and its x-user is what the rule wants.
        let r = pier.send(client, "GET", "/alice", &good, b"").await;
        assert_eq!(r.status, 200, "{client:?}");
        let seen = &r.echo().headers["x-seen-headers"][0];
        assert!(
            seen.contains("x-client"),
            "the authorizer saw authentication's header: {seen}"
        );
        // The authorizer allows, the authorization rule (x-user must be bob) does not.
        let r = pier.send(client, "GET", "/bob", &good, b"").await;
        assert_eq!(r.status, 403, "{client:?}");
        assert_eq!(r.text(), "Forbidden\n", "pier's 403, not the authorizer's");
        // No API key: 401 from authentication, before the authorizer (whose 401 differs).
        let r = pier
            .send(
                client,
                "GET",
                "/alice",
                &[("authorization", "Bearer good")],
                b"",
            )
            .await;
        assert_eq!(r.status, 401, "{client:?}");
        assert_ne!(r.text(), "who are you?\n");
        // A forged x-user is replaced by the authorizer's, which the rule then refuses.
        let r = pier
            .send(
                client,
                "GET",
                "/bob",
                &[
                    ("x-api-key", "key-1"),
                    ("authorization", "Bearer good"),
                    ("x-user", "bob"),
                ],
                b"",
            )
            .await;
        assert_eq!(r.status, 403, "{client:?}");
    }
}

/// oauth2-proxy as an HTTP authorizer (its `/oauth2/auth`, as nginx's auth_request users put
/// it): a signed-in user's 202 allows and its `X-Auth-Request-User` goes upstream; anyone
/// else gets oauth2-proxy's own 403 sign-in page.
#[tokio::test]
async fn oauth2_proxy_as_an_http_authorizer() {
    let dir = tempfile::tempdir().unwrap();
    // alice:wonderland, as `htpasswd -s` writes it ({SHA}: base64 of SHA-1).
    let users = dir.path().join("users.htpasswd");
    std::fs::write(&users, "alice:{SHA}tiY7sUhYKUwI5L3866kDY+ENcrQ=\n").unwrap();
    let o2p = local(free_port());
    let _o2p = support::extauthz::oauth2_proxy(o2p, &users);
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let port = free_port();
    let admin = free_port();
    let mut m = format!("{}---\n", gateway(port));
    m += &svc("a", echo.addr);
    m += &svc("oauth2-proxy", o2p);
    m += &route("orders", "/orders", "a");
    m += "---\n";
    m += &policy(
        "orders",
        "orders",
        "    http:\n      backendRefs: [{name: oauth2-proxy, port: 80}]\n      \
         path: /oauth2/auth\n      headersToBackend: [x-auth-request-user]\n",
    );
    std::fs::write(manifests.join("all.yaml"), m).unwrap();
    let _pier = start_pier(&manifests, admin, &[], &[]).await;
    let pier = Pier { addr: local(port) };
    // oauth2-proxy listens by now? Its first answer says.
    eventually(Duration::from_secs(10), || async {
        try_get(&format!("http://{o2p}/ping"), &[])
            .await
            .is_some_and(|r| r.status == 200)
    })
    .await;
    for client in [Client::H1, Client::H2] {
        // alice:wonderland
        let alice = [("authorization", "Basic YWxpY2U6d29uZGVybGFuZA==")];
        let r = pier.send(client, "GET", "/orders", &alice, b"").await;
        assert_eq!(r.status, 200, "{client:?}: oauth2-proxy's 202 allows");
        assert_eq!(r.echo().headers["x-auth-request-user"], ["alice"]);
        let wrong = [("authorization", "Basic YWxpY2U6d3Jvbmc=")];
        for headers in [&wrong[..], &[][..]] {
            let r = pier.send(client, "GET", "/orders", headers, b"").await;
            assert_eq!(r.status, 403, "{client:?}");
            assert!(
                r.headers["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with("text/html"),
                "oauth2-proxy's sign-in page: {:?}",
                r.headers
            );
        }
    }
}

/// Listener filters (GEP-5224): the listener's ExternalAuth filters run on every request it
/// accepts, in order, before routing: routes match the request as the authorizer left it, a
/// request no route matches is still refused, and a listener whose authorizer does not
/// resolve refuses everything. Both request paths; the other listener is untouched.
#[tokio::test]
async fn listener_filters_authorize_every_request_before_routing() {
    let authz = support::extauthz::start("30s");
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (authed, open, broken) = (free_port(), free_port(), free_port());
    let admin = free_port();
    let mut m = format!(
        "{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: pier
  listeners:
    - name: authed
      protocol: HTTP
      port: {authed}
      filters:
        requests:
          - type: ExternalAuth
            externalAuth:
              protocol: GRPC
              backendRef: {{name: authz-grpc, port: 80}}
          - type: ExternalAuth
            externalAuth:
              protocol: HTTP
              backendRef: {{name: authz-http, port: 80}}
              http: {{path: /check}}
              forwardBody: {{maxSize: 4}}
    - {{name: open, protocol: HTTP, port: {open}}}
    - name: broken
      protocol: HTTP
      port: {broken}
      filters:
        requests:
          - {{type: ExternalAuth, externalAuth: {{protocol: HTTP, backendRef: {{name: nowhere, port: 80}}}}}}
---
"
    );
    m += &svc("a", echo.addr);
    m += &svc("authz-http", authz.http);
    m += &svc("authz-grpc", authz.grpc);
    // Only requests that carry the authorizer's `x-user: alice` match.
    m += "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: users, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /app}, headers: [{name: x-user, value: alice}]}]
      backendRefs: [{name: a, port: 80}]
---
";
    std::fs::write(dir.path().join("all.yaml"), m).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let (authed, open, broken) = (
        Pier {
            addr: local(authed),
        },
        Pier { addr: local(open) },
        Pier {
            addr: local(broken),
        },
    );

    for client in [Client::H1, Client::H2] {
        let at = |what: &str| format!("{client:?} {what}");
        // Allowed by both: the route matched on the header the authorizers set (the client's
        // own `x-user` replaced), the HTTP authorizer saw its path prefix and 4 body bytes,
        // the backend the whole body.
        let r = authed
            .send(
                client,
                "POST",
                "/app/x",
                &[("authorization", "Bearer good"), ("x-user", "mallory")],
                b"0123456789",
            )
            .await;
        assert_eq!(r.status, 200, "{}", at("allowed"));
        let e = r.echo();
        assert_eq!(e.headers["x-user"], ["alice"], "{}", at("allowed"));
        assert_eq!(e.headers["x-seen-path"], ["/check/app/x"], "{}", at("path"));
        assert_eq!(e.headers["x-seen-body-length"], ["4"], "{}", at("body"));
        assert_eq!(e.body_bytes, 10, "{}", at("whole body upstream"));
        // Denied by the first (gRPC): its answer, before any route is looked up, also for a
        // path no route has.
        for path in ["/app/x", "/nothing/here"] {
            let r = authed.get(client, path, Some("bad")).await;
            assert_eq!(r.status, 403, "{}", at(path));
            assert_eq!(r.headers["x-denied-by"], "extauthz", "{}", at(path));
            let r = authed.get(client, path, None).await;
            assert_eq!(r.status, 401, "{}", at(path));
        }
        // Allowed, but no route for the path: routing runs after the filters.
        let r = authed.get(client, "/nothing", Some("good")).await;
        assert_eq!(r.status, 404, "{}", at("allowed, no route"));
        // The listener without filters: no authorizer; a client's own x-user routes.
        let r = open.get(client, "/app/x", None).await;
        assert_eq!(r.status, 404, "{}", at("open, no header"));
        let r = open
            .send(client, "GET", "/app/x", &[("x-user", "alice")], b"")
            .await;
        assert_eq!(r.status, 200, "{}", at("open"));
        // The authorizer does not resolve: fail closed.
        let r = broken.get(client, "/app/x", Some("good")).await;
        assert_eq!(r.status, 500, "{}", at("broken"));
    }

    // Status: Accepted listeners; the broken one's ResolvedRefs names the filter.
    let status = get(&format!("http://127.0.0.1:{admin}/status"), &[])
        .await
        .text();
    assert!(
        status.contains("filters.requests[0].externalAuth.backendRef: Service default/nowhere"),
        "{status}"
    );
    assert!(status.contains("InvalidListenerFilterRef"), "{status}");
}
