//! Every object translation reads, from any source (a manifest directory or a cluster), keyed
//! for deterministic iteration. Sources replace whole maps; translation never sees deltas.

use std::collections::BTreeMap;

use super::api::{
    BackendTlsPolicy, ClusterTrustBundle, ConfigMap, EndpointSlice, Gateway, GatewayClass,
    GrpcRoute, HttpRoute, ListenerSet, Namespace, PodIdentity, ReferenceGrant, Secret,
    SecurityPolicy, Service, TcpRoute, TlsRoute, UdpRoute,
};
use super::api::{BackendTrafficPolicy, ClientTrafficPolicy};
use super::field_path::UnknownField;

/// `(namespace, name)`.
pub type ObjectKey = (String, String);

#[derive(Clone, Debug, Default)]
pub struct Resources {
    /// Cluster-scoped: by name.
    pub gateway_classes: BTreeMap<String, GatewayClass>,
    pub gateways: BTreeMap<ObjectKey, Gateway>,
    pub listener_sets: BTreeMap<ObjectKey, ListenerSet>,
    pub http_routes: BTreeMap<ObjectKey, HttpRoute>,
    pub grpc_routes: BTreeMap<ObjectKey, GrpcRoute>,
    pub tls_routes: BTreeMap<ObjectKey, TlsRoute>,
    pub tcp_routes: BTreeMap<ObjectKey, TcpRoute>,
    pub udp_routes: BTreeMap<ObjectKey, UdpRoute>,
    pub reference_grants: BTreeMap<ObjectKey, ReferenceGrant>,
    /// Cluster-scoped: by name.
    pub namespaces: BTreeMap<String, Namespace>,
    pub services: BTreeMap<ObjectKey, Service>,
    pub endpoint_slices: BTreeMap<ObjectKey, EndpointSlice>,
    /// Pods, as far as per-endpoint mesh identity needs them (their ServiceAccount).
    pub pods: BTreeMap<ObjectKey, PodIdentity>,
    /// The source may not read Pods (the API server refuses pier's `list pods`): an unknown
    /// Pod is then reported as unreadable, not as missing.
    pub pods_refused: bool,
    /// The API server does not serve ClusterTrustBundles (its beta API is off by default up to
    /// Kubernetes 1.36): a reference to one is of an unsupported kind (GEP-5075), and
    /// `ClusterTrustBundle` is not in the GatewayClass's `supportedFeatures`. Cluster mode only.
    pub trust_bundles_unserved: bool,
    pub secrets: BTreeMap<ObjectKey, Secret>,
    pub config_maps: BTreeMap<ObjectKey, ConfigMap>,
    /// Cluster-scoped: by name (mesh trust bundles).
    pub cluster_trust_bundles: BTreeMap<String, ClusterTrustBundle>,
    pub backend_tls_policies: BTreeMap<ObjectKey, BackendTlsPolicy>,
    /// pier's own `SecurityPolicy` (`pier.dev/v1alpha1`).
    pub security_policies: BTreeMap<ObjectKey, SecurityPolicy>,
    /// pier's own `BackendTrafficPolicy` (`pier.dev/v1alpha1`).
    pub backend_traffic_policies: BTreeMap<ObjectKey, BackendTrafficPolicy>,
    /// Gateway API's `XBackendTrafficPolicy` (`gateway.networking.x-k8s.io/v1alpha1`, v1.7
    /// experimental): retry budgets per Service.
    pub x_backend_traffic_policies: BTreeMap<ObjectKey, super::api::XBackendTrafficPolicy>,
    /// pier's own `ClientTrafficPolicy` (`pier.dev/v1alpha1`).
    pub client_traffic_policies: BTreeMap<ObjectKey, ClientTrafficPolicy>,
    /// Fields objects have that their kinds do not, by `(kind, (namespace, name))` (an empty
    /// namespace for cluster-scoped kinds). Only manifests have them: the API server prunes
    /// unknown fields before pier sees an object.
    pub unknown_fields: BTreeMap<(String, ObjectKey), Vec<UnknownField>>,
    /// The `filters` of listeners that have them (GEP-5224, GatewayListenerFilters, Gateway
    /// API v1.7 experimental), which pier's generated types do not read: read by both sources
    /// beside the typed decoding, which drops the field. `Err`: they did not decode (the
    /// listener is not served: fail closed).
    pub listener_filters: BTreeMap<ListenerRef, Result<super::api::ListenerFilters, String>>,
}

/// One listener of a Gateway or ListenerSet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListenerRef {
    /// `Gateway` or `ListenerSet`.
    pub kind: &'static str,
    pub object: ObjectKey,
    pub listener: String,
}

/// The `filters` of `spec.listeners[]` that have them, by listener name, in a Gateway or
/// ListenerSet as JSON.
pub fn listeners_with_filters(
    object: &serde_json::Value,
) -> Vec<(String, Result<super::api::ListenerFilters, String>)> {
    let listeners = object["spec"]["listeners"].as_array();
    listeners
        .into_iter()
        .flatten()
        .filter(|l| !l["filters"].is_null())
        .filter_map(|l| {
            let name = l["name"].as_str()?.to_string();
            let filters = serde_json::from_value(l["filters"].clone()).map_err(|e| e.to_string());
            Some((name, filters))
        })
        .collect()
}
