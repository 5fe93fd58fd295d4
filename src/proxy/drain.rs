//! [`Drain`], the three-state signal that stops accepting, asks connections to finish
//! gracefully, and finally closes what is left.
//!
//! ```text
//! Serving ──start()──> Draining ──(grace elapsed)──> Closed
//!   accept loop stops      connections finish their     connections and upgrade
//!   and drops the socket   in-flight requests and       tunnels are dropped
//!                          close; tunnels keep going
//! ```
//!
//! Every task that must finish before a drain is complete (accept loop, connection, upgrade
//! tunnel) holds a [`DrainToken`]; the drain is complete when the last token is dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Serving,
    Draining,
    Closed,
}

#[derive(Debug)]
pub struct Drain {
    tx: watch::Sender<State>,
}

#[derive(Clone, Debug)]
pub struct DrainToken {
    rx: watch::Receiver<State>,
}

// === impl Drain ===

impl Drain {
    pub fn new() -> Self {
        let (tx, _) = watch::channel(State::Serving);
        Self { tx }
    }

    pub fn token(&self) -> DrainToken {
        DrainToken {
            rx: self.tx.subscribe(),
        }
    }

    /// Stop accepting and ask connections to close once their requests are done.
    pub fn start(&self) {
        self.tx.send_if_modified(|s| {
            let serving = *s == State::Serving;
            if serving {
                *s = State::Draining;
            }
            serving
        });
    }

    /// Starts draining, waits up to `grace` for every token holder to finish, then closes the
    /// rest and waits for them to let go (which they do at once).
    pub async fn drain(&self, grace: Duration) {
        self.start();
        if tokio::time::timeout(grace, self.tx.closed()).await.is_err() {
            self.tx.send_replace(State::Closed);
            self.tx.closed().await;
        }
    }

    pub fn is_finished(&self) -> bool {
        self.tx.is_closed()
    }
}

impl Default for Drain {
    fn default() -> Self {
        Self::new()
    }
}

// === impl DrainToken ===

impl DrainToken {
    /// Draining has started (or the proxy is gone), as [`Self::draining`] would resolve now.
    pub fn is_draining(&self) -> bool {
        *self.rx.borrow() != State::Serving || self.rx.has_changed().is_err()
    }

    /// Resolves once draining has started (or the proxy is gone).
    pub async fn draining(&mut self) {
        let _ = self.rx.wait_for(|s| *s != State::Serving).await;
    }

    /// Resolves once the grace period is over (or the proxy is gone).
    pub async fn closed(&mut self) {
        let _ = self.rx.wait_for(|s| *s == State::Closed).await;
    }
}

/// A future polled only when it woke its task itself (and on its first poll), not on every
/// other wake-up of the task. For a drain signal in a `select!` next to a busy connection:
/// the connection's task wakes a few times per request, and every poll of the watch behind
/// [`DrainToken::draining`] takes its lock and re-registers with its `Notify` (about 200
/// instructions); checking a flag costs a few.
pub struct OnlyWhenWoken<'a, F> {
    inner: Pin<&'a mut F>,
    signal: Arc<Signal>,
    waker: Waker,
}

struct Signal {
    /// Set by the inner future's waker; starts set, so that the first poll reaches it.
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<'a, F: Future> OnlyWhenWoken<'a, F> {
    pub fn new(inner: Pin<&'a mut F>) -> Self {
        let signal = Arc::new(Signal {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Self {
            inner,
            waker: Waker::from(signal.clone()),
            signal,
        }
    }
}

impl<F: Future> Future for OnlyWhenWoken<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // The task's waker first, then the flag: a wake-up in between is not lost.
        this.signal.task.register(cx.waker());
        if !this.signal.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its polls; ready once `ready` is set, waking through the waker it was given.
    struct Probe {
        polls: usize,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls += 1;
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn only_when_woken_polls_its_future_on_its_own_wake_ups_alone() {
        let ready = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut probe = Probe {
            polls: 0,
            ready: ready.clone(),
            waker: inner_waker.clone(),
        };
        let mut quiet = OnlyWhenWoken::new(Pin::new(&mut probe));
        let task = Arc::new(Counter::default());
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);
        // The first poll reaches the future; other wake-ups of the task do not.
        assert!(Pin::new(&mut quiet).poll(&mut cx).is_pending());
        for _ in 0..5 {
            assert!(Pin::new(&mut quiet).poll(&mut cx).is_pending());
        }
        // The future's own wake-up wakes the task and gets it polled once more.
        ready.store(true, Ordering::SeqCst);
        let woken = inner_waker
            .lock()
            .unwrap()
            .take()
            .expect("registered a waker");
        woken.wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "the task was woken");
        assert!(Pin::new(&mut quiet).poll(&mut cx).is_ready());
        drop(quiet);
        assert_eq!(
            probe.polls, 2,
            "polled on the first poll and on its own wake-up only"
        );
    }

    #[derive(Default)]
    struct Counter(std::sync::atomic::AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_drain_signal_still_fires() {
        let drain = Drain::new();
        let mut token = drain.token();
        let task = tokio::spawn(async move {
            let draining = token.draining();
            let draining = std::pin::pin!(draining);
            OnlyWhenWoken::new(draining).await;
        });
        tokio::task::yield_now().await;
        drain.drain(Duration::from_secs(30)).await;
        assert!(drain.is_finished());
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn drain_completes_when_tokens_are_dropped() {
        let drain = Drain::new();
        let mut token = drain.token();
        let task = tokio::spawn(async move {
            token.draining().await;
        });
        drain.drain(Duration::from_secs(30)).await;
        assert!(drain.is_finished());
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn drain_closes_holders_after_the_grace_period() {
        let drain = Drain::new();
        let mut token = drain.token();
        let task = tokio::spawn(async move {
            // A holder that ignores draining and only reacts to closing (like a tunnel).
            token.closed().await;
        });
        let started = tokio::time::Instant::now();
        drain.drain(Duration::from_secs(5)).await;
        assert!(started.elapsed() >= Duration::from_secs(5));
        task.await.unwrap();
    }
}
