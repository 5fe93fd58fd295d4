//! GatewayClasses and Gateways: which are pier's, their listeners (protocol, port, hostname,
//! TLS certificates), who may attach routes (`allowedRoutes`), conflicts between listeners that
//! share a port, and the resulting Gateway and listener conditions.
//!
//! ```text
//! GatewayClass (ours?) ─> Gateway (in scope?) ─> ListenerState ─┬─> model::Port (if programmed)
//!                                                               └─> ListenerStatus
//! ```
//!
//! Frontend client certificate validation (`spec.tls.frontend`, GEP-91) is [`frontend`]: it
//! applies to the HTTPS listeners of its port, the Gateway's own and its ListenerSets'. One
//! port is one TLS config, so listeners of different Gateways on one port must agree on it.
//!
//! Not read: `spec.infrastructure` labels and annotations. Listener `tls.options` with pier's
//! prefix: `super::tls_settings`.
//! `spec.mesh`, `spec.infrastructure.parametersRef` and `spec.tls.backend` are read by
//! [`super::mesh`].
//! A listener is programmed when it is accepted, not conflicted and, for HTTPS, has at least one
//! usable certificate; certificateRefs that fail are reported in ResolvedRefs either way.

use std::collections::{BTreeMap, BTreeSet};

use super::addresses::{self, Addresses};
use super::api::{
    CORE_GROUP, GATEWAY_GROUP, Gateway, GatewayClassConditionReason, GatewayClassConditionType,
    GatewayConditionReason, GatewayConditionType, GatewayListeners, GatewayListenersAllowedRoutes,
    GatewayListenersAllowedRoutesKinds, GatewayListenersTls, GatewayListenersTlsCertificateRefs,
    GatewayListenersTlsMode, ListenerConditionType, creation_time,
};
use super::mesh::{self, GatewayTls};
use super::refs::{self, Certs, KeptCert, ListenerCerts, RefFrom, RefTo, ServerCert};
use super::resources::{ListenerRef, Resources};
use super::status::{
    ClassCondition, ClassConditionReason, ClassConditionType, GatewayClassStatus,
    GatewayCondReason, GatewayCondType, GatewayCondition, GatewayStatus, ListenerCondition,
    ListenerReason, ListenerSetStatus, ListenerStatus, RouteGroupKind,
};
use super::{Settings, group_kind};
use crate::model::{ClientAuth, HostnameMatch, ListenerId, ObjectRef, Protocol};

mod allowed_routes;
mod frontend;
mod listener_set;

pub use allowed_routes::{AllowedRoutes, NamespacePolicy, RouteKind, namespace_policy};
pub use listener_set::SetState;

/// An in-scope Gateway, as route attachment and the snapshot need it.
#[derive(Debug)]
pub struct GatewayState {
    pub key: ObjectRef,
    pub generation: Option<i64>,
    /// In `spec.listeners` order, then the listeners of attached ListenerSets (oldest set
    /// first, then by namespace/name), each set's in its `spec.listeners` order.
    pub listeners: Vec<ListenerState>,
    /// ListenerSets whose parentRef names this Gateway, attached or not.
    pub sets: Vec<SetState>,
    /// Mesh and client certificate: what its routes' backends need for TLS.
    pub tls: GatewayTls,
    /// `spec.addresses` against the addresses pier advertises.
    pub addresses: Addresses,
    /// `InsecureFrontendValidationMode=True` message: some frontend validation allows
    /// insecure fallback.
    pub insecure_frontend: Option<String>,
}

#[derive(Debug)]
pub struct ListenerState {
    pub name: String,
    /// The ListenerSet it comes from (an index into [`GatewayState::sets`]); `None`: the
    /// Gateway's own.
    pub set: Option<usize>,
    /// The namespace of the Gateway or ListenerSet that defines it (`allowedRoutes` `Same`,
    /// certificateRefs).
    pub namespace: String,
    pub port: u16,
    pub protocol: Option<Protocol>,
    pub hostname: Option<HostnameMatch>,
    /// Protocol TLS with `tls.mode: Passthrough` (no certificates; routes by SNI).
    pub passthrough: bool,
    pub allowed: AllowedRoutes,
    pub supported_kinds: Vec<RouteGroupKind>,
    /// Usable certificates and their Secrets, in `certificateRefs` order.
    pub certs: Vec<(ObjectRef, ServerCert)>,
    /// Certificates kept from the previous translation because their Secret went bad.
    pub kept: Vec<KeptCert>,
    /// Why the listener is not Accepted (it serves nothing).
    pub not_accepted: Option<(ListenerReason, String)>,
    /// Set when an earlier listener on the same port wins (it serves nothing).
    pub conflict: Option<(ListenerReason, String)>,
    /// References that did not resolve (ResolvedRefs=False), first one gives the reason.
    pub ref_problems: Vec<(ListenerReason, String)>,
    /// Why an otherwise valid listener cannot be programmed (HTTPS without a usable cert).
    pub tls_problem: Option<String>,
    /// Remarks for the Accepted message.
    pub notes: Vec<String>,
    /// Routes attached (Accepted) to this listener; filled in by route translation.
    pub attached_routes: u32,
    /// Connections start with a PROXY protocol header (the Gateway's
    /// [`PROXY_PROTOCOL_ANNOTATION`]).
    pub proxy_protocol: bool,
    /// The Gateway's [`ACCESS_LOG_ANNOTATION`]: log this listener's requests (or not) whatever
    /// `--access-log` says.
    pub access_log: Option<bool>,
    /// The protocol asked for when pier does not serve it (TCP, UDP, ...).
    pub unsupported_protocol: Option<String>,
    /// HTTPS: the client certificate validation of its port (`spec.tls.frontend`).
    pub client_auth: Option<ClientAuth>,
    /// [`CLIENT_CERT_HEADER_ANNOTATION`]: the header for the verified client identity.
    pub client_cert_header: Option<http::HeaderName>,
    /// The handshake it offers: its ClientTrafficPolicy's `tls` (set after policies are read),
    /// else its own `tls.options`; `None`: pier's defaults.
    pub tls_profile: Option<std::sync::Arc<crate::model::TlsProfile>>,
    /// Its ClientTrafficPolicy, if one applies.
    pub client_policy: Option<std::sync::Arc<crate::model::ClientPolicy>>,
    /// Its listener filters (`crate::translate::listener_filters`).
    pub pre_route: Option<std::sync::Arc<crate::model::ext_auth::PreRoute>>,
    /// It serves HTTP/3 (its ClientTrafficPolicy asks, and the port can: `http3_ports`).
    pub http3: bool,
}

// === GatewayClass ===

/// Statuses for pier's GatewayClasses; returns the names of the accepted ones.
///
/// pier supports no `parametersRef` yet, so a class that sets one is not accepted
/// (InvalidParameters), as the implementers guide asks.
pub fn gateway_classes(
    resources: &Resources,
    settings: &Settings,
    out: &mut BTreeMap<String, GatewayClassStatus>,
) -> BTreeSet<String> {
    let mut accepted = BTreeSet::new();
    for (name, class) in &resources.gateway_classes {
        if class.spec.controller_name != settings.controller_name {
            continue;
        }
        let generation = class.metadata.generation;
        let accept = match &class.spec.parameters_ref {
            None => ClassCondition::new(
                ClassConditionType::Class(GatewayClassConditionType::Accepted),
                true,
                ClassConditionReason::Class(GatewayClassConditionReason::Accepted),
                "GatewayClass is accepted",
                generation,
            ),
            Some(p) => ClassCondition::new(
                ClassConditionType::Class(GatewayClassConditionType::Accepted),
                false,
                ClassConditionReason::Class(GatewayClassConditionReason::InvalidParameters),
                format!(
                    "parametersRef {} {} is not supported: pier takes no parameters",
                    group_kind(&p.group, &p.kind),
                    p.name
                ),
                generation,
            ),
        };
        if accept.status {
            accepted.insert(name.clone());
        }
        let version = ClassCondition::new(
            ClassConditionType::SupportedVersion,
            true,
            ClassConditionReason::SupportedVersion,
            "Gateway API version is supported",
            generation,
        );
        out.insert(
            name.clone(),
            GatewayClassStatus {
                generation,
                conditions: vec![accept, version],
            },
        );
    }
    accepted
}

// === Gateway ===

/// The in-scope Gateways, oldest first (then by namespace/name): the order that decides which
/// listener wins a port or hostname conflict.
pub fn gateways(
    resources: &Resources,
    settings: &Settings,
    classes: &BTreeSet<String>,
    last_good: &ListenerCerts,
) -> Vec<GatewayState> {
    let mut selected: Vec<(&Gateway, ObjectRef)> = resources
        .gateways
        .iter()
        .map(|((ns, name), gw)| (gw, ObjectRef::new(ns, name)))
        .filter(|(gw, key)| {
            classes.contains(&gw.spec.base.gateway_class_name)
                && settings.gateway.as_ref().is_none_or(|g| g == key)
        })
        .collect();
    selected.sort_by(|a, b| {
        (creation_time(&a.0.metadata), &a.1).cmp(&(creation_time(&b.0.metadata), &b.1))
    });
    let mut certs = Certs::new(resources, last_good);
    let mut assigner = addresses::Assigner::new(&settings.advertise, &settings.address_pool);
    // The entries whose routability pier can meet (GEP-5093); the others are only reported.
    let routable: Vec<_> = selected
        .iter()
        .map(|(gw, _)| {
            addresses::routable(
                gw.spec.base.addresses.as_deref(),
                &gw.spec.address_routability,
            )
        })
        .collect();
    for r in &routable {
        assigner.note_named(r.spec());
    }
    // Addresses already given stay with their Gateways before any new one is handed out.
    let kept: Vec<_> = (selected.iter().zip(&routable))
        .map(|((gw, _), r)| assigner.keep(r.spec(), &status_addresses(gw)))
        .collect();
    let mut states: Vec<GatewayState> = selected
        .into_iter()
        .zip(kept)
        .zip(routable)
        .map(|(((gw, key), kept), routable)| GatewayState {
            tls: mesh::gateway_tls(resources, settings, &key, gw),
            addresses: {
                let mut a = if routable.none_met() {
                    addresses::Addresses {
                        not_assigned: Some(addresses::NONE_MET.into()),
                        // With a pool, a Gateway without an address is not served.
                        unbound: !settings.address_pool.is_empty(),
                        ..addresses::Addresses::default()
                    }
                } else {
                    assigner.assign(routable.spec(), kept, &key.to_string())
                };
                routable.apply(&mut a);
                a
            },
            listeners: gw
                .spec
                .base
                .listeners
                .iter()
                .map(|l| {
                    let owner = Owner {
                        kind: "Gateway",
                        namespace: &key.namespace,
                        id: ListenerId {
                            gateway: key.clone(),
                            set: None,
                            name: l.name.clone(),
                        },
                    };
                    listener(resources, &mut certs, owner, l)
                })
                .collect(),
            sets: vec![],
            generation: gw.metadata.generation,
            insecure_frontend: None,
            key,
        })
        .collect();
    let specs: Vec<_> = states
        .iter()
        .map(|s| {
            let gw = &resources.gateways[&(s.key.namespace.clone(), s.key.name.clone())];
            gw.spec.base.allowed_listeners.as_ref()
        })
        .collect();
    for (state, allowed) in states.iter_mut().zip(specs) {
        listener_set::attach(resources, &mut certs, state, allowed);
    }
    for state in &mut states {
        let gw = &resources.gateways[&(state.key.namespace.clone(), state.key.name.clone())];
        let spec = gw.spec.base.tls.as_ref().and_then(|t| t.frontend.as_ref());
        let fe = frontend::Frontend::new(resources, &state.key.namespace, spec);
        state.listeners.iter_mut().for_each(|l| fe.apply(l));
        state.insecure_frontend = fe.insecure();
        let header = gw
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLIENT_CERT_HEADER_ANNOTATION));
        if let Some(value) = header {
            client_cert_header(state, value);
        }
        let value = gw
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROXY_PROTOCOL_ANNOTATION));
        if let Some(value) = value {
            proxy_protocol(state, value);
        }
        let value = gw
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ACCESS_LOG_ANNOTATION));
        if let Some(value) = value {
            access_log(state, value);
        }
    }
    detect_conflicts(&mut states);
    proxy_protocol_ports(&mut states);
    states
}

/// Gateway annotation: connections to its listeners start with a PROXY protocol header (v1 or
/// v2, whichever arrives). `"true"` (or `"*"`): every listener, the attached ListenerSets'
/// too; otherwise a comma-separated list of listener names (a ListenerSet's listener as
/// `namespace/set/name`). Names that match no listener are ignored.
pub const PROXY_PROTOCOL_ANNOTATION: &str = "pier.dev/proxy-protocol";

/// Gateway annotation: the name of a request header that carries the client's verified
/// certificate identity to routing (header matches) and to the backend, on every listener of
/// the Gateway. pier always removes the header from what the client sent; it sets it only
/// when the connection's certificate verified against the port's `spec.tls.frontend` CAs:
/// `Subject="<RFC 4514 DN>"` then `;URI=<SAN>` and `;DNS=<SAN>` for each such SAN.
pub const CLIENT_CERT_HEADER_ANNOTATION: &str = "pier.dev/client-certificate-header";

fn client_cert_header(state: &mut GatewayState, value: &str) {
    let name = match http::HeaderName::from_bytes(value.trim().as_bytes()) {
        Ok(n) => n,
        Err(_) => {
            for l in &mut state.listeners {
                l.notes.push(format!(
                    "{CLIENT_CERT_HEADER_ANNOTATION}: {value:?} is not a valid header name; \
                     no client identity header"
                ));
            }
            return;
        }
    };
    for l in &mut state.listeners {
        let has_identity = l.client_auth.is_some();
        l.notes.push(if has_identity {
            format!("header {name} carries the verified client certificate identity")
        } else {
            format!("header {name} is removed from requests (no client certificate validation)")
        });
        l.client_cert_header = Some(name.clone());
    }
}

/// Gateway annotation: `"true"` logs the requests its listeners (the attached ListenerSets'
/// too) receive in the access log even when `--access-log` is off, `"false"` never logs them.
/// Any other value is ignored, and every listener's Accepted message says so.
pub const ACCESS_LOG_ANNOTATION: &str = "pier.dev/access-log";

fn access_log(state: &mut GatewayState, value: &str) {
    let value = value.trim();
    let on = if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    };
    for l in &mut state.listeners {
        l.access_log = on;
        match on {
            Some(true) => l.notes.push("requests are logged (access log)".into()),
            Some(false) => l.notes.push("requests are not logged (access log)".into()),
            None => l.notes.push(format!(
                "{ACCESS_LOG_ANNOTATION}: {value:?} is neither \"true\" nor \"false\"; ignored"
            )),
        }
    }
}

fn proxy_protocol(state: &mut GatewayState, value: &str) {
    let value = value.trim();
    let all = value.eq_ignore_ascii_case("true") || value == "*";
    let names: BTreeSet<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    for i in 0..state.listeners.len() {
        let label = state.listener_id(&state.listeners[i]).label();
        let l = &mut state.listeners[i];
        if all || names.contains(label.as_str()) {
            l.proxy_protocol = true;
            l.notes
                .push("connections must start with a PROXY protocol header (v1 or v2)".into());
        }
    }
}

/// A port is one socket: it requires the PROXY protocol header when any listener on it asks
/// for it. The listeners on it that did not ask say so in their Accepted message.
fn proxy_protocol_ports(gateways: &mut [GatewayState]) {
    let mut ports: BTreeMap<(Option<std::net::IpAddr>, u16), String> = BTreeMap::new();
    for gw in gateways.iter() {
        if gw.addresses.unbound {
            continue;
        }
        for l in gw
            .listeners
            .iter()
            .filter(|l| l.proxy_protocol && l.programmed())
        {
            ports
                .entry((gw.addresses.bind, l.port))
                .or_insert_with(|| gw.listener_id(l).to_string());
        }
    }
    for gw in gateways.iter_mut() {
        if gw.addresses.unbound {
            continue;
        }
        let bind = gw.addresses.bind;
        for l in gw.listeners.iter_mut().filter(|l| !l.proxy_protocol) {
            if let Some(by) = ports.get(&(bind, l.port)) {
                l.notes.push(format!(
                    "port {} requires a PROXY protocol header: listener {by} asks for it \
                     ({PROXY_PROTOCOL_ANNOTATION})",
                    l.port
                ));
            }
        }
    }
}

/// Who defines a listener: its Gateway or a ListenerSet.
struct Owner<'a> {
    /// `Gateway` or `ListenerSet`, for ReferenceGrants `from`.
    kind: &'static str,
    namespace: &'a str,
    id: ListenerId,
}

/// The addresses the Gateway's status reports (pier wrote them).
fn status_addresses(gw: &Gateway) -> Vec<String> {
    gw.status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .map(|a| a.value.clone())
        .collect()
}

fn listener(
    resources: &Resources,
    certs: &mut Certs<'_>,
    owner: Owner<'_>,
    l: &GatewayListeners,
) -> ListenerState {
    let GatewayListeners {
        allowed_routes,
        hostname,
        name,
        port,
        protocol,
        tls,
    } = l;
    let mut state = ListenerState {
        name: name.clone(),
        set: None,
        namespace: owner.namespace.to_string(),
        port: 0,
        protocol: None,
        hostname: None,
        passthrough: false,
        allowed: AllowedRoutes {
            namespaces: NamespacePolicy::Same,
            kinds: vec![],
        },
        supported_kinds: vec![],
        certs: vec![],
        kept: vec![],
        not_accepted: None,
        conflict: None,
        ref_problems: vec![],
        tls_problem: None,
        notes: vec![],
        attached_routes: 0,
        proxy_protocol: false,
        access_log: None,
        unsupported_protocol: None,
        client_auth: None,
        client_cert_header: None,
        tls_profile: None,
        client_policy: None,
        pre_route: None,
        http3: false,
    };
    // Listener filters pier cannot run: refused here, so the listener takes no part in
    // conflicts (the others are translated once backends resolve: `listener_filters`).
    let at = ListenerRef {
        kind: owner.kind,
        object: match &owner.id.set {
            Some(set) => (set.namespace.clone(), set.name.clone()),
            None => (
                owner.id.gateway.namespace.clone(),
                owner.id.gateway.name.clone(),
            ),
        },
        listener: name.clone(),
    };
    if let Some(filters) = resources.listener_filters.get(&at)
        && let Some((refusal, why)) = super::api::ListenerFilters::refusal(filters, protocol)
    {
        let reason = match refusal {
            super::api::Refusal::Invalid => ListenerReason::InvalidListenerFilter,
            super::api::Refusal::Unsupported => ListenerReason::UnsupportedValue,
        };
        state.not_accepted = Some((reason, why));
        state.port = u16::try_from(*port).unwrap_or(0);
        return state;
    }
    let protocol = match protocol.as_str() {
        "HTTP" => Protocol::Http,
        "HTTPS" => Protocol::Https,
        "TLS" => Protocol::Tls,
        "TCP" => Protocol::Tcp,
        "UDP" => Protocol::Udp,
        other => {
            state.not_accepted = Some((
                ListenerReason::UnsupportedProtocol,
                format!(
                    "protocol {other:?} is not supported (pier serves HTTP, HTTPS, TLS, TCP \
                     and UDP)"
                ),
            ));
            // Kept for conflict detection: on a port that serves another protocol, the
            // listener is a ProtocolConflict first.
            state.unsupported_protocol = Some(other.to_string());
            state.port = u16::try_from(*port).unwrap_or(0);
            return state;
        }
    };
    state.protocol = Some(protocol);
    match u16::try_from(*port) {
        Ok(p) if p != 0 => state.port = p,
        _ => {
            state.not_accepted = Some((
                ListenerReason::PortUnavailable,
                format!("port {port} is out of range"),
            ));
            return state;
        }
    }
    if protocol == Protocol::Tcp && (hostname.is_some() || tls.is_some()) {
        // The CRD forbids both; a manifest may still say them.
        state.not_accepted = Some((
            ListenerReason::Invalid,
            "a TCP listener has no hostname and no tls (TCP carries no name; for TLS use \
             protocol TLS with a TLSRoute)"
                .into(),
        ));
        return state;
    }
    if protocol == Protocol::Udp && (hostname.is_some() || tls.is_some()) {
        state.not_accepted = Some((
            ListenerReason::Invalid,
            "a UDP listener has no hostname and no tls (datagrams carry no name)".into(),
        ));
        return state;
    }
    if let Some(h) = hostname {
        match HostnameMatch::parse(h) {
            Ok(h) => state.hostname = Some(h),
            Err(e) => {
                state.not_accepted =
                    Some((ListenerReason::Invalid, format!("hostname {h:?}: {e}")));
                return state;
            }
        }
    }
    if matches!(protocol, Protocol::Https | Protocol::Tls) {
        tls_of(&mut state, resources, certs, &owner, protocol, tls.as_ref());
        if state.not_accepted.is_some() {
            return state;
        }
    }
    allowed_routes_of(&mut state, protocol, allowed_routes.as_ref());
    state
}

fn allowed_routes_of(
    state: &mut ListenerState,
    protocol: Protocol,
    ar: Option<&GatewayListenersAllowedRoutes>,
) {
    let (kinds, namespaces) = match ar {
        Some(GatewayListenersAllowedRoutes { kinds, namespaces }) => {
            (kinds.as_deref(), namespaces.as_ref())
        }
        None => (None, None),
    };
    let supported = RouteKind::for_protocol(protocol);
    match kinds {
        None | Some([]) => state.allowed.kinds = supported.to_vec(),
        Some(kinds) => {
            for GatewayListenersAllowedRoutesKinds { group, kind } in kinds {
                let group = group.as_deref().unwrap_or(GATEWAY_GROUP);
                let known = supported
                    .iter()
                    .copied()
                    .find(|k| group == GATEWAY_GROUP && kind == k.name());
                match known {
                    Some(k) if !state.allowed.kinds.contains(&k) => state.allowed.kinds.push(k),
                    Some(_) => {}
                    None => state.ref_problems.push((
                        ListenerReason::InvalidRouteKinds,
                        format!("route kind {} is not supported", group_kind(group, kind)),
                    )),
                }
            }
        }
    }
    state.supported_kinds = state
        .allowed
        .kinds
        .iter()
        .map(|k| RouteGroupKind::gateway_api(k.name()))
        .collect();
    state.allowed.namespaces = match namespace_policy(namespaces) {
        Ok(p) => p,
        Err(e) => {
            state.notes.push(format!(
                "allowedRoutes selector is invalid ({e}): it selects no namespace"
            ));
            NamespacePolicy::Nothing
        }
    };
}

/// The `tls` stanza of an HTTPS or TLS listener: certificates to terminate with, or (TLS
/// only) Passthrough.
fn tls_of(
    state: &mut ListenerState,
    resources: &Resources,
    certs: &mut Certs<'_>,
    owner: &Owner<'_>,
    protocol: Protocol,
    tls: Option<&GatewayListenersTls>,
) {
    let id = &owner.id;
    let proto = protocol_name(protocol);
    let Some(GatewayListenersTls {
        certificate_refs,
        mode,
        options,
    }) = tls
    else {
        state.tls_problem = Some(format!("{proto} listener has no tls configuration"));
        return;
    };
    if mode == &Some(GatewayListenersTlsMode::Passthrough) {
        if protocol != Protocol::Tls {
            state.not_accepted = Some((
                ListenerReason::UnsupportedProtocol,
                "tls.mode Passthrough is not supported for HTTPS (pier terminates HTTPS; \
                 use protocol TLS with a TLSRoute to pass TLS through)"
                    .into(),
            ));
            return;
        }
        // The API forbids certificateRefs here; any given are not used.
        if certificate_refs.as_ref().is_some_and(|c| !c.is_empty()) {
            state
                .notes
                .push("certificateRefs are ignored: Passthrough does not terminate TLS".into());
        }
        state.passthrough = true;
        if options.as_ref().is_some_and(|o| {
            o.keys()
                .any(|k| k.starts_with(super::tls_settings::OPTION_PREFIX))
        }) {
            state
                .notes
                .push("tls.options are ignored: Passthrough does not terminate TLS".into());
        }
        return;
    }
    match super::tls_settings::options_profile(&options.clone().unwrap_or_default()) {
        Ok(profile) => state.tls_profile = profile.map(std::sync::Arc::new),
        Err(why) => state.notes.push(format!(
            "tls.options: {why}; the listener keeps pier's TLS defaults"
        )),
    }
    for (i, r) in certificate_refs.iter().flatten().enumerate() {
        let (secret, loaded) = match certificate(resources, certs, owner, r) {
            Ok(loaded) => loaded,
            Err((reason, msg)) => {
                state
                    .ref_problems
                    .push((reason, format!("certificateRefs[{i}]: {msg}")));
                continue;
            }
        };
        match loaded {
            Ok(cert) => state.certs.push((secret, cert)),
            Err(e) => {
                // A Secret that went bad keeps its last good certificate (not one that is
                // gone: deleting a Secret is a decision; a fresh start has nothing to keep).
                let kept = certs
                    .last_good(id, &secret)
                    .filter(|_| e.is_invalid_secret());
                let mut msg = format!("certificateRefs[{i}]: {e}");
                if let Some(cert) = kept {
                    msg.push_str("; the last good certificate is still served");
                    state.kept.push(KeptCert {
                        listener: id.clone(),
                        secret: secret.clone(),
                        error: super::error_chain(&e),
                    });
                    state.certs.push((secret, cert));
                }
                state
                    .ref_problems
                    .push((ListenerReason::InvalidCertificateRef, msg));
            }
        }
    }
    if state.certs.is_empty() {
        // The implementers guide asks for reason InvalidTLSConfig; the generated enum lacks it,
        // so Programmed=False uses Invalid with this message.
        state.tls_problem = Some(if certificate_refs.as_ref().is_none_or(Vec::is_empty) {
            format!("{proto} listener has no certificateRefs")
        } else {
            format!("{proto} listener has no usable certificate")
        });
    }
}

/// A certificateRef's Secret, and its certificate or why it has none.
type LoadedCert = (ObjectRef, Result<ServerCert, refs::CertError>);

/// Loads the Secret a certificateRef names; `Err((reason, message))` when the reference itself
/// is not allowed.
fn certificate(
    resources: &Resources,
    certs: &mut Certs<'_>,
    owner: &Owner<'_>,
    GatewayListenersTlsCertificateRefs {
        group,
        kind,
        name,
        namespace,
    }: &GatewayListenersTlsCertificateRefs,
) -> Result<LoadedCert, (ListenerReason, String)> {
    let kind = kind.as_deref().unwrap_or("Secret");
    if !refs::is_core_group(group.as_deref()) || kind != "Secret" {
        return Err((
            ListenerReason::InvalidCertificateRef,
            format!(
                "{} is not supported (only core/Secret)",
                group_kind(group.as_deref().unwrap_or_default(), kind)
            ),
        ));
    }
    let owner_ns = owner.namespace;
    let ns = namespace.as_deref().unwrap_or(owner_ns);
    let secret = ObjectRef::new(ns, name);
    if ns != owner_ns {
        let from = RefFrom {
            group: GATEWAY_GROUP,
            kind: owner.kind,
            namespace: owner_ns,
        };
        let to = RefTo {
            group: CORE_GROUP,
            kind: "Secret",
            namespace: ns,
            name,
        };
        if !refs::reference_granted(resources, from, to) {
            return Err((
                ListenerReason::RefNotPermitted,
                format!("reference to Secret {secret} is not permitted by any ReferenceGrant"),
            ));
        }
    }
    let loaded = certs.get(&secret);
    Ok((secret, loaded))
}

/// Listeners of all in-scope Gateways share ports. On one port, the first listener (oldest
/// Gateway, then spec order) fixes the protocol; a later listener with another protocol is
/// ProtocolConflict, one with the same hostname as an earlier one is HostnameConflict. A
/// conflicted listener is not served; the earlier one keeps working. Except for two TCP (or
/// two UDP) listeners on one port: nothing tells their traffic apart, so both are
/// ProtocolConflict and neither is served (GEP-2644, GEP-2645: MUST).
fn detect_conflicts(gateways: &mut [GatewayState]) {
    struct Seen {
        protocol: Protocol,
        hostnames: Vec<Option<HostnameMatch>>,
        first: String,
        /// (Gateway, listener) indexes of the first listener.
        at: (usize, usize),
        /// The port's client certificate validation (its first listener's).
        client_auth: Option<[u8; 32]>,
    }
    // Listeners share a port only on one address: Gateways with addresses of their own
    // (`--gateway-address-pool`) never conflict with each other; a UDP port and a TCP port of
    // the same number are two sockets, and do not conflict either (`true`: UDP).
    let mut ports: BTreeMap<(Option<std::net::IpAddr>, u16, bool), Seen> = BTreeMap::new();
    // First listeners that a later TCP or UDP listener conflicts too, with the message.
    let mut firsts: Vec<((usize, usize), String)> = Vec::new();
    for (gi, gw) in gateways.iter_mut().enumerate() {
        if gw.addresses.unbound {
            continue;
        }
        let address = gw.addresses.bind;
        for (li, l) in gw.listeners.iter_mut().enumerate() {
            let id = listener_id(&gw.key, &gw.sets, l).to_string();
            if let (Some(other), Some(seen)) = (
                l.unsupported_protocol.as_deref().filter(|_| l.port != 0),
                ports.get(&(address, l.port, false)),
            ) {
                let msg = format!(
                    "port {} already serves {} for listener {} ({other} is not supported either)",
                    l.port,
                    protocol_name(seen.protocol),
                    seen.first
                );
                l.not_accepted = Some((ListenerReason::ProtocolConflict, msg.clone()));
                l.conflict = Some((ListenerReason::ProtocolConflict, msg));
                continue;
            }
            let Some(protocol) = l.protocol.filter(|_| l.not_accepted.is_none()) else {
                continue;
            };
            let udp = protocol == Protocol::Udp;
            let Some(seen) = ports.get_mut(&(address, l.port, udp)) else {
                ports.insert(
                    (address, l.port, udp),
                    Seen {
                        protocol,
                        hostnames: vec![l.hostname.clone()],
                        first: id,
                        at: (gi, li),
                        client_auth: l.client_auth.as_ref().map(|a| a.tag),
                    },
                );
                continue;
            };
            if seen.protocol == protocol && matches!(protocol, Protocol::Tcp | Protocol::Udp) {
                let name = protocol_name(protocol);
                l.conflict = Some((
                    ListenerReason::ProtocolConflict,
                    format!(
                        "listener {} is {name} on port {} too: nothing tells their traffic \
                         apart, so neither is served",
                        seen.first, l.port
                    ),
                ));
                firsts.push((
                    seen.at,
                    format!(
                        "listener {id} is {name} on port {} too: nothing tells their traffic \
                         apart, so neither is served",
                        l.port
                    ),
                ));
            } else if seen.protocol != protocol {
                l.conflict = Some((
                    ListenerReason::ProtocolConflict,
                    format!(
                        "port {} already serves {} for listener {}",
                        l.port,
                        protocol_name(seen.protocol),
                        seen.first
                    ),
                ));
            } else if seen.client_auth != l.client_auth.as_ref().map(|a| a.tag) {
                // Within a Gateway validation is per port; this is another Gateway's.
                l.conflict = Some((
                    ListenerReason::ProtocolConflict,
                    format!(
                        "port {} already validates client certificates differently \
                         (spec.tls.frontend) for listener {}",
                        l.port, seen.first
                    ),
                ));
            } else if seen.hostnames.contains(&l.hostname) {
                l.conflict = Some((
                    ListenerReason::HostnameConflict,
                    match &l.hostname {
                        Some(h) => format!(
                            "another listener on port {} already has hostname {h}",
                            l.port
                        ),
                        None => format!(
                            "another listener on port {} already has no hostname",
                            l.port
                        ),
                    },
                ));
            } else {
                seen.hostnames.push(l.hostname.clone());
            }
        }
    }
    for ((gi, li), msg) in firsts {
        let l = &mut gateways[gi].listeners[li];
        // The first of three keeps the first message.
        l.conflict
            .get_or_insert((ListenerReason::ProtocolConflict, msg));
    }
}

pub(super) fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Http => "HTTP",
        Protocol::Https => "HTTPS",
        Protocol::Tls => "TLS",
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
    }
}

/// The snapshot identity of a listener of the Gateway `gateway` whose sets are `sets`.
fn listener_id(gateway: &ObjectRef, sets: &[SetState], l: &ListenerState) -> ListenerId {
    ListenerId {
        gateway: gateway.clone(),
        set: l.set.map(|i| sets[i].key.clone()),
        name: l.name.clone(),
    }
}

// === impl ListenerState ===

impl ListenerState {
    /// Routes may attach: the listener is valid and not conflicted.
    pub fn accepts_routes(&self) -> bool {
        self.not_accepted.is_none() && self.conflict.is_none()
    }

    /// The listener goes into the snapshot.
    pub fn programmed(&self) -> bool {
        self.accepts_routes() && self.tls_problem.is_none()
    }

    pub(super) fn status(&self, generation: Option<i64>) -> ListenerStatus {
        let cond = |t, s, r, m: String| ListenerCondition::new(t, s, r, m, generation);
        let accepted = match (&self.not_accepted, &self.conflict) {
            (Some((reason, msg)), _) => {
                cond(ListenerConditionType::Accepted, false, *reason, msg.clone())
            }
            // A conflicted listener generates no data plane configuration: not Accepted.
            (None, Some((reason, msg))) => {
                cond(ListenerConditionType::Accepted, false, *reason, msg.clone())
            }
            (None, None) => cond(
                ListenerConditionType::Accepted,
                true,
                ListenerReason::Accepted,
                with_notes("Listener is accepted", &self.notes),
            ),
        };
        let programmed = if self.programmed() {
            cond(
                ListenerConditionType::Programmed,
                true,
                ListenerReason::Programmed,
                "Listener is programmed".into(),
            )
        } else {
            let why = self
                .not_accepted
                .as_ref()
                .or(self.conflict.as_ref())
                .map(|(_, m)| m.clone())
                .or_else(|| self.tls_problem.clone())
                .unwrap_or_default();
            // A conflicted listener says which conflict (as the ListenerSet conformance tests
            // expect); anything else is Invalid.
            let reason = self
                .conflict
                .as_ref()
                .map_or(ListenerReason::Invalid, |(r, _)| *r);
            cond(
                ListenerConditionType::Programmed,
                false,
                reason,
                format!("Listener is not programmed: {why}"),
            )
        };
        let resolved = match self.ref_problems.first() {
            None => cond(
                ListenerConditionType::ResolvedRefs,
                true,
                ListenerReason::ResolvedRefs,
                "All references are resolved".into(),
            ),
            Some((reason, _)) => cond(
                ListenerConditionType::ResolvedRefs,
                false,
                *reason,
                self.ref_problems
                    .iter()
                    .map(|(_, m)| m.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        };
        let conflicted = match &self.conflict {
            Some((reason, msg)) => cond(
                ListenerConditionType::Conflicted,
                true,
                *reason,
                msg.clone(),
            ),
            None => cond(
                ListenerConditionType::Conflicted,
                false,
                ListenerReason::NoConflicts,
                "No conflicts".into(),
            ),
        };
        ListenerStatus {
            name: self.name.clone(),
            attached_routes: self.attached_routes,
            supported_kinds: self.supported_kinds.clone(),
            conditions: vec![accepted, programmed, resolved, conflicted],
        }
    }
}

fn with_notes(base: &str, notes: &[String]) -> String {
    if notes.is_empty() {
        base.to_string()
    } else {
        format!("{base}; {}", notes.join("; "))
    }
}

// === impl GatewayState ===

impl GatewayState {
    /// Gateway conditions: Accepted while at least one listener is (ListenersNotValid names
    /// the others, with status True or False as the spec allows), Programmed while at least one
    /// listener is in the snapshot.
    pub fn status(&self) -> GatewayStatus {
        let g = self.generation;
        let own: Vec<&ListenerState> = self.listeners.iter().filter(|l| l.set.is_none()).collect();
        let invalid: Vec<&str> = own
            .iter()
            .filter(|l| !l.accepts_routes())
            .map(|l| l.name.as_str())
            .collect();
        let any_valid = invalid.len() < own.len();
        let gw_cond = |t, status, r, m: String| {
            GatewayCondition::new(
                GatewayCondType::Gateway(t),
                status,
                GatewayCondReason::Gateway(r),
                m,
                g,
            )
        };
        let accepted = if let Some(msg) = &self.addresses.unsupported {
            gw_cond(
                GatewayConditionType::Accepted,
                false,
                GatewayConditionReason::UnsupportedAddress,
                msg.clone(),
            )
        } else if let Some(msg) = self.tls.invalid_parameters() {
            gw_cond(
                GatewayConditionType::Accepted,
                false,
                GatewayConditionReason::InvalidParameters,
                msg.to_string(),
            )
        } else if invalid.is_empty() && any_valid {
            gw_cond(
                GatewayConditionType::Accepted,
                true,
                GatewayConditionReason::Accepted,
                "Gateway is accepted".into(),
            )
        } else {
            gw_cond(
                GatewayConditionType::Accepted,
                any_valid,
                GatewayConditionReason::ListenersNotValid,
                if own.is_empty() {
                    "Gateway has no listeners".to_string()
                } else {
                    format!("invalid listeners: {}", invalid.join(", "))
                },
            )
        };
        let programmed = if let Some(msg) = &self.addresses.not_usable {
            gw_cond(
                GatewayConditionType::Programmed,
                false,
                GatewayConditionReason::AddressNotUsable,
                msg.clone(),
            )
        } else if let Some(msg) = &self.addresses.not_assigned {
            gw_cond(
                GatewayConditionType::Programmed,
                false,
                GatewayConditionReason::AddressNotAssigned,
                msg.clone(),
            )
        } else if self.addresses.unsupported.is_some() {
            gw_cond(
                GatewayConditionType::Programmed,
                false,
                GatewayConditionReason::Invalid,
                "the Gateway is not accepted".into(),
            )
        } else if self.listeners.iter().any(ListenerState::programmed) {
            gw_cond(
                GatewayConditionType::Programmed,
                true,
                GatewayConditionReason::Programmed,
                "Gateway is programmed".into(),
            )
        } else {
            gw_cond(
                GatewayConditionType::Programmed,
                false,
                GatewayConditionReason::Invalid,
                "no listener is programmed".into(),
            )
        };
        let mut conditions = vec![accepted, programmed, self.addresses_assigned(g)];
        conditions.extend(self.tls.conditions(g));
        // GEP-91: present only while some validation allows insecure fallback.
        if let Some(msg) = &self.insecure_frontend {
            conditions.push(GatewayCondition::new(
                GatewayCondType::InsecureFrontendValidationMode,
                true,
                GatewayCondReason::ConfigurationChanged,
                msg.clone(),
                g,
            ));
        }
        GatewayStatus {
            generation: g,
            addresses: self.addresses.status.clone(),
            conditions,
            listeners: own.iter().map(|l| l.status(g)).collect(),
            // Counted once Accepted: allowed, and at least one of its listeners programmed.
            attached_listener_sets: (0..self.sets.len())
                .filter(|&i| {
                    self.sets[i].attached()
                        && self
                            .listeners
                            .iter()
                            .any(|l| l.set == Some(i) && l.programmed())
                })
                .count() as u32,
        }
    }

    /// `AddressesAssigned` (GEP-5093): whether every `spec.addresses` entry got an address.
    fn addresses_assigned(&self, g: Option<i64>) -> GatewayCondition {
        let a = &self.addresses;
        // `not_assigned` repeats what routability left out when that was everything.
        let not_assigned = (a.not_assigned.as_deref()).filter(|m| *m != addresses::NONE_MET);
        let missing: Vec<&str> = (a.unsatisfied.iter().map(String::as_str))
            .chain(a.unsupported.as_deref())
            .chain(a.not_usable.as_deref())
            .chain(not_assigned)
            .collect();
        let (status, reason, message) = if !a.requested {
            (
                true,
                GatewayCondReason::AddressesAssigned,
                "no addresses requested: pier's own".to_string(),
            )
        } else if missing.is_empty() {
            (
                true,
                GatewayCondReason::AddressesAssigned,
                "every requested address is assigned".into(),
            )
        } else if a.status.is_empty() {
            (false, GatewayCondReason::NotAssigned, missing.join("; "))
        } else {
            (
                false,
                GatewayCondReason::PartiallyAssigned,
                missing.join("; "),
            )
        };
        GatewayCondition::new(
            GatewayCondType::AddressesAssigned,
            status,
            reason,
            message,
            g,
        )
    }

    /// The snapshot identity of one of its listeners.
    pub fn listener_id(&self, l: &ListenerState) -> ListenerId {
        listener_id(&self.key, &self.sets, l)
    }

    /// Statuses of the ListenerSets that name this Gateway as their parent; `status` is the
    /// Gateway's own ([`GatewayState::status`]): its Accepted condition decides theirs.
    pub fn set_statuses<'a>(
        &'a self,
        status: &GatewayStatus,
    ) -> impl Iterator<Item = (ObjectRef, ListenerSetStatus)> + 'a {
        let gateway_accepted = status.conditions.iter().any(|c| {
            c.status && c.type_ == GatewayCondType::Gateway(GatewayConditionType::Accepted)
        });
        self.sets.iter().enumerate().map(move |(i, set)| {
            let listeners: Vec<&ListenerState> =
                self.listeners.iter().filter(|l| l.set == Some(i)).collect();
            (set.key.clone(), set.status(&listeners, gateway_accepted))
        })
    }
}

#[cfg(test)]
mod tests;
