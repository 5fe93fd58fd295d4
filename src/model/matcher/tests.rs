use super::*;

fn req<'a>(
    method: &'a Method,
    path: &'a str,
    query: Option<&'a str>,
    headers: &'a HeaderMap,
) -> RequestParts<'a> {
    RequestParts {
        method,
        path,
        query,
        headers,
    }
}

fn path_matches(m: &PathMatch, path: &str) -> bool {
    m.matches(path)
}

macro_rules! path_test {
    ($name:ident, $m:expr, matches = [$($yes:expr),*], rejects = [$($no:expr),*]) => {
        #[test]
        fn $name() {
            let m = $m;
            $(assert!(path_matches(&m, $yes), "{:?} should match {}", m, $yes);)*
            $(assert!(!path_matches(&m, $no), "{:?} should not match {}", m, $no);)*
        }
    };
}

path_test!(
    prefix_matches_whole_segments,
    PathMatch::prefix("/abc").unwrap(),
    matches = ["/abc", "/abc/", "/abc/def"],
    rejects = ["/abcd", "/ab", "/"]
);
path_test!(
    prefix_trailing_slash_is_ignored,
    PathMatch::prefix("/abc/").unwrap(),
    matches = ["/abc", "/abc/def"],
    rejects = ["/abcd"]
);
path_test!(
    prefix_v2_does_not_match_v2example,
    PathMatch::prefix("/v2").unwrap(),
    matches = ["/v2", "/v2/", "/v2/example"],
    rejects = ["/v2example"]
);
path_test!(
    prefix_root_matches_everything,
    PathMatch::prefix("/").unwrap(),
    matches = ["/", "/a", "/a/b"],
    rejects = []
);
path_test!(
    exact_matches_only_the_same_path,
    PathMatch::exact("/exact").unwrap(),
    matches = ["/exact"],
    rejects = ["/exact/", "/exactly", "/Exact"]
);
path_test!(
    regex_matches_the_whole_path,
    PathMatch::regex(r"/foo/\d+").unwrap(),
    matches = ["/foo/12"],
    rejects = ["/foo/12/x", "/x/foo/12", "/foo/"]
);
path_test!(
    path_matching_is_case_sensitive,
    PathMatch::prefix("/Abc").unwrap(),
    matches = ["/Abc/x"],
    rejects = ["/abc/x"]
);

#[test]
fn relative_paths_are_invalid() {
    assert!(matches!(
        PathMatch::prefix("abc"),
        Err(InvalidMatch::PathNotAbsolute)
    ));
    assert!(matches!(
        PathMatch::exact(""),
        Err(InvalidMatch::PathNotAbsolute)
    ));
    assert!(matches!(
        PathMatch::regex("(unclosed"),
        Err(InvalidMatch::Regex(_))
    ));
}

#[test]
fn header_names_are_case_insensitive_values_are_not() {
    let m = HeaderMatch {
        name: HeaderName::from_bytes(b"X-Version").unwrap(),
        value: ValueMatch::Exact("One".into()),
    };
    let mut h = HeaderMap::new();
    h.insert("x-version", "One".parse().unwrap());
    assert!(m.matches(&h));
    h.insert("x-version", "one".parse().unwrap());
    assert!(!m.matches(&h));
}

#[test]
fn repeated_header_matches_any_value() {
    let m = HeaderMatch {
        name: HeaderName::from_static("x-a"),
        value: ValueMatch::Exact("2".into()),
    };
    let mut h = HeaderMap::new();
    h.append("x-a", "1".parse().unwrap());
    h.append("x-a", "2".parse().unwrap());
    assert!(m.matches(&h));
}

#[test]
fn header_regex_matches_the_whole_value() {
    let m = HeaderMatch {
        name: HeaderName::from_static("x-a"),
        value: ValueMatch::regex("v[0-9]").unwrap(),
    };
    let mut h = HeaderMap::new();
    h.insert("x-a", "v1".parse().unwrap());
    assert!(m.matches(&h));
    h.insert("x-a", "v1x".parse().unwrap());
    assert!(!m.matches(&h));
}

#[test]
fn query_param_first_occurrence_decides_and_is_decoded() {
    let m = QueryMatch {
        name: "animal".into(),
        value: ValueMatch::Exact("big whale".into()),
    };
    assert!(m.matches("animal=big%20whale"));
    assert!(m.matches("x=1&animal=big+whale&animal=dolphin"));
    assert!(!m.matches("animal=dolphin&animal=big+whale"));
    assert!(!m.matches("Animal=big+whale"));
}

#[test]
fn all_conditions_of_a_match_must_hold() {
    let m = RequestMatch {
        path: PathMatch::prefix("/a").unwrap(),
        method: Some(Method::POST),
        headers: vec![HeaderMatch {
            name: HeaderName::from_static("x-a"),
            value: ValueMatch::Exact("1".into()),
        }],
        query: vec![QueryMatch {
            name: "q".into(),
            value: ValueMatch::Exact("1".into()),
        }],
        grpc: None,
    };
    let mut h = HeaderMap::new();
    h.insert("x-a", "1".parse().unwrap());
    assert!(m.matches(&req(&Method::POST, "/a/b", Some("q=1"), &h)));
    assert!(!m.matches(&req(&Method::GET, "/a/b", Some("q=1"), &h)));
    assert!(!m.matches(&req(&Method::POST, "/b", Some("q=1"), &h)));
    assert!(!m.matches(&req(&Method::POST, "/a/b", None, &h)));
    assert!(!m.matches(&req(&Method::POST, "/a/b", Some("q=1"), &HeaderMap::new())));
}

#[test]
fn exact_beats_prefix_of_any_length() {
    let exact = RequestMatch {
        path: PathMatch::exact("/a").unwrap(),
        ..Default::default()
    };
    let prefix = RequestMatch {
        path: PathMatch::prefix("/a/very/long/prefix").unwrap(),
        ..Default::default()
    };
    assert!(exact.rank() > prefix.rank());
}

#[test]
fn longer_prefix_beats_shorter_prefix() {
    let long = RequestMatch {
        path: PathMatch::prefix("/abc").unwrap(),
        ..Default::default()
    };
    let short = RequestMatch {
        path: PathMatch::prefix("/ab").unwrap(),
        ..Default::default()
    };
    assert!(long.rank() > short.rank());
    assert!(short.rank() > RequestMatch::default().rank());
}

#[test]
fn method_beats_headers_and_headers_beat_query() {
    let method = RequestMatch {
        method: Some(Method::GET),
        ..Default::default()
    };
    let hdr = HeaderMatch {
        name: HeaderName::from_static("x"),
        value: ValueMatch::Exact("1".into()),
    };
    let qry = QueryMatch {
        name: "q".into(),
        value: ValueMatch::Exact("1".into()),
    };
    let headers = RequestMatch {
        headers: vec![hdr.clone(), hdr.clone()],
        ..Default::default()
    };
    let query = RequestMatch {
        query: vec![qry.clone(), qry.clone(), qry],
        ..Default::default()
    };
    assert!(method.rank() > headers.rank());
    assert!(headers.rank() > query.rank());
}

#[test]
fn more_headers_beat_fewer_headers() {
    let hdr = HeaderMatch {
        name: HeaderName::from_static("x"),
        value: ValueMatch::Exact("1".into()),
    };
    let two = RequestMatch {
        headers: vec![hdr.clone(), hdr.clone()],
        ..Default::default()
    };
    let one = RequestMatch {
        headers: vec![hdr],
        ..Default::default()
    };
    assert!(two.rank() > one.rank());
}
