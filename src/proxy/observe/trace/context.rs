//! W3C trace context (`traceparent`, `tracestate`): what a request carries in and out, and
//! one request's [`Span`] (its ids, the `traceparent` pier sends upstream). Written by
//! `observe::forwarded` with the other edge headers; exported by the parent module.

use std::time::SystemTime;

use http::Method;
use http::header::{HeaderName, HeaderValue};

pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// A `tracestate` longer than this (all its lines joined), or with more list members than
/// [`MAX_TRACESTATE_MEMBERS`], is not passed on. The W3C spec asks vendors to propagate at
/// least 512 characters and allows at most 32 members.
pub const MAX_TRACESTATE: usize = 512;
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A valid `traceparent`: what pier continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

/// One request's trace context: created when the request arrives, carried in [`Edge`] (boxed:
/// with tracing off a request carries one null pointer) so both request paths write it
/// upstream, finished with the response head.
#[derive(Clone, Debug)]
pub struct Span {
    pub(super) trace_id: [u8; 16],
    pub(super) span_id: [u8; 8],
    /// The incoming `traceparent`'s span (a remote parent).
    pub(super) parent: Option<[u8; 8]>,
    /// pier's `traceparent` for the upstream request.
    pub(super) traceparent: [u8; 55],
    pub(super) tracestate: Option<HeaderValue>,
    /// What the exported span needs of the request; only for sampled requests.
    pub(super) record: Option<Record>,
}

#[derive(Clone, Debug)]
pub(super) struct Record {
    pub(super) start: SystemTime,
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) host: String,
}

// === traceparent ===

/// Parses a `traceparent` value (W3C Trace Context, level 1, version `00` rules): `version
/// "-" trace-id "-" parent-id "-" trace-flags`, lowercase hex, 55 characters; trace-id and
/// parent-id not all zeros; version `ff` invalid. A later version is read by the same rules
/// from its first 55 characters, which must be all of it or be followed by `-` (the spec's
/// forward compatibility). Surrounding whitespace (HTTP's OWS) is ignored.
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    let v = value.trim_ascii();
    if v.len() < 55 {
        return None;
    }
    let version = hex_byte(&v[0..2])?;
    match version {
        0x00 if v.len() != 55 => return None,
        0xff => return None,
        _ if v.len() > 55 && v[55] != b'-' => return None,
        _ => {}
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let mut trace_id = [0u8; 16];
    for (i, b) in trace_id.iter_mut().enumerate() {
        *b = hex_byte(&v[3 + 2 * i..5 + 2 * i])?;
    }
    let mut span_id = [0u8; 8];
    for (i, b) in span_id.iter_mut().enumerate() {
        *b = hex_byte(&v[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&v[53..55])?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id,
        span_id,
        flags,
    })
}

/// Two lowercase hex digits.
fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(two[0])? << 4 | digit(two[1])?)
}

/// `00-<trace-id>-<span-id>-<flags>`.
pub fn format_traceparent(trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) -> [u8; 55] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; 55];
    out[0] = b'0';
    out[1] = b'0';
    for (i, b) in trace_id.iter().enumerate() {
        out[3 + 2 * i] = HEX[usize::from(b >> 4)];
        out[4 + 2 * i] = HEX[usize::from(b & 0xf)];
    }
    for (i, b) in span_id.iter().enumerate() {
        out[36 + 2 * i] = HEX[usize::from(b >> 4)];
        out[37 + 2 * i] = HEX[usize::from(b & 0xf)];
    }
    out[53] = b'0';
    out[54] = if sampled { b'1' } else { b'0' };
    out
}

impl Parent {
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// The client's trace headers, gathered in one pass.
#[derive(Default)]
pub(super) struct Received<'h> {
    parents: usize,
    parent: Option<&'h [u8]>,
    state: Vec<&'h [u8]>,
}

impl<'h> Received<'h> {
    pub(super) fn read(lines: impl Iterator<Item = (&'h str, &'h [u8])>) -> Self {
        let mut r = Self::default();
        for (name, value) in lines {
            if name.eq_ignore_ascii_case(TRACEPARENT.as_str()) {
                r.parents += 1;
                r.parent = Some(value);
            } else if name.eq_ignore_ascii_case(TRACESTATE.as_str()) {
                r.state.push(value);
            }
        }
        r
    }

    /// A valid parent: exactly one `traceparent` line, well formed.
    pub(super) fn parent(&self) -> Option<Parent> {
        if self.parents != 1 {
            return None;
        }
        parse_traceparent(self.parent?)
    }

    /// The `tracestate` lines joined, when within bounds.
    pub(super) fn state(&self) -> Option<HeaderValue> {
        let mut joined = Vec::new();
        let mut members = 0;
        for line in &self.state {
            for member in line.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                if member.is_empty() {
                    continue;
                }
                members += 1;
                if !joined.is_empty() {
                    joined.push(b',');
                }
                joined.extend_from_slice(member);
            }
        }
        if joined.is_empty() || joined.len() > MAX_TRACESTATE || members > MAX_TRACESTATE_MEMBERS {
            return None;
        }
        HeaderValue::from_bytes(&joined).ok()
    }
}

/// Whether `name` is one of the trace context headers (any case).
pub fn is_trace_header(name: &str) -> bool {
    name.eq_ignore_ascii_case(TRACEPARENT.as_str())
        || name.eq_ignore_ascii_case(TRACESTATE.as_str())
}

// === impl Span ===

impl Span {
    pub fn trace_id(&self) -> TraceIdText {
        TraceIdText(self.trace_id)
    }

    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    pub fn sampled(&self) -> bool {
        self.record.is_some()
    }

    /// The headers to send upstream: `traceparent`, then `tracestate` when one is passed on.
    pub fn each(&self, mut f: impl FnMut(&HeaderName, &[u8])) {
        f(&TRACEPARENT, &self.traceparent);
        if let Some(state) = &self.tracestate {
            f(&TRACESTATE, state.as_bytes());
        }
    }
}

/// A trace ID as 32 lowercase hex digits, written without allocating.
pub struct TraceIdText([u8; 16]);

impl std::fmt::Display for TraceIdText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}
