//! Gateway API objects -> [`Snapshot`] + statuses. Pure and synchronous: no clock, no
//! environment, no network, no randomness; every output is sorted, so the same [`Resources`]
//! always give the same [`Translation`].
//!
//! ```text
//! Resources ─> gateway::gateway_classes ─> gateway::gateways (listeners, certs, conflicts,
//!                                                │            mesh::gateway_tls per Gateway)
//!          HTTPRoutes + GRPCRoutes + TLSRoutes (oldest first; the others in HTTPRoute form,
//!                                                grpc_route, tls_route)
//!                        ─> http_route::translate_route ─> attachments + rules
//!                                                │   (rules compiled per Gateway: backend TLS
//!                                                │    from backend_tls, meshed or not)
//!                         RouteTableBuilder per listener ─> Snapshot { ports }
//!                         conditions per object ─────────> Statuses
//! ```
//!
//! Backend TLS ([`mesh`], `backend_tls`): a Route meshed by its Gateway's `spec.mesh` gets mesh
//! mTLS to its backends; a Service targeted by a BackendTLSPolicy gets policy TLS; anything
//! that needs TLS but cannot have it is `BackendTls::Unavailable` (503, nothing sent). The
//! rustls configs are built here, once per distinct config ([`crate::tls::client`]).
//!
//! Only [`api`] names generated API types; [`manifest`] reads the YAML users write into
//! [`Resources`] for the file source and the tests.

pub mod addresses;
pub mod api;
mod attach;
mod backend_tls;
mod backends;
mod client_traffic_policy;
mod ext_auth;
pub mod field_path;
mod gateway;
mod grpc_route;
mod http_route;
mod listener_filters;
pub mod manifest;
pub mod mesh;
mod refs;
pub mod resources;
pub mod scope;
mod security_policy;
pub mod selector;
pub mod session_policy;
pub mod session_shape;
pub mod spiffe;
pub mod status;
mod tcp_route;
#[cfg(test)]
pub(crate) mod test_support;
mod tls_route;
mod tls_settings;
mod traffic_policy;
mod udp_route;
mod x_backend_traffic_policy;

pub use traffic_policy::rate_limit_config;

use std::collections::BTreeMap;

pub use manifest::{ManifestError, SkippedKind, parse_manifests};
pub use refs::{KeptCert, ListenerCerts};
pub use resources::{ObjectKey, Resources};
pub use security_policy::remote_jwks_wanted;
pub use status::{StatusObject, Statuses};

use self::gateway::{GatewayState, RouteKind};
use self::http_route::{RouteCtx, RouteOutcome, RouteSpec};
use crate::model::route::RouteTableBuilder;
use crate::model::{Carried, CertTable, Listener, ObjectRef, Port, Protocol, RouteTable, Snapshot};

/// What translation needs besides the objects.
#[derive(Clone, Debug)]
pub struct Settings {
    /// GatewayClasses whose `spec.controllerName` equals this are pier's.
    pub controller_name: String,
    /// Serve only this Gateway (`--gateway NS/NAME`).
    pub gateway: Option<ObjectRef>,
    /// The cluster's DNS domain: mesh SNI is `<service>.<namespace>.svc.<cluster_domain>`.
    pub cluster_domain: String,
    /// pier's client certificate for backend TLS (`--client-cert`/`--client-key`, read and
    /// watched by the binary). A Gateway's `spec.tls.backend.clientCertificateRef` wins.
    pub client_identity: Option<ClientIdentityPem>,
    /// `--spiffe-socket`: the SPIFFE Workload API's latest X.509-SVID and bundles (streamed by
    /// the binary), or why there are none yet. The SVID is the client certificate when
    /// `client_identity` is `None` (the CLI allows only one of them); a Gateway's
    /// `clientCertificateRef` still wins. Also the source of `trustBundle` references of kind
    /// `pier.dev/SPIFFEWorkloadAPI`.
    pub workload_api: Option<spiffe::WorkloadApi>,
    /// Addresses pier is reached at (`--advertise-address`, else a concrete
    /// `--listen-host`): Gateway `status.addresses`, and what `spec.addresses` may ask for.
    pub advertise: Vec<std::net::IpAddr>,
    /// `--gateway-address-pool`: one address of it per Gateway, which its listeners bind.
    pub address_pool: Vec<std::net::IpAddr>,
    /// `pier run --probe-interval`: what the last pod network probe of each Gateway's
    /// endpoints found, reported as the Gateway condition [`status::POD_NETWORK_CONDITION`].
    /// Empty: no condition.
    pub reachability: BTreeMap<ObjectRef, Reachability>,
    /// `remoteJWKS` key sets as the binary's fetcher (`source::jwks`) last got them, by URI
    /// (an input like a Secret); see [`remote_jwks_wanted`] for which URIs it follows.
    pub remote_jwks: crate::auth::remote::RemoteSets,
    /// `--rate-limit-service`: where BackendTrafficPolicy `rateLimit.global` rules are
    /// counted (`None`: such policies are not accepted).
    pub rate_limit_service: Option<std::sync::Arc<crate::model::traffic::RateLimitService>>,
    /// `--rate-limit-config`: where the publisher writes the rate-limit service's config for
    /// the global rules of each new snapshot ([`rate_limit_config`]).
    pub rate_limit_config: Option<std::path::PathBuf>,
}

/// One round of pod network probes of a Gateway's endpoint addresses (a sample).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reachability {
    pub probed: usize,
    /// The addresses that failed and why, sorted.
    pub failed: Vec<(std::net::SocketAddr, String)>,
}

/// A client certificate chain (leaf first) and its private key, PEM, as read from files.
/// `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentityPem {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentityPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentityPem")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &format_args!("<redacted>"))
            .finish()
    }
}

/// The default `Settings::cluster_domain`.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

impl Default for Settings {
    fn default() -> Self {
        Self {
            controller_name: crate::DEFAULT_CONTROLLER_NAME.to_string(),
            gateway: None,
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.to_string(),
            client_identity: None,
            workload_api: None,
            advertise: Vec::new(),
            address_pool: Vec::new(),
            reachability: BTreeMap::new(),
            remote_jwks: BTreeMap::new(),
            rate_limit_service: None,
            rate_limit_config: None,
        }
    }
}

#[derive(Debug, Default)]
pub struct Translation {
    /// `generation` is 0: the publisher numbers snapshots.
    pub snapshot: Snapshot,
    /// Desired status of every object pier owns.
    pub status: Statuses,
    /// Backend TLS state per in-scope Gateway, for metrics.
    pub tls: Vec<GatewayTlsSummary>,
    /// The certificate of every listener certificateRef (kept ones included), for the next
    /// translation to fall back on.
    pub listener_certs: ListenerCerts,
    /// certificateRefs whose Secret is invalid, served with their last good certificate.
    pub kept_certs: Vec<KeptCert>,
}

/// What metrics report about a Gateway's backend TLS: mesh trust bundle size and the client
/// certificate's expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayTlsSummary {
    pub gateway: ObjectRef,
    /// The Gateway has a mesh configuration (`spec.mesh` or its parametersRef).
    pub mesh: bool,
    /// Certificates in the mesh trust bundle; `None` without mesh or without a usable bundle.
    pub trust_bundle_certs: Option<usize>,
    /// `notAfter` of the client certificate (Unix seconds); `None` when none is usable.
    pub client_cert_not_after: Option<i64>,
    /// The mesh trust bundle's CA certificates (empty without a usable bundle), for `pier
    /// check`.
    pub trust_bundle: Vec<rustls_pki_types::CertificateDer<'static>>,
    /// The client certificate chain in use, leaf first (empty when none is usable).
    pub client_chain: Vec<rustls_pki_types::CertificateDer<'static>>,
}

pub fn translate(resources: &Resources, settings: &Settings) -> Translation {
    translate_with(
        resources,
        settings,
        &Carried::default(),
        &ListenerCerts::default(),
    )
}

/// [`translate`], taking over the previous snapshot's endpoint load state (so a reload keeps
/// in-flight counts and ejections) and its unchanged upstream TLS configs (so it keeps their
/// TLS session caches), and falling back on the previous translation's listener certificates
/// (`last_good`, its [`Translation::listener_certs`]) for Secrets that went bad.
pub fn translate_with(
    resources: &Resources,
    settings: &Settings,
    carried: &Carried,
    last_good: &ListenerCerts,
) -> Translation {
    let mut status = Statuses::default();
    let classes = gateway::gateway_classes(resources, settings, &mut status.gateway_classes);
    let mut gateways = gateway::gateways(resources, settings, &classes, last_good);
    let index: BTreeMap<ObjectRef, usize> = gateways
        .iter()
        .enumerate()
        .map(|(i, g)| (g.key.clone(), i))
        .collect();

    // Route precedence ties go to the oldest route, then namespace/name (creationTimestamp
    // missing counts as oldest). The same order settles an HTTPRoute and a GRPCRoute that
    // want one hostname on one listener: the older keeps it.
    let grpc: Vec<(ObjectRef, grpc_route::AsHttpRoute)> = resources
        .grpc_routes
        .iter()
        .map(|((ns, name), r)| (ObjectRef::new(ns, name), grpc_route::as_http_route(r)))
        .collect();
    let tls: Vec<(ObjectRef, api::HttpRoute)> = resources
        .tls_routes
        .iter()
        .map(|((ns, name), r)| (ObjectRef::new(ns, name), tls_route::as_http_route(r)))
        .collect();
    let tcp: Vec<(ObjectRef, api::HttpRoute)> = resources
        .tcp_routes
        .iter()
        .map(|((ns, name), r)| (ObjectRef::new(ns, name), tcp_route::as_http_route(r)))
        .collect();
    let udp: Vec<(ObjectRef, api::HttpRoute)> = resources
        .udp_routes
        .iter()
        .map(|((ns, name), r)| (ObjectRef::new(ns, name), udp_route::as_http_route(r)))
        .collect();
    let mut routes: Vec<_> = resources
        .http_routes
        .iter()
        .map(|((ns, name), r)| (ObjectRef::new(ns, name), RouteSpec::http(r)))
        .chain(grpc.iter().map(|(key, g)| {
            let spec = RouteSpec {
                kind: RouteKind::Grpc,
                route: &g.route,
                grpc_matches: &g.matches,
            };
            (key.clone(), spec)
        }))
        .chain(tls.iter().map(|(key, route)| {
            let spec = RouteSpec {
                kind: RouteKind::Tls,
                route,
                grpc_matches: &[],
            };
            (key.clone(), spec)
        }))
        .chain(tcp.iter().map(|(key, route)| {
            let spec = RouteSpec {
                kind: RouteKind::Tcp,
                route,
                grpc_matches: &[],
            };
            (key.clone(), spec)
        }))
        .chain(udp.iter().map(|(key, route)| {
            let spec = RouteSpec {
                kind: RouteKind::Udp,
                route,
                grpc_matches: &[],
            };
            (key.clone(), spec)
        }))
        .map(|(key, spec)| (api::creation_time(&spec.route.metadata), key, spec))
        .collect();
    routes.sort_by(|a, b| (&a.0, &a.1, a.2.kind).cmp(&(&b.0, &b.1, b.2.kind)));

    let mut backends = backends::Backends::new(resources, settings, &carried.endpoints);
    backends.tls.carry(&carried.tls_configs);
    // Before the Routes attach: a listener refused for its filters takes none.
    listener_filters::apply(resources, &mut gateways, &mut backends);
    let outcomes: Vec<(usize, ObjectRef, RouteKind, RouteOutcome)> = {
        let mut ctx = RouteCtx {
            resources,
            settings,
            gateways: &gateways,
            gateway_index: &index,
            backends: &mut backends,
            claims: http_route::Claims::new(),
        };
        routes
            .iter()
            .enumerate()
            .filter_map(|(order, (_, key, spec))| {
                http_route::translate_route(&mut ctx, key, *spec)
                    .map(|o| (order, key.clone(), spec.kind, o))
            })
            .collect()
    };

    let mut policies = security_policy::policies(resources, &mut backends, &settings.remote_jwks);
    let mut traffic = traffic_policy::policies(resources, carried, settings);
    let mut clients = client_traffic_policy::policies(resources, carried);
    for gw in &mut gateways {
        let found: Vec<_> = (0..gw.listeners.len())
            .map(|i| {
                let own = clients.targets_listener(gw, i);
                (clients.effective_listener(gw, i), own)
            })
            .collect();
        for (l, (policy, own)) in gw.listeners.iter_mut().zip(found) {
            // A policy on the listener itself, then the listener's tls.options, then a
            // policy on its Gateway or ListenerSet.
            if let Some(tls) = policy.as_ref().and_then(|p| p.tls.clone())
                && (own || l.tls_profile.is_none())
            {
                l.tls_profile = Some(tls).filter(|t| !t.is_default());
            }
            l.client_policy = policy;
        }
    }
    shared_port_notes(&mut gateways);
    http3_ports(&mut gateways);
    let mut limit_tables = traffic_policy::Tables::new(carried, settings);
    let mut tables: BTreeMap<(usize, usize), RouteTableBuilder> = BTreeMap::new();
    for (order, key, kind, outcome) in outcomes {
        for group in &outcome.groups {
            for a in &group.attachments {
                gateways[a.gateway].listeners[a.listener].attached_routes += 1;
                let table = tables.entry((a.gateway, a.listener)).or_default();
                for r in &group.rules {
                    // The rule with its effective SecurityPolicy and BackendTrafficPolicy on
                    // this listener, if any.
                    let at = attach::RuleAt {
                        kind: kind.name(),
                        route: &key,
                        rule_name: r.rule.name.as_deref(),
                    };
                    let gw = &gateways[a.gateway];
                    let access = policies.effective(gw, a.listener, &at);
                    let effective = traffic.effective(gw, a.listener, &at);
                    // A policy's request timeout is the default of rules without their own.
                    let timeout = (effective.as_ref())
                        .and_then(|p| p.request_timeout)
                        .filter(|_| r.rule.timeouts.request.is_none());
                    let health = effective.as_ref().and_then(|p| p.health.clone());
                    let backends = effective.as_ref().map(|p| p.backends).unwrap_or_default();
                    let limits = effective.and_then(|p| limit_tables.rule(&p, &key));
                    let rule = if access.is_none()
                        && limits.is_none()
                        && timeout.is_none()
                        && health.is_none()
                        && backends.is_none()
                    {
                        r.rule.clone()
                    } else {
                        let limits = limits.map(std::sync::Arc::new);
                        let mut rule = r.rule.with_policies(access, limits);
                        if timeout.is_some() {
                            rule.timeouts.request = timeout;
                        }
                        rule.health = health;
                        if !backends.is_none() {
                            rule.backends = rule.backends.with_override(&backends);
                        }
                        std::sync::Arc::new(rule)
                    };
                    for (j, m) in r.matches.iter().enumerate() {
                        let at = (order, r.rule.index, j);
                        table.add_ranked(&a.hostnames, &a.ranks, m.clone(), &rule, at);
                    }
                }
            }
        }
        match kind {
            RouteKind::Http => status.http_routes.insert(key, outcome.status),
            RouteKind::Grpc => status.grpc_routes.insert(key, outcome.status),
            RouteKind::Tls => status.tls_routes.insert(key, outcome.status),
            RouteKind::Tcp => status.tcp_routes.insert(key, outcome.status),
            RouteKind::Udp => status.udp_routes.insert(key, outcome.status),
        };
    }

    status.backend_tls_policies = backends.tls.statuses(&settings.controller_name);
    status.x_backend_traffic_policies =
        (backends.x_policies).statuses(resources, &settings.controller_name);
    let route_statuses = attach::RouteStatuses {
        http: &status.http_routes,
        grpc: &status.grpc_routes,
    };
    status.security_policies = policies.statuses(
        resources,
        &gateways,
        &route_statuses,
        &settings.controller_name,
    );
    status.backend_traffic_policies = traffic.statuses(
        resources,
        &gateways,
        &route_statuses,
        &settings.controller_name,
    );
    status.client_traffic_policies = clients.statuses(
        resources,
        &gateways,
        &route_statuses,
        &settings.controller_name,
    );
    let snapshot = snapshot(&gateways, tables);
    for gw in &gateways {
        let mut gw_status = gw.status();
        status.listener_sets.extend(gw.set_statuses(&gw_status));
        if let Some(r) = settings.reachability.get(&gw.key) {
            let generation = gw_status.generation;
            gw_status
                .conditions
                .push(reachability_condition(r, generation));
        }
        status.gateways.insert(gw.key.clone(), gw_status);
    }
    status.mark_unknown_fields(&resources.unknown_fields);
    let tls = gateways
        .iter()
        .map(|gw| tls_summary(&gw.key, &gw.tls))
        .collect();
    let mut listener_certs = ListenerCerts::default();
    let mut kept_certs = vec![];
    for gw in &gateways {
        for l in &gw.listeners {
            for (secret, cert) in &l.certs {
                listener_certs.insert(gw.listener_id(l), secret.clone(), cert.clone());
            }
            kept_certs.extend(l.kept.iter().cloned());
        }
    }
    Translation {
        snapshot,
        status,
        tls,
        listener_certs,
        kept_certs,
    }
}

/// [`status::POD_NETWORK_CONDITION`] from a probe round.
fn reachability_condition(r: &Reachability, generation: Option<i64>) -> status::GatewayCondition {
    use status::{GatewayCondReason as R, GatewayCondType as T, GatewayCondition as C};
    /// Failed addresses named in the message at most.
    const NAMED: usize = 4;
    if r.failed.is_empty() {
        let msg = format!(
            "all {} sampled endpoint addresses are reachable from pier's host",
            r.probed
        );
        return C::new(T::PodNetwork, true, R::Reachable, msg, generation);
    }
    let named: Vec<String> = r
        .failed
        .iter()
        .take(NAMED)
        .map(|(addr, why)| format!("{addr} ({why})"))
        .collect();
    let more = r
        .failed
        .len()
        .checked_sub(NAMED)
        .filter(|n| *n > 0)
        .map(|n| format!(" and {n} more"))
        .unwrap_or_default();
    let msg = format!(
        "{} of {} sampled endpoint addresses are not reachable from pier's host: {}{more}",
        r.failed.len(),
        r.probed,
        named.join("; ")
    );
    C::new(T::PodNetwork, false, R::Unreachable, msg, generation)
}

fn tls_summary(gateway: &ObjectRef, tls: &mesh::GatewayTls) -> GatewayTlsSummary {
    let bundle = tls.mesh.as_ref().and_then(|m| m.trust.as_ref().ok());
    let trust_bundle_certs = bundle.map(|b| b.len());
    let trust_bundle = bundle.map(|b| b.certs().to_vec()).unwrap_or_default();
    let client_chain = match &tls.client {
        mesh::ClientState::Ready(id) => id.chain().to_vec(),
        _ => vec![],
    };
    let client_cert_not_after = match &tls.client {
        mesh::ClientState::Ready(id) => id.chain().first().and_then(|leaf| {
            x509_parser::parse_x509_certificate(leaf)
                .ok()
                .map(|(_, c)| c.validity().not_after.timestamp())
        }),
        _ => None,
    };
    GatewayTlsSummary {
        gateway: gateway.clone(),
        mesh: tls.mesh.is_some(),
        trust_bundle_certs,
        client_cert_not_after,
        trust_bundle,
        client_chain,
    }
}

/// Listeners that share a port take their connection settings from all of their
/// ClientTrafficPolicies together (`PortClient::of`); one whose own settings are not what the
/// port applies says so in its Accepted message, so the merge never passes silently.
fn shared_port_notes(gateways: &mut [GatewayState]) {
    use crate::model::PortClient;
    // (bind address, port) -> (Gateway, listener) indexes.
    type Members = Vec<(usize, usize)>;
    let mut ports: BTreeMap<(Option<std::net::IpAddr>, u16), Members> = BTreeMap::new();
    for (gi, gw) in gateways.iter().enumerate() {
        if gw.addresses.unbound {
            continue;
        }
        for (li, l) in gw.listeners.iter().enumerate() {
            if l.protocol.is_some() && l.programmed() {
                ports
                    .entry((gw.addresses.bind, l.port))
                    .or_default()
                    .push((gi, li));
            }
        }
    }
    for ((_, port), members) in ports {
        let policy = |&(gi, li): &(usize, usize)| gateways[gi].listeners[li].client_policy.clone();
        let policies: Vec<_> = members.iter().map(policy).collect();
        fn connection(
            p: &Option<std::sync::Arc<crate::model::ClientPolicy>>,
        ) -> Option<&PortClient> {
            p.as_deref().map(|p| &p.connection)
        }
        let merged = PortClient::of(policies.iter().map(connection));
        for (&(gi, li), own) in members.iter().zip(&policies) {
            if PortClient::of([connection(own)]) == merged {
                continue;
            }
            let applied = merged
                .as_ref()
                .and_then(|m| serde_json::to_string(m).ok())
                .unwrap_or_else(|| "the command line's".into());
            gateways[gi].listeners[li].notes.push(format!(
                "listeners on port {port} have different ClientTrafficPolicy connection \
                 settings; the port applies {applied}"
            ));
        }
    }
}

/// Which listeners serve HTTP/3: those whose ClientTrafficPolicy has `http3`, on HTTPS, where
/// the port's number over UDP is not a UDP listener's, with TLS 1.3 in their settings. One
/// QUIC endpoint serves a port with one handshake configuration, so the first such listener's
/// TLS settings are the port's and a listener with other settings is left out. Every listener
/// left out says why in its Accepted message.
fn http3_ports(gateways: &mut [GatewayState]) {
    use std::collections::btree_map::Entry;
    type Key = (Option<std::net::IpAddr>, u16);
    let mut udp: std::collections::BTreeSet<Key> = Default::default();
    for gw in gateways.iter().filter(|g| !g.addresses.unbound) {
        for l in &gw.listeners {
            if l.protocol == Some(Protocol::Udp) && l.programmed() {
                udp.insert((gw.addresses.bind, l.port));
            }
        }
    }
    let mut profiles: BTreeMap<Key, Option<std::sync::Arc<crate::model::TlsProfile>>> =
        BTreeMap::new();
    for gw in gateways.iter_mut().filter(|g| !g.addresses.unbound) {
        let bind = gw.addresses.bind;
        for l in &mut gw.listeners {
            let asked = l.client_policy.as_ref().is_some_and(|p| p.http3);
            if !asked || !l.programmed() {
                continue;
            }
            let port = l.port;
            let refused = match l.protocol {
                Some(Protocol::Https) => None,
                Some(p) => Some(format!(
                    "HTTP/3 is served on HTTPS listeners only, not on this {} listener",
                    gateway::protocol_name(p)
                )),
                None => continue,
            };
            let refused = refused.or_else(|| {
                udp.contains(&(bind, port)).then(|| {
                    format!("HTTP/3 is not served: port {port}/UDP belongs to a UDP listener")
                })
            });
            let refused = refused.or_else(|| {
                (l.tls_profile.as_ref().is_some_and(|p| !p.tls13)).then(|| {
                    "HTTP/3 is not served: QUIC needs TLS 1.3, which the listener's TLS \
                     settings leave out"
                        .to_string()
                })
            });
            let refused = refused.or_else(|| match profiles.entry((bind, port)) {
                Entry::Vacant(v) => {
                    v.insert(l.tls_profile.clone());
                    None
                }
                Entry::Occupied(o) if *o.get() == l.tls_profile => None,
                Entry::Occupied(_) => Some(format!(
                    "HTTP/3 is not served: port {port}'s QUIC endpoint offers the TLS \
                     settings of another HTTP/3 listener, and this one's differ"
                )),
            });
            match refused {
                Some(note) => l.notes.push(note),
                None => l.http3 = true,
            }
        }
    }
}

/// Programmed listeners grouped by port (sorted), most specific hostname first; HTTPS and TLS
/// ports get every terminating listener's certificates, under the listener hostname and the
/// certificate's names.
fn snapshot(
    gateways: &[GatewayState],
    mut tables: BTreeMap<(usize, usize), RouteTableBuilder>,
) -> Snapshot {
    let mut ports: BTreeMap<crate::model::PortKey, Port> = BTreeMap::new();
    for (gi, gw) in gateways.iter().enumerate() {
        if gw.addresses.unbound {
            continue;
        }
        let address = gw.addresses.bind;
        for (li, l) in gw.listeners.iter().enumerate() {
            let Some(protocol) = l.protocol.filter(|_| l.programmed()) else {
                continue;
            };
            let key = crate::model::PortKey {
                address,
                port: l.port,
                udp: protocol == Protocol::Udp,
            };
            let port = ports.entry(key).or_insert_with(|| Port {
                address,
                port: l.port,
                protocol,
                proxy_protocol: false,
                access_log_on: false,
                listeners: vec![],
                certs: matches!(protocol, Protocol::Https | Protocol::Tls).then(CertTable::default),
                // Equal on every listener of the port (a differing one is conflicted).
                client_auth: l
                    .client_auth
                    .clone()
                    .filter(|_| protocol == Protocol::Https),
                tls_profiles: false,
                client: None,
                quic: None,
            });
            let tls_profile = l
                .tls_profile
                .clone()
                .filter(|_| matches!(protocol, Protocol::Https | Protocol::Tls) && !l.passthrough);
            port.tls_profiles |= tls_profile.is_some();
            // A datagram has no stream to start with the header.
            port.proxy_protocol |= l.proxy_protocol && protocol != Protocol::Udp;
            port.access_log_on |= l.access_log == Some(true);
            if let Some(certs) = &mut port.certs {
                for (_, c) in &l.certs {
                    let names: Vec<String> = l
                        .hostname
                        .iter()
                        .map(ToString::to_string)
                        .chain(c.names.iter().cloned())
                        .collect();
                    certs.add(&names, c.key.clone());
                }
            }
            if l.http3 {
                port.quic = Some(crate::model::Quic {
                    profile: l.tls_profile.clone(),
                });
            }
            port.listeners.push(Listener {
                id: gw.listener_id(l),
                hostname: l.hostname.clone(),
                passthrough: l.passthrough,
                client_cert_header: l.client_cert_header.clone(),
                access_log: l.access_log,
                tls_profile,
                client_policy: l.client_policy.clone(),
                pre_route: l.pre_route.clone(),
                before_routing: l.client_cert_header.is_some() || l.pre_route.is_some(),
                alt_svc: l.http3.then(|| alt_svc(l.port)),
                routes: tables
                    .remove(&(gi, li))
                    .map_or_else(RouteTable::default, RouteTableBuilder::build),
            });
        }
    }
    let mut ports: Vec<Port> = ports.into_values().collect();
    for p in &mut ports {
        p.sort_listeners();
        let policies =
            (p.listeners.iter()).map(|l| l.client_policy.as_ref().map(|c| &c.connection));
        p.client = crate::model::PortClient::of(policies).map(std::sync::Arc::new);
    }
    Snapshot {
        generation: 0,
        ports,
    }
}

/// The `Alt-Svc` value of an HTTP/3 listener on `port`: HTTP/3 on the same number, for a day
/// (nginx's and Envoy's usual `ma`).
fn alt_svc(port: u16) -> http::HeaderValue {
    let value = format!("h3=\":{port}\"; ma=86400");
    http::HeaderValue::from_str(&value).expect("digits and ASCII punctuation")
}

/// An error and its causes on one line, for status messages. A cause whose text the message
/// already contains is not repeated; line breaks (regex errors draw carets) become spaces.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `group/kind` as messages show it; the core group "" is shown as `core`.
pub(crate) fn group_kind(group: &str, kind: &str) -> String {
    if group.is_empty() {
        format!("core/{kind}")
    } else {
        format!("{group}/{kind}")
    }
}

#[cfg(test)]
mod tests;
