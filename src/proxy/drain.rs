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

use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

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
