//! Helpers for translation unit tests: manifests in, translation out, conditions looked up by
//! type. Tests write YAML like users do, so they read like the fixtures.

use super::status::{
    GatewayStatus, HttpRouteStatus, ListenerStatus, RouteCondition, RouteConditionType,
};
use super::{Resources, Settings, Translation, parse_manifests, translate};
use crate::model::{Backend, BackendTarget, BackendTls, ObjectRef};

/// Pier's GatewayClass and Gateway `default/gw` with one HTTP listener `http` on port 80
/// (routes from the same namespace only).
pub const BASE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default, generation: 1}
spec:
  gatewayClassName: pier
  listeners: [{name: http, protocol: HTTP, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {ports: [{name: http, port: 80}]}
"#;

pub fn resources(yaml: &str) -> Resources {
    let mut r = Resources::default();
    parse_manifests(yaml, &mut r).expect("test manifests parse");
    r
}

pub fn run(yaml: &str) -> Translation {
    translate(&resources(yaml), &Settings::default())
}

/// `BASE` plus more documents.
pub fn run_with_base(more: &str) -> Translation {
    run(&format!("{BASE}\n---\n{more}"))
}

pub fn route<'t>(t: &'t Translation, ns: &str, name: &str) -> &'t HttpRouteStatus {
    t.status
        .http_routes
        .get(&ObjectRef::new(ns, name))
        .unwrap_or_else(|| panic!("no status for route {ns}/{name}"))
}

pub fn gateway<'t>(t: &'t Translation, ns: &str, name: &str) -> &'t GatewayStatus {
    t.status
        .gateways
        .get(&ObjectRef::new(ns, name))
        .unwrap_or_else(|| panic!("no status for gateway {ns}/{name}"))
}

pub fn listener<'t>(g: &'t GatewayStatus, name: &str) -> &'t ListenerStatus {
    g.listeners
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no listener {name}"))
}

/// `(status, reason, message)` of a route condition of the first parent.
pub fn route_cond(s: &HttpRouteStatus, t: RouteConditionType) -> (bool, String, String) {
    cond_of(&s.parents[0].conditions, t)
}

pub fn cond_of(cs: &[RouteCondition], t: RouteConditionType) -> (bool, String, String) {
    let c = cs
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition in {cs:?}"));
    (c.status, c.reason.to_string(), c.message.clone())
}

/// `(status, reason, message)` of a listener condition, by type name.
pub fn listener_cond(l: &ListenerStatus, t: &str) -> (bool, String, String) {
    let c = l
        .conditions
        .iter()
        .find(|c| c.type_.to_string() == t)
        .unwrap_or_else(|| panic!("no {t} condition"));
    (c.status, c.reason.to_string(), c.message.clone())
}

/// A self-signed certificate and key (PEM) for `names`, made at test time.
pub fn self_signed(names: &[&str]) -> (String, String) {
    let ck =
        rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("rcgen");
    (ck.cert.pem(), ck.signing_key.serialize_pem())
}

/// A `kubernetes.io/tls` Secret manifest with the PEMs in stringData.
pub fn tls_secret(ns: &str, name: &str, crt: &str, key: &str) -> String {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(crt),
        indent(key)
    )
}

/// A throwaway CA made at test time, issuing leaves.
pub struct TestCa {
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    pub fn new(cn: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).expect("self-signed").pem();
        Self {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A leaf (certificate PEM, key PEM) with these DNS and URI SANs.
    pub fn leaf(&self, dns: &[&str], uris: &[&str]) -> (String, String) {
        use rcgen::string::Ia5String;
        use rcgen::{CertificateParams, KeyPair, SanType};
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.subject_alt_names = dns
            .iter()
            .map(|d| SanType::DnsName(Ia5String::try_from(*d).expect("ia5")))
            .chain(
                uris.iter()
                    .map(|u| SanType::URI(Ia5String::try_from(*u).expect("ia5"))),
            )
            .collect();
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        (cert.pem(), key.serialize_pem())
    }
}

fn indent(s: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    s.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// A ConfigMap manifest with one (multi-line) key.
pub fn config_map(ns: &str, name: &str, key: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         data:\n  {key}: |\n{}",
        indent(value, 4)
    )
}

/// An Opaque Secret manifest with one key in stringData.
pub fn opaque_secret(ns: &str, name: &str, key: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         type: Opaque\nstringData:\n  {key}: |\n{}",
        indent(value, 4)
    )
}

/// A ClusterTrustBundle manifest.
pub fn cluster_trust_bundle(name: &str, pem: &str) -> String {
    format!(
        "apiVersion: certificates.k8s.io/v1beta1\nkind: ClusterTrustBundle\n\
         metadata: {{name: {name}}}\nspec:\n  trustBundle: |\n{}",
        indent(pem, 4)
    )
}

/// `(status, reason, message)` of a Gateway condition, by type name.
pub fn gateway_cond(g: &GatewayStatus, t: &str) -> Option<(bool, String, String)> {
    g.conditions
        .iter()
        .find(|c| c.type_.to_string() == t)
        .map(|c| (c.status, c.reason.to_string(), c.message.clone()))
}

/// The backends (Service targets of every rule) of route `ns/name` in the snapshot, per
/// listener, deduplicated by pointer.
pub fn route_backends(t: &Translation, ns: &str, name: &str) -> Vec<std::sync::Arc<Backend>> {
    let key = ObjectRef::new(ns, name);
    let mut out: Vec<std::sync::Arc<Backend>> = vec![];
    for port in &t.snapshot.ports {
        for l in &port.listeners {
            for (_, entries) in l.routes.buckets() {
                for e in entries.iter().filter(|e| e.rule.route == key) {
                    for w in &e.rule.backends.backends {
                        if let BackendTarget::Service(b) = &w.target
                            && !out.iter().any(|o| std::sync::Arc::ptr_eq(o, b))
                        {
                            out.push(b.clone());
                        }
                    }
                }
            }
        }
    }
    out
}

/// The TLS of the only backend of route `ns/name`.
pub fn route_tls(t: &Translation, ns: &str, name: &str) -> BackendTls {
    let b = route_backends(t, ns, name);
    assert_eq!(
        b.len(),
        1,
        "route {ns}/{name} should have one backend: {b:?}"
    );
    b[0].tls.clone()
}
