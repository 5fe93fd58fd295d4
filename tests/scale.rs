//! Cluster mode at scale, against a real kube-apiserver: 5 000 HTTPRoutes and 20 000 endpoints
//! (500 Services x one 40-endpoint EndpointSlice), one Gateway listener. The built `pier`
//! binary runs as its own process (so its RSS is its own) under the RBAC identity and reports:
//! time from start to `/readyz`, RSS when ready, and the time one route change takes to be
//! served. Prints the figures; asserts only that it works.
//!
//! ```sh
//! cargo test --test scale -- --ignored --nocapture      # debug build, ~3-5 min on 2 cores
//! PIER_SCALE_ROUTES=1000 PIER_SCALE_SERVICES=100 cargo test --test scale -- --ignored --nocapture
//! ```

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use support::cluster::*;
use support::free_port;
use support::web::try_get;

const NS: &str = "scale";
const ENDPOINTS_PER_SERVICE: usize = 40;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Service `svc-{i}`'s slice: 40 endpoints at 10.x.y.z (never dialled).
fn bulk_slice(i: usize) -> Value {
    let endpoints: Vec<Value> = (0..ENDPOINTS_PER_SERVICE)
        .map(|j| {
            let ip = format!("10.{}.{}.{}", i / 250, i % 250, j + 1);
            json!({ "addresses": [ip], "conditions": { "ready": true } })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("svc-{i}-1"), "namespace": NS,
            "labels": { "kubernetes.io/service-name": format!("svc-{i}") },
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
    })
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

struct Pier(Child);

impl Drop for Pier {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn answer(url: &str) -> Option<String> {
    let r = try_get(url, &[]).await?;
    (r.status == 200).then(|| r.backend())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale measurement: minutes; run with --ignored --nocapture"]
async fn scale_5000_routes_20000_endpoints() {
    let routes = knob("PIER_SCALE_ROUTES", 5000);
    let services = knob("PIER_SCALE_SERVICES", 500);
    let c = Cluster::start().await;
    support::init();
    let port = free_port();
    let a = host_echo("a").await;
    let b = host_echo("b").await;
    c.apply(namespace(NS)).await;
    c.apply(gateway_class()).await;
    c.apply(gateway(NS, "gw", port)).await;
    backend(&c, NS, "echo-a", a.addr).await;
    backend(&c, NS, "echo-b", b.addr).await;

    let created = Instant::now();
    let mut objects: Vec<Value> = vec![];
    for i in 0..services {
        objects.push(service(NS, &format!("svc-{i}")));
        objects.push(bulk_slice(i));
    }
    for i in 1..routes {
        objects.push(http_route(
            NS,
            &format!("r{i}"),
            "gw",
            &[(
                &format!("/r{i}"),
                backend_ref(&format!("svc-{}", i % services), None),
            )],
        ));
    }
    objects.push(http_route(
        NS,
        "r0",
        "gw",
        &[("/r0", backend_ref("echo-a", None))],
    ));
    let total = objects.len();
    futures::stream::iter(objects)
        .for_each_concurrent(16, |o| {
            let c = &c;
            async move {
                c.apply_retrying(o, Duration::from_secs(60)).await;
            }
        })
        .await;
    eprintln!(
        "created {total} objects ({routes} HTTPRoutes, {services} Services with {} endpoints) in {:?}",
        services * ENDPOINTS_PER_SERVICE,
        created.elapsed()
    );

    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let log = std::fs::File::create(c.cp.dir().join("pier.log")).unwrap();
    let started = Instant::now();
    let pier = Pier(
        Command::new(env!("CARGO_BIN_EXE_pier"))
            .args([
                "run",
                "--listen-host",
                "127.0.0.1",
                "--lease-namespace",
                PIER_NS,
            ])
            .arg("--kubeconfig")
            .arg(&c.pier_kubeconfig)
            .arg("--admin")
            .arg(admin.to_string())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let pid = pier.0.id();
    let readyz = format!("http://{admin}/readyz");
    let mut peak = 0;
    loop {
        peak = peak.max(rss_kib(pid));
        if try_get(&readyz, &[]).await.is_some_and(|r| r.status == 200) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "not ready in 10 min; see {}",
            c.cp.dir().join("pier.log").display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ready = started.elapsed();
    let rss_ready = rss_kib(pid);
    let url = format!("http://127.0.0.1:{port}/r0");
    assert_eq!(answer(&url).await.as_deref(), Some("a"));

    // Let the status writer finish its first pass (5 000 route statuses), then change one route.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let changed = Instant::now();
    c.apply(http_route(
        NS,
        "r0",
        "gw",
        &[("/r0", backend_ref("echo-b", None))],
    ))
    .await;
    let applied = changed.elapsed();
    loop {
        if answer(&url).await.as_deref() == Some("b") {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(60),
            "change not served in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let change = changed.elapsed();
    let rss_after = rss_kib(pid);
    let metrics_url = format!("http://{admin}/metrics");
    let ok = "pier_status_patches_total{kind=\"HTTPRoute\",result=\"Ok\"}";
    let patched = sample(&try_get(&metrics_url, &[]).await.unwrap().text(), ok);

    // Once every route status is written, the same change again, on an idle pier.
    let written = Instant::now();
    loop {
        let m = try_get(&metrics_url, &[]).await.unwrap().text();
        if sample(&m, ok) >= routes as f64 {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(600),
            "statuses not written in 10 min"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all_written = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let changed = Instant::now();
    c.apply(http_route(
        NS,
        "r0",
        "gw",
        &[("/r0", backend_ref("echo-a", None))],
    ))
    .await;
    loop {
        if answer(&url).await.as_deref() == Some("a") {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(60),
            "change not served in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let idle_change = changed.elapsed();
    let rss_idle = rss_kib(pid);
    let log = std::fs::read_to_string(c.cp.dir().join("pier.log")).unwrap();
    for line in log
        .lines()
        .filter(|l| l.contains("published") || l.contains("ready"))
    {
        eprintln!("pier: {line}");
    }
    eprintln!(
        "all {routes} route statuses written {all_written:?} after start; the same change on an \
         idle pier served in {idle_change:?}; RSS then {} MiB",
        rss_idle / 1024
    );
    eprintln!(
        "pier (debug build): ready {ready:?} after start; RSS {} MiB when ready (peak while \
         listing {} MiB), {} MiB after the change; one route change served {change:?} after \
         the apply request was sent (the apply itself took {applied:?}); {patched} HTTPRoute \
         status patches so far",
        rss_ready / 1024,
        peak / 1024,
        rss_after / 1024,
    );
}
