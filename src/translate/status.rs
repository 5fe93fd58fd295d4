//! Typed status: what translation wants the cluster to say about each object it owns.
//!
//! Condition types and reasons are enums (upstream's constants where they exist, ours for
//! HTTPRoute and `SupportedVersion`); they become strings only when serialized. There is no
//! `lastTransitionTime`: translation has no clock, so the status writer adds it (and compares
//! without it). Every collection is sorted, so the same input gives byte-identical output.
//!
//! ```text
//! translate() ─> Statuses ─┬─> objects() ─> `pier check` (YAML), admin /status (JSON)
//!                          └─> status writer (cluster mode)
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::api::{
    GATEWAY_GROUP, GatewayClassConditionReason, GatewayClassConditionType, GatewayConditionReason,
    GatewayConditionType, ListenerConditionType,
};
use super::field_path::UnknownField;
use crate::model::ObjectRef;

/// The apiVersion status objects are written with.
pub const GATEWAY_API_VERSION: &str = "gateway.networking.k8s.io/v1";
/// The apiVersion of pier's own policies.
pub const PIER_POLICY_API_VERSION: &str = "pier.dev/v1alpha1";
/// XBackendTrafficPolicy's (Gateway API v1.7 experimental).
pub const X_GATEWAY_API_VERSION: &str = "gateway.networking.x-k8s.io/v1alpha1";

/// One condition. `T` and `R` are the condition type and reason enums of the object kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition<T, R> {
    pub type_: T,
    pub status: bool,
    pub reason: R,
    pub message: String,
    /// The object's `metadata.generation` this condition was computed from.
    pub observed_generation: Option<i64>,
}

pub type ClassCondition = Condition<ClassConditionType, ClassConditionReason>;
pub type GatewayCondition = Condition<GatewayCondType, GatewayCondReason>;
pub type ListenerCondition = Condition<ListenerConditionType, ListenerReason>;
pub type RouteCondition = Condition<RouteConditionType, RouteConditionReason>;
pub type PolicyCondition = Condition<PolicyConditionType, PolicyConditionReason>;
pub type SetCondition = Condition<SetConditionType, SetConditionReason>;

/// Listener condition reasons: upstream's `ListenerConditionReason` (the generated enum is
/// neither `Copy` nor complete), with GEP-91's client certificate validation reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerReason {
    HostnameConflict,
    ProtocolConflict,
    NoConflicts,
    Accepted,
    PortUnavailable,
    UnsupportedProtocol,
    ResolvedRefs,
    InvalidCertificateRef,
    InvalidRouteKinds,
    RefNotPermitted,
    Programmed,
    Invalid,
    Pending,
    /// `Accepted=False`: every frontend `caCertificateRef` is invalid.
    NoValidCACertificate,
    /// `ResolvedRefs=False`: a frontend `caCertificateRef` does not resolve or holds no CA.
    InvalidCACertificateRef,
    /// `ResolvedRefs=False`: a frontend `caCertificateRef` of a kind pier does not read.
    InvalidCACertificateKind,
    /// `Accepted=False`: the listener has a value pier does not implement (an `ExtensionRef`
    /// listener filter).
    UnsupportedValue,
    /// `Accepted=False`: a listener filter is invalid (GEP-5224).
    InvalidListenerFilter,
    /// `ResolvedRefs=False`: a listener filter's reference does not resolve (GEP-5224).
    InvalidListenerFilterRef,
}

/// ListenerSet condition types (GEP-1713).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetConditionType {
    Accepted,
    Programmed,
    /// [`UNKNOWN_FIELDS_CONDITION`].
    UnknownFields,
}

/// ListenerSet condition reasons (`ListenerSetConditionReason` in the Go API).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetConditionReason {
    Accepted,
    Programmed,
    /// The parent Gateway's `allowedListeners` does not take it.
    NotAllowed,
    ParentNotAccepted,
    ListenersNotValid,
    Invalid,
    /// [`UNKNOWN_FIELDS_CONDITION`] True.
    UnknownFields,
}

/// BackendTLSPolicy condition types (GEP-713 policy status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyConditionType {
    Accepted,
    ResolvedRefs,
    /// A narrower policy of the same kind replaces this one for some target (Envoy
    /// Gateway's condition; True, reason `Overridden`).
    Overridden,
    /// [`UNKNOWN_FIELDS_CONDITION`].
    UnknownFields,
    /// [`REMOTE_JWKS_CONDITION`] (SecurityPolicy with `remoteJWKS` providers).
    RemoteJwks,
}

/// BackendTLSPolicy condition reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyConditionReason {
    Accepted,
    /// The policy's validation cannot be used (hostname, subjectAltNames, CA settings).
    Invalid,
    /// Every caCertificateRef is invalid.
    NoValidCACertificate,
    ResolvedRefs,
    InvalidCACertificateRef,
    InvalidKind,
    /// An older policy targets the same Service (and section): this one is not applied.
    Conflicted,
    /// No target of the policy exists.
    TargetNotFound,
    /// `Overridden` True.
    Overridden,
    /// [`UNKNOWN_FIELDS_CONDITION`] True.
    UnknownFields,
    /// [`REMOTE_JWKS_CONDITION`] True: every set fetched.
    Fetched,
    /// [`REMOTE_JWKS_CONDITION`] False: a fetch failed.
    FetchFailed,
    /// [`REMOTE_JWKS_CONDITION`] False: a set not fetched yet.
    Pending,
}

/// GatewayClass condition types: upstream's, plus `SupportedVersion`, which the implementers
/// guide requires from v1.0 on but the generated constants lack.
#[derive(Debug, PartialEq, Eq)]
pub enum ClassConditionType {
    Class(GatewayClassConditionType),
    SupportedVersion,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ClassConditionReason {
    Class(GatewayClassConditionReason),
    SupportedVersion,
}

/// The condition type pier adds to Gateways and Route parents that use backend TLS (mesh mTLS
/// or a BackendTLSPolicy). Domain-prefixed, as implementation-specific types must be.
pub const BACKEND_TLS_CONDITION: &str = "pier.dev/BackendTLS";

/// The condition type pier adds to Gateways while `pier run --probe-interval` probes a sample
/// of their endpoint addresses from pier's host (the pod network checks of `pier check`).
pub const POD_NETWORK_CONDITION: &str = "pier.dev/PodNetworkReachable";

/// The condition type pier adds, in manifest mode, to objects with fields their kind does not
/// have (True, reason `UnknownFields`, the fields in the message). The API server prunes such
/// fields, so objects from a cluster never carry it.
pub const UNKNOWN_FIELDS_CONDITION: &str = "pier.dev/UnknownFields";

/// The condition type pier adds to the ancestors of a SecurityPolicy with `remoteJWKS`
/// providers: whether each key set is fetched (True, `Fetched`), or why not (False,
/// `FetchFailed` or `Pending`; the message says whether the last good keys stay in use).
pub const REMOTE_JWKS_CONDITION: &str = "pier.dev/RemoteJWKS";

/// Gateway condition types: upstream's, plus `ResolvedRefs` (GEP-3155's
/// `clientCertificateRef`, and the mesh trust bundle references) and `pier.dev/BackendTLS`.
#[derive(Debug, PartialEq, Eq)]
pub enum GatewayCondType {
    Gateway(GatewayConditionType),
    ResolvedRefs,
    BackendTls,
    /// GEP-91: some frontend validation is `AllowInsecureFallback` (the generated enum lacks
    /// it).
    InsecureFrontendValidationMode,
    /// [`POD_NETWORK_CONDITION`].
    PodNetwork,
    /// [`UNKNOWN_FIELDS_CONDITION`].
    UnknownFields,
    /// GEP-5093 (v1.7 experimental; the generated enum lacks it).
    AddressesAssigned,
}

/// Gateway condition reasons: upstream's plus the GEP-3155 ones and pier's backend TLS ones.
#[derive(Debug, PartialEq, Eq)]
pub enum GatewayCondReason {
    Gateway(GatewayConditionReason),
    ResolvedRefs,
    /// GEP-3155: the clientCertificateRef cannot be resolved or used.
    InvalidClientCertificateRef,
    /// A cross-namespace reference without a ReferenceGrant.
    RefNotPermitted,
    /// A mesh `trustBundle` reference cannot be resolved or holds no usable certificate.
    InvalidTrustBundleRef,
    /// `pier.dev/BackendTLS`: everything backend TLS needs is there.
    Ready,
    NoTrustBundle,
    NoClientCertificate,
    InvalidMeshConfig,
    /// `InsecureFrontendValidationMode=True`.
    ConfigurationChanged,
    /// [`POD_NETWORK_CONDITION`] True: every sampled endpoint address answered.
    Reachable,
    /// [`POD_NETWORK_CONDITION`] False: some did not (TCP, or the TLS handshake).
    Unreachable,
    /// [`UNKNOWN_FIELDS_CONDITION`] True.
    UnknownFields,
    /// GEP-5093 `AddressesAssigned`: every requested address is assigned.
    AddressesAssigned,
    /// GEP-5093: some requested addresses are not assigned.
    PartiallyAssigned,
    /// GEP-5093: none is.
    NotAssigned,
}

/// Route condition types (`RouteConditionType` in the Go API), plus `pier.dev/BackendTLS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteConditionType {
    Accepted,
    ResolvedRefs,
    /// Some rules are invalid and were dropped (pier answers them with 500).
    PartiallyInvalid,
    /// Whether the backends this parent's rules reach can be reached over the TLS they need.
    BackendTls,
    /// [`UNKNOWN_FIELDS_CONDITION`].
    UnknownFields,
}

/// Route condition reasons (`RouteConditionReason` in the Go API).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteConditionReason {
    Accepted,
    NotAllowedByListeners,
    NoMatchingListenerHostname,
    NoMatchingParent,
    UnsupportedValue,
    ResolvedRefs,
    RefNotPermitted,
    InvalidKind,
    BackendNotFound,
    /// `pier.dev/BackendTLS`: every TLS backend has a usable configuration.
    Ready,
    NoTrustBundle,
    NoClientCertificate,
    InvalidPolicy,
    InvalidMeshConfig,
    /// Per-endpoint identity is on and some endpoints have no resolvable identity (no Pod,
    /// unknown Pod): they get no traffic.
    NoEndpointIdentity,
    /// [`UNKNOWN_FIELDS_CONDITION`] True.
    UnknownFields,
}

#[derive(Debug, Default, PartialEq)]
pub struct Statuses {
    /// By name (cluster-scoped). Only classes whose controllerName is pier's.
    pub gateway_classes: BTreeMap<String, GatewayClassStatus>,
    /// Only Gateways in scope (pier's accepted class, and `--gateway` if set).
    pub gateways: BTreeMap<ObjectRef, GatewayStatus>,
    /// Only Routes with at least one parentRef to an in-scope Gateway.
    pub http_routes: BTreeMap<ObjectRef, HttpRouteStatus>,
    /// The same for GRPCRoutes (the same status shape).
    pub grpc_routes: BTreeMap<ObjectRef, HttpRouteStatus>,
    /// The same for TLSRoutes (the same status shape).
    pub tls_routes: BTreeMap<ObjectRef, HttpRouteStatus>,
    /// The same for TCPRoutes (the same status shape).
    pub tcp_routes: BTreeMap<ObjectRef, HttpRouteStatus>,
    /// The same for UDPRoutes (the same status shape).
    pub udp_routes: BTreeMap<ObjectRef, HttpRouteStatus>,
    /// ListenerSets whose parent is an in-scope Gateway, attached or not.
    pub listener_sets: BTreeMap<ObjectRef, ListenerSetStatus>,
    /// Only policies applied to a backend of an in-scope Gateway's routes.
    pub backend_tls_policies: BTreeMap<ObjectRef, BackendTlsPolicyStatus>,
    /// SecurityPolicies (`pier.dev/v1alpha1`) with a target under an in-scope Gateway: one
    /// ancestor entry per Gateway (the same shape as BackendTLSPolicy's).
    pub security_policies: BTreeMap<ObjectRef, BackendTlsPolicyStatus>,
    /// BackendTrafficPolicies (`pier.dev/v1alpha1`), the same way.
    pub backend_traffic_policies: BTreeMap<ObjectRef, BackendTlsPolicyStatus>,
    /// ClientTrafficPolicies (`pier.dev/v1alpha1`), the same way.
    pub client_traffic_policies: BTreeMap<ObjectRef, BackendTlsPolicyStatus>,
    /// Gateway API's XBackendTrafficPolicy (v1.7 experimental).
    pub x_backend_traffic_policies: BTreeMap<ObjectRef, BackendTlsPolicyStatus>,
}

#[derive(Debug, Default, PartialEq)]
pub struct BackendTlsPolicyStatus {
    pub generation: Option<i64>,
    /// One per Gateway under which the policy applied, sorted.
    pub ancestors: Vec<PolicyAncestorStatus>,
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyAncestorStatus {
    pub ancestor_ref: ParentRef,
    pub controller_name: String,
    pub conditions: Vec<PolicyCondition>,
}

#[derive(Debug, Default, PartialEq)]
pub struct GatewayClassStatus {
    pub generation: Option<i64>,
    pub conditions: Vec<ClassCondition>,
}

#[derive(Debug, Default, PartialEq)]
pub struct GatewayStatus {
    pub generation: Option<i64>,
    /// `status.addresses` (empty: pier writes none).
    pub addresses: Vec<super::addresses::StatusAddress>,
    pub conditions: Vec<GatewayCondition>,
    /// In `spec.listeners` order.
    pub listeners: Vec<ListenerStatus>,
    /// ListenerSets attached (`status.attachedListenerSets`).
    pub attached_listener_sets: u32,
}

#[derive(Debug, Default, PartialEq)]
pub struct ListenerSetStatus {
    pub generation: Option<i64>,
    pub conditions: Vec<SetCondition>,
    /// In `spec.listeners` order; empty when the set is not attached.
    pub listeners: Vec<ListenerStatus>,
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    pub name: String,
    pub attached_routes: u32,
    pub supported_kinds: Vec<RouteGroupKind>,
    pub conditions: Vec<ListenerCondition>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RouteGroupKind {
    pub group: String,
    pub kind: String,
}

#[derive(Debug, Default, PartialEq)]
pub struct HttpRouteStatus {
    pub generation: Option<i64>,
    /// One entry per distinct in-scope parentRef, in `spec.parentRefs` order.
    pub parents: Vec<RouteParentStatus>,
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    pub parent_ref: ParentRef,
    pub controller_name: String,
    pub conditions: Vec<RouteCondition>,
}

/// A parentRef echoed back exactly as the Route spelled it (absent fields stay absent).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// A Gateway API object carrying only its status, as `pier check` prints it and the admin
/// `/status` endpoint serves it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusObject<'a> {
    pub api_version: &'static str,
    pub kind: StatusKind,
    pub metadata: StatusMeta,
    pub status: ObjectStatus<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum StatusKind {
    GatewayClass,
    Gateway,
    #[serde(rename = "HTTPRoute")]
    HttpRoute,
    #[serde(rename = "GRPCRoute")]
    GrpcRoute,
    #[serde(rename = "TLSRoute")]
    TlsRoute,
    #[serde(rename = "TCPRoute")]
    TcpRoute,
    #[serde(rename = "UDPRoute")]
    UdpRoute,
    ListenerSet,
    #[serde(rename = "BackendTLSPolicy")]
    BackendTlsPolicy,
    SecurityPolicy,
    BackendTrafficPolicy,
    ClientTrafficPolicy,
    XBackendTrafficPolicy,
}

#[derive(Debug, Serialize)]
pub struct StatusMeta {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ObjectStatus<'a> {
    GatewayClass {
        conditions: &'a [ClassCondition],
    },
    Gateway {
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        addresses: &'a [super::addresses::StatusAddress],
        conditions: &'a [GatewayCondition],
        listeners: &'a [ListenerStatus],
        #[serde(rename = "attachedListenerSets", skip_serializing_if = "is_zero")]
        attached_listener_sets: u32,
    },
    ListenerSet {
        conditions: &'a [SetCondition],
        listeners: &'a [ListenerStatus],
    },
    HttpRoute {
        parents: &'a [RouteParentStatus],
    },
    BackendTlsPolicy {
        ancestors: &'a [PolicyAncestorStatus],
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

// === impl Condition ===

impl<T, R> Condition<T, R> {
    pub fn new(
        type_: T,
        status: bool,
        reason: R,
        message: impl Into<String>,
        observed_generation: Option<i64>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
            observed_generation,
        }
    }
}

impl<T: fmt::Display, R: fmt::Display> Serialize for Condition<T, R> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Condition", 5)?;
        st.serialize_field("type", &self.type_.to_string())?;
        st.serialize_field("status", if self.status { "True" } else { "False" })?;
        st.serialize_field("reason", &self.reason.to_string())?;
        st.serialize_field("message", &self.message)?;
        if let Some(g) = self.observed_generation {
            st.serialize_field("observedGeneration", &g)?;
        } else {
            st.skip_field("observedGeneration")?;
        }
        st.end()
    }
}

// === impl condition enums ===

impl fmt::Display for ClassConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Class(t) => t.fmt(f),
            Self::SupportedVersion => f.write_str("SupportedVersion"),
        }
    }
}

impl fmt::Display for ClassConditionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Class(r) => r.fmt(f),
            Self::SupportedVersion => f.write_str("SupportedVersion"),
        }
    }
}

impl fmt::Display for RouteConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BackendTls => f.write_str(BACKEND_TLS_CONDITION),
            Self::UnknownFields => f.write_str(UNKNOWN_FIELDS_CONDITION),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

impl fmt::Display for ListenerReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl fmt::Display for SetConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownFields => f.write_str(UNKNOWN_FIELDS_CONDITION),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

impl fmt::Display for SetConditionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl fmt::Display for PolicyConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownFields => f.write_str(UNKNOWN_FIELDS_CONDITION),
            Self::RemoteJwks => f.write_str(REMOTE_JWKS_CONDITION),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

impl fmt::Display for PolicyConditionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl fmt::Display for GatewayCondType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gateway(t) => t.fmt(f),
            Self::ResolvedRefs => f.write_str("ResolvedRefs"),
            Self::BackendTls => f.write_str(BACKEND_TLS_CONDITION),
            Self::InsecureFrontendValidationMode => f.write_str("InsecureFrontendValidationMode"),
            Self::PodNetwork => f.write_str(POD_NETWORK_CONDITION),
            Self::UnknownFields => f.write_str(UNKNOWN_FIELDS_CONDITION),
            Self::AddressesAssigned => f.write_str("AddressesAssigned"),
        }
    }
}

impl fmt::Display for GatewayCondReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gateway(r) => r.fmt(f),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

impl fmt::Display for RouteConditionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

// === impl RouteGroupKind ===

impl RouteGroupKind {
    /// A kind of the Gateway API group.
    pub fn gateway_api(kind: &str) -> Self {
        Self {
            group: GATEWAY_GROUP.to_string(),
            kind: kind.to_string(),
        }
    }
}

// === impl Statuses ===

impl Statuses {
    /// Adds [`UNKNOWN_FIELDS_CONDITION`] to the status of every object in `unknown` that has
    /// one here (Gateways, Routes for each parent, ListenerSets, BackendTLSPolicies for each
    /// ancestor); other kinds have no status pier writes.
    pub fn mark_unknown_fields(
        &mut self,
        unknown: &BTreeMap<(String, super::resources::ObjectKey), Vec<UnknownField>>,
    ) {
        for ((kind, (ns, name)), fields) in unknown {
            let key = ObjectRef::new(ns, name);
            let message = unknown_fields_message(fields);
            match kind.as_str() {
                "Gateway" => {
                    if let Some(s) = self.gateways.get_mut(&key) {
                        let g = s.generation;
                        s.conditions.push(Condition::new(
                            GatewayCondType::UnknownFields,
                            true,
                            GatewayCondReason::UnknownFields,
                            message,
                            g,
                        ));
                    }
                }
                "HTTPRoute" | "GRPCRoute" | "TLSRoute" | "TCPRoute" | "UDPRoute" => {
                    let routes = match kind.as_str() {
                        "HTTPRoute" => &mut self.http_routes,
                        "GRPCRoute" => &mut self.grpc_routes,
                        "TCPRoute" => &mut self.tcp_routes,
                        "UDPRoute" => &mut self.udp_routes,
                        _ => &mut self.tls_routes,
                    };
                    if let Some(s) = routes.get_mut(&key) {
                        let g = s.generation;
                        for p in &mut s.parents {
                            p.conditions.push(Condition::new(
                                RouteConditionType::UnknownFields,
                                true,
                                RouteConditionReason::UnknownFields,
                                message.clone(),
                                g,
                            ));
                        }
                    }
                }
                "ListenerSet" => {
                    if let Some(s) = self.listener_sets.get_mut(&key) {
                        let g = s.generation;
                        s.conditions.push(Condition::new(
                            SetConditionType::UnknownFields,
                            true,
                            SetConditionReason::UnknownFields,
                            message,
                            g,
                        ));
                    }
                }
                "BackendTLSPolicy"
                | "SecurityPolicy"
                | "BackendTrafficPolicy"
                | "ClientTrafficPolicy"
                | "XBackendTrafficPolicy" => {
                    let policies = match kind.as_str() {
                        "BackendTLSPolicy" => &mut self.backend_tls_policies,
                        "SecurityPolicy" => &mut self.security_policies,
                        "ClientTrafficPolicy" => &mut self.client_traffic_policies,
                        "XBackendTrafficPolicy" => &mut self.x_backend_traffic_policies,
                        _ => &mut self.backend_traffic_policies,
                    };
                    if let Some(s) = policies.get_mut(&key) {
                        let g = s.generation;
                        for a in &mut s.ancestors {
                            a.conditions.push(Condition::new(
                                PolicyConditionType::UnknownFields,
                                true,
                                PolicyConditionReason::UnknownFields,
                                message.clone(),
                                g,
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Every status as an API object: GatewayClasses, then Gateways, then ListenerSets, then HTTPRoutes, then
    /// GRPCRoutes, then TLSRoutes, then BackendTLSPolicies, then SecurityPolicies, then
    /// BackendTrafficPolicies, each sorted
    /// by (namespace, name).
    pub fn objects(&self) -> Vec<StatusObject<'_>> {
        let classes = self.gateway_classes.iter().map(|(name, s)| StatusObject {
            api_version: GATEWAY_API_VERSION,
            kind: StatusKind::GatewayClass,
            metadata: StatusMeta {
                name: name.clone(),
                namespace: None,
                generation: s.generation,
            },
            status: ObjectStatus::GatewayClass {
                conditions: &s.conditions,
            },
        });
        let gateways = self.gateways.iter().map(|(key, s)| StatusObject {
            api_version: GATEWAY_API_VERSION,
            kind: StatusKind::Gateway,
            metadata: StatusMeta::namespaced(key, s.generation),
            status: ObjectStatus::Gateway {
                addresses: &s.addresses,
                conditions: &s.conditions,
                listeners: &s.listeners,
                attached_listener_sets: s.attached_listener_sets,
            },
        });
        let sets = self.listener_sets.iter().map(|(key, s)| StatusObject {
            api_version: GATEWAY_API_VERSION,
            kind: StatusKind::ListenerSet,
            metadata: StatusMeta::namespaced(key, s.generation),
            status: ObjectStatus::ListenerSet {
                conditions: &s.conditions,
                listeners: &s.listeners,
            },
        });
        let http = self.http_routes.iter().map(|r| (StatusKind::HttpRoute, r));
        let grpc = self.grpc_routes.iter().map(|r| (StatusKind::GrpcRoute, r));
        let tls = self.tls_routes.iter().map(|r| (StatusKind::TlsRoute, r));
        let tcp = self.tcp_routes.iter().map(|r| (StatusKind::TcpRoute, r));
        let udp = self.udp_routes.iter().map(|r| (StatusKind::UdpRoute, r));
        let routes = http
            .chain(grpc)
            .chain(tls)
            .chain(tcp)
            .chain(udp)
            .map(|(kind, (key, s))| StatusObject {
                api_version: GATEWAY_API_VERSION,
                kind,
                metadata: StatusMeta::namespaced(key, s.generation),
                status: ObjectStatus::HttpRoute {
                    parents: &s.parents,
                },
            });
        let policies = self
            .backend_tls_policies
            .iter()
            .map(|(key, s)| StatusObject {
                api_version: GATEWAY_API_VERSION,
                kind: StatusKind::BackendTlsPolicy,
                metadata: StatusMeta::namespaced(key, s.generation),
                status: ObjectStatus::BackendTlsPolicy {
                    ancestors: &s.ancestors,
                },
            });
        let security = self.security_policies.iter().map(|(key, s)| StatusObject {
            api_version: PIER_POLICY_API_VERSION,
            kind: StatusKind::SecurityPolicy,
            metadata: StatusMeta::namespaced(key, s.generation),
            status: ObjectStatus::BackendTlsPolicy {
                ancestors: &s.ancestors,
            },
        });
        let traffic = self
            .backend_traffic_policies
            .iter()
            .map(|(key, s)| StatusObject {
                api_version: PIER_POLICY_API_VERSION,
                kind: StatusKind::BackendTrafficPolicy,
                metadata: StatusMeta::namespaced(key, s.generation),
                status: ObjectStatus::BackendTlsPolicy {
                    ancestors: &s.ancestors,
                },
            });
        let client = self
            .client_traffic_policies
            .iter()
            .map(|(key, s)| StatusObject {
                api_version: PIER_POLICY_API_VERSION,
                kind: StatusKind::ClientTrafficPolicy,
                metadata: StatusMeta::namespaced(key, s.generation),
                status: ObjectStatus::BackendTlsPolicy {
                    ancestors: &s.ancestors,
                },
            });
        let x_traffic = self
            .x_backend_traffic_policies
            .iter()
            .map(|(key, s)| StatusObject {
                api_version: X_GATEWAY_API_VERSION,
                kind: StatusKind::XBackendTrafficPolicy,
                metadata: StatusMeta::namespaced(key, s.generation),
                status: ObjectStatus::BackendTlsPolicy {
                    ancestors: &s.ancestors,
                },
            });
        classes
            .chain(gateways)
            .chain(sets)
            .chain(routes)
            .chain(policies)
            .chain(security)
            .chain(traffic)
            .chain(client)
            .chain(x_traffic)
            .collect()
    }
}

/// `fields this kind does not have, ignored: spec.rules[0].backendRef (did you mean
/// backendRefs?)`.
fn unknown_fields_message(fields: &[UnknownField]) -> String {
    let shown: Vec<String> = fields.iter().map(ToString::to_string).collect();
    format!(
        "fields this kind does not have, ignored: {}",
        shown.join(", ")
    )
}

impl StatusMeta {
    fn namespaced(key: &ObjectRef, generation: Option<i64>) -> Self {
        Self {
            name: key.name.clone(),
            namespace: Some(key.namespace.clone()),
            generation,
        }
    }
}

#[cfg(test)]
mod tests;
