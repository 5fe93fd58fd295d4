//! Tokens verified lately, so a client that sends the same token on every request pays for
//! its signature once, not per request (an ES256 verification costs about as much CPU as a
//! whole proxied request: `benches/auth.rs`).
//!
//! Found by a keyed 64-bit hash of the token (foldhash, a seed drawn per cache), then the
//! stored token compared whole in constant time: a hash that collides is a miss, never another
//! token's claims. (A SHA-256 key was a third of a cached request's instructions: ~10 000 per
//! token under callgrind.) An entry holds the token and its verified claims and lasts until
//! the token expires (`exp` plus the leeway `verify` allowed) or the cache's TTL, whichever is
//! first. Only tokens that passed `jwt::verify` go in, so a client cannot fill it with
//! forgeries; at capacity, expired entries go first, then all (a cache, never a limit on who
//! gets in). One per provider and translation: new keys start a new cache.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use super::claims::Claims;

pub struct VerifiedTokens {
    entries: Mutex<HashMap<u64, Entry, foldhash::fast::FixedState>>,
    /// Keys the tokens; random per cache, so nobody outside can aim at a collision.
    seed: foldhash::fast::RandomState,
    capacity: usize,
    ttl_secs: u64,
}

struct Entry {
    token: Box<[u8]>,
    claims: Arc<Claims>,
    until: u64,
}

impl VerifiedTokens {
    pub fn new(capacity: usize, ttl_secs: u64) -> Self {
        Self {
            entries: Mutex::new(HashMap::default()),
            seed: foldhash::fast::RandomState::default(),
            capacity,
            ttl_secs,
        }
    }

    fn key(&self, token: &[u8]) -> u64 {
        self.seed.hash_one(token)
    }

    /// The claims of `token`, verified before and still valid at `now` (Unix seconds).
    pub fn get(&self, token: &[u8], now: u64) -> Option<Arc<Claims>> {
        let key = self.key(token);
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(&key)
            .filter(|e| now < e.until)
            .filter(|e| aws_lc_rs::constant_time::verify_slices_are_equal(&e.token, token).is_ok())
            .map(|e| e.claims.clone())
    }

    /// Remembers `token`, which `jwt::verify` accepted at `now` with `leeway_secs`.
    pub fn insert(&self, token: &[u8], claims: Arc<Claims>, now: u64, leeway_secs: u64) {
        let mut until = now.saturating_add(self.ttl_secs);
        if let Some(exp) = claims.get("exp").and_then(serde_json::Value::as_f64) {
            // What verify accepts: now < exp + leeway.
            until = until.min((exp.max(0.0) as u64).saturating_add(leeway_secs));
        }
        let key = self.key(token);
        let entry = Entry {
            token: token.into(),
            claims,
            until,
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity {
            entries.retain(|_, e| now < e.until);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(key, entry);
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
        cache.insert(b"token", claims(Some(1_000)), 900, 60);
        assert!(cache.get(b"token", 1_059).is_some(), "within exp + leeway");
        assert!(cache.get(b"token", 1_060).is_none(), "expired");
        cache.insert(b"no-exp", claims(None), 900, 60);
        assert!(cache.get(b"no-exp", 1_199).is_some());
        assert!(cache.get(b"no-exp", 1_200).is_none(), "the TTL");
        assert!(cache.get(b"other", 900).is_none());
    }

    #[test]
    fn at_capacity_expired_entries_go_first_then_all() {
        let cache = VerifiedTokens::new(2, 300);
        cache.insert(b"a", claims(Some(100)), 50, 0);
        cache.insert(b"b", claims(Some(1_000)), 50, 0);
        // At 200 `a` has expired: it makes room.
        cache.insert(b"c", claims(Some(1_000)), 200, 0);
        assert_eq!(cache.len(), 2);
        assert!(cache.get(b"b", 200).is_some());
        // Nothing expired: the cache starts over rather than grow.
        cache.insert(b"d", claims(Some(1_000)), 200, 0);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_colliding_key_is_a_miss_never_another_tokens_claims() {
        let cache = VerifiedTokens::new(10, 300);
        cache.insert(b"alice's token", claims(Some(1_000)), 0, 0);
        // Force a collision: another token stored under alice's key.
        let key = cache.key(b"alice's token");
        let mallory = b"mallory's token";
        {
            let entries = cache.entries.lock().unwrap();
            assert!(entries.contains_key(&key));
        }
        let collided = {
            let mut entries = cache.entries.lock().unwrap();
            let e = entries.remove(&key).unwrap();
            entries.insert(cache.key(mallory), e);
            cache.key(mallory)
        };
        // mallory's token hashes to the entry holding alice's token: not a hit.
        assert!(cache.entries.lock().unwrap().contains_key(&collided));
        assert!(cache.get(mallory, 1).is_none());
        // The same bytes are a hit.
        cache.insert(mallory, claims(Some(1_000)), 0, 0);
        assert!(cache.get(mallory, 1).is_some());
    }

    #[test]
    fn two_caches_key_tokens_differently() {
        let (a, b) = (VerifiedTokens::new(1, 1), VerifiedTokens::new(1, 1));
        assert_ne!(a.key(b"token"), b.key(b"token"));
    }
}
