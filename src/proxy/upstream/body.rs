//! The response body from a backend: hyper's, or a raw connection's ([`RawBody`]). Either
//! returns its HTTP/1.1 connection to the pool once read to the end (never earlier: a
//! connection whose response was not fully read is closed and dropped here), and holds the
//! request's in-flight guard until it is dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::InFlight;
use super::connect::H1Sender;
use super::h1::RawBody;
use super::pool::Entry;
use crate::proxy::body::BoxError;

pub struct UpstreamBody {
    inner: Inner,
    in_flight: Option<InFlight>,
}

enum Inner {
    Hyper {
        body: Incoming,
        /// The HTTP/1.1 connection this body arrives on, to pool once the body has ended.
        conn: Option<(Arc<Entry>, H1Sender)>,
    },
    Raw(RawBody),
}

impl UpstreamBody {
    pub(super) fn new(body: Incoming, conn: Option<(Arc<Entry>, H1Sender)>) -> Self {
        let mut inner = Inner::Hyper { body, conn };
        // No body (204, 304, HEAD, `content-length: 0`): the exchange is already over.
        if inner.is_end_stream() {
            inner.ended();
        }
        Self {
            inner,
            in_flight: None,
        }
    }

    pub(super) fn raw(body: RawBody) -> Self {
        Self {
            inner: Inner::Raw(body),
            in_flight: None,
        }
    }

    /// Keeps `guard` until the body is dropped (after hyper has sent all of it downstream).
    pub fn with_in_flight(mut self, guard: InFlight) -> Self {
        self.in_flight = Some(guard);
        self
    }
}

impl Inner {
    fn is_end_stream(&self) -> bool {
        match self {
            Inner::Hyper { body, .. } => body.is_end_stream(),
            Inner::Raw(body) => body.is_end_stream(),
        }
    }

    fn ended(&mut self) {
        if let Inner::Hyper { conn, .. } = self
            && let Some((entry, tx)) = conn.take()
        {
            entry.release(tx);
        }
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Inner::Hyper { conn, .. } => f
                .debug_struct("UpstreamBody")
                .field("pooled", &conn.is_some())
                .finish_non_exhaustive(),
            Inner::Raw(body) => body.fmt(f),
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let (body, conn) = match &mut self.inner {
            Inner::Raw(body) => return Pin::new(body).poll_frame(cx),
            Inner::Hyper { body, conn } => (body, conn),
        };
        let frame = ready!(Pin::new(&mut *body).poll_frame(cx));
        match &frame {
            // A body with a length ends with its last data frame: the reader may never poll
            // again, so check now.
            Some(Ok(_)) if body.is_end_stream() => self.inner.ended(),
            Some(Ok(_)) => {}
            None => self.inner.ended(),
            Some(Err(_)) => *conn = None,
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Hyper { body, .. } => body.size_hint(),
            Inner::Raw(body) => body.size_hint(),
        }
    }
}
