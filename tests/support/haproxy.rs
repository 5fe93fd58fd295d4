//! HAProxy from Debian as a real PROXY protocol sender: `mode tcp` frontends on free loopback
//! ports, each relaying to one address with `send-proxy` (v1) or `send-proxy-v2`. One
//! foreground process (`-db`) in a temporary directory; killed on drop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Haproxy {
    /// The frontends, in the order given to [`Haproxy::start`].
    pub frontends: Vec<SocketAddr>,
    child: Child,
    dir: tempfile::TempDir,
}

/// Which PROXY protocol header a frontend's server line sends.
#[derive(Clone, Copy, Debug)]
pub enum Send {
    V1,
    V2,
}

fn binary() -> PathBuf {
    for p in [
        "/usr/sbin/haproxy",
        "/usr/bin/haproxy",
        "/usr/local/sbin/haproxy",
    ] {
        if std::path::Path::new(p).exists() {
            return p.into();
        }
    }
    panic!(
        "haproxy is not installed: run ./scripts/test (it installs Debian's haproxy) or apt-get install haproxy"
    );
}

impl Haproxy {
    /// One frontend per `(target, send)`, relaying TCP to `target` behind that header.
    pub async fn start(targets: &[(SocketAddr, Send)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut conf = String::from(
            "global
    maxconn 256
defaults
    mode tcp
    timeout connect 2s
    timeout client 10s
    timeout server 10s
",
        );
        let mut frontends = vec![];
        for (i, (target, send)) in targets.iter().enumerate() {
            let port = super::free_port();
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let send = match send {
                Send::V1 => "send-proxy",
                // Health checks too: HAProxy sends them behind a v2 LOCAL header.
                Send::V2 => "send-proxy-v2 check inter 200ms",
            };
            conf.push_str(&format!(
                "frontend f{i}
    bind {addr}
    default_backend b{i}
backend b{i}
    server pier {target} {send}
"
            ));
            frontends.push(addr);
        }
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, conf).unwrap();
        let log = std::fs::File::create(dir.path().join("haproxy.log")).unwrap();
        let child = Command::new(binary())
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start haproxy");
        let mut h = Self {
            frontends,
            child,
            dir,
        };
        let start = Instant::now();
        for addr in h.frontends.clone() {
            while tokio::net::TcpStream::connect(addr).await.is_err() {
                if let Some(status) = h.child.try_wait().unwrap() {
                    panic!("haproxy exited with {status}: {}", h.log());
                }
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "haproxy did not start: {}",
                    h.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        h
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
