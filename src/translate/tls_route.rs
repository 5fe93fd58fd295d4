//! TLSRoutes, as HTTPRoutes. A TLSRoute has parentRefs, SNI hostnames and rules of weighted
//! backendRefs: the HTTPRoute translation's attachment (listeners, allowedRoutes, hostname
//! intersection), ReferenceGrants, backend resolution, mesh and status apply unchanged. Written
//! into HTTPRoute form, each rule matches everything (PathPrefix `/`), so the route table's host
//! lookup with the ClientHello's SNI finds the most specific hostname and, among routes with the
//! same one, the oldest route's first rule.
//!
//! What differs is carried by the kind ([`RouteKind::Tls`](super::gateway::RouteKind)): only TLS
//! listeners take it, its backends are opaque byte streams (no HTTP, no HTTP ALPN), and a
//! meshed TLSRoute does not attach to a Passthrough listener (pier cannot put its mesh identity
//! inside the client's own TLS session, and never sends meshed traffic without it).

use super::api::{
    HttpRoute, HttpRouteRules, HttpRouteSpec, TlsRoute, TlsRouteRules, TlsRouteSpec, same_shape,
};

/// Converts a TLSRoute (see the module docs). A backendRef or parentRef that does not convert
/// (it cannot: the shapes are the same) is left out.
pub fn as_http_route(route: &TlsRoute) -> HttpRoute {
    let TlsRouteSpec {
        hostnames,
        parent_refs,
        rules,
        use_default_gateways,
    } = &route.spec;
    let parent_refs = parent_refs
        .as_ref()
        .map(|refs| refs.iter().filter_map(|p| same_shape(p).ok()).collect());
    let rules = rules.iter().map(rule_as_http).collect();
    HttpRoute {
        metadata: route.metadata.clone(),
        spec: HttpRouteSpec {
            hostnames: Some(hostnames.clone()),
            parent_refs,
            rules: Some(rules),
            use_default_gateways: use_default_gateways
                .as_ref()
                .and_then(|u| same_shape(u).ok()),
        },
        status: None,
    }
}

/// A rule of weighted backendRefs in HTTPRoute form (TCPRoute's rules have the same shape).
pub(super) fn rule_as_http(rule: &TlsRouteRules) -> HttpRouteRules {
    let TlsRouteRules { backend_refs, name } = rule;
    HttpRouteRules {
        backend_refs: Some(
            backend_refs
                .iter()
                .filter_map(|b| same_shape(b).ok())
                .collect(),
        ),
        name: name.clone(),
        ..HttpRouteRules::default()
    }
}
