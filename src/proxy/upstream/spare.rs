//! The per-thread stock ([`crate::proxy::stock`]) of the buffers that raw HTTP/1.1 responses
//! ([`super::h1`]) are read into.
//!
//! A response's head and body leave its buffer as slices of it (no copy), so the buffer is
//! free again only once the HTTP/2 or HTTP/3 driver has written them to the client, after the
//! body that held it has ended: it waits in the stock until then. Without it, every request on
//! a busy HTTP/2 listener took a new 4 KiB buffer from jemalloc, in bursts of a connection's
//! streams, for ~2 150 instructions each (BENCHMARKS.md, issue 41 §3).

use bytes::BytesMut;

use crate::proxy::stock::{self, Stock};

/// The size of the buffers: room for a response head and a short body.
pub const SIZE: usize = 4 * 1024;
/// Buffers kept per thread, free and waiting each (4 MiB free at most): a worker's requests
/// in flight are thousands on a busy HTTP/2 listener, and a burst of a connection's streams
/// gives back a hundred before the client has their bytes.
const KEPT: usize = 1024;

thread_local! {
    static SPARE: Stock = const { Stock::new(SIZE, KEPT) };
}

/// An empty buffer with room for at least [`SIZE`] bytes.
#[inline]
pub fn take() -> BytesMut {
    stock::take_from(&SPARE)
}

/// Gives `buf` back for a later [`take`].
#[inline]
pub fn give(buf: BytesMut) {
    stock::give_to(&SPARE, buf);
}
