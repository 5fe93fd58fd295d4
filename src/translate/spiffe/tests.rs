//! The Workload API as pier's identity and bundle source: the SVID is the client certificate
//! (and the status names it), the `pier.dev/SPIFFEWorkloadAPI` trust bundle kind resolves per
//! trust domain, and every gap (no socket, nothing received yet, an unknown trust domain)
//! fails closed with a status that says why.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::*;
use crate::model::BackendTls;
use crate::translate::test_support::{
    TestCa, config_map, gateway, gateway_cond, resources, route_tls, tls_secret,
};
use crate::translate::{Settings, Translation, translate};

const BACKEND_TLS: &str = "pier.dev/BackendTLS";
const PIER_ID: &str = "spiffe://example.org/pier";
const ENDPOINT: &str = "unix:///run/spire/agent.sock";

fn der(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

/// An X.509 context as SPIRE sends it: an SVID from `ca` and `ca` as the bundle of
/// `example.org`.
fn context(ca: &TestCa) -> WorkloadApi {
    let (crt, key) = ca.leaf(&[], &[PIER_ID]);
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    ready(X509Context {
        spiffe_id: PIER_ID.into(),
        chain: der(&crt),
        key: key.secret_der().to_vec(),
        bundles: BTreeMap::from([("example.org".to_string(), der(&ca.pem))]),
    })
}

fn ready(ctx: X509Context) -> WorkloadApi {
    WorkloadApi {
        endpoint: ENDPOINT.into(),
        state: WorkloadApiState::Ready(Arc::new(ctx)),
    }
}

/// Gateway `default/gw` meshing every route, its trust bundle from the Workload API for
/// `trust_domain`, with `extra` spec lines; Service `default/web` and its route.
fn world(trust_domain: &str, extra: &str, more: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: pier}}\n\
         spec: {{controllerName: pier.dev/gateway-controller}}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata: {{name: gw, namespace: default, generation: 1}}\n\
         spec:\n  gatewayClassName: pier\n  listeners:\n  - name: http\n    protocol: HTTP\n\
         \x20   port: 80\n{extra}  mesh:\n    trustBundle:\n\
         \x20   - {{group: pier.dev, kind: SPIFFEWorkloadAPI, name: {trust_domain}}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\n\
         spec: {{ports: [{{name: http, port: 80}}]}}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: 8443}}]\nendpoints: [{{addresses: [10.0.0.1]}}]\n\
         ---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {{name: web, namespace: default}}\n\
         spec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - backendRefs: [{{name: web, port: 80}}]\n\
         {more}"
    )
}

fn run(trust_domain: &str, extra: &str, more: &str, api: Option<WorkloadApi>) -> Translation {
    let settings = Settings {
        workload_api: api,
        ..Settings::default()
    };
    translate(&resources(&world(trust_domain, extra, more)), &settings)
}

fn cond(t: &Translation, ty: &str) -> (bool, String, String) {
    gateway_cond(gateway(t, "default", "gw"), ty).unwrap_or_else(|| panic!("no {ty}"))
}

/// "mesh", or the reason the route's backend is unavailable.
fn backend(t: &Translation) -> String {
    match route_tls(t, "default", "web") {
        BackendTls::Tls(_) => "mesh".into(),
        BackendTls::Unavailable(why) => why.as_str().into(),
        BackendTls::Plain => "plain".into(),
        BackendTls::PerEndpoint(_) => "per-endpoint".into(),
    }
}

fn trust_key(t: &Translation) -> u64 {
    match route_tls(t, "default", "web") {
        BackendTls::Tls(u) => u.trust_key,
        other => panic!("not TLS: {other:?}"),
    }
}

#[test]
fn svid_is_the_client_certificate_and_the_status_names_its_spiffe_id() {
    let ca = TestCa::new("spire");
    let t = run("example.org", "", "", Some(context(&ca)));
    assert_eq!(backend(&t), "mesh");
    let (ok, _, msg) = cond(&t, BACKEND_TLS);
    assert!(ok, "{msg}");
    assert!(
        msg.contains(&format!(
            "client certificate is the X.509-SVID {PIER_ID} from the SPIFFE Workload API at \
             {ENDPOINT}"
        )),
        "{msg}"
    );
    assert!(msg.contains("bundle for trust domain example.org"), "{msg}");
    assert!(cond(&t, "ResolvedRefs").0);
}

#[test]
fn a_rotated_svid_is_a_new_upstream_config() {
    let ca = TestCa::new("spire");
    let a = run("example.org", "", "", Some(context(&ca)));
    let b = run("example.org", "", "", Some(context(&ca)));
    assert_ne!(trust_key(&a), trust_key(&b));
}

#[test]
fn nothing_received_yet_fails_closed_and_says_why() {
    let api = WorkloadApi {
        endpoint: ENDPOINT.into(),
        state: WorkloadApiState::Waiting("connection refused".into()),
    };
    let t = run("example.org", "", "", Some(api));
    assert_ne!(backend(&t), "mesh");
    assert_ne!(backend(&t), "plain");
    let (ok, _, msg) = cond(&t, BACKEND_TLS);
    assert!(!ok);
    assert!(
        msg.contains(&format!(
            "no X.509-SVID from the SPIFFE Workload API at {ENDPOINT} yet (connection refused)"
        )),
        "{msg}"
    );
    let (ok, reason, msg) = cond(&t, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidTrustBundleRef");
    assert!(
        msg.contains("no X.509 bundle from the SPIFFE Workload API"),
        "{msg}"
    );
}

#[test]
fn workload_api_bundle_without_a_socket_is_an_invalid_reference() {
    let ca = TestCa::new("pier");
    let (crt, key) = ca.leaf(&[], &[PIER_ID]);
    let t = run(
        "example.org",
        "  tls:\n    backend:\n      clientCertificateRef: {name: pier-client}\n",
        &format!("---\n{}", tls_secret("default", "pier-client", &crt, &key)),
        None,
    );
    assert_eq!(backend(&t), "NoTrustBundle");
    let (ok, reason, msg) = cond(&t, "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "InvalidTrustBundleRef");
    assert!(
        msg.contains(
            "pier.dev/SPIFFEWorkloadAPI example.org needs pier to be started with --spiffe-socket"
        ),
        "{msg}"
    );
}

#[test]
fn an_unknown_trust_domain_is_an_invalid_reference_listing_the_known_ones() {
    let ca = TestCa::new("spire");
    let t = run("other.org", "", "", Some(context(&ca)));
    assert_eq!(backend(&t), "NoTrustBundle");
    let (_, reason, msg) = cond(&t, "ResolvedRefs");
    assert_eq!(reason, "InvalidTrustBundleRef");
    assert!(
        msg.contains("has no X.509 bundle for trust domain \"other.org\" (it has: example.org)"),
        "{msg}"
    );
    // `spiffe://` and upper case name the same trust domain.
    let t = run("spiffe://Example.org", "", "", Some(context(&ca)));
    assert_eq!(backend(&t), "mesh");
}

#[test]
fn client_certificate_ref_wins_over_the_svid_and_the_status_says_so() {
    let spire = TestCa::new("spire");
    let other = TestCa::new("other");
    let (crt, key) = other.leaf(&[], &["spiffe://example.org/other"]);
    let secret = format!("---\n{}", tls_secret("default", "pier-client", &crt, &key));
    let by_ref = "  tls:\n    backend:\n      clientCertificateRef: {name: pier-client}\n";
    let t = run("example.org", by_ref, &secret, Some(context(&spire)));
    assert_eq!(backend(&t), "mesh");
    let (ok, _, msg) = cond(&t, BACKEND_TLS);
    assert!(ok);
    assert!(
        msg.contains(
            "client certificate from Secret default/pier-client \
             (tls.backend.clientCertificateRef; it takes precedence over the SPIFFE Workload \
             API's X.509-SVID)"
        ),
        "{msg}"
    );
    assert!(
        !msg.contains("client certificate is the X.509-SVID"),
        "{msg}"
    );
    // The Secret's certificate, not the SVID: another SVID changes nothing.
    let again = run("example.org", by_ref, &secret, Some(context(&spire)));
    assert_eq!(trust_key(&t), trust_key(&again));
}

#[test]
fn a_bundle_from_the_workload_api_unions_with_a_configmap() {
    let spire = TestCa::new("spire");
    let legacy = TestCa::new("legacy");
    let more = format!(
        "---\n{}",
        config_map("default", "legacy", "ca.crt", &legacy.pem)
    );
    let yaml = world("example.org", "", &more).replace(
        "    - {group: pier.dev, kind: SPIFFEWorkloadAPI, name: example.org}\n",
        "    - {group: pier.dev, kind: SPIFFEWorkloadAPI, name: example.org}\n    - {name: legacy}\n",
    );
    let settings = Settings {
        workload_api: Some(context(&spire)),
        ..Settings::default()
    };
    let t = translate(&resources(&yaml), &settings);
    let (ok, _, msg) = cond(&t, BACKEND_TLS);
    assert!(ok, "{msg}");
    assert!(msg.contains("trusting 2 CA certificate(s)"), "{msg}");
}

#[test]
fn debug_never_shows_the_key() {
    let ca = TestCa::new("spire");
    let api = context(&ca);
    let WorkloadApiState::Ready(ctx) = &api.state else {
        unreachable!()
    };
    let shown = format!("{api:?}");
    assert!(shown.contains("<redacted>"), "{shown}");
    // The key as `Debug` of its bytes would print it: `[48, 129, 135, ...`.
    let bytes = format!("{:?}", &ctx.key[..8]);
    assert!(!shown.contains(bytes.trim_end_matches(']')), "{shown}");
}
