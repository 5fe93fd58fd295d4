//! Envoy's global rate-limit service (`envoyproxy/ratelimit`, built by `scripts/ratelimit.sh`)
//! with Debian's redis-server, each on free loopback ports, for the global rate-limit tests.
//!
//! The service reads every file of `<dir>/runtime/ratelimit/config/` (pier writes its file
//! there with `--rate-limit-config`) and reloads on change. It needs Redis up when it starts
//! and a config directory that exists. Both are killed (SIGKILL) on drop: the service's
//! graceful stop waits for calls that a dead Redis never finishes. Binaries from
//! `PIER_RATELIMIT` / `PIER_REDIS_SERVER`, else the cache and `/usr/bin`; missing, the test
//! fails (never skips).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;
use super::web::Child;

pub struct RateLimit {
    pub redis: Option<Child>,
    pub service: Option<Child>,
    pub redis_port: u16,
    /// ShouldRateLimit over h2c.
    pub grpc: SocketAddr,
    /// `/healthcheck`, `/json`.
    pub http: SocketAddr,
    /// Where pier writes its config file (`--rate-limit-config`).
    pub config_file: PathBuf,
    runtime: PathBuf,
}

pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PIER_RATELIMIT") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("PIER_RATELIMIT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").expect("HOME is set")).join(".cache/pier/ratelimit")
        });
    let version = super::pinned_version(
        include_str!("../../scripts/ratelimit.sh"),
        "RATELIMIT_VERSION",
    );
    let bin = cache.join(format!("{version}/ratelimit"));
    assert!(
        bin.is_file(),
        "{} not found: run `scripts/ratelimit.sh build`, or set PIER_RATELIMIT",
        bin.display()
    );
    bin
}

fn redis_binary() -> PathBuf {
    let p = std::env::var_os("PIER_REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/redis-server"));
    assert!(
        p.is_file(),
        "{} not found: run `scripts/ratelimit.sh build` (installs redis-server)",
        p.display()
    );
    p
}

/// Ports and directories for a service under `dir`; nothing runs until [`RateLimit::start_redis`]
/// and [`RateLimit::start_service`].
pub fn prepare(dir: &Path) -> RateLimit {
    let runtime = dir.join("runtime");
    let config = runtime.join("ratelimit/config");
    std::fs::create_dir_all(&config).unwrap();
    RateLimit {
        redis: None,
        service: None,
        redis_port: free_port(),
        grpc: SocketAddr::from(([127, 0, 0, 1], free_port())),
        http: SocketAddr::from(([127, 0, 0, 1], free_port())),
        config_file: config.join("pier.yaml"),
        runtime,
    }
}

fn wait_tcp(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + super::BOUND;
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl RateLimit {
    pub fn start_redis(&mut self) {
        let child = Command::new(redis_binary())
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.redis_port.to_string(),
            ])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.redis = Some(Child(child));
        wait_tcp(
            SocketAddr::from(([127, 0, 0, 1], self.redis_port)),
            "redis-server",
        );
    }

    /// The service (Redis must be up); ready once its gRPC port accepts.
    pub fn start_service(&mut self) {
        let child = Command::new(binary())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs([
                ("HOST", "127.0.0.1".to_string()),
                ("PORT", self.http.port().to_string()),
                ("GRPC_HOST", "127.0.0.1".to_string()),
                ("GRPC_PORT", self.grpc.port().to_string()),
                ("DEBUG_HOST", "127.0.0.1".to_string()),
                ("DEBUG_PORT", free_port().to_string()),
                ("REDIS_SOCKET_TYPE", "tcp".to_string()),
                ("REDIS_URL", format!("127.0.0.1:{}", self.redis_port)),
                ("RUNTIME_ROOT", self.runtime.display().to_string()),
                ("RUNTIME_SUBDIRECTORY", "ratelimit".to_string()),
                ("RUNTIME_APPDIRECTORY", "config".to_string()),
                ("RUNTIME_WATCH_ROOT", "false".to_string()),
                ("RUNTIME_IGNOREDOTFILES", "true".to_string()),
                ("USE_STATSD", "false".to_string()),
                ("DISABLE_STATS", "true".to_string()),
                ("LOG_LEVEL", "warn".to_string()),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ratelimit starts");
        self.service = Some(Child(child));
        wait_tcp(self.grpc, "the rate-limit service");
    }

    /// Polls the service's `/json` until `domain` has a limit for `descriptor` (the config pier
    /// wrote is loaded): the status carries `currentLimit`. Counts one hit when it does.
    pub async fn until_loaded(&self, domain: &str, descriptor: &[(&str, &str)]) {
        let entries: Vec<_> = descriptor
            .iter()
            .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
            .collect();
        let body = serde_json::json!({"domain": domain, "descriptors": [{"entries": entries}]});
        let deadline = Instant::now() + super::BOUND;
        loop {
            let out = Command::new("curl")
                .args(["-s", "-X", "POST", "--max-time", "2", "-d"])
                .arg(body.to_string())
                .arg(format!("http://{}/json", self.http))
                .output()
                .expect("curl runs");
            let text = String::from_utf8_lossy(&out.stdout);
            if text.contains("currentLimit") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the service never loaded a limit for {descriptor:?}: {text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
