//! A real SPIRE server and agent for the SPIFFE Workload API tests, in a temporary directory:
//! the server on 127.0.0.1 (a free port) with a sqlite datastore, `join_token` node
//! attestation and an in-memory key manager; the agent attested by a join token, serving the
//! Workload API on a Unix socket with the `unix` workload attestor.
//!
//! ```text
//! Spire::start_server() ─> spire-server (127.0.0.1:<free>, admin socket server.sock)
//!    .register(id, selector, ttl)   entries under the agent's alias spiffe://<td>/agent
//!    .mint(id)                      an X.509-SVID for a test workload (`x509 mint`)
//!    .start_agent()                 spire-agent -joinToken ... (Workload API: agent.sock)
//! ```
//!
//! The binaries come from `PIER_SPIRE_SERVER` / `PIER_SPIRE_AGENT`, else from the cache that
//! `scripts/spire.sh build` fills. If they are missing the test fails (never skips). Processes
//! are started through `setpriv --pdeathsig KILL` (see `apiserver::Proc`); Drop kills them and
//! removes the directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::apiserver::Proc;
use super::mesh::Cert;

/// The trust domain of every test.
pub const TRUST_DOMAIN: &str = "example.org";
/// The agent's alias, the parent of every entry (the join token is generated for it).
pub const AGENT_ID: &str = "spiffe://example.org/agent";
/// Bound for the server or the agent to become healthy.
pub const START_BOUND: Duration = Duration::from_secs(60);

/// Where the binaries are.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub server: PathBuf,
    pub agent: PathBuf,
}

/// A running SPIRE server (and, once started, agent). See the module docs.
pub struct Spire {
    bins: Binaries,
    server: Proc,
    agent: Option<Proc>,
    port: u16,
    /// Last, so it is removed after the processes are gone.
    dir: tempfile::TempDir,
}

// === impl Binaries ===

impl Binaries {
    /// `PIER_SPIRE_SERVER` / `PIER_SPIRE_AGENT`, else `scripts/spire.sh`'s cache directory.
    /// Panics, saying how to build them, if either is missing.
    pub fn find() -> Self {
        let cache = std::env::var_os("PIER_SPIRE_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME").expect("HOME is set");
                Path::new(&home).join(".cache/pier/spire")
            });
        let version = std::env::var("PIER_SPIRE_VERSION").unwrap_or_else(|_| {
            super::pinned_version(include_str!("../../scripts/spire.sh"), "SPIRE_VERSION")
        });
        let dir = cache.join(format!("v{version}"));
        let pick = |var: &str, name: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .unwrap_or_else(|| dir.join(name))
        };
        let bins = Self {
            server: pick("PIER_SPIRE_SERVER", "spire-server"),
            agent: pick("PIER_SPIRE_AGENT", "spire-agent"),
        };
        for path in [&bins.server, &bins.agent] {
            assert!(
                path.is_file(),
                "{} not found: run `scripts/spire.sh build` (builds spire-server and spire-agent \
                 v{version} into {}), or set PIER_SPIRE_SERVER and PIER_SPIRE_AGENT",
                path.display(),
                dir.display(),
            );
        }
        bins
    }
}

// === impl Spire ===

impl Spire {
    /// Starts the server and waits until it is healthy. Call from the test's own task (the
    /// processes die with the thread that started them).
    pub async fn start_server() -> Self {
        let bins = Binaries::find();
        let dir = tempfile::Builder::new()
            .prefix("pier-spire-")
            .tempdir()
            .unwrap();
        let port = super::free_port();
        let d = dir.path();
        std::fs::create_dir_all(d.join("server")).unwrap();
        let conf = d.join("server.conf");
        std::fs::write(
            &conf,
            format!(
                r#"server {{
  bind_address = "127.0.0.1"
  bind_port = "{port}"
  socket_path = "{sock}"
  trust_domain = "{TRUST_DOMAIN}"
  data_dir = "{data}"
  log_level = "DEBUG"
  ca_ttl = "24h"
  default_x509_svid_ttl = "1h"
}}

plugins {{
  DataStore "sql" {{
    plugin_data {{
      database_type = "sqlite3"
      connection_string = "{data}/datastore.sqlite3"
    }}
  }}
  NodeAttestor "join_token" {{
    plugin_data {{}}
  }}
  KeyManager "memory" {{
    plugin_data {{}}
  }}
}}

health_checks {{
  listener_enabled = false
}}
"#,
                sock = d.join("server.sock").display(),
                data = d.join("server").display(),
            ),
        )
        .unwrap();
        let server = Proc::spawn(
            "spire-server",
            &bins.server,
            &["run".into(), "-config".into(), conf.display().to_string()],
            d.join("server.log"),
        );
        let mut spire = Self {
            bins,
            server,
            agent: None,
            port,
            dir,
        };
        spire.wait_healthy(false).await;
        spire
    }

    /// The agent's Workload API socket (it exists once [`start_agent`](Self::start_agent)
    /// returns).
    pub fn agent_socket(&self) -> PathBuf {
        self.dir.path().join("agent.sock")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `spire-server <args> -socketPath <admin socket>`; its stdout. Panics on failure.
    pub fn server_cmd(&self, args: &[&str]) -> String {
        let sock = self.dir.path().join("server.sock");
        let out = Command::new(&self.bins.server)
            .args(args)
            .arg("-socketPath")
            .arg(&sock)
            .output()
            .unwrap_or_else(|e| panic!("spawn spire-server {args:?}: {e}"));
        assert!(
            out.status.success(),
            "spire-server {args:?}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A registration entry under the agent: workloads matching `selector` get `spiffe_id`,
    /// with an X.509-SVID TTL of `ttl_secs`.
    pub fn register(&self, spiffe_id: &str, selector: &str, ttl_secs: u64) {
        self.server_cmd(&[
            "entry",
            "create",
            "-parentID",
            AGENT_ID,
            "-spiffeID",
            spiffe_id,
            "-selector",
            selector,
            "-x509SVIDTTL",
            &ttl_secs.to_string(),
        ]);
    }

    /// An X.509-SVID for `spiffe_id`, signed by the server's CA (valid for an hour), as a
    /// test workload's server certificate.
    pub fn mint(&self, spiffe_id: &str) -> Cert {
        let out = self.dir.path().join(format!("mint-{}", spiffe_id.len()));
        std::fs::create_dir_all(&out).unwrap();
        self.server_cmd(&[
            "x509",
            "mint",
            "-spiffeID",
            spiffe_id,
            "-ttl",
            "1h",
            "-write",
            out.to_str().unwrap(),
        ]);
        let chain_pem = std::fs::read_to_string(out.join("svid.pem")).unwrap();
        let key_pem = std::fs::read_to_string(out.join("key.pem")).unwrap();
        Cert {
            chain: CertificateDer::pem_slice_iter(chain_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap(),
            key: PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap(),
            chain_pem,
            key_pem,
        }
    }

    /// The server's X.509 trust bundle (its CA certificates).
    pub fn bundle(&self) -> Vec<CertificateDer<'static>> {
        let pem = self.server_cmd(&["bundle", "show", "-format", "pem"]);
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Starts the agent (attested with a fresh join token for [`AGENT_ID`]) and waits until it
    /// is healthy.
    pub async fn start_agent(&mut self) {
        let d = self.dir.path().to_path_buf();
        let token_out = self.server_cmd(&["token", "generate", "-spiffeID", AGENT_ID]);
        let token = token_out
            .lines()
            .find_map(|l| l.strip_prefix("Token: "))
            .unwrap_or_else(|| panic!("no token in {token_out:?}"))
            .trim()
            .to_string();
        let bundle = d.join("bootstrap.pem");
        std::fs::write(
            &bundle,
            self.server_cmd(&["bundle", "show", "-format", "pem"]),
        )
        .unwrap();
        std::fs::create_dir_all(d.join("agent")).unwrap();
        let conf = d.join("agent.conf");
        std::fs::write(
            &conf,
            format!(
                r#"agent {{
  data_dir = "{data}"
  log_level = "DEBUG"
  server_address = "127.0.0.1"
  server_port = "{port}"
  socket_path = "{sock}"
  trust_bundle_path = "{bundle}"
  trust_domain = "{TRUST_DOMAIN}"
}}

plugins {{
  NodeAttestor "join_token" {{
    plugin_data {{}}
  }}
  KeyManager "memory" {{
    plugin_data {{}}
  }}
  WorkloadAttestor "unix" {{
    plugin_data {{}}
  }}
}}
"#,
                data = d.join("agent").display(),
                port = self.port,
                sock = self.agent_socket().display(),
                bundle = bundle.display(),
            ),
        )
        .unwrap();
        self.agent = Some(Proc::spawn(
            "spire-agent",
            &self.bins.agent,
            &[
                "run".into(),
                "-config".into(),
                conf.display().to_string(),
                "-joinToken".into(),
                token,
            ],
            d.join("agent.log"),
        ));
        self.wait_healthy(true).await;
    }

    /// Kills the agent (the Workload API socket stops answering).
    pub fn stop_agent(&mut self) {
        if let Some(mut a) = self.agent.take() {
            a.kill();
        }
    }

    /// The last lines of both logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = format!("--- spire-server log tail:\n{}\n", self.server.tail());
        if let Some(a) = &self.agent {
            out.push_str(&format!("--- spire-agent log tail:\n{}\n", a.tail()));
        }
        out
    }

    async fn wait_healthy(&mut self, agent: bool) {
        let deadline = Instant::now() + START_BOUND;
        loop {
            let (bin, sock) = if agent {
                (&self.bins.agent, self.agent_socket())
            } else {
                (&self.bins.server, self.dir.path().join("server.sock"))
            };
            let ok = Command::new(bin)
                .args(["healthcheck", "-socketPath"])
                .arg(&sock)
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return;
            }
            self.server.assert_running();
            if let Some(a) = &mut self.agent {
                a.assert_running();
            }
            assert!(
                Instant::now() < deadline,
                "SPIRE {} not healthy within {START_BOUND:?}\n{}",
                if agent { "agent" } else { "server" },
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Spire {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
    }
}
