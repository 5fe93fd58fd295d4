//! HTTP/1.1 Upgrade passthrough (WebSocket and any other protocol): once the backend answers
//! 101, both connections are upgraded and bytes are copied both ways until either side
//! closes, or until a drain's grace period ends.

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::proxy::drain::DrainToken;

pub fn spawn(downstream: OnUpgrade, upstream: OnUpgrade, mut drain: DrainToken) {
    tokio::spawn(async move {
        // The downstream side completes once hyper has written our 101 to the client.
        let (down, up) = match tokio::try_join!(downstream, upstream) {
            Ok(pair) => pair,
            Err(error) => {
                tracing::debug!(%error, "upgrade failed");
                return;
            }
        };
        let mut down = TokioIo::new(down);
        let mut up = TokioIo::new(up);
        tokio::select! {
            r = tokio::io::copy_bidirectional(&mut down, &mut up) => {
                if let Err(error) = r {
                    tracing::debug!(%error, "upgraded connection ended with an error");
                }
            }
            // Tunnels outlive graceful draining (they have no requests to finish) but not the
            // grace period.
            _ = drain.closed() => {}
        }
    });
}
