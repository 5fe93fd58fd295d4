//! Credentials that keep working while pier runs: the [`Client`] pier watches and writes status
//! with forwards every request to the *current* kube client, rebuilt from the kubeconfig as it
//! is now.
//!
//! ```text
//! kubeconfig files and the files they name (CA, client certificate and key, tokenFile)
//!   └─ SHA-256 of their bytes every POLL; changed, then unchanged for one more poll
//!      (a writer that pauses never gets half a file applied) ───────────────┐
//! SIGHUP (`systemctl reload`) ──────────────────────────────────────────────┤
//! a 401 from the API server (credentials revoked or expired before the      │
//!   time they stated; an exec plugin runs again), at most once per RETRY_401┘
//!   └─> Connect::config() + Client::try_from (on the blocking pool: exec plugins run there)
//!        ├─ ok: swapped in; new requests use it, requests in flight (long watches) finish
//!        │      on the client they started with
//!        └─ error: logged with the reason, counted; the last good client stays
//! ```
//!
//! kube-rs itself re-reads a `tokenFile` once a minute and re-runs an exec credential plugin
//! (`aws eks get-token`, `gke-gcloud-auth-plugin`) 60 s before the `expirationTimestamp` the
//! plugin returned. This layer adds what it does not do: a kubeconfig whose inline token or
//! certificate files are rewritten, a token file change taken now rather than within a minute,
//! and credentials the API server refuses before their stated expiry (client-go re-runs an exec
//! plugin after a 401 too). Left out: an exec plugin that returns a client *certificate* is
//! re-run only on a 401 or a file change, not before the certificate's expiry.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use kube::config::Kubeconfig;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Connect;

/// How often the kubeconfig files are read for a change.
pub const POLL: Duration = Duration::from_secs(2);
/// After a 401, the credentials are rebuilt at most this often (a plugin that keeps returning
/// a refused token is not run in a loop).
pub const RETRY_401: Duration = Duration::from_secs(10);
/// A repeated 401 is logged at warn at most this often.
const LOG_401_EVERY: Duration = Duration::from_secs(60);

/// `pier_kube_credential_reloads_total{result}` and `pier_kube_unauthorized_total`.
#[derive(Clone, Debug, Default)]
pub struct CredentialMetrics {
    pub reloads: Family<ResultLabels, Counter>,
    pub unauthorized: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: ReloadResult,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ReloadResult {
    Ok,
    Error,
}

/// Keeps the reload task running; it stops when this is dropped.
pub struct Credentials {
    reload: Arc<Notify>,
    task: JoinHandle<()>,
}

/// What every request goes through: the current client, and the 401 alarm.
#[derive(Clone)]
struct Forward {
    current: Arc<ArcSwap<Client>>,
    unauthorized: Arc<Notify>,
    metrics: CredentialMetrics,
}

/// Why the client is rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    FilesChanged,
    Signal,
    Unauthorized,
}

/// SHA-256 over the kubeconfig files and the files they name (path, then contents or absence).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint([u8; 32]);

// === impl Credentials ===

impl Credentials {
    /// A client that follows the kubeconfig of `connect`, its API server URL, and the handle
    /// that keeps it following.
    pub async fn start(
        connect: Connect,
        metrics: CredentialMetrics,
    ) -> anyhow::Result<(Client, String, Self)> {
        let before = fingerprint(connect.kubeconfig_paths()).await;
        let (client, server, namespace) = build(&connect).await?;
        tracing::info!(server = %server, "using the Kubernetes API server");
        let current = Arc::new(ArcSwap::from_pointee(client));
        let unauthorized = Arc::new(Notify::new());
        let reload = Arc::new(Notify::new());
        let forward = Forward {
            current: current.clone(),
            unauthorized: unauthorized.clone(),
            metrics: metrics.clone(),
        };
        let task = tokio::spawn(follow(
            connect,
            Arc::downgrade(&current),
            unauthorized,
            reload.clone(),
            metrics,
            before,
            server.clone(),
        ));
        Ok((
            Client::new(forward, namespace),
            server,
            Self { reload, task },
        ))
    }

    /// Rebuild the client now, from the files as they are (SIGHUP).
    pub fn reload(&self) {
        self.reload.notify_one();
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The client, the API server's URL and the default namespace, from the files as they are now.
/// The client is built on the blocking pool: building it runs an exec credential plugin.
async fn build(connect: &Connect) -> anyhow::Result<(Client, String, String)> {
    use anyhow::Context as _;
    let config = connect.config().await?;
    let server = config.cluster_url.to_string();
    let namespace = config.default_namespace.clone();
    let client = tokio::task::spawn_blocking(move || Client::try_from(config))
        .await
        .context("the credential task panicked")?
        .context("cannot build the Kubernetes client")?;
    Ok((client, server, namespace))
}

/// Rebuilds the client on a settled file change, a signal or a 401, until the client is gone.
async fn follow(
    connect: Connect,
    current: Weak<ArcSwap<Client>>,
    unauthorized: Arc<Notify>,
    reload: Arc<Notify>,
    metrics: CredentialMetrics,
    mut applied: Fingerprint,
    mut server: String,
) {
    let mut seen = applied.clone();
    let mut last_401: Option<Instant> = None;
    let mut logged_401: Option<Instant> = None;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let why = tokio::select! {
            _ = tick.tick() => {
                let now = fingerprint(connect.kubeconfig_paths()).await;
                let settled = now == seen;
                seen = now;
                if !settled || seen == applied {
                    continue;
                }
                Why::FilesChanged
            }
            () = reload.notified() => Why::Signal,
            () = unauthorized.notified() => {
                if last_401.is_some_and(|t| t.elapsed() < RETRY_401) {
                    continue;
                }
                last_401 = Some(Instant::now());
                if logged_401.is_none_or(|t| t.elapsed() >= LOG_401_EVERY) {
                    logged_401 = Some(Instant::now());
                    tracing::warn!(
                        server = %server,
                        "the API server answered 401 Unauthorized: reading the kubeconfig again \
                         (an exec credential plugin runs again)"
                    );
                }
                Why::Unauthorized
            }
        };
        let Some(current) = current.upgrade() else {
            return;
        };
        let files = fingerprint(connect.kubeconfig_paths()).await;
        match build(&connect).await {
            Ok((client, new_server, _)) => {
                current.store(Arc::new(client));
                metrics
                    .reloads
                    .get_or_create(&ResultLabels {
                        result: ReloadResult::Ok,
                    })
                    .inc();
                match why {
                    Why::Unauthorized => tracing::debug!("Kubernetes credentials rebuilt"),
                    _ if new_server != server => tracing::warn!(
                        from = %server,
                        to = %new_server,
                        ?why,
                        "the kubeconfig names another API server: using it from now on"
                    ),
                    _ => tracing::info!(
                        server = %new_server,
                        ?why,
                        "Kubernetes credentials reloaded from the kubeconfig"
                    ),
                }
                server = new_server;
                logged_401 = None;
            }
            Err(e) => {
                metrics
                    .reloads
                    .get_or_create(&ResultLabels {
                        result: ReloadResult::Error,
                    })
                    .inc();
                tracing::error!(
                    error = format!("{e:#}"),
                    ?why,
                    "cannot use the kubeconfig as it is now; keeping the last good credentials"
                );
            }
        }
        // A broken file is reported once, not at every poll; the next change is tried again.
        applied = files.clone();
        seen = files;
    }
}

/// The kubeconfig files and every file they name, hashed; a file that cannot be read counts as
/// absent (an atomic rename in progress, or a file not there yet).
async fn fingerprint(paths: Vec<PathBuf>) -> Fingerprint {
    tokio::task::spawn_blocking(move || {
        let mut files = Vec::new();
        for path in &paths {
            files.push(path.clone());
            if let Ok(config) = Kubeconfig::read_from(path) {
                files.extend(named_files(&config));
            }
        }
        let mut h = crate::tls::provider::Sha256::new();
        for file in &files {
            let path = file.as_os_str().as_encoded_bytes();
            h.update(&(path.len() as u64).to_le_bytes());
            h.update(path);
            match std::fs::read(file) {
                Ok(bytes) => {
                    h.update(&[1]);
                    h.update(&(bytes.len() as u64).to_le_bytes());
                    h.update(&bytes);
                }
                Err(_) => h.update(&[0]),
            }
        }
        let mut out = [0; 32];
        out.copy_from_slice(h.finish().as_ref());
        Fingerprint(out)
    })
    .await
    .unwrap_or(Fingerprint([0; 32]))
}

/// The files a kubeconfig names (paths made absolute by [`Kubeconfig::read_from`]).
fn named_files(config: &Kubeconfig) -> Vec<PathBuf> {
    let clusters = config
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref()?.certificate_authority.as_deref());
    let users = config
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
        .flat_map(|a| {
            [
                a.client_certificate.as_deref(),
                a.client_key.as_deref(),
                a.token_file.as_deref(),
            ]
        })
        .flatten();
    clusters.chain(users).map(PathBuf::from).collect()
}

// === impl Connect (files) ===

impl Connect {
    /// The kubeconfig files this connection reads: `--kubeconfig PATH`, else `KUBECONFIG`'s
    /// list, else `~/.kube/config` (whether or not it exists: in a cluster it does not).
    pub fn kubeconfig_paths(&self) -> Vec<PathBuf> {
        if let Some(path) = &self.kubeconfig {
            return vec![path.clone()];
        }
        if let Some(list) = std::env::var_os("KUBECONFIG") {
            let paths: Vec<_> = std::env::split_paths(&list)
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
            if !paths.is_empty() {
                return paths;
            }
        }
        std::env::var_os("HOME")
            .map(|home| vec![Path::new(&home).join(".kube").join("config")])
            .unwrap_or_default()
    }
}

// === impl Forward ===

impl tower::Service<Request<Body>> for Forward {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let client = self.current.load_full();
        let unauthorized = self.unauthorized.clone();
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let response = client.send(request).await?;
            if response.status() == StatusCode::UNAUTHORIZED {
                metrics.unauthorized.inc();
                unauthorized.notify_one();
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_files_are_the_ca_client_certificate_key_and_token_file() {
        let yaml = "apiVersion: v1\nkind: Config\n\
            clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: /x/ca.crt\n\
            users:\n- name: a\n  user:\n    client-certificate: /x/a.crt\n    client-key: /x/a.key\n\
            - name: b\n  user:\n    tokenFile: /x/token\n\
            - name: e\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/plugin\n\
            contexts: []\n";
        let config = Kubeconfig::from_yaml(yaml).unwrap();
        let files: Vec<_> = named_files(&config)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(files, ["/x/ca.crt", "/x/a.crt", "/x/a.key", "/x/token"]);
    }

    #[tokio::test]
    async fn the_fingerprint_moves_with_a_named_file_and_not_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        let kubeconfig = dir.path().join("config");
        std::fs::write(&token, "one").unwrap();
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n\
             users:\n- name: u\n  user:\n    tokenFile: token\n",
        )
        .unwrap();
        let paths = || vec![kubeconfig.clone()];
        let a = fingerprint(paths()).await;
        assert_eq!(a, fingerprint(paths()).await);
        // A relative tokenFile is read next to the kubeconfig.
        std::fs::write(&token, "two").unwrap();
        let b = fingerprint(paths()).await;
        assert_ne!(a, b);
        std::fs::remove_file(&token).unwrap();
        assert_ne!(b, fingerprint(paths()).await);
    }
}
