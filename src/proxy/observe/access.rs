//! The access log: one `pier::access` line per request (when `--access-log` or the listener's
//! `pier.dev/access-log` says so), written by both request paths once the response head is
//! known, from what the request path saw (`record::Seen`) and the edge policy's client and
//! request ID (`forwarded::Edge`). `--access-log-fields` ([`Fields`]) picks the fields a line
//! carries; a field left out is never formatted (tracing skips a `None` value).

use std::net::SocketAddr;

use crate::proxy::body::Inbound;
use http::{Method, Request, StatusCode, Version};
use http_body::Body as _;

use super::forwarded::Edge;
use super::record::{Seen, request_authority};
use crate::model::Snapshot;
use crate::proxy::conn_info::ConnInfo;

/// Which fields an access log line carries (`--access-log-fields`); all by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields(u32);

/// One access log field; the discriminant is its bit and its index in [`Fields::NAMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Client,
    Peer,
    Via,
    RequestId,
    TraceId,
    Method,
    Host,
    Path,
    Protocol,
    Status,
    BytesIn,
    BytesOut,
    Listener,
    Route,
    Rule,
    Backend,
    Upstream,
    WorkloadIdentity,
    DurationMs,
    Error,
    TlsFailure,
    Principal,
}

/// The request line, captured only when the access log may be on.
pub struct LogHead {
    method: http::Method,
    version: Version,
    host: String,
    path: String,
    /// The request body's length when the head declares it.
    bytes_in: Option<u64>,
}

/// How a logged request ended: its response head, and how long it took to get there.
pub struct Done {
    pub status: StatusCode,
    /// The response body's length when the head declares it.
    pub bytes_out: Option<u64>,
    pub elapsed: std::time::Duration,
}

/// Whether a request on `conn` may be logged: the access log is on, or a listener on its
/// port turns it on. (Which listener decides once the request is routed.)
#[inline]
pub fn may_log(access_log: bool, snapshot: &Snapshot, conn: &ConnInfo) -> bool {
    access_log
        || snapshot
            .port_at(conn.key())
            .is_some_and(|p| p.access_log_on)
}

/// Whether this request is logged, now that routing has reached what it could: its
/// listener's `pier.dev/access-log`, else `--access-log`.
pub fn wanted(access_log: bool, seen: &Seen<'_>) -> bool {
    seen.access_log.unwrap_or(access_log)
}

// === impl LogHead ===

impl LogHead {
    pub fn of(req: &Request<Inbound>) -> Self {
        // The authority as sent, port included, as the fast path logs its Host header.
        let authority = request_authority(req);
        let mut head = Self::new(
            req.method().clone(),
            req.version(),
            authority,
            req.uri().path(),
        );
        head.bytes_in = req.body().size_hint().exact();
        head
    }

    pub fn new(method: Method, version: Version, host: &str, path: &str) -> Self {
        Self {
            method,
            version,
            host: host.to_string(),
            path: path.to_string(),
            bytes_in: None,
        }
    }

    pub fn with_bytes_in(self, bytes_in: u64) -> Self {
        Self {
            bytes_in: Some(bytes_in),
            ..self
        }
    }

    /// One `pier::access` line. `client` is the client address (`ip:port` from the connection
    /// or its PROXY header; only `ip` when a trusted `X-Forwarded-For` named it, and then
    /// `peer` is the connection's); `via` the balancer that sent a PROXY header.
    pub fn log(&self, fields: Fields, conn: &ConnInfo, edge: &Edge, seen: &Seen<'_>, done: Done) {
        use tracing::field::display;
        let on = |f: Field| fields.has(f);
        let (client, peer) = if edge.client_forwarded {
            (
                display(ClientAddr::Ip(edge.client)),
                Some(display(conn.peer)),
            )
        } else {
            (display(ClientAddr::Socket(conn.peer)), None)
        };
        let rule = seen.rule.map(|r| match &r.name {
            Some(name) => display(RuleLabel::Name(name)),
            None => display(RuleLabel::Index(r.index)),
        });
        tracing::info!(
            target: "pier::access",
            client = on(Field::Client).then_some(client),
            peer = peer.filter(|_| on(Field::Peer)),
            via = conn.via.filter(|_| on(Field::Via)).map(display),
            request_id = on(Field::RequestId).then(|| edge.request_id.as_str()),
            trace_id = edge.trace.as_ref().filter(|_| on(Field::TraceId)).map(|t| display(t.trace_id())),
            method = on(Field::Method).then(|| display(&self.method)),
            host = on(Field::Host).then(|| display(&self.host)),
            path = on(Field::Path).then(|| display(&self.path)),
            protocol = on(Field::Protocol).then(|| display(protocol_name(self.version))),
            status = on(Field::Status).then(|| done.status.as_u16()),
            bytes_in = self.bytes_in.filter(|_| on(Field::BytesIn)),
            bytes_out = done.bytes_out.filter(|_| on(Field::BytesOut)),
            listener = seen.reached.listener.filter(|_| on(Field::Listener)).map(display),
            route = seen.reached.route.filter(|_| on(Field::Route)).map(display),
            rule = rule.filter(|_| on(Field::Rule)),
            backend = seen.reached.backend.filter(|_| on(Field::Backend)).map(display),
            upstream = seen.upstream.filter(|_| on(Field::Upstream)).map(display),
            workload_identity = seen.identity.filter(|_| seen.failure.is_none() && on(Field::WorkloadIdentity)),
            duration_ms = on(Field::DurationMs).then(|| millis(done.elapsed)),
            error = seen.failure.filter(|_| on(Field::Error)).map(|f| tracing::field::debug(f.kind)),
            tls_failure = seen.failure.and_then(|f| f.detail).filter(|_| on(Field::TlsFailure)),
            principal = seen.security.as_ref().and_then(|s| s.principal.as_deref()).filter(|_| on(Field::Principal)),
        );
    }
}

/// The request's protocol as Envoy names it (`%PROTOCOL%` in its access log, the
/// `protocol` an external authorizer is given).
pub fn protocol_name(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

// === impl Fields ===

impl Fields {
    /// The field names, as they appear in a line.
    pub const NAMES: [&'static str; 22] = [
        "client",
        "peer",
        "via",
        "request_id",
        "trace_id",
        "method",
        "host",
        "path",
        "protocol",
        "status",
        "bytes_in",
        "bytes_out",
        "listener",
        "route",
        "rule",
        "backend",
        "upstream",
        "workload_identity",
        "duration_ms",
        "error",
        "tls_failure",
        "principal",
    ];
    pub const ALL: Self = Self((1 << Self::NAMES.len()) - 1);

    fn has(self, f: Field) -> bool {
        self.0 & (1 << f as u32) != 0
    }
}

impl Default for Fields {
    fn default() -> Self {
        Self::ALL
    }
}

/// A comma-separated list of [`Fields::NAMES`], or `all`.
impl std::str::FromStr for Fields {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut bits = 0;
        for name in s.split(',').map(str::trim) {
            if name == "all" {
                bits |= Self::ALL.0;
                continue;
            }
            let i = Self::NAMES.iter().position(|n| *n == name).ok_or_else(|| {
                format!(
                    "unknown access log field {name:?}; the fields are: all, {}",
                    Self::NAMES.join(", ")
                )
            })?;
            bits |= 1 << i;
        }
        Ok(Self(bits))
    }
}

/// Milliseconds to the microsecond, as a number that prints without float noise: one
/// correctly rounded division (`1.1`, where `as_secs_f64() * 1000.0` gives
/// `1.1000000000000001`).
fn millis(d: std::time::Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

// === ClientAddr, RuleLabel: field values written without allocating ===

/// The access log's `client`.
enum ClientAddr {
    Socket(SocketAddr),
    Ip(std::net::IpAddr),
}

impl std::fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Socket(s) => s.fmt(f),
            Self::Ip(ip) => ip.fmt(f),
        }
    }
}

/// The access log's `rule`: the rule's `name`, else its index in the route.
enum RuleLabel<'a> {
    Name(&'a str),
    Index(usize),
}

impl std::fmt::Display for RuleLabel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(n) => f.write_str(n),
            Self::Index(i) => i.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_log_fields_parse_by_name_and_reject_unknown_ones() {
        let f: Fields = "status, path,duration_ms".parse().unwrap();
        assert!(f.has(Field::Status) && f.has(Field::Path) && f.has(Field::DurationMs));
        assert!(!f.has(Field::Client) && !f.has(Field::Method));
        assert_eq!("all".parse::<Fields>(), Ok(Fields::ALL));
        assert_eq!(Fields::default(), Fields::ALL);
        // Every name maps to the field of its index.
        for (i, name) in Fields::NAMES.iter().enumerate() {
            assert_eq!(name.parse::<Fields>().unwrap().0, 1 << i, "{name}");
        }
        assert!(Fields::ALL.has(Field::TlsFailure));
        let err = "status,agent".parse::<Fields>().unwrap_err();
        assert!(
            err.contains("\"agent\"") && err.contains("request_id"),
            "{err}"
        );
        assert!("".parse::<Fields>().is_err());
    }

    #[test]
    fn access_log_duration_prints_without_float_noise() {
        use std::time::Duration;
        assert_eq!(millis(Duration::from_micros(1_100)).to_string(), "1.1");
        assert_eq!(millis(Duration::from_nanos(4_209_760)).to_string(), "4.209");
        for us in 0..20_000u64 {
            let text = millis(Duration::from_micros(us)).to_string();
            let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(decimals <= 3, "{us} µs -> {text}");
        }
    }
}
