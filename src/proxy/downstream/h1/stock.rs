//! A per-thread stock of read buffers of [`BUF`] bytes.
//!
//! The fast path gives its buffers back between requests, so that an idle keep-alive
//! connection holds none ([`super::ready`]), and takes them again for the next request. Taken
//! from and given back to the allocator, two 8 KiB buffers per request cost about 2 700
//! instructions in jemalloc's slab and extent paths (callgrind, `scripts/callgrind-proxy.sh`:
//! 22 205 instructions per request against 16 112 with buffers kept per connection); from
//! this stock they cost a push and a pop. A worker keeps at most [`STOCK_MAX`] (512 KiB).

use std::cell::RefCell;

use bytes::BytesMut;

use super::BUF;

/// Buffers kept per worker thread: enough for the requests one worker has in flight at once
/// on most hosts; more are freed.
const STOCK_MAX: usize = 64;

thread_local! {
    static STOCK: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer of at least [`BUF`] bytes.
pub fn take() -> BytesMut {
    STOCK
        .with_borrow_mut(Vec::pop)
        .unwrap_or_else(|| BytesMut::with_capacity(BUF))
}

/// Gives `buf` back: kept if it is the usual size and nothing else shares its memory (a frozen
/// part handed on), freed otherwise.
#[inline]
pub fn give(mut buf: BytesMut) {
    buf.clear();
    // `try_reclaim` succeeds only on memory this handle owns alone, and moves the window back
    // to the front of it (a consumed message moved it forward, hiding capacity).
    if !buf.try_reclaim(BUF) || buf.capacity() > 2 * BUF {
        return;
    }
    STOCK.with_borrow_mut(|stock| {
        if stock.len() < STOCK_MAX {
            stock.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;

    #[test]
    fn a_given_buffer_is_taken_again_and_a_shared_one_is_not_kept() {
        let mut a = take();
        a.extend_from_slice(b"hello");
        let at = a.as_ptr();
        give(a);
        let again = take();
        assert_eq!(
            (again.as_ptr(), again.len()),
            (at, 0),
            "the same memory, emptied"
        );
        // Part of it frozen and handed on: not kept, the new take is fresh memory.
        let mut shared = again;
        shared.extend_from_slice(b"head body");
        let head = shared.split_to(4).freeze();
        give(shared);
        let fresh = take();
        assert_ne!(fresh.as_ptr(), at);
        assert_eq!(&head[..], b"head");
        // A buffer whose window a consumed message moved forward is kept, from its front.
        let mut consumed = take();
        let front = consumed.as_ptr();
        consumed.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        consumed.advance(consumed.len());
        give(consumed);
        assert_eq!(take().as_ptr(), front);
        // An oversized buffer is freed rather than kept.
        give(BytesMut::with_capacity(4 * BUF));
        assert!(take().capacity() <= 2 * BUF);
    }
}
