//! `spec.oidc` as the data plane runs it (`proxy::phase::oidc`): the provider's endpoints and
//! keys (from its discovery document, fetched like a `remoteJWKS` set), the client, where the
//! browser comes back, and the cookie key. Secrets (the client secret, the cookie key) are
//! never serialized nor shown by `Debug`.

use std::sync::Arc;

use serde::Serialize;

use crate::auth::cookie::{CookieAttrs, CookieKey};
use crate::auth::jwks::Jwks;
use crate::auth::remote::RemoteKeys;

/// The login a rule requires.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OidcAuthn {
    pub issuer: String,
    pub client_id: String,
    #[serde(skip)]
    pub client_secret: ClientSecret,
    /// `None` until the discovery document is fetched (and not set in the policy): requests
    /// then get a 503, never a pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Endpoints>,
    /// The provider's keys, for the ID token's signature.
    #[serde(skip)]
    pub keys: Arc<Jwks>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks: Option<RemoteKeys>,
    pub redirect: Redirect,
    pub logout_path: String,
    /// `openid` and the policy's scopes, space-separated.
    pub scopes: String,
    pub forward_access_token: bool,
    pub refresh_token: bool,
    /// The cookies' base names: the session's and the pending login's.
    pub session_cookie: String,
    pub state_cookie: String,
    #[serde(skip)]
    pub cookie_attrs: CookieAttrs,
    #[serde(skip)]
    pub cookie_key: Arc<CookieKey>,
}

/// The provider's endpoints pier uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    pub authorization: String,
    pub token: String,
    /// RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0), when the provider has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_session: Option<String>,
    /// The client's credentials go in the token request's body (`client_secret_post`), not
    /// in `Authorization: Basic`: the provider takes only that.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub secret_in_body: bool,
}

/// Where the provider sends the browser back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Redirect {
    /// `redirectURL` as given; `path` is its path, which pier answers on any host.
    Fixed { url: String, path: String },
    /// This path on the request's own scheme and host (no `redirectURL`).
    Relative { path: String },
}

/// The client secret; `Debug` never shows it.
#[derive(Clone, Default)]
pub struct ClientSecret(pub Arc<str>);

impl std::fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Redirect {
    pub fn path(&self) -> &str {
        match self {
            Self::Fixed { path, .. } | Self::Relative { path } => path,
        }
    }

    /// The redirect URI for a request to `host` over `https` or not.
    pub fn url(&self, https: bool, host: &str) -> String {
        match self {
            Self::Fixed { url, .. } => url.clone(),
            Self::Relative { path } => {
                let scheme = if https { "https" } else { "http" };
                format!("{scheme}://{host}{path}")
            }
        }
    }
}
