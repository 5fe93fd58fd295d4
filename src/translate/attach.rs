//! GEP-713 direct attachment for pier's policy kinds (`SecurityPolicy`, `BackendTrafficPolicy`,
//! `ClientTrafficPolicy`): targets, precedence and `status.ancestors[]`, whatever the policy
//! says. Each kind reads its specs into [`Entry`]s of what the data plane gets (`P`) and
//! indexes them here.
//!
//! ```text
//! entries  ─> index by target; at one target the oldest policy wins, then namespace/name
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

use super::api::{self, GATEWAY_GROUP, Timestamp};
use super::gateway::GatewayState;
use super::resources::Resources;
use super::status::{
    BackendTlsPolicyStatus, HttpRouteStatus, ParentRef, PolicyAncestorStatus, PolicyCondition,
    PolicyConditionReason, PolicyConditionType,
};
use crate::model::ObjectRef;

/// What a policy attaches to (the policy's namespace is the target's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Gateway(ObjectRef),
    Listener(ObjectRef, String),
    ListenerSet(ObjectRef),
    SetListener(ObjectRef, String),
    Route(&'static str, ObjectRef),
    Rule(&'static str, ObjectRef, String),
}

/// One policy object as translation sees it: `P` is what the data plane gets of it.
pub struct Entry<P> {
    pub key: ObjectRef,
    pub generation: Option<i64>,
    pub created: Option<Timestamp>,
    /// What the data plane enforces (an invalid spec: a policy that fails closed).
    pub policy: Arc<P>,
    /// Why the spec is invalid.
    pub invalid: Option<String>,
    /// Each targetRef, or (as written) why it cannot be a target.
    pub targets: Vec<Result<Target, Box<(ParentRef, String)>>>,
    /// Conditions of the kind's own, under every ancestor while the policy is valid.
    pub conditions: Vec<PolicyCondition>,
}

/// What a policy puts in force: its spec as `parsed`, or when the spec is invalid the version in
/// force before (`last`, from the snapshot it replaces), else `inert` (a policy that does
/// nothing, `inert_means` saying what that leaves). The second value is why the spec is
/// invalid, for `Accepted=False`.
pub fn in_force<P>(
    parsed: Result<P, String>,
    last: Option<&Arc<P>>,
    inert: impl FnOnce() -> P,
    inert_means: &str,
) -> (Arc<P>, Option<String>) {
    match (parsed, last) {
        (Ok(p), _) => (Arc::new(p), None),
        (Err(why), Some(last)) => (
            last.clone(),
            Some(format!(
                "{why}; the last valid version of this policy stays in force"
            )),
        ),
        (Err(why), None) => (Arc::new(inert()), Some(format!("{why}; {inert_means}"))),
    }
}

/// Every policy of one kind, indexed by target; records which ones narrower ones replaced.
pub struct Policies<P> {
    /// The kind, for status messages (`SecurityPolicy`).
    kind: &'static str,
    entries: Vec<Entry<P>>,
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

impl<P> Policies<P> {
    /// Indexes the `entries` of one `kind` by target.
    pub fn new(kind: &'static str, mut entries: Vec<Entry<P>>) -> Self {
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
            kind,
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
    ) -> Option<Arc<P>> {
        self.narrowest(gw, listener, Some(at))
    }

    /// The policy of a listener of a Gateway (listener or ListenerSet > Gateway), for kinds
    /// that attach to listeners only. Records the broader ones it replaces as overridden.
    pub fn effective_listener(&mut self, gw: &GatewayState, listener: usize) -> Option<Arc<P>> {
        self.narrowest(gw, listener, None)
    }

    /// Whether some policy targets this very listener (by `sectionName`), not only its Gateway
    /// or ListenerSet.
    pub fn targets_listener(&self, gw: &GatewayState, listener: usize) -> bool {
        let l = &gw.listeners[listener];
        let own = match l.set.map(|s| &gw.sets[s].key) {
            Some(set) => Target::SetListener(set.clone(), l.name.clone()),
            None => Target::Listener(gw.key.clone(), l.name.clone()),
        };
        self.winner.contains_key(&own)
    }

    fn narrowest(
        &mut self,
        gw: &GatewayState,
        listener: usize,
        at: Option<&RuleAt<'_>>,
    ) -> Option<Arc<P>> {
        if self.winner.is_empty() {
            return None;
        }
        let l = &gw.listeners[listener];
        let mut levels = Vec::with_capacity(5);
        if self.any_route_target
            && let Some(at) = at
        {
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
                        conditions: conditions(self.kind, e, &v, overridden),
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
fn conditions<P>(kind: &str, e: &Entry<P>, v: &Verdict, overridden: bool) -> Vec<PolicyCondition> {
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
                "{kind} {by} targets the same object and is older (or first by \
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
    if e.invalid.is_none() {
        out.extend(e.conditions.iter().cloned());
    }
    if overridden {
        out.push(PolicyCondition::new(
            PolicyConditionType::Overridden,
            true,
            R::Overridden,
            format!(
                "a {kind} on a narrower target (listener, Route or rule) applies instead on \
                 some routes under this Gateway"
            ),
            g,
        ));
    }
    out
}

/// What a policy of `kind` may target: `routes`, also HTTPRoutes and GRPCRoutes (and their
/// rules), else Gateways (listeners) and ListenerSets only.
pub fn target(
    kind: &str,
    routes: bool,
    key: &ObjectRef,
    t: &api::PolicyTargetRef,
) -> Result<Target, Box<(ParentRef, String)>> {
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
            "targetRefs: {}/{} cannot be targeted: a {kind} attaches to a Gateway, \
             ListenerSet{} of {GATEWAY_GROUP}",
            if t.group.is_empty() { "core" } else { &t.group },
            t.kind,
            if routes {
                ", HTTPRoute or GRPCRoute"
            } else {
                ""
            },
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
        ("HTTPRoute" | "GRPCRoute", _) if !routes => return Err(refused()),
        ("HTTPRoute", None) => Target::Route("HTTPRoute", at),
        ("HTTPRoute", Some(r)) => Target::Rule("HTTPRoute", at, r),
        ("GRPCRoute", None) => Target::Route("GRPCRoute", at),
        ("GRPCRoute", Some(r)) => Target::Rule("GRPCRoute", at, r),
        _ => return Err(refused()),
    })
}
