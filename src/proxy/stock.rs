//! Per-thread stocks of read buffers, taken for a message and given back after it instead of
//! freed: from jemalloc, buffers of a few KiB taken and freed in bursts (a connection's
//! requests, an HTTP/2 connection's streams) cost thousands of instructions each in its slab
//! and extent paths (BENCHMARKS.md, history: "the fast path's buffers", issue 41 §3); from a
//! stock, a pop and a push. HAProxy keeps its buffers in pools for the same reason.
//!
//! A buffer given back while slices of it are still out (a response head and body handed on
//! without a copy) waits in a queue of its own until nothing refers to its memory
//! (`BytesMut::try_reclaim`, which never allocates); the oldest waiting ones are tried when no
//! free one is left. Bounded: at most `max` free and `max` waiting per thread, each at most
//! twice the stock's size (a buffer that grew for a long message is freed).
//!
//! The users each have their own stock, a `thread_local!` of [`Stock::new`] used through
//! [`take_from`] and [`give_to`]: the HTTP/1.1 fast path's buffers (`downstream::h1::stock`)
//! and the raw upstream responses of hyper's path (`upstream::spare`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::thread::LocalKey;

use bytes::BytesMut;

/// A buffer from the thread's stock `key` ([`Stock::take`]).
#[inline]
pub fn take_from(key: &'static LocalKey<Stock>) -> BytesMut {
    key.with(Stock::take)
}

/// Gives `buf` back to the thread's stock `key` ([`Stock::give`]). An empty handle (a
/// connection between requests) has nothing to keep: the thread-local is not touched.
#[inline]
pub fn give_to(key: &'static LocalKey<Stock>, buf: BytesMut) {
    if buf.capacity() != 0 {
        key.with(|stock| stock.give(buf));
    }
}

/// Waiting buffers tried, oldest first, before a new one is made.
const TRIES: usize = 8;

/// One thread's buffers of one size.
pub struct Stock {
    size: usize,
    max: usize,
    /// Whole again: the latest given is taken first (its memory is the warmest).
    free: RefCell<Vec<BytesMut>>,
    /// Given back with slices of them still out, oldest first.
    waiting: RefCell<VecDeque<BytesMut>>,
}

impl Stock {
    /// A stock of buffers of `size` bytes, keeping at most `max` free and `max` waiting.
    pub const fn new(size: usize, max: usize) -> Self {
        Self {
            size,
            max,
            free: RefCell::new(Vec::new()),
            waiting: RefCell::new(VecDeque::new()),
        }
    }

    /// An empty buffer with room for at least `size` bytes: a free one, else a waiting one
    /// whose memory is free again, else a new one.
    #[inline]
    pub fn take(&self) -> BytesMut {
        if let Some(buf) = self.free.borrow_mut().pop() {
            return buf;
        }
        self.reclaim_or_new()
    }

    /// [`Stock::take`] when nothing is free: kept out of line, the pop above is the usual case.
    #[cold]
    #[inline(never)]
    fn reclaim_or_new(&self) -> BytesMut {
        let mut waiting = self.waiting.borrow_mut();
        for _ in 0..TRIES.min(waiting.len()) {
            let Some(mut buf) = waiting.pop_front() else {
                break;
            };
            if buf.try_reclaim(self.size) {
                if buf.capacity() <= 2 * self.size {
                    return buf;
                }
                // Grew for a long message: freed.
                continue;
            }
            waiting.push_back(buf);
        }
        BytesMut::with_capacity(self.size)
    }

    /// Gives `buf` back: its bytes are dropped, its memory kept for a later [`Stock::take`]
    /// (free at once, or once the slices of it still out are gone) while the stock has room.
    #[inline]
    pub fn give(&self, mut buf: BytesMut) {
        if buf.capacity() == 0 {
            return;
        }
        buf.clear();
        // `try_reclaim` succeeds on memory this handle owns alone, and moves the window back
        // to the front of it (a consumed message moved it forward, hiding capacity).
        if buf.try_reclaim(self.size) {
            let mut free = self.free.borrow_mut();
            if buf.capacity() <= 2 * self.size && free.len() < self.max {
                free.push(buf);
            }
            return;
        }
        let mut waiting = self.waiting.borrow_mut();
        if waiting.len() < self.max {
            waiting.push_back(buf);
        }
    }

    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        (self.free.borrow().len(), self.waiting.borrow().len())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;

    const SIZE: usize = 4096;

    #[test]
    fn a_given_buffer_is_taken_again_from_its_front() {
        let stock = Stock::new(SIZE, 4);
        let mut a = stock.take();
        a.extend_from_slice(b"hello");
        let at = a.as_ptr();
        stock.give(a);
        let again = stock.take();
        assert_eq!(
            (again.as_ptr(), again.len()),
            (at, 0),
            "the same memory, emptied"
        );
        // A buffer whose window a consumed message moved forward is kept, from its front.
        let mut consumed = again;
        consumed.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        consumed.advance(consumed.len());
        stock.give(consumed);
        assert_eq!(stock.take().as_ptr(), at);
    }

    #[test]
    fn a_buffer_with_slices_out_comes_back_only_once_they_are_gone() {
        let stock = Stock::new(SIZE, 4);
        let mut buf = stock.take();
        let first = buf.as_ptr();
        buf.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\nhello");
        let head = buf.split_to(19).freeze();
        let body = buf.split().freeze();
        stock.give(buf);
        assert_eq!(stock.counts(), (0, 1));
        // The head and body still point into it: a new buffer, the old one still waiting.
        let other = stock.take();
        assert_ne!(other.as_ptr(), first);
        assert_eq!(stock.counts(), (0, 1));
        drop((head, body));
        // Now free: the same memory, whole again.
        let again = stock.take();
        assert_eq!(again.as_ptr(), first);
        assert!(again.is_empty() && again.capacity() >= SIZE);
        assert_eq!(stock.counts(), (0, 0));
        drop(other);
    }

    #[test]
    fn large_buffers_are_freed_and_the_stock_is_bounded() {
        let stock = Stock::new(SIZE, 4);
        stock.give(BytesMut::with_capacity(4 * SIZE));
        assert_eq!(stock.counts(), (0, 0));
        // A large one nearly filled, its bytes handed on: it waits, and is freed when tried.
        let mut big = BytesMut::with_capacity(4 * SIZE);
        big.extend_from_slice(&[b'x'; 4 * SIZE - 10]);
        let out = big.split().freeze();
        stock.give(big);
        assert_eq!(stock.counts(), (0, 1));
        drop(out);
        assert!(stock.take().capacity() <= 2 * SIZE);
        assert_eq!(stock.counts(), (0, 0));
        for _ in 0..10 {
            stock.give(BytesMut::with_capacity(SIZE));
        }
        assert_eq!(stock.counts(), (4, 0));
        // An empty handle (no memory) is not kept.
        let empty = Stock::new(SIZE, 4);
        empty.give(BytesMut::new());
        assert_eq!(empty.counts(), (0, 0));
    }
}
