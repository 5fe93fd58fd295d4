//! `.htpasswd` files (Envoy Gateway's `basicAuth.users` Secret) and the passwords of
//! `Authorization: Basic` checked against them.
//!
//! A line is `user:hash`; blank lines and lines starting with `#` are skipped, and the ends
//! of a line are trimmed (CRLF files work). Hash schemes, as `htpasswd` and `openssl passwd`
//! write them:
//!
//! - bcrypt `$2y$`, `$2b$`, `$2a$` (`htpasswd -B`), cost at most [`MAX_BCRYPT_COST`];
//! - SHA-crypt `$5$`, `$6$` (`openssl passwd -5/-6`, `mkpasswd`), at most
//!   [`MAX_SHA_CRYPT_ROUNDS`] rounds;
//! - Apache MD5-crypt `$apr1$` (`htpasswd -m`, its default);
//! - `{SHA}`, base64 of unsalted SHA-1 (`htpasswd -s`): weak, accepted for compatibility.
//!
//! Refused when the file is parsed, with the line number and user (never the hash): plain
//! text, crypt(3) DES (`htpasswd -d`: only 8 characters of the password count), other
//! `$id$` schemes, malformed hashes, costs over the caps (a hash of bcrypt cost 31 would take
//! a thread for days per request), and a user on two lines.
//!
//! Comparisons are constant time, and an unknown user costs the same hash as a known one
//! (the first user's hash is checked and its result dropped), so timing does not tell
//! whether a user exists.
//!
//! # A flood of wrong passwords
//!
//! A wrong password costs one full hash (measured, release build, one core of the 2-core
//! dev machine): bcrypt 1.4 ms at cost 4 and 2.8 ms at cost 5, doubling with each step (about
//! 90 ms at cost 10); SHA-crypt 0.7 ms (`$5$`) and 1.9 ms (`$6$`) at 5000 rounds; apr1
//! 0.2 ms; `{SHA}` microseconds. No cache makes wrong guesses cheap, so the caller bounds
//! them:
//!
//! 1. [`VerifiedCache`] first: a client sending the same good credentials on every request
//!    pays one hash per TTL. Only successes are remembered, under an HMAC with a
//!    per-process random key, so neither password nor a reusable digest is stored.
//! 2. A miss runs on the blocking pool (`tokio::task::spawn_blocking`) behind a
//!    `tokio::sync::Semaphore` of a few permits (about half the cores), acquired with a
//!    short timeout; none free in time answers 503 rather than queueing. A flood then takes
//!    at most those threads, and proxying and TLS keep the other cores.
//! 3. Failures can be rate-limited per client address on top (not here).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::{digest, hmac, rand};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use md5::{Digest as _, Md5};
use sha_crypt::{PasswordVerifier as _, ShaCrypt};

/// The highest bcrypt cost accepted: 2^14 rounds, about a second per check.
pub const MAX_BCRYPT_COST: u32 = 14;

/// The most SHA-crypt rounds accepted (passlib's default for SHA-512 is 656,000).
pub const MAX_SHA_CRYPT_ROUNDS: u32 = 1_000_000;

/// The longest `Authorization: Basic` value [`basic_credentials`] reads, in bytes.
pub const MAX_BASIC_LEN: usize = 4096;

/// The users of a `.htpasswd` file and their hashes.
pub struct Htpasswd {
    users: HashMap<String, Hash>,
    /// Checked for an unknown user, its result dropped: the first user's hash.
    dummy: Option<Hash>,
}

#[derive(Clone)]
enum Hash {
    Bcrypt(Box<str>),
    ShaCrypt(Box<str>),
    /// The salt, and the 22 characters of the digest as the file has them.
    Apr1 {
        salt: Box<[u8]>,
        digest: [u8; 22],
    },
    Sha1([u8; 20]),
}

/// A line refused, with its number (from 1) and user, when it has one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("htpasswd line {line}{}: {kind}", user.as_ref().map(|u| format!(" (user {u:?})")).unwrap_or_default())]
pub struct ParseError {
    pub line: usize,
    pub user: Option<String>,
    pub kind: ParseErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    #[error("not `user:hash`")]
    NoColon,
    #[error("empty user name")]
    EmptyUser,
    #[error("more than one `:` after the user name")]
    ExtraField,
    #[error("the user is already on line {0}")]
    Duplicate(usize),
    #[error(
        "crypt(3) DES hash (or 13 characters of plain text) refused: only 8 characters of a password count; use bcrypt (htpasswd -B)"
    )]
    Des,
    #[error("`$id$` hash scheme not supported (bcrypt, SHA-crypt $5$/$6$, $apr1$ and {{SHA}} are)")]
    UnsupportedScheme,
    #[error("not a hash of a supported scheme (plain text?)")]
    Plaintext,
    #[error("malformed {0} hash")]
    Malformed(&'static str),
    #[error("bcrypt cost over {MAX_BCRYPT_COST}")]
    BcryptCost,
    #[error("SHA-crypt rounds not between 1000 and {MAX_SHA_CRYPT_ROUNDS}")]
    ShaCryptRounds,
}

// === impl Htpasswd ===

impl Htpasswd {
    /// Parses a whole file; the first line refused refuses the file.
    pub fn parse(text: &str) -> Result<Htpasswd, ParseError> {
        let mut users = HashMap::new();
        let mut lines_of = HashMap::new();
        let mut dummy = None;
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let Some((user, hash)) = parse_line(line).map_err(|(user, kind)| ParseError {
                line: line_no,
                user: user.map(str::to_owned),
                kind,
            })?
            else {
                continue;
            };
            if let Some(first) = lines_of.insert(user, line_no) {
                return Err(ParseError {
                    line: line_no,
                    user: Some(user.to_owned()),
                    kind: ParseErrorKind::Duplicate(first),
                });
            }
            dummy.get_or_insert_with(|| hash.clone());
            users.insert(user.to_owned(), hash);
        }
        Ok(Htpasswd { users, dummy })
    }

    /// `password` is `user`'s. An unknown user costs one check of the first user's hash.
    pub fn verify(&self, user: &str, password: &[u8]) -> bool {
        match self.users.get(user) {
            Some(hash) => hash.verify(password),
            None => {
                if let Some(dummy) = &self.dummy {
                    std::hint::black_box(dummy.verify(password));
                }
                false
            }
        }
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

impl fmt::Debug for Htpasswd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut users: Vec<_> = self.users.iter().map(|(u, h)| (u, h.scheme())).collect();
        users.sort();
        f.debug_struct("Htpasswd").field("users", &users).finish()
    }
}

/// One line: `None` for a blank or comment line, else the user and the hash, or the user
/// (if one could be read) and why the line is refused.
#[allow(clippy::type_complexity)]
fn parse_line(line: &str) -> Result<Option<(&str, Hash)>, (Option<&str>, ParseErrorKind)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let (user, hash) = line
        .split_once(':')
        .ok_or((None, ParseErrorKind::NoColon))?;
    if user.is_empty() {
        return Err((None, ParseErrorKind::EmptyUser));
    }
    if hash.contains(':') {
        return Err((Some(user), ParseErrorKind::ExtraField));
    }
    let hash = Hash::parse(hash).map_err(|kind| (Some(user), kind))?;
    Ok(Some((user, hash)))
}

// === impl Hash ===

impl Hash {
    fn parse(text: &str) -> Result<Hash, ParseErrorKind> {
        if let Some(rest) = text.strip_prefix("{SHA}") {
            return parse_sha1(rest);
        }
        for prefix in ["$2y$", "$2b$", "$2a$"] {
            if let Some(rest) = text.strip_prefix(prefix) {
                return parse_bcrypt(rest).map(|()| Hash::Bcrypt(text.into()));
            }
        }
        for prefix in ["$5$", "$6$"] {
            if let Some(rest) = text.strip_prefix(prefix) {
                let len = if prefix == "$5$" { 43 } else { 86 };
                parse_sha_crypt(rest, len)?;
                parse_mcf(text)?;
                return Ok(Hash::ShaCrypt(text.into()));
            }
        }
        if let Some(rest) = text.strip_prefix("$apr1$") {
            return parse_apr1(rest);
        }
        if text.starts_with('$') {
            return Err(ParseErrorKind::UnsupportedScheme);
        }
        if text.len() == 13 && text.bytes().all(is_crypt64) {
            return Err(ParseErrorKind::Des);
        }
        Err(ParseErrorKind::Plaintext)
    }

    fn scheme(&self) -> &'static str {
        match self {
            Hash::Bcrypt(_) => "bcrypt",
            Hash::ShaCrypt(_) => "SHA-crypt",
            Hash::Apr1 { .. } => "apr1",
            Hash::Sha1(_) => "{SHA}",
        }
    }

    fn verify(&self, password: &[u8]) -> bool {
        match self {
            Hash::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            Hash::ShaCrypt(hash) => ShaCrypt::default()
                .verify_password(password, &**hash)
                .is_ok(),
            Hash::Apr1 { salt, digest } => {
                verify_slices_are_equal(&apr1(password, salt), digest).is_ok()
            }
            Hash::Sha1(expected) => {
                let actual = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, password);
                verify_slices_are_equal(actual.as_ref(), expected).is_ok()
            }
        }
    }
}

/// The alphabet of crypt(3) and its descendants: `./0-9A-Za-z`.
fn is_crypt64(b: u8) -> bool {
    b == b'.' || b == b'/' || b.is_ascii_alphanumeric()
}

fn parse_sha1(rest: &str) -> Result<Hash, ParseErrorKind> {
    let bytes = STANDARD
        .decode(rest)
        .map_err(|_| ParseErrorKind::Malformed("{SHA}"))?;
    let digest = bytes
        .try_into()
        .map_err(|_| ParseErrorKind::Malformed("{SHA}"))?;
    Ok(Hash::Sha1(digest))
}

/// A decimal number of ASCII digits only (`str::parse` also takes a leading `+`).
fn digits(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `NN$` and 53 characters: the cost, 22 of salt, 31 of hash.
fn parse_bcrypt(rest: &str) -> Result<(), ParseErrorKind> {
    let malformed = ParseErrorKind::Malformed("bcrypt");
    let (cost, body) = rest.split_once('$').ok_or(malformed.clone())?;
    if cost.len() != 2 || body.len() != 53 || !body.bytes().all(is_crypt64) {
        return Err(malformed);
    }
    let cost = digits(cost).ok_or(malformed.clone())?;
    match cost {
        0..4 => Err(malformed),
        4..=MAX_BCRYPT_COST => Ok(()),
        _ => Err(ParseErrorKind::BcryptCost),
    }
}

/// `[rounds=N$]salt$hash`: a salt of at most 16 characters and a hash of `len`.
fn parse_sha_crypt(rest: &str, len: usize) -> Result<(), ParseErrorKind> {
    let malformed = ParseErrorKind::Malformed("SHA-crypt");
    let rest = match rest.strip_prefix("rounds=") {
        None => rest,
        Some(rounds) => {
            let (rounds, rest) = rounds.split_once('$').ok_or(malformed.clone())?;
            let rounds = digits(rounds).ok_or(malformed.clone())?;
            if !(1000..=MAX_SHA_CRYPT_ROUNDS).contains(&rounds) {
                return Err(ParseErrorKind::ShaCryptRounds);
            }
            rest
        }
    };
    let (salt, hash) = rest.split_once('$').ok_or(malformed.clone())?;
    let salt_ok = salt.len() <= 16 && !salt.contains(['$', ':', '\n']);
    if !salt_ok || hash.len() != len || !hash.bytes().all(is_crypt64) {
        return Err(malformed);
    }
    Ok(())
}

/// What sha-crypt itself will read back: every field non-empty and of its alphabet.
fn parse_mcf(text: &str) -> Result<(), ParseErrorKind> {
    sha_crypt::PasswordHashRef::new(text)
        .map(|_| ())
        .map_err(|_| ParseErrorKind::Malformed("SHA-crypt"))
}

/// `salt$digest`: a salt of at most 8 characters and 22 of digest.
fn parse_apr1(rest: &str) -> Result<Hash, ParseErrorKind> {
    let malformed = ParseErrorKind::Malformed("apr1");
    let (salt, digest) = rest.split_once('$').ok_or(malformed.clone())?;
    if salt.len() > 8 || !salt.bytes().all(is_crypt64) || !digest.bytes().all(is_crypt64) {
        return Err(malformed);
    }
    let digest = digest.as_bytes().try_into().map_err(|_| malformed)?;
    Ok(Hash::Apr1 {
        salt: salt.as_bytes().into(),
        digest,
    })
}

/// Apache's MD5-crypt (`$apr1$`, Poul-Henning Kamp's `$1$` with another magic string): the
/// 22 characters of the digest.
fn apr1(password: &[u8], salt: &[u8]) -> [u8; 22] {
    let mut alt = Md5::new();
    alt.update(password);
    alt.update(salt);
    alt.update(password);
    let alt = alt.finalize();

    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(b"$apr1$");
    ctx.update(salt);
    for chunk in password.chunks(16) {
        ctx.update(&alt[..chunk.len()]);
    }
    let mut bits = password.len();
    while bits != 0 {
        match bits & 1 {
            1 => ctx.update([0]),
            _ => ctx.update(&password[..1]),
        }
        bits >>= 1;
    }
    let mut sum: [u8; 16] = ctx.finalize().into();

    for round in 0..1000 {
        let mut ctx = Md5::new();
        if round & 1 == 1 {
            ctx.update(password);
        } else {
            ctx.update(sum);
        }
        if round % 3 != 0 {
            ctx.update(salt);
        }
        if round % 7 != 0 {
            ctx.update(password);
        }
        if round & 1 == 1 {
            ctx.update(sum);
        } else {
            ctx.update(password);
        }
        sum = ctx.finalize().into();
    }
    encode_md5_crypt(&sum)
}

/// MD5-crypt's digest text: byte triples in its own order, six bits a character, low first.
fn encode_md5_crypt(sum: &[u8; 16]) -> [u8; 22] {
    const ALPHABET: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let groups = [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)];
    let mut out = [0; 22];
    let mut put = |at: usize, mut value: u32, count: usize| {
        for slot in &mut out[at..at + count] {
            *slot = ALPHABET[(value & 0x3f) as usize];
            value >>= 6;
        }
    };
    for (i, (a, b, c)) in groups.into_iter().enumerate() {
        let value = u32::from(sum[a]) << 16 | u32::from(sum[b]) << 8 | u32::from(sum[c]);
        put(i * 4, value, 4);
    }
    put(20, u32::from(sum[11]), 2);
    out
}

// === basic credentials ===

/// The user and password of an `Authorization` value of the Basic scheme (RFC 7617):
/// `Basic` (any case), spaces, base64 of `user:password`. `None` when it is not one, is
/// longer than [`MAX_BASIC_LEN`], or its user is not UTF-8 or has a control character.
pub fn basic_credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    if value.len() > MAX_BASIC_LEN || value.len() < 6 {
        return None;
    }
    let (scheme, rest) = value.split_at(5);
    if !scheme.eq_ignore_ascii_case(b"basic") || rest.first() != Some(&b' ') {
        return None;
    }
    let encoded = rest.trim_ascii();
    let decoded = STANDARD.decode(encoded).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = std::str::from_utf8(&decoded[..colon]).ok()?;
    if user.chars().any(char::is_control) {
        return None;
    }
    Some((user.to_owned(), decoded[colon + 1..].to_vec()))
}

// === impl VerifiedCache ===

/// (user, password) pairs that verified recently, so repeated good credentials cost one
/// hash per `ttl`. Entries are HMAC-SHA256 of the pair under a key drawn when the cache is
/// made: no password, nor a digest usable elsewhere, is kept. Failures are never cached.
///
/// Make one per parsed [`Htpasswd`]: a changed file must not find old entries. When full,
/// expired entries go; if none has expired, all go (a flood of distinct good credentials
/// then costs what it would without the cache).
pub struct VerifiedCache {
    key: hmac::Key,
    ttl: Duration,
    capacity: usize,
    entries: Mutex<HashMap<[u8; 32], Instant>>,
}

impl VerifiedCache {
    pub fn new(ttl: Duration, capacity: usize) -> VerifiedCache {
        let mut secret = [0; 32];
        rand::fill(&mut secret).expect("the system's random source");
        VerifiedCache {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
            ttl,
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The pair verified within the TTL before `now`.
    pub fn contains(&self, user: &str, password: &[u8], now: Instant) -> bool {
        let tag = self.tag(user, password);
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(&tag)
            .is_some_and(|&at| now.saturating_duration_since(at) < self.ttl)
    }

    /// Remembers a pair that just verified.
    pub fn insert(&self, user: &str, password: &[u8], now: Instant) {
        if self.capacity == 0 {
            return;
        }
        let tag = self.tag(user, password);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&tag) {
            entries.retain(|_, &mut at| now.saturating_duration_since(at) < self.ttl);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(tag, now);
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// HMAC of the user's length, the user and the password: no two pairs share an input.
    fn tag(&self, user: &str, password: &[u8]) -> [u8; 32] {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(&(user.len() as u64).to_be_bytes());
        ctx.update(user.as_bytes());
        ctx.update(password);
        let mut tag = [0; 32];
        tag.copy_from_slice(ctx.sign().as_ref());
        tag
    }
}

impl fmt::Debug for VerifiedCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedCache")
            .field("ttl", &self.ttl)
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
