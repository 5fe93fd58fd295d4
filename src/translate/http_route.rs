//! HTTPRoutes: attachment (parentRefs, allowedRoutes, hostname intersection), rules (matches,
//! filters, backendRefs, timeouts, retry) and the route's `parents[]` status.
//!
//! ```text
//! parentRefs ─> in-scope Gateway ─> listeners (sectionName/port) ─> allowed? hostnames? ─> Attachment
//! rules ─> CompiledRule { Arc<Rule>, matches }   (added to every attached listener's table)
//! ```
//!
//! Invalid rules. A rule with an invalid match, filter, timeout or retry is not dropped
//! silently and does not take the whole route down: its valid matches stay in the table and
//! answer 500 (no backends, no filters), so its traffic neither reaches a less specific rule
//! nor hits a half-applied configuration. Matches that cannot be parsed at all cannot be routed and are
//! left out. The route stays Accepted; the Accepted message and a `PartiallyInvalid`
//! (UnsupportedValue) condition say which rules and why. When *every* rule is invalid the
//! route is fully invalid: Accepted=False (UnsupportedValue) and nothing is attached, as the
//! spec asks for `PartiallyInvalid` never to be set on a fully invalid route.
//!
//! Unresolvable backendRefs are not rule errors: that share of traffic answers 500 and
//! ResolvedRefs=False names the ref (BackendNotFound, RefNotPermitted, InvalidKind). An
//! unresolvable mirror backendRef leaves that mirror out, reported the same way.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::api::duration as api_duration;
use super::api::{
    CORE_GROUP, GATEWAY_GROUP, HttpRoute, HttpRouteParentRefs, HttpRouteRules,
    HttpRouteRulesBackendRefs, HttpRouteRulesFilters, HttpRouteRulesRetry, HttpRouteRulesTimeouts,
    HttpRouteSpec, UseDefaultGateways, backend_filter_as_rule_filter,
};
use super::backends::{self, BackendError, Backends};
use super::gateway::{GatewayState, RouteKind};
use super::mesh::TlsCtx;
use super::refs::{self, RefFrom, RefTo};
use super::resources::Resources;
use super::session_policy::{InvalidSession, rule_session};
use super::status::{
    HttpRouteStatus, ParentRef, RouteCondition, RouteConditionReason, RouteConditionType,
    RouteParentStatus,
};
use super::{Settings, error_chain, group_kind};
use crate::model::host::InvalidHostname;
use crate::model::retry::{DEFAULT_RETRY_ATTEMPTS, DEFAULT_RETRY_BACKOFF};
use crate::model::{
    Backend, BackendId, BackendSet, BackendTarget, BackendTls, Filters, GrpcRank, HostRank,
    HostnameMatch, ObjectRef, PathMatch, RequestMatch, RetryPolicy, Rule, Timeouts, TlsMode,
    TlsUnavailable, WeightedBackend,
};

/// The hostnames each listener (Gateway index, listener index) has given to routes so far, by
/// route kind: an HTTPRoute and a GRPCRoute may not share a hostname on one listener.
pub type Claims = BTreeMap<(usize, usize), Vec<(RouteKind, Vec<HostnameMatch>)>>;

pub(crate) mod filters;
mod matches;

pub use filters::InvalidFilter;
pub use matches::InvalidMatchSpec;

/// The largest backendRef weight the API allows.
const MAX_WEIGHT: u32 = 1_000_000;

/// What route translation reads besides the route.
pub struct RouteCtx<'a, 'b> {
    pub resources: &'a Resources,
    pub settings: &'a Settings,
    pub gateways: &'b [GatewayState],
    pub gateway_index: &'b BTreeMap<ObjectRef, usize>,
    pub backends: &'b mut Backends<'a>,
    /// Filled as routes attach, oldest first (the older route keeps a contested hostname).
    pub claims: Claims,
}

/// A route to translate: an HTTPRoute, or a GRPCRoute in HTTPRoute form.
#[derive(Clone, Copy, Debug)]
pub struct RouteSpec<'r> {
    pub kind: RouteKind,
    pub route: &'r HttpRoute,
    /// GRPCRoute: each match's precedence, or why its method could not be expressed (which
    /// makes its rule invalid, as an invalid HTTPRoute match does).
    pub grpc_matches: &'r [GrpcMatch],
}

/// What a GRPCRoute match adds to its HTTPRoute form.
#[derive(Clone, Debug)]
pub struct GrpcMatch {
    pub rule: usize,
    pub index: usize,
    pub rank: Result<GrpcRank, String>,
}

impl<'r> RouteSpec<'r> {
    pub fn http(route: &'r HttpRoute) -> Self {
        Self {
            kind: RouteKind::Http,
            route,
            grpc_matches: &[],
        }
    }
}

#[derive(Debug)]
pub struct RouteOutcome {
    pub status: HttpRouteStatus,
    /// One per Gateway the route is attached to.
    pub groups: Vec<RuleGroup>,
}

/// The route's rules as compiled for one Gateway (its backend TLS context: meshed or not,
/// trust bundle, client certificate), and the listeners of that Gateway they are added to.
#[derive(Debug)]
pub struct RuleGroup {
    pub gateway: usize,
    /// Distinct listeners of that Gateway.
    pub attachments: Vec<Attachment>,
    pub rules: Vec<CompiledRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// Index into the in-scope Gateways.
    pub gateway: usize,
    /// Index into that Gateway's listeners.
    pub listener: usize,
    /// Route ∩ listener hostnames; empty = any host.
    pub hostnames: Vec<HostnameMatch>,
    /// For each of `hostnames`, how specific the route's own hostname behind it is: routes
    /// whose intersections are the same name are ordered by it (see [`written_ranks`]).
    pub ranks: Vec<HostRank>,
}

#[derive(Debug)]
pub struct CompiledRule {
    pub rule: Arc<Rule>,
    /// In spec order (their index is the match index of the precedence tie-break).
    pub matches: Vec<RequestMatch>,
}

/// The fields of a backendRef that resolution reads (shared by backendRefs and mirrors).
#[derive(Clone, Copy, Debug)]
pub struct BackendRefSpec<'a> {
    pub group: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
    pub port: Option<i32>,
    /// pier speaks HTTP/2 to it whatever the Route is (an ExternalAuth filter's gRPC
    /// authorizer).
    pub h2: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackendRefError {
    #[error(
        "{} is not a supported backend kind (only core/Service)",
        group_kind(group, kind)
    )]
    InvalidKind { group: String, kind: String },
    #[error("reference to Service {0} is not permitted by any ReferenceGrant")]
    RefNotPermitted(ObjectRef),
    #[error("Service {0}: port is required")]
    PortRequired(ObjectRef),
    #[error("Service {0}: port {1} is out of range")]
    PortRange(ObjectRef, i32),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

#[derive(Debug, thiserror::Error)]
pub enum InvalidRule {
    #[error("matches[{0}]")]
    Match(usize, #[source] InvalidMatchSpec),
    #[error("matches[{0}].method: {1}")]
    Method(usize, String),
    #[error("filters[{0}]")]
    Filter(usize, #[source] InvalidFilter),
    #[error("backendRefs[{0}].filters[{1}]")]
    BackendFilter(usize, usize, #[source] InvalidFilter),
    #[error("backendRefs[{0}]: weight {1} is outside 0-1000000")]
    Weight(usize, i32),
    #[error("timeouts.{0}: {1:?} is not a Gateway API duration (like 10s, 500ms, 1h30m)")]
    Timeout(&'static str, String),
    #[error("timeouts: backendRequest must not be longer than request")]
    BackendTimeoutTooLong,
    #[error("retry")]
    Retry(#[source] InvalidRetry),
    #[error("sessionPersistence")]
    Session(#[source] InvalidSession),
    #[error("name {0:?} is already the name of an earlier rule")]
    DuplicateName(String),
}

/// Why a rule's `retry` cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidRetry {
    #[error("codes[{0}]: {1} is not a status code in 400-599")]
    Code(usize, i64),
    #[error("attempts: {0} is negative")]
    Attempts(i64),
    #[error("backoff: {0:?} is not a Gateway API duration (like 10s, 500ms, 1h30m)")]
    Backoff(String),
}

#[derive(Debug, thiserror::Error)]
pub enum InvalidRoute {
    #[error("hostnames[{0}] {1:?}")]
    Hostname(usize, String, #[source] InvalidHostname),
}

/// One unresolved reference, for ResolvedRefs.
#[derive(Debug)]
struct RefProblem {
    reason: RouteConditionReason,
    message: String,
}

// === translate_route ===

/// Translates one route. `None` when no parentRef names an in-scope Gateway: such routes are
/// someone else's and get no status from pier.
///
/// Rules are compiled once per Gateway the route attaches to, because the backends' TLS depends
/// on the Gateway (is the route meshed under it, with which trust bundle and client identity).
/// Status (invalid rules, unresolved refs) comes from the first parent's compilation: whether a
/// reference resolves does not depend on the Gateway.
pub fn translate_route(
    ctx: &mut RouteCtx<'_, '_>,
    key: &ObjectRef,
    spec: RouteSpec<'_>,
) -> Option<RouteOutcome> {
    let route = spec.route;
    let kind = spec.kind;
    let HttpRouteSpec {
        hostnames,
        parent_refs,
        rules,
        use_default_gateways,
    } = &route.spec;
    let parents = in_scope_parents(
        ctx,
        &key.namespace,
        parent_refs.as_deref().unwrap_or_default(),
    );
    let first = parents.first()?.1.gateway;
    let generation = route.metadata.generation;
    let specs = rules.as_deref().unwrap_or_default();
    let no_labels = BTreeMap::new();
    let route_labels = route.metadata.labels.as_ref().unwrap_or(&no_labels);
    let resources = ctx.resources;
    let namespace_labels = resources
        .namespaces
        .get(&key.namespace)
        .and_then(|n| n.metadata.labels.as_ref())
        .unwrap_or(&no_labels);
    let gateways = ctx.gateways;
    let tls_of = |gw: usize| {
        TlsCtx::for_route(
            &gateways[gw].key,
            &gateways[gw].tls,
            route_labels,
            namespace_labels,
        )
    };
    let mut rules = compile_rules(ctx, key, spec, specs, tls_of(first));

    // Route-wide reasons not to attach anywhere.
    let hosts = route_hostnames(hostnames.as_deref().unwrap_or_default());
    let route_problem = match &hosts {
        // GEP-3793 (experimental): attaching to "default" Gateways is not something pier
        // does; a route asking for it is told so rather than half-served.
        _ if matches!(use_default_gateways, Some(UseDefaultGateways::All)) => Some(
            "spec.useDefaultGateways: All is not supported (pier attaches through parentRefs only)"
                .to_string(),
        ),
        Err(e) => Some(format!("invalid hostname: {}", error_chain(e))),
        Ok(_) if rules.invalid.len() == rules.compiled.len() => Some(format!(
            "every rule is invalid: {}",
            rules.invalid.join("; ")
        )),
        Ok(_) => None,
    };
    let hosts = hosts.unwrap_or_default();

    let mut attachments: Vec<Attachment> = vec![];
    let mut accepted_by_parent = vec![];
    for (parent, target) in &parents {
        let accepted = match &route_problem {
            Some(p) => Err((RouteConditionReason::UnsupportedValue, p.clone())),
            None => {
                let meshed = tls_of(target.gateway).meshed;
                attach(ctx, kind, meshed, &key.namespace, &hosts, parent, *target)
            }
        };
        let accepted = accepted.map(|found| {
            for a in found {
                let seen = attachments
                    .iter()
                    .any(|x| x.gateway == a.gateway && x.listener == a.listener);
                if !seen {
                    attachments.push(a);
                }
            }
        });
        accepted_by_parent.push(accepted);
    }
    for a in &attachments {
        let claims = ctx.claims.entry((a.gateway, a.listener)).or_default();
        claims.push((kind, a.hostnames.clone()));
    }

    let mut groups: Vec<RuleGroup> = vec![];
    for a in attachments {
        if let Some(g) = groups.iter_mut().find(|g| g.gateway == a.gateway) {
            g.attachments.push(a);
            continue;
        }
        let compiled = if a.gateway == first {
            std::mem::take(&mut rules.compiled)
        } else {
            compile_rules(ctx, key, spec, specs, tls_of(a.gateway)).compiled
        };
        groups.push(RuleGroup {
            gateway: a.gateway,
            attachments: vec![a],
            rules: compiled,
        });
    }

    let mut statuses = vec![];
    for ((parent, target), accepted) in parents.iter().zip(accepted_by_parent) {
        let gw = &target.gateway;
        let is_accepted = accepted.is_ok();
        let mut conditions = parent_conditions(accepted, &rules, generation);
        let group = groups.iter().find(|g| g.gateway == *gw);
        if let (true, Some(group)) = (is_accepted, group) {
            conditions.extend(backend_tls_condition(
                &group.rules,
                tls_of(*gw).meshed,
                &gateways[*gw].key,
                generation,
            ));
        }
        statuses.push(RouteParentStatus {
            parent_ref: echo(parent),
            controller_name: ctx.settings.controller_name.clone(),
            conditions,
        });
    }
    Some(RouteOutcome {
        status: HttpRouteStatus {
            generation,
            parents: statuses,
        },
        groups,
    })
}

/// `pier.dev/BackendTLS` for one parent: present when the route is meshed under that Gateway
/// or some backend uses a BackendTLSPolicy. False (naming the backends and why) when any TLS
/// backend fails closed.
fn backend_tls_condition(
    rules: &[CompiledRule],
    meshed: bool,
    gateway: &ObjectRef,
    generation: Option<i64>,
) -> Option<RouteCondition> {
    let mut backends: BTreeMap<&BackendId, &Backend> = BTreeMap::new();
    for r in rules {
        let rule = &r.rule;
        let mirrors = rule
            .filters
            .mirrors
            .iter()
            .chain(
                rule.backends
                    .backends
                    .iter()
                    .flat_map(|w| &w.filters.mirrors),
            )
            .map(|m| &*m.backend);
        let targets = rule
            .backends
            .backends
            .iter()
            .filter_map(|w| match &w.target {
                BackendTarget::Service(b) => Some(&**b),
                BackendTarget::Invalid => None,
            });
        for b in targets.chain(mirrors) {
            backends.insert(&b.id, b);
        }
    }
    let tls: Vec<&Backend> = backends
        .into_values()
        .filter(|b| !b.tls.is_plain())
        .collect();
    if !meshed && tls.is_empty() {
        return None;
    }
    let prefix = if meshed {
        format!("meshed via Gateway {gateway}")
    } else {
        "not meshed".to_string()
    };
    let cond = |status, reason, message| {
        Some(RouteCondition::new(
            RouteConditionType::BackendTls,
            status,
            reason,
            message,
            generation,
        ))
    };
    let failing: Vec<(&Backend, TlsUnavailable)> = tls
        .iter()
        .filter_map(|b| match &b.tls {
            BackendTls::Unavailable(why) => Some((*b, *why)),
            _ => None,
        })
        .collect();
    if let Some((_, why)) = failing.first() {
        let list: Vec<String> = failing
            .iter()
            .map(|(b, why)| format!("{}: {}", b.id, unavailable_text(*why)))
            .collect();
        return cond(
            false,
            unavailable_reason(*why),
            format!("{prefix}; these backends answer 503: {}", list.join("; ")),
        );
    }
    // Per-endpoint identity: endpoints pier cannot name an identity for get nothing.
    let unresolved: Vec<String> = tls
        .iter()
        .filter_map(|b| match &b.tls {
            BackendTls::PerEndpoint(ids) if !ids.unresolved.is_empty() => {
                Some(unresolved_text(b, ids))
            }
            _ => None,
        })
        .collect();
    if !unresolved.is_empty() {
        return cond(
            false,
            RouteConditionReason::NoEndpointIdentity,
            format!(
                "{prefix}; endpoints without a known workload identity get no traffic: {}",
                unresolved.join("; ")
            ),
        );
    }
    let list: Vec<String> = tls
        .iter()
        .filter_map(|b| match &b.tls {
            BackendTls::Tls(t) => Some(format!(
                "{} {} (SNI {})",
                b.id,
                match t.mode {
                    TlsMode::Mesh => "mesh mTLS",
                    TlsMode::Policy => "TLS per BackendTLSPolicy",
                },
                t.server_name.to_str()
            )),
            BackendTls::PerEndpoint(ids) => Some(format!(
                "{} mesh mTLS, {} identity checked per endpoint ({} endpoints)",
                b.id,
                ids.scheme,
                b.endpoints.len()
            )),
            _ => None,
        })
        .collect();
    let message = if list.is_empty() {
        format!("{prefix}; the route has no backends")
    } else {
        format!("{prefix}: {}", list.join("; "))
    };
    cond(true, RouteConditionReason::Ready, message)
}

/// At most [`UNRESOLVED_SHOWN`] endpoints by name, then a count.
fn unresolved_text(b: &Backend, ids: &crate::model::EndpointIdentities) -> String {
    let shown: Vec<String> = ids
        .unresolved
        .iter()
        .take(UNRESOLVED_SHOWN)
        .map(|(addr, why)| format!("{addr} ({why})"))
        .collect();
    let more = ids.unresolved.len().saturating_sub(UNRESOLVED_SHOWN);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{}: {}{more}", b.id, shown.join(", "))
}

/// How many unresolved endpoints a status message names.
const UNRESOLVED_SHOWN: usize = 5;

fn unavailable_reason(why: TlsUnavailable) -> RouteConditionReason {
    match why {
        TlsUnavailable::NoTrustBundle => RouteConditionReason::NoTrustBundle,
        TlsUnavailable::NoClientCertificate => RouteConditionReason::NoClientCertificate,
        TlsUnavailable::InvalidPolicy => RouteConditionReason::InvalidPolicy,
        TlsUnavailable::InvalidMeshConfig => RouteConditionReason::InvalidMeshConfig,
        TlsUnavailable::NoEndpointIdentity => RouteConditionReason::NoEndpointIdentity,
    }
}

fn unavailable_text(why: TlsUnavailable) -> &'static str {
    match why {
        TlsUnavailable::NoTrustBundle => {
            "no usable mesh trust bundle (see the Gateway's pier.dev/BackendTLS condition)"
        }
        TlsUnavailable::NoClientCertificate => {
            "no usable client certificate (see the Gateway's pier.dev/BackendTLS condition)"
        }
        TlsUnavailable::InvalidPolicy => "its BackendTLSPolicy cannot be used",
        TlsUnavailable::InvalidMeshConfig => {
            "the Gateway's mesh configuration cannot be read (see its status)"
        }
        TlsUnavailable::NoEndpointIdentity => "no endpoint has a known workload identity",
    }
}

/// Accepted, ResolvedRefs, and PartiallyInvalid when some (not all) rules are invalid.
fn parent_conditions(
    accepted: Result<(), (RouteConditionReason, String)>,
    rules: &CompiledRules,
    generation: Option<i64>,
) -> Vec<RouteCondition> {
    let cond = |t, s, r, m: String| RouteCondition::new(t, s, r, m, generation);
    let mut conditions = vec![];
    let is_accepted = accepted.is_ok();
    conditions.push(match accepted {
        Ok(()) if rules.invalid.is_empty() => cond(
            RouteConditionType::Accepted,
            true,
            RouteConditionReason::Accepted,
            "Route is accepted".into(),
        ),
        Ok(()) => cond(
            RouteConditionType::Accepted,
            true,
            RouteConditionReason::Accepted,
            format!(
                "Route is accepted; invalid rules answer 500: {}",
                rules.invalid.join("; ")
            ),
        ),
        Err((reason, msg)) => cond(RouteConditionType::Accepted, false, reason, msg),
    });
    conditions.push(match rules.refs.first() {
        None => cond(
            RouteConditionType::ResolvedRefs,
            true,
            RouteConditionReason::ResolvedRefs,
            "All references are resolved".into(),
        ),
        Some(first) => cond(
            RouteConditionType::ResolvedRefs,
            false,
            first.reason,
            rules
                .refs
                .iter()
                .map(|r| r.message.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ),
    });
    if is_accepted && !rules.invalid.is_empty() {
        conditions.push(cond(
            RouteConditionType::PartiallyInvalid,
            true,
            RouteConditionReason::UnsupportedValue,
            format!(
                "Dropped Rule(s), which answer 500 instead: {}",
                rules.invalid.join("; ")
            ),
        ));
    }
    conditions
}

/// What a parentRef names: an in-scope Gateway, or one of its ListenerSets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Parent {
    gateway: usize,
    /// An index into the Gateway's `sets`.
    set: Option<usize>,
}

/// parentRefs that name an in-scope Gateway or a ListenerSet whose parent is one, without
/// repeats. Refs to other kinds or to Gateways pier does not serve are ignored entirely
/// (another controller may own them).
fn in_scope_parents<'p>(
    ctx: &RouteCtx<'_, '_>,
    route_ns: &str,
    refs: &'p [HttpRouteParentRefs],
) -> Vec<(&'p HttpRouteParentRefs, Parent)> {
    let mut out: Vec<(&HttpRouteParentRefs, Parent)> = vec![];
    for p in refs {
        let group = p.group.as_deref().unwrap_or(GATEWAY_GROUP);
        let kind = p.kind.as_deref().unwrap_or("Gateway");
        let ns = p.namespace.as_deref().unwrap_or(route_ns);
        let key = ObjectRef::new(ns, &p.name);
        let target = match (group, kind) {
            (GATEWAY_GROUP, "Gateway") => ctx
                .gateway_index
                .get(&key)
                .map(|&gateway| Parent { gateway, set: None }),
            (GATEWAY_GROUP, "ListenerSet") => {
                ctx.gateways.iter().enumerate().find_map(|(gateway, g)| {
                    let set = g.sets.iter().position(|s| s.key == key)?;
                    Some(Parent {
                        gateway,
                        set: Some(set),
                    })
                })
            }
            _ => None,
        };
        let Some(target) = target else { continue };
        if !out.iter().any(|(q, _)| *q == p) {
            out.push((p, target));
        }
    }
    out
}

fn echo(p: &HttpRouteParentRefs) -> ParentRef {
    let HttpRouteParentRefs {
        group,
        kind,
        name,
        namespace,
        port,
        section_name,
    } = p;
    ParentRef {
        group: group.clone(),
        kind: kind.clone(),
        namespace: namespace.clone(),
        name: name.clone(),
        section_name: section_name.clone(),
        port: *port,
    }
}

/// The listeners of Gateway `gw` that a parentRef selects and that take the route. `meshed`:
/// the route is meshed under that Gateway (a meshed TLSRoute never attaches to a Passthrough
/// listener: pier's identity cannot travel inside the client's TLS; a meshed UDPRoute attaches
/// nowhere: the mesh's mTLS runs over TCP, and pier never sends a meshed workload plaintext).
fn attach(
    ctx: &RouteCtx<'_, '_>,
    kind: RouteKind,
    meshed: bool,
    route_ns: &str,
    route_hosts: &[HostnameMatch],
    p: &HttpRouteParentRefs,
    target: Parent,
) -> Result<Vec<Attachment>, (RouteConditionReason, String)> {
    let gw = target.gateway;
    let gateway = &ctx.gateways[gw];
    let parent = match target.set {
        None => format!("Gateway {}", gateway.key),
        Some(i) => {
            let set = &gateway.sets[i];
            if let Some(why) = &set.not_allowed {
                return Err((
                    RouteConditionReason::NoMatchingParent,
                    format!("ListenerSet {} is not attached: {why}", set.key),
                ));
            }
            format!("ListenerSet {}", set.key)
        }
    };
    // A parentRef to the Gateway selects its own listeners; one to a ListenerSet, the set's.
    let selected: Vec<_> = gateway
        .listeners
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            l.set == target.set
                && p.section_name.as_ref().is_none_or(|s| *s == l.name)
                && p.port.is_none_or(|port| port == i32::from(l.port))
        })
        .collect();
    if selected.is_empty() {
        return Err((
            RouteConditionReason::NoMatchingParent,
            format!(
                "{parent} has no listener{}{}",
                p.section_name
                    .as_ref()
                    .map_or(String::new(), |s| format!(" named {s:?}")),
                p.port
                    .map_or(String::new(), |port| format!(" on port {port}")),
            ),
        ));
    }
    let mut out = vec![];
    let mut any_valid = false;
    let mut hostname_mismatch = false;
    let mut namespace_denied = false;
    let mut kind_conflict = None;
    let mut meshed_passthrough = None;
    for (i, l) in selected {
        if !l.accepts_routes() {
            continue;
        }
        any_valid = true;
        if !l.allowed.allows_kind(kind) {
            continue;
        }
        if meshed && (l.passthrough || kind == RouteKind::Udp) {
            meshed_passthrough = Some(l.name.clone());
            continue;
        }
        if !l
            .allowed
            .allows_namespace(&l.namespace, route_ns, &ctx.resources.namespaces)
        {
            namespace_denied = true;
            continue;
        }
        let Some(hostnames) = effective_hostnames(route_hosts, l.hostname.as_ref()) else {
            hostname_mismatch = true;
            continue;
        };
        let taken = ctx.claims.get(&(gw, i)).and_then(|claims| {
            claims
                .iter()
                .find(|(k, hosts)| *k != kind && hostnames_overlap(hosts, &hostnames))
        });
        if let Some((other, _)) = taken {
            kind_conflict = Some((l.name.clone(), *other));
            continue;
        }
        let ranks = written_ranks(route_hosts, l.hostname.as_ref(), &hostnames);
        out.push(Attachment {
            gateway: gw,
            listener: i,
            hostnames,
            ranks,
        });
    }
    if !out.is_empty() {
        return Ok(out);
    }
    Err(if !any_valid {
        (
            RouteConditionReason::NoMatchingParent,
            format!("no selected listener of {parent} is valid"),
        )
    } else if let (Some(listener), RouteKind::Udp) = (&meshed_passthrough, kind) {
        (
            RouteConditionReason::NotAllowedByListeners,
            format!(
                "the route is meshed, and the mesh's mTLS runs over TCP: pier cannot carry \
                 the datagrams of listener {listener:?} of {parent} with its mesh identity and \
                 never sends meshed traffic without it (take the route out of the mesh, or \
                 use a TCPRoute)"
            ),
        )
    } else if let Some(listener) = meshed_passthrough {
        (
            RouteConditionReason::NotAllowedByListeners,
            format!(
                "the route is meshed, and listener {listener:?} of {} passes TLS \
                 through: pier cannot present its mesh identity inside the client's TLS and \
                 never sends meshed traffic without it (attach to a listener with tls.mode \
                 Terminate, where pier originates mesh mTLS)",
                parent
            ),
        )
    } else if let Some((listener, other)) = kind_conflict {
        (
            RouteConditionReason::NotAllowedByListeners,
            format!(
                "listener {listener:?} of {} already serves an older {} for a hostname \
                 of this {} (an HTTPRoute and a GRPCRoute may not share a hostname)",
                parent,
                other.name(),
                kind.name()
            ),
        )
    } else if hostname_mismatch {
        (
            RouteConditionReason::NoMatchingListenerHostname,
            format!(
                "no hostname of the route matches a listener hostname of {}",
                parent
            ),
        )
    } else if namespace_denied {
        (
            RouteConditionReason::NotAllowedByListeners,
            format!(
                "the listeners of {} do not allow {}s from namespace {route_ns}",
                parent,
                kind.name()
            ),
        )
    } else {
        (
            RouteConditionReason::NotAllowedByListeners,
            format!(
                "the listeners of {} do not allow the kind {}",
                parent,
                kind.name()
            ),
        )
    })
}

/// Whether two effective hostname lists (empty = any host) share a host.
fn hostnames_overlap(a: &[HostnameMatch], b: &[HostnameMatch]) -> bool {
    a.is_empty() || b.is_empty() || a.iter().any(|x| b.iter().any(|y| x.intersect(y).is_some()))
}

/// Route hostnames ∩ listener hostname. A route without hostnames takes the listener's (or
/// any host); `None` when they do not intersect.
pub fn effective_hostnames(
    route: &[HostnameMatch],
    listener: Option<&HostnameMatch>,
) -> Option<Vec<HostnameMatch>> {
    match (route.is_empty(), listener) {
        (true, None) => Some(vec![]),
        (true, Some(l)) => Some(vec![l.clone()]),
        (false, None) => Some(route.to_vec()),
        (false, Some(l)) => {
            let mut v: Vec<HostnameMatch> = vec![];
            for h in route.iter().filter_map(|r| l.intersect(r)) {
                if !v.contains(&h) {
                    v.push(h);
                }
            }
            (!v.is_empty()).then_some(v)
        }
    }
}

/// For each effective hostname (from [`effective_hostnames`]), the rank of the most specific
/// hostname the route wrote that intersects the listener's to it; [`HostRank::Any`] when the
/// route wrote none. Gateway API v1.7 (`GatewayRouteHostnameIntersectionPrecedence`): when
/// routes on a listener yield the same intersected hostname, their precedence follows the
/// hostnames they wrote, so `abc.example.com` beats `*.example.com` on a listener for
/// `abc.example.com`, whatever their matches.
pub fn written_ranks(
    route: &[HostnameMatch],
    listener: Option<&HostnameMatch>,
    effective: &[HostnameMatch],
) -> Vec<HostRank> {
    effective
        .iter()
        .map(|e| {
            route
                .iter()
                .filter(|r| listener.map_or(*r == e, |l| l.intersect(r).as_ref() == Some(e)))
                .map(HostnameMatch::rank)
                .max()
                .unwrap_or(HostRank::Any)
        })
        .collect()
}

fn route_hostnames(hostnames: &[String]) -> Result<Vec<HostnameMatch>, InvalidRoute> {
    let mut out: Vec<HostnameMatch> = vec![];
    for (i, h) in hostnames.iter().enumerate() {
        let m = HostnameMatch::parse(h).map_err(|e| InvalidRoute::Hostname(i, h.clone(), e))?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

// === rules ===

/// Every rule of a route, with what went wrong, for the status.
struct CompiledRules {
    compiled: Vec<CompiledRule>,
    /// One line per invalid rule: `rules[i]: why`.
    invalid: Vec<String>,
    refs: Vec<RefProblem>,
}

fn compile_rules(
    ctx: &mut RouteCtx<'_, '_>,
    key: &ObjectRef,
    route: RouteSpec<'_>,
    specs: &[HttpRouteRules],
    tls: TlsCtx<'_>,
) -> CompiledRules {
    // The CRD defaults an absent rule list to one rule matching PathPrefix "/".
    let default_rules = [HttpRouteRules::default()];
    let specs = if specs.is_empty() {
        &default_rules[..]
    } else {
        specs
    };
    let mut out = CompiledRules {
        compiled: vec![],
        invalid: vec![],
        refs: vec![],
    };
    for (i, spec) in specs.iter().enumerate() {
        let earlier = &specs[..i];
        let (rule, errors) = compile_rule(ctx, key, route, (i, spec), earlier, tls, &mut out.refs);
        if !errors.is_empty() {
            let why: Vec<String> = errors.iter().map(|e| error_chain(e)).collect();
            out.invalid.push(format!("rules[{i}]: {}", why.join(", ")));
        }
        out.compiled.push(rule);
    }
    out
}

fn compile_rule(
    ctx: &mut RouteCtx<'_, '_>,
    key: &ObjectRef,
    route: RouteSpec<'_>,
    (index, spec): (usize, &HttpRouteRules),
    earlier: &[HttpRouteRules],
    tls: TlsCtx<'_>,
    refs: &mut Vec<RefProblem>,
) -> (CompiledRule, Vec<InvalidRule>) {
    let HttpRouteRules {
        backend_refs,
        filters,
        matches,
        name,
        retry,
        session_persistence,
        timeouts,
    } = spec;
    let mut errors = vec![];
    // Names must be unique within a route (the experimental CRD checks it; nothing checks a
    // manifest). The later rule is the invalid one.
    if let Some(name) = name
        && earlier.iter().any(|s| s.name.as_ref() == Some(name))
    {
        errors.push(InvalidRule::DuplicateName(name.clone()));
    }
    let mut compiled_matches = vec![];
    match matches.as_deref() {
        None | Some([]) => compiled_matches.push(RequestMatch::default()),
        Some(ms) => {
            for (i, m) in ms.iter().enumerate() {
                let grpc = route
                    .grpc_matches
                    .iter()
                    .find(|g| (g.rule, g.index) == (index, i))
                    .map(|g| &g.rank);
                let grpc = match grpc {
                    Some(Err(why)) => {
                        errors.push(InvalidRule::Method(i, why.clone()));
                        continue;
                    }
                    Some(Ok(rank)) => Some(*rank),
                    None => None,
                };
                match matches::request_match(m) {
                    Ok(m) => compiled_matches.push(RequestMatch { grpc, ..m }),
                    Err(e) => errors.push(InvalidRule::Match(i, e)),
                }
            }
        }
    }
    let prefix_only = compiled_matches
        .iter()
        .all(|m| matches!(m.path, PathMatch::Prefix(_)));

    let resources = ctx.resources;
    let route_ns = key.namespace.as_str();
    let backends = &mut *ctx.backends;
    let kind = route.kind;
    let mut resolve =
        |spec: BackendRefSpec<'_>| resolve_backend(resources, backends, kind, route_ns, spec, tls);
    let mut rules_filters = RuleFilters {
        prefix_only,
        resolve: &mut resolve,
        refs,
    };

    let rule_filters = rules_filters
        .translate(
            filters.as_deref().unwrap_or_default(),
            &format!("rules[{index}]"),
            Some(format!("{} {key} rules[{index}]", route.kind.name())),
        )
        .unwrap_or_else(|(i, e)| {
            errors.push(InvalidRule::Filter(i, e));
            Filters::default()
        });
    let mut weighted = vec![];
    for (bi, b) in backend_refs.iter().flatten().enumerate() {
        match rules_filters.weighted_backend(index, bi, b) {
            Ok(w) => weighted.push(w),
            Err(e) => errors.push(e),
        }
    }
    let timeouts = timeouts
        .as_ref()
        .map_or(Ok(Timeouts::default()), rule_timeouts)
        .unwrap_or_else(|e| {
            errors.push(e);
            Timeouts::default()
        });
    let retry = retry
        .as_ref()
        .map(rule_retry)
        .transpose()
        .unwrap_or_else(|e| {
            errors.push(InvalidRule::Retry(e));
            None
        });

    let session = session_persistence
        .as_ref()
        .map(|s| rule_session(s, key, index))
        .transpose()
        .unwrap_or_else(|e| {
            errors.push(InvalidRule::Session(e));
            None
        });
    // Without its own, the rule's Services' XBackendTrafficPolicy may give one (when all of
    // them have the same policy with one).
    let session = match session {
        Some(s) => Some(s),
        None if session_persistence.is_none() => {
            let services = weighted.iter().filter_map(|w| match &w.target {
                BackendTarget::Service(b) => Some(&b.id.service),
                BackendTarget::Invalid => None,
            });
            ctx.backends.x_policies.session_for(services)
        }
        None => None,
    };

    let valid = errors.is_empty();
    // Invalid: no filters, no backends, so it answers 500 (see the module docs).
    let rule = Rule {
        route: key.clone(),
        kind: route.kind.name(),
        index,
        name: name.clone(),
        filters: if valid {
            rule_filters
        } else {
            Filters::default()
        },
        backends: if valid {
            BackendSet::new(weighted)
        } else {
            BackendSet::default()
        },
        timeouts: if valid { timeouts } else { Timeouts::default() },
        retry: if valid { retry } else { None },
        session: if valid { session } else { None },
        // Policies (SecurityPolicy) attach here once translation reads them (issue 38).
        access: None,
        traffic: None,
        health: None,
    };
    (
        CompiledRule {
            rule: Arc::new(rule),
            matches: compiled_matches,
        },
        errors,
    )
}

/// Translates filter lists and backendRefs of one rule, recording unresolved refs.
struct RuleFilters<'r, 'f> {
    prefix_only: bool,
    resolve: &'f mut dyn FnMut(BackendRefSpec<'_>) -> Result<Arc<Backend>, BackendRefError>,
    refs: &'r mut Vec<RefProblem>,
}

impl RuleFilters<'_, '_> {
    /// One filter list; `at` locates it in messages (`rules[0]`, `rules[0].backendRefs[1]`).
    /// `rule_at`: the rule's own filters (`HTTPRoute ns/name rules[0]`), else a backendRef's.
    fn translate(
        &mut self,
        list: &[HttpRouteRulesFilters],
        at: &str,
        rule_at: Option<String>,
    ) -> Result<Filters, (usize, InvalidFilter)> {
        let mut fctx = filters::FilterCtx {
            prefix_only: self.prefix_only,
            resolve: &mut *self.resolve,
            unresolved: vec![],
            rule_at,
        };
        let out = filters::filters(list, &mut fctx);
        for (fi, field, e) in fctx.unresolved {
            self.refs
                .push(RefProblem::new(format!("{at}.filters[{fi}].{field}"), &e));
        }
        out
    }

    /// One backendRef: an unresolved ref keeps its weight as `Invalid` (500s); an invalid
    /// weight or filter makes the whole rule invalid.
    fn weighted_backend(
        &mut self,
        rule: usize,
        bi: usize,
        b: &HttpRouteRulesBackendRefs,
    ) -> Result<WeightedBackend, InvalidRule> {
        let HttpRouteRulesBackendRefs {
            filters,
            group,
            kind,
            name,
            namespace,
            port,
            weight,
        } = b;
        // The API's bounds; they also keep a rule's total weight far from u32 overflow.
        let weight = weight.unwrap_or(1);
        let weight = u32::try_from(weight)
            .ok()
            .filter(|w| *w <= MAX_WEIGHT)
            .ok_or(InvalidRule::Weight(bi, weight))?;
        let at = format!("rules[{rule}].backendRefs[{bi}]");
        let spec = BackendRefSpec {
            group: group.as_deref(),
            kind: kind.as_deref(),
            name,
            namespace: namespace.as_deref(),
            port: *port,
            h2: false,
        };
        let target = match (self.resolve)(spec) {
            Ok(b) => BackendTarget::Service(b),
            Err(e) => {
                self.refs.push(RefProblem::new(at.clone(), &e));
                BackendTarget::Invalid
            }
        };
        let converted = filters
            .iter()
            .flatten()
            .enumerate()
            .map(|(fi, f)| {
                backend_filter_as_rule_filter(f)
                    .map_err(|e| InvalidRule::BackendFilter(bi, fi, InvalidFilter::Convert(e)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let filters = self
            .translate(&converted, &at, None)
            .map_err(|(fi, e)| InvalidRule::BackendFilter(bi, fi, e))?;
        Ok(WeightedBackend {
            weight,
            target,
            filters,
        })
    }
}

/// Resolves a backendRef (or mirror backendRef) to a Service port.
fn resolve_backend(
    resources: &Resources,
    backends: &mut Backends<'_>,
    route_kind: RouteKind,
    route_ns: &str,
    r: BackendRefSpec<'_>,
    tls: TlsCtx<'_>,
) -> Result<Arc<Backend>, BackendRefError> {
    // gRPC is HTTP/2 end to end; a TLSRoute carries bytes.
    let traffic = match route_kind {
        RouteKind::Http if r.h2 => backends::Traffic::Http2,
        RouteKind::Http => backends::Traffic::Http,
        RouteKind::Grpc => backends::Traffic::Http2,
        RouteKind::Tls | RouteKind::Tcp => backends::Traffic::Opaque,
        RouteKind::Udp => backends::Traffic::Datagram,
    };
    let from = RefFrom {
        group: GATEWAY_GROUP,
        kind: route_kind.name(),
        namespace: route_ns,
    };
    resolve_service(resources, backends, from, r, tls, traffic)
}

/// A backendRef of `from` (a Route, or a Gateway's listener filter): a core Service port in
/// its namespace, or in another one that a ReferenceGrant opens to `from`'s kind.
pub(crate) fn resolve_service(
    resources: &Resources,
    backends: &mut Backends<'_>,
    from: RefFrom<'_>,
    r: BackendRefSpec<'_>,
    tls: TlsCtx<'_>,
    traffic: backends::Traffic,
) -> Result<Arc<Backend>, BackendRefError> {
    let kind = r.kind.unwrap_or("Service");
    if !refs::is_core_group(r.group) || kind != "Service" {
        return Err(BackendRefError::InvalidKind {
            group: r.group.unwrap_or_default().to_string(),
            kind: kind.to_string(),
        });
    }
    let ns = r.namespace.unwrap_or(from.namespace);
    let svc = ObjectRef::new(ns, r.name);
    if ns != from.namespace {
        let to = RefTo {
            group: CORE_GROUP,
            kind: "Service",
            namespace: ns,
            name: r.name,
        };
        if !refs::reference_granted(resources, from, to) {
            return Err(BackendRefError::RefNotPermitted(svc));
        }
    }
    let port = r
        .port
        .ok_or_else(|| BackendRefError::PortRequired(svc.clone()))?;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or(BackendRefError::PortRange(svc, port))?;
    Ok(backends.service_port(ns, r.name, port, tls, traffic)?)
}

fn rule_timeouts(
    HttpRouteRulesTimeouts {
        backend_request,
        request,
    }: &HttpRouteRulesTimeouts,
) -> Result<Timeouts, InvalidRule> {
    let request = duration("request", request.as_deref())?;
    let backend_request = duration("backendRequest", backend_request.as_deref())?;
    if let (Some(r), Some(b)) = (request, backend_request)
        && b > r
    {
        return Err(InvalidRule::BackendTimeoutTooLong);
    }
    Ok(Timeouts {
        request,
        backend_request,
    })
}

/// A timeout: a GEP-2257 duration; `0s` means no timeout.
fn duration(field: &'static str, s: Option<&str>) -> Result<Option<Duration>, InvalidRule> {
    let Some(s) = s else { return Ok(None) };
    let d = api_duration(s).ok_or_else(|| InvalidRule::Timeout(field, s.to_string()))?;
    Ok((!d.is_zero()).then_some(d))
}

/// GEP-1731. Codes outside 400-599 (the CRD's bounds), negative attempts and a backoff that
/// is not a GEP-2257 duration make the rule invalid. Unset attempts and backoff take pier's
/// defaults (v1.7's CRD defaults attempts to 1, as pier does); `attempts: 0` (v1.7's CRD
/// minimum; v1.6's was 1) means no retries; `backoff: 0s` retries at once.
fn rule_retry(
    HttpRouteRulesRetry {
        attempts,
        backoff,
        codes,
    }: &HttpRouteRulesRetry,
) -> Result<RetryPolicy, InvalidRetry> {
    let mut parsed = vec![];
    for (i, &code) in codes.iter().flatten().enumerate() {
        let ok = u16::try_from(code).ok().filter(|c| (400..=599).contains(c));
        parsed.push(ok.ok_or(InvalidRetry::Code(i, code))?);
    }
    let attempts = match attempts {
        None => DEFAULT_RETRY_ATTEMPTS,
        Some(n) if *n < 0 => return Err(InvalidRetry::Attempts(*n)),
        // Beyond u32 is as good as unbounded: the retry budget and timeouts end it.
        Some(n) => u32::try_from(*n).unwrap_or(u32::MAX),
    };
    let backoff = match backoff {
        None => DEFAULT_RETRY_BACKOFF,
        Some(s) => api_duration(s).ok_or_else(|| InvalidRetry::Backoff(s.clone()))?,
    };
    Ok(RetryPolicy::new(parsed, attempts, backoff))
}

// === impl RefProblem, BackendRefError ===

impl RefProblem {
    fn new(at: String, e: &BackendRefError) -> Self {
        Self {
            reason: e.reason(),
            message: format!("{at}: {e}"),
        }
    }
}

impl BackendRefError {
    pub fn reason(&self) -> RouteConditionReason {
        match self {
            Self::InvalidKind { .. } => RouteConditionReason::InvalidKind,
            Self::RefNotPermitted(_) => RouteConditionReason::RefNotPermitted,
            Self::PortRequired(_) | Self::PortRange(..) | Self::Backend(_) => {
                RouteConditionReason::BackendNotFound
            }
        }
    }
}

#[cfg(test)]
mod tests;
