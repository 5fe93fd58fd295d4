//! UDPRoutes, as HTTPRoutes, like TCPRoutes ([`super::tcp_route`]): parentRefs and one rule of
//! weighted backendRefs, attached, granted, resolved and given status by the HTTPRoute
//! translation; the oldest route on a listener gets its datagrams.
//!
//! What differs is carried by the kind ([`RouteKind::Udp`](super::gateway::RouteKind)): only
//! UDP listeners take it, its backends receive opaque datagrams, and a meshed UDPRoute is not
//! accepted: the mesh is mTLS over TCP, and pier never sends a meshed workload plaintext.

use super::api::{HttpRoute, UdpRoute};
use super::tcp_route::stream_route_as_http;

/// Converts a UDPRoute (see the module docs): the same fields as a TCPRoute.
pub fn as_http_route(route: &UdpRoute) -> HttpRoute {
    stream_route_as_http(
        &route.metadata,
        route.spec.parent_refs.as_deref(),
        &route.spec.rules,
    )
}
