//! HTTP/1.1 without hyper for hyper's request path (HTTP/2, HTTP/3 and the HTTP/1.1
//! fallback downstream): a request with no body to an HTTP/1.1 endpoint goes over the fast
//! path's raw pooled connections ([`RawConn`]), written and read in the request's own future.
//! No connection task and no channel per request: on a busy HTTP/2 listener hyper's client
//! side (its request channel, connection task and wake-ups) was ~10 % of pier's CPU
//! (BENCHMARKS.md). Requests with a body, upgrades and HTTP/2 endpoints stay with hyper.
//!
//! ```text
//! send ─> bare? ─> Upstream::raw_at ─┬─ RawConn: write head ─> read head (1xx skipped)
//!                                    │    ─> Response<RawBody>: length / chunked / until close
//!                                    │       ─> RawConn::release at its end (unless `close`)
//!                                    └─ Http2 ─> hyper
//! ```
//!
//! As hyper's client does: the request head carries the request's own header lines (no
//! `Transfer-Encoding`: there is no body); the response keeps every header line (the
//! response phase strips hop-by-hop ones); chunked bodies arrive de-chunked, their trailers
//! as a trailers frame. A reused connection that fails before any response byte is retried
//! once on another for idempotent methods (the endpoint closed it while it was idle).

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::either::Either;

use super::Upstream;
use super::connect::Stream;
use super::pool::Entry;
use super::raw::{Raw, RawConn, pooled};
use super::spare;
use crate::model::{Backend, UpstreamTls};
use crate::proxy::body::{BoxError, ProxyBody};
use crate::proxy::error::ProxyError;
use crate::proxy::h1wire::chunked::{Chunked, Piece};
use crate::proxy::h1wire::{self, BadResponse, Framing};

/// Room for a response head and a short body, in a buffer reused from response to response.
const HEAD_READ: usize = spare::SIZE;
/// Largest room made for a read of a response body, and the room for a body of unknown
/// length.
const BODY_READ: usize = 64 * 1024;
const UNKNOWN_READ: usize = 16 * 1024;
/// Largest trailer section taken from a chunked response.
const MAX_TRAILERS: usize = 16 * 1024;

/// A request this module sends: no body (most GETs), and no tunnel.
#[inline]
pub fn bare(req: &Request<ProxyBody>) -> bool {
    req.body().is_end_stream() && req.method() != Method::CONNECT
}

impl Upstream {
    /// Sends a request with no body (see [`bare`]), its `head` written by [`write_head`], on
    /// a raw connection of `entry`. `Ok(None)`: the endpoint speaks HTTP/2, the request is
    /// hyper's.
    pub(super) async fn send_bare(
        &self,
        backend: &Backend,
        entry: &Arc<Entry>,
        tls: Option<&UpstreamTls>,
        method: &Method,
        head: &[u8],
    ) -> Result<Option<Response<RawBody>>, ProxyError> {
        let head_request = method == Method::HEAD;
        let mut retried = false;
        loop {
            let raw = match pooled(entry) {
                Some(raw) => raw,
                None => Box::pin(self.raw_new(backend, entry.clone(), tls)).await?,
            };
            let mut conn = match raw {
                Raw::Conn(conn) => conn,
                // Hyper would send the request a second time: fail instead.
                Raw::Http2 if retried => {
                    return Err(ProxyError::Upstream(
                        "the endpoint switched to HTTP/2".into(),
                    ));
                }
                Raw::Http2 => return Ok(None),
            };
            let mut buf = BytesMut::new();
            let read = match send(conn.io(), head).await {
                Ok(()) => {
                    // The read buffer is taken once the response is arriving, not while the
                    // endpoint works on the request: the requests waiting on their endpoints
                    // hold none, and the stock's buffers go round quickly enough to be free
                    // again when taken (taken before the wait, a busy HTTP/2 listener's
                    // thousands of streams in flight outgrew the stock: a new 4 KiB buffer
                    // for three requests in five, callgrind).
                    readable(conn.io()).await;
                    buf = spare::take();
                    read_head(conn.io(), &mut buf, head_request).await
                }
                Err(e) => Err(ReadError::Io(e)),
            };
            match read {
                Ok(h) => return Ok(Some(h.into_response(conn, buf))),
                Err(ReadError::Io(_))
                    if conn.reused && !retried && method.is_idempotent() && buf.is_empty() =>
                {
                    retried = true;
                }
                Err(ReadError::Io(e)) => return Err(ProxyError::Upstream(Box::new(e))),
                Err(ReadError::Bad(e)) => return Err(ProxyError::Upstream(Box::new(e))),
            }
        }
    }
}

/// The request line and the request's header lines, less `Transfer-Encoding`.
pub(super) fn write_head(req: &Request<ProxyBody>, out: &mut Vec<u8>) {
    out.extend_from_slice(req.method().as_str().as_bytes());
    out.push(b' ');
    let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in req.headers() {
        if name == http::header::TRANSFER_ENCODING {
            continue;
        }
        h1wire::line(out, name.as_str().as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// Until the connection's socket has something to read (or an error, which the read then
/// meets). Over TLS, a record that carries no response bytes is read like any other.
/// `poll_read_ready`, the read's own waker slot: `TcpStream::readable` queues a waiter under
/// a lock (~390 instructions a request against ~100, callgrind).
async fn readable(io: &mut Stream) {
    let tcp = match io {
        Either::Left(tcp) => &*tcp,
        Either::Right(tls) => tls.get_ref().0,
    };
    let _ = std::future::poll_fn(|cx| tcp.poll_read_ready(cx)).await;
}

async fn send(io: &mut Stream, head: &[u8]) -> io::Result<()> {
    io.write_all(head).await?;
    io.flush().await
}

enum ReadError {
    Io(io::Error),
    Bad(BadResponse),
}

/// A final response head, its header lines as a map.
struct Head {
    status: http::StatusCode,
    headers: HeaderMap,
    framing: Framing,
    close: bool,
}

/// Reads until `buf` begins with a final response head (informational ones are dropped),
/// and takes the head out of `buf`: what is left is body.
async fn read_head(
    io: &mut Stream,
    buf: &mut BytesMut,
    head_request: bool,
) -> Result<Head, ReadError> {
    loop {
        if !buf.is_empty()
            && let Some(head) = parse_head(buf, head_request).map_err(ReadError::Bad)?
        {
            return Ok(head);
        }
        if buf.capacity() - buf.len() < HEAD_READ / 4 {
            buf.reserve(HEAD_READ);
        }
        match io.read_buf(buf).await {
            Ok(0) => return Err(ReadError::Io(truncated())),
            Ok(_) => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
}

/// The final head at the start of `buf`, if it is all there. The header values are slices
/// of the head's bytes (no copy per value), as hyper makes them.
fn parse_head(buf: &mut BytesMut, head_request: bool) -> Result<Option<Head>, BadResponse> {
    loop {
        let mut storage = h1wire::storage();
        let (lines, head_len, status, framing, close) =
            match h1wire::parse_response(buf, &mut storage, head_request)? {
                h1wire::Response::Partial => return Ok(None),
                h1wire::Response::Informational(n) => {
                    buf.advance(n);
                    continue;
                }
                h1wire::Response::Final(head) => {
                    let base = head.raw.as_ptr() as usize;
                    let mut lines: Vec<(HeaderName, Range<usize>)> =
                        Vec::with_capacity(head.headers.len());
                    // Hop-by-hop lines stop here, as on the fast path: the response's
                    // `strip_hop_by_hop` then finds nothing to do (a `Connection:
                    // keep-alive` cost ~1 000 instructions there, callgrind).
                    let hop_free = head.headers.iter().filter(|line| {
                        h1wire::end_to_end(line.name, head.headers, head.connection_names).is_some()
                    });
                    for line in hop_free {
                        let name = HeaderName::from_bytes(line.name.as_bytes())
                            .map_err(|_| BadResponse("invalid header name"))?;
                        let at = (line.value.as_ptr() as usize).wrapping_sub(base);
                        let value = if line.value.is_empty() {
                            0..0
                        } else {
                            at..at + line.value.len()
                        };
                        lines.push((name, value));
                    }
                    (lines, head.head_len, head.status, head.framing, head.close)
                }
            };
        let raw = buf.split_to(head_len).freeze();
        let mut headers = HeaderMap::with_capacity(lines.len());
        for (name, value) in lines {
            let value = raw
                .get(value.clone())
                .map(|_| raw.slice(value))
                .ok_or(BadResponse("invalid header line"))?;
            let value = HeaderValue::from_maybe_shared(value)
                .map_err(|_| BadResponse("invalid header value"))?;
            headers.append(name, value);
        }
        return Ok(Some(Head {
            status,
            headers,
            framing,
            close,
        }));
    }
}

impl Head {
    fn into_response(self, conn: RawConn, buf: BytesMut) -> Response<RawBody> {
        let state = match self.framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Chunked(Chunked::default(), BytesMut::new()),
            Framing::Eof => State::Eof,
        };
        let mut body = RawBody {
            conn: Some(conn),
            buf,
            state,
            close: self.close,
        };
        if matches!(body.state, State::Done) {
            body.finish();
        }
        let mut resp = Response::new(body);
        *resp.status_mut() = self.status;
        *resp.version_mut() = Version::HTTP_11;
        *resp.headers_mut() = self.headers;
        resp
    }
}

/// A response body read from a raw connection, which goes back to the pool once the body
/// has ended (unless the response said `close`, or more bytes than the message came).
pub struct RawBody {
    conn: Option<RawConn>,
    /// Bytes read and not yet handed on.
    buf: BytesMut,
    state: State,
    close: bool,
}

enum State {
    /// This many bytes left.
    Length(u64),
    /// The scanner, and the trailer section read so far.
    Chunked(Chunked, BytesMut),
    /// Until the endpoint closes.
    Eof,
    Done,
}

impl RawBody {
    fn finish(&mut self) {
        self.state = State::Done;
        let conn = self.conn.take();
        if let Some(conn) = conn
            && !self.close
            && self.buf.is_empty()
        {
            conn.release();
        }
    }

    /// Readies `buf` for the next read: room for what is left of a body with a length (up
    /// to [`BODY_READ`]), else [`UNKNOWN_READ`].
    fn room(&mut self) {
        let want = match self.state {
            State::Length(left) => usize::try_from(left).map_or(BODY_READ, |n| n.min(BODY_READ)),
            _ => UNKNOWN_READ,
        };
        if self.buf.capacity() - self.buf.len() < want {
            self.buf.reserve(want);
        }
    }

    fn fail(&mut self, e: impl Into<BoxError>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.state = State::Done;
        self.conn = None;
        Poll::Ready(Some(Err(e.into())))
    }

    /// The next frame from what `buf` holds, if it holds one.
    fn frame(&mut self) -> Option<Result<Option<Frame<Bytes>>, BoxError>> {
        match &mut self.state {
            State::Done => Some(Ok(None)),
            State::Length(left) => {
                if self.buf.is_empty() {
                    return None;
                }
                let n = (self.buf.len() as u64).min(*left);
                *left -= n;
                // At most `buf.len()`.
                let data = self.buf.split_to(n as usize).freeze();
                if *left == 0 {
                    self.finish();
                }
                Some(Ok(Some(Frame::data(data))))
            }
            State::Eof => {
                (!self.buf.is_empty()).then(|| Ok(Some(Frame::data(self.buf.split().freeze()))))
            }
            State::Chunked(chunked, trailers) => {
                while !self.buf.is_empty() {
                    let in_trailers = chunked.in_trailers();
                    match chunked.next(&self.buf) {
                        Ok(Piece::Data(n)) => {
                            return Some(Ok(Some(Frame::data(self.buf.split_to(n).freeze()))));
                        }
                        Ok(Piece::Framing(n)) => {
                            if in_trailers {
                                if trailers.len() + n > MAX_TRAILERS {
                                    return Some(Err(BadResponse("trailers too large").into()));
                                }
                                trailers.extend_from_slice(&self.buf[..n]);
                            }
                            self.buf.advance(n);
                        }
                        Err(e) => return Some(Err(e.into())),
                    }
                    if chunked.is_done() {
                        let section = std::mem::take(trailers);
                        self.finish();
                        return Some(match trailer_map(&section) {
                            Ok(Some(map)) => Ok(Some(Frame::trailers(map))),
                            Ok(None) => Ok(None),
                            Err(e) => Err(e.into()),
                        });
                    }
                }
                None
            }
        }
    }
}

/// The header lines of a trailer section (`None` for an empty one).
fn trailer_map(section: &[u8]) -> Result<Option<HeaderMap>, BadResponse> {
    if section.len() <= 2 {
        return Ok(None);
    }
    let mut lines = [httparse::EMPTY_HEADER; h1wire::MAX_HEADERS];
    let Ok(httparse::Status::Complete((_, lines))) = httparse::parse_headers(section, &mut lines)
    else {
        return Err(BadResponse("invalid trailers"));
    };
    let mut map = HeaderMap::with_capacity(lines.len());
    for line in lines.iter() {
        let name = HeaderName::from_bytes(line.name.as_bytes());
        let value = HeaderValue::from_bytes(line.value);
        let (Ok(name), Ok(value)) = (name, value) else {
            return Err(BadResponse("invalid trailers"));
        };
        map.append(name, value);
    }
    Ok(Some(map))
}

impl Body for RawBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            match this.frame() {
                Some(Ok(frame)) => return Poll::Ready(frame.map(Ok)),
                Some(Err(e)) => return this.fail(e),
                None => {}
            }
            this.room();
            let Some(conn) = this.conn.as_mut() else {
                return this.fail(truncated());
            };
            match ready!(tokio_util::io::poll_read_buf(
                Pin::new(conn.io()),
                cx,
                &mut this.buf
            )) {
                Ok(0) if matches!(this.state, State::Eof) => {
                    this.close = true;
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(truncated()),
                Ok(_) => {}
                Err(e) => return this.fail(e),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Done => SizeHint::with_exact(0),
            State::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

impl Drop for RawBody {
    fn drop(&mut self) {
        // Its memory, for another response once the slices of it handed on are gone.
        spare::give(std::mem::take(&mut self.buf));
    }
}

impl std::fmt::Debug for RawBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawBody")
            .field("open", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the upstream closed mid-message",
    )
}
