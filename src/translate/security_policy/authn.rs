//! A SecurityPolicy's authentication (`jwt`, `apiKeyAuth`) as the data plane enforces it:
//! key sets parsed and checked, Secrets read and reduced to what is compared (the SHA-256 of
//! each API key), header names checked. Errors name the field (`providers[0].localJWKS: ...`)
//! and never a secret.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderName;

use super::super::api::{self, ApiKeyAuth, BasicAuth, Jwt, JwtProvider as ApiJwtProvider};
use super::super::refs::security_policy_may_refer;
use super::super::resources::Resources;
use super::remote::{self, FetchState, RemoteNote};
use crate::auth::htpasswd::{Htpasswd, VerifiedCache};
use crate::auth::jwks::Jwks;
use crate::auth::jwt::Validation;
use crate::auth::remote::RemoteSets;
use crate::auth::verified::VerifiedTokens;

/// Verified tokens remembered per JWT provider, and for how long at most.
const VERIFIED_TOKENS: usize = 10_000;
const VERIFIED_TOKEN_TTL_SECS: u64 = 300;
use crate::model::ObjectRef;
use crate::model::policy::{ApiKeyAuthn, BasicAuthn, CredentialSource, JwtAuthn, JwtProvider};
use k8s_openapi::api::core::v1::Secret;

/// The key a ConfigMap referenced by `localJWKS.valueRef` holds the set under.
pub const JWKS_KEY: &str = "jwks";

pub fn jwt(
    key: &ObjectRef,
    j: &Jwt,
    resources: &Resources,
    fetched: &RemoteSets,
    notes: &mut Vec<RemoteNote>,
) -> Result<JwtAuthn, String> {
    if j.providers.is_empty() {
        return Err("providers is empty".into());
    }
    let mut names = Vec::new();
    let providers = j
        .providers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if p.name.is_empty() || names.contains(&p.name.as_str()) {
                return Err(format!("providers[{i}].name: empty or used twice"));
            }
            names.push(p.name.as_str());
            let (provider, state) =
                provider(key, p, resources, fetched).map_err(|e| format!("providers[{i}].{e}"))?;
            if let (Some(state), Some(remote)) = (state, &provider.remote) {
                notes.push(RemoteNote {
                    what: format!("providers[{i}] ({}) {}", p.name, remote.uri),
                    state,
                });
            }
            Ok(provider)
        })
        .collect::<Result<_, _>>()?;
    Ok(JwtAuthn {
        optional: j.optional.unwrap_or(false),
        providers,
    })
}

fn provider(
    key: &ObjectRef,
    p: &ApiJwtProvider,
    resources: &Resources,
    fetched: &RemoteSets,
) -> Result<(JwtProvider, Option<FetchState>), String> {
    let (keys, remote, state) = match (&p.local_jwks, &p.remote_jwks) {
        (Some(local), None) => (Arc::new(local_jwks(key, local, resources)?), None, None),
        (None, Some(r)) => {
            let (keys, remote, state) = remote::keys(r, fetched)?;
            (keys, Some(remote), Some(state))
        }
        _ => return Err("give exactly one of localJWKS and remoteJWKS".into()),
    };
    let claim_to_headers = p
        .claim_to_headers
        .iter()
        .map(|c| {
            let h = HeaderName::from_bytes(c.header.as_bytes())
                .map_err(|_| format!("claimToHeaders: {:?} is not a header name", c.header))?;
            if c.claim.is_empty() {
                return Err("claimToHeaders: a claim name is empty".to_string());
            }
            Ok((h, c.claim.clone()))
        })
        .collect::<Result<_, String>>()?;
    let extract_from = match &p.extract_from {
        None => vec![CredentialSource::Header {
            name: http::header::AUTHORIZATION,
            prefix: Some("Bearer ".into()),
        }],
        Some(e) => {
            let mut out = Vec::new();
            for h in &e.headers {
                out.push(CredentialSource::Header {
                    name: header_name(&h.name, "extractFrom.headers")?,
                    prefix: h.value_prefix.clone(),
                });
            }
            out.extend(e.cookies.iter().cloned().map(CredentialSource::Cookie));
            out.extend(e.params.iter().cloned().map(CredentialSource::Param));
            if out.is_empty() {
                return Err("extractFrom: names no header, cookie or parameter".into());
            }
            out
        }
    };
    let provider = JwtProvider {
        name: p.name.clone(),
        keys,
        validation: Validation {
            issuer: p.issuer.clone(),
            audiences: p.audiences.clone(),
            ..Validation::default()
        },
        verified: Arc::new(VerifiedTokens::new(
            VERIFIED_TOKENS,
            VERIFIED_TOKEN_TTL_SECS,
        )),
        claim_to_headers,
        extract_from,
        remote,
    };
    Ok((provider, state))
}

fn local_jwks(key: &ObjectRef, l: &api::LocalJwks, resources: &Resources) -> Result<Jwks, String> {
    let text = match (l.type_.as_str(), &l.inline, &l.value_ref) {
        ("Inline", Some(inline), _) => inline.clone(),
        ("ValueRef", _, Some(r)) => {
            if !matches!(r.kind.as_deref(), None | Some("ConfigMap"))
                || !matches!(r.group.as_deref(), None | Some(""))
            {
                return Err("localJWKS.valueRef: only a ConfigMap can hold the set".into());
            }
            let cm = resources
                .config_maps
                .get(&(key.namespace.clone(), r.name.clone()))
                .ok_or_else(|| {
                    format!(
                        "localJWKS.valueRef: ConfigMap {}/{} not found",
                        key.namespace, r.name
                    )
                })?;
            cm.data
                .as_ref()
                .and_then(|d| d.get(JWKS_KEY))
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "localJWKS.valueRef: ConfigMap {}/{} has no key {JWKS_KEY}",
                        key.namespace, r.name
                    )
                })?
        }
        ("Inline", None, _) => return Err("localJWKS: type Inline needs inline".into()),
        ("ValueRef", _, None) => return Err("localJWKS: type ValueRef needs valueRef".into()),
        (other, _, _) => {
            return Err(format!(
                "localJWKS.type: {other:?} is not Inline or ValueRef"
            ));
        }
    };
    Jwks::parse(text.as_bytes()).map_err(|e| format!("localJWKS: {e}"))
}

pub fn api_key(
    key: &ObjectRef,
    k: &ApiKeyAuth,
    resources: &Resources,
) -> Result<ApiKeyAuthn, String> {
    if k.credential_refs.is_empty() {
        return Err("credentialRefs is empty".into());
    }
    let mut keys: HashMap<[u8; 32], String> = HashMap::new();
    for (i, r) in k.credential_refs.iter().enumerate() {
        let at = format!("credentialRefs[{i}]");
        let (secret, _) = secret(key, r, &at, resources)?;
        for (client, value) in secret.data.iter().flatten() {
            if value.0.is_empty() {
                return Err(format!("{at}: the key of client {client:?} is empty"));
            }
            let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &value.0);
            let digest: [u8; 32] = digest.as_ref().try_into().expect("SHA-256 is 32 bytes");
            if let Some(other) = keys.insert(digest, client.clone())
                && other != *client
            {
                return Err(format!(
                    "{at}: clients {other:?} and {client:?} have the same key"
                ));
            }
        }
    }
    if keys.is_empty() {
        return Err("credentialRefs: the Secrets hold no key".into());
    }
    let mut extract_from = Vec::new();
    for e in &k.extract_from {
        for h in &e.headers {
            extract_from.push(CredentialSource::Header {
                name: header_name(h, "extractFrom.headers")?,
                prefix: None,
            });
        }
        extract_from.extend(e.params.iter().cloned().map(CredentialSource::Param));
        extract_from.extend(e.cookies.iter().cloned().map(CredentialSource::Cookie));
    }
    if extract_from.is_empty() {
        return Err("extractFrom: names no header, parameter or cookie".into());
    }
    let sanitize = k.sanitize.unwrap_or(false);
    if sanitize
        && extract_from
            .iter()
            .any(|s| !matches!(s, CredentialSource::Header { .. }))
    {
        return Err(
            "sanitize: this version of pier removes keys from headers only; read the key from \
             a header, or leave sanitize off"
                .into(),
        );
    }
    let forward_client_id_header = k
        .forward_client_id_header
        .as_deref()
        .map(|h| header_name(h, "forwardClientIDHeader"))
        .transpose()?;
    Ok(ApiKeyAuthn {
        keys: Arc::new(keys),
        extract_from,
        forward_client_id_header,
        sanitize,
    })
}

/// The key of the Secret `basicAuth.users` names that holds the users.
pub const HTPASSWD_KEY: &str = ".htpasswd";

/// How long a verified password is taken as verified (no hash).
const VERIFIED_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// At most this many verified passwords are remembered per policy.
const VERIFIED_CAPACITY: usize = 10_000;

pub fn basic(key: &ObjectRef, b: &BasicAuth, resources: &Resources) -> Result<BasicAuthn, String> {
    let r = &b.users;
    let (secret, ns) = secret(key, r, "users", resources)?;
    let text = secret
        .data
        .as_ref()
        .and_then(|d| d.get(HTPASSWD_KEY))
        .ok_or_else(|| format!("users: Secret {ns}/{} has no key {HTPASSWD_KEY}", r.name))?;
    let text =
        std::str::from_utf8(&text.0).map_err(|_| format!("users: {HTPASSWD_KEY} is not UTF-8"))?;
    // The error names the line and the user, never the hash.
    let users = Htpasswd::parse(text).map_err(|e| format!("users: {HTPASSWD_KEY}: {e}"))?;
    let forward_username_header = b
        .forward_username_header
        .as_deref()
        .map(|h| header_name(h, "forwardUsernameHeader"))
        .transpose()?;
    Ok(BasicAuthn {
        users: Arc::new(users),
        verified: Arc::new(VerifiedCache::new(VERIFIED_TTL, VERIFIED_CAPACITY)),
        forward_username_header,
    })
}

/// The Secret `r` (at field `at`) names, and its namespace: the policy's own, or another
/// whose ReferenceGrant lets SecurityPolicies of the policy's namespace refer to it.
fn secret<'r>(
    key: &ObjectRef,
    r: &api::SecretObjectReference,
    at: &str,
    resources: &'r Resources,
) -> Result<(&'r Secret, &'r str), String> {
    if !matches!(r.kind.as_deref(), None | Some("Secret"))
        || !matches!(r.group.as_deref(), None | Some(""))
    {
        return Err(format!("{at}: only a Secret can be referred to here"));
    }
    let ns = r.namespace.as_deref().unwrap_or(&key.namespace);
    security_policy_may_refer(resources, &key.namespace, "Secret", ns, &r.name)
        .map_err(|e| format!("{at}: {e}"))?;
    resources
        .secrets
        .get_key_value(&(ns.to_string(), r.name.clone()))
        .map(|((ns, _), secret)| (secret, ns.as_str()))
        .ok_or_else(|| format!("{at}: Secret {ns}/{} not found", r.name))
}

fn header_name(name: &str, field: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{field}: {name:?} is not a header name"))
}
