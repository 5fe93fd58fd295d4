//! Gateway API's `XBackendTrafficPolicy` (`gateway.networking.x-k8s.io/v1alpha1`, GEP-3388,
//! v1.7 experimental): a Service's retry budget. `retryConstraint.budget {percent, interval}`
//! and `minRetryRate {count, interval}` replace pier's default budget for the Service's
//! backends, and once the budget is spent a retry is not sent and the client gets 503.
//!
//! ```text
//! targetRefs (core Service, the policy's namespace) ─> the oldest policy per Service wins
//!   (the others Conflicted) ─> Backends::service_port: Backend.retry_constraint
//! status: one ancestor per Gateway whose routes reach the Service (GEP-713)
//! ```
//!
//! `sessionPersistence` (v1.6's and v1.7's shapes; deprecated in v1.7 for XBackend) is the
//! session persistence of every rule whose backendRefs all reach Services of that one policy
//! and that has none of its own (the route's wins).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::api::{self, XBackendTrafficPolicy, XBackendTrafficPolicyRetryConstraint};
use super::resources::Resources;
use super::status::{
    BackendTlsPolicyStatus, PolicyCondition, PolicyConditionReason, PolicyConditionType,
};
use crate::model::ObjectRef;
use crate::model::retry::{RetryBudgetConfig, RetryConstraint};
use crate::model::session::SessionPolicy;

/// What a policy says, once read.
#[derive(Debug)]
struct Read {
    /// `Err`: invalid (the message); the Service keeps pier's default budget.
    constraint: Result<Option<RetryConstraint>, String>,
    /// `Err`: invalid (the message); rules keep their own (or none).
    session: Result<Option<SessionPolicy>, String>,
    notes: Vec<String>,
}

impl Read {
    /// Nothing of an invalid policy applies (its status says Invalid).
    fn valid(&self) -> bool {
        self.constraint.is_ok() && self.session.is_ok()
    }
}

/// The policies, by the Service they apply to, and where they applied.
#[derive(Debug, Default)]
pub struct XPolicies {
    /// Service -> the policy in force (the oldest naming it).
    by_service: BTreeMap<ObjectRef, ObjectRef>,
    read: BTreeMap<ObjectRef, Read>,
    /// Policy -> the older policy that won its Service.
    conflicted: BTreeMap<ObjectRef, ObjectRef>,
    /// Policy -> the Gateways whose routes reach its Service (its ancestors).
    used: BTreeMap<ObjectRef, BTreeSet<ObjectRef>>,
}

impl XPolicies {
    pub fn new(resources: &Resources) -> Self {
        let mut out = Self::default();
        let mut policies: Vec<(&XBackendTrafficPolicy, ObjectRef)> = resources
            .x_backend_traffic_policies
            .iter()
            .map(|((ns, name), p)| (p, ObjectRef::new(ns, name)))
            .collect();
        // Oldest first, then by namespace/name (GEP-713's tie-break).
        policies.sort_by(|a, b| {
            (api::creation_time(&a.0.metadata), &a.1)
                .cmp(&(api::creation_time(&b.0.metadata), &b.1))
        });
        for (p, key) in policies {
            let mut notes = Vec::new();
            for (i, t) in p.spec.target_refs.iter().enumerate() {
                if !t.group.is_empty() || t.kind != "Service" {
                    notes.push(format!(
                        "targetRefs[{i}]: {} is not a kind pier applies it to (core/Service)",
                        super::group_kind(&t.group, &t.kind)
                    ));
                    continue;
                }
                let service = ObjectRef::new(&key.namespace, &t.name);
                match out.by_service.get(&service) {
                    Some(winner) if *winner != key => {
                        out.conflicted.insert(key.clone(), winner.clone());
                    }
                    Some(_) => {}
                    None => {
                        out.by_service.insert(service, key.clone());
                    }
                }
            }
            let constraint = p.spec.retry_constraint.as_ref().map(constraint).transpose();
            let session = (p.spec.session_persistence.as_ref())
                .map(|s| session(s, &key))
                .transpose();
            out.read.insert(
                key,
                Read {
                    constraint,
                    session,
                    notes,
                },
            );
        }
        out
    }

    /// The retry constraint of `service`'s backends, noting that `gateway`'s routes reach it.
    pub fn retry_constraint(
        &mut self,
        service: &ObjectRef,
        gateway: Option<&ObjectRef>,
    ) -> Option<RetryConstraint> {
        let policy = self.by_service.get(service)?;
        if let Some(gw) = gateway {
            (self.used.entry(policy.clone()).or_default()).insert(gw.clone());
        }
        let read = self.read.get(policy).filter(|r| r.valid())?;
        read.constraint.clone().ok().flatten()
    }

    /// The session persistence of a rule whose backendRefs reach `services`: that of their
    /// policy when all have the same one with `sessionPersistence`.
    pub fn session_for<'s>(
        &self,
        mut services: impl Iterator<Item = &'s ObjectRef>,
    ) -> Option<SessionPolicy> {
        let first = self.by_service.get(services.next()?)?;
        if !services.all(|s| self.by_service.get(s) == Some(first)) {
            return None;
        }
        let read = self.read.get(first).filter(|r| r.valid())?;
        read.session.clone().ok().flatten()
    }

    /// GEP-713 status: for each policy in force somewhere, one ancestor per Gateway where it
    /// applied; a policy that lost its Service to an older one, Conflicted under the winner's
    /// Gateways.
    pub fn statuses(
        &self,
        resources: &Resources,
        controller_name: &str,
    ) -> BTreeMap<ObjectRef, BackendTlsPolicyStatus> {
        use PolicyConditionReason as R;
        use PolicyConditionType as T;
        let mut out = BTreeMap::new();
        let generation = |key: &ObjectRef| {
            (resources.x_backend_traffic_policies)
                .get(&(key.namespace.clone(), key.name.clone()))
                .and_then(|p| p.metadata.generation)
        };
        for (key, read) in &self.read {
            let (gateways, condition) = match self.conflicted.get(key) {
                Some(winner) => (
                    self.used.get(winner),
                    (
                        false,
                        R::Conflicted,
                        format!("XBackendTrafficPolicy {winner} is older and targets the Service"),
                    ),
                ),
                None => {
                    let invalid = (read.constraint.as_ref().err()).or(read.session.as_ref().err());
                    let condition = match invalid {
                        Some(why) => (false, R::Invalid, why.clone()),
                        None if read.notes.is_empty() => {
                            (true, R::Accepted, "Policy is accepted".to_string())
                        }
                        None => (
                            true,
                            R::Accepted,
                            format!("Policy is accepted; {}", read.notes.join("; ")),
                        ),
                    };
                    (self.used.get(key), condition)
                }
            };
            let Some(gateways) = gateways else { continue };
            let g = generation(key);
            let ancestors = gateways
                .iter()
                .map(|gw| {
                    let (ok, reason, message) = condition.clone();
                    let c = PolicyCondition::new(T::Accepted, ok, reason, message, g);
                    super::backend_tls::ancestor(gw, controller_name, vec![c])
                })
                .collect();
            out.insert(
                key.clone(),
                BackendTlsPolicyStatus {
                    generation: g,
                    ancestors,
                },
            );
        }
        out
    }
}

/// `sessionPersistence`, read as a route rule's is (the cookie's default name from the
/// policy's).
fn session(
    sp: &api::XBackendTrafficPolicySessionPersistence,
    policy: &ObjectRef,
) -> Result<SessionPolicy, String> {
    // The same fields as a route rule's: read by the same code.
    let rule: api::HttpRouteRulesSessionPersistence = serde_json::to_value(sp)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("sessionPersistence: {e}"))?;
    super::session_policy::rule_session(&rule, policy, 0)
        .map_err(|e| format!("sessionPersistence: {e}"))
}

/// `retryConstraint`, with the API's defaults (20 % over 10 s; at least 10 retries a second).
fn constraint(c: &XBackendTrafficPolicyRetryConstraint) -> Result<RetryConstraint, String> {
    let mut budget = RetryBudgetConfig::default();
    if let Some(b) = &c.budget {
        if let Some(p) = b.percent {
            budget.percent = u32::try_from(p)
                .ok()
                .filter(|p| *p <= 100)
                .ok_or_else(|| format!("retryConstraint.budget.percent: {p} is not 0-100"))?;
        }
        if let Some(i) = &b.interval {
            budget.window = interval(i, "retryConstraint.budget.interval")?;
        }
    }
    if let Some(m) = &c.min_retry_rate {
        if let Some(n) = m.count {
            budget.min_retries = u32::try_from(n)
                .ok()
                .filter(|n| (1..=1_000_000).contains(n))
                .ok_or_else(|| {
                    format!("retryConstraint.minRetryRate.count: {n} is not 1-1000000")
                })?;
        }
        if let Some(i) = &m.interval {
            budget.min_interval = interval(i, "retryConstraint.minRetryRate.interval")?;
        }
    }
    Ok(RetryConstraint { budget })
}

/// A Gateway API duration of 1 s to 1 h, in whole seconds (pier's budget counts per second:
/// a fraction is rounded up).
fn interval(value: &str, field: &str) -> Result<Duration, String> {
    let d = api::duration(value)
        .ok_or_else(|| format!("{field}: {value:?} is not a Gateway API duration"))?;
    if d.is_zero() || d > Duration::from_secs(3600) {
        return Err(format!("{field}: {value} is not within 1s-1h"));
    }
    Ok(Duration::from_secs(
        d.as_secs() + u64::from(d.subsec_nanos() > 0),
    ))
}

#[cfg(test)]
mod tests;
