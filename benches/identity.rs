//! Per-endpoint mesh identity at 20 000 endpoints (2 000 meshed Services of 10 endpoints, each
//! endpoint its own Pod; 200 ServiceAccounts, see [`account`]): what it costs the control
//! plane.
//!
//! - `identity/translate/{chain_only,spiffe}`: a whole translation (every reload re-translates
//!   everything) without and with `mesh.identity`.
//! - Memory, printed once per `cargo bench` run (resident set growth while building and holding
//!   the objects, each measured in a child process of its own; it includes allocator overhead
//!   and the peak of translation's temporaries): the Pod watch store (pier's slim
//!   [`PodObject`] vs a full `k8s_openapi` Pod decoded from the same JSON), and the translated
//!   snapshot without and with identity (per-endpoint TLS configs are shared per
//!   ServiceAccount).
//!
//! `cargo bench --bench identity`; `cargo test --benches` runs each benchmark once.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use pier::source::kube::PodObject;
use pier::translate::api::PodIdentity;
use pier::translate::manifest::parse_manifests;
use pier::translate::resources::Resources;
use pier::translate::{Settings, translate};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};

const SERVICES: usize = 2_000;
const PER_SERVICE: usize = 10;
const ACCOUNTS: usize = 200;

/// The ServiceAccount of endpoint `e` of Service `s`. Realistic (the default): a Service's Pods
/// are one Deployment's and share its ServiceAccount, so 200 accounts over 2 000 Services.
/// With `PIER_BENCH_IDENTITY_MIXED=1` every endpoint of a Service has another account (10 per
/// Service): the worst case, one TLS config per endpoint.
fn account(s: usize, e: usize) -> usize {
    if std::env::var_os("PIER_BENCH_IDENTITY_MIXED").is_some() {
        (s * PER_SERVICE + e) % ACCOUNTS
    } else {
        s % ACCOUNTS
    }
}

fn gateway(identity: bool, ca_pem: &str, client_pem: &str, key_pem: &str) -> String {
    let identity = if identity {
        "    identity: {scheme: SPIFFE}\n"
    } else {
        ""
    };
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: pier}}
spec: {{controllerName: pier.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: apps}}
spec:
  gatewayClassName: pier
  listeners:
    - {{name: http, protocol: HTTP, port: 8080, hostname: "*.example.com"}}
  tls:
    backend:
      clientCertificateRef: {{name: pier-client}}
  mesh:
    trustBundle: {{name: mesh-ca}}
{identity}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: mesh-ca, namespace: apps}}
data:
  ca-bundle.crt: |
{ca}---
apiVersion: v1
kind: Secret
metadata: {{name: pier-client, namespace: apps}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{crt}  tls.key: |
{key}"#,
        ca = indent(ca_pem),
        crt = indent(client_pem),
        key = indent(key_pem),
    )
}

const ROUTE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: TEMPLATE, namespace: apps}
spec:
  parentRefs: [{name: edge}]
  hostnames: [TEMPLATE.example.com]
  rules:
    - backendRefs: [{name: TEMPLATE, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: TEMPLATE, namespace: apps}
spec: {ports: [{name: http, port: 80}]}
"#;

/// A realistic Pod as the API server sends it in a watch (a Deployment's replica, running).
fn pod_json(i: usize) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web-{i}","namespace":"apps","uid":"3f1c2a5e-8d4b-4f6a-9b7e-{i:012}","resourceVersion":"{i}","creationTimestamp":"2026-11-26T10:00:00Z","generateName":"web-7d9f8c6b5-","labels":{{"app":"web","pod-template-hash":"7d9f8c6b5","version":"v1"}},"annotations":{{"kubectl.kubernetes.io/restartedAt":"2026-11-26T09:59:00Z","prometheus.io/scrape":"true"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8c6b5","uid":"0b7d2c4e-1a3f-4c5d-8e9f-0123456789ab","controller":true,"blockOwnerDeletion":true}}]}},"spec":{{"serviceAccountName":"sa-{sa}","serviceAccount":"sa-{sa}","nodeName":"node-{node}","containers":[{{"name":"web","image":"registry.example.com/web:1.2.3","ports":[{{"containerPort":8080,"protocol":"TCP"}}],"resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}},"limits":{{"memory":"256Mi"}}}},"env":[{{"name":"MODE","value":"prod"}}],"volumeMounts":[{{"name":"kube-api-access","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}}],"readinessProbe":{{"httpGet":{{"path":"/ready","port":8080}}}}}}],"volumes":[{{"name":"kube-api-access","projected":{{"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}}]}}}}],"restartPolicy":"Always","dnsPolicy":"ClusterFirst","schedulerName":"default-scheduler","tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}]}},"status":{{"phase":"Running","podIP":"10.{a}.{b}.{c}","podIPs":[{{"ip":"10.{a}.{b}.{c}"}}],"hostIP":"192.168.0.{node}","startTime":"2026-11-26T10:00:01Z","conditions":[{{"type":"Ready","status":"True"}},{{"type":"ContainersReady","status":"True"}},{{"type":"PodScheduled","status":"True"}}],"containerStatuses":[{{"name":"web","ready":true,"restartCount":0,"image":"registry.example.com/web:1.2.3","imageID":"registry.example.com/web@sha256:0123456789abcdef","containerID":"containerd://0123456789abcdef{i:08}","started":true,"state":{{"running":{{"startedAt":"2026-11-26T10:00:02Z"}}}}}}]}}}}"#,
        sa = i % ACCOUNTS,
        node = i % 50,
        a = (i >> 16) & 255,
        b = (i >> 8) & 255,
        c = i & 255,
    )
}

/// The world: the Gateway, `SERVICES` routes and Services, an EndpointSlice of `PER_SERVICE`
/// endpoints each, every endpoint naming its Pod, and the Pods.
fn resources(identity: bool) -> Resources {
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("key");
    let mut leaf = CertificateParams::new(Vec::<String>::new()).expect("params");
    leaf.subject_alt_names = vec![SanType::URI(
        "spiffe://cluster.local/ns/pier/sa/gateway"
            .try_into()
            .expect("URI"),
    )];
    let client = leaf.signed_by(&key, &issuer).expect("leaf");
    let mut res = Resources::default();
    let gw = gateway(
        identity,
        &ca_cert.pem(),
        &client.pem(),
        &key.serialize_pem(),
    );
    parse_manifests(&gw, &mut res).expect("gateway manifests");
    let mut tpl = Resources::default();
    parse_manifests(ROUTE, &mut tpl).expect("route manifests");
    let route = tpl.http_routes.values().next().expect("route").clone();
    let service = tpl.services.values().next().expect("service").clone();
    let ns = "apps".to_string();
    for s in 0..SERVICES {
        let name = format!("svc-{s}");
        let mut r = route.clone();
        r.metadata.name = Some(name.clone());
        r.spec.hostnames = Some(vec![format!("{name}.example.com")]);
        for rule in r.spec.rules.iter_mut().flatten() {
            for b in rule.backend_refs.iter_mut().flatten() {
                b.name = name.clone();
            }
        }
        res.http_routes.insert((ns.clone(), name.clone()), r);
        let mut svc = service.clone();
        svc.metadata.name = Some(name.clone());
        res.services.insert((ns.clone(), name.clone()), svc);
        let endpoints: Vec<String> = (0..PER_SERVICE)
            .map(|e| {
                let i = s * PER_SERVICE + e;
                format!(
                    "  - {{addresses: [\"10.{}.{}.{}\"], targetRef: {{kind: Pod, name: web-{i}}}}}\n",
                    (i >> 16) & 255,
                    (i >> 8) & 255,
                    i & 255
                )
            })
            .collect();
        let slice = format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-1, \
             namespace: apps, labels: {{kubernetes.io/service-name: {name}}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints:\n{}",
            endpoints.concat()
        );
        parse_manifests(&slice, &mut res).expect("slice");
        for e in 0..PER_SERVICE {
            let i = s * PER_SERVICE + e;
            res.pods.insert(
                (ns.clone(), format!("web-{i}")),
                PodIdentity {
                    service_account: format!("sa-{}", account(s, e)),
                },
            );
        }
    }
    res
}

/// Resident set size in KiB (`/proc/self/statm`).
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4
}

/// The measurements, each in a child process of its own (this bench re-run with
/// [`MEASURE_ENV`]), so memory freed by one is not reused by the next and hides its cost.
const MEASURES: [&str; 4] = [
    "pods_slim",
    "pods_full",
    "snapshot_chain",
    "snapshot_spiffe",
];
const MEASURE_ENV: &str = "PIER_BENCH_IDENTITY_MEASURE";

/// In a child: builds the inputs, then holds what `which` names and prints bytes of resident
/// growth per endpoint.
fn measure(which: &str) {
    let n = SERVICES * PER_SERVICE;
    let settings = Settings::default();
    let growth = |before: u64| ((rss_kib().saturating_sub(before)) * 1024) as f64 / n as f64;
    let per_endpoint = match which {
        "pods_slim" | "pods_full" => {
            let jsons: Vec<String> = (0..n).map(pod_json).collect();
            let before = rss_kib();
            if which == "pods_slim" {
                let held: Vec<PodObject> = jsons
                    .iter()
                    .map(|j| serde_json::from_str(j).expect("pod"))
                    .collect();
                assert_eq!(held[7].identity().service_account, "sa-7");
                let g = growth(before);
                black_box(held);
                g
            } else {
                let held: Vec<Pod> = jsons
                    .iter()
                    .map(|j| serde_json::from_str(j).expect("pod"))
                    .collect();
                let g = growth(before);
                black_box(held);
                g
            }
        }
        "snapshot_chain" | "snapshot_spiffe" => {
            let res = resources(which == "snapshot_spiffe");
            let before = rss_kib();
            let t = translate(&res, &settings);
            let g = growth(before);
            black_box(t);
            g
        }
        other => panic!("unknown measurement {other}"),
    };
    println!("{per_endpoint:.0}");
}

fn report_memory() {
    let exe = std::env::current_exe().expect("bench executable");
    let mut got = Vec::new();
    for which in MEASURES {
        let out = std::process::Command::new(&exe)
            .env(MEASURE_ENV, which)
            .output()
            .expect("measurement child");
        assert!(out.status.success(), "{which}: {out:?}");
        got.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    println!(
        "identity memory, {} endpoints ({ACCOUNTS} ServiceAccounts), resident growth: Pod \
         watch store {} B/Pod (pier's slim PodObject) vs {} B/Pod (a full Pod); translated \
         snapshot {} B/endpoint chain only vs {} B/endpoint with SPIFFE identity",
        SERVICES * PER_SERVICE,
        got[0],
        got[1],
        got[2],
        got[3]
    );
}

fn bench_identity(c: &mut Criterion) {
    if let Ok(which) = std::env::var(MEASURE_ENV) {
        measure(&which);
        std::process::exit(0);
    }
    // Only under `cargo bench` (criterion gets `--bench`): `cargo test --benches` stays quick.
    if std::env::args().any(|a| a == "--bench") {
        report_memory();
    }
    let settings = Settings::default();
    let mut g = c.benchmark_group("identity");
    g.sample_size(10);
    for (id, identity) in [("chain_only", false), ("spiffe", true)] {
        let res = resources(identity);
        let t = translate(&res, &settings);
        // Every endpoint is served, with its own identity when it is on.
        let mut endpoints = 0;
        t.snapshot.for_each_backend(|b| {
            endpoints += b.endpoints.len();
            assert_eq!(
                b.endpoints.iter().all(|e| e.tls.is_some()),
                identity,
                "{:?}",
                b.tls
            );
        });
        assert_eq!(endpoints, SERVICES * PER_SERVICE);
        g.bench_with_input(BenchmarkId::new("translate", id), &res, |b, res| {
            b.iter(|| black_box(translate(black_box(res), &settings)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_identity);
criterion_main!(benches);
