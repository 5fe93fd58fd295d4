//! The fast path's per-thread stock of read buffers of [`BUF`] bytes ([`crate::proxy::stock`]).
//!
//! The fast path gives its buffers back between requests, so that an idle keep-alive
//! connection holds none ([`super::ready`]), and takes them again for the next request. Taken
//! from and given back to the allocator, two 8 KiB buffers per request cost about 2 700
//! instructions in jemalloc's slab and extent paths (callgrind, `scripts/callgrind-proxy.sh`:
//! 22 205 instructions per request against 16 112 with buffers kept per connection); from
//! this stock they cost a push and a pop. A worker keeps at most [`STOCK_MAX`] (512 KiB).

use bytes::BytesMut;

use super::BUF;
use crate::proxy::stock::{self, Stock};

/// Buffers kept per worker thread: enough for the requests one worker has in flight at once
/// on most hosts; more are freed.
const STOCK_MAX: usize = 64;

thread_local! {
    static STOCK: Stock = const { Stock::new(BUF, STOCK_MAX) };
}

/// An empty buffer of at least [`BUF`] bytes.
#[inline]
pub fn take() -> BytesMut {
    stock::take_from(&STOCK)
}

/// Gives `buf` back for a later [`take`] (freed if it grew past twice [`BUF`]).
#[inline]
pub fn give(buf: BytesMut) {
    stock::give_to(&STOCK, buf);
}
