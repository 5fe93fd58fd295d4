//! The HTTPRoute CORS filter (Gateway API `HTTPCORSFilter`, GEP-1767): the policy, parsed at
//! translation time, and what it makes of one request. Both request paths call [`Cors::check`]
//! once per request, then either answer the [`Preflight`] or forward the request and apply the
//! [`CorsResponse`] to the backend's response head.
//!
//! ```text
//! request ─> Cors::check ─┬─> Preflight { status, headers } ─> pier answers (never the backend)
//!                         └─> Actual(CorsResponse) ─> forward ─> CorsResponse::apply(head)
//! ```
//!
//! The rules it keeps, from the API reference of `HTTPCORSFilter` and GEP-1767:
//! - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) on a rule with
//!   the filter is answered by the gateway, denied ones too ("the final authority on a CORS
//!   preflight request ... MUST NOT pass the request to the upstream"): 200 with the CORS
//!   headers for an allowed origin, 403 without them otherwise.
//! - `*` is never returned while `allowCredentials` is true: the `Origin`,
//!   `Access-Control-Request-Method` and `Access-Control-Request-Headers` values are echoed.
//!   Without credentials `*` is returned for a wildcard (the API allows either).
//! - `Access-Control-Allow-Credentials: true` only with `allowCredentials: true`.
//! - A credentialed actual request gets no CORS headers when `allowCredentials` is false.
//!   "Credentialed" is taken as "carries a `Cookie`": browsers alone set it. `Authorization`
//!   is not taken as a sign, because scripts set it themselves (bearer tokens) on requests
//!   that are not credentialed in the Fetch sense, which the rule would break.
//! - `Access-Control-Max-Age` on preflights (5 unless `maxAge` says otherwise).
//! - The gateway owns the `Access-Control-Allow-*`, `-Expose-Headers` and `-Max-Age` response
//!   headers of such a rule: the backend's own are dropped, so it cannot widen the policy.
//! - `Vary: Origin` on every response whose CORS headers depend on the origin (anything but
//!   `*` without credentials), so a cache never hands one origin's answer to another.

use std::fmt;

use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, COOKIE, ORIGIN, VARY,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde::Serialize;

/// `Access-Control-Max-Age` when `maxAge` is not set (the API's default).
pub const DEFAULT_MAX_AGE: u32 = 5;

/// The response headers the filter owns: a backend's own are removed before pier's are set.
static OWNED: [HeaderName; 6] = [
    ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_ALLOW_CREDENTIALS,
    ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_HEADERS,
    ACCESS_CONTROL_EXPOSE_HEADERS,
    ACCESS_CONTROL_MAX_AGE,
];

/// A CORS filter, parsed.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cors {
    pub allow_origins: AllowOrigins,
    pub allow_methods: Allowed,
    pub allow_headers: Allowed,
    pub expose_headers: Expose,
    pub allow_credentials: bool,
    #[serde(serialize_with = "ser_value")]
    pub max_age: HeaderValue,
}

/// `allowOrigins`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowOrigins {
    /// `*`: every origin.
    Any,
    /// These patterns (none: no origin is allowed).
    List(Vec<OriginPattern>),
}

/// `allowMethods` or `allowHeaders`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Allowed {
    /// Not configured (or empty): the response header is left out.
    #[default]
    Unset,
    /// `*`.
    Any,
    /// The configured values joined with `, `: the response header's value.
    List(HeaderValue),
}

/// `exposeHeaders`. `*` may sit among names (the API has no rule against it); it is dropped
/// where credentials forbid it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expose {
    names: Vec<HeaderName>,
    wildcard: bool,
    /// Everything configured, `*` included.
    all: Option<HeaderValue>,
    /// The names without `*`.
    named: Option<HeaderValue>,
}

/// One `allowOrigins` entry other than `*`: `<scheme>://<host>[:<port>]`, the port made
/// explicit (80 for http, 443 for https, as the API says).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginPattern {
    scheme: Scheme,
    host: HostPattern,
    port: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// `*`: any host.
    Any,
    /// A host, lower-cased.
    Exact(String),
    /// `*.example.com`, kept as `.example.com`: "a greedy match to the left", one or more
    /// labels in front of the suffix.
    Suffix(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidOrigin {
    #[error("an origin is `*` or `<scheme>://<host>[:<port>]` with scheme http or https")]
    Scheme,
    #[error("the host must be `*` or DNS labels (letters, digits, `-`), optionally after `*.`")]
    Host,
    #[error("the port must be a number from 1 to 65535")]
    Port,
}

/// What a CORS policy makes of one request.
#[derive(Debug)]
pub enum CorsCheck<'p> {
    /// A preflight: pier answers it with this, and the backend never sees it.
    Preflight(Preflight),
    /// Any other request: forwarded, and its response head goes through this.
    Actual(CorsResponse<'p>),
}

/// pier's answer to a preflight: no body.
#[derive(Debug)]
pub struct Preflight {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

/// The CORS headers for the response to an actual request.
#[derive(Debug)]
pub struct CorsResponse<'p> {
    policy: &'p Cors,
    /// `Access-Control-Allow-Origin`, when the request's origin is allowed.
    allow_origin: Option<HeaderValue>,
}

// === impl Cors ===

impl Cors {
    /// Decides what `method` and request `headers` come to under this policy.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> CorsCheck<'_> {
        let origin = headers.get(ORIGIN);
        match (origin, headers.get(ACCESS_CONTROL_REQUEST_METHOD)) {
            (Some(origin), Some(request_method)) if method == Method::OPTIONS => {
                CorsCheck::Preflight(self.preflight(
                    origin,
                    request_method,
                    headers.get(ACCESS_CONTROL_REQUEST_HEADERS),
                ))
            }
            _ => {
                // A browser sends cookies only when the request is credentialed (scripts
                // cannot set `Cookie`).
                let credentialed = headers.contains_key(COOKIE);
                let allow_origin = origin
                    .and_then(|o| self.allow_origin(o))
                    .filter(|_| self.allow_credentials || !credentialed);
                CorsCheck::Actual(CorsResponse {
                    policy: self,
                    allow_origin,
                })
            }
        }
    }

    /// The `Access-Control-Allow-Origin` value for `origin` when it is allowed: `*` only for
    /// a wildcard policy without credentials, else the origin as sent.
    fn allow_origin(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        match &self.allow_origins {
            AllowOrigins::Any if !self.allow_credentials => Some(HeaderValue::from_static("*")),
            AllowOrigins::Any => Some(origin.clone()),
            AllowOrigins::List(patterns) => {
                let parsed = RequestOrigin::parse(origin)?;
                patterns
                    .iter()
                    .any(|p| p.matches(&parsed))
                    .then(|| origin.clone())
            }
        }
    }

    /// Whether the CORS headers of a response depend on the request's `Origin`.
    fn varies_by_origin(&self) -> bool {
        self.allow_credentials || self.allow_origins != AllowOrigins::Any
    }

    /// Preflights are never credentialed (browsers send no cookies with them), so only
    /// `allowCredentials` decides between `*` and echoing.
    fn preflight(
        &self,
        origin: &HeaderValue,
        request_method: &HeaderValue,
        request_headers: Option<&HeaderValue>,
    ) -> Preflight {
        let mut headers = HeaderMap::new();
        let mut vary = Vec::new();
        if self.varies_by_origin() {
            vary.push(ORIGIN.as_str());
        }
        let Some(allow_origin) = self.allow_origin(origin) else {
            if let Some(v) = join(vary) {
                headers.insert(VARY, v);
            }
            return Preflight {
                status: StatusCode::FORBIDDEN,
                headers,
            };
        };
        let credentials = self.allow_credentials;
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
        if credentials {
            headers.insert(ACCESS_CONTROL_ALLOW_CREDENTIALS, true_value());
        }
        let methods = match &self.allow_methods {
            Allowed::Unset => None,
            Allowed::List(v) => Some(v.clone()),
            Allowed::Any if credentials => {
                vary.push(ACCESS_CONTROL_REQUEST_METHOD.as_str());
                Some(request_method.clone())
            }
            Allowed::Any => Some(HeaderValue::from_static("*")),
        };
        if let Some(v) = methods {
            headers.insert(ACCESS_CONTROL_ALLOW_METHODS, v);
        }
        let allowed_headers = match &self.allow_headers {
            Allowed::Unset => None,
            Allowed::List(v) => Some(v.clone()),
            Allowed::Any if credentials => {
                vary.push(ACCESS_CONTROL_REQUEST_HEADERS.as_str());
                request_headers.cloned()
            }
            Allowed::Any => Some(HeaderValue::from_static("*")),
        };
        if let Some(v) = allowed_headers {
            headers.insert(ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
        if let Some(v) = self.expose_headers.for_preflight(credentials) {
            headers.insert(ACCESS_CONTROL_EXPOSE_HEADERS, v);
        }
        headers.insert(ACCESS_CONTROL_MAX_AGE, self.max_age.clone());
        if let Some(v) = join(vary) {
            headers.insert(VARY, v);
        }
        Preflight {
            status: StatusCode::OK,
            headers,
        }
    }
}

// === impl CorsResponse ===

impl CorsResponse<'_> {
    /// Replaces the CORS headers of a response head with the policy's.
    pub fn apply(&self, headers: &mut HeaderMap) {
        for name in OWNED.iter() {
            headers.remove(name);
        }
        let credentials = self.policy.allow_credentials;
        // Computed before pier adds its own headers, so that only the backend's are listed.
        let expose = self.allow_origin.as_ref().and_then(|_| {
            self.policy
                .expose_headers
                .for_response(credentials, headers)
        });
        if self.policy.varies_by_origin() {
            add_vary(headers, ORIGIN.as_str());
        }
        let Some(origin) = &self.allow_origin else {
            return;
        };
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        if credentials {
            headers.insert(ACCESS_CONTROL_ALLOW_CREDENTIALS, true_value());
        }
        if let Some(v) = expose {
            headers.insert(ACCESS_CONTROL_EXPOSE_HEADERS, v);
        }
    }

    /// Whether the request's origin got CORS headers.
    pub fn allowed(&self) -> bool {
        self.allow_origin.is_some()
    }
}

// === impl Allowed ===

impl Allowed {
    /// `allowMethods` without `*`.
    pub fn methods(list: &[Method]) -> Self {
        join(list.iter().map(Method::as_str)).map_or(Self::Unset, Self::List)
    }

    /// `allowHeaders` without `*`.
    pub fn headers(list: &[HeaderName]) -> Self {
        join(list.iter().map(HeaderName::as_str)).map_or(Self::Unset, Self::List)
    }
}

// === impl Expose ===

impl Expose {
    /// `names` are the configured names other than `*`; `wildcard` says whether `*` was one.
    pub fn new(names: Vec<HeaderName>, wildcard: bool) -> Self {
        let named = join(names.iter().map(HeaderName::as_str));
        let all = if wildcard {
            join(std::iter::once("*").chain(names.iter().map(HeaderName::as_str)))
        } else {
            named.clone()
        };
        Self {
            names,
            wildcard,
            all,
            named,
        }
    }

    /// "If `*` is in exposeHeaders and allowCredentials is true, the gateway cannot use `*`".
    fn for_preflight(&self, credentials: bool) -> Option<HeaderValue> {
        if credentials {
            self.named.clone()
        } else {
            self.all.clone()
        }
    }

    /// On an actual response, with credentials, `*` stands for the names of the headers this
    /// response has.
    fn for_response(&self, credentials: bool, response: &HeaderMap) -> Option<HeaderValue> {
        if !(credentials && self.wildcard) {
            return self.for_preflight(credentials);
        }
        let own = response
            .keys()
            .filter(|k| !self.names.contains(k))
            .map(HeaderName::as_str);
        join(self.names.iter().map(HeaderName::as_str).chain(own))
    }
}

// === impl OriginPattern ===

impl OriginPattern {
    /// Parses an `allowOrigins` entry other than `*`, as the API's pattern has it:
    /// `http(s)://`, then `*` or DNS labels optionally after `*.`, then an optional port.
    pub fn parse(s: &str) -> Result<Self, InvalidOrigin> {
        let (scheme, authority) = match s.split_once("://") {
            Some(("http", rest)) => (Scheme::Http, rest),
            Some(("https", rest)) => (Scheme::Https, rest),
            _ => return Err(InvalidOrigin::Scheme),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, parse_port(port).ok_or(InvalidOrigin::Port)?),
            None => (authority, scheme.default_port()),
        };
        let host = if host == "*" {
            HostPattern::Any
        } else {
            let (wildcard, name) = match host.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, host),
            };
            let valid = !name.is_empty()
                && name.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            if !valid {
                return Err(InvalidOrigin::Host);
            }
            let name = name.to_ascii_lowercase();
            if wildcard {
                HostPattern::Suffix(format!(".{name}"))
            } else {
                HostPattern::Exact(name)
            }
        };
        Ok(Self { scheme, host, port })
    }

    fn matches(&self, origin: &RequestOrigin<'_>) -> bool {
        self.scheme == origin.scheme
            && self.port == origin.port
            && match &self.host {
                HostPattern::Any => true,
                HostPattern::Exact(name) => origin.host.eq_ignore_ascii_case(name),
                HostPattern::Suffix(suffix) => {
                    let host = origin.host.as_bytes();
                    host.len() > suffix.len()
                        && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
                }
            }
    }
}

impl fmt::Display for OriginPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        write!(f, "{scheme}://")?;
        match &self.host {
            HostPattern::Any => f.write_str("*")?,
            HostPattern::Exact(name) => f.write_str(name)?,
            HostPattern::Suffix(suffix) => write!(f, "*{suffix}")?,
        }
        write!(f, ":{}", self.port)
    }
}

impl Scheme {
    fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }
}

/// A request's `Origin`, when it is an http(s) origin (`null` and other schemes only match
/// `*`).
struct RequestOrigin<'a> {
    scheme: Scheme,
    host: &'a str,
    port: u16,
}

impl<'a> RequestOrigin<'a> {
    fn parse(value: &'a HeaderValue) -> Option<Self> {
        let (scheme, authority) = value.to_str().ok()?.split_once("://")?;
        let scheme = if scheme.eq_ignore_ascii_case("https") {
            Scheme::Https
        } else if scheme.eq_ignore_ascii_case("http") {
            Scheme::Http
        } else {
            return None;
        };
        if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
            return None;
        }
        // An IPv6 literal keeps its brackets; its colons are not the port's.
        let split = match authority.strip_prefix('[') {
            Some(_) => {
                let end = authority.find(']')? + 1;
                match &authority[end..] {
                    "" => None,
                    rest => Some((&authority[..end], rest.strip_prefix(':')?)),
                }
            }
            None => authority.rsplit_once(':'),
        };
        let (host, port) = match split {
            Some((host, port)) => (host, parse_port(port)?),
            None => (authority, scheme.default_port()),
        };
        (!host.is_empty()).then_some(Self { scheme, host, port })
    }
}

/// 1 to 5 digits, 1-65535.
fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u16>().ok().filter(|p| *p != 0)
}

fn true_value() -> HeaderValue {
    HeaderValue::from_static("true")
}

/// Tokens joined with `, `; `None` for none.
fn join<'a>(items: impl IntoIterator<Item = &'a str>) -> Option<HeaderValue> {
    let mut out = String::new();
    for item in items {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(item);
    }
    if out.is_empty() {
        return None;
    }
    HeaderValue::try_from(out).ok()
}

/// Adds `name` to the response's `Vary` unless it is there already (or `Vary: *` is).
fn add_vary(headers: &mut HeaderMap, name: &'static str) {
    let present = headers.get_all(VARY).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.eq_ignore_ascii_case(name)
            })
        })
    });
    if !present {
        headers.append(VARY, HeaderValue::from_static(name));
    }
}

impl Serialize for AllowOrigins {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Any => s.serialize_str("*"),
            Self::List(patterns) => s.collect_seq(patterns.iter().map(ToString::to_string)),
        }
    }
}

impl Serialize for Allowed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Unset => s.serialize_none(),
            Self::Any => s.serialize_str("*"),
            Self::List(v) => ser_value(v, s),
        }
    }
}

impl Serialize for Expose {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.all {
            Some(v) => ser_value(v, s),
            None => s.serialize_none(),
        }
    }
}

fn ser_value<S: serde::Serializer>(v: &HeaderValue, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(v.as_bytes()))
}

#[cfg(test)]
mod tests;
