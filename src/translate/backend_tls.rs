//! Backend TLS decisions: for one Service port reached from one Route under one Gateway, is the
//! connection plaintext, TLS with a ready config, or impossible (fail closed)? Also reads
//! BackendTLSPolicies.
//!
//! ```text
//! meshed route ──> mesh trust bundle + client cert ─┐ (policy: SANs must match, hostname = SNI)
//! BackendTLSPolicy ─> policy CAs (+ gateway client cert) ─┼─> ConfigSpec ─> ClientConfigs ─> BackendTls::Tls
//! neither ──────────────────────────────────────────────┴─> Plain          any gap ─> Unavailable
//! ```
//!
//! Mesh SNI is `<service>.<namespace>.svc.<cluster domain>`; a BackendTLSPolicy's `hostname`
//! overrides it. The peer check for mesh is the chain only (mesh certificates carry SPIFFE URI
//! SANs, not the Service's DNS name), plus the policy's `subjectAltNames` when one applies.
//! For non-meshed routes a policy gives TLS verified against its CAs and its `hostname` (or
//! its `subjectAltNames`, GEP-3155), presenting the Gateway's client certificate when one is
//! configured ("applied to all services").
//!
//! Which policy applies to a Service port: one whose targetRef names the port (sectionName =
//! Service port name) beats one that names the whole Service; among equals the oldest wins
//! (creationTimestamp, then namespace/name), as Gateway API conflict resolution goes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use rustls::ClientConfig;
use rustls_pki_types::ServerName;

use super::api::{
    BackendTlsPolicyTargetRefs, BackendTlsPolicyValidation,
    BackendTlsPolicyValidationCaCertificateRefs, BackendTlsPolicyValidationSubjectAltNames,
    BackendTlsPolicyValidationSubjectAltNamesType, GATEWAY_GROUP, Timestamp, creation_time,
};
use super::mesh::{
    CA_CRT_KEY, ClientState, ExpectedIdentity, IdentityScheme, TlsCtx, config_map_value,
};
use super::refs;
use super::resources::Resources;
use super::status::{
    BackendTlsPolicyStatus, ParentRef, PolicyAncestorStatus, PolicyCondition,
    PolicyConditionReason, PolicyConditionType,
};
use super::{Settings, error_chain, group_kind};
use crate::model::{
    AppProtocol, BackendId, BackendTls, ObjectRef, TlsMode, TlsUnavailable, UpstreamTls,
};
use crate::tls::client::{
    ClientConfigs, ClientIdentity, ConfigSpec, PeerCheck, SanRequirement, TrustBundle, alpn_for,
    parse_pem_certs,
};

/// A backend's TLS decision, comparable: backends are shared per (Service port, decision).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsKey {
    Plain,
    Unavailable(TlsUnavailable),
    /// Mode, trust key, SNI.
    Tls(TlsMode, u64, String),
    /// Per-endpoint identity: the chain-only trust key, the scheme, the Service's SNI.
    PerEndpoint(u64, String, String),
}

/// What [`BackendTlsResolver::decide`] concluded.
pub enum Decision {
    /// The same for every endpoint.
    Backend(BackendTls),
    /// Mesh mTLS with a config per endpoint identity ([`BackendTlsResolver::endpoint_tls`]).
    PerEndpoint(IdentityPlan),
}

/// Everything about a per-endpoint-identity backend's TLS except the identity.
pub struct IdentityPlan {
    pub scheme: IdentityScheme,
    /// (chain-only trust key, Service SNI): what the endpoint configs of this plan share.
    key: (u64, String),
    trust: Arc<TrustBundle>,
    client: Arc<ClientIdentity>,
    /// The Service's mesh SNI, sent unless the scheme names its own.
    service_sni: ServerName<'static>,
    alpn: Vec<Vec<u8>>,
}

/// Decides backend TLS, building each distinct `ClientConfig` once per translation.
pub struct BackendTlsResolver<'a> {
    resources: &'a Resources,
    cluster_domain: &'a str,
    /// Policies by the (namespace, Service) they target, oldest first.
    targets: BTreeMap<(String, String), Vec<PolicyTarget>>,
    parsed: BTreeMap<ObjectRef, Arc<ParsedPolicy>>,
    well_known: Option<Arc<TrustBundle>>,
    configs: ClientConfigs,
    /// Endpoint configs by (plan key, identity, SNI): endpoints of one ServiceAccount share one.
    endpoint_tls: HashMap<(u64, String), HashMap<SanRequirement, Arc<UpstreamTls>>>,
    /// The Gateways under which each policy was applied (for policy status).
    pub used: BTreeMap<ObjectRef, BTreeSet<ObjectRef>>,
}

#[derive(Debug)]
struct PolicyTarget {
    policy: ObjectRef,
    section: Option<String>,
    order: (Option<Timestamp>, ObjectRef),
}

/// A BackendTLSPolicy, read.
#[derive(Debug)]
pub struct ParsedPolicy {
    pub key: ObjectRef,
    /// `hostname` (SNI) and `subjectAltNames`, or why they are invalid.
    pub names: Result<(ServerName<'static>, Vec<SanRequirement>), String>,
    /// The CAs, or why they cannot be used.
    pub roots: Result<Arc<TrustBundle>, PolicyRootsError>,
}

/// Why a policy's CAs cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRootsError {
    pub kind: RootsErrorKind,
    pub message: String,
    /// Some caCertificateRef did resolve (Accepted stays True; connections still fail).
    pub any_ref_valid: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootsErrorKind {
    /// `Accepted=False`, reason Invalid (CA settings themselves are wrong).
    Invalid,
    /// `ResolvedRefs=False`, reason InvalidCACertificateRef.
    InvalidCaRef,
    /// `ResolvedRefs=False`, reason InvalidKind.
    InvalidKind,
}

// === impl BackendTlsResolver ===

impl<'a> BackendTlsResolver<'a> {
    pub fn new(resources: &'a Resources, settings: &'a Settings) -> Self {
        let mut targets: BTreeMap<(String, String), Vec<PolicyTarget>> = BTreeMap::new();
        for ((ns, name), policy) in &resources.backend_tls_policies {
            let key = ObjectRef::new(ns, name);
            for BackendTlsPolicyTargetRefs {
                group,
                kind,
                name: target,
                section_name,
            } in &policy.spec.target_refs
            {
                if !refs::is_core_group(Some(group)) || kind != "Service" {
                    continue;
                }
                targets
                    .entry((ns.clone(), target.clone()))
                    .or_default()
                    .push(PolicyTarget {
                        policy: key.clone(),
                        section: section_name.clone(),
                        order: (creation_time(&policy.metadata), key.clone()),
                    });
            }
        }
        for list in targets.values_mut() {
            list.sort_by(|a, b| a.order.cmp(&b.order));
        }
        Self {
            resources,
            cluster_domain: &settings.cluster_domain,
            targets,
            parsed: BTreeMap::new(),
            well_known: None,
            configs: ClientConfigs::default(),
            endpoint_tls: HashMap::new(),
            used: BTreeMap::new(),
        }
    }

    /// Reuse these configs (the previous snapshot's, by trust key) instead of building equal
    /// ones.
    pub fn carry(&mut self, previous: &HashMap<u64, Arc<ClientConfig>>) {
        self.configs.carry(previous);
    }

    /// The decision for Service port `id` (named `port_name`, speaking `protocol`) reached in
    /// `ctx`.
    pub fn decide(
        &mut self,
        id: &BackendId,
        port_name: Option<&str>,
        protocol: AppProtocol,
        ctx: TlsCtx<'_>,
    ) -> (TlsKey, Decision) {
        let policy = self.policy_for(&id.service, port_name);
        if let (Some(p), Some((gw, _))) = (&policy, ctx.gateway) {
            self.used
                .entry(p.key.clone())
                .or_default()
                .insert(gw.clone());
        }
        if ctx.meshed {
            return self.mesh(id, policy.as_deref(), protocol, ctx);
        }
        let Some(p) = policy else {
            return (TlsKey::Plain, Decision::Backend(BackendTls::Plain));
        };
        let (Ok((host, sans)), Ok(roots)) = (&p.names, &p.roots) else {
            return unavailable(TlsUnavailable::InvalidPolicy);
        };
        let client = match ctx.gateway.map(|(_, g)| &g.client) {
            Some(ClientState::Ready(c)) => Some(c.clone()),
            Some(ClientState::Invalid) => return unavailable(TlsUnavailable::NoClientCertificate),
            Some(ClientState::None) | None => None,
        };
        // GEP-3155: with subjectAltNames, the hostname is SNI only, not authentication.
        let check = if sans.is_empty() {
            PeerCheck::Name(host.clone())
        } else {
            PeerCheck::sans_or_chain(sans.clone())
        };
        let roots = roots.clone();
        self.tls(
            TlsMode::Policy,
            &roots,
            client.as_deref(),
            check,
            host.clone(),
            &alpn_for(protocol, &[]),
        )
    }

    fn mesh(
        &mut self,
        id: &BackendId,
        policy: Option<&ParsedPolicy>,
        protocol: AppProtocol,
        ctx: TlsCtx<'_>,
    ) -> (TlsKey, Decision) {
        let Some(mesh) = ctx.gateway.and_then(|(_, g)| g.mesh.as_ref()) else {
            return unavailable(TlsUnavailable::InvalidMeshConfig);
        };
        let trust = match &mesh.trust {
            Ok(t) => t.clone(),
            Err(why) => return unavailable(*why),
        };
        let Some(ClientState::Ready(client)) = ctx.gateway.map(|(_, g)| &g.client) else {
            return unavailable(TlsUnavailable::NoClientCertificate);
        };
        let client = client.clone();
        let alpn = alpn_for(protocol, &mesh.alpn_extra);
        // Per-endpoint identity, unless a BackendTLSPolicy names the Service's SANs itself.
        if let (Some(scheme), None) = (&mesh.identity, policy) {
            let Some(service_sni) = mesh_sni(id, self.cluster_domain) else {
                return unavailable(TlsUnavailable::InvalidMeshConfig);
            };
            let base = ConfigSpec {
                roots: &trust,
                client: Some(&client),
                check: &PeerCheck::ChainOnly,
                alpn: &alpn,
            }
            .trust_key();
            let key = TlsKey::PerEndpoint(
                base,
                format!("{scheme:?}"),
                service_sni.to_str().into_owned(),
            );
            let plan = IdentityPlan {
                key: (base, service_sni.to_str().into_owned()),
                scheme: scheme.clone(),
                trust,
                client,
                service_sni,
                alpn,
            };
            return (key, Decision::PerEndpoint(plan));
        }
        let (sni, check) = match policy {
            None => match mesh_sni(id, self.cluster_domain) {
                Some(sni) => (sni, PeerCheck::ChainOnly),
                None => return unavailable(TlsUnavailable::InvalidMeshConfig),
            },
            // The mesh bundle is the trust; the policy adds SANs and the SNI.
            Some(p) => match &p.names {
                Ok((host, sans)) => (host.clone(), PeerCheck::sans_or_chain(sans.clone())),
                Err(_) => return unavailable(TlsUnavailable::InvalidPolicy),
            },
        };
        self.tls(TlsMode::Mesh, &trust, Some(&client), check, sni, &alpn)
    }

    /// The TLS config of one endpoint of a per-endpoint-identity backend: `plan`'s trust,
    /// client certificate and ALPN, checking `expected` (and sending its SNI where the scheme
    /// has one). Shared by every endpoint with the same identity.
    pub fn endpoint_tls(
        &mut self,
        plan: &IdentityPlan,
        expected: &ExpectedIdentity,
    ) -> Arc<UpstreamTls> {
        // The hot path at scale (one lookup per endpoint, no allocation): endpoints of one
        // ServiceAccount share a config.
        if let Some(t) = self
            .endpoint_tls
            .get(&plan.key)
            .and_then(|m| m.get(&expected.san))
        {
            return t.clone();
        }
        let sni = expected.sni.as_ref().unwrap_or(&plan.service_sni);
        let check = PeerCheck::Identity(expected.san.clone());
        let spec = ConfigSpec {
            roots: &plan.trust,
            client: Some(&plan.client),
            check: &check,
            alpn: &plan.alpn,
        };
        let (config, trust_key) = self.configs.get(&spec);
        let tls = Arc::new(UpstreamTls {
            mode: TlsMode::Mesh,
            config,
            server_name: sni.clone(),
            trust_key,
            identity: Some(expected.san.to_string()),
        });
        self.endpoint_tls
            .entry(plan.key.clone())
            .or_default()
            .insert(expected.san.clone(), tls.clone());
        tls
    }

    fn tls(
        &mut self,
        mode: TlsMode,
        roots: &TrustBundle,
        client: Option<&ClientIdentity>,
        check: PeerCheck,
        server_name: ServerName<'static>,
        alpn: &[Vec<u8>],
    ) -> (TlsKey, Decision) {
        let (config, trust_key) = self.configs.get(&ConfigSpec {
            roots,
            client,
            check: &check,
            alpn,
        });
        let key = TlsKey::Tls(mode, trust_key, server_name.to_str().into_owned());
        let tls = UpstreamTls {
            mode,
            config,
            server_name,
            trust_key,
            identity: None,
        };
        (key, Decision::Backend(BackendTls::Tls(Arc::new(tls))))
    }

    /// The policy that applies to a port of a Service, parsed once.
    fn policy_for(
        &mut self,
        service: &ObjectRef,
        port_name: Option<&str>,
    ) -> Option<Arc<ParsedPolicy>> {
        let list = self
            .targets
            .get(&(service.namespace.clone(), service.name.clone()))?;
        let pick = list
            .iter()
            .find(|t| t.section.is_some() && t.section.as_deref() == port_name)
            .or_else(|| list.iter().find(|t| t.section.is_none()))?;
        let key = pick.policy.clone();
        if let Some(p) = self.parsed.get(&key) {
            return Some(p.clone());
        }
        let parsed = Arc::new(self.parse(&key));
        self.parsed.insert(key, parsed.clone());
        Some(parsed)
    }

    fn parse(&mut self, key: &ObjectRef) -> ParsedPolicy {
        let validation = &self.resources.backend_tls_policies
            [&(key.namespace.clone(), key.name.clone())]
            .spec
            .validation;
        ParsedPolicy {
            key: key.clone(),
            names: policy_names(validation),
            roots: self.policy_roots(&key.namespace, validation),
        }
    }

    fn policy_roots(
        &mut self,
        ns: &str,
        BackendTlsPolicyValidation {
            ca_certificate_refs,
            well_known_ca_certificates,
            ..
        }: &BackendTlsPolicyValidation,
    ) -> Result<Arc<TrustBundle>, PolicyRootsError> {
        let refs = ca_certificate_refs.as_deref().unwrap_or_default();
        let well_known = well_known_ca_certificates
            .as_deref()
            .filter(|w| !w.is_empty());
        let invalid = |message: String| PolicyRootsError {
            kind: RootsErrorKind::Invalid,
            message,
            any_ref_valid: false,
        };
        match (refs.is_empty(), well_known) {
            (false, Some(_)) => Err(invalid(
                "caCertificateRefs and wellKnownCACertificates are mutually exclusive".into(),
            )),
            (true, None) => Err(invalid(
                "validation needs caCertificateRefs or wellKnownCACertificates".into(),
            )),
            (true, Some("System")) => Ok(self
                .well_known
                .get_or_insert_with(|| Arc::new(TrustBundle::well_known()))
                .clone()),
            (true, Some(other)) => Err(invalid(format!(
                "wellKnownCACertificates {other:?} is not supported (only System)"
            ))),
            (false, None) => {
                // Any invalid ref fails the policy's connections ("Connections using an invalid
                // CACertificateRef MUST fail"); the valid ones only keep it Accepted.
                let mut certs = vec![];
                let mut errors: Vec<(RootsErrorKind, String)> = vec![];
                for (i, r) in refs.iter().enumerate() {
                    match ca_ref(self.resources, ns, r) {
                        Ok(c) => certs.extend(c),
                        Err((kind, m)) => {
                            errors.push((kind, format!("caCertificateRefs[{i}]: {m}")))
                        }
                    }
                }
                if let Some((kind, _)) = errors.first() {
                    return Err(PolicyRootsError {
                        kind: *kind,
                        message: errors
                            .iter()
                            .map(|(_, m)| m.as_str())
                            .collect::<Vec<_>>()
                            .join("; "),
                        any_ref_valid: errors.len() < refs.len(),
                    });
                }
                TrustBundle::from_certs(certs)
                    .map(Arc::new)
                    .map_err(|e| PolicyRootsError {
                        kind: RootsErrorKind::InvalidCaRef,
                        message: error_chain(&e),
                        any_ref_valid: false,
                    })
            }
        }
    }
}

fn unavailable(why: TlsUnavailable) -> (TlsKey, Decision) {
    (
        TlsKey::Unavailable(why),
        Decision::Backend(BackendTls::Unavailable(why)),
    )
}

/// `<service>.<namespace>.svc.<cluster domain>`.
pub fn mesh_sni(id: &BackendId, cluster_domain: &str) -> Option<ServerName<'static>> {
    let name = format!(
        "{}.{}.svc.{}",
        id.service.name,
        id.service.namespace,
        cluster_domain.trim_end_matches('.')
    );
    match ServerName::try_from(name) {
        Ok(n @ ServerName::DnsName(_)) => Some(n),
        _ => None,
    }
}

fn policy_names(
    BackendTlsPolicyValidation {
        hostname,
        subject_alt_names,
        ..
    }: &BackendTlsPolicyValidation,
) -> Result<(ServerName<'static>, Vec<SanRequirement>), String> {
    let host = match ServerName::try_from(hostname.clone()) {
        Ok(n @ ServerName::DnsName(_)) => n,
        _ => return Err(format!("hostname {hostname:?} is not a valid DNS name")),
    };
    let mut sans = vec![];
    for (
        i,
        BackendTlsPolicyValidationSubjectAltNames {
            hostname,
            r#type,
            uri,
        },
    ) in subject_alt_names.iter().flatten().enumerate()
    {
        use BackendTlsPolicyValidationSubjectAltNamesType as T;
        let san = match r#type {
            T::Hostname => hostname
                .as_deref()
                .ok_or_else(|| format!("subjectAltNames[{i}]: type Hostname needs hostname"))
                .and_then(|h| {
                    SanRequirement::dns(h).map_err(|e| format!("subjectAltNames[{i}]: {e}"))
                }),
            T::Uri => uri
                .as_deref()
                .ok_or_else(|| format!("subjectAltNames[{i}]: type URI needs uri"))
                .and_then(|u| {
                    SanRequirement::uri(u).map_err(|e| format!("subjectAltNames[{i}]: {e}"))
                }),
        }?;
        sans.push(san);
    }
    Ok((host, sans))
}

/// A `caCertificateRefs` entry: a ConfigMap in the policy's namespace with `ca.crt`.
fn ca_ref(
    resources: &Resources,
    ns: &str,
    BackendTlsPolicyValidationCaCertificateRefs { group, kind, name }: &BackendTlsPolicyValidationCaCertificateRefs,
) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>, (RootsErrorKind, String)> {
    if group == super::api::CERTIFICATES_GROUP && kind == "ClusterTrustBundle" {
        if resources.trust_bundles_unserved {
            // GEP-5075: without the API the kind is not supported.
            let why = format!("ClusterTrustBundle {name}: {}", super::mesh::UNSERVED);
            return Err((RootsErrorKind::InvalidKind, why));
        }
        return super::mesh::cluster_trust_bundle(resources, name)
            .map_err(|m| (RootsErrorKind::InvalidCaRef, m));
    }
    if !refs::is_core_group(Some(group)) || kind != "ConfigMap" {
        return Err((
            RootsErrorKind::InvalidKind,
            format!(
                "{} is not supported (core/ConfigMap or certificates.k8s.io/ClusterTrustBundle)",
                group_kind(group, kind)
            ),
        ));
    }
    let id = ObjectRef::new(ns, name);
    let bad = |m: String| (RootsErrorKind::InvalidCaRef, m);
    let cm = resources
        .config_maps
        .get(&(ns.to_string(), name.clone()))
        .ok_or_else(|| bad(format!("ConfigMap {id} not found")))?;
    let pem = config_map_value(cm, CA_CRT_KEY)
        .ok_or_else(|| bad(format!("ConfigMap {id} has no key {CA_CRT_KEY}")))?;
    parse_pem_certs(pem).map_err(|e| {
        bad(format!(
            "ConfigMap {id} key {CA_CRT_KEY}: {}",
            error_chain(&e)
        ))
    })
}

// === policy status ===

impl BackendTlsResolver<'_> {
    /// Status for every policy that applied to a backend, one ancestor per Gateway.
    pub fn statuses(&self, controller_name: &str) -> BTreeMap<ObjectRef, BackendTlsPolicyStatus> {
        let mut out = BTreeMap::new();
        for (key, gateways) in &self.used {
            let (Some(parsed), Some(policy)) = (
                self.parsed.get(key),
                self.resources
                    .backend_tls_policies
                    .get(&(key.namespace.clone(), key.name.clone())),
            ) else {
                continue;
            };
            let generation = policy.metadata.generation;
            let ancestors = gateways
                .iter()
                .map(|gw| ancestor(gw, controller_name, policy_conditions(parsed, generation)))
                .collect();
            out.insert(
                key.clone(),
                BackendTlsPolicyStatus {
                    generation,
                    ancestors,
                },
            );
        }
        self.conflicted(controller_name, &mut out);
        out
    }

    /// Policies that lost to an older one for the same Service and section: `Accepted` False,
    /// reason `Conflicted`, under the Gateways where the winner applied.
    fn conflicted(
        &self,
        controller_name: &str,
        out: &mut BTreeMap<ObjectRef, BackendTlsPolicyStatus>,
    ) {
        for ((ns, service), list) in &self.targets {
            // `list` is oldest first: the first of each section wins.
            let mut winners: BTreeMap<&Option<String>, &ObjectRef> = BTreeMap::new();
            for t in list {
                let Some(winner) = winners.get(&t.section).copied() else {
                    winners.insert(&t.section, &t.policy);
                    continue;
                };
                if winner == &t.policy || out.contains_key(&t.policy) {
                    continue;
                }
                let (Some(gateways), Some(policy)) = (
                    self.used.get(winner),
                    self.resources
                        .backend_tls_policies
                        .get(&(t.policy.namespace.clone(), t.policy.name.clone())),
                ) else {
                    continue;
                };
                let generation = policy.metadata.generation;
                let target = match &t.section {
                    Some(s) => format!("{ns}/{service} port {s}"),
                    None => format!("{ns}/{service}"),
                };
                let message = format!("BackendTLSPolicy {winner} is older and targets {target}");
                let conditions = || {
                    vec![PolicyCondition::new(
                        PolicyConditionType::Accepted,
                        false,
                        PolicyConditionReason::Conflicted,
                        message.clone(),
                        generation,
                    )]
                };
                let ancestors = gateways
                    .iter()
                    .map(|gw| ancestor(gw, controller_name, conditions()))
                    .collect();
                out.insert(
                    t.policy.clone(),
                    BackendTlsPolicyStatus {
                        generation,
                        ancestors,
                    },
                );
            }
        }
    }
}

/// A policy's status entry under Gateway `gw`.
pub(super) fn ancestor(
    gw: &ObjectRef,
    controller_name: &str,
    conditions: Vec<PolicyCondition>,
) -> PolicyAncestorStatus {
    PolicyAncestorStatus {
        ancestor_ref: ParentRef {
            group: Some(GATEWAY_GROUP.to_string()),
            kind: Some("Gateway".to_string()),
            namespace: Some(gw.namespace.clone()),
            name: gw.name.clone(),
            section_name: None,
            port: None,
        },
        controller_name: controller_name.to_string(),
        conditions,
    }
}

/// Accepted and ResolvedRefs, as the BackendTLSPolicy API describes them.
fn policy_conditions(p: &ParsedPolicy, generation: Option<i64>) -> Vec<PolicyCondition> {
    use PolicyConditionReason as R;
    use PolicyConditionType as T;
    let cond = |t, ok, r, m: String| PolicyCondition::new(t, ok, r, m, generation);
    let accepted = match (&p.names, &p.roots) {
        (Err(m), _) => cond(T::Accepted, false, R::Invalid, m.clone()),
        (_, Err(e)) if e.kind == RootsErrorKind::Invalid => {
            cond(T::Accepted, false, R::Invalid, e.message.clone())
        }
        (_, Err(e)) if !e.any_ref_valid => cond(
            T::Accepted,
            false,
            R::NoValidCACertificate,
            e.message.clone(),
        ),
        _ => cond(T::Accepted, true, R::Accepted, "Policy is accepted".into()),
    };
    let resolved = match &p.roots {
        Err(e) if e.kind != RootsErrorKind::Invalid => cond(
            T::ResolvedRefs,
            false,
            if e.kind == RootsErrorKind::InvalidKind {
                R::InvalidKind
            } else {
                R::InvalidCACertificateRef
            },
            e.message.clone(),
        ),
        _ => cond(
            T::ResolvedRefs,
            true,
            R::ResolvedRefs,
            "All references are resolved".into(),
        ),
    };
    vec![accepted, resolved]
}

#[cfg(test)]
mod tests;
