//! GRPCRoute translation: method matches as paths, HTTP/2 backends, the kind's own
//! ReferenceGrants and allowedRoutes, and the HTTPRoute/GRPCRoute hostname rule.

use http::{HeaderMap, HeaderValue, Method};

use crate::model::matcher::RequestParts;
use crate::model::{AppProtocol, ObjectRef};
use crate::translate::Translation;
use crate::translate::status::{HttpRouteStatus, RouteConditionType as C};
use crate::translate::test_support::{BASE, route_backends, route_cond, run_with_base};

fn grpc_route(name: &str, created: &str, spec: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\n\
         metadata: {{name: {name}, namespace: default, generation: 2, \
         creationTimestamp: \"{created}\"}}\nspec:\n{spec}"
    )
}

fn http_route(name: &str, created: &str, spec: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {{name: {name}, namespace: default, generation: 2, \
         creationTimestamp: \"{created}\"}}\nspec:\n{spec}"
    )
}

fn grpc_status<'t>(t: &'t Translation, name: &str) -> &'t HttpRouteStatus {
    t.status
        .grpc_routes
        .get(&ObjectRef::new("default", name))
        .unwrap_or_else(|| panic!("no GRPCRoute status for {name}: {:?}", t.status))
}

/// Which (route, rule) a gRPC call to `path` on `host` reaches, with these headers.
fn reach(
    t: &Translation,
    host: &str,
    path: &str,
    headers: &[(&'static str, &str)],
) -> Option<String> {
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    let req = RequestParts {
        method: &Method::POST,
        path,
        query: None,
        headers: &h,
    };
    t.snapshot.ports[0].listeners[0]
        .routes
        .find(host, &req)
        .map(|e| format!("{}/{}", e.rule.route.name, e.rule.index))
}

const SVC: &str = "pkg.Echo";

#[test]
fn method_matches_become_path_matches_with_grpc_precedence() {
    let t = run_with_base(&grpc_route(
        "g",
        "2026-01-01T00:00:00Z",
        &format!(
            "  parentRefs: [{{name: gw}}]\n  rules:\n\
             \x20 - matches: [{{method: {{service: {SVC}, method: Echo}}}}]\n\
             \x20   backendRefs: [{{name: svc, port: 80}}]\n\
             \x20 - matches: [{{method: {{service: {SVC}}}}}]\n\
             \x20   backendRefs: [{{name: svc, port: 80}}]\n\
             \x20 - matches: [{{method: {{method: Other}}}}]\n\
             \x20   backendRefs: [{{name: svc, port: 80}}]\n\
             \x20 - matches: [{{method: {{type: RegularExpression, service: 'x\\.v[0-9]+\\.Svc'}}}}]\n\
             \x20   backendRefs: [{{name: svc, port: 80}}]\n"
        ),
    ));
    let s = grpc_status(&t, "g");
    assert!(route_cond(s, C::Accepted).0, "{s:?}");
    assert_eq!(
        reach(&t, "a", "/pkg.Echo/Echo", &[]).as_deref(),
        Some("g/0")
    );
    assert_eq!(
        reach(&t, "a", "/pkg.Echo/EchoTwo", &[]).as_deref(),
        Some("g/1")
    );
    // Service-only is a segment prefix: another service with the same prefix is not it.
    assert_eq!(
        reach(&t, "a", "/pkg.EchoX/Other", &[]).as_deref(),
        Some("g/2")
    );
    // More service characters win over a method-only match.
    assert_eq!(
        reach(&t, "a", "/pkg.Echo/Other", &[]).as_deref(),
        Some("g/1")
    );
    assert_eq!(reach(&t, "a", "/x.v2.Svc/Any", &[]).as_deref(), Some("g/3"));
    assert_eq!(reach(&t, "a", "/x.vv.Svc/Any", &[]), None);
    assert_eq!(reach(&t, "a", "/y.Svc/Echo", &[]), None);
}

#[test]
fn header_matches_and_no_matches_route_every_call() {
    let t = run_with_base(&grpc_route(
        "g",
        "2026-01-01T00:00:00Z",
        "  parentRefs: [{name: gw}]\n  rules:\n\
         \x20 - matches: [{headers: [{name: version, value: two}]}]\n\
         \x20   backendRefs: [{name: svc, port: 80}]\n\
         \x20 - backendRefs: [{name: svc, port: 80}]\n",
    ));
    assert_eq!(
        reach(&t, "a", "/s.S/M", &[("version", "two")]).as_deref(),
        Some("g/0")
    );
    assert_eq!(reach(&t, "a", "/s.S/M", &[]).as_deref(), Some("g/1"));
}

#[test]
fn backends_of_a_grpc_route_speak_http2() {
    // The Service port has no appProtocol: an HTTPRoute would send HTTP/1.1.
    let t = run_with_base(&grpc_route(
        "g",
        "2026-01-01T00:00:00Z",
        "  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: svc, port: 80}]}]\n",
    ));
    let b = route_backends(&t, "default", "g");
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].protocol, AppProtocol::H2c);
    let s = grpc_status(&t, "g");
    assert!(route_cond(s, C::ResolvedRefs).0);
    assert!(t.status.http_routes.is_empty());
}

#[test]
fn an_invalid_exact_method_makes_its_rule_invalid() {
    let t = run_with_base(&grpc_route(
        "g",
        "2026-01-01T00:00:00Z",
        "  parentRefs: [{name: gw}]\n  rules:\n\
         \x20 - matches: [{method: {service: 'a/b', method: M}}]\n\
         \x20   backendRefs: [{name: svc, port: 80}]\n\
         \x20 - matches: [{method: {service: ok.S, method: M}}]\n\
         \x20   backendRefs: [{name: svc, port: 80}]\n",
    ));
    let s = grpc_status(&t, "g");
    let (ok, _, msg) = route_cond(s, C::Accepted);
    assert!(ok);
    assert!(
        msg.contains("rules[0]") && msg.contains("matches[0].method"),
        "{msg}"
    );
    let (partial, reason, _) = route_cond(s, C::PartiallyInvalid);
    assert!(partial);
    assert_eq!(reason, "UnsupportedValue");
    // The invalid match is not routed loosely; the valid rule still is.
    assert_eq!(reach(&t, "a", "/a/b/M", &[]), None);
    assert_eq!(reach(&t, "a", "/ok.S/M", &[]).as_deref(), Some("g/1"));
}

#[test]
fn http_and_grpc_routes_sharing_a_hostname_keep_the_older() {
    let spec = |host: &str| {
        format!(
            "  parentRefs: [{{name: gw}}]\n  hostnames: [{host}]\n\
             \x20 rules: [{{backendRefs: [{{name: svc, port: 80}}]}}]\n"
        )
    };
    let t = run_with_base(&format!(
        "{}\n---\n{}\n---\n{}",
        http_route("h", "2026-01-02T00:00:00Z", &spec("a.example.com")),
        grpc_route("g", "2026-01-01T00:00:00Z", &spec("'*.example.com'")),
        grpc_route("other", "2026-01-03T00:00:00Z", &spec("b.example.net")),
    ));
    // The GRPCRoute is older: the HTTPRoute loses.
    let g = grpc_status(&t, "g");
    assert!(route_cond(g, C::Accepted).0);
    let h = &t.status.http_routes[&ObjectRef::new("default", "h")];
    let (ok, reason, msg) = route_cond(h, C::Accepted);
    assert!(!ok);
    assert_eq!(reason, "NotAllowedByListeners");
    assert!(msg.contains("GRPCRoute"), "{msg}");
    // No shared hostname: no conflict.
    assert!(route_cond(grpc_status(&t, "other"), C::Accepted).0);
    assert_eq!(
        reach(&t, "a.example.com", "/s/m", &[]).as_deref(),
        Some("g/0")
    );
}

#[test]
fn listeners_that_allow_only_httproutes_refuse_grpc_routes() {
    let yaml = BASE.replace(
        "listeners: [{name: http, protocol: HTTP, port: 80}]",
        "listeners: [{name: http, protocol: HTTP, port: 80, \
         allowedRoutes: {kinds: [{kind: HTTPRoute}]}}]",
    );
    let t = crate::translate::test_support::run(&format!(
        "{yaml}\n---\n{}",
        grpc_route(
            "g",
            "2026-01-01T00:00:00Z",
            "  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: svc, port: 80}]}]\n",
        )
    ));
    let (ok, reason, msg) = route_cond(grpc_status(&t, "g"), C::Accepted);
    assert!(!ok);
    assert_eq!(reason, "NotAllowedByListeners");
    assert!(msg.contains("GRPCRoute"), "{msg}");
}

#[test]
fn cross_namespace_backends_need_a_grant_for_grpc_routes() {
    let other = "apiVersion: v1\nkind: Service\nmetadata: {name: far, namespace: other}\n\
                 spec: {ports: [{port: 80}]}\n";
    let grant = |kind: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\n\
             metadata: {{name: g, namespace: other}}\nspec:\n\
             \x20 from: [{{group: gateway.networking.k8s.io, kind: {kind}, namespace: default}}]\n\
             \x20 to: [{{group: '', kind: Service}}]\n"
        )
    };
    let route = grpc_route(
        "g",
        "2026-01-01T00:00:00Z",
        "  parentRefs: [{name: gw}]\n\
         \x20 rules: [{backendRefs: [{name: far, namespace: other, port: 80}]}]\n",
    );
    // A grant for HTTPRoutes does not cover GRPCRoutes.
    let t = run_with_base(&format!("{other}---\n{}---\n{route}", grant("HTTPRoute")));
    let (ok, reason, _) = route_cond(grpc_status(&t, "g"), C::ResolvedRefs);
    assert!(!ok);
    assert_eq!(reason, "RefNotPermitted");
    let t = run_with_base(&format!("{other}---\n{}---\n{route}", grant("GRPCRoute")));
    assert!(route_cond(grpc_status(&t, "g"), C::ResolvedRefs).0);
}

#[test]
fn session_persistence_on_a_grpc_rule_is_translated_as_for_httproutes() {
    let t = run_with_base(&grpc_route(
        "g",
        "2026-01-01T00:00:00Z",
        "  parentRefs: [{name: gw}]\n  rules:\n\
         \x20 - sessionPersistence: {type: Header, sessionName: s}\n\
         \x20   backendRefs: [{name: svc, port: 80}]\n",
    ));
    assert!(route_cond(grpc_status(&t, "g"), C::Accepted).0);
    let rule = &t.snapshot.ports[0].listeners[0]
        .routes
        .entries()
        .next()
        .unwrap()
        .rule;
    let session = rule.session.as_ref().expect("a session policy");
    assert_eq!(session.name, "s");
}
