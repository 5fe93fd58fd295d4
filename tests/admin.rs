//! The admin server's guard (a bearer token) and what it, the logs and the status never show:
//! private keys. pier runs in-process on manifests in a temp directory; this test binary's
//! logs go to a buffer so they can be searched for the key material pier loaded.

mod support;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pier::run::{self, RunOptions};
use support::web::*;
use support::*;

/// Everything this test binary logs (at debug for pier).
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = Buf(buf.clone());
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init();
        buf
    })
}

#[derive(Clone)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn options(dir: &std::path::Path) -> RunOptions {
    RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..RunOptions::new(run::Source::Manifests(dir.to_path_buf()))
    }
}

#[tokio::test]
async fn an_admin_token_guards_everything_but_the_probes() {
    init();
    logs();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gateway.yaml"), gateway(free_port())).unwrap();
    let token_file = dir.path().join(".token");
    std::fs::write(&token_file, "s3cr3t-t0ken\n").unwrap();
    let token = pier::admin::AdminToken::read(&token_file).unwrap();
    assert_eq!(format!("{token:?}"), "AdminToken(<redacted>)");
    let pier = run::start(RunOptions {
        admin_token_file: Some(token_file.clone()),
        ..options(dir.path())
    })
    .await
    .unwrap();
    let url = |p: &str| format!("http://{}{p}", pier.admin_addr);
    for path in ["/metrics", "/config", "/status"] {
        assert_eq!(get(&url(path), &[]).await.status, 401, "{path}");
        let wrong = [("authorization", "Bearer s3cr3t-t0keX")];
        assert_eq!(get(&url(path), &wrong).await.status, 401, "{path}");
        let right = [("authorization", "Bearer s3cr3t-t0ken")];
        assert_eq!(get(&url(path), &right).await.status, 200, "{path}");
    }
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(get(&url(probe), &[]).await.status, 200, "{probe}");
    }

    // A rotated token (replaced by rename, as a Secret volume does) applies at once; the old
    // one stops working.
    let status = |token: &'static str| {
        let url = url("/config");
        async move {
            get(&url, &[("authorization", &format!("Bearer {token}"))])
                .await
                .status
        }
    };
    write_atomic(&token_file, "n3w-t0ken\n");
    eventually(Duration::from_secs(5), || async {
        status("n3w-t0ken").await == 200
    })
    .await;
    assert_eq!(status("s3cr3t-t0ken").await, 401);
    // An empty or missing file keeps the last good token.
    std::fs::write(&token_file, "\n").unwrap();
    std::fs::remove_file(&token_file).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status("n3w-t0ken").await, 200);
    // Written in place.
    std::fs::write(&token_file, "th1rd-t0ken\n").unwrap();
    eventually(Duration::from_secs(5), || async {
        status("th1rd-t0ken").await == 200
    })
    .await;
    assert_eq!(status("n3w-t0ken").await, 401);

    let logged = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    for token in ["s3cr3t-t0ken", "n3w-t0ken", "th1rd-t0ken"] {
        assert!(!logged.contains(token), "the token was logged");
    }
    assert!(logged.contains("admin token reloaded"), "{logged}");
    assert!(logged.contains("the previous token stays"), "{logged}");
    pier.shutdown().await;
}

/// `GET path` over the Unix socket at `sock`, with `extra` header lines: the status code.
async fn get_unix(sock: &std::path::Path, path: &str, extra: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::UnixStream::connect(sock).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: pier\r\n{extra}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = vec![];
    bounded(s.read_to_end(&mut out)).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_admin_api_on_a_unix_socket_is_owner_and_group_only_and_keeps_the_token() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    init();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gateway.yaml"), gateway(free_port())).unwrap();
    let sock = dir.path().join("admin.sock");
    // A socket left by an earlier run is replaced; a regular file is never deleted.
    let stale = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    drop(stale);
    let token_file = dir.path().join(".token");
    std::fs::write(&token_file, "t0ken\n").unwrap();
    let pier = run::start(RunOptions {
        admin_socket: Some(sock.clone()),
        admin_token_file: Some(token_file.clone()),
        ..options(dir.path())
    })
    .await
    .unwrap();
    let meta = std::fs::symlink_metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(get_unix(&sock, "/readyz", "").await, 200);
    assert_eq!(get_unix(&sock, "/config", "").await, 401);
    let auth = "Authorization: Bearer t0ken\r\n";
    assert_eq!(get_unix(&sock, "/config", auth).await, 200);
    // The TCP admin address still answers.
    let url = format!("http://{}/readyz", pier.admin_addr);
    assert_eq!(get(&url, &[]).await.status, 200);
    pier.shutdown().await;
    assert!(!sock.exists(), "the socket file is removed at shutdown");

    // Something else at the path: pier refuses to start, and leaves it alone.
    std::fs::write(&sock, "not a socket").unwrap();
    let err = run::start(RunOptions {
        admin_socket: Some(sock.clone()),
        ..options(dir.path())
    })
    .await
    .err()
    .expect("a regular file is not replaced");
    assert!(format!("{err:#}").contains("not a socket"), "{err:#}");
    assert_eq!(std::fs::read_to_string(&sock).unwrap(), "not a socket");
}

/// A `kubernetes.io/tls` Secret `default/<name>` from PEM text.
fn tls_secret(name: &str, cert_pem: &str, key_pem: &str) -> String {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: default}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(cert_pem),
        indent(key_pem)
    )
}

#[tokio::test]
async fn private_keys_never_appear_in_config_status_or_logs() {
    init();
    logs();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["gw.example.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let key_pem = key.serialize_pem();
    // A line from the middle of the key: what a leak of any part of it would contain.
    let secret_line = key_pem.lines().nth(2).unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(
        dir.path().join("gateway.yaml"),
        format!(
            "{}---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {{name: tls, namespace: default}}\nspec:\n  gatewayClassName: pier\n  \
             listeners:\n  - name: https\n    protocol: HTTPS\n    port: {port}\n    \
             tls: {{certificateRefs: [{{name: good}}, {{name: broken}}]}}\n",
            gateway(free_port())
        ),
    )
    .unwrap();
    // One good Secret, and one whose certificate does not match its key (an error that
    // pier reports: the message must not carry the key).
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(
        dir.path().join("secrets.yaml"),
        format!(
            "{}---\n{}",
            tls_secret("good", &cert.pem(), &key_pem),
            tls_secret("broken", &cert.pem(), &other.serialize_pem())
        ),
    )
    .unwrap();
    let pier = run::start(options(dir.path())).await.unwrap();
    let url = |p: &str| format!("http://{}{p}", pier.admin_addr);
    let config = get(&url("/config"), &[]).await.text();
    let full = get(&url("/config?full"), &[]).await.text();
    let status = get(&url("/status"), &[]).await.text();
    assert!(config.contains("\"port\""), "{config}");
    assert!(full.contains("serverNames"), "{full}");
    assert!(
        status.contains("broken"),
        "the broken Secret is reported: {status}"
    );
    let other_line = other.serialize_pem().lines().nth(2).unwrap().to_string();
    let logged = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    assert!(
        logged.contains("listening"),
        "the logs were captured: {logged}"
    );
    for (what, text) in [
        ("/config", &config),
        ("/config?full", &full),
        ("/status", &status),
        ("logs", &logged),
    ] {
        assert!(!text.contains(&secret_line), "key material in {what}");
        assert!(!text.contains(&other_line), "key material in {what}");
        assert!(!text.contains("PRIVATE KEY"), "a key in {what}");
    }
    pier.shutdown().await;
}

/// A Gateway `default/gw` whose one listener is HTTPS on a free port with certificate Secret
/// `default/cert` (missing until written).
fn https_only_gateway() -> String {
    format!(
        "{GATEWAY_CLASS}---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata: {{name: gw, namespace: default}}\nspec:\n  gatewayClassName: pier\n  \
         listeners:\n  - name: https\n    protocol: HTTPS\n    port: {}\n    \
         tls: {{certificateRefs: [{{name: cert}}]}}\n",
        free_port()
    )
}

/// When the configuration serves no listener (its one listener's Secret is missing), `/readyz`
/// stays 200 but says so and why; with `--ready-requires-listener` it is 503 until a listener
/// is served, and again when a change leaves none.
#[tokio::test]
async fn readyz_says_when_no_listener_is_served_and_can_require_one() {
    init();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gateway.yaml"), https_only_gateway()).unwrap();
    let pier = run::start(options(dir.path())).await.unwrap();
    let r = get(&format!("http://{}/readyz", pier.admin_addr), &[]).await;
    let body = r.text();
    assert_eq!(r.status, 200, "{body}");
    assert!(body.starts_with("ready, serving no listener: "), "{body}");
    assert!(
        body.contains("listener default/gw/https: ") && body.contains("default/cert"),
        "the listener and its missing Secret: {body}"
    );
    assert!(pier.is_ready());
    pier.shutdown().await;

    let pier = run::start(RunOptions {
        ready_requires_listener: true,
        ..options(dir.path())
    })
    .await
    .unwrap();
    let url = format!("http://{}/readyz", pier.admin_addr);
    let r = get(&url, &[]).await;
    let body = r.text();
    assert_eq!(r.status, 503, "{body}");
    assert!(
        body.starts_with("not ready: serving no listener: ") && body.contains("default/cert"),
        "{body}"
    );
    assert!(!pier.is_ready());
    // The Secret appears: the listener is served, and pier is ready.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["gw.example.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(
        dir.path().join("secret.yaml"),
        tls_secret("cert", &cert.pem(), &key.serialize_pem()),
    )
    .unwrap();
    eventually(Duration::from_secs(10), || async {
        let r = get(&url, &[]).await;
        r.status == 200 && r.text() == "ready\n"
    })
    .await;
    // The Gateway goes: not ready again.
    std::fs::remove_file(dir.path().join("gateway.yaml")).unwrap();
    eventually(Duration::from_secs(10), || async {
        get(&url, &[]).await.status == 503
    })
    .await;
    pier.shutdown().await;
}

/// `/config` is a summary in the words of the Gateway API: listeners (address, port, protocol,
/// hostname, TLS by certificate name), their routes with matches as written (`PathPrefix /`,
/// not the stored empty prefix) and backendRefs, the backends' ready endpoints, and each
/// Gateway's mesh state with pier's client certificate identity and expiry, never a key.
/// `/config?full` is the whole snapshot.
#[tokio::test]
async fn config_summarises_listeners_routes_backends_and_mesh_state() {
    init();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["gw.example.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let client_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
    params.subject_alt_names = vec![rcgen::SanType::URI(
        "spiffe://example.org/pier".try_into().unwrap(),
    )];
    let client = params.self_signed(&client_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (http, https) = (free_port(), free_port());
    std::fs::write(
        dir.path().join("gateway.yaml"),
        format!(
            "{}    - {{name: https, protocol: HTTPS, port: {https}, hostname: gw.example.com, \
             tls: {{certificateRefs: [{{name: good}}]}}}}\n---\n{}---\n{}---\n{}",
            gateway(http),
            tls_secret("good", &cert.pem(), &key.serialize_pem()),
            service("a", "127.0.0.1:1".parse().unwrap()),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
             metadata: {name: r, namespace: default}\nspec:\n  parentRefs: [{name: gw}]\n  \
             rules:\n  - backendRefs: [{name: a, port: 80}]\n  \
             - matches: [{path: {type: Exact, value: /login}, method: POST}]\n    \
             backendRefs: [{name: a, port: 80, weight: 3}, {name: gone, port: 80}]\n"
        ),
    )
    .unwrap();
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("tls.crt"), client.pem()).unwrap();
    std::fs::write(files.path().join("tls.key"), client_key.serialize_pem()).unwrap();
    let pier = run::start(RunOptions {
        client_cert: Some(run::ClientCertFiles {
            cert: files.path().join("tls.crt"),
            key: files.path().join("tls.key"),
        }),
        ..options(dir.path())
    })
    .await
    .unwrap();
    let url = |p: &str| format!("http://{}{p}", pier.admin_addr);
    let text = get(&url("/config"), &[]).await.text();
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(config["generation"], 1, "{text}");
    let listener = |name: &str| {
        config["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no listener {name}: {text}"))
            .clone()
    };
    let plain = listener("http");
    assert_eq!(plain["gateway"], "default/gw");
    assert_eq!(plain["address"], "127.0.0.1");
    assert_eq!(plain["port"], http);
    assert_eq!(plain["protocol"], "HTTP");
    assert!(plain.get("tls").is_none(), "{plain:#}");
    assert_eq!(
        plain["routes"],
        serde_json::json!([{
            "kind": "HTTPRoute",
            "name": "default/r",
            "rules": [
                {"rule": 0, "matches": ["PathPrefix /"],
                 "backendRefs": [{"name": "default/a", "port": 80, "weight": 1}]},
                {"rule": 1, "matches": ["Exact /login, method POST"],
                 "backendRefs": [{"name": "default/a", "port": 80, "weight": 3},
                                 {"weight": 1, "unresolved": true}]},
            ],
        }]),
        "{plain:#}"
    );
    let secure = listener("https");
    assert_eq!(secure["protocol"], "HTTPS");
    assert_eq!(secure["hostname"], "gw.example.com");
    assert_eq!(secure["tls"]["mode"], "Terminate");
    assert_eq!(
        secure["tls"]["certificates"],
        serde_json::json!(["gw.example.com"])
    );
    assert_eq!(
        secure["routes"][0]["hostnames"],
        serde_json::json!(["gw.example.com"])
    );
    assert_eq!(
        config["backends"],
        serde_json::json!([
            {"name": "default/a", "port": 80, "readyEndpoints": 1, "tls": "plaintext"}
        ]),
        "{text}"
    );
    let mesh = &config["mesh"][0];
    assert_eq!(mesh["gateway"], "default/gw", "{text}");
    assert_eq!(mesh["enabled"], false);
    assert_eq!(mesh["trustBundleLoaded"], false);
    let identity = &mesh["clientCertificate"];
    // The subject, and the SPIFFE ID in its URI SAN.
    assert!(
        identity["identity"]
            .as_str()
            .unwrap()
            .ends_with("(spiffe://example.org/pier)"),
        "{text}"
    );
    assert_eq!(identity["expired"], false);
    assert!(
        identity["expires"].as_str().unwrap().ends_with('Z'),
        "{identity}"
    );
    // Not the internals: no stored empty prefix, no rule timeouts; a page, not 19 KB.
    assert!(!text.contains("\"Prefix\""), "{text}");
    assert!(!text.contains("timeouts"), "{text}");
    assert!(text.len() < 4096, "{} bytes: {text}", text.len());

    // The whole snapshot, on request.
    let full = get(&url("/config?full"), &[]).await.json();
    assert_eq!(full["ports"].as_array().unwrap().len(), 2, "{full:#}");
    assert_eq!(
        get(&url("/config?full=1"), &[]).await.json()["generation"],
        1
    );

    for text in [text, full.to_string()] {
        assert!(!text.contains("PRIVATE KEY"), "a key in {text}");
        for k in [&key, &client_key] {
            let line = k.serialize_pem().lines().nth(2).unwrap().to_string();
            assert!(!text.contains(&line), "key material in {text}");
        }
    }
    pier.shutdown().await;
}

// === Prometheus: config/prometheus and config/grafana against a running pier ===

/// A real Prometheus (Debian's) scraping one target every second, evaluating `rules` every
/// second; killed on drop.
struct Prometheus {
    child: std::process::Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr, rules: &str) -> Self {
        let bin = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect(
                "Debian's prometheus is needed (`apt-get install prometheus`; scripts/test does)",
            );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rules.yaml"), rules).unwrap();
        std::fs::write(
            dir.path().join("prometheus.yml"),
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [rules.yaml]\n\
                 scrape_configs:\n  - job_name: pier\n    static_configs: [{{targets: ['{target}']}}]\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = std::process::Command::new(bin)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    async fn api(&self, path_and_query: &str) -> serde_json::Value {
        let r = get(&format!("{}{path_and_query}", self.url), &[]).await;
        assert_eq!(r.status, 200, "{path_and_query}: {}", r.text());
        r.json()
    }

    /// An instant query's result vector (fails on a PromQL error).
    async fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let enc: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
        let v = self.api(&format!("/api/v1/query?query={enc}")).await;
        assert_eq!(v["status"], "success", "{q}: {v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Alerts firing now: (name, labels).
    async fn firing(&self) -> Vec<(String, serde_json::Value)> {
        let v = self.api("/api/v1/alerts").await;
        v["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["state"] == "firing")
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap().to_string(),
                    a["labels"].clone(),
                )
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every `pier_*` metric name in `text`.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let re = regex::Regex::new(r"\bpier_[a-z_]+").unwrap();
    re.find_iter(text).map(|m| m.as_str().to_string()).collect()
}

/// All of pier's sources, to find where a metric is registered.
fn sources() -> String {
    fn walk(dir: &std::path::Path, out: &mut String) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = String::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut out,
    );
    out
}

/// The alert rules and the dashboard, evaluated by a real Prometheus that scrapes a running
/// pier: requests that fail in three ways (a refused endpoint, a meshed endpoint that does not
/// speak TLS) and a bad manifest make their alerts fire, with the labels an operator sees;
/// every dashboard query is valid PromQL and returns data where pier has exported its metrics;
/// every metric name in either file is one pier registers; and when pier stops, PierDown.
/// (`for:` durations are set to 0 here; `promtool test rules` checks them on synthetic series.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_pier_and_the_alerts_fire() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use support::mesh as m;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let rules_text = std::fs::read_to_string(root.join("prometheus/pier.rules.yaml")).unwrap();
    let dashboard_text = std::fs::read_to_string(root.join("grafana/pier-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard_text).unwrap();

    // pier: a healthy route, a route to an endpoint that refuses, and a meshed route to a
    // workload that speaks plain HTTP (pier's handshake fails: not_tls, nothing sent).
    let pki = m::MeshPki::new();
    let ok = echo("ok").await;
    let plain = echo("plain").await;
    let port = free_port();
    let files = vec![
        ("00-class.yaml", m::GATEWAY_CLASS.to_string()),
        (
            "10-gateway.yaml",
            m::gateway(
                port,
                &m::mesh_spec("    selector: {matchLabels: {mesh: enabled}}\n"),
            ),
        ),
        (
            "01-namespaces.yaml",
            [
                m::namespace("app", ""),
                m::namespace("meshed", "mesh: enabled"),
            ]
            .join("---\n"),
        ),
        (
            "20-backends.yaml",
            [
                m::service("app", "ok", ok.addr),
                m::service("app", "gone", refused_addr()),
                m::service("meshed", "plain", plain.addr),
            ]
            .join("---\n"),
        ),
        (
            "30-routes.yaml",
            [
                m::route("app", "ok", "", "ok"),
                m::route("app", "gone", "", "gone"),
                m::route("meshed", "plain", "", "plain"),
            ]
            .join("---\n"),
        ),
        ("40-client.yaml", m::pier_client_secret(&pki)),
        ("41-bundle.yaml", m::bundle(&[&pki.mesh_ca])),
    ];
    let pier = m::Pier::start(port, &files).await;
    assert_eq!(pier.get("ok.example").await.status, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let traffic = tokio::spawn({
        let stop = stop.clone();
        async move {
            let url = format!("http://127.0.0.1:{port}/");
            while !stop.load(Ordering::Relaxed) {
                for host in ["ok.example", "gone.example", "plain.example"] {
                    let _ = try_get(&url, &[("host", host)]).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let rules: String = rules_text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for:") {
            Some(_) => format!("{}for: 0s\n", &l[..l.len() - l.trim_start().len()]),
            None => format!("{l}\n"),
        })
        .collect();
    let prom = Prometheus::start(pier.running.admin_addr, &rules);
    // Once Prometheus has scraped pier, a manifest that does not parse: refused, the last good
    // configuration stays, and the alert sees the failure counter increase from 0.
    eventually(Duration::from_secs(30), || async {
        match try_get(&format!("{}/api/v1/query?query=up", prom.url), &[]).await {
            Some(r) if r.status == 200 => r.json()["data"]["result"][0]["value"][1] == "1",
            _ => false,
        }
    })
    .await;
    pier.write("50-broken.yaml", "kind: [\n");

    let expected = [
        ("PierHighErrorRatio", "gateway", "gw/edge"),
        ("PierUpstreamTLSHandshakeFailures", "reason", "not_tls"),
        ("PierUpstreamConnectErrors", "reason", "Refused"),
        ("PierConfigReloadFailing", "result", "ParseError"),
    ];
    let mut firing = vec![];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if let Some(r) = try_get(&format!("{}/api/v1/alerts", prom.url), &[]).await
            && r.status == 200
        {
            firing = prom.firing().await;
            if expected
                .iter()
                .all(|(name, _, _)| firing.iter().any(|(n, _)| n == name))
            {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (name, key, value) in expected {
        assert!(
            firing.iter().any(|(n, l)| n == name && l[key] == value),
            "{name} with {key}={value} not firing: {firing:?}\n{}",
            prom.log()
        );
    }
    let tls = firing
        .iter()
        .find(|(n, _)| n == "PierUpstreamTLSHandshakeFailures")
        .unwrap();
    assert_eq!(tls.1["backend"], "meshed/plain:443", "{tls:?}");
    for quiet in ["PierDown", "PierNotReady", "PierClientCertificateExpired"] {
        assert!(
            !firing.iter().any(|(n, _)| n == quiet),
            "{quiet} fires while pier serves: {firing:?}"
        );
    }
    for record in [
        "pier:requests:rate5m",
        "pier:requests_5xx:ratio_rate5m",
        "pier:request_duration_seconds:p99_5m",
        "pier:upstream_tls_handshake_failures:rate5m",
    ] {
        assert!(!prom.query(record).await.is_empty(), "{record} has no data");
    }

    // The dashboard: every query is valid; a query over metrics pier exports returns data.
    let live: std::collections::BTreeSet<String> = prom.api("/api/v1/label/__name__/values").await
        ["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut queries = 0;
    let mut with_data = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let q = expr
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*")
                .replace("$gateway", ".*");
            let result = prom.query(&q).await;
            queries += 1;
            let names = metric_names(expr);
            let exported = names.iter().all(|n| live.contains(n));
            if exported {
                assert!(
                    !result.is_empty(),
                    "{:?}: no data for {expr}",
                    panel["title"]
                );
                with_data += 1;
            }
        }
    }
    assert!(
        queries >= 25 && with_data >= 12,
        "{queries} queries, {with_data} with data"
    );

    // Every metric name in the rules and the dashboard is one pier registers (exported here,
    // or registered in src/ under its short name: cluster-mode and TLSRoute metrics).
    let src = sources();
    for name in metric_names(&rules_text).union(&metric_names(&dashboard_text)) {
        let base = ["_total", "_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        let short = [
            "pier_proxy_",
            "pier_config_",
            "pier_kube_",
            "pier_status_",
            "pier_mesh_",
        ]
        .iter()
        .find_map(|p| base.strip_prefix(p));
        let registered = short.is_some_and(|s| src.contains(&format!("\"{s}\"")));
        assert!(
            live.contains(name.as_str()) || registered,
            "{name} is neither exported nor registered by pier"
        );
    }

    // pier stops: PierDown.
    stop.store(true, Ordering::Relaxed);
    traffic.await.unwrap();
    pier.shutdown().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let firing = prom.firing().await;
        if firing.iter().any(|(n, _)| n == "PierDown") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "PierDown not firing after pier stopped: {firing:?}\n{:?}\n{}",
            prom.query("up").await,
            prom.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
