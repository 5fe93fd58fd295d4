//! Compact JWS tokens (RFC 7515, RFC 7519) verified against a [`Jwks`], and their claims
//! checked: the `jwt` provider of `SecurityPolicy`.
//!
//! The steps, each refusing before the next reads more of the token:
//!
//! 1. length: over [`Validation::max_len`] is refused before anything is decoded;
//! 2. shape: exactly three segments, each strict base64url (no padding, no whitespace);
//! 3. header: a JSON object with a string `alg` that pier verifies (`none` and `HS*` are
//!    refused outright: a JWKS is public, so an HMAC key made of it proves nothing), and no
//!    `crit` (pier understands no critical extension);
//! 4. key: the keys named by `kid` (a key without a `kid` is named by any, as in Envoy) or,
//!    without `kid`, every key; of those, the ones whose type and own `alg` take the header's
//!    `alg`. The header cannot choose a weaker algorithm than the key's type allows;
//! 5. signature, over the first two segments as they are in the token;
//! 6. payload: a JSON object; then `exp` and `nbf` (numbers, with [`Validation::leeway_secs`]
//!    of skew), `iss` (exact match) and `aud` (one of the configured audiences, when there
//!    are some). `iat` is not checked. Duplicate JSON members: the last one counts (as RFC
//!    7515 §4 allows).
//!
//! [`JwtError`] is `Copy` and carries no text from the token, so it can be logged as it is.
//! [`JwtError::UnknownKid`] tells the caller the set may be stale (a key rotation): it may
//! refetch the JWKS, rate-limited, and verify again.

use serde_json::{Map, Value};

use super::claims::Claims;
use super::jwks::{Alg, Jwk, Jwks, b64url};

/// The default for [`Validation::max_len`]: 8 KiB.
pub const DEFAULT_MAX_LEN: usize = 8 * 1024;

/// The default for [`Validation::leeway_secs`].
pub const DEFAULT_LEEWAY_SECS: u64 = 60;

/// What a token must satisfy besides its signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validation {
    /// `iss` must be exactly this, when set.
    pub issuer: Option<String>,
    /// When not empty, `aud` (a string or an array of strings) must hold one of these.
    pub audiences: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// Longer tokens are refused before any decoding, in bytes.
    pub max_len: usize,
    /// Refuse a token without `exp`. Off by default: as in Envoy, no `exp` means no expiry.
    pub require_exp: bool,
}

/// A segment of a compact JWS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    Header,
    Payload,
    Signature,
}

/// Why a token was refused. Never carries text from the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("token of {len} bytes is over the limit of {max}")]
    TooLong { len: usize, max: usize },
    #[error("token is not three segments separated by dots")]
    Segments,
    #[error("token {0} is not base64url without padding")]
    Base64(Segment),
    #[error("token {0} is not a JSON object")]
    Json(Segment),
    #[error("token header: {0}")]
    Header(&'static str),
    #[error("token header has `crit`: pier understands no critical extension")]
    Crit,
    #[error("token algorithm `none` is refused")]
    AlgNone,
    #[error("token algorithm is HMAC (HS*), which pier never accepts")]
    Hmac,
    #[error("token algorithm is not one pier verifies")]
    UnsupportedAlg,
    #[error("token `kid` names no key of the set")]
    UnknownKid,
    #[error("no key named by the token takes its algorithm")]
    AlgMismatch,
    #[error("token signature does not verify")]
    BadSignature,
    #[error("token claim: {0}")]
    Claim(&'static str),
    #[error("token has no `exp`")]
    MissingExp,
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet (`nbf`)")]
    NotYetValid,
    #[error("token issuer is not the configured one")]
    Issuer,
    #[error("token audience is none of the configured ones")]
    Audience,
}

/// The header members pier reads.
struct Header {
    alg: Alg,
    kid: Option<String>,
}

/// The three segments of a compact JWS, as they are in the token.
struct Parts<'a> {
    header: &'a [u8],
    payload: &'a [u8],
    signature: &'a [u8],
    /// `header.payload`: what was signed.
    signed: &'a [u8],
}

/// Verifies `token` (the compact JWS, without `Bearer `) against `keys` and `rules` at
/// `now` (seconds since the Unix epoch), and returns its claims.
pub fn verify(token: &[u8], keys: &Jwks, rules: &Validation, now: u64) -> Result<Claims, JwtError> {
    if token.len() > rules.max_len {
        return Err(JwtError::TooLong {
            len: token.len(),
            max: rules.max_len,
        });
    }
    let parts = Parts::split(token)?;
    let header = Header::parse(&decode_object(parts.header, Segment::Header)?)?;
    let signature = b64url(parts.signature).ok_or(JwtError::Base64(Segment::Signature))?;
    check_signature(keys, &header, parts.signed, &signature)?;
    let claims = decode_object(parts.payload, Segment::Payload)?;
    rules.check(&claims, now)?;
    Ok(Claims::new(claims))
}

// === impl Validation ===

impl Default for Validation {
    fn default() -> Self {
        Validation {
            issuer: None,
            audiences: Vec::new(),
            leeway_secs: DEFAULT_LEEWAY_SECS,
            max_len: DEFAULT_MAX_LEN,
            require_exp: false,
        }
    }
}

impl Validation {
    /// The registered claims: `exp`, `nbf`, `iss`, `aud`.
    fn check(&self, claims: &Map<String, Value>, now: u64) -> Result<(), JwtError> {
        let now = now as f64;
        let leeway = self.leeway_secs as f64;
        match numeric_date(claims, "exp", "`exp` is not a number")? {
            Some(exp) if now >= exp + leeway => return Err(JwtError::Expired),
            None if self.require_exp => return Err(JwtError::MissingExp),
            _ => {}
        }
        if let Some(nbf) = numeric_date(claims, "nbf", "`nbf` is not a number")?
            && now + leeway < nbf
        {
            return Err(JwtError::NotYetValid);
        }
        if let Some(issuer) = &self.issuer
            && claims.get("iss").and_then(Value::as_str) != Some(issuer)
        {
            return Err(JwtError::Issuer);
        }
        if !self.audiences.is_empty() {
            self.check_audience(claims.get("aud"))?;
        }
        Ok(())
    }

    fn check_audience(&self, aud: Option<&Value>) -> Result<(), JwtError> {
        let configured = |a: &str| self.audiences.iter().any(|c| c == a);
        let found = match aud {
            None => false,
            Some(Value::String(a)) => configured(a),
            Some(Value::Array(items)) => {
                let mut found = false;
                for item in items {
                    let a = item
                        .as_str()
                        .ok_or(JwtError::Claim("`aud` has an item that is not a string"))?;
                    found |= configured(a);
                }
                found
            }
            Some(_) => {
                return Err(JwtError::Claim(
                    "`aud` is neither a string nor an array of strings",
                ));
            }
        };
        if found {
            Ok(())
        } else {
            Err(JwtError::Audience)
        }
    }
}

/// A NumericDate claim (RFC 7519 §2: seconds, possibly fractional), if present.
fn numeric_date(
    claims: &Map<String, Value>,
    name: &str,
    wrong: &'static str,
) -> Result<Option<f64>, JwtError> {
    match claims.get(name) {
        None => Ok(None),
        Some(value) => value.as_f64().map(Some).ok_or(JwtError::Claim(wrong)),
    }
}

// === impl Parts ===

impl<'a> Parts<'a> {
    fn split(token: &'a [u8]) -> Result<Parts<'a>, JwtError> {
        let mut dots = token
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'.')
            .map(|(i, _)| i);
        let (Some(first), Some(second), None) = (dots.next(), dots.next(), dots.next()) else {
            return Err(JwtError::Segments);
        };
        Ok(Parts {
            header: &token[..first],
            payload: &token[first + 1..second],
            signature: &token[second + 1..],
            signed: &token[..second],
        })
    }
}

/// A segment decoded and read as a JSON object.
fn decode_object(segment: &[u8], which: Segment) -> Result<Map<String, Value>, JwtError> {
    let bytes = b64url(segment).ok_or(JwtError::Base64(which))?;
    serde_json::from_slice(&bytes).map_err(|_| JwtError::Json(which))
}

// === impl Header ===

impl Header {
    fn parse(map: &Map<String, Value>) -> Result<Header, JwtError> {
        if map.contains_key("crit") {
            return Err(JwtError::Crit);
        }
        let alg = match map.get("alg") {
            None => return Err(JwtError::Header("`alg` is missing")),
            Some(Value::String(alg)) => alg,
            Some(_) => return Err(JwtError::Header("`alg` is not a string")),
        };
        let alg = match Alg::from_name(alg) {
            Some(alg) => alg,
            None if alg == "none" => return Err(JwtError::AlgNone),
            None if alg.starts_with("HS") => return Err(JwtError::Hmac),
            None => return Err(JwtError::UnsupportedAlg),
        };
        let kid = match map.get("kid") {
            None => None,
            Some(Value::String(kid)) => Some(kid.clone()),
            Some(_) => return Err(JwtError::Header("`kid` is not a string")),
        };
        Ok(Header { alg, kid })
    }

    /// `key` is one the token names: same `kid`, or either has none.
    fn names(&self, key: &Jwk) -> bool {
        match (self.kid.as_deref(), key.kid()) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        }
    }
}

/// Some key the header names and whose type and `alg` take the header's `alg` verifies the
/// signature. When the token's `kid` is in no key of the set, the failure is `UnknownKid`
/// (even if keys without a `kid` were tried), so the caller may refetch the set.
fn check_signature(
    keys: &Jwks,
    header: &Header,
    signed: &[u8],
    signature: &[u8],
) -> Result<(), JwtError> {
    let known = match header.kid.as_deref() {
        None => true,
        Some(kid) => keys.keys().iter().any(|k| k.kid() == Some(kid)),
    };
    let mut fitting = keys
        .keys()
        .iter()
        .filter(|k| header.names(k) && k.accepts(header.alg))
        .peekable();
    let failure = if fitting.peek().is_none() {
        JwtError::AlgMismatch
    } else if fitting.any(|k| k.verify(header.alg, signed, signature)) {
        return Ok(());
    } else {
        JwtError::BadSignature
    };
    Err(if known { failure } else { JwtError::UnknownKid })
}

impl std::fmt::Display for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Segment::Header => "header",
            Segment::Payload => "payload",
            Segment::Signature => "signature",
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
