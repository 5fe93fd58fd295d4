//! Why the API server could not be reached, in words a person acts on: `connection refused`,
//! `connection timed out`, `TLS handshake failed: invalid peer certificate: UnknownIssuer`,
//! `DNS lookup failed: …`, instead of the client stack's `ServiceError: client error
//! (Connect)`.

use std::error::Error;
use std::io;

/// The cause of `e` that says what went wrong on the way to the server (the socket, DNS or
/// TLS), else its whole chain on one line.
pub fn describe(e: &(dyn Error + 'static)) -> String {
    let mut cur = Some(e);
    let mut dns = false;
    while let Some(c) = cur {
        // hyper-util's connector says `dns error` before the resolver's own error.
        dns |= c.to_string().contains("dns error");
        if let Some(io) = c.downcast_ref::<io::Error>() {
            return io_cause(io, dns);
        }
        if let Some(tls) = c.downcast_ref::<rustls::Error>() {
            return format!("TLS handshake failed: {tls}");
        }
        cur = c.source();
    }
    crate::translate::error_chain(e)
}

fn io_cause(e: &io::Error, dns: bool) -> String {
    use io::ErrorKind as K;
    let plain = match e.kind() {
        K::ConnectionRefused => Some("connection refused (nothing listens at that address)"),
        K::TimedOut => Some("connection timed out"),
        K::ConnectionReset => Some("connection reset by the server"),
        K::HostUnreachable => Some("no route to the host"),
        K::NetworkUnreachable => Some("network unreachable"),
        _ => None,
    };
    if let Some(p) = plain {
        return p.to_string();
    }
    // An io::Error wrapping another (rustls' through the TLS stream): its own source() skips
    // the wrapped error, so look at it directly.
    match e.get_ref() {
        Some(inner) if inner.downcast_ref::<rustls::Error>().is_some() => {
            format!("TLS handshake failed: {inner}")
        }
        _ if dns => format!("DNS lookup failed: {e}"),
        Some(inner) => inner.to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Client(#[source] Connect);

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Connect(&'static str, #[source] io::Error);

    #[test]
    fn the_socket_cause_is_named_not_the_client_stack() {
        let e = Client(Connect(
            "tcp connect error",
            io::Error::from(io::ErrorKind::ConnectionRefused),
        ));
        assert_eq!(
            describe(&e),
            "connection refused (nothing listens at that address)"
        );
        let e = Client(Connect(
            "dns error",
            io::Error::other("failed to lookup address information"),
        ));
        assert_eq!(
            describe(&e),
            "DNS lookup failed: failed to lookup address information"
        );
    }

    #[test]
    fn a_tls_failure_says_so() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let e = Client(Connect(
            "tls",
            io::Error::new(io::ErrorKind::InvalidData, tls),
        ));
        assert!(
            describe(&e).starts_with("TLS handshake failed: invalid peer certificate"),
            "{}",
            describe(&e)
        );
    }
}
