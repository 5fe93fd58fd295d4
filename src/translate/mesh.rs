//! The Gateway side of backend TLS: the mesh stanza (GEP-3951 / GEP-3792), where it comes from
//! (`spec.mesh`, else `spec.infrastructure.parametersRef`), which Routes it selects, its trust
//! bundle, and the Gateway's client identity (GEP-3155 `spec.tls.backend.clientCertificateRef`,
//! else the one pier was started with).
//!
//! ```text
//! Gateway ─┬─ spec.mesh | parametersRef ConfigMap "mesh" ─> MeshState { selector, trust, ALPN }
//!          ├─ clientCertificateRef | Settings.client_identity | .workload_api ─> ClientState
//!          └─> GatewayTls ──(Route labels, Namespace labels)──> TlsCtx { meshed } ─> backend_tls
//!                   └─> Gateway conditions: ResolvedRefs, pier.dev/BackendTLS, Accepted
//! ```
//!
//! Failing closed: whatever stops mesh mTLS (no trust bundle, no client certificate, a mesh
//! configuration that cannot be read) makes meshed backends `Unavailable`, never plaintext.
//! When the mesh configuration itself is unreadable (an invalid selector, a parametersRef that
//! does not resolve or does not parse) pier cannot tell meshed Routes from others, so every
//! Route of the Gateway is treated as meshed and fails closed.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;

use super::api::{
    CERTIFICATES_GROUP, CORE_GROUP, ConfigMap, GATEWAY_GROUP, Gateway, GatewayInfrastructure,
    GatewayInfrastructureParametersRef, GatewaySpec, GatewayTls as ApiGatewayTls,
    GatewayTlsBackend, GatewayTlsBackendClientCertificateRef, MeshSpec, TrustBundleRef,
};
use super::refs::{self, RefFrom, RefTo, TLS_SECRET_TYPE};
use super::resources::Resources;
use super::selector::LabelSelector;
use super::status::{GatewayCondReason, GatewayCondType, GatewayCondition};
use super::{Settings, error_chain, group_kind, spiffe};
use crate::model::{ObjectRef, TlsUnavailable};
use crate::tls::client::{ClientIdentity, TrustBundle, parse_pem_certs};

mod export;
mod identity;

pub use export::{ExportError, export_trust};
pub use identity::{ExpectedIdentity, IdentityScheme};

/// Gateway annotation: extra ALPN protocols offered on mesh connections, comma-separated
/// (e.g. `ocg.gateway.networking.k8s.io/v1`), after `h2` and `http/1.1`.
pub const MESH_ALPN_ANNOTATION: &str = "pier.dev/mesh-alpn";
/// The key of the `infrastructure.parametersRef` ConfigMap that holds the mesh stanza (YAML).
pub const PARAMETERS_MESH_KEY: &str = "mesh";
/// GEP-3951's default `bundleKey`.
pub const DEFAULT_BUNDLE_KEY: &str = "ca-bundle.crt";
/// The conventional CA key (GEP-3792 Secrets, BackendTLSPolicy ConfigMaps).
pub const CA_CRT_KEY: &str = "ca.crt";

/// What backend TLS needs from one Gateway, plus what its status says about it.
#[derive(Debug, Default)]
pub struct GatewayTls {
    pub client: ClientState,
    /// `None`: the Gateway has no mesh configuration (no Route is meshed).
    pub mesh: Option<MeshState>,
    pub report: TlsReport,
}

/// The Gateway's client certificate for backend TLS.
#[derive(Clone, Debug, Default)]
pub enum ClientState {
    /// None configured: BackendTLSPolicy backends get TLS without a client certificate.
    #[default]
    None,
    Ready(Arc<ClientIdentity>),
    /// Configured but unusable: backends that would present it fail closed.
    Invalid,
}

#[derive(Debug)]
pub struct MeshState {
    pub selector: MeshSelector,
    /// The CAs meshed peers must chain to, or why there are none.
    pub trust: Result<Arc<TrustBundle>, TlsUnavailable>,
    /// From [`MESH_ALPN_ANNOTATION`].
    pub alpn_extra: Vec<Vec<u8>>,
    /// `mesh.identity`: each endpoint must present its own workload identity. `None`: the
    /// chain to the trust bundle is enough.
    pub identity: Option<IdentityScheme>,
}

#[derive(Debug)]
pub enum MeshSelector {
    /// No selector: every Route attached to the Gateway is meshed.
    All,
    /// A Route is meshed when this matches its labels or its Namespace's labels.
    Labels(LabelSelector),
    /// Unreadable: every Route is treated as meshed (and fails closed).
    Invalid,
}

/// The TLS context of a Route's rules under one Gateway.
#[derive(Clone, Copy, Debug, Default)]
pub struct TlsCtx<'a> {
    /// The Gateway (key and TLS state); `None` only in tests of backend resolution.
    pub gateway: Option<(&'a ObjectRef, &'a GatewayTls)>,
    pub meshed: bool,
}

/// Problems and remarks for the Gateway's status.
#[derive(Debug, Default)]
pub struct TlsReport {
    /// Report `ResolvedRefs` (the Gateway has a clientCertificateRef or trust bundle refs).
    refs_checked: bool,
    ref_problems: Vec<(Why, String)>,
    /// `Accepted=False`, reason InvalidParameters.
    invalid_parameters: Option<String>,
    /// Report `pier.dev/BackendTLS` (mesh or client certificate configured).
    applies: bool,
    problems: Vec<(Why, String)>,
    notes: Vec<String>,
}

/// Reasons this module reports (the status enums are not `Copy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    InvalidClientCertificateRef,
    RefNotPermitted,
    InvalidTrustBundleRef,
    NoTrustBundle,
    NoClientCertificate,
    InvalidMeshConfig,
}

/// What `infrastructure.parametersRef` contributes.
enum Params {
    None,
    Mesh(Box<MeshSpec>, ObjectRef),
    /// Why it cannot be used (InvalidParameters).
    Invalid(String),
}

// === GatewayTls ===

/// The backend TLS state of an in-scope Gateway.
pub fn gateway_tls(
    resources: &Resources,
    settings: &Settings,
    key: &ObjectRef,
    gw: &Gateway,
) -> GatewayTls {
    let mut report = TlsReport::default();
    let client = client_state(
        resources,
        settings,
        &key.namespace,
        &gw.spec.base,
        &mut report,
    );
    let mesh = mesh_state(resources, settings, &key.namespace, gw, &mut report);
    let mesh_needs_client = mesh.as_ref().is_some_and(|m| m.trust.is_ok());
    if mesh_needs_client && matches!(client, ClientState::None) {
        report.problems.push((
            Why::NoClientCertificate,
            "mesh mTLS needs a client certificate: set spec.tls.backend.clientCertificateRef \
             or start pier with --client-cert and --client-key; meshed routes answer 503"
                .into(),
        ));
    }
    GatewayTls {
        client,
        mesh,
        report,
    }
}

fn client_state(
    resources: &Resources,
    settings: &Settings,
    gw_ns: &str,
    spec: &GatewaySpec,
    report: &mut TlsReport,
) -> ClientState {
    let cert_ref = match &spec.tls {
        Some(ApiGatewayTls {
            backend:
                Some(GatewayTlsBackend {
                    client_certificate_ref: Some(r),
                }),
            ..
        }) => Some(r),
        _ => None,
    };
    if let Some(r) = cert_ref {
        report.refs_checked = true;
        report.applies = true;
        return match client_certificate(resources, gw_ns, r) {
            Ok((identity, secret)) => {
                // What it overrides, as pier was started (the CLI allows one of the two).
                let over = match (&settings.client_identity, &settings.workload_api) {
                    (Some(_), _) => "; it takes precedence over --client-cert/--client-key",
                    (None, Some(_)) => {
                        "; it takes precedence over the SPIFFE Workload API's X.509-SVID"
                    }
                    (None, None) => "",
                };
                report.notes.push(format!(
                    "client certificate from Secret {secret} (tls.backend.clientCertificateRef{over})"
                ));
                ClientState::Ready(Arc::new(identity))
            }
            Err((why, msg)) => {
                let msg = format!("tls.backend.clientCertificateRef: {msg}");
                report.ref_problems.push((why, msg.clone()));
                report.problems.push((Why::NoClientCertificate, msg));
                ClientState::Invalid
            }
        };
    }
    let Some(pem) = &settings.client_identity else {
        return match &settings.workload_api {
            Some(api) => workload_api_client(api, report),
            None => ClientState::None,
        };
    };
    report.applies = true;
    match ClientIdentity::from_pem(&pem.cert_pem, &pem.key_pem) {
        Ok(identity) => {
            report
                .notes
                .push("client certificate from --client-cert/--client-key".into());
            ClientState::Ready(Arc::new(identity))
        }
        Err(e) => {
            report.problems.push((
                Why::NoClientCertificate,
                format!(
                    "the client certificate pier was started with (--client-cert/--client-key) \
                     is unusable: {}",
                    error_chain(&e)
                ),
            ));
            ClientState::Invalid
        }
    }
}

/// `--spiffe-socket`: the Workload API's default X.509-SVID, or why there is none yet.
fn workload_api_client(api: &spiffe::WorkloadApi, report: &mut TlsReport) -> ClientState {
    report.applies = true;
    match api.client_identity() {
        Ok((identity, note)) => {
            report.notes.push(note);
            ClientState::Ready(Arc::new(identity))
        }
        Err(msg) => {
            report.problems.push((Why::NoClientCertificate, msg));
            ClientState::Invalid
        }
    }
}

/// GEP-3155: a `kubernetes.io/tls` Secret, cross-namespace only with a ReferenceGrant.
fn client_certificate(
    resources: &Resources,
    gw_ns: &str,
    GatewayTlsBackendClientCertificateRef {
        group,
        kind,
        name,
        namespace,
    }: &GatewayTlsBackendClientCertificateRef,
) -> Result<(ClientIdentity, ObjectRef), (Why, String)> {
    let invalid = |m: String| (Why::InvalidClientCertificateRef, m);
    let kind = kind.as_deref().unwrap_or("Secret");
    if !refs::is_core_group(group.as_deref()) || kind != "Secret" {
        return Err(invalid(format!(
            "{} is not supported (only core/Secret)",
            group_kind(group.as_deref().unwrap_or_default(), kind)
        )));
    }
    let ns = namespace.as_deref().unwrap_or(gw_ns);
    let secret = ObjectRef::new(ns, name);
    if ns != gw_ns && !secret_granted(resources, gw_ns, ns, name) {
        return Err((
            Why::RefNotPermitted,
            format!("reference to Secret {secret} is not permitted by any ReferenceGrant"),
        ));
    }
    let s = resources
        .secrets
        .get(&(ns.to_string(), name.clone()))
        .ok_or_else(|| invalid(format!("Secret {secret} not found")))?;
    if s.type_.as_deref() != Some(TLS_SECRET_TYPE) {
        return Err(invalid(format!(
            "Secret {secret} is not of type {TLS_SECRET_TYPE}"
        )));
    }
    let data = |key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.as_slice())
            .filter(|b| !b.is_empty())
            .ok_or_else(|| invalid(format!("Secret {secret} has no {key}")))
    };
    let identity = ClientIdentity::from_pem(data("tls.crt")?, data("tls.key")?)
        .map_err(|e| invalid(format!("Secret {secret}: {}", error_chain(&e))))?;
    Ok((identity, secret))
}

fn secret_granted(resources: &Resources, gw_ns: &str, ns: &str, name: &str) -> bool {
    let from = RefFrom {
        group: GATEWAY_GROUP,
        kind: "Gateway",
        namespace: gw_ns,
    };
    let to = RefTo {
        group: CORE_GROUP,
        kind: "Secret",
        namespace: ns,
        name,
    };
    refs::reference_granted(resources, from, to)
}

// === mesh stanza ===

fn mesh_state(
    resources: &Resources,
    settings: &Settings,
    gw_ns: &str,
    gw: &Gateway,
    report: &mut TlsReport,
) -> Option<MeshState> {
    let params = parameters_mesh(gw_ns, gw.spec.base.infrastructure.as_ref(), |name| {
        let config_map = resources
            .config_maps
            .get(&(gw_ns.to_string(), name.to_string()))?;
        Some(mesh_key_of(config_map).map(Cow::Borrowed))
    });
    let (spec, origin) = match (gw.spec.mesh.as_ref(), params) {
        (Some(spec), params) => {
            match params {
                Params::Mesh(_, cm) => report.notes.push(format!(
                    "spec.mesh wins: the {PARAMETERS_MESH_KEY:?} key of ConfigMap {cm} \
                     (infrastructure.parametersRef) is ignored"
                )),
                Params::Invalid(msg) => report.invalid_parameters = Some(msg),
                Params::None => {}
            }
            (Cow::Borrowed(spec), "spec.mesh".to_string())
        }
        (None, Params::Mesh(spec, cm)) => (
            Cow::Owned(*spec),
            format!("ConfigMap {cm} (infrastructure.parametersRef)"),
        ),
        (None, Params::Invalid(msg)) => {
            report.applies = true;
            report.problems.push((
                Why::InvalidMeshConfig,
                format!(
                    "{msg}; which routes are meshed is unknown, so every route of this Gateway \
                     answers 503"
                ),
            ));
            report.invalid_parameters = Some(msg);
            return Some(MeshState {
                selector: MeshSelector::Invalid,
                trust: Err(TlsUnavailable::InvalidMeshConfig),
                alpn_extra: vec![],
                identity: None,
            });
        }
        (None, Params::None) => return None,
    };
    report.applies = true;
    report.refs_checked = true;
    report
        .notes
        .push(format!("mesh configuration from {origin}"));
    let selector = mesh_selector(&spec, report);
    let trust = trust_bundle(
        resources,
        settings,
        gw_ns,
        spec.trust_bundle.as_deref().unwrap_or_default(),
        report,
    );
    let alpn_extra = mesh_alpn(gw.metadata.annotations.as_ref(), report);
    let identity = match spec
        .identity
        .as_ref()
        .map(|i| IdentityScheme::parse(i, &settings.cluster_domain))
    {
        None | Some(Ok(None)) => Ok(None),
        Some(Ok(Some(scheme))) => {
            report.notes.push(format!(
                "each meshed endpoint must present its Pod's ServiceAccount identity ({})",
                scheme.name()
            ));
            Ok(Some(scheme))
        }
        Some(Err(msg)) => {
            report.problems.push((
                Why::InvalidMeshConfig,
                format!("{msg}; every meshed route of this Gateway answers 503"),
            ));
            Err(())
        }
    };
    let trust = match (&selector, &identity) {
        (MeshSelector::Invalid, _) | (_, Err(())) => Err(TlsUnavailable::InvalidMeshConfig),
        _ => trust,
    };
    Some(MeshState {
        selector,
        trust,
        alpn_extra,
        identity: identity.unwrap_or(None),
    })
}

/// Whether `gw`'s mesh stanza (`spec.mesh`, else its `infrastructure.parametersRef`
/// ConfigMap, read as [`mesh_state`] reads them) asks for per-endpoint identity, for which
/// Pods must be known. `mesh_key(name)`: ConfigMap `name` of the Gateway's namespace, `None`
/// when there is none, `Some(None)` when it has no `mesh` key. The Kubernetes source watches
/// Pods only once some Gateway does: a cluster without per-endpoint identity pays nothing
/// for them.
pub fn asks_for_endpoint_identity<'a>(
    gw: &Gateway,
    mesh_key: impl FnOnce(&str) -> Option<Option<Cow<'a, str>>>,
) -> bool {
    let gw_ns = gw.metadata.namespace.as_deref().unwrap_or_default();
    let params;
    let spec = match &gw.spec.mesh {
        Some(spec) => spec,
        None => {
            params = parameters_mesh(gw_ns, gw.spec.base.infrastructure.as_ref(), mesh_key);
            match &params {
                Params::Mesh(spec, _) => spec,
                Params::None | Params::Invalid(_) => return false,
            }
        }
    };
    // The default trust domain does not change whether a scheme is set.
    spec.identity
        .as_ref()
        .is_some_and(|i| matches!(IdentityScheme::parse(i, "cluster.local"), Ok(Some(_))))
}

/// The mesh stanza's text in a parametersRef ConfigMap (its [`PARAMETERS_MESH_KEY`] key).
pub fn mesh_key_of(config_map: &ConfigMap) -> Option<&str> {
    config_map
        .data
        .as_ref()?
        .get(PARAMETERS_MESH_KEY)
        .map(String::as_str)
}

/// The mesh stanza of the `infrastructure.parametersRef` ConfigMap (Gateway namespace), if any.
/// A ConfigMap without a `mesh` key contributes nothing. `mesh_key`: as in
/// [`asks_for_endpoint_identity`].
fn parameters_mesh<'a>(
    gw_ns: &str,
    infra: Option<&GatewayInfrastructure>,
    mesh_key: impl FnOnce(&str) -> Option<Option<Cow<'a, str>>>,
) -> Params {
    let Some(GatewayInfrastructureParametersRef { group, kind, name }) =
        infra.and_then(|i| i.parameters_ref.as_ref())
    else {
        return Params::None;
    };
    if !refs::is_core_group(Some(group)) || kind != "ConfigMap" {
        return Params::Invalid(format!(
            "infrastructure.parametersRef {} {name} is not supported (only core/ConfigMap)",
            group_kind(group, kind)
        ));
    }
    let cm = ObjectRef::new(gw_ns, name);
    let Some(text) = mesh_key(name) else {
        return Params::Invalid(format!(
            "infrastructure.parametersRef: ConfigMap {cm} not found"
        ));
    };
    let Some(text) = text else {
        return Params::None;
    };
    match serde_saphyr::from_str::<MeshSpec>(&text) {
        Ok(spec) => Params::Mesh(Box::new(spec), cm),
        Err(e) => Params::Invalid(format!(
            "infrastructure.parametersRef: key {PARAMETERS_MESH_KEY:?} of ConfigMap {cm} is \
             not a valid mesh stanza: {}",
            error_chain(&e)
        )),
    }
}

fn mesh_selector(spec: &MeshSpec, report: &mut TlsReport) -> MeshSelector {
    let chosen = match (&spec.label_selector, &spec.selector) {
        (Some(a), Some(b)) if a != b => {
            report.problems.push((
                Why::InvalidMeshConfig,
                "mesh labelSelector and selector differ: set one; every route of this Gateway \
                 answers 503"
                    .into(),
            ));
            return MeshSelector::Invalid;
        }
        (a, b) => a.as_ref().or(b.as_ref()),
    };
    let Some(s) = chosen else {
        report
            .notes
            .push("no mesh selector: every route of this Gateway is meshed".into());
        return MeshSelector::All;
    };
    match LabelSelector::from_api(s) {
        Ok(s) => {
            report.notes.push(
                "routes whose labels or whose Namespace's labels match the mesh selector are \
                 meshed"
                    .into(),
            );
            MeshSelector::Labels(s)
        }
        Err(e) => {
            report.problems.push((
                Why::InvalidMeshConfig,
                format!("mesh selector is invalid ({e}); every route of this Gateway answers 503"),
            ));
            MeshSelector::Invalid
        }
    }
}

/// The union of every usable referenced bundle. Unusable references are reported; the rest
/// still count (a CA rotation with one broken bundle keeps the other working).
fn trust_bundle(
    resources: &Resources,
    settings: &Settings,
    gw_ns: &str,
    refs: &[TrustBundleRef],
    report: &mut TlsReport,
) -> Result<Arc<TrustBundle>, TlsUnavailable> {
    let mut certs = vec![];
    let mut sources = vec![];
    for (i, r) in refs.iter().enumerate() {
        match bundle_ref(resources, settings, gw_ns, r) {
            Ok((c, source)) => {
                certs.extend(c);
                sources.push(source);
            }
            Err((why, msg)) => report
                .ref_problems
                .push((why, format!("mesh.trustBundle[{i}]: {msg}"))),
        }
    }
    match TrustBundle::from_certs(certs) {
        Ok(bundle) => {
            report.notes.push(format!(
                "trusting {} CA certificate(s) from {}",
                bundle.len(),
                sources.join(", ")
            ));
            Ok(Arc::new(bundle))
        }
        Err(_) => {
            report.problems.push((
                Why::NoTrustBundle,
                if refs.is_empty() {
                    "mesh has no trustBundle; meshed routes answer 503".into()
                } else {
                    "no usable mesh trust bundle; meshed routes answer 503".into()
                },
            ));
            Err(TlsUnavailable::NoTrustBundle)
        }
    }
}

/// One trust bundle reference: its certificates and a description for messages.
fn bundle_ref(
    resources: &Resources,
    settings: &Settings,
    gw_ns: &str,
    TrustBundleRef {
        group,
        kind,
        name,
        namespace,
        bundle_key,
    }: &TrustBundleRef,
) -> Result<(Vec<CertificateDer<'static>>, String), (Why, String)> {
    let bad = |m: String| (Why::InvalidTrustBundleRef, m);
    let kind = kind.as_deref().unwrap_or("ConfigMap");
    let core = refs::is_core_group(group.as_deref());
    let ns = namespace.as_deref().unwrap_or(gw_ns);
    let (pem, source): (&[u8], String) = match kind {
        "ConfigMap" if core => {
            let id = ObjectRef::new(ns, name);
            let cm = resources
                .config_maps
                .get(&(ns.to_string(), name.clone()))
                .ok_or_else(|| bad(format!("ConfigMap {id} not found")))?;
            let keys = match bundle_key {
                Some(k) => vec![k.as_str()],
                None => vec![DEFAULT_BUNDLE_KEY, CA_CRT_KEY],
            };
            let (key, pem) = keys
                .iter()
                .find_map(|k| config_map_value(cm, k).map(|v| (*k, v)))
                .ok_or_else(|| bad(format!("ConfigMap {id} has no key {}", keys.join(" or "))))?;
            (pem, format!("ConfigMap {id} key {key}"))
        }
        // Cross-namespace Secrets need a ReferenceGrant, as every Gateway API Secret reference
        // does. ConfigMaps and ClusterTrustBundles hold only public certificates and need none
        // (GEP-3951: "any namespace to which RBAC permits access").
        "Secret" if core => {
            let id = ObjectRef::new(ns, name);
            if ns != gw_ns && !secret_granted(resources, gw_ns, ns, name) {
                return Err((
                    Why::RefNotPermitted,
                    format!("reference to Secret {id} is not permitted by any ReferenceGrant"),
                ));
            }
            let s = resources
                .secrets
                .get(&(ns.to_string(), name.clone()))
                .ok_or_else(|| bad(format!("Secret {id} not found")))?;
            let key = bundle_key.as_deref().unwrap_or(CA_CRT_KEY);
            let pem = s
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.as_slice())
                .ok_or_else(|| bad(format!("Secret {id} has no key {key}")))?;
            (pem, format!("Secret {id} key {key}"))
        }
        "ClusterTrustBundle" if group.as_deref() == Some(CERTIFICATES_GROUP) => {
            let ctb = resources
                .cluster_trust_bundles
                .get(name)
                .ok_or_else(|| bad(format!("ClusterTrustBundle {name} not found")))?;
            (
                ctb.spec.trust_bundle.as_bytes(),
                format!("ClusterTrustBundle {name}"),
            )
        }
        // The bundle streamed by the SPIFFE Workload API (`--spiffe-socket`) for the trust
        // domain `name` (DER, checked there).
        spiffe::WORKLOAD_API_KIND if group.as_deref() == Some(spiffe::PIER_GROUP) => {
            return match &settings.workload_api {
                Some(api) => api.bundle(name).map_err(bad),
                None => Err(bad(spiffe::not_configured(name))),
            };
        }
        _ => {
            return Err(bad(format!(
                "{} is not supported (core/ConfigMap, core/Secret, \
                 certificates.k8s.io/ClusterTrustBundle or {}/{})",
                group_kind(group.as_deref().unwrap_or_default(), kind),
                spiffe::PIER_GROUP,
                spiffe::WORKLOAD_API_KIND
            )));
        }
    };
    let certs = parse_pem_certs(pem).map_err(|e| bad(format!("{source}: {}", error_chain(&e))))?;
    Ok((certs, source))
}

/// Why a ClusterTrustBundle reference is of an unsupported kind in this cluster.
pub const UNSERVED: &str = "the API server does not serve certificates.k8s.io ClusterTrustBundles \
     (enable the API, or refer to a ConfigMap)";

/// The CA certificates of ClusterTrustBundle `name` (GEP-5075: a `caCertificateRef` of group
/// `certificates.k8s.io`, kind `ClusterTrustBundle`, selected by name; cluster-scoped, so no
/// ReferenceGrant). A missing, empty or unparsable bundle is an error naming it.
pub fn cluster_trust_bundle(
    resources: &Resources,
    name: &str,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let ctb = resources.cluster_trust_bundles.get(name).ok_or_else(|| {
        format!(
            "ClusterTrustBundle {name} not found (pier reads certificates.k8s.io/v1beta1 \
             ClusterTrustBundles)"
        )
    })?;
    let certs = parse_pem_certs(ctb.spec.trust_bundle.as_bytes())
        .map_err(|e| format!("ClusterTrustBundle {name}: {}", error_chain(&e)))?;
    if certs.is_empty() {
        return Err(format!("ClusterTrustBundle {name} holds no certificate"));
    }
    Ok(certs)
}

/// A ConfigMap value from `data`, else `binaryData`; empty counts as missing.
pub fn config_map_value<'c>(cm: &'c ConfigMap, key: &str) -> Option<&'c [u8]> {
    cm.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(String::as_bytes)
        .or_else(|| {
            cm.binary_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.as_slice())
        })
        .filter(|v| !v.is_empty())
}

fn mesh_alpn(
    annotations: Option<&BTreeMap<String, String>>,
    report: &mut TlsReport,
) -> Vec<Vec<u8>> {
    let Some(value) = annotations.and_then(|a| a.get(MESH_ALPN_ANNOTATION)) else {
        return vec![];
    };
    let mut out: Vec<Vec<u8>> = vec![];
    for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        // RFC 7301: a protocol name is 1-255 bytes.
        if p.len() > 255 {
            report.notes.push(format!(
                "{MESH_ALPN_ANNOTATION}: a protocol longer than 255 bytes is ignored"
            ));
            continue;
        }
        let p = p.as_bytes().to_vec();
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if !out.is_empty() {
        let names: Vec<_> = out.iter().map(|p| String::from_utf8_lossy(p)).collect();
        report
            .notes
            .push(format!("mesh ALPN also offers {}", names.join(", ")));
    }
    out
}

// === impl MeshState, TlsCtx ===

impl MeshState {
    /// Whether a Route with these labels, in a Namespace with these labels, is meshed.
    pub fn selects(
        &self,
        route_labels: &BTreeMap<String, String>,
        namespace_labels: &BTreeMap<String, String>,
    ) -> bool {
        match &self.selector {
            MeshSelector::All | MeshSelector::Invalid => true,
            MeshSelector::Labels(s) => s.matches(route_labels) || s.matches(namespace_labels),
        }
    }
}

impl<'a> TlsCtx<'a> {
    /// The context of a Route (its labels, its Namespace's labels) under one Gateway.
    pub fn for_route(
        key: &'a ObjectRef,
        gateway: &'a GatewayTls,
        route_labels: &BTreeMap<String, String>,
        namespace_labels: &BTreeMap<String, String>,
    ) -> Self {
        Self {
            gateway: Some((key, gateway)),
            meshed: gateway
                .mesh
                .as_ref()
                .is_some_and(|m| m.selects(route_labels, namespace_labels)),
        }
    }
}

// === impl GatewayTls ===

impl GatewayTls {
    /// `Accepted=False` (InvalidParameters) message, when `infrastructure.parametersRef` is
    /// unusable.
    pub fn invalid_parameters(&self) -> Option<&str> {
        self.report.invalid_parameters.as_deref()
    }

    /// `ResolvedRefs` (when the Gateway has backend TLS references) and `pier.dev/BackendTLS`
    /// (when it has a mesh or a client certificate).
    pub fn conditions(&self, generation: Option<i64>) -> Vec<GatewayCondition> {
        let r = &self.report;
        let mut out = vec![];
        if r.refs_checked {
            out.push(match r.ref_problems.first() {
                None => GatewayCondition::new(
                    GatewayCondType::ResolvedRefs,
                    true,
                    GatewayCondReason::ResolvedRefs,
                    "All references are resolved",
                    generation,
                ),
                Some((why, _)) => GatewayCondition::new(
                    GatewayCondType::ResolvedRefs,
                    false,
                    why.reason(),
                    join(&r.ref_problems),
                    generation,
                ),
            });
        }
        if r.applies {
            out.push(match r.problems.first() {
                None => GatewayCondition::new(
                    GatewayCondType::BackendTls,
                    true,
                    GatewayCondReason::Ready,
                    format!("backend TLS is ready: {}", r.notes.join("; ")),
                    generation,
                ),
                Some((why, _)) => {
                    let mut msg = join(&r.problems);
                    if !r.notes.is_empty() {
                        msg = format!("{msg} ({})", r.notes.join("; "));
                    }
                    GatewayCondition::new(
                        GatewayCondType::BackendTls,
                        false,
                        why.reason(),
                        msg,
                        generation,
                    )
                }
            });
        }
        out
    }
}

fn join(problems: &[(Why, String)]) -> String {
    problems
        .iter()
        .map(|(_, m)| m.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

impl Why {
    fn reason(self) -> GatewayCondReason {
        match self {
            Self::InvalidClientCertificateRef => GatewayCondReason::InvalidClientCertificateRef,
            Self::RefNotPermitted => GatewayCondReason::RefNotPermitted,
            Self::InvalidTrustBundleRef => GatewayCondReason::InvalidTrustBundleRef,
            Self::NoTrustBundle => GatewayCondReason::NoTrustBundle,
            Self::NoClientCertificate => GatewayCondReason::NoClientCertificate,
            Self::InvalidMeshConfig => GatewayCondReason::InvalidMeshConfig,
        }
    }
}

#[cfg(test)]
mod tests;
