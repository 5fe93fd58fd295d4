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

#[test]
fn downstream_handshake_failures_map_to_bounded_reasons() {
    use rustls::{CertificateError as C, Error as E};
    use std::io::{Error, ErrorKind};
    let of = |e: E| DownstreamTlsFailure::of(&Error::new(ErrorKind::InvalidData, e)).as_str();
    assert_eq!(of(E::NoCertificatesPresented), "no_client_certificate");
    assert_eq!(of(E::InvalidCertificate(C::UnknownIssuer)), "unknown_ca");
    assert_eq!(of(E::InvalidCertificate(C::BadSignature)), "unknown_ca");
    assert_eq!(of(E::InvalidCertificate(C::Expired)), "expired");
    assert_eq!(of(E::InvalidCertificate(C::NotValidYet)), "expired");
    assert_eq!(of(E::InvalidCertificate(C::BadEncoding)), "bad_certificate");
    assert_eq!(of(E::InvalidCertificate(C::Revoked)), "bad_certificate");
    assert_eq!(
        of(E::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType
        )),
        "protocol"
    );
    assert_eq!(
        of(E::AlertReceived(rustls::AlertDescription::UnknownCA)),
        "protocol"
    );
    assert_eq!(
        of(E::PeerIncompatible(
            rustls::PeerIncompatible::NoCipherSuitesInCommon
        )),
        "protocol"
    );
    for kind in [ErrorKind::UnexpectedEof, ErrorKind::ConnectionReset] {
        assert_eq!(
            DownstreamTlsFailure::of(&Error::from(kind)).as_str(),
            "closed"
        );
    }
}

/// The error rustls returns when the certificate resolver finds nothing is matched by its
/// message: a real handshake (in memory) against a resolver that never has a certificate.
#[test]
fn a_resolver_without_a_certificate_is_no_certificate() {
    use std::sync::Arc;
    #[derive(Debug)]
    struct Nothing;
    impl rustls::server::ResolvesServerCert for Nothing {
        fn resolve(
            &self,
            _: rustls::server::ClientHello<'_>,
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            None
        }
    }
    let provider = crate::tls::provider::provider();
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Nothing));
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("app.example.com").unwrap();
    let mut client = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
    let mut server = rustls::ServerConnection::new(Arc::new(server)).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    server.read_tls(&mut hello.as_slice()).unwrap();
    let error = server.process_new_packets().unwrap_err();
    let io = std::io::Error::new(std::io::ErrorKind::InvalidData, error);
    assert_eq!(
        DownstreamTlsFailure::of(&io),
        DownstreamTlsFailure::NoCertificate
    );
}

#[test]
fn forbidden_is_403_downstream_and_permission_denied_for_grpc() {
    check(ProxyError::Forbidden, 403, ErrorSide::Downstream);
    assert_eq!(
        ProxyError::Forbidden.grpc_code(),
        GrpcCode::PermissionDenied
    );
    let resp = ProxyError::Forbidden.to_grpc_response();
    assert_eq!(resp.headers()["grpc-status"], "7");
}

#[test]
fn an_authorizer_without_a_verdict_is_403_upstream_and_permission_denied_for_grpc() {
    use crate::model::ext_auth::ExtAuthFailure;
    for f in [
        ExtAuthFailure::NoEndpoints,
        ExtAuthFailure::Unreachable,
        ExtAuthFailure::Timeout,
        ExtAuthFailure::Garbage,
    ] {
        check(ProxyError::ExtAuthFailed(f), 403, ErrorSide::Upstream);
        assert_eq!(
            ProxyError::ExtAuthFailed(f).grpc_code(),
            GrpcCode::PermissionDenied
        );
    }
}
