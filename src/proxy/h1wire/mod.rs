//! The HTTP/1.1 wire format both request paths share with the upstream stage: response heads
//! (httparse, framing by RFC 9112 §6.3), header-line names told apart without hashing, and
//! chunked framing ([`chunked`]). No I/O, no stage: `downstream::h1` relays with it (its
//! request heads and writers are in `downstream/h1/head.rs`), `upstream` reads the raw
//! connections' responses for hyper's request path with it.
//!
//! What is called per request is `#[inline]`, so that it is inlined whichever codegen unit
//! rustc puts this module in (BENCHMARKS.md: a call here cost ~420 instructions a request).

pub mod chunked;

use std::mem::MaybeUninit;

use http::StatusCode;
use httparse::Header;

/// Most header lines a head may have (hyper's default too).
pub const MAX_HEADERS: usize = 100;

/// Room for a head's header lines, filled by the parser. Left uninitialised: writing 100
/// empty lines (3.2 KiB) before every parse cost more than parsing a short head.
pub type Storage<'b> = [MaybeUninit<Header<'b>>; MAX_HEADERS];

/// Largest head read: a larger request head goes to hyper (which answers 431), a larger
/// response head is a bad response.
pub const MAX_HEAD: usize = 64 * 1024;

/// An empty [`Storage`].
pub fn storage<'b>() -> Storage<'b> {
    [const { MaybeUninit::uninit() }; MAX_HEADERS]
}

/// What the `Connection` header lines of a head say.
#[derive(Debug, Default)]
pub struct ConnectionTokens {
    pub close: bool,
    pub upgrade: bool,
    /// Tokens besides `close`, `keep-alive` and `upgrade`: header names not to forward.
    pub names: bool,
}

impl ConnectionTokens {
    pub fn read(&mut self, value: &[u8]) {
        for token in tokens(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            } else if !token.eq_ignore_ascii_case(b"keep-alive") {
                self.names = true;
            }
        }
    }
}

/// What a header line of a head that pier forwards is, or `None` when the line stops here: a
/// hop-by-hop name ([`Name::is_hop`]) or one a `Connection` line of the same head names. The
/// fast path's heads both ways and the raw upstream responses of hyper's path
/// (`upstream::h1`) keep only such lines.
#[inline]
pub fn end_to_end(name: &str, headers: &[Header<'_>], connection_names: bool) -> Option<Name> {
    let kind = Name::of(name);
    (!kind.is_hop() && !named_by_connection(name, headers, connection_names)).then_some(kind)
}

/// Named by a `Connection` line of `headers` (checked only when one names any header: the
/// flag is tested where the caller is, the lines scanned out of line).
#[inline(always)]
fn named_by_connection(name: &str, headers: &[Header<'_>], connection_names: bool) -> bool {
    connection_names && connection_lines_name(name, headers)
}

/// A `Connection` line of `headers` names `name`.
fn connection_lines_name(name: &str, headers: &[Header<'_>]) -> bool {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| tokens(h.value))
        .any(|t| t.eq_ignore_ascii_case(name.as_bytes()))
}

/// Writes the header line `name: value`. `#[inline(always)]`: several calls per head (`Host`,
/// the forwarding headers), each four copies, most of a constant length; `#[inline]` alone
/// left it a call of ~80 instructions.
#[inline(always)]
pub fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A Content-Length value: digits only, within `usize`.
pub fn parse_length(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 19 digits: below `u64::MAX`.
    let n = v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    usize::try_from(n).ok()
}

/// The comma-separated tokens of a header value, trimmed.
pub fn tokens(v: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    v.split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// What a header line's name means to the fast path. Every line of every request and
/// response is told apart here, by its length first, so most names cost one comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    Host,
    ContentLength,
    TransferEncoding,
    Connection,
    Upgrade,
    Expect,
    Date,
    /// `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`: hop-by-hop, nothing more to read.
    OtherHop,
    Other,
}

impl Name {
    pub fn of(name: &str) -> Name {
        let is = |n: &str| lower_eq(name.as_bytes(), n.as_bytes());
        match name.len() {
            2 if is("te") => Name::OtherHop,
            4 if is("host") => Name::Host,
            4 if is("date") => Name::Date,
            6 if is("expect") => Name::Expect,
            7 if is("upgrade") => Name::Upgrade,
            7 if is("trailer") => Name::OtherHop,
            10 if is("connection") => Name::Connection,
            10 if is("keep-alive") => Name::OtherHop,
            14 if is("content-length") => Name::ContentLength,
            16 if is("proxy-connection") => Name::OtherHop,
            17 if is("transfer-encoding") => Name::TransferEncoding,
            _ => Name::Other,
        }
    }

    /// Always hop-by-hop ([`HOP_BY_HOP`](crate::proxy::headers::HOP_BY_HOP)).
    pub fn is_hop(self) -> bool {
        matches!(
            self,
            Name::Connection | Name::Upgrade | Name::TransferEncoding | Name::OtherHop
        )
    }

    /// Framing, which pier writes itself.
    pub fn is_framing(self) -> bool {
        matches!(self, Name::ContentLength | Name::TransferEncoding)
    }
}

/// `name` in any case equals `lower`, a name of lowercase letters and `-` of the same length.
/// A byte matches a letter in either case, and `-` as itself or as CR, which no header name
/// holds (the parser takes names as tokens). Eight bytes at a time: `eq_ignore_ascii_case`
/// lowered each byte of both sides, and this runs for every header line (twice).
pub fn lower_eq(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = 0x2020_2020_2020_2020;
    fn word(b: &[u8]) -> u64 {
        u64::from_le_bytes(b.try_into().unwrap_or_default())
    }
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n < 8 {
        return name.iter().zip(lower).all(|(a, b)| a | 0x20 == *b);
    }
    // Whole words from the front, then one word ending at the last byte (it may overlap).
    let mut i = 0;
    while i + 8 <= n {
        if word(&name[i..i + 8]) | CASE != word(&lower[i..i + 8]) {
            return false;
        }
        i += 8;
    }
    i == n || word(&name[n - 8..]) | CASE == word(&lower[n - 8..])
}

/// How a response body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body: HEAD, 204, 304.
    Empty,
    Length(u64),
    Chunked,
    /// Until the upstream closes.
    Eof,
}

/// A response head from an upstream.
#[derive(Debug)]
pub struct ResponseHead<'b> {
    pub status: StatusCode,
    pub headers: &'b [Header<'b>],
    /// The head as received (`head_len` bytes).
    pub raw: &'b [u8],
    pub head_len: usize,
    pub framing: Framing,
    /// The upstream will not take another request on this connection.
    pub close: bool,
    pub connection_names: bool,
    pub has_date: bool,
}

/// A response head pier cannot forward.
#[derive(Debug, thiserror::Error)]
#[error("invalid upstream response: {0}")]
pub struct BadResponse(pub &'static str);

/// A response head, or what stands in its place.
#[derive(Debug)]
pub enum Response<'b> {
    /// More bytes are needed.
    Partial,
    /// An informational (1xx) head of this length: skipped, the final one follows.
    Informational(usize),
    Final(ResponseHead<'b>),
}

/// Parses the response head at the start of `buf`. `head_request`: the body is empty
/// whatever the head says.
pub fn parse_response<'b>(
    buf: &'b [u8],
    storage: &'b mut Storage<'b>,
    head_request: bool,
) -> Result<Response<'b>, BadResponse> {
    let mut resp = httparse::Response::new(&mut []);
    let head_len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, storage)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(Response::Partial),
        Ok(httparse::Status::Partial) => return Err(BadResponse("head too large")),
        Err(_) => return Err(BadResponse("malformed head")),
    };
    let code = resp.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| BadResponse("bad status code"))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(BadResponse("101 without an upgrade request"));
    }
    if status.is_informational() {
        return Ok(Response::Informational(head_len));
    }
    let headers: &'b [Header<'b>] = resp.headers;
    let mut connection = ConnectionTokens::default();
    let mut length: Option<u64> = None;
    let mut chunked = None;
    let mut has_date = false;
    for h in headers {
        match Name::of(h.name) {
            Name::ContentLength => {
                let n = parse_length(h.value).ok_or(BadResponse("bad content-length"))? as u64;
                if length.is_some_and(|m| m != n) {
                    return Err(BadResponse("conflicting content-length"));
                }
                length = Some(n);
            }
            Name::TransferEncoding => {
                // Chunked only if it is the last coding.
                let last = tokens(h.value).next_back();
                chunked = Some(last.is_some_and(|t| t.eq_ignore_ascii_case(b"chunked")));
            }
            Name::Connection => connection.read(h.value),
            Name::Date => has_date = true,
            _ => {}
        }
    }
    let no_body =
        head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    let framing = match (no_body, chunked, length) {
        (true, _, _) => Framing::Empty,
        (false, Some(true), _) => Framing::Chunked,
        (false, Some(false), _) => Framing::Eof,
        (false, None, Some(n)) => Framing::Length(n),
        (false, None, None) => Framing::Eof,
    };
    // Both framings at once (RFC 9112 §6.3): chunked wins, and the connection is not reused.
    // HTTP/1.0 closes unless it says keep-alive; keep it simple and never reuse it.
    let close = connection.close
        || resp.version != Some(1)
        || framing == Framing::Eof
        || (chunked.is_some() && length.is_some());
    Ok(Response::Final(ResponseHead {
        status,
        headers,
        raw: &buf[..head_len],
        head_len,
        framing,
        close,
        // `upgrade` in a response's Connection is one more name to drop.
        connection_names: connection.names || connection.upgrade,
        has_date,
    }))
}
