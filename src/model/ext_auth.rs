//! External authorization as the data plane runs it: one authorizer (a resolved Service
//! backend) asked about each request before it goes upstream, over HTTP or Envoy's ext_authz
//! gRPC API. Two sources make one of these: a SecurityPolicy's `spec.extAuth` (Envoy
//! Gateway's fields), and Gateway API's `ExternalAuth` HTTPRoute filter (GEP-1494). Both run on
//! the same engine (`proxy::exchange::ext_auth`), at `proxy::phase::ext_auth`.
//!
//! ```text
//! SecurityPolicy.extAuth ─┐
//!                          ├─> ExtAuth { backend, protocol, headers, body, timeout, fail_open }
//! HTTPRoute ExternalAuth ──┘        (Rule::access.ext_auth, Rule::filters.ext_auth)
//! ```

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use serde::Serialize;

use super::backend::Backend;

/// Envoy Gateway's default `timeout`: how long pier waits for the authorizer's answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// An answer from the authorizer larger than this (HTTP body, gRPC message) is garbage:
/// the request fails closed (or open, with `failOpen`).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// One external authorizer and how it is asked.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtAuth {
    /// Where it came from (`SecurityPolicy ns/name`, `HTTPRoute ns/name rules[0]`), for logs.
    pub source: String,
    /// The authorizer's Service port. gRPC mode: HTTP/2 (h2c, or h2 under BackendTLSPolicy).
    #[serde(serialize_with = "backend_id")]
    pub backend: Arc<Backend>,
    /// `Host` / `:authority` of the check requests (the Service's cluster name).
    pub authority: String,
    pub protocol: ExtAuthProtocol,
    /// Which of the client's request headers the authorizer sees.
    pub headers_to_ext_auth: HeaderSelection,
    /// The request body, up to a size, for the authorizer (`None`: no body).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<BodyToExtAuth>,
    /// How long pier waits for the answer (the connect included).
    #[serde(serialize_with = "millis")]
    pub timeout: Duration,
    /// The authorizer could not be asked or gave no usable answer: let the request through
    /// (`true`) or answer it with [`FAIL_CLOSED_STATUS`] (`false`, the default).
    pub fail_open: bool,
}

/// What runs on every request a listener accepts, before routing: its `filters.requests`
/// (GEP-5224, GatewayListenerFilters). Decided at translation; a listener without filters has
/// none and pays nothing.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PreRoute {
    /// Its `ExternalAuth` filters, in their order.
    Authorize(Box<[Arc<ExtAuth>]>),
    /// A filter's backendRef does not resolve: every request on the listener fails closed
    /// (500, as a rule whose ExternalAuth does not resolve), never served without it.
    Unresolved,
}

/// The status a request gets when its authorizer is down, slow or answers garbage and
/// `failOpen` is false: 403, Envoy's ext_authz `status_on_error` default (Envoy Gateway leaves
/// it unset), so clients of a gateway moved over see what they saw. gRPC clients get
/// PERMISSION_DENIED (7).
pub const FAIL_CLOSED_STATUS: http::StatusCode = http::StatusCode::FORBIDDEN;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ExtAuthProtocol {
    /// The client's request (method, `path_prefix` + path, the selected headers, the body)
    /// sent to the authorizer; an allowing status lets the request through, any other
    /// answer is the client's answer.
    Http {
        /// Prepended to the request's path (empty: none).
        path_prefix: String,
        /// Which statuses allow.
        allow: AllowStatus,
        /// Which headers of an allowing answer go onto the upstream request (replacing the
        /// client's).
        headers_to_backend: HeaderSelection,
    },
    /// `envoy.service.auth.v3.Authorization/Check`.
    Grpc,
}

/// The statuses of an HTTP authorizer's answer that allow the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum AllowStatus {
    /// Any 2xx: SecurityPolicy `extAuth`, as nginx's `auth_request` (oauth2-proxy's
    /// `/oauth2/auth` answers 202).
    Any2xx,
    /// 200 only: GEP-1494 ("Any other code is considered an authorization failure").
    Only200,
}

impl AllowStatus {
    pub fn allows(self, status: http::StatusCode) -> bool {
        match self {
            Self::Any2xx => status.is_success(),
            Self::Only200 => status == http::StatusCode::OK,
        }
    }
}

/// A set of header names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum HeaderSelection {
    /// Every header (hop-by-hop and framing headers excepted).
    All,
    /// These (lower-case names), plus `always`.
    Only(#[serde(serialize_with = "names")] Vec<HeaderName>),
}

/// `bodyToExtAuth` / `forwardBody`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BodyToExtAuth {
    pub max_bytes: usize,
    /// What a longer body comes to.
    pub over: OverLimit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum OverLimit {
    /// 413, the authorizer is not asked (Envoy Gateway's `bodyToExtAuth`: Envoy's
    /// `with_request_body` without partial messages; it wins over `failOpen`).
    Reject,
    /// The authorizer gets the first `max_bytes` (GEP-1494 `forwardBody.maxSize`); the
    /// backend gets the whole body.
    Truncate,
}

/// Why an authorizer gave no verdict. A bounded label (`as_str`): what the request's outcome
/// records, and what decision metrics count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtAuthFailure {
    /// The authorizer's Service has no (usable) endpoint.
    NoEndpoints,
    /// Connecting failed, or the connection broke (refused, reset, TLS).
    Unreachable,
    /// No whole answer within `timeout`.
    Timeout,
    /// An answer that is not the protocol's: not HTTP, not a CheckResponse, a gRPC error
    /// status, or larger than [`MAX_ANSWER_BYTES`].
    Garbage,
}

// === impl ExtAuthFailure ===

impl ExtAuthFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoEndpoints => "no_endpoints",
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Garbage => "garbage",
        }
    }
}

impl std::fmt::Display for ExtAuthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl HeaderSelection ===

impl HeaderSelection {
    /// Whether `name` is selected.
    pub fn contains(&self, name: &HeaderName) -> bool {
        match self {
            Self::All => true,
            Self::Only(list) => list.contains(name),
        }
    }
}

fn backend_id<S: serde::Serializer>(b: &Arc<Backend>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!(
        "{}/{}:{}",
        b.id.service.namespace, b.id.service.name, b.id.port
    ))
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{}ms", d.as_millis()))
}

fn names<S: serde::Serializer>(list: &[HeaderName], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(list.iter().map(HeaderName::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_of_names_holds_only_those() {
        let only = HeaderSelection::Only(vec![HeaderName::from_static("x-a")]);
        assert!(only.contains(&HeaderName::from_static("x-a")));
        assert!(!only.contains(&HeaderName::from_static("x-b")));
        assert!(HeaderSelection::All.contains(&HeaderName::from_static("x-b")));
    }
}
