//! JSON Web Key Sets (RFC 7517) for JWT verification: public keys of type RSA, EC (P-256,
//! P-384) and OKP (Ed25519), each checked once when the set is parsed, so that verifying a
//! token only looks keys up.
//!
//! The caller fetches the document (a remote JWKS or an inline one) and passes its bytes.
//! Keys pier cannot verify with (symmetric `oct` keys, `use: enc`, other curves, RSA moduli
//! under 2048 bits, malformed members) are skipped and listed in [`Jwks::skipped`] for the
//! log, since real sets mix signing keys with others. A set with no usable key is refused, so
//! the caller keeps its last good one.
//!
//! A key's type decides the algorithms it verifies ([`KeyType::accepts`]); its `alg`, when
//! present, narrows them to that one. HMAC (`HS*`) is never supported: a JWKS is public.

use std::fmt;

use aws_lc_rs::signature::{self, ParsedPublicKey, RsaParameters, RsaPublicKeyComponents};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::Value;

/// The largest JWKS document parsed, in bytes. Real sets are a few KiB.
pub const MAX_JWKS_LEN: usize = 512 * 1024;

/// The most keys a set may hold (usable or not); more is refused as a whole.
pub const MAX_KEYS: usize = 256;

/// A JWS algorithm pier verifies (RFC 7518 §3.1; EdDSA of RFC 8037).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alg {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    EdDsa,
}

/// What a key is, which decides the algorithms it verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyType {
    Rsa,
    P256,
    P384,
    Ed25519,
}

/// One usable public key of a set.
#[derive(Clone)]
pub struct Jwk {
    kid: Option<String>,
    alg: Option<Alg>,
    key: Key,
}

#[derive(Clone)]
enum Key {
    /// Big-endian, without leading zeros; checked by aws-lc-rs at parse time.
    Rsa {
        n: Box<[u8]>,
        e: Box<[u8]>,
    },
    Ec(KeyType, ParsedPublicKey),
    Ed25519(ParsedPublicKey),
}

/// The usable keys of a JWKS document, in document order.
#[derive(Clone, Debug)]
pub struct Jwks {
    keys: Vec<Jwk>,
    skipped: Vec<Skipped>,
}

/// A member of `keys` left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Its position in the document's `keys` array.
    pub index: usize,
    pub kid: Option<String>,
    pub reason: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    #[error("JWKS document of {len} bytes is over the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("JWKS document is not a JSON object with a `keys` array: {0}")]
    Json(String),
    #[error("JWKS document has {0} keys, over the limit of {MAX_KEYS}")]
    TooManyKeys(usize),
    #[error("JWKS document has no usable key ({skipped} skipped)")]
    NoUsableKey { skipped: usize },
}

/// The members of one key that pier reads; others are ignored.
#[derive(Deserialize)]
struct RawKey {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    key_ops: Option<Vec<String>>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

#[derive(Deserialize)]
struct RawSet {
    keys: Vec<Value>,
}

/// Strict base64url (RFC 7515 §2): no padding, no whitespace, no stray trailing bits.
pub(super) fn b64url(text: &[u8]) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

// === impl Alg ===

impl Alg {
    /// The JWS `alg` name, or `None` for one pier does not verify. `Ed25519` (RFC 9864) is
    /// the fully specified name of `EdDSA` over Ed25519.
    pub fn from_name(name: &str) -> Option<Alg> {
        Some(match name {
            "RS256" => Alg::Rs256,
            "RS384" => Alg::Rs384,
            "RS512" => Alg::Rs512,
            "PS256" => Alg::Ps256,
            "PS384" => Alg::Ps384,
            "PS512" => Alg::Ps512,
            "ES256" => Alg::Es256,
            "ES384" => Alg::Es384,
            "EdDSA" | "Ed25519" => Alg::EdDsa,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Rs384 => "RS384",
            Alg::Rs512 => "RS512",
            Alg::Ps256 => "PS256",
            Alg::Ps384 => "PS384",
            Alg::Ps512 => "PS512",
            Alg::Es256 => "ES256",
            Alg::Es384 => "ES384",
            Alg::EdDsa => "EdDSA",
        }
    }

    /// The one key type that verifies this algorithm.
    pub fn key_type(self) -> KeyType {
        match self {
            Alg::Rs256 | Alg::Rs384 | Alg::Rs512 | Alg::Ps256 | Alg::Ps384 | Alg::Ps512 => {
                KeyType::Rsa
            }
            Alg::Es256 => KeyType::P256,
            Alg::Es384 => KeyType::P384,
            Alg::EdDsa => KeyType::Ed25519,
        }
    }

    /// aws-lc-rs' parameters for an RSA algorithm (moduli of 2048 to 8192 bits).
    fn rsa_params(self) -> Option<&'static RsaParameters> {
        Some(match self {
            Alg::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
            Alg::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
            Alg::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
            Alg::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
            Alg::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
            Alg::Ps512 => &signature::RSA_PSS_2048_8192_SHA512,
            _ => return None,
        })
    }
}

impl fmt::Display for Alg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// === impl KeyType ===

impl KeyType {
    pub fn accepts(self, alg: Alg) -> bool {
        alg.key_type() == self
    }
}

// === impl Jwk ===

impl Jwk {
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// The key's own `alg`, when the set names one.
    pub fn alg(&self) -> Option<Alg> {
        self.alg
    }

    pub fn key_type(&self) -> KeyType {
        match &self.key {
            Key::Rsa { .. } => KeyType::Rsa,
            Key::Ec(kind, _) => *kind,
            Key::Ed25519(_) => KeyType::Ed25519,
        }
    }

    /// This key may verify `alg`: its type fits, and its own `alg`, if any, is `alg`.
    pub fn accepts(&self, alg: Alg) -> bool {
        self.key_type().accepts(alg) && self.alg.is_none_or(|own| own == alg)
    }

    /// `signature` is a valid `alg` signature of `message` by this key. False when the key
    /// does not accept `alg`.
    pub fn verify(&self, alg: Alg, message: &[u8], signature: &[u8]) -> bool {
        if !self.accepts(alg) {
            return false;
        }
        match (&self.key, alg.rsa_params()) {
            (Key::Rsa { n, e }, Some(params)) => RsaPublicKeyComponents { n, e }
                .verify(params, message, signature)
                .is_ok(),
            (Key::Ec(_, key) | Key::Ed25519(key), None) => {
                key.verify_sig(message, signature).is_ok()
            }
            _ => false,
        }
    }
}

impl fmt::Debug for Jwk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jwk")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("type", &self.key_type())
            .finish()
    }
}

// === impl Jwks ===

impl Jwks {
    /// Parses a JWKS document (`{"keys": [...]}`), keeping the keys pier can verify with.
    pub fn parse(json: &[u8]) -> Result<Jwks, JwksError> {
        if json.len() > MAX_JWKS_LEN {
            return Err(JwksError::TooLarge {
                len: json.len(),
                max: MAX_JWKS_LEN,
            });
        }
        let raw: RawSet =
            serde_json::from_slice(json).map_err(|e| JwksError::Json(e.to_string()))?;
        if raw.keys.len() > MAX_KEYS {
            return Err(JwksError::TooManyKeys(raw.keys.len()));
        }
        let mut set = Jwks {
            keys: Vec::with_capacity(raw.keys.len()),
            skipped: Vec::new(),
        };
        for (index, value) in raw.keys.into_iter().enumerate() {
            match serde_json::from_value::<RawKey>(value) {
                Ok(raw) => match Jwk::from_raw(&raw) {
                    Ok(key) => set.keys.push(key),
                    Err(reason) => set.skipped.push(Skipped {
                        index,
                        kid: raw.kid,
                        reason,
                    }),
                },
                Err(_) => set.skipped.push(Skipped {
                    index,
                    kid: None,
                    reason: "not an object with a string `kty` and string members",
                }),
            }
        }
        if set.keys.is_empty() {
            return Err(JwksError::NoUsableKey {
                skipped: set.skipped.len(),
            });
        }
        Ok(set)
    }

    pub fn keys(&self) -> &[Jwk] {
        &self.keys
    }

    /// A set without keys: a `remoteJWKS` provider's until its first fetch succeeds (every
    /// token is refused).
    pub fn empty() -> Jwks {
        Jwks {
            keys: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// The members of the document left out, for the log.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl Jwk {
    fn from_raw(raw: &RawKey) -> Result<Jwk, &'static str> {
        if raw.use_.as_deref().is_some_and(|u| u != "sig") {
            return Err("`use` is not `sig`");
        }
        if let Some(ops) = &raw.key_ops
            && !ops.iter().any(|op| op == "verify")
        {
            return Err("`key_ops` lacks `verify`");
        }
        let alg = match raw.alg.as_deref() {
            None => None,
            Some(name) => Some(Alg::from_name(name).ok_or("`alg` is not one pier verifies")?),
        };
        let key = match raw.kty.as_str() {
            "RSA" => rsa_key(raw)?,
            "EC" => ec_key(raw)?,
            "OKP" => okp_key(raw)?,
            "oct" => return Err("symmetric (`oct`) keys are not supported"),
            _ => return Err("`kty` is not RSA, EC or OKP"),
        };
        let jwk = Jwk {
            kid: raw.kid.clone(),
            alg: None,
            key,
        };
        match alg {
            Some(alg) if !jwk.key_type().accepts(alg) => Err("`alg` does not fit `kty`/`crv`"),
            _ => Ok(Jwk { alg, ..jwk }),
        }
    }
}

/// A base64url member, decoded; `what` names it in the skip reason.
fn member(value: Option<&str>, what: &'static str) -> Result<Vec<u8>, &'static str> {
    let text = value.ok_or(what)?;
    b64url(text.as_bytes()).ok_or(what)
}

fn rsa_key(raw: &RawKey) -> Result<Key, &'static str> {
    let n = member(raw.n.as_deref(), "RSA `n` missing or not base64url")?;
    let e = member(raw.e.as_deref(), "RSA `e` missing or not base64url")?;
    let n = strip_zeros(&n);
    let e = strip_zeros(&e);
    let bits = n.len() * 8 - n.first().map_or(8, |b| b.leading_zeros() as usize);
    if !(2048..=8192).contains(&bits) {
        return Err("RSA modulus is not 2048 to 8192 bits");
    }
    if e.is_empty() || e.len() > 4 {
        return Err("RSA exponent is empty or over 32 bits");
    }
    RsaPublicKeyComponents { n, e }
        .to_parsed_public_key(&signature::RSA_PKCS1_2048_8192_SHA256)
        .map_err(|_| "RSA key rejected by aws-lc-rs")?;
    Ok(Key::Rsa {
        n: n.into(),
        e: e.into(),
    })
}

fn strip_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

fn ec_key(raw: &RawKey) -> Result<Key, &'static str> {
    let (kind, len, alg) = match raw.crv.as_deref() {
        Some("P-256") => (KeyType::P256, 32, &signature::ECDSA_P256_SHA256_FIXED),
        Some("P-384") => (KeyType::P384, 48, &signature::ECDSA_P384_SHA384_FIXED),
        _ => return Err("EC `crv` is not P-256 or P-384"),
    };
    let x = member(raw.x.as_deref(), "EC `x` missing or not base64url")?;
    let y = member(raw.y.as_deref(), "EC `y` missing or not base64url")?;
    if x.len() != len || y.len() != len {
        return Err("EC coordinates are not the curve's length");
    }
    let mut point = Vec::with_capacity(1 + 2 * len);
    point.push(0x04);
    point.extend_from_slice(&x);
    point.extend_from_slice(&y);
    let key = ParsedPublicKey::new(alg, point).map_err(|_| "EC point not on the curve")?;
    Ok(Key::Ec(kind, key))
}

fn okp_key(raw: &RawKey) -> Result<Key, &'static str> {
    if raw.crv.as_deref() != Some("Ed25519") {
        return Err("OKP `crv` is not Ed25519");
    }
    let x = member(raw.x.as_deref(), "OKP `x` missing or not base64url")?;
    if x.len() != 32 {
        return Err("Ed25519 `x` is not 32 bytes");
    }
    let key = ParsedPublicKey::new(&signature::ED25519, x)
        .map_err(|_| "Ed25519 key rejected by aws-lc-rs")?;
    Ok(Key::Ed25519(key))
}
