//! `pier run --manifests DIR` end to end: pier in-process, manifests in a temp directory, real
//! echo backends and a real HTTP client on loopback.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use pier::run::{self, RunOptions};
use support::web::*;
use support::*;

struct Env {
    dir: tempfile::TempDir,
    port: u16,
    pier: run::Running,
    _a: pier::echo::EchoServer,
    _b: pier::echo::EchoServer,
}

impl Env {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn admin(&self, path: &str) -> String {
        format!("http://{}{path}", self.pier.admin_addr)
    }
}

fn options(dir: &std::path::Path) -> RunOptions {
    RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        access_log: true,
        ..RunOptions::new(run::Source::Manifests(dir.to_path_buf()))
    }
}

impl Env {
    /// Waits until `path` is answered by echo backend `backend`; returns how long it took.
    async fn served_by(&self, path: &str, backend: &str) -> Duration {
        eventually(Duration::from_secs(5), || async {
            get(&self.url(path), &[]).await.backend() == backend
        })
        .await
    }
}

async fn start() -> Env {
    start_with(|o| o).await
}

/// [`start`], with `edit` applied to the run options.
async fn start_with(edit: impl FnOnce(RunOptions) -> RunOptions) -> Env {
    init();
    let a = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    let b = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "b")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("gateway.yaml"), gateway(port)).unwrap();
    std::fs::write(
        dir.path().join("services.yml"),
        format!("{}---\n{}", service("a", a.addr), service("b", b.addr)),
    )
    .unwrap();
    std::fs::write(dir.path().join("route.yaml"), route("r", "/", "a")).unwrap();
    let pier = run::start(edit(options(dir.path()))).await.unwrap();
    Env {
        dir,
        port,
        pier,
        _a: a,
        _b: b,
    }
}

#[tokio::test]
async fn serves_routes_from_a_manifest_directory() {
    let env = start().await;
    let r = get(&env.url("/hello"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.backend(), "a");
    assert_eq!(get(&env.admin("/readyz"), &[]).await.status, 200);
    env.pier.shutdown().await;
}

#[tokio::test]
async fn admin_endpoints_report_health_config_status_and_metrics() {
    let env = start().await;
    assert_eq!(get(&env.admin("/healthz"), &[]).await.status, 200);
    let config = get(&env.admin("/config"), &[]).await.json();
    assert_eq!(config["generation"], 1);
    assert_eq!(config["listeners"][0]["port"], env.port);
    assert_eq!(
        config["listeners"][0]["routes"][0]["rules"][0]["matches"][0],
        "PathPrefix /"
    );
    let status = get(&env.admin("/status"), &[]).await;
    assert_eq!(status.status, 200);
    assert!(status.text().contains("Accepted"), "{}", status.text());
    assert_eq!(get(&env.url("/m"), &[]).await.backend(), "a");
    let metrics = get(&env.admin("/metrics"), &[]).await.text();
    assert!(metrics.contains("pier_config_generation 1"), "{metrics}");
    let served = metrics
        .lines()
        .find(|l| l.starts_with("pier_proxy_requests_total{") && l.contains("route=\"default/r\""))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(
        served.contains("status=\"2xx\"") && served.ends_with(" 1"),
        "{served}"
    );
    assert_eq!(get(&env.admin("/nope"), &[]).await.status, 404);
    env.pier.shutdown().await;
}

#[tokio::test]
async fn a_changed_file_takes_effect_within_one_second() {
    let env = start().await;
    assert_eq!(get(&env.url("/x"), &[]).await.backend(), "a");
    std::fs::write(env.dir.path().join("route.yaml"), route("r", "/", "b")).unwrap();
    let took = env.served_by("/x", "b").await;
    assert!(took < Duration::from_secs(1), "took {took:?}");
    env.pier.shutdown().await;
}

#[tokio::test]
async fn a_file_replaced_by_rename_takes_effect() {
    let env = start().await;
    write_atomic(&env.dir.path().join("route.yaml"), &route("r", "/", "b"));
    let took = env.served_by("/x", "b").await;
    assert!(took < Duration::from_secs(1), "took {took:?}");
    env.pier.shutdown().await;
}

#[tokio::test]
async fn a_new_and_a_removed_file_take_effect() {
    let env = start().await;
    std::fs::write(env.dir.path().join("route2.yaml"), route("r2", "/two", "b")).unwrap();
    env.served_by("/two", "b").await;
    std::fs::remove_file(env.dir.path().join("route.yaml")).unwrap();
    eventually(Duration::from_secs(5), || async {
        get(&env.url("/x"), &[]).await.status == 404
    })
    .await;
    env.pier.shutdown().await;
}

#[tokio::test]
async fn a_malformed_change_keeps_the_last_good_configuration_and_is_counted() {
    let env = start().await;
    std::fs::write(
        env.dir.path().join("broken.yaml"),
        "kind: HTTPRoute\nspec: [unclosed\n",
    )
    .unwrap();
    eventually(Duration::from_secs(5), || async {
        get(&env.admin("/metrics"), &[])
            .await
            .text()
            .contains("pier_config_reloads_total{result=\"ParseError\"} 1")
    })
    .await;
    assert_eq!(get(&env.url("/x"), &[]).await.backend(), "a");
    let config = get(&env.admin("/config"), &[]).await.json();
    assert_eq!(
        config["generation"], 1,
        "the broken change must not be published"
    );
    // Fixing the file recovers.
    std::fs::write(
        env.dir.path().join("broken.yaml"),
        route("r3", "/three", "b"),
    )
    .unwrap();
    env.served_by("/three", "b").await;
    env.pier.shutdown().await;
}

#[tokio::test]
async fn hidden_and_non_yaml_files_are_ignored() {
    let env = start().await;
    std::fs::write(env.dir.path().join(".route.yaml.swp"), "garbage: [").unwrap();
    std::fs::write(env.dir.path().join("notes.txt"), "garbage: [").unwrap();
    std::fs::write(env.dir.path().join("route2.yaml"), route("r2", "/two", "b")).unwrap();
    env.served_by("/two", "b").await;
    env.pier.shutdown().await;
}

#[tokio::test]
async fn a_reload_lets_an_in_flight_request_finish_on_the_old_configuration() {
    let env = start().await;
    let url = env.url("/delay/600");
    let in_flight = tokio::spawn(async move { get(&url, &[]).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::fs::write(env.dir.path().join("route.yaml"), route("r", "/", "b")).unwrap();
    env.served_by("/x", "b").await;
    let old = in_flight.await.unwrap();
    assert_eq!(old.status, 200);
    assert_eq!(old.backend(), "a");
    env.pier.shutdown().await;
}

#[tokio::test]
async fn startup_fails_clearly_on_malformed_manifests() {
    init();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.yaml"), "kind: Gateway\nmetadata: [\n").unwrap();
    let err = run::start(options(dir.path()))
        .await
        .err()
        .expect("must fail");
    let msg = format!("{err:#}");
    assert!(msg.contains("bad.yaml"), "{msg}");
}

#[tokio::test]
async fn not_ready_until_every_listener_is_bound() {
    init();
    let echo = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    // Something else holds the listener's port.
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("all.yaml"),
        format!(
            "{}---\n{}---\n{}",
            gateway(port),
            service("a", echo.addr),
            route("r", "/", "a")
        ),
    )
    .unwrap();
    let pier = run::start(options(dir.path())).await.unwrap();
    let readyz = format!("http://{}/readyz", pier.admin_addr);
    assert_eq!(get(&readyz, &[]).await.status, 503);
    assert_eq!(
        get(&format!("http://{}/healthz", pier.admin_addr), &[])
            .await
            .status,
        200
    );
    // Once the port is free, pier binds it on its next retry and turns ready.
    drop(squatter);
    eventually(Duration::from_secs(10), || async {
        get(&readyz, &[]).await.status == 200
    })
    .await;
    assert_eq!(
        get(&format!("http://127.0.0.1:{port}/"), &[])
            .await
            .backend(),
        "a"
    );
    pier.shutdown().await;
}

/// Six routes `/p0`..`/p5` in one file, `/p0` to `first`, the rest to `a`.
fn six_routes(first: &str) -> String {
    (0..6)
        .map(|i| {
            route(
                &format!("r{i}"),
                &format!("/p{i}"),
                if i == 0 { first } else { "a" },
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// An in-place writer (open with truncate, write, close; no rename) that stalls two-thirds of
/// the way through must not get its half-written file published: the tail's routes stay served
/// during the stall, and the finished file is published once the writer closes it.
#[tokio::test]
async fn a_paused_in_place_write_never_publishes_the_half_written_file() {
    use std::io::Write;
    let env = start().await;
    let path = env.dir.path().join("route.yaml");
    write_atomic(&path, &six_routes("a"));
    env.served_by("/p5", "a").await;

    let text = six_routes("b");
    // Cut at a document boundary before two-thirds, so the head is valid YAML that lacks the
    // last routes (a cut mid-document would be a parse error, which is kept out anyway).
    let cut = text[..text.len() * 2 / 3].rfind("---\n").unwrap() + 4;
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(&text.as_bytes()[..cut]).unwrap();
    file.flush().unwrap();
    // Probe the tail's routes through the stall (250 ms, more than the 100 ms quiet period).
    let stall = std::time::Instant::now();
    let mut probes = 0;
    while stall.elapsed() < Duration::from_millis(250) {
        for p in ["/p4", "/p5"] {
            let r = get(&env.url(p), &[]).await;
            assert_eq!(
                r.status,
                200,
                "{p} lost during the stall, after {:?}",
                stall.elapsed()
            );
            probes += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(probes > 10, "only {probes} probes");
    file.write_all(&text.as_bytes()[cut..]).unwrap();
    drop(file);
    let took = env.served_by("/p0", "b").await;
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(get(&env.url("/p5"), &[]).await.backend(), "a");
    env.pier.shutdown().await;
}

/// An HTTPS listener whose certificate Secret is corrupted keeps serving its last good
/// certificate: handshakes still succeed, and the listener status says why.
#[tokio::test]
async fn a_corrupted_certificate_secret_keeps_https_up_with_the_last_good_certificate() {
    init();
    let echo = pier::echo::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), "a")
        .await
        .unwrap();
    let port = free_port();
    let ck = rcgen::generate_simple_self_signed(vec!["foo.example.com".to_string()]).unwrap();
    let secret = |crt: &str| {
        let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: default}}\n\
             type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(crt),
            indent(&ck.signing_key.serialize_pem())
        )
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("all.yaml"),
        format!(
            "{GATEWAY_CLASS}---\n\
             apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {{name: gw, namespace: default}}\n\
             spec:\n  gatewayClassName: pier\n  listeners:\n\
             \x20   - name: tls\n      protocol: HTTPS\n      port: {port}\n\
             \x20     tls: {{certificateRefs: [{{name: cert}}]}}\n---\n{}---\n{}",
            service("a", echo.addr),
            route("r", "/", "a")
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("secret.yaml"), secret(&ck.cert.pem())).unwrap();
    let pier = run::start(options(dir.path())).await.unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let client = std::sync::Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let https_get = || async {
        let tls =
            support::client::connect_tls(local(port), "foo.example.com", client.clone()).await;
        support::client::send_h1_on(tls, support::client::get("foo.example.com", "/x")).await
    };
    assert_eq!(https_get().await.backend(), "a");

    write_atomic(
        &dir.path().join("secret.yaml"),
        &secret("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"),
    );
    let admin = |p: &str| format!("http://{}{p}", pier.admin_addr);
    eventually(Duration::from_secs(5), || async {
        get(&admin("/config"), &[]).await.json()["generation"] == 2
    })
    .await;
    assert_eq!(https_get().await.backend(), "a");
    let status = get(&admin("/status"), &[]).await.text();
    assert!(status.contains("InvalidCertificateRef"), "{status}");
    assert!(
        status.contains("last good certificate is still served"),
        "{status}"
    );
    pier.shutdown().await;
}

/// A change that takes the directory over a limit is refused, counted, and the last good
/// configuration stays.
#[tokio::test]
async fn a_change_over_the_object_limit_keeps_the_last_good_configuration() {
    // The start holds 7 objects: GatewayClass, Gateway, two Services with their
    // EndpointSlices, an HTTPRoute.
    let env = start_with(|o| RunOptions {
        manifest_limits: pier::source::files::Limits {
            objects: 10,
            ..Default::default()
        },
        ..o
    })
    .await;
    let config_maps: Vec<String> = (0..4)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n"))
        .collect();
    std::fs::write(env.dir.path().join("many.yaml"), config_maps.join("---\n")).unwrap();
    eventually(Duration::from_secs(5), || async {
        get(&env.admin("/metrics"), &[])
            .await
            .text()
            .contains("pier_config_reloads_total{result=\"LimitExceeded\"} 1")
    })
    .await;
    assert_eq!(get(&env.url("/x"), &[]).await.backend(), "a");
    assert_eq!(
        get(&env.admin("/config"), &[]).await.json()["generation"],
        1
    );
    // Back under the limit, changes apply again.
    std::fs::write(
        env.dir.path().join("many.yaml"),
        config_maps[..3].join("---\n"),
    )
    .unwrap();
    std::fs::write(env.dir.path().join("route.yaml"), route("r", "/", "b")).unwrap();
    env.served_by("/x", "b").await;
    env.pier.shutdown().await;
}

/// `curl` (an independent HTTP client) with `args` against pier; the status and the response
/// headers (names lower-cased).
async fn curl(args: Vec<String>) -> (u16, Vec<(String, String)>) {
    let argv = args.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-D", "-", "--max-time", "10"])
            .args(&argv)
            .output()
    })
    .await
    .unwrap()
    .expect("curl runs (scripts/test installs it)");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers)
}

fn one<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    let mut all = headers.iter().filter(|(n, _)| n == name);
    let first = all.next().map(|(_, v)| v.as_str());
    assert!(all.next().is_none(), "{name} more than once: {headers:?}");
    first
}

/// The CORS filter end to end: manifests on disk (a rule-level and a backendRef-level
/// filter), translated and served, and curl as the browser, over HTTP/1.1 (the fast path)
/// and HTTP/2 (prior knowledge, the hyper path).
#[tokio::test]
async fn cors_preflights_and_responses_from_manifests_through_curl() {
    let env = start().await;
    std::fs::write(
        env.dir.path().join("cors.yaml"),
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cors, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /cors}}]
      filters:
        - type: CORS
          cors:
            allowOrigins: [\"https://www.foo.com\", \"https://*.bar.com\"]
            allowMethods: [GET, OPTIONS]
            allowHeaders: [x-header-1, x-header-2]
            exposeHeaders: [x-header-3]
            allowCredentials: true
            maxAge: 3600
      backendRefs: [{name: a, port: 80}]
    - matches: [{path: {type: PathPrefix, value: /open}}]
      backendRefs:
        - name: b
          port: 80
          filters: [{type: CORS, cors: {allowOrigins: [\"*\"], allowMethods: [\"*\"]}}]
",
    )
    .unwrap();
    let origin = [("origin", "https://www.foo.com")];
    eventually(Duration::from_secs(5), || async {
        let r = get(&env.url("/cors"), &origin).await;
        r.headers.contains_key("access-control-allow-origin")
    })
    .await;
    let url = |path: &str| env.url(path);
    let preflight = |path: &str, origin: &str, method: &str| {
        vec![
            "-X".to_string(),
            "OPTIONS".into(),
            "-H".into(),
            format!("Origin: {origin}"),
            "-H".into(),
            format!("Access-Control-Request-Method: {method}"),
            "-H".into(),
            "Access-Control-Request-Headers: x-header-1".into(),
            url(path),
        ]
    };
    for protocol in ["--http1.1", "--http2-prior-knowledge"] {
        let with = |mut args: Vec<String>| {
            args.insert(0, protocol.to_string());
            args
        };
        let (a_before, b_before) = (env._a.count(), env._b.count());

        let (status, h) = curl(with(preflight(
            "/cors/x",
            "https://xpto.www.bar.com",
            "GET",
        )))
        .await;
        assert_eq!(status, 200, "{protocol}: {h:?}");
        assert_eq!(
            one(&h, "access-control-allow-origin"),
            Some("https://xpto.www.bar.com")
        );
        assert_eq!(
            one(&h, "access-control-allow-methods"),
            Some("GET, OPTIONS")
        );
        assert_eq!(
            one(&h, "access-control-allow-headers"),
            Some("x-header-1, x-header-2")
        );
        assert_eq!(one(&h, "access-control-expose-headers"), Some("x-header-3"));
        assert_eq!(one(&h, "access-control-allow-credentials"), Some("true"));
        assert_eq!(one(&h, "access-control-max-age"), Some("3600"));

        let (status, h) = curl(with(preflight("/cors/x", "https://foobar.com", "GET"))).await;
        assert_eq!(status, 403, "{protocol}: {h:?}");
        assert_eq!(one(&h, "access-control-allow-origin"), None);

        let (status, h) = curl(with(vec![
            "-H".into(),
            "Origin: https://www.foo.com".into(),
            url("/cors/x"),
        ]))
        .await;
        assert_eq!(status, 200, "{protocol}: {h:?}");
        assert_eq!(
            one(&h, "access-control-allow-origin"),
            Some("https://www.foo.com")
        );
        assert_eq!(one(&h, "access-control-allow-credentials"), Some("true"));
        assert_eq!(one(&h, "access-control-max-age"), None);
        assert_eq!(one(&h, "vary"), Some("origin"));

        // The backendRef's own filter: any origin, any method, no credentials: `*`.
        let (status, h) = curl(with(preflight("/open", "https://x.example:8443", "DELETE"))).await;
        assert_eq!(status, 200, "{protocol}: {h:?}");
        assert_eq!(one(&h, "access-control-allow-origin"), Some("*"));
        assert_eq!(one(&h, "access-control-allow-methods"), Some("*"));
        assert_eq!(one(&h, "access-control-max-age"), Some("5"));
        assert_eq!(one(&h, "access-control-allow-credentials"), None);

        assert_eq!(
            (env._a.count() - a_before, env._b.count() - b_before),
            (1, 0),
            "{protocol}: only the GET reached a backend"
        );
    }
    env.pier.shutdown().await;
}
