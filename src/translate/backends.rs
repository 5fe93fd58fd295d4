//! Service ports -> backends: a Service and its EndpointSlices become one `Arc<Backend>` per
//! (Service port, protocol, TLS decision), with endpoints that keep their load state across
//! snapshots. With per-endpoint mesh identity (`mesh.identity`), each endpoint gets the TLS
//! config of its Pod's ServiceAccount, and endpoints without one are left out.
//!
//! ```text
//! Service port ─┬─ BackendTlsResolver::decide ─> Plain | Tls | Unavailable ───────────┐
//!               │                              └> PerEndpoint(plan) ─┐                ├─> Backend
//! EndpointSlices ─> ready addresses (+ targetRef Pod) ─> Pod's ServiceAccount ─> endpoint TLS ─┘
//! ```
//!
//! Imports go one way: backends -> backend_tls -> refs.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::Settings;
use super::api::{EndpointSlice, Service, ServicePort};
use super::backend_tls::{BackendTlsResolver, Decision, IdentityPlan, TlsKey};
use super::mesh::TlsCtx;
use super::resources::Resources;
use crate::model::{
    AppProtocol, Backend, BackendId, BackendLoad, BackendTls, Endpoint, EndpointIdentities,
    EndpointPool, ObjectRef, OutlierOverride, UnresolvedIdentity,
};

/// The label an EndpointSlice carries to name its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Service annotation: most requests in flight to each of its ports at once (circuit
/// breaking); over it pier answers 503 without contacting the Service. A positive integer;
/// anything else is ignored (pier's default applies), and `/config` shows what applies.
pub const MAX_REQUESTS_ANNOTATION: &str = "pier.dev/max-requests";
/// Service annotation: how many requests may wait for a slot under `pier.dev/max-requests`
/// (`0`: none wait, the excess is refused at once).
pub const MAX_PENDING_ANNOTATION: &str = "pier.dev/max-pending-requests";
/// Service annotation: gateway failures in a row that eject an endpoint (`0`: never). As for
/// the other annotations, a value that does not parse is ignored (pier's default applies).
pub const OUTLIER_FAILURES_ANNOTATION: &str = "pier.dev/outlier-consecutive-failures";
/// Service annotation: the first ejection's length, a GEP-2257 duration (`30s`, `500ms`).
pub const OUTLIER_EJECTION_ANNOTATION: &str = "pier.dev/outlier-ejection";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackendError {
    #[error("Service {0} not found")]
    ServiceNotFound(ObjectRef),
    #[error("Service {0} has no port {1}")]
    PortNotFound(ObjectRef, u16),
}

/// What a route sends to a backend, which decides its protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// HTTP as the Service port's `appProtocol` says (HTTP/1.1 without one).
    Http,
    /// HTTP/2 (gRPC): a port without `appProtocol` is h2c, or h2 by ALPN over TLS.
    Http2,
    /// Bytes (TLSRoute, TCPRoute): [`AppProtocol::Opaque`] whatever the port says.
    Opaque,
    /// Datagrams (UDPRoute): opaque too, to the Service port of protocol UDP when the Service
    /// has that number twice (DNS's 53 over TCP and UDP).
    Datagram,
}

/// Resolves Service ports to backends, one `Arc<Backend>` per (Service, port, TLS decision),
/// shared by every rule and mirror that names it. The same Service port reached from a meshed
/// and a plain route is two backends (with the same endpoints and load state).
pub struct Backends<'a> {
    resources: &'a Resources,
    /// Endpoint load state carried over from the previous snapshot.
    pool: &'a EndpointPool,
    /// EndpointSlices by (namespace, Service name).
    slices: BTreeMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    /// Endpoints per Service port, so backends that differ only in TLS share load state.
    endpoints: BTreeMap<BackendId, Vec<Endpoint>>,
    loads: BTreeMap<BackendId, Arc<BackendLoad>>,
    cache: BTreeMap<(BackendId, AppProtocol, TlsKey), Arc<Backend>>,
    pub tls: BackendTlsResolver<'a>,
    /// XBackendTrafficPolicies: a Service's retry budget.
    pub x_policies: super::x_backend_traffic_policy::XPolicies,
}

// === impl Backends ===

impl<'a> Backends<'a> {
    /// The objects the backends are resolved from (for ReferenceGrants).
    pub fn resources(&self) -> &'a Resources {
        self.resources
    }

    pub fn new(resources: &'a Resources, settings: &'a Settings, pool: &'a EndpointPool) -> Self {
        let mut slices: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
        for ((ns, _), slice) in &resources.endpoint_slices {
            let service = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL));
            if let Some(service) = service {
                slices.entry((ns, service)).or_default().push(slice);
            }
        }
        Self {
            resources,
            pool,
            slices,
            endpoints: BTreeMap::new(),
            loads: BTreeMap::new(),
            cache: BTreeMap::new(),
            tls: BackendTlsResolver::new(resources, settings),
            x_policies: super::x_backend_traffic_policy::XPolicies::new(resources),
        }
    }

    /// The backend for `port` of Service `namespace/name`, reached in `tls`, carrying
    /// `traffic` (which may override the port's `appProtocol`).
    pub fn service_port(
        &mut self,
        namespace: &str,
        name: &str,
        port: u16,
        tls: TlsCtx<'_>,
        traffic: Traffic,
    ) -> Result<Arc<Backend>, BackendError> {
        let service = ObjectRef::new(namespace, name);
        // Noted for every Gateway that reaches the Service, cached backend or not.
        let retry_constraint =
            (self.x_policies).retry_constraint(&service, tls.gateway.map(|g| g.0));
        let id = BackendId {
            service: service.clone(),
            port,
        };
        let svc = self
            .resources
            .services
            .get(&(namespace.to_string(), name.to_string()))
            .ok_or_else(|| BackendError::ServiceNotFound(service.clone()))?;
        // A port of the transport the route carries first (TCP when `protocol` is absent).
        let udp = |p: &&ServicePort| p.protocol.as_deref() == Some("UDP");
        let svc_port = service_ports(svc)
            .filter(|p| i32::from(port) == p.port)
            .min_by_key(|p| udp(p) != (traffic == Traffic::Datagram))
            .ok_or(BackendError::PortNotFound(service, port))?;
        let protocol = match (traffic, app_protocol(svc_port.app_protocol.as_deref())) {
            (Traffic::Opaque | Traffic::Datagram, _) => AppProtocol::Opaque,
            (Traffic::Http2, AppProtocol::Http1) => AppProtocol::H2c,
            (_, p) => p,
        };
        let (tls_key, decision) = self
            .tls
            .decide(&id, svc_port.name.as_deref(), protocol, tls);
        let key = (id, protocol, tls_key);
        if let Some(b) = self.cache.get(&key) {
            return Ok(b.clone());
        }
        let endpoints = match self.endpoints.get(&key.0) {
            Some(e) => e.clone(),
            None => {
                let e = self.slice_endpoints(namespace, name, svc_port);
                self.endpoints.insert(key.0.clone(), e.clone());
                e
            }
        };
        let (endpoints, tls) = match decision {
            Decision::Backend(tls) => (endpoints, tls),
            Decision::PerEndpoint(plan) => {
                self.identify(namespace, name, svc_port, endpoints, &plan)
            }
        };
        let pool = self.pool;
        let load = self
            .loads
            .entry(key.0.clone())
            .or_insert_with(|| pool.backend_load(&key.0))
            .clone();
        let annotation = |key: &str| {
            svc.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .map(|v| v.trim())
        };
        let max_requests = annotation(MAX_REQUESTS_ANNOTATION)
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|&n| n > 0);
        let max_pending = annotation(MAX_PENDING_ANNOTATION).and_then(|v| v.parse::<u32>().ok());
        let outlier = OutlierOverride {
            consecutive_failures: annotation(OUTLIER_FAILURES_ANNOTATION)
                .and_then(|v| v.parse::<u32>().ok()),
            ejection: annotation(OUTLIER_EJECTION_ANNOTATION)
                .and_then(super::api::duration)
                .filter(|d| !d.is_zero()),
            ..Default::default()
        };
        let backend = Arc::new(Backend {
            id: key.0.clone(),
            protocol,
            endpoints,
            tls,
            max_requests,
            max_pending,
            max_connections: None,
            max_retries: None,
            outlier,
            connect_timeout: None,
            retry_constraint,
            load,
        });
        self.cache.insert(key, backend.clone());
        Ok(backend)
    }

    /// Every ready address of every slice of the Service, on the slice port named like the
    /// Service port, with the Pod its slice entry names. Sorted by address and deduplicated
    /// (slices may overlap while they are being rewritten; the first Pod named wins).
    fn slice_addresses(
        &self,
        namespace: &str,
        name: &str,
        svc_port: &ServicePort,
    ) -> Vec<(SocketAddr, Option<PodRef<'a>>)> {
        let want = svc_port.name.as_deref().unwrap_or_default();
        let mut addrs: Vec<(SocketAddr, Option<PodRef<'a>>)> = Vec::new();
        for &slice in self.slices.get(&(namespace, name)).into_iter().flatten() {
            let slice: &'a EndpointSlice = slice;
            if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
                continue;
            }
            let port = slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref().unwrap_or_default() == want)
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok());
            let Some(port) = port else { continue };
            let slice_ns = slice.metadata.namespace.as_deref().unwrap_or_default();
            for ep in slice.endpoints.iter().flatten() {
                // Ready "should be interpreted as true" when absent (EndpointConditions).
                if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                    continue;
                }
                let pod = ep
                    .target_ref
                    .as_ref()
                    .filter(|r| r.kind.as_deref() == Some("Pod"))
                    .and_then(|r| {
                        let ns = r.namespace.as_deref().unwrap_or(slice_ns);
                        Some((ns, r.name.as_deref()?))
                    });
                addrs.extend(
                    ep.addresses
                        .iter()
                        .filter_map(|a| a.parse::<IpAddr>().ok())
                        .map(|ip| (SocketAddr::new(ip, port), pod)),
                );
            }
        }
        // Stable: among equal addresses the first slice's entry (with a Pod first) is kept.
        addrs.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.is_some().cmp(&a.1.is_some())));
        addrs.dedup_by_key(|a| a.0);
        addrs
    }

    fn slice_endpoints(
        &self,
        namespace: &str,
        name: &str,
        svc_port: &ServicePort,
    ) -> Vec<Endpoint> {
        self.slice_addresses(namespace, name, svc_port)
            .into_iter()
            .map(|(a, _)| self.pool.endpoint(a))
            .collect()
    }

    /// Per-endpoint identity: each endpoint gets the TLS config of its Pod's ServiceAccount;
    /// those whose identity cannot be told are left out (and listed, for status).
    fn identify(
        &mut self,
        namespace: &str,
        name: &str,
        svc_port: &ServicePort,
        endpoints: Vec<Endpoint>,
        plan: &IdentityPlan,
    ) -> (Vec<Endpoint>, BackendTls) {
        let pods: BTreeMap<SocketAddr, Option<PodRef<'a>>> = self
            .slice_addresses(namespace, name, svc_port)
            .into_iter()
            .collect();
        let mut kept = Vec::with_capacity(endpoints.len());
        let mut unresolved = Vec::new();
        // Reused for every lookup: no allocation per endpoint.
        let mut key = (String::new(), String::new());
        for mut e in endpoints {
            let pod = pods.get(&e.addr).copied().flatten();
            let expected = match pod {
                None => Err(UnresolvedIdentity::NoPodRef),
                Some((ns, pod)) => {
                    key.0.clear();
                    key.0.push_str(ns);
                    key.1.clear();
                    key.1.push_str(pod);
                    match self.resources.pods.get(&key) {
                        None if self.resources.pods_refused => {
                            Err(UnresolvedIdentity::PodsRefused(format!("{ns}/{pod}")))
                        }
                        None => Err(UnresolvedIdentity::PodNotFound(format!("{ns}/{pod}"))),
                        Some(p) => plan.scheme.expected(ns, &p.service_account).ok_or_else(|| {
                            UnresolvedIdentity::InvalidIdentity(format!("{ns}/{pod}"))
                        }),
                    }
                }
            };
            match expected {
                Ok(id) => {
                    e.tls = Some(self.tls.endpoint_tls(plan, &id));
                    kept.push(e);
                }
                Err(why) => unresolved.push((e.addr, why)),
            }
        }
        let ids = EndpointIdentities {
            scheme: plan.scheme.name(),
            unresolved,
        };
        (kept, BackendTls::PerEndpoint(Arc::new(ids)))
    }
}

/// The Pod an EndpointSlice entry names: (namespace, name).
type PodRef<'a> = (&'a str, &'a str);

fn service_ports(svc: &Service) -> impl Iterator<Item = &ServicePort> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
}

/// Service port `appProtocol` (Gateway API GEP-1911): h2c and WebSocket are understood;
/// anything else is sent as HTTP/1.1.
pub fn app_protocol(p: Option<&str>) -> AppProtocol {
    match p {
        Some("kubernetes.io/h2c") => AppProtocol::H2c,
        Some("kubernetes.io/ws" | "kubernetes.io/wss") => AppProtocol::WebSocket,
        _ => AppProtocol::Http1,
    }
}

#[cfg(test)]
mod tests;
