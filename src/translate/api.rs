//! The facade for generated API types: the only module that names `gateway_api` or
//! `k8s_openapi` types directly. The rest of pier imports them from here, so an upstream rename
//! (kopium-generated names change between releases) is fixed in one place.
//!
//! It also holds pier's own serde types for what the generated ones cannot carry: the Gateway
//! with its `spec.mesh` stanza (GEP-3951 / GEP-3792), which the generated `GatewaySpec` would
//! drop as an unknown field.

mod client_traffic_policy;
mod listener_filters;
mod security_policy;
mod tcp_route;
mod traffic_policy;
mod udp_route;

pub use client_traffic_policy::*;
pub use listener_filters::{
    ExtensionRef, ListenerFilter, ListenerFilters, MAX_LISTENER_FILTERS, Refusal,
};
pub use security_policy::*;
pub use tcp_route::{TcpRoute, TcpRouteSpec};
pub use traffic_policy::*;
pub use udp_route::{UdpRoute, UdpRouteSpec};

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

pub use gateway_api::Duration as ApiDuration;
pub use gateway_api::backendtlspolicies::{
    BackendTlsPolicy, BackendTlsPolicySpec, BackendTlsPolicyTargetRefs, BackendTlsPolicyValidation,
    BackendTlsPolicyValidationCaCertificateRefs, BackendTlsPolicyValidationSubjectAltNames,
    BackendTlsPolicyValidationSubjectAltNamesType,
};
pub use gateway_api::constants::{
    GatewayClassConditionReason, GatewayClassConditionType, GatewayConditionReason,
    GatewayConditionType, ListenerConditionType,
};
pub use gateway_api::experimental::grpcroutes::{
    GrpcRoute, GrpcRouteRules, GrpcRouteRulesMatches, GrpcRouteRulesMatchesHeaders,
    GrpcRouteRulesMatchesHeadersType, GrpcRouteRulesMatchesMethod, GrpcRouteRulesMatchesMethodType,
    GrpcRouteSpec,
};
/// The CORS filter (GEP-1767, standard since v1.5); the backendRef-level one converts to it.
pub use gateway_api::experimental::httproutes::HttpRouteRulesFiltersCors;
pub use gateway_api::experimental::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesBackendRefs,
    HttpRouteRulesBackendRefsFilters, HttpRouteRulesFilters,
    HttpRouteRulesFiltersRequestHeaderModifier, HttpRouteRulesFiltersRequestMirror,
    HttpRouteRulesFiltersRequestMirrorBackendRef, HttpRouteRulesFiltersRequestMirrorFraction,
    HttpRouteRulesFiltersRequestRedirect, HttpRouteRulesFiltersRequestRedirectPath,
    HttpRouteRulesFiltersRequestRedirectPathType, HttpRouteRulesFiltersRequestRedirectScheme,
    HttpRouteRulesFiltersResponseHeaderModifier, HttpRouteRulesFiltersType,
    HttpRouteRulesFiltersUrlRewrite, HttpRouteRulesFiltersUrlRewritePath,
    HttpRouteRulesFiltersUrlRewritePathType, HttpRouteRulesMatches, HttpRouteRulesMatchesHeaders,
    HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesMethod, HttpRouteRulesMatchesPath,
    HttpRouteRulesMatchesPathType, HttpRouteRulesMatchesQueryParams,
    HttpRouteRulesMatchesQueryParamsType, HttpRouteRulesRetry, HttpRouteRulesSessionPersistence,
    HttpRouteRulesSessionPersistenceCookieConfigLifetimeType, HttpRouteRulesSessionPersistenceType,
    HttpRouteRulesTimeouts, HttpRouteSpec, HttpRouteUseDefaultGateways as UseDefaultGateways,
};
/// GEP-1494's ExternalAuth filter (experimental).
pub use gateway_api::experimental::httproutes::{
    HttpRouteRulesFiltersExternalAuth, HttpRouteRulesFiltersExternalAuthBackendRef,
    HttpRouteRulesFiltersExternalAuthForwardBody, HttpRouteRulesFiltersExternalAuthGrpc,
    HttpRouteRulesFiltersExternalAuthHttp, HttpRouteRulesFiltersExternalAuthProtocol,
};
/// TCPRoute's field types (the v1 root is pier's own, [`TcpRoute`]).
pub use gateway_api::experimental::tcproutes::{TcpRouteRules, TcpRouteStatus};
/// TLSRoute (standard since v1.5; the experimental type adds `useDefaultGateways`).
pub use gateway_api::experimental::tlsroutes::{TlsRoute, TlsRouteRules, TlsRouteSpec};
/// UDPRoute's field types (the v1 root is pier's own, [`UdpRoute`]).
pub use gateway_api::experimental::udproutes::{UdpRouteRules, UdpRouteStatus};
pub use gateway_api::experimental::xbackendtrafficpolicies::{
    XBackendTrafficPolicy, XBackendTrafficPolicyRetryConstraint,
    XBackendTrafficPolicyRetryConstraintBudget, XBackendTrafficPolicyRetryConstraintMinRetryRate,
    XBackendTrafficPolicySessionPersistence, XBackendTrafficPolicySpec,
    XBackendTrafficPolicyTargetRefs,
};
pub use gateway_api::gatewayclasses::{GatewayClass, GatewayClassSpec};
/// The upstream Gateway type, for its group/version/kind (the cluster source watches Gateways
/// as pier's own [`Gateway`], which keeps `spec.mesh`).
pub use gateway_api::gateways::Gateway as UpstreamGateway;
pub use gateway_api::gateways::{
    GatewayAddresses, GatewayInfrastructure, GatewayInfrastructureParametersRef, GatewayListeners,
    GatewayListenersAllowedRoutes, GatewayListenersAllowedRoutesKinds,
    GatewayListenersAllowedRoutesNamespaces, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector,
    GatewayListenersAllowedRoutesNamespacesSelectorMatchExpressions, GatewayListenersTls,
    GatewayListenersTlsCertificateRefs, GatewayListenersTlsMode, GatewaySpec,
    GatewayStatus as GatewayApiStatus, GatewayTls, GatewayTlsBackend,
    GatewayTlsBackendClientCertificateRef,
};
pub use gateway_api::gateways::{GatewayAllowedListeners, GatewayAllowedListenersNamespacesFrom};
/// Frontend client certificate validation (GEP-91, `spec.tls.frontend`).
pub use gateway_api::gateways::{
    GatewayTlsFrontend, GatewayTlsFrontendDefault, GatewayTlsFrontendDefaultValidation,
    GatewayTlsFrontendDefaultValidationCaCertificateRefs, GatewayTlsFrontendDefaultValidationMode,
    GatewayTlsFrontendPerPort, GatewayTlsFrontendPerPortTls,
    GatewayTlsFrontendPerPortTlsValidation,
    GatewayTlsFrontendPerPortTlsValidationCaCertificateRefs,
    GatewayTlsFrontendPerPortTlsValidationMode,
};
pub use gateway_api::listenersets::{ListenerSet, ListenerSetSpec};
pub use gateway_api::referencegrants::{
    ReferenceGrant, ReferenceGrantFrom, ReferenceGrantSpec, ReferenceGrantTo,
};
pub use k8s_openapi::ByteString;
pub use k8s_openapi::api::certificates::v1beta1::{ClusterTrustBundle, ClusterTrustBundleSpec};
pub use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Secret, Service, ServicePort, ServiceSpec,
};
pub use k8s_openapi::api::discovery::v1::{
    Endpoint as SliceEndpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
};

/// The Gateway API group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// Gateway API's experimental-only kinds (`XBackendTrafficPolicy`, `XMesh`).
pub const X_GATEWAY_GROUP: &str = "gateway.networking.x-k8s.io";
/// The core API group, spelled as the API spells it.
pub const CORE_GROUP: &str = "";

/// The group of ClusterTrustBundle.
pub const CERTIFICATES_GROUP: &str = "certificates.k8s.io";

/// A Gateway as pier reads it: the generated spec plus `spec.mesh`.
///
/// The cluster's Gateway CRD must carry a `mesh` schema for `spec.mesh` to survive API-server
/// pruning; the same stanza can instead come through `spec.infrastructure.parametersRef`
/// (a ConfigMap with a `mesh` key), which needs no CRD change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Gateway {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: PierGatewaySpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<GatewayApiStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PierGatewaySpec {
    #[serde(flatten)]
    pub base: GatewaySpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh: Option<MeshSpec>,
    /// `spec.addresses[].routability` (GEP-5093, Gateway API v1.7 experimental), by index,
    /// which the generated type lacks: filled in by the sources (`""` where unset).
    #[serde(skip)]
    pub address_routability: Vec<String>,
}

/// The Gateway's `mesh` stanza, in both proposed shapes:
///
/// - GEP-3951: `trustBundle: {name, namespace?, bundleKey?}` (a ConfigMap) and `labelSelector`;
/// - GEP-3792: `trustBundle` as one reference or a list of `{group?, kind, name, namespace?}`
///   (ConfigMap, Secret or ClusterTrustBundle) and `selector`.
///
/// No selector at all means every Route attached to the Gateway is meshed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MeshSpec {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "one_or_many"
    )]
    pub trust_bundle: Option<Vec<TrustBundleRef>>,
    /// GEP-3951's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// GEP-3792's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// pier's extension (in neither GEP): the workload identity each meshed endpoint must
    /// present, derived from its Pod's ServiceAccount. Absent: the chain alone is checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<MeshIdentitySpec>,
}

/// `mesh.identity`: how a ServiceAccount names its workload identity in this mesh.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MeshIdentitySpec {
    /// `SPIFFE` (`spiffe://<trustDomain>/ns/<ns>/sa/<sa>`: Istio, SPIRE), `Linkerd`
    /// (`<sa>.<ns>.serviceaccount.identity.linkerd.<trustDomain>`, also sent as SNI), or
    /// `None` (chain only).
    pub scheme: String,
    /// The mesh's trust domain; defaults to pier's `--cluster-domain` (`cluster.local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_domain: Option<String>,
}

/// A reference to CA certificates. `kind` defaults to ConfigMap (GEP-3951), `namespace` to the
/// Gateway's; `bundleKey` picks the key (ConfigMap default `ca-bundle.crt`, then `ca.crt`;
/// Secret default `ca.crt`). ClusterTrustBundles are cluster-scoped: `namespace` is ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustBundleRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_key: Option<String>,
}

/// `trustBundle` as one reference (a map) or a list of them.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<TrustBundleRef>>, D::Error> {
    struct OneOrMany;
    impl<'de> Visitor<'de> for OneOrMany {
        type Value = Option<Vec<TrustBundleRef>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a trust bundle reference or a list of them")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(OneOrMany)
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            TrustBundleRef::deserialize(de::value::MapAccessDeserializer::new(map))
                .map(|r| Some(vec![r]))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            Vec::<TrustBundleRef>::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Some)
        }
    }
    d.deserialize_any(OneOrMany)
}

/// An object's creation time, ordered. Routes without one sort first (treated as oldest).
pub type Timestamp = k8s_openapi::jiff::Timestamp;

/// What translation keeps of a Pod: the ServiceAccount it runs as (per-endpoint mesh
/// identity). Sources keep nothing else of Pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodIdentity {
    pub service_account: String,
}

/// The part of a Pod's `spec` that names its ServiceAccount: what both sources (manifests and
/// the cluster's Pod watch) decode, skipping the rest of the spec unread.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecIdentity {
    #[serde(default)]
    pub service_account_name: Option<String>,
    /// Deprecated alias of `serviceAccountName`.
    #[serde(default)]
    pub service_account: Option<String>,
}

impl PodSpecIdentity {
    /// `serviceAccountName`, else `serviceAccount`, else `default` (what the API server's
    /// ServiceAccount admission sets when a Pod names none).
    pub fn identity(&self) -> PodIdentity {
        let sa = self
            .service_account_name
            .as_deref()
            .or(self.service_account.as_deref())
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        PodIdentity {
            service_account: sa.to_string(),
        }
    }
}

/// A GEP-2257 duration (`1h30m`, `500ms`), to the millisecond; `None` when it does not parse.
pub fn duration(s: &str) -> Option<std::time::Duration> {
    let d: ApiDuration = s.parse().ok()?;
    let ms = u64::try_from(d.as_millis()).ok()?;
    Some(std::time::Duration::from_millis(ms))
}

pub fn creation_time(meta: &ObjectMeta) -> Option<Timestamp> {
    meta.creation_timestamp.as_ref().map(|t| t.0)
}

/// Rule-level and backendRef-level filters are separate generated types with the same shape.
/// Translation is written once, against the rule-level type; a backendRef filter goes through
/// this serde round trip (both serialize to the same JSON). The unit tests pin that every
/// filter kind survives it.
pub fn backend_filter_as_rule_filter(
    f: &HttpRouteRulesBackendRefsFilters,
) -> Result<HttpRouteRulesFilters, serde_json::Error> {
    same_shape(f)
}

/// A generated type converted into another with the same JSON shape (GRPCRoute parentRefs,
/// filters and backendRefs are HTTPRoute's under other names).
pub fn same_shape<A: Serialize, B: serde::de::DeserializeOwned>(
    a: &A,
) -> Result<B, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(a)?)
}
