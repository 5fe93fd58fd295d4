//! The threads that verify passwords (bcrypt, SHA-crypt: slow by design), apart from the
//! request path's: one per core, started on first use, each at the lowest CPU priority
//! (`nice` 19, Linux's per-thread priority), so that when a flood of wrong passwords keeps
//! them busy the kernel still gives the proxy's own threads the CPU first. Jobs wait in one
//! queue; the caller bounds how many wait and for how long (`proxy::phase::verify_basic`).

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

/// The lowest priority a thread can ask for.
const NICE: i32 = 19;

fn queue() -> &'static Mutex<Sender<Job>> {
    static QUEUE: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads() {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("pier-hash-{i}"))
                .spawn(move || work(&rx));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start a password-hashing thread");
            }
        }
        Mutex::new(tx)
    })
}

/// One per core.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn work(rx: &Mutex<Receiver<Job>>) {
    // On Linux a thread ID names one thread for setpriority(2): only this one is lowered.
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICE) {
        tracing::debug!(error = %e, "password-hashing thread keeps its priority");
    }
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// Runs `f` on a hashing thread; its result, or `None` if the threads are gone.
pub async fn run<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    queue().lock().ok()?.send(job).ok()?;
    rx.await.ok()
}

/// The priority of the calling thread (for tests).
pub fn current_nice() -> Option<i32> {
    rustix::process::getpriority_process(Some(rustix::thread::gettid())).ok()
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn jobs_run_on_threads_of_the_lowest_priority() {
        let nice = super::run(super::current_nice).await.flatten();
        assert_eq!(nice, Some(super::NICE));
        // The caller's own thread is untouched.
        assert_ne!(super::current_nice(), Some(super::NICE));
    }
}
