//! `spec.oidc` end to end with real parts: zitadel/oidc's example OpenID Provider (built from
//! the Go module proxy by `scripts/oidc-provider.sh`) and a headless Chromium driven over W3C
//! WebDriver. The browser opens a route on pier instance A, is sent to the provider, logs in
//! through its form, comes back and sees the echo backend's answer (with the access token
//! forwarded); then opens the route on instance B (another port of the same host name, so the
//! same cookies, and the same cookie-key Secret) and is let in without logging in again. A
//! tampered cookie is refused; the logout path clears the login.

mod support;

use std::time::Instant;

use support::oidc_provider::{self, Provider};
use support::web::*;
use support::webdriver::Browser;
use support::*;

/// The manifests of one pier instance: a Gateway on `port`, the route `/app` to the echo
/// backend, and the login policy on it.
fn manifests(port: u16, echo: std::net::SocketAddr, issuer: &str) -> String {
    format!(
        "{}---\n{}---\n{}---
apiVersion: v1
kind: Secret
metadata: {{name: oidc-client, namespace: default}}
stringData: {{client-secret: {secret}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: login-cookies, namespace: default}}
stringData: {{cookie-secret: {cookie_secret}}}
---
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: login, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}}]
  oidc:
    provider: {{issuer: \"{issuer}\"}}
    clientID: {client}
    clientSecret: {{name: oidc-client}}
    cookieSecret: {{name: login-cookies}}
    scopes: [email, offline_access]
    forwardAccessToken: true
    refreshToken: true
    redirectURL: /app/oauth2/callback
    logoutPath: /app/logout
",
        gateway(port),
        service("echo", echo),
        route("app", "/app", "echo"),
        secret = oidc_provider::CLIENT_SECRET,
        client = oidc_provider::CLIENT_ID,
        cookie_secret = COOKIE_SECRET,
    )
}

/// The policy's cookie key, as both instances read it from the Secret.
const COOKIE_SECRET: &str = "9d1c3f0e6b2a48f7a5c4e3d2b1a09f8e7d6c5b4a";

#[tokio::test]
async fn a_browser_logs_in_once_for_two_pier_instances() {
    let started = Instant::now();
    let echo = echo("app").await;
    let (a, b) = (free_port(), free_port());
    let redirects: Vec<String> = [a, b]
        .iter()
        .map(|p| format!("http://localhost:{p}/app/oauth2/callback"))
        .collect();
    let provider = Provider::start(&redirects).await;
    let mut piers = Vec::new();
    let mut dirs = Vec::new();
    let mut admins = Vec::new();
    for port in [a, b] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("all.yaml"),
            manifests(port, echo.addr, &provider.issuer()),
        )
        .unwrap();
        let admin = free_port();
        admins.push(admin);
        piers.push(start_pier(dir.path(), admin, &[], &[]).await);
        dirs.push(dir);
    }
    let ready = started.elapsed();

    // Not a browser: 401, no redirect.
    let api = get(&format!("http://127.0.0.1:{a}/app"), &[]).await;
    assert_eq!(api.status, 401);

    let profile = tempfile::tempdir().unwrap();
    let browser = Browser::start(profile.path()).await;
    let browser_up = started.elapsed();
    browser
        .open(&format!("http://localhost:{a}/app/page?x=1"))
        .await;
    // At the provider's login form.
    let at = browser
        .wait_url(|u| u.starts_with(&provider.issuer()))
        .await;
    assert!(at.contains("/login"), "{at}");
    browser.type_into("#username", oidc_provider::USER).await;
    browser
        .type_into("#password", oidc_provider::PASSWORD)
        .await;
    browser.click("button[type=submit]").await;
    // Back on pier A where the login began, with the upstream's answer.
    let back = format!("http://localhost:{a}/app/page?x=1");
    browser.wait_url(|u| u == back).await;
    let page = browser.source().await;
    assert!(
        page.contains("\"path\":\"/app/page\"") || page.contains("/app/page"),
        "{page}"
    );
    assert!(
        page.contains("Bearer "),
        "the access token goes upstream: {page}"
    );
    assert!(
        !page.contains("pier-oidc"),
        "pier's cookies stay with pier: {page}"
    );
    let logged_in = started.elapsed();

    // The same browser on instance B: the same cookies, the same key: no login.
    browser
        .open(&format!("http://localhost:{b}/app/other"))
        .await;
    let url = browser.url().await;
    assert_eq!(url, format!("http://localhost:{b}/app/other"));
    assert!(browser.source().await.contains("Bearer "));

    // The session cookie, sent by another client: accepted as it is, refused once changed.
    let cookies = browser.cookies().await;
    let (name, value) = cookies
        .iter()
        .find(|(n, _)| n.starts_with("pier-oidc-") && !n.contains("login") && n.ends_with(".0"))
        .unwrap_or_else(|| panic!("no session cookie in {cookies:?}"))
        .clone();
    let html = ("accept", "text/html");
    let good = format!("{name}={value}");
    let r = get(
        &format!("http://127.0.0.1:{b}/app"),
        &[("cookie", &good), html],
    )
    .await;
    assert_eq!(r.status, 200);
    let mut tampered = value.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let bad = format!("{name}={}", String::from_utf8(tampered).unwrap());
    let r = get(
        &format!("http://127.0.0.1:{b}/app"),
        &[("cookie", &bad), html],
    )
    .await;
    assert_eq!(
        r.status, 302,
        "a tampered cookie is no session: a new login"
    );
    let location = r.headers["location"].to_str().unwrap();
    assert!(location.starts_with(&provider.issuer()), "{location}");

    // The session's access token runs out (its end moved into the past and sealed again with
    // the policy's key, as a login minutes old would be): instance B refreshes it with the
    // refresh token at the provider's token endpoint, sends the new access token upstream and
    // hands the browser the new session.
    let key = pier::auth::cookie::CookieKey::derive(COOKIE_SECRET.as_bytes(), b"default/login");
    let base = name.strip_suffix(".0").unwrap();
    let session = |sealed: &str| -> pier::auth::oidc::Session {
        serde_json::from_slice(
            &key.open(base, sealed.as_bytes())
                .expect("the session opens"),
        )
        .unwrap()
    };
    let mut old = session(&value);
    assert!(
        old.refresh_token.is_some(),
        "the provider gave a refresh token (scope offline_access)"
    );
    old.exp = support::jwt::now() - 60;
    let stale = key.seal(base, &serde_json::to_vec(&old).unwrap());
    assert!(stale.len() <= pier::auth::cookie::CHUNK, "one cookie");
    let r = get(
        &format!("http://127.0.0.1:{b}/app/refreshed"),
        &[("cookie", &format!("{name}={stale}")), html],
    )
    .await;
    assert_eq!(r.status, 200, "refreshed, not a new login: {r:?}");
    let set = r
        .headers
        .get_all("set-cookie")
        .iter()
        .find_map(|v| v.to_str().ok()?.strip_prefix(&format!("{name}=")))
        .expect("the new session is set")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let fresh = session(&set);
    assert_ne!(fresh.access_token, old.access_token, "a new access token");
    assert!(fresh.exp > support::jwt::now(), "{}", fresh.exp);
    assert_eq!(fresh.sub, old.sub);
    assert_eq!(
        r.echo().headers["authorization"],
        [format!("Bearer {}", fresh.access_token)],
        "the new access token goes upstream"
    );

    // Logout clears the cookies; the route then asks for a login again.
    browser
        .open(&format!("http://localhost:{a}/app/logout"))
        .await;
    browser.open(&format!("http://localhost:{a}/app")).await;
    let left: Vec<_> = browser
        .cookies()
        .await
        .into_iter()
        .filter(|(n, _)| n.starts_with("pier-oidc-") && !n.contains("login"))
        .collect();
    assert!(
        left.is_empty(),
        "session cookies left after logout: {left:?}"
    );
    browser
        .wait_url(|u| u.starts_with(&provider.issuer()))
        .await;
    // Instance B counted the requests the shared login let in under mechanism oidc.
    let metrics = get(&format!("http://127.0.0.1:{}/metrics", admins[1]), &[])
        .await
        .text();
    let series = "pier_proxy_security_decisions_total{policy=\"default/login\",mechanism=\"oidc\",result=\"allowed\"} ";
    assert!(
        support::cluster::sample(&metrics, series) >= 1.0,
        "{metrics}"
    );
    eprintln!(
        "timings: provider and two piers ready {ready:?}, browser {:?}, logged in {:?}, all {:?}",
        browser_up - ready,
        logged_in - browser_up,
        started.elapsed()
    );
}
