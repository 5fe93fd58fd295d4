//! Frontend client certificate validation (GEP-91, Gateway `spec.tls.frontend`): which CA
//! bundle and mode apply to each HTTPS listener (`perPort` for its port, else `default`), and
//! what the listener's status says about the `caCertificateRefs`.
//!
//! ```text
//! spec.tls.frontend ─┬─ default ──────┐   caCertificateRefs ─> ConfigMap | Secret key ca.crt
//!                    └─ perPort[port] ─┴─> Validation { ClientAuth (the usable CAs), problems }
//!                                                  └─> every HTTPS listener on that port
//! ```
//!
//! Upstream's rules (`FrontendTLSValidation.caCertificateRefs`): a reference that does not
//! resolve or holds no CA is `ResolvedRefs=False` `InvalidCACertificateRef`, an unsupported kind
//! `InvalidCACertificateKind`, a cross-namespace one without a ReferenceGrant `RefNotPermitted`;
//! when every reference is invalid the listener is also `Accepted=False`
//! `NoValidCACertificate` (and serves nothing: never without the validation it asked for).
//! When some are valid, the listener trusts the union of those.

use std::collections::BTreeMap;

use rustls_pki_types::CertificateDer;

use super::ListenerState;
use crate::model::{ClientAuth, ClientAuthMode, ObjectRef, Protocol};
use crate::tls::client::{TrustBundle, parse_pem_certs};
use crate::tls::server::client_auth;
use crate::translate::api::{
    CERTIFICATES_GROUP, CORE_GROUP, GATEWAY_GROUP, GatewayTlsFrontend, GatewayTlsFrontendDefault,
    GatewayTlsFrontendDefaultValidation, GatewayTlsFrontendDefaultValidationCaCertificateRefs,
    GatewayTlsFrontendDefaultValidationMode, GatewayTlsFrontendPerPort,
    GatewayTlsFrontendPerPortTls, GatewayTlsFrontendPerPortTlsValidation,
    GatewayTlsFrontendPerPortTlsValidationCaCertificateRefs,
    GatewayTlsFrontendPerPortTlsValidationMode,
};
use crate::translate::mesh::{CA_CRT_KEY, UNSERVED, cluster_trust_bundle, config_map_value};
use crate::translate::refs::{self, RefFrom, RefTo};
use crate::translate::resources::Resources;
use crate::translate::status::ListenerReason;
use crate::translate::{error_chain, group_kind};

/// One Gateway's frontend validation, resolved once per distinct stanza.
#[derive(Debug, Default)]
pub struct Frontend {
    default: Option<Validation>,
    /// A `perPort` entry overrides `default` for its port, also when it has no validation.
    per_port: BTreeMap<u16, Option<Validation>>,
    /// Where `AllowInsecureFallback` is set (`default`, `perPort[8443]`), for the Gateway's
    /// `InsecureFrontendValidationMode` condition.
    insecure: Vec<String>,
}

#[derive(Debug)]
struct Validation {
    /// `tls.frontend.default` or `tls.frontend.perPort[port N]`, for messages.
    origin: String,
    /// The usable CAs; `None` when no reference is usable.
    auth: Option<ClientAuth>,
    problems: Vec<(ListenerReason, String)>,
}

/// A `caCertificateRefs` entry, whichever generated type it came from.
struct CaRef<'a> {
    group: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
}

// === impl Frontend ===

impl Frontend {
    pub fn new(resources: &Resources, gw_ns: &str, spec: Option<&GatewayTlsFrontend>) -> Self {
        let Some(GatewayTlsFrontend { default, per_port }) = spec else {
            return Self::default();
        };
        let mut out = Self::default();
        let GatewayTlsFrontendDefault { validation } = default;
        if let Some(GatewayTlsFrontendDefaultValidation {
            ca_certificate_refs,
            mode,
        }) = validation
        {
            let mode = match mode {
                Some(GatewayTlsFrontendDefaultValidationMode::AllowInsecureFallback) => {
                    ClientAuthMode::AllowInsecureFallback
                }
                Some(GatewayTlsFrontendDefaultValidationMode::AllowValidOnly) | None => {
                    ClientAuthMode::AllowValidOnly
                }
            };
            let refs = ca_certificate_refs.iter().map(CaRef::from_default);
            let origin = "tls.frontend.default".to_string();
            out.default = Some(out.validation(resources, gw_ns, origin, refs, mode));
        }
        for GatewayTlsFrontendPerPort { port, tls } in per_port.iter().flatten() {
            let Ok(port) = u16::try_from(*port) else {
                continue;
            };
            let GatewayTlsFrontendPerPortTls { validation } = tls;
            let v = validation.as_ref().map(
                |GatewayTlsFrontendPerPortTlsValidation {
                     ca_certificate_refs,
                     mode,
                 }| {
                    let mode = match mode {
                        Some(GatewayTlsFrontendPerPortTlsValidationMode::AllowInsecureFallback) => {
                            ClientAuthMode::AllowInsecureFallback
                        }
                        Some(GatewayTlsFrontendPerPortTlsValidationMode::AllowValidOnly) | None => {
                            ClientAuthMode::AllowValidOnly
                        }
                    };
                    let refs = ca_certificate_refs.iter().map(CaRef::from_per_port);
                    let origin = format!("tls.frontend.perPort[port {port}]");
                    out.validation(resources, gw_ns, origin, refs, mode)
                },
            );
            // The API keeps ports unique; should two entries name one port, the first wins.
            out.per_port.entry(port).or_insert(v);
        }
        out
    }

    fn validation<'a>(
        &mut self,
        resources: &Resources,
        gw_ns: &str,
        origin: String,
        refs: impl Iterator<Item = CaRef<'a>>,
        mode: ClientAuthMode,
    ) -> Validation {
        if mode == ClientAuthMode::AllowInsecureFallback {
            self.insecure.push(origin.clone());
        }
        let mut certs = vec![];
        let mut problems = vec![];
        for (i, r) in refs.enumerate() {
            match ca_certificates(resources, gw_ns, &r) {
                Ok(c) => certs.extend(c),
                Err((reason, msg)) => {
                    problems.push((reason, format!("{origin}.caCertificateRefs[{i}]: {msg}")))
                }
            }
        }
        let auth = if certs.is_empty() {
            None
        } else {
            match TrustBundle::from_certs(certs)
                .map_err(|e| error_chain(&e))
                .and_then(|b| client_auth(&b, mode).map_err(|e| error_chain(&e)))
            {
                Ok(a) => Some(a),
                Err(e) => {
                    problems.push((
                        ListenerReason::InvalidCACertificateRef,
                        format!("{origin}: the CA certificates cannot be used: {e}"),
                    ));
                    None
                }
            }
        };
        Validation {
            origin,
            auth,
            problems,
        }
    }

    /// Applies the validation for its port to an HTTPS listener that is otherwise valid.
    pub fn apply(&self, l: &mut ListenerState) {
        if l.protocol != Some(Protocol::Https) || l.not_accepted.is_some() {
            return;
        }
        let v = match self.per_port.get(&l.port) {
            Some(v) => v.as_ref(),
            None => self.default.as_ref(),
        };
        let Some(v) = v else { return };
        l.ref_problems.extend(v.problems.iter().cloned());
        match &v.auth {
            Some(auth) => {
                let how = match auth.mode {
                    ClientAuthMode::AllowValidOnly => "must present",
                    ClientAuthMode::AllowInsecureFallback => {
                        "may present (AllowInsecureFallback: or none, or an unverified one)"
                    }
                };
                l.notes.push(format!(
                    "clients {how} a certificate signed by one of {} CA certificate(s) ({})",
                    auth.cas, v.origin
                ));
                l.client_auth = Some(auth.clone());
            }
            None => {
                l.not_accepted = Some((
                    ListenerReason::NoValidCACertificate,
                    format!(
                        "{}: no caCertificateRef is usable, so client certificates cannot be \
                         validated",
                        v.origin
                    ),
                ));
            }
        }
    }

    /// The `InsecureFrontendValidationMode=True` message, when some validation allows
    /// insecure fallback.
    pub fn insecure(&self) -> Option<String> {
        (!self.insecure.is_empty()).then(|| {
            format!(
                "client certificate validation is AllowInsecureFallback in {}: clients without \
                 a valid certificate are let through",
                self.insecure.join(", ")
            )
        })
    }
}

// === impl CaRef ===

impl<'a> CaRef<'a> {
    fn from_default(
        GatewayTlsFrontendDefaultValidationCaCertificateRefs {
            group,
            kind,
            name,
            namespace,
        }: &'a GatewayTlsFrontendDefaultValidationCaCertificateRefs,
    ) -> Self {
        Self {
            group,
            kind,
            name,
            namespace: namespace.as_deref(),
        }
    }

    fn from_per_port(
        GatewayTlsFrontendPerPortTlsValidationCaCertificateRefs {
            group,
            kind,
            name,
            namespace,
        }: &'a GatewayTlsFrontendPerPortTlsValidationCaCertificateRefs,
    ) -> Self {
        Self {
            group,
            kind,
            name,
            namespace: namespace.as_deref(),
        }
    }
}

/// The CA certificates one reference holds: key `ca.crt` of a ConfigMap (Core) or of a
/// Secret (pier also reads Secrets). Cross-namespace references need a ReferenceGrant from
/// the Gateway.
fn ca_certificates(
    resources: &Resources,
    gw_ns: &str,
    r: &CaRef<'_>,
) -> Result<Vec<CertificateDer<'static>>, (ListenerReason, String)> {
    let bad = |m: String| (ListenerReason::InvalidCACertificateRef, m);
    if r.group == CERTIFICATES_GROUP && r.kind == "ClusterTrustBundle" {
        // Cluster-scoped: no namespace, no ReferenceGrant (GEP-5075).
        if r.namespace.is_some_and(|ns| !ns.is_empty()) {
            return Err(bad(format!(
                "ClusterTrustBundle {} is cluster-scoped: its reference has no namespace",
                r.name
            )));
        }
        if resources.trust_bundles_unserved {
            // GEP-5075: without the API the kind is not supported.
            return Err((
                ListenerReason::InvalidCACertificateKind,
                format!("ClusterTrustBundle {}: {UNSERVED}", r.name),
            ));
        }
        return cluster_trust_bundle(resources, r.name).map_err(bad);
    }
    let kind = match r.kind {
        "ConfigMap" | "Secret" if refs::is_core_group(Some(r.group)) => r.kind,
        _ => {
            return Err((
                ListenerReason::InvalidCACertificateKind,
                format!(
                    "{} is not supported (core/ConfigMap or core/Secret with key {CA_CRT_KEY}, \
                     or certificates.k8s.io/ClusterTrustBundle)",
                    group_kind(r.group, r.kind)
                ),
            ));
        }
    };
    let ns = r.namespace.unwrap_or(gw_ns);
    let id = ObjectRef::new(ns, r.name);
    if ns != gw_ns {
        let from = RefFrom {
            group: GATEWAY_GROUP,
            kind: "Gateway",
            namespace: gw_ns,
        };
        let to = RefTo {
            group: CORE_GROUP,
            kind,
            namespace: ns,
            name: r.name,
        };
        if !refs::reference_granted(resources, from, to) {
            return Err((
                ListenerReason::RefNotPermitted,
                format!("reference to {kind} {id} is not permitted by any ReferenceGrant"),
            ));
        }
    }
    let key = (ns.to_string(), r.name.to_string());
    let pem = if kind == "ConfigMap" {
        let cm = resources
            .config_maps
            .get(&key)
            .ok_or_else(|| bad(format!("ConfigMap {id} not found")))?;
        config_map_value(cm, CA_CRT_KEY)
    } else {
        let s = resources
            .secrets
            .get(&key)
            .ok_or_else(|| bad(format!("Secret {id} not found")))?;
        s.data
            .as_ref()
            .and_then(|d| d.get(CA_CRT_KEY))
            .map(|b| b.0.as_slice())
            .filter(|b| !b.is_empty())
    }
    .ok_or_else(|| bad(format!("{kind} {id} has no key {CA_CRT_KEY}")))?;
    parse_pem_certs(pem)
        .map_err(|e| bad(format!("{kind} {id} key {CA_CRT_KEY}: {}", error_chain(&e))))
}
