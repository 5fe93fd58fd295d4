//! The one body type the proxy passes around; [`Tee`], which copies a small request body for
//! mirrors while it streams to the backend; and [`ClientBody`], which bounds how slowly a
//! client may send a request body and says whose fault a failed body was. (Response bodies carry their in-flight guard
//! and pooled connection in `upstream::UpstreamBody`.)

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub mod compress;

/// How a client's request body failed ([`ClientBody`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyFault {
    /// Malformed framing (an invalid chunk), or the client connection broke mid-body.
    #[error("malformed or aborted")]
    Malformed,
    /// No bytes for the body idle timeout, or slower than the minimum rate.
    #[error("too slow")]
    TooSlow,
    /// Longer than the configured maximum (`--max-request-body`).
    #[error("too large")]
    TooLarge,
}

/// Request and response bodies, streamed (never buffered) through the proxy.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// A request body as a downstream driver hands it to hyper's request path
/// (`downstream::service`): hyper's own (HTTP/1.1, HTTP/2), or another driver's (HTTP/3).
/// One branch per frame; the request path is compiled once for both.
pub enum Inbound {
    Hyper(hyper::body::Incoming),
    Boxed(http_body_util::combinators::BoxBody<Bytes, BoxError>),
}

impl From<hyper::body::Incoming> for Inbound {
    fn from(body: hyper::body::Incoming) -> Self {
        Self::Hyper(body)
    }
}

impl Body for Inbound {
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            Self::Boxed(b) => Pin::new(b).poll_frame(cx),
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            Self::Hyper(b) => b.is_end_stream(),
            Self::Boxed(b) => b.is_end_stream(),
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Hyper(b) => b.size_hint(),
            Self::Boxed(b) => b.size_hint(),
        }
    }
}

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

/// How slowly a client may send a request body (`ProxyConfig::limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyPace {
    /// No body bytes for this long fails the body.
    pub idle: Duration,
    /// After `grace`, the body must have averaged at least this many bytes a second since it
    /// started (0: no minimum).
    pub min_rate: u32,
    pub grace: Duration,
}

/// What a [`ClientBody`] shares with its request handler: why it failed, so the handler
/// answers 400 or 408 instead of blaming the backend (the failure reaches the handler as an
/// upstream error), and how many bytes it has read from the client (the access log's
/// `bytes_in`; the same count bounds the body's size and pace).
#[derive(Debug, Default)]
pub struct FaultCell {
    fault: AtomicU8,
    read: AtomicU64,
}

impl FaultCell {
    fn set(&self, f: BodyFault) {
        let v = match f {
            BodyFault::Malformed => 1,
            BodyFault::TooSlow => 2,
            BodyFault::TooLarge => 3,
        };
        self.fault.store(v, Ordering::Relaxed);
    }

    /// Counts `n` more bytes read; the total so far.
    fn add_read(&self, n: u64) -> u64 {
        self.read.fetch_add(n, Ordering::Relaxed) + n
    }

    /// The body's bytes read from the client so far (data frames, as the client framed them
    /// away: no chunk sizes or HTTP/2 frame headers).
    pub fn read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    pub fn get(&self) -> Option<BodyFault> {
        match self.fault.load(Ordering::Relaxed) {
            1 => Some(BodyFault::Malformed),
            2 => Some(BodyFault::TooSlow),
            3 => Some(BodyFault::TooLarge),
            _ => None,
        }
    }
}

/// A client's request body on its way to the backend: a failed frame (a bad chunk, a broken
/// connection) is recorded as [`BodyFault::Malformed`], and with a [`BodyPace`] a client that
/// stalls, or trickles slower than the minimum rate, fails with [`BodyFault::TooSlow`] — so a
/// slow body cannot hold an upstream connection for as long as it likes.
pub struct ClientBody<B> {
    inner: B,
    fault: Arc<FaultCell>,
    pace: Option<Paced>,
    /// The most bytes the body may carry (`None`: no maximum).
    max_len: Option<u64>,
}

struct Paced {
    pace: BodyPace,
    started: Instant,
    timer: Pin<Box<Sleep>>,
    /// The body must have ended by then, however it paces (`ClientBody::until`).
    until: Option<Instant>,
}

/// The pace of a body bounded only by [`ClientBody::until`]: no idle or rate limit of its
/// own that the deadline would not come first.
const UNPACED: BodyPace = BodyPace {
    idle: Duration::from_secs(24 * 3600),
    min_rate: 0,
    grace: Duration::ZERO,
};

impl<B> ClientBody<B> {
    /// `max_len`: a body longer than this fails with [`BodyFault::TooLarge`].
    pub fn new(
        inner: B,
        fault: Arc<FaultCell>,
        pace: Option<BodyPace>,
        max_len: Option<u64>,
    ) -> Self {
        let pace = pace.map(|pace| {
            let started = Instant::now();
            let mut p = Paced {
                pace,
                started,
                timer: Box::pin(tokio::time::sleep_until(started)),
                until: None,
            };
            p.rearm(started, 0);
            p
        });
        Self {
            inner,
            fault,
            pace,
            max_len,
        }
    }
}

impl<B> ClientBody<B> {
    /// The body must have ended by `until` (a ClientTrafficPolicy's `requestReceivedTimeout`
    /// from the request's arrival), else it fails with [`BodyFault::TooSlow`] (408).
    pub fn until(mut self, until: Option<Instant>) -> Self {
        let Some(until) = until else {
            return self;
        };
        let read = self.fault.read();
        let p = self.pace.get_or_insert_with(|| Paced {
            pace: UNPACED,
            started: Instant::now(),
            timer: Box::pin(tokio::time::sleep_until(until)),
            until: None,
        });
        p.until = Some(until);
        p.rearm(Instant::now(), read);
        self
    }
}

impl Paced {
    /// The earlier of: `idle` after the last bytes, and the moment the average rate since the
    /// start would drop below `min_rate` (never before `grace`), with `received` bytes so far.
    fn rearm(&mut self, now: Instant, received: u64) {
        let idle = now + self.pace.idle;
        let deadline = if self.pace.min_rate == 0 {
            idle
        } else {
            let earned = Duration::from_secs_f64(received as f64 / f64::from(self.pace.min_rate));
            idle.min(self.started + earned.max(self.pace.grace))
        };
        let deadline = self.until.map_or(deadline, |u| deadline.min(u));
        self.timer.as_mut().reset(deadline);
    }
}

impl<B> Body for ClientBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                let read = this.fault.add_read(len);
                if this.max_len.is_some_and(|max| read > max) {
                    this.pace = None;
                    this.fault.set(BodyFault::TooLarge);
                    return Poll::Ready(Some(Err(
                        "the request body is over the maximum size".into()
                    )));
                }
                if let (Some(p), true) = (&mut this.pace, len > 0) {
                    p.rearm(Instant::now(), read);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.fault.set(BodyFault::Malformed);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                this.pace = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let expired = match &mut this.pace {
                    Some(p) => p.timer.as_mut().poll(cx).is_ready(),
                    None => false,
                };
                if !expired {
                    return Poll::Pending;
                }
                this.pace = None;
                this.fault.set(BodyFault::TooSlow);
                Poll::Ready(Some(Err(
                    "the client sent the request body too slowly".into()
                )))
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

    /// A body that yields one byte each `every`, `n` times.
    fn trickle(n: usize, every: Duration) -> ProxyBody {
        let s = futures::stream::unfold(0, move |i| async move {
            if i == n {
                return None;
            }
            tokio::time::sleep(every).await;
            let frame: Result<Frame<Bytes>, BoxError> = Ok(Frame::data(Bytes::from_static(b"x")));
            Some((frame, i + 1))
        });
        StreamBody::new(s).boxed_unsync()
    }

    const PACE: BodyPace = BodyPace {
        idle: Duration::from_secs(10),
        min_rate: 100,
        grace: Duration::from_secs(2),
    };

    /// Sends `n` one-byte frames `every` through a [`ClientBody`] paced by `pace`: the bytes
    /// received (or `None` on failure), the fault recorded, and the seconds it took.
    async fn paced(
        n: usize,
        every: Duration,
        pace: BodyPace,
    ) -> (Option<usize>, Option<BodyFault>, u64) {
        let fault = Arc::new(FaultCell::default());
        let body = ClientBody::new(trickle(n, every), fault.clone(), Some(pace), None);
        let started = Instant::now();
        let got = body.collect().await.ok().map(|c| c.to_bytes().len());
        (got, fault.get(), started.elapsed().as_secs())
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickling_body_fails_as_too_slow_after_the_grace() {
        // 1 byte/s is under 100 B/s from the start: it fails when the grace ends.
        let got = paced(100, Duration::from_secs(1), PACE).await;
        assert_eq!(got, (None, Some(BodyFault::TooSlow), 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_fails_after_the_idle_timeout() {
        let pace = BodyPace {
            min_rate: 0,
            ..PACE
        };
        let got = paced(2, Duration::from_secs(30), pace).await;
        assert_eq!(got, (None, Some(BodyFault::TooSlow), 10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_at_the_rate_passes() {
        let pace = BodyPace {
            min_rate: 1,
            ..PACE
        };
        let got = paced(5, Duration::from_millis(500), pace).await;
        assert_eq!(got, (Some(5), None, 2));
    }

    #[tokio::test]
    async fn a_failed_frame_is_the_clients_fault() {
        let fault = Arc::new(FaultCell::default());
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![Err("bad chunk".into())];
        let body = ClientBody::new(
            StreamBody::new(futures::stream::iter(frames)),
            fault.clone(),
            None,
            None,
        );
        assert!(body.collect().await.is_err());
        assert_eq!(fault.get(), Some(BodyFault::Malformed));
    }

    #[tokio::test]
    async fn a_body_over_the_maximum_fails_as_too_large_and_one_at_it_passes() {
        let fault = Arc::new(FaultCell::default());
        let at = ClientBody::new(chunks(&["abc", "def"]), fault.clone(), None, Some(6));
        assert_eq!(&at.collect().await.unwrap().to_bytes()[..], b"abcdef");
        assert_eq!(fault.get(), None);
        assert_eq!(fault.read(), 6, "the bytes read, for the access log");
        // One cell per body: the count is the body's own.
        let fault = Arc::new(FaultCell::default());
        let over = ClientBody::new(chunks(&["abc", "defg"]), fault.clone(), None, Some(6));
        assert!(over.collect().await.is_err());
        assert_eq!(fault.get(), Some(BodyFault::TooLarge));
        assert_eq!(
            fault.read(),
            7,
            "counted as read from the client, though not forwarded"
        );
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
