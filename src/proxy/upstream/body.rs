//! The response body from a backend. It returns its HTTP/1.1 connection to the pool once read
//! to the end (never earlier: a connection whose response was not fully read is closed by
//! hyper and dropped here), and holds the request's in-flight guard until it is dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::InFlight;
use super::connect::H1Sender;
use super::pool::Entry;

pub struct UpstreamBody {
    inner: Incoming,
    /// The HTTP/1.1 connection this body arrives on, to pool once the body has ended.
    conn: Option<(Arc<Entry>, H1Sender)>,
    in_flight: Option<InFlight>,
}

impl UpstreamBody {
    pub(super) fn new(inner: Incoming, conn: Option<(Arc<Entry>, H1Sender)>) -> Self {
        let mut body = Self {
            inner,
            conn,
            in_flight: None,
        };
        // No body (204, 304, HEAD, `content-length: 0`): the exchange is already over.
        if body.inner.is_end_stream() {
            body.ended();
        }
        body
    }

    /// Keeps `guard` until the body is dropped (after hyper has sent all of it downstream).
    pub fn with_in_flight(mut self, guard: InFlight) -> Self {
        self.in_flight = Some(guard);
        self
    }

    fn ended(&mut self) {
        if let Some((entry, tx)) = self.conn.take() {
            entry.release(tx);
        }
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("pooled", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            // A body with a length ends with its last data frame: the reader may never poll
            // again, so check now.
            Some(Ok(_)) if this.inner.is_end_stream() => this.ended(),
            Some(Ok(_)) => {}
            None => this.ended(),
            Some(Err(_)) => this.conn = None,
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
