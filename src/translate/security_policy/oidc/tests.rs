//! `spec.oidc` in translation: Secrets, the discovery document not fetched yet, bad fields.

use crate::model::ObjectRef;
use crate::translate::Translation;
use crate::translate::status::PolicyConditionType as T;
use crate::translate::test_support::run_with_base;

fn with(oidc: &str, cookie_secret: &str) -> Translation {
    run_with_base(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /app}}}}]
    backendRefs: [{{name: svc, port: 80}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: client, namespace: default}}
stringData: {{client-secret: s3cr3t-value}}
---
apiVersion: v1
kind: Secret
metadata: {{name: cookies, namespace: default}}
stringData: {{cookie-secret: "{cookie_secret}"}}
---
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: login, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: app}}]
  oidc:
    clientID: web
    clientSecret: {{name: client}}
    cookieSecret: {{name: cookies}}
{oidc}"#
    ))
}

const LONG: &str = "0123456789abcdef0123456789abcdef";

fn condition(t: &Translation, ty: T) -> Option<(bool, String, String)> {
    let s = &t.status.security_policies[&ObjectRef::new("default", "login")];
    s.ancestors[0]
        .conditions
        .iter()
        .find(|c| c.type_ == ty)
        .map(|c| (c.status, c.reason.to_string(), c.message.clone()))
}

fn oidc_of(t: &Translation) -> std::sync::Arc<crate::model::oidc::OidcAuthn> {
    let l = &t.snapshot.ports[0].listeners[0];
    let e = l.routes.entries().next().expect("the route's entry");
    let access = e.rule.access.as_ref().expect("an access policy");
    assert!(access.invalid.is_none(), "{access:?}");
    access.oidc.clone().expect("oidc")
}

#[test]
fn before_discovery_the_policy_is_accepted_without_endpoints_and_says_so() {
    let t = with("    provider: {issuer: \"https://idp.example/\"}\n", LONG);
    let o = oidc_of(&t);
    assert!(o.endpoints.is_none(), "no login can start: 503");
    assert_eq!(o.scopes, "openid");
    assert_eq!(o.logout_path, "/logout");
    assert_eq!(o.redirect.path(), "/oauth2/callback");
    assert_ne!(o.session_cookie, o.state_cookie);
    let (ok, reason, message) = condition(&t, T::RemoteJwks).unwrap();
    assert!(!ok);
    assert_eq!(reason, "Pending");
    assert!(
        message.contains("https://idp.example/.well-known/openid-configuration"),
        "{message}"
    );
    assert!(condition(&t, T::Accepted).unwrap().0, "accepted");
}

#[test]
fn given_endpoints_need_no_discovery_and_scopes_start_with_openid() {
    let t = with(
        "    provider: {issuer: \"https://idp.example\", authorizationEndpoint: \
         \"https://idp.example/auth\", tokenEndpoint: \"https://idp.example/token\"}\n    \
         scopes: [email, openid, profile]\n    redirectURL: /app/cb\n",
        LONG,
    );
    let o = oidc_of(&t);
    let e = o.endpoints.as_ref().expect("endpoints as given");
    assert_eq!(e.token, "https://idp.example/token");
    assert_eq!(o.scopes, "openid email profile");
    assert_eq!(
        o.redirect.url(true, "shop.example:8443"),
        "https://shop.example:8443/app/cb"
    );
}

#[test]
fn bad_fields_make_the_policy_invalid_without_showing_secrets() {
    for (spec, cookie, want) in [
        (
            "    provider: {issuer: \"https://idp\"}\n",
            "short",
            "cookieSecret",
        ),
        (
            "    provider: {issuer: \"http://idp.example\"}\n",
            LONG,
            "loopback",
        ),
        (
            "    provider: {issuer: \"https://idp\", tokenEndpoint: \"http://10.0.0.1/t\"}\n",
            LONG,
            "tokenEndpoint",
        ),
        (
            "    provider: {issuer: \"https://idp\"}\n    logoutPath: out\n",
            LONG,
            "logoutPath",
        ),
        (
            "    provider: {issuer: \"https://idp\"}\n    scopes: [\"a b\"]\n",
            LONG,
            "scopes",
        ),
    ] {
        let t = with(spec, cookie);
        let (ok, reason, message) = condition(&t, T::Accepted).unwrap();
        assert!(!ok, "{spec}");
        assert_eq!(reason, "Invalid");
        assert!(message.contains(want), "{spec}: {message}");
        assert!(
            !message.contains("s3cr3t") && !message.contains("short\""),
            "{message}"
        );
    }
}
