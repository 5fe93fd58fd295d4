//! The connection pool: one [`Entry`] per pool key, in a sharded map.
//!
//! ```text
//! Pool ── shard[hash(key) → 0..SHARDS]: RwLock<HashMap<ShortKey, [Arc<Entry>]>>
//!           Entry (one per addr × TLS trust × SNI × protocol)
//!             ├─ idle: Mutex<VecDeque<IdleConn>>   HTTP/1.1 (hyper), LIFO, capped, timed out
//!             ├─ raw:  [Mutex<VecDeque<IdleRaw>>]  HTTP/1.1 sockets of the fast path, same rules,
//!             │                                    one list per worker (thread per core)
//!             ├─ h2:   Mutex<Option<SendRequest>>  one multiplexed HTTP/2 connection
//!             ├─ h2_connect: async gate            one HTTP/2 connect at a time
//!             ├─ tls: the backend's rustls config with this entry's own TLS session cache
//!             └─ retired                          set when its trust left the snapshot
//! ```
//!
//! TLS sessions are kept per entry, that is per endpoint, as nginx keeps them per upstream
//! peer: rustls caches sessions by server name, and every endpoint of a Service shares one
//! (`<svc>.<ns>.svc.cluster.local`), so one cache per config would offer endpoint A's ticket
//! to endpoint B, which cannot resume it. An entry with a session outlives its connections by
//! the pool's idle timeout, so an origin that closes after every response still resumes.
//!
//! Locking: a request takes one shard *read* lock to find its entry (a write lock only to
//! insert a new key), then the entry's own mutex to pop or push a connection. Every critical
//! section is a few pointer moves; none is held across an `.await`. Lock order is shard, then
//! entry. The map key is a small `Copy` value (no allocation per lookup); the SNI, which is
//! rarely different for one address and trust, is compared in the short list behind it.
//!
//! The idle cap ([`Settings::max_idle`]) is for connections that go unused, not for a
//! burst's: a release always pools its connection, and the sweep (every
//! [`super::RETIRE_BOUND`] at most) closes, oldest first, the connections above the cap that
//! have been idle for [`Settings::surplus_idle`]. Checkouts take the most recently used, so the
//! oldest are those the load did not need. Under a load whose concurrency swings above the
//! cap, the connections it keeps reusing stay open instead of closing on release and opening
//! again a moment later (at 10 000 active clients, a cap of 1 024 applied on release closed
//! and reopened ~3 000 upstream connections a second, and the requests that waited for those
//! connects made the latency tail; BENCHMARKS.md). When the load falls, the list is back at
//! the cap within `surplus_idle` and a sweep. This is HAProxy's way with idle server
//! connections (`pool-purge-delay`), not nginx's fixed `keepalive` cache. The connections
//! kept above the cap were all in use at once moments before, so pooling them opens nothing
//! the load did not already hold.
//!
//! Retiring: [`Entry::retire`] sets `retired` and empties both lists under their locks, so a
//! connection released or installed concurrently is dropped instead of pooled. Requests
//! already using a retired connection finish; HTTP/2 keeps the connection open until its last
//! stream ends, because each response holds a reference to it. [`Pool::sweep`] retires the
//! entries whose trust key, or endpoint address, is not in the current snapshot ([`Live`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use rustls::ClientConfig;
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, ReadBuf};

use super::connect::{Failed, H1Sender, H2Sender, Stream};
use crate::model::{AppProtocol, Backend, BackendTls, Snapshot, UpstreamTls};
use crate::proxy::fxhash::FxBuild;
use crate::proxy::observe::metrics::UpstreamGuard;
use crate::proxy::workers;

/// Power of two. Enough that two cores never meet on one shard by accident.
const SHARDS: usize = 32;

/// How long a released HTTP/1.1 connection may take to become ready for the next request
/// (its connection task catching up, or a request body still being written after an early
/// response) before it is dropped instead of pooled.
const READY_WAIT: Duration = Duration::from_secs(5);

/// An entry has one server name; rustls keeps up to 8 TLS 1.3 tickets per server name and
/// sizes its cache in tickets, so 8 holds exactly one server.
const SESSIONS_PER_ENTRY: usize = 8;

pub struct Pool {
    shards: Box<[RwLock<Shard>]>,
    settings: Arc<Settings>,
    /// After shutdown, new entries are born retired: nothing is pooled any more.
    closed: AtomicBool,
}

/// What the current snapshot can still reach: pooled connections for anything else go.
#[derive(Debug, Default)]
pub struct Live {
    pub trust_keys: HashSet<u64>,
    pub addrs: HashSet<SocketAddr>,
}

type Shard = HashMap<ShortKey, Vec<Arc<Entry>>, FxBuild>;

/// Pool knobs and the idle gauge, shared by every entry.
#[derive(Debug)]
pub struct Settings {
    pub max_idle: usize,
    pub idle_timeout: Duration,
    /// Idle connections above `max_idle` close once idle this long.
    pub surplus_idle: Duration,
    pub idle_gauge: Gauge,
}

/// Everything that changes a connection except the SNI (kept in the entry): endpoint,
/// trust (`UpstreamTls::trust_key`, `None` for plaintext) and protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShortKey {
    pub addr: SocketAddr,
    pub trust_key: Option<u64>,
    pub protocol: AppProtocol,
}

/// What a key's connections speak. Plaintext keys know it from `appProtocol`; TLS keys learn
/// it from ALPN on their first connection (and follow it if it changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Unknown = 0,
    Http1 = 1,
    Http2 = 2,
}

pub struct Entry {
    pub key: ShortKey,
    server_name: Option<ServerName<'static>>,
    settings: Arc<Settings>,
    mode: AtomicU8,
    retired: AtomicBool,
    idle: Mutex<VecDeque<IdleConn>>,
    /// One list per worker runtime (thread per core, [`workers::lane`]): a socket's
    /// readiness events arrive on the runtime that opened it, so a worker only takes back
    /// its own connections, as each nginx worker keeps its own upstream keep-alive cache.
    raw: Box<[Mutex<VecDeque<IdleRaw>>]>,
    h2: Mutex<Option<H2Sender>>,
    /// Serialises HTTP/2 connects so concurrent requests share one connection; remembers
    /// how the last attempt failed so that requests queued behind it fail fast.
    h2_connect: tokio::sync::Mutex<Option<Failed>>,
    /// Bumped after every HTTP/2 connect attempt.
    h2_attempts: AtomicU64,
    /// The backend's rustls config with a session cache of this entry's own, made on the
    /// first TLS connect ([`Entry::tls_config`]).
    tls: OnceLock<Arc<ClientConfig>>,
    /// When a TLS connection was last opened: the entry keeps its sessions this long past
    /// its last connection (see [`Entry::is_unused`]).
    last_tls: Mutex<Option<Instant>>,
}

struct IdleConn {
    tx: H1Sender,
    since: Instant,
}

// === impl Pool ===

impl Pool {
    pub fn new(settings: Settings) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            settings: Arc::new(settings),
            closed: AtomicBool::new(false),
        }
    }

    /// The entry for a key, created on first use.
    pub fn entry(&self, key: ShortKey, server_name: Option<&ServerName<'static>>) -> Arc<Entry> {
        let shard = &self.shards[shard_of(&key)];
        {
            let map = shard.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(e) = find(&map, &key, server_name) {
                return e.clone();
            }
        }
        let mut map = shard.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = find(&map, &key, server_name) {
            return e.clone();
        }
        let entry = Arc::new(Entry::new(key, server_name.cloned(), self.settings.clone()));
        if self.closed.load(Ordering::Acquire) {
            entry.retire();
            return entry;
        }
        map.entry(key).or_default().push(entry.clone());
        entry
    }

    /// Retires entries the snapshot cannot reach any more (when `live` is given), drops idle
    /// connections past the idle timeout, and forgets entries nothing uses any more.
    pub fn sweep(&self, live: Option<&Live>) {
        let now = Instant::now();
        for shard in self.shards.iter() {
            let mut unused = false;
            {
                let map = shard.read().unwrap_or_else(PoisonError::into_inner);
                for e in map.values().flatten() {
                    if e.is_stale(live) {
                        unused = true;
                        continue;
                    }
                    e.expire_idle(now);
                    unused |= Arc::strong_count(e) == 1 && e.is_unused(now);
                }
            }
            if !unused {
                continue;
            }
            let mut map = shard.write().unwrap_or_else(PoisonError::into_inner);
            map.retain(|_, entries| {
                entries.retain(|e| {
                    if e.is_stale(live) {
                        e.retire();
                        return false;
                    }
                    // Under the write lock nobody can clone the entry out of the map, so a
                    // count of one means no request or body holds it.
                    !(Arc::strong_count(e) == 1 && e.is_unused(now))
                });
                !entries.is_empty()
            });
        }
    }

    /// Closes one idle HTTP/1.1 connection to an endpoint of `backend`, the oldest of the
    /// first entry that has one, to make room under the backend's `maxConnections`: of
    /// `own` (the caller's entry) only one the caller could not take itself (`raw`: it takes
    /// this worker's raw connections, else hyper's). False when none is idle. The rare path:
    /// one map lookup per endpoint.
    pub fn close_idle(&self, backend: &Backend, own: &Entry, raw: bool) -> bool {
        for endpoint in &backend.endpoints {
            let Ok(tls) = backend.tls_for(endpoint) else {
                continue;
            };
            let key = ShortKey {
                addr: endpoint.addr,
                trust_key: tls.map(|u| u.trust_key),
                protocol: backend.protocol,
            };
            if key == own.key {
                if own.close_one_unusable(raw) {
                    return true;
                }
                continue;
            }
            let map = self.shards[shard_of(&key)]
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            for e in map.get(&key).into_iter().flatten() {
                if e.close_one_idle() {
                    return true;
                }
            }
        }
        false
    }

    /// Retires every entry, now and to come (shutdown).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for shard in self.shards.iter() {
            let drained: Vec<_> = {
                let mut map = shard.write().unwrap_or_else(PoisonError::into_inner);
                map.drain().flat_map(|(_, v)| v).collect()
            };
            drained.iter().for_each(|e| e.retire());
        }
    }

    /// Idle HTTP/1.1 connections and HTTP/2 connections held, for tests.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let (mut idle, mut h2) = (0, 0);
        for shard in self.shards.iter() {
            let map = shard.read().unwrap_or_else(PoisonError::into_inner);
            for e in map.values().flatten() {
                idle += lock(&e.idle).len() + e.raw.iter().map(|l| lock(l).len()).sum::<usize>();
                h2 += usize::from(lock(&e.h2).is_some());
            }
        }
        (idle, h2)
    }
}

fn find<'m>(
    map: &'m Shard,
    key: &ShortKey,
    server_name: Option<&ServerName<'static>>,
) -> Option<&'m Arc<Entry>> {
    map.get(key)?
        .iter()
        .find(|e| e.server_name.as_ref() == server_name)
}

pub fn shard_of(key: &ShortKey) -> usize {
    // Remix so the shard index does not correlate with the bits the map itself uses.
    let h = FxBuild.hash_one(key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 32) as usize & (SHARDS - 1)
}

/// Takes out, oldest first (the front), the idle connections above `cap` that have been idle
/// for `after`: the cap's rule for both lists (module docs).
fn surplus<T>(
    list: &mut VecDeque<T>,
    cap: usize,
    after: Duration,
    now: Instant,
    since: impl Fn(&T) -> Instant,
) -> Vec<T> {
    let over = list.len().saturating_sub(cap);
    let n = list
        .iter()
        .take(over)
        .take_while(|c| now.duration_since(since(c)) >= after)
        .count();
    list.drain(..n).collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Critical sections only move values; a panic inside one leaves consistent data.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// === impl Live ===

impl Live {
    /// The trust keys and endpoint addresses of every backend the snapshot routes or mirrors
    /// to.
    pub fn of(snapshot: &Snapshot) -> Self {
        let mut live = Self::default();
        snapshot.for_each_backend(|b| {
            if let BackendTls::Tls(u) = &b.tls {
                live.trust_keys.insert(u.trust_key);
            }
            live.addrs.extend(b.endpoints.iter().map(|e| e.addr));
        });
        live
    }
}

// === impl Entry ===

impl Entry {
    fn new(
        key: ShortKey,
        server_name: Option<ServerName<'static>>,
        settings: Arc<Settings>,
    ) -> Self {
        let mode = match (key.trust_key, key.protocol) {
            // Opaque backends (TLSRoute) are never pooled: their streams are dialled directly.
            (_, AppProtocol::WebSocket | AppProtocol::Opaque) | (None, AppProtocol::Http1) => {
                Mode::Http1
            }
            (None, AppProtocol::H2c) => Mode::Http2,
            (Some(_), AppProtocol::Http1 | AppProtocol::H2c) => Mode::Unknown,
        };
        Self {
            key,
            server_name,
            settings,
            mode: AtomicU8::new(mode as u8),
            retired: AtomicBool::new(false),
            idle: Mutex::default(),
            raw: (0..workers::lanes()).map(|_| Mutex::default()).collect(),
            h2: Mutex::default(),
            h2_connect: tokio::sync::Mutex::default(),
            h2_attempts: AtomicU64::new(0),
            tls: OnceLock::new(),
            last_tls: Mutex::default(),
        }
    }

    /// The rustls config for a new TLS connection of this entry: `tls.config` with a session
    /// cache of the entry's own, so the connection resumes a session with this endpoint. The
    /// entry's key holds the trust key, and equal trust keys mean equal configs, so the copy
    /// made on the first connect serves every later one.
    pub fn tls_config(&self, tls: &UpstreamTls) -> Arc<ClientConfig> {
        *lock(&self.last_tls) = Some(Instant::now());
        self.tls
            .get_or_init(|| {
                let mut config = ClientConfig::clone(&tls.config);
                config.resumption = Resumption::in_memory_sessions(SESSIONS_PER_ENTRY);
                Arc::new(config)
            })
            .clone()
    }

    pub fn mode(&self) -> Mode {
        match self.mode.load(Ordering::Relaxed) {
            1 => Mode::Http1,
            2 => Mode::Http2,
            _ => Mode::Unknown,
        }
    }

    /// Records what a new connection negotiated (TLS keys only; plaintext keys are fixed).
    pub fn learned(&self, mode: Mode) {
        if self.key.trust_key.is_some() && self.key.protocol != AppProtocol::WebSocket {
            self.mode.store(mode as u8, Ordering::Relaxed);
        }
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The most recently used idle HTTP/1.1 connection that is still open and fresh.
    pub fn checkout_h1(&self) -> Option<H1Sender> {
        let now = Instant::now();
        let mut idle = lock(&self.idle);
        while let Some(c) = idle.pop_back() {
            self.settings.idle_gauge.dec();
            if c.tx.is_ready() && now.duration_since(c.since) < self.settings.idle_timeout {
                return Some(c.tx);
            }
        }
        None
    }

    /// Called once a response body has been read to its end: the connection goes back to the
    /// pool as soon as hyper is ready to send on it again.
    pub fn release(self: Arc<Self>, mut tx: H1Sender) {
        if tx.is_ready() {
            self.push_idle(tx);
            return;
        }
        if tx.is_closed() || self.is_retired() {
            return;
        }
        // The connection task has not caught up yet (or the upstream answered before reading
        // the whole request body): wait off the request path.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let wait = self.settings.idle_timeout.min(READY_WAIT);
        rt.spawn(async move {
            if let Ok(Ok(())) = tokio::time::timeout(wait, tx.ready()).await {
                self.push_idle(tx);
            }
        });
    }

    /// Pools a connection whose exchange ended. The cap is the sweep's to apply (module
    /// docs).
    fn push_idle(&self, tx: H1Sender) {
        let since = Instant::now();
        let mut idle = lock(&self.idle);
        if self.is_retired() || self.settings.max_idle == 0 {
            return;
        }
        idle.push_back(IdleConn { tx, since });
        self.settings.idle_gauge.inc();
    }

    /// The most recently used idle raw connection that is still usable (fast path).
    pub fn checkout_raw(&self) -> Option<IdleRaw> {
        let now = Instant::now();
        let mut raw = lock(self.raw_lane());
        while let Some(mut c) = raw.pop_back() {
            self.settings.idle_gauge.dec();
            if now.duration_since(c.since) < self.settings.idle_timeout && c.usable() {
                return Some(c);
            }
        }
        None
    }

    /// An idle connection waits: hyper's (`raw` false), or one of this worker's raw ones.
    pub fn has_idle(&self, raw: bool) -> bool {
        if raw {
            !lock(self.raw_lane()).is_empty()
        } else {
            !lock(&self.idle).is_empty()
        }
    }

    /// Closes the oldest idle connection the caller could not take ([`Entry::has_idle`]).
    fn close_one_unusable(&self, raw: bool) -> bool {
        if raw && lock(&self.idle).pop_front().is_some() {
            self.settings.idle_gauge.dec();
            return true;
        }
        let mine = raw.then(|| workers::lane() % self.raw.len());
        for (i, lane) in self.raw.iter().enumerate() {
            if Some(i) != mine && lock(lane).pop_front().is_some() {
                self.settings.idle_gauge.dec();
                return true;
            }
        }
        false
    }

    /// Closes the oldest idle connection (hyper's, else a raw one of any worker's).
    fn close_one_idle(&self) -> bool {
        let conn = lock(&self.idle).pop_front();
        if conn.is_some() {
            self.settings.idle_gauge.dec();
            return true;
        }
        for lane in &self.raw {
            let conn = lock(lane).pop_front();
            if conn.is_some() {
                self.settings.idle_gauge.dec();
                return true;
            }
        }
        false
    }

    /// This worker's list of raw connections.
    fn raw_lane(&self) -> &Mutex<VecDeque<IdleRaw>> {
        &self.raw[workers::lane() % self.raw.len()]
    }

    /// Pools a raw connection whose exchange ended cleanly. The cap (per worker, counting
    /// hyper's idle connections of the entry too) is the sweep's to apply (module docs).
    pub fn push_raw(&self, conn: IdleRaw) {
        let mut raw = lock(self.raw_lane());
        if self.is_retired() || self.settings.max_idle == 0 {
            return;
        }
        raw.push_back(conn);
        self.settings.idle_gauge.inc();
    }

    /// The shared HTTP/2 connection, if open.
    pub fn h2_sender(&self) -> Option<H2Sender> {
        let mut slot = lock(&self.h2);
        match &*slot {
            Some(tx) if !tx.is_closed() => Some(tx.clone()),
            Some(_) => {
                *slot = None;
                None
            }
            None => None,
        }
    }

    /// Makes `tx` the shared HTTP/2 connection unless the entry is retired or already has an
    /// open one.
    pub fn install_h2(&self, tx: &H2Sender) {
        let mut slot = lock(&self.h2);
        if self.is_retired() {
            return;
        }
        if slot.as_ref().is_none_or(|t| t.is_closed()) {
            *slot = Some(tx.clone());
        }
    }

    /// Forgets the shared HTTP/2 connection if it has closed (a request was just handed back
    /// from it unsent).
    pub fn forget_h2(&self) {
        let mut slot = lock(&self.h2);
        if slot.as_ref().is_some_and(H2Sender::is_closed) {
            *slot = None;
        }
    }

    pub fn h2_gate(&self) -> &tokio::sync::Mutex<Option<Failed>> {
        &self.h2_connect
    }

    pub fn h2_attempts(&self) -> u64 {
        self.h2_attempts.load(Ordering::Acquire)
    }

    pub fn h2_attempted(&self) {
        self.h2_attempts.fetch_add(1, Ordering::AcqRel);
    }

    /// No new request will use this entry's connections.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        let idle = std::mem::take(&mut *lock(&self.idle));
        let raw: Vec<IdleRaw> = self
            .raw
            .iter()
            .flat_map(|l| std::mem::take(&mut *lock(l)))
            .collect();
        self.settings
            .idle_gauge
            .dec_by((idle.len() + raw.len()) as i64);
        let h2 = lock(&self.h2).take();
        drop((idle, raw, h2));
    }

    fn is_stale(&self, live: Option<&Live>) -> bool {
        let Some(live) = live else { return false };
        !live.addrs.contains(&self.key.addr)
            || self
                .key
                .trust_key
                .is_some_and(|k| !live.trust_keys.contains(&k))
    }

    /// Closes the idle connections past the idle timeout, closed by their peer, or above the
    /// cap and idle for `surplus_idle` (module docs).
    fn expire_idle(&self, now: Instant) {
        let Settings {
            max_idle,
            idle_timeout: timeout,
            surplus_idle,
            ..
        } = *self.settings;
        let (expired, hyper_idle): (Vec<IdleConn>, usize) = {
            let mut idle = lock(&self.idle);
            let mut gone = surplus(&mut idle, max_idle, surplus_idle, now, |c| c.since);
            // Oldest first: stop at the first connection still fresh and open.
            let n = idle
                .iter()
                .take_while(|c| now.duration_since(c.since) >= timeout || c.tx.is_closed())
                .count();
            gone.extend(idle.drain(..n));
            self.settings.idle_gauge.dec_by(gone.len() as i64);
            (gone, idle.len())
        };
        // Raw sockets have no connection task to notice a close: probe each one (once: a
        // probe that read a stray byte has spoiled the connection).
        let mut expired_raw: Vec<IdleRaw> = Vec::new();
        for lane in &self.raw {
            let mut raw = lock(lane);
            let cap = max_idle.saturating_sub(hyper_idle);
            let over = surplus(&mut raw, cap, surplus_idle, now, |c| c.since);
            self.settings.idle_gauge.dec_by(over.len() as i64);
            expired_raw.extend(over);
            let bad: Vec<usize> = raw
                .iter_mut()
                .enumerate()
                .filter_map(|(i, c)| {
                    (now.duration_since(c.since) >= timeout || !c.usable()).then_some(i)
                })
                .collect();
            self.settings.idle_gauge.dec_by(bad.len() as i64);
            expired_raw.extend(bad.iter().rev().filter_map(|&i| raw.remove(i)));
        }
        drop((expired, expired_raw));
    }

    fn is_empty(&self) -> bool {
        lock(&self.idle).is_empty()
            && self.raw.iter().all(|l| lock(l).is_empty())
            && lock(&self.h2).is_none()
    }

    /// No pooled connection, and no TLS session opened within the idle timeout: nothing is
    /// lost by forgetting the entry.
    fn is_unused(&self, now: Instant) -> bool {
        self.is_empty()
            && lock(&self.last_tls)
                .is_none_or(|t| now.duration_since(t) >= self.settings.idle_timeout)
    }
}

/// A raw connection waiting in the pool.
pub struct IdleRaw {
    pub(super) io: Stream,
    pub(super) open: UpstreamGuard,
    pub since: Instant,
}

// === impl IdleRaw ===

impl IdleRaw {
    /// Still open and quiet: reading from it would block (no EOF, no reset, no stray bytes).
    /// Checked at checkout and by the pool's sweep, so a connection the backend closed while
    /// idle is neither used nor kept. Cheap: tokio clears a socket's read readiness after the
    /// short read that ended the last response, so a quiet socket answers without a syscall.
    /// (A backend that closes just as a request goes out is covered by the one retry of
    /// idempotent requests in `h1::exchange`.)
    pub fn usable(&mut self) -> bool {
        would_block(&mut self.io)
    }
}

/// One non-blocking read: `true` when it would block. A TLS stream processes what is buffered
/// (a session ticket, an alert) on the way.
fn would_block(io: &mut Stream) -> bool {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    matches!(Pin::new(io).poll_read(&mut cx, &mut buf), Poll::Pending)
}
