//! Everything that can end a request before a backend answers, and the one place that turns
//! it into a response.
//!
//! Each variant has a [`ErrorKind`] (a bounded metric label) and an [`ErrorSide`]: whose fault
//! it is. Downstream errors are 4xx, upstream errors 502/503/504, internal (configuration)
//! errors 500. Error bodies are short plain text and never echo request data.
//!
//! A gRPC client (`content-type: application/grpc...`) gets the error as gRPC: HTTP 200 with
//! `grpc-status` and `grpc-message` in a headers-only (Trailers-Only) response, as Envoy
//! answers, so it sees UNIMPLEMENTED or UNAVAILABLE instead of an HTML-ish status it has to
//! guess at.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use prometheus_client::encoding::EncodeLabelValue;

use rustls::CertificateError;

use crate::model::TlsUnavailable;
use crate::model::traffic::Abort;
use crate::proxy::body::{self, BodyFault, ProxyBody};
use crate::proxy::validate::Invalid;

pub(crate) use crate::proxy::body::BoxError;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Listener isolation: no listener on the port matches the Host.
    #[error("no listener matches the request host")]
    NoListener,
    #[error("no route matches the request")]
    NoRoute,
    /// The rule has no backendRefs, or all their weights are zero.
    #[error("the route rule has no backends")]
    NoBackends,
    /// The weighted pick landed on a backendRef that did not resolve.
    #[error("the selected backendRef is invalid")]
    InvalidBackend,
    #[error("the backend has no endpoints")]
    NoEndpoints,
    #[error("connecting to the upstream failed: {reason}")]
    Connect {
        reason: ConnectReason,
        #[source]
        source: BoxError,
    },
    /// The backend must be reached over TLS but has no usable TLS configuration: nothing is
    /// sent (fail closed, never plaintext).
    #[error("the backend requires TLS but none is available: {0:?}")]
    TlsUnavailable(TlsUnavailable),
    /// The TLS handshake with the endpoint failed (untrusted, expired or misnamed certificate,
    /// a peer that does not speak TLS, ...).
    #[error("the upstream TLS handshake failed: {reason}")]
    TlsHandshake {
        reason: TlsFailure,
        #[source]
        source: BoxError,
    },
    /// The connection was reset, closed early, or the upstream spoke bad HTTP.
    #[error("the upstream request failed")]
    Upstream(#[source] BoxError),
    /// HTTPRoute `timeouts.backendRequest`.
    #[error("the backend request timed out")]
    BackendTimeout,
    /// HTTPRoute `timeouts.request`.
    #[error("the request timed out")]
    RequestTimeout,
    /// The rewritten request target is not a valid URI (a configuration problem: the request's
    /// own path was valid).
    #[error("the rewritten request target is invalid")]
    InvalidTarget(#[source] http::Error),
    /// On TLS, the Host selects another listener than the SNI did.
    #[error("the request host belongs to another listener than the TLS server name")]
    Misdirected,
    /// The request head breaks a rule pier enforces before routing (`proxy::validate`).
    #[error("invalid request: {0}")]
    Invalid(Invalid),
    /// The client's request body failed: malformed (bad chunk), or too slow.
    #[error("the request body failed: {0}")]
    ClientBody(BodyFault),
    /// The backend has its maximum of requests in flight (circuit breaking): nothing was
    /// sent.
    #[error("the backend has its maximum of requests in flight")]
    BackendOverflow,
    /// A retry the Service's XBackendTrafficPolicy budget has no room for: not sent, and the
    /// client gets 503 (Gateway API's MUST).
    #[error("the backend's retry budget is spent")]
    RetryBudgetSpent,
    /// The rule's access policy denied the client (authorization).
    #[error("the route's access policy denied the request")]
    Forbidden,
    /// The rule's SecurityPolicy is invalid (its status says why): fail closed.
    #[error("the route's security policy is invalid")]
    PolicyInvalid,
    /// The rule's access policy wants credentials the request lacks or that are bad: 401
    /// with the challenge.
    #[error("the request's credentials are missing or invalid")]
    Unauthenticated(Challenge),
    /// Too many password verifications at once (basic auth): 503, try again.
    #[error("too many password verifications at once")]
    AuthBusy,
    /// The rule's external authorizer is down, slow or answered garbage, and it does not
    /// fail open: 403 (Envoy's ext_authz `status_on_error` default).
    #[error("the external authorizer gave no verdict: {0}")]
    ExtAuthFailed(crate::model::ext_auth::ExtAuthFailure),
    /// The OpenID Provider cannot be used now (its discovery document not fetched yet, its
    /// token endpoint unreachable): 503, nothing was let through.
    #[error("the identity provider is unavailable")]
    AuthUnavailable,
    /// Over a BackendTrafficPolicy's local rate limit: 429 with `retry-after` and the
    /// `x-ratelimit-*` headers.
    #[error("over the rate limit of {}", .0.policy.source)]
    RateLimited(Box<crate::model::traffic::Limited>),
    /// The rate-limit service gave no answer and the policy is `failClosed`: 500, as Envoy's
    /// `failure_mode_deny`.
    #[error("the rate-limit service gave no answer")]
    RateLimitUnavailable,
    /// An abort a BackendTrafficPolicy's `faultInjection` injected: its HTTP status, or its
    /// gRPC status in a Trailers-Only answer.
    #[error("an abort injected by {}", .1.source)]
    Injected(
        crate::model::traffic::Abort,
        std::sync::Arc<crate::model::traffic::TrafficPolicy>,
    ),
}

/// What a 401 asks the client for (`WWW-Authenticate`, RFC 9110 §11.6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// A bearer token (RFC 6750); `invalid`: one was sent and refused.
    Bearer { invalid: bool },
    /// An API key.
    ApiKey,
    /// A username and password (RFC 7617).
    Basic,
}

impl Challenge {
    fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Self::Bearer { invalid: false } => "Bearer realm=\"pier\"",
            Self::Bearer { invalid: true } => "Bearer realm=\"pier\", error=\"invalid_token\"",
            Self::ApiKey => "APIKey realm=\"pier\"",
            Self::Basic => "Basic realm=\"pier\", charset=\"UTF-8\"",
        })
    }
}

/// Why a connection to an upstream endpoint failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum ConnectReason {
    Refused,
    Timeout,
    Other,
}

/// Why an upstream TLS handshake failed. Bounded: a metric label (`reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TlsFailure {
    /// The peer's chain does not lead to a trusted root.
    UnknownCa,
    /// The peer's certificate is outside its validity period.
    Expired,
    /// The certificate does not name the expected identity.
    SanMismatch,
    /// A valid mesh certificate, but for another workload identity than the endpoint's
    /// (per-endpoint identity).
    IdentityMismatch,
    /// The peer did not answer in TLS (plaintext, garbage, or closed during the handshake).
    NotTls,
    /// The handshake did not finish within the connect timeout (a silent peer).
    Timeout,
    Other,
}

/// Why a client's TLS handshake with one of pier's listeners (HTTPS, or a TLS listener that
/// terminates) failed. Bounded: a metric label (`reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DownstreamTlsFailure {
    /// The listener requires a client certificate (`AllowValidOnly`) and the client sent none.
    NoClientCertificate,
    /// The client's chain does not lead to the listener's CA bundle.
    UnknownCa,
    /// The client's certificate is outside its validity period.
    Expired,
    /// Any other client certificate the verifier refused (bad encoding, wrong key usage,
    /// revoked, ...).
    BadCertificate,
    /// pier has no certificate for the client's SNI on this port.
    NoCertificate,
    /// Not TLS, no protocol version or cipher suite in common, a malformed or unexpected
    /// message, or an alert from the client (one that refuses pier's certificate, say).
    Protocol,
    /// The handshake did not finish within `--tls-handshake-timeout`.
    Timeout,
    /// The client closed or reset the connection during the handshake.
    Closed,
}

impl DownstreamTlsFailure {
    /// Why the handshake failed, from what tokio-rustls returned. The certificate reasons come
    /// from the upstream side's mapping ([`classify_tls`]).
    pub fn of(e: &std::io::Error) -> Self {
        match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
            Some(e) => Self::classify(e),
            // No rustls error inside: the socket failed or ended (EOF, reset) mid-handshake.
            None => Self::Closed,
        }
    }

    fn classify(e: &rustls::Error) -> Self {
        use rustls::Error as E;
        match e {
            E::NoCertificatesPresented => return Self::NoClientCertificate,
            // rustls' only report of a resolver that found nothing (`server/hs.rs`); the
            // resolver is `tls::server::SnapshotCertResolver`.
            E::General(m) if m == NO_SERVER_CERTIFICATE => return Self::NoCertificate,
            _ => {}
        }
        match classify_tls(e) {
            TlsFailure::UnknownCa => Self::UnknownCa,
            TlsFailure::Expired => Self::Expired,
            TlsFailure::NotTls => Self::Protocol,
            TlsFailure::Timeout => Self::Timeout,
            TlsFailure::SanMismatch | TlsFailure::IdentityMismatch => Self::BadCertificate,
            TlsFailure::Other => match e {
                E::InvalidCertificate(_) | E::InvalidCertRevocationList(_) => Self::BadCertificate,
                _ => Self::Protocol,
            },
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoClientCertificate => "no_client_certificate",
            Self::UnknownCa => "unknown_ca",
            Self::Expired => "expired",
            Self::BadCertificate => "bad_certificate",
            Self::NoCertificate => "no_certificate",
            Self::Protocol => "protocol",
            Self::Timeout => "timeout",
            Self::Closed => "closed",
        }
    }
}

/// The message of the `rustls::Error::General` a server returns when its certificate resolver
/// finds no certificate for the ClientHello.
const NO_SERVER_CERTIFICATE: &str = "no server certificate chain resolved";

/// A bounded label for each [`ProxyError`] variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum ErrorKind {
    NoListener,
    NoRoute,
    NoBackends,
    InvalidBackend,
    NoEndpoints,
    ConnectRefused,
    ConnectTimeout,
    ConnectOther,
    TlsUnavailable,
    TlsHandshake,
    Upstream,
    BackendTimeout,
    RequestTimeout,
    InvalidTarget,
    BadRequest,
    Misdirected,
    UnsupportedTransferCoding,
    BadRequestBody,
    RequestBodyTimeout,
    RequestBodyTooLarge,
    UriTooLong,
    BackendOverflow,
    RetryBudgetSpent,
    Forbidden,
    PolicyInvalid,
    Unauthenticated,
    AuthBusy,
    ExtAuthFailed,
    AuthUnavailable,
    RateLimited,
    RateLimitUnavailable,
    FaultInjected,
}

/// Whose fault an error is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum ErrorSide {
    /// The client asked for something that does not exist (4xx).
    Downstream,
    /// The backend failed or is unreachable (502/503/504).
    Upstream,
    /// pier's configuration cannot serve the request (500).
    Internal,
}

// === impl ProxyError ===

impl ProxyError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NoListener => ErrorKind::NoListener,
            Self::NoRoute => ErrorKind::NoRoute,
            Self::NoBackends => ErrorKind::NoBackends,
            Self::InvalidBackend => ErrorKind::InvalidBackend,
            Self::NoEndpoints => ErrorKind::NoEndpoints,
            Self::Connect { reason, .. } => match reason {
                ConnectReason::Refused => ErrorKind::ConnectRefused,
                ConnectReason::Timeout => ErrorKind::ConnectTimeout,
                ConnectReason::Other => ErrorKind::ConnectOther,
            },
            Self::TlsUnavailable(_) => ErrorKind::TlsUnavailable,
            Self::TlsHandshake { .. } => ErrorKind::TlsHandshake,
            Self::Upstream(_) => ErrorKind::Upstream,
            Self::BackendTimeout => ErrorKind::BackendTimeout,
            Self::RequestTimeout => ErrorKind::RequestTimeout,
            Self::InvalidTarget(_) => ErrorKind::InvalidTarget,
            Self::Misdirected => ErrorKind::Misdirected,
            Self::Invalid(Invalid::TransferCoding) => ErrorKind::UnsupportedTransferCoding,
            Self::Invalid(Invalid::BodyTooLarge) => ErrorKind::RequestBodyTooLarge,
            Self::Invalid(Invalid::TargetTooLong) => ErrorKind::UriTooLong,
            Self::Invalid(_) => ErrorKind::BadRequest,
            Self::ClientBody(BodyFault::Malformed) => ErrorKind::BadRequestBody,
            Self::ClientBody(BodyFault::TooSlow) => ErrorKind::RequestBodyTimeout,
            Self::ClientBody(BodyFault::TooLarge) => ErrorKind::RequestBodyTooLarge,
            Self::BackendOverflow => ErrorKind::BackendOverflow,
            Self::RetryBudgetSpent => ErrorKind::RetryBudgetSpent,
            Self::Forbidden => ErrorKind::Forbidden,
            Self::PolicyInvalid => ErrorKind::PolicyInvalid,
            Self::Unauthenticated(_) => ErrorKind::Unauthenticated,
            Self::AuthBusy => ErrorKind::AuthBusy,
            Self::ExtAuthFailed(_) => ErrorKind::ExtAuthFailed,
            Self::AuthUnavailable => ErrorKind::AuthUnavailable,
            Self::RateLimited(_) => ErrorKind::RateLimited,
            Self::RateLimitUnavailable => ErrorKind::RateLimitUnavailable,
            Self::Injected(..) => ErrorKind::FaultInjected,
        }
    }

    /// The TLS reason of a TLS failure (a metric label value), for the access log.
    pub fn tls_reason(&self) -> Option<&'static str> {
        match self {
            Self::TlsHandshake { reason, .. } => Some(reason.as_str()),
            Self::TlsUnavailable(why) => Some(why.label()),
            _ => None,
        }
    }

    pub fn side(&self) -> ErrorSide {
        match self.kind() {
            ErrorKind::NoListener
            | ErrorKind::NoRoute
            | ErrorKind::BadRequest
            | ErrorKind::Misdirected
            | ErrorKind::UnsupportedTransferCoding
            | ErrorKind::BadRequestBody
            | ErrorKind::RequestBodyTimeout
            | ErrorKind::RequestBodyTooLarge
            | ErrorKind::UriTooLong
            | ErrorKind::Forbidden
            | ErrorKind::Unauthenticated
            | ErrorKind::RateLimited => ErrorSide::Downstream,
            // A missing trust bundle or client certificate is pier's configuration.
            ErrorKind::NoBackends
            | ErrorKind::InvalidBackend
            | ErrorKind::InvalidTarget
            | ErrorKind::PolicyInvalid
            | ErrorKind::AuthBusy
            | ErrorKind::TlsUnavailable
            // Configured to fail.
            | ErrorKind::FaultInjected => ErrorSide::Internal,
            ErrorKind::AuthUnavailable | ErrorKind::RateLimitUnavailable => ErrorSide::Upstream,
            ErrorKind::NoEndpoints
            | ErrorKind::ConnectRefused
            | ErrorKind::ConnectTimeout
            | ErrorKind::ConnectOther
            | ErrorKind::TlsHandshake
            | ErrorKind::Upstream
            | ErrorKind::BackendTimeout
            | ErrorKind::RequestTimeout
            | ErrorKind::BackendOverflow
            | ErrorKind::RetryBudgetSpent
            // The authorizer is an upstream of pier's.
            | ErrorKind::ExtAuthFailed => ErrorSide::Upstream,
        }
    }

    pub fn status(&self) -> StatusCode {
        if let Self::Injected(abort, _) = self {
            return match abort {
                Abort::Http(s) => injected_status(*s),
                // The HTTP status of a Trailers-Only gRPC answer.
                Abort::Grpc(_) => StatusCode::OK,
            };
        }
        match self.kind() {
            ErrorKind::NoListener | ErrorKind::NoRoute => StatusCode::NOT_FOUND,
            ErrorKind::BadRequest | ErrorKind::BadRequestBody => StatusCode::BAD_REQUEST,
            ErrorKind::UnsupportedTransferCoding => StatusCode::NOT_IMPLEMENTED,
            ErrorKind::Misdirected => StatusCode::MISDIRECTED_REQUEST,
            ErrorKind::RequestBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::RequestBodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::UriTooLong => StatusCode::URI_TOO_LONG,
            // An authorizer without a verdict: what Envoy answers (`status_on_error`).
            ErrorKind::Forbidden | ErrorKind::ExtAuthFailed => StatusCode::FORBIDDEN,
            ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            // Gateway API: a rule whose backends are all invalid, or a pick that lands on an
            // invalid one, answers 500.
            // An invalid security policy fails closed, as Envoy Gateway answers it.
            ErrorKind::NoBackends
            | ErrorKind::InvalidBackend
            | ErrorKind::InvalidTarget
            | ErrorKind::PolicyInvalid
            | ErrorKind::RateLimitUnavailable
            | ErrorKind::FaultInjected => StatusCode::INTERNAL_SERVER_ERROR,
            // Nothing was sent: safe to retry later, as Envoy answers an overflow.
            ErrorKind::NoEndpoints
            | ErrorKind::BackendOverflow
            | ErrorKind::RetryBudgetSpent
            | ErrorKind::AuthBusy
            | ErrorKind::AuthUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            // Usually transient (a Secret not loaded yet) and nothing was sent: unavailable,
            // like an empty endpoint set, rather than 500.
            ErrorKind::TlsUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::ConnectRefused
            | ErrorKind::ConnectOther
            | ErrorKind::TlsHandshake
            | ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
            // Nothing was sent, so the request is safe to retry elsewhere: "unavailable" (as
            // Envoy answers), not "timed out waiting for an answer".
            ErrorKind::ConnectTimeout => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::BackendTimeout | ErrorKind::RequestTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The response the client sees.
    pub fn to_response(&self) -> Response<ProxyBody> {
        if let Self::Injected(abort, _) = self {
            return injected(*abort);
        }
        let status = self.status();
        let text = status.canonical_reason().unwrap_or("error");
        let mut resp = Response::new(body::full(Bytes::from(format!("{text}\n"))));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Self::Unauthenticated(c) = self {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, c.header());
        }
        if let Self::RateLimited(l) = self {
            rate_limit_headers(l, resp.headers_mut());
        }
        resp
    }
}

/// gRPC status codes pier answers with (grpc/grpc `doc/statuscodes.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum GrpcCode {
    DeadlineExceeded = 4,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

impl ProxyError {
    /// The gRPC status for this error. GRPCRoute: requests a rule cannot send to a valid
    /// backend MUST get UNAVAILABLE; a call no route matches is UNIMPLEMENTED (as HTTP 404
    /// maps to in gRPC's HTTP mapping).
    pub fn grpc_code(&self) -> GrpcCode {
        match self.kind() {
            ErrorKind::NoListener | ErrorKind::NoRoute => GrpcCode::Unimplemented,
            ErrorKind::BadRequest
            | ErrorKind::BadRequestBody
            | ErrorKind::UnsupportedTransferCoding
            | ErrorKind::InvalidTarget
            | ErrorKind::PolicyInvalid => GrpcCode::Internal,
            ErrorKind::RequestBodyTooLarge | ErrorKind::UriTooLong | ErrorKind::RateLimited => {
                GrpcCode::ResourceExhausted
            }
            ErrorKind::Forbidden | ErrorKind::ExtAuthFailed => GrpcCode::PermissionDenied,
            ErrorKind::Unauthenticated => GrpcCode::Unauthenticated,
            ErrorKind::RequestBodyTimeout
            | ErrorKind::BackendTimeout
            | ErrorKind::RequestTimeout => GrpcCode::DeadlineExceeded,
            ErrorKind::Misdirected
            | ErrorKind::NoBackends
            | ErrorKind::InvalidBackend
            | ErrorKind::NoEndpoints
            | ErrorKind::TlsUnavailable
            | ErrorKind::ConnectRefused
            | ErrorKind::ConnectTimeout
            | ErrorKind::ConnectOther
            | ErrorKind::TlsHandshake
            | ErrorKind::Upstream
            | ErrorKind::AuthBusy
            | ErrorKind::AuthUnavailable
            | ErrorKind::RateLimitUnavailable
            | ErrorKind::FaultInjected
            | ErrorKind::BackendOverflow
            | ErrorKind::RetryBudgetSpent => GrpcCode::Unavailable,
        }
    }

    /// The response a gRPC client sees: Trailers-Only, HTTP 200.
    pub fn to_grpc_response(&self) -> Response<ProxyBody> {
        if let Self::Injected(abort, _) = self {
            return injected(*abort);
        }
        // The HTTP reason phrase: ASCII, nothing percent-encoding would change.
        let text = self.status().canonical_reason().unwrap_or("error");
        let mut resp = trailers_only(self.grpc_code() as u16, text);
        if let Self::RateLimited(l) = self {
            rate_limit_headers(l, resp.headers_mut());
        }
        resp
    }

    /// The response the client sees, as gRPC for a gRPC call. An injected abort answers as
    /// configured: an HTTP status as HTTP, a gRPC status as gRPC (Envoy's fault filter).
    pub fn response(&self, grpc: bool) -> Response<ProxyBody> {
        if grpc {
            self.to_grpc_response()
        } else {
            self.to_response()
        }
    }
}

/// A gRPC Trailers-Only answer (HTTP 200): `code` and `message` in its head.
fn trailers_only(code: u16, message: &'static str) -> Response<ProxyBody> {
    let mut resp = Response::new(body::empty());
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(code));
    h.insert("grpc-message", HeaderValue::from_static(message));
    resp
}

/// An injected abort's HTTP status (translation keeps it within 200–599).
fn injected_status(s: u16) -> StatusCode {
    StatusCode::from_u16(s).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

/// The answer of an injected abort, with Envoy's fault filter's text.
fn injected(abort: Abort) -> Response<ProxyBody> {
    const TEXT: &str = "fault filter abort";
    match abort {
        Abort::Http(s) => {
            let mut resp = Response::new(body::full(Bytes::from(format!("{TEXT}\n"))));
            *resp.status_mut() = injected_status(s);
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            resp
        }
        Abort::Grpc(code) => trailers_only(code, TEXT),
    }
}

/// `retry-after` (RFC 9110 §10.2.3, whole seconds, rounded up) and the rate-limit headers of
/// draft-ietf-httpapi-ratelimit-headers-03 as Envoy sends them: `x-ratelimit-limit: 10,
/// 10;w=60`, `x-ratelimit-remaining: 0`, `x-ratelimit-reset` (seconds until the bucket is
/// full again).
fn rate_limit_headers(l: &crate::model::traffic::Limited, h: &mut http::HeaderMap) {
    fn secs(d: std::time::Duration) -> u64 {
        d.as_secs() + u64::from(d.subsec_nanos() > 0)
    }
    let limit = format!(
        "{}, {};w={}",
        l.limit.requests,
        l.limit.requests,
        l.limit.period.as_secs()
    );
    if let Ok(v) = HeaderValue::from_str(&limit) {
        h.insert("x-ratelimit-limit", v);
    }
    h.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
    h.insert("x-ratelimit-reset", HeaderValue::from(secs(l.reset)));
    h.insert(header::RETRY_AFTER, HeaderValue::from(secs(l.retry_after)));
}

/// Whether a request is a gRPC call (`application/grpc`, `application/grpc+proto`,
/// `application/grpc-web...`).
pub fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

impl std::fmt::Display for ConnectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Refused => "connection refused",
            Self::Timeout => "connect timeout",
            Self::Other => "connect error",
        })
    }
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TlsFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownCa => "unknown_ca",
            Self::Expired => "expired",
            Self::SanMismatch => "san_mismatch",
            Self::IdentityMismatch => "identity_mismatch",
            Self::NotTls => "not_tls",
            Self::Timeout => "timeout",
            Self::Other => "other",
        }
    }
}

/// The one mapping from rustls errors to bounded reasons. (Keep it the only place that looks inside `rustls::Error`, with the downstream
/// reasons' few additions in `DownstreamTlsFailure::classify`, which builds on it.)
pub fn classify_tls(e: &rustls::Error) -> TlsFailure {
    use rustls::Error as E;
    if crate::tls::client::is_identity_mismatch(e) {
        return TlsFailure::IdentityMismatch;
    }
    match e {
        E::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                TlsFailure::UnknownCa
            }
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => TlsFailure::Expired,
            CertificateError::NotValidForName
            | CertificateError::NotValidForNameContext { .. }
            | CertificateError::ApplicationVerificationFailure => TlsFailure::SanMismatch,
            _ => TlsFailure::Other,
        },
        // Bytes that are not TLS records: a plaintext peer (an HTTP response to our
        // ClientHello), or garbage.
        E::InvalidMessage(_) | E::InappropriateMessage { .. } | E::PeerSentOversizedRecord => {
            TlsFailure::NotTls
        }
        _ => TlsFailure::Other,
    }
}

#[cfg(test)]
mod tests;
