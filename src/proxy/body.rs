//! The one body type the proxy passes around, and [`Tee`], which copies a small request body
//! for mirrors while it streams to the backend. (Response bodies carry their in-flight guard
//! and pooled connection in `upstream::UpstreamBody`.)

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use tokio::sync::oneshot;

use super::error::BoxError;

/// Request and response bodies, streamed (never buffered) through the proxy.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

pub fn full(b: Bytes) -> ProxyBody {
    Full::new(b).map_err(|never| match never {}).boxed_unsync()
}

pub fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

pub fn boxed<B>(b: B) -> ProxyBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    b.map_err(Into::into).boxed_unsync()
}

/// Passes a body through unchanged and, once it has ended, sends a copy of it on `tx`.
/// Used only for bodies with a small Content-Length, so the copy is bounded; a body that turns
/// out longer than `limit`, or fails, sends nothing.
pub struct Tee {
    inner: ProxyBody,
    buf: BytesMut,
    limit: usize,
    tx: Option<oneshot::Sender<Bytes>>,
}

impl Tee {
    pub fn new(inner: ProxyBody, limit: usize, tx: oneshot::Sender<Bytes>) -> Self {
        Self {
            inner,
            buf: BytesMut::new(),
            limit,
            tx: Some(tx),
        }
    }

    fn finish(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(std::mem::take(&mut self.buf).freeze());
        }
    }
}

impl Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let (Some(data), Some(_)) = (frame.data_ref(), &this.tx) {
                    if this.buf.len() + data.len() > this.limit {
                        this.tx = None;
                        this.buf = BytesMut::new();
                    } else {
                        this.buf.extend_from_slice(data);
                    }
                }
                if this.inner.is_end_stream() {
                    this.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => {
                this.tx = None;
                Poll::Ready(Some(Err(e)))
            }
            None => {
                this.finish();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use http_body_util::StreamBody;

    fn chunks(parts: &[&'static str]) -> ProxyBody {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        StreamBody::new(futures::stream::iter(frames)).boxed_unsync()
    }

    #[test]
    fn tee_forwards_the_body_and_sends_a_copy() {
        let (tx, rx) = oneshot::channel();
        let tee = Tee::new(chunks(&["ab", "cd"]), 16, tx);
        let out = block_on(tee.collect()).unwrap().to_bytes();
        assert_eq!(&out[..], b"abcd");
        assert_eq!(&block_on(rx).unwrap()[..], b"abcd");
    }

    #[test]
    fn tee_over_the_limit_sends_nothing_but_still_forwards() {
        let (tx, rx) = oneshot::channel();
        let tee = Tee::new(chunks(&["abc", "def"]), 4, tx);
        let out = block_on(tee.collect()).unwrap().to_bytes();
        assert_eq!(&out[..], b"abcdef");
        assert!(block_on(rx).is_err());
    }
}
