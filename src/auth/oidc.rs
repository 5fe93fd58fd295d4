//! The OpenID Connect login's pure parts (`spec.oidc`): the provider's discovery document,
//! PKCE (RFC 7636, S256), the authorization request, the callback's parameters, the token
//! endpoint's answer, the ID token's checks (OIDC Core 3.1.3.7: signature with the provider's
//! keys, `iss`, `aud`, `exp`, `nonce`), and what pier keeps in its cookies. No I/O: the request
//! path (`proxy::phase::oidc`) calls the token endpoint and passes the time.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::claims::Claims;
use super::jwks::Jwks;
use super::jwt::{self, JwtError, Validation};

/// A discovery document or token answer larger than this is refused.
pub const MAX_DOCUMENT: usize = 64 * 1024;

/// What pier reads of `/.well-known/openid-configuration` (OpenID Connect Discovery 1.0 §3).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
    /// How clients authenticate at the token endpoint (Discovery §3; absent: only
    /// `client_secret_basic`).
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("the discovery document is over {MAX_DOCUMENT} bytes")]
    TooLarge,
    #[error("the discovery document is not valid: {0}")]
    Json(String),
}

/// The login in progress, kept in the state cookie between the redirect to the provider and
/// the callback (encrypted, so the browser holds it but cannot read or change it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// `state`, bound to this browser by the cookie.
    pub state: String,
    pub nonce: String,
    /// The PKCE code verifier.
    pub verifier: String,
    /// Where the browser goes after the login (path and query, on this host).
    pub to: String,
    /// Unix seconds after which the login is stale.
    pub exp: u64,
}

/// A logged-in browser's session, kept in the session cookie.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The ID token's `sub`.
    pub sub: String,
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds when the session ends (the access token's expiry, or the ID token's).
    pub exp: u64,
}

/// The token endpoint's answer (RFC 6749 §5.1, OIDC Core 3.1.3.3).
#[derive(Clone, Deserialize)]
pub struct TokenAnswer {
    pub access_token: String,
    #[serde(default)]
    pub id_token: Option<String>,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub expires_in: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("the token endpoint's answer is not a token response")]
    Answer,
    #[error("the token endpoint sent no ID token")]
    NoIdToken,
    #[error("the ID token is refused: {0}")]
    IdToken(JwtError),
    #[error("the ID token's nonce is not the one sent")]
    Nonce,
    #[error("the ID token has no sub")]
    NoSubject,
}

// === impl Discovery ===

impl Discovery {
    /// `client_secret_basic` unless the provider lists methods without it and with
    /// `client_secret_post` (RFC 6749 §2.3.1 allows both; Basic is the one every server must
    /// take, and keeps the secret out of bodies that servers may log).
    pub fn secret_in_body(&self) -> bool {
        self.token_endpoint_auth_methods_supported
            .as_ref()
            .is_some_and(|m| {
                !m.iter().any(|x| x == "client_secret_basic")
                    && m.iter().any(|x| x == "client_secret_post")
            })
    }

    pub fn parse(json: &[u8]) -> Result<Discovery, DiscoveryError> {
        if json.len() > MAX_DOCUMENT {
            return Err(DiscoveryError::TooLarge);
        }
        serde_json::from_slice(json).map_err(|e| DiscoveryError::Json(e.to_string()))
    }
}

/// The discovery document's URI for `issuer` (Discovery §4: `/.well-known/openid-configuration`
/// appended to the issuer, its trailing `/` removed).
pub fn discovery_uri(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// `n` random bytes, base64url: states, nonces, code verifiers.
pub fn random_token(n: usize) -> String {
    let mut b = vec![0u8; n];
    aws_lc_rs::rand::fill(&mut b).expect("the system random source works");
    URL_SAFE_NO_PAD.encode(b)
}

/// The S256 code challenge of a code verifier (RFC 7636 §4.2).
pub fn challenge(verifier: &str) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, verifier.as_bytes());
    URL_SAFE_NO_PAD.encode(d.as_ref())
}

/// The authorization request's URL (OIDC Core 3.1.2.1): `endpoint` with its own query kept.
pub fn authorization_url(
    endpoint: &str,
    client_id: &str,
    redirect_uri: &str,
    scopes: &str,
    pending: &Pending,
) -> String {
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    let query = form(&[
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("scope", scopes),
        ("state", &pending.state),
        ("nonce", &pending.nonce),
        ("code_challenge", &challenge(&pending.verifier)),
        ("code_challenge_method", "S256"),
    ]);
    format!("{endpoint}{sep}{query}")
}

/// `application/x-www-form-urlencoded` of `pairs`.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encoding of everything but RFC 3986's unreserved characters.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The value of query parameter `name`, percent-decoded (`+` is a space); `None` when absent
/// or not UTF-8.
pub fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k)? == name).then(|| decode(v)).flatten()
    })
}

fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The token endpoint's answer checked (OIDC Core 3.1.3.7): the ID token signed by one of
/// `keys`, issued by `issuer` for `client_id`, not expired, with `nonce` (`None`: a refresh,
/// where OIDC Core 12.2 makes the nonce optional), made into a session.
pub fn session_from(
    answer: &[u8],
    keys: &Jwks,
    issuer: &str,
    client_id: &str,
    nonce: Option<&str>,
    now: u64,
    previous: Option<&Session>,
) -> Result<Session, LoginError> {
    if answer.len() > MAX_DOCUMENT {
        return Err(LoginError::Answer);
    }
    let t: TokenAnswer = serde_json::from_slice(answer).map_err(|_| LoginError::Answer)?;
    let claims: Option<Claims> = match (&t.id_token, previous) {
        (Some(id), _) => Some(id_token(id, keys, issuer, client_id, nonce, now)?),
        // A refresh may leave the ID token out (OIDC Core 12.2): the session's subject stays.
        (None, Some(_)) => None,
        (None, None) => return Err(LoginError::NoIdToken),
    };
    let sub = match (&claims, previous) {
        (Some(c), _) => c
            .get("sub")
            .and_then(|s| s.as_str())
            .ok_or(LoginError::NoSubject)?
            .to_string(),
        (None, Some(p)) => p.sub.clone(),
        (None, None) => return Err(LoginError::NoIdToken),
    };
    let id_exp = claims
        .as_ref()
        .and_then(|c| c.get("exp"))
        .and_then(|e| e.as_u64());
    let exp = match (t.expires_in, id_exp) {
        (Some(s), _) => now.saturating_add(s),
        (None, Some(e)) => e,
        (None, None) => now.saturating_add(300),
    };
    Ok(Session {
        sub,
        access_token: t.access_token,
        refresh_token: t
            .refresh_token
            .or_else(|| previous.and_then(|p| p.refresh_token.clone())),
        exp,
    })
}

fn id_token(
    token: &str,
    keys: &Jwks,
    issuer: &str,
    client_id: &str,
    nonce: Option<&str>,
    now: u64,
) -> Result<Claims, LoginError> {
    let validation = Validation {
        issuer: Some(issuer.to_string()),
        audiences: vec![client_id.to_string()],
        ..Validation::default()
    };
    let claims =
        jwt::verify(token.as_bytes(), keys, &validation, now).map_err(LoginError::IdToken)?;
    if let Some(want) = nonce {
        let got = claims.get("nonce").and_then(|n| n.as_str()).unwrap_or("");
        let same = got.len() == want.len()
            && aws_lc_rs::constant_time::verify_slices_are_equal(got.as_bytes(), want.as_bytes())
                .is_ok();
        if !same {
            return Err(LoginError::Nonce);
        }
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256_is_the_base64url_of_the_verifiers_sha256() {
        // python3: base64.urlsafe_b64encode(hashlib.sha256(v.encode()).digest()).rstrip(b'=')
        assert_eq!(
            challenge("dBjftJeZ4CVP-mJ92K9vOsdhA1UpTBgqSwH4pLaCJ4Xo"),
            "pCtb6r6gFFmb0yvqOz_7pav2vOdhxG0oHwX9PhEYJOA"
        );
    }

    #[test]
    fn the_authorization_url_carries_every_parameter_encoded() {
        let p = Pending {
            state: "st".into(),
            nonce: "no".into(),
            verifier: "dBjftJeZ4CVP-mJ92K9vOsdhA1UpTBgqSwH4pLaCJ4Xo".into(),
            to: "/".into(),
            exp: 0,
        };
        let url = authorization_url(
            "https://idp/auth?tenant=a",
            "web",
            "https://app/cb",
            "openid email",
            &p,
        );
        assert_eq!(
            url,
            "https://idp/auth?tenant=a&response_type=code&client_id=web&redirect_uri=https%3A%2F%2Fapp%2Fcb\
             &scope=openid%20email&state=st&nonce=no\
             &code_challenge=pCtb6r6gFFmb0yvqOz_7pav2vOdhxG0oHwX9PhEYJOA&code_challenge_method=S256"
        );
    }

    #[test]
    fn query_params_decode_and_bad_escapes_are_none() {
        assert_eq!(
            query_param("code=a%2Fb&state=x+y", "code").as_deref(),
            Some("a/b")
        );
        assert_eq!(
            query_param("code=a%2Fb&state=x+y", "state").as_deref(),
            Some("x y")
        );
        assert_eq!(query_param("code=%zz", "code"), None);
        assert_eq!(query_param("code=%e2", "code"), None, "not UTF-8");
        assert_eq!(query_param("", "code"), None);
    }

    #[test]
    fn the_client_secret_goes_in_the_body_only_where_basic_is_not_taken() {
        let with = |methods: Option<&[&str]>| {
            let mut doc = serde_json::json!({
                "issuer": "https://idp", "authorization_endpoint": "https://idp/a",
                "token_endpoint": "https://idp/t", "jwks_uri": "https://idp/k",
            });
            if let Some(m) = methods {
                doc["token_endpoint_auth_methods_supported"] = serde_json::json!(m);
            }
            Discovery::parse(doc.to_string().as_bytes())
                .unwrap()
                .secret_in_body()
        };
        assert!(!with(None), "absent: client_secret_basic (Discovery §3)");
        assert!(!with(Some(&["client_secret_basic", "client_secret_post"])));
        assert!(with(Some(&["client_secret_post", "private_key_jwt"])));
        assert!(
            !with(Some(&["private_key_jwt"])),
            "neither: Basic, refused there"
        );
    }

    #[test]
    fn discovery_uri_appends_the_well_known_path() {
        assert_eq!(
            discovery_uri("http://localhost:9998/"),
            "http://localhost:9998/.well-known/openid-configuration"
        );
    }

    mod answers {
        //! The token endpoint's answers, with ID tokens signed by the JWT tests' keys.
        use serde_json::json;

        use super::super::*;
        use crate::auth::jwt::tests::{NOW, jwks, token};

        fn id_token(nonce: &str, aud: &str) -> String {
            let claims = json!({"iss": "https://idp", "aud": aud, "sub": "alice",
                "exp": NOW + 300, "nonce": nonce});
            token("ES256", "p256", &claims)
        }

        fn answer(id: Option<String>, refresh: Option<&str>) -> Vec<u8> {
            json!({"access_token": "at", "token_type": "Bearer", "expires_in": 60,
                "id_token": id, "refresh_token": refresh})
            .to_string()
            .into_bytes()
        }

        fn login(
            body: &[u8],
            nonce: Option<&str>,
            previous: Option<&Session>,
        ) -> Result<Session, LoginError> {
            session_from(body, &jwks(), "https://idp", "web", nonce, NOW, previous)
        }

        #[test]
        fn a_good_answer_makes_a_session() {
            let s = login(
                &answer(Some(id_token("n1", "web")), Some("rt")),
                Some("n1"),
                None,
            )
            .unwrap();
            assert_eq!(s.sub, "alice");
            assert_eq!(s.access_token, "at");
            assert_eq!(s.refresh_token.as_deref(), Some("rt"));
            assert_eq!(s.exp, NOW + 60, "the access token's lifetime");
        }

        #[test]
        fn a_wrong_nonce_audience_or_missing_id_token_is_refused() {
            let wrong_nonce = login(&answer(Some(id_token("n2", "web")), None), Some("n1"), None);
            assert!(matches!(wrong_nonce, Err(LoginError::Nonce)));
            let wrong_aud = login(
                &answer(Some(id_token("n1", "other")), None),
                Some("n1"),
                None,
            );
            assert!(matches!(
                wrong_aud,
                Err(LoginError::IdToken(JwtError::Audience))
            ));
            let none = login(&answer(None, None), Some("n1"), None);
            assert!(matches!(none, Err(LoginError::NoIdToken)));
            assert!(matches!(
                login(b"not json", Some("n1"), None),
                Err(LoginError::Answer)
            ));
        }

        #[test]
        fn a_refresh_without_an_id_token_keeps_the_subject_and_refresh_token() {
            let before = Session {
                sub: "alice".into(),
                access_token: "old".into(),
                refresh_token: Some("rt".into()),
                exp: NOW - 1,
            };
            let s = login(&answer(None, None), None, Some(&before)).unwrap();
            assert_eq!((s.sub.as_str(), s.access_token.as_str()), ("alice", "at"));
            assert_eq!(
                s.refresh_token.as_deref(),
                Some("rt"),
                "kept when not rotated"
            );
            let s = login(&answer(None, Some("rt2")), None, Some(&before)).unwrap();
            assert_eq!(
                s.refresh_token.as_deref(),
                Some("rt2"),
                "a rotated one replaces it"
            );
        }
    }

    mod props {
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_query_or_answer_parses_without_panic(q in ".{0,200}", b in prop::collection::vec(any::<u8>(), 0..300)) {
                let _ = super::super::query_param(&q, "code");
                let _ = super::super::Discovery::parse(&b);
                let keys = crate::auth::jwks::Jwks::empty();
                let _ = super::super::session_from(&b, &keys, "i", "c", Some("n"), 0, None);
            }
        }
    }
}
