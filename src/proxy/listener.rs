//! Bound ports: the accept loop, and [`Drain`], the three-state signal that stops accepting,
//! asks connections to finish gracefully, and finally closes what is left.
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

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::Shared;
use super::conn;

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
    /// Resolves once draining has started (or the proxy is gone).
    pub async fn draining(&mut self) {
        let _ = self.rx.wait_for(|s| *s != State::Serving).await;
    }

    /// Resolves once the grace period is over (or the proxy is gone).
    pub async fn closed(&mut self) {
        let _ = self.rx.wait_for(|s| *s == State::Closed).await;
    }
}

/// Accepts connections on `listener` until the drain starts, then drops the socket.
pub fn spawn_accept(
    shared: Arc<Shared>,
    listener: TcpListener,
    port: u16,
    tls: TlsAcceptor,
    drain: &Drain,
) -> JoinHandle<()> {
    let mut token = drain.token();
    // At the cap the loop stops accepting: new clients wait in the kernel's accept queue
    // (backpressure) instead of being accepted and starved, until a connection closes.
    let permits = Arc::new(Semaphore::new(shared.config.limits.max_connections.max(1)));
    tokio::spawn(async move {
        loop {
            let permit = match permits.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    tracing::warn!(
                        port,
                        limit = shared.config.limits.max_connections,
                        "connection limit reached; new connections wait to be accepted"
                    );
                    tokio::select! {
                        biased;
                        _ = token.draining() => break,
                        p = permits.clone().acquire_owned() => match p {
                            Ok(p) => p,
                            Err(_) => break,
                        },
                    }
                }
            };
            let accepted = tokio::select! {
                biased;
                _ = token.draining() => break,
                r = listener.accept() => r,
            };
            match accepted {
                Ok((tcp, peer)) => {
                    let conn =
                        conn::serve(shared.clone(), tcp, peer, port, tls.clone(), token.clone());
                    // Boxed: the connection's future is kilobytes, and the runtime moves a
                    // task's future by value several times between spawn and completion
                    // (callgrind: ~86 KB of memcpy per connection unboxed; BENCHMARKS.md).
                    tokio::spawn(Box::pin(async move {
                        conn.await;
                        drop(permit);
                    }));
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off briefly instead of
                    // spinning; the listener stays open.
                    tracing::warn!(port, %error, "accept failed");
                    tokio::select! {
                        _ = token.draining() => break,
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            }
        }
        tracing::debug!(port, "stopped accepting");
    })
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
