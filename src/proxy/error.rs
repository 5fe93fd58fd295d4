//! Everything that can end a request before a backend answers, and the one place that turns
//! it into a response.
//!
//! Each variant has a [`ErrorKind`] (a bounded metric label) and an [`ErrorSide`]: whose fault
//! it is. Downstream errors are 4xx, upstream errors 502/503/504, internal (configuration)
//! errors 500. Error bodies are short plain text and never echo request data.

use std::error::Error as StdError;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use prometheus_client::encoding::EncodeLabelValue;

use super::body::{self, ProxyBody};

pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

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
}

/// Why a connection to an upstream endpoint failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum ConnectReason {
    Refused,
    Timeout,
    Other,
}

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
    Upstream,
    BackendTimeout,
    RequestTimeout,
    InvalidTarget,
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
            Self::Upstream(_) => ErrorKind::Upstream,
            Self::BackendTimeout => ErrorKind::BackendTimeout,
            Self::RequestTimeout => ErrorKind::RequestTimeout,
            Self::InvalidTarget(_) => ErrorKind::InvalidTarget,
        }
    }

    pub fn side(&self) -> ErrorSide {
        match self.kind() {
            ErrorKind::NoListener | ErrorKind::NoRoute => ErrorSide::Downstream,
            ErrorKind::NoBackends | ErrorKind::InvalidBackend | ErrorKind::InvalidTarget => {
                ErrorSide::Internal
            }
            ErrorKind::NoEndpoints
            | ErrorKind::ConnectRefused
            | ErrorKind::ConnectTimeout
            | ErrorKind::ConnectOther
            | ErrorKind::Upstream
            | ErrorKind::BackendTimeout
            | ErrorKind::RequestTimeout => ErrorSide::Upstream,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self.kind() {
            ErrorKind::NoListener | ErrorKind::NoRoute => StatusCode::NOT_FOUND,
            // Gateway API: a rule whose backends are all invalid, or a pick that lands on an
            // invalid one, answers 500.
            ErrorKind::NoBackends | ErrorKind::InvalidBackend | ErrorKind::InvalidTarget => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ErrorKind::NoEndpoints => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::ConnectRefused | ErrorKind::ConnectOther | ErrorKind::Upstream => {
                StatusCode::BAD_GATEWAY
            }
            // Nothing was sent, so the request is safe to retry elsewhere: "unavailable" (as
            // Envoy answers), not "timed out waiting for an answer".
            ErrorKind::ConnectTimeout => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::BackendTimeout | ErrorKind::RequestTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The response the client sees.
    pub fn to_response(&self) -> Response<ProxyBody> {
        let status = self.status();
        let text = status.canonical_reason().unwrap_or("error");
        let mut resp = Response::new(body::full(Bytes::from(format!("{text}\n"))));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> BoxError {
        Box::new(std::io::Error::from(kind))
    }

    fn check(e: ProxyError, status: u16, side: ErrorSide) {
        let resp = e.to_response();
        assert_eq!(resp.status().as_u16(), status, "{e}");
        assert_eq!(e.side(), side, "{e}");
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }

    #[test]
    fn no_listener_is_404_downstream() {
        check(ProxyError::NoListener, 404, ErrorSide::Downstream);
    }

    #[test]
    fn no_route_is_404_downstream() {
        check(ProxyError::NoRoute, 404, ErrorSide::Downstream);
    }

    #[test]
    fn no_backends_is_500_internal() {
        check(ProxyError::NoBackends, 500, ErrorSide::Internal);
    }

    #[test]
    fn invalid_backend_is_500_internal() {
        check(ProxyError::InvalidBackend, 500, ErrorSide::Internal);
    }

    #[test]
    fn no_endpoints_is_503_upstream() {
        check(ProxyError::NoEndpoints, 503, ErrorSide::Upstream);
    }

    #[test]
    fn connect_refused_is_502_upstream() {
        let e = ProxyError::Connect {
            reason: ConnectReason::Refused,
            source: io(std::io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(e.kind(), ErrorKind::ConnectRefused);
        check(e, 502, ErrorSide::Upstream);
    }

    #[test]
    fn connect_timeout_is_503_upstream() {
        let e = ProxyError::Connect {
            reason: ConnectReason::Timeout,
            source: io(std::io::ErrorKind::TimedOut),
        };
        assert_eq!(e.kind(), ErrorKind::ConnectTimeout);
        check(e, 503, ErrorSide::Upstream);
    }

    #[test]
    fn other_connect_error_is_502_upstream() {
        let e = ProxyError::Connect {
            reason: ConnectReason::Other,
            source: io(std::io::ErrorKind::AddrNotAvailable),
        };
        assert_eq!(e.kind(), ErrorKind::ConnectOther);
        check(e, 502, ErrorSide::Upstream);
    }

    #[test]
    fn upstream_failure_is_502_upstream() {
        check(
            ProxyError::Upstream(io(std::io::ErrorKind::ConnectionReset)),
            502,
            ErrorSide::Upstream,
        );
    }

    #[test]
    fn backend_timeout_is_504_upstream() {
        check(ProxyError::BackendTimeout, 504, ErrorSide::Upstream);
    }

    #[test]
    fn request_timeout_is_504_upstream() {
        check(ProxyError::RequestTimeout, 504, ErrorSide::Upstream);
    }

    #[test]
    fn invalid_target_is_500_internal() {
        let err = http::Request::builder()
            .uri("http://[::1")
            .body(())
            .unwrap_err();
        check(ProxyError::InvalidTarget(err), 500, ErrorSide::Internal);
    }

    #[test]
    fn error_bodies_do_not_echo_the_source() {
        let e = ProxyError::Upstream("secret upstream detail".into());
        let resp = e.to_response();
        let body = futures::executor::block_on(http_body_util::BodyExt::collect(resp.into_body()))
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"Bad Gateway\n");
    }
}
