//! Local rate limits (`BackendTrafficPolicy.rateLimit.local`, issue 39; `model::traffic`
//! reads the policy): buckets that admit `requests` per `period`, bursts of up to
//! `requests` included. A pure leaf: the caller passes the time and the bucket's key; nothing
//! here does I/O.
//!
//! Each bucket is one number, the generic cell rate algorithm's *theoretical arrival time*
//! (TAT): a request at `t` is admitted when `TAT - t <= period - interval` (`interval =
//! period / requests`), and moves TAT to `max(TAT, t) + interval`. That is a token bucket of
//! `requests` tokens refilled one per `interval`, kept exactly in 8 bytes, with no timer. A
//! bucket whose TAT is past is full, the same as one never seen: such entries are what a full
//! table drops first, so dropping them loses nothing.
//!
//! Keys with a `Distinct` selector (one bucket per header value or client address) come from
//! the client: a table holds at most [`Buckets::capacity`] of them, in shards under their own
//! lock. When a shard is full, its full buckets go first; if every one is in use (a flood of
//! distinct values), the one closest to full goes (it is reset: that client gets a new bucket),
//! so memory stays bounded whatever clients send.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `requests` per `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    pub requests: u64,
    pub period: Duration,
}

/// What a bucket said to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admitted; `remaining` more would be now; the bucket is full again in `reset`.
    Admit { remaining: u64, reset: Duration },
    /// Refused; the next request would be admitted in `retry_after`; full again in `reset`.
    Refuse {
        retry_after: Duration,
        reset: Duration,
    },
}

/// Shards of a table: a request locks one.
const SHARDS: usize = 16;

/// The buckets of one limit rule, by key. Shared across snapshots while the rule is
/// unchanged (`model::carried::Carried`).
#[derive(Debug)]
pub struct Buckets {
    limit: Limit,
    /// `period / requests`, and `period - interval`, in nanoseconds.
    interval: u64,
    tolerance: u64,
    origin: Instant,
    /// Keys of Distinct values are hashed with a seed of this table's own, so that a client
    /// cannot choose values that land in one bucket of another client's.
    seed: foldhash::fast::RandomState,
    per_shard: usize,
    shards: [Mutex<HashMap<u64, u64, foldhash::fast::FixedState>>; SHARDS],
    /// A table of capacity 1 (no Distinct selector: one bucket for every request) keeps its
    /// TAT here instead, updated with compare-and-swap: no lock, no hashing.
    single: Option<AtomicU64>,
}

impl Buckets {
    /// Buckets for `limit` (`requests` ≥ 1, `period` > 0), at most `capacity` keys.
    pub fn new(limit: Limit, capacity: usize) -> Self {
        let period = u64::try_from(limit.period.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let requests = limit.requests.max(1);
        let interval = (period / requests).max(1);
        Self {
            limit,
            interval,
            tolerance: period.saturating_sub(interval),
            origin: Instant::now(),
            seed: foldhash::fast::RandomState::default(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
            single: (capacity <= 1).then(|| AtomicU64::new(0)),
        }
    }

    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// The most keys the table holds.
    pub fn capacity(&self) -> usize {
        match self.single {
            Some(_) => 1,
            None => self.per_shard * SHARDS,
        }
    }

    /// Keys held now (full buckets not yet dropped included).
    pub fn len(&self) -> usize {
        match &self.single {
            Some(tat) => usize::from(tat.load(Ordering::Relaxed) != 0),
            None => self.shards.iter().map(|s| lock(s).len()).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A key for values (a request's Distinct header values, its client address).
    pub fn hasher(&self) -> KeyHasher {
        KeyHasher(self.seed.build_hasher())
    }

    /// One request for bucket `key` at `now` (a table of capacity 1 has one bucket whatever
    /// the key).
    pub fn take(&self, key: u64, now: Instant) -> Decision {
        let t = u64::try_from(now.saturating_duration_since(self.origin).as_nanos())
            .unwrap_or(u64::MAX);
        if let Some(single) = &self.single {
            return self.take_single(single, t);
        }
        let mut shard = lock(&self.shards[(key as usize) % SHARDS]);
        let tat = shard.get(&key).copied().unwrap_or(0).max(t);
        let ahead = tat - t;
        if ahead > self.tolerance {
            return Decision::Refuse {
                retry_after: Duration::from_nanos(ahead - self.tolerance),
                reset: Duration::from_nanos(ahead),
            };
        }
        let next = tat + self.interval;
        if shard.len() >= self.per_shard && !shard.contains_key(&key) {
            make_room(&mut shard, t);
        }
        shard.insert(key, next);
        let ahead = next - t;
        Decision::Admit {
            remaining: (self.tolerance + self.interval - ahead) / self.interval,
            reset: Duration::from_nanos(ahead),
        }
    }
}

impl Buckets {
    fn take_single(&self, cell: &AtomicU64, t: u64) -> Decision {
        let mut seen = cell.load(Ordering::Relaxed);
        loop {
            let tat = seen.max(t);
            let ahead = tat - t;
            if ahead > self.tolerance {
                return Decision::Refuse {
                    retry_after: Duration::from_nanos(ahead - self.tolerance),
                    reset: Duration::from_nanos(ahead),
                };
            }
            let next = tat + self.interval;
            match cell.compare_exchange_weak(seen, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    let ahead = next - t;
                    return Decision::Admit {
                        remaining: (self.tolerance + self.interval - ahead) / self.interval,
                        reset: Duration::from_nanos(ahead),
                    };
                }
                Err(now_seen) => seen = now_seen,
            }
        }
    }
}

/// The key of a bucket, from the values that choose it ([`Buckets::hasher`]).
pub struct KeyHasher(foldhash::fast::FoldHasher<'static>);

impl KeyHasher {
    pub fn add_bytes(&mut self, b: &[u8]) {
        // Length first: ("ab", "c") and ("a", "bc") are different keys.
        self.0.write_usize(b.len());
        self.0.write(b);
    }

    pub fn add_addr(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(a) => self.add_bytes(&a.octets()),
            IpAddr::V6(a) => self.add_bytes(&a.octets()),
        }
    }

    pub fn finish(&self) -> u64 {
        self.0.finish()
    }
}

/// Drops every full bucket (TAT past); if none is, the one nearest to full.
fn make_room(shard: &mut HashMap<u64, u64, foldhash::fast::FixedState>, t: u64) {
    let before = shard.len();
    shard.retain(|_, tat| *tat > t);
    if shard.len() == before
        && let Some(k) = shard.iter().min_by_key(|(_, tat)| **tat).map(|(k, _)| *k)
    {
        shard.remove(&k);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a shard leaves numbers only, each valid on its own.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
