//! Cluster mode end to end, against a real kube-apiserver + etcd (`support::apiserver`), with
//! pier running in-process as ServiceAccount `pier-system/pier` under `config/rbac/` (never
//! as admin). Objects are written through the API; traffic goes to echo backends on this host
//! that EndpointSlices point at (on a local non-loopback address: the API server rejects
//! loopback endpoint addresses, see `support::cluster::host_ip`).
//!
//! Needs the binaries from `scripts/control-plane.sh build`; fails (does not skip) without them.
//! `PIER_TEST_OUTAGE_SECS` shortens the API server outage (default: the real 30 s).
//!
//! Mesh mTLS from the cluster (`meshed_routes_follow_the_cluster`): BackendTLSPolicy, a
//! Namespace label flip, trust-bundle rotation through a ConfigMap and a ClusterTrustBundle,
//! against an mTLS workload (`support::mesh::Workload`) that also answers plaintext.
//!
//! pier's own SecurityPolicy (`security_policies_from_the_cluster`): an optional kind whose
//! CRD may come later, read into `Resources`, its `status.ancestors` written next to another
//! controller's.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::apiserver::poll;
use support::cluster::*;
use support::web::{get, try_get};
use support::{init, mesh};

const APP: &str = "app";
const BACKEND: &str = "backend";
const OTHER_CONTROLLER: &str = "example.com/other-controller";
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The objects every test starts from: class, Gateway `app/gw` on `port`, Services `v1` and
/// `v2` in `app`, `remote` in `backend`, and HTTPRoute `app/web` sending `/v` to `v1`.
struct World {
    port: u16,
    _echoes: Vec<pier::echo::EchoServer>,
}

async fn world(c: &Cluster) -> World {
    init();
    let port = listener_port();
    let v1 = host_echo("v1").await;
    let v2 = host_echo("v2").await;
    let remote = host_echo("remote").await;
    c.apply(namespace(APP)).await;
    c.apply(namespace(BACKEND)).await;
    c.apply(gateway_class()).await;
    c.apply(gateway(APP, "gw", port)).await;
    backend(c, APP, "v1", v1.addr).await;
    backend(c, APP, "v2", v2.addr).await;
    backend(c, BACKEND, "remote", remote.addr).await;
    c.apply(web_route("/v", backend_ref("v1", None), None))
        .await;
    World {
        port,
        _echoes: vec![v1, v2, remote],
    }
}

/// HTTPRoute `app/web`: `/v` to `v`, and optionally `/remote` to `backend/remote`.
fn web_route(prefix: &str, v: Value, remote: Option<Value>) -> Value {
    let mut rules = vec![(prefix, v)];
    if let Some(r) = remote {
        rules.push(("/remote", r));
    }
    http_route(APP, "web", "gw", &rules)
}

impl World {
    fn url(&self, host: IpAddr, path: &str) -> String {
        format!("http://{}{path}", SocketAddr::new(host, self.port))
    }

    /// Status code and (for 200) the echo backend's name; status 0 when nothing listens.
    async fn answer(&self, path: &str) -> (u16, String) {
        let Some(r) = try_get(&self.url(LOOPBACK, path), &[]).await else {
            return (0, String::new());
        };
        let backend = if r.status == 200 {
            r.backend()
        } else {
            String::new()
        };
        (r.status.as_u16(), backend)
    }

    /// Waits until `path` answers `status` (and `backend`); returns how long it took.
    async fn until(&self, path: &str, status: u16, backend: &str, bound: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let got = self.answer(path).await;
            if got == (status, backend.to_string()) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < bound,
                "{path}: still {got:?} after {bound:?}, want {status} {backend}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A client that sends `GET url` every 20 ms and counts the answers that are not 200.
struct Traffic {
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Traffic {
    fn start(url: String) -> Self {
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let (ok, failed, stop) = (ok.clone(), failed.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match try_get(&url, &[]).await {
                        Some(r) if r.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                        other => {
                            eprintln!("request failed: {:?}", other.map(|r| r.status));
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        Self {
            ok,
            failed,
            stop,
            task,
        }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// (answered 200, failed).
    async fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

async fn route_status_when<F: Fn(&Value) -> bool>(c: &Cluster, what: &str, f: F) -> Value {
    status_when(c, "HTTPRoute", "web", what, f).await
}

/// Waits until `f` holds for the status of `kind` `app/name`. Each object's status is its own
/// write: a route's may land before its Gateway's.
async fn status_when<F: Fn(&Value) -> bool>(
    c: &Cluster,
    kind: &str,
    name: &str,
    what: &str,
    f: F,
) -> Value {
    let deadline = Instant::now() + STATUS_BOUND;
    loop {
        let s = c.status(kind, Some(APP), name).await;
        if f(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{kind} {APP}/{name} status never {what}: {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether pier's parent entry of a route's status has `Accepted: True`.
fn accepted(s: &Value) -> bool {
    our_parent(s)
        .and_then(|p| condition(&p["conditions"], "Accepted"))
        .is_some_and(|c| c["status"] == "True")
}

/// Whether the Gateway status' first listener supports `kind` and has `n` routes attached.
fn listener_has(kind: &str, n: u64) -> impl Fn(&Value) -> bool {
    move |gw| {
        let l = &gw["listeners"][0];
        l["supportedKinds"][0]["kind"] == kind && l["attachedRoutes"] == n
    }
}

/// (status, reason, observedGeneration) of pier's condition `type_` on route `app/web`.
fn route_condition(status: &Value, type_: &str) -> Option<(String, String, i64)> {
    let c = condition(&our_parent(status)?["conditions"], type_)?;
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
        c["observedGeneration"].as_i64()?,
    ))
}

fn cond(status: &str, reason: &str, generation: i64) -> Option<(String, String, i64)> {
    Some((status.to_string(), reason.to_string(), generation))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_follow_the_api_under_least_privilege() {
    let c = Cluster::start().await;
    let w = world(&c).await;
    // Another controller already reports on this route (for a parent of its own).
    let theirs = json!({
        "parentRef": { "name": "their-gateway" },
        "controllerName": OTHER_CONTROLLER,
        "conditions": [{ "type": "Accepted", "status": "True", "reason": "Accepted",
                         "message": "theirs", "observedGeneration": 1,
                         "lastTransitionTime": "2020-01-01T00:00:00Z" }],
    });
    c.patch_status_as(
        OTHER_CONTROLLER,
        "HTTPRoute",
        APP,
        "web",
        json!({ "parents": [theirs] }),
    )
    .await;

    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));

    // Status, read back through the API.
    let s = route_status_when(&c, "accepted", |s| {
        route_condition(s, "Accepted") == cond("True", "Accepted", 1)
    })
    .await;
    assert_eq!(
        route_condition(&s, "ResolvedRefs"),
        cond("True", "ResolvedRefs", 1)
    );
    let parents = s["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 2, "{s:#}");
    assert_eq!(
        parents[0], theirs,
        "the other controller's entry is untouched"
    );

    let gw = status_when(&c, "Gateway", "gw", "with the route attached", |gw| {
        gw["listeners"][0]["attachedRoutes"] == 1
    })
    .await;
    for t in ["Accepted", "Programmed"] {
        let cnd = condition(&gw["conditions"], t).unwrap_or_else(|| panic!("{t}: {gw:#}"));
        assert_eq!(cnd["status"], "True", "{gw:#}");
        assert_eq!(cnd["observedGeneration"], 1);
        assert!(cnd["lastTransitionTime"].is_string());
    }
    assert_eq!(gw["listeners"][0]["name"], "http");
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 1);

    poll(STATUS_BOUND, "GatewayClass status written", || async {
        let class = c.status("GatewayClass", None, "pier").await;
        condition(&class["conditions"], "Accepted").is_some()
    })
    .await;
    let class = c.status("GatewayClass", None, "pier").await;
    let accepted = condition(&class["conditions"], "Accepted").unwrap();
    assert_eq!(accepted["status"], "True");
    let version = condition(&class["conditions"], "SupportedVersion").unwrap();
    assert_eq!(version["status"], "True");
    assert_eq!(
        version["message"],
        format!("Gateway API {} is supported", pier::crds::BUNDLE_VERSION),
        "the CRDs' bundle-version annotation was read under pier's RBAC"
    );
    let features = class["supportedFeatures"].as_array().unwrap();
    assert!(
        features.contains(&json!({ "name": "HTTPRoute" })),
        "{class:#}"
    );
    let accepted_at = accepted["lastTransitionTime"].clone();

    // Server-side apply under one field manager, on the status subresource.
    let route = c.get(GATEWAY_V1, "HTTPRoute", Some(APP), "web").await;
    let managers: Vec<(String, Option<String>)> = route
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.manager.unwrap_or_default(), m.subresource))
        .collect();
    assert!(
        managers.contains(&(
            pier::status_writer::FIELD_MANAGER.to_string(),
            Some("status".to_string())
        )),
        "{managers:?}"
    );

    // Edit the route: the new backend within a second; status follows the generation.
    c.apply(web_route("/v", backend_ref("v2", None), None))
        .await;
    let took = w.until("/v/x", 200, "v2", Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(1), "took {took:?}");
    route_status_when(&c, "at generation 2", |s| {
        route_condition(s, "Accepted") == cond("True", "Accepted", 2)
    })
    .await;

    // Cross-namespace backend: 500 without a ReferenceGrant, served with one, 500 again
    // without.
    c.apply(web_route(
        "/v",
        backend_ref("v2", None),
        Some(backend_ref("remote", Some(BACKEND))),
    ))
    .await;
    w.until("/remote", 500, "", Duration::from_secs(5)).await;
    let s = route_status_when(&c, "RefNotPermitted", |s| {
        route_condition(s, "ResolvedRefs") == cond("False", "RefNotPermitted", 3)
    })
    .await;
    assert_eq!(route_condition(&s, "Accepted"), cond("True", "Accepted", 3));
    c.apply(reference_grant(BACKEND, "routes-from-app", APP))
        .await;
    w.until("/remote", 200, "remote", Duration::from_secs(5))
        .await;
    route_status_when(&c, "resolved", |s| {
        route_condition(s, "ResolvedRefs") == cond("True", "ResolvedRefs", 3)
    })
    .await;
    c.delete(
        GATEWAY_V1,
        "ReferenceGrant",
        Some(BACKEND),
        "routes-from-app",
    )
    .await;
    w.until("/remote", 500, "", Duration::from_secs(5)).await;

    // Delete the route: 404.
    c.delete(GATEWAY_V1, "HTTPRoute", Some(APP), "web").await;
    w.until("/v/x", 404, "", Duration::from_secs(5)).await;

    // The class never changed, so its transition time did not either.
    let class = c.status("GatewayClass", None, "pier").await;
    assert_eq!(
        condition(&class["conditions"], "Accepted").unwrap()["lastTransitionTime"],
        accepted_at
    );
    let m = metrics(&pier).await;
    assert!(
        sample(
            &m,
            "pier_status_patches_total{kind=\"HTTPRoute\",result=\"Ok\"}"
        ) >= 3.0,
        "{m}"
    );
    assert_eq!(sample(&m, "pier_status_leader"), 1.0);
    assert_eq!(
        sample(
            &m,
            "pier_status_patches_total{kind=\"HTTPRoute\",result=\"TimedOut\"}"
        ),
        0.0
    );
    pier.shutdown().await;
}

/// Without the Gateway API CRDs pier runs, says why it is not ready, and starts serving once
/// they are installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_the_gateway_api_crds() {
    let c = Cluster::start_without_crds().await;
    init();
    let running = pier::run::start(c.pier_options(LOOPBACK, "replica-a"))
        .await
        .expect("pier starts without CRDs");
    let readyz = format!("http://{}/readyz", running.admin_addr);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(get(&readyz, &[]).await.status, 503);
    let healthz = format!("http://{}/healthz", running.admin_addr);
    assert_eq!(get(&healthz, &[]).await.status, 200);
    let m = metrics(&running).await;
    assert!(
        sample(
            &m,
            "pier_kube_watch_errors_total{kind=\"HTTPRoute\",reason=\"NotFound\"}"
        ) >= 1.0,
        "{m}"
    );

    c.cp.install_crds(repo("config/crds")).await;
    let w = world(&c).await;
    wait_ready(&running).await;
    w.until("/v/x", 200, "v1", Duration::from_secs(10)).await;
    // The version is read once the CRDs exist, not assumed for good.
    let supported = format!("Gateway API {} is supported", pier::crds::BUNDLE_VERSION);
    poll(STATUS_BOUND, "SupportedVersion from the CRDs", || async {
        let class = c.status("GatewayClass", None, "pier").await;
        condition(&class["conditions"], "SupportedVersion")
            .is_some_and(|v| v["message"] == supported)
    })
    .await;
    running.shutdown().await;
}

/// Seconds from the environment variable `name`, else `default`.
fn env_secs(name: &str, default: u64) -> Duration {
    let secs = std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

fn outage() -> Duration {
    env_secs("PIER_TEST_OUTAGE_SECS", 30)
}

/// kube-apiserver goes away for 30 s: pier keeps serving (a client loop sees no failure),
/// reconnects, and applies a change made after the API server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_through_an_api_server_outage_and_resyncs() {
    let mut c = Cluster::start().await;
    let w = world(&c).await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));

    let traffic = Traffic::start(w.url(LOOPBACK, "/v/x"));

    let outage = outage();
    c.cp.stop_apiserver();
    let down_at = Instant::now();
    tokio::time::sleep(outage).await;
    let served_while_down = traffic.ok();
    c.cp.start_apiserver().await;
    eprintln!("API server back after {:?}", down_at.elapsed());

    // A change made after the restart is applied (the watches reconnected and resynced).
    let changed = Instant::now();
    c.apply_retrying(
        web_route("/v", backend_ref("v2", None), None),
        Duration::from_secs(30),
    )
    .await;
    w.until("/v/x", 200, "v2", Duration::from_secs(30)).await;
    eprintln!("change after the restart served in {:?}", changed.elapsed());
    route_status_when(&c, "rewritten after the restart", |s| {
        route_condition(s, "Accepted") == cond("True", "Accepted", 2)
    })
    .await;

    let (ok, failed) = traffic.stop().await;
    eprintln!("client loop: {ok} ok ({served_while_down} before the restart), {failed} failed");
    assert_eq!(failed, 0);
    assert!(
        served_while_down as f64 >= outage.as_secs_f64() * 10.0,
        "only {served_while_down} requests during a {outage:?} outage"
    );
    let m = metrics(&pier).await;
    assert!(
        sample(
            &m,
            "pier_kube_watch_errors_total{kind=\"HTTPRoute\",reason=\"Unavailable\"}"
        ) >= 1.0,
        "{m}"
    );
    pier.shutdown().await;
}

/// How long each fault of `serves_through_api_server_errors_and_backs_off` lasts
/// (`PIER_TEST_FAULT_SECS`, default 20 s).
fn fault_phase() -> Duration {
    env_secs("PIER_TEST_FAULT_SECS", 20)
}

/// kube-apiserver stays up but misbehaves (`support::faulty_api` in front of it): every request
/// answered 500, then 429 with `Retry-After: 1`, then every watch ended by `410 Gone` while
/// lists pass. pier keeps serving (a client loop sees no failure), backs off instead of
/// hammering the API server (requests per second bounded in each phase), and applies a change
/// made once the faults end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_through_api_server_errors_and_backs_off() {
    use support::faulty_api::{Fault, FaultyApi};
    let c = Cluster::start().await;
    let w = world(&c).await;
    let api: SocketAddr =
        c.cp.server_url()
            .trim_start_matches("https://")
            .parse()
            .unwrap();
    let proxy = FaultyApi::start(api, c.cp.ca_pem()).await;
    let kubeconfig = proxy.kubeconfig(&c.pier_kubeconfig, &c.cp.server_url(), c.cp.dir());
    let pier = start_pier_with(&c, &kubeconfig).await;
    w.until("/v/x", 200, "v1", READY_BOUND).await;
    // Settled: the watches are open, the status written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let quiet = proxy.requests();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quiet_rate = (proxy.requests() - quiet) as f64 / 5.0;

    let traffic = Traffic::start(w.url(LOOPBACK, "/v/x"));
    let phase = fault_phase();
    let mut rates = Vec::new();
    for fault in [Fault::Status(500), Fault::Status(429), Fault::WatchGone] {
        let before = proxy.requests();
        proxy.set(fault);
        tokio::time::sleep(phase).await;
        rates.push((
            fault,
            (proxy.requests() - before) as f64 / phase.as_secs_f64(),
        ));
    }
    proxy.set(Fault::None);
    let healed = Instant::now();
    c.apply(web_route("/v", backend_ref("v2", None), None))
        .await;
    w.until("/v/x", 200, "v2", Duration::from_secs(60)).await;
    let served_after = healed.elapsed();
    route_status_when(&c, "written after the faults", |s| {
        route_condition(s, "Accepted") == cond("True", "Accepted", 2)
    })
    .await;
    let (ok, failed) = traffic.stop().await;
    eprintln!(
        "API requests per second: {quiet_rate:.1} settled, {rates:?} under faults of {phase:?} \
         each; change served {served_after:?} after the faults ended; client loop: {ok} ok, \
         {failed} failed"
    );
    assert_eq!(failed, 0);
    // A watch that retries without backing off makes hundreds of requests a second.
    for (fault, rate) in &rates {
        assert!(*rate < 20.0, "{rate:.1} API requests/s under {fault:?}");
    }
    let m = metrics(&pier).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("pier_kube_watch_errors_total") && !l.ends_with(" 0")),
        "{m}"
    );
    pier.shutdown().await;
}

/// Two replicas: both serve, exactly one (the Lease holder) writes status; when it stops, the
/// other takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_status_writer() {
    let c = Cluster::start().await;
    let w = world(&c).await;
    let second = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let a = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    let b = start_pier(c.pier_options(second, "replica-b")).await;
    for host in [LOOPBACK, second] {
        let r = get(&w.url(host, "/v/x"), &[]).await;
        assert_eq!(
            (r.status.as_u16(), r.backend()),
            (200, "v1".into()),
            "{host}"
        );
    }

    route_status_when(&c, "accepted", |s| {
        route_condition(s, "Accepted") == cond("True", "Accepted", 1)
    })
    .await;
    let leaders = |a: &pier::run::Running, b: &pier::run::Running| {
        [a, b].map(|r| *r.leader.as_ref().unwrap().borrow())
    };
    poll(Duration::from_secs(30), "exactly one leader", || async {
        leaders(&a, &b).iter().filter(|l| **l).count() == 1
    })
    .await;
    let (leader, follower, leader_id) = if leaders(&a, &b)[0] {
        (a, b, "replica-a")
    } else {
        (b, a, "replica-b")
    };
    let lease = c
        .get("coordination.k8s.io/v1", "Lease", Some(PIER_NS), LEASE)
        .await;
    assert_eq!(lease.data["spec"]["holderIdentity"], leader_id);

    c.apply(web_route("/v", backend_ref("v2", None), None))
        .await;
    route_status_when(&c, "at generation 2", |s| {
        route_condition(s, "Accepted") == cond("True", "Accepted", 2)
    })
    .await;
    let ok = "pier_status_patches_total{kind=\"HTTPRoute\",result=\"Ok\"}";
    // The leader counts a patch when the API server's answer reaches it, which can be just
    // after the new status is readable here.
    poll(
        Duration::from_secs(5),
        "the leader to count 2 route patches",
        || async { sample(&metrics(&leader).await, ok) >= 2.0 },
    )
    .await;
    let (lm, fm) = (metrics(&leader).await, metrics(&follower).await);
    assert_eq!(sample(&fm, ok), 0.0, "the follower wrote status:\n{fm}");
    assert_eq!(sample(&lm, "pier_status_leader"), 1.0);
    assert_eq!(sample(&fm, "pier_status_leader"), 0.0);
    // Both serve the change.
    for host in [LOOPBACK, second] {
        let url = w.url(host, "/v/x");
        poll(Duration::from_secs(5), "v2 on both replicas", || async {
            get(&url, &[]).await.backend() == "v2"
        })
        .await;
    }

    // The leader stops (releasing the Lease): the follower takes over and writes.
    leader.shutdown().await;
    poll(Duration::from_secs(30), "the follower to lead", || async {
        *follower.leader.as_ref().unwrap().borrow()
    })
    .await;
    c.apply(web_route("/w", backend_ref("v1", None), None))
        .await;
    route_status_when(&c, "at generation 3", |s| {
        route_condition(s, "Accepted") == cond("True", "Accepted", 3)
    })
    .await;
    poll(
        Duration::from_secs(5),
        "the new leader to count a patch",
        || async { sample(&metrics(&follower).await, ok) >= 1.0 },
    )
    .await;
    follower.shutdown().await;
}

/// Gateway API before v1.5 serves ReferenceGrant only as `v1beta1`: pier finds that in
/// discovery and watches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_grants_from_v1beta1_when_v1_is_not_served() {
    let c = Cluster::start_without_crds().await;
    let crds: Vec<_> = pier::crds::all()
        .into_iter()
        .map(|mut crd| {
            if crd.spec.names.kind == "ReferenceGrant" {
                crd.spec.versions[0].name = "v1beta1".to_string();
            }
            crd
        })
        .collect();
    c.cp.apply_crds(&crds).await;
    let w = world(&c).await;
    c.apply(web_route(
        "/v",
        backend_ref("v1", None),
        Some(backend_ref("remote", Some(BACKEND))),
    ))
    .await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    w.until("/remote", 500, "", Duration::from_secs(5)).await;
    let mut grant = reference_grant(BACKEND, "routes-from-app", APP);
    grant["apiVersion"] = json!("gateway.networking.k8s.io/v1beta1");
    c.apply(grant).await;
    w.until("/remote", 200, "remote", Duration::from_secs(5))
        .await;
    c.delete(
        "gateway.networking.k8s.io/v1beta1",
        "ReferenceGrant",
        Some(BACKEND),
        "routes-from-app",
    )
    .await;
    w.until("/remote", 500, "", Duration::from_secs(5)).await;
    pier.shutdown().await;
}

/// With the experimental-channel HTTPRoute CRD (the standard one prunes them), `retry` and
/// `sessionPersistence` reach pier from the API server: the route is Accepted without
/// PartiallyInvalid (status read back from the API server), and a session cookie pins requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experimental_route_fields_work_through_the_api_server() {
    use kube::CustomResourceExt;
    let c = Cluster::start_without_crds().await;
    let crds: Vec<_> = pier::crds::all()
        .into_iter()
        .map(|crd| {
            if crd.spec.names.kind != "HTTPRoute" {
                return crd;
            }
            let mut experimental = gateway_api::experimental::httproutes::HttpRoute::crd();
            experimental.metadata.annotations = crd.metadata.annotations.clone();
            experimental
        })
        .collect();
    c.cp.apply_crds(&crds).await;
    let w = world(&c).await;
    let mut route = http_route(
        APP,
        "web",
        "gw",
        &[
            ("/v", backend_ref("v1", None)),
            ("/s", backend_ref("v2", None)),
        ],
    );
    route["spec"]["rules"][0]["retry"] = json!({ "codes": [503], "attempts": 2 });
    route["spec"]["rules"][1]["sessionPersistence"] = json!({ "sessionName": "sid" });
    c.apply(route).await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    let status = route_status_when(&c, "accepted", |s| {
        route_condition(s, "Accepted").is_some_and(|(st, _, _)| st == "True")
    })
    .await;
    assert!(
        route_condition(&status, "PartiallyInvalid").is_none(),
        "{status:#}"
    );
    w.until("/s", 200, "v2", Duration::from_secs(5)).await;
    let r = get(&w.url(LOOPBACK, "/s"), &[]).await;
    let cookie = r.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("sid="), "{cookie}");
    // /config?full shows both policies as pier runs them.
    let config = get(&format!("http://{}/config?full", pier.admin_addr), &[])
        .await
        .json();
    let text = config.to_string();
    assert!(
        text.contains("\"retry\"") && text.contains("\"session\""),
        "{text}"
    );
    pier.shutdown().await;
}

/// TCPRoute `v1` (Gateway API v1.7's standard channel) from the API server: a TCP listener
/// relays connections to the route's Service (the bytes are an HTTP request the echo answers),
/// the route's status is read back, and the listener lists TCPRoute as its kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_routes_from_the_cluster() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let c = Cluster::start().await;
    let _w = world(&c).await;
    let tcp_port = listener_port();
    let mut gw = gateway(APP, "tcp", tcp_port);
    gw["spec"]["listeners"] = json!([{ "name": "db", "protocol": "TCP", "port": tcp_port }]);
    c.apply(gw).await;
    c.apply(json!({
        "apiVersion": GATEWAY_V1, "kind": "TCPRoute",
        "metadata": { "name": "db", "namespace": APP },
        "spec": {
            "parentRefs": [{ "name": "tcp", "sectionName": "db" }],
            "rules": [{ "backendRefs": [{ "name": "v2", "port": 80 }] }],
        },
    }))
    .await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    status_when(&c, "TCPRoute", "db", "Accepted", accepted).await;
    status_when(
        &c,
        "Gateway",
        "tcp",
        "listing the TCPRoute",
        listener_has("TCPRoute", 1),
    )
    .await;
    let mut tcp = tokio::net::TcpStream::connect((LOOPBACK, tcp_port))
        .await
        .unwrap();
    tcp.write_all(b"GET /over-tcp HTTP/1.1\r\nHost: db\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("v2"), "{answer}");
    drop(tcp);
    pier.shutdown().await;
}

/// A UDPRoute from the API server: the listener supports it, the route is Accepted, and a
/// client's datagram reaches the backend (a UDP echo) and its reply comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_routes_from_the_cluster() {
    let c = Cluster::start().await;
    let _w = world(&c).await;
    // On the host's address, as the other echoes (an EndpointSlice may not name loopback).
    let echo = tokio::net::UdpSocket::bind((host_ip(), 0)).await.unwrap();
    let echo_addr = echo.local_addr().unwrap();
    let echo_task = tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let reply = format!("echo: {}", String::from_utf8_lossy(&buf[..n]));
            let _ = echo.send_to(reply.as_bytes(), from).await;
        }
    });
    backend(&c, APP, "dns", echo_addr).await;
    let udp_port = listener_port();
    let mut gw = gateway(APP, "udp", udp_port);
    gw["spec"]["listeners"] = json!([{ "name": "dns", "protocol": "UDP", "port": udp_port }]);
    c.apply(gw).await;
    c.apply(json!({
        "apiVersion": GATEWAY_V1, "kind": "UDPRoute",
        "metadata": { "name": "dns", "namespace": APP },
        "spec": {
            "parentRefs": [{ "name": "udp", "sectionName": "dns" }],
            "rules": [{ "backendRefs": [{ "name": "dns", "port": 80 }] }],
        },
    }))
    .await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    status_when(&c, "UDPRoute", "dns", "Accepted", accepted).await;
    status_when(
        &c,
        "Gateway",
        "udp",
        "listing the UDPRoute",
        listener_has("UDPRoute", 1),
    )
    .await;
    let client = tokio::net::UdpSocket::bind((LOOPBACK, 0)).await.unwrap();
    client.connect((LOOPBACK, udp_port)).await.unwrap();
    client.send(b"query").await.unwrap();
    let mut buf = vec![0u8; 2048];
    let n = tokio::time::timeout(Duration::from_secs(10), client.recv(&mut buf))
        .await
        .expect("a reply within 10 s")
        .unwrap();
    assert_eq!(&buf[..n], b"echo: query");
    pier.shutdown().await;
    echo_task.abort();
}

/// `config/rbac/make-kubeconfig.sh` makes a kubeconfig pier can run with. Its kubectl is the
/// one `scripts/control-plane.sh` builds; kubectl's discovery cache goes to the test's directory,
/// never to the user's `~/.kube`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_kubeconfig_script_gives_a_working_identity() {
    let kubectl = support::apiserver::Binaries::kubectl();
    let c = Cluster::start().await;
    let w = world(&c).await;
    let out = c.cp.dir().join("script.kubeconfig");
    let cache = c.cp.dir().join("kube-cache");
    let path = std::env::join_paths(
        std::iter::once(kubectl.parent().unwrap().to_path_buf()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap();
    let status = std::process::Command::new(repo("config/rbac/make-kubeconfig.sh"))
        .arg("-o")
        .arg(&out)
        .env("KUBECONFIG", c.cp.kubeconfig_admin())
        .env("PATH", path)
        .env("KUBECACHEDIR", &cache)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(cache.is_dir(), "kubectl did not use KUBECACHEDIR");
    let mut opts = c.pier_options(LOOPBACK, "script");
    let pier::run::Source::Cluster(cluster) = &mut opts.source else {
        unreachable!()
    };
    cluster.connect.kubeconfig = Some(out);
    let pier = start_pier(opts).await;
    w.until("/v/x", 200, "v1", Duration::from_secs(5)).await;
    pier.shutdown().await;
}

// === credentials that keep working (issue 18) ===

/// Starts pier with `kubeconfig` instead of the test's own.
async fn start_pier_with(c: &Cluster, kubeconfig: &std::path::Path) -> pier::run::Running {
    let mut opts = c.pier_options(LOOPBACK, "rotating");
    let pier::run::Source::Cluster(cluster) = &mut opts.source else {
        unreachable!()
    };
    cluster.connect.kubeconfig = Some(kubeconfig.to_path_buf());
    start_pier(opts).await
}

/// Waits until pier has rebuilt its Kubernetes client `n` times with `result` (`Ok`, `Error`).
async fn until_reloads(pier: &pier::run::Running, result: &str, n: f64) {
    let series = format!("pier_kube_credential_reloads_total{{result=\"{result}\"}}");
    poll(
        Duration::from_secs(20),
        &format!("{series} >= {n}"),
        || async { sample(&metrics(pier).await, &series) >= n },
    )
    .await;
}

/// Deletes the Secret the token was bound to, and waits until the API server refuses the
/// token (so that a test passing afterwards proves pier no longer uses it).
async fn revoke(c: &Cluster, secret: &str, token: &str) {
    c.delete("v1", "Secret", Some(PIER_NS), secret).await;
    let file = c.cp.dir().join(format!("{secret}.kubeconfig"));
    std::fs::write(
        &file,
        c.cp.kubeconfig_text(&format!("    token: \"{token}\"\n")),
    )
    .unwrap();
    let client = c.cp.client_from(&file).await;
    poll(
        Duration::from_secs(15),
        &format!("the token bound to {secret} refused"),
        || {
            let client = client.clone();
            async move {
                let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
                matches!(ns.get("default").await, Err(kube::Error::Api(e)) if e.code == 401)
            }
        },
    )
    .await;
}

/// Restarts the API server, so that every watch reconnects with the credentials pier holds
/// now, then changes route `app/web` (`/v` to v1 and `prefix` to `backend`) and waits until
/// the change is served and its status written (a write with those credentials).
async fn change_after_a_restart(c: &mut Cluster, w: &World, prefix: &str, backend: &str) {
    c.cp.restart_apiserver().await;
    let route = c
        .apply_retrying(
            http_route(
                APP,
                "web",
                "gw",
                &[
                    ("/v", backend_ref("v1", None)),
                    (prefix, backend_ref(backend, None)),
                ],
            ),
            Duration::from_secs(30),
        )
        .await;
    w.until(&format!("{prefix}/x"), 200, backend, STATUS_BOUND)
        .await;
    let generation = route.metadata.generation.unwrap();
    route_status_when(c, &format!("accepted at generation {generation}"), |s| {
        route_condition(s, "Accepted") == cond("True", "Accepted", generation)
    })
    .await;
}

/// pier follows a kubeconfig whose inline token is rewritten in place, keeps its last good
/// credentials through a half-written kubeconfig, and follows a `tokenFile` as it rotates. Each
/// old token is revoked as soon as pier has the new one, and every watch then reconnects (API
/// server restart): neither the data plane nor any API request fails (no 401).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_follow_the_kubeconfig_and_its_token_file() {
    let mut c = Cluster::start().await;
    let w = world(&c).await;
    let dir = c.cp.dir().join("rotating");
    std::fs::create_dir(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let inline = |t: &str| format!("    token: \"{t}\"\n");
    let a = c.cp.bound_token(PIER_NS, PIER_SA, "pier-token-a").await;
    std::fs::write(&kubeconfig, c.cp.kubeconfig_text(&inline(&a))).unwrap();
    let pier = start_pier_with(&c, &kubeconfig).await;
    w.until("/v/x", 200, "v1", Duration::from_secs(5)).await;
    let traffic = Traffic::start(w.url(LOOPBACK, "/v/x"));

    // The inline token is rewritten in place, then the old one is revoked.
    let b = c.cp.bound_token(PIER_NS, PIER_SA, "pier-token-b").await;
    std::fs::write(&kubeconfig, c.cp.kubeconfig_text(&inline(&b))).unwrap();
    until_reloads(&pier, "Ok", 1.0).await;
    revoke(&c, "pier-token-a", &a).await;
    change_after_a_restart(&mut c, &w, "/b", "v2").await;

    // Half a kubeconfig: reported, and the last good credentials stay in use.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nusers:\n- name: [",
    )
    .unwrap();
    until_reloads(&pier, "Error", 1.0).await;
    change_after_a_restart(&mut c, &w, "/half", "v1").await;

    // The kubeconfig moves to a token file (named relative to it), which then rotates.
    let token_file = dir.join("token");
    let t1 = c.cp.bound_token(PIER_NS, PIER_SA, "pier-token-c").await;
    std::fs::write(&token_file, &t1).unwrap();
    std::fs::write(&kubeconfig, c.cp.kubeconfig_text("    tokenFile: token\n")).unwrap();
    until_reloads(&pier, "Ok", 2.0).await;
    revoke(&c, "pier-token-b", &b).await;
    let t2 = c.cp.bound_token(PIER_NS, PIER_SA, "pier-token-d").await;
    std::fs::write(&token_file, &t2).unwrap();
    until_reloads(&pier, "Ok", 3.0).await;
    revoke(&c, "pier-token-c", &t1).await;
    change_after_a_restart(&mut c, &w, "/d", "v2").await;

    let (ok, failed) = traffic.stop().await;
    eprintln!("client loop: {ok} ok, {failed} failed");
    assert_eq!(failed, 0);
    let m = metrics(&pier).await;
    assert_eq!(sample(&m, "pier_kube_unauthorized_total"), 0.0, "{m}");
    assert_eq!(
        sample(&m, "pier_kube_credential_reloads_total{result=\"Error\"}"),
        1.0,
        "{m}"
    );
    pier.shutdown().await;
}

/// An exec credential plugin (as `aws eks get-token` is used): it is run again before the
/// expiry it states (kube-rs: 60 s before), so a rotation loses no request; and when the API
/// server refuses a token before its expiry (revoked), pier runs the plugin again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_credential_plugins_refresh_before_expiry_and_after_a_revocation() {
    let mut c = Cluster::start().await;
    let w = world(&c).await;
    let dir = c.cp.dir().join("exec");
    std::fs::create_dir(&dir).unwrap();
    let plugin = dir.join("plugin");
    std::fs::write(
        &plugin,
        "#!/bin/sh\nset -e\nd=\"$(dirname \"$0\")\"\necho run >> \"$d/runs\"\n\
         exp=\"$(date -u -d \"+$(cat \"$d/lifetime\") seconds\" +%Y-%m-%dT%H:%M:%SZ)\"\n\
         printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\
         \"status\":{\"token\":\"%s\",\"expirationTimestamp\":\"%s\"}}\\n' \"$(cat \"$d/token\")\" \"$exp\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let runs = || {
        std::fs::read_to_string(dir.join("runs"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let set = |name: &str, value: &str| std::fs::write(dir.join(name), value).unwrap();
    let until_run = |after: usize| {
        poll(
            Duration::from_secs(40),
            "the plugin runs again",
            move || async move { runs() > after },
        )
    };

    // Tokens that expire 70 s after each run: kube-rs runs the plugin again 10 s after.
    let a = c.cp.bound_token(PIER_NS, PIER_SA, "pier-token-a").await;
    set("token", &a);
    set("lifetime", "70");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        c.cp.kubeconfig_text(&format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
             command: \"{}\"\n      interactiveMode: Never\n",
            plugin.display()
        )),
    )
    .unwrap();
    let pier = start_pier_with(&c, &kubeconfig).await;
    w.until("/v/x", 200, "v1", Duration::from_secs(5)).await;
    let traffic = Traffic::start(w.url(LOOPBACK, "/v/x"));

    // Rotation before expiry: the next run gives the new token, then the old one is revoked.
    let b = c.cp.bound_token(PIER_NS, PIER_SA, "pier-token-b").await;
    set("token", &b);
    until_run(runs()).await;
    revoke(&c, "pier-token-a", &a).await;
    change_after_a_restart(&mut c, &w, "/b", "v2").await;
    let m = metrics(&pier).await;
    assert_eq!(sample(&m, "pier_kube_unauthorized_total"), 0.0, "{m}");

    // Revoked before its expiry: tokens now live an hour; the first 401 runs the plugin.
    set("lifetime", "3600");
    until_run(runs()).await;
    let t = c.cp.bound_token(PIER_NS, PIER_SA, "pier-token-c").await;
    set("token", &t);
    let before = runs();
    revoke(&c, "pier-token-b", &b).await;
    change_after_a_restart(&mut c, &w, "/c", "v1").await;
    assert!(runs() > before, "the plugin did not run after the 401");
    let m = metrics(&pier).await;
    assert!(sample(&m, "pier_kube_unauthorized_total") >= 1.0, "{m}");

    let (ok, failed) = traffic.stop().await;
    eprintln!("client loop: {ok} ok, {failed} failed");
    assert_eq!(failed, 0);
    pier.shutdown().await;
}

// === mesh mTLS from the cluster ===

/// What the mesh workload saw of one request through pier (`Host: web.example`); `None`
/// while the answer is not a workload's 200.
async fn workload_seen(port: u16) -> Result<mesh::Seen, String> {
    let url = format!("http://{}/", SocketAddr::new(LOOPBACK, port));
    let Some(r) = try_get(&url, &[("host", "web.example")]).await else {
        return Err("no answer".into());
    };
    if r.status != 200 {
        return Err(format!("{} {}", r.status, r.text()));
    }
    serde_json::from_slice(&r.body).map_err(|e| format!("not the workload ({e}): {}", r.text()))
}

/// Waits until a request is answered and `f` holds of what the workload saw; returns how long
/// it took and that answer.
async fn until_seen<F: Fn(&mesh::Seen) -> bool>(
    port: u16,
    what: &str,
    f: F,
) -> (Duration, mesh::Seen) {
    let start = Instant::now();
    let mut last = Err(String::new());
    while start.elapsed() < STATUS_BOUND {
        last = workload_seen(port).await;
        if let Ok(s) = &last
            && f(s)
        {
            return (start.elapsed(), s.clone());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never {what}: last {last:?}")
}

/// Waits until requests fail with `status` (pier's answer, not the workload's).
async fn until_status(port: u16, status: u16) {
    let url = format!("http://{}/", SocketAddr::new(LOOPBACK, port));
    poll(STATUS_BOUND, &format!("status {status}"), || async {
        try_get(&url, &[("host", "web.example")])
            .await
            .is_some_and(|r| r.status == status)
    })
    .await;
}

fn is_pier(s: &mesh::Seen, pki: &mesh::MeshPki) -> bool {
    s.tls
        && s.client_uris == [mesh::PIER_ID]
        && s.client_cert_sha256.as_deref() == Some(pki.pier.leaf_sha256().as_str())
}

/// One Gateway with `spec.mesh` (the mesh CRD variant), one route to a workload that answers
/// plaintext and mTLS on one port, and everything changed through the API under pier's RBAC:
/// a BackendTLSPolicy gives TLS, a Namespace label makes the route meshed, the trust bundle
/// rotates through its ConfigMap and then moves to a ClusterTrustBundle. While the workload
/// presents a certificate the bundle does not trust, pier answers 502 and never falls back
/// to plaintext.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meshed_routes_follow_the_cluster() {
    let c = Cluster::start().await;
    c.cp.install_crds(repo("config/crds/mesh")).await;
    init();
    let pki = mesh::MeshPki::new();
    let web = mesh::Workload::spawn_on(host_ip(), &pki.workload, &pki.client_ca, true).await;
    let port = listener_port();
    let select = "    selector: {matchLabels: {mesh: enabled}}\n";
    c.apply_yaml(&mesh::namespace("gw", "")).await;
    c.apply_yaml(&mesh::namespace("app", "")).await;
    c.apply_yaml(mesh::GATEWAY_CLASS).await;
    c.apply_yaml(&mesh::pier_client_secret(&pki)).await;
    c.apply_yaml(&mesh::bundle(&[&pki.mesh_ca])).await;
    c.apply_yaml(&mesh::gateway(port, &mesh::mesh_spec(select)))
        .await;
    c.apply_yaml(&mesh::service("app", "web", web.addr)).await;
    c.apply_yaml(&mesh::route("app", "web", "", "web")).await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;

    // Not meshed, no policy: plaintext.
    let (_, s) = until_seen(port, "answered", |_| true).await;
    assert!(!s.tls, "{s:?}");

    // BackendTLSPolicy: TLS to the policy's hostname, the workload's SPIFFE ID as the SAN to
    // verify, pier's client certificate from the Gateway.
    c.apply_yaml(&mesh::config_map(
        "app",
        "web-ca",
        "ca.crt",
        &pki.mesh_ca.pem,
    ))
    .await;
    let policy = json!({
        "apiVersion": GATEWAY_V1, "kind": "BackendTLSPolicy",
        "metadata": { "name": "web-tls", "namespace": "app" },
        "spec": {
            "targetRefs": [{ "group": "", "kind": "Service", "name": "web" }],
            "validation": {
                "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "web-ca" }],
                "hostname": "web.internal",
                "subjectAltNames": [{ "type": "URI", "uri": mesh::WORKLOAD_ID }],
            },
        },
    });
    c.apply(policy).await;
    let (took, s) = until_seen(port, "TLS by BackendTLSPolicy", |s| s.tls).await;
    assert_eq!(s.sni.as_deref(), Some("web.internal"), "{s:?}");
    assert!(is_pier(&s, &pki), "{s:?}");
    eprintln!("BackendTLSPolicy applied: TLS after {took:?}");
    // Its status, read back through the API: one ancestor (the Gateway), pier's entry.
    let deadline = Instant::now() + STATUS_BOUND;
    let ancestor = loop {
        let s = c.status("BackendTLSPolicy", Some("app"), "web-tls").await;
        let ours = s["ancestors"].as_array().and_then(|a| {
            a.iter()
                .find(|e| e["controllerName"] == pier::DEFAULT_CONTROLLER_NAME)
                .cloned()
        });
        if let Some(e) = ours {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "policy status never written: {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ancestor["ancestorRef"]["kind"], "Gateway", "{ancestor:#}");
    assert_eq!(ancestor["ancestorRef"]["namespace"], "gw", "{ancestor:#}");
    assert_eq!(ancestor["ancestorRef"]["name"], "edge", "{ancestor:#}");
    for type_ in ["Accepted", "ResolvedRefs"] {
        let cond = condition(&ancestor["conditions"], type_)
            .unwrap_or_else(|| panic!("no {type_}: {ancestor:#}"));
        assert_eq!(cond["status"], "True", "{ancestor:#}");
        assert_eq!(cond["observedGeneration"], 1, "{ancestor:#}");
    }
    c.delete(GATEWAY_V1, "BackendTLSPolicy", Some("app"), "web-tls")
        .await;
    until_seen(port, "plaintext again", |s| !s.tls).await;

    // Namespace label flip: meshed, mTLS with the mesh SNI.
    c.apply_yaml(&mesh::namespace("app", "mesh: enabled")).await;
    let (took, s) = until_seen(port, "meshed", |s| s.tls).await;
    assert!(is_pier(&s, &pki), "{s:?}");
    assert_eq!(s.sni.as_deref(), Some("web.app.svc.cluster.local"));
    assert!(took < Duration::from_secs(1), "label flip took {took:?}");
    eprintln!("namespace label flip: mTLS after {took:?}");

    // The workload moves to a new mesh CA: untrusted, so 502 (and no plaintext request).
    let ca2 = mesh::Ca::new("mesh CA 2");
    let plaintext_before = web.requests().iter().filter(|s| !s.tls).count();
    web.switch(&ca2.workload(mesh::WORKLOAD_ID), true);
    until_status(port, 502).await;
    // The bundle ConfigMap rotates to the new CA: served again, on the new certificate.
    c.apply_yaml(&mesh::bundle(&[&ca2])).await;
    let (took, s) = until_seen(port, "trusting the rotated bundle", |s| s.epoch == 1).await;
    assert!(is_pier(&s, &pki), "{s:?}");
    eprintln!("trust bundle ConfigMap rotated: served after {took:?}");

    // The bundle moves to a ClusterTrustBundle (GEP-3792 reference), with a third CA.
    let ca3 = mesh::Ca::new("mesh CA 3");
    c.apply_yaml(&mesh::cluster_trust_bundle("pier-mesh-roots", &ca3.pem))
        .await;
    web.switch(&ca3.workload(mesh::WORKLOAD_ID), true);
    until_status(port, 502).await;
    let ctb = format!(
        "{}  mesh:\n    trustBundle:\n      - {{group: certificates.k8s.io, kind: \
         ClusterTrustBundle, name: pier-mesh-roots}}\n{select}",
        mesh::CLIENT_REF
    );
    c.apply_yaml(&mesh::gateway(port, &ctb)).await;
    let (_, s) = until_seen(port, "trusting the ClusterTrustBundle", |s| s.epoch == 2).await;
    assert!(is_pier(&s, &pki), "{s:?}");
    let plaintext_after = web.requests().iter().filter(|s| !s.tls).count();
    assert_eq!(
        plaintext_before, plaintext_after,
        "a meshed route never falls back to plaintext"
    );

    let m = metrics(&pier).await;
    assert_eq!(
        sample(&m, "pier_kube_objects{kind=\"ClusterTrustBundle\"}"),
        1.0,
        "{m}"
    );
    pier.shutdown().await;
}

/// Per-endpoint identity (`mesh.identity`) from the cluster: the EndpointSlice names Pod
/// `app/web-0`, pier reads its ServiceAccount through a Pod watch under its RBAC, started only
/// once a Gateway asks for identities (before that no Pod is listed). Without the
/// Pod the endpoint gets nothing (503, status NoEndpointIdentity written through the API);
/// with it, mTLS; a workload presenting another identity of the same mesh CA gets 502
/// `identity_mismatch` and no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_endpoint_identity_follows_pods_in_the_cluster() {
    let c = Cluster::start().await;
    c.cp.install_crds(repo("config/crds/mesh")).await;
    init();
    let pki = mesh::MeshPki::new();
    let web = mesh::Workload::spawn_on(host_ip(), &pki.workload, &pki.client_ca, false).await;
    let port = listener_port();
    c.apply_yaml(&mesh::namespace("gw", "")).await;
    c.apply_yaml(&mesh::namespace("app", "")).await;
    c.apply_yaml(mesh::GATEWAY_CLASS).await;
    c.apply_yaml(&mesh::pier_client_secret(&pki)).await;
    c.apply_yaml(&mesh::bundle(&[&pki.mesh_ca])).await;
    // No identity asked for at first: the chain alone is checked and Pods are not watched,
    // though the cluster has one.
    c.apply_yaml(&mesh::gateway(port, &mesh::mesh_spec("")))
        .await;
    c.apply_yaml(&mesh::pod("app", "unrelated-0", "unrelated"))
        .await;
    c.apply_yaml(&format!(
        "apiVersion: v1
kind: Service
metadata: {{name: web, namespace: app}}
spec:
  ports: [{{name: web, port: 443}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: app
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: web, port: {port}}}]
endpoints:
  - addresses: [\"{ip}\"]
    conditions: {{ready: true}}
    targetRef: {{kind: Pod, name: web-0, namespace: app}}
",
        port = web.addr.port(),
        ip = web.addr.ip()
    ))
    .await;
    c.apply_yaml(&mesh::route("app", "web", "", "web")).await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    until_seen(port, "served on the chain alone", |s| s.tls).await;
    let m = metrics(&pier).await;
    assert_eq!(sample(&m, "pier_kube_objects{kind=\"Pod\"}"), 0.0, "{m}");

    // The Gateway asks for SPIFFE identities: Pods are watched from now on, and web-0 is
    // not there yet.
    let accepted = web.accepted().len();
    let spec = format!("{}    identity: {{scheme: SPIFFE}}\n", mesh::mesh_spec(""));
    c.apply_yaml(&mesh::gateway(port, &spec)).await;
    until_status(port, 503).await;
    let deadline = Instant::now() + STATUS_BOUND;
    loop {
        let s = c.status("HTTPRoute", Some("app"), "web").await;
        let reason = our_parent(&s)
            .and_then(|p| condition(&p["conditions"], "pier.dev/BackendTLS"))
            .map(|c| (c["reason"].clone(), c["message"].clone()));
        if let Some((reason, message)) = &reason
            && reason == "NoEndpointIdentity"
        {
            assert!(
                message
                    .as_str()
                    .unwrap()
                    .contains("Pod app/web-0 is unknown"),
                "{message}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no NoEndpointIdentity: {s:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(web.accepted().len(), accepted);

    // The Pod (ServiceAccount `web`) appears: its identity is the workload's.
    c.apply_yaml(&mesh::pod("app", "web-0", "web")).await;
    let (took, s) = until_seen(port, "served once the Pod is known", |s| s.tls).await;
    assert!(is_pier(&s, &pki), "{s:?}");
    assert_eq!(s.sni.as_deref(), Some("web.app.svc.cluster.local"));
    eprintln!("Pod created: served after {took:?}");

    // Another workload of the same mesh answers at that address: refused, never sent. (A
    // request may still reach the old workload on a connection it opened before the switch
    // and has not closed yet; none may reach the new one.)
    let billing = web.switch(
        &pki.mesh_ca
            .workload("spiffe://cluster.local/ns/app/sa/billing"),
        true,
    );
    // The first 502 may be a request on the connection the workload just closed (a reset);
    // the ones after it fail the new handshake on the identity check.
    let mismatch = "pier_proxy_upstream_tls_handshakes_total{backend=\"app/web:443\",result=\"error\",reason=\"identity_mismatch\"}";
    poll(
        STATUS_BOUND,
        "a handshake refused on the identity",
        || async {
            until_status(port, 502).await;
            sample(&metrics(&pier).await, mismatch) >= 1.0
        },
    )
    .await;
    let wrong: Vec<_> = web
        .requests()
        .into_iter()
        .filter(|s| s.epoch >= billing)
        .collect();
    assert!(
        wrong.is_empty(),
        "requests to the wrong identity: {wrong:?}"
    );
    let m = metrics(&pier).await;
    assert_eq!(sample(&m, "pier_kube_objects{kind=\"Pod\"}"), 2.0, "{m}");
    pier.shutdown().await;
}

const PIER_V1ALPHA1: &str = "pier.dev/v1alpha1";

/// SecurityPolicy `app/auth`: basic auth on HTTPRoute `app/web`.
fn security_policy() -> Value {
    json!({
        "apiVersion": PIER_V1ALPHA1,
        "kind": "SecurityPolicy",
        "metadata": { "name": "auth", "namespace": APP },
        "spec": {
            "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "web" }],
            "basicAuth": { "users": { "name": "htpasswd" } },
        },
    })
}

/// pier's status for SecurityPolicy `app/auth`: one ancestor, Gateway `app/gw`.
fn security_policy_status(accepted: bool) -> pier::translate::status::BackendTlsPolicyStatus {
    use pier::translate::status::{
        BackendTlsPolicyStatus, ParentRef, PolicyAncestorStatus, PolicyCondition,
        PolicyConditionReason, PolicyConditionType,
    };
    let reason = if accepted {
        PolicyConditionReason::Accepted
    } else {
        PolicyConditionReason::Invalid
    };
    BackendTlsPolicyStatus {
        generation: Some(1),
        ancestors: vec![PolicyAncestorStatus {
            ancestor_ref: ParentRef {
                group: Some("gateway.networking.k8s.io".into()),
                kind: Some("Gateway".into()),
                namespace: Some(APP.into()),
                name: "gw".into(),
                section_name: None,
                port: None,
            },
            controller_name: pier::DEFAULT_CONTROLLER_NAME.into(),
            conditions: vec![PolicyCondition::new(
                PolicyConditionType::Accepted,
                accepted,
                reason,
                "test",
                Some(1),
            )],
        }],
    }
}

/// pier's own SecurityPolicy, under pier's RBAC: pier is ready without its CRD, picks the CRD
/// up when it is installed (no restart), reads the policy into `Resources`, and its status
/// writer writes the policy's `status.ancestors` with server-side apply, keeping another
/// controller's entry.
///
/// The status written here is given to the writer directly (what translation decides about a
/// policy is tested with translation); this is the cluster half: watch, RBAC, patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_policies_from_the_cluster() {
    use pier::source::kube::{KubeMetrics, KubeSource, WatchScope};
    use pier::status_writer::{Inputs, LeaseOptions, StatusMetrics, StatusOptions, StatusWriter};
    use pier::translate::Statuses;

    // Gateway API CRDs only: the SecurityPolicy CRD is not installed yet.
    let c = Cluster::start_without_crds().await;
    c.cp.install_crds(repo("config/crds")).await;
    let w = world(&c).await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));
    let m = metrics(&pier).await;
    assert!(
        sample(
            &m,
            "pier_kube_watch_errors_total{kind=\"SecurityPolicy\",reason=\"NotFound\"}"
        ) >= 1.0,
        "{m}"
    );

    // The CRD comes later: the watch picks it up, and the policy reaches pier's store.
    c.cp.install_crds(repo("config/crds/pier")).await;
    c.apply(security_policy()).await;
    poll(
        STATUS_BOUND,
        "the SecurityPolicy in pier's store",
        || async {
            let m = metrics(&pier).await;
            sample(&m, "pier_kube_objects{kind=\"SecurityPolicy\"}") == 1.0
        },
    )
    .await;
    pier.shutdown().await;

    // The same watches as pier's identity, read into Resources.
    let client = c.cp.client_from(&c.pier_kubeconfig).await;
    let (source, mut changes) =
        KubeSource::start(&client, &WatchScope::default(), KubeMetrics::default());
    support::bounded(changes.recv())
        .await
        .expect("every kind lists");
    let resources = source.stores.resources();
    let keys: Vec<_> = resources.security_policies.keys().cloned().collect();
    assert_eq!(keys, [(APP.to_string(), "auth".to_string())]);
    let policy = &resources.security_policies[&keys[0]];
    assert_eq!(policy.spec.target_refs[0].kind, "HTTPRoute");
    assert_eq!(policy.spec.target_refs[0].name, "web");
    assert_eq!(
        policy.spec.basic_auth.as_ref().unwrap().users.name,
        "htpasswd"
    );

    // Another controller already reports on the policy.
    let policies = c.api(PIER_V1ALPHA1, "SecurityPolicy", Some(APP));
    let theirs = json!({
        "ancestorRef": { "group": "gateway.networking.k8s.io", "kind": "Gateway",
                         "namespace": APP, "name": "their-gateway" },
        "controllerName": OTHER_CONTROLLER,
        "conditions": [{ "type": "Accepted", "status": "True", "reason": "Accepted",
                         "message": "theirs", "observedGeneration": 1,
                         "lastTransitionTime": "2020-01-01T00:00:00Z" }],
    });
    let pp = kube::api::PatchParams {
        field_manager: Some(OTHER_CONTROLLER.to_string()),
        ..Default::default()
    };
    let patch = kube::api::Patch::Merge(json!({ "status": { "ancestors": [theirs] } }));
    support::bounded(policies.patch_status("auth", &pp, &patch))
        .await
        .unwrap();

    // pier's status writer, as pier's ServiceAccount, under its own Lease.
    let mut statuses = Statuses::default();
    statuses.security_policies.insert(
        pier::model::ObjectRef::new(APP, "auth"),
        security_policy_status(true),
    );
    let (desired_tx, desired) = tokio::sync::watch::channel(Arc::new(statuses));
    let lease = LeaseOptions {
        namespace: PIER_NS.to_string(),
        name: "pier-test-security".to_string(),
        identity: "writer".to_string(),
        duration_secs: 15,
        grace_secs: 5,
    };
    let writer = StatusWriter::spawn(
        client.clone(),
        StatusOptions::new(lease),
        Inputs {
            stores: source.stores.clone(),
            desired,
            observed: source.status_changes.clone(),
            settings: pier::translate::Settings::default(),
            clock: Arc::new(pier::translate::api::Timestamp::now),
        },
        StatusMetrics::default(),
    );
    let ancestors_when = |what: &'static str, f: fn(&Value) -> bool| {
        let policies = policies.clone();
        async move {
            let deadline = Instant::now() + STATUS_BOUND;
            loop {
                let o = support::bounded(policies.get("auth")).await.unwrap();
                let ancestors = o.data["status"]["ancestors"].clone();
                if f(&ancestors) {
                    return (o, ancestors);
                }
                assert!(Instant::now() < deadline, "{what}: {ancestors:#}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let (o, ancestors) = ancestors_when("pier's ancestor, accepted", |a| {
        a.as_array().is_some_and(|a| {
            a.iter().any(|e| {
                e["controllerName"] == pier::DEFAULT_CONTROLLER_NAME
                    && e["conditions"][0]["status"] == "True"
            })
        })
    })
    .await;
    let ancestors = ancestors.as_array().unwrap().clone();
    assert_eq!(ancestors.len(), 2, "{ancestors:#?}");
    assert_eq!(
        ancestors[0], theirs,
        "the other controller's entry is untouched"
    );
    assert_eq!(ancestors[1]["ancestorRef"]["name"], "gw");
    assert_eq!(ancestors[1]["conditions"][0]["reason"], "Accepted");
    assert_eq!(ancestors[1]["conditions"][0]["observedGeneration"], 1);
    let managers: Vec<(String, Option<String>)> = o
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.manager.unwrap_or_default(), m.subresource))
        .collect();
    assert!(
        managers.contains(&(
            pier::status_writer::FIELD_MANAGER.to_string(),
            Some("status".to_string())
        )),
        "server-side apply on the status subresource: {managers:?}"
    );
    assert_eq!(o.data["spec"], security_policy()["spec"], "spec untouched");

    // The desired status changes: pier's entry follows, theirs stays.
    let mut statuses = Statuses::default();
    statuses.security_policies.insert(
        pier::model::ObjectRef::new(APP, "auth"),
        security_policy_status(false),
    );
    desired_tx.send_replace(Arc::new(statuses));
    let (_, ancestors) = ancestors_when("pier's ancestor, invalid", |a| {
        a.as_array().is_some_and(|a| {
            a.iter().any(|e| {
                e["controllerName"] == pier::DEFAULT_CONTROLLER_NAME
                    && e["conditions"][0]["status"] == "False"
            })
        })
    })
    .await;
    assert_eq!(ancestors[0], theirs);
    assert_eq!(ancestors[1]["conditions"][0]["reason"], "Invalid");
    assert_eq!(ancestors.as_array().unwrap().len(), 2);
    writer.shutdown().await;
    source.stop();
}

/// BackendTrafficPolicy `app/limit` on HTTPRoute `app/web`: `requests` per `unit`.
/// pier's ancestor entry in the status of pier.dev policy `name` (read through `policies`),
/// once its first condition has reason `want` for the policy's current generation.
async fn policy_ancestor_when(
    policies: &kube::Api<kube::api::DynamicObject>,
    name: &str,
    what: &str,
    want: &str,
) -> Value {
    let deadline = Instant::now() + STATUS_BOUND;
    loop {
        let o = support::bounded(policies.get(name)).await.unwrap();
        let ancestors = o.data["status"]["ancestors"].clone();
        let ours = ancestors.as_array().and_then(|a| {
            a.iter()
                .find(|e| e["controllerName"] == pier::DEFAULT_CONTROLLER_NAME)
                .cloned()
        });
        if let Some(a) = ours
            && a["conditions"][0]["reason"] == want
            && a["conditions"][0]["observedGeneration"] == o.metadata.generation.unwrap_or(0)
        {
            return a;
        }
        assert!(Instant::now() < deadline, "{what}: {ancestors:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Gateway API's XBackendTrafficPolicy (v1.7 experimental) from the API server, through pier's
/// RBAC: pier writes its status (an ancestor per Gateway whose routes reach the Service),
/// Accepted, then Invalid for an edit outside the API's bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_backend_traffic_policies_from_the_cluster() {
    let c = Cluster::start().await;
    let w = world(&c).await;
    let _pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));
    let policy = |percent: u64| {
        json!({
            "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
            "kind": "XBackendTrafficPolicy",
            "metadata": { "name": "budget", "namespace": APP },
            "spec": {
                "targetRefs": [{ "group": "", "kind": "Service", "name": "v1" }],
                "retryConstraint": {
                    "budget": { "percent": percent, "interval": "10s" },
                    "minRetryRate": { "count": 1, "interval": "1s" },
                },
            },
        })
    };
    c.apply(policy(10)).await;
    let policies = c.api(
        "gateway.networking.x-k8s.io/v1alpha1",
        "XBackendTrafficPolicy",
        Some(APP),
    );
    let a =
        policy_ancestor_when(&policies, "budget", "pier's ancestor, accepted", "Accepted").await;
    assert_eq!(a["ancestorRef"]["name"], "gw");
    assert_eq!(a["conditions"][0]["status"], "True");
    // pier's generated CRD does not bound percent (upstream's does): pier refuses it.
    c.apply(policy(150)).await;
    let a = policy_ancestor_when(&policies, "budget", "pier's ancestor, invalid", "Invalid").await;
    assert_eq!(a["conditions"][0]["status"], "False");
    let message = a["conditions"][0]["message"].as_str().unwrap();
    assert!(message.contains("budget.percent: 150"), "{message}");
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));
}

fn traffic_policy(requests: u64, unit: &str) -> Value {
    json!({
        "apiVersion": PIER_V1ALPHA1,
        "kind": "BackendTrafficPolicy",
        "metadata": { "name": "limit", "namespace": APP },
        "spec": {
            "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "web" }],
            "rateLimit": { "local": { "rules": [{ "limit": { "requests": requests, "unit": unit } }] } },
        },
    })
}

/// pier's BackendTrafficPolicy in cluster mode, end to end under pier's RBAC: the policy from
/// the API server limits its route (429 with the draft-03 headers), pier writes its GEP-713
/// status there, and an edit the API server takes but pier cannot use (an unknown unit) is
/// reported `Invalid` while the version in force keeps limiting; a valid edit with a
/// `compressor` compresses the route's responses; one with `healthCheck.active` checks the
/// route's endpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_traffic_policies_from_the_cluster() {
    let c = Cluster::start().await;
    let w = world(&c).await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));

    c.apply(traffic_policy(3, "Hour")).await;
    // Until pier has the policy the route is unlimited; then at most 3 more get through.
    let url = w.url(LOOPBACK, "/v/x");
    let mut admitted_after = 0;
    let limited = loop {
        let r = get(&url, &[]).await;
        if r.status == 429 {
            break r;
        }
        assert_eq!(r.status, 200);
        admitted_after += 1;
        assert!(admitted_after < 2000, "never limited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(limited.headers["x-ratelimit-limit"], "3, 3;w=3600");
    assert_eq!(limited.headers["x-ratelimit-remaining"], "0");
    assert!(limited.headers.contains_key("retry-after"));

    let policies = c.api(PIER_V1ALPHA1, "BackendTrafficPolicy", Some(APP));
    let condition_when = |what: &'static str, want: &'static str| {
        policy_ancestor_when(&policies, "limit", what, want)
    };
    let a = condition_when("pier's ancestor, accepted", "Accepted").await;
    assert_eq!(a["ancestorRef"]["name"], "gw");
    assert_eq!(a["conditions"][0]["status"], "True");

    c.apply(traffic_policy(1000, "Fortnight")).await;
    let a = condition_when("pier's ancestor, invalid", "Invalid").await;
    assert_eq!(a["conditions"][0]["status"], "False");
    let message = a["conditions"][0]["message"].as_str().unwrap();
    assert!(message.contains("limit.unit"), "{message}");
    assert!(message.contains("last valid version"), "{message}");
    assert_eq!(
        get(&url, &[]).await.status,
        429,
        "the version in force holds"
    );
    let m = metrics(&pier).await;
    assert!(
        sample(&m, "pier_proxy_rate_limited_total{policy=\"app/limit\"}") >= 2.0,
        "{m}"
    );

    // Valid again, with a compressor: the route's responses come gzipped to a client that
    // accepts it (the echo's JSON), as the API server's version says.
    let mut p = traffic_policy(1000, "Hour");
    p["spec"]["compressor"] = json!([{ "type": "Gzip" }]);
    c.apply(p).await;
    condition_when("pier's ancestor, accepted again", "Accepted").await;
    let deadline = Instant::now() + STATUS_BOUND;
    let r = loop {
        let r = get(&url, &[("accept-encoding", "gzip")]).await;
        if r.status == 200
            && r.headers
                .get("content-encoding")
                .is_some_and(|v| v == "gzip")
        {
            break r;
        }
        assert!(Instant::now() < deadline, "never compressed: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut json = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&r.body[..]), &mut json).unwrap();
    let echo: pier::echo::EchoRequest = serde_json::from_slice(&json).unwrap();
    assert_eq!(echo.backend, "v1");
    assert_eq!(r.headers["vary"], "accept-encoding");

    // An active health check from the API server's version: v1's only endpoint answers the
    // check's path with 503, so it is taken out; as the backend's last endpoint it still gets
    // the requests (a panic threshold of 0 %).
    let mut p = traffic_policy(1000, "Hour");
    p["spec"]["healthCheck"] = json!({ "active": {
        "type": "HTTP", "interval": "100ms", "unhealthyThreshold": 1,
        "http": { "path": "/status/503" },
    } });
    c.apply(p).await;
    condition_when("pier's ancestor, accepted with a health check", "Accepted").await;
    let series = "pier_proxy_unhealthy_endpoints{backend=\"app/v1:80\"}";
    poll(STATUS_BOUND, "v1's endpoint taken out", || async {
        sample(&metrics(&pier).await, series) == 1.0
    })
    .await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));
    assert!(
        sample(
            &metrics(&pier).await,
            "pier_proxy_health_checks_total{backend=\"app/v1:80\",result=\"unhealthy\"}"
        ) >= 1.0
    );
    pier.shutdown().await;
}

/// SecurityPolicy `extAuth` in cluster mode, under pier's RBAC: the policy and the
/// authorizer's Service come from the API server; the real ext_authz gRPC authorizer
/// (`tests/extauthz`) decides; the header it adds reaches the backend; pier writes the
/// policy's status there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_authorization_from_the_cluster() {
    let c = Cluster::start().await;
    let w = world(&c).await;
    let authz = support::extauthz::start_at("2s", host_ip());
    backend(&c, APP, "authz", authz.grpc).await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));

    c.apply(json!({
        "apiVersion": PIER_V1ALPHA1,
        "kind": "SecurityPolicy",
        "metadata": { "name": "authz", "namespace": APP },
        "spec": {
            "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "web" }],
            "extAuth": { "grpc": { "backendRefs": [{ "name": "authz", "port": 80 }] } },
        },
    }))
    .await;
    let url = w.url(LOOPBACK, "/v/x");
    // Until pier has the policy the route is open; then the authorizer decides.
    let deadline = Instant::now() + STATUS_BOUND;
    loop {
        let r = get(&url, &[]).await;
        if r.status == 401 {
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
        assert!(Instant::now() < deadline, "the policy never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let denied = get(&url, &[("authorization", "Bearer wrong")]).await;
    assert_eq!(denied.status, 403, "{denied:?}");
    let allowed = get(&url, &[("authorization", "Bearer good")]).await;
    assert_eq!(allowed.status, 200, "{allowed:?}");
    let seen = allowed.echo();
    assert_eq!(seen.backend, "v1");
    assert_eq!(
        seen.headers["x-user"],
        ["alice"],
        "the authorizer's header reaches the backend"
    );

    // The policy's status, written through the API server.
    let policies = c.api(PIER_V1ALPHA1, "SecurityPolicy", Some(APP));
    let deadline = Instant::now() + STATUS_BOUND;
    loop {
        let o = support::bounded(policies.get("authz")).await.unwrap();
        let ours = (o.data["status"]["ancestors"]
            .as_array()
            .cloned()
            .unwrap_or_default())
        .into_iter()
        .find(|a| a["controllerName"] == pier::DEFAULT_CONTROLLER_NAME);
        if let Some(a) = ours
            && a["conditions"][0]["type"] == "Accepted"
            && a["conditions"][0]["status"] == "True"
        {
            assert_eq!(a["ancestorRef"]["name"], "gw");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no Accepted status: {:#}",
            o.data["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = metrics(&pier).await;
    assert!(
        sample(
            &m,
            "pier_proxy_security_decisions_total{policy=\"app/authz\",mechanism=\"extAuth\",result=\"allowed\"}"
        ) >= 1.0,
        "{m}"
    );
    pier.shutdown().await;
}

/// BackendTrafficPolicy `rateLimit.global` in cluster mode: the policy comes from the API
/// server, pier writes the rate-limit service's config for it, and envoyproxy/ratelimit with
/// Redis counts: three requests a tenant, then 429 with the service's headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_rate_limits_from_the_cluster() {
    let c = Cluster::start().await;
    let w = world(&c).await;
    let dir = tempfile::tempdir().unwrap();
    let mut rl = support::ratelimit::prepare(dir.path());
    rl.start_redis();
    rl.start_service();
    let mut options = c.pier_options(LOOPBACK, "replica-a");
    options.translate.rate_limit_service =
        Some(Arc::new(pier::model::traffic::RateLimitService::new(
            rl.grpc,
            Duration::from_millis(500),
            "pier".into(),
        )));
    options.translate.rate_limit_config = Some(rl.config_file.clone());
    let pier = start_pier(options).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));

    c.apply(json!({
        "apiVersion": PIER_V1ALPHA1,
        "kind": "BackendTrafficPolicy",
        "metadata": { "name": "tenants", "namespace": APP },
        "spec": {
            "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "web" }],
            "rateLimit": { "global": { "rules": [{
                "clientSelectors": [{ "headers": [{ "name": "x-tenant", "type": "Distinct" }] }],
                "limit": { "requests": 3, "unit": "Hour" },
            }] } },
        },
    }))
    .await;
    // pier writes the service's config once it has the policy; the service loads it.
    let rule = ("pier.dev/rule", "app/tenants/0/app/web");
    support::bounded(rl.until_loaded("pier", &[rule, ("header:x-tenant", "probe")])).await;

    let url = w.url(LOOPBACK, "/v/x");
    let tenant = |t: &'static str| [("x-tenant", t)];
    for i in 0..3 {
        assert_eq!(get(&url, &tenant("acme")).await.status, 200, "request {i}");
    }
    let refused = get(&url, &tenant("acme")).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.headers["x-ratelimit-limit"], "3, 3;w=3600");
    assert_eq!(get(&url, &tenant("globex")).await.status, 200);
    let m = metrics(&pier).await;
    assert!(
        sample(
            &m,
            "pier_proxy_rate_limit_calls_total{result=\"overLimit\"}"
        ) >= 1.0,
        "{m}"
    );
    pier.shutdown().await;
}

/// What a SecurityPolicy's credentials come from in cluster mode, each with traffic through
/// pier: `jwt` with a `remoteJWKS` key set (a key server on loopback) and claim rules in
/// `authorization`; `jwt` with `localJWKS` in a ConfigMap, following a key rotation there;
/// `basicAuth` and `apiKeyAuth` from Secrets, following a changed Secret; `oidc` with its
/// client and cookie Secrets, a real browser logging in at zitadel/oidc's provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keys_passwords_and_logins_from_the_cluster() {
    use support::jwt::{Issuer, now};
    use support::oidc_provider::{self, Provider};

    let c = Cluster::start().await;
    let w = world(&c).await;
    let (remote, local, rotated) = (
        Issuer::new("remote"),
        Issuer::new("local"),
        Issuer::new("rotated"),
    );
    let key_server = support::jwks_server::JwksServer::start_plain(remote.jwks()).await;
    let callback = format!("http://localhost:{}/login/oauth2/callback", w.port);
    let provider = Provider::start(std::slice::from_ref(&callback)).await;
    let pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));

    for name in ["remote", "local", "basic", "keys", "login"] {
        let prefix = format!("/{name}");
        c.apply(http_route(
            APP,
            name,
            "gw",
            &[(&prefix, backend_ref("v1", None))],
        ))
        .await;
    }
    let config_map = |jwks: String| {
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "jwks", "namespace": APP }, "data": { "jwks": jwks } })
    };
    c.apply(config_map(local.jwks())).await;
    let secret = |name: &str, data: Value| {
        json!({ "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": name, "namespace": APP }, "stringData": data })
    };
    // alice:wonderland, bcrypt as `htpasswd -B` writes it.
    c.apply(secret(
        "users",
        json!({ ".htpasswd": "alice:$2y$05$51qmlbO/MaGUMHLQc5Nq2.bO6dGx.siUnH30tf8a5VLwZwhZNEUsO\n" }),
    ))
    .await;
    c.apply(secret("api-keys", json!({ "client-a": "k-123" })))
        .await;
    c.apply(secret(
        "oidc-client",
        json!({ "client-secret": oidc_provider::CLIENT_SECRET }),
    ))
    .await;
    c.apply(secret(
        "login-cookies",
        json!({ "cookie-secret": "4f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d" }),
    ))
    .await;
    let policy = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["targetRefs"] =
            json!([{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": name }]);
        json!({ "apiVersion": PIER_V1ALPHA1, "kind": "SecurityPolicy",
                "metadata": { "name": name, "namespace": APP }, "spec": spec })
    };
    c.apply(policy(
        "remote",
        json!({
            "jwt": { "providers": [{
                "name": "idp", "issuer": "https://issuer.test", "audiences": ["pier"],
                "remoteJWKS": { "uri": key_server.uri() },
                "claimToHeaders": [{ "header": "x-team", "claim": "org.team" }],
            }] },
            "authorization": { "defaultAction": "Deny", "rules": [{
                "action": "Allow",
                "principal": { "jwt": { "provider": "idp",
                                        "claims": [{ "name": "org.team", "values": ["ops"] }] } },
            }] },
        }),
    ))
    .await;
    c.apply(policy(
        "local",
        json!({ "jwt": { "providers": [{
            "name": "idp", "issuer": "https://issuer.test",
            "localJWKS": { "type": "ValueRef",
                           "valueRef": { "group": "", "kind": "ConfigMap", "name": "jwks" } },
        }] } }),
    ))
    .await;
    c.apply(policy(
        "basic",
        json!({ "basicAuth": { "users": { "name": "users" }, "forwardUsernameHeader": "x-user" } }),
    ))
    .await;
    c.apply(policy(
        "keys",
        json!({ "apiKeyAuth": {
            "credentialRefs": [{ "name": "api-keys" }],
            "extractFrom": [{ "headers": ["x-api-key"] }],
            "forwardClientIDHeader": "x-client",
        } }),
    ))
    .await;
    c.apply(policy(
        "login",
        json!({ "oidc": {
            "provider": { "issuer": provider.issuer() },
            "clientID": oidc_provider::CLIENT_ID,
            "clientSecret": { "name": "oidc-client" },
            "cookieSecret": { "name": "login-cookies" },
            "redirectURL": "/login/oauth2/callback",
            "logoutPath": "/login/logout",
            "forwardAccessToken": true,
        } }),
    ))
    .await;

    let url = |path: &str| w.url(LOOPBACK, path);
    let bearer = |t: &str| format!("Bearer {t}");
    let claims = |team: &str| {
        json!({ "iss": "https://issuer.test", "aud": "pier", "sub": "u1",
                "exp": now() + 600, "org": { "team": team } })
    };
    // Every route asks for credentials once pier has its policy (the remote set and the
    // provider's discovery document fetched too).
    for path in ["/remote", "/local", "/basic", "/keys"] {
        poll(
            STATUS_BOUND,
            &format!("{path} asks for credentials"),
            || async { get(&url(path), &[]).await.status == 401 },
        )
        .await;
    }
    let ops = bearer(&remote.token(&claims("ops")));
    poll(STATUS_BOUND, "the remote key set fetched", || async {
        get(&url("/remote"), &[("authorization", &ops)])
            .await
            .status
            == 200
    })
    .await;
    let r = get(&url("/remote"), &[("authorization", &ops)]).await;
    assert_eq!(
        r.echo().headers["x-team"],
        ["ops"],
        "a nested claim to a header"
    );
    let dev = bearer(&remote.token(&claims("dev")));
    assert_eq!(
        get(&url("/remote"), &[("authorization", &dev)])
            .await
            .status,
        403
    );
    let foreign = bearer(&local.token(&claims("ops")));
    assert_eq!(
        get(&url("/remote"), &[("authorization", &foreign)])
            .await
            .status,
        401
    );

    let by_local = bearer(&local.token(&claims("dev")));
    assert_eq!(
        get(&url("/local"), &[("authorization", &by_local)])
            .await
            .status,
        200
    );
    // The key rotated in the ConfigMap: the new key's tokens in, the old one's out.
    c.apply(config_map(rotated.jwks())).await;
    let by_rotated = bearer(&rotated.token(&claims("dev")));
    poll(STATUS_BOUND, "the ConfigMap's new key set", || async {
        get(&url("/local"), &[("authorization", &by_rotated)])
            .await
            .status
            == 200
    })
    .await;
    assert_eq!(
        get(&url("/local"), &[("authorization", &by_local)])
            .await
            .status,
        401
    );

    let alice = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            "alice:wonderland"
        )
    );
    let r = get(&url("/basic"), &[("authorization", &alice)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo().headers["x-user"], ["alice"]);
    let r = get(&url("/basic"), &[]).await;
    assert_eq!(
        r.headers["www-authenticate"],
        "Basic realm=\"pier\", charset=\"UTF-8\""
    );

    let r = get(&url("/keys"), &[("x-api-key", "k-123")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo().headers["x-client"], ["client-a"]);
    // A key changed in the Secret: the old one is refused, the new one let in.
    c.apply(secret("api-keys", json!({ "client-a": "k-456" })))
        .await;
    poll(STATUS_BOUND, "the Secret's new key", || async {
        get(&url("/keys"), &[("x-api-key", "k-456")]).await.status == 200
    })
    .await;
    assert_eq!(
        get(&url("/keys"), &[("x-api-key", "k-123")]).await.status,
        401
    );

    // The login: an API client gets 401, a browser logs in at the provider and comes back.
    poll(
        STATUS_BOUND,
        "the provider's discovery document",
        || async { get(&url("/login"), &[]).await.status == 401 },
    )
    .await;
    let profile = tempfile::tempdir().unwrap();
    let browser = support::webdriver::Browser::start(profile.path()).await;
    let page = format!("http://localhost:{}/login/page", w.port);
    browser.open(&page).await;
    browser
        .wait_url(|u| u.starts_with(&provider.issuer()))
        .await;
    browser.type_into("#username", oidc_provider::USER).await;
    browser
        .type_into("#password", oidc_provider::PASSWORD)
        .await;
    browser.click("button[type=submit]").await;
    browser.wait_url(|u| u == page).await;
    let source = browser.source().await;
    assert!(
        source.contains("Bearer "),
        "the access token goes upstream: {source}"
    );

    let m = metrics(&pier).await;
    for (policy, mechanism) in [
        ("remote", "jwt"),
        ("local", "jwt"),
        ("basic", "basic"),
        ("keys", "apiKey"),
        ("login", "oidc"),
    ] {
        let series = format!(
            "pier_proxy_security_decisions_total{{policy=\"app/{policy}\",mechanism=\"{mechanism}\",result=\"allowed\"}}"
        );
        assert!(sample(&m, &series) >= 1.0, "{series}: {m}");
    }
    // Every policy Accepted, written through the API server.
    let policies = c.api(PIER_V1ALPHA1, "SecurityPolicy", Some(APP));
    for name in ["remote", "local", "basic", "keys", "login"] {
        poll(STATUS_BOUND, &format!("{name} Accepted"), || async {
            let o = support::bounded(policies.get(name)).await.unwrap();
            o.data["status"]["ancestors"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| {
                    a["controllerName"] == pier::DEFAULT_CONTROLLER_NAME
                        && a["conditions"][0]["type"] == "Accepted"
                        && a["conditions"][0]["status"] == "True"
                })
        })
        .await;
    }
    pier.shutdown().await;
}

/// A ClientTrafficPolicy `app/tls` on listener `https` of Gateway `app/secure`, which also
/// believes loopback's forwarding headers.
fn client_traffic_policy(tls: Value) -> Value {
    json!({
        "apiVersion": PIER_V1ALPHA1,
        "kind": "ClientTrafficPolicy",
        "metadata": { "name": "tls", "namespace": APP },
        "spec": {
            "targetRefs": [{
                "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "secure",
                "sectionName": "https",
            }],
            "tls": tls,
            "connection": { "connectionLimit": { "value": 100 } },
            "clientIPDetection": { "xForwardedFor": { "trustedCIDRs": ["127.0.0.0/8"] } },
            "timeout": { "http": { "idleTimeout": "30s" } },
            "path": { "escapedSlashesAction": "RejectRequest", "disableMergeSlashes": false },
            "headers": { "withUnderscoresAction": "DropHeader", "preserveXRequestID": true },
            "http3": {},
        },
    })
}

/// pier's ClientTrafficPolicy in cluster mode, under pier's RBAC: an HTTPS listener whose
/// certificate is a `kubernetes.io/tls` Secret takes the policy's TLS settings from the API
/// server (curl with TLS 1.2 is refused, TLS 1.3 served), pier writes the policy's GEP-713
/// status there, and an edit pier cannot serve (TLS 1.1) is `Invalid` while the version in
/// force keeps refusing TLS 1.2. Its `http3` turns HTTP/3 on: a QUIC client is served with
/// the policy's TLS settings, and TCP responses say so (`Alt-Svc`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_traffic_policies_from_the_cluster() {
    const HOST: &str = "secure.example.com";
    let c = Cluster::start().await;
    let w = world(&c).await;
    let port = listener_port();
    let cert = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    c.apply(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": { "name": "secure-cert", "namespace": APP },
        "stringData": { "tls.crt": cert.cert.pem(), "tls.key": cert.signing_key.serialize_pem() },
    }))
    .await;
    c.apply(json!({
        "apiVersion": GATEWAY_V1, "kind": "Gateway",
        "metadata": { "name": "secure", "namespace": APP },
        "spec": {
            "gatewayClassName": "pier",
            "listeners": [{
                "name": "https", "protocol": "HTTPS", "port": port, "hostname": HOST,
                "tls": { "certificateRefs": [{ "name": "secure-cert" }] },
            }],
        },
    }))
    .await;
    c.apply(http_route(
        APP,
        "secure",
        "secure",
        &[("/", backend_ref("v1", None))],
    ))
    .await;
    let _pier = start_pier(c.pier_options(LOOPBACK, "replica-a")).await;
    assert_eq!(w.answer("/v/x").await, (200, "v1".into()));
    // curl to the listener (`path`, `args`): its output; with `CODE` first, the status.
    let curl_at = |path: &'static str, args: Vec<&'static str>| {
        let ca = ca.clone();
        async move {
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new("curl")
                    .args(["-s", "--max-time", "5", "--cacert"])
                    .arg(&ca)
                    .args(["--resolve", &format!("{HOST}:{port}:127.0.0.1")])
                    .args(args)
                    .arg(format!("https://{HOST}:{port}{path}"))
                    .output()
                    .unwrap()
            })
            .await
            .unwrap();
            String::from_utf8_lossy(&out.stdout).to_string()
        }
    };
    const CODE: [&str; 4] = ["-o", "/dev/null", "-w", "%{http_code}"];
    let curl = |args: &'static [&'static str]| curl_at("/v/x", [&CODE[..], args].concat());
    let until = |args: &'static [&'static str], want: &'static str| async move {
        let deadline = Instant::now() + STATUS_BOUND;
        loop {
            let got = curl(args).await;
            if got == want {
                return;
            }
            assert!(Instant::now() < deadline, "{args:?}: {got}, want {want}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    until(&["--tls-max", "1.2"], "200").await;

    c.apply(client_traffic_policy(json!({ "minVersion": "1.3" })))
        .await;
    // No HTTP status: the handshake is refused.
    until(&["--tls-max", "1.2"], "000").await;
    assert_eq!(curl(&[]).await, "200");

    let policies = c.api(PIER_V1ALPHA1, "ClientTrafficPolicy", Some(APP));
    let condition_when =
        |what: &'static str, want: &'static str| policy_ancestor_when(&policies, "tls", what, want);
    let a = condition_when("accepted", "Accepted").await;
    assert_eq!(a["ancestorRef"]["name"], "secure");
    assert_eq!(a["ancestorRef"]["sectionName"], "https");
    // clientIPDetection came through the API server: the client's X-Forwarded-For is kept.
    let body = curl_at("/v/x", vec!["-H", "x-forwarded-for: 203.0.113.7"]).await;
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        echo["headers"]["x-forwarded-for"],
        json!(["203.0.113.7, 127.0.0.1"])
    );
    // And its path rules: an escaped slash is refused.
    let code = curl_at("/v/a%2Fb", CODE.to_vec()).await;
    assert_eq!(code, "400");
    // And `http3`: served over QUIC, advertised over TCP.
    let roots = [cert.cert.der().clone()];
    let h3 = support::h3::get(
        SocketAddr::from(([127, 0, 0, 1], port)),
        HOST,
        "/v/x",
        support::h3::tls(&roots, None),
    )
    .await
    .unwrap();
    assert_eq!(
        (h3.status.as_u16(), h3.echo().backend),
        (200, "v1".to_string())
    );
    let head = curl_at("/v/x", vec!["-o", "/dev/null", "-D", "-"]).await;
    assert!(
        head.contains(&format!("alt-svc: h3=\":{port}\"; ma=86400")),
        "{head}"
    );

    c.apply(client_traffic_policy(json!({ "minVersion": "1.1" })))
        .await;
    let a = condition_when("invalid", "Invalid").await;
    let message = a["conditions"][0]["message"].as_str().unwrap();
    assert!(message.contains("TLS 1.1 is not offered"), "{message}");
    assert!(message.contains("last valid version"), "{message}");
    assert_eq!(
        curl(&["--tls-max", "1.2"]).await,
        "000",
        "the version in force holds"
    );
    assert_eq!(curl(&[]).await, "200");
}
