//! Waiting for bytes without holding a read buffer.
//!
//! Between requests the fast path gives back its read and upstream buffers (16 KiB, to a
//! per-thread stock: [`super::stock`]) and waits for the client's next bytes here, then takes
//! a read buffer again; nginx frees its buffers on an idle keep-alive connection the same
//! way. With 9 000 idle clients that took pier from 22 to 14 KiB per connection
//! (BENCHMARKS.md). A request waiting for its upstream's response takes the upstream buffer
//! only when the response starts to arrive, the same way.

use std::future::Future;
use std::io;

use rustls::{ConnectionCommon, SideData};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::proxy::upstream::Stream;

/// A client stream that can say when a read would find something.
pub trait ReadReady {
    /// Resolves when a read would find data, the end of the stream or an error. A spurious
    /// wake is harmless: the read then waits, holding its buffer.
    fn read_ready(&mut self) -> impl Future<Output = io::Result<()>> + Send;
}

// `poll_read_ready`, not `readable()`: it uses the socket's one reader waker, as a read
// does, where `readable()` queues a waiter under the readiness lock (about 490 instructions
// per request more, callgrind). One task reads each connection, so one waker is enough.
impl ReadReady for TcpStream {
    fn read_ready(&mut self) -> impl Future<Output = io::Result<()>> + Send {
        std::future::poll_fn(|cx| self.poll_read_ready(cx))
    }
}

impl ReadReady for TlsStream<TcpStream> {
    async fn read_ready(&mut self) -> io::Result<()> {
        let (tcp, tls) = self.get_mut();
        if has_plaintext(tls) {
            return Ok(());
        }
        tcp.read_ready().await
    }
}

/// An upstream connection, plain or TLS.
impl ReadReady for Stream {
    async fn read_ready(&mut self) -> io::Result<()> {
        let tcp = match self {
            Stream::Left(tcp) => tcp,
            Stream::Right(tls) => {
                let (tcp, tls) = tls.get_mut();
                if has_plaintext(tls) {
                    return Ok(());
                }
                tcp
            }
        };
        tcp.read_ready().await
    }
}

/// rustls may hold plaintext it decrypted already (a pipelined message, or a close
/// notification, or an error to report): a read finds that now. Otherwise any complete
/// record was processed when it was read, so the next plaintext needs bytes from the socket.
fn has_plaintext<D: SideData>(tls: &mut ConnectionCommon<D>) -> bool {
    !matches!(
        tls.process_new_packets(),
        Ok(state) if state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed()
    )
}
