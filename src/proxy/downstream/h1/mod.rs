//! The HTTP/1.1 fast path: one task per downstream connection parses each request head
//! itself, routes it over the snapshot, writes it to a pooled upstream socket and relays the
//! response back, with no `http::Request`/`Response` in between, no connection task or
//! channel on the upstream side, and no header map unless a filter or a header match needs
//! one. Every step that is policy (arrival, listener, route, decision and access policies,
//! header rewrites, the log) is a call to `phase`, the same functions hyper's path calls;
//! endpoint pick and outlier detection are `exchange`'s.
//!
//! ```text
//! conn ─> serve ─ read head ─> plan (parse, route, pick backend, write upstream head)
//!            │                   ├─ Respond: pier's own answer (404, redirect, CORS preflight, 503, ...)
//!            │                   ├─ Forward ─> upstream.raw ─> write ─> response head ─> relay
//!            │                   └─ Fallback ─────────────┐
//!            └─ Served::Fallback(Replay { read bytes, io }) ┴─> hyper for the rest of the
//!                                                              connection (h2c, upgrades,
//!                                                              Expect, chunked or large
//!                                                              request bodies, mirrors,
//!                                                              retries, HTTP/2 upstreams,
//!                                                              HTTP/1.0)
//! ```
//!
//! Request bodies are small (at most [`head::MAX_BODY`]) and buffered whole before they are
//! forwarded, like nginx's request buffering; response bodies stream (length, chunked or
//! until EOF) through one buffer per connection ([`BUF`], [`BODY_BUF`] while a long body is
//! relayed), so a client that stops reading holds the upstream back.

#[cfg(test)]
mod differential;
mod head;
mod ready;
mod replay;
mod stock;

use std::borrow::Cow;
use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BytesMut};
use http::header::DATE;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub use head::MAX_HEAD;
pub use ready::ReadReady;
pub use replay::Replay;

use crate::model::filter::CorsResponse;
use crate::model::host::normalize_host;
use crate::model::{AppProtocol, Backend, BackendTarget, Rule, Snapshot, WeightedBackend};
use crate::proxy::body::ProxyBody;
use crate::proxy::conn_info::ConnInfo;
use crate::proxy::drain::{DrainToken, OnlyWhenWoken};
use crate::proxy::error::ProxyError;
use crate::proxy::exchange::Shared;
use crate::proxy::exchange::send::{outcome, pick_endpoint};
use crate::proxy::h1wire::chunked::Chunked;
use crate::proxy::observe::access::LogHead;
use crate::proxy::observe::forwarded::Edge;
use crate::proxy::observe::metrics::Transport;
use crate::proxy::observe::record::Seen;
use crate::proxy::observe::trace::RequestLine;
use crate::proxy::phase::{self, Arrival, Decision, RouteInput, Routed};
use crate::proxy::policy::head::{rewrite_of, rewritten_target};
use crate::proxy::reclaim::Registration;
use crate::proxy::upstream::{Raw, RawConn, Stream, Target};
use crate::proxy::validate;
use head::{Forwarding, Framing, Parsed, Tail};

/// Read buffer size per connection (both directions reserve this much when they run low).
const BUF: usize = 8 * 1024;
/// A response body longer than this is read in pieces of this size: an eighth of the
/// syscalls and trips through the loopback or NIC stack of [`BUF`] pieces. Held only while
/// such a body is relayed (the stock frees buffers this large, [`stock::give`]).
const BODY_BUF: usize = 64 * 1024;
/// Response bodies up to this size are copied behind the head and sent with it in one write.
const COALESCE: usize = 16 * 1024;
/// The head buffer's first capacity.
const WBUF: usize = 1024;
/// While waiting for an upstream, the client socket is read (to notice it hang up) until this
/// much is buffered.
const READ_AHEAD: usize = head::MAX_HEAD + head::MAX_BODY;
/// A client that hangs up while its request is at the upstream leaves the exchange this long
/// to finish: a response that arrives whole in time keeps its upstream connection pooled
/// (clients that all leave at once, as load generators do at the end of a run, would
/// otherwise cost as many new upstream connections and TLS handshakes), while a long poll is
/// still cancelled promptly.
const HANGUP_GRACE: std::time::Duration = std::time::Duration::from_millis(250);
/// Bound on the TLS close_notify / FIN when the fast path closes a connection.
pub const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// A keep-alive connection that has waited this long for its next request leaves the fast
/// path ([`Served::Parked`]): the kilobytes of request states are dropped, and it waits in
/// its accept loop's parking lot (plain: `proxy::lot`, no task) or in its task alone (TLS:
/// `conn::idle`) until the client sends again. Busy clients never wait
/// this long; the timer that marks it is the idle timeout's own, re-armed per request as
/// before (a later deadline: no timer-wheel work), so the hot path pays nothing for it.
pub const PARK_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
/// When pier drains (shutdown, a port removed), how long an idle keep-alive connection may
/// still bring one request (answered with `Connection: close`) before it is closed: a client
/// that sent a request just as the drain began gets its answer instead of a reset.
pub const DRAIN_IDLE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How a connection left the fast path.
pub enum Served<I> {
    Closed,
    /// Continue with hyper, replaying what was read.
    Fallback(Replay<I>),
    /// An idle keep-alive connection, nothing buffered, to wait for its client's next bytes
    /// outside the fast path; the head must then arrive by this deadline (the idle timeout).
    Parked(I, tokio::time::Instant),
}

/// Shared between the connection loop and the drain watcher around it.
#[derive(Default)]
struct Flags {
    /// Waiting for a request with nothing buffered: safe to close at once on drain.
    idle: AtomicBool,
    draining: AtomicBool,
}

enum Next {
    KeepAlive,
    Close,
    Fallback,
    /// Idle for [`PARK_AFTER`] with the next head due by this deadline.
    Park(tokio::time::Instant),
    /// Answered with a fixed response, then closed ([`Refusal`]).
    Refuse(Refusal),
}

/// Requests the fast path answers without a request to record: before their head is whole.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// Part of a request arrived, not all of it within the port's `requestReceivedTimeout`:
    /// 408.
    Late,
    /// The request line does not end within the head limit: 414 (RFC 9110 §15.5.15, as nginx
    /// answers it), not 431: header fields are not what is long.
    TargetTooLong,
}

struct Conn<'a, I> {
    shared: &'a Shared,
    info: &'a ConnInfo,
    io: I,
    /// Downstream bytes read and not yet consumed.
    rbuf: BytesMut,
    /// Upstream bytes of the current response.
    ubuf: BytesMut,
    /// The head (and small body) being written, either way.
    wbuf: Vec<u8>,
    flags: &'a Flags,
    /// Waiting on the client or busy (`reclaim`: the accept loop may close a waiting one).
    reclaim: &'a Registration,
}

/// What to do with one request, decided without I/O.
enum Plan<'s> {
    /// More bytes are needed: at least this many in all, when known (a body on its way).
    Partial(Option<usize>),
    Fallback,
    /// Answered with a fixed response before anything could be parsed, then closed.
    Refuse(Refusal),
    Respond(Common<'s>, Result<Response<ProxyBody>, ProxyError>),
    Forward(Common<'s>, Forward<'s>),
}

/// Per request, whatever its fate.
struct Common<'s> {
    seen: Seen<'s>,
    /// Head and body bytes of the request in `rbuf`.
    consumed: usize,
    /// The client asked to close after this response.
    close: bool,
    head_request: bool,
    /// Forwarding headers, request ID, client and trace context; the log head.
    arrival: Arrival,
}

struct Forward<'s> {
    rule: &'s Rule,
    weighted: &'s WeightedBackend,
    /// The CORS headers for the response, when a CORS filter applies.
    cors: Option<CorsResponse<'s>>,
    backend: &'s Backend,
    idempotent: bool,
    head_request: bool,
    /// The client asked to close after this response.
    client_close: bool,
    /// The listener's `Alt-Svc` (it serves HTTP/3).
    alt_svc: Option<&'s http::HeaderValue>,
}

/// The response head as read from the upstream (the downstream head is already in `wbuf`).
struct Answer {
    status: StatusCode,
    framing: Framing,
    /// The upstream closes after this response.
    upstream_close: bool,
    head_len: usize,
    down_close: bool,
}

/// Serves HTTP/1.1 requests on `io` until the client closes, the connection drains, a
/// request needs hyper, or the connection idles long enough to park. `resume`: a parked
/// connection whose client sent something, with the deadline of the head it waits for.
pub async fn serve<I>(
    shared: &Shared,
    io: I,
    info: &ConnInfo,
    drain: &mut DrainToken,
    reclaim: &Registration,
    resume: Option<tokio::time::Instant>,
) -> Served<I>
where
    I: AsyncRead + AsyncWrite + ReadReady + Unpin + Send,
{
    // A connection that starts (or resumes from parking) during a drain answers with
    // `Connection: close` from its first request: pier's own answers are written within the
    // first poll, before the drain below is noticed.
    let flags = Flags {
        draining: AtomicBool::new(drain.is_draining()),
        ..Flags::default()
    };
    let mut conn = Conn {
        shared,
        info,
        io,
        rbuf: stock::take(),
        ubuf: BytesMut::new(),
        // Room for a typical request head with the forwarding headers added, so building it
        // does not regrow the buffer step by step on every new connection.
        wbuf: Vec::with_capacity(WBUF),
        flags: &flags,
        reclaim,
    };
    let next = {
        let run = conn.run(resume);
        let mut run = std::pin::pin!(run);
        let early = {
            // Polled on its own wake-ups only, not on the several per request of `run`.
            let draining = std::pin::pin!(drain.draining());
            let mut draining = OnlyWhenWoken::new(draining);
            tokio::select! {
                biased;
                next = run.as_mut() => Some(next),
                _ = &mut draining => None,
            }
        };
        match early {
            Some(next) => next,
            None => {
                flags.draining.store(true, Ordering::Relaxed);
                // Finish the request in progress, or give an idle keep-alive connection a
                // moment for the request its client may be sending right now (closing it at
                // once would fail that request): either response says `Connection: close`.
                let idle = flags.idle.load(Ordering::Relaxed);
                tokio::select! {
                    next = run => next,
                    _ = tokio::time::sleep(DRAIN_IDLE_WAIT), if idle => Next::Close,
                    _ = drain.closed() => Next::Close,
                }
            }
        }
    };
    if let Next::Fallback = next {
        return Served::Fallback(Replay::new(conn.rbuf.freeze(), conn.io));
    }
    if let Next::Refuse(why) = next {
        // Boxed: the rare path.
        Box::pin(conn.refuse(why)).await;
    }
    stock::give(std::mem::take(&mut conn.rbuf));
    stock::give(std::mem::take(&mut conn.ubuf));
    match next {
        // Only before a drain is noticed ([`Conn::parkable`]); one that begins after this
        // gets the same wait in `conn::idle`.
        Next::Park(deadline) => Served::Parked(conn.io, deadline),
        _ => {
            // FIN, and close_notify on TLS, as hyper does when it ends a connection.
            let _ = tokio::time::timeout(SHUTDOWN_WAIT, conn.io.shutdown()).await;
            Served::Closed
        }
    }
}

/// The wait timer woke while waiting for a head due at `due`: past it the connection closes;
/// a `parkable` one parks; any other (part of a head, or a drain under way) waits on until
/// `due`.
fn woken(
    due: tokio::time::Instant,
    parkable: bool,
    timer: std::pin::Pin<&mut tokio::time::Sleep>,
) -> Option<Next> {
    if tokio::time::Instant::now() >= due {
        Some(Next::Close)
    } else if parkable {
        Some(Next::Park(due))
    } else {
        timer.reset(due);
        None
    }
}

impl<I> Conn<'_, I>
where
    I: AsyncRead + AsyncWrite + ReadReady + Unpin + Send,
{
    async fn run(&mut self, mut resume: Option<tokio::time::Instant>) -> Next {
        // The keep-alive wait and the head's deadline: the port's ClientTrafficPolicy
        // idleTimeout, else the header read timeout.
        let header_timeout = self
            .info
            .idle_timeout(self.shared.config.header_read_timeout);
        // Armed per request at the park point, never later than the head's deadline.
        let mut timer = std::pin::pin!(tokio::time::sleep(header_timeout.min(PARK_AFTER)));
        loop {
            // When the head being waited for must have arrived (`None`: not waiting yet).
            let mut deadline = None;
            // The deadline is the request's `requestReceivedTimeout`, not the wait's.
            let mut late = false;
            let mut need = 1;
            let next = loop {
                if self.rbuf.len() >= need {
                    let started = Instant::now();
                    let snapshot = self.shared.snapshot.load_full();
                    self.shared.upstream.observe(snapshot.generation);
                    let plan = plan(
                        self.shared,
                        self.info,
                        &snapshot,
                        (&self.rbuf, &mut self.wbuf),
                        started,
                    );
                    // A whole request (or hyper's): no longer waiting on the client, unless
                    // the accept loop closed the connection first.
                    if !matches!(plan, Plan::Partial(_)) && !self.reclaim.busy() {
                        return Next::Close;
                    }
                    // `common` and `fwd` stay in `plan`, and the futures below borrow them:
                    // moved into each future, they would be stored twice there (its argument
                    // and its local). A failed forward is answered here, not from within
                    // `forward`, so that its future does not hold `respond`'s too.
                    let mut plan = plan;
                    match &mut plan {
                        Plan::Partial(total) => need = total.unwrap_or(self.rbuf.len() + 1),
                        Plan::Fallback => return Next::Fallback,
                        Plan::Refuse(why) => return Next::Refuse(*why),
                        Plan::Respond(common, resp) => {
                            // Taken out of the plan, which is not read again: the
                            // placeholder left behind is never answered.
                            let resp = std::mem::replace(resp, Err(ProxyError::NoEndpoints));
                            break self.respond(&snapshot, common, resp, started).await;
                        }
                        Plan::Forward(common, fwd) => {
                            match self.forward(&snapshot, common, fwd, started).await {
                                Ok(next) => break next,
                                Err(e) => {
                                    break self.respond(&snapshot, common, Err(e), started).await;
                                }
                            }
                        }
                    }
                }
                // The head (and body) must arrive within the header read timeout. The timer
                // wakes at the park point first (or the deadline, if sooner).
                let due = match deadline {
                    Some(due) => due,
                    None => {
                        let now = tokio::time::Instant::now();
                        let mut due = resume.take().unwrap_or(now + header_timeout);
                        // A pipelined request began already.
                        if let Some(t) = self.info.request_received_timeout()
                            && !self.rbuf.is_empty()
                            && now + t < due
                        {
                            (due, late) = (now + t, true);
                        }
                        timer.as_mut().reset(due.min(now + PARK_AFTER));
                        self.reclaim.wait(now.into_std());
                        *deadline.insert(due)
                    }
                };
                let idle = self.rbuf.is_empty();
                self.flags.idle.store(idle, Ordering::Relaxed);
                if self.rbuf.capacity() == 0 {
                    // Idle, buffers given back: wait for the client without one.
                    let ready = tokio::select! {
                        biased;
                        r = self.io.read_ready() => r,
                        _ = timer.as_mut() => match woken(due, self.parkable(), timer.as_mut()) {
                            Some(next) => return next,
                            None => continue,
                        },
                    };
                    if ready.is_err() {
                        return Next::Close;
                    }
                    self.rbuf = stock::take();
                }
                room_to_read(&mut self.rbuf);
                let first = self.rbuf.is_empty();
                let read = tokio::select! {
                    biased;
                    r = self.io.read_buf(&mut self.rbuf) => r,
                    _ = timer.as_mut() => match woken(due, self.parkable(), timer.as_mut()) {
                        // Part of a request, past its `requestReceivedTimeout`: 408.
                        Some(Next::Close) if late => return Next::Refuse(Refusal::Late),
                        Some(next) => return next,
                        None => continue,
                    },
                };
                self.flags.idle.store(false, Ordering::Relaxed);
                match read {
                    Ok(0) | Err(_) => return Next::Close,
                    Ok(_) => {}
                }
                // The request's first bytes: from now it must be whole within the port's
                // `requestReceivedTimeout` (else 408).
                if first
                    && self.info.request_received_timeout().is_some()
                    && let Some(by) = self.received_by(due)
                {
                    (deadline, late) = (Some(by), true);
                    if by < timer.deadline() {
                        timer.as_mut().reset(by);
                    }
                }
            };
            match next {
                // Draining: that response said `Connection: close`.
                Next::KeepAlive if self.flags.draining.load(Ordering::Relaxed) => {
                    return Next::Close;
                }
                Next::KeepAlive => self.release(),
                other => return other,
            }
        }
    }

    /// When a request whose first bytes arrive now must be whole (the port's
    /// `requestReceivedTimeout`), if that is before `due`. Out of line: only ports with the
    /// setting call it.
    #[cold]
    #[inline(never)]
    fn received_by(&self, due: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let by = tokio::time::Instant::now() + self.info.request_received_timeout()?;
        (by < due).then_some(by)
    }

    /// A request refused before its head is whole ([`Refusal`]): counted as its error, and
    /// answered; the connection closes next.
    async fn refuse(&mut self, why: Refusal) {
        let (error, answer): (ProxyError, &[u8]) = match why {
            Refusal::Late => (
                ProxyError::ClientBody(crate::proxy::body::BodyFault::TooSlow),
                b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            ),
            Refusal::TargetTooLong => (
                ProxyError::Invalid(crate::proxy::validate::Invalid::TargetTooLong),
                b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            ),
        };
        phase::failed(self.shared, &mut Seen::default(), &error, self.info.port);
        let write = self.io.write_all(answer);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
    }

    /// Nothing buffered, and no drain under way (whose own wait for an idle connection
    /// decides when it closes).
    fn parkable(&self) -> bool {
        self.rbuf.is_empty() && !self.flags.draining.load(Ordering::Relaxed)
    }

    /// Between requests: gives back the read and upstream buffers ([`stock`]), so that an
    /// idle keep-alive connection holds neither ([`ready`]); a read buffer still holding a
    /// pipelined request is kept. The head buffer (1 KiB) stays, unless one large message
    /// grew it. (Inlined: the per-request loop calls it once; rustc stopped inlining it
    /// when the loop grew.)
    #[inline(always)]
    fn release(&mut self) {
        // Each response is read into it from empty.
        stock::give(std::mem::take(&mut self.ubuf));
        if self.rbuf.is_empty() {
            stock::give(std::mem::take(&mut self.rbuf));
        }
        if self.wbuf.capacity() > 4 * BUF {
            self.wbuf = Vec::with_capacity(WBUF);
        }
    }

    /// pier's own answer: an error or a redirect.
    async fn respond(
        &mut self,
        snapshot: &Arc<Snapshot>,
        common: &mut Common<'_>,
        resp: Result<Response<ProxyBody>, ProxyError>,
        started: Instant,
    ) -> Next {
        let shared = self.shared;
        let resp = resp.unwrap_or_else(|error| {
            phase::failed(shared, &mut common.seen, &error, self.info.port);
            error.to_response()
        });
        let (parts, body) = resp.into_parts();
        // pier's own bodies are short and already in memory.
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let headers = parts.headers;
        let close = common.close || self.flags.draining.load(Ordering::Relaxed);
        let date = (!headers.contains_key(DATE)).then(http_date);
        let tail = Tail {
            framing: Framing::Length(body.len() as u64),
            close,
            date: date.as_ref().map(|d| &d[..]),
            alt_svc: None,
        };
        self.wbuf.clear();
        head::write_response_map(parts.status, &headers, tail, &mut self.wbuf);
        if !common.head_request {
            self.wbuf.extend_from_slice(&body);
        }
        let bytes_out = if common.head_request {
            0
        } else {
            body.len() as u64
        };
        self.finish(snapshot, common, (parts.status, Some(bytes_out)), started);
        let written = self.write_out().await;
        self.rbuf.advance(common.consumed);
        match written {
            Ok(()) if !close => Next::KeepAlive,
            _ => Next::Close,
        }
    }

    /// Forwards the request in `wbuf` and relays the response. `Err`: no response came
    /// (no endpoint, not admitted, the exchange failed); the caller answers with the error.
    async fn forward<'s>(
        &mut self,
        snapshot: &Arc<Snapshot>,
        common: &mut Common<'s>,
        fwd: &Forward<'s>,
        started: Instant,
    ) -> Result<Next, ProxyError> {
        let shared = self.shared;
        let backend = fwd.backend;
        let endpoint = pick_endpoint(shared, backend)?;
        common.seen.endpoint(endpoint);
        let target = Target {
            backend,
            endpoint,
            upgrade: false,
        };
        let in_flight = shared.admit(snapshot, backend, endpoint).await?;
        // The request is in `wbuf` now: its read buffer is not held while the upstream works.
        let request_bytes = self.set_aside(common);
        // `timeouts.request` runs from the request's arrival, `backendRequest` from now; both
        // end at the response head, as on the hyper path.
        let request = fwd.rule.timeouts.request.map(|t| started + t);
        let backend_request = fwd
            .rule
            .timeouts
            .backend_request
            .map(|t| Instant::now() + t);
        let deadline = match (request, backend_request) {
            (Some(r), Some(b)) if b < r => Some((b, ProxyError::BackendTimeout)),
            (Some(r), _) => Some((r, ProxyError::RequestTimeout)),
            (None, Some(b)) => Some((b, ProxyError::BackendTimeout)),
            (None, None) => None,
        };
        // Built and pinned within this block, awaited once: its state (the largest part of a
        // forwarding request's) then shares its space with the states of the other awaits.
        // Combinators, not an `async` block: one would store the exchange twice.
        let watched = {
            use futures::FutureExt as _;
            let exchange = exchange(
                shared,
                &mut self.ubuf,
                &mut self.wbuf,
                target,
                fwd,
                self.flags,
            );
            let bounded = match deadline {
                Some((at, timeout)) => futures::future::Either::Left(
                    tokio::time::timeout_at(at.into(), exchange).map(|r| r.unwrap_or(Err(timeout))),
                ),
                None => futures::future::Either::Right(exchange),
            };
            watching(&mut self.io, &mut self.rbuf, std::pin::pin!(bounded)).await
        };
        let result = match watched {
            Watched::Done(result) => result,
            Watched::ClientGone(result) => {
                // Nobody is left to send the response to; a whole one keeps its connection.
                if let Some(Ok(Some((conn, answer)))) = result
                    && self.whole(&answer)
                {
                    conn.release();
                }
                return Ok(Next::Close);
            }
        };
        let (conn, answer) = match result {
            Ok(Some(exchanged)) => exchanged,
            // The endpoint speaks HTTP/2: hyper takes the connection, this request included.
            Ok(None) => {
                self.rbuf = put_back(&request_bytes, &self.rbuf);
                return Ok(Next::Fallback);
            }
            Err(e) => {
                outcome(shared, backend, endpoint, Err(&e));
                return Err(e);
            }
        };
        outcome(shared, backend, endpoint, Ok(answer.status));
        let bytes_out = match answer.framing {
            Framing::Length(n) => Some(n),
            Framing::Empty => Some(0),
            Framing::Chunked | Framing::Eof => None,
        };
        self.finish(snapshot, common, (answer.status, bytes_out), started);
        self.rbuf.advance(common.consumed);
        let relayed = self.relay(conn, &answer).await;
        drop(in_flight);
        Ok(match relayed {
            Ok(()) if !answer.down_close => Next::KeepAlive,
            _ => Next::Close,
        })
    }

    /// Takes the request (`common.consumed` bytes, already copied into `wbuf`) out of the read
    /// buffer, and gives the buffer back to the [`stock`] when nothing else is in it: a
    /// request waiting on its upstream holds no 8 KiB read buffer (at thousands of requests
    /// in flight, most of a connection's memory; BENCHMARKS.md). [`watching`] takes one again
    /// when the client sends more. Returns a copy of the request, which the HTTP/2 fallback
    /// replays ([`put_back`]); it is no longer counted in `consumed`.
    #[inline(always)]
    fn set_aside(&mut self, common: &mut Common<'_>) -> Box<[u8]> {
        let request: Box<[u8]> = self.rbuf[..common.consumed].into();
        self.rbuf.advance(common.consumed);
        common.consumed = 0;
        if self.rbuf.is_empty() {
            stock::give(std::mem::take(&mut self.rbuf));
        }
        request
    }

    /// True if the whole response (head and exactly its body) is in `ubuf` and the upstream
    /// connection may carry another request.
    fn whole(&self, answer: &Answer) -> bool {
        let body = self.ubuf.len().checked_sub(answer.head_len);
        let whole = match answer.framing {
            Framing::Empty => body == Some(0),
            Framing::Length(n) => body.is_some_and(|b| b as u64 == n),
            Framing::Chunked | Framing::Eof => false,
        };
        whole && !answer.upstream_close
    }

    /// Sends the response head in `wbuf` and the body after it; the upstream connection goes
    /// back to the pool when the body ended cleanly and nothing followed it.
    async fn relay(&mut self, mut conn: RawConn, answer: &Answer) -> io::Result<()> {
        if self.whole(answer) {
            // Nothing more to read upstream: pool the connection before the client write, so
            // the next request (this client's or another's) finds it idle.
            conn.release();
            self.ubuf.advance(answer.head_len);
            let mut left = match answer.framing {
                Framing::Length(n) => n,
                _ => 0,
            };
            self.send_with_head(&mut left).await?;
            return Ok(());
        }
        self.ubuf.advance(answer.head_len);
        let reusable = match answer.framing {
            Framing::Empty => {
                self.write_out().await?;
                self.ubuf.is_empty()
            }
            Framing::Length(n) => self.relay_length(conn.io(), n).await?,
            Framing::Chunked => self.relay_chunked(conn.io()).await?,
            Framing::Eof => {
                self.relay_eof(conn.io()).await?;
                false
            }
        };
        if reusable && !answer.upstream_close {
            conn.release();
        }
        Ok(())
    }

    async fn relay_length(&mut self, up: &mut Stream, n: u64) -> io::Result<bool> {
        let mut left = n;
        let mut clean = self.send_with_head(&mut left).await?;
        while left > 0 {
            body_room(&mut self.ubuf, left > BODY_BUF as u64);
            if up.read_buf(&mut self.ubuf).await? == 0 {
                return Err(truncated());
            }
            let take = left.min(self.ubuf.len() as u64) as usize;
            clean &= take == self.ubuf.len();
            self.io.write_all(&self.ubuf[..take]).await?;
            self.io.flush().await?;
            left -= take as u64;
        }
        self.io.flush().await?;
        Ok(clean)
    }

    /// Writes the head with up to `left` body bytes already read; `false` if the upstream
    /// sent more than the body.
    async fn send_with_head(&mut self, left: &mut u64) -> io::Result<bool> {
        let have = (*left).min(self.ubuf.len() as u64) as usize;
        let clean = have == self.ubuf.len();
        if have <= COALESCE {
            self.wbuf.extend_from_slice(&self.ubuf[..have]);
            self.io.write_all(&self.wbuf).await?;
        } else {
            self.io.write_all(&self.wbuf).await?;
            self.io.write_all(&self.ubuf[..have]).await?;
        }
        self.io.flush().await?;
        *left -= have as u64;
        Ok(clean)
    }

    async fn relay_chunked(&mut self, up: &mut Stream) -> io::Result<bool> {
        let mut chunks = Chunked::default();
        let used = chunks.feed(&self.ubuf).map_err(io::Error::other)?;
        let mut clean = used == self.ubuf.len();
        let mut left = used as u64;
        self.send_with_head(&mut left).await?;
        let mut filled = false;
        while !chunks.is_done() {
            body_room(&mut self.ubuf, filled);
            if up.read_buf(&mut self.ubuf).await? == 0 {
                return Err(truncated());
            }
            filled = self.ubuf.len() == self.ubuf.capacity();
            let used = chunks.feed(&self.ubuf).map_err(io::Error::other)?;
            clean &= used == self.ubuf.len();
            // Flushed as it comes: a stream of events must not wait in a TLS buffer.
            self.io.write_all(&self.ubuf[..used]).await?;
            self.io.flush().await?;
        }
        self.io.flush().await?;
        Ok(clean)
    }

    /// A body the upstream ends by closing goes out chunked (the head says so), so the client
    /// connection stays usable and a truncation shows.
    async fn relay_eof(&mut self, up: &mut Stream) -> io::Result<()> {
        chunk(&self.ubuf, &mut self.wbuf);
        let mut filled = false;
        loop {
            self.io.write_all(&self.wbuf).await?;
            self.io.flush().await?;
            body_room(&mut self.ubuf, filled);
            let n = up.read_buf(&mut self.ubuf).await?;
            filled = n == self.ubuf.capacity();
            self.wbuf.clear();
            if n == 0 {
                self.wbuf.extend_from_slice(b"0\r\n\r\n");
                self.io.write_all(&self.wbuf).await?;
                return self.io.flush().await;
            }
            chunk(&self.ubuf, &mut self.wbuf);
        }
    }

    async fn write_out(&mut self) -> io::Result<()> {
        self.io.write_all(&self.wbuf).await?;
        self.io.flush().await
    }

    /// Metrics, the access log and the span, once the response head is known.
    fn finish(
        &self,
        snapshot: &Arc<Snapshot>,
        common: &Common<'_>,
        head: (StatusCode, Option<u64>),
        started: Instant,
    ) {
        phase::log(
            self.shared,
            snapshot,
            self.info,
            &common.arrival.edge,
            &common.seen,
            common.arrival.log.as_ref(),
            head,
            started.elapsed(),
        );
    }
}

/// Parses, routes and prepares one request: on `Forward`, `wbuf` holds the upstream request
/// (head and body).
fn plan<'s>(
    shared: &Shared,
    info: &ConnInfo,
    snapshot: &'s Snapshot,
    (rbuf, wbuf): (&[u8], &mut Vec<u8>),
    started: Instant,
) -> Plan<'s> {
    let mut storage = head::storage();
    let req = match head::parse_request(rbuf, &mut storage) {
        Parsed::Ready(req) => req,
        Parsed::Partial => return Plan::Partial(None),
        Parsed::Body(total) => return Plan::Partial(Some(total)),
        Parsed::Fallback => return Plan::Fallback,
        Parsed::TargetTooLong => return Plan::Refuse(Refusal::TargetTooLong),
    };
    let mut common = Common {
        seen: Seen::default(),
        consumed: req.head_len + req.body_len,
        close: req.close,
        head_request: req.method == Method::HEAD,
        arrival: phase::arrive(
            shared,
            snapshot,
            info,
            || req.headers.iter().map(|h| (h.name, h.value)),
            RequestLine {
                method: &req.method,
                host: req.host,
                path: req.path,
            },
            || {
                LogHead::new(
                    req.method.clone(),
                    http::Version::HTTP_11,
                    req.host,
                    req.path,
                )
                .with_bytes_in(req.body_len as u64)
            },
        ),
    };
    let limits = &shared.config.limits;
    let sizes = validate::check_sizes(
        req.target.len(),
        req.has_length.then_some(req.body_len as u64),
        limits.max_request_target,
        limits.max_request_body,
    );
    if let Err(e) = sizes.and_then(|()| validate::host_value_ok(req.host)) {
        return Plan::Respond(common, Err(ProxyError::Invalid(e)));
    }
    let rules = info.request_rules(limits.merge_slashes);
    match validate::underscores(rules.underscores, req.headers.iter().map(|h| h.name)) {
        Ok(false) => {}
        // Dropping headers takes a header map: hyper's path.
        Ok(true) => return Plan::Fallback,
        Err(e) => return Plan::Respond(common, Err(ProxyError::Invalid(e))),
    }
    let path = match validate::normalize_path(req.path, rules) {
        Ok(path) => path,
        Err(e) => return Plan::Respond(common, Err(ProxyError::Invalid(e))),
    };
    // The target to forward: the client's own bytes unless normalising changed the path.
    let target: Cow<'_, str> = match (&path, req.query) {
        (Cow::Borrowed(_), _) => Cow::Borrowed(req.target),
        (Cow::Owned(p), Some(q)) => Cow::Owned(format!("{p}?{q}")),
        (Cow::Owned(p), None) => Cow::Owned(p.clone()),
    };
    let host = normalize_host(req.host);
    let (port, listener) = match phase::listener(snapshot, info, &host) {
        Ok(found) => found,
        Err(e) => return Plan::Respond(common, Err(e)),
    };
    // The client identity header and listener filters act on a header map before routing:
    // the hyper path's.
    if listener.before_routing {
        return Plan::Fallback;
    }
    // Header matches need the headers as a map; most route tables have none.
    let map = if listener.routes.matches_headers() {
        match head::header_map(req.headers) {
            Some(map) => map,
            None => return Plan::Fallback,
        }
    } else {
        HeaderMap::new()
    };
    let input = RouteInput {
        method: &req.method,
        host: req.host,
        path: &path,
        query: req.query,
        headers: &map,
    };
    let routed = match phase::route((port, listener), &host, &input, &mut common.seen) {
        Ok(routed) => routed,
        Err(e) => return Plan::Respond(common, Err(e)),
    };
    let rule: &'s Rule = &routed.entry.rule;
    // Access that changes the request's headers (claims to headers), an external authorizer,
    // a global rate limit to wait for or a response to compress: hyper's path does it.
    if rule.access.as_ref().is_some_and(|a| a.edits_request())
        || rule.has_ext_auth()
        || rule.traffic.as_ref().is_some_and(|t| t.needs_hyper())
    {
        return Plan::Fallback;
    }
    // A CORS filter or an access policy reads the request's headers, which routing alone may
    // not have needed.
    let cors_map = if map.is_empty() && rule.needs_headers() {
        match head::header_map(req.headers) {
            Some(map) => Some(map),
            None => return Plan::Fallback,
        }
    } else {
        None
    };
    let input = RouteInput {
        headers: cors_map.as_ref().unwrap_or(&map),
        ..input
    };
    // Nothing to apply: a policy that edits the request went to hyper's path above.
    let mut admitted = None;
    let decided = phase::decide(
        &routed,
        &input,
        (info, &common.arrival.edge),
        None,
        &mut admitted,
        &mut common.seen,
        started,
    );
    let (weighted, cors) = match decided {
        Ok(Decision::Forward(w, cors)) => (w, cors),
        Ok(Decision::Preflight(resp) | Decision::Redirect(resp)) => {
            return Plan::Respond(common, Ok(resp));
        }
        Err(e) => return Plan::Respond(common, Err(e)),
    };
    // The body is whole in `rbuf` already: only its length is checked.
    if let Err(e) = phase::request_buffer(rule, Some(req.body_len as u64)) {
        return Plan::Respond(common, Err(e));
    }
    // Mirrors copy the body through hyper's body types; retries (`service` → `retry`) send
    // the request again, which the fast path's single exchange does not; session persistence
    // reads the request's cookies and adds its own to the response.
    if !rule.filters.mirrors.is_empty()
        || !weighted.filters.mirrors.is_empty()
        || rule.retries().is_some()
        || rule.session.is_some()
    {
        return Plan::Fallback;
    }
    let BackendTarget::Service(backend) = &weighted.target else {
        return Plan::Respond(common, Err(ProxyError::InvalidBackend));
    };
    if backend.protocol != AppProtocol::Http1 {
        return Plan::Fallback;
    }
    common.seen.reached.backend = Some(&backend.id);
    common.seen.reached.tls = Transport::of(&backend.tls);
    wbuf.clear();
    let uri = (&*path, &*target);
    let edge = &common.arrival.edge;
    if let Err(e) = upstream_head(edge, &routed, weighted, backend, &req, uri, map, wbuf) {
        return match e {
            Prepare::Fallback => Plan::Fallback,
            Prepare::Error(e) => Plan::Respond(common, Err(e)),
        };
    }
    wbuf.extend_from_slice(&rbuf[req.head_len..req.head_len + req.body_len]);
    let idempotent = matches!(
        req.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    );
    let fwd = Forward {
        rule,
        weighted,
        cors,
        backend,
        idempotent,
        head_request: common.head_request,
        client_close: common.close,
        alt_svc: routed.listener.alt_svc.as_ref(),
    };
    Plan::Forward(common, fwd)
}

enum Prepare {
    Fallback,
    Error(ProxyError),
}

/// Writes the upstream request head: straight from the client's header lines, or, when a
/// request header filter applies, through the hyper path's own head preparation on a map.
/// `(path, target)`: the normalised path, and the target with it (the client's own when
/// normalising changed nothing).
#[allow(clippy::too_many_arguments)]
fn upstream_head(
    edge: &Edge,
    routed: &Routed<'_>,
    weighted: &WeightedBackend,
    backend: &Backend,
    req: &head::RequestHead<'_>,
    (path, target): (&str, &str),
    map: HeaderMap,
    wbuf: &mut Vec<u8>,
) -> Result<(), Prepare> {
    let rule = &routed.entry.rule;
    if phase::rewrites_request(rule, weighted) {
        let headers = if map.is_empty() {
            head::header_map(req.headers).ok_or(Prepare::Fallback)?
        } else {
            map
        };
        let (mut parts, ()) = Request::new(()).into_parts();
        parts.method = req.method.clone();
        parts.uri = Uri::try_from(target).map_err(|_| Prepare::Fallback)?;
        parts.headers = headers;
        let path = phase::request_head(edge, routed, weighted, backend, &mut parts, false)
            .map_err(Prepare::Error)?;
        head::write_request_map(req, path.as_str(), &parts.headers, wbuf);
        return Ok(());
    }
    let rewrite = rewrite_of(rule, weighted);
    let target: Cow<'_, str> =
        match rewritten_target(path, req.query, rewrite, routed.entry.matched_prefix()) {
            None => Cow::Borrowed(target),
            Some(Ok(pq)) => Cow::Owned(pq.as_str().to_owned()),
            Some(Err(e)) => return Err(Prepare::Error(e)),
        };
    let host = rewrite
        .and_then(|r| r.hostname.as_ref())
        .map_or(req.host.as_bytes(), HeaderValue::as_bytes);
    let fwd = Forwarding {
        method: req.method_str,
        target: &target,
        host,
        client_host: req.host.as_bytes(),
        edge,
        scheme: routed.port.protocol.scheme(),
    };
    head::write_request(req, &fwd, wbuf);
    Ok(())
}

/// How [`watching`] ended.
enum Watched<R> {
    Done(R),
    /// The client hung up; the exchange's result if it ended within [`HANGUP_GRACE`] after.
    ClientGone(Option<R>),
}

/// Runs `exchange` while reading the client socket into `rbuf`: a client that hangs up
/// cancels the exchange (after [`HANGUP_GRACE`]), as dropping hyper's request future does.
/// What it sends meanwhile (a pipelined request) stays buffered, up to [`READ_AHEAD`].
async fn watching<I, F>(
    io: &mut I,
    rbuf: &mut BytesMut,
    mut exchange: Pin<&mut F>,
) -> Watched<F::Output>
where
    I: AsyncRead + ReadReady + Unpin,
    F: Future,
{
    loop {
        if rbuf.len() >= READ_AHEAD {
            return Watched::Done(exchange.await);
        }
        if rbuf.capacity() == 0 {
            // No buffer while the client is quiet ([`Conn::set_aside`]): one once it sends
            // something or hangs up.
            tokio::select! {
                biased;
                r = exchange.as_mut() => return Watched::Done(r),
                ready = io.read_ready() => match ready {
                    Ok(()) => *rbuf = stock::take(),
                    Err(_) => {
                        let r = tokio::time::timeout(HANGUP_GRACE, exchange).await.ok();
                        return Watched::ClientGone(r);
                    }
                },
            }
        }
        room_to_read(rbuf);
        tokio::select! {
            biased;
            r = exchange.as_mut() => return Watched::Done(r),
            read = io.read_buf(rbuf) => match read {
                Ok(0) | Err(_) => {
                    let r = tokio::time::timeout(HANGUP_GRACE, exchange).await.ok();
                    return Watched::ClientGone(r);
                }
                Ok(_) => {}
            },
        }
    }
}

/// Sends the request in `wbuf` on a raw connection and reads the response head, writing the
/// downstream head into `wbuf`. `Ok(None)`: the endpoint speaks HTTP/2 (hyper's job). A
/// reused connection that fails before any response byte is retried once on a new one for
/// idempotent requests (the backend closed it while it was idle).
async fn exchange(
    shared: &Shared,
    ubuf: &mut BytesMut,
    wbuf: &mut Vec<u8>,
    target: Target<'_>,
    fwd: &Forward<'_>,
    flags: &Flags,
) -> Result<Option<(RawConn, Answer)>, ProxyError> {
    let mut retried = false;
    loop {
        let mut conn = match shared.upstream.raw(target).await? {
            Raw::Conn(conn) => conn,
            // Hyper would send the request a second time: fail instead.
            Raw::Http2 if retried => {
                return Err(ProxyError::Upstream(
                    "the endpoint switched to HTTP/2".into(),
                ));
            }
            Raw::Http2 => return Ok(None),
        };
        ubuf.clear();
        let sent = send(conn.io(), wbuf).await;
        let answer = match sent {
            Ok(()) => read_head(conn.io(), ubuf, wbuf, fwd, flags).await,
            Err(e) => Err(ReadError::Io(e)),
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(ReadError::Io(_))
                if conn.reused && !retried && fwd.idempotent && ubuf.is_empty() =>
            {
                retried = true;
                continue;
            }
            Err(ReadError::Io(e)) => return Err(ProxyError::Upstream(Box::new(e))),
            Err(ReadError::Bad(e)) => return Err(ProxyError::Upstream(Box::new(e))),
        };
        return Ok(Some((conn, answer)));
    }
}

/// The read buffer as it was before [`Conn::set_aside`]: `request`, then what `rest` holds
/// (read meanwhile).
fn put_back(request: &[u8], rest: &[u8]) -> BytesMut {
    let mut buf = BytesMut::with_capacity(request.len() + rest.len());
    buf.extend_from_slice(request);
    buf.extend_from_slice(rest);
    buf
}

/// Readies a read buffer for the next socket read: an emptied one starts over at its front
/// ([`rewind`]), and one running short gets another [`BUF`].
fn room_to_read(buf: &mut BytesMut) {
    rewind(buf);
    if buf.capacity() - buf.len() < BUF / 4 {
        buf.reserve(BUF);
    }
}

/// Readies `ubuf` for the next read of a response. Without one yet, it waits until the
/// upstream has sent something before it takes a buffer: a request waiting on its upstream
/// holds none (8 KiB each, at thousands of requests in flight; BENCHMARKS.md).
async fn response_room<S: ReadReady>(up: &mut S, ubuf: &mut BytesMut) -> io::Result<()> {
    if ubuf.capacity() == 0 {
        up.read_ready().await?;
        *ubuf = stock::take();
    }
    room_to_read(ubuf);
    Ok(())
}

/// Empties `buf` for the next piece of a response body: [`BODY_BUF`] bytes when `long` (much
/// of the body is still to come, or the last read filled the buffer), else [`BUF`].
fn body_room(buf: &mut BytesMut, long: bool) {
    buf.clear();
    buf.reserve(if long { BODY_BUF } else { BUF });
}

/// Starts an empty buffer's window over at the front of its allocation. Consuming a message
/// (`advance`) moves the window forward, so without this each request on a keep-alive
/// connection would land in the next bytes of the buffer and every connection would sweep
/// through all of its buffer, touching a new page now and then; with many connections that
/// is megabytes of buffers made resident (about 6.5 MiB at 256 connections, BENCHMARKS.md).
/// Reusing the front keeps the bytes a connection touches per request in a few lines, as
/// nginx's buffers do.
fn rewind(buf: &mut BytesMut) {
    if buf.is_empty() && buf.capacity() < BUF {
        // Never allocates: it only takes back the space in front of the window, which with
        // nothing buffered is free; a buffer that cannot (a fresh one) is left as it is.
        let _ = buf.try_reclaim(BUF);
    }
}

async fn send(up: &mut Stream, wbuf: &[u8]) -> io::Result<()> {
    up.write_all(wbuf).await?;
    up.flush().await
}

enum ReadError {
    Io(io::Error),
    Bad(head::BadResponse),
}

/// Reads until `ubuf` holds a final response head (informational ones are dropped), and
/// writes the downstream head for it into `wbuf` (which held the request until then).
async fn read_head(
    up: &mut Stream,
    ubuf: &mut BytesMut,
    wbuf: &mut Vec<u8>,
    fwd: &Forward<'_>,
    flags: &Flags,
) -> Result<Answer, ReadError> {
    loop {
        if !ubuf.is_empty() {
            let mut storage = head::storage();
            match head::parse_response(ubuf, &mut storage, fwd.head_request) {
                Ok(head::Response::Final(head)) => {
                    return downstream_head(&head, wbuf, fwd, flags).map_err(ReadError::Bad);
                }
                Ok(head::Response::Informational(len)) => {
                    ubuf.advance(len);
                    continue;
                }
                Ok(head::Response::Partial) => {}
                Err(e) => return Err(ReadError::Bad(e)),
            }
        }
        response_room(up, ubuf).await.map_err(ReadError::Io)?;
        match up.read_buf(ubuf).await {
            Ok(0) => return Err(ReadError::Io(truncated())),
            Ok(_) => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
}

/// Writes the downstream response head for an upstream one.
fn downstream_head(
    head: &head::ResponseHead<'_>,
    wbuf: &mut Vec<u8>,
    fwd: &Forward<'_>,
    flags: &Flags,
) -> Result<Answer, head::BadResponse> {
    let down_close = fwd.client_close || flags.draining.load(Ordering::Relaxed);
    wbuf.clear();
    if !phase::rewrites_response(fwd.rule, fwd.weighted, fwd.cors.as_ref()) {
        let date = (!head.has_date).then(http_date);
        let tail = Tail {
            framing: head.framing,
            close: down_close,
            date: date.as_ref().map(|d| &d[..]),
            alt_svc: fwd.alt_svc.map(http::HeaderValue::as_bytes),
        };
        head::write_response(head, tail, wbuf);
    } else {
        let Some(mut map) = head::header_map(head.headers) else {
            return Err(head::BadResponse("invalid header line"));
        };
        phase::response_head(&mut map, fwd.rule, fwd.weighted, fwd.cors.as_ref(), false);
        let date = (!map.contains_key(DATE)).then(http_date);
        let tail = Tail {
            framing: head.framing,
            close: down_close,
            date: date.as_ref().map(|d| &d[..]),
            alt_svc: fwd.alt_svc.map(http::HeaderValue::as_bytes),
        };
        head::write_response_map(head.status, &map, tail, wbuf);
    }
    Ok(Answer {
        status: head.status,
        framing: head.framing,
        upstream_close: head.close,
        head_len: head.head_len,
        down_close,
    })
}

/// Appends `data` as one chunk (nothing for no data: an empty chunk would end the body).
fn chunk(data: &[u8], out: &mut Vec<u8>) {
    use std::io::Write as _;
    if !data.is_empty() {
        let _ = write!(out, "{:x}\r\n", data.len());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the upstream closed mid-message",
    )
}

/// The `Date` header value, formatted once a second per thread.
fn http_date() -> [u8; 29] {
    thread_local! {
        static CACHED: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
    }
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != secs {
            let text = httpdate::fmt_http_date(now);
            let mut bytes = [b' '; 29];
            let n = text.len().min(29);
            bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
            *c = (secs, bytes);
        }
        c.1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_waiting_for_its_response_holds_no_upstream_buffer() {
        use std::task::Poll;
        use tokio::io::AsyncWriteExt as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let (mut origin, _) = accepted.unwrap();
        let mut up: Stream = Stream::Left(client.unwrap());
        let mut ubuf = BytesMut::new();
        {
            let room = response_room(&mut up, &mut ubuf);
            let mut room = std::pin::pin!(room);
            let polled = std::future::poll_fn(|cx| Poll::Ready(room.as_mut().poll(cx))).await;
            assert!(polled.is_pending(), "nothing from the upstream yet");
        }
        assert_eq!(ubuf.capacity(), 0, "no buffer taken while waiting");
        origin.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        response_room(&mut up, &mut ubuf).await.unwrap();
        assert!(
            ubuf.capacity() >= BUF / 4,
            "a buffer once the response arrives"
        );
        let read = up.read_buf(&mut ubuf).await.unwrap();
        assert_eq!(&ubuf[..read], b"HTTP/1.1 200 OK\r\n");
    }

    #[tokio::test]
    async fn a_request_waiting_for_its_response_holds_no_client_buffer() {
        use std::task::Poll;
        use tokio::io::AsyncWriteExt as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let (mut client, mut io) = (client.unwrap(), accepted.unwrap().0);
        // The request was read (up to the socket's end, which clears its read readiness) and
        // the read buffer given back ([`Conn::set_aside`]); the response is not here yet.
        let blocked = io.try_read(&mut [0; 16]).unwrap_err();
        assert_eq!(blocked.kind(), io::ErrorKind::WouldBlock);
        let mut rbuf = BytesMut::new();
        let (_tx, rx) = tokio::sync::oneshot::channel::<()>();
        {
            let exchange = std::pin::pin!(rx);
            let watched = watching(&mut io, &mut rbuf, exchange);
            let mut watched = std::pin::pin!(watched);
            let polled = std::future::poll_fn(|cx| Poll::Ready(watched.as_mut().poll(cx))).await;
            assert!(polled.is_pending(), "the exchange goes on");
        }
        assert_eq!(rbuf.capacity(), 0, "no buffer while the client is quiet");
        // The client pipelines its next request meanwhile: read ahead, into a buffer taken then.
        client.write_all(b"GET /next HTTP/1.1\r\n").await.unwrap();
        let exchange = std::pin::pin!(std::future::pending::<()>());
        let watched = watching(&mut io, &mut rbuf, exchange);
        let read = tokio::time::timeout(std::time::Duration::from_millis(200), watched).await;
        assert!(read.is_err(), "still watching: the exchange never ends");
        assert_eq!(&rbuf[..], b"GET /next HTTP/1.1\r\n");
        assert!(rbuf.capacity() >= BUF / 4, "a buffer once the client sent");
    }

    #[test]
    fn a_request_set_aside_is_put_back_in_front_of_what_followed() {
        let back = put_back(b"GET / HTTP/1.1\r\n\r\n", b"GET /2");
        assert_eq!(&back[..], b"GET / HTTP/1.1\r\n\r\nGET /2");
        assert!(put_back(b"", b"").is_empty());
    }

    #[test]
    fn rewind_reuses_the_front_of_an_emptied_buffer_without_allocating() {
        let mut buf = BytesMut::with_capacity(BUF);
        let front = buf.as_ptr();
        buf.extend_from_slice(&[b'x'; 300]);
        buf.advance(300);
        assert!(buf.capacity() < BUF, "advance moved the window forward");
        rewind(&mut buf);
        assert_eq!(buf.capacity(), BUF);
        assert_eq!(buf.as_ptr(), front, "the same allocation, from its front");

        // Bytes still buffered (a pipelined request) stay where they are.
        buf.extend_from_slice(b"GET / HTTP/1.1\r\n");
        buf.advance(4);
        let at = buf.as_ptr();
        rewind(&mut buf);
        assert_eq!(buf.as_ptr(), at);
        assert_eq!(&buf[..], b"/ HTTP/1.1\r\n");

        // A fresh, empty buffer is left alone (nothing to reclaim, nothing allocated).
        let mut fresh = BytesMut::new();
        rewind(&mut fresh);
        assert_eq!(fresh.capacity(), 0);
    }
}
