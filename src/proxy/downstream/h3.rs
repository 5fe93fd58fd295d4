//! HTTP/3: one more downstream driver of hyper's request path. Each request of a QUIC
//! connection (`accept::quic`) becomes an `http::Request` whose body reads the request stream,
//! goes through [`service::handle`] (the same phases, routing, filters, policies, upstream
//! mesh mTLS, access log and metrics as HTTP/1.1 and HTTP/2), and its response is written back
//! on the stream.
//!
//! ```text
//! QUIC connection ─> h3 (SETTINGS: field section ≤ 16 KiB, as HTTP/2's header list)
//!   request stream ─> head (connection-specific fields: 400) ─> service::handle
//!                  <─ response head (hop-by-hop fields dropped), data, trailers, FIN
//! drain ─> GOAWAY ─> the requests in flight finish (until the grace ends) ─> H3_NO_ERROR
//! ```

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use futures::stream::{FuturesUnordered, StreamExt};
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use super::service;
use crate::proxy::body::{BoxError, Inbound, ProxyBody};
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::drain::DrainToken;
use crate::proxy::exchange::Shared;
use crate::proxy::headers::{self, Keep};

/// H3_NO_ERROR: a graceful close.
pub const NO_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x100);
/// H3_INTERNAL_ERROR: a response that could not be finished (its upstream body failed).
const INTERNAL_ERROR: u64 = 0x102;
/// How long a drained connection waits for its client to close before pier closes it.
const CLOSE_AFTER_GOAWAY: std::time::Duration = std::time::Duration::from_secs(2);
/// The largest request head (QPACK-decoded field section), as HTTP/2's header list limit.
const MAX_FIELD_SECTION: u64 = 16 * 1024;

type Conn = h3::server::Connection<h3_quinn::Connection, Bytes>;
type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// Serves the HTTP/3 requests of `conn` until the client closes it, it idles out, or the
/// drain ends it.
pub async fn serve(
    shared: Arc<Shared>,
    conn: quinn::Connection,
    info: Arc<ConnInfo>,
    mut drain: DrainToken,
) {
    let peer = info.peer;
    let mut builder = h3::server::builder();
    builder.max_field_section_size(MAX_FIELD_SECTION);
    let built = builder.build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()));
    let mut h3: Conn = tokio::select! {
        r = built => match r {
            Ok(c) => c,
            Err(error) => {
                tracing::debug!(%peer, %error, "HTTP/3 connection failed");
                return;
            }
        },
        () = drain.closed() => return,
    };
    let mut closing = drain.clone();
    // The requests run in this task (no task each, as HTTP/2's streams: `proxy::streams`),
    // outside tokio's budget for the same reason as there: the budget is the connection's, and
    // requests it refused waited for the task's next turn.
    let mut requests = FuturesUnordered::new();
    let mut going_away = drain.is_draining();
    if going_away {
        let _ = h3.shutdown(1).await;
    }
    loop {
        tokio::select! {
            biased;
            () = closing.closed() => break,
            () = drain.draining(), if !going_away => {
                going_away = true;
                // GOAWAY naming the stream after the last one accepted: the requests accepted
                // finish, later ones are refused (the client may retry them elsewhere).
                if h3.shutdown(1).await.is_err() {
                    break;
                }
                if requests.is_empty() {
                    break;
                }
            }
            Some(()) = tokio::task::unconstrained(requests.next()), if !requests.is_empty() => {
                if going_away && requests.is_empty() {
                    break;
                }
            }
            // After GOAWAY nothing more is accepted; the requests in flight are QUIC streams of
            // their own and finish without the connection being polled.
            accepted = h3.accept(), if !going_away => match accepted {
                Ok(Some(resolver)) => {
                    let (shared, info) = (shared.clone(), info.clone());
                    requests.push(Box::pin(async move {
                        match resolver.resolve_request().await {
                            Ok((req, stream)) => request(shared, info, req, stream).await,
                            Err(error) => tracing::debug!(%error, "HTTP/3 request head refused"),
                        }
                    }));
                }
                // The client's GOAWAY, and its requests are done; or the connection ended.
                Ok(None) => {
                    while requests.next().await.is_some() {}
                    break;
                }
                Err(error) => {
                    if !error.is_h3_no_error() {
                        tracing::debug!(%peer, %error, "HTTP/3 connection ended");
                    }
                    break;
                }
            },
        }
    }
    if going_away && requests.is_empty() {
        // Closing now would drop response bytes not yet acknowledged: the client closes
        // once its last response is in (RFC 9114 §5.2), else pier does after a moment.
        tokio::select! {
            _ = conn.closed() => {}
            () = tokio::time::sleep(CLOSE_AFTER_GOAWAY) => {}
            () = closing.closed() => {}
        }
    }
    drop(requests);
    conn.close(NO_ERROR, b"");
}

/// One request: through hyper's request path, and the response back on the stream.
async fn request(
    shared: Arc<Shared>,
    info: Arc<ConnInfo>,
    req: Request<()>,
    stream: h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
) {
    let (mut send, recv) = stream.split();
    let (parts, ()) = req.into_parts();
    let resp = if connection_specific(&parts.headers) {
        // RFC 9114 §4.2: such a request is malformed, and never forwarded.
        let mut resp = Response::new(crate::proxy::body::empty());
        *resp.status_mut() = StatusCode::BAD_REQUEST;
        resp
    } else {
        let body = RecvBody::new(recv, declared_length(&parts.headers));
        let body = Inbound::Boxed(http_body_util::combinators::BoxBody::new(body));
        // Boxed: the request's future is kilobytes, and this task's moves would copy it.
        Box::pin(service::handle(
            shared,
            info,
            Request::from_parts(parts, body),
        ))
        .await
    };
    if let Err(error) = respond(&mut send, resp).await {
        tracing::debug!(%error, "HTTP/3 response not finished");
    }
}

/// Writes `resp` on the stream: its head less the fields HTTP/3 has no place for, its data
/// and trailers, then the stream's end. A body that fails resets the stream
/// (H3_INTERNAL_ERROR), so the client sees it was cut short.
async fn respond(
    send: &mut SendHalf,
    resp: Response<ProxyBody>,
) -> Result<(), h3::error::StreamError> {
    let (mut parts, mut body) = resp.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers, Keep::default());
    send.send_response(Response::from_parts(parts, ())).await?;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => {
                    if !data.is_empty() {
                        send.send_data(data).await?;
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        // Trailers end the message.
                        send.send_trailers(trailers).await?;
                        return send.finish().await;
                    }
                }
            },
            Err(error) => {
                tracing::debug!(%error, "response body failed; HTTP/3 stream reset");
                send.stop_stream(h3::error::Code::from(INTERNAL_ERROR));
                return Ok(());
            }
        }
    }
    send.finish().await
}

/// Fields that are about a connection, which an HTTP/3 request must not carry (RFC 9114
/// §4.2): the hop-by-hop ones but `Trailer`, and `TE` only as `trailers`.
fn connection_specific(fields: &HeaderMap) -> bool {
    (headers::HOP_BY_HOP.iter())
        .filter(|n| **n != header::TE && **n != header::TRAILER)
        .any(|n| fields.contains_key(n))
        || (fields.get_all(header::TE).iter())
            .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
}

/// The request's `Content-Length`, when it has one valid value.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()?.parse().ok()
}

/// A request stream's body as an `http_body::Body`: data frames, then trailers.
struct RecvBody {
    stream: RecvHalf,
    state: State,
    /// The declared length (the request path's size hint: retries, buffering).
    length: Option<u64>,
    /// Data read when the request arrived.
    first: Option<Bytes>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Data,
    Trailers,
    Done,
}

impl RecvBody {
    /// A body declared empty has ended; so has one whose stream ended with its head (looked
    /// at once, without waiting), so a GET goes upstream without a body. Data that came with
    /// the head is kept for the first frame.
    fn new(stream: RecvHalf, length: Option<u64>) -> Self {
        let mut body = Self {
            stream,
            state: State::Data,
            length,
            first: None,
        };
        if length == Some(0) {
            body.state = State::Done;
            return body;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match body.stream.poll_recv_data(&mut cx) {
            Poll::Ready(Ok(Some(mut data))) => {
                body.first = Some(data.copy_to_bytes(data.remaining()));
            }
            Poll::Ready(Ok(None)) => {
                body.state = State::Trailers;
                if let Poll::Ready(Ok(None)) = body.stream.poll_recv_trailers(&mut cx) {
                    body.state = State::Done;
                }
            }
            // An error comes again on the first read.
            Poll::Ready(Err(_)) | Poll::Pending => {}
        }
        body
    }
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        loop {
            match this.state {
                State::Data => match this.stream.poll_recv_data(cx) {
                    Poll::Ready(Ok(Some(mut data))) => {
                        let bytes = data.copy_to_bytes(data.remaining());
                        return Poll::Ready(Some(Ok(Frame::data(bytes))));
                    }
                    Poll::Ready(Ok(None)) => this.state = State::Trailers,
                    Poll::Ready(Err(e)) => {
                        this.state = State::Done;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                    Poll::Pending => return Poll::Pending,
                },
                State::Trailers => {
                    let r = std::task::ready!(this.stream.poll_recv_trailers(cx));
                    this.state = State::Done;
                    return Poll::Ready(match r {
                        Ok(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
                        Ok(None) => None,
                        Err(e) => Some(Err(e.into())),
                    });
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done && self.first.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match (self.state, self.length) {
            (State::Done, _) if self.first.is_none() => SizeHint::with_exact(0),
            (_, Some(n)) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}
