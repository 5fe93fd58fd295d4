//! The policies a route rule carries once translation has resolved and merged them (GEP-713
//! direct attachment; precedence rule > route > listener > Gateway). The data plane reads only
//! this effective policy: a rule without one has `Rule::access == None` and pays one branch.
//!
//! Today: authentication by JSON Web Token, API key and username/password (basic auth), and
//! authorization (Envoy Gateway's `SecurityPolicy.authorization`) by client address, method,
//! request headers and JWT claims. OIDC, external authorization and rate limits join here,
//! each evaluated by `proxy::phase`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Serialize;

use super::ext_auth::ExtAuth;
use super::net::Cidr;
use crate::auth::claims::Claims;
use crate::auth::htpasswd::{Htpasswd, VerifiedCache};
use crate::auth::jwks::Jwks;
use crate::auth::jwt::Validation;
use crate::auth::verified::VerifiedTokens;

pub use crate::auth::remote::RemoteKeys;

/// Who may come in on a rule.
#[derive(Clone, Debug, Serialize)]
pub struct AccessPolicy {
    /// Where the policy came from (`namespace/name` of the policy object), for logs and
    /// `/config`.
    pub source: String,
    /// The policy is invalid (its status says why): every request gets a 500, never a pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    /// JSON Web Tokens (`spec.jwt`); checked before API keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtAuthn>,
    /// API keys (`spec.apiKeyAuth`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<ApiKeyAuthn>,
    /// Username and password (`spec.basicAuth`), verified off the request path's threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicAuthn>,
    /// External authorization (`spec.extAuth`): asked after authentication, before
    /// `authorization` (`proxy::phase::ext_auth`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ext_auth: Option<Arc<ExtAuth>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// A login with an OpenID Provider (`spec.oidc`), on hyper's path (`phase::oidc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc: Option<Arc<super::oidc::OidcAuthn>>,
}

/// `spec.jwt`: a token from the first place that has one, verified by the first provider
/// that accepts it.
#[derive(Clone, Debug, Serialize)]
pub struct JwtAuthn {
    /// A request without a token passes (one with a bad token never does).
    pub optional: bool,
    pub providers: Vec<JwtProvider>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JwtProvider {
    pub name: String,
    /// The keys (from `localJWKS`); never shown.
    #[serde(skip)]
    pub keys: Arc<Jwks>,
    #[serde(skip)]
    pub validation: Validation,
    /// Tokens this provider verified lately (a hit skips the signature).
    #[serde(skip)]
    pub verified: Arc<VerifiedTokens>,
    /// Claims copied into request headers (`a.b` for nested claims).
    #[serde(serialize_with = "claim_headers")]
    pub claim_to_headers: Vec<(HeaderName, String)>,
    /// Where the token is read from, in order.
    pub extract_from: Vec<CredentialSource>,
    /// `remoteJWKS`: where `keys` were fetched from, and who to ask for a fresh set when a
    /// token names a `kid` it lacks (`None`: `localJWKS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteKeys>,
}

/// `spec.apiKeyAuth`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyAuthn {
    /// SHA-256 of each key, to its client ID; the keys themselves are not kept.
    #[serde(skip)]
    pub keys: Arc<HashMap<[u8; 32], String>>,
    pub extract_from: Vec<CredentialSource>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_header")]
    pub forward_client_id_header: Option<HeaderName>,
    /// Remove the key from the request before it goes upstream.
    pub sanitize: bool,
}

/// `spec.basicAuth`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuthn {
    /// The users (from the Secret's `.htpasswd`); never shown.
    #[serde(skip)]
    pub users: Arc<Htpasswd>,
    /// Passwords verified lately, so a client that sends the same credentials on every
    /// request costs one hash per TTL, not one per request.
    #[serde(skip)]
    pub verified: Arc<VerifiedCache>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_header")]
    pub forward_username_header: Option<HeaderName>,
}

/// What checking a request's `Authorization: Basic` came to (done before [`AccessRequest`]
/// is decided on, because it may hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BasicVerdict {
    /// No `Authorization: Basic` header (or not one that parses).
    Missing,
    /// The password is wrong, or the user unknown.
    Refused,
    /// Too many verifications at once: try again later.
    Busy,
    /// This user.
    User(String),
}

/// Where a credential is read from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CredentialSource {
    /// A header; its value must start with `prefix` (`Bearer `), which is removed.
    Header {
        #[serde(serialize_with = "header_name")]
        name: HeaderName,
        prefix: Option<String>,
    },
    Cookie(String),
    /// A query parameter.
    Param(String),
}

/// Who authentication found the client to be.
#[derive(Clone, Debug, Default)]
pub struct Authenticated {
    /// `jwt:<provider>:<sub>`, `apikey:<clientID>`: for the access log.
    pub principal: Option<String>,
    /// The mechanism that authenticated the request (the first that did).
    pub mechanism: Option<Mechanism>,
    /// The provider that verified the token, and its claims.
    pub jwt: Option<(String, Arc<Claims>)>,
}

/// What decided a request's access: the `mechanism` label of
/// `pier_proxy_security_decisions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Jwt,
    ApiKey,
    Basic,
    /// The authorization rules (a 403, or a pass with no authentication).
    Authorization,
    /// The policy itself: invalid (a 500).
    Policy,
    /// An external authorizer (`extAuth`).
    ExtAuth,
    /// A login with an OpenID Provider (`oidc`).
    Oidc,
    /// A policy with nothing to check let the request in.
    None,
}

impl Mechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jwt => "jwt",
            Self::ApiKey => "apiKey",
            Self::Basic => "basic",
            Self::Authorization => "authorization",
            Self::Policy => "policy",
            Self::ExtAuth => "extAuth",
            Self::Oidc => "oidc",
            Self::None => "none",
        }
    }
}

/// What access decisions read of a request.
#[derive(Clone, Copy, Debug)]
pub struct AccessRequest<'r> {
    /// The client address pier derived (trusted proxies, PROXY protocol).
    pub client: IpAddr,
    /// The URI and DNS subjectAltNames of the connection's verified client certificate
    /// (empty without one).
    pub client_sans: &'r [Box<str>],
    pub method: &'r Method,
    /// The request's headers; empty unless [`AccessPolicy::needs_headers`].
    pub headers: &'r HeaderMap,
    /// The query string (API keys and tokens may be parameters).
    pub query: Option<&'r str>,
    /// What authentication found, for JWT principals.
    pub authenticated: Option<&'r Authenticated>,
    /// Basic auth's verdict, when the policy has basic auth (`None`: not checked, refused).
    pub basic: Option<&'r BasicVerdict>,
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
    /// The request carried a token verified by this JWT provider, with these scopes and
    /// claims.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtPrincipal>,
    /// The connection's verified client certificate has one of these URI or DNS
    /// subjectAltNames.
    #[serde(rename = "clientSANs", skip_serializing_if = "Vec::is_empty")]
    pub client_sans: Vec<Box<str>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JwtPrincipal {
    pub provider: String,
    /// Every one of these is in `scope` (or `scp`).
    pub scopes: Vec<String>,
    /// Each claim has one of its values.
    pub claims: Vec<(String, Vec<String>)>,
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

// === impl AccessPolicy ===

impl AccessPolicy {
    /// Whether decisions read request headers (the HTTP/1.1 fast path then builds a map).
    pub fn needs_headers(&self) -> bool {
        self.jwt.is_some()
            || self.api_key.is_some()
            || self.basic.is_some()
            || self.oidc.is_some()
            || self
                .authorization
                .as_ref()
                .is_some_and(|a| a.rules.iter().any(|r| !r.principal.headers.is_empty()))
    }

    /// Whether a request it lets in is changed on its way upstream (claims to headers, the
    /// client ID forwarded, a key removed): the HTTP/1.1 fast path leaves those to hyper's.
    pub fn edits_request(&self) -> bool {
        self.jwt
            .as_ref()
            .is_some_and(|j| j.providers.iter().any(|p| !p.claim_to_headers.is_empty()))
            || self
                .api_key
                .as_ref()
                .is_some_and(|k| k.forward_client_id_header.is_some() || k.sanitize)
            // Basic auth may hash: hyper's path verifies it off the request threads.
            || self.basic.is_some()
            // The authorizer is asked on hyper's path, which can wait for it.
            || self.ext_auth.is_some()
            // The login answers requests itself and calls the token endpoint: hyper's path.
            || self.oidc.is_some()
    }
}

impl AccessPolicy {
    /// Whether a TCP or TLS stream (TCPRoute, TLSRoute) from `client` may pass. A stream has
    /// no request: only its client address (and a verified client certificate's SANs) can be
    /// known, so this fails closed: an invalid policy, or one that authenticates by what only
    /// HTTP carries (JWT, API key, basic auth, OIDC, extAuth), refuses every stream, and an
    /// authorization rule about methods, headers or JWT claims never matches one (its
    /// action does not apply; the next rule or the default decides).
    pub fn admits_stream(&self, client: IpAddr, client_sans: &[Box<str>]) -> bool {
        if self.invalid.is_some()
            || self.jwt.is_some()
            || self.api_key.is_some()
            || self.basic.is_some()
            || self.oidc.is_some()
            || self.ext_auth.is_some()
        {
            return false;
        }
        let Some(authz) = &self.authorization else {
            return true;
        };
        let client = client.to_canonical();
        let found = authz.rules.iter().find(|r| {
            let p = &r.principal;
            r.methods.is_empty()
                && p.jwt.is_none()
                && p.headers.is_empty()
                && p.matches_connection(client, client_sans)
        });
        found.map_or(authz.default_action, |r| r.action) == Action::Allow
    }
}

// === impl Authorization ===

impl Authorization {
    /// The first rule whose operation and principal match the request decides.
    pub fn decide(&self, req: &AccessRequest<'_>) -> Verdict<'_> {
        let client = req.client.to_canonical();
        let found = self.rules.iter().find(|r| {
            (r.methods.is_empty() || r.methods.contains(req.method))
                && r.principal.matches(req, client)
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
    /// `client`: the request's client address, IPv4-mapped addresses as IPv4.
    fn matches(&self, req: &AccessRequest<'_>, client: IpAddr) -> bool {
        if let Some(want) = &self.jwt
            && !want.matches(req.authenticated)
        {
            return false;
        }
        self.matches_connection(client, req.client_sans)
            && self.headers.iter().all(|(name, values)| {
                req.headers
                    .get_all(name)
                    .iter()
                    .any(|sent| values.iter().any(|v| v == sent))
            })
    }
}

impl Principal {
    /// The parts a connection alone decides: its client address (canonical) and its verified
    /// client certificate's SANs.
    fn matches_connection(&self, client: IpAddr, client_sans: &[Box<str>]) -> bool {
        (self.client_cidrs.is_empty() || self.client_cidrs.iter().any(|c| c.contains(client)))
            && (self.client_sans.is_empty()
                || self.client_sans.iter().any(|s| client_sans.contains(s)))
    }
}

impl JwtPrincipal {
    fn matches(&self, authenticated: Option<&Authenticated>) -> bool {
        let Some((provider, claims)) = authenticated.and_then(|a| a.jwt.as_ref()) else {
            return false;
        };
        *provider == self.provider
            && claims.has_scopes(self.scopes.iter().map(String::as_str))
            && self.claims.iter().all(|(name, values)| {
                claims
                    .strings(name)
                    .is_some_and(|have| have.iter().any(|h| values.iter().any(|v| v == h)))
            })
    }
}

fn claim_headers<S: serde::Serializer>(
    list: &[(HeaderName, String)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(list.iter().map(|(h, c)| (h.as_str(), c)))
}

fn header_name<S: serde::Serializer>(h: &HeaderName, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(h.as_str())
}

fn opt_header<S: serde::Serializer>(h: &Option<HeaderName>, s: S) -> Result<S::Ok, S::Error> {
    match h {
        Some(h) => s.serialize_some(h.as_str()),
        None => s.serialize_none(),
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
                jwt: None,
                client_sans: vec![],
            },
        }
    }

    fn decide<'a>(authz: &'a Authorization, ip: &str) -> Verdict<'a> {
        let headers = HeaderMap::new();
        authz.decide(&AccessRequest {
            client: ip.parse().unwrap(),
            client_sans: &[],
            method: &Method::GET,
            headers: &headers,
            query: None,
            authenticated: None,
            basic: None,
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
    fn streams_pass_by_client_address_only_and_fail_closed() {
        let policy = |authorization: Option<Authorization>| AccessPolicy {
            source: "ns/p".into(),
            invalid: None,
            jwt: None,
            api_key: None,
            basic: None,
            ext_auth: None,
            authorization,
            oidc: None,
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut by_method = rule(Action::Allow, &["192.0.2.0/24"]);
        by_method.methods = vec![Method::GET];
        let p = policy(Some(Authorization {
            default_action: Action::Deny,
            rules: vec![by_method, rule(Action::Allow, &["10.0.0.0/8"])],
        }));
        assert!(p.admits_stream(ip("10.1.2.3"), &[]));
        assert!(p.admits_stream(ip("::ffff:10.1.2.3"), &[]));
        // The rule about GET never matches a stream: the default (Deny) decides.
        assert!(!p.admits_stream(ip("192.0.2.7"), &[]));
        assert!(policy(None).admits_stream(ip("192.0.2.7"), &[]));
        let mut invalid = policy(None);
        invalid.invalid = Some("bad".into());
        assert!(!invalid.admits_stream(ip("10.1.2.3"), &[]));
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
                    client_sans: &[],
                    method: &method,
                    headers: &headers,
                    query: None,
                    authenticated: None,
                    basic: None,
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
