//! Cluster mode: kube-rs watchers and reflector stores for every kind translation reads, a
//! readiness latch per kind, and a coalesced "configuration changed" signal. Like the file
//! source it only reads: the run loop rebuilds whole [`Resources`] from the stores (never from
//! deltas) and hands them to the publisher.
//!
//! ```text
//! watcher(GatewayClass) ─────┐ .backoff(Reconnect) .modify(drop managedFields)
//! watcher(Gateway, HTTPRoute)│  └─> Writer::apply_watcher_event ─> Store<K> ─┐
//! watcher(ReferenceGrant)    │  first InitDone: the kind's latch is released  ├─> Stores::resources()
//!   (v1, or v1beta1)         │                                                │     └─> Resources
//! watcher(Namespace meta)    │
//! watcher(Service, EndpointSlice, Secret, ConfigMap)
//! watcher(BackendTLSPolicy, ClusterTrustBundle,   optional: a 404 counts as listed, empty
//!         SecurityPolicy)
//!                            ├─> spec/data change ─> coalesce (QUIET, MAX_DELAY) ─> change signal
//!                            └─> status-only change (kinds with a status subresource)
//!                                  ─> `status_changes` (the status writer)
//! ```
//!
//! **Robustness.** Objects are watched as [`DeserializeGuard`]s: one that does not decode is
//! logged, counted and left out of `Resources`, and the rest keeps working. Watches reconnect
//! with a jittered exponential backoff ([`Reconnect`], 0.5 s → 5 s, and at once on 410; see
//! there why not kube's `default_backoff`).
//! During an outage the stores keep their contents, nothing is republished and the data plane
//! keeps serving the last good snapshot. A watch resumes from its last `resourceVersion`; when
//! the API server can no longer serve that version (410 Gone, usual after a restart) the
//! watcher relists, and the reflector swaps the store whole on `InitDone`, so deletes made
//! during the outage are seen. Missing Gateway API CRDs (404) and missing RBAC (403) are
//! logged once a minute with what to do, and retried: pier stays unready instead of crashing.
//! Some kinds are optional ([`WatchKind::is_optional`]): BackendTLSPolicy, GRPCRoute, TLSRoute,
//! ListenerSet (their CRDs are often not installed), pier's own SecurityPolicy (its CRD comes
//! with pier: `pier crds`, `config/crds/pier/`) and ClusterTrustBundle
//! (`certificates.k8s.io/v1beta1`, off by default up to Kubernetes 1.36). A 404 for them
//! releases their readiness latch as an empty list, is logged once at info, and the watch keeps
//! retrying, so installing the CRD (or enabling the API) later takes effect without a restart.
//! A 403 is not skipped for any of them: a SecurityPolicy pier may not read would be an
//! access rule silently not enforced, so pier stays unready instead.
//!
//! **Readiness.** The change signal of [`KubeSource::start`] yields its first `()` only once
//! every kind has listed once, so the first published snapshot is complete (no 404s for routes
//! that have not loaded yet).
//!
//! **Status-only changes.** GatewayClass, Gateway and HTTPRoute have a status subresource:
//! their `metadata.generation` moves with the spec only. An update that keeps generation,
//! labels and annotations (a status write, ours included) does not trigger a re-translation; it
//! wakes the status writer through `status_changes` instead.
//!
//! **What is watched (least data, least privilege within what translation needs):**
//!
//! - GatewayClass, Gateway, HTTPRoute, ReferenceGrant, Service, EndpointSlice: all, cluster-wide
//!   (any namespace can hold a Gateway, an attached Route or a referenced backend).
//! - Namespace: metadata only (`allowedRoutes.namespaces.selector` reads labels).
//! - Secret: cluster-wide but only `type=kubernetes.io/tls` (a field selector; the only type a
//!   listener `certificateRef` or `tls.backend.clientCertificateRef` may name). Service-account
//!   tokens, Helm release blobs and opaque application secrets never reach pier's memory.
//!   Cost: a referenced Secret of the wrong type reports "not found" rather than "wrong
//!   type", and a mesh trust bundle kept in an `Opaque` Secret is not seen (a TLS Secret with
//!   a `ca.crt` key, as cert-manager writes, is): keep bundles in ConfigMaps or
//!   ClusterTrustBundles, or widen the selector with `--secret-field-selector ''` (all
//!   Secrets). Kubernetes RBAC cannot narrow
//!   `list`/`watch` by field selector, so the ClusterRole still grants all Secrets; narrower
//!   grants mean per-namespace Roles, which pier would then have to be told about. The
//!   alternative, one Secret watch per namespace that holds a Gateway, was rejected: a
//!   cross-namespace `certificateRef` (with a ReferenceGrant) can point anywhere, and dynamic
//!   per-namespace watches multiply connections and readiness states.
//! - Secret of `type=Opaque` (what `kubectl create secret generic` makes): only once some
//!   SecurityPolicy names a Secret (`basicAuth.users`, `apiKeyAuth.credentialRefs`,
//!   `oidc.clientSecret`/`cookieSecret`: [`watch_policy_secrets_when_asked`]); then cluster-wide,
//!   a second watch (kind label `OpaqueSecret`) whose objects join the TLS ones. Until a policy
//!   asks, application secrets stay out of pier's memory; once one does, every `Opaque` Secret
//!   is in it (a watch per named Secret would multiply connections and readiness states as
//!   above). Not watched at all when `--secret-field-selector ''` already watches every Secret.
//! - ConfigMap: cluster-wide, all, unless [`WatchScope::config_maps_label_selector`] narrows
//!   it (`--configmap-label-selector`): mesh trust bundles (GEP-3951), BackendTLSPolicy
//!   `caCertificateRefs` and `infrastructure.parametersRef` name ConfigMaps in arbitrary
//!   namespaces. Clusters with many or large ConfigMaps should label the ones pier needs and
//!   set the selector.
//! - BackendTLSPolicy (`v1`), ClusterTrustBundle (`v1beta1`), SecurityPolicy
//!   (`pier.dev/v1alpha1`): all, cluster-wide; optional.
//! - Pod: only once some Gateway's mesh stanza asks for per-endpoint identity
//!   ([`watch_pods_when_asked`]); then all, cluster-wide, decoded into a slim type
//!   ([`PodObject`]: namespace, name, ServiceAccount; nothing else is allocated) for
//!   per-endpoint mesh identity (an EndpointSlice endpoint's `targetRef` Pod -> its
//!   ServiceAccount). Not narrowed further: which Pods back meshed Services changes with every
//!   EndpointSlice, and a watch per Pod or per namespace would multiply connections and
//!   readiness states as for Secrets above. Updates are ignored (the
//!   ServiceAccount is immutable; Pods change status constantly), only adds and deletes
//!   re-translate. Without RBAC for Pods (403) pier still becomes ready; endpoints that need
//!   an identity then get no traffic.
//!
//! **Adding a kind**: a field in
//! [`Stores`], one `tasks.watch(..)` line in [`KubeSource::start`], one line in
//! [`Stores::resources`], a [`WatchKind`] variant, and the RBAC rule in `config/rbac/`. A kind
//! whose Rust type is not a kube `Resource` (a pier-own struct, like mesh's Gateway with
//! `spec.mesh`) gets a `#[serde(transparent)]` newtype implementing `Resource`, as
//! [`ReferenceGrantV1Beta1`] does.

mod credentials;
mod gateway;
mod pod;
pub mod reach;
mod reference_grant;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::reflector::Store;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch as channel};
use tokio::task::JoinHandle;

pub use self::credentials::{CredentialMetrics, Credentials};
pub use self::gateway::{GrpcRouteObject, HttpRouteObject};
pub use self::pod::PodObject;
pub use self::reference_grant::ReferenceGrantV1Beta1;
use self::watch::{ApiServerLog, Changes, Ctx, Refused};
pub use self::watch::{Reconnect, Watched};
use crate::translate::api::{
    BackendTlsPolicy, ClusterTrustBundle, ConfigMap, EndpointSlice, GatewayClass, Namespace,
    ReferenceGrant, Secret, SecurityPolicy, Service, TcpRoute, TlsRoute, UdpRoute,
};
use crate::translate::api::{BackendTrafficPolicy, ClientTrafficPolicy};
use crate::translate::mesh::{asks_for_endpoint_identity, mesh_key_of};
use crate::translate::{ObjectKey, Resources};

/// Quiet period before a rebuild (as for files).
pub const QUIET: Duration = super::files::QUIET;
/// A rebuild happens at most this long after the first change, however busy the cluster.
pub const MAX_DELAY: Duration = super::files::MAX_DELAY;
/// How often "still waiting for the initial list" is logged.
const WAITING_LOG_EVERY: Duration = Duration::from_secs(10);

/// The only Secret type translation reads (listener certificates).
pub const TLS_SECRETS: &str = "type=kubernetes.io/tls";
/// The Secrets a SecurityPolicy names (htpasswd files, API keys, OIDC client and cookie
/// secrets), watched once a policy asks.
pub const POLICY_SECRETS: &str = "type=Opaque";

/// Which API server to talk to, as `pier run --kubeconfig [PATH] [--context NAME]` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Connect {
    /// A kubeconfig file; `None` infers: `KUBECONFIG`, `~/.kube/config`, then the in-cluster
    /// service account.
    pub kubeconfig: Option<PathBuf>,
    /// A context of the kubeconfig other than its current one.
    pub context: Option<String>,
}

/// What is watched beyond the Gateway API kinds (see the module docs for the trade-offs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchScope {
    /// Field selector for Secrets; [`TLS_SECRETS`] by default, `None` for all.
    pub secrets_field_selector: Option<String>,
    /// Label selector for ConfigMaps; all by default.
    pub config_maps_label_selector: Option<String>,
}

/// The kinds pier watches, as metric labels and log fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WatchKind {
    GatewayClass,
    Gateway,
    HttpRoute,
    GrpcRoute,
    TlsRoute,
    TcpRoute,
    UdpRoute,
    ListenerSet,
    ReferenceGrant,
    Namespace,
    Service,
    EndpointSlice,
    Secret,
    /// `Opaque` Secrets, watched once a SecurityPolicy names a Secret.
    OpaqueSecret,
    ConfigMap,
    BackendTlsPolicy,
    ClusterTrustBundle,
    Pod,
    /// pier's own `SecurityPolicy` (`pier.dev/v1alpha1`).
    SecurityPolicy,
    /// pier's own `BackendTrafficPolicy` (`pier.dev/v1alpha1`).
    BackendTrafficPolicy,
    /// pier's own `ClientTrafficPolicy` (`pier.dev/v1alpha1`).
    ClientTrafficPolicy,
    /// Gateway API's `XBackendTrafficPolicy` (v1.7 experimental).
    XBackendTrafficPolicy,
}

/// The reflector stores, one per kind. Cheap to clone (shared handles).
#[derive(Clone)]
pub struct Stores {
    pub gateway_classes: Store<DeserializeGuard<GatewayClass>>,
    pub gateways: Store<DeserializeGuard<gateway::GatewayObject>>,
    pub http_routes: Store<DeserializeGuard<gateway::HttpRouteObject>>,
    pub grpc_routes: Store<DeserializeGuard<gateway::GrpcRouteObject>>,
    pub tls_routes: Store<DeserializeGuard<TlsRoute>>,
    pub tcp_routes: Store<DeserializeGuard<TcpRoute>>,
    pub udp_routes: Store<DeserializeGuard<UdpRoute>>,
    pub listener_sets: Store<DeserializeGuard<gateway::ListenerSetObject>>,
    /// Filled when the API server serves ReferenceGrant `v1`...
    pub reference_grants: Store<DeserializeGuard<ReferenceGrant>>,
    /// ... else this one, from `v1beta1` (Gateway API before v1.5).
    pub reference_grants_v1beta1: Store<DeserializeGuard<ReferenceGrantV1Beta1>>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub services: Store<DeserializeGuard<Service>>,
    pub endpoint_slices: Store<DeserializeGuard<EndpointSlice>>,
    pub secrets: Store<DeserializeGuard<Secret>>,
    /// `Opaque` Secrets, once a SecurityPolicy asks ([`watch_policy_secrets_when_asked`]).
    pub opaque_secrets: Store<DeserializeGuard<Secret>>,
    pub config_maps: Store<DeserializeGuard<ConfigMap>>,
    pub backend_tls_policies: Store<DeserializeGuard<BackendTlsPolicy>>,
    pub cluster_trust_bundles: Store<DeserializeGuard<ClusterTrustBundle>>,
    pub security_policies: Store<DeserializeGuard<SecurityPolicy>>,
    pub backend_traffic_policies: Store<DeserializeGuard<BackendTrafficPolicy>>,
    pub client_traffic_policies: Store<DeserializeGuard<ClientTrafficPolicy>>,
    pub x_backend_traffic_policies: Store<DeserializeGuard<gateway::XBackendTrafficPolicyObject>>,
    /// Slim: namespace, name, ServiceAccount ([`PodObject`]).
    pub pods: Store<DeserializeGuard<PodObject>>,
    /// The kinds the API server refuses to pier now.
    pub refused: Arc<Refused>,
    /// The kinds the API server does not serve now (404).
    pub unserved: Arc<Refused>,
}

/// A running set of watches.
pub struct KubeSource {
    pub stores: Stores,
    /// Changes after which only a status (ours or another writer's) differs.
    pub status_changes: channel::Receiver<()>,
    pending: channel::Receiver<BTreeSet<WatchKind>>,
    tasks: Tasks,
}

/// Watch metrics (`pier_kube_*`).
#[derive(Clone, Debug, Default)]
pub struct KubeMetrics {
    pub objects: Family<KindLabels, Gauge>,
    pub errors: Family<ErrorLabels, Counter>,
    pub undecodable: Family<KindLabels, Counter>,
    pub credentials: CredentialMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: WatchKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: WatchKind,
    pub reason: WatchError,
}

/// Why a watch failed, as far as pier acts on it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WatchError {
    /// 404: the kind is not served (Gateway API CRDs not installed).
    NotFound,
    /// 401/403: pier's identity lacks the RBAC.
    Forbidden,
    /// The API server could not be reached or answered with a server error.
    Unavailable,
    /// 410 Gone: the resource version is too old (after an API server restart); relists.
    Expired,
    Other,
}

/// Aborts the watch tasks when dropped.
#[derive(Default)]
struct Tasks(Vec<JoinHandle<()>>);

// === impl Connect ===

impl Connect {
    /// A client for the API server. The connect timeout is shortened to 10 s so that a
    /// blackholed API server is noticed and retried sooner.
    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(self.client_and_server().await?.0)
    }

    /// [`Connect::client`] and the API server's URL. The client keeps the credentials it
    /// started with; `pier run` uses [`Credentials::start`], which follows the kubeconfig.
    pub async fn client_and_server(&self) -> anyhow::Result<(Client, String)> {
        use anyhow::Context;
        let config = self.config().await?;
        let server = config.cluster_url.to_string();
        tracing::info!(server = %server, "using the Kubernetes API server");
        let client = Client::try_from(config).context("cannot build the Kubernetes client")?;
        Ok((client, server))
    }

    /// The client configuration from the kubeconfig as it is now (or the in-cluster service
    /// account). The connect timeout is shortened to 10 s so that a blackholed API server is
    /// noticed and retried sooner.
    pub async fn config(&self) -> anyhow::Result<kube::Config> {
        use anyhow::Context;
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                // kube's own message repeats the path (Debug-quoted) and then its cause, which
                // the chain prints again: say the path once, and the innermost cause.
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                    let mut cause: &(dyn std::error::Error + 'static) = &e;
                    while let Some(next) = cause.source() {
                        cause = next;
                    }
                    anyhow::anyhow!("cannot read kubeconfig {}: {cause}", path.display())
                })?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("invalid kubeconfig {}", path.display()))?
            }
            (None, Some(_)) => kube::Config::from_kubeconfig(&options)
                .await
                .context("cannot load the kubeconfig")?,
            (None, None) => kube::Config::infer()
                .await
                .context("no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a cluster")?,
        };
        config.connect_timeout = Some(Duration::from_secs(10));
        Ok(config)
    }
}

// === impl WatchScope ===

impl Default for WatchScope {
    fn default() -> Self {
        Self {
            secrets_field_selector: Some(TLS_SECRETS.to_string()),
            config_maps_label_selector: None,
        }
    }
}

// === impl WatchKind ===

impl WatchKind {
    pub const ALL: [Self; 22] = [
        Self::GatewayClass,
        Self::Gateway,
        Self::HttpRoute,
        Self::GrpcRoute,
        Self::TlsRoute,
        Self::TcpRoute,
        Self::UdpRoute,
        Self::ListenerSet,
        Self::ReferenceGrant,
        Self::Namespace,
        Self::Service,
        Self::EndpointSlice,
        Self::Secret,
        Self::OpaqueSecret,
        Self::ConfigMap,
        Self::BackendTlsPolicy,
        Self::ClusterTrustBundle,
        Self::Pod,
        Self::SecurityPolicy,
        Self::BackendTrafficPolicy,
        Self::ClientTrafficPolicy,
        Self::XBackendTrafficPolicy,
    ];

    /// The API group and resource (plural) the kind is watched as: what its CRD is named after
    /// (`<plural>.<group>`) and what RBAC grants (`pier check` derives both from this).
    pub fn resource(self) -> (&'static str, &'static str) {
        use crate::translate::api::{CERTIFICATES_GROUP, CORE_GROUP, GATEWAY_GROUP};
        use crate::translate::spiffe::PIER_GROUP;
        match self {
            Self::GatewayClass => (GATEWAY_GROUP, "gatewayclasses"),
            Self::Gateway => (GATEWAY_GROUP, "gateways"),
            Self::HttpRoute => (GATEWAY_GROUP, "httproutes"),
            Self::GrpcRoute => (GATEWAY_GROUP, "grpcroutes"),
            Self::TlsRoute => (GATEWAY_GROUP, "tlsroutes"),
            Self::TcpRoute => (GATEWAY_GROUP, "tcproutes"),
            Self::UdpRoute => (GATEWAY_GROUP, "udproutes"),
            Self::ListenerSet => (GATEWAY_GROUP, "listenersets"),
            Self::ReferenceGrant => (GATEWAY_GROUP, "referencegrants"),
            Self::BackendTlsPolicy => (GATEWAY_GROUP, "backendtlspolicies"),
            Self::Namespace => (CORE_GROUP, "namespaces"),
            Self::Service => (CORE_GROUP, "services"),
            Self::Secret | Self::OpaqueSecret => (CORE_GROUP, "secrets"),
            Self::ConfigMap => (CORE_GROUP, "configmaps"),
            Self::Pod => (CORE_GROUP, "pods"),
            Self::EndpointSlice => ("discovery.k8s.io", "endpointslices"),
            Self::ClusterTrustBundle => (CERTIFICATES_GROUP, "clustertrustbundles"),
            Self::SecurityPolicy => (PIER_GROUP, "securitypolicies"),
            Self::BackendTrafficPolicy => (PIER_GROUP, "backendtrafficpolicies"),
            Self::ClientTrafficPolicy => (PIER_GROUP, "clienttrafficpolicies"),
            Self::XBackendTrafficPolicy => (
                crate::translate::api::X_GATEWAY_GROUP,
                "xbackendtrafficpolicies",
            ),
        }
    }

    /// Served only when the Gateway API CRDs are installed.
    pub fn is_gateway_api(self) -> bool {
        matches!(
            self,
            Self::GatewayClass
                | Self::Gateway
                | Self::HttpRoute
                | Self::GrpcRoute
                | Self::TlsRoute
                | Self::TcpRoute
                | Self::UdpRoute
                | Self::ListenerSet
                | Self::ReferenceGrant
        )
    }

    /// A kind whose absence from the API server (404) is no reason to stay unready: its
    /// objects are an addition (the CRDs of BackendTLSPolicy, GRPCRoute, TLSRoute and
    /// ListenerSet are often not installed, nor are pier's own policy CRDs;
    /// ClusterTrustBundle's beta API is off by default). Without the CRD there can be no
    /// object of the kind, so empty is the truth, not a guess.
    pub fn is_optional(self) -> bool {
        matches!(
            self,
            Self::BackendTlsPolicy
                | Self::GrpcRoute
                | Self::TlsRoute
                | Self::TcpRoute
                | Self::UdpRoute
                | Self::ListenerSet
                | Self::ClusterTrustBundle
                | Self::SecurityPolicy
                | Self::BackendTrafficPolicy
                | Self::ClientTrafficPolicy
                | Self::XBackendTrafficPolicy
        )
    }
}

impl WatchKind {
    /// A kind pier can serve without (fail closed where it is needed): a 403 releases its
    /// readiness latch as an empty list, and the watch keeps retrying. Pods only matter for
    /// per-endpoint mesh identity; a cluster whose RBAC predates it keeps working, and such
    /// endpoints get no traffic ("Pod ... is unknown: the API server refuses pier's list/watch
    /// of Pods" in the Route's status, from [`Stores::refused`]).
    /// The version pier watches when the kind's older versions are not read: TCPRoute and
    /// UDPRoute are pier's own v1 types (Gateway API v1.7), and a cluster with only v1alpha2
    /// CRDs serves pier none of them. `None`: the kind's crate type, or a fallback, covers
    /// what clusters serve.
    pub fn required_version(self) -> Option<&'static str> {
        matches!(self, Self::TcpRoute | Self::UdpRoute).then_some("v1")
    }

    pub fn is_optional_without_rbac(self) -> bool {
        matches!(self, Self::Pod)
    }
}

impl std::fmt::Display for WatchKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::HttpRoute => f.write_str("HTTPRoute"),
            Self::GrpcRoute => f.write_str("GRPCRoute"),
            Self::TlsRoute => f.write_str("TLSRoute"),
            Self::TcpRoute => f.write_str("TCPRoute"),
            Self::UdpRoute => f.write_str("UDPRoute"),
            Self::BackendTlsPolicy => f.write_str("BackendTLSPolicy"),
            other => std::fmt::Debug::fmt(other, f),
        }
    }
}

/// As the API spells the kind (`HTTPRoute`).
impl EncodeLabelValue for WatchKind {
    fn encode(&self, e: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        write!(e, "{self}")
    }
}

// === impl KubeMetrics ===

impl KubeMetrics {
    pub fn register(reg: &mut Registry) -> Self {
        let m = Self::default();
        let reg = reg.sub_registry_with_prefix("kube");
        reg.register(
            "objects",
            "Objects in the watch store, by kind",
            m.objects.clone(),
        );
        reg.register(
            "watch_errors",
            "Watch errors by kind and reason; watches retry with backoff",
            m.errors.clone(),
        );
        reg.register(
            "undecodable_objects",
            "Objects seen that could not be decoded (left out of the configuration)",
            m.undecodable.clone(),
        );
        reg.register(
            "credential_reloads",
            "Kubernetes clients rebuilt from the kubeconfig (file change, SIGHUP or a 401), by result",
            m.credentials.reloads.clone(),
        );
        reg.register(
            "unauthorized",
            "API server answers 401 Unauthorized (each makes pier read its credentials again)",
            m.credentials.unauthorized.clone(),
        );
        m
    }
}

// === impl KubeSource ===

impl KubeSource {
    /// Starts every watch and returns at once, with the change signal: one `()` per coalesced
    /// burst of configuration changes, the first once every kind has listed (that is the
    /// readiness latch). Cancel-safe to `recv()` in a `select!`.
    pub fn start(
        client: &Client,
        scope: &WatchScope,
        metrics: KubeMetrics,
    ) -> (Self, mpsc::Receiver<()>) {
        Self::start_with_server(client, "", scope, metrics)
    }

    /// [`KubeSource::start`], naming the API server (its URL) in logs.
    pub fn start_with_server(
        client: &Client,
        server: &str,
        scope: &WatchScope,
        metrics: KubeMetrics,
    ) -> (Self, mpsc::Receiver<()>) {
        let (config_tx, config_rx) = channel::channel(());
        let (status_tx, status_rx) = channel::channel(());
        let (pending_tx, pending_rx) = channel::channel(WatchKind::ALL.into_iter().collect());
        let ctx = Ctx {
            config: Arc::new(config_tx),
            status: Arc::new(status_tx),
            pending: Arc::new(pending_tx),
            metrics,
            api_server: Arc::new(ApiServerLog::new(server)),
            refused: Arc::default(),
            unserved: Arc::default(),
        };
        let all = || watcher::Config::default();
        let c = || client.clone();
        let mut secrets = all();
        if let Some(s) = &scope.secrets_field_selector {
            secrets = secrets.fields(s);
        }
        let mut config_maps = all();
        if let Some(s) = &scope.config_maps_label_selector {
            config_maps = config_maps.labels(s);
        }
        let mut tasks = Tasks::default();
        let pods =
            kube::runtime::reflector::store::Writer::<DeserializeGuard<PodObject>>::default();
        let opaque_secrets =
            kube::runtime::reflector::store::Writer::<DeserializeGuard<Secret>>::default();
        let (reference_grants, reference_grants_v1beta1) =
            reference_grant::watch(&mut tasks, client.clone(), &ctx);
        use self::WatchKind as W;
        use self::watch::Changes::{Any, Spec};
        let stores = Stores {
            gateway_classes: tasks.watch(
                &ctx,
                W::GatewayClass,
                Spec,
                watcher(Api::all(c()), all()),
            ),
            gateways: tasks.watch(&ctx, W::Gateway, Spec, watcher(Api::all(c()), all())),
            http_routes: tasks.watch(&ctx, W::HttpRoute, Spec, watcher(Api::all(c()), all())),
            grpc_routes: tasks.watch(&ctx, W::GrpcRoute, Spec, watcher(Api::all(c()), all())),
            tls_routes: tasks.watch(&ctx, W::TlsRoute, Spec, watcher(Api::all(c()), all())),
            tcp_routes: tasks.watch(&ctx, W::TcpRoute, Spec, watcher(Api::all(c()), all())),
            udp_routes: tasks.watch(&ctx, W::UdpRoute, Spec, watcher(Api::all(c()), all())),
            listener_sets: tasks.watch(&ctx, W::ListenerSet, Spec, watcher(Api::all(c()), all())),
            reference_grants,
            reference_grants_v1beta1,
            namespaces: tasks.watch(
                &ctx,
                W::Namespace,
                Any,
                watcher(Api::<PartialObjectMeta<Namespace>>::all(c()), all()),
            ),
            services: tasks.watch(&ctx, W::Service, Any, watcher(Api::all(c()), all())),
            endpoint_slices: tasks.watch(
                &ctx,
                W::EndpointSlice,
                Any,
                watcher(Api::all(c()), all()),
            ),
            secrets: tasks.watch(&ctx, W::Secret, Any, watcher(Api::all(c()), secrets)),
            config_maps: tasks.watch(&ctx, W::ConfigMap, Any, watcher(Api::all(c()), config_maps)),
            backend_tls_policies: tasks.watch(
                &ctx,
                W::BackendTlsPolicy,
                Spec,
                watcher(Api::all(c()), all()),
            ),
            cluster_trust_bundles: tasks.watch(
                &ctx,
                W::ClusterTrustBundle,
                Any,
                watcher(Api::all(c()), all()),
            ),
            security_policies: tasks.watch(
                &ctx,
                W::SecurityPolicy,
                Spec,
                watcher(Api::all(c()), all()),
            ),
            backend_traffic_policies: tasks.watch(
                &ctx,
                W::BackendTrafficPolicy,
                Spec,
                watcher(Api::all(c()), all()),
            ),
            client_traffic_policies: tasks.watch(
                &ctx,
                W::ClientTrafficPolicy,
                Spec,
                watcher(Api::all(c()), all()),
            ),
            x_backend_traffic_policies: tasks.watch(
                &ctx,
                W::XBackendTrafficPolicy,
                Spec,
                watcher(Api::all(c()), all()),
            ),
            opaque_secrets: opaque_secrets.as_reader(),
            pods: pods.as_reader(),
            refused: ctx.refused.clone(),
            unserved: ctx.unserved.clone(),
        };
        tasks.spawn(watch_pods_when_asked(
            ctx.clone(),
            stores.gateways.clone(),
            stores.config_maps.clone(),
            pods,
            watcher(Api::all(c()), all()),
        ));
        tasks.spawn(watch_policy_secrets_when_asked(
            ctx.clone(),
            stores.security_policies.clone(),
            scope.secrets_field_selector.is_none(),
            opaque_secrets,
            watcher(Api::all(c()), all().fields(POLICY_SECRETS)),
        ));
        let (tx, changes) = mpsc::channel(1);
        tasks
            .0
            .push(tokio::spawn(coalesce(config_rx, pending_rx.clone(), tx)));
        let source = Self {
            stores,
            status_changes: status_rx,
            pending: pending_rx,
            tasks,
        };
        (source, changes)
    }

    /// The kinds that have not finished their first list yet.
    /// The kinds not listed yet, as they change (empty once all have listed).
    pub fn pending_changes(&self) -> channel::Receiver<BTreeSet<WatchKind>> {
        self.pending.clone()
    }

    pub fn pending(&self) -> BTreeSet<WatchKind> {
        self.pending.borrow().clone()
    }

    /// Stops every watch.
    pub fn stop(self) {
        drop(self.tasks);
    }
}

// === impl Stores ===

/// Empty stores that never fill (no watch behind them): for tests and for kinds not watched.
impl Default for Stores {
    fn default() -> Self {
        fn empty<K: Watched>() -> Store<K> {
            kube::runtime::reflector::store::Writer::<K>::default().as_reader()
        }
        Self {
            gateway_classes: empty(),
            gateways: empty(),
            http_routes: empty(),
            grpc_routes: empty(),
            tls_routes: empty(),
            tcp_routes: empty(),
            udp_routes: empty(),
            listener_sets: empty(),
            reference_grants: empty(),
            reference_grants_v1beta1: empty(),
            namespaces: empty(),
            services: empty(),
            endpoint_slices: empty(),
            secrets: empty(),
            opaque_secrets: empty(),
            config_maps: empty(),
            backend_tls_policies: empty(),
            cluster_trust_bundles: empty(),
            security_policies: empty(),
            backend_traffic_policies: empty(),
            client_traffic_policies: empty(),
            x_backend_traffic_policies: empty(),
            pods: empty(),
            refused: Arc::default(),
            unserved: Arc::default(),
        }
    }
}

impl Stores {
    /// Everything translation reads, copied out of the stores. Blocking-ish (clones every
    /// object): call it from `spawn_blocking` for large clusters.
    pub fn resources(&self) -> Resources {
        let mut reference_grants = namespaced(&self.reference_grants, Clone::clone);
        let mut secrets = namespaced(&self.opaque_secrets, Clone::clone);
        secrets.extend(namespaced(&self.secrets, Clone::clone));
        reference_grants.extend(namespaced(&self.reference_grants_v1beta1, |g| g.0.clone()));
        Resources {
            gateway_classes: cluster(&self.gateway_classes),
            gateways: namespaced(&self.gateways, |g| g.0.clone()),
            http_routes: namespaced(&self.http_routes, |r| r.0.clone()),
            grpc_routes: namespaced(&self.grpc_routes, |r| r.0.clone()),
            tls_routes: namespaced(&self.tls_routes, Clone::clone),
            tcp_routes: namespaced(&self.tcp_routes, Clone::clone),
            udp_routes: namespaced(&self.udp_routes, Clone::clone),
            listener_sets: namespaced(&self.listener_sets, |s| s.0.clone()),
            reference_grants,
            namespaces: self
                .namespaces
                .state()
                .iter()
                .filter_map(|m| {
                    let name = m.metadata.name.clone()?;
                    let ns = Namespace {
                        metadata: m.metadata.clone(),
                        ..Namespace::default()
                    };
                    Some((name, ns))
                })
                .collect(),
            services: namespaced(&self.services, Clone::clone),
            endpoint_slices: namespaced(&self.endpoint_slices, Clone::clone),
            secrets,
            config_maps: namespaced(&self.config_maps, Clone::clone),
            cluster_trust_bundles: cluster(&self.cluster_trust_bundles),
            backend_tls_policies: namespaced(&self.backend_tls_policies, Clone::clone),
            pods: namespaced(&self.pods, PodObject::identity),
            pods_refused: self.refused.contains(WatchKind::Pod),
            trust_bundles_unserved: self.unserved.contains(WatchKind::ClusterTrustBundle),
            security_policies: namespaced(&self.security_policies, Clone::clone),
            backend_traffic_policies: namespaced(&self.backend_traffic_policies, Clone::clone),
            client_traffic_policies: namespaced(&self.client_traffic_policies, Clone::clone),
            x_backend_traffic_policies: namespaced(&self.x_backend_traffic_policies, |p| {
                p.0.clone()
            }),
            // The API server pruned them (kubectl's strict field validation names them).
            unknown_fields: BTreeMap::new(),
            listener_filters: listener_filters(&self.gateways, "Gateway", |g| &g.1)
                .chain(listener_filters(&self.listener_sets, "ListenerSet", |s| {
                    &s.1
                }))
                .collect(),
        }
    }
}

/// The `filters` of the listeners that have them, of the objects in `store`.
fn listener_filters<K: Resource>(
    store: &Store<DeserializeGuard<K>>,
    kind: &'static str,
    filtered: impl Fn(&K) -> &gateway::Filtered,
) -> impl Iterator<
    Item = (
        crate::translate::resources::ListenerRef,
        Result<crate::translate::api::ListenerFilters, String>,
    ),
>
where
    DeserializeGuard<K>: Watched,
{
    let mut out = Vec::new();
    for g in store.state() {
        let Ok(k) = g.0.as_ref() else { continue };
        let meta = k.meta();
        let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) else {
            continue;
        };
        for (listener, filters) in filtered(k) {
            let at = crate::translate::resources::ListenerRef {
                kind,
                object: (ns.clone(), name.clone()),
                listener: listener.clone(),
            };
            out.push((at, filters.clone()));
        }
    }
    out.into_iter()
}

/// The decoded objects of a cluster-scoped store, by name.
fn cluster<K: Resource + Clone>(store: &Store<DeserializeGuard<K>>) -> BTreeMap<String, K>
where
    DeserializeGuard<K>: Watched,
{
    store
        .state()
        .iter()
        .filter_map(|g| {
            let k = g.0.as_ref().ok()?;
            Some((k.meta().name.clone()?, k.clone()))
        })
        .collect()
}

/// The decoded objects of a namespaced store, by (namespace, name), through `f`.
fn namespaced<K: Resource, T>(
    store: &Store<DeserializeGuard<K>>,
    f: impl Fn(&K) -> T,
) -> BTreeMap<ObjectKey, T>
where
    DeserializeGuard<K>: Watched,
{
    store
        .state()
        .iter()
        .filter_map(|g| {
            let k = g.0.as_ref().ok()?;
            let meta = k.meta();
            Some(((meta.namespace.clone()?, meta.name.clone()?), f(k)))
        })
        .collect()
}

// === impl Tasks ===

impl Tasks {
    /// Spawns the reflector task for one kind and returns its store.
    fn watch<K, S>(&mut self, ctx: &Ctx, kind: WatchKind, changes: Changes, stream: S) -> Store<K>
    where
        K: Watched,
        S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    {
        let writer = kube::runtime::reflector::store::Writer::<K>::default();
        let store = writer.as_reader();
        self.0.push(tokio::spawn(watch::reflect(
            kind,
            changes,
            stream,
            writer,
            ctx.clone(),
        )));
        store
    }

    fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.push(tokio::spawn(task));
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The Pod watch, started once some Gateway asks for per-endpoint identity
/// ([`asks_for_endpoint_identity`]) and then kept for the life of the process (turning
/// identity off again is rare; a restart drops the Pods). Until then the Pod store stays
/// empty and pier lists no Pod: a cluster that does not use the feature pays neither the API
/// traffic of Pod status churn nor the store's memory.
///
/// At start-up the Pod kind holds the readiness latch until the Gateways and ConfigMaps have
/// listed and either no Gateway asks (released at once) or the Pods have listed, so the first
/// snapshot never fails endpoints closed for want of a Pod list. A Gateway that asks later
/// starts the watch then; its endpoints fail closed (`NoEndpointIdentity`) until the list
/// lands, about one list's time.
async fn watch_pods_when_asked<S>(
    ctx: Ctx,
    gateways: Store<DeserializeGuard<gateway::GatewayObject>>,
    config_maps: Store<DeserializeGuard<ConfigMap>>,
    writer: kube::runtime::reflector::store::Writer<DeserializeGuard<PodObject>>,
    stream: S,
) where
    S: futures::Stream<Item = watcher::Result<watcher::Event<DeserializeGuard<PodObject>>>>
        + Send
        + 'static,
{
    let asked = || {
        gateways.state().iter().any(|g| {
            g.0.as_ref().is_ok_and(|gw| {
                asks_for_endpoint_identity(gw, |name| {
                    let ns = gw.metadata.namespace.as_deref().unwrap_or_default();
                    let key = kube::runtime::reflector::ObjectRef::new(name).within(ns);
                    let cm = config_maps.get(&key)?;
                    let cm = cm.0.as_ref().ok()?;
                    Some(mesh_key_of(cm).map(|t| std::borrow::Cow::Owned(t.to_string())))
                })
            })
        })
    };
    let when = WhenAsked {
        kind: WatchKind::Pod,
        changes: self::watch::Changes::Immutable,
        after: &[WatchKind::Gateway, WatchKind::ConfigMap],
        not_asked: "no Gateway asks for per-endpoint identity: Pods are not watched",
        asked: "a Gateway asks for per-endpoint identity: watching Pods",
    };
    watch_when_asked(ctx, when, asked, writer, stream).await;
}

/// Watches `Opaque` Secrets once some SecurityPolicy names a Secret, as
/// [`watch_pods_when_asked`] does for Pods: until then the store stays empty and its readiness
/// latch is released once the SecurityPolicies have listed. `every_secret`: the Secret watch
/// already takes every type (`--secret-field-selector ''`), so this one never starts. A policy
/// that comes later starts the watch; it is `Invalid` ("Secret ... not found", failing closed)
/// until the list lands, about one list's time.
async fn watch_policy_secrets_when_asked<S>(
    ctx: Ctx,
    policies: Store<DeserializeGuard<SecurityPolicy>>,
    every_secret: bool,
    writer: kube::runtime::reflector::store::Writer<DeserializeGuard<Secret>>,
    stream: S,
) where
    S: futures::Stream<Item = watcher::Result<watcher::Event<DeserializeGuard<Secret>>>>
        + Send
        + 'static,
{
    let asked = || {
        !every_secret
            && (policies.state().iter()).any(|p| p.0.as_ref().is_ok_and(|p| p.spec.names_secrets()))
    };
    let when = WhenAsked {
        kind: WatchKind::OpaqueSecret,
        changes: self::watch::Changes::Any,
        after: &[WatchKind::SecurityPolicy],
        not_asked: "no SecurityPolicy names a Secret: Opaque Secrets are not watched",
        asked: "a SecurityPolicy names a Secret: watching Secrets of type Opaque",
    };
    watch_when_asked(ctx, when, asked, writer, stream).await;
}

/// A watch started only once the configuration asks for it.
struct WhenAsked {
    kind: WatchKind,
    changes: self::watch::Changes,
    /// The kinds `asked` reads: listed before it is first asked.
    after: &'static [WatchKind],
    /// Logged (DEBUG) when the kind's readiness latch is released unwatched, and (INFO) when
    /// the watch starts.
    not_asked: &'static str,
    asked: &'static str,
}

/// Waits for `when.after` to list, then until `asked()` holds, asking again on every
/// configuration change (releasing `when.kind`'s readiness latch meanwhile); then reflects
/// `stream` into `writer` for the life of the process.
async fn watch_when_asked<K, S>(
    ctx: Ctx,
    when: WhenAsked,
    asked: impl Fn() -> bool,
    writer: kube::runtime::reflector::store::Writer<K>,
    stream: S,
) where
    K: self::watch::Watched,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    let mut config = ctx.config.subscribe();
    let mut pending = ctx.pending.subscribe();
    let listed = pending
        .wait_for(|p| when.after.iter().all(|k| !p.contains(k)))
        .await
        .is_ok();
    if !listed {
        return;
    }
    let mut released = false;
    loop {
        config.mark_unchanged();
        if asked() {
            break;
        }
        if !released {
            tracing::debug!("{}", when.not_asked);
            self::watch::release(when.kind, &ctx);
            released = true;
        }
        if config.changed().await.is_err() {
            return;
        }
    }
    tracing::info!("{}", when.asked);
    self::watch::reflect(when.kind, when.changes, stream, writer, ctx).await;
}

/// Turns configuration changes into at most one `()` per burst: after [`QUIET`] without
/// changes, or [`MAX_DELAY`] after the first. Sends nothing before every kind has listed; then
/// sends one `()` at once for the first publish. The dirty flag is cleared *before* that first
/// `()`, so a change that lands while the first snapshot is being built is not lost.
async fn coalesce(
    mut config: channel::Receiver<()>,
    mut pending: channel::Receiver<BTreeSet<WatchKind>>,
    tx: mpsc::Sender<()>,
) {
    loop {
        let all_listed = async { pending.wait_for(BTreeSet::is_empty).await.is_ok() };
        match tokio::time::timeout(WAITING_LOG_EVERY, all_listed).await {
            Ok(true) => break,
            Ok(false) => return,
            Err(_) => {
                let waiting: Vec<String> = pending.borrow().iter().map(|k| k.to_string()).collect();
                tracing::info!(
                    waiting_for = %waiting.join(", "),
                    "not ready: waiting for the first list of every watched kind"
                );
            }
        }
    }
    tracing::info!("every watched kind has been listed");
    config.mark_unchanged();
    if tx.send(()).await.is_err() {
        return;
    }
    while config.changed().await.is_ok() {
        let deadline = tokio::time::Instant::now() + MAX_DELAY;
        loop {
            tokio::select! {
                r = config.changed() => if r.is_err() { break },
                () = tokio::time::sleep(QUIET) => break,
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        // A full channel already holds a pending rebuild: nothing is lost.
        if let Err(mpsc::error::TrySendError::Closed(())) = tx.try_send(()) {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
