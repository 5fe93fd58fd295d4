//! HTTP/1.1 heads for the fast path: parse a request or response head (httparse) and write the
//! head for the next hop straight from the parsed header lines, without building a
//! `HeaderMap`. No I/O.
//!
//! Hop hygiene matches `proxy::headers` (RFC 9110 §7.6.1): `Connection` and the headers it
//! names, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding` and `Upgrade`
//! are not forwarded; the request gains `X-Forwarded-For/-Proto/-Host` as the hyper path adds
//! them. Message framing is never copied: pier writes `Content-Length` (or
//! `Transfer-Encoding: chunked`) from the length it actually sends, so neither a header named
//! in `Connection` nor a header filter can make the two hops disagree on where a message ends. Anything the fast path does not handle itself is reported as [`Parsed::Fallback`], and
//! the connection goes to hyper with the bytes replayed.
//!
//! What `h1` calls per request is `#[inline]` (`line` and the forwarding headers' closure
//! `#[inline(always)]`), so that it is inlined whichever codegen unit rustc puts this module
//! in: when the SecurityPolicy modules moved it out of `h1`'s unit, parsing and writing the
//! heads became calls and a plain request cost ~420 more instructions (BENCHMARKS.md).

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

#[cfg(test)]
use crate::proxy::h1wire::lower_eq;
pub use crate::proxy::h1wire::{
    BadResponse, Framing, MAX_HEAD, Response, ResponseHead, Storage, parse_response, storage,
};
use crate::proxy::h1wire::{ConnectionTokens, Name, end_to_end, line, parse_length};
use crate::proxy::observe::forwarded::{Edge, is_edge_header};
use crate::proxy::observe::trace::context::is_trace_header;
use httparse::Header;

/// Largest request body buffered here before forwarding (like nginx's request buffering);
/// a larger one streams through hyper.
pub const MAX_BODY: usize = 64 * 1024;

/// A request head the fast path can forward, borrowed from the read buffer.
#[derive(Debug)]
pub struct RequestHead<'b> {
    pub method: Method,
    pub method_str: &'b str,
    /// Origin-form request target (path and query).
    pub target: &'b str,
    pub path: &'b str,
    pub query: Option<&'b str>,
    /// The Host header as sent (port included).
    pub host: &'b str,
    pub headers: &'b [Header<'b>],
    /// The head as received (`head_len` bytes): header lines laid out as pier writes them
    /// are copied from here in runs ([`copy_lines`]).
    pub raw: &'b [u8],
    pub head_len: usize,
    pub body_len: usize,
    /// The client sent a `Content-Length` (the upstream gets one too, with `body_len`).
    pub has_length: bool,
    /// `Connection: close`.
    pub close: bool,
    /// `Connection` names headers besides `close`/`keep-alive`: they are not forwarded.
    pub connection_names: bool,
}

#[derive(Debug)]
pub enum Parsed<T> {
    /// More bytes of the head are needed.
    Partial,
    /// The head is complete; its body (at most [`MAX_BODY`]) needs this many bytes in all.
    Body(usize),
    Ready(T),
    /// Valid or not, hyper handles it: HTTP/1.0, HTTP/2 prior knowledge, upgrades,
    /// `Expect`, `Transfer-Encoding`, absolute-form or CONNECT targets, large heads and
    /// bodies, malformed input.
    Fallback,
    /// The request line does not end within [`MAX_HEAD`]: its target is too long (414; a
    /// long head whose request line is whole goes to hyper, which answers 431).
    TargetTooLong,
}

/// Parses the request head at the start of `buf`; `Ready` once the whole head and its
/// (small) body are in `buf`.
#[inline]
pub fn parse_request<'b>(buf: &'b [u8], storage: &'b mut Storage<'b>) -> Parsed<RequestHead<'b>> {
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, storage) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Parsed::Partial,
        Ok(httparse::Status::Partial) if !buf[..MAX_HEAD].contains(&b'\n') => {
            return Parsed::TargetTooLong;
        }
        _ => return Parsed::Fallback,
    };
    let (Some(method_str), Some(target), Some(1)) = (req.method, req.path, req.version) else {
        return Parsed::Fallback;
    };
    if !target.starts_with('/') || !target.bytes().all(plain_target_byte) {
        return Parsed::Fallback;
    }
    let Ok(method) = Method::from_bytes(method_str.as_bytes()) else {
        return Parsed::Fallback;
    };
    if method == Method::CONNECT {
        return Parsed::Fallback;
    }
    let headers: &'b [Header<'b>] = req.headers;
    let mut host = None;
    let mut body_len: Option<usize> = None;
    let mut connection = ConnectionTokens::default();
    for h in headers {
        match Name::of(h.name) {
            Name::Host => {
                if host.is_some() {
                    return Parsed::Fallback;
                }
                match std::str::from_utf8(h.value) {
                    Ok(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic()) => {
                        host = Some(v);
                    }
                    _ => return Parsed::Fallback,
                }
            }
            Name::ContentLength => {
                let Some(n) = parse_length(h.value) else {
                    return Parsed::Fallback;
                };
                if body_len.is_some_and(|m| m != n) {
                    return Parsed::Fallback;
                }
                body_len = Some(n);
            }
            Name::Connection => connection.read(h.value),
            Name::TransferEncoding | Name::Upgrade | Name::Expect => return Parsed::Fallback,
            Name::Date | Name::OtherHop | Name::Other => {}
        }
    }
    let Some(host) = host else {
        return Parsed::Fallback;
    };
    if connection.upgrade {
        return Parsed::Fallback;
    }
    let has_length = body_len.is_some();
    let body_len = body_len.unwrap_or(0);
    if body_len > MAX_BODY {
        return Parsed::Fallback;
    }
    if buf.len() < head_len + body_len {
        return Parsed::Body(head_len + body_len);
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    Parsed::Ready(RequestHead {
        method,
        method_str,
        target,
        path,
        query,
        host,
        headers,
        raw: &buf[..head_len],
        head_len,
        body_len,
        has_length,
        close: connection.close,
        connection_names: connection.names,
    })
}

/// Bytes the `http` crate accepts in a path and query without question: visible ASCII less
/// the few it treats specially. Anything else goes to hyper, which decides.
fn plain_target_byte(b: u8) -> bool {
    b.is_ascii_graphic()
        && !matches!(
            b,
            b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}' | b'#'
        )
}

/// What the request to the upstream says besides the client's own header lines.
pub struct Forwarding<'a> {
    pub method: &'a str,
    /// Path and query to send.
    pub target: &'a str,
    /// The `Host` to send (the client's, or a URLRewrite hostname).
    pub host: &'a [u8],
    /// The client's Host, for `X-Forwarded-Host`.
    pub client_host: &'a [u8],
    /// The forwarding headers and request ID (the same policy as the hyper path's).
    pub edge: &'a Edge,
    pub scheme: &'static str,
}

/// Writes the upstream request head: the request line, the client's header lines less the
/// hop-by-hop ones, `Host`, the forwarding headers and request ID ([`Edge::each`]) and pier's
/// own `Content-Length`.
#[inline]
pub fn write_request(head: &RequestHead<'_>, fwd: &Forwarding<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(fwd.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(fwd.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    // With tracing on, pier writes `traceparent` and `tracestate` itself.
    let traced = fwd.edge.trace.is_some();
    copy_lines(head.raw, head.headers, out, |name| {
        end_to_end(name, head.headers, head.connection_names).is_some_and(|kind| {
            !(matches!(kind, Name::Host | Name::ContentLength)
                || is_edge_header(name)
                || (traced && is_trace_header(name)))
        })
    });
    line(out, b"host", fwd.host);
    // Inlined at each of `each`'s calls, as the lines of constant names they are.
    fwd.edge.each(
        fwd.scheme,
        Some(fwd.client_host),
        #[inline(always)]
        |name, value| line(out, name.as_str().as_bytes(), value),
    );
    request_length(head, out);
    out.extend_from_slice(b"\r\n");
}

/// `Content-Length` for the body pier forwards, when the client framed one.
fn request_length(head: &RequestHead<'_>, out: &mut Vec<u8>) {
    if head.has_length || head.body_len > 0 {
        content_length(head.body_len as u64, out);
    }
}

fn content_length(n: u64, out: &mut Vec<u8>) {
    // `itoa`, not `write!`: the formatting machinery cost ~300 instructions per response.
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Framing headers are pier's to write, never copied from a map or a peer.
fn is_framing(name: &str) -> bool {
    Name::of(name).is_framing()
}

/// The client's header lines as a map (for header matches and request header filters).
/// `None` if a line is not a valid `http` header.
pub fn header_map(headers: &[Header<'_>]) -> Option<HeaderMap> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for h in headers {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(h.value).ok()?;
        map.append(name, value);
    }
    Some(map)
}

/// Writes a request head from a method, target and header map (the request filters' result),
/// with pier's own `Content-Length` for `head`'s body.
pub fn write_request_map(
    head: &RequestHead<'_>,
    target: &str,
    headers: &HeaderMap,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(head.method_str.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        if !is_framing(name.as_str()) {
            line(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    request_length(head, out);
    out.extend_from_slice(b"\r\n");
}

/// Writes the header lines that `keep` keeps, each as [`line`] writes it. Consecutive kept
/// lines that `raw` (the head they were parsed from) already holds in exactly that form
/// (`name: value` and CRLF, as most peers write them) are copied from it as one piece: the
/// same bytes, with one copy per run instead of four per line.
#[inline(always)]
fn copy_lines(raw: &[u8], headers: &[Header<'_>], out: &mut Vec<u8>, keep: impl Fn(&str) -> bool) {
    let base = raw.as_ptr() as usize;
    // The run of `raw` not yet copied out.
    let mut run = 0..0;
    for h in headers {
        if !keep(h.name) {
            out.extend_from_slice(&raw[run.clone()]);
            run = 0..0;
            continue;
        }
        // Where the line sits in `raw`, if it is there as `line` would write it.
        let start = (h.name.as_ptr() as usize).wrapping_sub(base);
        let colon = start.wrapping_add(h.name.len());
        let value = (h.value.as_ptr() as usize).wrapping_sub(base);
        let end = value.wrapping_add(h.value.len());
        let exact = start < colon
            && value == colon.wrapping_add(2)
            && raw.get(colon..value) == Some(b": ")
            && raw.get(end..end.wrapping_add(2)) == Some(b"\r\n");
        if !exact {
            out.extend_from_slice(&raw[run.clone()]);
            run = 0..0;
            line(out, h.name.as_bytes(), h.value);
        } else if run.end == start && !run.is_empty() {
            run.end = end + 2;
        } else {
            out.extend_from_slice(&raw[run.clone()]);
            run = start..end + 2;
        }
    }
    out.extend_from_slice(&raw[run]);
}

/// How the downstream response ends its head.
#[derive(Clone, Copy, Debug)]
pub struct Tail<'a> {
    /// The downstream framing: `Length` and `Chunked` are written here (a body the upstream
    /// delimits by closing goes out chunked); `Empty` keeps the upstream's `Content-Length`
    /// (a HEAD or 304 describes the full response's length).
    pub framing: Framing,
    /// `Connection: close` (the client asked, pier is draining, or the body ends at EOF).
    pub close: bool,
    /// A `Date` to add (the upstream sent none).
    pub date: Option<&'a [u8]>,
    /// The listener's `Alt-Svc` (it serves HTTP/3), on forwarded responses.
    pub alt_svc: Option<&'a [u8]>,
}

/// Writes the status line.
pub fn write_status(status: StatusCode, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Writes the downstream response head from the upstream's header lines, less the hop-by-hop
/// ones and the framing (which [`Tail`] writes).
#[inline]
pub fn write_response(head: &ResponseHead<'_>, tail: Tail<'_>, out: &mut Vec<u8>) {
    write_status(head.status, out);
    copy_lines(head.raw, head.headers, out, |name| {
        end_to_end(name, head.headers, head.connection_names)
            .is_some_and(|kind| tail.framing == Framing::Empty || !kind.is_framing())
    });
    write_tail(tail, out);
}

/// Writes a response head from a status and a header map (response filters, pier's own
/// responses).
pub fn write_response_map(
    status: StatusCode,
    headers: &HeaderMap,
    tail: Tail<'_>,
    out: &mut Vec<u8>,
) {
    write_status(status, out);
    for (name, value) in headers {
        if tail.framing != Framing::Empty && is_framing(name.as_str()) {
            continue;
        }
        line(out, name.as_str().as_bytes(), value.as_bytes());
    }
    write_tail(tail, out);
}

fn write_tail(tail: Tail<'_>, out: &mut Vec<u8>) {
    match tail.framing {
        Framing::Length(n) => content_length(n, out),
        Framing::Chunked | Framing::Eof => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::Empty => {}
    }
    if let Some(date) = tail.date {
        line(out, b"date", date);
    }
    if let Some(alt_svc) = tail.alt_svc {
        line(out, b"alt-svc", alt_svc);
    }
    if tail.close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
