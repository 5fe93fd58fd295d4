//! UDPRoutes, as HTTPRoutes, like TCPRoutes ([`super::tcp_route`]): parentRefs and one rule of
//! weighted backendRefs, attached, granted, resolved and given status by the HTTPRoute
//! translation; the oldest route on a listener gets its datagrams.
//!
//! What differs is carried by the kind ([`RouteKind::Udp`](super::gateway::RouteKind)): only
//! UDP listeners take it, its backends receive opaque datagrams, and a meshed UDPRoute is not
//! accepted: the mesh is mTLS over TCP, and pier never sends a meshed workload plaintext.

use super::api::{HttpRoute, HttpRouteRules, HttpRouteSpec, UdpRoute, UdpRouteRules, same_shape};
use super::tls_route;

/// Converts a UDPRoute (see the module docs). A backendRef or parentRef that does not convert
/// (it cannot: the shapes are the same) is left out.
pub fn as_http_route(route: &UdpRoute) -> HttpRoute {
    let parent_refs = route
        .spec
        .parent_refs
        .as_ref()
        .map(|refs| refs.iter().filter_map(|p| same_shape(p).ok()).collect());
    let rules = route.spec.rules.iter().map(rule_as_http).collect();
    HttpRoute {
        metadata: route.metadata.clone(),
        spec: HttpRouteSpec {
            hostnames: None,
            parent_refs,
            rules: Some(rules),
            use_default_gateways: None,
        },
        status: None,
    }
}

/// A TLSRoute rule has the same fields (`name`, weighted `backendRefs`): converted through it.
fn rule_as_http(rule: &UdpRouteRules) -> HttpRouteRules {
    same_shape(rule)
        .map(|r| tls_route::rule_as_http(&r))
        .unwrap_or_default()
}
