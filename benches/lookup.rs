//! Route lookup cost at 10 / 1 000 / 10 000 routes, and filter application.
//!
//! Decision it informs: whether the per-listener route table (hostname buckets, each pre-sorted
//! by precedence, first match wins) is fast enough, or needs a path trie. Two shapes:
//! `per_host` (every route has its own hostname: the common multi-tenant case, one bucket hit)
//! and `shared_host` (every route on one hostname with its own path prefix: the worst case,
//! a linear scan of the bucket).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use pier::model::matcher::RequestParts;
use pier::model::{
    BackendSet, Filters, HeaderModifier, HostnameMatch, ObjectRef, PathMatch, RequestMatch,
    RouteTable, Rule, Timeouts,
};

fn rule(i: usize) -> Arc<Rule> {
    Arc::new(Rule {
        route: ObjectRef::new("bench", format!("route-{i}")),
        index: 0,
        kind: "HTTPRoute",
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

fn prefix(p: &str) -> RequestMatch {
    RequestMatch {
        path: PathMatch::prefix(p).unwrap(),
        ..Default::default()
    }
}

/// Each route: its own hostname, three rules (/api, /static, /).
fn per_host(n: usize) -> RouteTable {
    let mut b = RouteTable::builder();
    for i in 0..n {
        let host = [HostnameMatch::parse(&format!("svc-{i}.example.com")).unwrap()];
        let r = rule(i);
        for (j, p) in ["/api", "/static", "/"].iter().enumerate() {
            b.add(&host, prefix(p), &r, (i, j, 0));
        }
    }
    b.build()
}

/// Every route on one hostname, each with its own prefix.
fn shared_host(n: usize) -> RouteTable {
    let mut b = RouteTable::builder();
    let host = [HostnameMatch::parse("api.example.com").unwrap()];
    for i in 0..n {
        b.add(&host, prefix(&format!("/svc-{i}")), &rule(i), (i, 0, 0));
    }
    b.build()
}

fn lookup(c: &mut Criterion) {
    let headers = HeaderMap::new();
    let mut g = c.benchmark_group("route_lookup");
    for n in [10usize, 1_000, 10_000] {
        let t = per_host(n);
        let host = format!("svc-{}.example.com", n / 2);
        g.bench_with_input(BenchmarkId::new("per_host", n), &n, |b, _| {
            b.iter(|| {
                let req = RequestParts {
                    method: &Method::GET,
                    path: "/static/app.js",
                    query: None,
                    headers: &headers,
                };
                black_box(t.find(black_box(&host), &req).is_some())
            })
        });
        let t = shared_host(n);
        let path = format!("/svc-{}/x", n / 2);
        g.bench_with_input(BenchmarkId::new("shared_host", n), &n, |b, _| {
            b.iter(|| {
                let req = RequestParts {
                    method: &Method::GET,
                    path: &path,
                    query: None,
                    headers: &headers,
                };
                black_box(t.find(black_box("api.example.com"), &req).is_some())
            })
        });
    }
    g.finish();
}

fn filters(c: &mut Criterion) {
    let m = HeaderModifier {
        set: vec![(
            HeaderName::from_static("x-set"),
            HeaderValue::from_static("1"),
        )],
        add: vec![(
            HeaderName::from_static("x-add"),
            HeaderValue::from_static("2"),
        )],
        remove: vec![HeaderName::from_static("x-remove")],
    };
    let mut base = HeaderMap::new();
    for i in 0..10 {
        base.insert(
            HeaderName::from_bytes(format!("x-h{i}").as_bytes()).unwrap(),
            HeaderValue::from_static("v"),
        );
    }
    c.bench_function("filter/header_modifier", |b| {
        b.iter(|| {
            let mut h = base.clone();
            m.apply(&mut h);
            black_box(h)
        })
    });
}

criterion_group!(benches, lookup, filters);
criterion_main!(benches);
