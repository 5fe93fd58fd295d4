//! One reflector task per kind: drives a watcher stream into a store, releases the kind's
//! readiness latch on its first `InitDone`, says what changed, and logs errors so that an
//! operator can act on them (without flooding the log while a watch keeps failing).

use std::collections::BTreeSet;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use super::{ErrorLabels, KindLabels, KubeMetrics, WatchError, WatchKind};

/// A repeated error is logged at most this often (and at debug level in between).
const ERROR_LOG_EVERY: Duration = Duration::from_secs(60);
/// A `410 Gone` this soon after the previous one is not an API server restart but a server (or
/// a proxy in front of it) that expires every watch: it backs off like a failure.
const EXPIRED_AGAIN: Duration = Duration::from_secs(30);

/// What a watch stream yields: an object that may have failed to decode.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static
{
    /// Why the object could not be decoded, if it could not.
    fn decode_error(&self) -> Option<&str>;
}

/// Which updates of an existing object change the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Changes {
    /// Every update.
    Any,
    /// Updates that move `metadata.generation`, labels, annotations or the deletion
    /// timestamp: kinds with a status subresource, whose status pier does not translate.
    Spec,
    /// None: what pier reads of the kind never changes in an update (a Pod's ServiceAccount is
    /// immutable), so only adds and deletes matter. Pods change status constantly.
    Immutable,
}

/// What an event asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    Nothing,
    Config,
    Status,
}

/// Shared by every reflector task.
#[derive(Clone)]
pub struct Ctx {
    pub config: Arc<watch::Sender<()>>,
    pub status: Arc<watch::Sender<()>>,
    pub pending: Arc<watch::Sender<BTreeSet<WatchKind>>>,
    pub metrics: KubeMetrics,
    /// One log for "the API server cannot be reached", whatever kind finds out.
    pub api_server: Arc<ApiServerLog>,
    /// The kinds whose watch the API server refuses now.
    pub refused: Arc<Refused>,
    /// The kinds the API server does not serve now (404: no CRD, or an API turned off).
    pub unserved: Arc<Refused>,
}

/// A set of kinds, shared with translation: those whose watch the API server refuses now
/// (401/403, pier's RBAC), so that translation can say why where it needs one of them (Pods,
/// for per-endpoint identity); or those it does not serve (404: ClusterTrustBundle, whose
/// claim and references follow whether the cluster has the API).
#[derive(Debug, Default)]
pub struct Refused(std::sync::Mutex<BTreeSet<WatchKind>>);

/// Logs that the API server cannot be reached once for all kinds (every watch finds out at the
/// same moment: one line each, every few seconds, would bury the reason) and once a minute,
/// with its URL, and says whether a configuration is being served meanwhile.
#[derive(Debug, Default)]
pub struct ApiServerLog {
    /// The API server's URL, as the kubeconfig gives it.
    server: String,
    /// When the outage was last logged; `None` while the API server answers.
    warned: std::sync::Mutex<Option<Instant>>,
}

/// Reconnect backoff: jittered exponential from 0.5 s to 5 s, reset by the first real event
/// after a failure.
///
/// Departs from kube's `default_backoff` (0.8 s → 30 s) and `StreamBackoff`:
/// - a gateway should resync within seconds of the API server coming back, and a handful of
///   watches per replica retrying every 5 s is no load for an API server;
/// - `StreamBackoff` resets on every `Ok` item, and a watcher whose list keeps failing yields
///   an `Ok(Init)` marker before each attempt, which pins the delay at its minimum (a missing
///   CRD would be listed twice a second forever);
/// - `410 Gone` after an API server restart is not a failure but the signal to relist: it
///   should relist at once, not after the longest backoff. A 410 again within
///   [`EXPIRED_AGAIN`] backs off, though, and the successful lists in between do not reset the
///   backoff: a server that ends every watch with 410 would otherwise be listed and watched
///   in a loop (the API-server fault test measured 183 requests/s).
///
/// So [`reflect`] sleeps itself, deciding per error.
#[derive(Clone, Debug)]
pub struct Reconnect {
    next: Duration,
    min: Duration,
    max: Duration,
}

/// Logs a watch's errors once per kind of failure and minute, and its recovery.
pub struct ErrorLog {
    kind: WatchKind,
    last: Option<(WatchError, Instant)>,
}

// === impl Refused ===

impl Refused {
    pub fn contains(&self, kind: WatchKind) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&kind)
    }

    /// Records whether `kind` is refused; returns whether that changed.
    pub fn set(&self, kind: WatchKind, refused: bool) -> bool {
        let mut kinds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if refused {
            kinds.insert(kind)
        } else {
            kinds.remove(&kind)
        }
    }
}

// === impl ApiServerLog ===

impl ApiServerLog {
    pub fn new(server: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            warned: std::sync::Mutex::default(),
        }
    }

    /// A request failed to reach the API server; `listed`: every kind has listed once (so a
    /// configuration is being served). Returns whether this call logged.
    pub fn unreachable(&self, error: &str, listed: bool) -> bool {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.is_some_and(|at| at.elapsed() < ERROR_LOG_EVERY) {
            tracing::debug!(server = %self.server, %error, "API server still unreachable");
            return false;
        }
        *warned = Some(Instant::now());
        if listed {
            tracing::warn!(
                server = %self.server,
                %error,
                "cannot reach the Kubernetes API server at {}: {error}; serving the last good \
                 configuration, retrying",
                self.server
            );
        } else {
            tracing::error!(
                server = %self.server,
                %error,
                "cannot reach the Kubernetes API server at {}: {error}; no configuration yet, so \
                 nothing is served and /readyz says 503 until it answers; retrying",
                self.server
            );
        }
        true
    }

    /// A request reached the API server.
    pub fn reachable(&self) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.take().is_some() {
            tracing::info!(server = %self.server, "the Kubernetes API server answers again");
        }
    }
}

// === impl Watched ===

impl<K> Watched for DeserializeGuard<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    fn decode_error(&self) -> Option<&str> {
        self.0.as_ref().err().map(|e| e.error.as_str())
    }
}

impl<K> Watched for PartialObjectMeta<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    fn decode_error(&self) -> Option<&str> {
        None
    }
}

// === impl Changes ===

impl Changes {
    /// What an update from `old` (if the store had it) to `new` asks for.
    pub fn classify<K: Resource>(self, old: Option<&K>, new: &K) -> Notify {
        let Some(old) = old else {
            return Notify::Config;
        };
        match self {
            Self::Any => Notify::Config,
            Self::Immutable => Notify::Nothing,
            Self::Spec => {
                let (o, n) = (old.meta(), new.meta());
                if o.generation != n.generation
                    || o.labels != n.labels
                    || o.annotations != n.annotations
                    || o.deletion_timestamp != n.deletion_timestamp
                {
                    Notify::Config
                } else {
                    Notify::Status
                }
            }
        }
    }
}

// === impl Reconnect ===

impl Default for Reconnect {
    fn default() -> Self {
        Self::new(Duration::from_millis(500), Duration::from_secs(5))
    }
}

impl Reconnect {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            next: min,
            min,
            max,
        }
    }

    /// Back to the minimum delay.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

impl Iterator for Reconnect {
    type Item = Duration;

    /// The current delay with ±20 % jitter; doubles the next one, up to `max`.
    fn next(&mut self) -> Option<Duration> {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        Some(base.mul_f64(rand::random_range(0.8..1.2)))
    }
}

// === impl ErrorLog ===

impl ErrorLog {
    pub fn new(kind: WatchKind) -> Self {
        Self { kind, last: None }
    }

    pub fn report(&mut self, e: &watcher::Error, ctx: &Ctx) {
        let reason = classify(e);
        let error = match reason {
            // The socket, DNS or TLS cause, not `ServiceError: client error (Connect)`.
            WatchError::Unavailable => super::reach::describe(e),
            _ => e.to_string(),
        };
        self.report_reason(reason, &error, ctx);
    }

    pub fn report_reason(&mut self, reason: WatchError, error: &str, ctx: &Ctx) {
        let kind = self.kind;
        ctx.metrics
            .errors
            .get_or_create(&ErrorLabels { kind, reason })
            .inc();
        if reason == WatchError::Unavailable {
            // Not this kind's problem: logged once for all of them.
            let listed = ctx.pending.borrow().is_empty();
            ctx.api_server.unreachable(error, listed);
            return;
        }
        let repeated = self
            .last
            .is_some_and(|(r, at)| r == reason && at.elapsed() < ERROR_LOG_EVERY);
        if repeated {
            tracing::debug!(%kind, %error, "watch still failing");
            return;
        }
        // The first refusal of a kind that listed before: an API server that has just started
        // answers 403 until its RBAC caches sync, so this is a warning until it lasts.
        let first_after_listing = self.last.is_none() && !ctx.pending.borrow().contains(&kind);
        self.last = Some((reason, Instant::now()));
        match reason {
            WatchError::NotFound if kind.is_gateway_api() => tracing::error!(
                %kind,
                %error,
                "the Gateway API is not served: install the Gateway API CRDs (`pier crds | kubectl \
                 apply -f -`, or upstream's standard-install.yaml); pier stays unready and retries"
            ),
            WatchError::NotFound if kind.is_optional() => tracing::info!(
                %kind,
                %error,
                "the API server does not serve this kind: treating it as empty (install its CRD, \
                 or enable its API, to use it); retrying"
            ),
            WatchError::NotFound => {
                tracing::error!(%kind, %error, "the API server does not serve this kind; retrying")
            }
            WatchError::Forbidden if first_after_listing => tracing::warn!(
                %kind,
                %error,
                "the API server refused a watch it allowed before (one that has just restarted \
                 does until its RBAC caches sync); retrying, an error if it lasts"
            ),
            WatchError::Forbidden => tracing::error!(
                %kind,
                %error,
                "pier's identity may not list/watch this kind: apply config/rbac/ (ClusterRole \
                 pier); retrying"
            ),
            WatchError::Unavailable => {}
            WatchError::Expired => tracing::info!(
                %kind,
                %error,
                "the API server no longer has this watch's resource version (usual after it \
                 restarts): relisting"
            ),
            WatchError::Other => tracing::warn!(%kind, %error, "watch failed; retrying"),
        }
    }

    pub fn recovered(&mut self, ctx: &Ctx) {
        ctx.api_server.reachable();
        if self.last.take().is_some() {
            tracing::info!(kind = %self.kind, "watch recovered");
        }
    }
}

/// What pier does about a watch error depends only on this.
pub fn classify(e: &watcher::Error) -> WatchError {
    match e {
        watcher::Error::InitialListFailed(c)
        | watcher::Error::WatchStartFailed(c)
        | watcher::Error::WatchFailed(c) => classify_client(c),
        watcher::Error::WatchError(s) => classify_code(s.code),
        watcher::Error::NoResourceVersion => WatchError::Other,
    }
}

pub fn classify_client(e: &kube::Error) -> WatchError {
    match e {
        kube::Error::Api(s) => classify_code(s.code),
        _ => WatchError::Unavailable,
    }
}

fn classify_code(code: u16) -> WatchError {
    match code {
        404 => WatchError::NotFound,
        410 => WatchError::Expired,
        401 | 403 => WatchError::Forbidden,
        500.. => WatchError::Unavailable,
        _ => WatchError::Other,
    }
}

/// Drives `stream` into `writer` until the stream ends (it does not: watchers retry).
pub async fn reflect<K, S>(
    kind: WatchKind,
    changes: Changes,
    stream: S,
    mut writer: Writer<K>,
    ctx: Ctx,
) where
    K: Watched,
    S: Stream<Item = watcher::Result<Event<K>>> + Send,
{
    let store = writer.as_reader();
    let stream = stream.modify(|o: &mut K| o.meta_mut().managed_fields = None);
    let mut stream = pin!(stream);
    let mut backoff = Reconnect::default();
    let mut errors = ErrorLog::new(kind);
    let mut listed = false;
    let mut expired: Option<Instant> = None;
    let labels = KindLabels { kind };
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                errors.report(&e, &ctx);
                let class = classify(&e);
                // Translation says why where it needs the kind: re-translate on a change.
                let refused = ctx.refused.set(kind, class == WatchError::Forbidden);
                // Not served until a list goes through (a timeout says nothing either way).
                let unserved = class == WatchError::NotFound && ctx.unserved.set(kind, true);
                if refused | unserved {
                    ctx.config.send_replace(());
                }
                let skippable = match class {
                    WatchError::NotFound => kind.is_optional(),
                    WatchError::Forbidden => kind.is_optional_without_rbac(),
                    _ => false,
                };
                if !listed && skippable {
                    // Not served (or not granted): listed as empty, so readiness does not wait
                    // for it.
                    listed = true;
                    release(kind, &ctx);
                }
                let wait = match class {
                    WatchError::Expired => {
                        let again = expired.is_some_and(|at| at.elapsed() < EXPIRED_AGAIN);
                        expired = Some(Instant::now());
                        again
                    }
                    _ => true,
                };
                // The watcher is not polled while we sleep: this is the backoff.
                if wait {
                    tokio::time::sleep(backoff.next().unwrap_or_default()).await;
                }
                continue;
            }
        };
        if !matches!(event, Event::Init) {
            // `Init` comes before every list attempt, including those that fail.
            errors.recovered(&ctx);
            if ctx.refused.set(kind, false) | ctx.unserved.set(kind, false) {
                ctx.config.send_replace(());
            }
            if expired.is_none_or(|at| at.elapsed() >= EXPIRED_AGAIN) {
                backoff.reset();
            }
        }
        let notify = match &event {
            Event::Init => Notify::Nothing,
            Event::InitApply(o) => {
                check_decoded(kind, o, &ctx.metrics);
                Notify::Nothing
            }
            Event::InitDone | Event::Delete(_) => Notify::Config,
            Event::Apply(o) => {
                check_decoded(kind, o, &ctx.metrics);
                changes.classify(store.get(&ObjectRef::from_obj(o)).as_deref(), o)
            }
        };
        writer.apply_watcher_event(&event);
        ctx.metrics
            .objects
            .get_or_create(&labels)
            .set(store.len() as i64);
        // Notify before releasing the latch: the coalescer clears the dirty flag once every
        // latch is released, and this change is part of the first snapshot.
        match notify {
            Notify::Nothing => {}
            Notify::Config => {
                ctx.config.send_replace(());
            }
            Notify::Status => {
                ctx.status.send_replace(());
            }
        }
        if matches!(event, Event::InitDone) {
            if !listed {
                listed = true;
                tracing::info!(%kind, objects = store.len(), "listed");
                release(kind, &ctx);
            } else {
                tracing::info!(%kind, objects = store.len(), "relisted");
            }
        }
    }
}

/// Releases `kind`'s readiness latch.
pub(super) fn release(kind: WatchKind, ctx: &Ctx) {
    ctx.pending.send_modify(|p| {
        p.remove(&kind);
    });
}

fn check_decoded<K: Watched>(kind: WatchKind, o: &K, metrics: &KubeMetrics) {
    if let Some(error) = o.decode_error() {
        metrics
            .undecodable
            .get_or_create(&KindLabels { kind })
            .inc();
        tracing::warn!(
            %kind,
            namespace = o.meta().namespace.as_deref().unwrap_or(""),
            name = o.meta().name.as_deref().unwrap_or(""),
            %error,
            "cannot decode this object: leaving it out of the configuration"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_limit::capture::logged;
    use std::collections::BTreeSet;

    fn ctx(pending: BTreeSet<WatchKind>) -> Ctx {
        Ctx {
            config: Arc::new(watch::channel(()).0),
            status: Arc::new(watch::channel(()).0),
            pending: Arc::new(watch::channel(pending).0),
            metrics: KubeMetrics::default(),
            api_server: Arc::new(ApiServerLog::new("https://127.0.0.1:6443")),
            refused: Arc::default(),
            unserved: Arc::default(),
        }
    }

    /// The level of the line `report` logs.
    fn level_of(report: impl FnOnce()) -> String {
        let ((), text) = logged(report);
        text.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// After an API server restart every watch gets 403 for a moment: a kind that listed before
    /// warns first, and only a refusal that lasts (or one before the first list) is an error.
    #[test]
    fn a_refusal_of_a_kind_that_listed_before_warns_until_it_lasts() {
        let listed = ctx(BTreeSet::new());
        let mut log = ErrorLog::new(WatchKind::HttpRoute);
        let forbidden = |log: &mut ErrorLog, ctx: &Ctx| {
            level_of(|| log.report_reason(WatchError::Forbidden, "403", ctx))
        };
        assert_eq!(forbidden(&mut log, &listed), "WARN");
        assert_eq!(
            forbidden(&mut log, &listed),
            "DEBUG",
            "repeated within a minute"
        );
        log.last = Some((WatchError::Forbidden, Instant::now() - ERROR_LOG_EVERY));
        assert_eq!(
            forbidden(&mut log, &listed),
            "ERROR",
            "still refused a minute later"
        );
        level_of(|| log.recovered(&listed));
        assert_eq!(forbidden(&mut log, &listed), "WARN", "a new streak");

        let never_listed = ctx(BTreeSet::from([WatchKind::HttpRoute]));
        let mut log = ErrorLog::new(WatchKind::HttpRoute);
        assert_eq!(forbidden(&mut log, &never_listed), "ERROR", "missing RBAC");
    }
}
