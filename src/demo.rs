//! `pier demo`: the one-command first run. Starts three echo backends on loopback, writes the
//! quickstart manifests (`config/examples/quickstart/`, embedded in the binary) to a temporary
//! directory, serves them, and prints what to try. It also generates test CAs and serves a
//! second Gateway whose meshed route reaches an mTLS-only echo workload ([`mesh`]).

mod mesh;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;

use crate::cli::DemoArgs;
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

/// Echo backends, in the order of the quickstart's EndpointSlices (ports 18081-18083 there).
const BACKENDS: [&str; 3] = ["echo-a", "echo-b", "echo-c"];
/// The quickstart's listener ports (HTTPRoutes, GRPCRoutes) and backend ports, as written in
/// `config/examples/quickstart/`; the demo rewrites them to the ports it uses.
const QUICKSTART_PORTS: [u16; 2] = [8080, 8082];
const QUICKSTART_BACKEND_PORTS: [u16; 3] = [18081, 18082, 18083];

/// The ports the demo serves, from `--port` / `--backend-port` / `--admin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    /// The quickstart Gateway's HTTPRoute listener.
    pub http: u16,
    /// The meshed Gateway's HTTPRoute listener.
    pub mesh: u16,
    /// The quickstart Gateway's GRPCRoute listener.
    pub grpc: u16,
    /// The meshed Gateway's GRPCRoute listener.
    pub mesh_grpc: u16,
}

// === impl Ports ===

impl Ports {
    /// `base` and the three ports after it (8080: 8080-8083); 0 picks four free ports on
    /// `host`.
    pub fn from_base(host: IpAddr, base: u16) -> anyhow::Result<Self> {
        let [http, mesh, grpc, mesh_grpc] = if base == 0 {
            free_ports(host)?
        } else {
            let last = base.checked_add(3).with_context(|| {
                format!("--port {base}: the demo uses it and the three ports after it")
            })?;
            [base, base + 1, base + 2, last]
        };
        Ok(Self {
            http,
            mesh,
            grpc,
            mesh_grpc,
        })
    }

    fn all(&self) -> [u16; 4] {
        [self.http, self.mesh, self.grpc, self.mesh_grpc]
    }
}

/// Four distinct ports that were free on `host` a moment ago.
fn free_ports(host: IpAddr) -> anyhow::Result<[u16; 4]> {
    // All four held open until picked, so they differ.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(
            std::net::TcpListener::bind(SocketAddr::new(host, 0))
                .with_context(|| format!("cannot find a free port on {host}"))?,
        );
    }
    let mut ports = [0; 4];
    for (p, l) in ports.iter_mut().zip(&held) {
        *p = l.local_addr()?.port();
    }
    Ok(ports)
}

/// The quickstart manifests with their listener and backend ports replaced.
fn quickstart(ports: &Ports, backends: [u16; 3]) -> Vec<(&'static str, String)> {
    let mut moves: Vec<(u16, u16)> = QUICKSTART_PORTS
        .into_iter()
        .zip([ports.http, ports.grpc])
        .collect();
    moves.extend(QUICKSTART_BACKEND_PORTS.into_iter().zip(backends));
    MANIFESTS
        .iter()
        .map(|(name, text)| (*name, move_ports(text, &moves)))
        .collect()
}

/// Replaces the port numbers of `port: N` and `targetPort: N` fields (never other numbers);
/// each field is moved at most once.
fn move_ports(text: &str, moves: &[(u16, u16)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("ort: ") {
        let (head, tail) = rest.split_at(at + "ort: ".len());
        out.push_str(head);
        let field = head.ends_with("port: ") || head.ends_with("targetPort: ");
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        let moved = tail[..digits]
            .parse::<u16>()
            .ok()
            .and_then(|n| moves.iter().find(|(from, _)| *from == n))
            .filter(|_| field);
        match moved {
            Some((_, to)) => out.push_str(&to.to_string()),
            None => out.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// Fails, naming the port and the flag, if one of the listener ports is taken: the proxy only
/// retries a busy port, which would leave the demo printing URLs that do not answer.
fn check_free(host: IpAddr, ports: &Ports) -> anyhow::Result<()> {
    for port in ports.all() {
        let addr = SocketAddr::new(host, port);
        if let Err(e) = std::net::TcpListener::bind(addr) {
            anyhow::bail!(
                "cannot listen on {addr}: {e} (another `pier demo`?); the demo uses ports {}-{} \
                 here: choose others with --port (0 picks free ones)",
                ports.http,
                ports.mesh_grpc
            );
        }
    }
    Ok(())
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let listen_host = args.listen_host;
    let ports = Ports::from_base(listen_host, args.port)?;
    check_free(listen_host, &ports)?;
    let backend_addr = |i: u16| {
        let port = match args.backend_port {
            0 => Ok(0),
            base => base.checked_add(i).with_context(|| {
                format!("--backend-port {base}: the demo uses it and the three ports after it")
            }),
        };
        port.map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
    };
    let mut echoes = Vec::new();
    for (i, name) in (0u16..).zip(BACKENDS) {
        let addr = backend_addr(i)?;
        let server = crate::echo::spawn(addr, name).await.with_context(|| {
            format!(
                "cannot start the demo backend {name} on {addr} (is the port in use? choose \
                 others with --backend-port, 0 picks free ones)"
            )
        })?;
        echoes.push(server);
    }
    let backend_ports = [0, 1, 2].map(|i: usize| echoes[i].addr.port());
    let pki = mesh::MeshPki::generate().context("cannot generate the demo certificates")?;
    let workload_addr = backend_addr(3)?;
    let workload = crate::echo::spawn_tls(workload_addr, "echo-mesh", pki.workload.clone())
        .await
        .with_context(|| {
            format!(
                "cannot start the demo mTLS workload on {workload_addr} (is the port in use? \
                 choose others with --backend-port, 0 picks free ones)"
            )
        })?;
    let workload_port = workload.addr.port();
    echoes.push(workload);
    let dir = TempDir::new()?;
    let mesh_manifests = pki.manifests([ports.mesh, ports.mesh_grpc], workload_port);
    let files = quickstart(&ports, backend_ports)
        .into_iter()
        .chain([("40-mesh.yaml", mesh_manifests)]);
    for (name, text) in files {
        std::fs::write(dir.0.join(name), text)
            .with_context(|| format!("cannot write {}", dir.0.display()))?;
    }
    let running = run::start(RunOptions {
        listen_host,
        admin: args.admin,
        access_log: true,
        ..RunOptions::new(run::Source::Manifests(dir.0.clone()))
    })
    .await
    .with_context(|| {
        format!(
            "cannot start the demo (admin server on {}: choose another with --admin)",
            args.admin
        )
    })?;
    // With manifests, `start` has bound every listener, unless a port was taken since
    // `check_free`: then say so rather than print URLs that do not answer.
    if !running.is_ready() {
        let why = running.shared.unready_reason();
        running.shutdown().await;
        anyhow::bail!("the demo is not serving: {why}; choose other ports with --port");
    }
    let admin = running.admin_addr;
    let host = if listen_host.is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        listen_host.to_string()
    };
    let base = format!("http://{host}:{}", ports.http);
    let mesh = format!("http://{host}:{}", ports.mesh);
    let grpc = format!("http://{host}:{}", ports.grpc);
    let mesh_grpc = format!("http://{host}:{}", ports.mesh_grpc);
    let backends = echoes
        .iter()
        .map(|e| e.addr.port().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    // A gRPC call with curl: an empty message (5-byte frame header), h2c prior knowledge; the
    // answer is one framed JSON message, shown without its 5-byte header.
    let call = "printf '\\0\\0\\0\\0\\0' | curl -s --http2-prior-knowledge \
      -H 'content-type: application/grpc' -H 'te: trailers' --data-binary @- --output -";
    // Through `print_stdout`: a reader that closes stdout early must not stop the demo.
    crate::process::print_stdout(&format!(
        "pier demo is serving {base} (admin: http://{admin})
also: meshed {mesh}, gRPC {grpc}, meshed gRPC {mesh_grpc}; echo backends on 127.0.0.1 ports {backends}
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
  curl -s http://{admin}/metrics | grep -E 'tls=\"mesh\"|tls_handshakes'   # the meshed requests and handshakes
  curl -s http://{admin}/status                 # computed Gateway API status
  curl -s http://{admin}/metrics                # Prometheus metrics

Ctrl-C to stop.
",
        dir = dir.0.display()
    ))?;
    crate::process::shutdown_signal().await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quickstart_ports_move_to_the_ports_in_use() {
        let ports = Ports {
            http: 9080,
            mesh: 9081,
            grpc: 9082,
            mesh_grpc: 9083,
        };
        let files = quickstart(&ports, [19001, 19002, 19003]);
        let all: String = files.iter().map(|(_, t)| t.as_str()).collect();
        for old in ["port: 8080", "port: 8082", "18081", "18082", "18083"] {
            assert!(!all.contains(old), "{old} left in the manifests");
        }
        for new in [
            "port: 9080",
            "port: 9082",
            "targetPort: 19001}",
            "port: 19003,",
        ] {
            assert!(all.contains(new), "{new} not in the manifests");
        }
        // Service ports (80) are not listener or backend ports.
        assert!(all.contains("port: 80, targetPort: 19002"), "{all}");
    }

    #[test]
    fn the_default_ports_are_the_base_and_the_three_after_it() {
        let host = IpAddr::from([127, 0, 0, 1]);
        let p = Ports::from_base(host, 8080).unwrap();
        assert_eq!(p.all(), [8080, 8081, 8082, 8083]);
        assert!(Ports::from_base(host, 65534).is_err());
        let free = Ports::from_base(host, 0).unwrap();
        let mut distinct = free.all().to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "{free:?}");
    }
}
