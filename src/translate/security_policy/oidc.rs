//! `spec.oidc` ─> [`OidcAuthn`]: the client secret and cookie key from Secrets, the provider's
//! endpoints and keys from its discovery document (fetched by `source::jwks` like a
//! `remoteJWKS` set: [`wanted`] names the documents, then the key set the document points at),
//! the redirect URL and cookie names checked. Errors name the field, never a secret.

use std::sync::Arc;

use super::super::api::{self, Oidc, SecretObjectReference};
use super::super::resources::Resources;
use super::remote::{FetchState, RemoteNote, check_uri};
use crate::auth::cookie::{CookieAttrs, CookieKey};
use crate::auth::jwks::Jwks;
use crate::auth::oidc::discovery_uri;
use crate::auth::remote::{
    DEFAULT_CACHE_DURATION, DocKind, Refetch, RemoteKeys, RemoteSets, Want, Wanted,
};
use crate::model::ObjectRef;
use crate::model::oidc::{ClientSecret, Endpoints, OidcAuthn, Redirect};

/// The key of the Secret `clientSecret` names.
pub const CLIENT_SECRET_KEY: &str = "client-secret";
/// The key of the Secret `cookieSecret` names.
pub const COOKIE_SECRET_KEY: &str = "cookie-secret";
/// A `cookieSecret` shorter than this is refused.
pub const MIN_COOKIE_SECRET: usize = 32;
const DEFAULT_CALLBACK: &str = "/oauth2/callback";
const DEFAULT_LOGOUT: &str = "/logout";

/// The discovery documents of every policy's `oidc`, and the key set of each document fetched.
pub fn wanted(resources: &Resources, fetched: &RemoteSets, out: &mut Wanted) {
    let issuers = resources
        .security_policies
        .values()
        .filter_map(|p| p.spec.oidc.as_ref())
        .map(|o| o.provider.issuer.as_str());
    for issuer in issuers {
        let uri = discovery_uri(issuer);
        if check_uri(&uri).is_err() {
            continue;
        }
        if let Some(jwks) = fetched
            .get(&uri)
            .and_then(|f| f.discovery.as_ref())
            .map(|d| d.jwks_uri.clone())
            .filter(|j| check_uri(j).is_ok())
        {
            out.entry(jwks).or_insert(Want {
                every: DEFAULT_CACHE_DURATION,
                kind: DocKind::Jwks,
            });
        }
        out.insert(
            uri,
            Want {
                every: DEFAULT_CACHE_DURATION,
                kind: DocKind::Discovery,
            },
        );
    }
}

pub fn oidc(
    key: &ObjectRef,
    o: &Oidc,
    resources: &Resources,
    fetched: &RemoteSets,
    notes: &mut Vec<RemoteNote>,
) -> Result<OidcAuthn, String> {
    let Oidc {
        provider,
        client_id,
        client_secret,
        redirect_url,
        logout_path,
        scopes,
        cookie_domain,
        forward_access_token,
        refresh_token,
        cookie_secret,
    } = o;
    if client_id.is_empty() {
        return Err("clientID is empty".into());
    }
    let issuer = provider.issuer.clone();
    let disco = discovery_uri(&issuer);
    check_uri(&disco).map_err(|e| format!("provider.issuer: {e}"))?;
    let secret = secret_value(key, client_secret, CLIENT_SECRET_KEY, resources)
        .map_err(|e| format!("clientSecret: {e}"))?;
    let secret = String::from_utf8(secret).map_err(|_| "clientSecret: not UTF-8".to_string())?;
    let context = format!("{}/{}", key.namespace, key.name);
    let cookie_key = match cookie_secret {
        Some(r) => {
            let bytes = secret_value(key, r, COOKIE_SECRET_KEY, resources)
                .map_err(|e| format!("cookieSecret: {e}"))?;
            if bytes.len() < MIN_COOKIE_SECRET {
                return Err(format!(
                    "cookieSecret: {COOKIE_SECRET_KEY} has {} bytes; give at least \
                     {MIN_COOKIE_SECRET} random bytes",
                    bytes.len()
                ));
            }
            CookieKey::derive(&bytes, context.as_bytes())
        }
        None => CookieKey::derive(
            secret.as_bytes(),
            format!("client-secret:{context}").as_bytes(),
        ),
    };

    // The discovery document, and the key set it names.
    let found = fetched.get(&disco);
    let discovery = found.and_then(|f| f.discovery.clone());
    if let Some(d) = &discovery
        && d.issuer.trim_end_matches('/') != issuer.trim_end_matches('/')
    {
        return Err(format!(
            "provider.issuer: the discovery document names the issuer {:?} (OpenID Connect \
             Discovery 4.3: it must be {issuer:?})",
            d.issuer
        ));
    }
    notes.push(RemoteNote {
        what: format!("oidc discovery {disco}"),
        state: state_of(found.map(|f| (f.discovery.is_some(), f.error.clone()))),
    });
    let endpoint = |given: &Option<String>, found: Option<&String>, field: &str| {
        let e = given.clone().or_else(|| found.cloned());
        if let Some(e) = &e {
            check_uri(e).map_err(|why| format!("provider.{field}: {why}"))?;
        }
        Ok::<_, String>(e)
    };
    let authorization = endpoint(
        &provider.authorization_endpoint,
        discovery.as_ref().map(|d| &d.authorization_endpoint),
        "authorizationEndpoint",
    )?;
    let token = endpoint(
        &provider.token_endpoint,
        discovery.as_ref().map(|d| &d.token_endpoint),
        "tokenEndpoint",
    )?;
    let endpoints = match (authorization, token) {
        (Some(authorization), Some(token)) => Some(Endpoints {
            authorization,
            token,
            end_session: discovery
                .as_ref()
                .and_then(|d| d.end_session_endpoint.clone())
                .filter(|e| check_uri(e).is_ok()),
            secret_in_body: discovery.as_ref().is_some_and(|d| d.secret_in_body()),
        }),
        _ => None,
    };
    let (keys, jwks) = match discovery.as_ref().map(|d| d.jwks_uri.clone()) {
        Some(uri) if check_uri(&uri).is_ok() => {
            let f = fetched.get(&uri);
            notes.push(RemoteNote {
                what: format!("oidc keys {uri}"),
                state: state_of(f.map(|f| (f.keys.is_some(), f.error.clone()))),
            });
            let keys = f
                .and_then(|f| f.keys.clone())
                .unwrap_or_else(|| Arc::new(Jwks::empty()));
            let refetch = f.map_or_else(Refetch::none, |f| f.refetch.clone());
            (keys, Some(RemoteKeys { uri, refetch }))
        }
        _ => (Arc::new(Jwks::empty()), None),
    };

    let redirect = match redirect_url {
        None => Redirect::Relative {
            path: DEFAULT_CALLBACK.to_string(),
        },
        // pier's: a path alone is on the request's own scheme and host.
        Some(path) if path.starts_with('/') => Redirect::Relative { path: path.clone() },
        Some(url) => {
            let parsed: http::Uri = url
                .parse()
                .map_err(|_| format!("redirectURL: {url:?} is not a URL"))?;
            if !matches!(parsed.scheme_str(), Some("https" | "http")) || parsed.host().is_none() {
                return Err(format!("redirectURL: {url:?} is not an http(s) URL"));
            }
            Redirect::Fixed {
                url: url.clone(),
                path: parsed.path().to_string(),
            }
        }
    };
    let logout_path = logout_path.clone().unwrap_or(DEFAULT_LOGOUT.to_string());
    if !logout_path.starts_with('/') {
        return Err(format!("logoutPath: {logout_path:?} does not start with /"));
    }
    if logout_path == redirect.path() {
        return Err("logoutPath: the same path as the redirect URL's".into());
    }
    let mut all_scopes = vec!["openid".to_string()];
    for s in scopes {
        if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("scopes: {s:?} is not a scope"));
        }
        if !all_scopes.contains(s) {
            all_scopes.push(s.clone());
        }
    }
    if let Some(d) = cookie_domain
        && (d.is_empty()
            || !d
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'))
    {
        return Err(format!("cookieDomain: {d:?} is not a domain"));
    }
    // Names per policy: two policies' logins never read each other's cookies.
    let tag = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, context.as_bytes());
    let tag: String = tag.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(OidcAuthn {
        issuer,
        client_id: client_id.clone(),
        client_secret: ClientSecret(secret.into()),
        endpoints,
        keys,
        jwks,
        redirect,
        logout_path,
        scopes: all_scopes.join(" "),
        forward_access_token: forward_access_token.unwrap_or(false),
        refresh_token: refresh_token.unwrap_or(false),
        session_cookie: format!("pier-oidc-{tag}"),
        state_cookie: format!("pier-oidc-login-{tag}"),
        cookie_attrs: CookieAttrs {
            domain: cookie_domain.clone(),
        },
        cookie_key: Arc::new(cookie_key),
    })
}

fn state_of(f: Option<(bool, Option<String>)>) -> FetchState {
    match f {
        None => FetchState::NoKeys(None),
        Some((true, None)) => FetchState::Fetched,
        Some((true, Some(e))) => FetchState::FailedKept(e),
        Some((false, e)) => FetchState::NoKeys(e),
    }
}

/// The bytes under `data_key` of the Secret `r` names (in the policy's namespace).
fn secret_value(
    key: &ObjectRef,
    r: &SecretObjectReference,
    data_key: &str,
    resources: &Resources,
) -> Result<Vec<u8>, String> {
    if !matches!(r.kind.as_deref(), None | Some("Secret"))
        || !matches!(r.group.as_deref(), None | Some(""))
    {
        return Err("only a Secret can be referenced".into());
    }
    if r.namespace.as_deref().is_some_and(|ns| ns != key.namespace) {
        return Err(format!(
            "a Secret in another namespace is not supported yet (put it in {})",
            key.namespace
        ));
    }
    let secret: &api::Secret = resources
        .secrets
        .get(&(key.namespace.clone(), r.name.clone()))
        .ok_or_else(|| format!("Secret {}/{} not found", key.namespace, r.name))?;
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(data_key))
        .ok_or_else(|| format!("Secret {}/{} has no key {data_key}", key.namespace, r.name))?;
    if value.0.is_empty() {
        return Err(format!(
            "Secret {}/{}: {data_key} is empty",
            key.namespace, r.name
        ));
    }
    Ok(value.0.clone())
}

#[cfg(test)]
mod tests;
