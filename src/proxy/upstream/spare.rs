//! Read buffers that raw HTTP/1.1 responses ([`super::h1`]) come back through, kept per
//! worker thread for the next response instead of freed.
//!
//! A response's head and body leave its buffer as slices of it (no copy), so the buffer is
//! free again only once the HTTP/2 or HTTP/3 driver has written them to the client, after
//! the body that held it has ended. A buffer given back is therefore reused only if nothing
//! else refers to its memory any more (`BytesMut::try_reclaim`, which never allocates), else
//! it waits at the back of the queue. Without this, every request on a busy HTTP/2 listener
//! took a new 4 KiB buffer from jemalloc in bursts of a connection's streams, and about 4 %
//! of pier's instructions went to jemalloc filling and emptying slabs of that size class
//! (BENCHMARKS.md, issue 41 §3). HAProxy keeps its buffers in pools for the same reason.
//!
//! Bounded: at most [`KEPT`] buffers per thread, each at most [`LARGEST`] bytes.

use std::cell::RefCell;
use std::collections::VecDeque;

use bytes::BytesMut;

/// Buffers kept per thread (with 4 KiB ones, 1 MiB).
const KEPT: usize = 1024;
/// A buffer that grew larger than this (a long body read into it) is freed, not kept.
const LARGEST: usize = 16 * 1024;
/// Buffers at the front tried before a new one is made: the oldest are the likeliest free.
const TRIES: usize = 8;

thread_local! {
    static SPARE: RefCell<VecDeque<BytesMut>> = const { RefCell::new(VecDeque::new()) };
}

/// An empty buffer with room for `size` bytes: a kept one whose memory is free again, else
/// a new one.
pub fn take(size: usize) -> BytesMut {
    let reused = SPARE.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        for _ in 0..TRIES.min(spare.len()) {
            let mut buf = spare.pop_front()?;
            if buf.try_reclaim(size) {
                if buf.capacity() <= LARGEST {
                    return Some(buf);
                }
                // Grew past what is kept: freed here.
                continue;
            }
            spare.push_back(buf);
        }
        None
    });
    reused
        .ok()
        .flatten()
        .unwrap_or_else(|| BytesMut::with_capacity(size))
}

/// Gives `buf` back for a later [`take`]: its bytes are dropped, its memory kept (while the
/// thread keeps fewer than [`KEPT`]).
pub fn give(mut buf: BytesMut) {
    if buf.capacity() == 0 {
        return;
    }
    buf.clear();
    let _ = SPARE.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() < KEPT {
            spare.push_back(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> usize {
        SPARE.with(|s| s.borrow().len())
    }

    #[test]
    fn a_buffer_comes_back_only_once_nothing_else_holds_its_memory() {
        // Each test runs on a thread of its own: the thread's queue starts empty.
        let mut buf = take(4096);
        let first = buf.as_ptr();
        buf.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\nhello");
        let head = buf.split_to(19).freeze();
        let body = buf.split().freeze();
        give(buf);
        assert_eq!(kept(), 1);
        // The head and body still point into it: a new buffer, the old one still kept.
        let other = take(4096);
        assert_ne!(other.as_ptr(), first);
        assert_eq!(kept(), 1);
        drop((head, body));
        // Now free: the same memory, whole again.
        let again = take(4096);
        assert_eq!(again.as_ptr(), first);
        assert!(again.is_empty() && again.capacity() >= 4096);
        assert_eq!(kept(), 0);
        drop(other);
    }

    #[test]
    fn large_buffers_are_freed_and_the_queue_is_bounded() {
        let mut big = take(4096);
        big.reserve(64 * 1024);
        give(big);
        let small = take(4096);
        assert!(small.capacity() < 64 * 1024, "{}", small.capacity());
        assert_eq!(kept(), 0);
        for _ in 0..KEPT + 10 {
            give(BytesMut::with_capacity(4096));
        }
        assert_eq!(kept(), KEPT);
        // An empty handle (no memory) is not kept.
        SPARE.with(|s| s.borrow_mut().clear());
        give(BytesMut::new());
        assert_eq!(kept(), 0);
    }
}
