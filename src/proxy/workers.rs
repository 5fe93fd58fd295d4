//! Thread per core: N threads, each running its own single-threaded runtime, as nginx runs N
//! worker processes. Every bound port gets one listening socket per worker (`SO_REUSEPORT`:
//! the kernel spreads new connections over them by a hash of the 4-tuple), and a connection
//! lives its whole life on the worker that accepted it: its task, its socket's readiness
//! events and its timers stay on one thread, with no work-stealing queues and no wake-ups
//! across threads. What the workers share is read-mostly (the snapshot, upstream pools,
//! metrics).
//!
//! The other choice, [`None`] in [`super::ProxyConfig::workers`], is one listening socket per
//! port on the process's runtime (work-stealing when it has several threads). Thread per core
//! costs less CPU per request; its trade-off is nginx's: a worker never takes a connection
//! the kernel gave another, so one busy connection can delay the others on its worker.
//! BENCHMARKS.md has the measurement.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// The worker runtimes; cheap to clone. They stop when the last clone is dropped (tasks still
/// on them are dropped too).
#[derive(Clone)]
pub struct Workers {
    inner: Arc<Inner>,
}

struct Inner {
    handles: Vec<Handle>,
    /// Dropping these lets each worker's `block_on` return.
    _stops: Vec<oneshot::Sender<()>>,
}

static INSTALLED: OnceLock<Workers> = OnceLock::new();

/// The most workers started at once in this process: per-worker lists are this long.
static LANES: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// This thread's worker number (0 on any thread that is not a worker): its index into
/// per-worker lists of length [`lanes`] (taken modulo, as lists made before the workers
/// started have one).
pub fn lane() -> usize {
    LANE.get()
}

/// How long per-worker lists are.
pub fn lanes() -> usize {
    LANES.load(Ordering::Relaxed)
}

impl Workers {
    /// Starts `n` (at least one) worker threads `pier-worker-<i>`, each spinning `spin` before
    /// it sleeps for I/O ([`spin_before_parking`]).
    pub fn start(n: usize, spin: Duration) -> std::io::Result<Self> {
        let mut handles = Vec::with_capacity(n);
        let mut stops = Vec::with_capacity(n);
        LANES.fetch_max(n.max(1), Ordering::Relaxed);
        for i in 0..n.max(1) {
            let mut builder = Builder::new_current_thread();
            builder.enable_all();
            spin_before_parking(&mut builder, spin);
            let runtime = builder.build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("pier-worker-{i}"))
                .spawn(move || {
                    LANE.set(i);
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                })?;
        }
        Ok(Self {
            inner: Arc::new(Inner {
                handles,
                _stops: stops,
            }),
        })
    }

    pub fn handles(&self) -> &[Handle] {
        &self.inner.handles
    }

    /// Makes `self` the process's workers, for [`installed`] (the binary does this once at
    /// start-up; a second call is ignored).
    pub fn install(self) {
        let _ = INSTALLED.set(self);
    }
}

/// The workers the binary started, if it runs thread per core.
pub fn installed() -> Option<Workers> {
    INSTALLED.get().cloned()
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.inner.handles.len())
            .finish()
    }
}

/// Before a runtime thread sleeps in `epoll_wait`, it spins for `spin`: under load the next
/// readiness event usually lands within it, and the sleep/wake pair (a context switch here,
/// an IPI and a wake-up charged to the sender's CPU there) is skipped. The cost is at most
/// `spin` of CPU per idle transition. BENCHMARKS.md has the measurement. Zero: no spin.
pub fn spin_before_parking(builder: &mut Builder, spin: Duration) {
    if spin.is_zero() {
        return;
    }
    builder.on_thread_park(move || {
        let start = std::time::Instant::now();
        while start.elapsed() < spin {
            std::hint::spin_loop();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_runs_its_tasks_on_its_own_thread_until_dropped() {
        let workers = Workers::start(2, Duration::ZERO).unwrap();
        let names: Vec<String> = workers
            .handles()
            .iter()
            .map(|h| {
                let (tx, rx) = std::sync::mpsc::channel();
                h.spawn(async move {
                    let name = std::thread::current().name().map(str::to_owned);
                    tx.send(name.unwrap_or_default()).unwrap();
                });
                rx.recv_timeout(Duration::from_secs(5)).unwrap()
            })
            .collect();
        assert_eq!(names, ["pier-worker-0", "pier-worker-1"]);
        // Dropped: the runtimes stop, and a task spawned on one never runs.
        let handle = workers.handles()[0].clone();
        drop(workers);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::sleep(Duration::from_millis(100));
        drop(handle.spawn(async move {
            let _ = tx.send(());
        }));
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    }
}
