//! The edge policy for forwarding headers and the request ID, one for both request paths
//! (`h1` writes it as header lines, `service` into a `HeaderMap`).
//!
//! ```text
//! request head ─> Edge::read (trusted hop?) ─> client, request ID, what is kept
//!                                          └─> Edge::each ─> X-Forwarded-For/-Proto/-Host,
//!                                                            Forwarded, X-Request-Id upstream
//! ```
//!
//! Whether the client's forwarding headers are believed depends only on who sent the request:
//! the connection's client address ([`ConnInfo::peer`], which on a PROXY protocol port is the
//! address the header named, not the balancer) must be in `--trusted-proxies`. An L4 balancer
//! that speaks the PROXY protocol relays the client's bytes without writing any of these
//! headers, so believing them because the *balancer* is trusted would let any client behind it
//! spoof them; the balancer is already trusted for the address it names (the port opted in).
//!
//! From an untrusted hop pier replaces everything: `X-Forwarded-For` is the client address,
//! `-Proto` and `-Host` what the client used, `Forwarded` (only when the client sent one) pier's
//! own element, and `X-Request-Id` a new ID. From a trusted hop it appends the hop's address
//! to `X-Forwarded-For` (and its element to `Forwarded`), keeps `-Proto`, `-Host` and
//! `X-Request-Id` when present, and takes the client address for the access log from the
//! `X-Forwarded-For` chain: the right-most address that is not itself a trusted proxy (nginx's
//! `real_ip_recursive on`).

use std::net::IpAddr;

use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::trace::context::{Span, TRACEPARENT, TRACESTATE};
use crate::model::net::TrustedProxies;
use crate::proxy::conn_info::Hop;
use crate::proxy::headers::{X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO};

pub const FORWARDED: HeaderName = http::header::FORWARDED;
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The headers this policy writes; the client's own lines of them are never copied as they are.
pub const EDGE_HEADERS: [HeaderName; 5] = [
    X_FORWARDED_FOR,
    X_FORWARDED_PROTO,
    X_FORWARDED_HOST,
    FORWARDED,
    X_REQUEST_ID,
];

/// A request ID from a trusted hop longer than this (or with other than visible ASCII) is
/// replaced: it goes into every log line.
const MAX_REQUEST_ID: usize = 128;

/// What pier makes of one request's forwarding headers: read when the request arrives (the
/// request ID and client are needed for the access log even when nothing is forwarded),
/// written when the upstream head is prepared.
#[derive(Clone, Debug)]
pub struct Edge {
    /// The hop's address, and as an `X-Forwarded-For` entry.
    hop: IpAddr,
    hop_entry: HeaderValue,
    /// The client for the access log: the connection's, or from a trusted chain.
    pub client: IpAddr,
    /// `client` came from `X-Forwarded-For` rather than the connection.
    pub client_forwarded: bool,
    pub request_id: RequestId,
    /// What a trusted hop sent (all `None` from an untrusted one).
    kept: Kept,
    /// The client sent a `Forwarded` header (pier then sends its own).
    forwarded_sent: bool,
    /// The client sent an `X-Forwarded-Host` header.
    host_sent: bool,
    /// The request's trace context when tracing is on (`trace::start`): its `traceparent`
    /// and `tracestate` replace the client's upstream.
    pub trace: Option<Box<Span>>,
}

#[derive(Clone, Debug, Default)]
struct Kept {
    /// `X-Forwarded-For` lines, joined with `, `.
    xff: Option<Vec<u8>>,
    proto: Option<HeaderValue>,
    host: Option<HeaderValue>,
    /// `Forwarded` lines, joined with `, `.
    forwarded: Option<Vec<u8>>,
}

/// What the client's forwarding headers say, gathered in one pass over the header lines.
#[derive(Default)]
struct Sent<'h> {
    xff: Vec<&'h [u8]>,
    proto: Option<&'h [u8]>,
    host: Option<&'h [u8]>,
    forwarded: Vec<&'h [u8]>,
    request_id: Option<&'h [u8]>,
}

/// The request ID a client sent, if it is usable (short, visible ASCII); else a new one.
fn given_request_id(sent: Option<&[u8]>) -> RequestId {
    sent.filter(|v| !v.is_empty() && v.len() <= MAX_REQUEST_ID)
        .filter(|v| v.iter().all(u8::is_ascii_graphic))
        .and_then(|v| HeaderValue::from_bytes(v).ok())
        .map_or_else(new_request_id, RequestId::Given)
}

// === impl Edge ===

impl Edge {
    /// Reads the client's header lines (`(name, value)`, names in any case). `proxies` is
    /// consulted only to walk a trusted chain; whether the hop itself is trusted was decided
    /// once per connection.
    pub fn read<'h>(
        proxies: &TrustedProxies,
        hop: Hop<'_>,
        lines: impl Iterator<Item = (&'h str, &'h [u8])>,
    ) -> Self {
        Self::read_traced(proxies, hop, lines, None)
    }

    /// [`Edge::read`], carrying the request's trace context (`trace::start`): built whole, so
    /// that the request path's state holds it without a copy.
    #[inline]
    pub fn read_traced<'h>(
        proxies: &TrustedProxies,
        hop: Hop<'_>,
        lines: impl Iterator<Item = (&'h str, &'h [u8])>,
        trace: Option<Box<Span>>,
    ) -> Self {
        let mut seen = Sent::default();
        for (name, value) in lines {
            seen.line(name, value);
        }
        let peer = hop.addr;
        if !hop.trusted {
            return Self {
                hop: peer,
                hop_entry: hop.forwarded_for.clone(),
                client: peer,
                client_forwarded: false,
                request_id: if hop.keep_request_id {
                    given_request_id(seen.request_id)
                } else {
                    new_request_id()
                },
                kept: Kept::default(),
                forwarded_sent: !seen.forwarded.is_empty(),
                host_sent: seen.host.is_some(),
                trace,
            };
        }
        let client = client_of(proxies, &seen.xff, peer);
        let request_id = given_request_id(seen.request_id);
        Self {
            hop: peer,
            hop_entry: hop.forwarded_for.clone(),
            client,
            client_forwarded: client != peer,
            request_id,
            kept: Kept {
                xff: joined(&seen.xff),
                proto: seen.proto.and_then(|v| HeaderValue::from_bytes(v).ok()),
                host: seen.host.and_then(|v| HeaderValue::from_bytes(v).ok()),
                forwarded: joined(&seen.forwarded),
            },
            forwarded_sent: !seen.forwarded.is_empty(),
            host_sent: seen.host.is_some(),
            trace,
        }
    }

    /// The forwarding headers to send upstream, in order. `scheme` and `client_host` are what
    /// the client used (the port's protocol; its Host or `:authority`).
    #[inline(always)]
    pub fn each(
        &self,
        scheme: &'static str,
        client_host: Option<&[u8]>,
        mut f: impl FnMut(&HeaderName, &[u8]),
    ) {
        match &self.kept.xff {
            Some(chain) => {
                let mut v = Vec::with_capacity(chain.len() + 2 + self.hop_entry.len());
                v.extend_from_slice(chain);
                v.extend_from_slice(b", ");
                v.extend_from_slice(self.hop_entry.as_bytes());
                f(&X_FORWARDED_FOR, &v);
            }
            None => f(&X_FORWARDED_FOR, self.hop_entry.as_bytes()),
        }
        match &self.kept.proto {
            Some(p) => f(&X_FORWARDED_PROTO, p.as_bytes()),
            None => f(&X_FORWARDED_PROTO, scheme.as_bytes()),
        }
        match (&self.kept.host, client_host) {
            (Some(h), _) => f(&X_FORWARDED_HOST, h.as_bytes()),
            (None, Some(h)) => f(&X_FORWARDED_HOST, h),
            (None, None) => {}
        }
        if self.forwarded_sent {
            let own = forwarded_element(self.hop, scheme, client_host);
            match &self.kept.forwarded {
                Some(chain) => {
                    let mut v = chain.clone();
                    v.extend_from_slice(b", ");
                    v.extend_from_slice(&own);
                    f(&FORWARDED, &v);
                }
                None => f(&FORWARDED, &own),
            }
        }
        f(&X_REQUEST_ID, self.request_id.as_bytes());
        if let Some(trace) = &self.trace {
            trace.each(f);
        }
    }

    /// Replaces the forwarding headers in `headers` with pier's (the hyper path). `edited`:
    /// the route's filters may have added some since the request arrived; otherwise only
    /// those the client sent (read by [`Edge::read`]) can be there.
    pub fn apply(
        &self,
        headers: &mut HeaderMap,
        scheme: &'static str,
        client_host: Option<&HeaderValue>,
        edited: bool,
    ) {
        if self.trace.is_some() {
            headers.remove(TRACEPARENT);
            headers.remove(TRACESTATE);
        }
        // [`Edge::each`]'s lines, in its order (a test holds the two to the same result).
        // Values that are whole already are cloned (a reference count), not copied and
        // checked again. An insert replaces every line of its name, so a header pier writes
        // needs no removal first: only one it does not write, and only where one can be.
        let xff = match &self.kept.xff {
            Some(chain) => {
                HeaderValue::from_bytes(&[chain, &b", "[..], self.hop_entry.as_bytes()].concat())
            }
            None => Ok(self.hop_entry.clone()),
        };
        put(headers, X_FORWARDED_FOR, xff.ok(), true);
        let proto = match &self.kept.proto {
            Some(p) => p.clone(),
            None => HeaderValue::from_static(scheme),
        };
        headers.insert(X_FORWARDED_PROTO, proto);
        let host = self.kept.host.as_ref().or(client_host).cloned();
        put(headers, X_FORWARDED_HOST, host, edited || self.host_sent);
        let forwarded = self.forwarded_sent.then(|| {
            let own = forwarded_element(self.hop, scheme, client_host.map(HeaderValue::as_bytes));
            let v = match &self.kept.forwarded {
                Some(chain) => [chain, &b", "[..], &own].concat(),
                None => own,
            };
            HeaderValue::from_bytes(&v).ok()
        });
        put(
            headers,
            FORWARDED,
            forwarded.flatten(),
            edited || self.forwarded_sent,
        );
        let id = match &self.request_id {
            RequestId::Given(v) => Some(v.clone()),
            RequestId::Uuid(text) => HeaderValue::from_bytes(text).ok(),
        };
        put(headers, X_REQUEST_ID, id, true);
        if let Some(trace) = &self.trace {
            trace.each(|n, v| {
                if let Ok(v) = HeaderValue::from_bytes(v) {
                    headers.insert(n.clone(), v);
                }
            });
        }
    }
}

/// `name: value` in place of any lines of `name`; without a value, no line of `name` (looked
/// up only if one `may_be` there).
fn put(headers: &mut HeaderMap, name: HeaderName, value: Option<HeaderValue>, may_be: bool) {
    match value {
        Some(v) => {
            headers.insert(name, v);
        }
        None if may_be => {
            headers.remove(name);
        }
        None => {}
    }
}

/// Is `name` one of the headers [`Edge::each`] writes (any case)?
pub fn is_edge_header(name: &str) -> bool {
    // Every header line of every request passes here: most are told apart by length.
    matches!(name.len(), 9 | 12 | 15..=17)
        && EDGE_HEADERS
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h.as_str()))
}

impl<'h> Sent<'h> {
    fn line(&mut self, name: &str, value: &'h [u8]) {
        // Every header line of every request passes here: most are told apart by length.
        if !matches!(name.len(), 9 | 12 | 15..=17) {
            return;
        }
        if name.eq_ignore_ascii_case(X_FORWARDED_FOR.as_str()) {
            self.xff.push(value);
        } else if name.eq_ignore_ascii_case(X_FORWARDED_PROTO.as_str()) {
            self.proto.get_or_insert(value);
        } else if name.eq_ignore_ascii_case(X_FORWARDED_HOST.as_str()) {
            self.host.get_or_insert(value);
        } else if name.eq_ignore_ascii_case(FORWARDED.as_str()) {
            self.forwarded.push(value);
        } else if name.eq_ignore_ascii_case(X_REQUEST_ID.as_str()) {
            self.request_id.get_or_insert(value);
        }
    }
}

fn joined(lines: &[&[u8]]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for l in lines
        .iter()
        .map(|l| l.trim_ascii())
        .filter(|l| !l.is_empty())
    {
        if !out.is_empty() {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(l);
    }
    (!out.is_empty()).then_some(out)
}

/// The client behind a trusted hop: walking the `X-Forwarded-For` entries from the right (the
/// hop itself, `peer`, is right of them all), the first address that is not a trusted proxy.
/// An entry that is not an address ends the walk at the last address seen: what is left of it
/// cannot be checked. All trusted: the left-most.
fn client_of(proxies: &TrustedProxies, xff: &[&[u8]], peer: IpAddr) -> IpAddr {
    let mut client = peer;
    let entries = xff
        .iter()
        .rev()
        .flat_map(|line| line.rsplit(|b| *b == b','));
    for entry in entries {
        let Some(ip) = parse_entry(entry) else {
            break;
        };
        client = ip;
        if !proxies.trusts(ip) {
            break;
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, perhaps with a port (`1.2.3.4:80`, `[::1]:80`).
fn parse_entry(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(entry.trim_ascii()).ok()?;
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    text.parse::<std::net::SocketAddr>()
        .ok()
        .map(|s| s.ip().to_canonical())
}

/// pier's own RFC 7239 element: `for=<client>;host="<host>";proto=<scheme>` (an IPv6 node in
/// quotes and brackets, §6; the host as a quoted-string, since `:` is not a token character).
fn forwarded_element(client: IpAddr, scheme: &str, host: Option<&[u8]>) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(b"for=");
    match client.to_canonical() {
        IpAddr::V4(ip) => v.extend_from_slice(ip.to_string().as_bytes()),
        IpAddr::V6(ip) => v.extend_from_slice(format!("\"[{ip}]\"").as_bytes()),
    }
    if let Some(host) = host {
        v.extend_from_slice(b";host=\"");
        for &b in host {
            if b == b'"' || b == b'\\' {
                v.push(b'\\');
            }
            v.push(b);
        }
        v.push(b'"');
    }
    v.extend_from_slice(b";proto=");
    v.extend_from_slice(scheme.as_bytes());
    v
}

/// A request's ID (`X-Request-Id`): one pier made, kept as its text (no allocation and no
/// header-value check per request: ~500 instructions of the plain path, callgrind), or a
/// trusted hop's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestId {
    Uuid([u8; 36]),
    /// Visible ASCII only (checked as it is read).
    Given(HeaderValue),
}

impl RequestId {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            RequestId::Uuid(text) => text,
            RequestId::Given(value) => value.as_bytes(),
        }
    }

    pub fn as_str(&self) -> &str {
        // Both forms are ASCII.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl PartialEq<&str> for RequestId {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

/// A new request ID: a random (version 4) UUID in its usual text form.
pub fn new_request_id() -> RequestId {
    let bits: u128 = rand::random();
    // Version 4, variant 10 (RFC 9562 §5.4).
    let bits = (bits & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Where each byte's two digits go in the 8-4-4-4-12 form: constant positions, so the loop
    // unrolls with no bounds checks (~100 instructions fewer than counting them, callgrind).
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let mut text = *b"00000000-0000-0000-0000-000000000000";
    for (b, at) in bits.to_be_bytes().into_iter().zip(AT) {
        text[at] = HEX[usize::from(b >> 4)];
        text[at + 1] = HEX[usize::from(b & 0xf)];
    }
    RequestId::Uuid(text)
}

#[cfg(test)]
mod tests;
