//! Publishing: translate -> number -> swap. The only writer of the shared snapshot.
//!
//! Each published [`Snapshot`] is complete and immutable; the data plane loads it once per
//! request, so a request that started on generation N finishes on N while new requests see
//! N+1. Statuses are published next to it for `/status` and the status writer.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::metrics::ControlMetrics;
use crate::model::Snapshot;
use crate::translate::{self, ListenerCerts, Resources, Statuses, Translation};

pub mod mesh;
mod problems;

/// State shared between the publisher, the data plane and the admin server.
#[derive(Debug, Default)]
pub struct Shared {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub translation_status: ArcSwap<serde_json::Value>,
    /// The desired status of the latest translation, for the status writer (cluster mode).
    pub statuses: watch::Sender<Arc<Statuses>>,
    /// Set once the first configuration is published and every listener is bound; never unset.
    pub ready: AtomicBool,
    /// Until ready: why not (what is awaited, or which port cannot be bound), for `/readyz`.
    unready: ArcSwap<String>,
    /// `--ready-requires-listener`: `/readyz` is 503 while the configuration serves no listener.
    ready_requires_listener: bool,
    /// What the latest configuration leaves unserved, for `/readyz` and `/config`.
    pub unserved: ArcSwap<Unserved>,
    /// Each Gateway's backend TLS in the latest configuration, for `/config`.
    pub mesh: ArcSwap<Vec<mesh::MeshSummary>>,
}

/// What a configuration leaves unserved.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Unserved {
    /// Why no listener at all is served (`None` while one is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nothing: Option<String>,
    /// Listeners that cannot be served, with the reason their status gives.
    pub listeners: Vec<UnservedListener>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct UnservedListener {
    pub gateway: String,
    pub listener: String,
    pub reason: String,
}

/// What `/readyz` answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Serving the configuration, with at least one listener.
    Ready,
    /// Serving the configuration, which gives no listener (why), and
    /// `--ready-requires-listener` is off.
    ServingNothing(String),
    /// Why not (503).
    NotReady(String),
}

impl Shared {
    /// `ready_requires_listener`: `--ready-requires-listener`.
    pub fn new(ready_requires_listener: bool) -> Self {
        Self {
            ready_requires_listener,
            ..Self::default()
        }
    }

    /// Whether `/readyz` says 200.
    pub fn is_ready(&self) -> bool {
        !matches!(self.readiness(), Readiness::NotReady(_))
    }

    /// What `/readyz` says: not ready until the first configuration is published and every
    /// listener is bound; then ready, unless the configuration serves no listener and
    /// `--ready-requires-listener` is set (then readiness follows the configuration: it turns
    /// false again when a change leaves no listener).
    pub fn readiness(&self) -> Readiness {
        if !self.ready.load(Ordering::Acquire) {
            return Readiness::NotReady(self.unready_reason());
        }
        if !self.snapshot.load().ports.is_empty() {
            return Readiness::Ready;
        }
        let why = format!("serving no listener: {}", self.unserved.load().explain());
        if self.ready_requires_listener {
            Readiness::NotReady(why)
        } else {
            Readiness::ServingNothing(why)
        }
    }

    /// Why `/readyz` says 503 (meaningless once ready).
    pub fn unready_reason(&self) -> String {
        let why = self.unready.load();
        if why.is_empty() {
            "starting".to_string()
        } else {
            why.to_string()
        }
    }

    /// Records why pier is not ready yet; ignored once it is.
    pub fn set_unready_reason(&self, why: String) {
        if !self.is_ready() {
            self.unready.store(Arc::new(why));
        }
    }
}

impl Unserved {
    /// Why nothing is served, and each listener not served with its reason (one a line).
    pub fn explain(&self) -> String {
        let mut out = self
            .nothing
            .clone()
            .unwrap_or_else(|| "the configuration gives no listener".to_string());
        for l in &self.listeners {
            out.push_str(&format!(
                "\n  listener {}/{}: {}",
                l.gateway, l.listener, l.reason
            ));
        }
        out
    }
}

pub struct Publisher {
    shared: Arc<Shared>,
    settings: translate::Settings,
    metrics: ControlMetrics,
    generation: u64,
    /// The objects of the last publish, re-translated when only settings change (a rotated
    /// `--client-cert`, a new SVID from the SPIFFE Workload API).
    last: Option<Arc<Resources>>,
    /// The listener certificates of the last publish: a Secret that goes bad keeps serving
    /// its last good certificate (reported in the listener status and logged).
    last_good_certs: Arc<ListenerCerts>,
    /// What the last publish left unserved (listeners and their reasons, or why there is no
    /// listener at all), so each is logged once when it starts, not on every publish.
    unserved: BTreeSet<String>,
    /// What the last publish's status said is wrong, so each problem is logged once.
    problems: problems::Problems,
    /// The `remoteJWKS` URIs the last published objects name, for the fetcher.
    remote_jwks_wanted: watch::Sender<crate::auth::remote::Wanted>,
    /// What was last written to `--rate-limit-config`.
    rate_limit_config: Option<String>,
}

impl Publisher {
    pub fn new(
        shared: Arc<Shared>,
        settings: translate::Settings,
        metrics: ControlMetrics,
    ) -> Self {
        Self {
            shared,
            settings,
            metrics,
            generation: 0,
            last: None,
            last_good_certs: Arc::default(),
            unserved: BTreeSet::new(),
            problems: problems::Problems::default(),
            remote_jwks_wanted: watch::Sender::new(Default::default()),
            rate_limit_config: None,
        }
    }

    /// The `remoteJWKS` URIs to fetch (and how often), updated on each publish.
    pub fn remote_jwks_wanted(&self) -> watch::Receiver<crate::auth::remote::Wanted> {
        self.remote_jwks_wanted.subscribe()
    }

    /// Replaces the fetched `remoteJWKS` sets and re-publishes the last objects with them.
    /// Returns the new generation, or `None` before the first publish.
    pub async fn set_remote_jwks(
        &mut self,
        sets: Arc<crate::auth::remote::RemoteSets>,
    ) -> Option<u64> {
        self.settings.remote_jwks = (*sets).clone();
        let last = self.last.clone()?;
        Some(self.publish_arc(last).await)
    }

    /// Replaces the pod network probe results (`--probe-interval`) and, when they differ,
    /// re-publishes the last objects with them (a Gateway condition). Returns the new
    /// generation, or `None` when nothing changed or before the first publish.
    pub async fn set_reachability(
        &mut self,
        reachability: std::collections::BTreeMap<crate::model::ObjectRef, translate::Reachability>,
    ) -> Option<u64> {
        if self.settings.reachability == reachability {
            return None;
        }
        self.settings.reachability = reachability;
        let last = self.last.clone()?;
        Some(self.publish_arc(last).await)
    }

    /// Replaces pier's own client identity (`--client-cert`) and re-publishes the last
    /// objects with it. Returns the new generation, or `None` before the first publish.
    pub async fn set_client_identity(
        &mut self,
        identity: Option<translate::ClientIdentityPem>,
    ) -> Option<u64> {
        self.settings.client_identity = identity;
        let last = self.last.clone()?;
        Some(self.publish_arc(last).await)
    }

    /// Replaces what the SPIFFE Workload API said (`--spiffe-socket`: a new SVID or bundle, or
    /// why there is none) and re-publishes the last objects with it. Returns the new
    /// generation, or `None` before the first publish.
    pub async fn set_workload_api(
        &mut self,
        api: Option<translate::spiffe::WorkloadApi>,
    ) -> Option<u64> {
        self.settings.workload_api = api;
        let last = self.last.clone()?;
        Some(self.publish_arc(last).await)
    }

    /// Translates and publishes. Runs the (CPU-bound) translation on the blocking pool.
    pub async fn publish(&mut self, resources: Resources) -> u64 {
        self.publish_arc(Arc::new(resources)).await
    }

    async fn publish_arc(&mut self, resources: Arc<Resources>) -> u64 {
        self.last = Some(resources.clone());
        let settings = self.settings.clone();
        let previous = self.shared.snapshot.load_full();
        let last_good = self.last_good_certs.clone();
        let written = self.rate_limit_config.take();
        let (translation, nothing, wanted, written) = tokio::task::spawn_blocking(move || {
            // A walk over every backend of the previous snapshot: off the async workers too.
            let carried = previous.carried();
            drop(previous);
            let t = translate::translate_with(&resources, &settings, &carried, &last_good);
            let nothing = t
                .snapshot
                .ports
                .is_empty()
                .then(|| translate::scope::why_nothing_served(&resources, &settings));
            let wanted = translate::remote_jwks_wanted(&resources, &settings.remote_jwks);
            // A file write: here, off the async workers, in publish order.
            let written = write_rate_limit_config(&settings, &t.snapshot, written);
            (t, nothing, wanted, written)
        })
        .await
        .expect("translation does not panic");
        self.rate_limit_config = written;
        self.remote_jwks_wanted.send_if_modified(|w| {
            let changed = *w != wanted;
            *w = wanted;
            changed
        });
        self.log_unserved(nothing, &translation.status);
        self.store(translation)
    }

    /// Warns about what this translation leaves unserved (every listener, with the reason, or
    /// only some listeners, e.g. an HTTPS one whose Secret is missing), once per new reason:
    /// otherwise it is only in the status, and a first run looks healthy while serving nothing.
    fn log_unserved(&mut self, nothing: Option<String>, status: &Statuses) {
        let mut now = BTreeSet::new();
        let mut unserved = Unserved {
            nothing: nothing.clone(),
            listeners: vec![],
        };
        if let Some(why) = nothing {
            if !self.unserved.contains(&why) {
                tracing::warn!(reason = %why, "serving no listener");
            }
            now.insert(why);
        }
        for (gateway, g) in &status.gateways {
            for l in &g.listeners {
                use translate::api::ListenerConditionType as T;
                let programmed = l.conditions.iter().find(|c| c.type_ == T::Programmed);
                if programmed.is_none_or(|c| c.status) {
                    continue;
                }
                // Every condition that is not as it should be (Conflicted is bad when true):
                // Programmed alone says only "not programmed", ResolvedRefs names the Secret.
                let why: Vec<&str> = l
                    .conditions
                    .iter()
                    .filter(|c| c.status == (c.type_ == T::Conflicted))
                    .map(|c| c.message.as_str())
                    .collect();
                let why = why.join("; ");
                unserved.listeners.push(UnservedListener {
                    gateway: gateway.to_string(),
                    listener: l.name.clone(),
                    reason: why.clone(),
                });
                let line = format!("{gateway} {}: {why}", l.name);
                if !self.unserved.contains(&line) {
                    tracing::warn!(
                        gateway = %gateway,
                        listener = %l.name,
                        reason = %why,
                        "listener not served"
                    );
                }
                now.insert(line);
            }
        }
        self.unserved = now;
        unserved.listeners.sort();
        self.shared.unserved.store(Arc::new(unserved));
    }

    fn store(&mut self, translation: Translation) -> u64 {
        let Translation {
            mut snapshot,
            status,
            tls,
            listener_certs,
            kept_certs,
        } = translation;
        for k in &kept_certs {
            // The error names the Secret and what is wrong with it, never its content.
            tracing::warn!(
                listener = %k.listener,
                secret = %k.secret,
                error = %k.error,
                "listener certificate Secret is invalid; still serving its last good certificate"
            );
        }
        self.last_good_certs = Arc::new(listener_certs);
        self.metrics.set_tls(&tls, unix_now());
        self.shared.mesh.store(Arc::new(mesh::mesh(&tls, &status)));
        match serde_json::to_value(status.objects()) {
            Ok(v) => {
                self.problems.update(problems::of(&v));
                self.shared.translation_status.store(Arc::new(v));
            }
            Err(e) => tracing::error!(error = %e, "cannot render status"),
        }
        self.shared.statuses.send_replace(Arc::new(status));
        self.generation += 1;
        snapshot.generation = self.generation;
        let listeners: usize = snapshot.ports.iter().map(|p| p.listeners.len()).sum();
        let routes: usize = snapshot
            .ports
            .iter()
            .flat_map(|p| &p.listeners)
            .map(|l| l.routes.len())
            .sum();
        self.shared.snapshot.store(Arc::new(snapshot));
        self.metrics.generation.set(self.generation as i64);
        self.metrics.listeners.set(listeners as i64);
        self.metrics.routes.set(routes as i64);
        self.generation
    }
}

/// `--rate-limit-config`: the rate-limit service's configuration for `snapshot`, written when
/// it differs from `written` (what was written last); returns what is written now.
fn write_rate_limit_config(
    settings: &translate::Settings,
    snapshot: &crate::model::Snapshot,
    written: Option<String>,
) -> Option<String> {
    let (Some(path), Some(service)) = (&settings.rate_limit_config, &settings.rate_limit_service)
    else {
        return written;
    };
    let config = translate::rate_limit_config(snapshot, &service.domain);
    if written.as_deref() == Some(config.as_str()) {
        return written;
    }
    match write_atomic(path, &config) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "wrote the rate-limit service's configuration");
            Some(config)
        }
        Err(e) => {
            let path = path.display();
            tracing::error!(%path, error = %e, "cannot write the rate-limit service's configuration");
            written
        }
    }
}

/// `text` into `path` through a temporary file beside it and a rename, so a reader (the
/// rate-limit service watching its runtime directory) never sees half a file.
fn write_atomic(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    // A dot file: the service ignores those (RUNTIME_IGNOREDOTFILES) while it is written.
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    // The process ID in the name: several pier instances may write the same file.
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests;
