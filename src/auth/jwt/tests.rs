//! Real keys, real signatures: RS256, PS256, ES256, ES384 and EdDSA tokens signed with
//! aws-lc-rs, then hostile variants of them. Property tests at the end.

use std::sync::OnceLock;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _};
use aws_lc_rs::{hmac, rsa};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::*;
use crate::auth::jwks::JwksError;

pub(crate) const NOW: u64 = 1_750_000_000;

struct Keys {
    rsa: rsa::KeyPair,
    rsa2: rsa::KeyPair,
    p256: EcdsaKeyPair,
    p384: EcdsaKeyPair,
    ed: Ed25519KeyPair,
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| Keys {
        rsa: rsa::KeyPair::generate(rsa::KeySize::Rsa2048).unwrap(),
        rsa2: rsa::KeyPair::generate(rsa::KeySize::Rsa2048).unwrap(),
        p256: EcdsaKeyPair::generate(&sig::ECDSA_P256_SHA256_FIXED_SIGNING).unwrap(),
        p384: EcdsaKeyPair::generate(&sig::ECDSA_P384_SHA384_FIXED_SIGNING).unwrap(),
        ed: Ed25519KeyPair::generate().unwrap(),
    })
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn rsa_jwk(key: &rsa::KeyPair, kid: &str) -> Value {
    let public = key.public_key();
    json!({
        "kty": "RSA", "kid": kid, "use": "sig",
        "n": b64(public.modulus().big_endian_without_leading_zero()),
        "e": b64(public.exponent().big_endian_without_leading_zero()),
    })
}

fn ec_jwk(key: &EcdsaKeyPair, crv: &str, kid: &str) -> Value {
    let point = key.public_key().as_ref();
    let len = (point.len() - 1) / 2;
    json!({
        "kty": "EC", "crv": crv, "kid": kid,
        "x": b64(&point[1..1 + len]), "y": b64(&point[1 + len..]),
    })
}

fn ed_jwk(kid: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(keys().ed.public_key().as_ref())})
}

/// The set every test verifies against: one key of each type.
pub(crate) fn jwks() -> Jwks {
    let k = keys();
    let doc = json!({"keys": [
        rsa_jwk(&k.rsa, "rsa"),
        ec_jwk(&k.p256, "P-256", "p256"),
        ec_jwk(&k.p384, "P-384", "p384"),
        ed_jwk("ed"),
    ]});
    Jwks::parse(doc.to_string().as_bytes()).unwrap()
}

/// Signs `signed` with the key the test set holds for `alg`.
fn sign(alg: &str, signed: &[u8]) -> Vec<u8> {
    let k = keys();
    let rng = SystemRandom::new();
    let rsa_sign = |key: &rsa::KeyPair, enc: &'static dyn sig::RsaEncoding| {
        let mut out = vec![0; key.public_modulus_len()];
        key.sign(enc, &rng, signed, &mut out).unwrap();
        out
    };
    match alg {
        "RS256" => rsa_sign(&k.rsa, &sig::RSA_PKCS1_SHA256),
        "RS512" => rsa_sign(&k.rsa, &sig::RSA_PKCS1_SHA512),
        "PS256" => rsa_sign(&k.rsa, &sig::RSA_PSS_SHA256),
        "RS256-other" => rsa_sign(&k.rsa2, &sig::RSA_PKCS1_SHA256),
        "ES256" => k.p256.sign(&rng, signed).unwrap().as_ref().to_vec(),
        "ES384" => k.p384.sign(&rng, signed).unwrap().as_ref().to_vec(),
        "EdDSA" => k.ed.sign(signed).as_ref().to_vec(),
        other => panic!("no test key for {other}"),
    }
}

/// A token of `header` and `claims` signed with the test key for `key_alg`.
fn token_with(header: &Value, claims: &Value, key_alg: &str) -> String {
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = sign(key_alg, signed.as_bytes());
    format!("{signed}.{}", b64(&signature))
}

pub(crate) fn token(alg: &str, kid: &str, claims: &Value) -> String {
    token_with(&json!({"alg": alg, "kid": kid, "typ": "JWT"}), claims, alg)
}

fn claims() -> Value {
    json!({"iss": "https://issuer.example", "aud": "api", "sub": "alice", "exp": NOW + 300})
}

fn check(token: &str) -> Result<Claims, JwtError> {
    verify(token.as_bytes(), &jwks(), &Validation::default(), NOW)
}

fn check_with(token: &str, rules: &Validation) -> Result<Claims, JwtError> {
    verify(token.as_bytes(), &jwks(), rules, NOW)
}

#[test]
fn tokens_of_each_algorithm_verify() {
    for (alg, kid) in [
        ("RS256", "rsa"),
        ("RS512", "rsa"),
        ("PS256", "rsa"),
        ("ES256", "p256"),
        ("ES384", "p384"),
        ("EdDSA", "ed"),
    ] {
        let claims = check(&token(alg, kid, &claims())).unwrap_or_else(|e| panic!("{alg}: {e}"));
        assert_eq!(claims.get("sub"), Some(&json!("alice")), "{alg}");
    }
}

#[test]
fn a_changed_payload_or_signature_fails() {
    let good = token("ES256", "p256", &claims());
    let (signed, signature) = good.rsplit_once('.').unwrap();
    let (header, _) = signed.split_once('.').unwrap();
    let forged = b64(json!({"sub": "mallory", "exp": NOW + 300})
        .to_string()
        .as_bytes());
    assert_eq!(
        check(&format!("{header}.{forged}.{signature}")),
        Err(JwtError::BadSignature)
    );
    let other = token("RS256", "rsa", &claims());
    let other_sig = other.rsplit_once('.').unwrap().1;
    assert_eq!(
        check(&format!("{signed}.{other_sig}")),
        Err(JwtError::BadSignature)
    );
}

#[test]
fn alg_none_is_refused() {
    let header = b64(br#"{"alg":"none"}"#);
    let payload = b64(claims().to_string().as_bytes());
    assert_eq!(
        check(&format!("{header}.{payload}.")),
        Err(JwtError::AlgNone)
    );
    let header = b64(br#"{"alg":"None"}"#);
    assert_eq!(
        check(&format!("{header}.{payload}.")),
        Err(JwtError::UnsupportedAlg)
    );
}

/// Algorithm confusion: HS256 keyed with the RSA public key's bytes (as a verifier that
/// treats the JWK's key material as an HMAC secret would) is refused for the header's
/// `alg`, whatever key bytes were used.
#[test]
fn hs256_signed_with_the_public_key_is_refused() {
    let public = keys().rsa.public_key();
    let materials: [&[u8]; 2] = [
        public.as_ref(),
        public.modulus().big_endian_without_leading_zero(),
    ];
    for material in materials {
        for (alg, hmac_alg) in [("HS256", hmac::HMAC_SHA256), ("HS512", hmac::HMAC_SHA512)] {
            let signed = format!(
                "{}.{}",
                b64(json!({"alg": alg, "kid": "rsa"}).to_string().as_bytes()),
                b64(claims().to_string().as_bytes())
            );
            let tag = hmac::sign(&hmac::Key::new(hmac_alg, material), signed.as_bytes());
            let token = format!("{signed}.{}", b64(tag.as_ref()));
            assert_eq!(check(&token), Err(JwtError::Hmac), "{alg}");
        }
    }
    // And an `oct` key in a set is never a key.
    let doc = json!({"keys": [{"kty": "oct", "k": b64(public.as_ref()), "alg": "HS256"}]});
    assert_eq!(
        Jwks::parse(doc.to_string().as_bytes()).unwrap_err(),
        JwksError::NoUsableKey { skipped: 1 }
    );
}

#[test]
fn header_alg_must_fit_the_key_type() {
    // An EC signature presented as RS256 under the EC key's kid.
    let t = token_with(&json!({"alg": "RS256", "kid": "p256"}), &claims(), "ES256");
    assert_eq!(check(&t), Err(JwtError::AlgMismatch));
    // A P-256 key does not verify ES384, nor EdDSA.
    let t = token_with(&json!({"alg": "ES384", "kid": "p256"}), &claims(), "ES384");
    assert_eq!(check(&t), Err(JwtError::AlgMismatch));
    let t = token_with(&json!({"alg": "EdDSA", "kid": "rsa"}), &claims(), "EdDSA");
    assert_eq!(check(&t), Err(JwtError::AlgMismatch));
}

#[test]
fn a_keys_own_alg_narrows_what_it_verifies() {
    let mut jwk = rsa_jwk(&keys().rsa, "rsa");
    jwk["alg"] = json!("PS256");
    let set = Jwks::parse(json!({"keys": [jwk]}).to_string().as_bytes()).unwrap();
    let rules = Validation::default();
    let rs = token("RS256", "rsa", &claims());
    assert_eq!(
        verify(rs.as_bytes(), &set, &rules, NOW).unwrap_err(),
        JwtError::AlgMismatch
    );
    let ps = token("PS256", "rsa", &claims());
    assert!(verify(ps.as_bytes(), &set, &rules, NOW).is_ok());
}

#[test]
fn an_unknown_kid_is_reported_as_such() {
    let t = token("RS256", "rotated-key", &claims());
    assert_eq!(check(&t), Err(JwtError::UnknownKid));
    // Also when kid-less keys of the set were tried and failed.
    let mut jwk = rsa_jwk(&keys().rsa2, "");
    jwk.as_object_mut().unwrap().remove("kid");
    let set = Jwks::parse(json!({"keys": [jwk]}).to_string().as_bytes()).unwrap();
    assert_eq!(
        verify(t.as_bytes(), &set, &Validation::default(), NOW).unwrap_err(),
        JwtError::UnknownKid
    );
}

#[test]
fn without_kid_every_key_of_the_type_is_tried() {
    let k = keys();
    let doc = json!({"keys": [
        ed_jwk("ed"),
        rsa_jwk(&k.rsa, "first"),
        rsa_jwk(&k.rsa2, "second"),
    ]});
    let set = Jwks::parse(doc.to_string().as_bytes()).unwrap();
    let t = token_with(&json!({"alg": "RS256"}), &claims(), "RS256-other");
    assert!(verify(t.as_bytes(), &set, &Validation::default(), NOW).is_ok());
    let t = token_with(&json!({"alg": "ES256"}), &claims(), "ES256");
    assert_eq!(
        verify(t.as_bytes(), &set, &Validation::default(), NOW).unwrap_err(),
        JwtError::AlgMismatch,
        "no P-256 key in this set"
    );
}

#[test]
fn exp_and_nbf_with_leeway() {
    let at = |exp: Option<u64>, nbf: Option<u64>| {
        let mut c = json!({"sub": "a"});
        if let Some(exp) = exp {
            c["exp"] = json!(exp);
        }
        if let Some(nbf) = nbf {
            c["nbf"] = json!(nbf);
        }
        token("EdDSA", "ed", &c)
    };
    assert!(
        check(&at(Some(NOW - 30), None)).is_ok(),
        "within the leeway"
    );
    assert_eq!(check(&at(Some(NOW - 60), None)), Err(JwtError::Expired));
    assert_eq!(check(&at(Some(NOW - 3600), None)), Err(JwtError::Expired));
    assert!(
        check(&at(None, Some(NOW + 59))).is_ok(),
        "within the leeway"
    );
    assert_eq!(check(&at(None, Some(NOW + 61))), Err(JwtError::NotYetValid));
    let strict = Validation {
        leeway_secs: 0,
        ..Validation::default()
    };
    assert_eq!(
        check_with(&at(Some(NOW), None), &strict),
        Err(JwtError::Expired)
    );
    assert!(check_with(&at(Some(NOW + 1), Some(NOW)), &strict).is_ok());
    assert!(check(&at(None, None)).is_ok(), "no exp: no expiry");
    let require = Validation {
        require_exp: true,
        ..Validation::default()
    };
    assert_eq!(
        check_with(&at(None, None), &require),
        Err(JwtError::MissingExp)
    );
    let fractional = token("EdDSA", "ed", &json!({"exp": NOW as f64 - 59.5}));
    assert!(check(&fractional).is_ok());
    let text = token("EdDSA", "ed", &json!({"exp": "tomorrow"}));
    assert_eq!(check(&text), Err(JwtError::Claim("`exp` is not a number")));
    let text = token("EdDSA", "ed", &json!({"nbf": null}));
    assert_eq!(check(&text), Err(JwtError::Claim("`nbf` is not a number")));
}

#[test]
fn issuer_is_matched_exactly() {
    let rules = Validation {
        issuer: Some("https://issuer.example".into()),
        ..Validation::default()
    };
    assert!(check_with(&token("ES256", "p256", &claims()), &rules).is_ok());
    for iss in [
        json!("https://issuer.example/"),
        json!("HTTPS://issuer.example"),
        json!(["https://issuer.example"]),
        Value::Null,
    ] {
        let mut c = claims();
        c["iss"] = iss;
        assert_eq!(
            check_with(&token("ES256", "p256", &c), &rules),
            Err(JwtError::Issuer)
        );
    }
    let mut c = claims();
    c.as_object_mut().unwrap().remove("iss");
    assert_eq!(
        check_with(&token("ES256", "p256", &c), &rules),
        Err(JwtError::Issuer)
    );
}

#[test]
fn audience_string_or_array_meets_the_configured_ones() {
    let rules = Validation {
        audiences: vec!["api".into(), "web".into()],
        ..Validation::default()
    };
    let with_aud = |aud: Option<Value>| {
        let mut c = claims();
        match aud {
            Some(aud) => c["aud"] = aud,
            None => {
                c.as_object_mut().unwrap().remove("aud");
            }
        }
        check_with(&token("EdDSA", "ed", &c), &rules)
    };
    assert!(with_aud(Some(json!("web"))).is_ok());
    assert!(with_aud(Some(json!(["other", "api"]))).is_ok());
    assert_eq!(with_aud(Some(json!("other"))), Err(JwtError::Audience));
    assert_eq!(with_aud(Some(json!([]))), Err(JwtError::Audience));
    assert_eq!(with_aud(None), Err(JwtError::Audience));
    assert!(matches!(with_aud(Some(json!(5))), Err(JwtError::Claim(_))));
    assert!(matches!(
        with_aud(Some(json!(["api", 5]))),
        Err(JwtError::Claim(_))
    ));
    // No audiences configured: any or none.
    let mut c = claims();
    c["aud"] = json!("whatever");
    assert!(check(&token("EdDSA", "ed", &c)).is_ok());
}

#[test]
fn malformed_base64url_and_json_are_refused() {
    let good = token("EdDSA", "ed", &claims());
    let segs: Vec<&str> = good.split('.').collect();
    let join = |h: &str, p: &str, s: &str| format!("{h}.{p}.{s}");
    assert_eq!(
        check(&join(&format!("{}=", segs[0]), segs[1], segs[2])),
        Err(JwtError::Base64(Segment::Header))
    );
    assert_eq!(
        check(&join(segs[0], segs[1], &format!("{}==", segs[2]))),
        Err(JwtError::Base64(Segment::Signature))
    );
    // The standard alphabet's `+` and `/` are not base64url.
    let standard = base64::engine::general_purpose::STANDARD_NO_PAD
        .encode(br#"{"alg":"EdDSA","kid":"ed","x":"~~~???"}"#);
    assert!(
        standard.contains('+') && standard.contains('/'),
        "{standard}"
    );
    assert_eq!(
        check(&join(&standard, segs[1], segs[2])),
        Err(JwtError::Base64(Segment::Header))
    );
    assert_eq!(
        check(&join(&format!(" {}", segs[0]), segs[1], segs[2])),
        Err(JwtError::Base64(Segment::Header))
    );
    // A padded payload segment, signed as it is: the signature holds, the payload is refused.
    let header = b64(br#"{"alg":"EdDSA","kid":"ed"}"#);
    let padded = base64::engine::general_purpose::URL_SAFE.encode(b"{\"a\":1}");
    assert!(padded.ends_with('='));
    let signed = format!("{header}.{padded}");
    let t = format!("{signed}.{}", b64(&sign("EdDSA", signed.as_bytes())));
    assert_eq!(check(&t), Err(JwtError::Base64(Segment::Payload)));
    // JSON that is not an object, signed.
    for body in [&b"[1,2]"[..], b"\"text\"", b"{\"a\":", b"", b"\xff"] {
        let signed = format!("{header}.{}", b64(body));
        let t = format!("{signed}.{}", b64(&sign("EdDSA", signed.as_bytes())));
        assert_eq!(check(&t), Err(JwtError::Json(Segment::Payload)));
    }
    for header in [&b"[]"[..], b"{", b"null", b""] {
        let t = format!("{}.{}.{}", b64(header), segs[1], segs[2]);
        assert_eq!(check(&t), Err(JwtError::Json(Segment::Header)));
    }
    let t = format!("{}.{}.{}", b64(br#"{"alg":1}"#), segs[1], segs[2]);
    assert_eq!(check(&t), Err(JwtError::Header("`alg` is not a string")));
    let t = format!("{}.{}.{}", b64(br#"{"kid":"ed"}"#), segs[1], segs[2]);
    assert_eq!(check(&t), Err(JwtError::Header("`alg` is missing")));
    let t = format!(
        "{}.{}.{}",
        b64(br#"{"alg":"EdDSA","kid":7}"#),
        segs[1],
        segs[2]
    );
    assert_eq!(check(&t), Err(JwtError::Header("`kid` is not a string")));
}

#[test]
fn anything_but_three_segments_is_refused() {
    let good = token("EdDSA", "ed", &claims());
    for t in [
        String::new(),
        "abc".into(),
        "a.b".into(),
        format!("{good}."),
        format!("{good}.x.y"),
        good.replacen('.', "", 1),
    ] {
        assert_eq!(check(&t), Err(JwtError::Segments), "{t}");
    }
}

#[test]
fn an_oversized_token_is_refused_before_decoding() {
    let huge = "\u{1}".repeat(DEFAULT_MAX_LEN + 1);
    assert_eq!(
        check(&huge),
        Err(JwtError::TooLong {
            len: DEFAULT_MAX_LEN + 1,
            max: DEFAULT_MAX_LEN
        })
    );
    let good = token("EdDSA", "ed", &claims());
    let tight = Validation {
        max_len: good.len() - 1,
        ..Validation::default()
    };
    assert!(matches!(
        check_with(&good, &tight),
        Err(JwtError::TooLong { .. })
    ));
    let exact = Validation {
        max_len: good.len(),
        ..Validation::default()
    };
    assert!(check_with(&good, &exact).is_ok());
}

#[test]
fn crit_is_refused_even_when_signed() {
    for crit in [json!(["b64"]), json!([]), Value::Null] {
        let t = token_with(
            &json!({"alg": "EdDSA", "kid": "ed", "crit": crit}),
            &claims(),
            "EdDSA",
        );
        assert_eq!(check(&t), Err(JwtError::Crit));
    }
}

/// Errors are `Copy` and hold no token text; their Display shows none of the token.
#[test]
fn errors_never_show_the_token() {
    let secret = "s3cr3t-kid-and-claims";
    let tokens = [
        token(
            "EdDSA",
            secret,
            &json!({"sub": secret, "exp": 1, "aud": secret}),
        ),
        token_with(
            &json!({"alg": "HS256", "kid": secret}),
            &json!({"sub": secret}),
            "EdDSA",
        ),
        format!("{secret}.{secret}.{secret}"),
        "x".repeat(DEFAULT_MAX_LEN + 1),
    ];
    let rules = Validation {
        issuer: Some("i".into()),
        audiences: vec!["a".into()],
        ..Validation::default()
    };
    for t in &tokens {
        let err = check_with(t, &rules).unwrap_err().to_string();
        assert!(!err.contains(secret), "{err}");
        for segment in t.split('.') {
            assert!(segment.len() < 8 || !err.contains(segment), "{err}");
        }
    }
}

#[test]
fn jwks_skips_unusable_keys_and_keeps_the_rest() {
    let k = keys();
    let mut small = rsa_jwk(&k.rsa, "small");
    small["n"] = json!(b64(&[0xc5; 128]));
    let mut enc = rsa_jwk(&k.rsa, "enc");
    enc["use"] = json!("enc");
    let mut bad_point = ec_jwk(&k.p256, "P-256", "bad");
    bad_point["y"] = json!(b64(&[1; 32]));
    let mut mismatched = ec_jwk(&k.p256, "P-256", "mismatched");
    mismatched["alg"] = json!("ES384");
    let mut padded = ed_jwk("padded");
    padded["x"] = json!(format!("{}=", b64(k.ed.public_key().as_ref())));
    let mut leading_zero = rsa_jwk(&k.rsa, "zero");
    let mut n = vec![0];
    n.extend_from_slice(
        k.rsa
            .public_key()
            .modulus()
            .big_endian_without_leading_zero(),
    );
    leading_zero["n"] = json!(b64(&n));
    let doc = json!({"keys": [
        small, enc, bad_point, mismatched, padded,
        {"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"},
        {"kty": "OKP", "crv": "X25519", "x": b64(&[9; 32])},
        {"kty": 5},
        "not an object",
        {"kty": "RSA", "n": "AQAB"},
        {"kty": "RSA", "kid": "ops", "key_ops": ["encrypt"], "n": "AQAB", "e": "AQAB"},
        leading_zero,
    ]});
    let set = Jwks::parse(doc.to_string().as_bytes()).unwrap();
    assert_eq!(set.len(), 1);
    assert_eq!(set.keys()[0].kid(), Some("zero"));
    assert_eq!(set.skipped().len(), 11);
    let kids: Vec<_> = set.skipped().iter().map(|s| s.kid.as_deref()).collect();
    assert_eq!(
        &kids[..5],
        &[
            Some("small"),
            Some("enc"),
            Some("bad"),
            Some("mismatched"),
            Some("padded")
        ]
    );
    let t = token("RS256", "zero", &claims());
    assert!(verify(t.as_bytes(), &set, &Validation::default(), NOW).is_ok());

    for (doc, err) in [
        (&b"{}"[..], "not"),
        (b"[]", "not"),
        (b"{\"keys\": {}}", "not"),
        (b"{\"keys\": []}", "no usable key"),
    ] {
        let e = Jwks::parse(doc).unwrap_err().to_string();
        assert!(e.contains(err), "{e}");
    }
    let many = json!({"keys": vec![ed_jwk("x"); MAX + 1]});
    assert_eq!(
        Jwks::parse(many.to_string().as_bytes()).unwrap_err(),
        JwksError::TooManyKeys(MAX + 1)
    );
}

const MAX: usize = crate::auth::jwks::MAX_KEYS;

mod props {
    //! No input panics the verifier, and no change to a good token passes. Cases:
    //! `PROPTEST_CASES` (default 64); at 10⁶, in release:
    //! `PROPTEST_CASES=1000000 cargo test --release --lib auth::jwt::tests::props`.

    use proptest::prelude::*;
    use proptest::test_runner::Config;

    use super::*;

    fn config() -> Config {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(64);
        Config {
            cases,
            // `prop_assume!` drops the few edits that change nothing.
            max_global_rejects: cases / 4 + 1024,
            failure_persistence: None,
            ..Config::default()
        }
    }

    /// One good token per key type, made once.
    fn good_tokens() -> &'static [String; 3] {
        static TOKENS: OnceLock<[String; 3]> = OnceLock::new();
        TOKENS.get_or_init(|| {
            [
                token("RS256", "rsa", &claims()),
                token("ES256", "p256", &claims()),
                token("EdDSA", "ed", &claims()),
            ]
        })
    }

    fn set() -> &'static Jwks {
        static SET: OnceLock<Jwks> = OnceLock::new();
        SET.get_or_init(jwks)
    }

    #[derive(Clone, Debug)]
    enum Edit {
        Replace(usize, u8),
        Remove(usize),
        Insert(usize, u8),
        Truncate(usize),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let byte = prop_oneof![
            prop::sample::select(b"ABCXYZabcxyz0189-_.=+/ \n".to_vec()),
            any::<u8>(),
        ];
        prop_oneof![
            (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Replace(i, b)),
            any::<usize>().prop_map(Edit::Remove),
            (any::<usize>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
            any::<usize>().prop_map(Edit::Truncate),
        ]
    }

    fn apply(token: &[u8], edits: &[Edit]) -> Vec<u8> {
        let mut t = token.to_vec();
        for e in edits {
            let len = t.len().max(1);
            match *e {
                Edit::Replace(i, b) if !t.is_empty() => t[i % len] = b,
                Edit::Remove(i) if !t.is_empty() => {
                    t.remove(i % len);
                }
                Edit::Insert(i, b) => t.insert(i % (t.len() + 1), b),
                Edit::Truncate(i) => t.truncate(i % len),
                _ => {}
            }
        }
        t
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn mutated_tokens_never_verify(which in 0..3usize, edits in prop::collection::vec(edit(), 1..4)) {
            let good = good_tokens()[which].as_bytes();
            let bad = apply(good, &edits);
            prop_assume!(bad != good);
            let result = verify(&bad, set(), &Validation::default(), NOW);
            prop_assert!(result.is_err(), "a mutated token verified: {:?}", String::from_utf8_lossy(&bad));
        }

        #[test]
        fn arbitrary_bytes_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            prop_assert!(verify(&bytes, set(), &Validation::default(), NOW).is_err());
        }

        #[test]
        fn arbitrary_segments_are_refused(
            segs in prop::collection::vec("[A-Za-z0-9_=+/-]{0,40}", 0..5),
        ) {
            let t = segs.join(".");
            prop_assert!(verify(t.as_bytes(), set(), &Validation::default(), NOW).is_err());
        }

        /// Headers of arbitrary members and values, over a real payload and signature.
        #[test]
        fn arbitrary_headers_are_refused(
            alg in prop_oneof![
                prop::sample::select(vec!["none", "HS256", "RS256", "ES256", "EdDSA", "ES512", "", "rs256"])
                    .prop_map(|s| json!(s)),
                any::<i64>().prop_map(|n| json!(n)),
                ".*".prop_map(|s| json!(s)),
            ],
            kid in prop::option::of(prop_oneof![".{0,8}".prop_map(|s| json!(s)), Just(json!(null)), Just(json!(["ed"]))]),
            crit in any::<bool>(),
            extra in prop::collection::btree_map("[a-z]{1,4}", any::<i32>(), 0..4),
            which in 0..3usize,
        ) {
            let mut header = json!({"alg": alg});
            for (k, v) in extra {
                header[k] = json!(v);
            }
            if let Some(kid) = kid {
                header["kid"] = kid;
            }
            if crit {
                header["crit"] = json!(["exp"]);
            }
            let good = &good_tokens()[which];
            let (_, rest) = good.split_once('.').unwrap();
            let t = format!("{}.{rest}", b64(header.to_string().as_bytes()));
            prop_assume!(t != *good);
            let result = verify(t.as_bytes(), set(), &Validation::default(), NOW);
            prop_assert!(result.is_err());
        }

        /// Signed payloads of arbitrary bytes: read or refused, never a panic.
        #[test]
        fn arbitrary_signed_payloads_never_panic(payload in prop::collection::vec(any::<u8>(), 0..200)) {
            let signed = format!("{}.{}", b64(br#"{"alg":"EdDSA","kid":"ed"}"#), b64(&payload));
            let t = format!("{signed}.{}", b64(&sign("EdDSA", signed.as_bytes())));
            let result = verify(t.as_bytes(), set(), &Validation::default(), NOW);
            let is_object = serde_json::from_slice::<Value>(&payload).is_ok_and(|v| v.is_object());
            prop_assert!(result.is_ok() || !is_object || matches!(result, Err(JwtError::Claim(_) | JwtError::Expired | JwtError::NotYetValid)));
        }
    }
}

/// A key set and a password file are shared across workers (behind an `ArcSwap`).
#[test]
fn sets_and_files_are_send_and_sync() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Jwks>();
    shared::<Claims>();
    shared::<crate::auth::htpasswd::Htpasswd>();
    shared::<crate::auth::htpasswd::VerifiedCache>();
}
