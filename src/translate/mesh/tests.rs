//! Mesh rules: which Routes are meshed, where the trust bundle and the client identity come
//! from, and how every gap fails closed with a status that says why.

use std::sync::Arc;

use super::*;
use crate::model::{BackendTls, TlsMode};
use crate::translate::status::RouteConditionType;
use crate::translate::test_support::{
    TestCa, cluster_trust_bundle, cond_of, config_map, gateway, gateway_cond, opaque_secret,
    resources, route, route_backends, route_tls, tls_secret,
};
use crate::translate::{ClientIdentityPem, Settings, Translation, translate, translate_with};

const BACKEND_TLS: &str = "pier.dev/BackendTLS";

/// Certificates for one test: the mesh CA and pier's client certificate (from another CA).
struct Pki {
    mesh: TestCa,
    client_crt: String,
    client_key: String,
}

fn pki() -> Pki {
    let pier_ca = TestCa::new("pier");
    let (client_crt, client_key) = pier_ca.leaf(&[], &["spiffe://cluster.local/ns/pier/sa/gw"]);
    Pki {
        mesh: TestCa::new("mesh"),
        client_crt,
        client_key,
    }
}

/// Gateway `default/gw` (routes from all namespaces) with `spec_extra` (indented by two).
fn gw(spec_extra: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata: {{name: gw, namespace: default, generation: 1}}\n\
         spec:\n  gatewayClassName: pier\n  listeners:\n  - name: http\n    protocol: HTTP\n\
         \x20   port: 80\n    allowedRoutes: {{namespaces: {{from: All}}}}\n{spec_extra}"
    )
}

fn http_route(ns: &str, name: &str, labels: &str, svc: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {{name: {name}, namespace: {ns}, labels: {labels}}}\n\
         spec:\n  parentRefs: [{{name: gw, namespace: default}}]\n  hostnames: [{name}.example]\n\
         \x20 rules:\n  - backendRefs: [{{name: {svc}, port: 80}}]\n"
    )
}

fn service(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{ports: [{{name: http, port: 80}}]}}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: {name}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {name}}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: 8443}}]\nendpoints: [{{addresses: [10.0.0.1]}}]\n"
    )
}

/// Pier's class; Namespaces `app` (label `mesh: enabled`) and `plain`; Services default/web,
/// app/api, plain/site; routes `app/api` (no labels), `plain/site` (no labels) and
/// `default/web` (label `mesh: enabled`); pier's client Secret `default/pier-client`; the mesh
/// CA in ConfigMap `default/mesh-ca` (key ca-bundle.crt).
fn world(p: &Pki) -> String {
    [
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: pier}\n\
         spec: {controllerName: pier.dev/gateway-controller}\n"
            .to_string(),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: app, labels: {mesh: enabled}}\n".into(),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: plain}\n".into(),
        service("default", "web"),
        service("app", "api"),
        service("plain", "site"),
        http_route("app", "api", "{}", "api"),
        http_route("plain", "site", "{}", "site"),
        http_route("default", "web", "{mesh: enabled}", "web"),
        tls_secret("default", "pier-client", &p.client_crt, &p.client_key),
        config_map("default", "mesh-ca", "ca-bundle.crt", &p.mesh.pem),
    ]
    .join("---\n")
}

const CLIENT_REF: &str = "  tls:\n    backend:\n      clientCertificateRef: {name: pier-client}\n";

fn run_world(p: &Pki, spec_extra: &str, more: &str) -> Translation {
    run_settings(p, spec_extra, more, &Settings::default())
}

fn run_settings(p: &Pki, spec_extra: &str, more: &str, settings: &Settings) -> Translation {
    let yaml = format!("{}---\n{}---\n{more}", world(p), gw(spec_extra));
    translate(&resources(&yaml), settings)
}

/// "plain", "mesh", "policy" or the Unavailable reason.
fn kind(t: &BackendTls) -> String {
    match t {
        BackendTls::Plain => "plain".into(),
        BackendTls::Tls(u) => match u.mode {
            TlsMode::Mesh => "mesh".into(),
            TlsMode::Policy => "policy".into(),
        },
        BackendTls::PerEndpoint(ids) => format!("identity:{}", ids.scheme),
        BackendTls::Unavailable(why) => why.as_str().into(),
    }
}

fn kinds(t: &Translation) -> [String; 3] {
    [
        kind(&route_tls(t, "app", "api")),
        kind(&route_tls(t, "plain", "site")),
        kind(&route_tls(t, "default", "web")),
    ]
}

fn gw_cond(t: &Translation, ty: &str) -> (bool, String, String) {
    gateway_cond(gateway(t, "default", "gw"), ty).unwrap_or_else(|| panic!("no {ty}"))
}

fn route_tls_cond(t: &Translation, ns: &str, name: &str) -> (bool, String, String) {
    cond_of(
        &route(t, ns, name).parents[0].conditions,
        RouteConditionType::BackendTls,
    )
}

fn mesh(selector: &str) -> String {
    format!("{CLIENT_REF}  mesh:\n    trustBundle: {{name: mesh-ca}}\n{selector}")
}

// === which routes are meshed ===

#[test]
fn selector_on_route_labels_meshes_that_route() {
    let p = pki();
    let t = run_world(
        &p,
        &mesh("    labelSelector: {matchLabels: {mesh: enabled}}\n"),
        "",
    );
    // app/api is meshed through its Namespace, default/web through its own label.
    assert_eq!(kinds(&t), ["mesh", "plain", "mesh"]);
    let (ok, reason, msg) = route_tls_cond(&t, "default", "web");
    assert!(ok, "{msg}");
    assert_eq!(reason, "Ready");
    assert!(
        msg.contains("default/web:80 mesh mTLS (SNI web.default.svc.cluster.local)"),
        "{msg}"
    );
    let site = &route(&t, "plain", "site").parents[0].conditions;
    assert!(
        site.iter()
            .all(|c| c.type_ != RouteConditionType::BackendTls)
    );
}

#[test]
fn selector_on_namespace_labels_meshes_routes_in_that_namespace() {
    let p = pki();
    // Only the Namespace carries `tier: mesh`.
    let more = "apiVersion: v1\nkind: Namespace\nmetadata: {name: app, labels: {tier: mesh}}\n";
    let t = run_world(
        &p,
        &mesh("    selector: {matchLabels: {tier: mesh}}\n"),
        more,
    );
    assert_eq!(kinds(&t), ["mesh", "plain", "plain"]);
}

#[test]
fn match_expressions_select_meshed_routes() {
    let p = pki();
    let sel = |e: &str| mesh(&format!("    selector: {{matchExpressions: [{e}]}}\n"));
    let t = run_world(&p, &sel("{key: mesh, operator: Exists}"), "");
    assert_eq!(kinds(&t), ["mesh", "plain", "mesh"]);
    let t = run_world(&p, &sel("{key: mesh, operator: DoesNotExist}"), "");
    // Route or Namespace: every route has a side without the key (app/api's route, web's
    // Namespace, and site entirely), so every route is meshed.
    assert_eq!(kinds(&t), ["mesh", "mesh", "mesh"]);
    let t = run_world(
        &p,
        &sel(
            "{key: mesh, operator: In, values: [enabled]}, {key: tier, operator: NotIn, values: [edge]}",
        ),
        "",
    );
    assert_eq!(kinds(&t), ["mesh", "plain", "mesh"]);
}

#[test]
fn no_selector_meshes_every_route() {
    let p = pki();
    let t = run_world(&p, &mesh(""), "");
    assert_eq!(kinds(&t), ["mesh", "mesh", "mesh"]);
    let (ok, _, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(ok);
    assert!(
        msg.contains("every route of this Gateway is meshed"),
        "{msg}"
    );
}

#[test]
fn label_selector_and_selector_field_names_both_work() {
    let p = pki();
    for field in ["labelSelector", "selector"] {
        let t = run_world(
            &p,
            &mesh(&format!(
                "    {field}: {{matchLabels: {{mesh: enabled}}}}\n"
            )),
            "",
        );
        assert_eq!(kinds(&t), ["mesh", "plain", "mesh"], "{field}");
    }
}

#[test]
fn invalid_selector_fails_closed_for_every_route() {
    let p = pki();
    let t = run_world(
        &p,
        &mesh("    selector: {matchExpressions: [{key: mesh, operator: Near}]}\n"),
        "",
    );
    assert_eq!(kinds(&t), ["InvalidMeshConfig"; 3]);
    let (ok, reason, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(!ok);
    assert_eq!(reason, "InvalidMeshConfig");
    assert!(msg.contains("mesh selector is invalid"), "{msg}");
    let (ok, reason, _) = route_tls_cond(&t, "plain", "site");
    assert!(!ok);
    assert_eq!(reason, "InvalidMeshConfig");
}

// === trust bundle sources ===

fn trust_key(t: &Translation, ns: &str, name: &str) -> u64 {
    match route_tls(t, ns, name) {
        BackendTls::Tls(u) => u.trust_key,
        other => panic!("{ns}/{name} is not TLS: {other:?}"),
    }
}

#[test]
fn trust_bundle_configmap_key_defaults_and_bundle_key() {
    let p = pki();
    // ca.crt is read when ca-bundle.crt is absent.
    let other = config_map("default", "alt", "ca.crt", &p.mesh.pem);
    let t = run_world(
        &p,
        &format!("{CLIENT_REF}  mesh:\n    trustBundle: {{name: alt}}\n"),
        &other,
    );
    assert_eq!(kinds(&t)[0], "mesh");
    let custom = config_map("default", "custom", "roots.pem", &p.mesh.pem);
    let spec = format!(
        "{CLIENT_REF}  mesh:\n    trustBundle: {{name: custom, namespace: default, bundleKey: roots.pem}}\n"
    );
    let with_key = run_world(&p, &spec, &custom);
    assert_eq!(kinds(&with_key)[0], "mesh");
    // The same CA from any source gives the same trust key.
    assert_eq!(
        trust_key(&t, "app", "api"),
        trust_key(&with_key, "app", "api")
    );
}

#[test]
fn trust_bundle_from_secret() {
    let p = pki();
    let secret = opaque_secret("default", "mesh-root", "ca.crt", &p.mesh.pem);
    let spec =
        format!("{CLIENT_REF}  mesh:\n    trustBundle:\n    - {{kind: Secret, name: mesh-root}}\n");
    let t = run_world(&p, &spec, &secret);
    assert_eq!(kinds(&t), ["mesh"; 3]);
    let (_, _, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(msg.contains("Secret default/mesh-root key ca.crt"), "{msg}");
}

#[test]
fn trust_bundle_secret_in_another_namespace_needs_a_reference_grant() {
    let p = pki();
    let secret = opaque_secret("mesh-system", "root", "ca.crt", &p.mesh.pem);
    let spec = format!(
        "{CLIENT_REF}  mesh:\n    trustBundle: [{{kind: Secret, name: root, namespace: mesh-system}}]\n"
    );
    let t = run_world(&p, &spec, &secret);
    assert_eq!(kinds(&t), ["NoTrustBundle"; 3]);
    let (ok, reason, msg) = gw_cond(&t, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "RefNotPermitted");
    assert!(msg.contains("mesh.trustBundle[0]"), "{msg}");
    let grant = "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\n\
                 metadata: {name: g, namespace: mesh-system}\nspec:\n\
                 \x20 from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: default}]\n\
                 \x20 to: [{group: '', kind: Secret}]\n";
    let t = run_world(&p, &spec, &format!("{secret}---\n{grant}"));
    assert_eq!(kinds(&t), ["mesh"; 3]);
}

#[test]
fn trust_bundle_from_cluster_trust_bundle() {
    let p = pki();
    let ctb = cluster_trust_bundle("mesh-roots", &p.mesh.pem);
    let spec = format!(
        "{CLIENT_REF}  mesh:\n    trustBundle:\n    - {{group: certificates.k8s.io, kind: ClusterTrustBundle, name: mesh-roots, namespace: ignored}}\n"
    );
    let t = run_world(&p, &spec, &ctb);
    assert_eq!(kinds(&t), ["mesh"; 3]);
}

#[test]
fn trust_bundle_list_is_unioned() {
    let p = pki();
    let second = TestCa::new("second");
    let more = config_map("default", "second", "ca-bundle.crt", &second.pem);
    let one = run_world(&p, &mesh(""), &more);
    let spec =
        format!("{CLIENT_REF}  mesh:\n    trustBundle: [{{name: mesh-ca}}, {{name: second}}]\n");
    let both = run_world(&p, &spec, &more);
    assert_eq!(kinds(&both), ["mesh"; 3]);
    assert_ne!(
        trust_key(&one, "app", "api"),
        trust_key(&both, "app", "api")
    );
    let (_, _, msg) = gw_cond(&both, BACKEND_TLS);
    assert!(msg.contains("trusting 2 CA certificate(s)"), "{msg}");
}

#[test]
fn one_broken_bundle_in_a_list_is_reported_and_the_rest_is_used() {
    let p = pki();
    let spec =
        format!("{CLIENT_REF}  mesh:\n    trustBundle: [{{name: mesh-ca}}, {{name: missing}}]\n");
    let t = run_world(&p, &spec, "");
    assert_eq!(kinds(&t), ["mesh"; 3]);
    let (ok, reason, msg) = gw_cond(&t, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidTrustBundleRef");
    assert!(
        msg.contains("mesh.trustBundle[1]: ConfigMap default/missing not found"),
        "{msg}"
    );
}

// === fail closed ===

#[test]
fn missing_bundle_is_unavailable_no_trust_bundle() {
    let p = pki();
    let spec = format!(
        "{CLIENT_REF}  mesh:\n    trustBundle: {{name: nope}}\n    selector: {{matchLabels: {{mesh: enabled}}}}\n"
    );
    let t = run_world(&p, &spec, "");
    assert_eq!(kinds(&t), ["NoTrustBundle", "plain", "NoTrustBundle"]);
    let (ok, reason, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(!ok);
    assert_eq!(reason, "NoTrustBundle");
    assert!(msg.contains("no usable mesh trust bundle"), "{msg}");
    let (ok, reason, msg) = gw_cond(&t, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidTrustBundleRef");
    assert!(msg.contains("ConfigMap default/nope not found"), "{msg}");
    let (ok, reason, msg) = route_tls_cond(&t, "app", "api");
    assert!(!ok);
    assert_eq!(reason, "NoTrustBundle");
    assert!(
        msg.contains("app/api:80: no usable mesh trust bundle"),
        "{msg}"
    );
}

#[test]
fn unparsable_bundle_is_unavailable_no_trust_bundle() {
    let p = pki();
    let broken = config_map(
        "default",
        "mesh-ca",
        "ca-bundle.crt",
        "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----",
    );
    let t = run_world(&p, &mesh(""), &broken);
    assert_eq!(kinds(&t), ["NoTrustBundle"; 3]);
    let (_, _, msg) = gw_cond(&t, "ResolvedRefs");
    assert!(msg.contains("cannot be used as a trust anchor"), "{msg}");
    let empty = config_map(
        "default",
        "mesh-ca",
        "ca-bundle.crt",
        "no certificates here",
    );
    let t = run_world(&p, &mesh(""), &empty);
    assert_eq!(kinds(&t), ["NoTrustBundle"; 3]);
    let (_, _, msg) = gw_cond(&t, "ResolvedRefs");
    assert!(msg.contains("holds no PEM certificate"), "{msg}");
}

#[test]
fn mesh_without_trust_bundle_field_is_unavailable() {
    let p = pki();
    let t = run_world(&p, &format!("{CLIENT_REF}  mesh: {{}}\n"), "");
    assert_eq!(kinds(&t), ["NoTrustBundle"; 3]);
    let (_, _, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(msg.contains("mesh has no trustBundle"), "{msg}");
}

#[test]
fn missing_client_cert_is_unavailable_no_client_certificate() {
    let p = pki();
    let t = run_world(&p, "  mesh:\n    trustBundle: {name: mesh-ca}\n", "");
    assert_eq!(kinds(&t), ["NoClientCertificate"; 3]);
    let (ok, reason, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(!ok);
    assert_eq!(reason, "NoClientCertificate");
    assert!(msg.contains("--client-cert"), "{msg}");
    let (_, reason, _) = route_tls_cond(&t, "plain", "site");
    assert_eq!(reason, "NoClientCertificate");
}

#[test]
fn client_certificate_ref_to_a_missing_or_wrong_secret_is_invalid_client_certificate_ref() {
    let p = pki();
    let spec = "  tls:\n    backend:\n      clientCertificateRef: {name: nope}\n  mesh:\n    trustBundle: {name: mesh-ca}\n";
    let t = run_world(&p, spec, "");
    assert_eq!(kinds(&t), ["NoClientCertificate"; 3]);
    let (ok, reason, msg) = gw_cond(&t, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidClientCertificateRef");
    assert!(msg.contains("Secret default/nope not found"), "{msg}");

    let opaque = opaque_secret("default", "opaque", "tls.crt", &p.client_crt);
    let spec = "  tls:\n    backend:\n      clientCertificateRef: {name: opaque}\n";
    let t = run_world(&p, spec, &opaque);
    let (_, reason, msg) = gw_cond(&t, "ResolvedRefs");
    assert_eq!(reason, "InvalidClientCertificateRef");
    assert!(msg.contains("is not of type kubernetes.io/tls"), "{msg}");
    // No key material in any status message.
    for c in &gateway(&t, "default", "gw").conditions {
        assert!(!c.message.contains("PRIVATE KEY"), "{}", c.message);
    }
}

#[test]
fn cross_namespace_client_certificate_ref_without_grant_is_ref_not_permitted() {
    let p = pki();
    let secret = tls_secret("certs", "pier", &p.client_crt, &p.client_key);
    let spec = "  tls:\n    backend:\n      clientCertificateRef: {name: pier, namespace: certs}\n  mesh:\n    trustBundle: {name: mesh-ca}\n";
    let t = run_world(&p, spec, &secret);
    assert_eq!(kinds(&t), ["NoClientCertificate"; 3]);
    let (ok, reason, msg) = gw_cond(&t, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "RefNotPermitted");
    assert!(
        msg.contains("Secret certs/pier is not permitted by any ReferenceGrant"),
        "{msg}"
    );

    let grant = "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\n\
                 metadata: {name: g, namespace: certs}\nspec:\n\
                 \x20 from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: default}]\n\
                 \x20 to: [{group: '', kind: Secret, name: pier}]\n";
    let t = run_world(&p, spec, &format!("{secret}---\n{grant}"));
    assert_eq!(kinds(&t), ["mesh"; 3]);
    assert_eq!(gw_cond(&t, "ResolvedRefs").1, "ResolvedRefs");
}

#[test]
fn settings_client_identity_is_used_when_the_gateway_names_none() {
    let p = pki();
    let settings = Settings {
        client_identity: Some(ClientIdentityPem {
            cert_pem: p.client_crt.clone().into_bytes(),
            key_pem: p.client_key.clone().into_bytes(),
        }),
        ..Settings::default()
    };
    let t = run_settings(
        &p,
        "  mesh:\n    trustBundle: {name: mesh-ca}\n",
        "",
        &settings,
    );
    assert_eq!(kinds(&t), ["mesh"; 3]);
    let (ok, _, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(ok);
    assert!(
        msg.contains("client certificate from --client-cert/--client-key"),
        "{msg}"
    );

    // A broken one fails closed and says so, without showing the key.
    let broken = Settings {
        client_identity: Some(ClientIdentityPem {
            cert_pem: p.client_crt.clone().into_bytes(),
            key_pem: b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
        }),
        ..Settings::default()
    };
    assert!(!format!("{broken:?}").contains("AAAA"));
    let t = run_settings(
        &p,
        "  mesh:\n    trustBundle: {name: mesh-ca}\n",
        "",
        &broken,
    );
    assert_eq!(kinds(&t), ["NoClientCertificate"; 3]);
    let (_, reason, msg) = gw_cond(&t, BACKEND_TLS);
    assert_eq!(reason, "NoClientCertificate");
    assert!(!msg.contains("AAAA"), "{msg}");
}

#[test]
fn client_certificate_ref_wins_over_settings_identity() {
    let p = pki();
    let other = TestCa::new("other").leaf(&[], &["spiffe://x/y"]);
    let settings = Settings {
        client_identity: Some(ClientIdentityPem {
            cert_pem: other.0.into_bytes(),
            key_pem: other.1.into_bytes(),
        }),
        ..Settings::default()
    };
    let by_ref = run_settings(&p, &mesh(""), "", &settings);
    let only_ref = run_world(&p, &mesh(""), "");
    assert_eq!(
        trust_key(&by_ref, "app", "api"),
        trust_key(&only_ref, "app", "api")
    );
    // The status says which identity won and over what.
    let (_, _, msg) = gw_cond(&by_ref, BACKEND_TLS);
    assert!(
        msg.contains("it takes precedence over --client-cert/--client-key"),
        "{msg}"
    );
    let (_, _, msg) = gw_cond(&only_ref, BACKEND_TLS);
    assert!(!msg.contains("precedence"), "{msg}");
}

// === parametersRef ===

fn params_gw() -> String {
    format!(
        "{CLIENT_REF}  infrastructure:\n    parametersRef: {{group: '', kind: ConfigMap, name: pier-params}}\n"
    )
}

#[test]
fn parameters_ref_configmap_supplies_the_mesh_stanza() {
    let p = pki();
    let params = config_map(
        "default",
        "pier-params",
        "mesh",
        "trustBundle: {name: mesh-ca}\nselector: {matchLabels: {mesh: enabled}}",
    );
    let t = run_world(&p, &params_gw(), &params);
    assert_eq!(kinds(&t), ["mesh", "plain", "mesh"]);
    let (ok, _, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(ok);
    assert!(
        msg.contains("mesh configuration from ConfigMap default/pier-params"),
        "{msg}"
    );
    assert_eq!(gw_cond(&t, "Accepted").1, "Accepted");
}

#[test]
fn spec_mesh_wins_over_parameters_ref() {
    let p = pki();
    let params = config_map(
        "default",
        "pier-params",
        "mesh",
        "trustBundle: {name: mesh-ca}\nselector: {matchLabels: {nothing: matches}}",
    );
    let spec = format!(
        "{}  mesh:\n    trustBundle: {{name: mesh-ca}}\n",
        params_gw()
    );
    let t = run_world(&p, &spec, &params);
    assert_eq!(kinds(&t), ["mesh"; 3], "spec.mesh (no selector) is used");
    let (ok, reason, msg) = gw_cond(&t, BACKEND_TLS);
    assert!(ok);
    assert_eq!(reason, "Ready");
    assert!(
        msg.contains("spec.mesh wins: the \"mesh\" key of ConfigMap default/pier-params"),
        "{msg}"
    );
}

#[test]
fn parameters_ref_that_cannot_be_read_is_invalid_parameters_and_fails_closed() {
    let p = pki();
    let t = run_world(&p, &params_gw(), "");
    assert_eq!(kinds(&t), ["InvalidMeshConfig"; 3]);
    let (ok, reason, msg) = gw_cond(&t, "Accepted");
    assert!(!ok);
    assert_eq!(reason, "InvalidParameters");
    assert!(
        msg.contains("ConfigMap default/pier-params not found"),
        "{msg}"
    );

    let bad = config_map("default", "pier-params", "mesh", "trustBundle: [unclosed");
    let t = run_world(&p, &params_gw(), &bad);
    assert_eq!(kinds(&t), ["InvalidMeshConfig"; 3]);
    let (_, reason, msg) = gw_cond(&t, BACKEND_TLS);
    assert_eq!(reason, "InvalidMeshConfig");
    assert!(msg.contains("is not a valid mesh stanza"), "{msg}");
}

#[test]
fn parameters_ref_without_mesh_key_meshes_nothing() {
    let p = pki();
    let params = config_map("default", "pier-params", "other", "x: 1");
    let t = run_world(&p, &params_gw(), &params);
    assert_eq!(kinds(&t), ["plain"; 3]);
}

#[test]
fn an_unknown_pod_says_whether_the_api_server_refuses_pods() {
    let p = pki();
    let yaml = format!(
        "{}---\n{}",
        world(&p),
        gw(&mesh("    identity: {scheme: SPIFFE}\n"))
    )
    .replace(
        "endpoints: [{addresses: [10.0.0.1]}]",
        "endpoints: [{addresses: [10.0.0.1], targetRef: {kind: Pod, name: api-0, namespace: app}}]",
    );
    let mut r = resources(&yaml);
    let message = |r: &Resources| {
        let (ok, reason, msg) = route_tls_cond(&translate(r, &Settings::default()), "app", "api");
        assert!(!ok);
        assert_eq!(reason, "NoEndpointIdentity");
        msg
    };
    let msg = message(&r);
    assert!(msg.contains("Pod app/api-0 is unknown"), "{msg}");
    assert!(!msg.contains("refuses"), "{msg}");
    r.pods_refused = true;
    let msg = message(&r);
    assert!(
        msg.contains("Pod app/api-0 is unknown: the API server refuses pier's list/watch of Pods"),
        "{msg}"
    );
}

#[test]
fn only_a_mesh_stanza_with_an_identity_scheme_asks_for_pods() {
    use std::borrow::Cow;
    let asks = |spec: &str, mesh_key: Option<Option<&'static str>>| {
        let gw: Gateway = serde_saphyr::from_str(&gw(spec)).unwrap();
        asks_for_endpoint_identity(&gw, |name| {
            assert_eq!(name, "pier-params");
            mesh_key.map(|k| k.map(Cow::Borrowed))
        })
    };
    let mesh = |identity: &str| format!("  mesh:\n    trustBundle: {{name: mesh-ca}}\n{identity}");
    assert!(!asks("", None));
    assert!(!asks(&mesh(""), None));
    assert!(asks(&mesh("    identity: {scheme: SPIFFE}\n"), None));
    assert!(asks(&mesh("    identity: {scheme: Linkerd}\n"), None));
    assert!(!asks(&mesh("    identity: {scheme: None}\n"), None));
    assert!(!asks(&mesh("    identity: {scheme: Bogus}\n"), None));
    // From the parametersRef ConfigMap, unless spec.mesh is set.
    let linkerd = "trustBundle: {name: mesh-ca}\nidentity: {scheme: Linkerd}";
    assert!(asks(&params_gw(), Some(Some(linkerd))));
    assert!(!asks(
        &params_gw(),
        Some(Some("trustBundle: {name: mesh-ca}"))
    ));
    assert!(!asks(&params_gw(), Some(Some("identity: [unclosed"))));
    assert!(!asks(&params_gw(), Some(None)));
    assert!(!asks(&params_gw(), None));
    assert!(!asks(
        &format!("{}{}", params_gw(), mesh("")),
        Some(Some(linkerd))
    ));
}

// === backends, SNI, ALPN, sharing ===

#[test]
fn same_service_from_meshed_and_plain_routes_is_two_backends() {
    let p = pki();
    // plain/site2 is not meshed and uses app/api too.
    let grant = "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\n\
                 metadata: {name: g, namespace: app}\nspec:\n\
                 \x20 from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: plain}]\n\
                 \x20 to: [{group: '', kind: Service}]\n";
    let site2 = http_route("plain", "site2", "{}", "api").replace(
        "{name: api, port: 80}",
        "{name: api, namespace: app, port: 80}",
    );
    let t = run_world(
        &p,
        &mesh("    selector: {matchLabels: {mesh: enabled}}\n"),
        &format!("{grant}---\n{site2}"),
    );
    let meshed = &route_backends(&t, "app", "api")[0];
    let plain = &route_backends(&t, "plain", "site2")[0];
    assert_eq!(meshed.id, plain.id);
    assert_eq!(kind(&meshed.tls), "mesh");
    assert_eq!(kind(&plain.tls), "plain");
    // Same endpoints, same load state.
    assert!(Arc::ptr_eq(
        &meshed.endpoints[0].stats,
        &plain.endpoints[0].stats
    ));
}

#[test]
fn equal_mesh_configs_share_one_client_config() {
    let p = pki();
    let t = run_world(&p, &mesh(""), "");
    let configs: Vec<_> = ["app/api", "plain/site", "default/web"]
        .iter()
        .map(|r| {
            let (ns, name) = r.split_once('/').unwrap();
            match route_tls(&t, ns, name) {
                BackendTls::Tls(u) => u,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert!(Arc::ptr_eq(&configs[0].config, &configs[1].config));
    assert!(Arc::ptr_eq(&configs[1].config, &configs[2].config));
    assert_eq!(configs[0].server_name.to_str(), "api.app.svc.cluster.local");
    assert_eq!(
        configs[1].server_name.to_str(),
        "site.plain.svc.cluster.local"
    );
}

#[test]
fn mesh_sni_uses_the_cluster_domain_setting() {
    let p = pki();
    let settings = Settings {
        cluster_domain: "corp.internal".into(),
        ..Settings::default()
    };
    let t = run_settings(&p, &mesh(""), "", &settings);
    let BackendTls::Tls(u) = route_tls(&t, "app", "api") else {
        panic!("not TLS")
    };
    assert_eq!(u.server_name.to_str(), "api.app.svc.corp.internal");
}

#[test]
fn mesh_alpn_annotation_adds_protocols_after_h2_and_http11() {
    let p = pki();
    let annotated = gw(&mesh("")).replace(
        "generation: 1}",
        "generation: 1, annotations: {pier.dev/mesh-alpn: 'ocg.gateway.networking.k8s.io/v1, x'}}",
    );
    let yaml = format!("{}---\n{annotated}", world(&p));
    let t = translate(&resources(&yaml), &Settings::default());
    let BackendTls::Tls(u) = route_tls(&t, "app", "api") else {
        panic!("not TLS")
    };
    let alpn: Vec<String> = u
        .config
        .alpn_protocols
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    assert_eq!(
        alpn,
        ["h2", "http/1.1", "ocg.gateway.networking.k8s.io/v1", "x"]
    );
}

#[test]
fn gateway_without_mesh_or_client_cert_reports_nothing_new() {
    let p = pki();
    let t = run_world(&p, "", "");
    assert_eq!(kinds(&t), ["plain"; 3]);
    let g = gateway(&t, "default", "gw");
    assert!(gateway_cond(g, BACKEND_TLS).is_none());
    assert!(gateway_cond(g, "ResolvedRefs").is_none());
}

// === export-trust ===

#[test]
fn export_trust_emits_the_ca_bundle_and_the_mesh_reference() {
    let ca = TestCa::new("pier CA");
    let (leaf, _) = ca.leaf(&[], &["spiffe://cluster.local/ns/pier/sa/gw"]);
    let yaml = export_trust(
        format!("{leaf}{}", ca.pem).as_bytes(),
        "pier-system",
        "pier-ca",
    )
    .unwrap();
    let mut r = crate::translate::Resources::default();
    let skipped = crate::translate::parse_manifests(&yaml, &mut r).unwrap();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].kind, "XMesh");
    assert!(yaml.contains("trustBundle:\n      name: pier-ca\n      namespace: pier-system\n      bundleKey: ca-bundle.crt"), "{yaml}");
    let cm = &r.config_maps[&("pier-system".to_string(), "pier-ca".to_string())];
    let pem = config_map_value(cm, DEFAULT_BUNDLE_KEY).unwrap();
    let bundle = TrustBundle::from_pem(pem).unwrap();
    let expected = TrustBundle::from_pem(ca.pem.as_bytes()).unwrap();
    assert_eq!(
        bundle.certs(),
        expected.certs(),
        "only the CA, not the leaf"
    );
}

#[test]
fn export_trust_needs_a_ca_and_valid_names() {
    let ca = TestCa::new("pier CA");
    let (leaf, _) = ca.leaf(&["pier.example"], &[]);
    assert!(matches!(
        export_trust(leaf.as_bytes(), "ns", "n"),
        Err(ExportError::NoCa)
    ));
    let (self_signed, _) = crate::translate::test_support::self_signed(&["pier.example"]);
    assert!(export_trust(self_signed.as_bytes(), "ns", "n").is_ok());
    assert!(matches!(
        export_trust(ca.pem.as_bytes(), "Bad_NS", "n"),
        Err(ExportError::Namespace(_))
    ));
    assert!(matches!(
        export_trust(ca.pem.as_bytes(), "ns", "a b"),
        Err(ExportError::Name(_))
    ));
    assert!(matches!(
        export_trust(b"nothing", "ns", "n"),
        Err(ExportError::Empty)
    ));
}

#[test]
fn gateway_json_from_a_cluster_keeps_spec_mesh_and_the_generated_spec() {
    let json = serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default"},
        "spec": {
            "gatewayClassName": "pier",
            "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}],
            "mesh": {
                "trustBundle": {"name": "mesh-ca", "bundleKey": "ca-bundle.crt"},
                "labelSelector": {"matchLabels": {"mesh": "enabled"}}
            }
        }
    });
    let gw: crate::translate::api::Gateway = serde_json::from_value(json).unwrap();
    assert_eq!(gw.spec.base.listeners[0].port, 80);
    let mesh = gw.spec.mesh.as_ref().unwrap();
    assert_eq!(mesh.trust_bundle.as_ref().unwrap()[0].name, "mesh-ca");
    assert!(mesh.label_selector.is_some());
    // And back: `mesh` serializes next to the generated fields.
    let back = serde_json::to_value(&gw).unwrap();
    assert_eq!(back["spec"]["gatewayClassName"], "pier");
    assert_eq!(back["spec"]["mesh"]["trustBundle"][0]["name"], "mesh-ca");
}

// === carried across reloads ===

fn tls_config(t: &Translation, ns: &str, name: &str) -> Arc<rustls::ClientConfig> {
    match route_tls(t, ns, name) {
        BackendTls::Tls(u) => u.config.clone(),
        other => panic!("{ns}/{name} is not TLS: {other:?}"),
    }
}

/// A reload that keeps the trust reuses the previous snapshot's config object (and with it
/// the TLS session cache, so connections made after the reload resume); a changed bundle gets
/// a new config.
#[test]
fn a_reload_with_unchanged_trust_reuses_the_config_and_a_new_bundle_does_not() {
    let p = pki();
    let spec = mesh("");
    let yaml = format!("{}---\n{}", world(&p), gw(&spec));
    let settings = Settings::default();
    let first = translate(&resources(&yaml), &settings);
    let before = tls_config(&first, "app", "api");

    // Something unrelated changes (a new route): same trust, same config object.
    let more = format!("{yaml}---\n{}", http_route("plain", "extra", "{}", "site"));
    let carried = first.snapshot.carried();
    assert_eq!(carried.tls_configs.len(), 1, "one distinct mesh config");
    let second = translate_with(&resources(&more), &settings, &carried, &Default::default());
    assert!(Arc::ptr_eq(&before, &tls_config(&second, "app", "api")));
    assert!(Arc::ptr_eq(&before, &tls_config(&second, "default", "web")));

    // The bundle gains a CA: a different trust key and a newly built config.
    let extra = TestCa::new("mesh 2");
    let rotated = yaml.replace(
        &config_map("default", "mesh-ca", "ca-bundle.crt", &p.mesh.pem),
        &config_map(
            "default",
            "mesh-ca",
            "ca-bundle.crt",
            &format!("{}{}", p.mesh.pem, extra.pem),
        ),
    );
    assert_ne!(rotated, yaml, "the bundle was replaced");
    let third = translate_with(
        &resources(&rotated),
        &settings,
        &second.snapshot.carried(),
        &Default::default(),
    );
    assert!(!Arc::ptr_eq(&before, &tls_config(&third, "app", "api")));
    assert_ne!(
        trust_key(&first, "app", "api"),
        trust_key(&third, "app", "api")
    );
}
