//! `pier demo`: the one-command first run. Starts three echo backends on loopback, writes the
//! quickstart manifests (`config/examples/quickstart/`, embedded in the binary) to a temporary
//! directory, serves them, and prints what to try. It also generates test CAs and serves a
//! second Gateway whose meshed route reaches an mTLS-only echo workload ([`mesh`]).

mod mesh;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;

use crate::run::{self, RunOptions};

const MANIFESTS: &[(&str, &str)] = &[
    (
        "00-gateway.yaml",
        include_str!("../config/examples/quickstart/00-gateway.yaml"),
    ),
    (
        "10-backends.yaml",
        include_str!("../config/examples/quickstart/10-backends.yaml"),
    ),
    (
        "20-routes.yaml",
        include_str!("../config/examples/quickstart/20-routes.yaml"),
    ),
    (
        "30-grpc.yaml",
        include_str!("../config/examples/quickstart/30-grpc.yaml"),
    ),
];

/// Echo backends, matching the EndpointSlices of the quickstart.
const BACKENDS: &[(&str, u16)] = &[("echo-a", 18081), ("echo-b", 18082), ("echo-c", 18083)];
const PORT: u16 = 8080;
/// The quickstart Gateway's GRPCRoute listener.
const GRPC_PORT: u16 = 8082;
/// The meshed Gateway's listeners (HTTPRoute, GRPCRoute), and the mTLS workload behind them.
const MESH_PORT: u16 = 8081;
const MESH_GRPC_PORT: u16 = 8083;
const WORKLOAD_PORT: u16 = 18084;
const ADMIN: &str = "127.0.0.1:9901";

pub async fn run(listen_host: IpAddr) -> anyhow::Result<()> {
    let mut echoes = Vec::new();
    for (name, port) in BACKENDS {
        let addr = SocketAddr::from(([127, 0, 0, 1], *port));
        let server = crate::echo::spawn(addr, name).await.with_context(|| {
            format!("cannot start the demo backend {name} on {addr} (is the port in use?)")
        })?;
        echoes.push(server);
    }
    let pki = mesh::MeshPki::generate().context("cannot generate the demo certificates")?;
    let workload_addr = SocketAddr::from(([127, 0, 0, 1], WORKLOAD_PORT));
    let workload = crate::echo::spawn_tls(workload_addr, "echo-mesh", pki.workload.clone())
        .await
        .with_context(|| {
            format!("cannot start the demo mTLS workload on {workload_addr} (is the port in use?)")
        })?;
    echoes.push(workload);
    let dir = TempDir::new()?;
    let mesh_manifests = pki.manifests([MESH_PORT, MESH_GRPC_PORT], WORKLOAD_PORT);
    let files = MANIFESTS
        .iter()
        .copied()
        .chain([("40-mesh.yaml", mesh_manifests.as_str())]);
    for (name, text) in files {
        std::fs::write(dir.0.join(name), text)
            .with_context(|| format!("cannot write {}", dir.0.display()))?;
    }
    let running = run::start(RunOptions {
        listen_host,
        admin: ADMIN.parse().expect("static address"),
        access_log: true,
        ..RunOptions::new(run::Source::Manifests(dir.0.clone()))
    })
    .await?;
    let host = if listen_host.is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        listen_host.to_string()
    };
    let base = format!("http://{host}:{PORT}");
    let mesh = format!("http://{host}:{MESH_PORT}");
    let grpc = format!("http://{host}:{GRPC_PORT}");
    let mesh_grpc = format!("http://{host}:{MESH_GRPC_PORT}");
    // A gRPC call with curl: an empty message (5-byte frame header), h2c prior knowledge; the
    // answer is one framed JSON message, shown without its 5-byte header.
    let call = "printf '\\0\\0\\0\\0\\0' | curl -s --http2-prior-knowledge \
      -H 'content-type: application/grpc' -H 'te: trailers' --data-binary @- --output -";
    println!(
        "pier demo is serving {base} (admin: http://{ADMIN})
manifests: {dir} (edit them: changes apply within a second)

try:
  curl -s {base}/a                              # path prefix -> echo-a
  curl -s {base}/b                              # -> echo-b, with an added request header x-demo
  curl -s -H 'x-version: 2' {base}/api          # header match -> echo-c
  curl -s {base}/api                            # same path, no header -> echo-a
  for i in $(seq 10); do curl -s {base}/split | grep -o '\"backend\":\"[^\"]*\"'; done   # 80/20 split
  curl -si {base}/old/page                      # 301 redirect to /a/page
  curl -s {base}/rewrite/x                      # URL rewrite -> echo-b sees /rewritten/x
  curl -s -H 'host: c.example.com' {base}/      # hostname route -> echo-c
  curl -si {base}/nothing-here -H 'host: other.example' # 404: no route
  curl -s {mesh}/                               # meshed route: mTLS to echo-mesh (\"client_certificate_verified\":true)
  {call} {grpc}/demo.Echo/Hello | tail -c +6   # GRPCRoute by method -> echo-a, header x-demo
  {call} {grpc}/demo.Echo/Other | tail -c +6   # by service -> echo-b
  {call} -i {grpc}/other.Svc/Call              # no route: grpc-status 12 (UNIMPLEMENTED)
  {call} {mesh_grpc}/demo.Echo/Hello | tail -c +6   # meshed GRPCRoute: mTLS + h2 to echo-mesh
  curl -s http://{ADMIN}/metrics | grep -E 'tls=\"mesh\"|tls_handshakes'   # the meshed requests and handshakes
  curl -s http://{ADMIN}/status                 # computed Gateway API status
  curl -s http://{ADMIN}/metrics                # Prometheus metrics

Ctrl-C to stop.",
        dir = dir.0.display()
    );
    crate::commands::shutdown_signal().await;
    running.shutdown().await;
    drop(echoes);
    Ok(())
}

/// A directory removed on drop (the `tempfile` crate is only a dev-dependency).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("pier-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
