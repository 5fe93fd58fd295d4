use super::*;

fn origins(list: &[&str]) -> AllowOrigins {
    AllowOrigins::List(
        list.iter()
            .map(|o| OriginPattern::parse(o).unwrap())
            .collect(),
    )
}

fn names(list: &[&'static str]) -> Vec<HeaderName> {
    list.iter().map(|n| HeaderName::from_static(n)).collect()
}

/// The conformance suite's first route: two origins (one a wildcard), two methods, two
/// request and two exposed headers, credentials, max age 3600.
fn listed() -> Cors {
    Cors {
        allow_origins: origins(&["https://www.foo.com", "https://*.bar.com"]),
        allow_methods: Allowed::methods(&[Method::GET, Method::OPTIONS]),
        allow_headers: Allowed::headers(&names(&["x-header-1", "x-header-2"])),
        expose_headers: Expose::new(names(&["x-header-3", "x-header-4"]), false),
        allow_credentials: true,
        max_age: HeaderValue::from(3600u32),
    }
}

/// Wildcards everywhere, with or without credentials.
fn wildcards(credentials: bool) -> Cors {
    Cors {
        allow_origins: AllowOrigins::Any,
        allow_methods: Allowed::Any,
        allow_headers: Allowed::Any,
        expose_headers: Expose::new(names(&["x-named"]), true),
        allow_credentials: credentials,
        max_age: HeaderValue::from(DEFAULT_MAX_AGE),
    }
}

fn headers(list: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in list {
        h.append(*n, HeaderValue::from_static(v));
    }
    h
}

fn preflight(cors: &Cors, list: &[(&'static str, &'static str)]) -> Preflight {
    match cors.check(&Method::OPTIONS, &headers(list)) {
        CorsCheck::Preflight(p) => p,
        CorsCheck::Actual(_) => panic!("not taken as a preflight"),
    }
}

/// The response headers an actual request gets, applied to `response`.
fn actual(
    cors: &Cors,
    method: Method,
    request: &[(&'static str, &'static str)],
    response: &[(&'static str, &'static str)],
) -> HeaderMap {
    let mut out = headers(response);
    match cors.check(&method, &headers(request)) {
        CorsCheck::Actual(r) => r.apply(&mut out),
        CorsCheck::Preflight(_) => panic!("taken as a preflight"),
    }
    out
}

fn get<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).map(|v| v.to_str().unwrap())
}

fn allows(cors: &Cors, origin: &'static str) -> bool {
    let out = actual(cors, Method::GET, &[("origin", origin)], &[]);
    match get(&out, "access-control-allow-origin") {
        Some(v) => {
            assert_eq!(v, origin, "an allowed origin is echoed");
            true
        }
        None => false,
    }
}

macro_rules! origin_test {
    ($name:ident, $patterns:expr, allows = [$($yes:expr),*], denies = [$($no:expr),*]) => {
        #[test]
        fn $name() {
            let cors = Cors { allow_origins: origins(&$patterns), ..listed() };
            $(assert!(allows(&cors, $yes), "{:?} should allow {}", $patterns, $yes);)*
            $(assert!(!allows(&cors, $no), "{:?} should deny {}", $patterns, $no);)*
        }
    };
}

origin_test!(
    exact_origin_matches_only_itself,
    ["https://www.foo.com"],
    allows = ["https://www.foo.com", "https://WWW.Foo.com"],
    denies = [
        "https://foobar.com",
        "http://www.foo.com",
        "https://www.foo.com.evil",
        "https://x.www.foo.com",
        "https://www.foo.com:8443",
        "null",
        "www.foo.com"
    ]
);
origin_test!(
    wildcard_subdomain_takes_any_number_of_labels_but_at_least_one,
    ["https://*.bar.com"],
    allows = [
        "https://www.bar.com",
        "https://xpto.www.bar.com",
        "https://a.b.c.bar.com"
    ],
    denies = [
        "https://bar.com",
        "https://foobar.com",
        "https://.bar.com",
        "http://www.bar.com",
        "https://www.bar.com.evil"
    ]
);
origin_test!(
    the_default_port_is_implied_both_ways,
    [
        "https://a.example",
        "http://b.example:80",
        "http://c.example:8080"
    ],
    allows = [
        "https://a.example:443",
        "http://b.example",
        "http://c.example:8080"
    ],
    denies = [
        "https://a.example:8443",
        "http://c.example",
        "https://b.example"
    ]
);
origin_test!(
    a_wildcard_host_keeps_scheme_and_port,
    ["https://*"],
    allows = ["https://anything.example", "https://10.0.0.1"],
    denies = ["http://anything.example", "https://anything.example:8443"]
);
origin_test!(
    ip_literals_and_malformed_origins,
    ["http://10.1.2.3:8080"],
    allows = ["http://10.1.2.3:8080"],
    denies = [
        "http://10.1.2.3",
        "http://[::1]:8080",
        "http://10.1.2.3:8080/path",
        "http://user@10.1.2.3:8080",
        "http://10.1.2.3:0",
        "http://10.1.2.3:99999",
        "http://",
        "ftp://10.1.2.3:8080"
    ]
);

#[test]
fn origin_patterns_follow_the_api_pattern() {
    for bad in [
        "www.foo.com",
        "ftp://foo.com",
        "HTTPS://foo.com",
        "https://",
        "https://foo..com",
        "https://foo.*.com",
        "https://*foo.com",
        "https://foo.com/",
        "https://foo_bar.com",
    ] {
        assert_eq!(
            OriginPattern::parse(bad).map(|_| ()),
            Err(if bad.starts_with("https://") {
                InvalidOrigin::Host
            } else {
                InvalidOrigin::Scheme
            }),
            "{bad}"
        );
    }
    for bad_port in [
        "https://foo.com:0",
        "https://foo.com:65536",
        "https://foo.com:",
    ] {
        assert_eq!(
            OriginPattern::parse(bad_port),
            Err(InvalidOrigin::Port),
            "{bad_port}"
        );
    }
    assert_eq!(
        OriginPattern::parse("https://*.Bar.com")
            .unwrap()
            .to_string(),
        "https://*.bar.com:443"
    );
    assert_eq!(
        OriginPattern::parse("http://*:8080").unwrap().to_string(),
        "http://*:8080"
    );
}

#[test]
fn an_allowed_preflight_is_answered_with_the_configured_lists() {
    let p = preflight(
        &listed(),
        &[
            ("origin", "https://xpto.www.bar.com"),
            ("access-control-request-method", "GET"),
            ("access-control-request-headers", "x-header-1, x-header-2"),
        ],
    );
    assert_eq!(p.status, StatusCode::OK);
    let h = &p.headers;
    assert_eq!(
        get(h, "access-control-allow-origin"),
        Some("https://xpto.www.bar.com")
    );
    assert_eq!(get(h, "access-control-allow-methods"), Some("GET, OPTIONS"));
    assert_eq!(
        get(h, "access-control-allow-headers"),
        Some("x-header-1, x-header-2")
    );
    assert_eq!(
        get(h, "access-control-expose-headers"),
        Some("x-header-3, x-header-4")
    );
    assert_eq!(get(h, "access-control-max-age"), Some("3600"));
    assert_eq!(get(h, "access-control-allow-credentials"), Some("true"));
    assert_eq!(get(h, "vary"), Some("origin"));
}

#[test]
fn a_preflight_from_another_origin_is_denied_without_cors_headers() {
    let p = preflight(
        &listed(),
        &[
            ("origin", "https://foobar.com"),
            ("access-control-request-method", "GET"),
        ],
    );
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(
        p.headers
            .keys()
            .all(|k| !k.as_str().starts_with("access-control-")),
        "{:?}",
        p.headers
    );
    assert_eq!(get(&p.headers, "vary"), Some("origin"));
}

#[test]
fn only_options_with_origin_and_request_method_is_a_preflight() {
    let cors = listed();
    let with = |method: Method, h: &[(&'static str, &'static str)]| {
        matches!(cors.check(&method, &headers(h)), CorsCheck::Preflight(_))
    };
    let origin = ("origin", "https://www.foo.com");
    let method = ("access-control-request-method", "PUT");
    assert!(with(Method::OPTIONS, &[origin, method]));
    assert!(!with(Method::OPTIONS, &[origin]), "a plain OPTIONS");
    assert!(!with(Method::OPTIONS, &[method]), "no Origin");
    assert!(!with(Method::GET, &[origin, method]), "not OPTIONS");
}

#[test]
fn with_credentials_wildcards_echo_the_request() {
    let p = preflight(
        &wildcards(true),
        &[
            ("origin", "https://other.foo.com"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "x-header-1, x-header-2"),
        ],
    );
    let h = &p.headers;
    assert_eq!(p.status, StatusCode::OK);
    assert_eq!(
        get(h, "access-control-allow-origin"),
        Some("https://other.foo.com")
    );
    assert_eq!(get(h, "access-control-allow-methods"), Some("PUT"));
    assert_eq!(
        get(h, "access-control-allow-headers"),
        Some("x-header-1, x-header-2")
    );
    assert_eq!(get(h, "access-control-allow-credentials"), Some("true"));
    assert_eq!(
        get(h, "access-control-expose-headers"),
        Some("x-named"),
        "`*` is dropped, the names stay"
    );
    assert_eq!(get(h, "access-control-max-age"), Some("5"));
    assert_eq!(
        get(h, "vary"),
        Some("origin, access-control-request-method, access-control-request-headers")
    );
    assert!(h.values().all(|v| v != "*"), "{h:?}");

    // Without Access-Control-Request-Headers there is nothing to echo: the header is left out.
    let p = preflight(
        &wildcards(true),
        &[
            ("origin", "https://other.foo.com"),
            ("access-control-request-method", "PUT"),
        ],
    );
    assert_eq!(get(&p.headers, "access-control-allow-headers"), None);
}

#[test]
fn without_credentials_wildcards_answer_star() {
    let p = preflight(
        &wildcards(false),
        &[
            ("origin", "https://other.foo.com"),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "x-header-1"),
        ],
    );
    let h = &p.headers;
    assert_eq!(get(h, "access-control-allow-origin"), Some("*"));
    assert_eq!(get(h, "access-control-allow-methods"), Some("*"));
    assert_eq!(get(h, "access-control-allow-headers"), Some("*"));
    assert_eq!(get(h, "access-control-expose-headers"), Some("*, x-named"));
    assert_eq!(get(h, "access-control-allow-credentials"), None);
    assert_eq!(
        get(h, "vary"),
        None,
        "the answer is the same for every origin"
    );
}

#[test]
fn unset_lists_leave_their_headers_out() {
    let cors = Cors {
        allow_methods: Allowed::Unset,
        allow_headers: Allowed::headers(&[]),
        expose_headers: Expose::new(Vec::new(), false),
        allow_credentials: false,
        ..listed()
    };
    let p = preflight(
        &cors,
        &[
            ("origin", "https://www.foo.com"),
            ("access-control-request-method", "GET"),
        ],
    );
    for name in [
        "access-control-allow-methods",
        "access-control-allow-headers",
        "access-control-expose-headers",
        "access-control-allow-credentials",
    ] {
        assert_eq!(get(&p.headers, name), None, "{name}");
    }
    assert_eq!(
        get(&p.headers, "access-control-allow-origin"),
        Some("https://www.foo.com")
    );
}

#[test]
fn an_actual_response_gets_origin_credentials_and_exposed_headers_only() {
    let out = actual(
        &listed(),
        Method::PUT,
        &[("origin", "https://www.foo.com")],
        &[("content-type", "text/plain")],
    );
    assert_eq!(
        get(&out, "access-control-allow-origin"),
        Some("https://www.foo.com")
    );
    assert_eq!(get(&out, "access-control-allow-credentials"), Some("true"));
    assert_eq!(
        get(&out, "access-control-expose-headers"),
        Some("x-header-3, x-header-4")
    );
    assert_eq!(get(&out, "access-control-allow-methods"), None);
    assert_eq!(get(&out, "access-control-max-age"), None);
    assert_eq!(get(&out, "vary"), Some("origin"));
    assert_eq!(get(&out, "content-type"), Some("text/plain"));
}

#[test]
fn the_backends_own_cors_headers_are_replaced() {
    let backend = [
        ("access-control-allow-origin", "*"),
        ("access-control-allow-methods", "DELETE"),
        ("access-control-max-age", "86400"),
        ("vary", "Accept-Encoding"),
    ];
    let out = actual(
        &listed(),
        Method::GET,
        &[("origin", "https://evil.example")],
        &backend,
    );
    assert!(
        out.keys()
            .all(|k| !k.as_str().starts_with("access-control-")),
        "a denied origin gets none, not the backend's: {out:?}"
    );
    assert_eq!(
        out.get_all("vary").iter().collect::<Vec<_>>(),
        ["Accept-Encoding", "origin"]
    );
    let out = actual(
        &listed(),
        Method::GET,
        &[("origin", "https://www.foo.com")],
        &backend,
    );
    assert_eq!(
        out.get_all("access-control-allow-origin")
            .iter()
            .collect::<Vec<_>>(),
        ["https://www.foo.com"]
    );
    assert_eq!(get(&out, "access-control-allow-methods"), None);
}

#[test]
fn vary_origin_is_added_once_and_never_to_vary_star() {
    let out = actual(&listed(), Method::GET, &[], &[("vary", "Origin, Accept")]);
    assert_eq!(out.get_all("vary").iter().count(), 1);
    let out = actual(&listed(), Method::GET, &[], &[("vary", "*")]);
    assert_eq!(out.get_all("vary").iter().collect::<Vec<_>>(), ["*"]);
    // A request without Origin gets no CORS headers, but the Vary still (a cache must not
    // give its answer to a cross-origin request).
    let out = actual(&listed(), Method::GET, &[], &[]);
    assert_eq!(get(&out, "vary"), Some("origin"));
    assert_eq!(get(&out, "access-control-allow-origin"), None);
}

#[test]
fn a_credentialed_request_gets_no_cors_headers_unless_credentials_are_allowed() {
    let cookie = [("origin", "https://other.foo.com"), ("cookie", "s=1")];
    let out = actual(&wildcards(false), Method::GET, &cookie, &[]);
    assert_eq!(get(&out, "access-control-allow-origin"), None);
    let out = actual(&wildcards(true), Method::GET, &cookie, &[]);
    assert_eq!(
        get(&out, "access-control-allow-origin"),
        Some("https://other.foo.com"),
        "echoed, never `*`"
    );
    assert_eq!(get(&out, "access-control-allow-credentials"), Some("true"));

    // A script's own Authorization (a bearer token) is not a credential in the Fetch sense.
    let bearer = [
        ("origin", "https://other.foo.com"),
        ("authorization", "Bearer t"),
    ];
    let out = actual(&wildcards(false), Method::GET, &bearer, &[]);
    assert_eq!(get(&out, "access-control-allow-origin"), Some("*"));
    assert_eq!(get(&out, "access-control-allow-credentials"), None);
}

#[test]
fn an_exposed_wildcard_with_credentials_names_the_responses_headers() {
    let out = actual(
        &wildcards(true),
        Method::GET,
        &[("origin", "https://other.foo.com")],
        &[
            ("content-type", "text/plain"),
            ("x-named", "1"),
            ("x-trace", "a"),
            ("x-trace", "b"),
        ],
    );
    assert_eq!(
        get(&out, "access-control-expose-headers"),
        Some("x-named, content-type, x-trace")
    );
    let out = actual(
        &wildcards(false),
        Method::GET,
        &[("origin", "https://other.foo.com")],
        &[("x-trace", "a")],
    );
    assert_eq!(
        get(&out, "access-control-expose-headers"),
        Some("*, x-named")
    );
}

#[test]
fn the_policy_serializes_readably() {
    let text = serde_json::to_value(listed()).unwrap();
    assert_eq!(
        text,
        serde_json::json!({
            "allowOrigins": ["https://www.foo.com:443", "https://*.bar.com:443"],
            "allowMethods": "GET, OPTIONS",
            "allowHeaders": "x-header-1, x-header-2",
            "exposeHeaders": "x-header-3, x-header-4",
            "allowCredentials": true,
            "maxAge": "3600",
        })
    );
}
