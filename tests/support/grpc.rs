//! A real gRPC peer for tests: grpcio (gRPC's C core, Debian's `python3-grpcio`) running
//! `tests/fixtures/grpc/peer.py`, as a server of `pier.test.Echo` and as a client.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::mesh::{Ca, Cert};

/// Debian's interpreter, which has `python3-grpcio` (scripts/test installs it).
pub const PYTHON: &str = "/usr/bin/python3";
pub fn peer_script() -> String {
    format!("{}/tests/fixtures/grpc/peer.py", env!("CARGO_MANIFEST_DIR"))
}

/// A grpcio server of `pier.test.Echo`, stopped when dropped.
pub struct GrpcServer {
    child: Child,
    pub addr: SocketAddr,
    _dir: Option<tempfile::TempDir>,
}

impl GrpcServer {
    pub fn plain(name: &str) -> Self {
        Self::spawn(name, None, None)
    }

    /// Plaintext, its `grpc.health.v1.Health/Check` answering what the file `health` holds
    /// (`SERVING`, `NOT_SERVING`).
    pub fn plain_with_health(name: &str, health: &std::path::Path) -> Self {
        Self::spawn(name, None, Some(health))
    }

    /// mTLS: presents `cert`, requires a client certificate from `client_ca`.
    pub fn mtls(name: &str, cert: &Cert, client_ca: &Ca) -> Self {
        Self::spawn(name, Some((cert, client_ca)), None)
    }

    fn spawn(name: &str, tls: Option<(&Cert, &Ca)>, health: Option<&std::path::Path>) -> Self {
        let mut cmd = Command::new(PYTHON);
        cmd.arg(peer_script()).args(["serve", name]);
        if let Some(h) = health {
            cmd.env("PIER_PEER_HEALTH", h);
        }
        let dir = tls.map(|(cert, ca)| {
            let dir = tempfile::tempdir().unwrap();
            let write = |f: &str, s: &str| {
                let p = dir.path().join(f);
                std::fs::write(&p, s).unwrap();
                p
            };
            let paths = [
                write("cert.pem", &cert.chain_pem),
                write("key.pem", &cert.key_pem),
                write("ca.pem", &ca.pem),
            ];
            cmd.arg("--tls").args(paths);
            dir
        });
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{PYTHON} (apt-get install python3-grpcio): {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("gRPC server did not start ({e}): {line:?}"));
        let port = port["port"].as_u64().expect("port") as u16;
        Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            _dir: dir,
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        // Closing stdin stops it; kill in case it is stuck.
        drop(self.child.stdin.take().map(|mut s| s.flush()));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One call by the grpcio client to `target` (plaintext, h2c), `:authority` `host`:
/// `{code, details, responses, trailers}`. `rpc` is a method of `pier.test.Echo`, or
/// `service/Method`.
pub async fn call(target: SocketAddr, host: &str, rpc: &str, arg: &str) -> Value {
    let target = target.to_string();
    let (host, rpc, arg) = (host.to_string(), rpc.to_string(), arg.to_string());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(PYTHON)
            .arg(peer_script())
            .args(["call", &target, &host, &rpc, &arg])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "client failed: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}
