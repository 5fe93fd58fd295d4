//! `allowedRoutes.namespaces`: which namespaces may attach routes to a listener (Same, All,
//! or a label Selector with matchLabels and In/NotIn/Exists/DoesNotExist expressions, a
//! [`LabelSelector`], the same one that selects meshed Routes and Namespaces).

use std::collections::BTreeMap;

use crate::translate::api::{
    GatewayListenersAllowedRoutesNamespaces, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector,
    GatewayListenersAllowedRoutesNamespacesSelectorMatchExpressions, Namespace,
};
use crate::translate::selector::{InvalidSelector, LabelSelector, requirement};

/// `allowedRoutes`, parsed.
#[derive(Debug)]
pub struct AllowedRoutes {
    pub namespaces: NamespacePolicy,
    /// The supported route kinds the listener takes.
    pub kinds: Vec<RouteKind>,
}

/// The route kinds pier serves. GRPCRoutes and TLSRoutes are translated as HTTPRoutes
/// (`translate::grpc_route`, `translate::tls_route`); the kind decides attachment, ReferenceGrants,
/// the backends' protocol and the status the route gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    Http,
    Grpc,
    Tls,
    Tcp,
    Udp,
}

impl RouteKind {
    /// Every kind an HTTP or HTTPS listener supports, in the order `supportedKinds` lists them.
    pub const HTTP_LISTENER: [Self; 2] = [Self::Http, Self::Grpc];
    /// What a TLS listener supports.
    pub const TLS_LISTENER: [Self; 1] = [Self::Tls];
    /// What a TCP listener supports.
    pub const TCP_LISTENER: [Self; 1] = [Self::Tcp];
    /// What a UDP listener supports.
    pub const UDP_LISTENER: [Self; 1] = [Self::Udp];

    /// The kinds a listener of `protocol` supports.
    pub fn for_protocol(protocol: crate::model::Protocol) -> &'static [Self] {
        match protocol {
            crate::model::Protocol::Tls => &Self::TLS_LISTENER,
            crate::model::Protocol::Tcp => &Self::TCP_LISTENER,
            crate::model::Protocol::Udp => &Self::UDP_LISTENER,
            _ => &Self::HTTP_LISTENER,
        }
    }

    /// The API kind.
    pub fn name(self) -> &'static str {
        match self {
            Self::Http => "HTTPRoute",
            Self::Grpc => "GRPCRoute",
            Self::Tls => "TLSRoute",
            Self::Tcp => "TCPRoute",
            Self::Udp => "UDPRoute",
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum NamespacePolicy {
    Same,
    All,
    Selector(LabelSelector),
    /// An invalid selector selects nothing (it must not widen access).
    Nothing,
}

pub fn namespace_policy(
    ns: Option<&GatewayListenersAllowedRoutesNamespaces>,
) -> Result<NamespacePolicy, InvalidSelector> {
    let Some(GatewayListenersAllowedRoutesNamespaces { from, selector }) = ns else {
        return Ok(NamespacePolicy::Same);
    };
    Ok(match from {
        None | Some(GatewayListenersAllowedRoutesNamespacesFrom::Same) => NamespacePolicy::Same,
        Some(GatewayListenersAllowedRoutesNamespacesFrom::All) => NamespacePolicy::All,
        Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector) => match selector {
            // `from: Selector` without a selector: the empty selector would match everything;
            // refuse to widen access on a missing field.
            None => NamespacePolicy::Nothing,
            Some(s) => NamespacePolicy::Selector(label_selector(s)?),
        },
    })
}

fn label_selector(
    GatewayListenersAllowedRoutesNamespacesSelector {
        match_expressions,
        match_labels,
    }: &GatewayListenersAllowedRoutesNamespacesSelector,
) -> Result<LabelSelector, InvalidSelector> {
    let expressions = match_expressions
        .iter()
        .flatten()
        .map(
            |GatewayListenersAllowedRoutesNamespacesSelectorMatchExpressions {
                 key,
                 operator,
                 values,
             }| requirement(key, operator, values.as_deref().unwrap_or_default()),
        )
        .collect::<Result<_, _>>()?;
    Ok(LabelSelector {
        labels: match_labels.clone().unwrap_or_default(),
        expressions,
    })
}

// === impl AllowedRoutes ===

impl AllowedRoutes {
    pub fn allows_kind(&self, kind: RouteKind) -> bool {
        self.kinds.contains(&kind)
    }

    /// Whether a route in `route_ns` may attach to a listener whose Gateway (or ListenerSet)
    /// is in `owner_ns`.
    pub fn allows_namespace(
        &self,
        owner_ns: &str,
        route_ns: &str,
        namespaces: &BTreeMap<String, Namespace>,
    ) -> bool {
        self.namespaces.allows(owner_ns, route_ns, namespaces)
    }
}

impl NamespacePolicy {
    /// Whether an object in `ns` is allowed by this policy of an object in `owner_ns`. A
    /// Namespace object that is missing counts as having no labels.
    pub fn allows(
        &self,
        owner_ns: &str,
        ns: &str,
        namespaces: &BTreeMap<String, Namespace>,
    ) -> bool {
        match self {
            Self::Same => owner_ns == ns,
            Self::All => true,
            Self::Nothing => false,
            Self::Selector(s) => {
                let empty = BTreeMap::new();
                let labels = namespaces
                    .get(ns)
                    .and_then(|n| n.metadata.labels.as_ref())
                    .unwrap_or(&empty);
                s.matches(labels)
            }
        }
    }
}
