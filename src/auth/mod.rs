//! Authentication for `SecurityPolicy` (issue 38): the pure leaves that read untrusted bytes.
//!
//! - [`jwks`]: a JSON Web Key Set (RFC 7517) parsed into checked public keys;
//! - [`jwt`]: a compact JWS token verified against such a set, and its claims checked;
//! - [`claims`]: the verified claims, looked up for headers and authorization rules;
//! - [`cookie`]: the `Cookie` header read, values sealed with AES-256-GCM and split in chunks;
//! - [`oidc`]: the OpenID Connect login's pure parts (discovery, PKCE, the ID token's checks);
//! - [`remote`]: key sets fetched from a `remoteJWKS.uri`, as translation receives them;
//! - [`htpasswd`]: a `.htpasswd` file parsed and passwords verified against it.
//!
//! Nothing here does I/O, spawns or reads the clock on its own: the caller fetches JWKS
//! documents and Secrets, passes the time, and decides where CPU-heavy work runs. Errors
//! never carry the token, a password or a hash, so they can be logged as they are.
//!
//! The parsers have property tests (no panic; a changed token or hash never verifies),
//! 64 cases each by default. At 10⁶ cases: `PROPTEST_CASES=1000000 nice -n 19 cargo test
//! --release --lib auth::jwt::tests::props` (the five JWT properties took 78 s on the 2-core
//! dev machine, after a 15-minute release build). Run on 2026-11-29 (release test
//! binary): `auth::cookie::tests::props` at 10⁶ cases 6.7 s, the ext_authz and rate-limit
//! answer parsers (`proxy::exchange::{ext_auth::grpc,rate_limit}::tests::any_answer…`) at 10⁶
//! 1.8 s and 1.5 s, all passing. The `.htpasswd` ones hash per case: 10⁵ cases took 30 s,
//! passing.

pub mod claims;
pub mod cookie;
pub mod hashers;
pub mod htpasswd;
pub mod jwks;
pub mod jwt;
pub mod oidc;
pub mod remote;
pub mod verified;
