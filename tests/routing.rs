//! Routing tables without a cluster: `tests/fixtures/routing/conformance-like.yaml` goes
//! through `translate()`, then each request is routed the way the proxy does it
//! (`Snapshot::port` -> `Port::listener` -> `RouteTable::find`). The cases follow the upstream
//! HTTPRoute conformance tests (matching, header/query/method matching, matching across
//! routes, listener hostname matching, hostname intersection); the manifests are our own.

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use pier::model::host::normalize_host;
use pier::model::matcher::RequestParts;
use pier::model::{BackendTarget, Snapshot};
use pier::translate::{Resources, Settings, parse_manifests, translate};

/// What a request should hit: (route, rule index, Service), or nothing (404).
type Expected = Option<(&'static str, usize, &'static str)>;

struct Case {
    method: Method,
    port: u16,
    host: &'static str,
    path: &'static str,
    query: Option<&'static str>,
    headers: &'static [(&'static str, &'static str)],
    expected: Expected,
}

fn snapshot() -> Snapshot {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/routing/conformance-like.yaml"
    );
    let text = std::fs::read_to_string(path).expect("fixture");
    let mut resources = Resources::default();
    parse_manifests(&text, &mut resources).expect("fixture parses");
    let t = translate(&resources, &Settings::default());
    // Every route in the fixture is valid: a failed status would make the table meaningless.
    for (key, s) in &t.status.http_routes {
        for p in &s.parents {
            assert!(
                p.conditions.iter().all(|c| c.status),
                "{key}: {:?}",
                p.conditions
            );
        }
    }
    t.snapshot
}

fn route(s: &Snapshot, c: &Case) -> Option<(String, usize, String)> {
    let mut headers = HeaderMap::new();
    for (n, v) in c.headers {
        headers.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_static(v),
        );
    }
    let host = normalize_host(c.host);
    let listener = s.port(c.port)?.listener(&host)?;
    let req = RequestParts {
        method: &c.method,
        path: c.path,
        query: c.query,
        headers: &headers,
    };
    let e = listener.routes.find(&host, &req)?;
    let service = match &e.rule.backends.backends.first()?.target {
        BackendTarget::Service(b) => b.id.service.name.clone(),
        BackendTarget::Invalid => "invalid".into(),
    };
    Some((e.rule.route.name.clone(), e.rule.index, service))
}

fn get(host: &'static str, path: &'static str, expected: Expected) -> Case {
    Case {
        method: Method::GET,
        port: 80,
        host,
        path,
        query: None,
        headers: &[],
        expected,
    }
}

fn check(cases: Vec<Case>) {
    let s = snapshot();
    let mut failures = vec![];
    for c in &cases {
        let got = route(&s, c);
        let want = c
            .expected
            .map(|(r, i, svc)| (r.to_string(), i, svc.to_string()));
        if got != want {
            failures.push(format!(
                "{} {}:{}{} {:?} {:?}: got {got:?}, want {want:?}",
                c.method, c.host, c.port, c.path, c.query, c.headers
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn path_matching_exact_prefix_and_segments() {
    const H: &str = "match.example.com";
    check(vec![
        get(H, "/", Some(("matching", 0, "v1"))),
        get(H, "/v2", Some(("matching", 1, "v2"))),
        get(H, "/v2/", Some(("matching", 1, "v2"))),
        get(H, "/v2/example", Some(("matching", 1, "v2"))),
        // A prefix matches whole segments only: /v2example is not under /v2.
        get(H, "/v2example", Some(("matching", 0, "v1"))),
        // The longer prefix wins; its trailing '/' is ignored.
        get(H, "/v2/beta", Some(("matching", 2, "v3"))),
        get(H, "/v2/beta/x", Some(("matching", 2, "v3"))),
        get(H, "/v2/betamax", Some(("matching", 1, "v2"))),
        // Exact beats any prefix.
        get(H, "/v2/exact", Some(("matching", 3, "v1"))),
        get(H, "/v2/exact/more", Some(("matching", 1, "v2"))),
        // Regular expressions match the whole path.
        get(H, "/items/42", Some(("matching", 4, "v3"))),
        get(H, "/items/42/x", Some(("matching", 0, "v1"))),
        // Host header port and case do not matter.
        get("MATCH.example.com:80", "/", Some(("matching", 0, "v1"))),
        // Other hosts on the catch-all listener fall to the wildcard route or nothing.
        get("nomatch.example.net", "/", None),
    ]);
}

fn with_headers(
    headers: &'static [(&'static str, &'static str)],
    path: &'static str,
    expected: Expected,
) -> Case {
    Case {
        headers,
        ..get("headers.example.com", path, expected)
    }
}

#[test]
fn header_matching() {
    check(vec![
        with_headers(&[("version", "one")], "/", Some(("headers", 0, "v1"))),
        with_headers(&[("VERSION", "two")], "/", Some(("headers", 1, "v2"))),
        with_headers(
            &[("version", "two"), ("color", "orange")],
            "/",
            Some(("headers", 2, "v3")),
        ),
        with_headers(
            &[("version", "two"), ("color", "blue")],
            "/",
            Some(("headers", 1, "v2")),
        ),
        // Values are case-sensitive.
        with_headers(&[("version", "ONE")], "/", None),
        with_headers(&[("x-build", "123-rc")], "/", Some(("headers", 3, "v3"))),
        with_headers(&[("x-build", "123-rc1")], "/", None),
        with_headers(&[], "/", None),
    ]);
}

fn with_query(query: &'static str, expected: Expected) -> Case {
    Case {
        query: Some(query),
        ..get("query.example.com", "/", expected)
    }
}

#[test]
fn query_param_matching() {
    check(vec![
        with_query("animal=whale", Some(("query", 0, "v1"))),
        with_query("animal=dolphin", Some(("query", 1, "v2"))),
        with_query("animal=dolphin&color=blue", Some(("query", 2, "v3"))),
        with_query("color=blue&animal=dolphin", Some(("query", 2, "v3"))),
        // The first occurrence of a repeated parameter decides.
        with_query("animal=whale&animal=dolphin", Some(("query", 0, "v1"))),
        with_query("ANIMAL=whale", None),
        with_query("animal=shark", None),
    ]);
}

fn with_method(method: Method, path: &'static str, expected: Expected) -> Case {
    Case {
        method,
        ..get("method.example.com", path, expected)
    }
}

#[test]
fn method_matching_and_precedence() {
    check(vec![
        with_method(Method::POST, "/", Some(("methods", 0, "v1"))),
        with_method(Method::GET, "/", Some(("methods", 1, "v2"))),
        with_method(Method::PUT, "/", None),
        // A longer path prefix beats a method-only match.
        with_method(Method::POST, "/path", Some(("methods", 2, "v3"))),
        // Same path: a method match beats a header match.
        with_method(Method::DELETE, "/path", Some(("methods", 4, "v2"))),
        Case {
            headers: &[("x-a", "1")],
            ..with_method(Method::GET, "/path", Some(("methods", 3, "v1")))
        },
        Case {
            headers: &[("x-a", "1")],
            ..with_method(Method::DELETE, "/path", Some(("methods", 4, "v2")))
        },
    ]);
}

#[test]
fn matching_across_routes() {
    const H: &str = "across.example.com";
    check(vec![
        // Identical matches: the older route wins.
        get(H, "/a", Some(("across-old", 0, "v1"))),
        // A header match in the newer route beats the older route's plain prefix.
        Case {
            headers: &[("canary", "true")],
            ..get(H, "/a", Some(("across-new", 1, "v2")))
        },
        // A longer prefix in the newer route wins.
        get(H, "/a/b/c", Some(("across-new", 2, "v2"))),
        // The exact hostname's routes win over the wildcard route, even with a shorter path;
        // when they have no match, the wildcard route's rules are used.
        get(H, "/deep/path", Some(("any-example", 0, "v3"))),
        get(
            "other.example.com",
            "/deep/path/x",
            Some(("any-example", 0, "v3")),
        ),
        get("other.example.com", "/a", None),
    ]);
}

fn on_8080(host: &'static str, path: &'static str, expected: Expected) -> Case {
    Case {
        port: 8080,
        ..get(host, path, expected)
    }
}

#[test]
fn listener_hostname_matching_and_isolation() {
    check(vec![
        on_8080("foo.example.com", "/foo", Some(("foo-route", 0, "v1"))),
        // Listener isolation: foo.example.com belongs to the `foo` listener alone, so a path
        // only the `*.example.com` listener's routes match is a 404, not a fall-through.
        on_8080("foo.example.com", "/other", None),
        on_8080("x.example.com", "/other", Some(("wild-route", 0, "v2"))),
        on_8080("a.b.example.com", "/", Some(("wild-route", 0, "v2"))),
        // No listener for the apex or another domain.
        on_8080("example.com", "/", None),
        on_8080("foo.example.net", "/foo", None),
        // No listener on an unknown port.
        Case {
            port: 9999,
            ..get("foo.example.com", "/foo", None)
        },
    ]);
}

#[test]
fn hostname_intersection_narrows_to_the_listener() {
    check(vec![
        on_8080("bar.example.com", "/bar", Some(("bar-route", 0, "v3"))),
        on_8080("bar.example.com", "/", None),
        // very.specific.example.com is in the route but not under the `bar` listener: it is
        // served by the wildcard listener's routes.
        on_8080(
            "very.specific.example.com",
            "/bar",
            Some(("wild-route", 0, "v2")),
        ),
    ]);
}
