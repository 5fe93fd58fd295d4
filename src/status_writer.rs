//! Cluster mode's single status writer: compares the status translation wants with the status
//! the watch stores hold, and server-side applies the difference.
//!
//! ```text
//! Publisher ─> Shared.statuses (Arc<Statuses>) ─┐
//! stores: status-only changes ──────────────────┼─> plan (blocking pool) ─> bounded queue ─> workers
//! Lease: leader? ───────────────────────────────┤        │ only what differs                 │ SSA, per-patch
//! resync tick, retry after a failure ───────────┘        │ (ignoring lastTransitionTime)     │ timeout
//!                                                        └─ skip what is queued or just applied
//! ```
//!
//! - **One writer.** With several replicas only the holder of the Lease (`lease`) writes; the
//!   others plan nothing. All replicas use one field manager, [`FIELD_MANAGER`].
//! - **Only when changed.** `render` compares without `lastTransitionTime` (kept when a
//!   condition's status is unchanged, set from the clock when it changes). An object whose
//!   desired status and `resourceVersion` are unchanged since it was last found in sync is not
//!   even rendered again. A patch identical to one queued, or to one applied whose result the
//!   store has not caught up with, is not sent twice.
//! - **Whose fields.** GatewayClass and Gateway status belong to pier (the classes and Gateways
//!   it owns): applied with `force`. HTTPRoute `status.parents` (and BackendTLSPolicy and
//!   SecurityPolicy `status.ancestors`, the same way) is an atomic list shared with other
//!   controllers: pier
//!   applies the merged list (`render::http_route`) with `force` *and*
//!   the `resourceVersion` it merged from, so a concurrent change by another writer fails the
//!   patch (409) instead of being overwritten; it is retried once the store has the new
//!   version. Routes out of scope (no parentRef to a Gateway pier serves) are never written.
//! - **Bounded.** A queue of [`StatusOptions::queue`] jobs; a job that does not fit is dropped
//!   (counted) and planned again on the next round. Each patch has a timeout. Failures retry
//!   after [`RETRY_AFTER`], except patches the API server rejects (400/403/422: retrying would
//!   fail the same way), which wait for a change or the next resync; everything is re-checked
//!   every [`StatusOptions::resync`].
//!   `pier_status_patches_total{kind, result="Ok|Failed|TimedOut|Dropped"}`;
//!   `pier_status_leader` is 1 on the replica that writes.

mod lease;
mod render;
mod version;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef as StoreRef, Store};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use self::lease::{DEFAULT_DURATION_SECS, DEFAULT_GRACE_SECS, LeaseOptions, default_name};
pub use self::render::{normalize, owns, same};
pub use self::version::{BundleVersion, MIN_SUPPORTED};
use crate::model::ObjectRef;
use crate::source::kube::Stores;
use crate::translate::api::{GATEWAY_GROUP, ObjectMeta, Time, Timestamp};
use crate::translate::spiffe::PIER_GROUP;
use crate::translate::status::PIER_POLICY_API_VERSION;
use crate::translate::{Settings, Statuses};

/// The one field manager pier's status patches use.
pub const FIELD_MANAGER: &str = "pier.dev/gateway-controller";
/// A failed patch is planned again this long after it failed.
pub const RETRY_AFTER: Duration = Duration::from_secs(2);
/// Triggers that arrive within this window are handled in one round.
const BATCH: Duration = Duration::from_millis(100);
/// How often the installed Gateway API version is read again (by the leader).
const VERSION_EVERY: Duration = Duration::from_secs(300);

/// The Gateway API features pier implements, as GatewayClass `status.supportedFeatures` lists
/// them (Gateway API v1.7 feature names, plus v1.6's `HTTPRouteRetry`, which v1.7 renamed
/// `HTTPRouteRetryCodes`, so that a v1.6 suite still runs the retry tests, and GEP-3792's
/// `OffClusterGateway`; sorted, as the API requires).
pub const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "GRPCRoute",
    "GRPCRouteNamedRouteRule",
    "GRPCRouteRequestHeaderModifier",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "GatewayHTTPListenerIsolation",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayListenerFilters",
    "GatewayPort8080",
    "GatewayRouteHostnameIntersectionPrecedence",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendTimeout",
    "HTTPRouteBackendURLRewrite",
    "HTTPRouteCORS",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteRetry",
    "HTTPRouteRetryCodes",
    "HTTPRouteRetryConnectionError",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "OffClusterGateway",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
    "UDPRoute",
];

/// [`SUPPORTED_FEATURES`], plus `ClusterTrustBundle` when the cluster serves that API
/// (GEP-5075: the claim follows the API, which Kubernetes up to 1.36 leaves off) and
/// `GatewayAddressRoutability` when the installed Gateway CRD has the field (GEP-5093: v1.7's
/// experimental channel), sorted.
pub fn supported_features(trust_bundles: bool, routability: bool) -> Vec<&'static str> {
    let mut features = SUPPORTED_FEATURES.to_vec();
    let extra = [
        (trust_bundles, "ClusterTrustBundle"),
        (routability, "GatewayAddressRoutability"),
    ];
    for (_, name) in extra.into_iter().filter(|(on, _)| *on) {
        let at = features.partition_point(|f| *f < name);
        features.insert(at, name);
    }
    features
}

/// The clock `lastTransitionTime` comes from (tests pass a fixed one).
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

#[derive(Clone, Debug)]
pub struct StatusOptions {
    pub lease: LeaseOptions,
    /// Jobs waiting for a worker.
    pub queue: usize,
    /// Patches in flight at once.
    pub concurrency: usize,
    pub patch_timeout: Duration,
    /// Everything is compared again this often, whatever happened.
    pub resync: Duration,
}

/// What the writer reads.
pub struct Inputs {
    pub stores: Stores,
    /// The latest translation's desired status.
    pub desired: watch::Receiver<Arc<Statuses>>,
    /// Wakes on status-only changes in the stores.
    pub observed: watch::Receiver<()>,
    /// `controllerName` and `--gateway`.
    pub settings: Settings,
    pub clock: Clock,
}

/// Status metrics (`pier_status_*`).
#[derive(Clone, Debug, Default)]
pub struct StatusMetrics {
    pub patches: Family<PatchLabels, Counter>,
    pub leader: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PatchLabels {
    pub kind: PatchKind,
    pub result: PatchResult,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum PatchKind {
    GatewayClass,
    Gateway,
    HttpRoute,
    GrpcRoute,
    TlsRoute,
    TcpRoute,
    UdpRoute,
    ListenerSet,
    BackendTlsPolicy,
    SecurityPolicy,
    BackendTrafficPolicy,
    ClientTrafficPolicy,
    XBackendTrafficPolicy,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum PatchResult {
    Ok,
    Failed,
    TimedOut,
    Dropped,
}

/// The running writer: the Lease task, the planner and the workers.
pub struct StatusWriter {
    /// True while this replica holds the Lease.
    pub leader: watch::Receiver<bool>,
    shutdown: watch::Sender<bool>,
    lease: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
}

/// One object's status patch.
#[derive(Clone, Debug)]
struct Job {
    key: JobKey,
    status: Value,
    /// The observed `resourceVersion` the status was computed from.
    resource_version: Option<String>,
    /// The planner's [`Memo::epoch`] when it was planned.
    epoch: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum JobKey {
    GatewayClass(String),
    Gateway(ObjectRef),
    HttpRoute(ObjectRef),
    GrpcRoute(ObjectRef),
    TlsRoute(ObjectRef),
    TcpRoute(ObjectRef),
    UdpRoute(ObjectRef),
    ListenerSet(ObjectRef),
    BackendTlsPolicy(ObjectRef),
    SecurityPolicy(ObjectRef),
    BackendTrafficPolicy(ObjectRef),
    ClientTrafficPolicy(ObjectRef),
    XBackendTrafficPolicy(ObjectRef),
}

/// What is queued and what was applied, shared by the planner and the workers. A std mutex,
/// never held across an await.
#[derive(Debug, Default)]
struct Tracker {
    /// Each queued or in-flight job.
    pending: HashMap<JobKey, Sent>,
    /// The last job applied per object.
    applied: HashMap<JobKey, Applied>,
}

/// A job as the planner compares it with a new one.
#[derive(Debug)]
struct Sent {
    /// Normalized status.
    status: Value,
    /// The observed `resourceVersion` it was computed from.
    before: Option<String>,
    epoch: u64,
}

#[derive(Debug)]
struct Applied {
    sent: Sent,
    /// The `resourceVersion` the patch produced.
    after: Option<String>,
    /// The API server refused the patch (4xx): kept only until the next resync.
    rejected: bool,
}

/// The planner's memory between rounds.
struct Planner {
    settings: Settings,
    version: BundleVersion,
    /// The Gateway CRD has `status.addresses[].routability` (GEP-5093).
    routability: bool,
    memo: Memo,
}

/// What the planner knows without rendering.
#[derive(Debug, Default)]
struct Memo {
    /// Bumped whenever the desired status (or the Gateway API version) changes: what was
    /// known per object before no longer says anything.
    epoch: u64,
    desired: Option<Arc<Statuses>>,
    /// Objects found in sync in this epoch, with the `resourceVersion` they had.
    synced: HashMap<JobKey, String>,
}

// === impl StatusMetrics ===

impl StatusMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let m = Self::default();
        let reg = reg.sub_registry_with_prefix("status");
        reg.register(
            "patches",
            "Status patches by kind and result (Dropped: the queue was full; planned again later)",
            m.patches.clone(),
        );
        reg.register(
            "leader",
            "1 while this replica holds the status-writer Lease",
            m.leader.clone(),
        );
        m
    }

    fn count(&self, kind: PatchKind, result: PatchResult) {
        self.patches
            .get_or_create(&PatchLabels { kind, result })
            .inc();
    }
}

// === impl PatchKind ===

/// As the API spells the kind (`HTTPRoute`).
impl EncodeLabelValue for PatchKind {
    fn encode(&self, e: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        e.write_str(match self {
            Self::GatewayClass => "GatewayClass",
            Self::Gateway => "Gateway",
            Self::HttpRoute => "HTTPRoute",
            Self::GrpcRoute => "GRPCRoute",
            Self::TlsRoute => "TLSRoute",
            Self::TcpRoute => "TCPRoute",
            Self::UdpRoute => "UDPRoute",
            Self::ListenerSet => "ListenerSet",
            Self::BackendTlsPolicy => "BackendTLSPolicy",
            Self::SecurityPolicy => "SecurityPolicy",
            Self::BackendTrafficPolicy => "BackendTrafficPolicy",
            Self::ClientTrafficPolicy => "ClientTrafficPolicy",
            Self::XBackendTrafficPolicy => "XBackendTrafficPolicy",
        })
    }
}

// === impl StatusOptions ===

impl StatusOptions {
    pub fn new(lease: LeaseOptions) -> Self {
        Self {
            lease,
            queue: 1024,
            concurrency: 4,
            patch_timeout: Duration::from_secs(5),
            resync: Duration::from_secs(60),
        }
    }
}

// === impl StatusWriter ===

impl StatusWriter {
    pub fn spawn(
        client: Client,
        opts: StatusOptions,
        inputs: Inputs,
        metrics: StatusMetrics,
    ) -> Self {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (leader_tx, leader) = watch::channel(false);
        let lease = tokio::spawn(lease::run(
            client.clone(),
            opts.lease.clone(),
            leader_tx,
            shutdown_rx,
        ));
        let tracker = Arc::new(Mutex::new(Tracker::default()));
        let (queue, jobs) = mpsc::channel(opts.queue.max(1));
        let (failed_tx, failed_rx) = watch::channel(());
        let workers = tokio::spawn(work(
            jobs,
            Worker {
                client: client.clone(),
                tracker: tracker.clone(),
                metrics: metrics.clone(),
                timeout: opts.patch_timeout,
                leader: leader.clone(),
                failed: Arc::new(failed_tx),
            },
            opts.concurrency.max(1),
        ));
        let planner = tokio::spawn(plan_loop(PlanLoop {
            client,
            inputs,
            leader: leader.clone(),
            failed: failed_rx,
            queue,
            tracker,
            metrics,
            resync: opts.resync,
        }));
        Self {
            leader,
            shutdown,
            lease,
            tasks: vec![workers, planner],
        }
    }

    /// Stops writing and releases the Lease (bounded).
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.shutdown.send(true);
        let _ = self.lease.await;
    }
}

// === impl Job ===

impl Job {
    fn sent(&self) -> Sent {
        Sent {
            status: normalize(&self.status),
            before: self.resource_version.clone(),
            epoch: self.epoch,
        }
    }
}

// === impl JobKey ===

impl JobKey {
    fn kind(&self) -> PatchKind {
        match self {
            Self::GatewayClass(_) => PatchKind::GatewayClass,
            Self::Gateway(_) => PatchKind::Gateway,
            Self::HttpRoute(_) => PatchKind::HttpRoute,
            Self::GrpcRoute(_) => PatchKind::GrpcRoute,
            Self::TlsRoute(_) => PatchKind::TlsRoute,
            Self::TcpRoute(_) => PatchKind::TcpRoute,
            Self::UdpRoute(_) => PatchKind::UdpRoute,
            Self::ListenerSet(_) => PatchKind::ListenerSet,
            Self::BackendTlsPolicy(_) => PatchKind::BackendTlsPolicy,
            Self::SecurityPolicy(_) => PatchKind::SecurityPolicy,
            Self::BackendTrafficPolicy(_) => PatchKind::BackendTrafficPolicy,
            Self::ClientTrafficPolicy(_) => PatchKind::ClientTrafficPolicy,
            Self::XBackendTrafficPolicy(_) => PatchKind::XBackendTrafficPolicy,
        }
    }

    /// `(namespace, name)`.
    fn object(&self) -> (Option<&str>, &str) {
        match self {
            Self::GatewayClass(name) => (None, name),
            Self::Gateway(r)
            | Self::HttpRoute(r)
            | Self::GrpcRoute(r)
            | Self::TlsRoute(r)
            | Self::TcpRoute(r)
            | Self::UdpRoute(r)
            | Self::ListenerSet(r)
            | Self::BackendTlsPolicy(r)
            | Self::SecurityPolicy(r)
            | Self::BackendTrafficPolicy(r)
            | Self::ClientTrafficPolicy(r)
            | Self::XBackendTrafficPolicy(r) => (Some(&r.namespace), &r.name),
        }
    }

    fn api_resource(&self) -> ApiResource {
        let gateway_api = |kind: &str, plural: &str| ApiResource {
            group: GATEWAY_GROUP.to_string(),
            version: "v1".to_string(),
            api_version: format!("{GATEWAY_GROUP}/v1"),
            kind: kind.to_string(),
            plural: plural.to_string(),
        };
        let pier = |kind: &str, plural: &str| ApiResource {
            group: PIER_GROUP.to_string(),
            version: "v1alpha1".to_string(),
            api_version: PIER_POLICY_API_VERSION.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
        };
        match self.kind() {
            PatchKind::GatewayClass => gateway_api("GatewayClass", "gatewayclasses"),
            PatchKind::Gateway => gateway_api("Gateway", "gateways"),
            PatchKind::HttpRoute => gateway_api("HTTPRoute", "httproutes"),
            PatchKind::GrpcRoute => gateway_api("GRPCRoute", "grpcroutes"),
            PatchKind::TlsRoute => gateway_api("TLSRoute", "tlsroutes"),
            PatchKind::TcpRoute => gateway_api("TCPRoute", "tcproutes"),
            PatchKind::UdpRoute => gateway_api("UDPRoute", "udproutes"),
            PatchKind::ListenerSet => gateway_api("ListenerSet", "listenersets"),
            PatchKind::BackendTlsPolicy => gateway_api("BackendTLSPolicy", "backendtlspolicies"),
            PatchKind::SecurityPolicy => pier("SecurityPolicy", "securitypolicies"),
            PatchKind::BackendTrafficPolicy => {
                pier("BackendTrafficPolicy", "backendtrafficpolicies")
            }
            PatchKind::ClientTrafficPolicy => pier("ClientTrafficPolicy", "clienttrafficpolicies"),
            PatchKind::XBackendTrafficPolicy => ApiResource {
                group: crate::translate::api::X_GATEWAY_GROUP.to_string(),
                version: "v1alpha1".to_string(),
                api_version: crate::translate::status::X_GATEWAY_API_VERSION.to_string(),
                kind: "XBackendTrafficPolicy".to_string(),
                plural: "xbackendtrafficpolicies".to_string(),
            },
        }
    }
}

// === impl Planner ===

impl Planner {
    fn new(settings: Settings) -> Self {
        Self {
            settings,
            version: BundleVersion::Unknown,
            routability: false,
            memo: Memo::default(),
        }
    }

    /// A new Gateway API version changes every GatewayClass status (and the Gateway CRD's
    /// `routability`, every Gateway's).
    fn set_version(&mut self, version: BundleVersion, routability: bool) {
        if version != self.version || routability != self.routability {
            self.version = version;
            self.routability = routability;
            self.memo.desired = None;
        }
    }

    /// The jobs that would make the cluster say what `desired` says.
    fn plan(
        &mut self,
        desired: &Arc<Statuses>,
        stores: &Stores,
        tracker: &Mutex<Tracker>,
        now: &Value,
    ) -> Vec<Job> {
        let memo = &mut self.memo;
        if !memo
            .desired
            .as_ref()
            .is_some_and(|d| Arc::ptr_eq(d, desired))
        {
            memo.epoch += 1;
            memo.synced.clear();
            memo.desired = Some(desired.clone());
            // Forget objects pier no longer writes (deleted, or out of scope).
            lock(tracker).applied.retain(|k, _| match k {
                JobKey::GatewayClass(n) => desired.gateway_classes.contains_key(n),
                JobKey::Gateway(r) => desired.gateways.contains_key(r),
                JobKey::HttpRoute(r) => desired.http_routes.contains_key(r),
                JobKey::GrpcRoute(r) => desired.grpc_routes.contains_key(r),
                JobKey::TlsRoute(r) => desired.tls_routes.contains_key(r),
                JobKey::TcpRoute(r) => desired.tcp_routes.contains_key(r),
                JobKey::UdpRoute(r) => desired.udp_routes.contains_key(r),
                JobKey::ListenerSet(r) => desired.listener_sets.contains_key(r),
                JobKey::BackendTlsPolicy(r) => desired.backend_tls_policies.contains_key(r),
                JobKey::SecurityPolicy(r) => desired.security_policies.contains_key(r),
                JobKey::BackendTrafficPolicy(r) => desired.backend_traffic_policies.contains_key(r),
                JobKey::ClientTrafficPolicy(r) => desired.client_traffic_policies.contains_key(r),
                JobKey::XBackendTrafficPolicy(r) => {
                    desired.x_backend_traffic_policies.contains_key(r)
                }
            });
        }
        let features = supported_features(
            !(stores.unserved).contains(crate::source::kube::WatchKind::ClusterTrustBundle),
            self.routability,
        );
        let ctx = render::Ctx {
            controller_name: &self.settings.controller_name,
            gateway: self.settings.gateway.as_ref(),
            version: &self.version,
            supported_features: &features,
            address_routability: self.routability,
            now,
        };
        let mut jobs = vec![];
        for (name, want) in &desired.gateway_classes {
            let Some(guard) = object(&stores.gateway_classes, None, name) else {
                continue;
            };
            let Ok(o) = &guard.0 else { continue };
            let key = JobKey::GatewayClass(name.clone());
            if let Some(job) = memo.consider(key, &o.metadata, tracker, || {
                render::gateway_class(want, &to_json(&o.status), ctx)
            }) {
                jobs.push(job);
            }
        }
        for (r, want) in &desired.gateways {
            let Some(guard) = object(&stores.gateways, Some(&r.namespace), &r.name) else {
                continue;
            };
            let Ok(o) = &guard.0 else { continue };
            let key = JobKey::Gateway(r.clone());
            if let Some(job) = memo.consider(key, &o.metadata, tracker, || {
                render::gateway(want, &to_json(&o.status), ctx)
            }) {
                jobs.push(job);
            }
        }
        for (r, want) in &desired.listener_sets {
            let Some(guard) = object(&stores.listener_sets, Some(&r.namespace), &r.name) else {
                continue;
            };
            let Ok(o) = &guard.0 else { continue };
            let key = JobKey::ListenerSet(r.clone());
            if let Some(job) = memo.consider(key, &o.metadata, tracker, || {
                render::listener_set(want, &to_json(&o.status), ctx)
            }) {
                jobs.push(job);
            }
        }
        let routes = RouteJobs { tracker, ctx };
        // Each kind: its field in `desired` and `stores`, its job key, how its status renders.
        macro_rules! plan {
            ($($field:ident => $key:ident, $render:path);* $(;)?) => {$(
                let kind = (&desired.$field, &stores.$field);
                routes.plan(memo, &mut jobs, kind, (JobKey::$key, $render), |o| {
                    to_json(&o.status)
                });
            )*};
        }
        plan!(
            http_routes => HttpRoute, render::http_route;
            grpc_routes => GrpcRoute, render::http_route;
            tls_routes => TlsRoute, render::http_route;
            tcp_routes => TcpRoute, render::http_route;
            udp_routes => UdpRoute, render::http_route;
            backend_tls_policies => BackendTlsPolicy, render::policy;
            security_policies => SecurityPolicy, render::policy;
            backend_traffic_policies => BackendTrafficPolicy, render::policy;
            client_traffic_policies => ClientTrafficPolicy, render::policy;
            x_backend_traffic_policies => XBackendTrafficPolicy, render::policy;
        );
        jobs
    }
}

/// Plans the jobs of one route kind (every route kind's status has one shape), or of one
/// policy kind (GEP-713 `status.ancestors`, one shape for all).
struct RouteJobs<'a> {
    tracker: &'a Mutex<Tracker>,
    ctx: render::Ctx<'a>,
}

/// How a kind's desired status merges into the observed one (`render::http_route`,
/// `render::policy`).
type Render<W> = fn(&str, &W, &Value, render::Ctx<'_>) -> Option<Value>;

impl RouteJobs<'_> {
    fn plan<K, W>(
        &self,
        memo: &mut Memo,
        jobs: &mut Vec<Job>,
        (desired, store): (&BTreeMap<ObjectRef, W>, &Store<DeserializeGuard<K>>),
        (key, render): (fn(ObjectRef) -> JobKey, Render<W>),
        observed: impl Fn(&K) -> Value,
    ) where
        K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    {
        for (r, want) in desired {
            let Some(guard) = object(store, Some(&r.namespace), &r.name) else {
                continue;
            };
            let Ok(o) = &guard.0 else { continue };
            if let Some(job) = memo.consider(key(r.clone()), o.meta(), self.tracker, || {
                render(&r.namespace, want, &observed(o), self.ctx)
            }) {
                jobs.push(job);
            }
        }
    }
}

// === impl Memo ===

impl Memo {
    /// A job for one object, unless it is known to be in sync, already queued, or just applied
    /// (and the store has not caught up). Renders only when none of that is known.
    fn consider(
        &mut self,
        key: JobKey,
        meta: &ObjectMeta,
        tracker: &Mutex<Tracker>,
        render: impl FnOnce() -> Option<Value>,
    ) -> Option<Job> {
        let rv = meta.resource_version.clone();
        if rv.is_some() && self.synced.get(&key) == rv.as_ref() {
            return None;
        }
        {
            let tracker = lock(tracker);
            let same_round = |s: &Sent| s.epoch == self.epoch && s.before == rv;
            if tracker.pending.get(&key).is_some_and(same_round) {
                return None;
            }
            if let Some(a) = tracker.applied.get(&key)
                && a.sent.epoch == self.epoch
                && (a.sent.before == rv || a.after == rv)
            {
                // Applied for this desired status; the store has not seen the result yet (or
                // the API server stores it differently, which a retry would not change).
                return None;
            }
        }
        let Some(status) = render() else {
            if let Some(rv) = rv {
                self.synced.insert(key, rv);
            }
            return None;
        };
        // The same status may already be on its way from an earlier round.
        let norm = normalize(&status);
        let on_its_way = |s: &Sent| s.status == norm;
        let tracker = lock(tracker);
        if tracker.pending.get(&key).is_some_and(on_its_way)
            || tracker
                .applied
                .get(&key)
                .is_some_and(|a| on_its_way(&a.sent) && (a.sent.before == rv || a.after == rv))
        {
            return None;
        }
        Some(Job {
            key,
            status,
            resource_version: rv,
            epoch: self.epoch,
        })
    }
}

/// The store's copy of an object.
fn object<K>(
    store: &Store<DeserializeGuard<K>>,
    namespace: Option<&str>,
    name: &str,
) -> Option<Arc<DeserializeGuard<K>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let mut r = StoreRef::new(name);
    if let Some(ns) = namespace {
        r = r.within(ns);
    }
    store.get(&r)
}

fn lock(tracker: &Mutex<Tracker>) -> std::sync::MutexGuard<'_, Tracker> {
    tracker.lock().expect("the tracker lock is never poisoned")
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

// === the planner task ===

struct PlanLoop {
    client: Client,
    inputs: Inputs,
    leader: watch::Receiver<bool>,
    failed: watch::Receiver<()>,
    queue: mpsc::Sender<Job>,
    tracker: Arc<Mutex<Tracker>>,
    metrics: StatusMetrics,
    resync: Duration,
}

async fn plan_loop(mut l: PlanLoop) {
    let mut planner = Some(Planner::new(l.inputs.settings.clone()));
    let mut resync = tokio::time::interval(l.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut version_checked: Option<tokio::time::Instant> = None;
    let mut version_denied = false;
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        let retry = retry_at;
        tokio::select! {
            r = l.inputs.desired.changed() => if r.is_err() { return },
            r = l.inputs.observed.changed() => if r.is_err() { return },
            r = l.leader.changed() => if r.is_err() { return },
            r = l.failed.changed() => {
                if r.is_err() { return }
                retry_at.get_or_insert_with(|| tokio::time::Instant::now() + RETRY_AFTER);
                continue;
            }
            () = async { tokio::time::sleep_until(retry.expect("guarded")).await }, if retry.is_some() => {}
            _ = resync.tick() => {
                lock(&l.tracker).applied.retain(|_, a| !a.rejected);
            }
        }
        tokio::time::sleep(BATCH).await;
        retry_at = None;
        let is_leader = *l.leader.borrow_and_update();
        l.metrics.leader.set(i64::from(is_leader));
        if !is_leader {
            continue;
        }
        let Some(mut p) = planner.take() else { return };
        if version_checked.is_none_or(|t| t.elapsed() >= VERSION_EVERY) {
            match tokio::time::timeout(Duration::from_secs(5), version::fetch(&l.client)).await {
                Ok(Ok((v, routability))) => {
                    version_checked = Some(tokio::time::Instant::now());
                    if v != p.version {
                        tracing::info!(version = ?v, "installed Gateway API version");
                    }
                    p.set_version(v, routability);
                }
                Ok(Err(kube::Error::Api(e))) if e.code == 403 => {
                    version_checked = Some(tokio::time::Instant::now());
                    if !version_denied {
                        version_denied = true;
                        tracing::info!(error = %e, "may not read the Gateway API CRDs' bundle version; assuming it is supported");
                    }
                }
                // Not installed yet, or unreachable: asked again next round.
                Ok(Err(e)) => tracing::debug!(error = %e, "cannot read the Gateway API version"),
                Err(_) => tracing::debug!("reading the Gateway API version timed out"),
            }
        }
        let desired = l.inputs.desired.borrow_and_update().clone();
        l.inputs.observed.mark_unchanged();
        let now = json!(Time((l.inputs.clock)()));
        let stores = l.inputs.stores.clone();
        let tracker = l.tracker.clone();
        let planned = tokio::task::spawn_blocking(move || {
            let jobs = p.plan(&desired, &stores, &tracker, &now);
            (p, jobs)
        })
        .await;
        let Ok((p, jobs)) = planned else {
            tracing::error!("status planning panicked; the status writer stops");
            return;
        };
        planner = Some(p);
        for job in jobs {
            let key = job.key.clone();
            lock(&l.tracker).pending.insert(key.clone(), job.sent());
            match l.queue.try_send(job) {
                Ok(()) => {}
                Err(e) => {
                    lock(&l.tracker).pending.remove(&key);
                    if let mpsc::error::TrySendError::Closed(_) = e {
                        return;
                    }
                    // Full: plan the rest again shortly, once workers have made room.
                    l.metrics.count(key.kind(), PatchResult::Dropped);
                    retry_at = Some(tokio::time::Instant::now() + RETRY_AFTER);
                    break;
                }
            }
        }
    }
}

// === the workers ===

#[derive(Clone)]
struct Worker {
    client: Client,
    tracker: Arc<Mutex<Tracker>>,
    metrics: StatusMetrics,
    timeout: Duration,
    leader: watch::Receiver<bool>,
    failed: Arc<watch::Sender<()>>,
}

async fn work(jobs: mpsc::Receiver<Job>, worker: Worker, concurrency: usize) {
    let jobs = futures::stream::unfold(jobs, |mut rx| async move {
        rx.recv().await.map(|job| (job, rx))
    });
    jobs.for_each_concurrent(concurrency, |job| {
        let w = worker.clone();
        async move { w.apply(job).await }
    })
    .await;
}

impl Worker {
    async fn apply(&self, job: Job) {
        let kind = job.key.kind();
        let sent = job.sent();
        if !*self.leader.borrow() {
            self.tracker().pending.remove(&job.key);
            return;
        }
        let (namespace, name) = job.key.object();
        let ar = job.key.api_resource();
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let mut metadata = json!({ "name": name });
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        // Routes and policies: the merged list (parents, ancestors) is only right for the
        // version it was merged from.
        if matches!(
            kind,
            PatchKind::HttpRoute
                | PatchKind::GrpcRoute
                | PatchKind::TlsRoute
                | PatchKind::TcpRoute
                | PatchKind::UdpRoute
                | PatchKind::BackendTlsPolicy
                | PatchKind::SecurityPolicy
                | PatchKind::BackendTrafficPolicy
                | PatchKind::ClientTrafficPolicy
                | PatchKind::XBackendTrafficPolicy
        ) && let Some(rv) = &job.resource_version
        {
            metadata["resourceVersion"] = json!(rv);
        }
        let body = json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": metadata,
            "status": job.status,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let result = tokio::time::timeout(
            self.timeout,
            api.patch_status(name, &params, &Patch::Apply(&body)),
        )
        .await;
        let mut t = self.tracker();
        t.pending.remove(&job.key);
        match result {
            Ok(Ok(obj)) => {
                self.metrics.count(kind, PatchResult::Ok);
                tracing::debug!(?kind, namespace, name, "status written");
                t.applied.insert(
                    job.key,
                    Applied {
                        sent,
                        after: obj.metadata.resource_version,
                        rejected: false,
                    },
                );
            }
            Ok(Err(e)) => {
                self.metrics.count(kind, PatchResult::Failed);
                let code = match &e {
                    kube::Error::Api(s) => Some(s.code),
                    _ => None,
                };
                match code {
                    Some(409 | 404) => {
                        t.applied.remove(&job.key);
                        drop(t);
                        tracing::debug!(?kind, namespace, name, error = %e, "status patch raced a change; retrying once the store has it");
                        self.failed.send_replace(());
                    }
                    // Rejected (invalid, forbidden): the same patch would fail the same way.
                    // Not retried until the object or the desired status changes, or the next
                    // resync (RBAC may have been fixed).
                    Some(400 | 401 | 403 | 422) => {
                        t.applied.insert(
                            job.key.clone(),
                            Applied {
                                after: sent.before.clone(),
                                sent,
                                rejected: true,
                            },
                        );
                        drop(t);
                        tracing::error!(?kind, namespace, name, error = %e, "status patch rejected; retrying at the next resync");
                    }
                    _ => {
                        t.applied.remove(&job.key);
                        drop(t);
                        tracing::warn!(?kind, namespace, name, error = %e, "status patch failed; retrying");
                        self.failed.send_replace(());
                    }
                }
            }
            Err(_) => {
                self.metrics.count(kind, PatchResult::TimedOut);
                t.applied.remove(&job.key);
                drop(t);
                tracing::warn!(?kind, namespace, name, timeout = ?self.timeout, "status patch timed out; retrying");
                self.failed.send_replace(());
            }
        }
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, Tracker> {
        lock(&self.tracker)
    }
}

#[cfg(test)]
mod tests;
