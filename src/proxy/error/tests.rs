//! One test per `ProxyError` variant: status, side, and a body that never leaks the cause.

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
fn tls_unavailable_is_503_internal() {
    let e = ProxyError::TlsUnavailable(TlsUnavailable::NoTrustBundle);
    assert_eq!(e.kind(), ErrorKind::TlsUnavailable);
    check(e, 503, ErrorSide::Internal);
}

#[test]
fn tls_handshake_failure_is_502_upstream() {
    let e = ProxyError::TlsHandshake {
        reason: TlsFailure::UnknownCa,
        source: io(std::io::ErrorKind::InvalidData),
    };
    assert_eq!(e.kind(), ErrorKind::TlsHandshake);
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
