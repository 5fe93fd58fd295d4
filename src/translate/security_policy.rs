//! SecurityPolicy (`pier.dev/v1alpha1`) ─> the effective [`AccessPolicy`] of each (Gateway,
//! listener, Route, rule), and the policies' GEP-713 status.
//!
//! ```text
//! policies ─> parse each spec (invalid: the policy fails closed, every request a 500)
//!          ─> index by target; at one target the oldest policy wins, then namespace/name
//!             (the others: Accepted=False, Conflicted)
//! table    ─> effective(gateway, listener, route, rule): rule > route > listener(set) >
//!             Gateway, the first level with a policy wins whole; the broader ones it
//!             replaces get Overridden=True under that Gateway
//! status   ─> one ancestor per Gateway (or the Route's parents) the targets hang off
//! ```
//!
//! Targets are local references: in the policy's namespace. A target that does not exist is
//! `TargetNotFound` (with the target itself as the ancestor, so the user sees why); one that
//! exists but is not pier's (another class's Gateway) gets no status from pier.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use http::{HeaderName, HeaderValue, Method};

use self::remote::RemoteNote;
use super::api::{self, GATEWAY_GROUP, SecurityPolicy, SecurityPolicySpec, Timestamp};
use super::gateway::GatewayState;
use super::resources::Resources;
use super::status::{
    BackendTlsPolicyStatus, HttpRouteStatus, ParentRef, PolicyAncestorStatus, PolicyCondition,
    PolicyConditionReason, PolicyConditionType,
};
use crate::auth::remote::{RemoteSets, Wanted};
use crate::model::ObjectRef;
use crate::model::policy::{
    AccessPolicy, Action, Authorization, AuthorizationRule, JwtPrincipal, Principal,
};

mod authn;
mod oidc;
mod remote;

/// The documents the fetcher (`source::jwks`) is to follow: every `remoteJWKS`, and each
/// OIDC provider's discovery document and the key set it names (once `fetched`).
pub fn remote_jwks_wanted(resources: &Resources, fetched: &RemoteSets) -> Wanted {
    let mut out = remote::wanted(resources);
    oidc::wanted(resources, fetched, &mut out);
    out
}

/// What a policy attaches to (the policy's namespace is the target's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Gateway(ObjectRef),
    Listener(ObjectRef, String),
    ListenerSet(ObjectRef),
    SetListener(ObjectRef, String),
    Route(&'static str, ObjectRef),
    Rule(&'static str, ObjectRef, String),
}

/// One SecurityPolicy as translation sees it.
struct Entry {
    key: ObjectRef,
    generation: Option<i64>,
    created: Option<Timestamp>,
    /// What the data plane enforces (an invalid spec: a policy that fails closed).
    policy: Arc<AccessPolicy>,
    /// Why the spec is invalid.
    invalid: Option<String>,
    /// Each targetRef, or (as written) why it cannot be a target.
    targets: Vec<Result<Target, Box<(ParentRef, String)>>>,
    /// What each `remoteJWKS` provider's fetches came to.
    remote: Vec<RemoteNote>,
}

/// Every SecurityPolicy, indexed by target; records which ones narrower ones replaced.
#[derive(Default)]
pub struct Policies {
    entries: Vec<Entry>,
    /// The winning policy (an index into `entries`) of each target.
    winner: BTreeMap<Target, usize>,
    /// (policy, Gateway) pairs where a narrower policy replaced the policy for some route.
    overridden: BTreeSet<(usize, ObjectRef)>,
    /// Whether any policy targets a Route or a rule (else lookups skip those levels).
    any_route_target: bool,
}

/// The route a rule belongs to, for [`Policies::effective`].
pub struct RuleAt<'r> {
    /// `HTTPRoute`, `GRPCRoute` or `TLSRoute`.
    pub kind: &'static str,
    pub route: &'r ObjectRef,
    pub rule_name: Option<&'r str>,
}

impl Policies {
    /// Reads every SecurityPolicy of `resources`; `remoteJWKS` keys come from `fetched`.
    pub fn new(resources: &Resources, fetched: &RemoteSets) -> Self {
        let mut entries: Vec<Entry> = resources
            .security_policies
            .iter()
            .map(|((ns, name), p)| entry(ObjectRef::new(ns, name), p, resources, fetched))
            .collect();
        // Oldest first, then namespace/name: the first to claim a target keeps it.
        entries.sort_by(|a, b| (&a.created, &a.key).cmp(&(&b.created, &b.key)));
        let mut winner = BTreeMap::new();
        for (i, e) in entries.iter().enumerate() {
            for t in e.targets.iter().flatten() {
                winner.entry(t.clone()).or_insert(i);
            }
        }
        let any_route_target = winner
            .keys()
            .any(|t| matches!(t, Target::Route(..) | Target::Rule(..)));
        Self {
            entries,
            winner,
            overridden: BTreeSet::new(),
            any_route_target,
        }
    }

    /// The policy a rule gets on a listener of a Gateway: the narrowest level that has one
    /// (rule > route > listener or ListenerSet > Gateway). Records the broader ones it
    /// replaces as overridden under this Gateway.
    pub fn effective(
        &mut self,
        gw: &GatewayState,
        listener: usize,
        at: &RuleAt<'_>,
    ) -> Option<Arc<AccessPolicy>> {
        if self.winner.is_empty() {
            return None;
        }
        let l = &gw.listeners[listener];
        let mut levels = Vec::with_capacity(5);
        if self.any_route_target {
            if let Some(rule) = at.rule_name {
                levels.push(Target::Rule(at.kind, at.route.clone(), rule.to_string()));
            }
            levels.push(Target::Route(at.kind, at.route.clone()));
        }
        match l.set.map(|s| &gw.sets[s].key) {
            Some(set) => {
                levels.push(Target::SetListener(set.clone(), l.name.clone()));
                levels.push(Target::ListenerSet(set.clone()));
            }
            None => levels.push(Target::Listener(gw.key.clone(), l.name.clone())),
        }
        levels.push(Target::Gateway(gw.key.clone()));
        let mut found = levels.iter().filter_map(|t| self.winner.get(t).copied());
        let chosen = found.next()?;
        for broader in found {
            if broader != chosen {
                self.overridden.insert((broader, gw.key.clone()));
            }
        }
        Some(self.entries[chosen].policy.clone())
    }

    /// Each policy's status: one ancestor per Gateway its targets hang off (a Route's: its
    /// parents), or the target itself when it does not exist.
    pub fn statuses(
        &self,
        resources: &Resources,
        gateways: &[GatewayState],
        routes: &RouteStatuses<'_>,
        controller_name: &str,
    ) -> BTreeMap<ObjectRef, BackendTlsPolicyStatus> {
        let mut out = BTreeMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            // Ancestor -> (accepted by some target, conflicted by whom).
            let mut ancestors: BTreeMap<AncestorKey, Verdict> = BTreeMap::new();
            for t in &e.targets {
                let target = match t {
                    Ok(t) => t,
                    Err(refused) => {
                        let (written, why) = &**refused;
                        // A kind pier cannot attach to: said under the reference as written.
                        let a = AncestorKey {
                            parent_ref: written.clone(),
                            gateway: None,
                        };
                        ancestors.entry(a).or_default().invalid_target = Some(why.clone());
                        continue;
                    }
                };
                let conflicted = match self.winner.get(target) {
                    Some(&w) if w != i => Some(self.entries[w].key.clone()),
                    _ => None,
                };
                match ancestors_of(target, resources, gateways, routes) {
                    Found::Under(list) => {
                        for a in list {
                            let v = ancestors.entry(a).or_default();
                            match &conflicted {
                                Some(by) => v.conflicted_by = Some(by.clone()),
                                None => v.accepted = true,
                            }
                        }
                    }
                    Found::Foreign => {}
                    Found::Missing(a, what) => {
                        ancestors.entry(a).or_default().not_found = Some(what);
                    }
                }
            }
            if ancestors.is_empty() {
                continue;
            }
            let list = ancestors
                .into_iter()
                .map(|(a, v)| {
                    let overridden = a
                        .gateway
                        .as_ref()
                        .is_some_and(|gw| self.overridden.contains(&(i, gw.clone())));
                    PolicyAncestorStatus {
                        conditions: conditions(e, &v, overridden),
                        ancestor_ref: a.parent_ref,
                        controller_name: controller_name.to_string(),
                    }
                })
                .collect();
            out.insert(
                e.key.clone(),
                BackendTlsPolicyStatus {
                    generation: e.generation,
                    ancestors: list,
                },
            );
        }
        out
    }
}

/// The Route statuses translation computed, by kind, for the ancestors of Route targets.
pub struct RouteStatuses<'s> {
    pub http: &'s BTreeMap<ObjectRef, HttpRouteStatus>,
    pub grpc: &'s BTreeMap<ObjectRef, HttpRouteStatus>,
}

/// An ancestor entry: the reference written, and the Gateway it is (for Overridden).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct AncestorKey {
    parent_ref: ParentRef,
    gateway: Option<ObjectRef>,
}

/// What the targets under one ancestor came to.
#[derive(Default)]
struct Verdict {
    accepted: bool,
    conflicted_by: Option<ObjectRef>,
    not_found: Option<String>,
    invalid_target: Option<String>,
}

enum Found {
    Under(Vec<AncestorKey>),
    /// The target exists but belongs to no Gateway of pier's.
    Foreign,
    /// It does not exist: the ancestor to report it under, and what is missing.
    Missing(AncestorKey, String),
}

fn ancestors_of(
    target: &Target,
    resources: &Resources,
    gateways: &[GatewayState],
    routes: &RouteStatuses<'_>,
) -> Found {
    let key = |r: &ObjectRef| (r.namespace.clone(), r.name.clone());
    let gateway = |gw: &ObjectRef, section: Option<&str>| AncestorKey {
        parent_ref: parent_ref(GATEWAY_GROUP, "Gateway", gw, section),
        gateway: Some(gw.clone()),
    };
    match target {
        Target::Gateway(gw) | Target::Listener(gw, _) => {
            let section = match target {
                Target::Listener(_, l) => Some(l.as_str()),
                _ => None,
            };
            if !resources.gateways.contains_key(&key(gw)) {
                return Found::Missing(gateway(gw, section), format!("Gateway {gw}"));
            }
            let Some(state) = gateways.iter().find(|g| &g.key == gw) else {
                return Found::Foreign;
            };
            if let Some(l) = section
                && !state
                    .listeners
                    .iter()
                    .any(|x| x.set.is_none() && x.name == l)
            {
                return Found::Missing(
                    gateway(gw, section),
                    format!("listener {l} of Gateway {gw}"),
                );
            }
            Found::Under(vec![gateway(gw, section)])
        }
        Target::ListenerSet(set) | Target::SetListener(set, _) => {
            let own = AncestorKey {
                parent_ref: parent_ref(GATEWAY_GROUP, "ListenerSet", set, None),
                gateway: None,
            };
            if !resources.listener_sets.contains_key(&key(set)) {
                return Found::Missing(own, format!("ListenerSet {set}"));
            }
            let parent = gateways
                .iter()
                .find(|g| g.sets.iter().any(|s| &s.key == set));
            match parent {
                Some(g) => Found::Under(vec![gateway(&g.key, None)]),
                None => Found::Foreign,
            }
        }
        Target::Route(kind, route) | Target::Rule(kind, route, _) => {
            let own = AncestorKey {
                parent_ref: parent_ref(GATEWAY_GROUP, kind, route, None),
                gateway: None,
            };
            // The rule names of the Route, if it exists.
            let rule_names: Option<Vec<&String>> = match *kind {
                "HTTPRoute" => resources.http_routes.get(&key(route)).map(|r| {
                    let rules = r.spec.rules.iter().flatten();
                    rules.filter_map(|r| r.name.as_ref()).collect()
                }),
                _ => resources.grpc_routes.get(&key(route)).map(|r| {
                    let rules = r.spec.rules.iter().flatten();
                    rules.filter_map(|r| r.name.as_ref()).collect()
                }),
            };
            let Some(rule_names) = rule_names else {
                return Found::Missing(own, format!("{kind} {route}"));
            };
            if let Target::Rule(_, _, rule) = target
                && !rule_names.contains(&rule)
            {
                return Found::Missing(own, format!("rule {rule} of {kind} {route}"));
            }
            let statuses = if *kind == "HTTPRoute" {
                routes.http
            } else {
                routes.grpc
            };
            let Some(s) = statuses.get(route) else {
                return Found::Foreign;
            };
            let list = s
                .parents
                .iter()
                .map(|p| {
                    let mut r = p.parent_ref.clone();
                    r.namespace.get_or_insert_with(|| route.namespace.clone());
                    r.group.get_or_insert_with(|| GATEWAY_GROUP.to_string());
                    r.kind.get_or_insert_with(|| "Gateway".to_string());
                    let gw = (r.kind.as_deref() == Some("Gateway")).then(|| {
                        ObjectRef::new(r.namespace.as_deref().unwrap_or_default(), &r.name)
                    });
                    AncestorKey {
                        parent_ref: r,
                        gateway: gw,
                    }
                })
                .collect();
            Found::Under(list)
        }
    }
}

fn parent_ref(group: &str, kind: &str, r: &ObjectRef, section: Option<&str>) -> ParentRef {
    ParentRef {
        group: Some(group.to_string()),
        kind: Some(kind.to_string()),
        namespace: Some(r.namespace.clone()),
        name: r.name.clone(),
        section_name: section.map(str::to_string),
        port: None,
    }
}

/// Accepted (and Overridden) under one ancestor.
fn conditions(e: &Entry, v: &Verdict, overridden: bool) -> Vec<PolicyCondition> {
    use PolicyConditionReason as R;
    let g = e.generation;
    let accepted = if let Some(why) = &e.invalid {
        PolicyCondition::new(
            PolicyConditionType::Accepted,
            false,
            R::Invalid,
            why.clone(),
            g,
        )
    } else if let Some(why) = &v.invalid_target {
        PolicyCondition::new(
            PolicyConditionType::Accepted,
            false,
            R::Invalid,
            why.clone(),
            g,
        )
    } else if v.accepted {
        PolicyCondition::new(
            PolicyConditionType::Accepted,
            true,
            R::Accepted,
            "Policy has been accepted",
            g,
        )
    } else if let Some(by) = &v.conflicted_by {
        PolicyCondition::new(
            PolicyConditionType::Accepted,
            false,
            R::Conflicted,
            format!(
                "SecurityPolicy {by} targets the same object and is older (or first by \
                 namespace/name): this one is not applied there"
            ),
            g,
        )
    } else {
        let what = v.not_found.as_deref().unwrap_or("the target");
        PolicyCondition::new(
            PolicyConditionType::Accepted,
            false,
            R::TargetNotFound,
            format!("{what} does not exist"),
            g,
        )
    };
    let mut out = vec![accepted];
    if e.invalid.is_none()
        && let Some(c) = remote::condition(&e.remote, g)
    {
        out.push(c);
    }
    if overridden {
        out.push(PolicyCondition::new(
            PolicyConditionType::Overridden,
            true,
            R::Overridden,
            "a SecurityPolicy on a narrower target (listener, Route or rule) applies instead \
             on some routes under this Gateway",
            g,
        ));
    }
    out
}

// === Reading a policy ===

fn entry(key: ObjectRef, p: &SecurityPolicy, resources: &Resources, fetched: &RemoteSets) -> Entry {
    let targets = p.spec.target_refs.iter().map(|t| target(&key, t)).collect();
    let mut remote = Vec::new();
    let (policy, invalid) = match access_policy(&key, &p.spec, resources, fetched, &mut remote) {
        Ok(policy) => (policy, None),
        Err(why) => (
            AccessPolicy {
                source: key.to_string(),
                invalid: Some(why.clone()),
                jwt: None,
                api_key: None,
                basic: None,
                authorization: None,
                oidc: None,
            },
            Some(why),
        ),
    };
    Entry {
        generation: p.metadata.generation,
        created: api::creation_time(&p.metadata),
        key,
        policy: Arc::new(policy),
        invalid,
        targets,
        remote,
    }
}

fn target(key: &ObjectRef, t: &api::PolicyTargetRef) -> Result<Target, Box<(ParentRef, String)>> {
    let at = ObjectRef::new(&key.namespace, &t.name);
    let section = t.section_name.clone();
    let refused = || {
        let written = ParentRef {
            group: Some(t.group.clone()),
            kind: Some(t.kind.clone()),
            namespace: Some(key.namespace.clone()),
            name: t.name.clone(),
            section_name: t.section_name.clone(),
            port: None,
        };
        let why = format!(
            "targetRefs: {}/{} cannot be targeted: a SecurityPolicy attaches to a Gateway, \
             ListenerSet, HTTPRoute or GRPCRoute of {GATEWAY_GROUP}",
            if t.group.is_empty() { "core" } else { &t.group },
            t.kind
        );
        Box::new((written, why))
    };
    if t.group != GATEWAY_GROUP {
        return Err(refused());
    }
    Ok(match (t.kind.as_str(), section) {
        ("Gateway", None) => Target::Gateway(at),
        ("Gateway", Some(l)) => Target::Listener(at, l),
        ("ListenerSet", None) => Target::ListenerSet(at),
        ("ListenerSet", Some(l)) => Target::SetListener(at, l),
        ("HTTPRoute", None) => Target::Route("HTTPRoute", at),
        ("HTTPRoute", Some(r)) => Target::Rule("HTTPRoute", at, r),
        ("GRPCRoute", None) => Target::Route("GRPCRoute", at),
        ("GRPCRoute", Some(r)) => Target::Rule("GRPCRoute", at, r),
        _ => return Err(refused()),
    })
}

/// The spec as the data plane enforces it, or why it cannot be (then it fails closed).
fn access_policy(
    key: &ObjectRef,
    spec: &SecurityPolicySpec,
    resources: &Resources,
    fetched: &RemoteSets,
    remote: &mut Vec<RemoteNote>,
) -> Result<AccessPolicy, String> {
    if spec.target_refs.is_empty() {
        return Err("targetRefs is empty".into());
    }
    // Each mechanism, its errors prefixed with its field.
    fn field(name: &'static str) -> impl Fn(String) -> String {
        move |e| format!("{name}.{e}")
    }
    let jwt = spec
        .jwt
        .as_ref()
        .map(|j| authn::jwt(key, j, resources, fetched, remote));
    let jwt = jwt.transpose().map_err(field("jwt"))?;
    let api_key = spec
        .api_key_auth
        .as_ref()
        .map(|k| authn::api_key(key, k, resources));
    let api_key = api_key.transpose().map_err(field("apiKeyAuth"))?;
    let basic = spec
        .basic_auth
        .as_ref()
        .map(|b| authn::basic(key, b, resources));
    let basic = basic.transpose().map_err(field("basicAuth"))?;
    let oidc = spec
        .oidc
        .as_ref()
        .map(|o| oidc::oidc(key, o, resources, fetched, remote).map(Arc::new));
    let oidc = oidc.transpose().map_err(field("oidc"))?;
    let providers: Vec<&str> = jwt
        .iter()
        .flat_map(|j| &j.providers)
        .map(|p| p.name.as_str())
        .collect();
    let authorization = spec
        .authorization
        .as_ref()
        .map(|a| authorization(a, &providers))
        .transpose()?;
    Ok(AccessPolicy {
        source: key.to_string(),
        invalid: None,
        jwt,
        api_key,
        basic,
        authorization,
        oidc,
    })
}

fn authorization(a: &api::Authorization, providers: &[&str]) -> Result<Authorization, String> {
    let default_action = match a.default_action.as_deref() {
        None => Action::Deny,
        Some(s) => action(s).map_err(|e| format!("authorization.defaultAction: {e}"))?,
    };
    let rules = a
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| rule(r, providers).map_err(|e| format!("authorization.rules[{i}].{e}")))
        .collect::<Result<_, _>>()?;
    Ok(Authorization {
        default_action,
        rules,
    })
}

fn action(s: &str) -> Result<Action, String> {
    match s {
        "Allow" => Ok(Action::Allow),
        "Deny" => Ok(Action::Deny),
        other => Err(format!("{other:?} is not Allow or Deny")),
    }
}

fn rule(r: &api::AuthorizationRule, providers: &[&str]) -> Result<AuthorizationRule, String> {
    let action = action(&r.action).map_err(|e| format!("action: {e}"))?;
    let methods = r
        .operation
        .iter()
        .flat_map(|o| &o.methods)
        .map(|m| {
            let ok = !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase());
            ok.then(|| Method::from_bytes(m.as_bytes()).ok())
                .flatten()
                .ok_or_else(|| format!("operation.methods: {m:?} is not an HTTP method"))
        })
        .collect::<Result<_, _>>()?;
    let p = &r.principal;
    let jwt = p
        .jwt
        .as_ref()
        .map(|j| {
            if !providers.contains(&j.provider.as_str()) {
                return Err(format!(
                    "principal.jwt.provider: {:?} is not a provider of this policy's jwt",
                    j.provider
                ));
            }
            Ok(JwtPrincipal {
                provider: j.provider.clone(),
                scopes: j.scopes.clone(),
                claims: j
                    .claims
                    .iter()
                    .map(|c| (c.name.clone(), c.values.clone()))
                    .collect(),
            })
        })
        .transpose()?;
    let client_cidrs = p
        .client_cidrs
        .iter()
        .map(|c| {
            c.parse()
                .map_err(|e| format!("principal.clientCIDRs: {c:?}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let headers = p
        .headers
        .iter()
        .map(|h| {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| format!("principal.headers: {:?} is not a header name", h.name))?;
            if h.values.is_empty() {
                return Err(format!("principal.headers: {} has no values", h.name));
            }
            let values = h
                .values
                .iter()
                .map(|v| {
                    HeaderValue::from_str(v).map_err(|_| {
                        format!("principal.headers: {}: {v:?} is not a header value", h.name)
                    })
                })
                .collect::<Result<_, _>>()?;
            Ok((name, values))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if client_cidrs.is_empty() && headers.is_empty() && jwt.is_none() {
        return Err("principal: give clientCIDRs, headers or jwt".into());
    }
    Ok(AuthorizationRule {
        name: r.name.clone(),
        action,
        methods,
        principal: Principal {
            client_cidrs,
            headers,
            jwt,
        },
    })
}

#[cfg(test)]
mod tests;
