//! HTTP/2 streams run by their connection's task instead of a task each.
//!
//! hyper's HTTP/2 server hands every request stream to an executor. With tokio's, each request
//! became a task: allocated, scheduled, run, and its response woke the connection's task to be
//! sent (one more scheduling). [`StreamExec`] keeps the stream with the connection that is
//! being polled (hyper calls the executor only from inside the connection's `poll`), and
//! [`Streams::drive`] polls the connection and its streams together, so a response is written in the
//! same turn as it is produced. Outside such a poll (no connection driven here), a stream
//! falls back to a task.
//!
//! ```text
//! drive(conn, streams) ─ poll ─> conn ─ new stream ─> StreamExec::execute ─> WAITING (thread-local)
//!                      └ poll ─> streams <─ moved from WAITING after the connection's poll
//! ```
//!
//! The streams of one connection share its task: on a runtime of several threads they run on
//! the thread that polls the connection (a connection is already served by one thread at a
//! time). `drive` ends once the connection has ended and its streams are done; streams still
//! running when the caller stops driving (the drain deadline, an idle connection cut) are
//! dropped with the connection. A panic in a stream ends its connection's task, not only the
//! stream.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FuturesUnordered, StreamExt};

type Stream = Pin<Box<dyn Future<Output = ()> + Send>>;

thread_local! {
    /// Streams handed to [`StreamExec`] during the current connection's poll; `None` outside
    /// [`Streams::drive`].
    static WAITING: RefCell<Option<Vec<Stream>>> = const { RefCell::new(None) };
}

/// The executor of pier's HTTP server builder.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamExec;

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let fut = WAITING.with(|w| match w.borrow_mut().as_mut() {
            Some(waiting) => {
                waiting.push(Box::pin(fut));
                None
            }
            None => Some(fut),
        });
        if let Some(fut) = fut {
            tokio::spawn(fut);
        }
    }
}

/// The streams of one connection, polled by [`Streams::drive`]; `O` is the connection's
/// output, kept while its last streams finish.
pub struct Streams<O> {
    running: FuturesUnordered<Stream>,
    /// Lent to [`WAITING`] during the connection's poll (kept to reuse its allocation).
    waiting: Vec<Stream>,
    ended: Option<O>,
}

impl<O> Default for Streams<O> {
    fn default() -> Self {
        Self {
            running: FuturesUnordered::new(),
            waiting: Vec::new(),
            ended: None,
        }
    }
}

impl<O> Streams<O> {
    /// Polls `conn` with the streams it started (and starts): ready with the connection's
    /// output once the connection has ended and its streams are done. May be called again
    /// after a caller dropped it: an ended connection is not polled again.
    pub fn drive<'a, C>(&'a mut self, mut conn: Pin<&'a mut C>) -> impl Future<Output = O> + 'a
    where
        C: Future<Output = O>,
    {
        std::future::poll_fn(move |cx| {
            self.poll_conn(conn.as_mut(), cx);
            // A stream that finished has queued its last frames: the connection writes them
            // in this turn when polled again.
            if self.poll_streams(cx) {
                self.poll_conn(conn.as_mut(), cx);
                self.poll_streams(cx);
            }
            match self.ended.take() {
                Some(out) if self.running.is_empty() => Poll::Ready(out),
                ended => {
                    self.ended = ended;
                    Poll::Pending
                }
            }
        })
    }

    fn poll_conn<C: Future<Output = O>>(&mut self, conn: Pin<&mut C>, cx: &mut Context<'_>) {
        if self.ended.is_some() {
            return;
        }
        WAITING.with(|w| *w.borrow_mut() = Some(std::mem::take(&mut self.waiting)));
        let out = conn.poll(cx);
        let mut waiting = WAITING.with(|w| w.borrow_mut().take()).unwrap_or_default();
        self.running.extend(waiting.drain(..));
        self.waiting = waiting;
        if let Poll::Ready(out) = out {
            self.ended = Some(out);
        }
    }

    /// Polls the running streams; true when any finished.
    ///
    /// Outside tokio's cooperative budget: the budget (128 operations a task's poll) is the
    /// connection's, and a stream costs several (its upstream write, readiness, read, timer),
    /// so with ~40 of a busy connection's streams polled the rest were refused at their
    /// sockets and waited for the connection's next turn, after every other connection's: a
    /// tail of requests one scheduler round late (p99 1.6x the median at 32 x 100 streams).
    /// Each stream still does one step a poll and `FuturesUnordered` polls each at most once
    /// before it yields, so the work here is bounded by the stream limit; the connection's own
    /// reads stay within the budget (a client that never stops sending still yields).
    fn poll_streams(&mut self, cx: &mut Context<'_>) -> bool {
        let running = &mut self.running;
        let unbudgeted = tokio::task::unconstrained(std::future::poll_fn(|cx| {
            let mut finished = false;
            while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {
                finished = true;
            }
            Poll::Ready(finished)
        }));
        // The inner future is always ready: it reports what the streams did.
        std::pin::pin!(unbudgeted).poll(cx) == Poll::Ready(true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hyper::rt::Executor;

    use super::*;

    /// A connection that starts `n` streams on its first poll and ends on its second; it
    /// panics if polled after it ended.
    struct FakeConn {
        polls: usize,
        start: Vec<Stream>,
    }

    impl Future for FakeConn {
        type Output = &'static str;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
            self.polls += 1;
            match self.polls {
                1 => {
                    for s in self.start.drain(..) {
                        StreamExec.execute(s);
                    }
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                2 => Poll::Ready("ended"),
                _ => panic!("polled after it ended"),
            }
        }
    }

    #[test]
    fn streams_run_in_the_connections_task_and_end_before_it() {
        let done = Arc::new(AtomicUsize::new(0));
        let start = (0..3)
            .map(|_| {
                let done = done.clone();
                Box::pin(async move {
                    // Pending once: the stream outlives the connection's last poll.
                    let mut once = false;
                    std::future::poll_fn(|cx| {
                        if std::mem::replace(&mut once, true) {
                            return Poll::Ready(());
                        }
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    })
                    .await;
                    done.fetch_add(1, Ordering::SeqCst);
                }) as Stream
            })
            .collect();
        let mut conn = std::pin::pin!(FakeConn { polls: 0, start });
        let mut streams = Streams::default();
        // No tokio runtime here: a stream spawned as a task would panic.
        let out = futures::executor::block_on(streams.drive(conn.as_mut()));
        assert_eq!(out, "ended");
        assert_eq!(done.load(Ordering::SeqCst), 3);
        assert_eq!(conn.polls, 2);
    }

    #[test]
    fn an_ended_connection_is_not_polled_again_when_driven_anew() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let start = vec![Box::pin(async move {
            let _ = rx.await;
        }) as Stream];
        let mut conn = std::pin::pin!(FakeConn { polls: 0, start });
        let mut streams = Streams::default();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        {
            let mut first = std::pin::pin!(streams.drive(conn.as_mut()));
            assert!(first.as_mut().poll(&mut cx).is_pending());
            assert!(
                first.as_mut().poll(&mut cx).is_pending(),
                "a stream still runs"
            );
        }
        tx.send(()).unwrap();
        let out = futures::executor::block_on(streams.drive(conn.as_mut()));
        assert_eq!(out, "ended");
        assert_eq!(conn.polls, 2);
    }

    /// Within a task's poll (tokio's budget of 128 operations), every ready stream of a
    /// connection runs: none is refused for the connection's budget and left for its next
    /// turn (behind every other connection's task).
    #[tokio::test(flavor = "current_thread")]
    async fn a_connections_streams_are_not_cut_short_by_its_task_budget() {
        const STREAMS: usize = 200;
        let done = Arc::new(AtomicUsize::new(0));
        let start = (0..STREAMS)
            .map(|_| {
                let done = done.clone();
                Box::pin(async move {
                    // A stream's operations on its sockets and timers, as budgeted.
                    for _ in 0..3 {
                        tokio::task::consume_budget().await;
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }) as Stream
            })
            .collect();
        let finished = tokio::spawn(async move {
            let mut conn = std::pin::pin!(FakeConn { polls: 0, start });
            let mut streams = Streams::default();
            let mut drive = std::pin::pin!(streams.drive(conn.as_mut()));
            // One poll of the connection's task.
            std::future::poll_fn(|cx| {
                let _ = drive.as_mut().poll(cx);
                Poll::Ready(())
            })
            .await;
            done.load(Ordering::SeqCst)
        })
        .await
        .unwrap();
        assert_eq!(finished, STREAMS);
    }

    #[tokio::test]
    async fn outside_a_connections_poll_a_stream_is_a_task() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        StreamExec.execute(async move {
            tx.send(()).unwrap();
        });
        rx.await.unwrap();
    }
}
