//! Precedence across routes, named after the rule each test pins.

use http::{HeaderMap, HeaderName, Method};

use super::*;
use crate::model::matcher::{HeaderMatch, PathMatch, QueryMatch, ValueMatch};

fn rule(route: &str, index: usize) -> Arc<Rule> {
    Arc::new(Rule {
        route: ObjectRef::new("ns", route),
        kind: "HTTPRoute",
        index,
        name: None,
        filters: Filters::default(),
        backends: BackendSet::default(),
        timeouts: Timeouts::default(),
        retry: None,
        session: None,
        access: None,
        traffic: None,
        health: None,
    })
}

fn hosts(hs: &[&str]) -> Vec<HostnameMatch> {
    hs.iter()
        .map(|h| HostnameMatch::parse(h).unwrap())
        .collect()
}

fn prefix(p: &str) -> RequestMatch {
    RequestMatch {
        path: PathMatch::prefix(p).unwrap(),
        ..Default::default()
    }
}

fn find<'a>(t: &'a RouteTable, host: &str, path: &str) -> Option<&'a str> {
    find_with(t, host, &Method::GET, path, None, &HeaderMap::new())
}

fn find_with<'a>(
    t: &'a RouteTable,
    host: &str,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Option<&'a str> {
    let req = RequestParts {
        method,
        path,
        query,
        headers,
    };
    t.find(host, &req).map(|e| e.rule.route.name.as_str())
}

#[test]
fn exact_hostname_beats_wildcard_even_with_a_shorter_path() {
    let mut b = RouteTable::builder();
    b.add(
        &hosts(&["*.example.com"]),
        prefix("/very/long"),
        &rule("wild", 0),
        (0, 0, 0),
    );
    b.add(
        &hosts(&["foo.example.com"]),
        prefix("/"),
        &rule("exact", 0),
        (1, 0, 0),
    );
    let t = b.build();
    assert_eq!(find(&t, "foo.example.com", "/very/long/x"), Some("exact"));
    assert_eq!(find(&t, "bar.example.com", "/very/long/x"), Some("wild"));
}

#[test]
fn longer_wildcard_beats_shorter_wildcard() {
    let mut b = RouteTable::builder();
    b.add(
        &hosts(&["*.example.com"]),
        prefix("/"),
        &rule("short", 0),
        (0, 0, 0),
    );
    b.add(
        &hosts(&["*.foo.example.com"]),
        prefix("/"),
        &rule("long", 0),
        (1, 0, 0),
    );
    let t = b.build();
    assert_eq!(find(&t, "a.foo.example.com", "/"), Some("long"));
    assert_eq!(find(&t, "a.bar.example.com", "/"), Some("short"));
}

#[test]
fn less_specific_hostname_is_used_when_the_specific_one_has_no_matching_rule() {
    let mut b = RouteTable::builder();
    b.add(
        &hosts(&["foo.example.com"]),
        prefix("/only"),
        &rule("exact", 0),
        (0, 0, 0),
    );
    b.add(&[], prefix("/"), &rule("any", 0), (1, 0, 0));
    let t = b.build();
    assert_eq!(find(&t, "foo.example.com", "/other"), Some("any"));
    assert_eq!(find(&t, "foo.example.com", "/only"), Some("exact"));
}

#[test]
fn exact_path_beats_longer_prefix_across_routes() {
    let mut b = RouteTable::builder();
    b.add(&[], prefix("/a/b/c"), &rule("prefix", 0), (0, 0, 0));
    b.add(
        &[],
        RequestMatch {
            path: PathMatch::exact("/a/b/c").unwrap(),
            ..Default::default()
        },
        &rule("exact", 0),
        (1, 0, 0),
    );
    let t = b.build();
    assert_eq!(find(&t, "h", "/a/b/c"), Some("exact"));
    assert_eq!(find(&t, "h", "/a/b/c/d"), Some("prefix"));
}

#[test]
fn longest_prefix_wins_across_routes() {
    let mut b = RouteTable::builder();
    b.add(&[], prefix("/"), &rule("root", 0), (0, 0, 0));
    b.add(&[], prefix("/v2"), &rule("v2", 0), (1, 0, 0));
    let t = b.build();
    assert_eq!(find(&t, "h", "/v2/x"), Some("v2"));
    assert_eq!(find(&t, "h", "/v2example"), Some("root"));
}

#[test]
fn method_match_beats_header_matches() {
    let mut b = RouteTable::builder();
    let hdr = HeaderMatch {
        name: HeaderName::from_static("x"),
        value: ValueMatch::Exact("1".into()),
    };
    b.add(
        &[],
        RequestMatch {
            headers: vec![hdr.clone(), hdr],
            ..Default::default()
        },
        &rule("headers", 0),
        (0, 0, 0),
    );
    b.add(
        &[],
        RequestMatch {
            method: Some(Method::GET),
            ..Default::default()
        },
        &rule("method", 0),
        (1, 0, 0),
    );
    let t = b.build();
    let mut h = HeaderMap::new();
    h.insert("x", "1".parse().unwrap());
    assert_eq!(
        find_with(&t, "h", &Method::GET, "/", None, &h),
        Some("method")
    );
    assert_eq!(
        find_with(&t, "h", &Method::POST, "/", None, &h),
        Some("headers")
    );
}

#[test]
fn more_header_matches_beat_query_matches() {
    let mut b = RouteTable::builder();
    let hdr = HeaderMatch {
        name: HeaderName::from_static("x"),
        value: ValueMatch::Exact("1".into()),
    };
    let q = QueryMatch {
        name: "q".into(),
        value: ValueMatch::Exact("1".into()),
    };
    b.add(
        &[],
        RequestMatch {
            query: vec![q.clone(), q],
            ..Default::default()
        },
        &rule("query", 0),
        (0, 0, 0),
    );
    b.add(
        &[],
        RequestMatch {
            headers: vec![hdr],
            ..Default::default()
        },
        &rule("header", 0),
        (1, 0, 0),
    );
    let t = b.build();
    let mut h = HeaderMap::new();
    h.insert("x", "1".parse().unwrap());
    assert_eq!(
        find_with(&t, "h", &Method::GET, "/", Some("q=1"), &h),
        Some("header")
    );
}

#[test]
fn oldest_route_wins_a_tie() {
    let mut b = RouteTable::builder();
    b.add(&[], prefix("/"), &rule("newer", 0), (1, 0, 0));
    b.add(&[], prefix("/"), &rule("older", 0), (0, 0, 0));
    assert_eq!(find(&b.build(), "h", "/"), Some("older"));
}

#[test]
fn first_rule_within_a_route_wins_a_tie() {
    let mut b = RouteTable::builder();
    b.add(&[], prefix("/"), &rule("r", 1), (0, 1, 0));
    b.add(&[], prefix("/"), &rule("r", 0), (0, 0, 0));
    let t = b.build();
    let req = RequestParts {
        method: &Method::GET,
        path: "/",
        query: None,
        headers: &HeaderMap::new(),
    };
    assert_eq!(t.find("h", &req).unwrap().rule.index, 0);
}

#[test]
fn no_match_returns_none() {
    let mut b = RouteTable::builder();
    b.add(
        &hosts(&["foo.example.com"]),
        prefix("/"),
        &rule("r", 0),
        (0, 0, 0),
    );
    assert_eq!(find(&b.build(), "bar.example.com", "/"), None);
}

#[test]
fn buckets_are_exact_sorted_then_longest_wildcard_then_any() {
    let mut b = RouteTable::builder();
    b.add(
        &hosts(&["b.example.com"]),
        prefix("/"),
        &rule("b", 0),
        (0, 0, 0),
    );
    b.add(
        &hosts(&["*.example.com"]),
        prefix("/"),
        &rule("w", 0),
        (1, 0, 0),
    );
    b.add(
        &hosts(&["a.example.com"]),
        prefix("/"),
        &rule("a", 0),
        (2, 0, 0),
    );
    b.add(
        &hosts(&["*.x.example.com"]),
        prefix("/"),
        &rule("wx", 0),
        (3, 0, 0),
    );
    b.add(&[], prefix("/"), &rule("any", 0), (4, 0, 0));
    let t = b.build();
    let names: Vec<String> = t
        .buckets()
        .iter()
        .map(|(h, _)| h.as_ref().map_or("*".to_string(), ToString::to_string))
        .collect();
    assert_eq!(
        names,
        vec![
            "a.example.com",
            "b.example.com",
            "*.x.example.com",
            "*.example.com",
            "*"
        ]
    );
}

/// The path index of a large bucket gives exactly what a scan gives: the first match in
/// precedence order, over exact, prefix (with and without trailing `/`, and `/`) and regex
/// paths mixed with method constraints, for paths at, under, beside and above each of them.
#[test]
fn the_path_index_agrees_with_a_scan() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let segments = ["a", "b", "ab", "c", "v1", "v2"];
    let random_path = |rng: &mut rand::rngs::StdRng| {
        let n = rng.random_range(0..4);
        let mut p = String::new();
        for _ in 0..n {
            p.push('/');
            p.push_str(segments[rng.random_range(0..segments.len())]);
        }
        if p.is_empty() || rng.random_bool(0.2) {
            p.push('/');
        }
        p
    };
    for round in 0..20 {
        let mut b = RouteTable::builder();
        let n = rng.random_range(INDEX_MIN_ENTRIES..INDEX_MIN_ENTRIES * 4);
        for i in 0..n {
            let p = random_path(&mut rng);
            let path = match rng.random_range(0..10) {
                0..=1 => PathMatch::exact(&p).unwrap(),
                2 => PathMatch::regex(&format!("{}.*", regex::escape(&p))).unwrap(),
                _ => PathMatch::prefix(&p).unwrap(),
            };
            let method = rng.random_bool(0.2).then_some(Method::POST);
            let m = RequestMatch {
                path,
                method,
                ..Default::default()
            };
            b.add(
                &hosts(&["h.example"]),
                m,
                &rule(&format!("r{i}"), 0),
                (i, 0, 0),
            );
        }
        let t = b.build();
        let (_, entries) = t.buckets()[0];
        assert!(
            t.exact["h.example"].index.is_some(),
            "round {round}: indexed"
        );
        for _ in 0..200 {
            let path = random_path(&mut rng);
            for method in [Method::GET, Method::POST] {
                let headers = HeaderMap::new();
                let req = RequestParts {
                    method: &method,
                    path: &path,
                    query: None,
                    headers: &headers,
                };
                let scanned = entries.iter().find(|e| e.matcher.matches(&req));
                let indexed = t.find("h.example", &req);
                assert_eq!(
                    indexed.map(|e| &e.rule.route.name),
                    scanned.map(|e| &e.rule.route.name),
                    "round {round}: {method} {path}"
                );
            }
        }
    }
}

#[test]
fn weighted_pick_follows_weights() {
    let wb = |w| WeightedBackend {
        weight: w,
        target: BackendTarget::Invalid,
        filters: Filters::default(),
    };
    let set = BackendSet::new(vec![wb(1), wb(0), wb(3)]);
    assert_eq!(set.total_weight, 4);
    let picks: Vec<_> = (0..4).map(|r| set.pick(r).unwrap().weight).collect();
    assert_eq!(picks, vec![1, 3, 3, 3]);
    assert!(BackendSet::new(vec![wb(0)]).pick(0).is_none());
}

#[test]
fn the_hostname_a_route_wrote_beats_a_longer_path_on_the_same_intersection() {
    // A listener for abc.example.com: both routes intersect to it. The older route wrote
    // *.example.com (or nothing), the newer abc.example.com (or *.example.com): the one that
    // wrote the more specific name wins (GatewayRouteHostnameIntersectionPrecedence), where
    // the match rank alone would pick the older, longer prefix.
    let wildcard = HostnameMatch::parse("*.example.com").unwrap().rank();
    // (older's rank and prefix, newer's rank and prefix, the path asked, the winner)
    let cases = [
        (
            wildcard,
            "/path/prefix",
            HostRank::Exact,
            "/path",
            "/path/prefix/longer",
            "newer",
        ),
        // Where the more specific route does not match, the other one still answers.
        (
            wildcard,
            "/other",
            HostRank::Exact,
            "/path",
            "/other/x",
            "older",
        ),
        // A route without hostnames ranks below one with any.
        (
            HostRank::Any,
            "/path/prefix",
            wildcard,
            "/",
            "/path/prefix",
            "newer",
        ),
    ];
    let listener = hosts(&["abc.example.com"]);
    for (older, older_prefix, newer, newer_prefix, path, winner) in cases {
        let mut b = RouteTable::builder();
        let at = (0, 0, 0);
        b.add_ranked(
            &listener,
            &[older],
            prefix(older_prefix),
            &rule("older", 0),
            at,
        );
        let at = (1, 0, 0);
        b.add_ranked(
            &listener,
            &[newer],
            prefix(newer_prefix),
            &rule("newer", 0),
            at,
        );
        assert_eq!(
            find(&b.build(), "abc.example.com", path),
            Some(winner),
            "{path}"
        );
    }
}
