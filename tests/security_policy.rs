//! `SecurityPolicy` (pier.dev/v1alpha1) end to end: `pier run` on manifests with policies
//! attached to Routes and a rule; requests over HTTP/1.1 (the fast path) and HTTP/2 (hyper's
//! path) get the same decisions; `/status` reports each policy's ancestors.

mod support;

use bytes::Bytes;
use http_body_util::Full;
use support::client::send_h2;
use support::web::*;
use support::*;

/// A SecurityPolicy `name` targeting `target` (a targetRef in flow style) with `body`.
fn policy(name: &str, target: &str, body: &str) -> String {
    format!(
        "apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{target}]
{body}---
"
    )
}

fn route_ref(name: &str) -> String {
    format!("{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {name}}}")
}

#[tokio::test]
async fn policies_allow_deny_and_fail_closed_on_both_request_paths() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let mut manifests = format!("{}---\n{}---\n", gateway(port), service("a", echo.addr));
    for (name, prefix) in [
        ("open", "/open"),
        ("loopback", "/loopback"),
        ("elsewhere", "/elsewhere"),
        ("team", "/team"),
        ("basic", "/basic"),
        ("plain", "/plain"),
    ] {
        manifests.push_str(&route(name, prefix, "a"));
        manifests.push_str("---\n");
    }
    let allow_only = |cidr: &str| {
        format!(
            "  authorization:\n    defaultAction: Deny\n    rules:\n    - name: only\n      \
             action: Allow\n      principal: {{clientCIDRs: [\"{cidr}\"]}}\n"
        )
    };
    manifests.push_str(&policy(
        "loopback",
        &route_ref("loopback"),
        &allow_only("127.0.0.0/8"),
    ));
    manifests.push_str(&policy(
        "elsewhere",
        &route_ref("elsewhere"),
        &allow_only("10.0.0.0/8"),
    ));
    manifests.push_str(&policy(
        "team",
        &route_ref("team"),
        "  authorization:\n    rules:\n    - action: Allow\n      operation: {methods: [GET]}\n      \
         principal: {headers: [{name: x-team, values: [ops]}]}\n",
    ));
    manifests.push_str(&policy(
        "basic",
        &route_ref("basic"),
        "  basicAuth: {users: {name: users}, forwardUsernameHeader: x-user}\n",
    ));
    // alice: bcrypt (cost 5), bob: SHA-512-crypt, as `htpasswd -B` and `openssl passwd -6`
    // write them.
    manifests.push_str(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: users, namespace: default}\n\
         stringData:\n  .htpasswd: |\n    \
         alice:$2y$05$51qmlbO/MaGUMHLQc5Nq2.bO6dGx.siUnH30tf8a5VLwZwhZNEUsO\n    \
         bob:$6$abcdefgh$e1o..VsKRS0O4M9J1Qb9u.strxNEAfDkCXcaYc5TsDrJFctQCTMkPeis45vy3ZQtqt4dqG4vXTonFJKbQgR2Q1\n\
         ---\n",
    );
    manifests.push_str(&policy(
        "plain",
        &route_ref("plain"),
        "  basicAuth: {users: {name: plain-users}}\n",
    ));
    manifests.push_str(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: plain-users, namespace: default}\n\
         stringData: {.htpasswd: \"carol:secret\\n\"}\n---\n",
    );
    std::fs::write(dir.path().join("all.yaml"), manifests).unwrap();

    let _pier = start_pier(dir.path(), admin, &[], &[]).await;

    let base = format!("http://127.0.0.1:{port}");
    let h1 = |path: &str, headers: &'static [(&'static str, &'static str)]| {
        let url = format!("{base}{path}");
        async move { get(&url, headers).await.status.as_u16() }
    };
    let h2 = |path: &str, headers: &'static [(&'static str, &'static str)]| {
        let mut req = http::Request::get(format!("{base}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::<Bytes>::default()).unwrap();
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        async move { send_h2(addr, req).await.status.as_u16() }
    };
    let ops: &'static [(&str, &str)] = &[("x-team", "ops")];
    let dev: &'static [(&str, &str)] = &[("x-team", "dev")];
    for (path, headers, want) in [
        ("/open", &[][..], 200),
        ("/loopback", &[][..], 200),
        ("/elsewhere", &[][..], 403),
        ("/team", ops, 200),
        ("/team", dev, 403),
        ("/team", &[][..], 403),
        // alice:wonderland and bob:wonderland; a wrong password; none.
        (
            "/basic",
            &[("authorization", "Basic YWxpY2U6d29uZGVybGFuZA==")][..],
            200,
        ),
        (
            "/basic",
            &[("authorization", "Basic Ym9iOndvbmRlcmxhbmQ=")][..],
            200,
        ),
        (
            "/basic",
            &[("authorization", "Basic YWxpY2U6d3Jvbmc=")][..],
            401,
        ),
        ("/basic", &[][..], 401),
        // A plaintext password line is refused: the policy is invalid, fail closed.
        (
            "/plain",
            &[("authorization", "Basic Y2Fyb2w6c2VjcmV0")][..],
            500,
        ),
    ] {
        assert_eq!(h1(path, headers).await, want, "HTTP/1.1 {path} {headers:?}");
        assert_eq!(h2(path, headers).await, want, "HTTP/2 {path} {headers:?}");
    }

    let status = get(&format!("http://127.0.0.1:{admin}/status"), &[])
        .await
        .json();
    let of = |name: &str| {
        status
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["kind"] == "SecurityPolicy" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no status for {name}: {status}"))
            .clone()
    };
    let accepted = |name: &str| of(name)["status"]["ancestors"][0]["conditions"][0].clone();
    assert_eq!(accepted("loopback")["status"], "True");
    assert_eq!(
        of("loopback")["status"]["ancestors"][0]["ancestorRef"]["name"],
        "gw"
    );
    assert_eq!(accepted("basic")["status"], "True");
    assert_eq!(accepted("plain")["status"], "False");
    assert_eq!(accepted("plain")["reason"], "Invalid");
    let message = accepted("plain")["message"].as_str().unwrap().to_string();
    assert!(message.contains("basicAuth.users"), "{message}");
    assert!(
        !message.contains("secret"),
        "the password is never shown: {message}"
    );
    assert_eq!(of("plain")["apiVersion"], "pier.dev/v1alpha1");
    // The username reaches the backend; a header of that name from the client does not.
    let r = get(
        &format!("{base}/basic"),
        &[
            ("authorization", "Basic YWxpY2U6d29uZGVybGFuZA=="),
            ("x-user", "mallory"),
        ],
    )
    .await;
    assert_eq!(r.echo().headers["x-user"], vec!["alice".to_string()]);
    let r = get(&format!("{base}/basic"), &[]).await;
    let challenge = r.headers.get("www-authenticate").unwrap().to_str().unwrap();
    assert!(challenge.starts_with("Basic realm="), "{challenge}");
}

/// A request path, its headers, and the status it must get.
type Case<'a> = (&'a str, Vec<(&'a str, String)>, u16);

/// JWT (ES256, a key set given inline) and API keys (a Secret): 401 with a challenge for a
/// missing or bad credential, 403 for a principal the rules refuse, 200 otherwise; claims and
/// the client ID reach the backend in headers the client cannot forge, and a sanitized key
/// does not reach it at all.
#[tokio::test]
async fn jwt_and_api_keys_authenticate_on_both_request_paths() {
    use support::jwt::{Issuer, now};
    let issuer = Issuer::new("k1");
    let stranger = Issuer::new("k1");
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let jwks = issuer.jwks().replace('"', "\\\"");
    let mut m = format!("{}---\n{}---\n", gateway(port), service("a", echo.addr));
    for (name, prefix) in [("jwt", "/jwt"), ("claims", "/claims"), ("keys", "/keys")] {
        m.push_str(&route(name, prefix, "a"));
        m.push_str("---\n");
    }
    let provider = |claims: &str| {
        format!(
            "  jwt:\n    providers:\n    - name: issuer\n      issuer: https://issuer.test\n      \
             audiences: [pier]\n      localJWKS: {{type: Inline, inline: \"{jwks}\"}}\n{claims}"
        )
    };
    let read_scope = "  authorization:\n    defaultAction: Deny\n    rules:\n    - action: Allow\n      \
                      principal: {jwt: {provider: issuer, scopes: [read]}}\n";
    m.push_str(&policy(
        "jwt",
        &route_ref("jwt"),
        &format!("{}{read_scope}", provider("")),
    ));
    m.push_str(&policy(
        "claims",
        &route_ref("claims"),
        &provider("      claimToHeaders: [{header: x-user, claim: sub}]\n"),
    ));
    m.push_str(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: keys, namespace: default}\n\
         stringData: {alice: s3cret}\n---\n",
    );
    m.push_str(&policy(
        "keys",
        &route_ref("keys"),
        "  apiKeyAuth:\n    credentialRefs: [{name: keys}]\n    extractFrom: [{headers: [x-api-key]}]\n    \
         forwardClientIDHeader: x-client\n    sanitize: true\n",
    ));
    std::fs::write(dir.path().join("all.yaml"), m).unwrap();
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("pier.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let _pier = start_pier_logging(dir.path(), admin, &[], &["--access-log"], log).await;

    let claims = |scope: &str, exp: u64| {
        serde_json::json!({"iss": "https://issuer.test", "aud": "pier", "sub": "alice",
            "scope": scope, "exp": exp})
    };
    let good = issuer.token(&claims("read write", now() + 300));
    let no_scope = issuer.token(&claims("write", now() + 300));
    let expired = issuer.token(&claims("read", now() - 600));
    let forged = stranger.token(&claims("read", now() + 300));
    let bearer = |t: &str| format!("Bearer {t}");
    let base = format!("http://127.0.0.1:{port}");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // (path, headers, status): each over HTTP/1.1 and HTTP/2.
    let cases: Vec<Case<'_>> = vec![
        ("/jwt", vec![], 401),
        ("/jwt", vec![("authorization", bearer(&good))], 200),
        ("/jwt", vec![("authorization", bearer(&no_scope))], 403),
        ("/jwt", vec![("authorization", bearer(&expired))], 401),
        ("/jwt", vec![("authorization", bearer(&forged))], 401),
        (
            "/jwt",
            vec![("authorization", "Bearer not.a.token".into())],
            401,
        ),
        ("/keys", vec![], 401),
        ("/keys", vec![("x-api-key", "wrong".into())], 401),
        ("/keys", vec![("x-api-key", "s3cret".into())], 200),
    ];
    for (path, headers, want) in &cases {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = get(&format!("{base}{path}"), &h).await;
        assert_eq!(r.status.as_u16(), *want, "HTTP/1.1 {path} {headers:?}");
        if *want == 401 {
            let challenge = r.headers.get("www-authenticate").expect("a challenge");
            let scheme = if *path == "/jwt" { "Bearer" } else { "APIKey" };
            assert!(
                challenge.to_str().unwrap().starts_with(scheme),
                "{challenge:?}"
            );
        }
        let mut req = http::Request::get(format!("{base}{path}"));
        for (k, v) in &h {
            req = req.header(*k, *v);
        }
        let r = send_h2(addr, req.body(Full::<Bytes>::default()).unwrap()).await;
        assert_eq!(r.status.as_u16(), *want, "HTTP/2 {path} {headers:?}");
    }
    // The claim reaches the backend; a header of that name from the client does not.
    let r = get(
        &format!("{base}/claims"),
        &[("authorization", &bearer(&good)), ("x-user", "mallory")],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.echo().headers["x-user"], vec!["alice".to_string()]);
    // The client ID is forwarded, the key is not.
    let r = get(
        &format!("{base}/keys"),
        &[("x-api-key", "s3cret"), ("x-client", "mallory")],
    )
    .await;
    let seen = r.echo();
    assert_eq!(seen.headers["x-client"], vec!["alice".to_string()]);
    assert!(
        !seen.headers.contains_key("x-api-key"),
        "{:?}",
        seen.headers
    );

    // Each decision is counted by policy, mechanism and result (the cases above ran twice,
    // HTTP/1.1 and HTTP/2; then one more request each on /claims and /keys).
    let metrics = get(&format!("http://127.0.0.1:{admin}/metrics"), &[])
        .await
        .text();
    let count = |policy: &str, mechanism: &str, result: &str| {
        let series = format!(
            "pier_proxy_security_decisions_total{{policy=\"default/{policy}\",mechanism=\"{mechanism}\",result=\"{result}\"}} "
        );
        support::cluster::sample(&metrics, &series) as u64
    };
    assert_eq!(count("jwt", "jwt", "allowed"), 2, "{metrics}");
    assert_eq!(count("jwt", "jwt", "unauthenticated"), 8, "{metrics}");
    assert_eq!(count("jwt", "authorization", "denied"), 2, "{metrics}");
    assert_eq!(count("keys", "apiKey", "unauthenticated"), 4, "{metrics}");
    assert_eq!(count("keys", "apiKey", "allowed"), 3, "{metrics}");
    assert_eq!(count("claims", "jwt", "allowed"), 1, "{metrics}");
    // The access log names who came in, never the credential.
    let text = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("pier::access"))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("principal") && l.contains("jwt:issuer:alice")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("principal") && l.contains("apikey:alice")),
        "{text}"
    );
    assert!(!text.contains("s3cret") && !text.contains(&good), "{text}");
}
