//! What the request paths (`h1`, `service`) know of the downstream connection a request
//! arrived on; `conn` fills it in.

use std::net::{IpAddr, SocketAddr};

use http::HeaderValue;

use crate::proxy::drain::DrainToken;

/// The hop a request arrived from: the connection's client ([`ConnInfo::peer`]).
///
/// [`ConnInfo::peer`]: ConnInfo::peer
#[derive(Clone, Copy, Debug)]
pub struct Hop<'a> {
    pub addr: IpAddr,
    /// `addr` as an `X-Forwarded-For` entry (formatted once per connection).
    pub forwarded_for: &'a HeaderValue,
    /// `addr` is a trusted proxy (decided once per connection).
    pub trusted: bool,
    /// Keep the `X-Request-Id` it sends even when it is not trusted (the port's
    /// ClientTrafficPolicy `headers.preserveXRequestID`).
    pub keep_request_id: bool,
}

/// What the request path needs to know about the connection it arrived on.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub port: u16,
    /// The Gateway address the port is bound on (`None`: the listen host).
    pub address: Option<std::net::IpAddr>,
    /// The client: the socket's peer, or on a PROXY protocol port the source address the
    /// header carried (what `X-Forwarded-For` and the access log show).
    pub peer: SocketAddr,
    /// The socket's own peer when a PROXY protocol header named another client (the load
    /// balancer in front of pier).
    pub via: Option<SocketAddr>,
    /// The TLS server name the client sent (normalised), on HTTPS connections: a request
    /// whose Host selects another listener than this did is misdirected (421).
    pub sni: Option<Box<str>>,
    /// `peer`'s IP as an `X-Forwarded-For` entry, formatted once per connection.
    pub forwarded_for: http::HeaderValue,
    /// The client certificate's identity, when it verified against the port's frontend CAs
    /// in the handshake (the value of a listener's `client_cert_header`).
    pub client_identity: Option<std::sync::Arc<crate::tls::server::ClientIdentity>>,
    /// The listener TLS settings the handshake was made under (`None`: pier's default), on
    /// ports where listeners have their own: a request for a listener with other settings is
    /// misdirected (421), so no client reaches a listener under weaker settings than its own.
    pub tls_profile: Option<std::sync::Arc<crate::model::TlsProfile>>,
    /// `peer` is one of `--trusted-proxies` (or of the port's ClientTrafficPolicy
    /// `clientIPDetection`): its forwarding headers and request ID are believed
    /// (`observe::forwarded`). Decided once per connection.
    pub trusted_hop: bool,
    /// The port's connection settings from its listeners' ClientTrafficPolicies (trusted
    /// proxies for the `X-Forwarded-For` chain, the idle timeout); `None`: the flags'.
    pub client: Option<std::sync::Arc<crate::model::PortClient>>,
    /// Upgrade tunnels take a clone so that draining waits for them too.
    pub drain: DrainToken,
}

impl ConnInfo {
    /// Whose forwarding headers are believed: the port's policy's, else `flags`.
    #[inline]
    pub fn trusted_proxies<'a>(
        &'a self,
        flags: &'a crate::model::net::TrustedProxies,
    ) -> &'a crate::model::net::TrustedProxies {
        match self
            .client
            .as_ref()
            .and_then(|c| c.trusted_proxies.as_deref())
        {
            Some(t) => t,
            None => flags,
        }
    }

    /// How paths are normalised and header names with `_` handled: the port's policy's `path`
    /// and `headers`, else `--merge-slashes`, escaped slashes kept and underscores allowed.
    #[inline]
    pub fn request_rules(&self, merge_slashes: bool) -> crate::proxy::validate::RequestRules {
        match &self.client {
            None => crate::proxy::validate::RequestRules {
                merge_slashes,
                escaped_slashes: Default::default(),
                underscores: Default::default(),
            },
            Some(c) => crate::proxy::validate::RequestRules {
                merge_slashes: c.merge_slashes.unwrap_or(merge_slashes),
                escaped_slashes: c.escaped_slashes.unwrap_or_default(),
                underscores: c.underscores.unwrap_or_default(),
            },
        }
    }

    /// How long the connection may idle: the port's policy's, else `flags`.
    #[inline]
    pub fn idle_timeout(&self, flags: std::time::Duration) -> std::time::Duration {
        self.client
            .as_ref()
            .and_then(|c| c.idle_timeout)
            .unwrap_or(flags)
    }

    /// How long a request may take to arrive from its first byte (the port's policy's
    /// `requestReceivedTimeout`), if it is bounded.
    #[inline]
    pub fn request_received_timeout(&self) -> Option<std::time::Duration> {
        self.client.as_ref().and_then(|c| c.request_received)
    }

    /// The snapshot port the connection arrived on.
    pub fn key(&self) -> crate::model::PortKey {
        crate::model::PortKey {
            address: self.address,
            port: self.port,
            udp: false,
        }
    }

    /// The hop requests on this connection come from, for `forwarded::Edge`.
    pub fn hop(&self) -> Hop<'_> {
        Hop {
            addr: self.peer.ip(),
            forwarded_for: &self.forwarded_for,
            trusted: self.trusted_hop,
            keep_request_id: self.client.as_ref().is_some_and(|c| c.preserve_request_id),
        }
    }
}
