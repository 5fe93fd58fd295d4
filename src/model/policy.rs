//! The policies a route rule carries once translation has resolved and merged them (GEP-713
//! direct attachment; precedence rule > route > listener > Gateway). The data plane reads only
//! this effective policy: a rule without one has `Rule::access == None` and pays one branch.
//!
//! Today: authorization (Envoy Gateway's `SecurityPolicy.authorization`) by client address,
//! method and request headers. Authentication (JWT, OIDC, basic, API keys, external
//! authorization) and rate limits join here, each evaluated by `proxy::phase`.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Serialize;

use super::net::Cidr;

/// Who may come in on a rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AccessPolicy {
    /// Where the policy came from (`namespace/name` of the policy object), for logs and
    /// `/config`.
    pub source: String,
    /// The policy is invalid (its status says why): every request gets a 500, never a pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
}

/// What access decisions read of a request.
#[derive(Clone, Copy, Debug)]
pub struct AccessRequest<'r> {
    /// The client address pier derived (trusted proxies, PROXY protocol).
    pub client: IpAddr,
    pub method: &'r Method,
    /// The request's headers; empty unless [`AccessPolicy::needs_headers`].
    pub headers: &'r HeaderMap,
}

/// Authorization rules: the first rule whose principal matches decides; none matching, the
/// default action does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    pub default_action: Action,
    pub rules: Vec<AuthorizationRule>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuthorizationRule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: Action,
    /// The methods the rule is about (`operation.methods`); empty: any.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "methods")]
    pub methods: Vec<Method>,
    pub principal: Principal,
}

/// Who a rule is about. A principal with several parts matches only when each part does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    /// The client address (the one pier derives: the connection's, the PROXY protocol's, or
    /// a trusted `X-Forwarded-For` chain's) is in one of these (any, when empty).
    /// Translation refuses a principal with no part at all.
    pub client_cidrs: Vec<Cidr>,
    /// Each header named has one of its values (a header sent several times: any of them).
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "header_principals"
    )]
    pub headers: Vec<(HeaderName, Vec<HeaderValue>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Action {
    Allow,
    Deny,
}

/// What authorization decided, and which rule decided it (`None`: the default action).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict<'a> {
    pub action: Action,
    pub rule: Option<&'a AuthorizationRule>,
}

// === impl Authorization ===

impl AccessPolicy {
    /// Whether decisions read request headers (the HTTP/1.1 fast path then builds a map).
    pub fn needs_headers(&self) -> bool {
        self.authorization
            .as_ref()
            .is_some_and(|a| a.rules.iter().any(|r| !r.principal.headers.is_empty()))
    }
}

impl Authorization {
    /// The first rule whose operation and principal match the request decides.
    pub fn decide(&self, req: &AccessRequest<'_>) -> Verdict<'_> {
        let client = req.client.to_canonical();
        let found = self.rules.iter().find(|r| {
            (r.methods.is_empty() || r.methods.contains(req.method))
                && r.principal.matches(client, req.headers)
        });
        match found {
            Some(rule) => Verdict {
                action: rule.action,
                rule: Some(rule),
            },
            None => Verdict {
                action: self.default_action,
                rule: None,
            },
        }
    }
}

impl Principal {
    fn matches(&self, client: IpAddr, headers: &HeaderMap) -> bool {
        (self.client_cidrs.is_empty() || self.client_cidrs.iter().any(|c| c.contains(client)))
            && self.headers.iter().all(|(name, values)| {
                headers
                    .get_all(name)
                    .iter()
                    .any(|sent| values.iter().any(|v| v == sent))
            })
    }
}

fn methods<S: serde::Serializer>(methods: &[Method], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(methods.iter().map(Method::as_str))
}

fn header_principals<S: serde::Serializer>(
    headers: &[(HeaderName, Vec<HeaderValue>)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(headers.iter().map(|(name, values)| {
        let values: Vec<&str> = values.iter().map(|v| v.to_str().unwrap_or("")).collect();
        (name.as_str(), values)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(action: Action, cidrs: &[&str]) -> AuthorizationRule {
        AuthorizationRule {
            name: None,
            action,
            methods: vec![],
            principal: Principal {
                client_cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
                headers: vec![],
            },
        }
    }

    fn decide<'a>(authz: &'a Authorization, ip: &str) -> Verdict<'a> {
        let headers = HeaderMap::new();
        authz.decide(&AccessRequest {
            client: ip.parse().unwrap(),
            method: &Method::GET,
            headers: &headers,
        })
    }

    #[test]
    fn the_first_matching_rule_decides_else_the_default() {
        let authz = Authorization {
            default_action: Action::Deny,
            rules: vec![
                rule(Action::Deny, &["10.1.0.0/16"]),
                rule(Action::Allow, &["10.0.0.0/8", "2001:db8::/32"]),
            ],
        };
        let at = |ip: &str| decide(&authz, ip).action;
        assert_eq!(
            at("10.1.2.3"),
            Action::Deny,
            "the first rule, though the second matches too"
        );
        assert_eq!(at("10.2.0.1"), Action::Allow);
        assert_eq!(at("2001:db8::1"), Action::Allow);
        assert_eq!(at("192.0.2.1"), Action::Deny, "no rule: the default");
        assert!(decide(&authz, "192.0.2.1").rule.is_none());
    }

    #[test]
    fn an_ipv4_mapped_client_matches_its_ipv4_network() {
        let authz = Authorization {
            default_action: Action::Deny,
            rules: vec![rule(Action::Allow, &["127.0.0.0/8"])],
        };
        assert_eq!(decide(&authz, "::ffff:127.0.0.1").action, Action::Allow);
    }

    #[test]
    fn methods_and_headers_narrow_a_rule() {
        let mut r = rule(Action::Allow, &[]);
        r.methods = vec![Method::GET, Method::HEAD];
        r.principal.headers = vec![(
            HeaderName::from_static("x-team"),
            vec![HeaderValue::from_static("ops")],
        )];
        let authz = Authorization {
            default_action: Action::Deny,
            rules: vec![r],
        };
        let at = |method: Method, team: Option<&'static str>| {
            let mut headers = HeaderMap::new();
            if let Some(t) = team {
                headers.append("x-team", HeaderValue::from_static("dev"));
                headers.append("x-team", HeaderValue::from_static(t));
            }
            authz
                .decide(&AccessRequest {
                    client: "192.0.2.1".parse().unwrap(),
                    method: &method,
                    headers: &headers,
                })
                .action
        };
        assert_eq!(
            at(Method::GET, Some("ops")),
            Action::Allow,
            "any of its values"
        );
        assert_eq!(
            at(Method::POST, Some("ops")),
            Action::Deny,
            "another method"
        );
        assert_eq!(at(Method::GET, Some("qa")), Action::Deny, "another value");
        assert_eq!(at(Method::GET, None), Action::Deny, "no header");
    }
}
