//! `pier run`: wires a source, the publisher, the data plane and the admin server together
//! (and in cluster mode the status writer), and runs until shut down. Tests start it
//! in-process through [`start`].
//!
//! ```text
//! Source::Manifests ─ files::load/watch ─┐
//! Source::Cluster ── source::kube ───────┴─> `()` per change ─> Resources ─> Publisher ─> Proxy
//!                                                                               └─> Shared.statuses ─> StatusWriter (cluster)
//! --client-cert files (CertWatch) | SPIFFE Workload API (source::spiffe) ─> Publisher settings
//! Publisher ─(remoteJWKS URIs)─> source::jwks ─(fetched key sets)─> Publisher settings
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::metrics::{self, ControlMetrics, ReloadResult};
use crate::proxy::{Proxy, ProxyConfig, ProxyMetrics};
use crate::publish::{Publisher, Shared};
use crate::source::files;
use crate::source::jwks::{JwksMetrics, JwksSource};
use crate::source::kube::{
    self as kube_source, Credentials, KubeMetrics, KubeSource, Stores, WatchScope,
};
use crate::source::spiffe::{self as spiffe_source, WorkloadApiSource};
use crate::status_writer::{self, StatusMetrics, StatusOptions, StatusWriter};
use crate::translate::spiffe::WorkloadApiState;
use crate::translate::{self, Resources};

/// How long in-flight requests get to finish on shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a start with manifests waits for the first `remoteJWKS` fetches.
const JWKS_START_GRACE: Duration = Duration::from_secs(5);
/// How often ports that failed to bind are tried again.
const REBIND_EVERY: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub source: Source,
    pub listen_host: IpAddr,
    pub admin: SocketAddr,
    /// `--admin-socket`: the admin server also on this Unix socket (mode 0660).
    pub admin_socket: Option<PathBuf>,
    pub translate: translate::Settings,
    pub access_log: bool,
    /// `--access-log-fields`.
    pub access_log_fields: crate::proxy::AccessLogFields,
    /// Bind listener and admin ports with `SO_REUSEPORT` (zero-downtime restarts).
    pub reuse_port: bool,
    /// TLS session resumption on listeners (`--no-tls-session-resumption` turns it off).
    pub tls_session_resumption: bool,
    /// `--trusted-proxies`: whose forwarding headers and request IDs pier believes.
    pub trusted_proxies: crate::proxy::TrustedProxies,
    /// Idle connections, slow request bodies, path normalisation.
    pub limits: crate::proxy::Limits,
    /// `--otlp-endpoint`, `--trace-sample-ratio`: W3C trace context and span export over
    /// OTLP/HTTP. `None` (the default): off, trace headers pass through untouched.
    pub tracing: Option<crate::proxy::trace::TraceConfig>,
    /// `--admin-token-file`: a bearer token the admin server requires (but for the probes).
    /// A file holding the bearer token the admin server requires (but on the probes); read
    /// at start (an error stops the start) and again whenever it changes.
    pub admin_token_file: Option<PathBuf>,
    /// `--client-cert`/`--client-key`: read at start, watched, reloaded.
    pub client_cert: Option<ClientCertFiles>,
    /// `--spiffe-socket` (or `SPIFFE_ENDPOINT_SOCKET`): pier's client certificate and bundles
    /// from the SPIFFE Workload API at this endpoint (a `unix:`/`tcp:` URI,
    /// [`crate::source::spiffe::parse_endpoint`]), streamed. Exclusive with `client_cert`.
    pub spiffe_endpoint: Option<String>,
    /// Bounds on each load of `Source::Manifests`.
    pub manifest_limits: files::Limits,
    /// `--probe-interval`: probe a sample of each Gateway's endpoint addresses this often
    /// (`pier_pod_network_*` metrics, a warning when one becomes unreachable); `None`: never.
    pub probe_interval: Option<Duration>,
    /// `--ready-requires-listener`: `/readyz` is 503 while the configuration serves no
    /// listener (by default it is 200 and says so).
    pub ready_requires_listener: bool,
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

    /// The file names of the certificate and the key, for the watcher.
    fn names(&self) -> Vec<std::ffi::OsString> {
        [&self.cert, &self.key]
            .iter()
            .filter_map(|p| p.file_name().map(ToOwned::to_owned))
            .collect()
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

/// Where the Gateway API objects come from.
// Built once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Source {
    /// A directory of manifests, watched.
    Manifests(PathBuf),
    /// A cluster, watched through its API server.
    Cluster(ClusterOptions),
}

#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub connect: kube_source::Connect,
    pub scope: WatchScope,
    /// `None`: never write status (and take no Lease).
    pub status: Option<StatusOptions>,
}

/// A running pier.
pub struct Running {
    pub admin_addr: SocketAddr,
    pub shared: Arc<Shared>,
    /// Cluster mode: whether this replica holds the status-writer Lease.
    pub leader: Option<watch::Receiver<bool>>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
    admin_task: JoinHandle<()>,
    admin_socket_task: Option<JoinHandle<()>>,
    token_task: Option<JoinHandle<()>>,
    reload: mpsc::Sender<()>,
}

/// What feeds the run loop (one per run).
#[allow(clippy::large_enum_variant)]
enum Feed {
    Files {
        dir: PathBuf,
        limits: files::Limits,
        _guard: files::WatchGuard,
    },
    Cluster {
        source: KubeSource,
        writer: Option<StatusWriter>,
        /// Follows the kubeconfig; SIGHUP rebuilds the client now.
        credentials: Credentials,
    },
}

// === impl RunOptions ===

impl RunOptions {
    /// The CLI defaults: listeners on all addresses, admin on `127.0.0.1:9901`.
    pub fn new(source: Source) -> Self {
        Self {
            source,
            listen_host: IpAddr::from([0, 0, 0, 0]),
            admin: SocketAddr::from(([127, 0, 0, 1], 9901)),
            admin_socket: None,
            translate: translate::Settings::default(),
            access_log: false,
            access_log_fields: crate::proxy::AccessLogFields::ALL,
            reuse_port: false,
            tls_session_resumption: true,
            trusted_proxies: crate::proxy::TrustedProxies::default(),
            limits: crate::proxy::Limits::default(),
            tracing: None,
            admin_token_file: None,
            client_cert: None,
            spiffe_endpoint: None,
            manifest_limits: files::Limits::default(),
            probe_interval: None,
            ready_requires_listener: false,
        }
    }
}

// === impl ClusterOptions ===

impl ClusterOptions {
    /// Default scope; status written under `lease`.
    pub fn new(connect: kube_source::Connect, lease: status_writer::LeaseOptions) -> Self {
        Self {
            connect,
            scope: WatchScope::default(),
            status: Some(StatusOptions::new(lease)),
        }
    }
}

// === impl Running ===

impl Running {
    /// Stops accepting, lets in-flight requests finish (bounded), releases the Lease, and
    /// returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        let _ = self.admin_task.await;
        if let Some(t) = self.token_task {
            let _ = t.await;
        }
        if let Some(t) = self.admin_socket_task {
            let _ = t.await;
        }
    }

    /// Re-reads the configuration (the manifests, or the cluster's current state) and the
    /// `--client-cert` files now, as after a change (SIGHUP, `systemctl reload`). Reloads
    /// already asked for and not yet done are not repeated.
    pub fn reload(&self) {
        let _ = self.reload.try_send(());
    }

    /// Whether `/readyz` says ready.
    pub fn is_ready(&self) -> bool {
        self.shared.is_ready()
    }
}

/// Raises the soft open-files limit to the hard one (as Go programs do at start-up; shells
/// and containers often start with a soft limit of 1024, far below `--max-connections`), and
/// warns when even that is below one port's connection cap (one descriptor a client
/// connection, and room for backend connections, listeners and files).
fn raise_open_files_limit(max_connections: usize) {
    let needed = (max_connections as u64).saturating_add(1024);
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < needed => tracing::warn!(
            limit,
            needed,
            max_connections,
            "the open-files limit is below what --max-connections needs: accepting fails at \
             the limit; raise it (systemd LimitNOFILE=, ulimit -Hn) or lower --max-connections"
        ),
        Ok(limit) => tracing::debug!(limit, "open-files limit"),
        Err(error) => tracing::warn!(%error, "cannot read or raise the open-files limit"),
    }
}

/// Starts pier. With manifests: loads them, publishes the first configuration and binds the
/// listeners before returning, and fails (with the file and the reason) when the first load
/// does, as there is no last good configuration to keep yet. With a cluster: connects (fails
/// only on an unusable kubeconfig) and returns at once; the first configuration is published
/// once every watch has listed, and `/readyz` says 503 until then.
pub async fn start(opts: RunOptions) -> anyhow::Result<Running> {
    raise_open_files_limit(opts.limits.max_connections);
    let mut registry = metrics::registry();
    let control = ControlMetrics::register(&mut registry);
    let proxy_metrics = Arc::new(ProxyMetrics::register(&mut registry));
    let kube_metrics = KubeMetrics::register(&mut registry);
    let status_metrics = StatusMetrics::register(&mut registry);
    let reach_metrics = metrics::ReachabilityMetrics::register(&mut registry);
    let jwks_metrics = JwksMetrics::register(&mut registry);
    let shared = Arc::new(Shared::new(opts.ready_requires_listener));

    let admin_listener = crate::admin::bind(opts.admin, opts.reuse_port)
        .await
        .with_context(|| format!("cannot bind the admin server to {}", opts.admin))?;
    let admin_addr = admin_listener.local_addr()?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let token = match &opts.admin_token_file {
        Some(path) => Some(Arc::new(crate::admin::AdminToken::read(path)?)),
        None => None,
    };
    let admin_state = Arc::new(crate::admin::AdminState {
        shared: shared.clone(),
        listen_host: opts.listen_host,
        registry,
        token: arc_swap::ArcSwapOption::new(token),
    });
    let token_task = match &opts.admin_token_file {
        Some(path) => Some(crate::admin::watch_token(
            path.clone(),
            admin_state.clone(),
            shutdown_rx.clone(),
        )?),
        None => None,
    };
    let admin_socket_task = match &opts.admin_socket {
        Some(path) => {
            let listener = crate::admin::bind_unix(path)
                .with_context(|| format!("cannot bind the admin server to {}", path.display()))?;
            tracing::info!(socket = %path.display(), "admin server listening");
            Some(tokio::spawn(crate::admin::serve_unix(
                listener,
                path.clone(),
                admin_state.clone(),
                shutdown_rx.clone(),
            )))
        }
        None => None,
    };
    let admin_task = tokio::spawn(crate::admin::serve(
        admin_listener,
        admin_state,
        shutdown_rx.clone(),
    ));
    shared.set_unready_reason("loading the first configuration".to_string());
    let fail = |e: anyhow::Error| {
        let _ = shutdown.send(true);
        Err(e)
    };

    let tracer = match &opts.tracing {
        Some(config) => match trace_tls(config)
            .await
            .and_then(|tls| crate::proxy::trace::Tracer::start(config, tls, proxy_metrics.clone()))
        {
            Ok(t) => {
                tracing::info!(endpoint = %config.endpoint, sample_ratio = %config.sample_ratio, "tracing: spans exported over OTLP/HTTP");
                Some(t)
            }
            Err(e) => return fail(e.context("cannot set up OTLP span export")),
        },
        None => None,
    };
    let proxy = Proxy::with_tracer(
        shared.snapshot.clone(),
        ProxyConfig {
            listen_host: opts.listen_host,
            access_log: opts.access_log,
            access_log_fields: opts.access_log_fields,
            reuse_port: opts.reuse_port,
            tls_session_resumption: opts.tls_session_resumption,
            trusted_proxies: opts.trusted_proxies.clone(),
            limits: opts.limits.clone(),
            workers: crate::proxy::workers::installed(),
            ..ProxyConfig::default()
        },
        proxy_metrics,
        tracer,
    );
    let mut settings = opts.translate.clone();
    let mut cert_watch = None;
    if let Some(files) = &opts.client_cert {
        let f = files.clone();
        match tokio::task::spawn_blocking(move || f.load()).await? {
            Ok(identity) => settings.client_identity = Some(identity),
            Err(e) => return fail(e),
        }
        match CertWatch::start(files.clone()) {
            Ok(w) => cert_watch = Some(w),
            Err(e) => return fail(e),
        }
    }
    let mut spiffe = None;
    if let Some(endpoint) = &opts.spiffe_endpoint {
        if opts.client_cert.is_some() {
            return fail(anyhow::anyhow!(
                "--spiffe-socket and --client-cert both name pier's client certificate: give one"
            ));
        }
        tracing::info!(endpoint = %endpoint, "client certificate and bundles from the SPIFFE Workload API");
        let mut source = WorkloadApiSource::start(endpoint.clone());
        // A normal start publishes with the SVID; a Workload API that is not there yet only
        // delays the start by the grace, then meshed routes fail closed until it answers.
        let first = source.first(spiffe_source::START_GRACE).await;
        if let WorkloadApiState::Waiting(why) = &first.state {
            tracing::warn!(endpoint = %endpoint, error = %why, "starting without an X.509-SVID; meshed routes answer 503 until the SPIFFE Workload API sends one");
        }
        settings.workload_api = Some(first);
        spiffe = Some(source);
    }
    let mut publisher = Publisher::new(shared.clone(), settings, control.clone());
    let mut jwks = JwksSource::start(publisher.remote_jwks_wanted(), jwks_metrics);

    let (feed, changes, leader) = match opts.source {
        Source::Manifests(dir) => {
            // The demo and the examples bind loopback; a directory of manifests run as they
            // are (the default --listen-host) is served to the whole network: say so first.
            if opts.listen_host.is_unspecified() {
                let local = match opts.listen_host {
                    IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
                    IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
                };
                tracing::info!(
                    address = %opts.listen_host,
                    "listeners bind all interfaces, reachable from other hosts; \
                     --listen-host {local} keeps them local"
                );
            }
            let limits = opts.manifest_limits;
            let loaded = {
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || files::load(&dir, &limits)).await?
            };
            let loaded = match loaded {
                Ok(l) => l,
                Err(e) => return fail(anyhow::Error::new(e).context("cannot load the manifests")),
            };
            log_loaded(&loaded);
            let reads = files::ManifestFiles::new(&dir);
            let (guard, changes) = match files::watch(&dir, move |p, e| reads.relevant(p, e)) {
                Ok(w) => w,
                Err(e) => {
                    return fail(
                        anyhow::Error::new(e).context(format!("cannot watch {}", dir.display())),
                    );
                }
            };
            let resources = loaded.resources;
            let mut wanted = translate::remote_jwks_wanted(&resources, &Default::default());
            let mut generation = publisher.publish(resources.clone()).await;
            // Keys (and OIDC discovery documents, then the key sets they name) fetched before
            // the listeners are bound: a start does not refuse every token while the first
            // fetches are in flight.
            let deadline = tokio::time::Instant::now() + JWKS_START_GRACE;
            while !wanted.is_empty() {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let sets = jwks.settled(&wanted, left).await;
                let next = translate::remote_jwks_wanted(&resources, &sets);
                generation = publisher.set_remote_jwks(sets).await.unwrap_or(generation);
                if next == wanted || left.is_zero() {
                    break;
                }
                wanted = next;
            }
            control.reload(ReloadResult::Ok);
            tracing::info!(generation, files = loaded.files, "configuration loaded");
            let feed = Feed::Files {
                dir,
                limits,
                _guard: guard,
            };
            (feed, changes, None)
        }
        Source::Cluster(cluster) => {
            let (client, server, credentials) =
                match Credentials::start(cluster.connect.clone(), kube_metrics.credentials.clone())
                    .await
                {
                    Ok(c) => c,
                    Err(e) => return fail(e),
                };
            let (source, changes) =
                KubeSource::start_with_server(&client, &server, &cluster.scope, kube_metrics);
            tokio::spawn(explain_listing(source.pending_changes(), shared.clone()));
            let writer = cluster.status.map(|status| {
                let inputs = status_writer::Inputs {
                    stores: source.stores.clone(),
                    desired: shared.statuses.subscribe(),
                    observed: source.status_changes.clone(),
                    settings: opts.translate.clone(),
                    clock: Arc::new(crate::translate::api::Timestamp::now),
                };
                StatusWriter::spawn(client.clone(), status, inputs, status_metrics)
            });
            let leader = writer.as_ref().map(|w| w.leader.clone());
            (
                Feed::Cluster {
                    source,
                    writer,
                    credentials,
                },
                changes,
                leader,
            )
        }
    };
    // With manifests the first configuration is published above; a cluster publishes on its
    // first `()`, once every kind has listed.
    let published = matches!(feed, Feed::Files { .. });
    let bound = published && bind(&proxy, &shared, opts.listen_host).await;

    let reach = opts.probe_interval.map(|every| {
        let (tx, rx) = watch::channel(Default::default());
        tokio::spawn(probe_loop(
            shared.snapshot.clone(),
            reach_metrics,
            tx,
            every,
            shutdown_rx.clone(),
        ));
        rx
    });
    let (reload, reload_rx) = mpsc::channel(1);
    let task = tokio::spawn(run_loop(
        feed,
        changes,
        reload_rx,
        publisher,
        proxy,
        shared.clone(),
        control,
        shutdown_rx,
        (published, bound),
        Identity {
            cert_watch,
            spiffe,
            jwks,
        },
        reach,
        opts.listen_host,
    ));
    Ok(Running {
        admin_addr,
        shared,
        leader,
        shutdown,
        task,
        admin_task,
        admin_socket_task,
        token_task,
        reload,
    })
}

/// Pod network probe results per Gateway, for its status condition.
type Reachabilities = std::collections::BTreeMap<crate::model::ObjectRef, translate::Reachability>;

/// Endpoint addresses probed per Gateway and round.
const PROBE_SAMPLE: usize = 8;
/// Bound on one probe (connect and handshake).
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Every `every`, probes a sample of each served Gateway's endpoint addresses from this host
/// (as `pier check --kubeconfig` does) and publishes the counts; logs an address when it
/// becomes unreachable and when it recovers. Ends at shutdown.
async fn probe_loop(
    snapshot: Arc<arc_swap::ArcSwap<crate::model::Snapshot>>,
    m: metrics::ReachabilityMetrics,
    results: watch::Sender<Reachabilities>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    use crate::check::probe::{self, Outcome};
    use futures::StreamExt;
    let mut failing = std::collections::BTreeSet::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tick.tick() => {}
        }
        let snap = snapshot.load_full();
        let targets: Vec<_> = probe::gateways(&snap)
            .into_iter()
            .flat_map(|gw| {
                let (sample, _) = probe::sample(&snap, &gw, PROBE_SAMPLE);
                sample.into_iter().map(move |t| (gw.clone(), t))
            })
            .collect();
        drop(snap);
        // Owned futures: a stream of futures borrowing `targets` is not `Send` for every
        // lifetime, which `tokio::spawn` needs.
        let probes: Vec<_> = targets
            .iter()
            .map(|(_, t)| {
                let t = t.clone();
                async move { probe::probe(&t, PROBE_TIMEOUT).await }
            })
            .collect();
        let outcomes: Vec<_> = futures::stream::iter(probes).buffered(64).collect().await;
        let mut counts: std::collections::BTreeMap<_, (i64, i64, i64)> = Default::default();
        let mut now_failing = std::collections::BTreeSet::new();
        let mut reasons: Vec<Option<String>> = vec![None; targets.len()];
        for (i, ((gw, t), outcome)) in targets.iter().zip(outcomes).enumerate() {
            let c = counts.entry(gw.clone()).or_default();
            c.0 += 1;
            let why = match outcome {
                Outcome::Reached(_) => continue,
                Outcome::Unreachable(why) => {
                    c.1 += 1;
                    why
                }
                Outcome::TlsFailed(why) => {
                    c.2 += 1;
                    why
                }
            };
            reasons[i] = Some(why.clone());
            let key = (gw.clone(), t.addr);
            if !failing.contains(&key) {
                tracing::warn!(
                    gateway = %gw, endpoint = %t.addr, service = %t.backend, reason = %why,
                    "pod network: endpoint not reachable from this host"
                );
            }
            now_failing.insert(key);
        }
        for (gw, addr) in failing.difference(&now_failing) {
            tracing::info!(gateway = %gw, endpoint = %addr, "pod network: endpoint reachable again");
        }
        failing = now_failing;
        let mut found = Reachabilities::new();
        for ((gw, t), why) in targets.iter().zip(&reasons) {
            let r = found.entry(gw.clone()).or_default();
            r.probed += 1;
            if let Some(why) = why {
                r.failed.push((t.addr, why.clone()));
            }
        }
        for r in found.values_mut() {
            r.failed.sort();
        }
        results.send_if_modified(|cur| {
            let changed = *cur != found;
            *cur = std::mem::take(&mut found);
            changed
        });
        m.probed.clear();
        m.unreachable.clear();
        m.tls_failed.clear();
        for (gw, (probed, unreachable, tls)) in counts {
            let labels = metrics::GatewayLabels {
                gateway: gw.to_string(),
            };
            m.probed.get_or_create(&labels).set(probed);
            m.unreachable.get_or_create(&labels).set(unreachable);
            m.tls_failed.get_or_create(&labels).set(tls);
        }
    }
}

/// Reads the feed after a change (or a SIGHUP) and publishes it: `Some(whether every port
/// is bound)` once published, `None` when the change could not be read (the last good
/// configuration stays; logged and counted by the feed).
async fn apply_change(
    feed: &Feed,
    control: &ControlMetrics,
    publisher: &mut Publisher,
    proxy: &Proxy,
    shared: &Shared,
    listen_host: IpAddr,
) -> Option<bool> {
    let started = tokio::time::Instant::now();
    let resources = feed.load(control).await?;
    let loaded = started.elapsed();
    let generation = publisher.publish(resources).await;
    control.reload(ReloadResult::Ok);
    tracing::info!(
        generation,
        load_ms = loaded.as_millis() as u64,
        translate_ms = (started.elapsed() - loaded).as_millis() as u64,
        "configuration published"
    );
    Some(bind(proxy, shared, listen_host).await)
}

/// Re-reads `--client-cert`/`--client-key`; a bad pair keeps the last good one.
async fn reload_client_cert(files: ClientCertFiles, publisher: &mut Publisher) {
    match tokio::task::spawn_blocking(move || files.load()).await {
        Ok(Ok(identity)) => {
            if let Some(generation) = publisher.set_client_identity(Some(identity)).await {
                tracing::info!(generation, "client certificate reloaded");
            }
        }
        Ok(Err(e)) => tracing::error!(
            error = format!("{e:#}"),
            "client certificate reload failed; keeping the last good one"
        ),
        Err(e) => tracing::error!(error = %e, "client certificate loader panicked"),
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_loop(
    feed: Feed,
    mut changes: mpsc::Receiver<()>,
    mut reload: mpsc::Receiver<()>,
    mut publisher: Publisher,
    proxy: Proxy,
    shared: Arc<Shared>,
    control: ControlMetrics,
    mut shutdown: watch::Receiver<bool>,
    (mut published, mut bound): (bool, bool),
    Identity {
        mut cert_watch,
        mut spiffe,
        mut jwks,
    }: Identity,
    mut reach: Option<watch::Receiver<Reachabilities>>,
    listen_host: IpAddr,
) {
    let mut rebind = tokio::time::interval(REBIND_EVERY);
    loop {
        tokio::select! {
            Some(()) = changes.recv() => {
                if let Some(b) = apply_change(&feed, &control, &mut publisher, &proxy, &shared, listen_host).await {
                    (published, bound) = (true, b);
                }
            }
            Some(()) = reload.recv() => {
                tracing::info!("SIGHUP: re-reading the configuration and the client certificate files");
                if let Feed::Cluster { credentials, .. } = &feed {
                    credentials.reload();
                }
                if let Some(w) = &cert_watch {
                    reload_client_cert(w.files.clone(), &mut publisher).await;
                }
                if let Some(b) = apply_change(&feed, &control, &mut publisher, &proxy, &shared, listen_host).await {
                    (published, bound) = (true, b);
                }
            }
            Some(files) = async { match &mut cert_watch { Some(w) => w.changed().await, None => std::future::pending().await } } => {
                reload_client_cert(files, &mut publisher).await;
            }
            api = async { match &mut spiffe { Some(s) => s.changed().await, None => std::future::pending().await } } => {
                let svid = match &api.state {
                    WorkloadApiState::Ready(ctx) => Some(ctx.spiffe_id.clone()),
                    WorkloadApiState::Waiting(_) => None,
                };
                if let Some(generation) = publisher.set_workload_api(Some(api)).await {
                    match svid {
                        Some(id) => tracing::info!(generation, spiffe_id = %id, "published the SPIFFE Workload API's X.509-SVID and bundles"),
                        None => tracing::debug!(generation, "published the SPIFFE Workload API's state"),
                    }
                }
            }
            sets = jwks.changed() => {
                if let Some(generation) = publisher.set_remote_jwks(sets).await {
                    tracing::debug!(generation, "published fetched remoteJWKS key sets");
                }
            }
            Some(r) = async { match &mut reach { Some(rx) => rx.changed().await.ok().map(|()| rx.borrow_and_update().clone()), None => std::future::pending().await } } => {
                if let Some(generation) = publisher.set_reachability(r).await {
                    tracing::debug!(generation, "published pod network reachability");
                }
            }
            _ = rebind.tick(), if published && !bound => bound = bind(&proxy, &shared, listen_host).await,
            () = async { let _ = shutdown.wait_for(|s| *s).await; } => break,
        }
    }
    // Release the status-writer Lease first, so another replica writes while this one drains.
    feed.stop().await;
    proxy.shutdown(SHUTDOWN_GRACE).await;
}

// === impl Feed ===

impl Feed {
    /// The resources after a change; `None` (logged and counted) when they cannot be read.
    async fn load(&self, control: &ControlMetrics) -> Option<Resources> {
        match self {
            Self::Files { dir, limits, .. } => {
                let (dir, limits) = (dir.clone(), *limits);
                match tokio::task::spawn_blocking(move || files::load(&dir, &limits)).await {
                    Ok(Ok(loaded)) => {
                        log_loaded(&loaded);
                        tracing::info!(files = loaded.files, "manifests reloaded");
                        Some(loaded.resources)
                    }
                    Ok(Err(e)) => {
                        control.reload(match e {
                            files::LoadError::Parse { .. } => ReloadResult::ParseError,
                            files::LoadError::FileTooLarge { .. }
                            | files::LoadError::TooLarge { .. }
                            | files::LoadError::TooManyObjects { .. } => {
                                ReloadResult::LimitExceeded
                            }
                            _ => ReloadResult::ReadError,
                        });
                        tracing::error!(file = %e.path().display(), error = %e.chain(), "reload failed; keeping the last good configuration");
                        None
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "manifest loader panicked");
                        None
                    }
                }
            }
            Self::Cluster { source, .. } => {
                let stores: Stores = source.stores.clone();
                match tokio::task::spawn_blocking(move || stores.resources()).await {
                    Ok(r) => Some(r),
                    Err(e) => {
                        tracing::error!(error = %e, "reading the watch stores panicked");
                        None
                    }
                }
            }
        }
    }

    async fn stop(self) {
        if let Self::Cluster {
            source,
            writer,
            credentials,
        } = self
        {
            if let Some(w) = writer {
                w.shutdown().await;
            }
            source.stop();
            drop(credentials);
        }
    }
}

/// The TLS client config for an `https://` OTLP endpoint (`None` for `http://`), read off the
/// runtime: it reads the CA, client certificate and key files, or the host's trust store.
async fn trace_tls(
    config: &crate::proxy::trace::TraceConfig,
) -> anyhow::Result<Option<rustls::ClientConfig>> {
    let config = config.clone();
    Ok(tokio::task::spawn_blocking(move || config.client_tls()).await??)
}

/// Binds the ports of the current snapshot; logs and puts into `/readyz` those that failed,
/// each with the address tried: a port of no Gateway address of its own is bound on
/// `listen_host`, and `*:8080` would hide that pier tried `127.0.0.1:8080`.
async fn bind(proxy: &Proxy, shared: &Shared, listen_host: IpAddr) -> bool {
    let failed = proxy.reconcile().await;
    for (port, e) in &failed {
        tracing::error!(
            address = %tried(port, listen_host),
            error = %e,
            "cannot bind listener port; retrying every {} s",
            REBIND_EVERY.as_secs()
        );
    }
    if !failed.is_empty() {
        let ports: Vec<String> = failed
            .iter()
            .map(|(p, e)| format!("{} ({e})", tried(p, listen_host)))
            .collect();
        shared.set_unready_reason(format!(
            "cannot listen on {}; retrying every {} s",
            ports.join(", "),
            REBIND_EVERY.as_secs()
        ));
    }
    if failed.is_empty() && !shared.ready.swap(true, Ordering::AcqRel) {
        match shared.readiness() {
            crate::publish::Readiness::NotReady(_) => tracing::warn!(
                "serving no listener: /readyz says 503 until one is served \
                 (--ready-requires-listener)"
            ),
            _ => tracing::info!(ports = ?proxy.bound_ports(), "ready"),
        }
    }
    failed.is_empty()
}

/// The address a listener port is bound on.
fn tried(port: &crate::model::PortKey, listen_host: IpAddr) -> SocketAddr {
    SocketAddr::new(port.address.unwrap_or(listen_host), port.port)
}

/// Until every kind has listed once, `/readyz` says which kinds it still waits for.
async fn explain_listing(
    mut pending: watch::Receiver<std::collections::BTreeSet<kube_source::WatchKind>>,
    shared: Arc<Shared>,
) {
    loop {
        let kinds: Vec<String> = pending
            .borrow_and_update()
            .iter()
            .map(ToString::to_string)
            .collect();
        if kinds.is_empty() {
            shared.set_unready_reason("translating the first configuration".to_string());
            return;
        }
        shared.set_unready_reason(format!(
            "waiting for the Kubernetes API server to list {} (the log says why, if it fails)",
            kinds.join(", ")
        ));
        if pending.changed().await.is_err() {
            return;
        }
    }
}

fn log_loaded(loaded: &files::Loaded) {
    for (path, skipped) in &loaded.skipped {
        match skipped.mistake() {
            // A kind of a group pier reads: most likely misspelt, and the user's routes are
            // missing because of it.
            Some(mistake) => tracing::warn!(
                file = %path.display(),
                line = skipped.line,
                kind = %skipped,
                "{mistake}"
            ),
            None => tracing::info!(
                file = %path.display(),
                kind = %skipped,
                "skipping a kind pier does not read"
            ),
        }
    }
    for (path, u) in &loaded.unknown {
        tracing::warn!(
            file = %path.display(),
            line = u.line,
            "{u}"
        );
    }
    for d in &loaded.duplicates {
        tracing::warn!(
            kind = %d.kind,
            name = %d.name,
            used = %d.winner,
            ignored = %d.replaced,
            "the same object is defined twice; using the later one (files are read in path order)"
        );
    }
}

/// Where pier's own client identity comes from, besides Gateways' `clientCertificateRef`s:
/// `--client-cert` files (watched) or the SPIFFE Workload API (streamed); at most one.
struct Identity {
    cert_watch: Option<CertWatch>,
    spiffe: Option<WorkloadApiSource>,
    /// The `remoteJWKS` fetcher (idle while no policy names a URI).
    jwks: JwksSource,
}

/// Watches the directories of `--client-cert`/`--client-key`.
struct CertWatch {
    files: ClientCertFiles,
    changes: Vec<mpsc::Receiver<()>>,
    _guards: Vec<files::WatchGuard>,
}

impl CertWatch {
    fn start(files: ClientCertFiles) -> anyhow::Result<Self> {
        let mut changes = Vec::new();
        let mut guards = Vec::new();
        for dir in files.dirs() {
            let names = files.names();
            let (g, rx) = files::watch(&dir, move |p, e| {
                e == files::Entry::File
                    && p.file_name().is_some_and(|n| names.iter().any(|m| m == n))
            })
            .with_context(|| format!("cannot watch {}", dir.display()))?;
            guards.push(g);
            changes.push(rx);
        }
        Ok(Self {
            files,
            changes,
            _guards: guards,
        })
    }

    /// The files, once any of their directories changed.
    async fn changed(&mut self) -> Option<ClientCertFiles> {
        let polls = self.changes.iter_mut().map(|rx| Box::pin(rx.recv()));
        let (ev, _, _) = futures::future::select_all(polls).await;
        ev.map(|()| self.files.clone())
    }
}

#[cfg(test)]
mod tests;
