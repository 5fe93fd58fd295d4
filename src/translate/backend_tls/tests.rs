//! BackendTLSPolicy rules: which policy applies, what it verifies, how it fails closed, and how
//! it combines with mesh mTLS.

use crate::model::{BackendTls, TlsMode, UpstreamTls};
use crate::translate::status::RouteConditionType;
use crate::translate::test_support::{
    TestCa, cond_of, config_map, resources, route, route_tls, tls_secret,
};
use crate::translate::{Settings, Translation, translate};

const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
                     metadata: {name: pier}\nspec: {controllerName: pier.dev/gateway-controller}\n";

fn gw(spec_extra: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata: {{name: gw, namespace: default}}\n\
         spec:\n  gatewayClassName: pier\n  listeners: [{{name: http, protocol: HTTP, port: 80}}]\n\
         {spec_extra}"
    )
}

/// Service default/api (ports `https` 443 and `alt` 8443), a route `default/r` to port 443.
const BACKEND: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: api, namespace: default}\n\
    spec: {ports: [{name: https, port: 443}, {name: alt, port: 8443}]}\n---\n\
    apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
    metadata: {name: r, namespace: default}\n\
    spec:\n  parentRefs: [{name: gw}]\n  rules:\n  - backendRefs: [{name: api, port: 443}]\n";

fn policy(name: &str, created: &str, section: Option<&str>, validation: &str) -> String {
    let section = section.map_or(String::new(), |s| format!(", sectionName: {s}"));
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\n\
         metadata: {{name: {name}, namespace: default, creationTimestamp: \"{created}\"}}\n\
         spec:\n  targetRefs: [{{group: '', kind: Service, name: api{section}}}]\n\
         \x20 validation:\n{validation}"
    )
}

const CA_REF: &str = "    caCertificateRefs: [{group: '', kind: ConfigMap, name: api-ca}]\n";

fn run(ca: &TestCa, gw_extra: &str, more: &str) -> Translation {
    let yaml = format!(
        "{CLASS}---\n{}---\n{BACKEND}---\n{}---\n{more}",
        gw(gw_extra),
        config_map("default", "api-ca", "ca.crt", &ca.pem)
    );
    translate(&resources(&yaml), &Settings::default())
}

fn tls(t: &Translation) -> std::sync::Arc<UpstreamTls> {
    match route_tls(t, "default", "r") {
        BackendTls::Tls(u) => u,
        other => panic!("not TLS: {other:?}"),
    }
}

fn unavailable(t: &Translation) -> String {
    match route_tls(t, "default", "r") {
        BackendTls::Unavailable(why) => why.as_str().to_string(),
        other => panic!("not unavailable: {other:?}"),
    }
}

#[test]
fn policy_with_ca_configmap_gives_tls_with_hostname_as_sni() {
    let ca = TestCa::new("api");
    let p = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: api.example.com\n"),
    );
    let t = run(&ca, "", &p);
    let u = tls(&t);
    assert_eq!(u.mode, TlsMode::Policy);
    assert_eq!(u.server_name.to_str(), "api.example.com");
    assert_eq!(
        u.config.alpn_protocols,
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    );
    let (ok, reason, msg) = cond_of(
        &route(&t, "default", "r").parents[0].conditions,
        RouteConditionType::BackendTls,
    );
    assert!(ok);
    assert_eq!(reason, "Ready");
    assert!(
        msg.contains("default/api:443 TLS per BackendTLSPolicy (SNI api.example.com)"),
        "{msg}"
    );
}

#[test]
fn well_known_system_roots_are_accepted() {
    let ca = TestCa::new("api");
    let p = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        "    wellKnownCACertificates: System\n    hostname: api.example.com\n",
    );
    assert_eq!(tls(&run(&ca, "", &p)).mode, TlsMode::Policy);
}

#[test]
fn section_name_policy_beats_whole_service_policy_then_oldest_wins() {
    let ca = TestCa::new("api");
    let whole = policy(
        "a-whole",
        "2020-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: whole.example\n"),
    );
    let port = policy(
        "z-port",
        "2024-01-01T00:00:00Z",
        Some("https"),
        &format!("{CA_REF}    hostname: port.example\n"),
    );
    let other_port = policy(
        "b-alt",
        "2019-01-01T00:00:00Z",
        Some("alt"),
        &format!("{CA_REF}    hostname: alt.example\n"),
    );
    let t = run(&ca, "", &format!("{whole}---\n{port}---\n{other_port}"));
    assert_eq!(tls(&t).server_name.to_str(), "port.example");

    let newer = policy(
        "a-newer",
        "2025-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: newer.example\n"),
    );
    let t = run(&ca, "", &format!("{whole}---\n{newer}"));
    assert_eq!(tls(&t).server_name.to_str(), "whole.example");
    // The newer one is reported as Conflicted (upstream's BackendTLSPolicyConflictResolution);
    // the older one as Accepted.
    let accepted = |name: &str| {
        let s = &t.status.backend_tls_policies[&crate::model::ObjectRef::new("default", name)];
        let c = s.ancestors[0]
            .conditions
            .iter()
            .find(|c| c.type_.to_string() == "Accepted")
            .unwrap();
        (c.status, c.reason.to_string())
    };
    assert_eq!(accepted("a-whole"), (true, "Accepted".to_string()));
    assert_eq!(accepted("a-newer"), (false, "Conflicted".to_string()));
}

#[test]
fn unusable_ca_configuration_fails_closed_as_invalid_policy() {
    let ca = TestCa::new("api");
    let cases = [
        "    caCertificateRefs: [{group: '', kind: ConfigMap, name: missing}]\n",
        "    caCertificateRefs: [{group: '', kind: Secret, name: api-ca}]\n",
        "    caCertificateRefs: [{group: '', kind: ConfigMap, name: api-ca}, {group: '', kind: ConfigMap, name: missing}]\n",
        "    wellKnownCACertificates: Corporate\n",
        "    caCertificateRefs: [{group: '', kind: ConfigMap, name: api-ca}]\n    wellKnownCACertificates: System\n",
        "    caCertificateRefs: []\n",
    ];
    for v in cases {
        let p = policy(
            "p",
            "2024-01-01T00:00:00Z",
            None,
            &format!("{v}    hostname: api.example.com\n"),
        );
        let t = run(&ca, "", &p);
        assert_eq!(unavailable(&t), "InvalidPolicy", "{v}");
        let (ok, reason, _) = cond_of(
            &route(&t, "default", "r").parents[0].conditions,
            RouteConditionType::BackendTls,
        );
        assert!(!ok);
        assert_eq!(reason, "InvalidPolicy");
    }
}

#[test]
fn invalid_hostname_or_san_fails_closed() {
    let ca = TestCa::new("api");
    for v in [
        "    hostname: 'not a host'\n",
        "    hostname: api.example.com\n    subjectAltNames: [{type: URI, uri: 'no scheme'}]\n",
        "    hostname: api.example.com\n    subjectAltNames: [{type: Hostname}]\n",
    ] {
        let p = policy("p", "2024-01-01T00:00:00Z", None, &format!("{CA_REF}{v}"));
        assert_eq!(unavailable(&run(&ca, "", &p)), "InvalidPolicy", "{v}");
    }
}

#[test]
fn subject_alt_names_replace_the_hostname_check_but_not_the_sni() {
    let ca = TestCa::new("api");
    let plain = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: api.example.com\n"),
    );
    let with_sans = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        &format!(
            "{CA_REF}    hostname: api.example.com\n    subjectAltNames:\n    \
             - {{type: URI, uri: 'spiffe://cluster.local/ns/default/sa/api'}}\n    \
             - {{type: Hostname, hostname: api.internal}}\n"
        ),
    );
    let a = tls(&run(&ca, "", &plain));
    let b = tls(&run(&ca, "", &with_sans));
    assert_eq!(b.server_name.to_str(), "api.example.com");
    assert_ne!(a.trust_key, b.trust_key);
}

#[test]
fn gateway_client_certificate_is_presented_to_policy_backends() {
    let ca = TestCa::new("api");
    let (crt, key) = TestCa::new("pier").leaf(&[], &["spiffe://cluster.local/ns/pier/sa/gw"]);
    let p = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: api.example.com\n"),
    );
    let without = tls(&run(&ca, "", &p));
    let client = "  tls:\n    backend:\n      clientCertificateRef: {name: pier}\n";
    let with = tls(&run(
        &ca,
        client,
        &format!("{p}---\n{}", tls_secret("default", "pier", &crt, &key)),
    ));
    assert_ne!(without.trust_key, with.trust_key);
    assert!(with.config.client_auth_cert_resolver.has_certs());
    assert!(!without.config.client_auth_cert_resolver.has_certs());
    // Configured but unusable: fail closed rather than connect without it.
    assert_eq!(unavailable(&run(&ca, client, &p)), "NoClientCertificate");
}

#[test]
fn meshed_route_takes_sni_and_sans_from_the_policy_but_trust_from_the_mesh() {
    let mesh = TestCa::new("mesh");
    let (crt, key) = TestCa::new("pier").leaf(&[], &["spiffe://cluster.local/ns/pier/sa/gw"]);
    let gw_mesh = "  tls:\n    backend:\n      clientCertificateRef: {name: pier}\n  mesh:\n    trustBundle: {name: mesh-ca}\n";
    let common = format!(
        "{}---\n{}",
        tls_secret("default", "pier", &crt, &key),
        config_map("default", "mesh-ca", "ca-bundle.crt", &mesh.pem)
    );
    let api_ca = TestCa::new("api");
    let no_policy = tls(&run(&api_ca, gw_mesh, &common));
    assert_eq!(no_policy.mode, TlsMode::Mesh);
    assert_eq!(
        no_policy.server_name.to_str(),
        "api.default.svc.cluster.local"
    );

    // The policy's CA reference is broken: irrelevant under the mesh.
    let p = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        "    caCertificateRefs: [{group: '', kind: ConfigMap, name: missing}]\n    \
         hostname: api.mesh.example\n    subjectAltNames: [{type: URI, uri: 'spiffe://cluster.local/ns/default/sa/api'}]\n",
    );
    let with_policy = tls(&run(&api_ca, gw_mesh, &format!("{common}---\n{p}")));
    assert_eq!(with_policy.mode, TlsMode::Mesh);
    assert_eq!(with_policy.server_name.to_str(), "api.mesh.example");
    assert_ne!(
        with_policy.trust_key, no_policy.trust_key,
        "SAN requirement changes trust"
    );

    let bad_names = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: 'bad name'\n"),
    );
    let t = run(&api_ca, gw_mesh, &format!("{common}---\n{bad_names}"));
    assert_eq!(unavailable(&t), "InvalidPolicy");
}

#[test]
fn policies_for_other_kinds_or_services_do_not_apply() {
    let ca = TestCa::new("api");
    let p = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: api.example.com\n"),
    )
    .replace("kind: Service, name: api", "kind: ServiceImport, name: api");
    assert!(route_tls(&run(&ca, "", &p), "default", "r").is_plain());
    let p = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: api.example.com\n"),
    )
    .replace("name: api}", "name: other}");
    assert!(route_tls(&run(&ca, "", &p), "default", "r").is_plain());
}

/// `(type, status, reason)` of the policy's conditions under Gateway default/gw.
fn policy_status(t: &Translation) -> Vec<(String, bool, String)> {
    let s = &t.status.backend_tls_policies[&crate::model::ObjectRef::new("default", "p")];
    assert_eq!(s.ancestors.len(), 1);
    let a = &s.ancestors[0];
    assert_eq!(a.ancestor_ref.name, "gw");
    assert_eq!(a.ancestor_ref.kind.as_deref(), Some("Gateway"));
    a.conditions
        .iter()
        .map(|c| (c.type_.to_string(), c.status, c.reason.to_string()))
        .collect()
}

#[test]
fn policy_status_reports_accepted_and_resolved_refs_per_gateway() {
    let ca = TestCa::new("api");
    let cond = |t: &str, ok: bool, r: &str| (t.to_string(), ok, r.to_string());
    let host = "    hostname: api.example.com\n";
    let p = |v: &str| policy("p", "2024-01-01T00:00:00Z", None, &format!("{v}{host}"));

    let t = run(&ca, "", &p(CA_REF));
    assert_eq!(
        policy_status(&t),
        [
            cond("Accepted", true, "Accepted"),
            cond("ResolvedRefs", true, "ResolvedRefs")
        ]
    );
    let missing = "    caCertificateRefs: [{group: '', kind: ConfigMap, name: missing}]\n";
    assert_eq!(
        policy_status(&run(&ca, "", &p(missing))),
        [
            cond("Accepted", false, "NoValidCACertificate"),
            cond("ResolvedRefs", false, "InvalidCACertificateRef")
        ]
    );
    let one_of_two = "    caCertificateRefs: [{group: '', kind: ConfigMap, name: api-ca}, {group: '', kind: ConfigMap, name: missing}]\n";
    assert_eq!(
        policy_status(&run(&ca, "", &p(one_of_two))),
        [
            cond("Accepted", true, "Accepted"),
            cond("ResolvedRefs", false, "InvalidCACertificateRef")
        ]
    );
    let kind = "    caCertificateRefs: [{group: '', kind: Secret, name: api-ca}]\n";
    assert_eq!(
        policy_status(&run(&ca, "", &p(kind)))[1],
        cond("ResolvedRefs", false, "InvalidKind")
    );
    let unknown = "    wellKnownCACertificates: Corporate\n";
    assert_eq!(
        policy_status(&run(&ca, "", &p(unknown)))[0],
        cond("Accepted", false, "Invalid")
    );
}

#[test]
fn policies_that_apply_to_nothing_get_no_status() {
    let ca = TestCa::new("api");
    let p = policy(
        "p",
        "2024-01-01T00:00:00Z",
        None,
        &format!("{CA_REF}    hostname: a.example\n"),
    )
    .replace("name: api}", "name: unused}");
    assert!(run(&ca, "", &p).status.backend_tls_policies.is_empty());
}

/// GEP-5075 (v1.7): a ClusterTrustBundle named in `caCertificateRefs` is the CA, by name and
/// without a ReferenceGrant; a missing one is InvalidCACertificateRef and fails closed.
#[test]
fn a_cluster_trust_bundle_is_a_ca_by_name() {
    let ca = TestCa::new("api");
    let pem: String = ca.pem.lines().map(|l| format!("    {l}\n")).collect();
    let ctb = format!(
        "apiVersion: certificates.k8s.io/v1beta1\nkind: ClusterTrustBundle\n\
         metadata: {{name: api-ctb}}\nspec:\n  trustBundle: |\n{pem}"
    );
    let refs = |name: &str| {
        format!(
            "    caCertificateRefs: [{{group: certificates.k8s.io, kind: ClusterTrustBundle, \
             name: {name}}}]\n    hostname: api.example.com\n"
        )
    };
    let p = policy("p", "2024-01-01T00:00:00Z", None, &refs("api-ctb"));
    let t = run(&ca, "", &format!("{p}---\n{ctb}"));
    assert_eq!(tls(&t).mode, TlsMode::Policy);
    let cond = |t: &str, ok: bool, r: &str| (t.to_string(), ok, r.to_string());
    assert_eq!(
        policy_status(&t),
        [
            cond("Accepted", true, "Accepted"),
            cond("ResolvedRefs", true, "ResolvedRefs")
        ]
    );
    let p = policy("p", "2024-01-01T00:00:00Z", None, &refs("nope"));
    let t = run(&ca, "", &format!("{p}---\n{ctb}"));
    assert!(!unavailable(&t).is_empty());
    assert_eq!(
        policy_status(&t),
        [
            cond("Accepted", false, "NoValidCACertificate"),
            cond("ResolvedRefs", false, "InvalidCACertificateRef")
        ]
    );
    // A cluster that does not serve the API: the kind is unsupported there (GEP-5075), and
    // the backend gets no request.
    let p = policy("p", "2024-01-01T00:00:00Z", None, &refs("api-ctb"));
    let yaml = format!("{CLASS}---\n{}---\n{BACKEND}---\n{p}---\n{ctb}", gw(""));
    let mut r = resources(&yaml);
    r.trust_bundles_unserved = true;
    let t = translate(&r, &Settings::default());
    assert!(!unavailable(&t).is_empty());
    assert_eq!(
        policy_status(&t),
        [
            cond("Accepted", false, "NoValidCACertificate"),
            cond("ResolvedRefs", false, "InvalidKind")
        ]
    );
}
