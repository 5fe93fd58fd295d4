//! `BackendTrafficPolicy` `rateLimit.global` against the real service: Envoy's
//! `envoyproxy/ratelimit` (built by `scripts/ratelimit.sh`) with Debian's redis-server. Two
//! pier instances share one limit (together they admit the limit, not twice it); each writes
//! the service's config (`--rate-limit-config`); a service that is down, or hangs on a dead
//! Redis, lets requests through within pier's timeout, except under `failClosed` (500).

mod support;

use std::time::{Duration, Instant};

use support::cluster::sample;
use support::web::*;
use support::*;

fn manifests(port: u16, echo: std::net::SocketAddr) -> String {
    let mut m = format!("{}---\n{}---\n", gateway(port), service("a", echo));
    m.push_str(&route("shared", "/shared", "a"));
    m.push_str("---\n");
    m.push_str(&route("strict", "/strict", "a"));
    m.push_str(
        "---
apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: tenants, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: shared}]
  rateLimit:
    global:
      rules:
        - clientSelectors: [{headers: [{name: x-tenant, type: Distinct}]}]
          limit: {requests: 5, unit: Day}
          shared: true
---
apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: strict, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: strict}]
  rateLimit:
    global:
      failClosed: true
      rules:
        - clientSelectors: [{headers: [{name: x-tenant, type: Distinct}]}]
          limit: {requests: 1000, unit: Day}
---
",
    );
    m
}

async fn status(port: u16, path: &str, tenant: &str) -> (u16, support::client::Resp) {
    let r = get(
        &format!("http://127.0.0.1:{port}{path}"),
        &[("x-tenant", tenant)],
    )
    .await;
    (r.status.as_u16(), r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_limit_and_fail_open_or_closed_without_the_service() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut rl = support::ratelimit::prepare(dir.path());
    let (port_a, port_b) = (free_port(), free_port());
    let (admin_a, admin_b) = (free_port(), free_port());
    let mut piers = vec![];
    for (name, port, admin) in [("a", port_a, admin_a), ("b", port_b, admin_b)] {
        let m = dir.path().join(format!("manifests-{name}"));
        std::fs::create_dir_all(&m).unwrap();
        std::fs::write(m.join("all.yaml"), manifests(port, echo.addr)).unwrap();
        let service = rl.grpc.to_string();
        let config = rl.config_file.display().to_string();
        // Both write the same config (the same bytes: sorted, from the same policies).
        let flags = [
            "--rate-limit-service",
            service.as_str(),
            "--rate-limit-config",
            config.as_str(),
            "--rate-limit-timeout-ms",
            "200",
        ];
        piers.push(start_pier(&m, admin, &[], &flags).await);
    }
    let config = std::fs::read_to_string(&rl.config_file).expect("pier wrote the config");
    assert!(config.contains("\"domain\": \"pier\""), "{config}");
    assert!(config.contains("header:x-tenant"), "{config}");

    rl.start_redis();
    rl.start_service();
    // The service has loaded pier's file (a probe tenant no request below uses).
    let rule = ("pier.dev/rule", "default/tenants/0");
    rl.until_loaded("pier", &[rule, ("header:x-tenant", "probe")])
        .await;

    // Ten requests for one tenant, alternating between the two instances: five get through.
    let mut admitted = 0;
    let mut refused = None;
    for i in 0..10 {
        let port = if i % 2 == 0 { port_a } else { port_b };
        let (code, r) = status(port, "/shared", "acme").await;
        match code {
            200 => admitted += 1,
            429 => refused = refused.or(Some(r)),
            other => panic!("request {i}: {other}"),
        }
    }
    assert_eq!(admitted, 5, "two instances together admit the limit once");
    let refused = refused.unwrap();
    assert_eq!(refused.headers["x-ratelimit-limit"], "5, 5;w=86400");
    assert_eq!(refused.headers["x-ratelimit-remaining"], "0");
    let reset: u64 = (refused.headers["x-ratelimit-reset"].to_str().unwrap())
        .parse()
        .unwrap();
    assert!((1..=86_400).contains(&reset), "{reset}");
    assert_eq!(
        refused.headers["retry-after"],
        refused.headers["x-ratelimit-reset"]
    );
    // Another tenant has a bucket of its own.
    assert_eq!(status(port_a, "/shared", "globex").await.0, 200);
    assert_eq!(status(port_b, "/strict", "acme").await.0, 200);
    let metrics = |admin: u16| async move {
        get(&format!("http://127.0.0.1:{admin}/metrics"), &[])
            .await
            .text()
    };
    let m = metrics(admin_a).await;
    let calls = |m: &str, r: &str| {
        sample(
            m,
            &format!("pier_proxy_rate_limit_calls_total{{result=\"{r}\"}}"),
        )
    };
    assert!(
        calls(&m, "ok") >= 3.0 && calls(&m, "overLimit") >= 1.0,
        "{m}"
    );
    let limited = |m: &str| {
        sample(
            m,
            "pier_proxy_rate_limited_total{policy=\"default/tenants\"}",
        )
    };
    assert_eq!(limited(&m) + limited(&metrics(admin_b).await), 5.0);

    // The service gone: /shared lets requests in (fail open), /strict refuses (failClosed).
    rl.service = None;
    let started = Instant::now();
    assert_eq!(status(port_a, "/shared", "acme").await.0, 200);
    assert_eq!(status(port_a, "/strict", "acme").await.0, 500);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(calls(&metrics(admin_a).await, "unreachable") >= 2.0);

    // A service whose Redis died hangs: pier's timeout (200 ms here) ends the wait.
    rl.start_service();
    rl.redis = None;
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(status(port_b, "/shared", "initech").await.0, 200);
        assert_eq!(status(port_b, "/strict", "initech").await.0, 500);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    let m = metrics(admin_b).await;
    assert!(calls(&m, "timeout") + calls(&m, "error") >= 6.0, "{m}");
    drop(piers);
}
