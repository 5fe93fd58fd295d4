//! A token issuer for tests: an ES256 key made at start, its JWKS, and compact tokens signed
//! with it (RFC 7515), through aws-lc-rs as a real issuer's library would.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

pub struct Issuer {
    key: EcdsaKeyPair,
    kid: String,
}

impl Issuer {
    pub fn new(kid: &str) -> Self {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .unwrap();
        let key =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap();
        Self {
            key,
            kid: kid.to_string(),
        }
    }

    /// The public key as a JWKS document.
    pub fn jwks(&self) -> String {
        // Uncompressed point: 0x04, x, y.
        let point = self.key.public_key().as_ref();
        let (x, y) = point[1..].split_at(32);
        json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": self.kid, "alg": "ES256", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        }]})
        .to_string()
    }

    /// A token with `claims`, signed ES256.
    pub fn token(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": self.kid});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self
            .key
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .unwrap();
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}

/// Now, in seconds since the epoch, for `exp` and `nbf`.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
