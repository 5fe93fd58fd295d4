//! Helpers for tests that drive pier by URL: GET with a deadline, polling, manifest files.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;

use super::client::{Resp, send_h1_on, send_h2};

/// `GET url` over a fresh HTTP/1.1 connection, with extra headers (a `host` header replaces
/// the URL's authority). Panics if the connection fails or takes over 10 s.
pub async fn get(url: &str, headers: &[(&str, &str)]) -> Resp {
    try_get(url, headers)
        .await
        .unwrap_or_else(|| panic!("cannot connect for {url}"))
}

/// Like [`get`], `None` when nothing listens.
pub async fn try_get(url: &str, headers: &[(&str, &str)]) -> Option<Resp> {
    let uri: http::Uri = url.parse().unwrap();
    let authority = uri.authority().unwrap().as_str().to_string();
    let addr: SocketAddr = authority.parse().unwrap();
    let mut req = http::Request::get(uri.path_and_query().map_or("/", |p| p.as_str()));
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req = req.header("host", &authority);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::<Bytes>::default()).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    Some(
        tokio::time::timeout(Duration::from_secs(10), send_h1_on(tcp, req))
            .await
            .expect("request timed out"),
    )
}

/// `GET path` over a fresh HTTP/2 (h2c) connection to loopback `port`, with extra headers.
pub async fn get_h2(port: u16, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut req = http::Request::get(format!("http://127.0.0.1:{port}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::<Bytes>::default()).unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    tokio::time::timeout(Duration::from_secs(10), send_h2(addr, req))
        .await
        .expect("request timed out")
}

/// Polls `f` until it returns true, at most `limit`; returns the time it took.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if f().await {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `files` (name, text) into `dir` and starts `pier run --manifests DIR` in-process,
/// listening on loopback, admin on an ephemeral loopback port.
pub async fn run_manifests(dir: &Path, files: &[(&str, String)]) -> pier::run::Running {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    pier::run::start(pier::run::RunOptions {
        listen_host: [127, 0, 0, 1].into(),
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..pier::run::RunOptions::new(pier::run::Source::Manifests(dir.to_path_buf()))
    })
    .await
    .unwrap()
}

/// Writes a file atomically (temp file + rename), as editors and config tools do.
pub fn write_atomic(path: &Path, text: &str) {
    let dir = path.parent().unwrap();
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

pub const GATEWAY_CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
";

/// A Gateway `default/gw` with one HTTP listener on `port`.
pub fn gateway(port: u16) -> String {
    format!(
        "{GATEWAY_CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: pier
  listeners:
    - {{name: http, protocol: HTTP, port: {port}}}
"
    )
}

/// A Service `default/<name>` port 80 with one ready endpoint at `addr`.
pub fn service(name: &str, addr: SocketAddr) -> String {
    service_pool(name, addr.port(), &[&addr.ip().to_string()], None)
}

/// A Service `default/<name>` port 80 (with `app_protocol`, such as `kubernetes.io/h2c`) whose
/// ready endpoints are `ips`, all on `port`.
pub fn service_pool(name: &str, port: u16, ips: &[&str], app_protocol: Option<&str>) -> String {
    let app = app_protocol.map_or(String::new(), |p| format!(", appProtocol: {p}"));
    let endpoints: String = ips
        .iter()
        .map(|ip| format!("  - addresses: [\"{ip}\"]\n"))
        .collect();
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  ports: [{{name: http, port: 80{app}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints:
{endpoints}"
    )
}

/// An HTTPRoute `default/<name>` sending `prefix` to Service `backend`.
pub fn route(name: &str, prefix: &str, backend: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
      backendRefs: [{{name: {backend}, port: 80}}]
"
    )
}

/// A `pier.dev/v1alpha1` policy of `kind` `default/<name>` on HTTPRoute `route`; `spec` is
/// the rest of its spec, indented by two spaces.
pub fn route_policy(kind: &str, name: &str, route: &str, spec: &str) -> String {
    format!(
        "apiVersion: pier.dev/v1alpha1
kind: {kind}
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {route}}}]
{spec}---
"
    )
}

/// A `pier` process, killed when dropped (a test that fails never leaves one behind).
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `pier run` with `env` and `flags` on the manifests in `dir`, its admin on `admin`; once
/// ready.
pub async fn start_pier(
    dir: &std::path::Path,
    admin: u16,
    env: &[(&str, &str)],
    flags: &[&str],
) -> Child {
    start_pier_logging(dir, admin, env, flags, Stdio::null()).await
}

/// [`start_pier`] with its log (stderr) going to `log`.
pub async fn start_pier_logging(
    dir: &std::path::Path,
    admin: u16,
    env: &[(&str, &str)],
    flags: &[&str],
    log: impl Into<Stdio>,
) -> Child {
    let child = Child(
        Command::new(env!("CARGO_BIN_EXE_pier"))
            .envs(env.iter().copied())
            .arg("run")
            .args(flags)
            .args([
                "--listen-host",
                "127.0.0.1",
                "--admin",
                &format!("127.0.0.1:{admin}"),
                "--manifests",
            ])
            .arg(dir)
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    eventually(Duration::from_secs(20), || async move {
        try_get(&format!("http://127.0.0.1:{admin}/readyz"), &[])
            .await
            .is_some_and(|r| r.status == 200)
    })
    .await;
    child
}
