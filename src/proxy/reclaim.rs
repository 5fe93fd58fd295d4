//! Connections that wait on their client — a TLS handshake or PROXY header in progress, a
//! request head not yet complete, an idle keep-alive connection — and that the accept loop
//! may close at the connection cap to make room for a new client, the longest-waiting first.
//!
//! nginx does the same with keep-alive connections and connections that have not sent a byte
//! yet when it runs out of connections (`ngx_drain_connections`); pier also counts a head that
//! trickles in (slowloris), so 10 000 slow clients cannot hold every slot of a port until
//! their header timeout. A connection with a request in progress is never closed this way:
//! it marks itself busy before it forwards or answers, and the mark and the close are one
//! compare-and-swap apart, so exactly one of them wins.
//!
//! Hot path cost: two atomic stores per request (`wait`, `busy`) and one atomic-waker
//! registration per poll of the connection task; the registry lock is taken once per
//! connection (register, unregister) and at the cap. A registration is one allocation (its
//! slot, shared by the clones a connection hands around); the registry holds it weakly.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures::task::AtomicWaker;
use slab::Slab;

/// A request is in progress (or the connection went to a server that manages its own
/// idleness: hyper, TLS streams).
const BUSY: u64 = 0;
/// Closed by the accept loop.
const CLOSED: u64 = u64::MAX;

/// One port's waiting connections.
pub struct Reclaim {
    slots: Mutex<Slab<Weak<Slot>>>,
    epoch: Instant,
    /// Connections closed so far (a parking lot looks at its own when this moves).
    closes: AtomicU64,
}

/// One connection's state: `BUSY`, `CLOSED`, or the millisecond (since the port's epoch, plus
/// one) it started waiting on its client. Leaves its port's registry when the connection's
/// last [`Registration`] is dropped.
pub struct Slot {
    state: AtomicU64,
    waker: AtomicWaker,
    key: usize,
    reclaim: Arc<Reclaim>,
}

/// A connection's place in its port's registry; clones share it, and the last one dropped
/// leaves the registry.
#[derive(Clone)]
pub struct Registration {
    slot: Arc<Slot>,
}

// === impl Reclaim ===

impl Reclaim {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            slots: Mutex::new(Slab::new()),
            epoch: Instant::now(),
            closes: AtomicU64::new(0),
        })
    }

    /// Registers a connection just accepted: it waits on its client from now.
    pub fn register(self: &Arc<Self>) -> Registration {
        let state = AtomicU64::new(self.stamp(Instant::now()));
        let mut slots = self.lock();
        let entry = slots.vacant_entry();
        let slot = Arc::new(Slot {
            state,
            waker: AtomicWaker::new(),
            key: entry.key(),
            reclaim: self.clone(),
        });
        entry.insert(Arc::downgrade(&slot));
        Registration { slot }
    }

    /// Closes up to `n` of the connections that have waited on their client the longest;
    /// returns how many it closed.
    pub fn close_longest_waiting(&self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        // Taken out under the lock, looked at and let go of outside it: the last reference
        // to a slot may be one of these, and dropping it takes the lock.
        let open: Vec<Arc<Slot>> = self
            .lock()
            .iter()
            .filter_map(|(_, s)| s.upgrade())
            .collect();
        let mut waiting: Vec<(u64, &Arc<Slot>)> = open
            .iter()
            .filter_map(|s| {
                let state = s.state.load(Ordering::Acquire);
                (state != BUSY && state != CLOSED).then_some((state, s))
            })
            .collect();
        if waiting.len() > n {
            waiting.select_nth_unstable_by_key(n - 1, |(since, _)| *since);
            waiting.truncate(n);
        }
        let mut closed = 0;
        for (since, slot) in waiting {
            // Fails if the connection went busy (or waits anew) since the scan: it stays.
            if slot
                .state
                .compare_exchange(since, CLOSED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                closed += 1;
                self.closes.fetch_add(1, Ordering::AcqRel);
                slot.waker.wake();
            }
        }
        closed
    }

    /// How many connections [`Reclaim::close_longest_waiting`] has closed so far.
    pub fn closes(&self) -> u64 {
        self.closes.load(Ordering::Acquire)
    }

    /// Connections registered (open) on this port.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn stamp(&self, at: Instant) -> u64 {
        // +1 keeps a stamp apart from BUSY; no stamp reaches CLOSED (585 million years).
        at.saturating_duration_since(self.epoch).as_millis() as u64 + 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slab<Weak<Slot>>> {
        // The lock guards no invariant a panic could break halfway.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// === impl Registration ===

impl Registration {
    /// The connection starts waiting on its client (for the next request head). A
    /// connection already waiting keeps its earlier start; a closed one stays closed.
    pub fn wait(&self, now: Instant) {
        let _ = self.slot.state.compare_exchange(
            BUSY,
            self.slot.reclaim.stamp(now),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// The connection has a request to serve (or hands itself to a server that bounds its
    /// own idleness): from now on the accept loop leaves it alone. `false` if the accept
    /// loop closed it first: the connection must end without serving.
    #[must_use]
    pub fn busy(&self) -> bool {
        self.slot
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s != CLOSED).then_some(BUSY)
            })
            .is_ok()
    }

    /// Whether the accept loop has closed this connection.
    pub fn is_closed(&self) -> bool {
        self.slot.state.load(Ordering::Acquire) == CLOSED
    }

    /// `waker` is woken when the accept loop closes this connection (instead of the last
    /// task that waited on [`Registration::closed`]): a connection waiting outside any task
    /// of its own, in a parking lot. `true` if it is closed already.
    pub fn wake_on_close(&self, waker: &Waker) -> bool {
        self.slot.waker.register(waker);
        self.is_closed()
    }

    /// Resolves once the accept loop has closed this connection.
    pub fn closed(&self) -> Closed<'_> {
        Closed { slot: &self.slot }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self.reclaim.lock();
        if slots.contains(self.key) {
            slots.remove(self.key);
        }
    }
}

/// See [`Registration::closed`].
pub struct Closed<'a> {
    slot: &'a Slot,
}

impl Future for Closed<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.slot.state.load(Ordering::Acquire) == CLOSED {
            return Poll::Ready(());
        }
        self.slot.waker.register(cx.waker());
        if self.slot.state.load(Ordering::Acquire) == CLOSED {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests;
