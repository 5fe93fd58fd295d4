//! SecurityPolicy (`pier.dev/v1alpha1`) ─> the effective [`AccessPolicy`] of each (Gateway,
//! listener, Route, rule), and the policies' GEP-713 status (`super::attach`).
//!
//! ```text
//! policies ─> parse each spec (invalid: the policy fails closed, every request a 500)
//!          ─> attach::Policies: targets, precedence, status
//! ```

use std::sync::Arc;

use http::{HeaderName, HeaderValue, Method};

use super::api::{self, SecurityPolicy, SecurityPolicySpec};
use super::attach::{self, Entry};
use super::backends::Backends;
use super::ext_auth;
use super::resources::Resources;
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

/// Every SecurityPolicy of `resources`, attached.
pub type Policies = attach::Policies<AccessPolicy>;

/// Reads every SecurityPolicy of `resources`; their authorizers' Services (`extAuth`)
/// resolve through `backends`, `remoteJWKS` keys and OIDC discovery come from `fetched`.
pub fn policies(
    resources: &Resources,
    backends: &mut Backends<'_>,
    fetched: &RemoteSets,
) -> Policies {
    let entries = resources
        .security_policies
        .iter()
        .map(|((ns, name), p)| {
            let key = ObjectRef::new(ns, name);
            entry(key, p, resources, backends, fetched)
        })
        .collect();
    Policies::new("SecurityPolicy", entries)
}

// === Reading a policy ===

fn entry(
    key: ObjectRef,
    p: &SecurityPolicy,
    resources: &Resources,
    backends: &mut Backends<'_>,
    fetched: &RemoteSets,
) -> Entry<AccessPolicy> {
    let targets = p.spec.target_refs.iter();
    let targets = targets
        .map(|t| attach::target("SecurityPolicy", true, &key, t))
        .collect();
    let mut remote = Vec::new();
    let (policy, invalid) =
        match access_policy(&key, &p.spec, resources, backends, fetched, &mut remote) {
            Ok(policy) => (policy, None),
            Err(why) => (
                AccessPolicy {
                    source: key.to_string(),
                    invalid: Some(why.clone()),
                    jwt: None,
                    api_key: None,
                    basic: None,
                    authorization: None,
                    ext_auth: None,
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
        // While the policy is valid: how its fetched documents stand (`pier.dev/RemoteJWKS`).
        conditions: remote::condition(&remote, p.metadata.generation)
            .into_iter()
            .collect(),
    }
}

/// The spec as the data plane enforces it, or why it cannot be (then it fails closed).
fn access_policy(
    key: &ObjectRef,
    spec: &SecurityPolicySpec,
    resources: &Resources,
    backends: &mut Backends<'_>,
    fetched: &RemoteSets,
    remote: &mut Vec<remote::RemoteNote>,
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
    let ext_auth = spec
        .ext_auth
        .as_ref()
        .map(|e| ext_auth::ext_auth(key, e, backends).map(Arc::new));
    let ext_auth = ext_auth.transpose().map_err(field("extAuth"))?;
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
        ext_auth,
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
    if let Some(empty) = p.client_sans.iter().find(|s| s.is_empty()) {
        return Err(format!("principal.clientSANs: {empty:?} is empty"));
    }
    if client_cidrs.is_empty() && headers.is_empty() && jwt.is_none() && p.client_sans.is_empty() {
        return Err("principal: give clientCIDRs, clientSANs, headers or jwt".into());
    }
    Ok(AuthorizationRule {
        name: r.name.clone(),
        action,
        methods,
        principal: Principal {
            client_cidrs,
            headers,
            jwt,
            client_sans: p
                .client_sans
                .iter()
                .map(|s| Box::from(s.as_str()))
                .collect(),
        },
    })
}

#[cfg(test)]
mod tests;
