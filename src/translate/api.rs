//! The facade for generated API types: the only module that names `gateway_api` or
//! `k8s_openapi` types directly. The rest of pier imports them from here, so an upstream rename
//! (kopium-generated names change between releases) is fixed in one place.

pub use gateway_api::Duration as ApiDuration;
pub use gateway_api::backendtlspolicies::BackendTlsPolicy;
pub use gateway_api::constants::{
    GatewayClassConditionReason, GatewayClassConditionType, GatewayConditionReason,
    GatewayConditionType, ListenerConditionReason, ListenerConditionType,
};
pub use gateway_api::gatewayclasses::{GatewayClass, GatewayClassSpec};
pub use gateway_api::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutes, GatewayListenersAllowedRoutesKinds,
    GatewayListenersAllowedRoutesNamespaces, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector,
    GatewayListenersAllowedRoutesNamespacesSelectorMatchExpressions, GatewayListenersTls,
    GatewayListenersTlsCertificateRefs, GatewayListenersTlsMode, GatewaySpec,
};
pub use gateway_api::httproutes::{
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
    HttpRouteRulesMatchesQueryParamsType, HttpRouteRulesTimeouts, HttpRouteSpec,
};
pub use gateway_api::referencegrants::{
    ReferenceGrant, ReferenceGrantFrom, ReferenceGrantSpec, ReferenceGrantTo,
};
pub use k8s_openapi::ByteString;
pub use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Secret, Service, ServicePort, ServiceSpec,
};
pub use k8s_openapi::api::discovery::v1::{
    Endpoint as SliceEndpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// The Gateway API group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// The core API group, spelled as the API spells it.
pub const CORE_GROUP: &str = "";

/// An object's creation time, ordered. Routes without one sort first (treated as oldest).
pub type Timestamp = k8s_openapi::jiff::Timestamp;

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
    serde_json::from_value(serde_json::to_value(f)?)
}
