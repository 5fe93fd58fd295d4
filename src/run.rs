//! `pier run`: wires a source, the publisher, the data plane and the admin server together,
//! and runs until shut down. Tests start it in-process through [`start`].

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::{self, ControlMetrics, ReloadResult};
use crate::proxy::{Proxy, ProxyConfig, ProxyMetrics};
use crate::publish::{Publisher, Shared};
use crate::source::files;
use crate::translate;

/// How long in-flight requests get to finish on shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How often ports that failed to bind are tried again.
const REBIND_EVERY: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub manifests: PathBuf,
    pub listen_host: IpAddr,
    pub admin: SocketAddr,
    pub translate: translate::Settings,
    pub access_log: bool,
    /// `--client-cert`/`--client-key`: read at start, watched, reloaded.
    pub client_cert: Option<ClientCertFiles>,
}

#[derive(Clone, Debug)]
pub struct ClientCertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClientCertFiles {
    /// Reads both files and checks that they make a usable identity (a bad rotation must not
    /// replace a good identity). Blocking.
    pub fn load(&self) -> anyhow::Result<translate::ClientIdentityPem> {
        let cert_pem = std::fs::read(&self.cert)
            .with_context(|| format!("cannot read {}", self.cert.display()))?;
        let key_pem = std::fs::read(&self.key)
            .with_context(|| format!("cannot read {}", self.key.display()))?;
        crate::tls::client::ClientIdentity::from_pem(&cert_pem, &key_pem).with_context(|| {
            format!(
                "{} / {} are not a usable client certificate and key",
                self.cert.display(),
                self.key.display()
            )
        })?;
        Ok(translate::ClientIdentityPem { cert_pem, key_pem })
    }

    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = [&self.cert, &self.key]
            .iter()
            .map(|p| {
                p.parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(std::path::Path::new("."))
                    .to_path_buf()
            })
            .collect();
        dirs.dedup();
        dirs
    }
}

/// A running pier.
pub struct Running {
    pub admin_addr: SocketAddr,
    pub shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
    admin_task: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish (bounded), and returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        let _ = self.admin_task.await;
    }
}

/// Loads the manifests, publishes the first configuration, binds the listeners and the admin
/// server, and starts watching. Fails (with the file and the reason) when the first load does:
/// there is no last good configuration to keep yet.
pub async fn start(opts: RunOptions) -> anyhow::Result<Running> {
    let mut registry = metrics::registry();
    let control = ControlMetrics::register(&mut registry);
    let proxy_metrics = Arc::new(ProxyMetrics::register(&mut registry));
    let shared = Arc::new(Shared::default());

    let admin_listener = crate::admin::bind(opts.admin)
        .await
        .with_context(|| format!("cannot bind the admin server to {}", opts.admin))?;
    let admin_addr = admin_listener.local_addr()?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let admin_state = Arc::new(crate::admin::AdminState {
        shared: shared.clone(),
        registry,
    });
    let admin_task = tokio::spawn(crate::admin::serve(
        admin_listener,
        admin_state,
        shutdown_rx.clone(),
    ));

    let dir = opts.manifests.clone();
    let loaded = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || files::load(&dir)).await?
    };
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            let _ = shutdown.send(true);
            return Err(e).context("cannot load the manifests");
        }
    };
    log_loaded(&loaded);
    let (guard, mut changes) =
        files::watch(&dir).with_context(|| format!("cannot watch {}", dir.display()))?;

    let proxy = Proxy::new(
        shared.snapshot.clone(),
        ProxyConfig {
            listen_host: opts.listen_host,
            access_log: opts.access_log,
            ..ProxyConfig::default()
        },
        proxy_metrics,
    );
    let mut settings = opts.translate.clone();
    let mut cert_changes = Vec::new();
    let mut cert_guards = Vec::new();
    if let Some(files) = &opts.client_cert {
        let f = files.clone();
        match tokio::task::spawn_blocking(move || f.load()).await? {
            Ok(identity) => settings.client_identity = Some(identity),
            Err(e) => {
                let _ = shutdown.send(true);
                return Err(e);
            }
        }
        for dir in files.dirs() {
            let (g, rx) =
                files::watch(&dir).with_context(|| format!("cannot watch {}", dir.display()))?;
            cert_guards.push(g);
            cert_changes.push(rx);
        }
    }
    let mut cert_changes =
        futures::stream::select_all(cert_changes.into_iter().map(tokio_stream_from));
    let client_cert = opts.client_cert.clone();
    let mut publisher = Publisher::new(shared.clone(), settings, control.clone());
    let generation = publisher.publish(loaded.resources).await;
    control.reload(ReloadResult::Ok);
    tracing::info!(generation, files = loaded.files, "configuration loaded");
    let mut bound = bind(&proxy, &shared).await;

    let mut shutdown_rx = shutdown_rx;
    let task_shared = shared.clone();
    let task = tokio::spawn(async move {
        let _guards = (guard, cert_guards);
        let mut rebind = tokio::time::interval(REBIND_EVERY);
        loop {
            tokio::select! {
                Some(()) = changes.recv() => {
                    let dir = dir.clone();
                    let loaded = match tokio::task::spawn_blocking(move || files::load(&dir)).await {
                        Ok(l) => l,
                        Err(e) => { tracing::error!(error = %e, "manifest loader panicked"); continue; }
                    };
                    match loaded {
                        Ok(loaded) => {
                            log_loaded(&loaded);
                            let generation = publisher.publish(loaded.resources).await;
                            control.reload(ReloadResult::Ok);
                            tracing::info!(generation, files = loaded.files, "configuration reloaded");
                            bound = bind(&proxy, &task_shared).await;
                        }
                        Err(e) => {
                            control.reload(match e {
                                files::LoadError::Parse { .. } => ReloadResult::ParseError,
                                _ => ReloadResult::ReadError,
                            });
                            tracing::error!(file = %e.path().display(), error = %e, "reload failed; keeping the last good configuration");
                        }
                    }
                }
                Some(()) = futures::StreamExt::next(&mut cert_changes) => {
                    let Some(files) = client_cert.clone() else { continue };
                    match tokio::task::spawn_blocking(move || files.load()).await {
                        Ok(Ok(identity)) => {
                            if let Some(generation) = publisher.set_client_identity(Some(identity)).await {
                                tracing::info!(generation, "client certificate reloaded");
                            }
                        }
                        Ok(Err(e)) => tracing::error!(error = format!("{e:#}"), "client certificate reload failed; keeping the last good one"),
                        Err(e) => tracing::error!(error = %e, "client certificate loader panicked"),
                    }
                }
                _ = rebind.tick(), if !bound => bound = bind(&proxy, &task_shared).await,
                _ = async { let _ = shutdown_rx.wait_for(|s| *s).await; } => break,
            }
        }
        proxy.shutdown(SHUTDOWN_GRACE).await;
    });
    Ok(Running {
        admin_addr,
        shared,
        shutdown,
        task,
        admin_task,
    })
}

/// Reconciles listening sockets; ready once every port is bound after the first publish.
async fn bind(proxy: &Proxy, shared: &Shared) -> bool {
    let failed = proxy.reconcile().await;
    for (port, e) in &failed {
        tracing::error!(port, error = %e, "cannot bind listener port; retrying");
    }
    if failed.is_empty() && !shared.ready.swap(true, Ordering::AcqRel) {
        tracing::info!(ports = ?proxy.bound_ports(), "ready");
    }
    failed.is_empty()
}

fn log_loaded(loaded: &files::Loaded) {
    for (path, kind) in &loaded.skipped {
        tracing::info!(file = %path.display(), kind = %kind, "skipping a kind pier does not read");
    }
}

/// A stream over an mpsc receiver (tokio-stream is not a dependency).
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<()>,
) -> impl futures::Stream<Item = ()> + Unpin {
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}
