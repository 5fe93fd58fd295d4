//! `allowedRoutes.namespaces`: which namespaces may attach routes to a listener (Same, All,
//! or a label Selector with matchLabels and In/NotIn/Exists/DoesNotExist expressions). The
//! same [`LabelSelector`] selects meshed Routes and Namespaces (`spec.mesh`).

use std::collections::BTreeMap;

use crate::translate::api::{
    GatewayListenersAllowedRoutesNamespaces, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector,
    GatewayListenersAllowedRoutesNamespacesSelectorMatchExpressions,
    LabelSelector as ApiLabelSelector, LabelSelectorRequirement, Namespace,
};

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
}

impl RouteKind {
    /// Every kind an HTTP or HTTPS listener supports, in the order `supportedKinds` lists them.
    pub const HTTP_LISTENER: [Self; 2] = [Self::Http, Self::Grpc];
    /// What a TLS listener supports.
    pub const TLS_LISTENER: [Self; 1] = [Self::Tls];

    /// The kinds a listener of `protocol` supports.
    pub fn for_protocol(protocol: crate::model::Protocol) -> &'static [Self] {
        match protocol {
            crate::model::Protocol::Tls => &Self::TLS_LISTENER,
            _ => &Self::HTTP_LISTENER,
        }
    }

    /// The API kind.
    pub fn name(self) -> &'static str {
        match self {
            Self::Http => "HTTPRoute",
            Self::Grpc => "GRPCRoute",
            Self::Tls => "TLSRoute",
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

#[derive(Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub labels: BTreeMap<String, String>,
    pub expressions: Vec<Requirement>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidSelector {
    #[error("matchExpressions operator {0:?} is not In, NotIn, Exists or DoesNotExist")]
    Operator(String),
    #[error("matchExpressions {0:?}: In and NotIn need values")]
    MissingValues(String),
    #[error("matchExpressions {0:?}: Exists and DoesNotExist take no values")]
    UnexpectedValues(String),
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

fn requirement(
    key: &str,
    operator: &str,
    values: &[String],
) -> Result<Requirement, InvalidSelector> {
    let key = key.to_string();
    let values = values.to_vec();
    Ok(match operator {
        "In" | "NotIn" if values.is_empty() => return Err(InvalidSelector::MissingValues(key)),
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            return Err(InvalidSelector::UnexpectedValues(key));
        }
        "In" => Requirement::In(key, values),
        "NotIn" => Requirement::NotIn(key, values),
        "Exists" => Requirement::Exists(key),
        "DoesNotExist" => Requirement::DoesNotExist(key),
        other => return Err(InvalidSelector::Operator(other.to_string())),
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

impl LabelSelector {
    /// A Kubernetes `LabelSelector` (the mesh selector). The empty selector matches everything.
    pub fn from_api(
        ApiLabelSelector {
            match_expressions,
            match_labels,
        }: &ApiLabelSelector,
    ) -> Result<Self, InvalidSelector> {
        let expressions = match_expressions
            .iter()
            .flatten()
            .map(
                |LabelSelectorRequirement {
                     key,
                     operator,
                     values,
                 }| {
                    requirement(key, operator, values.as_deref().unwrap_or_default())
                },
            )
            .collect::<Result<_, _>>()?;
        Ok(Self {
            labels: match_labels.clone().unwrap_or_default(),
            expressions,
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|r| match r {
                Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
                Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
                Requirement::Exists(k) => labels.contains_key(k),
                Requirement::DoesNotExist(k) => !labels.contains_key(k),
            })
    }
}
