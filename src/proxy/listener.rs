//! Bound ports: the accept loop, with a cap on open connections per port (backpressure:
//! at the cap it stops accepting until a connection closes).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::Shared;
use super::conn;
use super::drain::Drain;
use crate::model::PortKey;

/// Accepts connections on `listener` until the drain starts, then drops the socket.
pub fn spawn_accept(
    shared: Arc<Shared>,
    listener: TcpListener,
    key: PortKey,
    tls: Arc<conn::PortTls>,
    drain: &Drain,
) -> JoinHandle<()> {
    let port = key.port;
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
                        conn::serve(shared.clone(), tcp, peer, key, tls.clone(), token.clone());
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
