//! Tokens verified lately, so a client that sends the same token on every request pays for
//! its signature once, not per request (an ES256 verification costs about as much CPU as a
//! whole proxied request: `benches/auth.rs`).
//!
//! Keyed by the token's SHA-256; an entry holds the verified claims and lasts until the token
//! expires (`exp` plus the leeway `verify` allowed) or the cache's TTL, whichever is first.
//! Only tokens that passed `jwt::verify` go in, so a client cannot fill it with forgeries;
//! at capacity, expired entries go first, then all (a cache, never a limit on who gets in).
//! One per provider and translation: new keys start a new cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::claims::Claims;

/// The SHA-256 of a token: what the cache is keyed by.
pub type TokenKey = [u8; 32];

pub struct VerifiedTokens {
    entries: Mutex<HashMap<TokenKey, (Arc<Claims>, u64)>>,
    capacity: usize,
    ttl_secs: u64,
}

impl VerifiedTokens {
    pub fn new(capacity: usize, ttl_secs: u64) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity,
            ttl_secs,
        }
    }

    pub fn key(token: &[u8]) -> TokenKey {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token);
        d.as_ref().try_into().expect("SHA-256 is 32 bytes")
    }

    /// The claims of a token verified before that is still valid at `now` (Unix seconds).
    pub fn get(&self, key: &TokenKey, now: u64) -> Option<Arc<Claims>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, until)| now < *until)
            .map(|(claims, _)| claims.clone())
    }

    /// Remembers a token `jwt::verify` accepted at `now` with `leeway_secs`.
    pub fn insert(&self, key: TokenKey, claims: Arc<Claims>, now: u64, leeway_secs: u64) {
        let mut until = now.saturating_add(self.ttl_secs);
        if let Some(exp) = claims.get("exp").and_then(serde_json::Value::as_f64) {
            // What verify accepts: now < exp + leeway.
            until = until.min((exp.max(0.0) as u64).saturating_add(leeway_secs));
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity {
            entries.retain(|_, (_, u)| now < *u);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(key, (claims, until));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Never shows a token's claims.
impl std::fmt::Debug for VerifiedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedTokens")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: Option<u64>) -> Arc<Claims> {
        let mut m = serde_json::Map::new();
        m.insert("sub".into(), "alice".into());
        if let Some(e) = exp {
            m.insert("exp".into(), e.into());
        }
        Arc::new(Claims::new(m))
    }

    #[test]
    fn an_entry_lasts_until_the_token_expires_or_the_ttl() {
        let cache = VerifiedTokens::new(10, 300);
        let k = VerifiedTokens::key(b"token");
        cache.insert(k, claims(Some(1_000)), 900, 60);
        assert!(cache.get(&k, 1_059).is_some(), "within exp + leeway");
        assert!(cache.get(&k, 1_060).is_none(), "expired");
        let k2 = VerifiedTokens::key(b"no-exp");
        cache.insert(k2, claims(None), 900, 60);
        assert!(cache.get(&k2, 1_199).is_some());
        assert!(cache.get(&k2, 1_200).is_none(), "the TTL");
        assert!(cache.get(&VerifiedTokens::key(b"other"), 900).is_none());
    }

    #[test]
    fn at_capacity_expired_entries_go_first_then_all() {
        let cache = VerifiedTokens::new(2, 300);
        cache.insert(VerifiedTokens::key(b"a"), claims(Some(100)), 50, 0);
        cache.insert(VerifiedTokens::key(b"b"), claims(Some(1_000)), 50, 0);
        // At 200 `a` has expired: it makes room.
        cache.insert(VerifiedTokens::key(b"c"), claims(Some(1_000)), 200, 0);
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&VerifiedTokens::key(b"b"), 200).is_some());
        // Nothing expired: the cache starts over rather than grow.
        cache.insert(VerifiedTokens::key(b"d"), claims(Some(1_000)), 200, 0);
        assert_eq!(cache.len(), 1);
    }
}
