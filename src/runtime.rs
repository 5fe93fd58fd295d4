//! The tokio runtime pier runs on, and how its workers wait for I/O under load.
//!
//! A worker that runs out of tasks sleeps in `epoll_wait`; under load the next readiness event
//! usually comes a few microseconds later, and the sleep/wake pair (a context switch here, an
//! IPI and a wake-up charged to the sender's CPU there) costs more than the wait. So a worker
//! keeps polling for a short while (`PIER_IDLE_SPIN_US`) before it sleeps:
//!
//! - one worker (current-thread runtime, the 1-core layout the benchmarks use): a *spinner*
//!   task busy-polls the I/O driver. It yields, which makes the scheduler poll the driver
//!   without blocking before it runs the spinner again, so an event is handled as soon as it
//!   arrives. Once the runtime has had no other work for the spin time (or after 50 spin
//!   times at the most), the spinner waits, and the next (blocking) park that ends wakes it
//!   again.
//! - several workers (multi-thread runtime): tasks move between workers, so one spinner task
//!   cannot poll for each of them; each worker spins in its park hook instead, without
//!   polling (an event that arrives meanwhile waits for the spin to end).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Two spinner polls further apart than this had other work between them.
const WORK_GAP: Duration = Duration::from_micros(5);
/// A spin ends after this many spin times at the most, work or not; the next park then
/// blocks (it returns at once under load) and its end starts a new spin. Bounds the cost
/// where polls are slow enough to look like work (a debug build, a preempted vCPU).
const MAX_SPINS: u32 = 50;

/// Builds the runtime: `workers` threads (`None`: one per core; `Some(1)`: a current-thread
/// runtime, one event loop like a 1-worker nginx), spinning up to `spin` before sleeping for
/// I/O (zero: never).
pub fn build(workers: Option<usize>, spin: Duration) -> std::io::Result<tokio::runtime::Runtime> {
    if workers == Some(1) {
        let spinner = Arc::new(Spinner::default());
        let mut builder = tokio::runtime::Builder::new_current_thread();
        if !spin.is_zero() {
            let s = spinner.clone();
            builder.on_thread_unpark(move || s.unparked());
        }
        let runtime = builder.enable_all().build()?;
        if !spin.is_zero() {
            runtime.spawn(spinner.run(spin));
        }
        return Ok(runtime);
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    if !spin.is_zero() {
        builder.on_thread_park(move || {
            let start = Instant::now();
            while start.elapsed() < spin {
                std::hint::spin_loop();
            }
        });
    }
    builder.enable_all().build()
}

/// The current-thread runtime's busy-poller (see the module docs).
#[derive(Default)]
pub struct Spinner {
    wake: Notify,
    /// Waiting for the next park to end.
    waiting: AtomicBool,
    /// Polls so far (tests read it).
    polls: AtomicU64,
}

impl Spinner {
    /// The runtime's `on_thread_unpark` hook: the worker woke from a park.
    pub fn unparked(&self) {
        if self.waiting.swap(false, Ordering::Relaxed) {
            self.wake.notify_one();
        }
    }

    /// Polls made so far.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Spins while the runtime had work within the last `spin`, then waits for a park to end.
    pub async fn run(self: Arc<Self>, spin: Duration) {
        let cap = spin * MAX_SPINS;
        loop {
            let start = Instant::now();
            let (mut last, mut idle_since) = (start, start);
            loop {
                // Deferred until the scheduler has polled the driver (without blocking, since
                // this task is pending) and run the tasks that the events woke.
                tokio::task::yield_now().await;
                self.polls.fetch_add(1, Ordering::Relaxed);
                let now = Instant::now();
                if now - last > WORK_GAP {
                    idle_since = now;
                }
                last = now;
                if now - idle_since >= spin || now - start >= cap {
                    break;
                }
            }
            self.waiting.store(true, Ordering::Relaxed);
            // A permit stored by `notify_one` before this point is taken here at once.
            self.wake.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spinner polls after work, stops when the runtime is idle (no busy loop while
    /// nothing happens), and starts again when a park ends.
    #[test]
    fn the_spinner_polls_after_work_and_rests_when_idle() {
        let spinner = Arc::new(Spinner::default());
        let s = spinner.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .on_thread_unpark(move || s.unparked())
            .enable_all()
            .build()
            .unwrap();
        // The default spin: at most 1 ms of polling per park that ends.
        runtime.spawn(spinner.clone().run(Duration::from_micros(20)));
        runtime.block_on(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let rested = spinner.polls();
            assert!(rested > 0, "the spinner never polled");
            // Idle: the spinner waits, but for the few parks the timer wheel ends on its way
            // to the deadline; a busy loop would poll about ten thousand times (debug build).
            tokio::time::sleep(Duration::from_millis(100)).await;
            let after_idle = spinner.polls();
            assert!(
                after_idle - rested < 2_000,
                "the spinner kept polling while idle: {} polls in 100 ms",
                after_idle - rested
            );
            // The timer's park ended: the spinner polls again after it.
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(
                spinner.polls() > after_idle,
                "the spinner did not resume after a park"
            );
        });
    }

    #[test]
    fn runtimes_build_with_and_without_spin() {
        for (workers, spin) in [
            (Some(1), Duration::ZERO),
            (Some(1), Duration::from_micros(20)),
            (Some(2), Duration::from_micros(20)),
            (Some(2), Duration::ZERO),
        ] {
            let rt = build(workers, spin).unwrap();
            assert_eq!(
                rt.block_on(async { tokio::spawn(async { 7 }).await.unwrap() }),
                7
            );
        }
    }
}
