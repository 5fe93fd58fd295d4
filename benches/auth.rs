//! What authentication costs per request: verifying a JSON Web Token per algorithm, and a
//! password per `.htpasswd` scheme.
//!
//! Decisions it informs: whether pier needs a cache of verified tokens (a JWT policy must cost
//! at most 1.15× a route without one at c=64: compare these figures with a request's cost in
//! `benches/proxy.rs`; it has one, and `jwt_verified_cache_hit` is what a request with a token
//! seen before pays), and how many password checks a core can do (which bounds what a flood of
//! wrong passwords can take: `phase::verify_basic` runs at most one per core at once).
//! Run: `cargo bench --bench auth`.

use std::hint::black_box;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RSA_PKCS1_SHA256,
    RsaKeyPair,
};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pier::auth::htpasswd::Htpasswd;
use pier::auth::jwks::Jwks;
use pier::auth::jwt::{Validation, verify};
use pier::auth::verified::VerifiedTokens;
use serde_json::json;

const NOW: u64 = 1_750_000_000;

fn b64(b: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(b)
}

/// `(alg, token)` for RS256, ES256 and EdDSA, and the JWKS that verifies all three.
fn tokens() -> (Vec<(&'static str, String)>, Jwks) {
    let rng = SystemRandom::new();
    let rsa = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
    let ec_pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, ec_pkcs8.as_ref()).unwrap();
    let ed_pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
    let ed = Ed25519KeyPair::from_pkcs8(ed_pkcs8.as_ref()).unwrap();
    let rsa_pub = rsa.public_key();
    let (n, e) = {
        use aws_lc_rs::rsa::PublicKeyComponents;
        let c: PublicKeyComponents<Vec<u8>> = rsa_pub.into();
        (c.n, c.e)
    };
    let point = ec.public_key().as_ref();
    let jwks = json!({"keys": [
        {"kty": "RSA", "kid": "rsa", "n": b64(&n), "e": b64(&e)},
        {"kty": "EC", "crv": "P-256", "kid": "ec", "x": b64(&point[1..33]), "y": b64(&point[33..])},
        {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": b64(ed.public_key().as_ref())},
    ]});
    let claims = json!({"iss": "https://issuer.test", "aud": "pier", "sub": "alice",
        "exp": NOW + 3600, "scope": "read write"});
    let sign = |alg: &str, kid: &str| {
        let header = json!({"alg": alg, "typ": "JWT", "kid": kid});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = match alg {
            "RS256" => {
                let mut sig = vec![0; rsa.public_modulus_len()];
                rsa.sign(&RSA_PKCS1_SHA256, &rng, input.as_bytes(), &mut sig)
                    .unwrap();
                sig
            }
            "ES256" => ec.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            _ => ed.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64(&sig))
    };
    let tokens = vec![
        ("RS256", sign("RS256", "rsa")),
        ("ES256", sign("ES256", "ec")),
        ("EdDSA", sign("EdDSA", "ed")),
    ];
    (tokens, Jwks::parse(jwks.to_string().as_bytes()).unwrap())
}

fn jwt(c: &mut Criterion) {
    let (tokens, keys) = tokens();
    let rules = Validation {
        issuer: Some("https://issuer.test".into()),
        audiences: vec!["pier".into()],
        ..Validation::default()
    };
    let mut g = c.benchmark_group("jwt_verify");
    for (alg, token) in &tokens {
        assert!(verify(token.as_bytes(), &keys, &rules, NOW).is_ok());
        g.bench_with_input(BenchmarkId::from_parameter(alg), token, |b, t| {
            b.iter(|| verify(black_box(t.as_bytes()), &keys, &rules, NOW).unwrap())
        });
    }
    g.finish();
    // A token verified before: a keyed hash, a map hit and a comparison instead of the
    // signature.
    let cache = VerifiedTokens::new(10_000, 300);
    let (_, es256) = &tokens[1];
    let claims = std::sync::Arc::new(verify(es256.as_bytes(), &keys, &rules, NOW).unwrap());
    cache.insert(es256.as_bytes(), claims, NOW, 60);
    c.bench_function("jwt_verified_cache_hit", |b| {
        b.iter(|| cache.get(black_box(es256.as_bytes()), NOW).unwrap())
    });
}

fn htpasswd(c: &mut Criterion) {
    // `htpasswd -nbB -C 5`, `openssl passwd -6`, `openssl passwd -apr1`, `htpasswd -nbs`; all
    // with the password `wonderland`.
    let file = Htpasswd::parse(
        "bcrypt5:$2y$05$51qmlbO/MaGUMHLQc5Nq2.bO6dGx.siUnH30tf8a5VLwZwhZNEUsO\n\
         sha512:$6$abcdefgh$e1o..VsKRS0O4M9J1Qb9u.strxNEAfDkCXcaYc5TsDrJFctQCTMkPeis45vy3ZQtqt4dqG4vXTonFJKbQgR2Q1\n",
    )
    .unwrap();
    let mut g = c.benchmark_group("htpasswd_verify");
    g.sample_size(20);
    for user in ["bcrypt5", "sha512"] {
        assert!(file.verify(user, b"wonderland"));
        g.bench_function(user, |b| {
            b.iter(|| file.verify(black_box(user), b"wonderland"))
        });
    }
    g.finish();
}

criterion_group!(benches, jwt, htpasswd);
criterion_main!(benches);
