//! Translation cost at 1 000 and 10 000 HTTPRoutes: what a reload (any manifest change, an
//! EndpointSlice update from the cluster) costs the control plane, since every change
//! re-translates everything.
//!
//! Shape: one Gateway with one HTTP listener; every route has its own hostname, one rule with a
//! path prefix and a header match, and its own Service with an EndpointSlice of two ready
//! endpoints. The objects come from `parse_manifests` on one template of each kind, then are
//! cloned and renamed in code (parsing 10 000 routes of YAML is not what is measured here, and
//! would make `cargo test --benches` slow).
//!
//! `parse/config_maps/1000` is the other half of a reload from files: decoding YAML, per small
//! object, which is what the `--max-manifest-*` limits bound (`source::files::Limits`).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pier::translate::manifest::parse_manifests;
use pier::translate::resources::Resources;
use pier::translate::{Settings, translate};

const GATEWAY: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: apps}
spec:
  gatewayClassName: pier
  listeners:
    - {name: http, protocol: HTTP, port: 8080, hostname: "*.example.com"}
"#;

const ROUTE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: TEMPLATE, namespace: apps}
spec:
  parentRefs: [{name: edge}]
  hostnames: [TEMPLATE.example.com]
  rules:
    - matches:
        - path: {type: PathPrefix, value: /api}
          headers: [{name: x-tenant, value: blue}]
      backendRefs: [{name: TEMPLATE, port: 80}]
    - backendRefs: [{name: TEMPLATE, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: TEMPLATE, namespace: apps}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: TEMPLATE-1, namespace: apps, labels: {kubernetes.io/service-name: TEMPLATE}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: ["10.0.0.1"], conditions: {ready: true}}
  - {addresses: ["10.0.0.2"], conditions: {ready: true}}
"#;

/// A Gateway and `n` routes, each with its own Service and EndpointSlice.
fn resources(n: usize) -> Resources {
    let mut res = Resources::default();
    parse_manifests(GATEWAY, &mut res).expect("gateway manifests");
    let mut tpl = Resources::default();
    parse_manifests(ROUTE, &mut tpl).expect("route manifests");
    let route = tpl.http_routes.values().next().expect("route").clone();
    let service = tpl.services.values().next().expect("service").clone();
    let slice = tpl.endpoint_slices.values().next().expect("slice").clone();
    let ns = "apps".to_string();
    for i in 0..n {
        let name = format!("svc-{i}");
        let mut r = route.clone();
        r.metadata.name = Some(name.clone());
        r.spec.hostnames = Some(vec![format!("{name}.example.com")]);
        for rule in r.spec.rules.iter_mut().flatten() {
            for b in rule.backend_refs.iter_mut().flatten() {
                b.name = name.clone();
            }
        }
        res.http_routes.insert((ns.clone(), name.clone()), r);
        let mut s = service.clone();
        s.metadata.name = Some(name.clone());
        res.services.insert((ns.clone(), name.clone()), s);
        let mut e = slice.clone();
        let slice_name = format!("{name}-1");
        e.metadata.name = Some(slice_name.clone());
        e.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("kubernetes.io/service-name".into(), name.clone());
        res.endpoint_slices.insert((ns.clone(), slice_name), e);
    }
    res
}

fn bench_translate(c: &mut Criterion) {
    let settings = Settings::default();
    let mut g = c.benchmark_group("translate");
    g.sample_size(10);
    for n in [1_000usize, 10_000] {
        let res = resources(n);
        // Every route must be accepted, or the figure measures an error path.
        let t = translate(&res, &settings);
        let entries: usize = t
            .snapshot
            .ports
            .iter()
            .flat_map(|p| &p.listeners)
            .map(|l| l.routes.entries().count())
            .sum();
        assert_eq!(entries, 2 * n, "every rule of every route is routable");
        g.bench_with_input(BenchmarkId::new("routes", n), &res, |b, res| {
            b.iter(|| black_box(translate(black_box(res), &settings)))
        });
    }
    g.finish();
}

/// `n` small ConfigMaps (a name, a label, one key) in one multi-document text.
fn config_maps(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:07}\n  \
                 namespace: default\n  labels: {{app: demo}}\ndata:\n  key: value-{i:07}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    g.sample_size(10);
    let n = 1_000;
    let text = config_maps(n);
    g.bench_with_input(BenchmarkId::new("config_maps", n), &text, |b, text| {
        b.iter(|| {
            let mut res = Resources::default();
            parse_manifests(black_box(text), &mut res).expect("the ConfigMaps parse");
            assert_eq!(res.config_maps.len(), n);
            res
        })
    });
    g.finish();
}

criterion_group!(benches, bench_translate, bench_parse);
criterion_main!(benches);
