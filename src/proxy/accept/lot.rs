//! The parking lot: plain keep-alive connections that have idled long enough to park
//! ([`crate::proxy::downstream::h1::PARK_AFTER`]) wait here, with no task and no registration in tokio's driver
//! of their own, until their client sends again, their idle deadline passes, the accept loop
//! closes them at the connection cap, or the drain.
//!
//! Parked in its own task, a connection cost the task (~0.9 KiB with tokio's header), tokio's
//! per-socket readiness state (`ScheduledIo`, 388 bytes) and its `ConnInfo`: 1.9 KiB per idle
//! connection in all (`scripts/bench-idle.py`), against nginx's 0.6. Here it is its socket in
//! a second epoll set (mio), a slab entry of 88 bytes, 16 bytes in a deadline heap, and its
//! registration for the connection cap (64 bytes): 0.5–0.6 KiB of RSS. The set itself is
//! registered once with the runtime, so one task serves every parked connection of an accept
//! loop, as an nginx worker's event loop holds its idle keep-alive connections.
//!
//! Parking costs four `epoll_ctl` calls per idle period (out of tokio's set, into the lot's,
//! and back), paid only by connections idle for a second: never on the request path.
//!
//! The lot knows nothing of HTTP: it hands a woken connection back ([`Woken`]) to the caller's
//! function, which spawns a task to serve it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Token};
use slab::Slab;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::proxy::drain::DrainToken;
use crate::proxy::reclaim::{Reclaim, Registration};

/// How many readiness events one look at the lot's epoll set takes.
const EVENTS: usize = 256;
/// An empty lot keeps a slab of up to this many entries (22 KiB) for the next ones.
const KEEP_EMPTY: usize = 256;

/// One accept loop's parked connections; `T` is what the caller keeps with each, `O` what it
/// keeps for all (the port they arrived on).
pub struct Lot<T, O = ()> {
    owner: O,
    /// The lot's epoll set, for parking from any thread (`None`: it could not be made; every
    /// park is refused).
    registry: Option<mio::Registry>,
    state: Mutex<State<T>>,
    /// A connection parked with a deadline sooner than the lot's timer.
    sooner: Notify,
}

struct State<T> {
    /// Taking connections: until the lot's task ends.
    open: bool,
    entries: Slab<Entry<T>>,
    /// Deadlines, soonest first, as (deadline, entry key, entry serial); entries that left
    /// stay until popped or swept ([`State::sweep`]).
    due: BinaryHeap<Reverse<(u64, u32, u32)>>,
    serial: u32,
    /// Deadlines are kept as milliseconds after this (rounded up): 8 bytes, not 16.
    epoch: Instant,
    /// The lot's task: woken when the accept loop closes a parked connection.
    waker: Option<Waker>,
    /// When the lot's task next wakes by its timer.
    timer: Option<Instant>,
}

struct Entry<T> {
    tcp: std::net::TcpStream,
    serial: u32,
    /// Milliseconds after the lot's epoch.
    deadline: u64,
    reclaim: Registration,
    value: T,
}

/// What the lot hands back.
pub enum Woken<T> {
    /// The client sent something (or closed, or failed: reading will tell), before its
    /// deadline. The stream is registered with the runtime again.
    Ready {
        tcp: tokio::net::TcpStream,
        deadline: Instant,
        reclaim: Registration,
        value: T,
    },
    /// Closed by the accept loop at the connection cap.
    Reclaimed(T),
}

/// A connection the lot did not take (its task has ended), given back.
pub struct Refused<T> {
    pub tcp: std::net::TcpStream,
    pub reclaim: Registration,
    pub value: T,
}

impl<T, O> Lot<T, O> {
    /// A lot and its epoll set, to be run by [`Lot::run`]. Without an epoll set (out of file
    /// descriptors) the lot refuses every connection: they wait in their own tasks.
    pub fn new(owner: O) -> (Arc<Self>, Option<mio::Poll>) {
        let poll = mio::Poll::new().and_then(|p| Ok((p.registry().try_clone()?, p)));
        let (registry, poll) = match poll {
            Ok((registry, poll)) => (Some(registry), Some(poll)),
            Err(error) => {
                tracing::warn!(%error, "no parking lot for idle connections");
                (None, None)
            }
        };
        let lot = Arc::new(Self {
            owner,
            registry,
            state: Mutex::new(State {
                open: poll.is_some(),
                entries: Slab::new(),
                due: BinaryHeap::new(),
                serial: 0,
                epoch: Instant::now(),
                waker: None,
                timer: None,
            }),
            sooner: Notify::new(),
        });
        (lot, poll)
    }

    /// What the lot's connections share.
    pub fn owner(&self) -> &O {
        &self.owner
    }

    /// Parks `tcp` (a stream out of the runtime: nonblocking, nothing buffered by pier) until
    /// its client sends, `deadline` passes (closed), the accept loop closes it (`reclaim`), or
    /// the drain.
    pub fn park(
        &self,
        tcp: std::net::TcpStream,
        deadline: Instant,
        reclaim: Registration,
        value: T,
    ) -> Result<(), Refused<T>> {
        let refused = |tcp, reclaim, value| {
            Err(Refused {
                tcp,
                reclaim,
                value,
            })
        };
        let Some(registry) = &self.registry else {
            return refused(tcp, reclaim, value);
        };
        let mut state = self.lock();
        let Some(waker) = state.waker.clone().filter(|_| state.open) else {
            return refused(tcp, reclaim, value);
        };
        let key = state.entries.vacant_key();
        let Ok(heap_key) = u32::try_from(key) else {
            return refused(tcp, reclaim, value);
        };
        let fd = tcp.as_raw_fd();
        if let Err(error) = registry.register(&mut SourceFd(&fd), Token(key), Interest::READABLE) {
            tracing::debug!(%error, "could not park a connection");
            return refused(tcp, reclaim, value);
        }
        if reclaim.wake_on_close(&waker) {
            // Closed just before: the close woke the connection's old task, not the lot's.
            waker.wake_by_ref();
        }
        state.serial = state.serial.wrapping_add(1);
        let serial = state.serial;
        let at = state.millis(deadline);
        state.entries.insert(Entry {
            tcp,
            serial,
            deadline: at,
            reclaim,
            value,
        });
        state.due.push(Reverse((at, heap_key, serial)));
        if state.timer.is_none_or(|t| deadline < t) {
            self.sooner.notify_one();
        }
        Ok(())
    }

    /// The size of one parked connection's slab entry.
    #[cfg(test)]
    pub const ENTRY_SIZE: usize = std::mem::size_of::<Entry<T>>();

    /// Parked connections.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// The lot's task: runs until the drain closes what is left, or `drain_wait` after the
    /// drain starts (parked connections get that long to bring one more request, as idle
    /// ones on the fast path do), then closes every parked connection and refuses new ones.
    /// `woken` gets each connection that leaves other than by closing.
    pub async fn run(
        self: Arc<Self>,
        poll: mio::Poll,
        mut drain: DrainToken,
        reclaim: Arc<Reclaim>,
        drain_wait: Duration,
        mut woken: impl FnMut(Woken<T>),
    ) {
        // `with_interest` is deprecated for taking any `AsRawFd` without `unsafe` (I/O
        // safety: the fd must stay open and the same while registered). It holds here: the
        // fd is the epoll set `mio::Poll` owns, and the `AsyncFd` owns the `Poll` until this
        // task ends. pier forbids `unsafe`, so the safe (deprecated) form is used.
        #[allow(deprecated)]
        let set = AsyncFd::with_interest(poll, tokio::io::Interest::READABLE);
        let mut set = match set {
            Ok(set) => set,
            Err(error) => {
                tracing::warn!(%error, "no parking lot for idle connections");
                self.close_all();
                return;
            }
        };
        let waker = std::future::poll_fn(|cx| std::task::Poll::Ready(cx.waker().clone())).await;
        self.lock().waker = Some(waker);
        let mut events = mio::Events::with_capacity(EVENTS);
        let mut out = Vec::new();
        let mut closes = reclaim.closes();
        let mut drain_by: Option<Instant> = None;
        // A second token, to wait for the drain's end and its start in one `select!`.
        let mut closing = drain.clone();
        loop {
            let timer = {
                let mut state = self.lock();
                let next = state.due.peek().map(|Reverse((at, ..))| state.instant(*at));
                let timer = match (next, drain_by) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                state.timer = timer;
                timer
            };
            let sooner = self.sooner.notified();
            // Registers no waker of its own: every parked connection's registration wakes
            // this task when the accept loop closes it (`Lot::park`).
            let reclaimed = std::future::poll_fn(|_| {
                if reclaim.closes() != closes {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            });
            let sleep = tokio::time::sleep_until(timer.unwrap_or_else(Instant::now));
            tokio::select! {
                biased;
                () = closing.closed() => break,
                () = drain.draining(), if drain_by.is_none() => {
                    drain_by = Some(Instant::now() + drain_wait);
                }
                () = reclaimed => {
                    closes = reclaim.closes();
                    self.lock().reclaimed(&self.registry, &mut out);
                }
                ready = set.readable_mut() => {
                    let Ok(mut ready) = ready else { break };
                    loop {
                        if ready.get_inner_mut().poll(&mut events, Some(Duration::ZERO)).is_err() {
                            break;
                        }
                        if events.is_empty() {
                            ready.clear_ready();
                            break;
                        }
                        let mut state = self.lock();
                        for event in events.iter() {
                            state.ready(&self.registry, event.token().0, &mut out);
                        }
                    }
                }
                () = sleep, if timer.is_some() => {
                    let now = Instant::now();
                    if drain_by.is_some_and(|by| now >= by) {
                        break;
                    }
                    self.lock().expire(&self.registry, now);
                }
                () = sooner => {}
            }
            for w in out.drain(..) {
                woken(w);
            }
        }
        self.close_all();
    }

    /// Refuses new connections and closes the parked ones.
    fn close_all(&self) {
        let mut state = self.lock();
        state.open = false;
        state.due.clear();
        for (_, entry) in std::mem::take(&mut state.entries) {
            if let Some(registry) = &self.registry {
                let _ = registry.deregister(&mut SourceFd(&entry.tcp.as_raw_fd()));
            }
            close(entry);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // The lock guards no invariant a panic could break halfway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T> State<T> {
    /// `at` as milliseconds after the epoch, rounded up (never closed early).
    fn millis(&self, at: Instant) -> u64 {
        let after = at.saturating_duration_since(self.epoch);
        after.as_millis() as u64 + u64::from(!after.subsec_nanos().is_multiple_of(1_000_000))
    }

    fn instant(&self, millis: u64) -> Instant {
        self.epoch + Duration::from_millis(millis)
    }

    /// Takes entry `key` out of the lot's epoll set.
    fn take(&mut self, registry: &Option<mio::Registry>, key: usize) -> Option<Entry<T>> {
        let entry = self.entries.try_remove(key)?;
        if let Some(registry) = registry {
            let _ = registry.deregister(&mut SourceFd(&entry.tcp.as_raw_fd()));
        }
        if self.entries.is_empty() && self.entries.capacity() > KEEP_EMPTY {
            // The last one left after a crowd: give back the slab and heap it needed (a slab
            // cannot shrink below its highest key while any entry is parked).
            self.entries = Slab::new();
            self.due = BinaryHeap::new();
        } else if self.due.len() > 2 * self.entries.len() + 64 {
            // Its heap entry stays until popped; sweep when the stale ones are the many.
            self.sweep();
        }
        Some(entry)
    }

    fn sweep(&mut self) {
        let entries = &self.entries;
        self.due.retain(|Reverse((_, key, serial))| {
            entries
                .get(*key as usize)
                .is_some_and(|e| e.serial == *serial)
        });
        if self.due.capacity() > 4 * self.due.len() + KEEP_EMPTY {
            self.due.shrink_to_fit();
        }
    }

    /// The client of entry `key` sent something (or hung up).
    fn ready(&mut self, registry: &Option<mio::Registry>, key: usize, out: &mut Vec<Woken<T>>) {
        let Some(entry) = self.take(registry, key) else {
            return;
        };
        if entry.reclaim.is_closed() {
            out.push(Woken::Reclaimed(entry.value));
            return;
        }
        // Back in the runtime this task runs on: the accept loop's, and the connection's.
        match tokio::net::TcpStream::from_std(entry.tcp) {
            Ok(tcp) => out.push(Woken::Ready {
                tcp,
                deadline: self.instant(entry.deadline),
                reclaim: entry.reclaim,
                value: entry.value,
            }),
            Err(error) => tracing::debug!(%error, "could not resume a parked connection"),
        }
    }

    /// Hands back the connections the accept loop closed.
    fn reclaimed(&mut self, registry: &Option<mio::Registry>, out: &mut Vec<Woken<T>>) {
        let closed: Vec<usize> = self
            .entries
            .iter()
            .filter(|(_, e)| e.reclaim.is_closed())
            .map(|(key, _)| key)
            .collect();
        for key in closed {
            if let Some(entry) = self.take(registry, key) {
                out.push(Woken::Reclaimed(entry.value));
            }
        }
    }

    /// Closes the connections whose deadline has passed.
    fn expire(&mut self, registry: &Option<mio::Registry>, now: Instant) {
        let now = now.saturating_duration_since(self.epoch).as_millis() as u64;
        while let Some(Reverse((at, key, serial))) = self.due.peek().copied() {
            if at > now {
                break;
            }
            self.due.pop();
            let key = key as usize;
            if self.entries.get(key).is_some_and(|e| e.serial == serial)
                && let Some(entry) = self.take(registry, key)
            {
                close(entry);
            }
        }
    }
}

/// FIN, as the fast path closes an idle connection (the socket is nonblocking and the
/// connection idle: this does not wait).
fn close<T>(entry: Entry<T>) {
    let _ = entry.tcp.shutdown(std::net::Shutdown::Write);
}

#[cfg(test)]
mod tests;
