//! The rule's access policies, evaluated purely on what the request path derived:
//! authentication (a JSON Web Token, an API key, a password) and then authorization by client address,
//! method, headers and JWT claims (`model::policy`). Missing or bad credentials: 401 with
//! `WWW-Authenticate` (gRPC: UNAUTHENTICATED); denied: 403 (gRPC: PERMISSION_DENIED); an
//! invalid policy: 500, never a pass. Credentials are never logged.

use http::{HeaderName, HeaderValue, header};

use std::sync::Arc;

use crate::auth::jwt;
use crate::model::policy::{
    AccessPolicy, AccessRequest, Action, ApiKeyAuthn, Authenticated, BasicAuthn, BasicVerdict,
    CredentialSource, JwtAuthn, Mechanism,
};
use crate::proxy::error::{Challenge, ProxyError};

/// What a request let in brings along: who it is, and the changes its request needs on the
/// way upstream.
#[derive(Debug, Default)]
pub struct Admitted {
    pub authenticated: Authenticated,
    pub edits: Vec<Edit>,
}

/// A change to the request's headers.
#[derive(Debug)]
pub enum Edit {
    /// Replaces every value the client sent.
    Set(HeaderName, HeaderValue),
    Remove(HeaderName),
}

/// Whether the request may come in under `policy`, and what it brings along.
pub fn check(policy: &AccessPolicy, req: &AccessRequest<'_>) -> Result<Admitted, ProxyError> {
    if policy.invalid.is_some() {
        return Err(ProxyError::PolicyInvalid);
    }
    let mut admitted = Admitted::default();
    if let Some(j) = &policy.jwt {
        jwt_authn(j, req, &mut admitted)?;
    }
    if let Some(k) = &policy.api_key {
        api_key_authn(k, req, &mut admitted)?;
    }
    if let Some(b) = &policy.basic {
        basic_authn(b, req, &mut admitted)?;
    }
    // External authorization comes between authentication and the authorization rules:
    // `phase::ext_auth` asks the authorizer, then calls [`authorize`].
    if policy.ext_auth.is_some() {
        return Ok(admitted);
    }
    authorize(policy, req, &admitted)?;
    Ok(admitted)
}

/// The policy's authorization rules (none: allowed), on what authentication found.
pub fn authorize(
    policy: &AccessPolicy,
    req: &AccessRequest<'_>,
    admitted: &Admitted,
) -> Result<(), ProxyError> {
    let Some(authz) = &policy.authorization else {
        return Ok(());
    };
    let req = AccessRequest {
        authenticated: Some(&admitted.authenticated),
        ..*req
    };
    let verdict = authz.decide(&req);
    match verdict.action {
        Action::Allow => Ok(()),
        Action::Deny => {
            tracing::debug!(
                policy = %policy.source,
                rule = verdict.rule.and_then(|r| r.name.as_deref()).unwrap_or("(default)"),
                client = %req.client,
                principal = admitted.authenticated.principal.as_deref().unwrap_or("-"),
                "request denied by authorization"
            );
            Err(ProxyError::Forbidden)
        }
    }
}

fn jwt_authn(
    j: &JwtAuthn,
    req: &AccessRequest<'_>,
    admitted: &mut Admitted,
) -> Result<(), ProxyError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut presented = false;
    for p in &j.providers {
        let Some(token) = p.extract_from.iter().find_map(|s| credential(s, req)) else {
            continue;
        };
        presented = true;
        let verified = match p.verified.get(token, now) {
            Some(claims) => Ok(claims),
            None => jwt::verify(token, &p.keys, &p.validation, now).map(|claims| {
                let claims = Arc::new(claims);
                let leeway = p.validation.leeway_secs;
                p.verified.insert(token, claims.clone(), now, leeway);
                claims
            }),
        };
        match verified {
            Ok(claims) => {
                for (header, claim) in &p.claim_to_headers {
                    // Set from the token, or removed: a client never supplies it itself.
                    let edit = claims
                        .header_value(claim)
                        .and_then(|v| HeaderValue::from_str(&v).ok())
                        .map_or(Edit::Remove(header.clone()), |v| {
                            Edit::Set(header.clone(), v)
                        });
                    admitted.edits.push(edit);
                }
                let sub = claims
                    .get("sub")
                    .and_then(|s| s.as_str())
                    .unwrap_or("-")
                    .to_string();
                admitted.authenticated.principal = Some(format!("jwt:{}:{sub}", p.name));
                admitted.authenticated.mechanism = Some(Mechanism::Jwt);
                admitted.authenticated.jwt = Some((p.name.clone(), claims));
                return Ok(());
            }
            Err(e) => {
                // The reason, never the token.
                tracing::debug!(provider = %p.name, error = %e, "JWT refused");
                // A key set may have rotated: ask for an early fetch (the fetcher honours one
                // per 30 s); this request is refused all the same, nothing waits for it.
                if (e == jwt::JwtError::UnknownKid || p.keys.is_empty())
                    && let Some(remote) = &p.remote
                {
                    remote.refetch.request();
                }
            }
        }
    }
    if !presented && j.optional {
        return Ok(());
    }
    Err(ProxyError::Unauthenticated(Challenge::Bearer {
        invalid: presented,
    }))
}

fn api_key_authn(
    k: &ApiKeyAuthn,
    req: &AccessRequest<'_>,
    admitted: &mut Admitted,
) -> Result<(), ProxyError> {
    let Some((source, key)) = k
        .extract_from
        .iter()
        .find_map(|s| credential(s, req).map(|key| (s, key)))
    else {
        return Err(ProxyError::Unauthenticated(Challenge::ApiKey));
    };
    // Looked up by SHA-256: the map's probe never compares the key itself.
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key);
    let Some(client) = <[u8; 32]>::try_from(digest.as_ref())
        .ok()
        .and_then(|d| k.keys.get(&d))
    else {
        return Err(ProxyError::Unauthenticated(Challenge::ApiKey));
    };
    if admitted.authenticated.principal.is_none() {
        admitted.authenticated.principal = Some(format!("apikey:{client}"));
        admitted.authenticated.mechanism = Some(Mechanism::ApiKey);
    }
    if let Some(h) = &k.forward_client_id_header
        && let Ok(v) = HeaderValue::from_str(client)
    {
        admitted.edits.push(Edit::Set(h.clone(), v));
    }
    if k.sanitize
        && let CredentialSource::Header { name, .. } = source
    {
        admitted.edits.push(Edit::Remove(name.clone()));
    }
    Ok(())
}

/// Basic auth's verdict, worked out before (it may hash: `phase::verify_basic`).
fn basic_authn(
    b: &BasicAuthn,
    req: &AccessRequest<'_>,
    admitted: &mut Admitted,
) -> Result<(), ProxyError> {
    match req.basic {
        Some(BasicVerdict::User(user)) => {
            if admitted.authenticated.principal.is_none() {
                admitted.authenticated.principal = Some(format!("basic:{user}"));
                admitted.authenticated.mechanism = Some(Mechanism::Basic);
            }
            if let Some(h) = &b.forward_username_header
                && let Ok(v) = HeaderValue::from_str(user)
            {
                admitted.edits.push(Edit::Set(h.clone(), v));
            }
            Ok(())
        }
        Some(BasicVerdict::Busy) => Err(ProxyError::AuthBusy),
        Some(BasicVerdict::Missing | BasicVerdict::Refused) | None => {
            Err(ProxyError::Unauthenticated(Challenge::Basic))
        }
    }
}

/// The credential `source` names in the request, if it is there (and not empty).
fn credential<'r>(source: &CredentialSource, req: &AccessRequest<'r>) -> Option<&'r [u8]> {
    let found = match source {
        CredentialSource::Header { name, prefix } => {
            let v = req.headers.get(name)?.as_bytes();
            match prefix {
                None => v,
                Some(p) => {
                    let head = v.get(..p.len())?;
                    if !head.eq_ignore_ascii_case(p.as_bytes()) {
                        return None;
                    }
                    &v[p.len()..]
                }
            }
        }
        CredentialSource::Cookie(name) => req
            .headers
            .get_all(header::COOKIE)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b';'))
            .find_map(|pair| {
                let pair = pair.trim_ascii();
                let (n, v) = pair.split_at(pair.iter().position(|b| *b == b'=')?);
                (n == name.as_bytes()).then_some(&v[1..])
            })?,
        CredentialSource::Param(name) => req.query?.split('&').find_map(|pair| {
            let (n, v) = pair.split_once('=')?;
            (n == name).then_some(v.as_bytes())
        })?,
    };
    (!found.is_empty()).then_some(found)
}

#[cfg(test)]
mod tests;
