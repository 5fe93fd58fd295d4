//! External authorizers from manifests: a SecurityPolicy's `extAuth` and the `ExternalAuth`
//! filter resolve their Service like a backendRef; a reference that does not resolve is
//! reported in status and fails closed.

use crate::model::AppProtocol;
use crate::model::ObjectRef;
use crate::model::ext_auth::{AllowStatus, ExtAuthProtocol, HeaderSelection, OverLimit};
use crate::translate::Translation;
use crate::translate::status::{PolicyConditionType, RouteConditionType};
use crate::translate::test_support::{cond_of, route, run_with_base};

const ROUTE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: svc, port: 80}]
---
"#;

fn with_policy(ext_auth: &str) -> Translation {
    run_with_base(&format!(
        "{ROUTE}apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: p, namespace: default, generation: 3}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}}]
  extAuth:
{ext_auth}"
    ))
}

fn rule(t: &Translation) -> &crate::model::Rule {
    let e = t.snapshot.ports[0].listeners[0]
        .routes
        .entries()
        .next()
        .unwrap();
    &e.rule
}

/// `(status, reason, message)` of the policy's Accepted condition.
fn accepted(t: &Translation) -> (bool, String, String) {
    let s = &t.status.security_policies[&ObjectRef::new("default", "p")];
    let c = s.ancestors[0]
        .conditions
        .iter()
        .find(|c| c.type_ == PolicyConditionType::Accepted)
        .unwrap();
    (c.status, c.reason.to_string(), c.message.clone())
}

#[test]
fn a_policys_http_authorizer_resolves_to_its_service_port() {
    let t = with_policy(
        "    http:\n      backendRefs: [{name: svc, port: 80}]\n      path: /auth/\n      \
         headersToBackend: [X-User]\n    headersToExtAuth: [x-extra]\n    timeout: 250ms\n    \
         bodyToExtAuth: {maxRequestBytes: 1024}\n",
    );
    assert!(accepted(&t).0, "{:?}", accepted(&t));
    let access = rule(&t).access.as_ref().unwrap();
    assert!(access.invalid.is_none());
    let e = access.ext_auth.as_ref().unwrap();
    assert_eq!(e.backend.id.service, ObjectRef::new("default", "svc"));
    assert_eq!(e.backend.protocol, AppProtocol::Http1);
    assert_eq!(e.timeout, std::time::Duration::from_millis(250));
    assert!(!e.fail_open, "fail closed by default");
    let ExtAuthProtocol::Http {
        path_prefix,
        headers_to_backend,
        allow,
    } = &e.protocol
    else {
        panic!("http mode")
    };
    assert_eq!(path_prefix, "/auth");
    assert_eq!(*allow, AllowStatus::Any2xx, "as nginx's auth_request");
    assert_eq!(
        *headers_to_backend,
        HeaderSelection::Only(vec![http::HeaderName::from_static("x-user")])
    );
    assert_eq!(
        e.headers_to_ext_auth,
        HeaderSelection::Only(vec![http::HeaderName::from_static("x-extra")])
    );
    let body = e.body.unwrap();
    assert_eq!((body.max_bytes, body.over), (1024, OverLimit::Reject));
    assert!(rule(&t).has_ext_auth());
}

#[test]
fn a_grpc_authorizer_is_reached_over_http2_and_sees_every_header() {
    let t =
        with_policy("    grpc:\n      backendRefs: [{name: svc, port: 80}]\n    failOpen: true\n");
    let e = rule(&t).access.as_ref().unwrap().ext_auth.clone().unwrap();
    assert_eq!(e.backend.protocol, AppProtocol::H2c);
    assert_eq!(e.headers_to_ext_auth, HeaderSelection::All);
    assert_eq!(e.timeout, crate::model::ext_auth::DEFAULT_TIMEOUT);
    assert!(e.fail_open);
    assert_eq!(e.authority, "svc.default.svc");
}

#[test]
fn bad_policy_references_are_invalid_with_the_field_named() {
    for (ext_auth, message) in [
        (
            "    http:\n      backendRefs: [{name: nope, port: 80}]\n",
            "extAuth.http.backendRefs[0]: Service default/nope not found",
        ),
        (
            "    grpc:\n      backendRefs: [{name: svc, port: 81}]\n",
            "extAuth.grpc.backendRefs[0]: Service default/svc has no port 81",
        ),
        (
            "    grpc:\n      backendRefs: [{name: svc, namespace: other, port: 80}]\n",
            "extAuth.grpc.backendRefs[0]: Service other/svc is in another namespace",
        ),
        (
            "    http:\n      backendRefs: [{name: svc}]\n",
            "extAuth.http.backendRefs[0]: Service default/svc: port is required",
        ),
        (
            "    grpc:\n      backendRefs: [{name: svc, port: 80}]\n    http:\n      backendRefs: [{name: svc, port: 80}]\n",
            "extAuth.give exactly one of grpc and http",
        ),
        (
            "    http:\n      backendRefs: [{name: svc, port: 80}]\n    timeout: soon\n",
            "extAuth.timeout: \"soon\" is not a positive Gateway API duration",
        ),
        (
            "    http:\n      backendRefs: [{name: svc, port: 80}, {name: svc, port: 80}]\n",
            "extAuth.http.backendRefs: one authorizer Service is supported, 2 were given",
        ),
    ] {
        let t = with_policy(ext_auth);
        let (ok, reason, got) = accepted(&t);
        assert!(!ok, "{ext_auth}");
        assert_eq!(reason, "Invalid");
        assert!(
            got.starts_with(message),
            "{got:?} does not start with {message:?}"
        );
        let access = rule(&t).access.as_ref().unwrap();
        assert!(access.invalid.is_some(), "the routes fail closed");
    }
}

fn with_filter(external_auth: &str) -> Translation {
    run_with_base(&format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /}}}}]
    filters:
    - type: ExternalAuth
      externalAuth:
{external_auth}    backendRefs: [{{name: svc, port: 80}}]
"#
    ))
}

#[test]
fn the_external_auth_filter_runs_on_the_same_engine() {
    let t = with_filter(
        "        protocol: GRPC\n        backendRef: {name: svc, port: 80}\n        \
         forwardBody: {maxSize: 64}\n",
    );
    let (ok, _, msg) = cond_of(
        &route(&t, "default", "web").parents[0].conditions,
        RouteConditionType::Accepted,
    );
    assert!(ok, "{msg}");
    let r = rule(&t);
    let e = r
        .filters
        .ext_auth
        .as_ref()
        .expect("the filter's authorizer");
    assert!(r.has_ext_auth());
    assert_eq!(e.backend.protocol, AppProtocol::H2c);
    assert!(!e.fail_open, "GEP-1494: MUST fail closed");
    assert_eq!(e.headers_to_ext_auth, HeaderSelection::All);
    let body = e.body.unwrap();
    assert_eq!((body.max_bytes, body.over), (64, OverLimit::Truncate));

    let t = with_filter(
        "        protocol: HTTP\n        backendRef: {name: svc, port: 80}\n        \
         http: {path: /check, allowedHeaders: [x-a]}\n",
    );
    let e = rule(&t).filters.ext_auth.clone().unwrap();
    let ExtAuthProtocol::Http {
        path_prefix,
        headers_to_backend,
        allow,
    } = &e.protocol
    else {
        panic!("http")
    };
    assert_eq!(path_prefix, "/check");
    assert_eq!(*allow, AllowStatus::Only200, "GEP-1494");
    assert_eq!(*headers_to_backend, HeaderSelection::All);
    assert_eq!(e.backend.protocol, AppProtocol::Http1);
}

#[test]
fn an_unresolved_filter_backend_is_reported_and_its_rule_fails_closed() {
    let t = with_filter("        protocol: HTTP\n        backendRef: {name: nope, port: 80}\n");
    let s = route(&t, "default", "web");
    let (ok, reason, msg) = cond_of(&s.parents[0].conditions, RouteConditionType::ResolvedRefs);
    assert!(!ok);
    assert_eq!(reason, "BackendNotFound");
    assert!(msg.contains("filters[0].externalAuth.backendRef"), "{msg}");
    // Its only rule is invalid: nothing of the route is served (never past the authorizer).
    let served = t
        .snapshot
        .ports
        .iter()
        .flat_map(|p| &p.listeners)
        .any(|l| l.routes.entries().next().is_some());
    assert!(!served);
}

#[test]
fn an_authorizer_in_another_namespace_needs_a_reference_grant() {
    let authz = r#"apiVersion: v1
kind: Service
metadata: {name: authz, namespace: security}
spec: {ports: [{name: grpc, port: 9000}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: authz-1, namespace: security, labels: {kubernetes.io/service-name: authz}}
addressType: IPv4
ports: [{name: grpc, port: 9000}]
endpoints: [{addresses: ["10.0.9.1"]}]
---
"#;
    let grant = |from_kind: &str, from_ns: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: let-policies, namespace: security}}
spec:
  from: [{{group: pier.dev, kind: {from_kind}, namespace: {from_ns}}}]
  to: [{{group: \"\", kind: Service, name: authz}}]
---
"
        )
    };
    let policy = "    grpc:\n      backendRefs: [{name: authz, namespace: security, port: 9000}]\n";
    let run = |extra: &str| {
        run_with_base(&format!(
            "{authz}{extra}{ROUTE}apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: p, namespace: default, generation: 3}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}}]
  extAuth:
{policy}"
        ))
    };
    // No grant, or one for another kind or namespace: refused, fail closed.
    for extra in [
        String::new(),
        grant("BackendTrafficPolicy", "default"),
        grant("SecurityPolicy", "elsewhere"),
    ] {
        let t = run(&extra);
        let (ok, _, message) = accepted(&t);
        assert!(!ok, "{extra}");
        assert!(
            message.contains(
                "Service security/authz is in another namespace and no ReferenceGrant in \
                 security lets SecurityPolicies of default refer to it"
            ),
            "{message}"
        );
    }
    // The grant: the authorizer resolves to its Service port.
    let t = run(&grant("SecurityPolicy", "default"));
    let (ok, _, message) = accepted(&t);
    assert!(ok, "{message}");
    let access = rule(&t).access.as_ref().unwrap();
    assert!(access.invalid.is_none());
    let authorizer = &access.ext_auth.as_ref().unwrap();
    assert_eq!(authorizer.authority, "authz.security.svc");
    assert_eq!(authorizer.backend.endpoints.len(), 1);
}
