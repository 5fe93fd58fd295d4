//! What the status says is wrong, in the log: a Route whose backend is not found, a refused
//! reference, a Route no listener takes, a conflicted policy, unknown fields. Each problem is
//! logged at WARN once, when a publish first reports it, and at INFO when one no longer does;
//! at most [`MAX_LINES`] of each per publish, then one line with the count (`/status` and
//! `pier check` have them all).
//!
//! Read from the rendered status (the JSON `/status` serves), so every kind with status is
//! covered as it is. Listeners are left to the "listener not served" warning.

use std::collections::BTreeMap;

use serde_json::Value;

/// Lines of each sort (new, resolved) logged per publish.
pub const MAX_LINES: usize = 20;

/// One condition that is not as it should be, on one object (and parent or ancestor).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// `HTTPRoute`.
    pub kind: String,
    /// `namespace/name`, or `name` for cluster-scoped kinds.
    pub object: String,
    /// `parent default/gw`, `ancestor default/gw`, or empty for the object's own conditions.
    pub scope: String,
    /// The condition type (`ResolvedRefs`).
    pub condition: String,
    pub reason: String,
}

/// Problems of the last publish, with their messages.
#[derive(Debug, Default)]
pub struct Problems {
    last: BTreeMap<Problem, String>,
}

/// Condition types whose True is the problem (the rest are wrong when False).
const TRUE_IS_WRONG: &[&str] = &[
    "Conflicted",
    "PartiallyInvalid",
    "OverlappingTLSConfig",
    crate::translate::status::UNKNOWN_FIELDS_CONDITION,
];

/// Condition types that report a setting, not a problem, either way.
const NOT_PROBLEMS: &[&str] = &["InsecureFrontendValidationMode", "Overridden"];

/// Every problem `status` (what [`crate::translate::status::Statuses::objects`] renders) reports.
pub fn of(status: &Value) -> BTreeMap<Problem, String> {
    let mut out = BTreeMap::new();
    for o in status.as_array().into_iter().flatten() {
        let kind = o["kind"].as_str().unwrap_or_default();
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let object = match o["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        };
        let s = &o["status"];
        let mut scoped = vec![(String::new(), &s["conditions"])];
        for (list, what, field) in [
            ("parents", "parent", "parentRef"),
            ("ancestors", "ancestor", "ancestorRef"),
        ] {
            for entry in s[list].as_array().into_iter().flatten() {
                scoped.push((
                    format!("{what} {}", reference(&entry[field])),
                    &entry["conditions"],
                ));
            }
        }
        for (scope, conditions) in scoped {
            for c in conditions.as_array().into_iter().flatten() {
                let condition = c["type"].as_str().unwrap_or_default();
                let reason = c["reason"].as_str().unwrap_or_default();
                let is_true = c["status"] == "True";
                if NOT_PROBLEMS.contains(&condition)
                    || is_true != TRUE_IS_WRONG.contains(&condition)
                {
                    continue;
                }
                let problem = Problem {
                    kind: kind.to_string(),
                    object: object.clone(),
                    scope: scope.clone(),
                    condition: condition.to_string(),
                    reason: reason.to_string(),
                };
                let message = c["message"].as_str().unwrap_or_default().to_string();
                out.insert(problem, message);
            }
        }
    }
    out
}

/// A parentRef or ancestorRef as `namespace/name` (with `/section` when it has one).
fn reference(r: &Value) -> String {
    let name = r["name"].as_str().unwrap_or_default();
    let mut s = match r["namespace"].as_str() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    if let Some(section) = r["sectionName"].as_str() {
        s.push('/');
        s.push_str(section);
    }
    s
}

/// `HTTPRoute demo/app (parent edge): ResolvedRefs BackendNotFound`.
impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.object)?;
        if !self.scope.is_empty() {
            write!(f, " ({})", self.scope)?;
        }
        write!(f, ": {} {}", self.condition, self.reason)
    }
}

impl Problems {
    /// Logs what is new in `now` and what is gone since the last publish; keeps `now`.
    /// Returns how many were new and how many resolved.
    pub fn update(&mut self, now: BTreeMap<Problem, String>) -> (usize, usize) {
        let new: Vec<_> = now
            .iter()
            .filter(|(p, _)| !self.last.contains_key(p))
            .collect();
        for (p, message) in new.iter().take(MAX_LINES) {
            tracing::warn!(
                kind = %p.kind,
                object = %p.object,
                scope = %p.scope,
                condition = %p.condition,
                reason = %p.reason,
                "{p}: {message}"
            );
        }
        if new.len() > MAX_LINES {
            tracing::warn!(
                more = new.len() - MAX_LINES,
                "more new problems in the status than logged (GET /status, or pier check, has \
                 them all)"
            );
        }
        let gone: Vec<_> = self.last.keys().filter(|p| !now.contains_key(p)).collect();
        for p in gone.iter().take(MAX_LINES) {
            tracing::info!(
                kind = %p.kind,
                object = %p.object,
                scope = %p.scope,
                condition = %p.condition,
                reason = %p.reason,
                "{p}: resolved"
            );
        }
        if gone.len() > MAX_LINES {
            tracing::info!(
                more = gone.len() - MAX_LINES,
                "more problems resolved than logged"
            );
        }
        let counts = (new.len(), gone.len());
        self.last = now;
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(backend_found: bool) -> Value {
        serde_json::json!([{
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "web", "namespace": "shop"},
            "status": {"parents": [{
                "parentRef": {"name": "gw", "namespace": "infra", "sectionName": "http"},
                "controllerName": "pier.dev/gateway-controller",
                "conditions": [
                    {"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""},
                    if backend_found {
                        serde_json::json!({"type": "ResolvedRefs", "status": "True",
                            "reason": "ResolvedRefs", "message": ""})
                    } else {
                        serde_json::json!({"type": "ResolvedRefs", "status": "False",
                            "reason": "BackendNotFound", "message": "Service shop/api not found"})
                    },
                    {"type": "PartiallyInvalid", "status": "False", "reason": "Accepted",
                        "message": ""}
                ]
            }]}
        }])
    }

    #[test]
    fn a_condition_not_as_it_should_be_is_a_problem() {
        let p = of(&route(false));
        let want = Problem {
            kind: "HTTPRoute".into(),
            object: "shop/web".into(),
            scope: "parent infra/gw/http".into(),
            condition: "ResolvedRefs".into(),
            reason: "BackendNotFound".into(),
        };
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[&want], "Service shop/api not found");
        assert!(of(&route(true)).is_empty());
    }

    #[test]
    fn true_is_wrong_for_conflicts_and_unknown_fields() {
        let v = serde_json::json!([{
            "kind": "Gateway", "metadata": {"name": "gw", "namespace": "infra"},
            "status": {"conditions": [
                {"type": "pier.dev/UnknownFields", "status": "True", "reason": "UnknownFields",
                    "message": "spec.listener"},
                {"type": "InsecureFrontendValidationMode", "status": "True",
                    "reason": "ConfigurationChanged", "message": ""},
                {"type": "Programmed", "status": "True", "reason": "Programmed", "message": ""}
            ]}
        }]);
        let p = of(&v);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p.keys().next().unwrap().condition, "pier.dev/UnknownFields");
    }

    #[test]
    fn each_problem_is_new_once_and_resolved_once() {
        let mut problems = Problems::default();
        assert_eq!(problems.update(of(&route(false))), (1, 0));
        // The same problem on the next publish: nothing new to say.
        assert_eq!(problems.update(of(&route(false))), (0, 0));
        assert_eq!(problems.update(of(&route(true))), (0, 1));
        assert_eq!(problems.update(of(&route(true))), (0, 0));
    }
}
