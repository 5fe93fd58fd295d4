//! Encrypted cookies for the OIDC login (`spec.oidc`): the `Cookie` header read leniently (it is
//! untrusted bytes), values sealed with AES-256-GCM (aws-lc-rs, a random 96-bit nonce per
//! value; the cookie's name is the associated data, so a value cannot be moved to another
//! cookie), and values over one cookie's budget split into numbered chunks (`name.0`,
//! `name.1`, ...; browsers keep about 4 KB a cookie).
//!
//! A value is `base64url(nonce ‖ ciphertext ‖ tag)`. Anything that does not open (another
//! key, a changed byte, a truncated chunk, garbage) is `None`, never a panic: the property
//! tests throw arbitrary headers and values at [`pairs`], [`joined`] and [`CookieKey::open`].

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A cookie's value at most (its name and attributes come on top, within a browser's 4096
/// bytes).
pub const CHUNK: usize = 3600;
/// At most this many chunks make one value (a bound on what a request makes pier decrypt).
pub const MAX_CHUNKS: usize = 8;
const TAG_LEN: usize = 16;

/// The key cookies are sealed with.
pub struct CookieKey(RandomizedNonceKey);

/// The attributes pier's cookies carry: always `HttpOnly; Secure; SameSite=Lax; Path=/`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CookieAttrs {
    /// `Domain=`: the cookie is sent to subdomains too (`cookieDomain`).
    pub domain: Option<String>,
}

// === impl CookieKey ===

impl CookieKey {
    /// A key from secret bytes (a Secret's value), through HKDF-SHA256 with `context` as its
    /// info: two policies with the same secret and another context get different keys.
    pub fn derive(secret: &[u8], context: &[u8]) -> CookieKey {
        use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
        let salt = Salt::new(HKDF_SHA256, b"pier.dev cookie key v1");
        let prk = salt.extract(secret);
        let info = [context];
        let mut key = [0u8; 32];
        prk.expand(&info, HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut key))
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        CookieKey(
            RandomizedNonceKey::new(&AES_256_GCM, &key).expect("a 32-byte key is an AES-256 key"),
        )
    }

    /// `plaintext` sealed for the cookie `name`.
    pub fn seal(&self, name: &str, plaintext: &[u8]) -> String {
        let mut in_out = plaintext.to_vec();
        let nonce = self
            .0
            .seal_in_place_append_tag(Aad::from(name.as_bytes()), &mut in_out)
            .expect("AES-GCM sealing of an in-memory buffer does not fail");
        let mut out = Vec::with_capacity(NONCE_LEN + in_out.len());
        out.extend_from_slice(nonce.as_ref());
        out.extend_from_slice(&in_out);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// The plaintext of a value sealed for `name`, or `None` when it does not open.
    pub fn open(&self, name: &str, value: &[u8]) -> Option<Vec<u8>> {
        let raw = URL_SAFE_NO_PAD.decode(value).ok()?;
        if raw.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(name.as_bytes()), &mut sealed)
            .ok()?;
        Some(plain.to_vec())
    }
}

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(<redacted>)")
    }
}

/// The `name=value` pairs of `Cookie` header values (RFC 6265 §5.4: `; `-separated), names
/// and values trimmed; pairs without `=` are skipped.
pub fn pairs<'h>(
    headers: impl Iterator<Item = &'h [u8]>,
) -> impl Iterator<Item = (&'h [u8], &'h [u8])> {
    headers
        .flat_map(|v| v.split(|b| *b == b';'))
        .filter_map(|pair| {
            let eq = pair.iter().position(|b| *b == b'=')?;
            let (name, value) = pair.split_at(eq);
            Some((name.trim_ascii(), value[1..].trim_ascii()))
        })
}

/// The value split over the cookies `base.0`, `base.1`, ..., joined; `None` unless `base.0`
/// is there and the chunks run without a gap (at most [`MAX_CHUNKS`]).
pub fn joined<'h>(
    base: &str,
    pairs: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> Option<Vec<u8>> {
    let mut chunks: [Option<&[u8]>; MAX_CHUNKS] = [None; MAX_CHUNKS];
    for (name, value) in pairs {
        let Some(i) = chunk_index(base, name) else {
            continue;
        };
        // The first of a name wins (RFC 6265 orders longer paths first; pier sets Path=/).
        chunks[i].get_or_insert(value);
    }
    let mut out = Vec::new();
    let mut any = false;
    for c in chunks {
        match c {
            Some(v) => {
                out.extend_from_slice(v);
                any = true;
            }
            None => break,
        }
    }
    any.then_some(out)
}

/// The chunk number of `name` if it is `base.<i>` with `i` < [`MAX_CHUNKS`].
pub fn chunk_index(base: &str, name: &[u8]) -> Option<usize> {
    let rest = name.strip_prefix(base.as_bytes())?.strip_prefix(b".")?;
    match rest {
        [d] if d.is_ascii_digit() && usize::from(d - b'0') < MAX_CHUNKS => {
            Some(usize::from(d - b'0'))
        }
        _ => None,
    }
}

/// `Set-Cookie` values that store `value` (ASCII: a sealed value is base64url) in the cookies
/// `base.0`, `base.1`, ..., each at most [`CHUNK`] bytes, for `max_age` seconds (`None`: a
/// session cookie); `clear_from`: the chunk count the browser had, to clear leftovers.
/// `None` when the value needs more than [`MAX_CHUNKS`] chunks.
pub fn set(
    base: &str,
    value: &str,
    attrs: &CookieAttrs,
    max_age: Option<u64>,
    had: usize,
) -> Option<Vec<String>> {
    let chunks: Vec<&str> = value
        .as_bytes()
        .chunks(CHUNK)
        .map(|c| std::str::from_utf8(c).unwrap_or(""))
        .collect();
    if chunks.len() > MAX_CHUNKS || !value.is_ascii() {
        return None;
    }
    let mut out: Vec<String> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| cookie(&format!("{base}.{i}"), c, attrs, max_age))
        .collect();
    for i in chunks.len()..had.min(MAX_CHUNKS) {
        out.push(cookie(&format!("{base}.{i}"), "", attrs, Some(0)));
    }
    Some(out)
}

/// `Set-Cookie` values that clear `base.0` .. `base.<had - 1>`.
pub fn clear(base: &str, attrs: &CookieAttrs, had: usize) -> Vec<String> {
    (0..had.clamp(1, MAX_CHUNKS))
        .map(|i| cookie(&format!("{base}.{i}"), "", attrs, Some(0)))
        .collect()
}

/// How many chunks of `base` the request carries.
pub fn count<'h>(base: &str, pairs: impl Iterator<Item = (&'h [u8], &'h [u8])>) -> usize {
    pairs
        .filter_map(|(n, _)| chunk_index(base, n))
        .map(|i| i + 1)
        .max()
        .unwrap_or(0)
}

fn cookie(name: &str, value: &str, attrs: &CookieAttrs, max_age: Option<u64>) -> String {
    let mut s = format!("{name}={value}; Path=/; HttpOnly; Secure; SameSite=Lax");
    if let Some(d) = &attrs.domain {
        s.push_str("; Domain=");
        s.push_str(d);
    }
    if let Some(age) = max_age {
        s.push_str(&format!("; Max-Age={age}"));
    }
    s
}

#[cfg(test)]
mod tests;
