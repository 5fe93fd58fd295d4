//! TCPRoutes, as HTTPRoutes, like TLSRoutes ([`super::tls_route`]): parentRefs and one rule of
//! weighted backendRefs, attached, granted, resolved and given status by the HTTPRoute
//! translation. A TCPRoute has no hostnames, so in HTTPRoute form it matches any host, and the
//! route table's lookup (with no name) finds, among the routes on a listener, the oldest
//! route's rule (GEP-2644: several TCPRoutes on one listener are all Accepted, and the oldest
//! gets the traffic).
//!
//! What differs is carried by the kind ([`RouteKind::Tcp`](super::gateway::RouteKind)): only
//! TCP listeners take it, and its backends are opaque byte streams. A meshed TCPRoute's
//! connections are mesh mTLS to the workload (pier originates the TLS), never plaintext.

use serde::Serialize;

use super::api::{HttpRoute, HttpRouteRules, HttpRouteSpec, ObjectMeta, TcpRoute, same_shape};
use super::tls_route;

/// Converts a TCPRoute (see the module docs). A backendRef or parentRef that does not convert
/// (it cannot: the shapes are the same) is left out.
pub fn as_http_route(route: &TcpRoute) -> HttpRoute {
    stream_route_as_http(
        &route.metadata,
        route.spec.parent_refs.as_deref(),
        &route.spec.rules,
    )
}

/// A route of parentRefs and rules of weighted backendRefs without matches (TCPRoute,
/// UDPRoute) in HTTPRoute form: no hostnames, so it matches any host.
pub fn stream_route_as_http<P: Serialize, R: Serialize>(
    metadata: &ObjectMeta,
    parent_refs: Option<&[P]>,
    rules: &[R],
) -> HttpRoute {
    let parent_refs =
        parent_refs.map(|refs| refs.iter().filter_map(|p| same_shape(p).ok()).collect());
    let rules = rules.iter().map(rule_as_http).collect();
    HttpRoute {
        metadata: metadata.clone(),
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
fn rule_as_http<R: Serialize>(rule: &R) -> HttpRouteRules {
    same_shape(rule)
        .map(|r| tls_route::rule_as_http(&r))
        .unwrap_or_default()
}
