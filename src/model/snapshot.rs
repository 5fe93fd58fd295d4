//! The snapshot: everything the data plane needs, swapped whole.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use super::ObjectRef;
use super::host::{HostRank, HostnameMatch};
use super::route::RouteTable;
use super::tls::{CertTable, ClientAuth};

#[derive(Debug, Default, Serialize)]
pub struct Snapshot {
    /// Increases by one with every published change.
    pub generation: u64,
    /// Sorted by (address, port number).
    pub ports: Vec<Port>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Protocol {
    #[serde(rename = "HTTP")]
    Http,
    #[serde(rename = "HTTPS")]
    Https,
    /// TLS streams routed by SNI (TLSRoute): passed through, or terminated and relayed.
    #[serde(rename = "TLS")]
    Tls,
    /// Plain TCP streams (TCPRoute): relayed to the oldest route's backends.
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP datagrams (UDPRoute): each client's to one endpoint of the oldest route's weighted
    /// backends, the endpoint's replies back to the client.
    #[serde(rename = "UDP")]
    Udp,
}

impl Protocol {
    pub fn scheme(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https | Self::Tls => "https",
            Self::Tcp => "tcp",
            Self::Udp => "udp",
        }
    }
}

/// One bound port and the listeners that share it (from one or more Gateways).
#[derive(Debug, Serialize)]
pub struct Port {
    /// The address this port binds: a Gateway's own (`--gateway-address-pool`), or `None` for
    /// the proxy's listen host, shared by every Gateway without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<std::net::IpAddr>,
    pub port: u16,
    pub protocol: Protocol,
    /// Every connection starts with a PROXY protocol header (v1 or v2), read before TLS or
    /// HTTP: set when any listener on the port asks for it (`pier.dev/proxy-protocol`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub proxy_protocol: bool,
    /// Some listener on the port turns the access log on (`pier.dev/access-log: "true"`),
    /// so requests on it are logged even when `--access-log` is off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub access_log_on: bool,
    /// Most specific hostname first.
    pub listeners: Vec<Listener>,
    /// Server certificates by SNI, for HTTPS ports and TLS ports with terminating listeners.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certs: Option<CertTable>,
    /// HTTPS ports: client certificate validation (Gateway `spec.tls.frontend`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_auth: Option<ClientAuth>,
    /// Some listener on the port has a [`TlsProfile`](super::TlsProfile) of its own: the
    /// handshake reads the ClientHello first and takes the profile of the listener its SNI
    /// reaches.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls_profiles: bool,
    /// Its connections' settings from its listeners' ClientTrafficPolicies (`None`: the
    /// flags').
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<Arc<super::PortClient>>,
    /// HTTPS ports where some listener serves HTTP/3: the QUIC endpoint on the same number
    /// over UDP, and the handshake settings it offers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<Quic>,
}

/// An HTTPS port's QUIC endpoint (HTTP/3). One handshake configuration serves the whole
/// endpoint (QUIC gives no ClientHello to choose one by before the handshake starts): the TLS
/// settings of the port's HTTP/3 listeners, which translation makes agree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Quic {
    /// The listeners' TLS settings (`None`: pier's defaults); TLS 1.3 in any case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<Arc<super::TlsProfile>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ListenerId {
    pub gateway: ObjectRef,
    /// The ListenerSet the listener comes from (`None`: the Gateway's own spec). Names are
    /// unique per Gateway or ListenerSet, not across them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<ObjectRef>,
    pub name: String,
}

impl ListenerId {
    /// The name within its Gateway: `name`, or `set-namespace/set-name/name` for a
    /// ListenerSet's listener (the `listener` metric label).
    pub fn label(&self) -> String {
        match &self.set {
            None => self.name.clone(),
            Some(s) => format!("{s}/{}", self.name),
        }
    }
}

impl fmt::Display for ListenerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.gateway, self.label())
    }
}

#[derive(Debug, Serialize)]
pub struct Listener {
    pub id: ListenerId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<HostnameMatch>,
    /// TLS listeners with `tls.mode: Passthrough`: the client's TLS goes to the backend as
    /// it is (routes by SNI, never terminated here).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub passthrough: bool,
    /// The request header that carries the client's verified certificate identity
    /// (`pier.dev/client-certificate-header`); whatever the client sent under this name is
    /// removed first, verified identity or not.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_header_name"
    )]
    pub client_cert_header: Option<http::HeaderName>,
    /// The Gateway's `pier.dev/access-log` annotation: log this listener's requests or not
    /// whatever `--access-log` says (`None`: as it says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<bool>,
    /// The handshake of an HTTPS or terminating TLS listener when it is not pier's default
    /// (its ClientTrafficPolicy's `tls`, or its `tls.options`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_profile: Option<Arc<super::TlsProfile>>,
    /// Its ClientTrafficPolicy, if one applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_policy: Option<Arc<super::ClientPolicy>>,
    /// Its listener filters (GEP-5224): run before routing, on hyper's path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_route: Option<Arc<super::ext_auth::PreRoute>>,
    /// Its requests go to hyper's path before routing: it has `pre_route` or a
    /// `client_cert_header` (both act on a header map). One test on the fast path.
    #[serde(skip)]
    pub before_routing: bool,
    /// HTTP/3 is served for it (its ClientTrafficPolicy's `http3`): the `Alt-Svc` value its
    /// responses over TCP carry (`h3=":<port>"; ma=86400`).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_header_value"
    )]
    pub alt_svc: Option<http::HeaderValue>,
    pub routes: RouteTable,
}

fn ser_header_value<S: serde::Serializer>(
    value: &Option<http::HeaderValue>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match value.as_ref().and_then(|v| v.to_str().ok()) {
        Some(v) => s.serialize_some(v),
        None => s.serialize_none(),
    }
}

fn ser_header_name<S: serde::Serializer>(
    name: &Option<http::HeaderName>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match name {
        Some(n) => s.serialize_some(n.as_str()),
        None => s.serialize_none(),
    }
}

// === impl Snapshot ===

impl Snapshot {
    /// What the next translation takes over: endpoint load state, upstream TLS configs, rate
    /// limit buckets and the traffic policies in force.
    pub fn carried(&self) -> super::carried::Carried {
        use super::backend::BackendTls;
        let mut carried = super::carried::Carried::default();
        let rules = self.ports.iter().flat_map(|p| &p.listeners);
        for p in rules.clone().filter_map(|l| l.client_policy.as_ref()) {
            (carried.client)
                .entry(p.source.clone())
                .or_insert_with(|| p.clone());
        }
        let traffic = rules.flat_map(|l| l.routes.entries());
        for t in traffic.filter_map(|e| e.rule.traffic.as_ref()) {
            let policy = &t.policy;
            for (key, buckets) in &t.local {
                (carried.limits)
                    .entry(key.to_string())
                    .or_insert_with(|| buckets.clone());
            }
            (carried.traffic)
                .entry(policy.source.clone())
                .or_insert_with(|| policy.clone());
        }
        self.for_each_backend(|b| {
            carried.endpoints.insert_backend(b);
            b.endpoints.iter().for_each(|e| carried.endpoints.insert(e));
            let own = b.endpoints.iter().filter_map(|e| e.tls.as_deref());
            let shared = match &b.tls {
                BackendTls::Tls(t) => Some(&**t),
                _ => None,
            };
            for t in shared.into_iter().chain(own) {
                carried
                    .tls_configs
                    .entry(t.trust_key)
                    .or_insert_with(|| t.config.clone());
            }
        });
        carried
    }

    /// Every backend this snapshot routes or mirrors to (once per reference), listener
    /// filters' authorizers included.
    pub fn for_each_backend(&self, mut add: impl FnMut(&super::backend::Backend)) {
        use super::route::BackendTarget;
        let listeners = self.ports.iter().flat_map(|p| &p.listeners);
        for l in listeners.clone() {
            if let Some(super::ext_auth::PreRoute::Authorize(auths)) = l.pre_route.as_deref() {
                auths.iter().for_each(|e| add(&e.backend));
            }
        }
        for entry in listeners.flat_map(|l| l.routes.entries()) {
            let rule = &entry.rule;
            rule.filters.mirrors.iter().for_each(|m| add(&m.backend));
            // External authorizers: pooled like backends, so their connections live as long.
            rule.ext_auths().for_each(|e| add(&e.backend));
            for wb in &rule.backends.backends {
                if let BackendTarget::Service(b) = &wb.target {
                    add(b);
                }
                wb.filters.mirrors.iter().for_each(|m| add(&m.backend));
            }
        }
    }

    /// The port bound on the listen host (no Gateway address of its own).
    pub fn port(&self, port: u16) -> Option<&Port> {
        self.port_at(PortKey {
            address: None,
            port,
            udp: false,
        })
    }

    /// The port bound at `key`.
    #[inline]
    pub fn port_at(&self, key: PortKey) -> Option<&Port> {
        // A plain loop: the slice search's comparison closure stayed out of line here (~150
        // instructions per request, callgrind).
        let (mut lo, mut hi) = (0, self.ports.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.ports[mid].key().cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(&self.ports[mid]),
            }
        }
        None
    }
}

/// Where a port is bound: its address (`None`: the listen host), number and transport (a UDP
/// port and a TCP port may have the same number). Ordered by address, then number, TCP before
/// UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortKey {
    pub address: Option<std::net::IpAddr>,
    pub port: u16,
    /// A UDP socket (UDP listeners); else a TCP one.
    pub udp: bool,
}

// The order a derive would give, with the common case (no Gateway addresses: both `None`) a
// plain number compare that inlines into `Snapshot::port_at`'s search on every request (the
// derived `cmp` stayed out of line there, ~50 instructions per plain request, callgrind).
impl Ord for PortKey {
    #[inline(always)]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self.address, other.address) {
            (None, None) => self.number().cmp(&other.number()),
            (a, b) => (a, self.number()).cmp(&(b, other.number())),
        }
    }
}

impl PartialOrd for PortKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PortKey {
    /// The number and transport as one integer, to compare in one instruction.
    #[inline(always)]
    fn number(&self) -> u32 {
        (u32::from(self.port) << 1) | u32::from(self.udp)
    }
}

/// `*:8080`, `10.0.0.1:53/udp`.
impl fmt::Display for PortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.address {
            Some(std::net::IpAddr::V6(a)) => write!(f, "[{a}]:{}", self.port)?,
            Some(a) => write!(f, "{a}:{}", self.port)?,
            None => write!(f, "*:{}", self.port)?,
        }
        if self.udp {
            f.write_str("/udp")?;
        }
        Ok(())
    }
}

// === impl Port ===

impl Port {
    #[inline(always)]
    pub fn key(&self) -> PortKey {
        PortKey {
            address: self.address,
            port: self.port,
            udp: self.protocol == Protocol::Udp,
        }
    }

    /// Listener isolation: a request is handled by the one most specific listener whose
    /// hostname matches, never by a less specific one. `host` is normalised.
    /// `listeners` is sorted most specific first, so the first match is the best.
    pub fn listener(&self, host: &str) -> Option<&Listener> {
        self.listeners
            .iter()
            .find(|l| l.hostname.as_ref().is_none_or(|h| h.matches(host)))
    }

    /// The handshake profile of the listener a ClientHello's SNI reaches (`None`: pier's
    /// default, also for a client without SNI unless a listener without hostname has one).
    pub fn tls_profile_for(&self, sni: Option<&str>) -> Option<&Arc<super::TlsProfile>> {
        self.listener(sni.unwrap_or_default())?.tls_profile.as_ref()
    }

    /// Sorts listeners most specific first (stable: earlier Gateways/listeners win ties).
    /// The key of the port's QUIC endpoint: the same address and number over UDP.
    pub fn quic_key(&self) -> Option<PortKey> {
        self.quic.as_ref().map(|_| PortKey {
            udp: true,
            ..self.key()
        })
    }

    pub fn sort_listeners(&mut self) {
        self.listeners.sort_by_key(|l| std::cmp::Reverse(l.rank()));
    }
}

impl Listener {
    pub fn rank(&self) -> HostRank {
        self.hostname
            .as_ref()
            .map_or(HostRank::Any, HostnameMatch::rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_keys_order_by_address_then_number() {
        let k = |a: Option<&str>, port| PortKey {
            address: a.map(|a| a.parse().unwrap()),
            port,
            udp: false,
        };
        let mut keys = vec![
            k(Some("10.0.0.2"), 80),
            k(None, 443),
            k(Some("10.0.0.1"), 8080),
            k(Some("10.0.0.1"), 80),
            k(None, 80),
            k(Some("::1"), 1),
        ];
        keys.sort();
        assert_eq!(
            keys,
            [
                k(None, 80),
                k(None, 443),
                k(Some("10.0.0.1"), 80),
                k(Some("10.0.0.1"), 8080),
                k(Some("10.0.0.2"), 80),
                k(Some("::1"), 1),
            ]
        );
        // A UDP port right after the TCP port of its number.
        let udp = |a: Option<&str>, port| PortKey {
            udp: true,
            ..k(a, port)
        };
        keys.extend([udp(None, 80), udp(Some("10.0.0.1"), 80), udp(None, 79)]);
        keys.sort();
        assert_eq!(
            &keys[..4],
            [udp(None, 79), k(None, 80), udp(None, 80), k(None, 443)]
        );
        assert_eq!(keys[5], udp(Some("10.0.0.1"), 80));
        // As the tuple compares: the order a derive gave.
        for a in &keys {
            for b in &keys {
                assert_eq!(
                    a.cmp(b),
                    (a.address, a.port, a.udp).cmp(&(b.address, b.port, b.udp))
                );
            }
        }
    }

    fn listener(name: &str, host: Option<&str>) -> Listener {
        Listener {
            id: ListenerId {
                gateway: ObjectRef::new("ns", "gw"),
                set: None,
                name: name.into(),
            },
            hostname: host.map(|h| HostnameMatch::parse(h).unwrap()),
            passthrough: false,
            client_cert_header: None,
            tls_profile: None,
            client_policy: None,
            access_log: None,
            pre_route: None,
            before_routing: false,
            alt_svc: None,
            routes: RouteTable::default(),
        }
    }

    #[test]
    fn listener_isolation_picks_the_most_specific_listener() {
        let mut p = Port {
            address: None,
            port: 80,
            protocol: Protocol::Http,
            proxy_protocol: false,
            access_log_on: false,
            listeners: vec![
                listener("any", None),
                listener("wild", Some("*.example.com")),
                listener("exact", Some("foo.example.com")),
            ],
            certs: None,
            client_auth: None,
            tls_profiles: false,
            client: None,
            quic: None,
        };
        p.sort_listeners();
        assert_eq!(p.listener("foo.example.com").unwrap().id.name, "exact");
        assert_eq!(p.listener("bar.example.com").unwrap().id.name, "wild");
        assert_eq!(p.listener("other.net").unwrap().id.name, "any");
    }

    #[test]
    fn no_matching_listener_is_none() {
        let p = Port {
            address: None,
            port: 80,
            protocol: Protocol::Http,
            proxy_protocol: false,
            access_log_on: false,
            listeners: vec![listener("exact", Some("foo.example.com"))],
            certs: None,
            client_auth: None,
            tls_profiles: false,
            client: None,
            quic: None,
        };
        assert!(p.listener("bar.example.com").is_none());
    }

    /// Listener filters' authorizers are backends of the snapshot like routes' (the pool
    /// keeps their connections, reloads carry their load state).
    #[test]
    fn listener_authorizers_are_among_the_backends() {
        use crate::model::ext_auth::{ExtAuth, ExtAuthProtocol, HeaderSelection, PreRoute};
        let authz = Arc::new(super::super::backend::Backend::test("authz"));
        let mut l = listener("authed", None);
        l.pre_route = Some(Arc::new(PreRoute::Authorize(
            vec![Arc::new(ExtAuth {
                source: "test".into(),
                backend: authz,
                authority: "authz.default.svc".into(),
                protocol: ExtAuthProtocol::Grpc,
                headers_to_ext_auth: HeaderSelection::All,
                body: None,
                timeout: std::time::Duration::from_secs(1),
                fail_open: false,
            })]
            .into(),
        )));
        let snapshot = Snapshot {
            generation: 0,
            ports: vec![Port {
                address: None,
                port: 80,
                protocol: Protocol::Http,
                proxy_protocol: false,
                access_log_on: false,
                listeners: vec![l],
                certs: None,
                client_auth: None,
                tls_profiles: false,
                client: None,
                quic: None,
            }],
        };
        let mut seen = Vec::new();
        snapshot.for_each_backend(|b| seen.push(b.id.service.name.clone()));
        assert_eq!(seen, ["authz"]);
    }
}
