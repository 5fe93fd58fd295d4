//! The OIDC login (`spec.oidc`), before `decide` on hyper's path (the HTTP/1.1 fast path hands
//! such rules over: `AccessPolicy::edits_request`). It may answer the request itself (the
//! redirect to the provider, the callback, the logout) or let it through with the session's
//! access token.
//!
//! ```text
//! logoutPath ─> clear the cookies ─> 302 to the provider's end_session_endpoint (or 200)
//! callback   ─> state cookie opened, `state` compared ─> code + PKCE verifier to the token
//!               endpoint (client_secret_basic, or _post) ─> ID token checked (signature, iss, aud,
//!               exp, nonce) ─> session cookie (AES-256-GCM) ─> 302 back where the login began
//! a session  ─> valid: through (Authorization: Bearer upstream when forwardAccessToken);
//!               expired: refreshed with its refresh token (refreshToken) or a new login
//! none       ─> a browser (GET/HEAD accepting text/html): 302 to the provider with state,
//!               nonce and a PKCE challenge, the pending login in a state cookie (10 min);
//!               anything else (an API client, gRPC): 401
//! ```
//!
//! Cookies are bound to the policy's key ([`crate::auth::cookie`]): a cookie made by another
//! key, changed, or moved to another cookie's name does not open and counts as no session.
//! The token endpoint is called on the request's task with a 10 s bound; a provider that does
//! not answer makes the callback a 503.

use crate::model::policy::Mechanism;
use crate::proxy::observe::record::Seen;
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::header::{
    ACCEPT, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE,
};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::auth::cookie;
use crate::auth::oidc::{self, MAX_DOCUMENT, Pending, Session};
use crate::model::Rule;
use crate::model::oidc::{Endpoints, OidcAuthn};
use crate::proxy::body::{self, ProxyBody};
use crate::proxy::error::{Challenge, ProxyError};

/// How long a login may take between the redirect to the provider and the callback.
const LOGIN_TTL: u64 = 600;
/// A session this close to its end is refreshed (or renewed) rather than used.
const EXPIRY_SKEW: u64 = 10;
const TOKEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What the login phase came to.
pub enum Step {
    /// pier answers the request itself.
    Respond(Response<ProxyBody>),
    /// A valid session: the request goes on.
    Pass(Passed),
}

/// A request with a valid session.
pub struct Passed {
    /// The session's subject (the ID token's `sub`), for the access log's principal.
    pub sub: String,
    /// `Authorization: Bearer` upstream (`forwardAccessToken`).
    pub bearer: Option<HeaderValue>,
    /// Cookies to set on the response (a refreshed session).
    pub set_cookies: Vec<HeaderValue>,
    /// The session cookies' names, removed from the request before it goes upstream.
    pub session_cookie: String,
    pub state_cookie: String,
}

/// Records in `seen` that the login let the request in (unless another mechanism
/// authenticated it too): mechanism `oidc`, principal `oidc:<sub>`.
pub fn record(seen: &mut Seen<'_>, passed: &Passed) {
    if let Some(s) = &mut seen.security
        && matches!(s.mechanism, Mechanism::None | Mechanism::Authorization)
    {
        s.mechanism = Mechanism::Oidc;
        s.principal = Some(format!("oidc:{}", passed.sub));
    }
}

/// The request as the login phase reads it.
pub struct LoginRequest<'r> {
    pub method: &'r Method,
    pub path: &'r str,
    pub query: Option<&'r str>,
    pub headers: &'r HeaderMap,
    /// The request's host (for a relative redirect URL) and whether it came over TLS.
    pub host: &'r str,
    pub https: bool,
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The login, for a rule whose policy has `oidc` (`None` otherwise, and for a CORS
/// `preflight` the rule's CORS filter is to answer).
pub async fn login(
    rule: &Rule,
    req: &LoginRequest<'_>,
    preflight: bool,
) -> Option<Result<Step, ProxyError>> {
    let o = rule.access.as_ref()?.oidc.as_deref()?;
    if preflight {
        return None;
    }
    Some(step(o, req).await)
}

/// A CORS preflight: `OPTIONS` with `Origin` and `Access-Control-Request-Method`.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS
        && headers.contains_key(http::header::ORIGIN)
        && headers.contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// Removes pier's login cookies from a request going upstream and adds the bearer token.
pub fn apply(passed: &Passed, headers: &mut HeaderMap) {
    let kept: Vec<String> = cookie::pairs(headers.get_all(COOKIE).iter().map(|v| v.as_bytes()))
        .filter(|(n, _)| {
            cookie::chunk_index(&passed.session_cookie, n).is_none()
                && cookie::chunk_index(&passed.state_cookie, n).is_none()
        })
        .map(|(n, v)| {
            format!(
                "{}={}",
                String::from_utf8_lossy(n),
                String::from_utf8_lossy(v)
            )
        })
        .collect();
    headers.remove(COOKIE);
    if !kept.is_empty()
        && let Ok(v) = HeaderValue::from_str(&kept.join("; "))
    {
        headers.insert(COOKIE, v);
    }
    if let Some(b) = &passed.bearer {
        headers.insert(AUTHORIZATION, b.clone());
    }
}

async fn step(o: &OidcAuthn, req: &LoginRequest<'_>) -> Result<Step, ProxyError> {
    let now = crate::proxy::exchange::session::unix_now();
    let jar: Vec<(&[u8], &[u8])> =
        cookie::pairs(req.headers.get_all(COOKIE).iter().map(|v| v.as_bytes())).collect();
    if req.path == o.logout_path {
        return Ok(Step::Respond(logout(o, &jar)));
    }
    let Some(endpoints) = &o.endpoints else {
        // The discovery document has not been fetched: no login can start.
        return Err(ProxyError::AuthUnavailable);
    };
    if req.path == o.redirect.path() {
        return callback(o, endpoints, req, &jar, now)
            .await
            .map(Step::Respond);
    }
    if let Some(session) = session(o, &jar) {
        if session.exp > now + EXPIRY_SKEW {
            return Ok(Step::Pass(passed(o, &session, vec![])));
        }
        if o.refresh_token
            && let Some(refresh) = &session.refresh_token
        {
            match refresh_session(o, endpoints, refresh, &session, now).await {
                Ok(fresh) => {
                    let had = cookie::count(&o.session_cookie, jar.iter().copied());
                    let set = session_cookies(o, &fresh, now, had);
                    return Ok(Step::Pass(passed(o, &fresh, set)));
                }
                Err(e) => tracing::debug!(error = %e, "OIDC refresh failed; a new login"),
            }
        }
    }
    if !is_browser(req) {
        return Err(ProxyError::Unauthenticated(Challenge::Bearer {
            invalid: false,
        }));
    }
    Ok(Step::Respond(start(o, endpoints, req, now)))
}

/// A navigation a browser makes: GET or HEAD asking for HTML, not gRPC.
fn is_browser(req: &LoginRequest<'_>) -> bool {
    (req.method == Method::GET || req.method == Method::HEAD)
        && !crate::proxy::error::is_grpc(req.headers)
        && req.headers.get_all(ACCEPT).iter().any(|v| {
            v.as_bytes()
                .windows(9)
                .any(|w| w.eq_ignore_ascii_case(b"text/html"))
        })
}

fn session(o: &OidcAuthn, jar: &[(&[u8], &[u8])]) -> Option<Session> {
    let sealed = cookie::joined(&o.session_cookie, jar.iter().copied())?;
    let plain = o.cookie_key.open(&o.session_cookie, &sealed)?;
    serde_json::from_slice(&plain).ok()
}

fn passed(o: &OidcAuthn, s: &Session, set: Vec<HeaderValue>) -> Passed {
    Passed {
        sub: s.sub.clone(),
        bearer: o
            .forward_access_token
            .then(|| HeaderValue::from_str(&format!("Bearer {}", s.access_token)).ok())
            .flatten(),
        set_cookies: set,
        session_cookie: o.session_cookie.clone(),
        state_cookie: o.state_cookie.clone(),
    }
}

/// The redirect to the provider, the pending login in the state cookie.
fn start(
    o: &OidcAuthn,
    endpoints: &Endpoints,
    req: &LoginRequest<'_>,
    now: u64,
) -> Response<ProxyBody> {
    let to = match req.query {
        Some(q) => format!("{}?{q}", req.path),
        None => req.path.to_string(),
    };
    let pending = Pending {
        state: oidc::random_token(24),
        nonce: oidc::random_token(24),
        verifier: oidc::random_token(32),
        to,
        exp: now + LOGIN_TTL,
    };
    let redirect_uri = o.redirect.url(req.https, req.host);
    let url = oidc::authorization_url(
        &endpoints.authorization,
        &o.client_id,
        &redirect_uri,
        &o.scopes,
        &pending,
    );
    let plain = serde_json::to_vec(&pending).expect("a pending login serializes");
    let sealed = o.cookie_key.seal(&o.state_cookie, &plain);
    let set = cookie::set(
        &o.state_cookie,
        &sealed,
        &o.cookie_attrs,
        Some(LOGIN_TTL),
        0,
    )
    .unwrap_or_default();
    redirect(&url, set.iter().map(String::as_str))
}

async fn callback(
    o: &OidcAuthn,
    endpoints: &Endpoints,
    req: &LoginRequest<'_>,
    jar: &[(&[u8], &[u8])],
    now: u64,
) -> Result<Response<ProxyBody>, ProxyError> {
    let refused = || ProxyError::Unauthenticated(Challenge::Bearer { invalid: true });
    let query = req.query.unwrap_or("");
    let pending: Pending = cookie::joined(&o.state_cookie, jar.iter().copied())
        .and_then(|sealed| o.cookie_key.open(&o.state_cookie, &sealed))
        .and_then(|plain| serde_json::from_slice(&plain).ok())
        .ok_or_else(|| {
            tracing::debug!("OIDC callback without a pending login (no or bad state cookie)");
            refused()
        })?;
    let state = oidc::query_param(query, "state").unwrap_or_default();
    let same_state = state.len() == pending.state.len()
        && aws_lc_rs::constant_time::verify_slices_are_equal(
            state.as_bytes(),
            pending.state.as_bytes(),
        )
        .is_ok();
    if !same_state || pending.exp < now {
        tracing::debug!(
            stale = pending.exp < now,
            "OIDC callback: state mismatch or stale login"
        );
        return Err(refused());
    }
    if oidc::query_param(query, "error").is_some() {
        // The provider's words are not echoed back.
        tracing::debug!("OIDC callback: the provider refused the login");
        return Err(refused());
    }
    let code = oidc::query_param(query, "code").ok_or_else(refused)?;
    let redirect_uri = o.redirect.url(req.https, req.host);
    let body = oidc::form(&[
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", &redirect_uri),
        ("code_verifier", &pending.verifier),
    ]);
    let answer = token_request(o, endpoints, body).await?;
    let session = oidc::session_from(
        &answer,
        &o.keys,
        &o.issuer,
        &o.client_id,
        Some(&pending.nonce),
        now,
        None,
    )
    .map_err(|e| {
        tracing::info!(issuer = %o.issuer, error = %e, "OIDC login refused");
        if matches!(
            e,
            oidc::LoginError::IdToken(crate::auth::jwt::JwtError::UnknownKid)
        ) && let Some(r) = &o.jwks
        {
            r.refetch.request();
        }
        refused()
    })?;
    let had = cookie::count(&o.session_cookie, jar.iter().copied());
    let mut set: Vec<String> = session_cookie_strings(o, &session, now, had);
    set.extend(cookie::clear(
        &o.state_cookie,
        &o.cookie_attrs,
        cookie::count(&o.state_cookie, jar.iter().copied()),
    ));
    // Only a path on this host: `to` was recorded by pier, never taken from the callback.
    let to = if pending.to.starts_with('/') && !pending.to.starts_with("//") {
        pending.to.as_str()
    } else {
        "/"
    };
    Ok(redirect(to, set.iter().map(String::as_str)))
}

async fn refresh_session(
    o: &OidcAuthn,
    endpoints: &Endpoints,
    refresh: &str,
    previous: &Session,
    now: u64,
) -> Result<Session, Box<dyn std::error::Error + Send + Sync>> {
    let body = oidc::form(&[("grant_type", "refresh_token"), ("refresh_token", refresh)]);
    let answer = token_request(o, endpoints, body).await?;
    Ok(oidc::session_from(
        &answer,
        &o.keys,
        &o.issuer,
        &o.client_id,
        None,
        now,
        Some(previous),
    )?)
}

fn session_cookie_strings(o: &OidcAuthn, s: &Session, now: u64, had: usize) -> Vec<String> {
    let plain = serde_json::to_vec(s).expect("a session serializes");
    let sealed = o.cookie_key.seal(&o.session_cookie, &plain);
    // The cookie outlives the access token when it can be refreshed.
    let age = if o.refresh_token && s.refresh_token.is_some() {
        None
    } else {
        Some(s.exp.saturating_sub(now))
    };
    cookie::set(&o.session_cookie, &sealed, &o.cookie_attrs, age, had).unwrap_or_else(|| {
        tracing::warn!("OIDC session over the cookie budget; not kept");
        vec![]
    })
}

fn session_cookies(o: &OidcAuthn, s: &Session, now: u64, had: usize) -> Vec<HeaderValue> {
    session_cookie_strings(o, s, now, had)
        .into_iter()
        .filter_map(|c| HeaderValue::from_str(&c).ok())
        .collect()
}

/// Clears the cookies; to the provider's end_session_endpoint when it has one.
fn logout(o: &OidcAuthn, jar: &[(&[u8], &[u8])]) -> Response<ProxyBody> {
    let mut set = cookie::clear(
        &o.session_cookie,
        &o.cookie_attrs,
        cookie::count(&o.session_cookie, jar.iter().copied()),
    );
    set.extend(cookie::clear(
        &o.state_cookie,
        &o.cookie_attrs,
        cookie::count(&o.state_cookie, jar.iter().copied()),
    ));
    match o.endpoints.as_ref().and_then(|e| e.end_session.as_deref()) {
        Some(end) => {
            let sep = if end.contains('?') { '&' } else { '?' };
            let url = format!("{end}{sep}{}", oidc::form(&[("client_id", &o.client_id)]));
            redirect(&url, set.iter().map(String::as_str))
        }
        None => {
            let mut resp = Response::new(body::full(Bytes::from_static(b"Logged out.\n")));
            headers_of(&mut resp, set.iter().map(String::as_str));
            resp
        }
    }
}

fn redirect<'a>(location: &str, set: impl Iterator<Item = &'a str>) -> Response<ProxyBody> {
    let mut resp = Response::new(body::empty());
    *resp.status_mut() = StatusCode::FOUND;
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(LOCATION, v);
    }
    headers_of(&mut resp, set);
    resp
}

fn headers_of<'a>(resp: &mut Response<ProxyBody>, set: impl Iterator<Item = &'a str>) {
    let h = resp.headers_mut();
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for c in set {
        if let Ok(v) = HeaderValue::from_str(c) {
            h.append(SET_COOKIE, v);
        }
    }
}

/// A POST to the token endpoint with the client's credentials: `client_secret_basic` (RFC 6749
/// §2.3.1: each part form-encoded), or `client_secret_post` when the provider takes only that;
/// its body when it answers 2xx.
async fn token_request(
    o: &OidcAuthn,
    endpoints: &Endpoints,
    mut form: String,
) -> Result<Bytes, ProxyError> {
    let req = http::Request::post(&endpoints.token)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(ACCEPT, "application/json");
    let req = if endpoints.secret_in_body {
        form.push('&');
        form.push_str(&oidc::form(&[
            ("client_id", &o.client_id),
            ("client_secret", &o.client_secret.0),
        ]));
        req
    } else {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            oidc::encode(&o.client_id),
            oidc::encode(&o.client_secret.0)
        ));
        req.header(AUTHORIZATION, format!("Basic {basic}"))
    };
    let req = req
        .body(Full::new(Bytes::from(form)))
        .map_err(|_| ProxyError::AuthUnavailable)?;
    let work = async {
        let resp = client().request(req).await.map_err(|e| {
            tracing::warn!(issuer = %o.issuer, error = %chain(&e), "OIDC token endpoint unreachable");
            ProxyError::AuthUnavailable
        })?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_DOCUMENT)
            .collect()
            .await
            .map_err(|_| ProxyError::AuthUnavailable)?
            .to_bytes();
        if !status.is_success() {
            // The answer may name the problem (invalid_grant); it holds no secret of ours.
            tracing::info!(issuer = %o.issuer, %status, "OIDC token endpoint refused the request");
            return Err(ProxyError::Unauthenticated(Challenge::Bearer {
                invalid: true,
            }));
        }
        Ok(body)
    };
    tokio::time::timeout(TOKEN_TIMEOUT, work)
        .await
        .map_err(|_| ProxyError::AuthUnavailable)?
}

/// One HTTPS client for every token endpoint, trusting the host's store (as the `remoteJWKS`
/// fetcher does); made on first use. A process-wide handle like `phase`'s hashing semaphore:
/// it holds no configuration, only connections.
fn client() -> &'static HttpsClient {
    static CLIENT: OnceLock<HttpsClient> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let tls = crate::tls::client::host_trust("oidc");
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Client::builder(TokioExecutor::new()).build(connector)
    })
}

/// An error and its causes on one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}
