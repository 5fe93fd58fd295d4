//! The policies a route rule carries once translation has resolved and merged them (GEP-713
//! direct attachment; precedence rule > route > listener > Gateway). The data plane reads only
//! this effective policy: a rule without one has `Rule::access == None` and pays one branch.
//!
//! Today: authorization by client address (Envoy Gateway's `SecurityPolicy.authorization`
//! with `principal.clientCIDRs`). Authentication (JWT, OIDC, basic, API keys, external
//! authorization) and rate limits join here, each evaluated by `proxy::phase`.

use std::net::IpAddr;

use serde::Serialize;

use super::net::Cidr;

/// Who may come in on a rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AccessPolicy {
    /// Where the policy came from (`namespace/name` of the policy object), for logs and
    /// `/config`.
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
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
    pub principal: Principal,
}

/// Who a rule is about. A principal with several parts matches only when each part does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    /// The client address (the one pier derives: the connection's, the PROXY protocol's, or
    /// a trusted `X-Forwarded-For` chain's) is in one of these. Translation refuses an empty
    /// principal.
    pub client_cidrs: Vec<Cidr>,
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

impl Authorization {
    /// The first rule whose principal matches `client` decides.
    pub fn decide(&self, client: IpAddr) -> Verdict<'_> {
        let client = client.to_canonical();
        match self.rules.iter().find(|r| r.principal.matches(client)) {
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
    fn matches(&self, client: IpAddr) -> bool {
        self.client_cidrs.iter().any(|c| c.contains(client))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(action: Action, cidrs: &[&str]) -> AuthorizationRule {
        AuthorizationRule {
            name: None,
            action,
            principal: Principal {
                client_cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            },
        }
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
        let at = |ip: &str| authz.decide(ip.parse().unwrap()).action;
        assert_eq!(
            at("10.1.2.3"),
            Action::Deny,
            "the first rule, though the second matches too"
        );
        assert_eq!(at("10.2.0.1"), Action::Allow);
        assert_eq!(at("2001:db8::1"), Action::Allow);
        assert_eq!(at("192.0.2.1"), Action::Deny, "no rule: the default");
        assert!(authz.decide("192.0.2.1".parse().unwrap()).rule.is_none());
    }

    #[test]
    fn an_ipv4_mapped_client_matches_its_ipv4_network() {
        let authz = Authorization {
            default_action: Action::Deny,
            rules: vec![rule(Action::Allow, &["127.0.0.0/8"])],
        };
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(authz.decide(mapped).action, Action::Allow);
    }
}
